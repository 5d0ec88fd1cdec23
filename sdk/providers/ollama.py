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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from sdk._result import Usage
from sdk.providers._base import Codec, Completion, CompletionRequest, Exchange, Reply, TextDelta
from sdk.providers._chat import chat_messages, json_event
from sdk.providers._control_tokens import (
    ControlTokenPolicy,
    ControlTokens,
    check_policy,
    check_request,
)
from sdk.providers._errors import provider_error
from sdk.providers._http import DEFAULT_TIMEOUT, OneRouteProvider
from sdk.schema.dialects import OLLAMA
from sdk.stop_reason import StopReason

__all__ = [
    "ChatLineStream",
    "OllamaCodec",
    "OllamaProvider",
    "build_request",
    "read_response",
]

_PATH = "/api/chat"

# Request fields that live at the top level of the body; other options go in `options`.
_TOP_LEVEL = frozenset({"keep_alive", "think", "tools"})


def build_request(
    request: CompletionRequest, *, model: str, schema: dict[str, Any], stream: bool = False
) -> dict[str, Any]:
    """The `/api/chat` body. Sampling options (`temperature`, ...) go in Ollama's `options`."""
    options: dict[str, Any] = {"num_predict": request.max_tokens}
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request),
        "format": schema,
        "stream": stream,
        "options": options,
    }
    for key, value in request.options.items():
        (body if key in _TOP_LEVEL else options)[key] = value
    return body


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
    )


class ChatLineStream:
    """Ollama's stream: one JSON object a line, the last with `done: true`."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._last: dict[str, Any] | None = None

    def feed(self, line: str) -> TextDelta | None:
        if not line.strip():
            return None
        event = json_event(line, "ollama")
        message = event.get("message") or {}
        piece = message.get("content") or "" if isinstance(message, dict) else None
        if not isinstance(piece, str):
            raise ValueError("stream line has no message with string content")
        if piece:
            self._parts.append(piece)
        if event.get("done"):
            self._last = event
        return TextDelta(piece) if piece else None

    def finish(self) -> Completion:
        if self._last is None:
            raise provider_error("ollama", "stream ended before its final event")
        message = {**(self._last.get("message") or {}), "content": "".join(self._parts)}
        return read_response({**self._last, "message": message})


class OllamaCodec(Codec):
    """Ollama's `/api/chat` wire format (no I/O)."""

    provider = "ollama"

    def __init__(
        self,
        model: str,
        wire: Callable[[CompletionRequest], dict[str, Any]],
        control_tokens: ControlTokenPolicy = "reject",
        extra_control_tokens: Iterable[str] = (),
    ) -> None:
        self.model = model
        self._wire = wire
        self.control_tokens: ControlTokenPolicy = check_policy(control_tokens)
        self._control_strings = ControlTokens.families(extra_control_tokens)

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        # The server renders the template and tokenizes it with special tokens parsed.
        check_request(request, self._control_strings, policy=self.control_tokens, server="ollama")
        body = build_request(request, model=self.model, schema=self._wire(request), stream=stream)
        return Exchange(_PATH, body, stream)

    def read(self, reply: Reply) -> Completion:
        return read_response(reply.body)

    def reader(self, request_id: str | None) -> ChatLineStream:
        return ChatLineStream()


class OllamaProvider(OneRouteProvider):
    """An Ollama server: `OllamaProvider("http://127.0.0.1:11434", model="qwen3:8b")`."""

    name = "ollama"
    dialect = OLLAMA
    path = _PATH

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:11434",
        *,
        model: str,
        control_tokens: ControlTokenPolicy = "reject",
        extra_control_tokens: Iterable[str] = (),
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            base_url, model=model, http_client=http_client, timeout=timeout, headers=headers
        )
        self.codec = OllamaCodec(model, self._schema, control_tokens, extra_control_tokens)

    def _schema(self, request: CompletionRequest) -> dict[str, Any]:
        wire = self.wire_schema(request.contract)
        assert wire is not None  # Ollama always has its dialect
        return wire.schema
