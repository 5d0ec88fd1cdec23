"""`Result.cost`: priced from the `genai-prices` table at the model that answered each attempt,
summed; `None` for a model the table does not know, a local provider, or without the package."""

from __future__ import annotations

import json
import sys
from decimal import Decimal

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
