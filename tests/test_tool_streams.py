"""`stream_tools` marks each tool call `done` exactly once, with its whole arguments, however a
provider's stream groups the calls' fragments (issue 30, item 9).

A realistic three-call stream is cut into fragments and regrouped at random (hypothesis): the
argument text cut anywhere, the fragments of the calls interleaved where the wire allows it
(Chat Completions: by `index`; a chunk may announce two calls before the arguments of either),
and grouped into chunks any way. Each stream goes through the provider's real reader: the
official `openai` and `anthropic` clients on an `httpx2.MockTransport`, the local servers'
readers on an `httpx.MockTransport`, and `TestProvider`'s own streaming of scripted calls.

The property: every call of the result has exactly one `done` snapshot, whose text is the call's
whole arguments and whose value is the whole parsed document; no snapshot of a call follows its
`done` one; the result holds the calls as sent.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from sdk import PartialToolCall
from sdk import StructuredClient
from sdk import Tool
from sdk import ToolCall
from sdk import ToolCalls
from sdk.providers import AnthropicProvider
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import Provider
from sdk.providers import VLLMProvider
from sdk.providers.test import TestProvider
from tests import tool_wire
from tests.local_support import llamacpp_setup
from tests.wire_support import ANTHROPIC_HEADERS
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import SSE
from tests.wire_support import anthropic_client
from tests.wire_support import fixture_json
from tests.wire_support import openai_client

CALLS = [tool_wire.PARIS, tool_wire.ORDER, tool_wire.OSLO]
TOOLS = [Tool(tool_wire.GetWeather), Tool(tool_wire.LookupOrder)]
EXAMPLES = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])  # fmt: skip

# A fragment: (call number, is the call's header, argument text).
Fragment = tuple[int, bool, str]


@st.composite
def fragments(draw: st.DrawFn, *, interleave: bool) -> list[list[Fragment]]:
    """The three calls' fragments, each call's arguments cut anywhere, in an order the wire
    allows, grouped into chunks at random."""
    per_call: list[list[Fragment]] = []
    for number, call in enumerate(CALLS):
        text = call.arguments
        cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), max_size=6)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        first = pieces.pop(0) if draw(st.booleans()) else ""  # the header may carry a piece
        per_call.append([(number, True, first), *((number, False, p) for p in pieces)])
    if interleave:
        # Any order that keeps each call's own fragments in order (the headers first, say).
        keys = [sorted(draw(st.lists(st.floats(0, 1), min_size=len(f), max_size=len(f))))
                for f in per_call]  # fmt: skip
        ordered = sorted(((key, i), fragment) for f, k in zip(per_call, keys, strict=True)
                         for i, (key, fragment) in enumerate(zip(k, f, strict=True)))  # fmt: skip
        sequence = [fragment for _, fragment in ordered]
    else:
        sequence = [fragment for f in per_call for fragment in f]
    breaks = draw(st.lists(st.booleans(), min_size=len(sequence), max_size=len(sequence)))
    chunks: list[list[Fragment]] = [[]]
    for fragment, cut in zip(sequence, breaks, strict=True):
        chunks[-1].append(fragment)
        if cut:
            chunks.append([])
    return [chunk for chunk in chunks if chunk]


def _check(shown: list[Any], result: ToolCalls) -> None:
    snapshots = [s for s in shown if isinstance(s, PartialToolCall)]
    assert [(c.tool, c.text) for c in result.calls] == [(c.name, c.arguments) for c in CALLS]
    indexes = sorted({s.index for s in snapshots})
    assert len(indexes) == len(CALLS)
    for call, index, final in zip(CALLS, indexes, result.calls, strict=True):
        own = [s for s in snapshots if s.index == index]
        done = [s for s in own if s.done]
        assert len(done) == 1, [(s.text, s.done) for s in own]
        assert own[-1] is done[0]  # nothing of the call after its `done`
        [last] = done
        assert (last.id, last.tool, last.text) == (final.id, call.name, call.arguments)
        assert last.value is not None and last.value.done
        assert last.value.value == json.loads(call.arguments)


def _replying(sse: bytes, headers: dict[str, str]) -> Any:
    """A mock transport's handler answering every request with the stream `sse`."""
    return lambda _: httpx2.Response(200, content=sse, headers={**headers, **SSE})


def _stream(provider: Provider) -> tuple[list[Any], ToolCalls]:
    *shown, result = StructuredClient(provider).stream_tools(tools=TOOLS, prompt="Weather?")
    assert isinstance(result, ToolCalls)
    return shown, result


# --- Chat Completions: the official openai client, vLLM and llama.cpp's OpenAI route ---


def _chat_sse(chunks: list[list[Fragment]], model: str) -> bytes:
    template = tool_wire.chat_chunks([], model=model)
    opening, finish, usage = template[0], template[-2], template[-1]
    events = [opening]
    for chunk in chunks:
        items: list[dict[str, Any]] = []
        for number, header, text in chunk:
            call = CALLS[number]
            if items and items[-1]["index"] == number and not header:
                items[-1]["function"]["arguments"] += text  # one item per call in a row
                continue
            item: dict[str, Any] = {"index": number, "function": {"arguments": text}}
            if header:
                item.update(id=call.id, type="function")
                item["function"]["name"] = call.name
            items.append(item)
        choice = {**opening["choices"][0], "delta": {"tool_calls": items}}
        events.append({**opening, "choices": [choice]})
    finish["choices"][0]["finish_reason"] = "tool_calls"
    events += [finish, usage]
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
    return (body + "data: [DONE]\n\n").encode()


@EXAMPLES
@given(fragments(interleave=True))
def test_chat_completions_through_the_openai_client(chunks: list[list[Fragment]]) -> None:
    sse = _chat_sse(chunks, "gpt-5.1-mini")
    client = openai_client(_replying(sse, OPENAI_HEADERS))
    _check(*_stream(OpenAIChatProvider(client, model="gpt-5.1-mini")))


def _local_server(body: bytes, content_type: str) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        setup = llamacpp_setup(request.url.path, json.loads(request.content or b"{}"))
        if setup is not None:
            return httpx.Response(200, json=setup)
        return httpx.Response(200, content=body, headers={"content-type": content_type})

    return httpx.Client(transport=httpx.MockTransport(answer))


@EXAMPLES
@given(fragments(interleave=True), st.sampled_from(["vllm", "llamacpp"]))
def test_chat_completions_from_a_local_server(chunks: list[list[Fragment]], name: str) -> None:
    http = _local_server(_chat_sse(chunks, "m"), "text/event-stream")
    provider: Provider = (
        VLLMProvider("http://vllm.test", model="m", http_client=http)
        if name == "vllm"
        else LlamaCppProvider("http://llama.test", mode="openai", http_client=http)
    )
    _check(*_stream(provider))


# --- Anthropic and OpenAI Responses: one call after another, arguments cut anywhere ---


def _anthropic_sse(chunks: list[list[Fragment]]) -> bytes:
    events: list[dict[str, Any]] = []
    whole = tool_wire.anthropic_events(CALLS).decode().split("\n\n")
    frame = [json.loads(e.split("data: ", 1)[1]) for e in whole if "data: " in e]
    events.append(frame[0])  # message_start
    for number, header, text in (fragment for chunk in chunks for fragment in chunk):
        call = CALLS[number]
        if header:
            if number:
                events.append({"type": "content_block_stop", "index": number - 1})
            block = {"type": "tool_use", "id": call.id.replace("call_", "toolu_"),
                     "name": call.name, "input": {}}  # fmt: skip
            events.append({"type": "content_block_start", "index": number, "content_block": block})
        if text:
            delta = {"type": "input_json_delta", "partial_json": text}
            events.append({"type": "content_block_delta", "index": number, "delta": delta})
    events.append({"type": "content_block_stop", "index": len(CALLS) - 1})
    events += frame[-2:]  # message_delta, message_stop
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


@EXAMPLES
@given(fragments(interleave=False))
def test_anthropic_through_its_client(chunks: list[list[Fragment]]) -> None:
    sse = _anthropic_sse(chunks)
    client = anthropic_client(_replying(sse, ANTHROPIC_HEADERS))
    _check(*_stream(AnthropicProvider(client, model="claude-sonnet-4-6")))


def _responses_sse(chunks: list[list[Fragment]]) -> bytes:
    whole = tool_wire.responses_events(CALLS).decode().split("\n\n")
    frame = [json.loads(e.split("data: ", 1)[1]) for e in whole if "data: " in e]
    # The calls' items (after any other output item), in order: added, then done.
    added = [e for e in frame if e["type"] == "response.output_item.added"]
    done = [e for e in frame if e["type"] == "response.output_item.done"]
    events = [frame[0]]
    for number, header, text in (fragment for chunk in chunks for fragment in chunk):
        if header:
            if number:
                events.append(done[number - 1])
            events.append(added[number])
        if text:
            item = added[number]["item"]["id"]
            events.append({"type": "response.function_call_arguments.delta", "item_id": item,
                           "output_index": added[number]["output_index"],
                           "delta": text})  # fmt: skip
    events += [done[len(CALLS) - 1], frame[-1]]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


@EXAMPLES
@given(fragments(interleave=False))
def test_openai_responses_through_its_client(chunks: list[list[Fragment]]) -> None:
    sse = _responses_sse(chunks)
    client = openai_client(_replying(sse, OPENAI_HEADERS))
    _check(*_stream(OpenAIResponsesProvider(client, model="gpt-5.1-mini")))


# --- Ollama (each call whole, any number to a line) and TestProvider ---


@EXAMPLES
@given(st.lists(st.booleans(), min_size=len(CALLS), max_size=len(CALLS)))
def test_ollama_whole_calls_grouped_into_lines(breaks: list[bool]) -> None:
    final = fixture_json("ollama_chat.json")
    lines: list[list[dict[str, Any]]] = [[]]
    for number, (call, cut) in enumerate(zip(CALLS, breaks, strict=True)):
        lines[-1].append({"function": {"index": number, "name": call.name,
                                       "arguments": json.loads(call.arguments)}})  # fmt: skip
        if cut:
            lines.append([])
    body = [
        {"model": final["model"], "created_at": final["created_at"], "done": False,
         "message": {"role": "assistant", "content": "", "tool_calls": calls}}
        for calls in lines if calls
    ]  # fmt: skip
    final["message"] = {"role": "assistant", "content": ""}
    ndjson = "".join(json.dumps(line) + "\n" for line in [*body, final]).encode()
    http = _local_server(ndjson, "application/x-ndjson")
    _check(*_stream(OllamaProvider("http://ollama.test", model="m", http_client=http)))


@EXAMPLES
@given(st.integers(1, 40))
def test_test_provider_streams_scripted_calls_the_same_way(chunk_size: int) -> None:
    calls = [ToolCall(c.id, c.name, c.arguments) for c in CALLS]
    _check(*_stream(TestProvider([calls], chunk_size=chunk_size)))


def test_a_chunk_announcing_two_calls_before_their_arguments() -> None:
    # The case found: the first call was marked done, empty, when the second was announced.
    chunks: list[list[Fragment]] = [
        [(0, True, ""), (1, True, "")],
        [(0, False, CALLS[0].arguments)],
        [(1, False, CALLS[1].arguments), (2, True, CALLS[2].arguments)],
    ]
    sse = _chat_sse(chunks, "gpt-5.1-mini")
    client = openai_client(_replying(sse, OPENAI_HEADERS))
    _check(*_stream(OpenAIChatProvider(client, model="gpt-5.1-mini")))
