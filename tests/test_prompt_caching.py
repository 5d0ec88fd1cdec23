"""Prompt caching on the hosted providers, checked on the exact request bodies the official
clients send (mocked transports), and priced: cache reads and writes cost what the table says."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from contracts import Decision
from contracts import Sentiment
from sdk import StructuredClient
from sdk import Tool
from sdk.providers import AnthropicProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers._prompt_cache import min_cacheable_tokens
from tests import tool_wire
from tests.wire_support import DECISION
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

TEXT = json.dumps(DECISION)
POLICY = "Refunds are allowed within 30 days of purchase. " * 220  # about 10 KB, 2,600 tokens
SHORT = "You review refunds."
EPHEMERAL = {"type": "ephemeral"}


def _anthropic_body(model: str = "claude-sonnet-4-6", **options: Any) -> dict[str, Any]:
    caching = options.pop("prompt_caching", True)
    wire = Wire(anthropic_reply(text=TEXT))
    provider = AnthropicProvider(anthropic_client(wire), model=model, prompt_caching=caching)
    StructuredClient(provider).generate(Decision, **options)
    body: dict[str, Any] = wire.body
    return body


def test_a_long_system_prompt_gets_a_breakpoint() -> None:
    body = _anthropic_body(system=POLICY, prompt="Refund order 1009, bought 12 days ago?")
    assert body["system"] == [{"type": "text", "text": POLICY, "cache_control": EPHEMERAL}]
    assert body["messages"][0]["content"] == "Refund order 1009, bought 12 days ago?"


def test_a_short_prompt_gets_none_and_the_switch_turns_it_off() -> None:
    short = _anthropic_body(system=SHORT, prompt="Refund?")
    assert short["system"] == SHORT and "cache_control" not in json.dumps(short)
    off = _anthropic_body(system=POLICY, prompt="Refund?", prompt_caching=False)
    assert off["system"] == POLICY and "cache_control" not in json.dumps(off)


def test_the_minimum_follows_the_model() -> None:
    middling = POLICY[: 5_000]  # about 1,250 tokens: enough for Sonnet, not for Haiku
    assert min_cacheable_tokens("claude-sonnet-4-6") == 1024
    assert min_cacheable_tokens("claude-haiku-4-5-20251001") == 4096
    sonnet = _anthropic_body(system=middling, prompt="Refund?")
    haiku = _anthropic_body("claude-haiku-4-5-20251001", system=middling, prompt="Refund?")
    assert isinstance(sonnet["system"], list) and haiku["system"] == middling


def test_a_long_shared_document_gets_a_breakpoint_at_the_end_of_its_turn() -> None:
    body = _anthropic_body(prompt="Refund order 1009?", source=POLICY)
    content = body["messages"][0]["content"]
    assert isinstance(content, list) and content[-1]["cache_control"] == EPHEMERAL
    assert POLICY in content[-1]["text"]
    # A retry resends that turn: its prefix is read from the cache, not written again.
    wire = Wire(anthropic_reply(text=json.dumps({**DECISION, "answer": "maybe"})),
                anthropic_reply(text=TEXT))  # fmt: skip
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    StructuredClient(provider, retries=1).generate(Decision, prompt="Refund?", source=POLICY)
    first, retry = wire.bodies()
    assert retry["messages"][0] == first["messages"][0]


def test_tools_without_a_system_prompt_get_the_breakpoint_on_the_last_tool() -> None:
    manual = "Look up an order. " + "Name the order by its id, as printed on the invoice. " * 90
    wire = Wire(tool_wire.anthropic_reply([tool_wire.ORDER]))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    tools = [Tool(tool_wire.GetWeather), Tool(tool_wire.LookupOrder, description=manual)]
    StructuredClient(provider).call_tools(tools=tools, prompt="Order A-1009?")
    sent = wire.body["tools"]
    assert "cache_control" not in sent[0] and sent[-1]["cache_control"] == EPHEMERAL


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_openai_gets_a_prompt_cache_key_named_after_the_static_part(api: str) -> None:
    def body(contract: Any, system: str, **options: Any) -> dict[str, Any]:
        caching = options.pop("prompt_caching", True)
        reply = responses_reply(text=TEXT) if api == "responses" else chat_reply(text=TEXT)
        if contract is Sentiment:
            text = json.dumps({"reasoning": "x", "sentiment": "positive", "score": 0.5})
            reply = responses_reply(text=text) if api == "responses" else chat_reply(text=text)
        wire = Wire(reply)
        cls = OpenAIResponsesProvider if api == "responses" else OpenAIChatProvider
        provider = cls(openai_client(wire), model="gpt-5.1-mini", prompt_caching=caching)
        StructuredClient(provider).generate(contract, system=system, **options)
        sent: dict[str, Any] = wire.body
        return sent

    first = body(Decision, SHORT, prompt="Refund order 1?")
    second = body(Decision, SHORT, prompt="Refund order 2?", source="another document")
    assert first["prompt_cache_key"] == second["prompt_cache_key"]  # same static part
    assert first["prompt_cache_key"].startswith("sdk-")
    assert body(Sentiment, SHORT, prompt="x")["prompt_cache_key"] != first["prompt_cache_key"]
    assert body(Decision, POLICY, prompt="x")["prompt_cache_key"] != first["prompt_cache_key"]
    mine = body(Decision, SHORT, prompt="x", extra_body={"prompt_cache_key": "tenant-7"})
    assert mine["prompt_cache_key"] == "tenant-7"
    assert "prompt_cache_key" not in body(Decision, SHORT, prompt="x", prompt_caching=False)


def test_cache_reads_and_writes_are_priced_at_their_rates() -> None:
    def cost(**usage: int) -> Decimal:
        counts = {"input_tokens": 100, "output_tokens": 100, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, **usage}  # fmt: skip
        reply = anthropic_reply(text=TEXT, usage=counts)
        provider = AnthropicProvider(anthropic_client(Wire(reply)), model="claude-sonnet-4-6")
        result = StructuredClient(provider).generate(Decision, prompt="Refund?")
        assert result.cost is not None
        return result.cost

    uncached = cost(input_tokens=10_000)
    read = cost(cache_read_input_tokens=9_900)
    written = cost(cache_creation_input_tokens=9_900)
    assert read < uncached < written  # 0.1x and 1.25x the input price


def test_a_template_s_long_literal_start_is_a_cached_block_of_its_own() -> None:
    """A prompt template whose literal start is long (a policy) and whose end varies (the
    ticket): the breakpoint goes at the end of the literal start, so the next call with
    another ticket reads that prefix from the cache instead of writing a new one."""
    from pydantic import BaseModel

    from sdk import Prompt

    class Review(Prompt):
        template = POLICY + "\n\nTicket: {{ ticket }}"

        class Inputs(BaseModel):
            ticket: str

    wire = Wire(anthropic_reply(text=TEXT), anthropic_reply(text=TEXT))
    client = StructuredClient(AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6"))
    client.generate(Decision, prompt=Review(ticket="Order 1009, bought 12 days ago."))
    client.generate(Decision, prompt=Review(ticket="Order 77, bought a year ago."))
    first, second = (body["messages"][0]["content"] for body in wire.bodies())
    literal = Review.template.removesuffix("{{ ticket }}")
    static = {"type": "text", "text": literal, "cache_control": EPHEMERAL}
    assert first[0] == second[0] == static  # the same cached prefix on both calls
    assert [b["text"] for b in first[1:]] == ["Order 1009, bought 12 days ago."]
    assert [b["text"] for b in second[1:]] == ["Order 77, bought a year ago."]
    # (the end of the turn keeps its own breakpoint, for a retry that resends the turn)
    # A short literal start is not worth a breakpoint: the turn is sent as text.

    class Brief(Prompt):
        template = "Review this ticket: {{ ticket }}"

        class Inputs(BaseModel):
            ticket: str

    short = Wire(anthropic_reply(text=TEXT))
    provider = AnthropicProvider(anthropic_client(short), model="claude-sonnet-4-6")
    StructuredClient(provider).generate(Decision, prompt=Brief(ticket="Order 77?"))
    assert short.body["messages"][0]["content"] == "Review this ticket: Order 77?"
