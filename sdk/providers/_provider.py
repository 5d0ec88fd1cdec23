"""`Provider`: a codec, the transports it is sent through, and the four call kinds.

A provider family is a `Codec` (its wire format, no I/O) plus the client it sends through. The
four calls (`complete`, `acomplete`, `stream`, `astream`) are the drivers', the same for every
provider; a provider only says which codec and which transport (`transport()` for sync calls,
`atransport()` for async ones), and which secrets to keep out of errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sdk.providers import _drivers
from sdk.providers._base import Codec, Completion, CompletionRequest, TextDelta
from sdk.providers._boundary import Redactor
from sdk.providers._transports import AsyncTransport, Transport
from sdk.schema.dialects import Dialect, WireSchema, to_wire
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.contract import Contract

__all__ = ["Provider"]


class Provider:
    """Base class of providers: subclasses give a `codec` and their transports."""

    name: str = "provider"
    """Provider family name (`sdk._names.PROVIDERS`), as in `Result.provider`."""

    clean_stops: frozenset[StopReason] = frozenset({StopReason.END_TURN})
    """The stop reasons that end a finished document in this provider's mode."""

    dialect: Dialect | None = None
    """The wire dialect the schema is sent in (`None`: the canonical schema, or no schema)."""

    codec: Codec
    """The provider's wire format (built by the subclass)."""

    fallback_on_refusal: bool = False
    """Whether a call moves on to the next of `candidates()` after a refusal too."""

    def candidates(self) -> tuple[Provider, ...]:
        """The providers a client call goes to in turn, each once its transport retries are
        spent: this one alone (`FallbackProvider` gives its list)."""
        return (self,)

    supports_native_reasoning: bool = False
    """Whether the codec asks for the provider's own thinking channel (`reasoning="native"`)."""

    supports_tools: bool = False
    """Whether the codec builds tool-call requests (`call_tools`); others raise
    `UnsupportedRequest` before anything is sent."""

    @property
    def model(self) -> str | None:
        """The model name requests go to, when the provider knows it up front."""
        return None

    def wire_schema(self, contract: type[Contract]) -> WireSchema | None:
        """The contract's schema as this provider receives it (cached), or `None`."""
        return to_wire(contract, self.dialect) if self.dialect is not None else None

    def tool_schema(self, contract: type[Contract]) -> WireSchema | None:
        """A tool's arguments schema as this provider receives it (`None`: the canonical one);
        the same as a document's unless the provider says otherwise."""
        return self.wire_schema(contract)

    def request_schema(self, request: CompletionRequest) -> dict[str, Any] | None:
        """The schema a JSON request sends, in this provider's dialect; `None` for a grammar or
        free-text request (or a provider without a dialect)."""
        if request.contract is None:
            return None
        wire = self.wire_schema(request.contract)
        return wire.schema if wire is not None else None

    # --- what subclasses provide ---

    def transport(self) -> Transport:
        """The transport for sync calls (a `TypeError` if the provider has none)."""
        raise TypeError(f"{type(self).__name__} has no synchronous client")

    def atransport(self) -> AsyncTransport:
        """The transport for async calls (a `TypeError` if the provider has none)."""
        raise TypeError(f"{type(self).__name__} has no asynchronous client")

    def secrets(self) -> Iterable[str]:
        """Values that must never appear in an error, a repr or a log line (API keys, ...)."""
        return ()

    @cached_property
    def redactor(self) -> Redactor:
        """Removes this provider's secrets (and secret-shaped tokens) from text."""
        return Redactor(self.secrets())

    def close(self) -> None:
        """Release what the provider opened itself (never a client the caller passed in)."""

    async def aclose(self) -> None:
        """The async form of `close`."""

    # --- the calls: the drivers' ---

    def complete(self, request: CompletionRequest, *, deadline: float | None = None) -> Completion:
        """Send the request and wait for the whole reply (`deadline`: a `time.monotonic()`
        instant)."""
        return _drivers.complete(self, request, deadline)

    async def acomplete(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> Completion:
        """Send the request and await the whole reply."""
        return await _drivers.acomplete(self, request, deadline)

    def stream(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> Iterator[TextDelta | Completion]:
        """Text deltas as they arrive, then the final `Completion` (stop reason last)."""
        return _drivers.stream(self, request, deadline)

    def astream(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> AsyncIterator[TextDelta | Completion]:
        """The async form of `stream`."""
        return _drivers.astream(self, request, deadline)
