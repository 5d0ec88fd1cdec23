"""The paired eval on a scripted provider, where every number is known in advance.

`TestProvider` answers each (arm, item) from a script: the arm is read from the request (the
contract's name, and the `constrained=False` option of the unconstrained arm) and the item from
the document in the prompt. The expected metrics below are counted by hand from the table.

| item | labels (amount, colour) | constrained | unconstrained          | widened        |
| ---- | ----------------------- | ----------- | ---------------------- | -------------- |
| i1   | 10, red                 | 10 red  ok  | junk, then 10 red ok   | 10 red      ok |
| i2   | 20, blue                | 20 red      | 20 blue ok             | null blue      |
| i3   | null, red               | 0 red       | null red ok            | null red    ok |
| i4   | 5, null                 | 5 red       | junk twice (invalid)   | 5 unknown   ok |
| i5   | 7.5, null               | 7.5 blue    | 7.5 blue               | 7.5 null    ok |
| i6   | 3, blue                 | 3 blue  ok  | 3 blue ok              | 3 blue      ok |

answer_first is the constrained column with i2 right (20 blue).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sdk import Contract
from sdk import ProviderError
from sdk import StructuredClient
from sdk import Usage
from sdk import WireEnum
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import FieldDiagnostics
from sdk.eval import ArmUnavailable
from sdk.eval import EvalRun
from sdk.eval import ResultsBusy
from sdk.eval import ResumeMismatch
from sdk.eval import load_results
from sdk.eval import parse_dataset
from sdk.eval import prepare_arm
from sdk.eval import run_eval
from sdk.eval import score
from sdk.hooks import Hooks
from sdk.providers import Completion
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import TestProvider
from sdk.schema import escape_members
from sdk.schema import widen
from sdk.stop_reason import StopReason


class Colour(WireEnum):
    """A colour, with no escape member: the production contract cannot abstain on it."""

    RED = "red"
    BLUE = "blue"


class Ticket(Contract):
    """A small contract with a reasoning field, a nullable number and a closed enum."""

    reasoning: str
    amount: float | None
    colour: Colour


LABELS = {
    "i1": (10.0, "red"),
    "i2": (20.0, "blue"),
    "i3": (None, "red"),
    "i4": (5.0, None),
    "i5": (7.5, None),
    "i6": (3.0, "blue"),
}
DATASET = [
    json.dumps({"id": i, "document": f"ticket {i}", "expected": {"amount": a, "colour": c}})
    for i, (a, c) in LABELS.items()
]
JUNK = "Sure! Here is the ticket."

# (arm key, item) -> replies in order (amount, colour) or JUNK.
SCRIPT: dict[tuple[str, str], list[Any]] = {
    **{("Ticket", i): [v] for i, v in {
        "i1": (10, "red"), "i2": (20, "red"), "i3": (0, "red"),
        "i4": (5, "red"), "i5": (7.5, "blue"), "i6": (3, "blue"),
    }.items()},
    **{("Ticket-free", i): v for i, v in {
        "i1": [JUNK, (10, "red")], "i2": [(20, "blue")], "i3": [(None, "red")],
        "i4": [JUNK, JUNK], "i5": [(7.5, "blue")], "i6": [(3, "blue")],
    }.items()},
    **{("TicketWidened", i): [v] for i, v in {
        "i1": (10, "red"), "i2": (None, "blue"), "i3": (None, "red"),
        "i4": (5, "unknown"), "i5": (7.5, None), "i6": (3, "blue"),
    }.items()},
    **{("TicketAnswerFirst", i): [v] for i, v in {
        "i1": (10, "red"), "i2": (20, "blue"), "i3": (0, "red"),
        "i4": (5, "red"), "i5": (7.5, "blue"), "i6": (3, "blue"),
    }.items()},
}  # fmt: skip
# Surviving mass the constrained arm reports for /colour, per item.
COLOUR_MASS = {"i1": 0.9, "i2": 0.004, "i3": 0.5, "i4": 0.001, "i5": 0.002, "i6": 0.8}
USAGE = Usage(100, 10)


def scripted(fail_on_call: int | None = None) -> tuple[TestProvider, list[tuple[str, str]]]:
    """A provider answering from SCRIPT, and the log of (arm key, item) it was asked; with
    `fail_on_call`, that call fails as a provider failure would (connection reset)."""
    remaining = {key: list(replies) for key, replies in SCRIPT.items()}
    asked: list[tuple[str, str]] = []
    calls = 0

    def reply(request: CompletionRequest) -> Completion:
        nonlocal calls
        calls += 1
        if calls == fail_on_call:
            raise ProviderError("connection reset", status_code=400)
        match = re.search(r"ticket (i[0-9]+)", request.messages[0].content)
        assert match is not None
        item = match.group(1)
        assert isinstance(request.output, JsonDocument)
        key = request.output.contract.__name__
        if request.options.constrained is False:
            key += "-free"
        asked.append((key, item))
        answer = remaining[key, item].pop(0)
        if answer == JUNK:
            text = JUNK
        else:
            amount, colour = answer
            text = json.dumps({"reasoning": "checked", "amount": amount, "colour": colour})
        diagnostics = None
        if key == "Ticket":
            mass = COLOUR_MASS[item]
            diagnostics = ConstraintDiagnostics(
                fields=[
                    FieldDiagnostics("/colour", 3, mass, mass, 1, mass < 0.01),
                    FieldDiagnostics("/items/0/x", 1, 0.3, 0.3, 0, False),
                    FieldDiagnostics("/items/1/x", 1, 0.2, 0.2, 0, False),
                ],
                steps=[],
            )
        return Completion(
            text, StopReason.END_TURN, "end_turn", usage=USAGE, diagnostics=diagnostics
        )

    return TestProvider([reply], repeat=True), asked


ARMS4 = ("constrained", "unconstrained", "widened", "answer_first")
REPO = Path(__file__).resolve().parents[1]


def run(tmp_path: Path | None = None, **kwargs: Any) -> tuple[EvalRun, list[tuple[str, str]]]:
    provider, asked = scripted()
    items = parse_dataset(DATASET, Ticket)
    result = run_eval(
        items,
        Ticket,
        StructuredClient(provider, retries=1),
        arms=kwargs.pop("arms", ARMS4),
        out=tmp_path,
        resamples=2000,
        **kwargs,
    )
    return result, asked


def test_each_arm_gets_its_contract_and_options() -> None:
    client = StructuredClient(TestProvider())
    assert prepare_arm("constrained", Ticket, client).contract is Ticket
    assert prepare_arm("widened", Ticket, client).contract is widen(Ticket)
    assert list(prepare_arm("answer_first", Ticket, client).contract.model_fields) == [
        "amount",
        "colour",
        "reasoning",
    ]
    unconstrained = prepare_arm("unconstrained", Ticket, client).options
    assert unconstrained == {"constrained": False, "grounding": False}
    with pytest.raises(ValueError, match="unknown arm"):
        prepare_arm("sideways", Ticket, client)


def test_arms_that_cannot_run_say_why() -> None:
    class NoReasoning(Contract):
        amount: float | None

    client = StructuredClient(TestProvider())
    with pytest.raises(ArmUnavailable, match="no reasoning field"):
        prepare_arm("answer_first", NoReasoning, client)

    # A hosted API has no unconstrained mode (no `constrained` option on its wire); nothing is
    # sent: the arm is refused while it is prepared.
    from sdk.providers.anthropic import AnthropicProvider
    from tests.wire_support import Wire
    from tests.wire_support import anthropic_client

    wire = Wire()
    hosted = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    with pytest.raises(ArmUnavailable, match="no unconstrained mode"):
        prepare_arm("unconstrained", Ticket, StructuredClient(hosted))
    assert wire.requests == []


def test_metrics_per_arm_are_the_hand_counted_ones() -> None:
    result, _ = run()
    constrained = result.metrics["constrained"]
    assert constrained.items == 6
    assert constrained.validity.estimate == 1.0
    assert constrained.accuracy.estimate == 2 / 6
    assert constrained.field_accuracy["amount"].estimate == 5 / 6
    assert constrained.field_accuracy["colour"].estimate == 3 / 6
    assert constrained.abstention_recall is not None
    assert constrained.abstention_recall.estimate == 0 / 3  # the grammar left no way to abstain
    assert constrained.false_abstention is not None
    assert constrained.false_abstention.estimate == 0 / 9
    assert (constrained.retries, constrained.input_tokens, constrained.output_tokens) == (
        0,
        600,
        60,
    )

    unconstrained = result.metrics["unconstrained"]
    assert unconstrained.validity.estimate == 5 / 6  # i4 failed twice
    assert unconstrained.accuracy.estimate == 4 / 6
    assert unconstrained.retries == 2  # i1 and i4 each retried once
    assert (unconstrained.input_tokens, unconstrained.output_tokens) == (800, 80)  # 8 attempts
    assert unconstrained.abstention_recall is not None
    assert unconstrained.abstention_recall.estimate == 1 / 3  # i3's amount only

    widened = result.metrics["widened"]
    assert widened.accuracy.estimate == 5 / 6
    assert widened.abstention_recall is not None and widened.false_abstention is not None
    assert widened.abstention_recall.estimate == 3 / 3  # "unknown" and null both abstain
    assert widened.false_abstention.estimate == 1 / 9  # i2's amount

    assert result.metrics["answer_first"].accuracy.estimate == 3 / 6
    for metrics in result.metrics.values():
        assert 0 <= metrics.latency_p50 <= metrics.latency_p95


def test_the_invalid_outcome_keeps_its_error_and_text() -> None:
    result, _ = run()
    failed = result.outcomes["unconstrained", "i4"]
    assert not failed.valid and not failed.correct
    assert failed.error == "RetriesExhausted"
    assert failed.error_message is not None
    assert "last attempt: InvalidJSON: output is not JSON" in failed.error_message
    assert failed.text == JUNK
    assert failed.attempts == 2
    assert failed.schema["name"] == "Ticket"
    assert result.outcomes["widened", "i1"].schema["fingerprint"] == widen(Ticket).fingerprint()


def test_pairs_carry_the_hand_computed_differences_and_exact_p_values() -> None:
    result, _ = run()
    pairs = {(p.a, p.b): p.result for p in result.pairs}
    assert len(pairs) == 6  # every pair of four arms
    widened = pairs["constrained", "widened"]
    assert widened.difference.estimate == pytest.approx(3 / 6)
    assert (widened.mcnemar.only_a, widened.mcnemar.only_b) == (0, 3)
    assert widened.mcnemar.p_value == 2 / 8
    unconstrained = pairs["constrained", "unconstrained"]
    assert unconstrained.difference.estimate == pytest.approx(2 / 6)
    assert unconstrained.mcnemar.p_value == 2 / 4
    between = pairs["unconstrained", "widened"]
    assert (between.mcnemar.only_a, between.mcnemar.only_b) == (1, 2)
    assert between.mcnemar.p_value == 1.0
    for pair in pairs.values():  # six items: nothing here is significant
        assert not pair.significant
        assert pair.difference.low <= pair.difference.estimate <= pair.difference.high


def test_surviving_mass_is_summarized_per_field() -> None:
    result, _ = run()
    mass = result.metrics["constrained"].mass
    colour = mass["/colour"]
    assert colour.items == 6
    assert colour.median == pytest.approx((0.004 + 0.5) / 2)
    assert colour.lowest == 0.001
    assert colour.flagged == 3  # under 0.01: i2, i4, i5
    assert mass["/items/*/x"].lowest == 0.2  # array indices folded together
    assert result.metrics["unconstrained"].mass == {}


def test_results_are_saved_and_read_back(tmp_path: Path) -> None:
    result, _ = run(tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert saved["complete"] is True
    assert len(saved["outcomes"]) == 4 * 6
    first = saved["outcomes"][0]
    assert {"item", "arm", "text", "error", "schema", "fields", "value"} <= set(first)
    assert saved["metrics"]["widened"]["accuracy"]["estimate"] == 5 / 6
    again = load_results(tmp_path, resamples=2000)
    assert again.metrics["constrained"].accuracy == result.metrics["constrained"].accuracy
    assert [p.result for p in again.pairs] == [p.result for p in result.pairs]
    assert not list(tmp_path.glob(".results.json.*"))  # no temporary file left behind


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_results_report_and_plot_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    """`results.json` holds the dataset's documents and the raw outputs, and the report shows
    them: under umask 022 they were 0644 in a 0755 folder (probe12c D9). Now the folders the
    run makes are 0700 and every file it writes 0600, also one that was 0644 before."""
    from sdk.cli.eval import _Fits
    from sdk.eval.report import ACCURACY_FILE
    from sdk.eval.report import REPORT_FILE
    from sdk.eval.report import write_html

    folder = tmp_path / "eval-results" / "tickets"
    old = os.umask(0o022)
    try:
        result, _ = run(folder)
        _Fits(thresholds=None, confidence=None, method="platt", by="type").save(result, folder)
        (tmp_path / "loose.html").write_text("")
        os.chmod(tmp_path / "loose.html", 0o644)
        write_html(result, str(tmp_path / "loose.html"))
    finally:
        os.umask(old)
    for each in (folder, folder.parent):
        assert each.stat().st_mode & 0o777 == 0o700, each
    for name in ("results.json", REPORT_FILE, ACCURACY_FILE):
        assert (folder / name).stat().st_mode & 0o777 == 0o600, name
    assert (tmp_path / "loose.html").stat().st_mode & 0o777 == 0o600


def test_a_rerun_skips_what_is_done(tmp_path: Path) -> None:
    run(tmp_path)
    _, asked = run(tmp_path)
    assert asked == []


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    provider, _ = scripted(fail_on_call=6)
    items = parse_dataset(DATASET, Ticket)
    with pytest.raises(ProviderError):
        run_eval(items, Ticket, StructuredClient(provider, retries=1), arms=ARMS4, out=tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert saved["complete"] is False
    done = {(o["arm"], o["item"]) for o in saved["outcomes"]}
    assert len(done) == 4  # i1 took 5 calls (one retry); the 6th failed
    result, asked_again = run(tmp_path)
    assert result.complete
    assert not done & set(asked_again_items(asked_again))
    assert result.metrics["widened"].accuracy.estimate == 5 / 6


def asked_again_items(asked: list[tuple[str, str]]) -> list[tuple[str, str]]:
    arm_of = {"Ticket": "constrained", "Ticket-free": "unconstrained",
              "TicketWidened": "widened", "TicketAnswerFirst": "answer_first"}  # fmt: skip
    return [(arm_of[key], item) for key, item in asked]


def test_run_eval_rejects_what_it_cannot_key() -> None:
    items = parse_dataset(DATASET[:1], Ticket)
    provider = TestProvider()
    client = StructuredClient(provider)
    with pytest.raises(ValueError, match="unique"):
        run_eval(items * 2, Ticket, client)
    with pytest.raises(ValueError, match="unknown arm"):
        run_eval(items, Ticket, client, arms=["constrained", "sideways"])
    with pytest.raises(ValueError, match="none given"):
        run_eval(items, Ticket, client, arms=[])
    assert provider.requests == []


def test_a_narrower_rerun_loses_nothing(tmp_path: Path) -> None:
    run(tmp_path)
    provider, asked = scripted()
    items = parse_dataset(DATASET[:2], Ticket)
    narrow = run_eval(
        items, Ticket, StructuredClient(provider, retries=1), arms=["widened"], out=tmp_path
    )
    assert asked == []  # all done before
    assert narrow.arms == ["widened"] and len(narrow.outcomes) == 2
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert len(saved["outcomes"]) == 4 * 6 and len(saved["items"]) == 6
    again = load_results(tmp_path, resamples=200)
    assert again.metrics["constrained"].accuracy.estimate == 2 / 6
    assert again.metrics["widened"].accuracy.estimate == 5 / 6


def test_a_changed_item_is_run_again(tmp_path: Path) -> None:
    run(tmp_path)
    provider, asked = scripted()
    edited = [line.replace("ticket i3", "ticket i3 (revised)") for line in DATASET]
    items = parse_dataset(edited, Ticket)
    run_eval(items, Ticket, StructuredClient(provider, retries=1), arms=ARMS4, out=tmp_path)
    assert {item for _, item in asked} == {"i3"}


def test_other_settings_are_not_resumed(tmp_path: Path) -> None:
    run(tmp_path, max_tokens=300)
    with pytest.raises(ResumeMismatch, match="max_tokens"):
        run(tmp_path, max_tokens=200)
    result, asked = run(tmp_path, max_tokens=200, fresh=True)
    assert result.complete and len(asked) == 26


def test_score_compares_json_forms_and_abstentions() -> None:
    escapes = escape_members(widen(Ticket))
    assert escapes["colour"] == frozenset({"unknown"})
    scores = score(
        {"amount": 315.0, "colour": None},
        {"reasoning": "x", "amount": 315, "colour": "unknown"},
        escapes,
    )
    assert scores["amount"].correct and not scores["amount"].abstained
    assert scores["colour"].correct and scores["colour"].abstained
    wrong = score({"amount": None, "colour": "red"}, {"amount": 0, "colour": "unknown"}, escapes)
    assert not wrong["amount"].correct  # invented where the document says nothing
    assert not wrong["colour"].correct and wrong["colour"].abstained  # a false abstention
    invalid = score({"amount": 1.0}, None, escapes)
    assert not invalid["amount"].correct and not invalid["amount"].abstained


def test_bad_datasets_fail_on_their_line() -> None:
    from sdk.eval import DatasetError

    good = DATASET[0]
    cases: dict[str, list[str]] = {
        "not JSON": [good, "{oops"],
        "used twice": [good, good],
        "not a field": [json.dumps({"id": "x", "document": "d", "expected": {"price": 1}})],
        "not valid": [json.dumps({"id": "x", "document": "d", "expected": {"colour": "green"}})],
        "non-empty string": [json.dumps({"id": "", "document": "d", "expected": {"amount": 1}})],
        "at least one field": [json.dumps({"id": "x", "document": "d", "expected": {}})],
        "unknown key": [
            json.dumps({"id": "x", "document": "d", "expected": {"amount": 1}, "answer": 2})
        ],
        "no items": ["", "  "],
        "nested too deeply": ["[" * 100_000 + "]" * 100_000],
        "too long": ['{"id": "' + "x" * 1_000_001 + '"}'],
    }
    for message, lines in cases.items():
        with pytest.raises(DatasetError, match=message):
            parse_dataset(lines, Ticket, name="t.jsonl")


def test_two_phase_arm_keeps_the_working_and_sums_both_calls() -> None:
    working = "Amount 10 on the ticket; the colour is red."
    replies: list[Callable[[CompletionRequest], Completion] | str] = [
        lambda request: Completion(working, StopReason.END_TURN, "end_turn", usage=USAGE),
        lambda request: Completion(
            json.dumps({"reasoning": "from the working", "amount": 10, "colour": "red"}),
            StopReason.END_TURN,
            "end_turn",
            usage=USAGE,
        ),
    ]
    provider = TestProvider(replies)
    items = parse_dataset(DATASET[:1], Ticket)
    result = run_eval(items, Ticket, StructuredClient(provider, retries=1), arms=["two_phase"])
    outcome = result.outcomes["two_phase", "i1"]
    assert outcome.valid and outcome.correct
    assert outcome.reasoning is not None and "colour is red" in outcome.reasoning
    assert (outcome.input_tokens, outcome.output_tokens) == (200, 20)
    assert len(provider.requests) == 2


# --- resuming (issue 21) ---


def test_an_item_built_by_hand_has_its_digest_and_a_changed_one_is_rerun(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from sdk.eval import EvalItem

    loaded = parse_dataset(DATASET, Ticket)
    by_hand = [EvalItem(item.id, item.document, dict(item.expected)) for item in loaded]
    assert [item.digest for item in by_hand] == [item.digest for item in loaded]
    assert all(len(item.digest) == 64 for item in by_hand)
    provider, _ = scripted()
    client = StructuredClient(provider, retries=1)
    run_eval(by_hand, Ticket, client, arms=ARMS4, out=tmp_path, resamples=200)

    changed = [
        replace(item, document="ticket i3 (revised)") if item.id == "i3" else item
        for item in by_hand
    ]
    assert changed[2].digest != by_hand[2].digest
    provider, asked = scripted()
    run_eval(changed, Ticket, StructuredClient(provider, retries=1), arms=ARMS4, out=tmp_path)
    assert {item for _, item in asked} == {"i3"}


def test_options_compare_by_value_so_an_identical_rerun_resumes(tmp_path: Path) -> None:
    options = {"stop": ("END",), "seed": 7}
    run(tmp_path, options=options)
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert saved["config"]["options"] == {"stop": ["END"], "seed": 7}
    result, asked = run(tmp_path, options={"stop": ("END",), "seed": 7})
    assert asked == [] and result.complete
    with pytest.raises(ResumeMismatch, match="options"):
        run(tmp_path, options={"stop": ("FIN",), "seed": 7})


# --- one run per output folder ---


class _Held(Hooks):
    """Holds its run at its first call until told to go on."""

    def __init__(self) -> None:
        self.started, self.go_on = threading.Event(), threading.Event()

    def on_call(self, call: Any) -> None:
        self.started.set()
        assert self.go_on.wait(60)


_CONTENDER = """
import sys
from sdk import StructuredClient
from sdk.eval import ResultsBusy, parse_dataset, run_eval
from tests.test_eval import DATASET, Ticket, scripted

provider, asked = scripted()
sys.stdin.readline()  # (the barrier: told when to start)
try:
    run_eval(parse_dataset(DATASET, Ticket), Ticket, StructuredClient(provider, retries=1),
             arms=("constrained",), out=sys.argv[1], resamples=200)
except ResultsBusy as error:
    print("busy", len(asked), error)
else:
    print("ran", len(asked))
"""


def test_a_second_run_on_an_output_folder_in_use_is_refused_at_once(tmp_path: Path) -> None:
    # On main both ran: each wrote `results.json` whole from what it held at every outcome, so
    # one run's outcomes were lost from the file, both exiting 0. Now the folder is held for a
    # run (its lock, which the kernel drops when the holder dies): a thread of this process and
    # another process, started at the same moment while a run holds it, are each refused
    # before any call; once the run is over the folder is free again.
    provider, _ = scripted()
    items = parse_dataset(DATASET, Ticket)
    held = _Held()
    client = StructuredClient(provider, retries=1, hooks=[held])
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(run_eval, items, Ticket, client, arms=ARMS4, out=tmp_path,
                            resamples=200)  # fmt: skip
        try:
            assert held.started.wait(60)
            other = subprocess.Popen(
                [sys.executable, "-c", _CONTENDER, str(tmp_path)], cwd=REPO, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            barrier = threading.Barrier(2, timeout=60)
            contender_provider, contender_asked = scripted()

            def contend() -> EvalRun:
                barrier.wait()
                return run_eval(items, Ticket, StructuredClient(contender_provider, retries=1),
                                arms=("constrained",), out=tmp_path, resamples=200)  # fmt: skip

            thread = pool.submit(contend)
            assert other.stdin is not None
            barrier.wait()
            other.stdin.write("go\n")
            other.stdin.flush()
            said, errors = other.communicate(timeout=120)
            with pytest.raises(ResultsBusy, match="is in use by another sdk eval run"):
                thread.result(timeout=60)
        finally:
            held.go_on.set()  # (the held run goes on, whatever the contenders did)
        result = first.result(timeout=120)
    assert said.startswith("busy 0 "), errors  # refused before any call
    assert contender_asked == []
    assert result.complete and len(result.outcomes) == 4 * 6
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert len(saved["outcomes"]) == 4 * 6
    _, again = run(tmp_path)  # the folder is free: resumed, nothing asked again
    assert again == []


def test_copies_a_killed_run_left_half_written_are_removed_by_the_next(tmp_path: Path) -> None:
    # On main a run killed while writing `results.json` left its temporary copy (documents and
    # outputs) behind for good; the next run in the folder, which holds it, removes such copies.
    run(tmp_path)
    left = tmp_path / ".results.json.a1b2c3.tmp"
    left.write_text('{"format": "half')
    other = tmp_path / ".report.html.a1b2c3.tmp"  # (not the run's: left alone)
    other.write_text("<html")
    run(tmp_path)
    assert not left.exists() and other.exists()


# Results files edited by hand (or by another tool): on main each was a traceback from the
# resume or the report (`KeyError`, `AttributeError`), and `"valid": "false"` was read as valid.
_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "outcome-without-fields": lambda data: data["outcomes"][0].pop("fields"),
    "outcomes-an-object": lambda data: data.update(outcomes={"a": 1}),
    "outcome-null": lambda data: data["outcomes"].__setitem__(0, None),
    "config-a-list": lambda data: data.update(config=[1, 2]),
    "valid-as-text": lambda data: data["outcomes"][0].update(valid="false"),
    "correct-as-number": lambda data: next(iter(data["outcomes"][0]["fields"].values())).update(
        correct=1
    ),
}


@pytest.mark.parametrize("edit", list(_EDITS))
def test_a_results_file_edited_out_of_shape_is_one_typed_error_naming_it(
    tmp_path: Path, edit: str
) -> None:
    run(tmp_path)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    _EDITS[edit](data)
    path.write_text(json.dumps(data), encoding="utf-8")
    said = re.escape(f"{path} is not an sdk eval results file (")
    with pytest.raises(ResumeMismatch, match=said):
        run(tmp_path)
    with pytest.raises(ValueError, match=said):
        load_results(tmp_path)


def test_an_output_that_cannot_hold_the_results_is_refused_before_any_call(
    tmp_path: Path,
) -> None:
    # On main the first call was paid for, then the first save failed ("File exists", naming
    # nothing it asked for).
    (tmp_path / "a-file").write_text("")
    provider, asked = scripted()
    items = parse_dataset(DATASET, Ticket)
    with pytest.raises(NotADirectoryError, match="a-file is not a folder"):
        run_eval(items, Ticket, StructuredClient(provider), arms=ARMS4, out=tmp_path / "a-file")
    if os.geteuid() != 0:  # (root writes anywhere)
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(PermissionError, match="the results cannot be written there"):
            run_eval(items, Ticket, StructuredClient(provider), arms=ARMS4, out=locked)
    assert asked == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_results_file_that_is_a_named_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    # On main `load_results` opened it with `read_text` and waited for a writer, forever.
    pipe = tmp_path / "results.json"
    os.mkfifo(pipe)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(load_results, pipe)
        try:
            with pytest.raises(OSError, match="is not a regular file"):
                reading.result(timeout=30)
        finally:  # (a reader still waiting is let go: a writer comes and goes)
            with contextlib.suppress(OSError):
                os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
