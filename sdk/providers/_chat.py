"""The OpenAI Chat Completions shape, shared by every adapter that speaks it.

OpenAI's own Chat adapter reads SDK objects; vLLM and llama.cpp's OpenAI-compatible route read
plain JSON. They all end in the same fields (content, refusal, finish reason, token counts), so
turning those fields into a `Completion`, and accumulating them from a stream, lives here once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

from sdk._result import Usage
from sdk._tools import Tool
from sdk._tools import ToolCall
from sdk._tools import ToolOffer
from sdk._tools import arguments_object
from sdk._values.content import PDF
from sdk._values.content import Image
from sdk._values.content import Text
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.providers._base import unsupported
from sdk.providers._errors import provider_error
from sdk.providers._logprobs import chat_logprobs
from sdk.providers._logprobs import tokens_of
from sdk.stop_reason import StopReason

__all__ = [
    "CHAT_STOP_REASONS",
    "ChatChoice",
    "ChatDeltas",
    "ChatSSEStreamReader",
    "chat_messages",
    "chat_tools",
    "json_event",
    "read_chat_body",
    "read_chat_tool_calls",
    "sse_data",
]

CHAT_STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTER,
    "refusal": StopReason.REFUSAL,
}
"""Chat Completions' `finish_reason` (and `refusal` for a reply that carries one): the stop
table of every family that speaks that API (OpenAI Chat, vLLM; llama.cpp's OpenAI route reads
its replies as `openai_chat`'s)."""


def chat_messages(
    request: CompletionRequest,
    provider: str,
    *,
    images: bool = False,
    pdfs: bool = False,
    arguments: str = "text",
) -> list[dict[str, Any]]:
    """The request's conversation as chat messages, the system prompt first.

    Content parts become `image_url` and `file` parts where the provider takes them (`images`,
    `pdfs`); any other part is `UnsupportedRequest`, before anything is sent. Tool calls ride on
    the assistant message (`tool_calls`, each call's arguments as JSON text, or as an object
    with `arguments="object"`: Ollama); tool results are `tool` messages (before the user
    message's own content, if any)."""
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": request.system}] if request.system else []
    )
    for message in request.messages:
        messages.extend(_chat_turn(message, provider, images, pdfs, arguments))
    return messages


def _chat_turn(
    message: Message, provider: str, images: bool, pdfs: bool, arguments: str
) -> list[dict[str, Any]]:
    if message.tool_calls:
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.tool,
                    "arguments": call.text if arguments == "text" else arguments_object(call.text),
                },
            }
            for call in message.tool_calls
        ]
        # OpenAI's shape has a null content beside calls; Ollama's a string.
        content = message.text or (None if arguments == "text" else "")
        return [{"role": "assistant", "content": content, "tool_calls": calls}]
    turns: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": result.call_id, "content": result.content,
         **({"tool_name": result.tool} if arguments == "object" and result.tool else {})}
        for result in message.tool_results
    ]  # fmt: skip
    if message.content or not message.tool_results:
        turns.append(
            {"role": message.role, "content": _chat_content(message, provider, images, pdfs)}
        )
    return turns


def _chat_content(
    message: Message, provider: str, images: bool, pdfs: bool
) -> str | list[dict[str, Any]]:
    if isinstance(message.content, str):
        return message.content
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, Text):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, Image) and images:
            parts.append({"type": "image_url", "image_url": {"url": part.data_url()}})
        elif isinstance(part, PDF) and pdfs and part.data is not None:
            file = {"filename": part.name, "file_data": part.data_url()}
            parts.append({"type": "file", "file": file})
        else:
            takes = ["text"] + (["images"] if images else []) + (["PDF bytes"] if pdfs else [])
            what = "a PDF URL" if isinstance(part, PDF) and pdfs else f"{type(part).__name__} parts"
            raise unsupported(provider, what, takes)
    return parts


def chat_tools(
    offer: ToolOffer,
    schema: Any,
    *,
    strict: bool = False,
    named_choice: bool = True,
    parallel: bool = True,
) -> dict[str, Any]:
    """`tools`, `tool_choice` (and `parallel_tool_calls` when set) for a tool-call request.

    `schema(tool)` is the tool's arguments schema in the provider's dialect. A server that
    cannot force a named tool (`named_choice=False`) gets that tool alone, `"required"`.
    """
    choice = offer.choice
    tools: Sequence[Tool] = offer.tools
    wire_choice: Any = choice
    if isinstance(choice, Tool):
        if named_choice:
            wire_choice = {"type": "function", "function": {"name": choice.name}}
        else:
            tools, wire_choice = (choice,), "required"
    fields: dict[str, Any] = {
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or f"Call {tool.name}.",
                    "parameters": schema(tool),
                    **({"strict": True} if strict else {}),
                },
            }
            for tool in tools
        ],
        "tool_choice": wire_choice,
    }
    if parallel and offer.parallel is not None:
        fields["parallel_tool_calls"] = offer.parallel
    return fields


def read_chat_tool_calls(calls: Any) -> tuple[ToolCall, ...]:
    """A chat message's `tool_calls` (JSON) -> calls; a wrong shape raises `ValueError`."""
    if calls is None:
        return ()
    if not isinstance(calls, list):
        raise ValueError(f"message.tool_calls is {type(calls).__name__}, not a list")
    out = []
    for index, item in enumerate(calls):
        call = _object(item, f"tool_calls[{index}]")
        function = _object(call.get("function"), f"tool_calls[{index}].function")
        name = function.get("name")
        if not isinstance(name, str):
            raise ValueError(f"tool_calls[{index}].function.name is not a string")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # Ollama sends an object
            arguments = json.dumps(arguments, ensure_ascii=False)
        if not isinstance(arguments, str):
            raise ValueError(f"tool_calls[{index}].function.arguments is not a string")
        call_id = call.get("id")
        out.append(ToolCall(call_id if isinstance(call_id, str) else "", name, arguments))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ChatChoice:
    """What a chat reply's choice says: its text, refusal, finish reason and tool calls."""

    content: str | None
    refusal: str | None
    finish_reason: str | None
    tool_calls: tuple[ToolCall, ...] = ()

    def completion(self, usage: Usage, model: str | None, request_id: str | None) -> Completion:
        """The choice as one normalized completion, with the reply's usage, model and id.

        A refusal has its own field beside `finish_reason` (which then says `stop`): the
        refusal decides, so the raw stop reason is written `refusal`.
        """
        raw = "refusal" if self.refusal else self.finish_reason
        return Completion(
            text=self.content,
            stop_reason=StopReason.from_raw(raw, "openai_chat"),
            raw_stop_reason=raw,
            usage=usage,
            model=model,
            request_id=request_id,
            refusal=self.refusal or None,
            tool_calls=self.tool_calls,
        )


def read_chat_body(body: dict[str, Any], *, request_id: str | None = None) -> Completion:
    """A Chat Completions JSON body (from an OpenAI-compatible server) -> `Completion`.

    A body of another shape (no choices, a choice that is not an object, content that is not a
    string) raises `ValueError` naming what is wrong; the fault boundary makes it a
    `ProviderError` that keeps the body.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError("the reply has no choices")
    choice = _object(choices[0], "choices[0]")
    message = _object(choice.get("message"), "choices[0].message")
    said = ChatChoice(
        content=_optional_str(message.get("content"), "message.content"),
        refusal=_optional_str(message.get("refusal"), "message.refusal"),
        finish_reason=_optional_str(choice.get("finish_reason"), "finish_reason"),
        tool_calls=read_chat_tool_calls(message.get("tool_calls")),
    )
    completion = said.completion(
        _usage(body.get("usage")),
        model=_optional_str(body.get("model"), "model"),
        request_id=request_id or _optional_str(body.get("id"), "id"),
    )
    # `logprobs: true` asked (vLLM and llama.cpp always are): each token's probability.
    return replace(completion, tokens=chat_logprobs(choice.get("logprobs")))


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is {type(value).__name__}, not an object")
    return value


def _optional_str(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where} is {type(value).__name__}, not a string")
    return value


def sse_data(line: str) -> str | None:
    """The payload of an SSE `data:` line; `None` for any other line (comment, event, blank)."""
    if line.startswith("data:"):
        return line[5:].lstrip(" ")
    return None


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt = usage.get("prompt_tokens_details")
    completion = usage.get("completion_tokens_details")
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=int(prompt.get("cached_tokens") or 0) if isinstance(prompt, dict) else 0,
        reasoning_tokens=(
            int(completion.get("reasoning_tokens") or 0) if isinstance(completion, dict) else 0
        ),
    )


_NO_USAGE = Usage()  # (frozen: shared)


@dataclass
class ChatDeltas:
    """Accumulates a chat stream's chunks; `finish()` gives the final `Completion`."""

    provider: str
    request_id: str | None = None
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    _content: list[str] = field(default_factory=list)
    _refusal: list[str] = field(default_factory=list)
    _calls: dict[int, list[Any]] = field(default_factory=dict)
    """Tool calls by index: [id, name, argument fragments]."""
    _logprobs: list[Any] | None = None
    """The chunks' `logprobs.content` entries, in order (`None`: none came)."""

    def logprobs(self, logprobs: Any) -> None:
        """One chunk's choice `logprobs` (JSON or the `openai` client's model of it)."""
        content = (
            logprobs.get("content")
            if isinstance(logprobs, dict)
            else getattr(logprobs, "content", None)
        )
        if isinstance(content, list):
            self._logprobs = [*(self._logprobs or []), *content]

    def feed(
        self,
        *,
        content: str | None,
        refusal: str | None,
        finish_reason: str | None,
        model: str | None = None,
        tool_calls: Sequence[tuple[int, str | None, str | None, str | None]] = (),
    ) -> TextDelta | tuple[TextDelta, ...] | None:
        """One choice delta; returns the document text it adds, if any, or a delta for each
        tool call it carries a piece of (`tool_calls` are (index, id, name, arguments) pieces:
        one chunk may carry pieces of several calls)."""
        if model:
            self.model = model
        if finish_reason:
            self.finish_reason = finish_reason
        if refusal:
            self._refusal.append(refusal)
        deltas: list[TextDelta] = []
        # What the reply has cost so far, once the stream said it (a server reporting usage on
        # every chunk, vLLM's `continuous_usage_stats`): kept if the stream is cut.
        said = self.usage if self.usage != _NO_USAGE else None
        for index, call_id, name, arguments in tool_calls:
            call = self._calls.setdefault(index, [None, None, []])
            call[0] = call[0] or call_id
            call[1] = call[1] or name
            if arguments:
                call[2].append(arguments)
            deltas.append(
                ToolCallDelta(arguments or "", said, index=index, id=call[0], name=call[1])
            )
        if content:
            self._content.append(content)
            deltas.append(TextDelta(content, said))
        if not deltas:
            return None
        return deltas[0] if len(deltas) == 1 else tuple(deltas)

    def feed_body(self, chunk: dict[str, Any]) -> TextDelta | tuple[TextDelta, ...] | None:
        """One JSON chunk from an OpenAI-compatible server."""
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise ValueError(f"choices is {type(choices).__name__}, not a list")
        if not choices:
            return None
        choice = _object(choices[0], "choices[0]")
        delta = _object(choice.get("delta") or {}, "choices[0].delta")
        self.logprobs(choice.get("logprobs"))
        return self.feed(
            content=_optional_str(delta.get("content"), "delta.content"),
            refusal=_optional_str(delta.get("refusal"), "delta.refusal"),
            finish_reason=_optional_str(choice.get("finish_reason"), "finish_reason"),
            model=_optional_str(chunk.get("model"), "model"),
            tool_calls=_tool_call_pieces(delta.get("tool_calls")),
        )

    def finish(self) -> Completion:
        """The completion; a stream that ended without a finish reason was cut: `ProviderError`."""
        if self.finish_reason is None:
            raise provider_error(
                self.provider, "stream ended before its final event", request_id=self.request_id
            )
        content = "".join(self._content)
        refusal = "".join(self._refusal)
        calls = tuple(
            ToolCall(call_id or "", name or "", "".join(parts))
            for call_id, name, parts in (self._calls[index] for index in sorted(self._calls))
        )
        said = ChatChoice(
            content=content if content or not refusal else None,
            refusal=refusal or None,
            finish_reason=self.finish_reason,
            tool_calls=calls,
        )
        completion = said.completion(self.usage, self.model, self.request_id)
        if self._logprobs is None:
            return completion
        return replace(completion, tokens=tokens_of(self._logprobs))


def _tool_call_pieces(calls: Any) -> list[tuple[int, str | None, str | None, str | None]]:
    """A stream delta's `tool_calls` (JSON) -> (index, id, name, arguments fragment)."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise ValueError(f"delta.tool_calls is {type(calls).__name__}, not a list")
    pieces = []
    for position, item in enumerate(calls):
        call = _object(item, f"delta.tool_calls[{position}]")
        index = call.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError(f"delta.tool_calls[{position}].index is not an integer")
        function = _object(call.get("function") or {}, f"delta.tool_calls[{position}].function")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        pieces.append(
            (
                index,
                _optional_str(call.get("id"), "tool_calls.id"),
                _optional_str(function.get("name"), "tool_calls.function.name"),
                _optional_str(arguments, "tool_calls.function.arguments"),
            )
        )
    return pieces


class ChatSSEStreamReader:
    """A Chat Completions stream as server-sent events (`data: {...}` lines, `data: [DONE]`)."""

    def __init__(self, provider: str, request_id: str | None = None) -> None:
        self._chat = ChatDeltas(provider, request_id=request_id)

    def feed(self, line: str) -> TextDelta | tuple[TextDelta, ...] | None:
        data = sse_data(line)
        if not data or data == "[DONE]":
            return None
        chunk = json_event(data, self._chat.provider)
        return self._chat.feed_body(chunk)

    def finish(self) -> Completion:
        return self._chat.finish()


def json_event(data: str, provider: str) -> dict[str, Any]:
    """One stream event's JSON object; an `error` event or a payload that is not a JSON object
    is a `ProviderError`."""
    # A malformed event comes from a server that answered 200: as with a malformed body, another
    # try is not expected to help.
    try:
        event = json.loads(data)
    except ValueError as exc:
        raise provider_error(
            provider, "stream event is not JSON", status_code=200, detail=data[:200]
        ) from exc
    if not isinstance(event, dict):
        raise provider_error(
            provider,
            f"stream event is not a JSON object ({type(event).__name__})",
            status_code=200,
            detail=data[:200],
        )
    if "error" in event:
        raise provider_error(provider, "error event in stream", detail=str(event["error"]))
    return event
