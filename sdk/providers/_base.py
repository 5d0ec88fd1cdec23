"""The one internal shape every provider translates to and from, and the codec interface.

A provider's codec turns a `CompletionRequest` (contract, messages, limits) into an `Exchange`
(what to send, where) and reads the reply into one `Completion` (text, normalized and raw stop
reason, refusal, usage, model, request id), or a stream event by event. Codecs do no I/O, so
they are tested without servers and shared by the sync and async drivers.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Annotated
from typing import Any
from typing import ClassVar
from typing import Literal
from typing import Protocol
from typing import assert_never
from typing import get_type_hints

from sdk._message import Message
from sdk._result import Usage
from sdk._tools import ToolCall
from sdk._tools import ToolOffer
from sdk._values.content import Text
from sdk._values.declared import NOT_BLANK
from sdk._values.declared import AtLeast
from sdk._values.declared import check
from sdk._values.profile import Profile
from sdk._values.records import Note
from sdk.confidence import TokenLogprob
from sdk.providers._profile import NO_SAMPLING
from sdk.providers._profile import Sampling
from sdk.providers._profile import WireProfile
from sdk.providers._profile import finished
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import schema_info
from sdk.schema.canonical import shared_schema
from sdk.schema.dialects import WireSchema
from sdk.schema.dialects import to_wire
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.contract import Contract
    from sdk.errors import ProviderError
    from sdk.errors import UnsupportedRequest
    from sdk.grammar import Grammar

__all__ = [
    "Codec",
    "Completion",
    "CompletionRequest",
    "Exchange",
    "FreeText",
    "GrammarSentence",
    "JsonDocument",
    "Message",
    "Output",
    "Profile",
    "Reply",
    "Sampling",
    "StreamReader",
    "TextDelta",
    "ToolCallDelta",
    "ToolOffer",
    "WireProfile",
    "text_only",
    "unsupported",
    "wire_name",
]

# What providers accept as a schema or tool name (OpenAI's pattern; Anthropic's is the same).
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def text_only(request: CompletionRequest, provider: str) -> None:
    """Refuse a request whose messages carry images or documents, for a provider that takes
    text alone (`UnsupportedRequest` naming the part, before anything is sent)."""
    for message in request.messages:
        for part in message.parts:
            if not isinstance(part, Text):
                raise unsupported(
                    provider, f"{type(part).__name__} content parts", ["text messages"]
                )


@dataclass(frozen=True, slots=True)
class JsonDocument:
    """A contract's JSON document (a top-level list or union travels in its envelope
    contract, `sdk.engine.envelope`)."""

    contract: type[Contract]
    kind: ClassVar[Literal["json"]] = "json"

    @property
    def schema(self) -> dict[str, Any]:
        """The contract's canonical schema (shared: do not modify)."""
        return shared_schema(self.contract)

    @property
    def info(self) -> SchemaInfo:
        """Name, version and fingerprint of the contract's schema."""
        return schema_info(self.contract)


@dataclass(frozen=True, slots=True)
class GrammarSentence:
    """A sentence of a grammar's language."""

    grammar: Grammar
    kind: ClassVar[Literal["grammar"]] = "grammar"


@dataclass(frozen=True, slots=True)
class FreeText:
    """Text with no constraint: the working of two-phase reasoning, the eval's unconstrained
    arm."""

    kind: ClassVar[Literal["text"]] = "text"


Output = JsonDocument | GrammarSentence | ToolOffer | FreeText
"""What a request asks for, said once: a codec matches on it exhaustively (`match` with a
`typing.assert_never` default, so mypy proves each kind is handled or refused)."""


@dataclass(frozen=True)
class CompletionRequest:
    """What the client asks a provider for, given these messages: its `output` (a JSON
    document, a grammar's sentence, tool calls or free text), the limit, and what every
    request carries."""

    output: Output
    messages: tuple[Message, ...]
    max_tokens: int
    system: str | None = None
    options: Sampling = NO_SAMPLING
    """The sampling options set (`temperature`, `stop`, ...; `CallOptions`), typed: each codec
    translates those its API takes and refuses the others."""
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    """Raw request fields, merged last; the fields the SDK owns are refused (`ValueError`)."""
    reasoning: bool = False
    """Ask for the provider's own thinking channel before the output (`reasoning="native"`)."""
    source: str | None = None
    """The source document of the call (already in the messages): what a local engine can
    constrain copied values to while decoding."""
    accept_weakened: bool = False
    """Send a schema even where the target would weaken a promise no check can restore (a map
    field on a provider whose objects are closed); refused otherwise (`sdk.schema.preflight`)."""

    @property
    def kind(self) -> Literal["json", "grammar", "tools", "text"]:
        """The output's tag (for logs and spans; codecs match on `output` itself)."""
        return self.output.kind


@dataclass(frozen=True)
class Completion:
    """One provider reply, normalized."""

    text: str | None
    stop_reason: StopReason
    raw_stop_reason: str | None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    request_id: str | None = None
    refusal: str | None = None
    refusal_category: str | None = None
    diagnostics: Any = None
    """Constraint diagnostics (local models only)."""
    reasoning: str | None = None
    """The provider's thinking, or its summary, when it was asked for and given."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls the model made (raw arguments text; `value` unset)."""
    notes: tuple[Note, ...] = ()
    """What the provider did differently from what was asked (a grounded grammar sent plain,
    say); they lead `Result.notes`."""
    tokens: tuple[TokenLogprob, ...] | None = None
    """The generated tokens' probabilities, where the route reports them (`sdk.confidence`):
    what `Result.confidence` is computed from; `None` where it reports none."""

    def __post_init__(self) -> None:
        # The shape every reader ends in, checked here once, whichever reader made it: what the
        # reply said, kept as it said it (its texts, its tool calls' ids, names and arguments,
        # its token counts), of another type than declared is a `TypeError` naming it, raised
        # while the reply is read, which the fault boundary makes a `ProviderError` keeping the
        # body, as it does a local reader's `ValueError`. (An official client is not strict by
        # default: it passes a list where its own types say `str`, or a null tool name, on as
        # it came; it failed later, in the parser or the cost, outside the boundary, a bare
        # `TypeError` without the attempt and its usage.)
        _check_said(self, "the reply")
        _check_said(self.usage, "the reply's usage")
        for call in self.tool_calls:
            _check_said(call, "the reply's tool call")


_COUNT: Any = Annotated[int, AtLeast(0)]


def _check_said(record: object, where: str) -> None:
    """Refuse a reply record whose text or count fields hold another type (`check`'s error,
    naming the field)."""
    for name, declared in _said_fields(type(record)):
        value = getattr(record, name)
        if declared is int:
            if type(value) is not int or value < 0:
                check(name, value, _COUNT, where)
        elif not (isinstance(value, str) or (value is None and declared is not str)):
            check(name, value, declared, where)


def _said_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """A reply record's fields of text (`str`, `str | None`) and counts (`int`), with their
    declarations (read from its annotations once)."""
    found = _SAID.get(cls)
    if found is not None:
        return found
    hints = get_type_hints(cls)
    found = _SAID[cls] = tuple(
        (item.name, hints[item.name])
        for item in dataclasses.fields(cls)
        if hints[item.name] in (str, str | None, int)
    )
    return found


_SAID: dict[type, tuple[tuple[str, Any], ...]] = {}


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the document as it streams in."""

    text: str
    usage: Usage | None = None
    """What the reply has cost so far, where the stream says it before it ends (Anthropic's
    `message_start` gives the input tokens, each Gemini chunk the counts so far): a reply the SDK
    stops (`RunawayOutput`) is then charged for its input too. `None` where it does not."""


@dataclass(frozen=True, slots=True)
class ToolCallDelta(TextDelta):
    """A piece of one tool call's arguments (`text`), or its announcement (empty `text`);
    `index` keeps parallel calls apart, `id` and `name` are set once known."""

    index: int = 0
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Exchange:
    """One request a codec asks the driver to send (built without I/O).

    `route` is where it goes: an SDK client's method path (`"messages.create"`) or an HTTP path
    (`"/completion"`); `body` the keyword arguments or the JSON body. `then`, when set, makes
    this a preliminary request: the driver sends it, and `then(reply_body)` builds the next
    exchange (a rendered prompt, say), so a multi-step call stays sans-IO. `method` is the HTTP
    method (`"GET"` sends no body); SDK transports ignore it.
    """

    route: str
    body: dict[str, Any]
    then: Callable[[Any], Exchange] | None = None
    method: Literal["POST", "GET"] = "POST"


@dataclass(frozen=True)
class Reply:
    """What a transport received for a whole (not streamed) exchange."""

    body: Any
    """The decoded body: an SDK response object, or the parsed JSON."""
    status_code: int | None = None
    request_id: str | None = None
    raw: Any = None
    """The body as it came (raw text or bytes), for an error to show if it cannot be read
    (`None`: `body`)."""


class StreamReader(Protocol):
    """A stream reader: events in, document deltas out, the `Completion` at the end.

    `finish()` raises `ProviderError` when the stream ended before its final event: a cut
    stream is a transport fault, not a finished document.
    """

    def feed(self, event: Any) -> TextDelta | tuple[TextDelta, ...] | None:
        """Read one event; the text it added to the document, if any (several deltas when one
        event carries pieces of several tool calls)."""
        ...

    def finish(self) -> Completion:
        """The whole reply, once the stream has ended."""
        ...


class Codec:
    """A provider's wire format, with no I/O: build requests, read replies and streams.

    Subclasses set `profile` (the wire's facts: dialect, clean stops, what it carries, the
    options it takes, the fields the SDK owns) and implement `build`, `read` and `reader`, and
    `classify` for their SDK's exceptions; the drivers (`sdk.providers._drivers`) vet each
    request against the profile and do the sending, sync or async, inside one fault boundary.
    """

    profile: WireProfile = WireProfile(Profile(name="provider", display_name="no provider"), None)

    @property
    def provider(self) -> str:
        """The provider family's name (its profile's, `sdk.providers.profile(name)`)."""
        return self.profile.name

    def vet(self, request: CompletionRequest) -> None:
        """Refuse, before building, an option the API does not take (`TypeError`), an
        `extra_body` field the SDK owns (`ValueError`), and a schema whose promise this target
        would weaken with no check able to restore it (`UnsupportedRequest`, unless the request
        accepts it: `sdk.schema.preflight`)."""
        self.profile.vet(request.options, request.extra_body)
        target = self.profile.target
        if target is None or request.accept_weakened:
            return
        match request.output:
            case JsonDocument(contract):
                asked = [contract]
            case ToolOffer(tools):
                asked = [tool.arguments for tool in tools]
            case GrammarSentence() | FreeText():
                asked = []
            case unknown:
                assert_never(unknown)
        for contract in asked:
            refusal = weakened_by(contract, target)
            if refusal is not None:
                raise unsupported_schema(refusal)

    def finished(self, body: dict[str, Any], request: CompletionRequest) -> dict[str, Any]:
        """A built body with the request's sampling options put where the API wants them and
        its `extra_body` merged in, last."""
        return finished(body, request.options, request.extra_body, self.profile)

    def wire_schema(self, contract: type[Contract]) -> WireSchema | None:
        """The contract's schema as this wire carries it (cached), or `None` (the canonical
        schema, or a grammar instead)."""
        dialect = self.profile.dialect
        return to_wire(contract, dialect) if dialect is not None else None

    def tool_schema(self, contract: type[Contract]) -> WireSchema | None:
        """A tool's arguments schema as this wire carries it; a document's unless the wire
        says otherwise."""
        return self.wire_schema(contract)

    def request_schema(self, request: CompletionRequest) -> dict[str, Any] | None:
        """The schema a JSON request sends, in this wire's dialect; `None` for a grammar or
        free-text request (or a wire without a dialect)."""
        if not isinstance(request.output, JsonDocument):
            return None
        wire = self.wire_schema(request.output.contract)
        return wire.schema if wire is not None else None

    def rendered_prompt(self, request: CompletionRequest) -> object:
        """What `request` is sent as beyond its fields where a setting of the provider's makes
        it (llama.cpp's `prompt_template=` on its `/completion` route: the prompt the template
        renders for it, text, or what else it returns), for the response cache's key: the same
        rendering, the same request; `None` where no setting does (the default: the request's
        fields say all it is sent as). May raise what the setting raises (the build raises it
        too)."""
        return None

    def send_rendered(self, request: CompletionRequest, rendered: object) -> None:
        """Send `request` (this very object, about to be built) as `rendered`, what
        `rendered_prompt` gave for the call's key for a request equal to it: a setting that
        renders runs once a call, and the request is sent as it was keyed (one rendering
        otherwise each time would store its answer under another's key). Nothing by default."""

    def carry_rendered(self, given: CompletionRequest, made: CompletionRequest) -> None:
        """`made`, a copy of `given` built in its place (the provider's `extra_body` merged into
        it), is sent as `given` was to be (`send_rendered`). Nothing by default."""

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        """The exchange that asks for `request` (streamed or whole)."""
        raise NotImplementedError

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        """A whole reply to `request` -> `Completion`. May raise anything on a wrong-shaped
        body: the fault boundary turns it into `ProviderError`."""
        raise NotImplementedError

    def reader(self, request: CompletionRequest, request_id: str | None) -> StreamReader:
        """A fresh reader for one streamed reply to `request`."""
        raise NotImplementedError

    def classify(self, error: BaseException) -> ProviderError | None:
        """This provider's own exceptions (its SDK's API errors) -> `ProviderError`; `None`
        leaves the error to the boundary's generic mapping."""
        return None


@functools.lru_cache(maxsize=256)
def weakened_by(contract: type[Contract], target: str) -> str | None:
    """The refusal message when `target` would silently weaken `contract` (computed once per
    contract and target), or `None`."""
    from sdk.schema.preflight import preflight
    from sdk.schema.preflight import weakened_error_message

    report = preflight(contract, target)
    return weakened_error_message(report) if report.weakened else None


def unsupported_schema(message: str) -> UnsupportedRequest:
    """The refusal of a schema a target would weaken (see `weakened_by`)."""
    from sdk.errors import UnsupportedRequest

    return UnsupportedRequest(message, supported=["accept_weakened_schema=True"])


def unsupported(provider: str, what: str, supported: Sequence[str]) -> UnsupportedRequest:
    """The error of a request a provider cannot take, naming what it does support."""
    from sdk.errors import UnsupportedRequest

    return UnsupportedRequest(
        f"{provider} cannot take {what}; it supports: {', '.join(supported)}", supported=supported
    )


def wire_name(contract: type[Contract]) -> str:
    """The name a provider gets for the contract's schema: name and version, `Decision_v1`.

    The version is part of it so that a provider-side cache or log never mixes two versions.
    """
    info = schema_info(contract)
    return _NAME_CHARS.sub("_", f"{info.name}_v{info.version}")[:64]


def check_model(model: object, where: str) -> None:
    """Refuse a provider's `model` that is not text with something in it (the declared
    `NOT_BLANK`), naming it where it is given: `model=5` was sent as a JSON number and
    `model=""` as is, each a 404 (or a 400) from the server at every call."""
    check("model", model, Annotated[str, NOT_BLANK], where)
