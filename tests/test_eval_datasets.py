"""The committed eval datasets: what the issue asks of them, and that the generator makes them."""

from __future__ import annotations

import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from contracts import Decision
from contracts import InvoiceExtraction
from contracts import ShipmentNotice
from contracts.notice import ORDER_NUMBER
from contracts.notice import TRACKING_NUMBER
from sdk.eval import DatasetError
from sdk.eval import load_dataset
from sdk.schema.grounding import source_chunks

DATA = Path(__file__).resolve().parent.parent / "examples" / "data" / "eval"


def test_the_generator_reproduces_the_committed_files(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DATA / "make_datasets.py"), str(tmp_path)], check=True, timeout=60
    )
    for name in ("invoices.jsonl", "decisions.jsonl", "notices.jsonl", "notices-calibration.jsonl"):
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


def test_notices_copy_values_exactly_and_leave_about_a_third_out() -> None:
    items = load_dataset(DATA / "notices.jsonl", ShipmentNotice)
    calibration = load_dataset(DATA / "notices-calibration.jsonl", ShipmentNotice)
    assert len(items) >= 60 and len(calibration) >= 30
    assert not {i.id for i in items} & {i.id for i in calibration}
    assert len({item.document for item in items + calibration}) == len(items) + len(calibration)
    for name in ShipmentNotice.model_fields:
        absent = sum(item.expected[name] is None for item in items)
        assert 0.2 <= absent / len(items) <= 0.45, name
    for item in items + calibration:
        for name, label in item.expected.items():
            # A stated value is printed exactly, so copying it is possible and enough.
            assert label is None or label in item.document, (item.id, name)


def test_notice_ids_are_the_only_spans_of_their_format() -> None:
    """Other numbers in a notice (dates, weights, a customer number, a phone number) never
    match the id patterns: where an id is absent, no span of the notice looks like one."""
    patterns = {"tracking_number": TRACKING_NUMBER, "order_number": ORDER_NUMBER}
    for item in load_dataset(DATA / "notices.jsonl", ShipmentNotice):
        chunks = source_chunks(item.document)
        for name, pattern in patterns.items():
            found = {
                "".join(chunks[i:j])
                for i in range(len(chunks))
                for j in range(i + 1, min(len(chunks), i + 6) + 1)
                if re.fullmatch(pattern.strip("^$"), "".join(chunks[i:j]))
            }
            label = item.expected[name]
            assert found == ({label} if label is not None else set()), (item.id, name)


def test_a_dataset_line_past_the_limit_is_refused_before_the_rest_of_it_is_read(
    tmp_path: Path,
) -> None:
    # On main the whole line was read first: a dataset of one 200 MB line took 434 MB to be
    # refused. Now at most one character past the limit is read of it.
    path = tmp_path / "huge.jsonl"
    with path.open("w", encoding="utf-8") as file:
        file.write('{"id": "a", "document": "' + "x" * 32_000_000 + '"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(DatasetError, match=r"huge\.jsonl:1: a line longer than 1,000,000"):
            load_dataset(path, Decision)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, peak  # (the line is 32 MB)
