"""The codec and transports of providers that run in this process (the embedded model, the
scripted `TestProvider`): their reply already is a `Completion`, so there is no wire format to
translate, but their calls still go through the drivers and so through the one fault boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import asynccontextmanager
from contextlib import contextmanager
from typing import Any

from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import Reply
from sdk.providers._base import TextDelta
from sdk.providers._errors import provider_error
from sdk.providers._profile import WireProfile
from sdk.providers._transports import Stream

__all__ = ["AsyncInProcessTransport", "InProcessCodec", "InProcessTransport"]

Item = TextDelta | Completion


class InProcessCodec(Codec):
    """Passes the request to the in-process generator and its `Completion` back.

    `profile` says what the engine carries and which options it takes (`extra_body`: none, the
    engine has no request body, unless the profile says so); `check` vets a request further
    before anything runs (images it cannot read, say): what either raises is the caller's
    error, raised as it is, not a provider fault.
    """

    def __init__(
        self, profile: WireProfile, check: Callable[[CompletionRequest], object] | None = None
    ) -> None:
        self.profile = profile
        self._check = check

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        if self._check is not None:
            self._check(request)
        return Exchange("generate", {"request": request})

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        if not isinstance(reply.body, Completion):
            raise TypeError(f"expected a Completion, got {type(reply.body).__name__}")
        return reply.body

    def reader(self, request: CompletionRequest, request_id: str | None) -> InProcessStreamReader:
        return InProcessStreamReader(self.provider)


class InProcessStreamReader:
    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._completion: Completion | None = None

    def feed(self, item: Item) -> TextDelta | None:
        if isinstance(item, Completion):
            self._completion = item
            return None
        if not isinstance(item, TextDelta):
            raise TypeError(f"expected a TextDelta or Completion, got {type(item).__name__}")
        return item

    def finish(self) -> Completion:
        if self._completion is None:
            raise provider_error(self._provider, "stream ended before its final event")
        return self._completion


def _request(exchange: Exchange) -> CompletionRequest:
    request = exchange.body["request"]
    assert isinstance(request, CompletionRequest)
    return request


class InProcessTransport:
    """Calls the provider's own sync functions."""

    def __init__(
        self,
        complete: Callable[[CompletionRequest], Completion],
        stream: Callable[[CompletionRequest], Iterator[Item]],
    ) -> None:
        self._complete = complete
        self._stream = stream

    def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        return Reply(self._complete(_request(exchange)))

    @contextmanager
    def open(self, exchange: Exchange, deadline: float | None) -> Iterator[Stream[Iterator[Any]]]:
        items = self._stream(_request(exchange))
        try:
            yield Stream(iter(items))
        finally:
            close = getattr(items, "close", None)
            if callable(close):
                close()


class AsyncInProcessTransport:
    """Awaits the provider's own async functions."""

    def __init__(
        self,
        complete: Callable[[CompletionRequest], Awaitable[Completion]],
        stream: Callable[[CompletionRequest], AsyncIterator[Item]],
    ) -> None:
        self._complete = complete
        self._stream = stream

    async def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        return Reply(await self._complete(_request(exchange)))

    @asynccontextmanager
    async def open(
        self, exchange: Exchange, deadline: float | None
    ) -> AsyncIterator[Stream[AsyncIterator[Any]]]:
        items = self._stream(_request(exchange))
        try:
            yield Stream(items)
        finally:
            aclose = getattr(items, "aclose", None)
            if callable(aclose):
                await aclose()
