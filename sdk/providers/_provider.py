"""`Provider`: a codec, the transports it is sent through, and the four call kinds.

A provider family is a `Codec` (its wire format, no I/O) plus the client it sends through. The
four calls (`complete`, `acomplete`, `stream`, `astream`) are the drivers', the same for every
provider; a provider only says which codec and which transport (`transport()` for sync calls,
`atransport()` for async ones), and which secrets to keep out of errors.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from enum import Enum
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING
from typing import Any
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

from sdk import _fork
from sdk.providers import _drivers
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import TextDelta
from sdk.providers._boundary import Redactor
from sdk.providers._endpoint import keyed_query
from sdk.providers._endpoint import server_of
from sdk.providers._headers import header_digest
from sdk.providers._profile import NO_SAMPLING
from sdk.providers._profile import SAMPLING_OPTIONS
from sdk.providers._profile import Sampling
from sdk.providers._profile import check_json_body
from sdk.providers._transports import AsyncTransport
from sdk.providers._transports import Transport
from sdk.schema.dialects import Dialect
from sdk.schema.dialects import WireSchema
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.contract import Contract

__all__ = ["Provider", "endpoint", "plain_text", "token_of"]


def endpoint(url: object) -> str:
    """Where a base URL points, without its credentials: scheme, host and port, path and query
    (a deployment, an API version). What tells one endpoint from another in the response
    cache's key, where no secret goes: the scheme and host as every client reaches them
    (`server_of`: `http://Gateway.test:80` is `http://gateway.test`), the path and query as
    given (a server may read either's case or order)."""
    parts = urlsplit(str(url))
    query = keyed_query(parts.query)  # (a credential in it by its digest)
    return urlunsplit((*server_of(parts), parts.path.rstrip("/"), query, ""))


_UNNAMED: dict[int, tuple[object, str]] = {}
_UNNAMED_MAX = 256
_naming = _fork.lock()


def token_of(value: object) -> str:
    """A random name for a provider's option value that cannot be named by its content (an
    object of the caller's), the same for the same object while it is remembered (it is held,
    so its id is never another's); past `_UNNAMED_MAX` the oldest go, and a value named again
    after that gets a new name (a miss, never another value's answer)."""
    with _naming:
        found = _UNNAMED.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        token = secrets.token_hex(16)
        _UNNAMED[id(value)] = (value, token)
        while len(_UNNAMED) > _UNNAMED_MAX:
            del _UNNAMED[next(iter(_UNNAMED))]
        return token


_PLAIN_DEPTH = 32
"""Nesting past which data is not named by its content (a list that holds itself, too)."""


def plain_text(value: object, depth: int = 0) -> str | None:
    """`value` as text the same in every process, when it is plain data (None, booleans,
    numbers, text, bytes, enum members, and lists, tuples, sets and mappings of them, at most
    `_PLAIN_DEPTH` deep); `None` otherwise. Typed: `1`, `1.0`, `True` and `"1"` are each
    another text, as are a list and a tuple, and a mapping's keys keep their type."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str, bytes):
        return repr(value)
    if depth >= _PLAIN_DEPTH:
        return None
    if isinstance(value, Enum):  # (by its class's name and its own, and its value)
        member = plain_text(value.value, depth + 1)
        where = f"{kind.__module__}.{kind.__qualname__}.{value.name}"
        return None if member is None else f"enum({where!r},{member})"
    items: list[str | None]
    if kind is dict and isinstance(value, dict):
        items = [f"{k}:{v}" if k is not None and v is not None else None for k, v in (
            (plain_text(key, depth + 1), plain_text(item, depth + 1)) for key, item in value.items()
        )]  # fmt: skip
    elif kind in (list, tuple, set, frozenset) and isinstance(
        value, list | tuple | set | frozenset
    ):
        items = [plain_text(item, depth + 1) for item in value]
    else:
        return None
    shown = [item for item in items if item is not None]
    if len(shown) < len(items):
        return None
    # A set's and a mapping's items sorted: their order is not their content (a set's changes
    # with the hash seed).
    ordered = shown if kind in (list, tuple) else sorted(shown)
    label = "set" if kind in (set, frozenset) else kind.__name__
    return f"{label}({','.join(ordered)})"


class Provider:
    """Base class of providers: subclasses give a `codec` and their transports.

    What the wire carries is the codec's (`codec.profile`): the properties below read it, so a
    provider holds nothing but its codec, its client or connection, and its secrets.
    """

    codec: Codec = Codec()
    """The provider's wire format (set by the subclass; this default carries nothing)."""

    fallback_on_refusal: bool = False
    """Whether a call moves on to the next of `candidates()` after a refusal too."""

    extra_body: Mapping[str, Any] = MappingProxyType({})
    """Raw request fields sent with every request of this provider (the constructor's
    `extra_body=`), under a call's own `extra_body`, which wins field by field."""

    def candidates(self) -> tuple[Provider, ...]:
        """The providers a client call goes to in turn, each once its transport retries are
        spent: this one alone (`FallbackProvider` gives its list)."""
        return (self,)

    def reached(self) -> tuple[Provider, ...]:
        """Every provider a client call through this one may send to, in order: its
        `candidates()`, and in place of one that is a list itself (a `FallbackProvider` behind
        a `ConcurrencyLimit` in another list, which sends to each of its own in turn) that
        list's. What is checked against the providers a call may reach (options, models)
        is checked against these."""
        candidates = self.candidates()
        if candidates == (self,):
            return candidates
        reached: list[Provider] = []
        for candidate in candidates:
            inner = candidate.candidates()
            reached.extend((candidate,) if inner == (candidate,) else candidate.reached())
        return tuple(reached)

    @property
    def name(self) -> str:
        """Provider family name (its profile's, `sdk.providers.profile(name)`), as in
        `Result.provider`."""
        return self.codec.profile.name

    @property
    def dialect(self) -> Dialect | None:
        """The wire dialect the schema is sent in (`None`: the canonical schema, or none)."""
        return self.codec.profile.dialect

    @property
    def clean_stops(self) -> frozenset[StopReason]:
        """The stop reasons that end a finished document in this provider's mode."""
        return self.codec.profile.clean_stops

    @property
    def supports_tools(self) -> bool:
        """Whether the wire carries tool calls (`call_tools`); others raise
        `UnsupportedRequest` before anything is sent."""
        return self.codec.profile.tools

    @property
    def supports_grammar(self) -> bool:
        """Whether the wire carries a grammar (`generate(Grammar(...))`)."""
        return self.codec.profile.grammar

    @property
    def supports_native_reasoning(self) -> bool:
        """Whether the wire asks for the provider's own thinking channel."""
        return self.codec.profile.native_reasoning

    @property
    def unreported_probabilities(self) -> str:
        """Why a reply came without token probabilities (a `min_confidence` not applied says
        it): the route reports none; a provider that reports them when asked says how."""
        return "this route reports no token probabilities"

    @property
    def holds_schema(self) -> bool:
        """Whether the wire holds a reply to the schema asked for (native structured output or
        a grammar: its profile names a preflight target); `False` for a prompt-only route (a
        test double, a provider without one), where the model is only told what to write."""
        return self.codec.profile.target is not None

    @property
    def model(self) -> str | None:
        """The model name requests go to, when the provider knows it up front."""
        return None

    @property
    def own_options(self) -> frozenset[str]:
        """The call options this provider takes beyond the SDK's sampling options (its profile
        says which: `TestProvider(options=...)`, the embedded engine's `fast_forward`): a client
        takes them as it takes `temperature`, and every provider the call may go to vets them."""
        taken = (frozenset(c.codec.profile.options) for c in self.reached())
        return frozenset().union(*taken) - SAMPLING_OPTIONS

    def wire_schema(self, contract: type[Contract]) -> WireSchema | None:
        """The contract's schema as this provider receives it (cached), or `None`."""
        return self.codec.wire_schema(contract)

    def tool_schema(self, contract: type[Contract]) -> WireSchema | None:
        """A tool's arguments schema as this provider receives it (`None`: the canonical one)."""
        return self.codec.tool_schema(contract)

    def cache_scope(self) -> dict[str, Any]:
        """What, besides the request, decides this provider's answers (the response cache's
        key): the family, the model and the raw fields it sends; providers add their settings
        and where they run (`endpoint`: the base URL without credentials, a region, a
        project; `keyed_headers`)."""
        scope: dict[str, Any] = {"provider": self.name, "model": self.model}
        if self.extra_body:
            scope["extra_body"] = dict(self.extra_body)
        headers = self.keyed_headers()
        if headers:  # (absent when none: the scope of a provider without headers stays small)
            scope["headers"] = headers
        query = self.keyed_query()
        if query:  # (by its sha256, as headers are: it may hold a gateway's credentials)
            scope["client_query"] = header_digest(query)
        return scope

    def keyed_query(self) -> str:
        """The query an HTTP client the provider was given adds to every request (httpx's
        `params=`: a gateway may route by it), as text: none here; a provider that can be
        given one says which."""
        return ""

    def keyed_headers(self) -> dict[str, str]:
        """The headers every request carries that may decide its answer, as the response
        cache's key holds them (`header_scope`): none here; a provider whose client sends
        headers of its choosing says which."""
        return {}

    def _keep_extra_body(self, extra_body: Mapping[str, Any] | None) -> None:
        """Keep a constructor's `extra_body=`, vetted now (after the codec is set): a field the
        SDK owns is a `ValueError` naming it when the provider is made, not at its first call."""
        if extra_body is None:
            return
        self.codec.profile.vet(NO_SAMPLING, extra_body)
        check_json_body(extra_body)
        # Its own copy all the way down: a nested mapping the caller changes later changes no
        # request of this provider's (as `CallOptions.extra_body`'s).
        self.extra_body = MappingProxyType(copy.deepcopy(dict(extra_body)))

    def vet_options(self, options: Sampling, extra_body: Mapping[str, Any]) -> None:
        """Refuse, before anything is sent, a sampling option this provider does not take
        (`TypeError`, with the closest it does) and an `extra_body` field the SDK owns
        (`ValueError`)."""
        self.codec.profile.vet(options, extra_body)

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
