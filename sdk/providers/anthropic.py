"""Anthropic Messages API, through the official `anthropic` client you pass in.

Two modes:

- `"json_schema"` (default): structured outputs, `output_config.format` json_schema; the document
  is the reply's text.
- `"tool"`: a strict tool (`strict: true`) the model is forced to call (`tool_choice`); the
  document is the tool call's input. The clean stop is then `tool_use`.

The schema goes in the Anthropic dialect (`sdk.schema.dialects.ANTHROPIC`): what the API cannot
enforce (numeric and length bounds, patterns, most formats) is removed, reported in
`Result.removed`, hinted in the description, and still checked by the parser.

Unlike the SDK's own `messages.parse`, nothing here reads the text before the stop reason: a
refusal or a `max_tokens` cut reaches the parser with its stop reason and becomes
`RefusedOutput` / `TruncatedOutput`, not a bare validation error.

The family's profile (`ANTHROPIC`) is here too; the `anthropic` package is imported when a
provider is made, so naming the family or reading its stop reasons does not need it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Literal
from typing import Self
from typing import assert_never

from sdk._result import Usage
from sdk._tools import Tool
from sdk._tools import ToolCall
from sdk._tools import ToolOffer
from sdk._tools import arguments_object
from sdk._values.content import PDF
from sdk._values.content import Image
from sdk._values.content import Text
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import HOSTED_FORMATS
from sdk._values.dialect import Dialect
from sdk._values.dialect import GrammarLimits
from sdk._values.profile import Pricing
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk.contract import Contract
from sdk.errors import ProviderError
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Message as Turn
from sdk.providers._base import Reply
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.providers._base import check_model
from sdk.providers._base import unsupported
from sdk.providers._base import wire_name
from sdk.providers._endpoint import client_endpoint
from sdk.providers._endpoint import client_headers
from sdk.providers._endpoint import client_query
from sdk.providers._endpoint import keyed_parameters
from sdk.providers._errors import provider_error
from sdk.providers._errors import reply_request_id
from sdk.providers._headers import header_scope
from sdk.providers._logs import redact_request_logs
from sdk.providers._profile import WireProfile
from sdk.providers._profile import finished
from sdk.providers._profile import sdk_fields
from sdk.providers._prompt_cache import anthropic_breakpoints
from sdk.providers._provider import Provider
from sdk.providers._provider import endpoint
from sdk.providers._transports import AsyncSDKTransport
from sdk.providers._transports import SDKTransport
from sdk.schema.canonical import schema_info
from sdk.schema.dialects import to_wire
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message
    from anthropic.types import RawMessageStreamEvent

__all__ = [
    "ANTHROPIC",
    "ANTHROPIC_DIALECT",
    "AnthropicCodec",
    "AnthropicProvider",
    "AnthropicStreamReader",
    "AnthropicToolStreamReader",
    "build_request",
    "read_response",
    "read_tool_calls",
]

logger = logging.getLogger(__name__)

Mode = Literal["json_schema", "tool"]

ANTHROPIC_DIALECT = Dialect(
    name="anthropic",
    keywords=CORE_KEYWORDS | {"allOf", "format", "minItems"},
    formats=HOSTED_FORMATS | {"uri"},
    max_min_items=1,
    one_of_as_any_of=True,
    ref_siblings="drop",
    closed_objects=True,
    hint_removed=True,
    # Anthropic counts optional parameters and parameters with union types (`anyOf`, type
    # arrays: a nullable field is one) and compiles no recursion.
    limits=GrammarLimits(
        max_optional=24,
        max_unions=16,
        recursion=False,
        note="each optional field roughly doubles the compiled grammar",
    ),
    doc="Anthropic structured outputs and strict tools: no numeric or length bounds, no "
    "pattern, ten string formats, minItems 0 or 1, closed objects, $ref without siblings.",
)

ANTHROPIC = register(
    Profile(
        name="anthropic",
        display_name="Anthropic",
        aliases=frozenset({"claude"}),
        stop_reasons={
            "end_turn": StopReason.END_TURN,
            "max_tokens": StopReason.MAX_TOKENS,
            "stop_sequence": StopReason.STOP_SEQUENCE,
            "tool_use": StopReason.TOOL_USE,
            "pause_turn": StopReason.PAUSE_TURN,
            "refusal": StopReason.REFUSAL,
            "model_context_window_exceeded": StopReason.CONTEXT_WINDOW,
        },
        dialect=ANTHROPIC_DIALECT,
        carries={
            "documents": "structured outputs (output_config.format), or a forced strict tool",
            "tools": "strict tool use",
            "native_reasoning": "extended thinking",
        },
        pricing=Pricing("anthropic", input_excludes_cache=True),
        telemetry_name="anthropic",
        provider="sdk.providers.anthropic:AnthropicProvider",
    )
)
"""The Anthropic family: everything the SDK knows about it (`sdk.providers.profile`)."""


_THINKING_MIN_BUDGET = 1024  # the smallest thinking budget the API takes

# The sampling options the Messages API takes (those the installed SDK's `messages.create`
# has: recent models take no temperature, top_p or top_k), and the fields the SDK writes itself.
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
             "stop": "stop_sequences"}  # fmt: skip
_OWNED = frozenset(
    {"model", "max_tokens", "messages", "system", "thinking", "tools", "tool_choice",
     "output_config.format", "stream",
     # The beta's older spelling of the schema, and servers whose tools the model could call
     # instead of writing the document.
     "output_format", "mcp_servers"}
)  # fmt: skip


@cache
def profile(mode: Mode = "json_schema") -> WireProfile:
    """The Messages API's wire in `mode` (tool mode ends a document with `tool_use`), with the
    keyword arguments the installed `anthropic` package's `messages.create` takes."""
    from anthropic.resources.messages import Messages

    fields = sdk_fields(Messages.create)
    return WireProfile(
        ANTHROPIC,
        ANTHROPIC_DIALECT,
        clean_stops=frozenset({StopReason.TOOL_USE if mode == "tool" else StopReason.END_TURN}),
        tools=True,
        native_reasoning=True,
        options={name: wire for name, wire in _SAMPLING.items() if wire in fields},
        owned=_OWNED,
        fields=fields,
        target="anthropic",
    )


def build_request(
    request: CompletionRequest,
    *,
    model: str,
    mode: Mode = "json_schema",
    prompt_caching: bool = True,
) -> dict[str, Any]:
    """The keyword arguments of `client.messages.create` for `request` (a JSON document, or
    free text; Anthropic has no grammar surface: `UnsupportedRequest`), with `cache_control`
    breakpoints on its static prefix unless `prompt_caching` is off
    (`sdk.providers._prompt_cache`)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": [_message(m) for m in request.messages],
    }
    if request.system:
        kwargs["system"] = request.system
    if request.reasoning:
        # Extended thinking: its budget counts toward `max_tokens`, which must stay above it, so
        # the output keeps the limit the caller set and the thinking gets its own on top.
        budget = max(_THINKING_MIN_BUDGET, request.max_tokens)
        kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        kwargs["max_tokens"] = request.max_tokens + budget
    match request.output:
        case JsonDocument(contract):
            kwargs.update(_asking(contract, mode))
        case ToolOffer() as offer:
            kwargs.update(_tools(offer))
        case FreeText():
            pass  # free text sends no format, no tool
        case GrammarSentence():
            supported = ["json_schema documents", "strict tool use"]
            raise unsupported("anthropic", "a grammar", supported)
        case unknown:
            assert_never(unknown)
    if prompt_caching:
        static = request.messages[0].static_prefix if request.messages else 0
        anthropic_breakpoints(kwargs, model, static)
    return finished(kwargs, request.options, request.extra_body, profile(mode))


def _content(message: Turn) -> str | list[dict[str, Any]]:
    """A turn's content: its text, or text, image and document blocks."""
    if isinstance(message.content, str):
        return message.content
    blocks: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, Text):
            blocks.append({"type": "text", "text": part.text})
            continue
        kind = "image" if isinstance(part, Image) else "document"
        source: dict[str, Any] = (
            {"type": "url", "url": part.url}
            if part.url is not None
            else {"type": "base64", "media_type": part.media_type, "data": part.base64()}
        )
        blocks.append({"type": kind, "source": source})
    return blocks


def _asking(contract: type[Contract], mode: Mode) -> dict[str, Any]:
    """The fields that ask for a contract's document: `output_config.format` (`extra_body`
    may add to `output_config`, effort and such; the format is ours), or a forced strict
    tool whose input is the document."""
    wire = to_wire(contract, ANTHROPIC_DIALECT)
    if mode == "json_schema":
        return {"output_config": {"format": {"type": "json_schema", "schema": wire.schema}}}
    name = wire_name(contract)
    description = wire.schema.get("description") or f"Record the {schema_info(contract).name}."
    tool = {"name": name, "description": description, "input_schema": wire.schema, "strict": True}
    return {"tools": [tool], "tool_choice": {"type": "tool", "name": name}}


def _message(message: Turn) -> dict[str, Any]:
    """A conversation turn: plain text content, or blocks when it carries tool calls (tool_use
    blocks after the text) or tool results (tool_result blocks first, as the API requires)."""
    content = _content(message)
    if not message.tool_calls and not message.tool_results:
        return {"role": message.role, "content": content}
    text = (
        ([{"type": "text", "text": content}] if content else [])
        if isinstance(content, str)
        else content
    )
    blocks: list[dict[str, Any]] = []
    if message.tool_calls:
        blocks = [*text]
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.tool,
             "input": arguments_object(call.text)}
            for call in message.tool_calls
        )  # fmt: skip
    else:
        blocks = [
            {"type": "tool_result", "tool_use_id": result.call_id, "content": result.content,
             "is_error": result.is_error}
            for result in message.tool_results
        ]  # fmt: skip
        blocks.extend(text)
    return {"role": message.role, "content": blocks}


def _tools(offer: ToolOffer) -> dict[str, Any]:
    """`tools` (strict, in the Anthropic dialect) and `tool_choice` for a tool-call request."""
    tools = [
        {
            "name": tool.name,
            "description": tool.described(ANTHROPIC_DIALECT),
            "input_schema": tool.wire(ANTHROPIC_DIALECT).schema,
            "strict": True,
        }
        for tool in offer.tools
    ]
    choice = offer.choice
    tool_choice: dict[str, Any]
    if isinstance(choice, Tool):
        tool_choice = {"type": "tool", "name": choice.name}
    else:
        tool_choice = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    if offer.parallel is False and choice != "none":
        tool_choice["disable_parallel_tool_use"] = True
    return {"tools": tools, "tool_choice": tool_choice}


def read_tool_calls(message: Message) -> tuple[ToolCall, ...]:
    """The `tool_use` blocks of a reply, as calls (the input as JSON text; an id missing or
    null is none, `""`: the call is numbered, as a local server's)."""
    return tuple(
        ToolCall(block.id or "", block.name, json.dumps(block.input, ensure_ascii=False))
        for block in message.content
        if block.type == "tool_use"
    )


def read_response(message: Message, *, mode: Mode = "json_schema") -> Completion:
    """A `Message` -> `Completion`: the document text, stop reason, refusal, usage, request id."""
    text = _document(message, mode)
    raw = message.stop_reason
    details = message.stop_details
    refusal_category = details.category if details is not None else None
    refusal = None
    if raw == "refusal":
        refusal = (details.explanation if details is not None else None) or text
    thinking = [block.thinking for block in message.content if block.type == "thinking"]
    return Completion(
        text=text,
        stop_reason=StopReason.from_raw(raw, "anthropic"),
        raw_stop_reason=raw,
        usage=_usage(message.usage),
        model=message.model,
        request_id=reply_request_id(message),
        refusal=refusal,
        refusal_category=refusal_category,
        reasoning="\n\n".join(thinking) if thinking else None,
    )


def _document(message: Message, mode: Mode) -> str:
    if mode == "tool":
        for block in message.content:
            if block.type == "tool_use":
                return json.dumps(block.input, ensure_ascii=False)
    # JSON mode, or no tool call (a refusal is prose): the text blocks.
    return "".join(block.text for block in message.content if block.type == "text")


def _usage(usage: Any) -> Usage:
    """The reply's usage: Anthropic's `input_tokens` excludes the cached tokens, which it
    reports as cache creation (written) and cache read; each is kept in its own field."""
    return Usage(
        input_tokens=int(usage.input_tokens or 0),
        output_tokens=int(usage.output_tokens or 0),
        cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", None) or 0),
        cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", None) or 0),
    )


class AnthropicStreamReader:
    """Accumulates stream events into the document and, at the end, one `Completion`."""

    def __init__(self, mode: Mode = "json_schema", request_id: str | None = None) -> None:
        self.mode = mode
        self.request_id = request_id
        self._parts: list[str] = []
        self._thinking: list[str] = []
        self._model: str | None = None
        self._usage = Usage()
        self._output_tokens = 0
        self._stop: str | None = None
        self._category: str | None = None
        self._explanation: str | None = None

    def feed(self, event: RawMessageStreamEvent) -> TextDelta | None:
        """One event; returns the piece of document it carries, if any."""
        if event.type == "message_start":
            self._model = event.message.model
            self._usage = _usage(event.message.usage)
            self._output_tokens = event.message.usage.output_tokens
        elif event.type == "content_block_delta":
            delta = event.delta
            piece = ""
            if delta.type == "text_delta" and self.mode == "json_schema":
                piece = delta.text
            elif delta.type == "input_json_delta" and self.mode == "tool":
                piece = delta.partial_json
            elif delta.type == "thinking_delta":
                self._thinking.append(delta.thinking)
            if piece:
                self._parts.append(piece)
                return TextDelta(piece, self.said)  # (its input tokens, from `message_start`)
        elif event.type == "message_delta":
            self._stop = event.delta.stop_reason
            if event.delta.stop_details is not None:
                self._category = event.delta.stop_details.category
                self._explanation = event.delta.stop_details.explanation
            self._output_tokens = event.usage.output_tokens  # cumulative
        return None

    @property
    def said(self) -> Usage:
        """What the reply has cost so far: `message_start`'s usage (its input tokens)."""
        return self._usage

    def finish(self) -> Completion:
        """The completion, once the stream has ended (its stop reason arrives last)."""
        if self._stop is None:
            raise provider_error(
                "anthropic", "stream ended before its final event", request_id=self.request_id
            )
        text = "".join(self._parts)
        return Completion(
            text=text,
            stop_reason=StopReason.from_raw(self._stop, "anthropic"),
            raw_stop_reason=self._stop,
            usage=replace(self._usage, output_tokens=self._output_tokens),
            model=self._model,
            request_id=self.request_id,
            refusal=(self._explanation or text) if self._stop == "refusal" else None,
            refusal_category=self._category,
            reasoning="".join(self._thinking) or None,
        )


class AnthropicToolStreamReader:
    """A tool-call request's stream: prose deltas, and each `tool_use` block's `input_json_delta`
    fragments, kept apart by the block's index."""

    def __init__(self, request_id: str | None = None) -> None:
        self._text = AnthropicStreamReader("json_schema", request_id)
        self._calls: dict[int, tuple[str, str, list[str]]] = {}

    def feed(self, event: RawMessageStreamEvent) -> TextDelta | None:
        if event.type == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            self._calls[event.index] = (block.id, block.name, [])
            return ToolCallDelta(
                "", self._text.said, index=event.index, id=block.id, name=block.name
            )
        if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            if event.index not in self._calls:
                raise ValueError(f"input_json_delta for block {event.index}, which is no tool_use")
            call_id, name, parts = self._calls[event.index]
            parts.append(event.delta.partial_json)
            piece = event.delta.partial_json
            return ToolCallDelta(piece, self._text.said, index=event.index, id=call_id, name=name)
        return self._text.feed(event)

    def finish(self) -> Completion:
        calls = tuple(
            ToolCall(call_id or "", name, "".join(parts) or "{}")
            for call_id, name, parts in (self._calls[index] for index in sorted(self._calls))
        )
        return replace(self._text.finish(), tool_calls=calls)


def map_error(exc: anthropic.AnthropicError) -> ProviderError:
    """An `anthropic` exception -> `ProviderError` (raise it `from exc`)."""
    import anthropic

    if isinstance(exc, anthropic.APITimeoutError):
        return provider_error("anthropic", "request timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return provider_error("anthropic", "connection failed")
    if isinstance(exc, anthropic.APIStatusError):
        status: int | None = exc.status_code
        what = type(exc).__name__
        if status is not None and status < 400:
            # An error event inside a 200 stream (overloaded mid-stream): transient, no status.
            status, what = None, f"error event in stream ({getattr(exc, 'type', None) or what})"
        return provider_error(
            "anthropic",
            what,
            status_code=status,
            request_id=exc.request_id,
            headers=exc.response.headers,
            detail=exc.message,
        )
    return provider_error("anthropic", type(exc).__name__, status_code=200, detail=str(exc))


class AnthropicCodec(Codec):
    """The Messages API's wire format (no I/O)."""

    def __init__(
        self, model: str, mode: Mode, *, urls: bool = True, prompt_caching: bool = True
    ) -> None:
        self.model = model
        self.mode: Mode = mode
        self.urls = urls  # whether image and document parts may be URLs (not on Bedrock)
        self.prompt_caching = prompt_caching
        self.profile = profile(mode)

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        if not self.urls:
            for message in request.messages:
                for part in message.parts:
                    if isinstance(part, (Image, PDF)) and part.url is not None:
                        raise unsupported(
                            "anthropic on Bedrock", "image or PDF URLs", ["image and PDF bytes"]
                        )
        logger.debug(
            "anthropic messages.create model=%s mode=%s max_tokens=%d messages=%d",
            self.model,
            self.mode,
            request.max_tokens,
            len(request.messages),
        )
        body = build_request(
            request, model=self.model, mode=self.mode, prompt_caching=self.prompt_caching
        )
        return Exchange("messages.create", body)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        if isinstance(request.output, ToolOffer):
            completion = replace(read_response(reply.body), tool_calls=read_tool_calls(reply.body))
        else:
            completion = read_response(reply.body, mode=self.mode)
        if completion.request_id is None and reply.request_id is not None:
            completion = replace(completion, request_id=reply.request_id)
        return completion

    def reader(
        self, request: CompletionRequest, request_id: str | None
    ) -> AnthropicStreamReader | AnthropicToolStreamReader:
        match request.output:
            case ToolOffer():
                return AnthropicToolStreamReader(request_id)
            case JsonDocument():
                return AnthropicStreamReader(self.mode, request_id)
            case GrammarSentence() | FreeText():
                return AnthropicStreamReader("json_schema", request_id)  # its text, as it comes
            case unknown:
                assert_never(unknown)

    def classify(self, error: BaseException) -> ProviderError | None:
        import anthropic  # loaded: a provider was made with one of its clients

        return map_error(error) if isinstance(error, anthropic.AnthropicError) else None


def _clients(*, sync: bool) -> tuple[type[Any], ...]:
    """The `anthropic` package's clients of every platform, sync or async."""
    import anthropic

    if sync:
        return (anthropic.Anthropic, anthropic.AnthropicBedrock, anthropic.AnthropicVertex)
    return (
        anthropic.AsyncAnthropic,
        anthropic.AsyncAnthropicBedrock,
        anthropic.AsyncAnthropicVertex,
    )


if TYPE_CHECKING:
    AnyClient = (
        anthropic.Anthropic
        | anthropic.AsyncAnthropic
        | anthropic.AnthropicBedrock
        | anthropic.AsyncAnthropicBedrock
        | anthropic.AnthropicVertex
        | anthropic.AsyncAnthropicVertex
    )

Platform = Literal["anthropic", "bedrock", "vertex"]

VERTEX_STRUCTURED_MODELS = ("claude-opus-4-7", "claude-sonnet-4-6", "claude-opus-4-6")
"""The Claude models Vertex AI offers structured outputs for (JSON outputs and strict tools; the
organization policy `constraints/vertexai.allowedPartnerModelFeatures` must allow them too)."""


def platform_of(client: object) -> Platform:
    """Which platform an `anthropic` client talks to."""
    import anthropic

    if isinstance(client, (anthropic.AnthropicBedrock, anthropic.AsyncAnthropicBedrock)):
        return "bedrock"
    if isinstance(client, (anthropic.AnthropicVertex, anthropic.AsyncAnthropicVertex)):
        return "vertex"
    return "anthropic"


class AnthropicProvider(Provider):
    """Claude through your `anthropic` client: `Anthropic`, `AnthropicBedrock` (Amazon Bedrock)
    or `AnthropicVertex` (Google Vertex AI), sync or async.

    provider = AnthropicProvider(anthropic.Anthropic(), model="claude-sonnet-4-6")

    Every platform takes `output_config.format` json_schema and strict tools for Claude; Vertex
    AI only for the models in `VERTEX_STRUCTURED_MODELS` (another model is an
    `UnsupportedRequest` here, not a 400 there), and Bedrock takes images and PDFs as bytes only
    (a URL part is refused before sending).

    `prompt_caching` (on by default) puts `cache_control` breakpoints on the static prefix of
    each request once it is long enough to be cached (`sdk.providers._prompt_cache`).

    The SDK owns retries: the client is used through `with_options(max_retries=0)`, so one
    failed request is one attempt here (the `anthropic` client's own two retries would
    otherwise multiply ours, making a persistent 429 cost twelve requests).
    """

    _extra: ClassVar[str] = "anthropic"
    """The extra that installs the client it is made on (`sdk.wire` names it when missing)."""

    def __init__(
        self,
        client: AnyClient,
        *,
        model: str,
        mode: Mode = "json_schema",
        prompt_caching: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in ("json_schema", "tool"):
            raise ValueError(f"mode must be 'json_schema' or 'tool', not {mode!r}")
        check_model(model, f"{type(self).__name__}()")
        if not isinstance(client, (*_clients(sync=True), *_clients(sync=False))):
            raise TypeError(
                "client must be an anthropic client (Anthropic, AnthropicBedrock or "
                f"AnthropicVertex, sync or async), not {client!r}"
            )
        self.platform: Platform = platform_of(client)
        if self.platform == "vertex" and not model.startswith(VERTEX_STRUCTURED_MODELS):
            raise unsupported(
                "anthropic on Vertex AI",
                f"structured outputs for model {model!r}",
                [f"structured outputs for {', '.join(VERTEX_STRUCTURED_MODELS)}"],
            )
        # A base URL's query goes to the client's default query (`sdk.providers._endpoint`).
        self.client = client.with_options(max_retries=0, **client_endpoint(client, "anthropic"))
        redact_request_logs()  # (and, holding a credential, it is not logged)
        self.mode: Mode = mode
        self._model = model
        self.codec = AnthropicCodec(
            model, mode, urls=self.platform != "bedrock", prompt_caching=prompt_caching
        )
        self._keep_extra_body(extra_body)

    @classmethod
    def _in_memory(cls, settings: Mapping[str, Any], *, http_client: Any, api_key: str) -> Self:
        """`sdk.wire`'s hook (private, but kept stable): this provider with `settings` (the
        constructor's keyword arguments, and the client's `base_url`) on an `anthropic.Anthropic`
        client that sends through `http_client` (an `httpx2.Client` on an in-memory transport)
        with the placeholder `api_key`."""
        import anthropic

        given = dict(settings)
        base_url = given.pop("base_url", None)
        client = anthropic.Anthropic(api_key=api_key, base_url=base_url, http_client=http_client)
        return cls(client, **given)

    def __repr__(self) -> str:
        platform = "" if self.platform == "anthropic" else f", platform={self.platform!r}"
        return f"AnthropicProvider(model={self._model!r}, mode={self.mode!r}{platform})"

    @property
    def model(self) -> str:
        return self._model

    def cache_scope(self) -> dict[str, Any]:
        # Where it runs: the endpoint (a gateway, a proxy, the vendor; it names the platform),
        # the cloud's region and project (in Vertex AI's paths); the mode (a tool call or a
        # schema); the headers (`keyed_headers`).
        client = self.client
        return {
            **super().cache_scope(),
            "mode": self.mode,
            "endpoint": endpoint(client.base_url),
            "query": keyed_parameters(client.default_query),
            "region": getattr(client, "aws_region", None) or getattr(client, "region", None),
            "project": getattr(client, "project_id", None),
        }

    def keyed_query(self) -> str:
        return client_query(self.client)

    def keyed_headers(self) -> dict[str, str]:
        # The API version and beta features (`anthropic-version`, `anthropic-beta`) change what
        # the API does; a gateway may route by a header the client was given.
        return header_scope(client_headers(self.client), self.secrets())

    def secrets(self) -> Iterable[str]:
        names = ("api_key", "auth_token", "aws_secret_key", "aws_session_token", "access_token")
        return [
            value
            for value in (getattr(self.client, name, None) for name in names)
            if isinstance(value, str)
        ]

    def transport(self) -> SDKTransport:
        if not isinstance(self.client, _clients(sync=True)):
            raise TypeError("this provider has an async anthropic client: use the async calls")
        return SDKTransport(self.client, request_id_header="request-id")

    def atransport(self) -> AsyncSDKTransport:
        if not isinstance(self.client, _clients(sync=False)):
            raise TypeError("this provider has a sync anthropic client: use the sync calls")
        return AsyncSDKTransport(self.client, request_id_header="request-id")
