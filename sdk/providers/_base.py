"""The one internal shape every provider translates to and from.

A provider turns a `CompletionRequest` (contract, messages, limits) into its own call and reads
the reply into one `Completion` (text, normalized and raw stop reason, refusal, usage, model,
request id). Request building and response reading are pure functions in each provider module,
so they are tested without I/O and shared by the sync and async paths; only the call itself
differs.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sdk._result import Usage
from sdk.schema.canonical import SchemaInfo, schema_info, shared_schema
from sdk.schema.dialects import Dialect, WireSchema, to_wire
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.contract import Contract

__all__ = ["Completion", "CompletionRequest", "Message", "Provider", "TextDelta", "wire_name"]

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


class Provider:
    """Base class of providers. Subclasses implement the calls their client kind supports."""

    name: str = "provider"
    """Short provider family name, as in `Result.provider` and `StopReason.from_raw`."""

    clean_stops: frozenset[StopReason] = frozenset({StopReason.END_TURN})
    """The stop reasons that end a finished document in this provider's mode."""

    dialect: Dialect | None = None
    """The wire dialect the schema is sent in (`None`: the canonical schema, or no schema)."""

    @property
    def model(self) -> str | None:
        """The model name requests go to, when the provider knows it up front."""
        return None

    def wire_schema(self, contract: type[Contract]) -> WireSchema | None:
        """The contract's schema as this provider receives it (cached), or `None`."""
        return to_wire(contract, self.dialect) if self.dialect is not None else None

    def close(self) -> None:
        """Release what the provider opened itself (never a client the caller passed in)."""

    async def aclose(self) -> None:
        """The async form of `close`."""

    def complete(self, request: CompletionRequest) -> Completion:
        """Send the request and wait for the whole reply."""
        raise NotImplementedError(f"{type(self).__name__} has no synchronous client")

    async def acomplete(self, request: CompletionRequest) -> Completion:
        """Send the request and await the whole reply."""
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous client")

    def stream(self, request: CompletionRequest) -> Iterator[TextDelta | Completion]:
        """Text deltas as they arrive, then the final `Completion` (stop reason last)."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def astream(self, request: CompletionRequest) -> AsyncIterator[TextDelta | Completion]:
        """The async form of `stream`."""
        raise NotImplementedError(f"{type(self).__name__} does not stream asynchronously")


def wire_name(contract: type[Contract]) -> str:
    """The name a provider gets for the contract's schema: name and version, `Decision_v1`.

    The version is part of it so that a provider-side cache or log never mixes two versions.
    """
    info = schema_info(contract)
    return _NAME_CHARS.sub("_", f"{info.name}_v{info.version}")[:64]
