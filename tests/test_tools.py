"""Tool calls through the real clients: each hosted provider on its official SDK client with a mock
transport and realistic bodies (single, parallel, streaming, invalid arguments then a valid retry,
an unknown tool name, the conversation continued with tool results)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from pydantic import Field

from sdk import AsyncStructuredClient
from sdk import Contract
from sdk import Message
from sdk import MissingToolCall
from sdk import PartialToolCall
from sdk import RetriesExhausted
from sdk import SchemaViolation
from sdk import SourceQuote
from sdk import StopReason
from sdk import StructuredClient
from sdk import Tool
from sdk import ToolCalls
from sdk import TruncatedOutput
from sdk import UnknownTool
from sdk.errors import UnsupportedRequest
from sdk.providers import AnthropicProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import Provider
from tests import tool_wire as tw
from tests.tool_wire import BAD_UNIT
from tests.tool_wire import ORDER
from tests.tool_wire import OSLO
from tests.tool_wire import PARIS
from tests.tool_wire import UNKNOWN
from tests.tool_wire import GetWeather
from tests.tool_wire import LookupOrder
from tests.tool_wire import Unit
from tests.wire_support import Wire
from tests.wire_support import anthropic_async_client
from tests.wire_support import anthropic_client
from tests.wire_support import openai_async_client
from tests.wire_support import openai_client

WEATHER = Tool(GetWeather)
ORDERS = Tool(LookupOrder, name="LookupOrder", description="Find an order.")
TOOLS = [WEATHER, ORDERS]


@dataclass(frozen=True)
class Hosted:
    """A hosted provider: its client on a wire, its replies, and how its request says things."""

    name: str
    make: Callable[[Any, bool], Provider]
    reply: Callable[..., httpx2.Response]
    stream: Callable[..., httpx2.Response]

    def provider(self, wire: Any, sync: bool = True) -> Provider:
        return self.make(wire, sync)


def _anthropic(wire: Any, sync: bool) -> Provider:
    client = anthropic_client(wire) if sync else anthropic_async_client(wire)
    return AnthropicProvider(client, model="claude-sonnet-4-6")


def _responses(wire: Any, sync: bool) -> Provider:
    client = openai_client(wire) if sync else openai_async_client(wire)
    return OpenAIResponsesProvider(client, model="gpt-5.1-mini")


def _chat(wire: Any, sync: bool) -> Provider:
    client = openai_client(wire) if sync else openai_async_client(wire)
    return OpenAIChatProvider(client, model="gpt-5.1-mini")


HOSTED = [
    Hosted("anthropic", _anthropic, tw.anthropic_reply, tw.anthropic_stream),
    Hosted("openai_responses", _responses, tw.responses_reply, tw.responses_stream),
    Hosted("openai_chat", _chat, tw.chat_reply, tw.chat_stream),
]
IDS = [h.name for h in HOSTED]


def _client(provider: Provider, **kwargs: Any) -> StructuredClient:
    return StructuredClient(provider, **kwargs)


def _sent_tools(name: str, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tool name -> (schema, strict, description) as the request sent them."""
    out = {}
    for tool in body["tools"]:
        if name == "anthropic":
            out[tool["name"]] = {"schema": tool["input_schema"], "strict": tool["strict"],
                                 "description": tool["description"]}  # fmt: skip
        elif name == "openai_responses":
            out[tool["name"]] = {"schema": tool["parameters"], "strict": tool["strict"],
                                 "description": tool["description"]}  # fmt: skip
        else:
            fn = tool["function"]
            out[fn["name"]] = {"schema": fn["parameters"], "strict": fn["strict"],
                               "description": fn["description"]}  # fmt: skip
    return out


# --- single and parallel calls ---


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_a_single_call_is_parsed_into_the_tools_contract(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([PARIS], text="Checking the weather."))
    result = _client(hosted.provider(wire)).call_tools(tools=TOOLS, prompt="Weather in Paris?")
    assert isinstance(result, ToolCalls)
    assert [call.tool for call in result.calls] == ["GetWeather"]
    call = result.calls[0]
    assert isinstance(call.value, GetWeather)
    assert call.value.city == "Paris" and call.value.unit is Unit.CELSIUS
    assert json.loads(call.text) == {"city": "Paris", "unit": "celsius"}
    assert call.id.endswith("paris_01")
    assert result.text == "Checking the weather."
    assert result.stop_reason in (StopReason.TOOL_USE, StopReason.END_TURN)
    assert len(result.attempts) == 1 and result.usage.total_tokens > 0
    # What was sent: both tools, strict, named and described from the contract.
    sent = _sent_tools(hosted.name, wire.body)
    assert set(sent) == {"GetWeather", "LookupOrder"}
    assert all(tool["strict"] is True for tool in sent.values())
    assert sent["GetWeather"]["description"] == "Get the current weather in a city."
    assert sent["LookupOrder"]["description"] == "Find an order."
    assert sent["GetWeather"]["schema"]["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert sent["GetWeather"]["schema"]["additionalProperties"] is False


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_parallel_calls_stay_apart_in_order(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([PARIS, OSLO, ORDER]))
    result = _client(hosted.provider(wire)).call_tools(
        tools=TOOLS, prompt="Paris, Oslo, and my order A-1009", parallel_tool_calls=True
    )
    assert [(c.tool, c.value) for c in result.calls] == [
        ("GetWeather", GetWeather(city="Paris", unit=Unit.CELSIUS)),
        ("GetWeather", GetWeather(city="Oslo", unit=Unit.FAHRENHEIT)),
        ("LookupOrder", LookupOrder(order_id="A-1009")),
    ]
    assert len({c.id for c in result.calls}) == 3


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_calls_on_and_off_are_said_in_the_providers_words(
    hosted: Hosted, parallel: bool
) -> None:
    wire = Wire(hosted.reply([PARIS]))
    _client(hosted.provider(wire)).call_tools(tools=TOOLS, prompt="x", parallel_tool_calls=parallel)
    body = wire.body
    if hosted.name == "anthropic":
        assert body["tool_choice"].get("disable_parallel_tool_use", False) is (not parallel)
    else:
        assert body["parallel_tool_calls"] is parallel


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_tool_choice_in_each_providers_words(hosted: Hosted) -> None:
    expected = {
        "anthropic": [{"type": "auto"}, {"type": "any"}, {"type": "none"},
                      {"type": "tool", "name": "LookupOrder"}],
        "openai_responses": ["auto", "required", "none",
                             {"type": "function", "name": "LookupOrder"}],
        "openai_chat": ["auto", "required", "none",
                        {"type": "function", "function": {"name": "LookupOrder"}}],
    }[hosted.name]  # fmt: skip
    for choice, wanted in zip(["auto", "required", "none", ORDERS], expected, strict=True):
        calls = [] if choice == "none" else [ORDER]
        wire = Wire(hosted.reply(calls, text="Fine." if not calls else ""))
        _client(hosted.provider(wire)).call_tools(tools=TOOLS, tool_choice=choice, prompt="x")
        assert wire.body["tool_choice"] == wanted


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_prose_without_a_call_is_a_result_with_no_calls_under_auto(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([], text="It is sunny everywhere, no tool needed."))
    result = _client(hosted.provider(wire)).call_tools(tools=TOOLS, prompt="Hello")
    assert result.calls == []
    assert result.text == "It is sunny everywhere, no tool needed."
    assert result.stop_reason is StopReason.END_TURN


# --- invalid calls: typed errors, retried with tool results marked as errors ---


def _tool_results_sent(name: str, body: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(call id, content, is_error) of every tool result in a request."""
    out: list[tuple[str, str, bool | None]] = []
    if name == "anthropic":
        for message in body["messages"]:
            if isinstance(message["content"], list):
                for block in message["content"]:
                    if block["type"] == "tool_result":
                        out.append((block["tool_use_id"], block["content"], block["is_error"]))
    elif name == "openai_responses":
        for item in body["input"]:
            if item.get("type") == "function_call_output":
                out.append((item["call_id"], item["output"], None))
    else:
        for message in body["messages"]:
            if message["role"] == "tool":
                out.append((message["tool_call_id"], message["content"], None))
    return out


def _calls_sent(name: str, body: dict[str, Any]) -> list[str]:
    """Ids of the tool calls the request sends back as the assistant's turn."""
    if name == "anthropic":
        return [block["id"] for m in body["messages"] if isinstance(m["content"], list)
                for block in m["content"] if block["type"] == "tool_use"]  # fmt: skip
    if name == "openai_responses":
        return [item["call_id"] for item in body["input"] if item.get("type") == "function_call"]
    return [call["id"] for m in body["messages"] for call in m.get("tool_calls") or []]


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_invalid_arguments_then_a_valid_retry(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([BAD_UNIT, ORDER]), hosted.reply([PARIS, ORDER]))
    result = _client(hosted.provider(wire)).call_tools(tools=TOOLS, prompt="Paris + order")
    assert [c.value for c in result.calls] == [
        GetWeather(city="Paris", unit=Unit.CELSIUS), LookupOrder(order_id="A-1009")
    ]  # fmt: skip
    assert len(result.attempts) == 2
    first = result.attempts[0].error
    assert isinstance(first, SchemaViolation)
    assert first.text == BAD_UNIT.arguments  # the raw arguments are kept
    assert any(v.pointer == "/unit" for v in first.violations)
    # The retry sends both calls back and answers each with a tool result: the invalid one with
    # what was wrong, the valid one as not run.
    retry = wire.bodies()[1]
    sent_ids = _calls_sent(hosted.name, retry)
    assert len(sent_ids) == 2
    results = _tool_results_sent(hosted.name, retry)
    assert [r[0] for r in results] == sent_ids
    assert "/unit" in results[0][1] and "kelvin" in results[0][1]
    assert "as a type definition" not in results[0][1]  # the wire holds the arguments' schema
    assert results[1][1].startswith("Not run")
    if hosted.name == "anthropic":
        assert all(r[2] is True for r in results)  # marked as errors where the protocol can


def test_a_prompt_only_route_s_retry_gives_a_failed_call_s_arguments_as_a_type_definition() -> None:
    """On a route that holds tool arguments to no schema (`TestProvider`), the failed call's
    result also gives its tool's arguments as a short type definition; a valid call's does not."""
    from sdk import ToolCall
    from sdk.providers.test import TestProvider
    from sdk.schema.compact import compact_schema

    def calls(weather: Any) -> list[ToolCall]:
        return [ToolCall("c1", "GetWeather", weather.arguments),
                ToolCall("c2", "LookupOrder", ORDER.arguments)]  # fmt: skip

    provider = TestProvider([calls(BAD_UNIT), calls(PARIS)])
    assert not provider.holds_schema
    result = StructuredClient(provider, retries=1).call_tools(tools=TOOLS, prompt="Paris + order")
    assert [c.tool for c in result.calls] == ["GetWeather", "LookupOrder"]
    failed, valid = provider.requests[1].messages[-1].tool_results
    heading = "\nThe GetWeather arguments, as a type definition:\n"
    problems, definition = failed.content.split(heading)
    assert "/unit" in problems
    assert definition == compact_schema(GetWeather) + "\nCall again with corrected arguments."
    assert valid.content.startswith("Not run") and "type definition" not in valid.content


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_an_unknown_tool_name_is_a_typed_error_retried_then_raised(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([UNKNOWN]))
    with pytest.raises(RetriesExhausted) as info:
        _client(hosted.provider(wire), retries=1).call_tools(tools=TOOLS, prompt="x")
    assert len(wire.requests) == 2 == len(info.value.attempts)
    last = info.value.last_error
    assert isinstance(last, UnknownTool)
    assert last.tool == "delete_everything"
    assert last.text == UNKNOWN.arguments
    results = _tool_results_sent(hosted.name, wire.bodies()[1])
    assert "GetWeather" in results[0][1] and "delete_everything" in results[0][1]


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_an_unknown_tool_with_no_retries_is_the_error_itself(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([UNKNOWN]))
    with pytest.raises(UnknownTool) as info:
        _client(hosted.provider(wire), retries=0).call_tools(tools=TOOLS, prompt="x")
    assert info.value.attempts and info.value.usage.total_tokens > 0


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_required_with_no_call_is_missing_tool_call(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([], text="I'd rather not."), hosted.reply([ORDER]))
    result = _client(hosted.provider(wire)).call_tools(
        tools=TOOLS, tool_choice="required", prompt="x"
    )
    assert isinstance(result.attempts[0].error, MissingToolCall)
    assert result.calls[0].value == LookupOrder(order_id="A-1009")


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_a_named_choice_answered_with_another_tool_is_unknown(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([PARIS]))
    with pytest.raises(UnknownTool, match="may not be called"):
        _client(hosted.provider(wire), retries=0).call_tools(
            tools=TOOLS, tool_choice=ORDERS, prompt="x"
        )


def test_a_reply_that_stopped_for_a_call_without_one_is_missing_tool_call() -> None:
    # The server's parser could not read the block (it arrives as text): never a prose answer.
    wire = Wire(tw.chat_reply([], text='<tool_call>{"name": "GetWea', finish="tool_calls"))
    with pytest.raises(MissingToolCall) as info:
        _client(_chat(wire, True), retries=0).call_tools(tools=TOOLS, prompt="x")
    assert info.value.text == '<tool_call>{"name": "GetWea'
    assert info.value.stop_reason is StopReason.TOOL_USE


def test_a_call_cut_by_max_tokens_is_truncated_not_a_call() -> None:
    # Anthropic reports the cut with stop_reason max_tokens: decided before the arguments.
    wire = Wire(tw.anthropic_reply([PARIS], stop="max_tokens"))
    with pytest.raises(TruncatedOutput):
        _client(_anthropic(wire, True)).call_tools(tools=TOOLS, prompt="x")


def test_chat_finish_reason_length_is_truncated() -> None:
    wire = Wire(tw.chat_reply([PARIS], finish="length"))
    with pytest.raises(TruncatedOutput):
        _client(_chat(wire, True)).call_tools(tools=TOOLS, prompt="x")


# --- checks with the source, removed constraints ---


class Refund(Contract):
    """Issue a refund for an order."""

    order_id: str = Field(min_length=3, max_length=12)
    quote: SourceQuote
    amount: int = Field(ge=1)


def test_arguments_are_checked_against_the_source_and_removed_constraints_reported() -> None:
    tool = Tool(Refund)
    quote_ok = '{"order_id": "A-1009", "quote": "refund order A-1009", "amount": 40}'
    quote_bad = '{"order_id": "A-1009", "quote": "refund everything", "amount": 40}'
    source = "Customer: please refund order A-1009, it arrived broken."
    wire = Wire(
        tw.chat_reply([tw.Call("c1", "Refund", quote_bad)]),
        tw.chat_reply([tw.Call("c2", "Refund", quote_ok)]),
    )
    result = _client(_chat(wire, True)).call_tools(tools=[tool], prompt="x", source=source)
    assert result.calls[0].value.quote == "refund order A-1009"
    assert type(result.attempts[0].error).__name__ == "CheckFailed"
    # OpenAI strict sends no string lengths: reported, and still enforced by the parser.
    assert any(r.keyword in ("minLength", "maxLength") for r in result.removed["Refund"])
    wire = Wire(tw.chat_reply([tw.Call("c3", "Refund", quote_ok.replace("A-1009", "A"))]))
    with pytest.raises(SchemaViolation):
        _client(_chat(wire, True), retries=0).call_tools(tools=[tool], prompt="x", source=source)


# --- continuing the conversation ---


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_a_conversation_continues_with_the_calls_and_their_results(hosted: Hosted) -> None:
    wire = Wire(hosted.reply([PARIS]), hosted.reply([], text="It is 18°C in Paris."))
    client = _client(hosted.provider(wire))
    first = client.call_tools(tools=TOOLS, prompt="Weather in Paris?")
    call = first.calls[0]
    messages = [
        Message("user", "Weather in Paris?"),
        first.message(),
        Message("user", "", tool_results=(call.result('{"temp_c": 18}'),)),
    ]
    second = client.call_tools(tools=TOOLS, messages=messages)
    assert second.calls == [] and second.text == "It is 18°C in Paris."
    body = wire.bodies()[1]
    assert _calls_sent(hosted.name, body) == [call.id]
    assert _tool_results_sent(hosted.name, body)[0][:2] == (call.id, '{"temp_c": 18}')


# --- streaming ---


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_stream_accumulates_fragments_per_call_into_partials(hosted: Hosted) -> None:
    wire = Wire(hosted.stream([PARIS, ORDER], text="On it."))
    items = list(_client(hosted.provider(wire)).stream_tools(tools=TOOLS, prompt="x"))
    result = items[-1]
    assert isinstance(result, ToolCalls)
    assert [c.value for c in result.calls] == [
        GetWeather(city="Paris", unit=Unit.CELSIUS), LookupOrder(order_id="A-1009")
    ]  # fmt: skip
    snapshots = [item for item in items if isinstance(item, PartialToolCall)]
    by_index: dict[int, list[PartialToolCall]] = {}
    for snapshot in snapshots:
        by_index.setdefault(snapshot.index, []).append(snapshot)
    assert len(by_index) == 2  # parallel calls kept apart
    first, second = (by_index[i] for i in sorted(by_index))
    assert {s.tool for s in first} == {"GetWeather"} and {s.tool for s in second} == {"LookupOrder"}
    # The arguments grow fragment by fragment, and each call completes once, in order.
    assert len(first) > 3
    assert first[-1].done and first[-1].text == PARIS.arguments
    assert second[-1].done and second[-1].text == ORDER.arguments
    assert [s.done for s in first].count(True) == 1
    assert snapshots.index(first[-1]) < snapshots.index(second[-1])
    grown = [s.value.value for s in first if s.value is not None]
    assert grown[-1] == {"city": "Paris", "unit": "celsius"}
    assert any(v != grown[-1] for v in grown)  # partial snapshots before the whole


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_stream_retries_an_invalid_call_and_starts_the_snapshots_again(hosted: Hosted) -> None:
    wire = Wire(hosted.stream([BAD_UNIT]), hosted.stream([PARIS]))
    items = list(_client(hosted.provider(wire)).stream_tools(tools=TOOLS, prompt="x"))
    result = items[-1]
    assert isinstance(result, ToolCalls) and len(result.attempts) == 2
    done = [i for i in items if isinstance(i, PartialToolCall) and i.done]
    assert [d.text for d in done] == [BAD_UNIT.arguments, PARIS.arguments]


@pytest.mark.parametrize("hosted", HOSTED, ids=IDS)
def test_async_call_and_stream(hosted: Hosted) -> None:
    async def main() -> tuple[ToolCalls, list[Any]]:
        wire = Wire(hosted.reply([PARIS, OSLO]))
        client = AsyncStructuredClient(hosted.provider(wire, sync=False))
        whole = await client.call_tools(tools=TOOLS, prompt="x")
        wire2 = Wire(hosted.stream([OSLO]))
        client2 = AsyncStructuredClient(hosted.provider(wire2, sync=False))
        items = [item async for item in client2.stream_tools(tools=TOOLS, prompt="x")]
        return whole, items

    whole, items = asyncio.run(main())
    assert [c.value.city for c in whole.calls] == ["Paris", "Oslo"]
    assert isinstance(items[-1], ToolCalls) and items[-1].calls[0].value.city == "Oslo"
    assert any(isinstance(i, PartialToolCall) and not i.done for i in items)


# --- the API surface ---


def test_tool_defaults_and_validation() -> None:
    assert WEATHER.name == "GetWeather"
    assert WEATHER.description == "Get the current weather in a city."
    with pytest.raises(ValueError, match="1 to 64"):
        Tool(GetWeather, name="get weather!")
    with pytest.raises(TypeError):
        Tool(dict)  # type: ignore[arg-type]
    wire = Wire(tw.chat_reply([PARIS]))
    client = _client(_chat(wire, True))
    with pytest.raises(ValueError, match="unique"):
        client.call_tools(tools=[WEATHER, Tool(LookupOrder, name="GetWeather")], prompt="x")
    with pytest.raises(ValueError, match="not one of the tools"):
        client.call_tools(tools=[WEATHER], tool_choice=ORDERS, prompt="x")
    with pytest.raises(ValueError, match="tool_choice"):
        client.call_tools(tools=[WEATHER], tool_choice="any", prompt="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        client.call_tools(tools=[], prompt="x")
    assert wire.requests == []  # nothing was sent


def test_a_provider_without_tool_calls_says_so_before_sending() -> None:
    class DocumentsOnly(Provider):
        """A user's own provider that has not implemented tool calls."""

        name = "documents_only"

    with pytest.raises(UnsupportedRequest, match="tool calls"):
        StructuredClient(DocumentsOnly()).call_tools(tools=TOOLS, prompt="x")


def test_the_test_provider_scripts_tool_calls_for_your_own_tests() -> None:
    from sdk import ToolCall
    from sdk.providers.test import TestProvider

    provider = TestProvider(
        [ToolCall("c1", "GetWeather", BAD_UNIT.arguments), [ToolCall("c2", "GetWeather",
         PARIS.arguments), ToolCall("c3", "LookupOrder", ORDER.arguments)]],
        chunk_size=5,
    )  # fmt: skip
    items = list(StructuredClient(provider).stream_tools(tools=TOOLS, prompt="x"))
    result = items[-1]
    assert isinstance(result, ToolCalls)
    assert [c.tool for c in result.calls] == ["GetWeather", "LookupOrder"]
    assert isinstance(result.attempts[0].error, SchemaViolation)
    retry = provider.requests[1].messages
    assert retry[-2].tool_calls[0].id == "c1" and retry[-1].tool_results[0].is_error


class Search(Contract):
    """Search the catalogue."""

    query: str
    limit: int | None = None


def test_an_optional_argument_sent_as_null_by_openai_strict_is_absent() -> None:
    # OpenAI strict makes every property required, the optional ones nullable: null means absent.
    wire = Wire(tw.chat_reply([tw.Call("c1", "Search", '{"query": "kettle", "limit": null}')]))
    result = _client(_chat(wire, True)).call_tools(tools=[Tool(Search)], prompt="x")
    assert result.calls[0].value == Search(query="kettle")
    parameters = wire.body["tools"][0]["function"]["parameters"]
    assert parameters["required"] == ["query", "limit"]  # what strict mode needs


def test_tool_choice_by_name_and_a_hostile_tool_name_stays_bounded() -> None:
    wire = Wire(tw.chat_reply([ORDER]))
    result = _client(_chat(wire, True)).call_tools(
        tools=TOOLS, tool_choice="LookupOrder", prompt="x"
    )
    assert wire.body["tool_choice"] == {"type": "function", "function": {"name": "LookupOrder"}}
    assert result.calls[0].tool == "LookupOrder"
    with pytest.raises(ValueError, match="GetWeather, LookupOrder"):
        _client(_chat(wire, True)).call_tools(tools=TOOLS, tool_choice="Nope", prompt="x")
    huge = tw.Call("c9", "x" * 100_000, "{}")
    wire = Wire(tw.chat_reply([huge]))
    with pytest.raises(UnknownTool) as info:
        _client(_chat(wire, True), retries=0).call_tools(tools=TOOLS, prompt="x")
    assert len(str(info.value)) < 400 and info.value.tool == huge.name  # kept whole on the error


def test_a_stream_cut_mid_call_keeps_the_last_snapshot_on_the_error() -> None:
    from sdk import Backoff
    from sdk import ProviderError
    from tests.wire_support import ANTHROPIC_HEADERS
    from tests.wire_support import SSE

    events = tw.anthropic_events([PARIS])
    cut = events[: events.index(b"content_block_stop")]  # mid-arguments, no final event
    wire = Wire(httpx2.Response(200, content=cut, headers={**ANTHROPIC_HEADERS, **SSE}))
    client = _client(_anthropic(wire, True), backoff=Backoff(retries=0))
    with pytest.raises(ProviderError) as info:
        list(client.stream_tools(tools=TOOLS, prompt="x"))
    partial = info.value.partial
    assert isinstance(partial, PartialToolCall) and partial.tool == "GetWeather"
    assert not partial.done and PARIS.arguments.startswith(partial.text)
