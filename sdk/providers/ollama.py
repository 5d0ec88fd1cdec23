"""Ollama: `POST /api/chat` with the schema as `format`.

Ollama converts the schema with llama.cpp's grammar generator, so it goes in the Ollama dialect
(the llama.cpp rules: every property required to keep the generation order, bounds on integers
only). The stop reason is `done_reason` (`stop`, `length`); streaming is newline-delimited JSON,
the last line with `done: true`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from sdk._result import Usage
from sdk.providers._base import Completion, CompletionRequest, TextDelta
from sdk.providers._chat import chat_messages
from sdk.providers._errors import provider_error
from sdk.providers._http import DEFAULT_TIMEOUT, OneRouteProvider
from sdk.schema.dialects import OLLAMA
from sdk.stop_reason import StopReason

__all__ = ["OllamaProvider", "build_request", "read_response"]

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
    """An `/api/chat` reply (or the last line of its stream) -> `Completion`."""
    message = body.get("message") or {}
    raw = body.get("done_reason")
    return Completion(
        text=str(message.get("content", "")),
        stop_reason=StopReason.from_raw(raw, "ollama"),
        raw_stop_reason=raw,
        usage=Usage(int(body.get("prompt_eval_count") or 0), int(body.get("eval_count") or 0)),
        model=body.get("model"),
    )


class _ChatStream:
    def __init__(self) -> None:
        self._parts: list[str] = []
        self._last: dict[str, Any] = {}

    def feed(self, line: str) -> TextDelta | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise provider_error("ollama", "stream line is not JSON", detail=line[:200]) from exc
        if "error" in event:
            raise provider_error("ollama", "error in stream", detail=str(event["error"]))
        piece = (event.get("message") or {}).get("content") or ""
        if piece:
            self._parts.append(piece)
        if event.get("done"):
            self._last = event
        return TextDelta(piece) if piece else None

    def finish(self) -> Completion:
        message = {**(self._last.get("message") or {}), "content": "".join(self._parts)}
        return read_response({**self._last, "message": message})


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
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            base_url, model=model, http_client=http_client, timeout=timeout, headers=headers
        )

    def build(
        self, request: CompletionRequest, schema: dict[str, Any], stream: bool
    ) -> dict[str, Any]:
        return build_request(request, model=self.model, schema=schema, stream=stream)

    def read(self, body: dict[str, Any]) -> Completion:
        return read_response(body)

    def line_stream(self) -> _ChatStream:
        return _ChatStream()
