"""The committed eval datasets: what the issue asks of them, and that the generator makes them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contracts import Decision, InvoiceExtraction
from sdk.eval import load_dataset

DATA = Path(__file__).resolve().parent.parent / "examples" / "data" / "eval"


def test_the_generator_reproduces_the_committed_files(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DATA / "make_datasets.py"), str(tmp_path)], check=True, timeout=60
    )
    for name in ("invoices.jsonl", "decisions.jsonl"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_invoices_about_a_third_leave_fields_out() -> None:
    items = load_dataset(DATA / "invoices.jsonl", InvoiceExtraction)  # every label checked
    assert len(items) >= 60
    sparse = [item for item in items if any(v is None for v in item.expected.values())]
    assert 0.25 <= len(sparse) / len(items) <= 0.45
    assert len({item.document for item in items}) == len(items)  # no two alike
    for item in items:
        total = item.expected["total"]
        if total is not None:  # a stated total is printed in the document
            assert (
                f"{total:,.2f}" in item.document
                or f"{total:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")
                in item.document
            ), item.id
        if item.expected["invoice_number"] is None:
            assert "Invoice number" not in item.document, item.id


def test_decisions_need_arithmetic_and_are_balanced() -> None:
    items = load_dataset(DATA / "decisions.jsonl", Decision)
    assert len(items) >= 40
    answers = [item.expected["answer"] for item in items]
    for answer in ("approve", "reject", "escalate"):
        assert answer in answers
    # Always answering the most common label must not score well.
    assert max(answers.count(a) for a in set(answers)) / len(answers) < 0.55
    assert all("Policy:" in item.document and any(c.isdigit() for c in item.document)
               for item in items)  # fmt: skip
