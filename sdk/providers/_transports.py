"""Transports: the only code that touches a client object. Two kinds, each sync and async.

- `SDKTransport` / `AsyncSDKTransport`: an official SDK client the user passed in (`anthropic`,
  `openai`); an exchange's route is the client method's path (`"messages.create"`), its body
  the keyword arguments.
- `HTTPTransport` / `AsyncHTTPTransport`: an `httpx` client; the route is an HTTP path under the
  provider's base URL, the body JSON.

A transport sends an `Exchange` and returns the decoded `Reply`, or opens a `Stream` of events
(SDK event objects, or the lines of an HTTP body) with its status and request id. It raises
whatever happens; what it had received by then (status, request id, raw body) goes with the
exception (`received`), and the boundary types it.

Deadlines: the async driver bounds everything with `asyncio.timeout`. The sync transports check
the deadline at every chunk an HTTP body arrives in, so a server that drips one byte at a time
cannot hold a call past it; an SDK client's whole-body read is bounded by passing the time left
as its per-request `timeout` (which bounds each wait, not their sum: stream, or use the async
client, for a hard bound).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from contextlib import AbstractContextManager
from contextlib import asynccontextmanager
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from typing import Any
from typing import Generic
from typing import Protocol
from typing import TypeVar

import httpx

from sdk.errors import ProviderError
from sdk.providers._base import Exchange
from sdk.providers._base import Reply
from sdk.providers._boundary import Received
from sdk.providers._boundary import received
from sdk.providers._endpoint import Endpoint
from sdk.providers._errors import provider_error
from sdk.providers._errors import reply_request_id

__all__ = [
    "MAX_REPLY_BYTES",
    "AsyncHTTPTransport",
    "AsyncSDKTransport",
    "AsyncTransport",
    "HTTPTransport",
    "SDKTransport",
    "Stream",
    "Transport",
    "deadline_error",
    "split_lines",
]

MAX_REPLY_BYTES = 64 * 1024 * 1024
"""A whole reply larger than this is refused: no document we ask for is that big, and a server
that sends without end must not take the process's memory with it."""


Events = TypeVar("Events", Iterator[Any], AsyncIterator[Any])


@dataclass(frozen=True, slots=True)
class Stream(Generic[Events]):
    """A streamed reply, open: its events, and what its response said first."""

    events: Events
    status_code: int | None = None
    request_id: str | None = None


class Transport(Protocol):
    """Sends exchanges synchronously."""

    def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        """Send `exchange` and read the whole reply."""
        ...

    def open(
        self, exchange: Exchange, deadline: float | None
    ) -> AbstractContextManager[Stream[Iterator[Any]]]:
        """Send `exchange` and stream its reply's events; closed on leaving the context."""
        ...


class AsyncTransport(Protocol):
    """Sends exchanges asynchronously."""

    async def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        """Send `exchange` and read the whole reply."""
        ...

    def open(
        self, exchange: Exchange, deadline: float | None
    ) -> AbstractAsyncContextManager[Stream[AsyncIterator[Any]]]:
        """Send `exchange` and stream its reply's events; closed on leaving the context."""
        ...


def deadline_error(provider: str) -> ProviderError:
    """The error of a call or attempt that ran past its deadline."""
    return provider_error(provider, "no complete reply before the deadline")


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.001, deadline - time.monotonic())


def _check(deadline: float | None, provider: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise deadline_error(provider)


# --- official SDK clients ---


class SDKTransport:
    """An official SDK's sync client (`anthropic.Anthropic`, `openai.OpenAI`)."""

    def __init__(self, client: Any, *, request_id_header: str) -> None:
        self.client = client
        self._request_id_header = request_id_header

    def _call(self, exchange: Exchange, deadline: float | None, **extra: Any) -> Any:
        method = attrgetter(exchange.route)(self.client)
        timeout = _remaining(deadline)
        if timeout is not None:
            extra["timeout"] = timeout
        return method(**exchange.body, **extra)

    def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        return _sdk_reply(self._call(exchange, deadline))

    @contextmanager
    def open(self, exchange: Exchange, deadline: float | None) -> Iterator[Stream[Iterator[Any]]]:
        with self._call(exchange, deadline, stream=True) as events:
            yield _sdk_stream(iter(events), events, self._request_id_header)


class AsyncSDKTransport:
    """An official SDK's async client (`anthropic.AsyncAnthropic`, `openai.AsyncOpenAI`)."""

    def __init__(self, client: Any, *, request_id_header: str) -> None:
        self.client = client
        self._request_id_header = request_id_header

    async def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        return _sdk_reply(await attrgetter(exchange.route)(self.client)(**exchange.body))

    @asynccontextmanager
    async def open(
        self, exchange: Exchange, deadline: float | None
    ) -> AsyncIterator[Stream[AsyncIterator[Any]]]:
        events = await attrgetter(exchange.route)(self.client)(**exchange.body, stream=True)
        async with events:
            yield _sdk_stream(events.__aiter__(), events, self._request_id_header)


def _sdk_reply(reply: Any) -> Reply:
    # The SDK returns None for a `null` body: an error shows it as it was.
    shown = reply if reply is not None else "null"
    return Reply(reply, 200, reply_request_id(reply), raw=shown)


def _sdk_stream(iterator: Events, events: Any, request_id_header: str) -> Stream[Events]:
    response = getattr(events, "response", None)
    if response is None:
        return Stream(iterator)
    return Stream(iterator, response.status_code, response.headers.get(request_id_header))


# --- httpx ---


class _HTTPBase:
    def __init__(
        self,
        provider: str,
        endpoint: Endpoint,
        headers: Mapping[str, str],
        request_id_header: str = "x-request-id",
    ) -> None:
        self.provider = provider
        self.endpoint = endpoint
        self.headers = dict(headers)
        self._request_id_header = request_id_header

    def _url(self, exchange: Exchange) -> str:
        return self.endpoint.url(exchange.route)

    def _started(self, response: httpx.Response) -> Received:
        """What the response said first (what an error while reading it keeps)."""
        return Received(response.status_code, response.headers.get(self._request_id_header))

    def _too_big(self, size: int) -> None:
        if size > MAX_REPLY_BYTES:
            raise provider_error(
                self.provider, f"reply larger than {MAX_REPLY_BYTES} bytes", status_code=200
            )

    def _reply(self, response: httpx.Response, raw: bytes, started: Received) -> Reply:
        """The reply of a whole body; an error raised here keeps the body (`received`)."""
        try:
            if response.status_code >= 400:
                raise self._status_error(response, raw)
            body = json.loads(raw)  # not JSON: the boundary says so, keeping the body
            if not isinstance(body, dict):
                raise provider_error(
                    self.provider,
                    f"reply is JSON but not an object ({type(body).__name__})",
                    status_code=response.status_code,
                )
        except Exception as exc:
            shown = Received(started.status_code, started.request_id, raw)
            raise received(exc, shown) from exc
        return Reply(body, response.status_code, started.request_id, raw=raw)

    def _status_error(self, response: httpx.Response, raw: bytes) -> ProviderError:
        text = raw.decode("utf-8", "replace")
        return provider_error(
            self.provider,
            "server returned an error",
            status_code=response.status_code,
            request_id=response.headers.get(self._request_id_header),
            headers=response.headers,
            detail=_error_detail(text),
        )


class HTTPTransport(_HTTPBase):
    """A sync `httpx.Client` posting JSON to a server."""

    def __init__(
        self, client: httpx.Client, provider: str, endpoint: Endpoint, **kwargs: Any
    ) -> None:
        super().__init__(provider, endpoint, **kwargs)
        self.client = client

    def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        with self.client.stream(
            exchange.method, self._url(exchange), json=_json(exchange), headers=self.headers
        ) as response:
            started = self._started(response)
            chunks: list[bytes] = []
            size = 0
            try:
                for chunk in response.iter_bytes():
                    _check(deadline, self.provider)
                    chunks.append(chunk)
                    size += len(chunk)
                    self._too_big(size)
            except Exception as exc:
                raise received(exc, started) from exc
            return self._reply(response, b"".join(chunks), started)

    @contextmanager
    def open(self, exchange: Exchange, deadline: float | None) -> Iterator[Stream[Iterator[Any]]]:
        with self.client.stream(
            "POST", self._url(exchange), json=exchange.body, headers=self.headers
        ) as response:
            started = self._started(response)
            if response.status_code >= 400:
                self._reply(response, response.read(), started)  # raises the status error
            lines = split_lines(_checked(response.iter_text(), deadline, self.provider))
            yield Stream(lines, started.status_code, started.request_id)


def _json(exchange: Exchange) -> dict[str, Any] | None:
    """The JSON body to send: none with a GET."""
    return exchange.body if exchange.method == "POST" else None


def _checked(chunks: Iterable[str], deadline: float | None, provider: str) -> Iterator[str]:
    for chunk in chunks:
        _check(deadline, provider)
        yield chunk


class AsyncHTTPTransport(_HTTPBase):
    """An `httpx.AsyncClient` posting JSON to a server."""

    def __init__(
        self, client: httpx.AsyncClient, provider: str, endpoint: Endpoint, **kwargs: Any
    ) -> None:
        super().__init__(provider, endpoint, **kwargs)
        self.client = client

    async def send(self, exchange: Exchange, deadline: float | None) -> Reply:
        async with self.client.stream(
            exchange.method, self._url(exchange), json=_json(exchange), headers=self.headers
        ) as response:
            started = self._started(response)
            chunks: list[bytes] = []
            size = 0
            try:
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    self._too_big(size)
            except Exception as exc:
                raise received(exc, started) from exc
            return self._reply(response, b"".join(chunks), started)

    @asynccontextmanager
    async def open(
        self, exchange: Exchange, deadline: float | None
    ) -> AsyncIterator[Stream[AsyncIterator[Any]]]:
        async with self.client.stream(
            "POST", self._url(exchange), json=exchange.body, headers=self.headers
        ) as response:
            started = self._started(response)
            if response.status_code >= 400:
                self._reply(response, await response.aread(), started)  # the status error
            lines = _async_lines(response.aiter_text())
            yield Stream(lines, started.status_code, started.request_id)


async def _async_lines(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    splitter = _LineSplitter()
    async for chunk in chunks:
        for line in splitter.feed(chunk):
            yield line
    for line in splitter.close():
        yield line


def split_lines(chunks: Iterable[str]) -> Iterator[str]:
    """The lines of a text arriving in chunks (`\\n`, `\\r\\n` or `\\r` ends a line), as soon as
    each is complete; a last line without an end was cut, and is dropped."""
    splitter = _LineSplitter()
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.close()


# Only these end a line in SSE and NDJSON (`str.splitlines` would also split on U+2028 and
# others, which JSON strings may hold raw).
_LINE_END = re.compile(r"\r\n|\n|\r")


class _LineSplitter:
    def __init__(self) -> None:
        self._pending = ""
        self._after_cr = False  # the last chunk ended with `\r`: a `\n` next belongs to it

    def feed(self, chunk: str) -> list[str]:
        if self._after_cr and chunk.startswith("\n"):
            chunk = chunk[1:]
        self._after_cr = chunk.endswith("\r")
        parts = _LINE_END.split(self._pending + chunk)
        self._pending = parts.pop()
        return parts

    def close(self) -> list[str]:
        # A last line without its end was cut mid-line: it is not an event (SSE dispatches an
        # event only at a blank line), and the reader then says the final event is missing.
        self._pending = ""
        return []


def _error_detail(text: str) -> str:
    """The message of a JSON error body (`{"error": "..."}` or `{"error": {"message": ...}}`)."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return text
