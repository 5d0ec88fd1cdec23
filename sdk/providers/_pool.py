"""The connection pool under the httpx clients a local provider makes: httpcore2's.

httpx sends through httpcore, whose pool (1.0.9) walks every connection, and polls each idle
one's socket, at every request it assigns and every response it releases, counting its kept-alive
connections with a list per connection: a cost that grows with connections x requests. With the
connections a batch job keeps busy (64 in flight, every one kept alive: `POOL`) that pass cost
more CPU per call than the SDK's own work (bench row 16). httpcore2, the pool under httpx2 (a
dependency), assigns in one pass. `PooledTransport` and `AsyncPooledTransport` are httpx
transports on it, as httpx's own `HTTPTransport` is on httpcore: the same requests (the
`timeout` extension and all) and the same responses, and httpcore2's exceptions raised as the
httpx exceptions httpx raises for httpcore's, so a client the provider makes fails as an
injected `httpx.Client` does. A client given a transport mounts no proxy from the environment
(httpx reads `HTTP_PROXY`, `NO_PROXY`, ... only for a client without one), so the provider's
clients mount them (`proxy_mounts`, `async_proxy_mounts`): httpx's own transports, as httpx
would, each proxied URL through its proxy and the rest through the pool.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from typing import Any

import httpx

if TYPE_CHECKING:
    import httpcore2

__all__ = ["AsyncPooledTransport", "PooledTransport", "async_proxy_mounts", "proxy_mounts"]


def _exceptions() -> tuple[tuple[type[Exception], type[httpx.TransportError]], ...]:
    """httpcore2's exceptions and the httpx exception each is raised as, a subclass before its
    base (the first that matches is the most specific: a `ReadTimeout` is not a mere timeout)."""
    import httpcore2

    return (
        (httpcore2.ConnectTimeout, httpx.ConnectTimeout),
        (httpcore2.ReadTimeout, httpx.ReadTimeout),
        (httpcore2.WriteTimeout, httpx.WriteTimeout),
        (httpcore2.PoolTimeout, httpx.PoolTimeout),
        (httpcore2.TimeoutException, httpx.TimeoutException),
        (httpcore2.ConnectError, httpx.ConnectError),
        (httpcore2.ReadError, httpx.ReadError),
        (httpcore2.WriteError, httpx.WriteError),
        (httpcore2.NetworkError, httpx.NetworkError),
        (httpcore2.ProxyError, httpx.ProxyError),
        (httpcore2.UnsupportedProtocol, httpx.UnsupportedProtocol),
        (httpcore2.LocalProtocolError, httpx.LocalProtocolError),
        (httpcore2.RemoteProtocolError, httpx.RemoteProtocolError),
        (httpcore2.ProtocolError, httpx.ProtocolError),
    )


@contextmanager
def _as_httpx() -> Iterator[None]:
    """Raise an httpcore2 exception as its httpx counterpart (the original as its cause)."""
    try:
        yield
    except Exception as exc:
        for raised, counterpart in _exceptions():
            if isinstance(exc, raised):
                raise counterpart(str(exc)) from exc
        raise


def _request(request: httpx.Request) -> httpcore2.Request:
    import httpcore2

    url = httpcore2.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                        port=request.url.port, target=request.url.raw_path)  # fmt: skip
    return httpcore2.Request(request.method, url, headers=request.headers.raw,
                             content=request.stream, extensions=request.extensions)  # fmt: skip


def _pool_settings(verify: ssl.SSLContext | bool, limits: httpx.Limits) -> dict[str, Any]:
    return {
        "ssl_context": httpx.create_ssl_context(verify=verify),
        "max_connections": limits.max_connections,
        "max_keepalive_connections": limits.max_keepalive_connections,
        "keepalive_expiry": limits.keepalive_expiry,
    }


def proxy_mounts(
    verify: ssl.SSLContext | bool, limits: httpx.Limits
) -> dict[str, httpx.BaseTransport | None]:
    """The `mounts=` of a client on `PooledTransport`: the environment's proxies, as httpx
    mounts them on a client it makes its own transport for (`None`: no proxy, the pool)."""
    return {
        pattern: None
        if url is None
        else httpx.HTTPTransport(verify=verify, limits=limits, proxy=url)
        for pattern, url in _environment_proxies().items()
    }


def async_proxy_mounts(
    verify: ssl.SSLContext | bool, limits: httpx.Limits
) -> dict[str, httpx.AsyncBaseTransport | None]:
    """`proxy_mounts` for a client on `AsyncPooledTransport`."""
    return {
        pattern: None
        if url is None
        else httpx.AsyncHTTPTransport(verify=verify, limits=limits, proxy=url)
        for pattern, url in _environment_proxies().items()
    }


def _environment_proxies() -> dict[str, str | None]:
    from httpx._utils import get_environment_proxies  # (what `httpx.Client(trust_env=True)` reads)

    return get_environment_proxies()


class _Stream(httpx.SyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self._stream

    def close(self) -> None:
        self._stream.close()


class _AsyncStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        await self._stream.aclose()


class PooledTransport(httpx.BaseTransport):
    """An httpx transport on httpcore2's connection pool (see the module docstring)."""

    def __init__(self, *, verify: ssl.SSLContext | bool, limits: httpx.Limits) -> None:
        import httpcore2

        self._pool = httpcore2.ConnectionPool(**_pool_settings(verify, limits))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with _as_httpx():
            response = self._pool.handle_request(_request(request))
        return httpx.Response(response.status, headers=response.headers,
                              stream=_Stream(response.stream),
                              extensions=response.extensions)  # fmt: skip

    def close(self) -> None:
        with _as_httpx():
            self._pool.close()


class AsyncPooledTransport(httpx.AsyncBaseTransport):
    """An async httpx transport on httpcore2's connection pool (see the module docstring)."""

    def __init__(self, *, verify: ssl.SSLContext | bool, limits: httpx.Limits) -> None:
        import httpcore2

        self._pool = httpcore2.AsyncConnectionPool(**_pool_settings(verify, limits))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with _as_httpx():
            response = await self._pool.handle_async_request(_request(request))
        return httpx.Response(response.status, headers=response.headers,
                              stream=_AsyncStream(response.stream),
                              extensions=response.extensions)  # fmt: skip

    async def aclose(self) -> None:
        with _as_httpx():
            await self._pool.aclose()
