"""The one internal shape every provider translates to and from, and the codec interface.

A provider's codec turns a `CompletionRequest` (contract, messages, limits) into an `Exchange`
(what to send, where) and reads the reply into one `Completion` (text, normalized and raw stop
reason, refusal, usage, model, request id), or a stream event by event. Codecs do no I/O, so
they are tested without servers and shared by the sync and async drivers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sdk._result import Usage
from sdk.schema.canonical import SchemaInfo, schema_info, shared_schema
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.contract import Contract
    from sdk.errors import ProviderError

__all__ = [
    "Codec",
    "Completion",
    "CompletionRequest",
    "Exchange",
    "Message",
    "Reply",
    "StreamReader",
    "TextDelta",
    "wire_name",
]

# What providers accept as a schema or tool name (OpenAI's pattern; Anthropic's is the same).
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation turn."""

    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class CompletionRequest:
    """What the client asks a provider for: a contract's document, given these messages."""

    contract: type[Contract]
    messages: tuple[Message, ...]
    max_tokens: int
    system: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific keyword arguments passed through as given (temperature, ...)."""

    @property
    def schema(self) -> dict[str, Any]:
        """The contract's canonical schema (shared: do not modify)."""
        return shared_schema(self.contract)

    @property
    def schema_info(self) -> SchemaInfo:
        """Name, version and fingerprint of the contract's schema."""
        return schema_info(self.contract)


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


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the document as it streams in."""

    text: str


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
    stream: bool = False
    then: Callable[[Any], Exchange] | None = None
    method: Literal["POST", "GET"] = "POST"


@dataclass(frozen=True)
class Reply:
    """What a transport received for a whole (not streamed) exchange."""

    body: Any
    """The decoded body: an SDK response object, or the parsed JSON."""
    status_code: int | None = None
    request_id: str | None = None


class StreamReader(Protocol):
    """A stream reader: events in, document deltas out, the `Completion` at the end.

    `finish()` raises `ProviderError` when the stream ended before its final event: a cut
    stream is a transport fault, not a finished document.
    """

    def feed(self, event: Any) -> TextDelta | None:
        """Read one event; the text it added to the document, if any."""
        ...

    def finish(self) -> Completion:
        """The whole reply, once the stream has ended."""
        ...


class Codec:
    """A provider's wire format, with no I/O: build requests, read replies and streams.

    Subclasses implement `build`, `read` and `reader`, and `classify` for their SDK's
    exceptions; the drivers (`sdk.providers._drivers`) do the sending, sync or async, inside
    one fault boundary.
    """

    provider: str = "provider"
    """The provider family's name (`sdk._names.PROVIDERS`)."""

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        """The exchange that asks for `request` (streamed or whole)."""
        raise NotImplementedError

    def read(self, reply: Reply) -> Completion:
        """A whole reply -> `Completion`. May raise anything on a wrong-shaped body: the fault
        boundary turns it into `ProviderError`."""
        raise NotImplementedError

    def reader(self, request_id: str | None) -> StreamReader:
        """A fresh reader for one streamed reply."""
        raise NotImplementedError

    def classify(self, error: BaseException) -> ProviderError | None:
        """This provider's own exceptions (its SDK's API errors) -> `ProviderError`; `None`
        leaves the error to the boundary's generic mapping."""
        return None


def wire_name(contract: type[Contract]) -> str:
    """The name a provider gets for the contract's schema: name and version, `Decision_v1`.

    The version is part of it so that a provider-side cache or log never mixes two versions.
    """
    info = schema_info(contract)
    return _NAME_CHARS.sub("_", f"{info.name}_v{info.version}")[:64]
