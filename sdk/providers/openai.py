"""OpenAI, through the official `openai` client you pass in: the Responses API and Chat Completions.

Both send the schema strict (`strict: true`) in the OpenAI strict dialect
(`sdk.schema.dialects.OPENAI_STRICT`): every property required, optional ones nullable, closed
objects, and no `minLength`/`maxLength` (removed, reported, still checked by the parser). The
schema's name is derived from the contract's name and version (`Decision_v1`).

The stop reason decides before the text is read. The Responses API reports it as `status` and
`incomplete_details.reason`, written as one raw value (`completed`, `incomplete:max_output_tokens`,
...); a refusal content part gives `refusal`. This is what `responses.parse` ignores (a truncated
document there raises a bare validation error).

The two families' profiles (`OPENAI_RESPONSES`, `OPENAI_CHAT`) are here too; the `openai`
package is imported when a provider is made, so naming a family or reading its stop reasons
does not need it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Self
from typing import assert_never

from sdk._result import Usage
from sdk._tools import Tool
from sdk._tools import ToolCall
from sdk._tools import ToolOffer
from sdk._values.content import Image
from sdk._values.content import Text
from sdk._values.dialect import BOUNDS
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import HOSTED_FORMATS
from sdk._values.dialect import Dialect
from sdk._values.dialect import GrammarLimits
from sdk._values.profile import Pricing
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk.contract import Contract
from sdk.errors import ProviderError
from sdk.grammar import Grammar
from sdk.grammar.wire import CUSTOM_TOOL_INPUT_DELTA
from sdk.grammar.wire import custom_tool_choice
from sdk.grammar.wire import custom_tool_name
from sdk.grammar.wire import openai_custom_tool
from sdk.grammar.wire import read_custom_tool_input
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Message
from sdk.providers._base import Reply
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.providers._base import check_model
from sdk.providers._base import unsupported
from sdk.providers._base import wire_name
from sdk.providers._chat import CHAT_STOP_REASONS
from sdk.providers._chat import ChatChoice
from sdk.providers._chat import ChatDeltas
from sdk.providers._chat import chat_messages
from sdk.providers._chat import chat_tools
from sdk.providers._endpoint import client_endpoint
from sdk.providers._endpoint import client_headers
from sdk.providers._endpoint import client_query
from sdk.providers._endpoint import keyed_parameters
from sdk.providers._errors import provider_error
from sdk.providers._errors import reply_request_id
from sdk.providers._headers import header_scope
from sdk.providers._logprobs import chat_logprobs
from sdk.providers._logs import redact_request_logs
from sdk.providers._profile import WireProfile
from sdk.providers._profile import finished
from sdk.providers._profile import sdk_fields
from sdk.providers._prompt_cache import prompt_cache_key
from sdk.providers._provider import Provider
from sdk.providers._provider import endpoint
from sdk.providers._transports import AsyncSDKTransport
from sdk.providers._transports import SDKTransport
from sdk.schema.dialects import to_wire
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    import openai
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion
    from openai.types.chat import ChatCompletionChunk
    from openai.types.responses import Response
    from openai.types.responses import ResponseStreamEvent
    from openai.types.responses import ResponseUsage

__all__ = [
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "OPENAI_STRICT",
    "ChatCodec",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "ResponsesCodec",
    "ResponsesStreamReader",
    "build_chat_request",
    "build_responses_request",
    "read_chat_response",
    "read_responses_response",
    "read_responses_tool_calls",
]

logger = logging.getLogger(__name__)

OPENAI_STRICT = Dialect(
    name="openai_strict",
    keywords=CORE_KEYWORDS | BOUNDS | {"pattern", "format", "multipleOf", "minItems", "maxItems"},
    formats=HOSTED_FORMATS,
    one_of_as_any_of=True,
    ref_siblings="inline",
    closed_objects=True,
    all_required=True,
    hint_removed=True,
    # OpenAI strict counts properties, object nesting levels and enum values.
    limits=GrammarLimits(max_properties=5000, max_depth=10, max_enum_values=1000),
    doc="OpenAI strict structured outputs (Responses and Chat): every property required, "
    "optional ones nullable; no minLength/maxLength, allOf, not, or conditional keywords.",
)

# The Responses API has no single stop field: its raw value is written `status` or
# `incomplete:<incomplete_details.reason>` so that one string keeps both.
OPENAI_RESPONSES = register(
    Profile(
        name="openai_responses",
        display_name="OpenAI Responses",
        # The strict dialect is shared by both OpenAI APIs: its name means the Responses API.
        aliases=frozenset({"openai", "responses", "openai_strict"}),
        stop_reasons={
            "completed": StopReason.END_TURN,
            "incomplete:max_output_tokens": StopReason.MAX_TOKENS,
            "incomplete:content_filter": StopReason.CONTENT_FILTER,
            # `incomplete_details.reason` alone, as a caller may copy it from the response
            "max_output_tokens": StopReason.MAX_TOKENS,
            "content_filter": StopReason.CONTENT_FILTER,
            "refusal": StopReason.REFUSAL,
        },
        dialect=OPENAI_STRICT,
        carries={
            "documents": "text.format json_schema, strict",
            "grammars": "a custom tool with a Lark grammar",
            "tools": "strict function calls",
            "native_reasoning": "reasoning summaries",
        },
        pricing=Pricing("openai"),
        telemetry_name="openai",
        provider="sdk.providers.openai:OpenAIResponsesProvider",
    )
)
"""The Responses API family: everything the SDK knows about it (`sdk.providers.profile`)."""

OPENAI_CHAT = register(
    Profile(
        name="openai_chat",
        display_name="OpenAI Chat Completions",
        aliases=frozenset({"chat"}),
        stop_reasons=CHAT_STOP_REASONS,
        dialect=OPENAI_STRICT,
        carries={
            "documents": "response_format json_schema, strict",
            "tools": "strict function calls",
        },
        pricing=Pricing("openai"),
        telemetry_name="openai",
        provider="sdk.providers.openai:OpenAIChatProvider",
    )
)
"""The Chat Completions family (`sdk.providers.profile`)."""


# The wire facts of both APIs: the sampling options each takes, and the fields the SDK writes
# (with the keyword arguments the installed `openai` package's methods take).
@cache
def responses_wire() -> WireProfile:
    """The Responses API's wire."""
    from openai.resources.responses import Responses

    return WireProfile(
        OPENAI_RESPONSES,
        OPENAI_STRICT,
        target="openai-responses",
        grammar=True,
        tools=True,
        native_reasoning=True,
        options={"temperature": "temperature", "top_p": "top_p"},
        # (and what would add context beside `input`, or answer later: `background`)
        owned=frozenset({"model", "input", "messages", "instructions", "max_output_tokens",
                         "reasoning", "text.format", "tools", "tool_choice",
                         "parallel_tool_calls", "stream", "previous_response_id",
                         "conversation", "prompt", "background"}),
        fields=sdk_fields(Responses.create),
    )  # fmt: skip


@cache
def chat_wire() -> WireProfile:
    """Chat Completions' wire."""
    from openai.resources.chat.completions import Completions

    return WireProfile(
        OPENAI_CHAT,
        OPENAI_STRICT,
        target="openai-chat",
        tools=True,
        options={name: name for name in ("temperature", "top_p", "seed", "stop",
                                         "presence_penalty", "frequency_penalty")},
        # (`n`: one choice is read; more would be billed and dropped)
        owned=frozenset({"model", "messages", "max_completion_tokens", "max_tokens",
                         "response_format", "tools", "tool_choice", "parallel_tool_calls",
                         "stream", "stream_options", "functions", "function_call", "n"}),
        fields=sdk_fields(Completions.create),
    )  # fmt: skip


# `failed` responses whose error another try can fix; other codes (policy) are final.
_TRANSIENT_FAILURES = frozenset({"server_error", "rate_limit_exceeded", "vector_store_timeout"})


def _json_schema_format(contract: type[Contract]) -> dict[str, Any]:
    wire = to_wire(contract, OPENAI_STRICT)
    return {"name": wire_name(contract), "schema": wire.schema, "strict": True}


# --- Responses API ---


def build_responses_request(
    request: CompletionRequest, *, model: str, prompt_caching: bool = True
) -> dict[str, Any]:
    """The keyword arguments of `client.responses.create` for `request`: a JSON document
    (`text.format` json_schema, strict), a grammar's sentence (a custom tool whose input the
    grammar constrains, forced by `tool_choice`), or free text; with a `prompt_cache_key` named
    after its static part unless `prompt_caching` is off (`extra_body` may set another)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "input": [item for m in request.messages for item in _responses_input(m)],
        "max_output_tokens": request.max_tokens,
    }
    if prompt_caching:
        kwargs["prompt_cache_key"] = prompt_cache_key(request)
    if request.reasoning:
        # The reasoning itself stays hidden; its summary is what a caller can keep.
        kwargs["reasoning"] = {"effort": "medium", "summary": "auto"}
    match request.output:
        case JsonDocument(contract):
            kwargs["text"] = {"format": {"type": "json_schema", **_json_schema_format(contract)}}
        case GrammarSentence(grammar):
            kwargs["tools"] = [openai_custom_tool(grammar)]
            kwargs["tool_choice"] = custom_tool_choice(custom_tool_name(grammar))
        case ToolOffer() as offer:
            kwargs.update(_responses_tools(offer))
        case FreeText():
            pass
        case unknown:
            assert_never(unknown)
    if request.system:
        kwargs["instructions"] = request.system
    return finished(kwargs, request.options, request.extra_body, responses_wire())


def _responses_content(message: Message) -> str | list[dict[str, Any]]:
    """A turn's Responses input: its text, or input text, image and file parts."""
    if isinstance(message.content, str):
        return message.content
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, Text):
            kind = "input_text" if message.role == "user" else "output_text"
            parts.append({"type": kind, "text": part.text})
        elif isinstance(part, Image):
            parts.append({"type": "input_image", "image_url": part.data_url(), "detail": "auto"})
        elif part.url is not None:
            parts.append({"type": "input_file", "file_url": part.url})
        else:
            file = {"filename": part.name, "file_data": part.data_url()}
            parts.append({"type": "input_file", **file})
    return parts


def _responses_input(message: Message) -> list[dict[str, Any]]:
    """One turn as input items: tool calls as `function_call` items after the text, tool
    results as `function_call_output` items before it."""
    text = [{"role": message.role, "content": _responses_content(message)}]
    if message.tool_calls:
        calls = [
            {"type": "function_call", "call_id": call.id, "name": call.tool,
             "arguments": call.text}
            for call in message.tool_calls
        ]  # fmt: skip
        return [*(text if message.content else []), *calls]
    results = [
        {"type": "function_call_output", "call_id": result.call_id, "output": result.content}
        for result in message.tool_results
    ]
    return [*results, *(text if message.content or not results else [])]


def _responses_tools(offer: ToolOffer) -> dict[str, Any]:
    """Function tools (strict, OpenAI strict dialect), `tool_choice`, `parallel_tool_calls`."""
    choice = offer.choice
    fields: dict[str, Any] = {
        "tools": [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.described(OPENAI_STRICT),
                "parameters": tool.wire(OPENAI_STRICT).schema,
                "strict": True,
            }
            for tool in offer.tools
        ],
        "tool_choice": (
            {"type": "function", "name": choice.name} if isinstance(choice, Tool) else choice
        ),
    }
    if offer.parallel is not None:
        fields["parallel_tool_calls"] = offer.parallel
    return fields


def read_responses_tool_calls(output: Iterable[Any]) -> tuple[ToolCall, ...]:
    """The `function_call` items of a response's output, as calls (a `call_id` missing or null
    is none, `""`: the call is numbered, as a local server's)."""
    return tuple(
        ToolCall(item.call_id or "", item.name, item.arguments)
        for item in output
        if item.type == "function_call"
    )


def read_responses_response(
    response: Response, *, request_id: str | None = None, grammar: Grammar | None = None
) -> Completion:
    """A `Response` -> `Completion`. Raises `ProviderError` for a transiently `failed` one.
    With `grammar`, the text is the input of the grammar's custom tool call (`None` without
    one)."""
    texts: list[str] = []
    refusals: list[str] = []
    summaries = [
        part.text
        for item in response.output
        if item.type == "reasoning"
        for part in item.summary
    ]
    prose: list[str] = []
    called = None
    if grammar is not None:
        called = read_custom_tool_input(response.output, custom_tool_name(grammar))
    for item in response.output:
        if item.type == "message":
            for part in item.content:
                if part.type == "output_text":
                    (texts if grammar is None else prose).append(part.text)
                elif part.type == "refusal":
                    refusals.append(part.refusal)
    if grammar is not None and called is None and prose and not refusals:
        # The grammar's call is forced (`tool_choice`): prose in its place is the model
        # declining to make it, a refusal in its own words, not a sentence that failed.
        refusals = prose
    raw = _responses_stop(response, bool(refusals))
    request_id = request_id or reply_request_id(response)
    failure = response.error if response.status == "failed" else None
    if failure is not None and failure.code in _TRANSIENT_FAILURES:
        raise provider_error(
            "openai_responses",
            f"response failed ({failure.code})",
            request_id=request_id,
            detail=failure.message,
        )
    usage = response.usage
    said = "".join(texts) if texts or not refusals else None
    return Completion(
        # With a grammar no call is no text: never the empty sentence, which it may accept.
        text=called if grammar is not None else said,
        stop_reason=StopReason.from_raw(raw, "openai_responses"),
        raw_stop_reason=raw,
        usage=_responses_usage(usage),
        model=response.model,
        request_id=request_id,
        refusal="".join(refusals) or None,
        tool_calls=read_responses_tool_calls(response.output),
        reasoning="\n\n".join(summaries) if summaries else None,
    )


def _responses_usage(usage: ResponseUsage | None) -> Usage:
    """Responses usage: `input_tokens` includes the cached ones, `output_tokens` the reasoning."""
    if usage is None:
        return Usage()
    return _usage(usage.input_tokens, usage.output_tokens,
                  usage.input_tokens_details, usage.output_tokens_details)  # fmt: skip


def _chat_usage(usage: CompletionUsage | None) -> Usage:
    """Chat usage: `prompt_tokens` includes the cached ones, `completion_tokens` the reasoning."""
    if usage is None:
        return Usage()
    return _usage(usage.prompt_tokens, usage.completion_tokens,
                  usage.prompt_tokens_details, usage.completion_tokens_details)  # fmt: skip


def _usage(
    inputs: int | None, outputs: int | None, input_details: object, output_details: object
) -> Usage:
    """Both APIs' counts as the provider gave them, the cached and reasoning tokens apart (a
    null count is none, 0, as every other reader reads one; another type is refused where the
    `Completion` is made)."""
    return Usage(
        input_tokens=0 if inputs is None else inputs,
        output_tokens=0 if outputs is None else outputs,
        cache_read_tokens=_count(input_details, "cached_tokens"),
        reasoning_tokens=_count(output_details, "reasoning_tokens"),
    )


def _count(details: object, name: str) -> int:
    return int(getattr(details, name, None) or 0)


def _responses_stop(response: Response, refused: bool) -> str | None:
    if refused:
        return "refusal"
    if response.status == "incomplete":
        details = response.incomplete_details
        return f"incomplete:{details.reason if details is not None else None}"
    if response.status == "failed" and response.error is not None:
        return f"failed:{response.error.code}"
    return response.status


class ResponsesStreamReader:
    """Accumulates Responses stream events; the terminal event carries the whole response."""

    def __init__(self, request_id: str | None = None, grammar: Grammar | None = None) -> None:
        self.request_id = request_id
        self.grammar = grammar
        self._final: Response | None = None
        self._calls: dict[int, tuple[str | None, str | None]] = {}
        # The document's deltas: the text's, or the grammar tool's input.
        self._delta = (
            CUSTOM_TOOL_INPUT_DELTA if grammar is not None else "response.output_text.delta"
        )

    def feed(self, event: ResponseStreamEvent) -> TextDelta | None:
        """One event; returns the piece of document it carries, if any (or of a function
        call's arguments, kept apart by its output index)."""
        if event.type == "response.output_item.added" and event.item.type == "function_call":
            self._calls[event.output_index] = (event.item.call_id, event.item.name)
            call_id, name = self._calls[event.output_index]
            return ToolCallDelta("", index=event.output_index, id=call_id, name=name)
        if event.type == "response.function_call_arguments.delta":
            call_id, name = self._calls.get(event.output_index, (None, None))
            return ToolCallDelta(event.delta, index=event.output_index, id=call_id, name=name)
        if event.type == self._delta:
            delta = event.delta  # type: ignore[union-attr]
            return TextDelta(delta) if isinstance(delta, str) and delta else None
        if event.type in ("response.completed", "response.incomplete", "response.failed"):
            self._final = event.response
        elif event.type == "error":
            # The SDK yields this event instead of raising: it is a transport failure.
            raise provider_error(
                "openai_responses",
                f"error event in stream ({event.code})",
                request_id=self.request_id,
                detail=event.message,
            )
        return None

    def finish(self) -> Completion:
        """The completion from the terminal event (refusal text included)."""
        if self._final is None:
            raise provider_error(
                "openai_responses",
                "stream ended without a terminal event",
                request_id=self.request_id,
            )
        return read_responses_response(
            self._final, request_id=self.request_id, grammar=self.grammar
        )


# --- Chat Completions ---


def build_chat_request(
    request: CompletionRequest, *, model: str, prompt_caching: bool = True
) -> dict[str, Any]:
    """The keyword arguments of `client.chat.completions.create` for `request` (a JSON
    document or free text; no grammar surface here: `UnsupportedRequest`), with a
    `prompt_cache_key` as for Responses."""
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request, "openai_chat", images=True, pdfs=True),
        "max_completion_tokens": request.max_tokens,
    }
    if prompt_caching:
        kwargs["prompt_cache_key"] = prompt_cache_key(request)
    match request.output:
        case JsonDocument(contract):
            format_ = _json_schema_format(contract)
            kwargs["response_format"] = {"type": "json_schema", "json_schema": format_}
        case ToolOffer() as offer:
            kwargs.update(chat_tools(offer, _strict_parameters, strict=True))
        case FreeText():
            pass
        case GrammarSentence():
            raise unsupported("openai_chat", "a grammar", ["json_schema documents", "free text"])
        case unknown:
            assert_never(unknown)
    return finished(kwargs, request.options, request.extra_body, chat_wire())


def _strict_parameters(tool: Tool) -> dict[str, Any]:
    return tool.wire(OPENAI_STRICT).schema


def read_chat_response(completion: ChatCompletion, *, request_id: str | None = None) -> Completion:
    """A `ChatCompletion` -> `Completion` (the first choice). A reply without a choice is
    unusable: `ValueError` (the fault boundary makes it a `ProviderError`)."""
    if not completion.choices:
        raise ValueError("the reply has no choices")
    choice = completion.choices[0]
    usage = completion.usage
    said = ChatChoice(
        content=choice.message.content,
        refusal=choice.message.refusal,
        finish_reason=choice.finish_reason,
        tool_calls=tuple(  # (an id missing or null is none: the call is numbered)
            ToolCall(call.id or "", call.function.name, call.function.arguments)
            for call in choice.message.tool_calls or ()
            if call.type == "function"
        ),
    )
    read = said.completion(
        _chat_usage(usage), completion.model, request_id or reply_request_id(completion)
    )
    # Asked for with `extra_body={"logprobs": True}`: each token's probability, as reported.
    return replace(read, tokens=chat_logprobs(choice.logprobs))


def _feed_chunk(
    state: ChatDeltas, chunk: ChatCompletionChunk
) -> TextDelta | tuple[TextDelta, ...] | None:
    if chunk.usage is not None:
        state.usage = _chat_usage(chunk.usage)
    if not chunk.choices:
        return None
    choice = chunk.choices[0]
    state.logprobs(choice.logprobs)
    return state.feed(
        content=choice.delta.content,
        refusal=choice.delta.refusal,
        finish_reason=choice.finish_reason,
        model=chunk.model,
        tool_calls=[
            (
                call.index,
                call.id,
                call.function.name if call.function else None,
                call.function.arguments if call.function else None,
            )
            for call in choice.delta.tool_calls or ()
        ],
    )


# --- errors and the providers ---


def map_error(exc: openai.OpenAIError, provider: str) -> ProviderError:
    """An `openai` exception -> `ProviderError` (raise it `from exc`)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return provider_error(provider, "request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return provider_error(provider, "connection failed")
    if isinstance(exc, openai.APIStatusError):
        return provider_error(
            provider,
            type(exc).__name__,
            status_code=exc.status_code,
            request_id=exc.request_id,
            headers=exc.response.headers,
            detail=exc.message,
        )
    if isinstance(exc, openai.APIResponseValidationError):
        return provider_error(
            provider, type(exc).__name__, status_code=exc.status_code, detail=str(exc)
        )
    if isinstance(exc, openai.APIError):
        # An error object inside a chat stream: no status; transient as far as anyone can tell.
        kind = exc.type or type(exc).__name__
        return provider_error(provider, f"error in stream ({kind})", detail=exc.message)
    return provider_error(provider, type(exc).__name__, status_code=200, detail=str(exc))


class _OpenAICodec(Codec):
    """What both OpenAI wire formats share: the model, the prompt-cache key switch, the
    `openai` client's errors."""

    def __init__(self, model: str, *, prompt_caching: bool = True) -> None:
        self.model = model
        self.prompt_caching = prompt_caching

    def classify(self, error: BaseException) -> ProviderError | None:
        import openai  # loaded: a provider was made with its client

        return map_error(error, self.provider) if isinstance(error, openai.OpenAIError) else None


class ResponsesCodec(_OpenAICodec):
    """The Responses API's wire format (no I/O)."""

    def __init__(self, model: str, *, prompt_caching: bool = True) -> None:
        super().__init__(model, prompt_caching=prompt_caching)
        self.profile = responses_wire()

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        _log(self.provider, self.model, request)
        body = build_responses_request(
            request, model=self.model, prompt_caching=self.prompt_caching
        )
        return Exchange("responses.create", body)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        return read_responses_response(
            reply.body, request_id=reply.request_id, grammar=_grammar(request)
        )

    def reader(self, request: CompletionRequest, request_id: str | None) -> ResponsesStreamReader:
        return ResponsesStreamReader(request_id, _grammar(request))


def _grammar(request: CompletionRequest) -> Grammar | None:
    """The grammar whose custom tool carries a sentence (the reply's text is its input)."""
    return request.output.grammar if isinstance(request.output, GrammarSentence) else None


class ChatCodec(_OpenAICodec):
    """Chat Completions' wire format through the `openai` client (no I/O)."""

    def __init__(self, model: str, *, prompt_caching: bool = True) -> None:
        super().__init__(model, prompt_caching=prompt_caching)
        self.profile = chat_wire()

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        _log(self.provider, self.model, request)
        body = build_chat_request(request, model=self.model, prompt_caching=self.prompt_caching)
        if stream:
            body["stream_options"] = {"include_usage": True}
        return Exchange("chat.completions.create", body)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        return read_chat_response(reply.body, request_id=reply.request_id)

    def reader(self, request: CompletionRequest, request_id: str | None) -> ChatChunkStreamReader:
        return ChatChunkStreamReader(ChatDeltas(self.provider, request_id=request_id))


class ChatChunkStreamReader:
    """A `ChatDeltas` fed with the `openai` client's chunk objects."""

    def __init__(self, chat: ChatDeltas) -> None:
        self._chat = chat

    def feed(self, chunk: ChatCompletionChunk) -> TextDelta | tuple[TextDelta, ...] | None:
        return _feed_chunk(self._chat, chunk)

    def finish(self) -> Completion:
        return self._chat.finish()


def _log(provider: str, model: str, request: CompletionRequest) -> None:
    logger.debug(
        "%s model=%s max_tokens=%d messages=%d",
        provider,
        model,
        request.max_tokens,
        len(request.messages),
    )


class _OpenAIProvider(Provider):
    """What the two APIs' providers share. Each public class declares its keywords and makes
    the one call to this constructor: Python names the class whose constructor it binds a call
    to in its errors (a missing `model=`), so that is the class the caller made, never this
    one."""

    codec_type: ClassVar[type[_OpenAICodec]]
    """The API's codec: what tells the Responses provider from the Chat one."""
    _extra: ClassVar[str] = "openai"
    """The extra that installs the client it is made on (`sdk.wire` names it when missing)."""

    def __init__(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        model: str,
        prompt_caching: bool,
        extra_body: Mapping[str, Any] | None,
    ) -> None:
        import openai

        if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
            raise TypeError(
                f"client must be an openai.OpenAI or openai.AsyncOpenAI, not {client!r}"
            )
        check_model(model, f"{type(self).__name__}()")
        # The SDK owns retries: the client's own (two by default) would multiply ours. A base
        # URL's query goes to the client's default query (`sdk.providers._endpoint`).
        # (The codec first: its wire profile, made with it, names the family in the errors.)
        self.codec = self.codec_type(model, prompt_caching=prompt_caching)
        endpoint = client_endpoint(client, self.codec.profile.name)
        self.client = client.with_options(max_retries=0, **endpoint)
        redact_request_logs()  # (and, holding a credential, it is not logged)
        self._model = model
        self._keep_extra_body(extra_body)

    @classmethod
    def _in_memory(cls, settings: Mapping[str, Any], *, http_client: Any, api_key: str) -> Self:
        """`sdk.wire`'s hook (private, but kept stable): this provider with `settings` (the
        constructor's keyword arguments, and the client's `base_url`) on an `openai.OpenAI`
        client that sends through `http_client` (an `httpx2.Client` on an in-memory transport)
        with the placeholder `api_key`."""
        import openai

        given = dict(settings)
        base_url = given.pop("base_url", None)
        client = openai.OpenAI(api_key=api_key, base_url=base_url, http_client=http_client)
        return cls(client, **given)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._model!r})"

    @property
    def model(self) -> str:
        return self._model

    def cache_scope(self) -> dict[str, Any]:
        # Where it runs: the endpoint (a gateway, Azure's deployment in its path) and the query
        # every request carries (Azure's `api-version`); the headers (`keyed_headers`).
        return {
            **super().cache_scope(),
            "endpoint": endpoint(self.client.base_url),
            "query": keyed_parameters(self.client.default_query),
        }

    def keyed_query(self) -> str:
        return client_query(self.client)

    def keyed_headers(self) -> dict[str, str]:
        # A gateway may route by a header the client was given (`default_headers`).
        return header_scope(client_headers(self.client), self.secrets())

    def secrets(self) -> Iterable[str]:
        return [self.client.api_key] if isinstance(self.client.api_key, str) else []

    def transport(self) -> SDKTransport:
        import openai

        if not isinstance(self.client, openai.OpenAI):
            raise TypeError("this provider has an AsyncOpenAI client: use the async calls")
        return SDKTransport(self.client, request_id_header="x-request-id")

    def atransport(self) -> AsyncSDKTransport:
        import openai

        if not isinstance(self.client, openai.AsyncOpenAI):
            raise TypeError("this provider has a sync OpenAI client: use the sync calls")
        return AsyncSDKTransport(self.client, request_id_header="x-request-id")


class OpenAIResponsesProvider(_OpenAIProvider):
    """The Responses API through your `openai.OpenAI` or `openai.AsyncOpenAI` client (used
    with `max_retries=0`: the SDK owns retries). `prompt_caching` (on by default) sends a
    `prompt_cache_key` named after the contract's fingerprint and the system prompt, so calls
    that share them share the provider's prompt cache."""

    codec_type = ResponsesCodec

    def __init__(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        *,
        model: str,
        prompt_caching: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(client, model, prompt_caching, extra_body)


class OpenAIChatProvider(_OpenAIProvider):
    """Chat Completions through your `openai.OpenAI` or `openai.AsyncOpenAI` client (used with
    `max_retries=0`: the SDK owns retries); `prompt_caching` as for Responses."""

    codec_type = ChatCodec

    @property
    def unreported_probabilities(self) -> str:
        # (asked for only by the caller: some models refuse `logprobs`)
        return (
            'the reply came without token probabilities: extra_body={"logprobs": True} asks '
            "Chat Completions for them"
        )

    def __init__(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        *,
        model: str,
        prompt_caching: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(client, model, prompt_caching, extra_body)
