"""`Result.cost`: priced from the `genai-prices` table at the model that answered each attempt,
summed; `None` for a model the table does not know, a local provider, or without the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import genai_prices
import pytest

from contracts import Decision
from sdk import StructuredClient
from sdk._cost import _prices
from sdk.providers import AnthropicProvider
from sdk.providers import TestProvider
from tests.wire_support import DECISION
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import fixture_json


def _price(model: str, provider: str, **tokens: int) -> Decimal:
    usage = genai_prices.Usage(**tokens)
    return Decimal(genai_prices.calc_price(usage, model, provider_id=provider).total_price)


def _cached_reply(**changes: object) -> object:
    body = fixture_json("anthropic_success.json")
    usage = {**body["usage"], "cache_read_input_tokens": 900, "cache_creation_input_tokens": 40}
    return anthropic_reply(usage=usage, **changes)


def test_the_cost_prices_cache_tokens_at_their_own_rates() -> None:
    body = fixture_json("anthropic_success.json")
    wire = Wire(_cached_reply())
    result = StructuredClient(AnthropicProvider(anthropic_client(wire), model="m")).generate(
        Decision, prompt="x"
    )
    # genai-prices counts cached tokens inside the input; Anthropic reports them apart.
    expected = _price(
        body["model"],
        "anthropic",
        input_tokens=body["usage"]["input_tokens"] + 940,
        output_tokens=body["usage"]["output_tokens"],
        cache_read_tokens=900,
        cache_write_tokens=40,
    )
    assert result.cost == expected
    uncached = _price(
        body["model"],
        "anthropic",
        input_tokens=body["usage"]["input_tokens"] + 940,
        output_tokens=body["usage"]["output_tokens"],
    )
    assert result.cost is not None and result.cost < uncached  # cache reads are cheaper


def test_the_cost_is_summed_over_attempts() -> None:
    invalid = json.dumps({**DECISION, "confidence": "certain"})
    wire = Wire(_cached_reply(text=invalid), _cached_reply())
    provider = AnthropicProvider(anthropic_client(wire), model="m")
    result = StructuredClient(provider, retries=1).generate(Decision, prompt="x")
    single = StructuredClient(AnthropicProvider(anthropic_client(Wire(_cached_reply())), model="m"))
    one = single.generate(Decision, prompt="x").cost
    assert one is not None and result.cost == 2 * one


def test_an_unknown_model_or_a_local_provider_has_no_cost() -> None:
    wire = Wire(anthropic_reply(model="claude-from-the-future-9"))
    result = StructuredClient(AnthropicProvider(anthropic_client(wire), model="m")).generate(
        Decision, prompt="x"
    )
    assert result.cost is None
    assert StructuredClient(TestProvider([DECISION])).generate(Decision, prompt="x").cost is None


def test_without_the_package_the_cost_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # what an absent package looks like
    _prices.cache_clear()
    try:
        wire = Wire(_cached_reply())
        result = StructuredClient(AnthropicProvider(anthropic_client(wire), model="m")).generate(
            Decision, prompt="x"
        )
        assert result.cost is None and result.value.answer == "approve"
    finally:
        _prices.cache_clear()


def test_a_broken_provider_package_leaves_the_cost_unknown_not_the_answer_lost(
    tmp_path: Path,
) -> None:
    # An installed package declares a provider module that raises on import. A call through a
    # provider no built-in profile names looks its pricing up, which loads the declared
    # modules: the answer, already made, is returned (cost unknown) and the failure logged once.
    (tmp_path / "broken_provider.py").write_text("raise RuntimeError('no config file')\n")
    info = tmp_path / "broken_provider-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-provider\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[structured_sdk.providers]\nbroken = broken_provider\n")
    code = f"""
import logging
from sdk import StructuredClient
from sdk.providers import TestProvider
from contracts import Decision

class Gateway(TestProvider):
    name = "my-gateway"  # no profile of that name: pricing it loads the declared modules

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
client = StructuredClient(Gateway([{json.dumps(DECISION)!r}], repeat=True))
for _ in range(2):
    result = client.generate(Decision, prompt="x")
    print(result.value.answer.value, result.cost, result.usage.total_tokens > 0)
from sdk.telemetry import genai_provider_name
print(genai_provider_name("my-gateway"))  # a span names it as it is
"""
    root = Path(__file__).resolve().parent.parent
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(tmp_path)])},
        check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["approve None True"] * 2 + ["my-gateway"]
    warned = [line for line in completed.stderr.splitlines() if "cost left unknown" in line]
    assert len(warned) == 1, completed.stderr  # once, not per attempt
    assert "broken (broken_provider)" in warned[0] and "no config file" in warned[0]
