"""Realistic tool-call wire bodies for each provider, whole and streamed.

Each builder takes the calls the model makes (`Call`: id, tool name, arguments as JSON text,
which may be invalid on purpose) and any prose, and writes the body that provider's API sends:
built on the recorded fixtures (`anthropic_success.json`, `openai_chat_stop.json`, ...) so every
field the official SDKs validate strictly is there. Streams cut each call's arguments into small
fragments, the way the APIs do.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import httpx2

from sdk import Contract
from sdk import WireEnum
from tests.wire_support import ANTHROPIC_HEADERS
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import SSE
from tests.wire_support import fixture_json


class Unit(WireEnum):
    """Temperature unit."""

    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class GetWeather(Contract):
    """Get the current weather in a city."""

    city: str
    unit: Unit


class LookupOrder(Contract):
    """Look up an order by its id."""

    order_id: str


@dataclass(frozen=True)
class Call:
    """A call in a scripted reply."""

    id: str
    name: str
    arguments: str


PARIS = Call("call_paris_01", "GetWeather", '{"city": "Paris", "unit": "celsius"}')
OSLO = Call("call_oslo_02", "GetWeather", '{"city": "Oslo", "unit": "fahrenheit"}')
ORDER = Call("call_order_03", "LookupOrder", '{"order_id": "A-1009"}')
BAD_UNIT = Call("call_bad_04", "GetWeather", '{"city": "Paris", "unit": "kelvin"}')
UNKNOWN = Call("call_unknown_05", "delete_everything", '{"city": "Paris"}')


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(events: list[dict[str, Any]], *, named: bool) -> bytes:
    out = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(event)}\n\n")
    return "".join(out).encode()


# --- Anthropic ---


def anthropic_body(calls: list[Call], text: str = "", stop: str = "tool_use") -> dict[str, Any]:
    body = fixture_json("anthropic_success.json")
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content.extend(
        {"type": "tool_use", "id": c.id.replace("call_", "toolu_"), "name": c.name,
         "input": json.loads(c.arguments)}
        for c in calls
    )  # fmt: skip
    body["content"] = content
    body["stop_reason"] = stop if calls else (stop if stop != "tool_use" else "end_turn")
    return body


def anthropic_reply(calls: list[Call], text: str = "", stop: str = "tool_use") -> httpx2.Response:
    return httpx2.Response(
        200, content=json.dumps(anthropic_body(calls, text, stop)).encode(),
        headers=ANTHROPIC_HEADERS,
    )  # fmt: skip


def anthropic_events(calls: list[Call], text: str = "", stop: str = "tool_use") -> bytes:
    start = fixture_json("anthropic_success.json")
    start.update(content=[], stop_reason=None)
    start["usage"]["output_tokens"] = 1
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    index = 0
    if text:
        events.append({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}})  # fmt: skip
        events.extend(
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": piece}}
            for piece in _pieces(text)
        )  # fmt: skip
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    for call in calls:
        block = {"type": "tool_use", "id": call.id.replace("call_", "toolu_"), "name": call.name,
                 "input": {}}  # fmt: skip
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.extend(
            {"type": "content_block_delta", "index": index,
             "delta": {"type": "input_json_delta", "partial_json": piece}}
            for piece in _pieces(call.arguments)
        )  # fmt: skip
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    events.append({"type": "message_delta",
                   "delta": {"stop_reason": stop, "stop_sequence": None, "stop_details": None},
                   "usage": {"output_tokens": 48}})  # fmt: skip
    events.append({"type": "message_stop"})
    return _sse(events, named=True)


def anthropic_stream(calls: list[Call], text: str = "", stop: str = "tool_use") -> httpx2.Response:
    return httpx2.Response(
        200, content=anthropic_events(calls, text, stop), headers={**ANTHROPIC_HEADERS, **SSE}
    )


# --- OpenAI Responses ---


def _function_item(call: Call, status: str = "completed") -> dict[str, Any]:
    return {"id": "fc_" + call.id, "type": "function_call", "status": status,
            "call_id": call.id, "name": call.name, "arguments": call.arguments}  # fmt: skip


def responses_body(calls: list[Call], text: str = "") -> dict[str, Any]:
    body = fixture_json("openai_responses_completed.json")
    output: list[dict[str, Any]] = [item for item in body["output"] if item["type"] == "reasoning"]
    if text:
        message = copy.deepcopy(next(i for i in body["output"] if i["type"] == "message"))
        message["content"] = [{"type": "output_text", "annotations": [], "logprobs": [],
                               "text": text}]  # fmt: skip
        output.append(message)
    output.extend(_function_item(call) for call in calls)
    body["output"] = output
    body["text"] = {"format": {"type": "text"}, "verbosity": "medium"}
    return body


def responses_reply(calls: list[Call], text: str = "") -> httpx2.Response:
    return httpx2.Response(
        200, content=json.dumps(responses_body(calls, text)).encode(), headers=OPENAI_HEADERS
    )


def responses_events(calls: list[Call], text: str = "") -> bytes:
    final = responses_body(calls, text)
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
    offset = len(final["output"]) - len(calls)
    for position, call in enumerate(calls):
        index = offset + position
        item = {**_function_item(call, "in_progress"), "arguments": ""}
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.extend(
            {"type": "response.function_call_arguments.delta", "item_id": item["id"],
             "output_index": index, "delta": piece}
            for piece in _pieces(call.arguments)
        )  # fmt: skip
        events.append({"type": "response.function_call_arguments.done", "item_id": item["id"],
                       "output_index": index, "arguments": call.arguments,
                       "name": call.name})  # fmt: skip
        events.append({"type": "response.output_item.done", "output_index": index,
                       "item": _function_item(call)})  # fmt: skip
    events.append({"type": "response.completed", "response": final})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return _sse(events, named=True)


def responses_stream(calls: list[Call], text: str = "") -> httpx2.Response:
    return httpx2.Response(
        200, content=responses_events(calls, text), headers={**OPENAI_HEADERS, **SSE}
    )


# --- Chat Completions (OpenAI, vLLM, llama.cpp's OpenAI route) ---


def chat_body(calls: list[Call], text: str | None = None, finish: str | None = None,
              model: str = "gpt-5.1-mini") -> dict[str, Any]:  # fmt: skip
    body = fixture_json("openai_chat_stop.json")
    body["model"] = model
    message = body["choices"][0]["message"]
    message["content"] = text
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]  # fmt: skip
    body["choices"][0]["finish_reason"] = finish or ("tool_calls" if calls else "stop")
    return body


def chat_reply(calls: list[Call], text: str | None = None, finish: str | None = None) -> Any:
    return httpx2.Response(
        200, content=json.dumps(chat_body(calls, text, finish)).encode(), headers=OPENAI_HEADERS
    )


def chat_chunks(calls: list[Call], text: str = "", finish: str | None = None,
                model: str = "gpt-5.1-mini") -> list[dict[str, Any]]:  # fmt: skip
    base = {"id": "chatcmpl-DrWdQAfIlizGfxOUa7tfdY7h2RZ5D", "object": "chat.completion.chunk",
            "created": 1767225600, "model": model, "service_tier": "default",
            "system_fingerprint": None, "usage": None}  # fmt: skip

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish_reason}]}  # fmt: skip

    chunks = [chunk({"role": "assistant", "content": None, "refusal": None})]
    chunks.extend(chunk({"content": piece}) for piece in (_pieces(text) if text else []))
    for index, call in enumerate(calls):
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                             "function": {"name": call.name,
                                                          "arguments": ""}}]}))  # fmt: skip
        chunks.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(call.arguments)
        )
    chunks.append(chunk({}, finish or ("tool_calls" if calls else "stop")))
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 131,
                                                    "completion_tokens": 40,
                                                    "total_tokens": 171}})  # fmt: skip
    return chunks


def chat_events(calls: list[Call], text: str = "", finish: str | None = None,
                model: str = "gpt-5.1-mini") -> bytes:  # fmt: skip
    lines = [f"data: {json.dumps(c)}\n\n" for c in chat_chunks(calls, text, finish, model)]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def chat_stream(calls: list[Call], text: str = "", finish: str | None = None) -> httpx2.Response:
    return httpx2.Response(
        200, content=chat_events(calls, text, finish), headers={**OPENAI_HEADERS, **SSE}
    )


# --- Ollama ---


def ollama_body(calls: list[Call], text: str = "") -> dict[str, Any]:
    body = fixture_json("ollama_chat.json")
    body["message"] = {"role": "assistant", "content": text}
    if calls:
        body["message"]["tool_calls"] = [
            {"function": {"index": i, "name": c.name, "arguments": json.loads(c.arguments)}}
            for i, c in enumerate(calls)
        ]
    return body


def ollama_lines(calls: list[Call], text: str = "") -> bytes:
    final = ollama_body([], "")
    lines: list[dict[str, Any]] = [
        {"model": final["model"], "created_at": final["created_at"],
         "message": {"role": "assistant", "content": piece}, "done": False}
        for piece in (_pieces(text) if text else [])
    ]  # fmt: skip
    for i, call in enumerate(calls):
        lines.append({"model": final["model"], "created_at": final["created_at"],
                      "message": {"role": "assistant", "content": "", "tool_calls": [
                          {"function": {"index": i, "name": call.name,
                                        "arguments": json.loads(call.arguments)}}]},
                      "done": False})  # fmt: skip
    lines.append(final)
    return "".join(json.dumps(line) + "\n" for line in lines).encode()
