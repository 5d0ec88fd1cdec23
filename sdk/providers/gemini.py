"""Gemini, through the official `google-genai` client you pass in (`google.genai.Client`).

The schema goes as `response_json_schema` (with `response_mime_type: application/json`) in the
Gemini dialect (`sdk.schema.dialects.GEMINI`): what the API does not take (`const`, `allOf`,
exclusive bounds, string lengths, patterns, most formats) is removed, reported in
`Result.removed`, hinted in the description, and still checked by the parser.

The stop reason decides before the text is read: the candidate's `finishReason` (`STOP`,
`MAX_TOKENS`, `SAFETY`, `RECITATION`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, ...; the
filters become `ContentFiltered` with the blocked safety category), and a prompt the API blocked
before generating anything (`promptFeedback.blockReason`, no candidate) becomes a refusal
(`RefusedOutput`, raw stop reason `blocked:<reason>`, the category the harm category or the
reason). Thought parts (thinking summaries) are never part of the document.

Retries: the SDK owns them. The `google-genai` client retries only when given
`HttpOptions(retry_options=...)`; every request here carries its own
`http_options={"retry_options": {"attempts": 1}}`, which overrides the client's, so one failed
request is one attempt whatever the client was built with.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import asynccontextmanager
from contextlib import contextmanager
from operator import attrgetter
from typing import Any

from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from sdk._content import Text
from sdk._message import Message
from sdk._result import Usage
from sdk.errors import ProviderError
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import Reply
from sdk.providers._base import TextDelta
from sdk.providers._base import unsupported
from sdk.providers._boundary import Seen
from sdk.providers._errors import provider_error
from sdk.providers._profile import Profile
from sdk.providers._profile import finished
from sdk.providers._provider import Provider
from sdk.schema.dialects import GEMINI
from sdk.schema.dialects import to_wire
from sdk.stop_reason import StopReason

__all__ = [
    "GeminiCodec",
    "GeminiProvider",
    "GeminiStreamReader",
    "build_request",
    "read_response",
]

logger = logging.getLogger(__name__)

_NAME = "gemini"
# The client's own retries are off for every request we send (see the module docstring).
_NO_RETRIES = {"retry_options": {"attempts": 1}}
# The REST body's fields that the SDK's request writes, in both spellings the API reads (a raw
# field goes into the REST body as it is, after the client wrote its own): a raw
# `generationConfig` would replace the schema and the JSON mime type. Every field they hold has a
# `GenerateContentConfig` name, which `{"config": {...}}` takes.
_REST_OWNED = ("generationConfig", "generation_config", "systemInstruction", "system_instruction",
               "tools", "toolConfig", "tool_config")
GEMINI_WIRE = Profile(
    _NAME,
    GEMINI,
    target="gemini",
    options={name: f"config.{wire}" for name, wire in (
        ("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"),
        ("seed", "seed"), ("stop", "stop_sequences"), ("presence_penalty", "presence_penalty"),
        ("frequency_penalty", "frequency_penalty"))},
    owned=frozenset({"model", "contents", "messages", "stream", "config.system_instruction",
                     "config.max_output_tokens", "config.response_mime_type",
                     "config.response_json_schema", "config.response_schema",
                     "config.http_options", "config.tools", "config.tool_config",
                     "config.automatic_function_calling", *_REST_OWNED}),
    fields={"model": None, "contents": None,
            "config": frozenset(genai_types.GenerateContentConfig.model_fields)},
    raw_field="config.http_options.extra_body",
)  # fmt: skip
"""The `generateContent` wire: `extra_body` may add `GenerateContentConfig` fields (`{"config":
{"safety_settings": ...}}`), never over the SDK's; any other field goes into the REST body as it
is (`http_options.extra_body`)."""


def build_request(request: CompletionRequest, *, model: str) -> dict[str, Any]:
    """The keyword arguments of `client.models.generate_content` for `request`: a JSON document
    (`response_json_schema`) or free text. Gemini has no grammar surface: `UnsupportedRequest`.
    Images and PDFs go as inline bytes; a URL part is refused before sending (`UnsupportedRequest`:
    the API reads only files it hosts)."""
    if request.kind == "grammar":
        raise unsupported(_NAME, "a grammar", ["json_schema documents", "free text"])
    if request.kind == "tools":
        raise unsupported(_NAME, "tool calls", ["json_schema documents", "free text"])
    config: dict[str, Any] = {
        "max_output_tokens": request.max_tokens,
        "http_options": dict(_NO_RETRIES),
    }
    if request.system:
        config["system_instruction"] = request.system
    if request.contract is not None:
        config["response_mime_type"] = "application/json"
        config["response_json_schema"] = to_wire(request.contract, GEMINI).schema
    contents = [
        {"role": "model" if m.role == "assistant" else "user", "parts": _parts(m)}
        for m in request.messages
    ]
    body = {"model": model, "contents": contents, "config": config}
    return finished(body, request.options, request.extra_body, GEMINI_WIRE)


def _parts(message: Message) -> list[dict[str, Any]]:
    """A turn's content as Gemini parts: text, and images and PDFs as inline bytes."""
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, Text):
            parts.append({"text": part.text})
        elif part.url is not None:
            raise unsupported(_NAME, f"{type(part).__name__} URLs", ["image and PDF bytes"])
        else:
            parts.append({"inline_data": {"mime_type": part.media_type, "data": part.data}})
    return parts


def read_response(
    response: genai_types.GenerateContentResponse, *, request_id: str | None = None
) -> Completion:
    """A `GenerateContentResponse` -> `Completion`. A reply with neither a candidate nor a
    blocked prompt is unusable: `ValueError` (the fault boundary makes it a `ProviderError`)."""
    state = GeminiStreamReader(request_id)
    state.feed(response)
    if not state.ended:
        raise ValueError("the reply has no candidate and no prompt feedback block")
    return state.finish()


def _usage(metadata: genai_types.GenerateContentResponseUsageMetadata | None) -> Usage:
    """Gemini's usage: the prompt count includes the cached tokens, the candidates' count
    excludes the thoughts."""
    if metadata is None:
        return Usage()
    return Usage(
        input_tokens=metadata.prompt_token_count or 0,
        output_tokens=metadata.candidates_token_count or 0,
        cache_read_tokens=metadata.cached_content_token_count or 0,
        reasoning_tokens=metadata.thoughts_token_count or 0,
    )


def _blocked_category(ratings: Iterable[genai_types.SafetyRating] | None) -> str | None:
    for rating in ratings or ():
        if rating.blocked and rating.category is not None:
            return str(rating.category.value)
    return None


def _name(value: Any) -> str:
    """An enum member's wire value (the SDK keeps unknown values as plain strings)."""
    return str(getattr(value, "value", value))


class GeminiStreamReader:
    """Accumulates `GenerateContentResponse` chunks (a whole reply is one chunk) into the
    document and, at the end, one `Completion`."""

    def __init__(self, request_id: str | None = None) -> None:
        self.request_id = request_id
        self._parts: list[str] = []
        self._model: str | None = None
        self._usage = Usage()
        self._finish: str | None = None
        self._blocked: str | None = None
        self._category: str | None = None
        self._message: str | None = None

    @property
    def ended(self) -> bool:
        """Whether a finish reason or a prompt block has arrived."""
        return self._finish is not None or self._blocked is not None

    def feed(self, chunk: genai_types.GenerateContentResponse) -> TextDelta | None:
        """One chunk; returns the document text it adds, if any."""
        if not isinstance(chunk, genai_types.GenerateContentResponse):
            raise TypeError(f"expected a GenerateContentResponse, got {type(chunk).__name__}")
        self._model = chunk.model_version or self._model
        self.request_id = self.request_id or chunk.response_id
        if chunk.usage_metadata is not None:
            self._usage = _usage(chunk.usage_metadata)  # cumulative: the last one counts
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self._blocked = _name(feedback.block_reason)
            self._category = _blocked_category(feedback.safety_ratings) or self._blocked
            self._message = feedback.block_reason_message
        if not chunk.candidates:
            return None
        candidate = chunk.candidates[0]
        piece = "".join(
            part.text
            for part in (candidate.content.parts or () if candidate.content is not None else ())
            if part.text and not part.thought
        )
        if candidate.finish_reason is not None:
            self._finish = _name(candidate.finish_reason)
            self._category = _blocked_category(candidate.safety_ratings) or self._category
            self._message = candidate.finish_message or self._message
        if piece:
            self._parts.append(piece)
            return TextDelta(piece)
        return None

    def finish(self) -> Completion:
        """The completion; a stream that ended with neither a finish reason nor a block was
        cut: `ProviderError`."""
        if not self.ended:
            raise provider_error(
                _NAME, "stream ended before its final event", request_id=self.request_id
            )
        text = "".join(self._parts)
        if self._blocked is not None and self._finish is None:
            raw = f"blocked:{self._blocked}"
            refusal = self._message or f"the prompt was blocked ({self._blocked})"
            return Completion(
                text=text or None,
                stop_reason=StopReason.REFUSAL,
                raw_stop_reason=raw,
                usage=self._usage,
                model=self._model,
                request_id=self.request_id,
                refusal=refusal,
                refusal_category=self._category,
            )
        stop = StopReason.from_raw(self._finish, _NAME)
        filtered = stop is StopReason.CONTENT_FILTER
        return Completion(
            text=text if text or not filtered else None,
            stop_reason=stop,
            raw_stop_reason=self._finish,
            usage=self._usage,
            model=self._model,
            request_id=self.request_id,
            refusal=(self._message or text or None) if filtered else None,
            refusal_category=(self._category or self._finish) if filtered else None,
        )


def map_error(exc: genai_errors.APIError) -> ProviderError:
    """A `google-genai` API error -> `ProviderError` (raise it `from exc`). Gemini says how long
    to wait in the body (`RetryInfo.retryDelay`, "7s"), not in a header: that becomes
    `retry_after` when no header gave one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    error = provider_error(
        _NAME,
        f"{type(exc).__name__} ({exc.status or exc.code})",
        status_code=exc.code if isinstance(exc.code, int) and exc.code >= 100 else None,
        headers=headers if headers is not None else None,
        detail=exc.message or "",
    )
    if error.retry_after is None:
        error.retry_after = _retry_delay(exc.details)
    return error


def _retry_delay(details: Any) -> float | None:
    error = details.get("error") if isinstance(details, dict) else None
    items = error.get("details") if isinstance(error, dict) else None
    for item in items if isinstance(items, list) else ():
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0.0, float(delay[:-1]))
            except ValueError:
                return None
    return None


class GeminiCodec(Codec):
    """The `generateContent` wire format through the `google-genai` client (no I/O)."""

    profile = GEMINI_WIRE

    def __init__(self, model: str) -> None:
        self.model = model

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        logger.debug(
            "gemini generate_content model=%s max_tokens=%d messages=%d",
            self.model,
            request.max_tokens,
            len(request.messages),
        )
        body = build_request(request, model=self.model)
        if stream:
            return Exchange("models.generate_content_stream", body)
        # The raw body, read here: the client's own parse drops what it does not know, and an
        # unusable reply must reach the error as it was sent.
        body["config"]["should_return_http_response"] = True
        return Exchange("models.generate_content", body)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        raw = _raw_body(reply.body)
        if raw is None:  # a reply object built by hand (no raw body): read as it is
            return read_response(reply.body, request_id=reply.request_id)
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError(f"reply is JSON but not an object ({type(body).__name__})")
        response = genai_types.GenerateContentResponse.model_validate(body)
        return read_response(response, request_id=reply.request_id)

    def reader(self, request: CompletionRequest, request_id: str | None) -> GeminiStreamReader:
        return GeminiStreamReader(request_id)

    def classify(self, error: BaseException) -> ProviderError | None:
        if isinstance(error, genai_errors.APIError):
            return map_error(error)
        if isinstance(error, genai_errors.UnknownApiResponseError):
            # Only a stream gets here (whole replies are parsed by `read`): the client buffers
            # lines until they make a whole JSON event, and this is what was left when the
            # stream ended, an event cut short. Transient, as any cut stream.
            return provider_error(
                _NAME, "stream ended in the middle of an event", detail=str(error)
            )
        return None


# --- transports: the client's methods, with the time left as the request's own timeout ---


def _with_timeout(body: dict[str, Any], deadline: float | None) -> dict[str, Any]:
    """The call's keyword arguments with the time left (milliseconds) as the request timeout."""
    if deadline is None:
        return body
    config = dict(body["config"])
    millis = max(1, int((deadline - time.monotonic()) * 1000))
    config["http_options"] = {**config["http_options"], "timeout": millis}
    return {**body, "config": config}


def _raw_body(response: Any) -> str | None:
    body = getattr(getattr(response, "sdk_http_response", None), "body", None)
    return body if isinstance(body, str) else None


def _record(seen: Seen, response: Any) -> None:
    raw = _raw_body(response)
    seen.body = raw if raw is not None else response
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        response_id = parsed.get("responseId") if isinstance(parsed, dict) else None
        seen.request_id = response_id if isinstance(response_id, str) else None
    else:
        seen.request_id = getattr(response, "response_id", None)


class GeminiTransport:
    """A `google.genai.Client`'s sync methods."""

    def __init__(self, client: genai.Client) -> None:
        self.client = client

    def send(self, exchange: Exchange, seen: Seen, deadline: float | None) -> Reply:
        method = attrgetter(exchange.route)(self.client)
        reply = method(**_with_timeout(exchange.body, deadline))
        _record(seen, reply)
        return Reply(reply, 200, seen.request_id)

    @contextmanager
    def open(self, exchange: Exchange, seen: Seen, deadline: float | None) -> Iterator[Any]:
        events = attrgetter(exchange.route)(self.client)(**_with_timeout(exchange.body, deadline))
        try:
            yield iter(events)
        finally:
            events.close()


class AsyncGeminiTransport:
    """A `google.genai.Client`'s async methods (`client.aio`)."""

    def __init__(self, client: genai.Client) -> None:
        self.client = client

    async def send(self, exchange: Exchange, seen: Seen, deadline: float | None) -> Reply:
        method = attrgetter(exchange.route)(self.client.aio)
        reply = await method(**_with_timeout(exchange.body, deadline))
        _record(seen, reply)
        return Reply(reply, 200, seen.request_id)

    @asynccontextmanager
    async def open(
        self, exchange: Exchange, seen: Seen, deadline: float | None
    ) -> AsyncIterator[AsyncIterator[Any]]:
        method = attrgetter(exchange.route)(self.client.aio)
        events = await method(**_with_timeout(exchange.body, deadline))
        try:
            yield events
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()


class GeminiProvider(Provider):
    """Gemini through your `google.genai.Client` (sync calls use it, async calls `client.aio`).

    provider = GeminiProvider(genai.Client(), model="gemini-2.5-flash")

    Every request turns the client's own retries off (`retry_options.attempts=1`): the SDK owns
    retries, so one failed request is one attempt.
    """

    def __init__(
        self, client: genai.Client, *, model: str, extra_body: Mapping[str, Any] | None = None
    ) -> None:
        if not isinstance(client, genai.Client):
            raise TypeError(f"client must be a google.genai.Client, not {client!r}")
        self.client = client
        self._model = model
        self.codec = GeminiCodec(model)
        self._keep_extra_body(extra_body)

    def __repr__(self) -> str:
        return f"GeminiProvider(model={self._model!r})"

    @property
    def model(self) -> str:
        return self._model

    def secrets(self) -> Iterable[str]:
        key = getattr(getattr(self.client, "_api_client", None), "api_key", None)
        return [key] if isinstance(key, str) else []

    def transport(self) -> GeminiTransport:
        return GeminiTransport(self.client)

    def atransport(self) -> AsyncGeminiTransport:
        return AsyncGeminiTransport(self.client)
