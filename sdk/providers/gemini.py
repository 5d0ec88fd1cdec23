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
from functools import cache
from operator import attrgetter
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Self
from typing import assert_never

from sdk._message import Message
from sdk._result import Usage
from sdk._tools import ToolOffer
from sdk._values.content import Text
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import Dialect
from sdk._values.profile import Pricing
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk.errors import ProviderError
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Reply
from sdk.providers._base import TextDelta
from sdk.providers._base import unsupported
from sdk.providers._endpoint import client_headers
from sdk.providers._endpoint import client_query
from sdk.providers._endpoint import gemini_base_url
from sdk.providers._errors import provider_error
from sdk.providers._headers import header_digest
from sdk.providers._headers import header_scope
from sdk.providers._profile import NO_SAMPLING
from sdk.providers._profile import WireProfile
from sdk.providers._profile import finished
from sdk.providers._provider import Provider
from sdk.providers._provider import endpoint
from sdk.providers._transports import Stream
from sdk.schema.dialects import to_wire
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types

__all__ = [
    "GEMINI",
    "GEMINI_DIALECT",
    "GeminiCodec",
    "GeminiProvider",
    "GeminiStreamReader",
    "build_request",
    "read_response",
]

logger = logging.getLogger(__name__)

GEMINI_DIALECT = Dialect(
    name="gemini",
    # `response_json_schema`, as the google-genai client documents it: $id, $defs, $ref,
    # $anchor, type, format, title, description, enum, items, prefixItems, minItems, maxItems,
    # minimum, maximum, anyOf, oneOf (read as anyOf), properties, additionalProperties,
    # required. No `const`, `allOf`, exclusive bounds, multipleOf, string lengths or pattern.
    keywords=(CORE_KEYWORDS - {"const"})
    | {"$id", "$anchor", "format", "prefixItems", "minItems", "maxItems", "minimum", "maximum"},
    formats=frozenset({"date-time", "date", "time"}),
    one_of_as_any_of=True,
    ref_siblings="drop",
    hint_removed=True,
    doc="Gemini `response_json_schema`: numeric minimum/maximum and item counts kept; no "
    "const, allOf, exclusive bounds, multipleOf, minLength/maxLength or pattern; three "
    "string formats; a $ref takes no sibling keys.",
)

_FILTERS = (
    "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION",
)  # fmt: skip
_NOT_AN_END = (
    "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "LANGUAGE", "OTHER",
    "FINISH_REASON_UNSPECIFIED", "MALFORMED_RESPONSE", "MISSING_THOUGHT_SIGNATURE", "NO_IMAGE",
    "IMAGE_OTHER",
)  # fmt: skip
_BLOCKS = (
    "SAFETY", "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT", "IMAGE_SAFETY", "MODEL_ARMOR",
    "JAILBREAK", "BLOCKED_REASON_UNSPECIFIED",
)  # fmt: skip

# Gemini's `finishReason`; a prompt blocked before any candidate is `blocked:<blockReason>`, a
# refusal of the request. Safety, recitation, blocklist, prohibited content and personal data
# stops are the provider's filters; tool and language stops are not a document's end.
GEMINI = register(
    Profile(
        name="gemini",
        display_name="Gemini",
        aliases=frozenset({"google", "google_genai"}),
        stop_reasons={
            "STOP": StopReason.END_TURN,
            "MAX_TOKENS": StopReason.MAX_TOKENS,
            **dict.fromkeys(_FILTERS, StopReason.CONTENT_FILTER),
            **dict.fromkeys(_NOT_AN_END, StopReason.OTHER),
            **{f"blocked:{reason}": StopReason.REFUSAL for reason in _BLOCKS},
        },
        dialect=GEMINI_DIALECT,
        carries={"documents": "response_json_schema, application/json"},
        pricing=Pricing("google", output_excludes_reasoning=True),
        telemetry_name="gcp.gemini",
        provider="sdk.providers.gemini:GeminiProvider",
    )
)
"""The Gemini family: everything the SDK knows about it (`sdk.providers.profile`)."""

_NAME = GEMINI.name
# The client's own retries are off for every request we send (see the module docstring).
_NO_RETRIES = {"retry_options": {"attempts": 1}}
# The REST body's fields that the SDK's request writes, in both spellings the API reads (a raw
# field goes into the REST body as it is, after the client wrote its own): a raw
# `generationConfig` would replace the schema and the JSON mime type. Every field they hold has a
# `GenerateContentConfig` name, which `{"config": {...}}` takes.
_REST_OWNED = ("generationConfig", "generation_config", "systemInstruction", "system_instruction",
               "tools", "toolConfig", "tool_config")
@cache
def generate_content_wire() -> WireProfile:
    """The `generateContent` wire: `extra_body` may add `GenerateContentConfig` fields
    (`{"config": {"safety_settings": ...}}`, those the installed `google-genai` takes), never
    over the SDK's; any other field goes into the REST body as it is (`http_options.extra_body`).
    """
    from google.genai import types as genai_types

    return WireProfile(
        GEMINI,
        GEMINI_DIALECT,
        target="gemini",
        options={name: f"config.{wire}" for name, wire in (
            ("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"),
            ("seed", "seed"), ("stop", "stop_sequences"),
            ("presence_penalty", "presence_penalty"), ("frequency_penalty", "frequency_penalty"))},
        owned=frozenset({"model", "contents", "messages", "stream", "config.system_instruction",
                         "config.max_output_tokens", "config.response_mime_type",
                         "config.response_json_schema", "config.response_schema",
                         "config.http_options", "config.tools", "config.tool_config",
                         "config.automatic_function_calling", "config.candidate_count",
                         *_REST_OWNED}),
        fields={"model": None, "contents": None,
                "config": frozenset(genai_types.GenerateContentConfig.model_fields)},
        raw_field="config.http_options.extra_body",
    )  # fmt: skip


def build_request(request: CompletionRequest, *, model: str) -> dict[str, Any]:
    """The keyword arguments of `client.models.generate_content` for `request`: a JSON document
    (`response_json_schema`) or free text. Gemini has no grammar surface: `UnsupportedRequest`.
    Images and PDFs go as inline bytes; a URL part is refused before sending (`UnsupportedRequest`:
    the API reads only files it hosts)."""
    config: dict[str, Any] = {
        "max_output_tokens": request.max_tokens,
        "http_options": dict(_NO_RETRIES),
    }
    if request.system:
        config["system_instruction"] = request.system
    match request.output:
        case JsonDocument(contract):
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = to_wire(contract, GEMINI_DIALECT).schema
        case FreeText():
            pass
        case GrammarSentence():
            raise unsupported(_NAME, "a grammar", ["json_schema documents", "free text"])
        case ToolOffer():
            raise unsupported(_NAME, "tool calls", ["json_schema documents", "free text"])
        case unknown:
            assert_never(unknown)
    contents = [
        {"role": "model" if m.role == "assistant" else "user", "parts": _parts(m)}
        for m in request.messages
    ]
    body = {"model": model, "contents": contents, "config": config}
    return finished(body, request.options, request.extra_body, generate_content_wire())


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
        from google.genai import types as genai_types

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
            return TextDelta(piece, self._usage)
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
        retry_after=_retry_delay(exc.details),  # when no header said it
    )
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

    def __init__(self, model: str) -> None:
        self.model = model
        self.profile = generate_content_wire()

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
        from google.genai import types as genai_types

        response = genai_types.GenerateContentResponse.model_validate(body)
        return read_response(response, request_id=reply.request_id)

    def reader(self, request: CompletionRequest, request_id: str | None) -> GeminiStreamReader:
        return GeminiStreamReader(request_id)

    def classify(self, error: BaseException) -> ProviderError | None:
        from google.genai import errors as genai_errors  # loaded: a provider was made

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


def _reply(response: Any) -> Reply:
    """The reply, with its raw body (what an error shows) and its response id."""
    raw = _raw_body(response)
    if raw is None:
        return Reply(response, 200, getattr(response, "response_id", None), raw=response)
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    response_id = parsed.get("responseId") if isinstance(parsed, dict) else None
    return Reply(response, 200, response_id if isinstance(response_id, str) else None, raw=raw)


class GeminiTransport:
    """A `google.genai.Client`'s sync methods."""

    def __init__(self, client: genai.Client) -> None:
        self.client = client

    def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        method = attrgetter(exchange.route)(self.client)
        return _reply(method(**_with_timeout(exchange.body, deadline)))

    @contextmanager
    def open(self, exchange: Exchange, deadline: float | None) -> Iterator[Stream[Iterator[Any]]]:
        events = attrgetter(exchange.route)(self.client)(**_with_timeout(exchange.body, deadline))
        try:
            yield Stream(iter(events))
        finally:
            events.close()


class AsyncGeminiTransport:
    """A `google.genai.Client`'s async methods (`client.aio`)."""

    def __init__(self, client: genai.Client) -> None:
        self.client = client

    async def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        method = attrgetter(exchange.route)(self.client.aio)
        return _reply(await method(**_with_timeout(exchange.body, deadline)))

    @asynccontextmanager
    async def open(
        self, exchange: Exchange, deadline: float | None
    ) -> AsyncIterator[Stream[AsyncIterator[Any]]]:
        method = attrgetter(exchange.route)(self.client.aio)
        events = await method(**_with_timeout(exchange.body, deadline))
        try:
            yield Stream(events)
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

    _extra: ClassVar[str] = "gemini"
    """The extra that installs the client it is made on (`sdk.wire` names it when missing)."""

    def __init__(
        self, client: genai.Client, *, model: str, extra_body: Mapping[str, Any] | None = None
    ) -> None:
        from google import genai

        if not isinstance(client, genai.Client):
            raise TypeError(f"client must be a google.genai.Client, not {client!r}")
        options = getattr(getattr(client, "_api_client", None), "_http_options", None)
        gemini_base_url(getattr(options, "base_url", None))
        self.client = client
        self._model = model
        self.codec = GeminiCodec(model)
        self._keep_extra_body(extra_body)
        self._client_extra_body()

    @classmethod
    def _in_memory(cls, settings: Mapping[str, Any], *, http_client: Any, api_key: str) -> Self:
        """`sdk.wire`'s hook (private, but kept stable): this provider with `settings` (the
        constructor's keyword arguments, and the client's `base_url`) on a `google.genai.Client`
        that sends through `http_client` (an `httpx2.Client` on an in-memory transport) with the
        placeholder `api_key`."""
        from google import genai

        given = dict(settings)
        options = genai.types.HttpOptions(httpx_client=http_client,
                                          base_url=given.pop("base_url", None))  # fmt: skip
        return cls(genai.Client(api_key=api_key, http_options=options), **given)

    def __repr__(self) -> str:
        return f"GeminiProvider(model={self._model!r})"

    def _client_extra_body(self) -> dict[str, Any]:
        """The client's own `http_options.extra_body`, vetted as `extra_body=` is: google-genai
        merges it into every request's REST body, over the SDK's (a `contents` there replaces
        the prompt, a `generationConfig` the schema), so a field the SDK owns is a `ValueError`
        naming it. Read when the provider is made and again at every call and cache key: the
        client's `HttpOptions` (its `extra_body` dict) may be changed after."""
        options = getattr(getattr(self.client, "_api_client", None), "_http_options", None)
        body = getattr(options, "extra_body", None)
        if not body:
            return {}
        try:
            self.vet_options(NO_SAMPLING, body)
        except ValueError as exc:
            raise ValueError(
                f"{exc} (in the google.genai.Client's http_options.extra_body, which it merges "
                "into every request)"
            ) from None
        return dict(body)

    @property
    def model(self) -> str:
        return self._model

    def cache_scope(self) -> dict[str, Any]:
        # Where it runs: the endpoint and API version, and on Vertex AI the project and location
        # (in its paths).
        api = getattr(self.client, "_api_client", None)
        options = getattr(api, "_http_options", None)
        scope = {
            **super().cache_scope(),
            "project": getattr(api, "project", None),
            "location": getattr(api, "location", None),
            "endpoint": endpoint(getattr(options, "base_url", None) or ""),
            "api_version": getattr(options, "api_version", None),
        }
        # The client's own `http_options.extra_body` (vetted: no field the SDK owns): merged
        # into every request's body (`safetySettings` decide answers), unless a request brings
        # its own.
        client_body = self._client_extra_body()
        if client_body:
            scope["client_extra_body"] = dict(client_body)
        return scope

    def keyed_query(self) -> str:
        return client_query(self.client)

    def keyed_headers(self) -> dict[str, str]:
        # A gateway may route by a header the client was given (`http_options.headers`; the
        # gateway's parameters go there, `gemini_base_url`), or one of its HTTP clients: async
        # calls go through another, whose headers decide too when they are not the same.
        secrets = self.secrets()
        headers = header_scope(client_headers(self.client), secrets)
        sent_async = header_scope(client_headers(self.client, asynchronous=True), secrets)
        if sent_async != headers:
            # (a new dict: `header_scope`'s is shared)
            return {**headers, "(async calls)": header_digest(repr(sent_async))}
        return headers

    def secrets(self) -> Iterable[str]:
        key = getattr(getattr(self.client, "_api_client", None), "api_key", None)
        return [key] if isinstance(key, str) else []

    def transport(self) -> GeminiTransport:
        self._client_extra_body()  # (every call, before anything is sent: see there)
        return GeminiTransport(self.client)

    def atransport(self) -> AsyncGeminiTransport:
        self._client_extra_body()
        return AsyncGeminiTransport(self.client)
