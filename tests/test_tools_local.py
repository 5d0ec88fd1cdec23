"""Tool calls through the local adapters (vLLM, Ollama, llama.cpp's OpenAI route) over real HTTP to
the local test server, and through a real llama-server (`llama_server` fixture)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sdk import AsyncStructuredClient
from sdk import Message
from sdk import MissingToolCall
from sdk import PartialToolCall
from sdk import SchemaViolation
from sdk import StopReason
from sdk import StructuredClient
from sdk import Tool
from sdk import ToolCall
from sdk import ToolCalls
from sdk import TruncatedOutput
from sdk import UnknownTool
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import Provider
from sdk.providers import VLLMProvider
from tests.local_support import LocalServer
from tests.local_support import Reply
from tests.tool_wire import BAD_UNIT
from tests.tool_wire import ORDER
from tests.tool_wire import OSLO
from tests.tool_wire import PARIS
from tests.tool_wire import UNKNOWN
from tests.tool_wire import GetWeather
from tests.tool_wire import LookupOrder
from tests.tool_wire import Unit

WEATHER = Tool(GetWeather)
ORDERS = Tool(LookupOrder)
TOOLS = [WEATHER, ORDERS]


LOCAL = ["vllm", "ollama", "llamacpp"]


def _provider(name: str, url: str) -> Provider:
    if name == "vllm":
        return VLLMProvider(url, model="Qwen/Qwen3-8B")
    if name == "ollama":
        return OllamaProvider(url, model="qwen3:8b")
    return LlamaCppProvider(url)  # mode json_schema: tool calls still take the OpenAI route


def _path(name: str) -> str:
    return "/api/chat" if name == "ollama" else "/v1/chat/completions"


def _sent_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["function"]["name"]: tool["function"] for tool in body.get("tools", [])}


@pytest.mark.parametrize("name", LOCAL)
def test_single_and_parallel_calls(server: LocalServer, name: str) -> None:
    server.reset(Reply(text="", tool_calls=[PARIS, OSLO, ORDER]))
    result = StructuredClient(_provider(name, server.url)).call_tools(tools=TOOLS, prompt="x")
    assert [c.value for c in result.calls] == [
        GetWeather(city="Paris", unit=Unit.CELSIUS),
        GetWeather(city="Oslo", unit=Unit.FAHRENHEIT),
        LookupOrder(order_id="A-1009"),
    ]
    assert len({c.id for c in result.calls}) == 3  # Ollama gives none: the SDK numbers them
    body = server.bodies(_path(name))[-1]
    sent = _sent_tools(body)
    assert set(sent) == {"GetWeather", "LookupOrder"}
    assert sent["GetWeather"]["parameters"]["properties"]["unit"]["enum"] == [
        "celsius",
        "fahrenheit",
    ]
    assert sent["GetWeather"]["description"] == "Get the current weather in a city."
    if name != "ollama":
        assert body["tool_choice"] == "auto"
    else:
        assert "tool_choice" not in body  # Ollama has none


@pytest.mark.parametrize("name", LOCAL)
def test_invalid_arguments_then_a_valid_retry_sends_tool_results(
    server: LocalServer, name: str
) -> None:
    server.reset(Reply(text="", tool_calls=[BAD_UNIT]), Reply(text="", tool_calls=[PARIS]))
    result = StructuredClient(_provider(name, server.url)).call_tools(tools=TOOLS, prompt="x")
    assert result.calls[0].value.unit is Unit.CELSIUS
    assert isinstance(result.attempts[0].error, SchemaViolation)
    retry = server.bodies(_path(name))[-1]
    assistant = next(m for m in retry["messages"] if m.get("tool_calls"))
    tool_turn = next(m for m in retry["messages"] if m["role"] == "tool")
    function = assistant["tool_calls"][0]["function"]
    assert function["name"] == "GetWeather"
    if name == "ollama":
        assert function["arguments"] == {"city": "Paris", "unit": "kelvin"}  # an object there
        assert tool_turn["tool_name"] == "GetWeather"
    else:
        assert json.loads(function["arguments"])["unit"] == "kelvin"
        assert tool_turn["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert "/unit" in tool_turn["content"]


@pytest.mark.parametrize("name", LOCAL)
def test_unknown_tool_is_typed(server: LocalServer, name: str) -> None:
    server.reset(Reply(text="", tool_calls=[UNKNOWN]))
    with pytest.raises(UnknownTool) as info:
        StructuredClient(_provider(name, server.url), retries=0).call_tools(tools=TOOLS, prompt="x")
    assert info.value.tool == "delete_everything"


@pytest.mark.parametrize("name", LOCAL)
def test_stream_keeps_parallel_calls_apart(server: LocalServer, name: str) -> None:
    server.reset(Reply(text="", tool_calls=[PARIS, ORDER]))
    items = list(
        StructuredClient(_provider(name, server.url)).stream_tools(tools=TOOLS, prompt="x")
    )
    result = items[-1]
    assert isinstance(result, ToolCalls)
    assert [c.tool for c in result.calls] == ["GetWeather", "LookupOrder"]
    done = [i for i in items if isinstance(i, PartialToolCall) and i.done]
    assert [(d.index, d.tool) for d in done] == [(0, "GetWeather"), (1, "LookupOrder")]
    assert json.loads(done[0].text) == json.loads(PARIS.arguments)


@pytest.mark.parametrize("name", LOCAL)
def test_async_call(server: LocalServer, name: str) -> None:
    server.reset(Reply(text="", tool_calls=[ORDER]))

    async def main() -> ToolCalls:
        return await AsyncStructuredClient(_provider(name, server.url)).call_tools(
            tools=TOOLS, prompt="x"
        )

    assert asyncio.run(main()).calls[0].value == LookupOrder(order_id="A-1009")


def test_vllm_named_choice_and_llamacpp_sends_the_named_tool_alone(server: LocalServer) -> None:
    server.reset(Reply(text="", tool_calls=[ORDER]))
    StructuredClient(_provider("vllm", server.url)).call_tools(
        tools=TOOLS, tool_choice=ORDERS, prompt="x"
    )
    body = server.bodies("/v1/chat/completions")[-1]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "LookupOrder"}}
    assert len(body["tools"]) == 2
    StructuredClient(_provider("llamacpp", server.url)).call_tools(
        tools=TOOLS, tool_choice=ORDERS, prompt="x"
    )
    body = server.bodies("/v1/chat/completions")[-1]
    assert body["tool_choice"] == "required"
    assert [t["function"]["name"] for t in body["tools"]] == ["LookupOrder"]


def test_ollama_none_sends_no_tools_and_required_is_enforced_by_the_parser(
    server: LocalServer,
) -> None:
    server.reset(Reply(text="No tool needed.", tool_calls=[]))
    result = StructuredClient(_provider("ollama", server.url)).call_tools(
        tools=TOOLS, tool_choice="none", prompt="x"
    )
    assert result.calls == [] and result.text == "No tool needed."
    assert "tools" not in server.bodies("/api/chat")[-1]
    server.reset(Reply(text="Hmm.", tool_calls=[]))
    with pytest.raises(MissingToolCall):
        StructuredClient(_provider("ollama", server.url), retries=0).call_tools(
            tools=TOOLS, tool_choice="required", prompt="x"
        )


# --- a real llama-server ---


def _input_tokens(run: Any) -> int:
    """Input tokens of a call, whether it answered or was cut (a typed error, text kept)."""
    try:
        result = run()
    except TruncatedOutput as error:
        assert error.text is not None and error.stop_reason is StopReason.MAX_TOKENS
        return error.usage.input_tokens
    assert all(isinstance(call.value, (GetWeather, LookupOrder)) for call in result.calls)
    return int(result.usage.input_tokens)


@pytest.mark.local
def test_llama_server_renders_the_tools_and_reads_the_reply(llama_tools_server: str) -> None:
    # The bundled SmolLM2-135M was not trained for tools: it answers in prose. What is tested
    # is the wire: the server takes our tools (its template renders each one into the prompt),
    # its reply is read, and prose cut by the limit is a typed error with the text kept.
    client = StructuredClient(LlamaCppProvider(llama_tools_server), retries=0, max_tokens=8)
    prompt = "What is the weather in Paris?"
    one = _input_tokens(lambda: client.call_tools(tools=[WEATHER], prompt=prompt, temperature=0))
    two = _input_tokens(lambda: client.call_tools(tools=TOOLS, prompt=prompt, temperature=0))
    assert two > one + 20  # the second tool's name, description and schema reached the prompt


@pytest.mark.local
def test_llama_server_takes_a_conversation_with_calls_and_results(llama_tools_server: str) -> None:
    client = StructuredClient(LlamaCppProvider(llama_tools_server), retries=0, max_tokens=4)
    call = ToolCall("call_1", "GetWeather", PARIS.arguments)
    question = Message("user", "What is the weather in Paris?")
    messages = [
        question,
        Message("assistant", "", tool_calls=(call,)),
        Message("user", "", tool_results=(call.result('{"temp_c": 18, "sky": "clear"}'),)),
    ]
    # Greedy, as above: what is tested is the prompt, and a draw (the server's temperature 0.8)
    # could answer with something other than prose or a cut, say a `<tool_call>` block.
    longer = _input_tokens(
        lambda: client.call_tools(tools=TOOLS, tool_choice="none", messages=messages, temperature=0)
    )
    shorter = _input_tokens(
        lambda: client.call_tools(
            tools=TOOLS, tool_choice="none", messages=[question], temperature=0
        )
    )
    # The call and its result reached the prompt through the template (an assistant turn with
    # a <tool_call> block, a <tool_response>): the server took our message shapes.
    assert longer > shorter + 15


@pytest.mark.parametrize("name", ["vllm", "llamacpp"])
def test_a_call_returned_as_text_by_a_mismatched_parser_is_not_prose(
    server: LocalServer, name: str
) -> None:
    # A server whose tool-call parser does not match the model returns the block as content,
    # finish_reason "stop": never passed off as a prose answer.
    block = '<tool_call>\n{"name": "GetWeather", "arguments": {"city": "Paris"}}\n</tool_call>'
    bare = 'Calling {"name": "LookupOrder", "arguments": {"order_id": "A-1"}}'
    for text in (block, bare):
        server.reset(Reply(text=text, tool_calls=[]))
        with pytest.raises(MissingToolCall) as info:
            StructuredClient(_provider(name, server.url), retries=0).call_tools(
                tools=TOOLS, prompt="x"
            )
        assert info.value.text == text
    server.reset(Reply(text="GetWeather needs a city; which one?", tool_calls=[]))
    result = StructuredClient(_provider(name, server.url)).call_tools(tools=TOOLS, prompt="x")
    assert result.calls == [] and result.text.startswith("GetWeather needs")
