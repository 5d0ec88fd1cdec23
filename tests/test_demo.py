"""`make demo` runs `python -m sdk.cli demo`: run it as a user would, and read what it prints.

The demo generates with the bundled model for real, so this is a `local` test; how long it takes
is measured in the bench (row 10), never asserted here. What the model writes may differ between
builds; the lines checked here are the ones the demo prints whatever it writes: every section, a
typed verdict for every run, the constraint diagnostics, and the retry feedback whenever there
was a retry.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sdk.errors
from sdk.cli._demo import SECOND_MODEL
from sdk.cli._demo import SQL_QUESTIONS
from tests.local_deps import import_local

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parent.parent
ERRORS = {
    name
    for name in dir(sdk.errors)
    if isinstance(getattr(sdk.errors, name), type)
    and issubclass(getattr(sdk.errors, name), sdk.errors.StructuredOutputError)
}


def test_demo_runs_and_shows_every_layer() -> None:
    import_local("llama_cpp")  # the demo needs the local extra
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,  # a guard against a hang, not a bound on the duration (bench row 10)
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, done.stderr[-2000:] + output[-2000:]
    assert "model SmolLM2-135M-Instruct.Q4_1" in output
    for section in (
        "1. InvoiceExtraction from examples/data/invoice.txt",
        "2. Decision on examples/data/expense_request.txt",
        "3. The same prompts unconstrained",
        "4. Questions about a SQLite database",
        "5. ShipmentNotice from notice ntc-001 of examples/data/eval/notices.jsonl",
        "Summary",
    ):
        assert section in output

    invoice, decision = _section(output, "1. "), _section(output, "2. ")
    for part in (invoice, decision):
        assert re.search(r"^attempt 1: \w+ \(stop eos, \d+ in / \d+ out tokens\)$", part, re.M)
        assert re.search(r"^result: (a valid \w+ after \d attempt|\w+$)", part, re.M)
        assert "constraint diagnostics:" in part and "min mass" in part
    # Every failed attempt was named by its typed error; each retry shows the feedback it sent.
    verdicts = re.findall(r"^attempt (\d): (\w+)", invoice, re.M)
    for number, verdict in verdicts:
        assert verdict == "valid" or verdict in ERRORS, verdict
        if int(number) > 1:
            assert "retry feedback sent with the next attempt:" in invoice
    if "CheckFailed" in invoice:
        assert "    FAILED /" in invoice  # the check results, each with its JSON pointer
    if "result: a valid" in decision:
        assert "notes:" in decision and "reasoning = " in decision
    # A failed invoice (the usual end on this model) says why, and what would change it; it
    # ends in one of the errors Getting started names for it.
    if "result: a valid" not in invoice:
        ended = re.findall(r"^result: (\w+)$", invoice, re.M)
        assert ended and ended[-1] in _getting_started_invoice_ends(), ended
        why = invoice.split("why it fails on this model (over ", 1)[1]
        assert re.match(r"\d attempt\(s\)\):\n  - \S", why), why[:300]
        assert "a wrong invoice is never returned as a valid one" in why
        assert "what would change it:\n  - a bigger model" in why
        assert "  - another arm, measured before it is trusted: `sdk eval" in why

    # The second embedded model's invoice beside it, or one line saying why it is not shown.
    if "\n1b. The same invoice on the second embedded model" in output:
        second = _section(output, "1b. ")
        assert re.search(r"^attempt 1: \w+ \(stop \w+, \d+ in / \d+ out tokens\)$", second, re.M)
        assert re.search(r"^result: (a valid \w+ after \d attempt|\w+$)", second, re.M)
        assert re.search(rf"^InvoiceExtraction on {SECOND_MODEL}: \w+", output, re.M)
    else:
        assert f"the second embedded model, {SECOND_MODEL}, is not shown beside this one: " in (
            invoice
        )
        assert f"InvoiceExtraction on {SECOND_MODEL}" not in output

    unconstrained = _section(output, "3. ")
    said = re.findall(r"the parser says: (\w+): .+", unconstrained)
    accepted = unconstrained.count("the parser accepted it this time")
    assert len(said) + accepted == 2
    assert all(name in ERRORS for name in said)
    assert re.search(r"^unconstrained: Decision \w+, InvoiceExtraction \w+$", output, re.M)

    sql = _section(output, "4. ")
    queries = re.findall(r"^  query: (.+)$", sql, re.M)
    assert all(q.startswith("SELECT ") for q in queries)  # whatever was asked, DROP included
    assert len(queries) + len(re.findall(r"^  (\w+): ", sql, re.M)) >= 2
    assert "'DROP TABLE \"orders\";' leaves the grammar's language at character 0" in sql
    assert "not an authorization layer" in sql
    for question in SQL_QUESTIONS:  # two need a join and an aggregate, one asks for a DROP
        assert f"question: {question}" in sql
    assert re.search(r"^sql: \w+(, \w+){2}$", output, re.M)

    # Grounded while decoding, a value can only be a span of the notice, whatever the model
    # meant: every value shown is null or copied. The plain grammar promises no such thing.
    grounded = _section(output, "5. ").split("grounded (grounding=True):")[1]
    values = re.findall(r"^  (\w+) = (.+?)(  \(.*\))?; the notice says", grounded, re.M)
    if values:
        assert {name for name, _, _ in values} == {
            "carrier", "tracking_number", "order_number", "recipient"
        }  # fmt: skip
        assert all(value == "None" or "copied" in where for _, value, where in values)
    else:  # it may end otherwise (cut off, say), never with a value that is not in the notice
        assert "not in the source" not in grounded
    assert re.search(
        r"^grounded values: plain [\w ,]+; grounded (valid, \d values copied|\w+)$", output, re.M
    )


def _section(output: str, start: str) -> str:
    """The text of the numbered section beginning with `start`, up to the next heading."""
    begin = output.index(f"\n{start}")
    ends = [output.find(f"\n{n}. ", begin + 1) for n in ("1", "1b", "2", "3", "4", "5")]
    ends.append(output.find("\nSummary"))
    end = min(e for e in ends if e > begin)
    return output[begin:end]


def _getting_started_invoice_ends() -> set[str]:
    """The errors Getting started says the demo's invoice ends in (its paragraph on the demo)."""
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    paragraph = page.split("Its invoice", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", paragraph)) & ERRORS
    assert named, paragraph
    return named
