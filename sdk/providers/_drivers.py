"""The two drivers, sync and async: every call kind of every provider, inside one fault boundary.

A driver takes a provider's codec (no I/O) and its transport (all the I/O), sends what the
codec builds, feeds it what arrives, and runs all of that inside `fault_boundary`, so that a
call either returns a `Completion` (or streams `TextDelta`s, then one) or raises `ProviderError`.
Building the request happens before the boundary: an error there (a schema a provider cannot
take, a sync call on an async client) is the caller's, raised as it is.

`deadline` is a `time.monotonic()` instant: past it, the call raises `ProviderError` (timeout).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import AsyncExitStack
from contextlib import asynccontextmanager
from typing import Any
from typing import Protocol

from sdk._values.records import Usage
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import Reply
from sdk.providers._base import StreamReader
from sdk.providers._base import TextDelta
from sdk.providers._boundary import Received
from sdk.providers._boundary import Redactor
from sdk.providers._boundary import fault_boundary
from sdk.providers._boundary import received
from sdk.providers._profile import merge_extra
from sdk.providers._transports import AsyncTransport
from sdk.providers._transports import Stream
from sdk.providers._transports import Transport
from sdk.providers._transports import deadline_error

__all__ = ["Driven", "acomplete", "astream", "built", "complete", "stream"]


class Driven(Protocol):
    """What a driver needs of a provider (`sdk.providers.Provider` has it all)."""

    @property
    def codec(self) -> Codec:
        """The provider's wire format."""
        ...

    @property
    def redactor(self) -> Redactor:
        """Removes the provider's secrets from errors."""
        ...

    @property
    def extra_body(self) -> Mapping[str, Any]:
        """Raw request fields the provider sends with every request."""
        ...

    def transport(self) -> Transport:
        """The transport of sync calls."""
        ...

    def atransport(self) -> AsyncTransport:
        """The transport of async calls."""
        ...


# --- sync ---


def complete(
    provider: Driven, request: CompletionRequest, deadline: float | None = None
) -> Completion:
    """Send `request` and read the whole reply."""
    exchange, transport = built(provider, request, stream=False), provider.transport()
    with fault_boundary(provider.codec, provider.redactor):
        exchange = _prepared(transport, exchange, deadline)
        return _read(provider.codec, transport.send(exchange, deadline), request)


def stream(
    provider: Driven, request: CompletionRequest, deadline: float | None = None
) -> Iterator[TextDelta | Completion]:
    """Text deltas as they arrive, then the `Completion`."""
    codec = provider.codec
    exchange, transport = built(provider, request, stream=True), provider.transport()
    with fault_boundary(codec, provider.redactor):
        exchange = _prepared(transport, exchange, deadline)
        with transport.open(exchange, deadline) as opened:
            reader = codec.reader(request, opened.request_id)
            shown = _Shown(opened, reader)
            try:
                for event in opened.events:
                    deltas = shown.read(event, reader.feed(event))
                    if deadline is not None and time.monotonic() > deadline:
                        raise deadline_error(codec.provider)
                    yield from deltas
                completion = shown.end(reader)
            except Exception as exc:
                raise received(exc, shown.received()) from exc
    yield completion


def built(provider: Driven, request: CompletionRequest, *, stream: bool) -> Exchange:
    """The exchange for `request`, vetted first. Before the fault boundary: an error here (an
    option the API does not take, a schema it cannot carry) is the caller's, raised as it is,
    and so is one from getting the transport (a sync call on an async client)."""
    if provider.extra_body:  # the provider's raw fields, under the call's own
        merged = merge_extra(dict(provider.extra_body), request.extra_body)
        given, request = request, dataclasses.replace(request, extra_body=merged)
        provider.codec.carry_rendered(given, request)
    provider.codec.vet(request)
    return provider.codec.build(request, stream=stream)


def _read(codec: Codec, reply: Reply, request: CompletionRequest) -> Completion:
    """A whole reply read by the codec; a reply it cannot read is kept on the error."""
    try:
        return codec.read(reply, request)
    except Exception as exc:
        shown = reply.raw if reply.raw is not None else reply.body
        raise received(exc, Received(reply.status_code, reply.request_id, shown)) from exc


class _Shown:
    """What a stream has shown so far: the event being read, the document's text and what the
    stream said the reply had cost (the driver's own record, put on the error if the stream
    fails: a stream cut midway keeps what arrived and the tokens billed for it, whichever
    provider's it was)."""

    def __init__(self, opened: Stream[Any], reader: StreamReader) -> None:
        self._opened = opened
        self._reader = reader
        self._event: Any = None
        self._text: list[str] = []
        self._usage: Usage | None = None

    def read(
        self, event: Any, fed: TextDelta | tuple[TextDelta, ...] | None
    ) -> tuple[TextDelta, ...]:
        """The deltas one event gave (one event may carry several), the document's kept."""
        self._event = event
        deltas = () if fed is None else fed if isinstance(fed, tuple) else (fed,)
        for delta in deltas:
            if type(delta) is TextDelta:
                self._text.append(delta.text)
            if delta.usage is not None:  # (cumulative: the last one said counts)
                self._usage = delta.usage
        return deltas

    def end(self, reader: Any) -> Completion:
        """The completion, once the stream has ended: no single event is to blame any more."""
        self._event = None
        completion: Completion = reader.finish()
        return completion

    def received(self) -> Received:
        opened = self._opened
        text = "".join(self._text)
        # A reader that keeps what the reply has cost so far (`said`: Anthropic's
        # `message_start`) knows it before any delta (a cut in a long thinking phase).
        said = getattr(self._reader, "said", None)
        usage = said if isinstance(said, Usage) and said != Usage() else self._usage
        return Received(opened.status_code, opened.request_id, self._event, text, usage)


def _prepared(transport: Transport, exchange: Exchange, deadline: float | None) -> Exchange:
    """Send an exchange's preliminary requests; the final exchange."""
    while exchange.then is not None:
        reply = transport.send(exchange, deadline)
        exchange = exchange.then(reply.body)
    return exchange


# --- async ---


async def acomplete(
    provider: Driven, request: CompletionRequest, deadline: float | None = None
) -> Completion:
    """Send `request` and await the whole reply."""
    exchange, transport = built(provider, request, stream=False), provider.atransport()
    with fault_boundary(provider.codec, provider.redactor):
        async with _time_limit(deadline, provider.codec.provider):
            exchange = await _aprepared(transport, exchange, deadline)
            reply: Reply = await transport.send(exchange, deadline)
        return _read(provider.codec, reply, request)


async def astream(
    provider: Driven, request: CompletionRequest, deadline: float | None = None
) -> AsyncIterator[TextDelta | Completion]:
    """The async form of `stream`. The deadline bounds each wait, never the consumer's time
    between two items (a timeout cannot span a `yield`)."""
    codec = provider.codec
    exchange, transport = built(provider, request, stream=True), provider.atransport()
    with fault_boundary(codec, provider.redactor):
        async with AsyncExitStack() as stack:
            async with _time_limit(deadline, codec.provider):
                exchange = await _aprepared(transport, exchange, deadline)
                opened = await stack.enter_async_context(transport.open(exchange, deadline))
            reader = codec.reader(request, opened.request_id)
            shown = _Shown(opened, reader)
            try:
                while True:
                    async with _time_limit(deadline, codec.provider):
                        event: Any = await anext(opened.events, _END)
                    if event is _END:
                        break
                    for delta in shown.read(event, reader.feed(event)):
                        yield delta
                completion = shown.end(reader)
            except Exception as exc:
                raise received(exc, shown.received()) from exc
    yield completion


_END = object()


async def _aprepared(
    transport: AsyncTransport, exchange: Exchange, deadline: float | None
) -> Exchange:
    while exchange.then is not None:
        reply = await transport.send(exchange, deadline)
        exchange = exchange.then(reply.body)
    return exchange


@asynccontextmanager
async def _time_limit(deadline: float | None, provider: str) -> AsyncIterator[None]:
    """`asyncio.timeout` to a monotonic deadline, raising the provider's deadline error."""
    if deadline is None:
        yield
        return
    import asyncio  # loaded by the first async call: a sync program never needs it

    loop_deadline = asyncio.get_running_loop().time() + (deadline - time.monotonic())
    timeout = asyncio.timeout_at(loop_deadline)
    try:
        async with timeout:
            yield
    except TimeoutError as exc:
        if not timeout.expired():
            raise  # a timeout of the transport's own, not the deadline
        raise deadline_error(provider) from exc
