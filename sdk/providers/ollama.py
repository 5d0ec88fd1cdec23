"""Ollama: `POST /api/chat` with the schema as `format`.

Ollama converts the schema with llama.cpp's grammar generator, so it goes in the Ollama dialect
(the llama.cpp rules: every property required to keep the generation order, bounds on integers
only). The stop reason is `done_reason` (`stop`, `length`); streaming is newline-delimited JSON,
the last line with `done: true`.

Ollama renders the model's template and tokenizes it with special tokens parsed: content is
checked for control-token strings under `control_tokens="reject"` (default) or `"allow"`
(unsafe), with `extra_control_tokens=` for the model's own, as for vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from typing import Unpack
from typing import assert_never

from sdk._result import Usage
from sdk._tools import Tool
from sdk._tools import ToolCall
from sdk._tools import ToolOffer
from sdk._values.content import Image
from sdk._values.content import Text
from sdk._values.dialect import LLAMACPP_CONVERTER
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Reply
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.providers._base import unsupported
from sdk.providers._chat import chat_messages
from sdk.providers._chat import chat_tools
from sdk.providers._chat import json_event
from sdk.providers._chat import read_chat_tool_calls
from sdk.providers._errors import provider_error
from sdk.providers._http import OneRouteCodec
from sdk.providers._http import OneRouteProvider
from sdk.providers._http import ServerSettings
from sdk.providers._profile import WireProfile
from sdk.providers._profile import finished
from sdk.stop_reason import StopReason

__all__ = [
    "OLLAMA",
    "OLLAMA_DIALECT",
    "OllamaCodec",
    "OllamaProvider",
    "OllamaStreamReader",
    "build_request",
    "read_response",
]

_PATH = "/api/chat"

OLLAMA_DIALECT = replace(
    LLAMACPP_CONVERTER,
    name="ollama",
    doc="Ollama `format`: converted by llama.cpp's grammar generator, so the llama.cpp rules.",
)

OLLAMA = register(
    Profile(
        name="ollama",
        display_name="Ollama",
        stop_reasons={"stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS},
        dialect=OLLAMA_DIALECT,
        carries={"documents": "format (a JSON schema)", "tools": "tools"},
        provider="sdk.providers.ollama:OllamaProvider",
    )
)
"""The Ollama family: everything the SDK knows about it (`sdk.providers.profile`)."""

OLLAMA_WIRE = WireProfile(
    OLLAMA,
    OLLAMA_DIALECT,
    target="ollama",
    tools=True,
    options={name: f"options.{name}" for name in ("temperature", "top_p", "top_k", "seed",
             "stop", "presence_penalty", "frequency_penalty", "repeat_penalty")},
    owned=frozenset({"model", "messages", "stream", "format", "tools", "options.num_predict"}),
)  # fmt: skip
"""Ollama's `/api/chat`: sampling options go in its `options`; `extra_body` may add other
`options` (`{"options": {"num_ctx": 8192}}`) or top-level fields (`keep_alive`, `think`)."""


def build_request(
    request: CompletionRequest, *, model: str, schema: dict[str, Any] | None, stream: bool = False
) -> dict[str, Any]:
    """The `/api/chat` body (no `format` for free text). Sampling options (`temperature`, ...)
    go in Ollama's `options`."""
    options: dict[str, Any] = {"num_predict": request.max_tokens}
    body: dict[str, Any] = {
        "model": model,
        "messages": _messages(request),
        "stream": stream,
        "options": options,
    }
    match request.output:
        case JsonDocument():
            if schema is not None:
                body["format"] = schema
        case ToolOffer() as offer if offer.choice != "none":
            # Ollama has no `tool_choice`: "none" sends no tools, a named tool is sent alone,
            # and the parser enforces "required" (a reply without a call is `MissingToolCall`).
            fields = chat_tools(offer, _parameters, named_choice=False, parallel=False)
            body["tools"] = fields["tools"]
        case ToolOffer() | FreeText():
            pass
        case GrammarSentence():
            raise unsupported("ollama", "a grammar", ["json_schema documents", "free text"])
        case unknown:
            assert_never(unknown)
    return finished(body, request.options, request.extra_body, OLLAMA_WIRE)


def _messages(request: CompletionRequest) -> list[dict[str, Any]]:
    """Chat messages, with a turn's images in Ollama's `images` field (base64)."""
    text_only = replace(
        request,
        messages=tuple(replace(m, content=m.text) for m in request.messages),
    )
    messages = chat_messages(text_only, "ollama", arguments="object")
    offset = 1 if request.system else 0
    for index, message in enumerate(request.messages):
        images = []
        for part in message.parts:
            if isinstance(part, Image) and part.data is not None:
                images.append(part.base64())
            elif not isinstance(part, Text):
                raise unsupported("ollama", f"{type(part).__name__} parts", ["text", "image bytes"])
        if images:
            messages[offset + index]["images"] = images
    return messages


def _parameters(tool: Tool) -> dict[str, Any]:
    return tool.wire(OLLAMA_DIALECT).schema


def read_response(body: Mapping[str, Any]) -> Completion:
    """An `/api/chat` reply (or the last line of its stream) -> `Completion`. A body without a
    message holding string content is unusable: `ValueError`."""
    message = body.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise ValueError("the reply has no message with string content")
    raw = body.get("done_reason")
    raw = raw if isinstance(raw, str) else None
    model = body.get("model")
    return Completion(
        text=content,
        stop_reason=StopReason.from_raw(raw, "ollama"),
        raw_stop_reason=raw,
        usage=Usage(int(body.get("prompt_eval_count") or 0), int(body.get("eval_count") or 0)),
        model=model if isinstance(model, str) else None,
        tool_calls=read_chat_tool_calls(
            message.get("tool_calls") if isinstance(message, dict) else None
        ),
    )


class OllamaStreamReader:
    """Ollama's stream: one JSON object a line, the last with `done: true`."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._calls: list[ToolCall] = []
        self._last: dict[str, Any] | None = None

    def feed(self, line: str) -> TextDelta | tuple[TextDelta, ...] | None:
        if not line.strip():
            return None
        event = json_event(line, "ollama")
        message = event.get("message") or {}
        piece = message.get("content") or "" if isinstance(message, dict) else None
        if not isinstance(piece, str):
            raise ValueError("stream line has no message with string content")
        deltas: list[TextDelta] = []
        if piece:
            self._parts.append(piece)
            deltas.append(TextDelta(piece))
        # Ollama sends each tool call whole (a line may hold several): a delta for each, with
        # all its arguments, beside the line's text.
        for call in read_chat_tool_calls(message.get("tool_calls")):
            index = len(self._calls)
            self._calls.append(call)
            deltas.append(ToolCallDelta(call.text, index=index, id=call.id or None, name=call.tool))
        if event.get("done"):
            self._last = event
        if not deltas:
            return None
        return deltas[0] if len(deltas) == 1 else tuple(deltas)

    def finish(self) -> Completion:
        if self._last is None:
            raise provider_error("ollama", "stream ended before its final event")
        message = {**(self._last.get("message") or {}), "content": "".join(self._parts)}
        message.pop("tool_calls", None)
        completion = read_response({**self._last, "message": message})
        return replace(completion, tool_calls=tuple(self._calls))


class OllamaCodec(OneRouteCodec):
    """Ollama's `/api/chat` wire format (no I/O)."""

    profile = OLLAMA_WIRE

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        schema = self.checked(request)
        body = build_request(request, model=self.model, schema=schema, stream=stream)
        return Exchange(_PATH, body)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        return read_response(reply.body)

    def reader(self, request: CompletionRequest, request_id: str | None) -> OllamaStreamReader:
        return OllamaStreamReader()


class OllamaProvider(OneRouteProvider[OllamaCodec]):
    """An Ollama server: `OllamaProvider("http://127.0.0.1:11434", model="qwen3:8b")`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:11434",
        *,
        model: str,
        **settings: Unpack[ServerSettings],
    ) -> None:
        super().__init__(
            base_url, settings, ServerSettings, lambda content: OllamaCodec(model, content)
        )
