"""The OpenAI Chat Completions shape, shared by every adapter that speaks it.

OpenAI's own Chat adapter reads SDK objects; vLLM and llama.cpp's OpenAI-compatible route read
plain JSON. They all end in the same fields (content, refusal, finish reason, token counts), so
turning those fields into a `Completion`, and accumulating them from a stream, lives here once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sdk._result import Usage
from sdk.providers._base import Completion, CompletionRequest, TextDelta
from sdk.providers._errors import provider_error
from sdk.providers._http import sse_data
from sdk.stop_reason import StopReason

__all__ = [
    "ChatStream",
    "chat_completion",
    "chat_messages",
    "read_chat_body",
]


def chat_messages(request: CompletionRequest) -> list[dict[str, str]]:
    """The request's conversation as chat messages, the system prompt first."""
    messages = [{"role": "system", "content": request.system}] if request.system else []
    messages.extend({"role": m.role, "content": m.content} for m in request.messages)
    return messages


def chat_completion(
    *,
    content: str | None,
    refusal: str | None,
    finish_reason: str | None,
    usage: Usage,
    model: str | None,
    request_id: str | None,
) -> Completion:
    """One normalized completion from a chat choice's fields.

    A refusal has its own field beside `finish_reason` (which then says `stop`): the refusal
    decides, so the raw stop reason is written `refusal`.
    """
    raw = "refusal" if refusal else finish_reason
    return Completion(
        text=content,
        stop_reason=StopReason.from_raw(raw, "openai_chat"),
        raw_stop_reason=raw,
        usage=usage,
        model=model,
        request_id=request_id,
        refusal=refusal or None,
    )


def read_chat_body(body: dict[str, Any], *, request_id: str | None = None) -> Completion:
    """A Chat Completions JSON body (from an OpenAI-compatible server) -> `Completion`."""
    choices = body.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    return chat_completion(
        content=message.get("content"),
        refusal=message.get("refusal"),
        finish_reason=choice.get("finish_reason"),
        usage=_usage(body.get("usage")),
        model=body.get("model"),
        request_id=request_id or body.get("id"),
    )


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))


@dataclass
class ChatStream:
    """Accumulates a chat stream's chunks; `finish()` gives the final `Completion`."""

    request_id: str | None = None
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    _content: list[str] = field(default_factory=list)
    _refusal: list[str] = field(default_factory=list)

    def feed(
        self,
        *,
        content: str | None,
        refusal: str | None,
        finish_reason: str | None,
        model: str | None = None,
    ) -> TextDelta | None:
        """One choice delta; returns the document text it adds, if any."""
        if model:
            self.model = model
        if finish_reason:
            self.finish_reason = finish_reason
        if refusal:
            self._refusal.append(refusal)
        if content:
            self._content.append(content)
            return TextDelta(content)
        return None

    def feed_body(self, chunk: dict[str, Any]) -> TextDelta | None:
        """One JSON chunk from an OpenAI-compatible server."""
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not choices:
            return None
        delta = choices[0].get("delta") or {}
        return self.feed(
            content=delta.get("content"),
            refusal=delta.get("refusal"),
            finish_reason=choices[0].get("finish_reason"),
            model=chunk.get("model"),
        )

    def feed_sse(self, line: str, provider: str) -> TextDelta | None:
        """One line of an OpenAI-compatible server's SSE stream (`data: {...}`, `data: [DONE]`)."""
        data = sse_data(line)
        if not data or data == "[DONE]":
            return None
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise provider_error(provider, "stream event is not JSON", detail=data[:200]) from exc
        if "error" in chunk:
            raise provider_error(provider, "error event in stream", detail=str(chunk["error"]))
        return self.feed_body(chunk)

    def finish(self) -> Completion:
        """The completion; without a finish reason (a cut stream) the stop reason is `other`."""
        content = "".join(self._content)
        refusal = "".join(self._refusal)
        return chat_completion(
            content=content if content or not refusal else None,
            refusal=refusal or None,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
            request_id=self.request_id,
        )
