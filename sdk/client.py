"""`StructuredClient` and `AsyncStructuredClient`: ask a provider for a contract, get a `Result`.

    client = StructuredClient(AnthropicProvider(anthropic.Anthropic(), model="claude-sonnet-4-6"))
    result = client.generate(Decision, prompt="Approve this refund?", source=ticket)
    result.value          # a Decision that passed every check
    result.usage          # tokens over every attempt

The two clients share everything but the `await` (the way httpx's `Client` and `AsyncClient`
share a base): `_BaseClient` resolves the options and starts each call (`sdk.engine.setup`: the
output kind and the attempts machine), and `sdk.engine.loops` moves data between that machine
and the provider's driver. The per-call options are declared once, in
`sdk.engine.options.CallOptions`; `with_options` returns a copy with other defaults.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Self
from typing import TypeVar
from typing import Unpack
from typing import overload
from weakref import WeakKeyDictionary

from sdk._result import Result
from sdk._result import ToolCalls
from sdk._tools import PartialToolCall
from sdk._tools import Tool
from sdk._tools import ToolChoice
from sdk._values.declared import OptionalCount
from sdk._values.declared import check
from sdk.contract import Contract
from sdk.engine import loops
from sdk.engine.kinds import TextSnapshot
from sdk.engine.kinds.tools import check_tools
from sdk.engine.options import CALL_TOOLS
from sdk.engine.options import GENERATE
from sdk.engine.options import STREAM
from sdk.engine.options import STREAM_TOOLS
from sdk.engine.options import CallOptions
from sdk.engine.options import CallSpec
from sdk.engine.options import ClientOptions
from sdk.engine.retry import Backoff
from sdk.engine.retry import MaxTokensRamp
from sdk.engine.setup import start_call
from sdk.engine.setup import start_tools_call
from sdk.engine.setup import vet_on_reached
from sdk.grammar import Grammar
from sdk.parsing.incremental import Partial
from sdk.providers._provider import Provider
from sdk.providers.limit import ConcurrencyLimit

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "AsyncStructuredClient",
    "Backoff",
    "CallOptions",
    "ClientOptions",
    "MaxTokensRamp",
    "StructuredClient",
]

C = TypeVar("C", bound=Contract)

# The constructors' own keywords beside the settings (so a misspelling gets "did you mean").
_SYNC_KEYWORDS = frozenset({"sleep"})
_ASYNC_KEYWORDS = frozenset({"sleep", "max_concurrency"})

F = TypeVar("F", bound=Callable[..., Any])


def _callable(value: F, name: str, where: str) -> F:
    check(name, value, Callable[..., Any], where)
    return value


def _own_options(provider: object) -> frozenset[str]:
    """The call options `provider` takes beyond the SDK's (none for what is not a provider,
    which the client then refuses)."""
    return provider.own_options if isinstance(provider, Provider) else frozenset()


class _BaseClient:
    """Everything the two clients share: all but sending the request."""

    def __init__(self, provider: Provider, config: CallSpec) -> None:
        if not isinstance(provider, Provider):
            raise TypeError(f"provider must be an sdk.providers.Provider, not {provider!r}")
        # What the client's requests would carry, vetted now on every provider they may reach
        # (a sampling option one does not take, an `extra_body` field one owns), as a call's are
        vet_on_reached(config.transport, provider)
        self.provider = provider
        self.config = config
        """The client's settings and call defaults, resolved (`sdk.engine.options.CallSpec`)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.provider!r}, retries={self.retries})"

    @property
    def retries(self) -> int:
        """Invalid-output retries per call."""
        return self.config.attempts.retries

    @property
    def max_tokens(self) -> int:
        """The default output limit of each request."""
        return self.config.transport.max_tokens

    def with_options(self, **options: Unpack[ClientOptions]) -> Self:
        """A copy of this client with other settings or call defaults (`temperature=0`,
        `deadline=None`, `retries=0`, ...), each checked now (a sampling option or an
        `extra_body` field against every provider the client may reach, as the constructor
        does); the provider is shared, this client unchanged."""
        copy = self._copy()
        config = self.config.updated(options, "with_options()", taken=self.provider.own_options)
        sent, before = config.transport, self.config.transport
        # (vetted again only when what is sent changed: `with_options` may be called per request)
        if sent.options is not before.options or sent.extra_body is not before.extra_body:
            vet_on_reached(sent, self.provider)
        copy.config = config
        return copy

    def _copy(self) -> Self:
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        return copy


class StructuredClient(_BaseClient):
    """Generate contracts through a provider, synchronously.

    Settings (`ClientOptions`): `retries` (invalid-output retries, with feedback), `enum_case`
    (the parser's casing policy), `truncation` (opt-in `MaxTokensRamp`), `refusal_retries`,
    `backoff` (transport retries), `token_budget`, `hooks` (`sdk.hooks.Hooks`, for telemetry
    `sdk.telemetry.OpenTelemetryHooks`), `clock`; and defaults for every call's options
    (`CallOptions`: `max_tokens`, `deadline`, `attempt_deadline`, `system`, `temperature`, ...).
    `sleep`: how backoff waits (tests pass a recorder).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        sleep: Callable[[float], None] = time.sleep,
        **options: Unpack[ClientOptions],
    ) -> None:
        where = "StructuredClient()"
        super().__init__(
            provider,
            CallSpec.defaults().updated(options, where, _SYNC_KEYWORDS, _own_options(provider)),
        )
        self._sleep = _callable(sleep, "sleep", where)

    def __enter__(self) -> StructuredClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what the provider opened itself (never a client you passed in)."""
        self.provider.close()

    @overload
    def generate(self, contract: type[C], **options: Unpack[CallOptions]) -> Result[C]: ...
    @overload
    def generate(self, contract: Grammar, **options: Unpack[CallOptions]) -> Result[str]: ...
    @overload
    def generate(
        self, contract: type[list[C]], **options: Unpack[CallOptions]
    ) -> Result[list[C]]: ...
    @overload
    def generate(self, contract: Any, **options: Unpack[CallOptions]) -> Result[Any]: ...

    def generate(self, contract: Any, **options: Unpack[CallOptions]) -> Result[Any]:
        """A `contract` value from the provider, or a typed error.

        `contract`: a `Contract`, a `Grammar`, `list[C]` or a union `A | B`. Pass a `prompt`
        (and optionally a `source` document, which is added to the prompt and checked against
        every `SourceQuote`), or whole `messages`; the other options are `CallOptions`.
        """
        machine = start_call(self.config, self.provider, contract, options, GENERATE)
        result: Result[Any] = loops.complete(machine, self._sleep)
        return result

    @overload
    def stream(
        self, contract: type[C], **options: Unpack[CallOptions]
    ) -> Iterator[Partial[C] | Result[C]]: ...
    @overload
    def stream(
        self, contract: Grammar, **options: Unpack[CallOptions]
    ) -> Iterator[TextSnapshot | Result[str]]: ...
    @overload
    def stream(
        self, contract: type[list[C]], **options: Unpack[CallOptions]
    ) -> Iterator[C | Result[list[C]]]: ...
    @overload
    def stream(self, contract: Any, **options: Unpack[CallOptions]) -> Iterator[Any]: ...

    def stream(self, contract: Any, **options: Unpack[CallOptions]) -> Iterator[Any]:
        """Like `generate`, streaming: what the output shows as it arrives, then the `Result`
        (last). A contract shows `Partial` snapshots (never validated); `list[Item]` each item,
        validated exactly as the `Result` validates it, once complete; a grammar its text so
        far (`TextSnapshot`, a `str`). After a retry, the stream starts again from the new
        attempt's first character (every snapshot says its `.attempt`).
        """
        machine = start_call(self.config, self.provider, contract, options, STREAM)
        return loops.stream(machine, self._sleep)

    def call_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        **options: Unpack[CallOptions],
    ) -> ToolCalls:
        """Offer `tools` and return the calls the model made, each one's arguments parsed into
        its tool's contract and checked (with the `source`), or a typed error.

        `tool_choice`: `"auto"` (the model decides), `"required"` (at least one call), a `Tool`
        or its name (a call to that one), `"none"` (no call). `parallel_tool_calls`: allow
        several calls in one turn (`None`: the provider's default). An unknown tool or invalid
        arguments is retried with feedback (each call answered with a tool result marked as an
        error), up to the client's `retries`. The SDK does not run the tools: send their results
        back with `messages=[..., result.message(), Message("user", "", tool_results=...)]`.
        """
        offer = check_tools(tools, tool_choice, parallel_tool_calls)
        machine = start_tools_call(self.config, self.provider, offer, options, CALL_TOOLS)
        calls: ToolCalls = loops.complete(machine, self._sleep)
        return calls

    def stream_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        **options: Unpack[CallOptions],
    ) -> Iterator[PartialToolCall | ToolCalls]:
        """Like `call_tools`, streaming: a `PartialToolCall` snapshot per argument fragment
        (parallel calls apart by `index`; `done` once a call's arguments are complete), then
        the `ToolCalls` (last). Snapshots are never validated and say their `.attempt`.
        """
        offer = check_tools(tools, tool_choice, parallel_tool_calls)
        machine = start_tools_call(self.config, self.provider, offer, options, STREAM_TOOLS)
        return loops.stream(machine, self._sleep)


async def _asyncio_sleep(seconds: float) -> None:
    """`asyncio.sleep`, imported with the first wait (a sync program never loads asyncio)."""
    import asyncio

    await asyncio.sleep(seconds)


class AsyncStructuredClient(_BaseClient):
    """Generate contracts through a provider, asynchronously; many calls at once.

    Takes the settings of `StructuredClient`, plus `max_concurrency`: at most this many provider
    requests are in flight at once across all calls of this client (the rest wait their turn),
    so a burst of a thousand calls neither opens a thousand connections nor trips rate limits.
    Cancelling a call cancels its request and frees its place; nothing is left running. The
    client can be used from several event loops one after another (two `asyncio.run` calls).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        max_concurrency: int | None = 64,
        sleep: Callable[[float], Awaitable[None]] = _asyncio_sleep,
        **options: Unpack[ClientOptions],
    ) -> None:
        where = "AsyncStructuredClient()"
        super().__init__(
            provider,
            CallSpec.defaults().updated(options, where, _ASYNC_KEYWORDS, _own_options(provider)),
        )
        check("max_concurrency", max_concurrency, OptionalCount, where)
        self.max_concurrency = max_concurrency
        self._sleep = _callable(sleep, "sleep", where)
        # One semaphore per event loop, kept by the client (whatever provider it is given).
        self._limits: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            WeakKeyDictionary()
        )

    async def __aenter__(self) -> AsyncStructuredClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close what the provider opened itself (never a client you passed in)."""
        await self.provider.aclose()

    def limit(self) -> asyncio.Semaphore | None:
        """The semaphore bounding this client's requests in the running event loop."""
        limited = self._sending
        return limited.limit() if isinstance(limited, ConcurrencyLimit) else None

    @property
    def _sending(self) -> Provider:
        """The provider behind the client's limit: what requests are sent through."""
        if self.max_concurrency is None:
            return self.provider
        return ConcurrencyLimit(self.provider, self.max_concurrency, _limits=self._limits)

    @overload
    async def generate(self, contract: type[C], **options: Unpack[CallOptions]) -> Result[C]: ...
    @overload
    async def generate(self, contract: Grammar, **options: Unpack[CallOptions]) -> Result[str]: ...
    @overload
    async def generate(
        self, contract: type[list[C]], **options: Unpack[CallOptions]
    ) -> Result[list[C]]: ...
    @overload
    async def generate(self, contract: Any, **options: Unpack[CallOptions]) -> Result[Any]: ...

    async def generate(self, contract: Any, **options: Unpack[CallOptions]) -> Result[Any]:
        """A `contract` value from the provider, or a typed error (see `StructuredClient`)."""
        machine = start_call(self.config, self._sending, contract, options, GENERATE)
        result: Result[Any] = await loops.acomplete(machine, self._sleep)
        return result

    @overload
    def stream(
        self, contract: type[C], **options: Unpack[CallOptions]
    ) -> AsyncIterator[Partial[C] | Result[C]]: ...
    @overload
    def stream(
        self, contract: Grammar, **options: Unpack[CallOptions]
    ) -> AsyncIterator[TextSnapshot | Result[str]]: ...
    @overload
    def stream(
        self, contract: type[list[C]], **options: Unpack[CallOptions]
    ) -> AsyncIterator[C | Result[list[C]]]: ...
    @overload
    def stream(self, contract: Any, **options: Unpack[CallOptions]) -> AsyncIterator[Any]: ...

    def stream(self, contract: Any, **options: Unpack[CallOptions]) -> AsyncIterator[Any]:
        """What the output shows as it arrives, then the `Result` (see
        `StructuredClient.stream`)."""
        machine = start_call(self.config, self._sending, contract, options, STREAM)
        return loops.astream(machine, self._sleep)

    async def call_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        **options: Unpack[CallOptions],
    ) -> ToolCalls:
        """The calls the model made, parsed and checked (see `StructuredClient.call_tools`)."""
        offer = check_tools(tools, tool_choice, parallel_tool_calls)
        machine = start_tools_call(self.config, self._sending, offer, options, CALL_TOOLS)
        calls: ToolCalls = await loops.acomplete(machine, self._sleep)
        return calls

    def stream_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        **options: Unpack[CallOptions],
    ) -> AsyncIterator[PartialToolCall | ToolCalls]:
        """`PartialToolCall` snapshots, then the `ToolCalls` (see
        `StructuredClient.stream_tools`)."""
        offer = check_tools(tools, tool_choice, parallel_tool_calls)
        machine = start_tools_call(self.config, self._sending, offer, options, STREAM_TOOLS)
        return loops.astream(machine, self._sleep)
