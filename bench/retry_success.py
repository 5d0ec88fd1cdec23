"""Does quoting excerpts instead of the whole invalid reply cost retry successes? (issue 16, 3)

    .venv/bin/python bench/retry_success.py [--limit N]    # prints the figures
    (and row 11 of `make bench`)

With the bundled model (`EmbeddedProvider`, greedy, grammar-constrained by default, so what fails
is what a grammar cannot hold: the evidence quote, the line items' sum; `--unconstrained` for
the arm without a grammar, where a 135M model rarely writes valid JSON at all) over the eval
invoices (examples/data/eval/invoices.jsonl, `InvoiceExtraction`; `--decisions` adds the
decisions): each item's first reply is generated once; when it is invalid output
(the kind a retry with feedback is for), the retry engine (`sdk.engine`) prepares the retry
from that same reply twice, once sending the whole reply back (`Parsing.whole_reply` beyond any
reply) and once quoting excerpts (`whole_reply=0`, so even these short replies take the
excerpt path), and both retries are generated. The figures: how many of the invalid first replies
each kind of feedback turns into a valid result, and the retry requests' input tokens.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

from contracts import Decision  # noqa: E402
from contracts import InvoiceExtraction  # noqa: E402
from sdk import Contract  # noqa: E402
from sdk import InvalidOutput  # noqa: E402
from sdk.engine.attempts import Attempts  # noqa: E402
from sdk.engine.attempts import Done  # noqa: E402
from sdk.engine.attempts import Retry  # noqa: E402
from sdk.engine.attempts import Send  # noqa: E402
from sdk.engine.conversation import conversation  # noqa: E402
from sdk.engine.kinds import Document  # noqa: E402
from sdk.engine.options import CallSpec  # noqa: E402
from sdk.eval.dataset import EvalItem  # noqa: E402
from sdk.eval.dataset import load_dataset  # noqa: E402

DATA = ROOT / "examples" / "data" / "eval"
MODES = {"whole reply": 10**9, "excerpts": 0}


@dataclass
class RetrySuccess:
    """Invalid first replies, and the retries each feedback mode turned valid."""

    items: int = 0
    invalid: int = 0
    valid: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    input_tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))


def measure(
    limit: int | None = None,
    max_tokens: int = 300,
    *,
    constrained: bool = True,
    decisions: bool = False,
) -> RetrySuccess:
    from sdk.providers.embedded import EmbeddedProvider

    provider = EmbeddedProvider()
    outcome = RetrySuccess()
    datasets: list[tuple[type[Contract], str]] = [
        (InvoiceExtraction, "invoices.jsonl"),
        *([(Decision, "decisions.jsonl")] if decisions else []),
    ]
    for contract, name in datasets:
        items = load_dataset(DATA / name, contract)[:limit]
        for item in items:
            outcome.items += 1

            machines = {
                mode: _machine(provider, contract, item, whole, max_tokens, constrained)
                for mode, whole in MODES.items()
            }
            first = provider.complete(_send(next(iter(machines.values()))).request)
            # Valid at once, or a truncation or refusal (not what feedback is for): no retry.
            if not all(isinstance(m.on_reply(first), Retry) for m in machines.values()):
                continue
            error = machines["excerpts"].attempts[0].error
            assert isinstance(error, InvalidOutput)
            outcome.invalid += 1
            for mode, each in machines.items():
                reply = provider.complete(_send(each).request)
                outcome.input_tokens[mode] += reply.usage.input_tokens
                if isinstance(each.on_reply(reply), Done):
                    outcome.valid[mode] += 1
            print(
                f"{item.id}: {type(error).__name__}, valid after retry: "
                + ", ".join(f"{m} {outcome.valid[m]}" for m in MODES),
                file=sys.stderr,
            )
    return outcome


def _machine(
    provider: Any,
    contract: type[Contract],
    item: EvalItem,
    whole: int,
    max_tokens: int,
    constrained: bool,
) -> Attempts:
    """The attempts machine for one item, with one retry and the given longest reply sent back
    whole (`Parsing.whole_reply`)."""
    options = {"retries": 1, "max_tokens": max_tokens, "constrained": constrained,
               "source": item.document}  # fmt: skip
    spec = CallSpec.defaults().updated(options, "retry_success")
    spec = replace(spec, parsing=replace(spec.parsing, whole_reply=whole))
    return Attempts(
        Document(contract, None, spec.parsing),
        conversation(contract, item.prompt, None, item.document),
        spec,
        provider,
    )


def _send(machine: Attempts) -> Send:
    send = machine.send()
    assert isinstance(send, Send)
    return send


@row("retry-success", number="11", title="retry success: whole reply or excerpts",
     measures="how many invalid first replies one retry makes valid, on the bundled model over "
              "the eval invoices, when the feedback resends the whole reply and when it quotes "
              "excerpts",
     unit="counts of items (no ratio: too few events for one)", long=True)  # fmt: skip
def retry_success_row(settings: Settings) -> Measured:
    limit = 4 if settings.quick else None
    outcome = measure(limit)
    lines = [
        Line(f"invalid first replies made valid by one retry, {mode}",
             f"{outcome.valid[mode]} of {outcome.invalid}",
             f"{outcome.items} items; {outcome.input_tokens[mode]:,} retry input tokens",
             key=f"retry-success-{mode.replace(' ', '-')}")
        for mode in MODES
    ]  # fmt: skip
    whole, excerpts = (outcome.valid[mode] for mode in MODES)
    notes = f"""\
- Each item's first reply is generated once (greedy, constrained); when it is invalid output
  (the kind a retry with feedback is for) the retry is prepared from that same reply twice, once
  resending the whole reply and once quoting excerpts (forced on for these short replies), and
  both retries are generated. In this run {outcome.invalid} of {outcome.items} first replies
  were invalid; one retry made {whole} of them valid with the whole reply resent and
  {excerpts} with excerpts. With so few events the counts have little power either way.
"""
    return Measured(lines, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="items per dataset")
    parser.add_argument("--unconstrained", action="store_true", help="no grammar")
    parser.add_argument("--decisions", action="store_true", help="the decisions too")
    args = parser.parse_args()
    outcome = measure(args.limit, constrained=not args.unconstrained, decisions=args.decisions)
    print(f"{outcome.items} items, {outcome.invalid} invalid first replies")
    for mode in MODES:
        print(
            f"  {mode:12} {outcome.valid[mode]}/{outcome.invalid} valid after one retry, "
            f"{outcome.input_tokens[mode]:,} retry input tokens"
        )


if __name__ == "__main__":
    main()
