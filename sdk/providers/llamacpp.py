"""llama.cpp server (`llama-server`): native `/completion` with a JSON schema or a GBNF grammar,
or its OpenAI-compatible `/v1/chat/completions`.

Four modes:

- `"auto"` (default): grammar mode with the SDK's own converter (declared order kept, nothing
  stripped), and `json_schema` only for a contract the converter refuses (then `Result.removed`
  lists what the llama.cpp dialect stripped, and a debug log line says why): the converter is
  exact or loud, so the grammar is the stricter of the two wherever it exists.
- `"json_schema"`: `POST /completion` with `json_schema`, which the server turns into a
  grammar itself. The schema goes in the llama.cpp dialect: every property required (the server
  would otherwise move required properties ahead of optional ones and change the generation
  order), numeric bounds on integers only, and patterns without `\\d`/`\\w`/`\\s`.
- `"grammar"`: `POST /completion` with a GBNF `grammar`: the one you pass as `grammar=`, or the
  one `sdk.schema.gbnf` writes from the canonical schema (declared property order, bounded
  whitespace, exact or loud: nothing is silently dropped, so there is no dialect to report).
- `"openai"`: `POST /v1/chat/completions` with `response_format` json_schema.

In the two modes that send the SDK's GBNF, a contract's `SourceQuote` and `Verbatim` strings are
grounded: the grammar admits only spans of the call's `source` there (`grounding=False` turns it
off). That grammar grows with the source, so above `grounding_limit` characters the plain grammar
goes and the parser checks the values after, with a note on the result.

The native endpoint takes a prompt, not messages. The provider learns the model's chat template
once per conversation shape (`POST /apply-template` of placeholder messages) and the model's
special-token texts once (`GET /v1/models`, `POST /tokenize`), then builds each prompt itself:
one request per call. Message content stays text: content holding a special-token text (a
document with `<|im_end|>` in it) is sent as token ids from `/tokenize` with `parse_special:
false`, one more request for that call only (`sdk.providers._llamacpp_prompt`). A
`prompt_template=` (a function from the request to the prompt string) replaces all of that; its
string is tokenized by the server with special tokens parsed, so its content goes through the
control-token policy below, as on the OpenAI route.

Control tokens on the routes where the server renders and tokenizes (`"openai"`, and a
`prompt_template=`): the system prompt and messages are searched for the control-token strings of
the common template families (plus `extra_control_tokens=`) and for the model's own special-token
texts (learned from the server as above); `control_tokens="reject"` (the default) raises
`ControlTokenInContent` before the content is sent, `"allow"` sends them (unsafe with untrusted
documents). Content is never rewritten.

What the server does, checked against a real llama-server (tests/test_local_llamacpp.py):

- A grammar it cannot parse, or a schema it cannot convert, is answered with 400: a
  `ProviderError` carrying the server's message, not retried. (Older servers generated
  unconstrained text with status 200 instead; the parser catches that output like any other.)
  A `pattern` using `\\d`, `\\w` or `\\s` is dropped silently by its converter: the dialect
  rewrites those classes before sending.
- Its converter puts required properties ahead of optional ones; the dialect keeps the declared
  order by making every property required (an optional one nullable, `null` meaning absent).
- `stop_type: limit` means `n_predict` ran out, or the context window filled up (then with
  `truncated: true`): `max_tokens` and `context_window` respectively, both `TruncatedOutput`.
- On the OpenAI route the grammar lets the model open with a Markdown code fence, which the
  server strips from a finished reply and from stream deltas, but not from a reply cut by
  `max_tokens`: that one's text is the raw prefix.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any
from typing import Literal
from typing import Unpack
from typing import assert_never
from typing import cast
from weakref import WeakKeyDictionary

from sdk import _fork
from sdk._result import Usage
from sdk._tools import Tool
from sdk._tools import ToolOffer
from sdk._values.dialect import LLAMACPP_CONVERTER
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk._values.records import Note
from sdk.contract import Contract
from sdk.grammar.wire import llamacpp_grammar
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Reply
from sdk.providers._base import StreamReader
from sdk.providers._base import TextDelta
from sdk.providers._base import text_only
from sdk.providers._base import unsupported
from sdk.providers._base import wire_name
from sdk.providers._chat import ChatSSEStreamReader
from sdk.providers._chat import chat_messages
from sdk.providers._chat import chat_tools
from sdk.providers._chat import json_event
from sdk.providers._chat import read_chat_body
from sdk.providers._chat import sse_data
from sdk.providers._control_tokens import ControlTokenPolicy
from sdk.providers._errors import provider_error
from sdk.providers._grounding import fallback_notes
from sdk.providers._grounding import grounding_plan
from sdk.providers._http import ContentPolicy
from sdk.providers._http import ServerProvider
from sdk.providers._http import ServerSettings
from sdk.providers._llamacpp_prompt import NativePrompts
from sdk.providers._llamacpp_prompt import Prompt
from sdk.providers._llamacpp_prompt import ServerTemplate
from sdk.providers._logprobs import llamacpp_probabilities
from sdk.providers._profile import WireProfile
from sdk.providers._profile import finished
from sdk.schema.dialects import WireSchema
from sdk.schema.dialects import to_wire
from sdk.schema.grounding import GBNF_SOURCE_LIMIT
from sdk.schema.grounding import grounded_gbnf
from sdk.stop_reason import StopReason

__all__ = [
    "LLAMACPP",
    "LLAMACPP_DIALECT",
    "CompletionStreamReader",
    "LlamaCppCodec",
    "LlamaCppProvider",
    "LlamaCppSettings",
    "LlamaCppWire",
    "ServerTemplate",
    "build_chat_request",
    "build_completion_request",
    "build_template_request",
    "read_completion",
]

LLAMACPP_DIALECT = LLAMACPP_CONVERTER
"""llama-server's `json_schema` dialect: the rules of its grammar converter."""

# The native `/completion` route reports `stop_type`; the OpenAI-compatible route reads Chat
# Completions' `finish_reason` (as `openai_chat`'s replies).
LLAMACPP = register(
    Profile(
        name="llamacpp",
        display_name="llama.cpp",
        aliases=frozenset({"llama_cpp", "llama.cpp", "llama_server"}),
        stop_reasons={
            "eos": StopReason.END_TURN,
            "limit": StopReason.MAX_TOKENS,
            "word": StopReason.STOP_SEQUENCE,
        },
        dialect=LLAMACPP_DIALECT,
        carries={
            "documents": "the SDK's own GBNF, or json_schema",
            "grammars": "GBNF",
            "tools": "a GBNF of the calls, or the OpenAI route's tools",
        },
        provider="sdk.providers.llamacpp:LlamaCppProvider",
    )
)
"""The llama.cpp family: everything the SDK knows about it (`sdk.providers.profile`)."""

logger = logging.getLogger(__name__)

Mode = Literal["auto", "json_schema", "grammar", "openai"]


def build_template_request(request: CompletionRequest) -> dict[str, Any]:
    """The `/apply-template` body: the conversation as chat messages."""
    return {"messages": chat_messages(request, "llamacpp")}


def build_completion_request(
    request: CompletionRequest,
    prompt: Prompt,
    *,
    schema: dict[str, Any] | None = None,
    grammar: str | None = None,
) -> dict[str, Any]:
    """The native `/completion` body: prompt (a string, or strings and token ids), token limit,
    and a schema or a grammar."""
    # n_probs: each token's probability (`Result.confidence`), at the cost of one alternative.
    body: dict[str, Any] = {"prompt": prompt, "n_predict": request.max_tokens, "n_probs": 1}
    if grammar is not None:
        body["grammar"] = grammar
    elif schema is not None:
        body["json_schema"] = schema
    return finished(body, request.options, request.extra_body, profile())


def build_chat_request(
    request: CompletionRequest, *, schema: dict[str, Any] | None = None, model: str | None = None
) -> dict[str, Any]:
    """The OpenAI-compatible body, with `response_format` json_schema (none for free text)."""
    messages = chat_messages(request, "llamacpp")
    body: dict[str, Any] = {
        "messages": messages,
        "max_tokens": request.max_tokens,
        "logprobs": True,  # each token's probability (`Result.confidence`)
    }
    if schema is not None:
        assert isinstance(request.output, JsonDocument), "a schema is a JSON request's"
        name = wire_name(request.output.contract)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": True},
        }
    if model is not None:
        body["model"] = model
    return finished(body, request.options, request.extra_body, profile("openai"))


def read_completion(body: Mapping[str, Any]) -> Completion:
    """A `/completion` reply (or the last event of its stream) -> `Completion`.

    The stop reason is `stop_type` (`eos`, `limit`, `word`); servers older than that field say it
    with the booleans `stopped_eos`, `stopped_limit`, `stopped_word`. `limit` is also what the
    server says when the context window filled up before `n_predict` was reached; it then sets
    `truncated: true`, and the stop reason is `context_window` (the raw value stays `limit`):
    a larger `max_tokens` cannot help there. A body without string `content` is unusable:
    `ValueError` (the fault boundary makes it a `ProviderError` keeping the body).
    """
    content = body.get("content")
    if not isinstance(content, str):
        raise ValueError(f"content is {type(content).__name__}, not a string")
    raw = _stop_type(body)
    stop_reason = StopReason.from_raw(raw, "llamacpp")
    if stop_reason is StopReason.MAX_TOKENS and body.get("truncated") is True:
        stop_reason = StopReason.CONTEXT_WINDOW
    model = body.get("model")
    return Completion(
        text=content,
        stop_reason=stop_reason,
        raw_stop_reason=raw,
        usage=Usage(int(body.get("tokens_evaluated") or 0), int(body.get("tokens_predicted") or 0)),
        model=model if isinstance(model, str) else None,
        tokens=llamacpp_probabilities(body),
    )


def _stop_type(body: Mapping[str, Any]) -> str | None:
    stop_type = body.get("stop_type")
    if isinstance(stop_type, str):
        return stop_type
    for flag, raw in (("stopped_eos", "eos"), ("stopped_limit", "limit"), ("stopped_word", "word")):
        if body.get(flag):
            return raw
    return None


class CompletionStreamReader:
    """Accumulates `/completion` stream events; the last one (`stop: true`) has the stop reason."""

    def __init__(self, notes: tuple[Note, ...] = ()) -> None:
        self._parts: list[str] = []
        self._last: dict[str, Any] | None = None
        self._notes = notes
        self._probabilities: list[Any] | None = None

    def feed(self, line: str) -> TextDelta | None:
        data = sse_data(line)
        if not data:
            return None
        event = json_event(data, "llamacpp")
        piece = event.get("content") or ""
        if not isinstance(piece, str):
            raise ValueError(f"content is {type(piece).__name__}, not a string")
        if piece:
            self._parts.append(piece)
        probabilities = event.get("completion_probabilities")
        if isinstance(probabilities, list) and not event.get("stop"):
            self._probabilities = [*(self._probabilities or []), *probabilities]
        if event.get("stop"):
            self._last = event
        return TextDelta(piece) if piece else None

    def finish(self) -> Completion:
        if self._last is None:
            raise provider_error("llamacpp", "stream ended before its final event")
        whole = {**self._last, "content": "".join(self._parts)}
        if self._probabilities is not None:
            whole["completion_probabilities"] = self._probabilities
        completion = read_completion(whole)
        return replace(completion, notes=self._notes)


_OPTIONS = {name: name for name in ("temperature", "top_p", "top_k", "seed", "stop",
            "presence_penalty", "frequency_penalty", "repeat_penalty")} | {
            "grounding": ""}  # read by the codec, not sent  # fmt: skip
# `n_probs` (native route) and `logprobs` (OpenAI route): every request asks for each token's
# probability (`Result.confidence`); a caller's `0` or `False` would drop it, silently. (The SDK
# reads only the chosen token's, so more alternatives would give the caller nothing either.)
_OWNED = frozenset(
    {"prompt", "n_predict", "grammar", "json_schema", "response_format", "stream",
     "stream_options", "messages", "max_tokens", "model", "tools", "tool_choice",
     "parallel_tool_calls", "grammar_lazy", "grammar_triggers", "n_probs", "logprobs"}
)  # fmt: skip


def profile(mode: Mode = "auto") -> WireProfile:
    """llama-server's wire in `mode`: grammars on the native route (not in `openai` mode), and
    no schema dialect in `grammar` mode (a grammar is sent instead)."""
    return WireProfile(
        LLAMACPP,
        None if mode == "grammar" else LLAMACPP_DIALECT,
        grammar=mode != "openai",
        tools=True,
        options=_OPTIONS,
        owned=_OWNED,
        target="llamacpp" if mode in ("auto", "grammar") else "llamacpp-json-schema",
    )


class LlamaCppSettings(ServerSettings, total=False):
    """`LlamaCppProvider`'s keywords beside its URL (see the class docstring)."""

    mode: Mode
    """How a contract is constrained: `"auto"` (the default: the SDK's own GBNF, the schema
    where the converter refuses it), `"json_schema"`, `"grammar"`, or `"openai"` (the
    OpenAI-compatible route, no grammar)."""
    grammar: str | None
    """In `mode="grammar"`: your own GBNF instead of the SDK's."""
    model: str | None
    """The model name requests carry (a server with several models)."""
    prompt_template: Callable[[CompletionRequest], str] | None
    """Renders the prompt yourself (the native route's `/completion`)."""
    grounding: bool
    """Copied values constrained to spans of the source (default `True`; per call too)."""
    grounding_limit: int
    """The longest source grounded; a longer one goes with the plain grammar and a note."""
    learned: ServerTemplate | None
    """What another provider of the same server learned (its `learned`)."""


@dataclass(frozen=True, slots=True)
class LlamaCppWire:
    """How a codec builds llama-server's requests: the provider's keywords, checked once."""

    mode: Mode = "auto"
    model: str | None = None
    grammar: str | None = None
    prompt_template: Callable[[CompletionRequest], str] | None = None
    grounding: bool = True
    grounding_limit: int = GBNF_SOURCE_LIMIT
    learned: ServerTemplate | None = None
    content: ContentPolicy = field(default_factory=lambda: ContentPolicy.of({}))
    """The control-token policy and strings."""

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "json_schema", "grammar", "openai"):
            raise ValueError(
                f"mode must be 'auto', 'json_schema', 'grammar' or 'openai', not {self.mode!r}"
            )
        if self.grammar is not None and self.mode != "grammar":
            raise ValueError("grammar= is only used in mode='grammar'")

    @classmethod
    def of(cls, settings: LlamaCppSettings, content: ContentPolicy | None = None) -> LlamaCppWire:
        """The codec's settings among the provider's keywords (the rest: its connection), with
        `content`, the control-token policy they set (read from them when not given)."""
        own = {name: value for name, value in settings.items() if name in _WIRE_FIELDS}
        policy = content if content is not None else ContentPolicy.of(settings)
        return cls(**cast(dict[str, Any], own), content=policy)


_WIRE_FIELDS = frozenset(LlamaCppWire.__dataclass_fields__) - {"content"}


class _Renders:
    """The prompts to send requests as (`LlamaCppCodec.send_rendered`): each the one
    `prompt_template=` rendered for the call's key, given for the very request object about to
    be built, and taken by its build. Held by a weak reference to that request: a request never
    built (its call left first) lets its prompt go with it, and any number of calls may wait
    between the two (a `ConcurrencyLimit`)."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[weakref.ref[CompletionRequest], object]] = {}
        self._lock = _fork.rlock()  # (a request freed while it is held lets go here)

    def keep(self, request: CompletionRequest, rendered: object) -> None:
        def gone(ref: weakref.ref[CompletionRequest], place: int = id(request)) -> None:
            with self._lock:
                if self._held.get(place, (None,))[0] is ref:
                    del self._held[place]

        with self._lock:
            self._held[id(request)] = (weakref.ref(request, gone), rendered)

    def take(self, request: CompletionRequest) -> object:
        """The prompt kept for `request` (this object: taken once), or `None`."""
        with self._lock:
            found = self._held.get(id(request))
            if found is None or found[0]() is not request:
                return None
            del self._held[id(request)]
            return found[1]

    def carry(self, given: CompletionRequest, made: CompletionRequest) -> None:
        """`made`, a copy of `given` about to be built instead, is sent as `given` would be."""
        rendered = self.take(given)
        if rendered is not None:
            self.keep(made, rendered)


class LlamaCppCodec(Codec):
    """llama-server's wire format, native or OpenAI-compatible (no I/O): in `auto` mode the
    SDK's own GBNF for a contract (its declared order kept, nothing stripped), the schema in
    the llama.cpp dialect where the converter refuses it."""

    def __init__(self, wire: LlamaCppWire) -> None:
        self.mode: Mode = wire.mode
        self.model = wire.model
        self.profile = profile(wire.mode)
        self._grammar = wire.grammar
        self._auto: WeakKeyDictionary[type[Contract], str | None] = WeakKeyDictionary()
        self.grounding = wire.grounding
        self.grounding_limit = wire.grounding_limit
        self._prompt_template = wire.prompt_template
        self._renders = _Renders()
        # What names the grammar in the cache's key, made once: a call's key then hashes a
        # digest, not the grammar's text (a hit pays for neither). A template is keyed by the
        # prompt it renders for the call (`rendered_prompt`), not here: its place stays empty,
        # so a call without one keeps the key it always had.
        self._scoped = {
            "grammar": hashlib.sha256(wire.grammar.encode()).hexdigest() if wire.grammar else None,
            "prompt_template": None,
        }
        self.content = wire.content
        self.control_tokens: ControlTokenPolicy = wire.content.policy
        self.prompts = NativePrompts(wire.learned)
        """What the codec learned of the server's chat template and special tokens."""

    def cache_scope(self) -> dict[str, Any]:
        """The settings that change what the server is asked (`LlamaCppProvider.cache_scope`)."""
        return {
            **self._scoped,
            "grounding": [self.grounding, self.grounding_limit],
            **self.content.scope(),
        }

    def rendered_prompt(self, request: CompletionRequest) -> object:
        """The prompt `prompt_template=` renders for `request` on the `/completion` route (what
        the server is asked, whatever the template reads to make it: a call is keyed by it);
        `None` without a template, and on the OpenAI route, where it is not used. A template
        returning `None` is refused here (`TypeError`: its call keyed apart, never a hit)."""
        if self._prompt_template is None or self._chat_route(request):
            return None
        rendered: object = self._prompt_template(request)
        if rendered is None:
            raise TypeError("prompt_template returned None, not a prompt")
        return rendered

    def send_rendered(self, request: CompletionRequest, rendered: object) -> None:
        self._renders.keep(request, rendered)

    def carry_rendered(self, given: CompletionRequest, made: CompletionRequest) -> None:
        self._renders.carry(given, made)

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        text_only(request, self.provider)  # images and PDFs: refused before anything is sent
        if self._chat_route(request) or self._prompt_template is not None:
            # The server tokenizes the content with special tokens parsed: check it first.
            self.content.check(request, "llamacpp")
        if self._chat_route(request):
            body = build_chat_request(request, **self._constraint(request), model=self.model)
            if isinstance(request.output, ToolOffer):
                body.update(chat_tools(request.output, _tool_parameters, named_choice=False))
            if stream:
                body.update(stream=True, stream_options={"include_usage": True})
            chat = Exchange("/v1/chat/completions", body)
            return self.prompts.checked(request, self.control_tokens, lambda: chat)
        constraint = self._constraint(request)

        def completion(prompt: Prompt) -> Exchange:
            body = build_completion_request(request, prompt, **constraint)
            if stream:
                body["stream"] = True
            return Exchange("/completion", body)

        if self._prompt_template is not None:
            rendered = self._renders.take(request)  # (the template's, for the call's key)
            prompt = self._prompt_template(request) if rendered is None else cast(Prompt, rendered)
            given = completion(prompt)
            return self.prompts.checked(request, self.control_tokens, lambda: given)
        return self.prompts.exchange(request, completion)

    def _chat_route(self, request: CompletionRequest) -> bool:
        # Tool calls always take the OpenAI route: the server renders the tools with the
        # model's template and parses the call block itself (its tool-call parser).
        return self.mode == "openai" or isinstance(request.output, ToolOffer)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        if self._chat_route(request):
            return read_chat_body(reply.body, request_id=reply.request_id)
        return replace(read_completion(reply.body), notes=self._notes(request))

    def reader(self, request: CompletionRequest, request_id: str | None) -> StreamReader:
        if self._chat_route(request):
            return ChatSSEStreamReader(self.provider, request_id)
        return CompletionStreamReader(self._notes(request))

    # --- what constrains the output ---

    def tool_schema(self, contract: type[Contract]) -> WireSchema:
        # Tools always take the OpenAI route, in the llama.cpp dialect, whatever the mode.
        return to_wire(contract, LLAMACPP_DIALECT)

    def wire_schema(self, contract: type[Contract]) -> WireSchema | None:
        """The schema sent, in the llama.cpp dialect; `None` when a grammar is sent instead
        (grammar mode, or auto mode for a contract the SDK's converter writes)."""
        if self.mode == "auto" and self._auto_grammar(contract) is not None:
            return None
        return super().wire_schema(contract)

    def _auto_grammar(self, contract: type[Contract]) -> str | None:
        """Auto mode: the contract's GBNF, or `None` where the converter refuses it (decided
        once per contract)."""
        from sdk.schema.gbnf import UnsupportedSchema
        from sdk.schema.gbnf import contract_gbnf

        if contract not in self._auto:
            try:
                self._auto[contract] = contract_gbnf(contract)
            except UnsupportedSchema as refused:
                logger.debug(
                    "llamacpp: %s sent as json_schema: the GBNF converter refused it (%s)",
                    contract.__name__,
                    refused,
                )
                self._auto[contract] = None
        return self._auto[contract]

    def grammar_for(self, contract: type[Contract], *, source: str | None = None) -> str:
        """The GBNF grammar sent in grammar mode: the one given, or written from the canonical
        schema by `sdk.schema.gbnf` (cached per contract; `UnsupportedSchema` if it cannot be
        expressed exactly, before any request is sent). With `source`: the grounded grammar a
        call with that source sends, when the provider grounds and the contract has
        `SourceQuote`/`Verbatim` strings (and the source is within `grounding_limit`)."""
        if self._grammar is not None:
            return self._grammar
        if source is not None:
            asked = CompletionRequest(JsonDocument(contract), (), 1, source=source)
            grounded = self._grounded(asked)
            if grounded is not None:
                return grounded
        # Imported here: only grammar mode needs the converter.
        from sdk.schema.gbnf import contract_gbnf

        return contract_gbnf(contract)

    def _constraint(self, request: CompletionRequest) -> dict[str, Any]:
        """The body fields that constrain the output: the schema in the llama.cpp dialect, or a
        GBNF grammar (the contract's, the one given, or a `Grammar`'s); none for free text and
        tool calls (the tools are the constraint)."""
        match request.output:
            case JsonDocument(contract):
                return self._document_constraint(request, contract)
            case GrammarSentence(grammar) if self.mode != "openai":
                return llamacpp_grammar(grammar)
            case GrammarSentence():
                raise unsupported(
                    "llamacpp (mode='openai')",
                    "a grammar",
                    ["json_schema documents", "free text", "grammars in mode 'json_schema' or "
                     "'grammar' (the native /completion route)"],
                )  # fmt: skip
            case ToolOffer() | FreeText():
                return {}
            case unknown:
                assert_never(unknown)

    def _document_constraint(
        self, request: CompletionRequest, contract: type[Contract]
    ) -> dict[str, Any]:
        if self.mode == "grammar":
            return {"grammar": self._grounded(request) or self.grammar_for(contract)}
        if self.mode == "auto":
            grammar = self._auto_grammar(contract)
            if grammar is not None:
                return {"grammar": self._grounded(request) or grammar}
        wire = self.wire_schema(contract)
        assert wire is not None
        return {"schema": wire.schema}

    def _grounds(self, request: CompletionRequest) -> bool:
        """Whether this request's grammar is the SDK's own GBNF, which can be grounded."""
        if not isinstance(request.output, JsonDocument):
            return False
        asked = request.options.grounding  # per call, or the provider's
        if not (self.grounding if asked is None else asked):
            return False
        if self.mode == "grammar":
            return self._grammar is None
        return self.mode == "auto" and self._auto_grammar(request.output.contract) is not None

    def _grounded(self, request: CompletionRequest) -> str | None:
        """The grounded GBNF (`SourceQuote`/`Verbatim` strings confined to the source's spans,
        `sdk.schema.grounding`), or `None`: nothing to ground, or a source over
        `GBNF_SOURCE_LIMIT` (then a note says the values are checked after parsing)."""
        if not self._grounds(request):
            return None
        return grounding_plan(
            request, grounded_gbnf, engine="llamacpp", source_limit=self.grounding_limit
        ).grammar

    def _notes(self, request: CompletionRequest) -> tuple[Note, ...]:
        if not self._grounds(request):
            return ()
        return fallback_notes(request, engine="llamacpp", source_limit=self.grounding_limit)


class LlamaCppProvider(ServerProvider[LlamaCppCodec]):
    """A llama.cpp server: `LlamaCppProvider("http://127.0.0.1:8080", mode="json_schema")`.

    `grounding=True` (per call too): in the modes that send the SDK's own GBNF (`"auto"`,
    `"grammar"` without `grammar=`), a contract's `SourceQuote`/`Verbatim` strings can only be
    spans of the call's source (`sdk.schema.grounding.grounded_gbnf`); a source longer than
    `grounding_limit` characters goes with the plain grammar instead, and `Result.notes` says
    so (`"grounding"`).

    `learned=`: what another provider of the same server learned of its chat template and
    special tokens (its `learned`), so this one starts without asking the server again.

    Keywords (`LlamaCppSettings`): `mode`, `grammar`, `model`, `prompt_template`, `grounding`,
    `grounding_limit`, `learned`, and a server's (`ServerSettings`: `control_tokens`,
    `extra_control_tokens`, `extra_body`, `http_client`, `timeout`, `headers`).
    """

    def __init__(
        self, base_url: str = "http://127.0.0.1:8080", **settings: Unpack[LlamaCppSettings]
    ) -> None:
        super().__init__(
            base_url,
            settings,
            LlamaCppSettings,
            lambda content: LlamaCppCodec(LlamaCppWire.of(settings, content)),
        )

    @property
    def mode(self) -> Mode:
        """How a contract is constrained (`auto`, `json_schema`, `grammar`, `openai`)."""
        return self.codec.mode

    def cache_scope(self) -> dict[str, Any]:
        # Every setting that changes what the server is asked: your own grammar, grounding (a
        # call that does not set it takes the provider's), and the control-token policy
        # (content one refuses, another sends). Your own prompt template is not: a call is
        # keyed by the prompt it renders (`LlamaCppCodec.rendered_prompt`).
        return {**super().cache_scope(), "mode": self.mode, **self.codec.cache_scope()}

    @property
    def model(self) -> str | None:
        return self.codec.model

    @property
    def learned(self) -> ServerTemplate:
        """What this provider has learned of its server's chat template and special tokens,
        as a value: `learned=` starts another provider of the same server from it (a worker
        process, `sdk.wire`'s settings) without asking the server again. Where the special
        tokens were not learned it says why: `no_vocabulary` (the server gives no vocabulary
        size) or `vocabulary_too_large` (over `LEARN_VOCABULARY_LIMIT`, 200,000: learning was
        skipped, each call checks its own content)."""
        return self.codec.prompts.learned()

    def grammar_for(self, contract: type[Contract], *, source: str | None = None) -> str:
        """The GBNF grammar sent for `contract` in grammar mode (`LlamaCppCodec.grammar_for`)."""
        return self.codec.grammar_for(contract, source=source)


def _tool_parameters(tool: Tool) -> dict[str, Any]:
    return tool.wire(LLAMACPP_DIALECT).schema
