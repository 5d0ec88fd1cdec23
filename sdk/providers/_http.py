"""The httpx plumbing shared by the local adapters (llama.cpp, vLLM, Ollama).

An adapter posts JSON and reads JSON, or reads a stream of lines; everything else (which body,
which fields) is its own pure code. Clients are injectable: pass an `httpx.Client` to use the
sync calls, an `httpx.AsyncClient` for the async ones, or nothing and the provider opens (and on
`close()` / `aclose()` closes) its own, one of each kind, on first use.

The clients a provider opens itself keep httpx's default connection limits (100 connections, 20
kept alive); `AsyncStructuredClient(max_concurrency=64)` keeps a burst of calls below them, and
the pool wait is as long as the read timeout, so queued requests wait instead of failing. For a
plain `http://` server (the usual local case) they do not load the CA bundle: that takes about
20 ms, on the event loop for an async client's first call, for TLS that is never used there.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, ClassVar, Protocol

import httpx

from sdk.errors import ProviderError
from sdk.providers._base import Completion, CompletionRequest, Provider, TextDelta
from sdk.providers._errors import provider_error

__all__ = ["HTTPProvider", "LineStream", "OneRouteProvider", "sse_data", "tls_verify"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
"""Local generation can be slow; connecting to a local server should not be."""


class HTTPProvider(Provider):
    """Base of providers that talk to a server over HTTP with httpx."""

    def __init__(
        self,
        base_url: str,
        *,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        # `headers` (an `Authorization` for a server started with an API key, ...) go on every
        # request, whether the client is ours or injected; `timeout` only on clients we open.
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._sync: httpx.Client | None = None
        self._async: httpx.AsyncClient | None = None
        self._given = http_client
        if isinstance(http_client, httpx.Client):
            self._sync = http_client
        elif isinstance(http_client, httpx.AsyncClient):
            self._async = http_client
        elif http_client is not None:
            raise TypeError(
                f"http_client must be an httpx.Client or httpx.AsyncClient, not {http_client!r}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    # --- clients ---

    def _client(self) -> httpx.Client:
        if self._sync is None:
            if self._given is not None:
                raise TypeError(
                    f"{type(self).__name__} was given an httpx.AsyncClient: use the async calls, "
                    "or pass an httpx.Client"
                )
            self._sync = httpx.Client(timeout=self._timeout, verify=tls_verify(self.base_url))
        return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        if self._async is None:
            if self._given is not None:
                raise TypeError(
                    f"{type(self).__name__} was given an httpx.Client: use the sync calls, "
                    "or pass an httpx.AsyncClient"
                )
            self._async = httpx.AsyncClient(timeout=self._timeout, verify=tls_verify(self.base_url))
        return self._async

    def close(self) -> None:
        if self._sync is not None and self._given is None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        if self._async is not None and self._given is None:
            await self._async.aclose()
            self._async = None
        self.close()

    # --- calls ---

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        logger.debug("%s POST %s", self.name, path)
        try:
            response = self._client().post(self._url(path), json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        return self._json(response)

    async def _apost(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        logger.debug("%s POST %s", self.name, path)
        try:
            response = await self._aclient().post(self._url(path), json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        return self._json(response)

    def _lines(self, path: str, body: dict[str, Any]) -> Iterator[str]:
        """The response's lines as they arrive; the response is closed when the caller stops."""
        logger.debug("%s POST %s (stream)", self.name, path)
        try:
            with self._client().stream(
                "POST", self._url(path), json=body, headers=self._headers
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._status_error(response)
                yield from response.iter_lines()
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc

    async def _alines(self, path: str, body: dict[str, Any]) -> AsyncIterator[str]:
        logger.debug("%s POST %s (stream)", self.name, path)
        try:
            async with self._aclient().stream(
                "POST", self._url(path), json=body, headers=self._headers
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(response)
                async for line in response.aiter_lines():
                    yield line
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc

    # --- errors ---

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            raise self._status_error(response)
        try:
            body = response.json()
        except ValueError as exc:
            raise provider_error(
                self.name,
                "response is not JSON",
                status_code=response.status_code,
                detail=response.text[:200],
            ) from exc
        if not isinstance(body, dict):
            raise provider_error(
                self.name, "response is not a JSON object", status_code=response.status_code
            )
        return body

    def _status_error(self, response: httpx.Response) -> ProviderError:
        return provider_error(
            self.name,
            "server returned an error",
            status_code=response.status_code,
            headers=response.headers,
            detail=_error_detail(response.text),
        )

    def _transport_error(self, exc: httpx.HTTPError) -> ProviderError:
        timeout = isinstance(exc, httpx.TimeoutException)
        what = "request timed out" if timeout else "connection failed"
        return provider_error(self.name, f"{what} ({type(exc).__name__})", detail=str(exc))


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


def tls_verify(base_url: str) -> ssl.SSLContext | bool:
    """The `verify=` for a client of `base_url`: httpx's default (the CA bundle) for `https://`;
    for `http://`, a verifying TLS context without any CA, which costs nothing to create.

    Every request goes to `base_url` and redirects are not followed, so a plain-HTTP provider
    never uses TLS; should one ever try, certificate checks are on and trust nothing: it fails
    closed, never unverified.
    """
    if base_url.lower().startswith("http://"):
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify_mode CERT_REQUIRED, no CA
    return True


def sse_data(line: str) -> str | None:
    """The payload of an SSE `data:` line; `None` for any other line (comment, event, blank)."""
    if line.startswith("data:"):
        return line[5:].lstrip(" ")
    return None


class LineStream(Protocol):
    """A stream reader: each line of the response in, text deltas out, the `Completion` last."""

    def feed(self, line: str) -> TextDelta | None:
        """Read one line; the text it added to the document, if any."""
        ...

    def finish(self) -> Completion:
        """The whole reply, once the stream has ended."""
        ...


class OneRouteProvider(HTTPProvider):
    """A provider that posts every request to one route for one model (vLLM, Ollama).

    Subclasses say how to build the body, read a reply and read a stream; the calls, sync and
    async, streaming or not, are the same for all of them and live here.
    """

    path: ClassVar[str]

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(base_url, http_client=http_client, timeout=timeout, headers=headers)
        self._model = model

    @property
    def model(self) -> str:
        return self._model

    def build(
        self, request: CompletionRequest, schema: dict[str, Any], stream: bool
    ) -> dict[str, Any]:
        """The request body, with `schema` in this provider's dialect."""
        raise NotImplementedError

    def read(self, body: dict[str, Any]) -> Completion:
        """A reply body -> `Completion`."""
        raise NotImplementedError

    def line_stream(self) -> LineStream:
        """A fresh reader for one streamed reply."""
        raise NotImplementedError

    def _body(self, request: CompletionRequest, *, stream: bool = False) -> dict[str, Any]:
        wire = self.wire_schema(request.contract)
        assert wire is not None  # every HTTP provider has a dialect
        return self.build(request, wire.schema, stream)

    def complete(self, request: CompletionRequest) -> Completion:
        return self.read(self._post(self.path, self._body(request)))

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.read(await self._apost(self.path, self._body(request)))

    def stream(self, request: CompletionRequest) -> Iterator[TextDelta | Completion]:
        reader = self.line_stream()
        for line in self._lines(self.path, self._body(request, stream=True)):
            delta = reader.feed(line)
            if delta is not None:
                yield delta
        yield reader.finish()

    async def astream(self, request: CompletionRequest) -> AsyncIterator[TextDelta | Completion]:
        reader = self.line_stream()
        async for line in self._alines(self.path, self._body(request, stream=True)):
            delta = reader.feed(line)
            if delta is not None:
                yield delta
        yield reader.finish()
