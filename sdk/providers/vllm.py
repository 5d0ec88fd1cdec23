"""vLLM's OpenAI-compatible server, with structured outputs through `structured_outputs`.

vLLM (0.12 and later) takes the schema in an extra body parameter, `structured_outputs:
{"json": schema}` (the older `guided_json` family was removed then). The schema goes in the vLLM
dialect: what its grammar backends enforce, without `multipleOf`, `uniqueItems`, `not` or the
conditional keywords (they would be ignored silently; here they are removed and reported), with
`disable_any_whitespace` (the document is written compact: no run of whitespace to run away in).

vLLM renders the chat template and tokenizes the result with special tokens parsed, so a message
holding `<|im_end|>` would close the turn: content is checked for the control-token strings of
the common template families and `extra_control_tokens=` (the model's own: its tokenizer's
`added_tokens`), under `control_tokens="reject"` (default: `ControlTokenInContent` before sending)
or `"allow"` (unsafe with untrusted documents). See `sdk.providers._control_tokens`.

A contract with `SourceQuote` or `Verbatim` strings and a `source` goes as its grounded grammar
instead of its schema (`structured_outputs: {"grammar": LARK}`, `sdk.schema.grounding`): those
strings can only be spans of the source. That Lark (llguidance's substring lexeme, `%json`) is
read by vLLM's `guidance` backend, which its default `auto` backend choice falls back to for a
grammar xgrammar cannot read; a server fixed to another backend rejects it: pass
`grounding=False` to send the schema and have the parser check the values after.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from typing import Unpack
from typing import assert_never

from sdk._tools import Tool
from sdk._tools import ToolOffer
from sdk._values.declared import check
from sdk._values.dialect import BOUNDS
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import LOCAL_KEYWORDS
from sdk._values.dialect import Dialect
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk._values.records import Note
from sdk.grammar.wire import vllm_structured_outputs
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Reply
from sdk.providers._chat import CHAT_STOP_REASONS
from sdk.providers._chat import ChatSSEStreamReader
from sdk.providers._chat import chat_messages
from sdk.providers._chat import chat_tools
from sdk.providers._chat import read_chat_body
from sdk.providers._grounding import grounding_plan
from sdk.providers._http import ContentPolicy
from sdk.providers._http import OneRouteCodec
from sdk.providers._http import OneRouteProvider
from sdk.providers._http import ServerSettings
from sdk.providers._profile import WireProfile
from sdk.providers._profile import finished
from sdk.schema.grounding import grounded_lark

__all__ = ["VLLMCodec", "VLLMProvider", "build_request", "read_response"]

VLLM_DIALECT = Dialect(
    name="vllm",
    keywords=CORE_KEYWORDS | BOUNDS | LOCAL_KEYWORDS | {"minProperties", "maxProperties"},
    doc="vLLM structured outputs (xgrammar, guidance fallback): no multipleOf, uniqueItems, "
    "not, or conditional keywords.",
)

VLLM = register(
    Profile(
        name="vllm",
        display_name="vLLM",
        stop_reasons=CHAT_STOP_REASONS,  # vLLM speaks Chat Completions
        dialect=VLLM_DIALECT,
        carries={
            "documents": "structured_outputs json",
            "grammars": "structured_outputs grammar (Lark)",
            "tools": "tools",
        },
        provider="sdk.providers.vllm:VLLMProvider",
    )
)
"""The vLLM family: everything the SDK knows about it (`sdk.providers.profile`)."""

_PATH = "/v1/chat/completions"

VLLM_WIRE = WireProfile(
    VLLM,
    VLLM_DIALECT,
    target="vllm-xgrammar",
    grammar=True,
    tools=True,
    options={"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "seed": "seed",
             "stop": "stop", "presence_penalty": "presence_penalty",
             "frequency_penalty": "frequency_penalty", "repeat_penalty": "repetition_penalty",
             "grounding": ""},  # `grounding` is read by the codec, not sent
    # `logprobs`: every request asks for them (`Result.confidence`); `False` would drop it.
    # `max_completion_tokens`: vLLM reads it before `max_tokens`, so it would replace the limit.
    owned=frozenset({"model", "messages", "max_tokens", "max_completion_tokens",
                     "structured_outputs", "guided_json",
                     "guided_grammar", "guided_regex", "guided_choice", "response_format",
                     "tools", "tool_choice", "parallel_tool_calls", "stream", "stream_options",
                     "logprobs", "n"}),  # (`n`: one choice is read)
)  # fmt: skip


def build_request(
    request: CompletionRequest,
    *,
    model: str,
    schema: dict[str, Any] | None,
    stream: bool = False,
    grounded: str | None = None,
) -> dict[str, Any]:
    """The `/v1/chat/completions` body with `structured_outputs`: the grounded grammar of the
    schema (Lark), the schema, the request's grammar, or nothing (free text)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request, "vllm", images=True),
        "max_tokens": request.max_tokens,
        "logprobs": True,  # each token's probability (`Result.confidence`)
    }
    match request.output:
        case JsonDocument():
            if grounded is not None:
                body["structured_outputs"] = {"grammar": grounded}
            elif schema is not None:
                # No free whitespace between JSON tokens (xgrammar and guidance read it): a
                # model that would write newlines until `max_tokens` cannot (vLLM issues 38696,
                # 54497).
                body["structured_outputs"] = {"json": schema, "disable_any_whitespace": True}
        case GrammarSentence(grammar):
            body.update(vllm_structured_outputs(grammar))
        case ToolOffer() as offer:
            # vLLM constrains `required` and named choices itself; `auto` relies on the server's
            # `--tool-call-parser` (the wrong one returns the call as plain text).
            body.update(chat_tools(offer, _parameters))
        case FreeText():
            pass
        case unknown:
            assert_never(unknown)
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return finished(body, request.options, request.extra_body, VLLM_WIRE)


def _parameters(tool: Tool) -> dict[str, Any]:
    return tool.wire(VLLM_DIALECT).schema


def read_response(body: dict[str, Any]) -> Completion:
    """A chat completion body -> `Completion` (`finish_reason` in the Chat Completions table)."""
    return read_chat_body(body)


class VLLMCodec(OneRouteCodec):
    """vLLM's OpenAI-compatible wire format with `structured_outputs` (no I/O)."""

    profile = VLLM_WIRE

    def __init__(
        self,
        model: str,
        content: ContentPolicy,
        *,
        grounding: bool = True,
        where: str = "VLLMCodec()",
    ) -> None:
        """`where`: what an error names (the provider's class, where it makes the codec)."""
        check("grounding", grounding, bool, where)
        super().__init__(model, content)
        self.grounding = grounding
        """Send a contract with `SourceQuote`/`Verbatim` strings as its grounded Lark grammar
        (a call's `grounding=` option says otherwise for that call)."""

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        schema = self.checked(request)
        grounded = None
        if schema is not None and self._grounds(request):
            grounded = grounding_plan(request, grounded_lark, engine="vllm").grammar
        body = build_request(
            request, model=self.model, schema=schema, stream=stream, grounded=grounded
        )
        return Exchange(_PATH, body)

    def _grounds(self, request: CompletionRequest) -> bool:
        asked = request.options.grounding  # per call, or the provider's
        return bool(self.grounding if asked is None else asked)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        completion = read_chat_body(reply.body, request_id=reply.request_id)
        return replace(completion, notes=self._notes(request))

    def reader(self, request: CompletionRequest, request_id: str | None) -> ChatSSEStreamReader:
        return _NotedReader(self.provider, request_id, self._notes(request))

    def _notes(self, request: CompletionRequest) -> tuple[Note, ...]:
        """The note of a grounded contract sent ungrounded (decided on the schema's shape
        alone: the grammar is built with an empty source)."""
        if not self._grounds(request) or not isinstance(request.output, JsonDocument):
            return ()
        return grounding_plan(request, _grounded_shape, engine="vllm").notes


class _NotedReader(ChatSSEStreamReader):
    """The chat stream reader, its completion carrying the grounding notes."""

    def __init__(self, provider: str, request_id: str | None, notes: tuple[Note, ...]) -> None:
        super().__init__(provider, request_id)
        self._grounding_notes = notes

    def finish(self) -> Completion:
        return replace(super().finish(), notes=self._grounding_notes)


def _grounded_shape(schema: dict[str, Any], source: str) -> str:
    return grounded_lark(schema, "")


class VLLMProvider(OneRouteProvider[VLLMCodec]):
    """A vLLM server: `VLLMProvider("http://127.0.0.1:8000", model="Qwen/Qwen3-8B")`."""

    # Accept the server root or its `/v1` URL, as OpenAI clients are configured with.
    added_path = "/v1"

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        model: str,
        grounding: bool = True,
        **settings: Unpack[ServerSettings],
    ) -> None:
        super().__init__(
            base_url,
            settings,
            ServerSettings,
            # (the codec's errors name the class the caller made)
            lambda content: VLLMCodec(
                model, content, grounding=grounding, where=f"{type(self).__name__}()"
            ),
        )

    def cache_scope(self) -> dict[str, Any]:
        # Grounding decides the grammar a call that does not set it is sent with.
        return {**super().cache_scope(), "grounding": self.codec.grounding}
