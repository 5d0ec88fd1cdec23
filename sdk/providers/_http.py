"""The httpx side shared by the local providers (llama.cpp, vLLM, Ollama): clients, not calls.

A local provider is a codec (its own module) plus `HTTPProvider`, which holds the httpx clients
and hands the drivers an `HTTPTransport` or `AsyncHTTPTransport` for them. Clients are
injectable: pass an `httpx.Client` to use the sync calls, an `httpx.AsyncClient` for the async
ones, or nothing and the provider opens (and on `close()` / `aclose()` closes) its own on first
use: one sync client, and one async client per event loop, because an async client's
connections belong to the loop that opened them (a second `asyncio.run` in a script or notebook
gets a client of its own instead of `RuntimeError: Event loop is closed`).

The clients a provider opens itself hold up to 256 connections, all kept alive (`POOL`), in
httpcore2's pool (`sdk.providers._pool`); the pool wait is as long as the read timeout, so
requests past the limit wait instead of failing. For a
plain `http://` server (the usual local case) they do not load the CA bundle: that takes about
20 ms, on the event loop for an async client's first call, for TLS that is never used there.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any
from typing import Generic
from typing import TypedDict
from typing import TypeVar
from urllib.parse import parse_qsl
from weakref import WeakKeyDictionary

import httpx

from sdk._values.declared import check
from sdk._values.declared import check_given
from sdk._values.seconds import SECONDS
from sdk.providers._base import Codec
from sdk.providers._base import CompletionRequest
from sdk.providers._base import check_model
from sdk.providers._control_tokens import ControlTokenPolicy
from sdk.providers._control_tokens import ControlTokens
from sdk.providers._control_tokens import check_policy
from sdk.providers._control_tokens import check_request
from sdk.providers._endpoint import Endpoint
from sdk.providers._headers import header_scope
from sdk.providers._headers import sent_headers
from sdk.providers._logs import redact_request_logs
from sdk.providers._pool import AsyncPooledTransport
from sdk.providers._pool import PooledTransport
from sdk.providers._pool import async_proxy_mounts
from sdk.providers._pool import proxy_mounts
from sdk.providers._provider import Provider
from sdk.providers._provider import endpoint
from sdk.providers._transports import AsyncHTTPTransport
from sdk.providers._transports import HTTPTransport

__all__ = [
    "DEFAULT_TIMEOUT",
    "POOL",
    "ContentPolicy",
    "HTTPProvider",
    "HTTPSettings",
    "OneRouteCodec",
    "OneRouteProvider",
    "ServerProvider",
    "ServerSettings",
    "connection",
    "tls_verify",
]

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
"""Local generation can be slow; connecting to a local server should not be."""
POOL = httpx.Limits(max_connections=256, max_keepalive_connections=256)
"""The connection pool of a client the provider makes: every connection kept alive. httpx keeps
20 by default, so past 20 requests in flight to one server each request opened (and closed) a
connection of its own, which cost a fleet-speed batch job more than its own work. The pool is
httpcore2's (`sdk.providers._pool`): httpcore's costs more per call the more it holds."""


class HTTPSettings(TypedDict, total=False):
    """How a provider over HTTP reaches its server (`HTTPProvider`'s keywords)."""

    http_client: httpx.Client | httpx.AsyncClient | None
    """An httpx client of yours (sync or async: its own timeout and pool) instead of ours."""
    timeout: float | httpx.Timeout
    """The timeout of the clients the provider opens itself."""
    headers: Mapping[str | bytes, str | bytes] | None
    """Headers on every request (an `Authorization` for a server started with an API key)."""


class ServerSettings(HTTPSettings, total=False):
    """A self-hosted server's settings (llama.cpp, vLLM, Ollama), beside its URL and model."""

    extra_body: Mapping[str, Any] | None
    """Raw fields every request adds (a field the SDK owns is a `ValueError` when the provider
    is made)."""
    control_tokens: ControlTokenPolicy
    """`"reject"` (the default): content holding a control token's text is refused before
    anything is sent (`ControlTokenInContent`), since the server would read it as the token;
    `"allow"` sends it (unsafe with untrusted text)."""
    extra_control_tokens: Sequence[str] | AbstractSet[str]
    """More control-token strings to look for (the model's own special tokens)."""


def connection(settings: ServerSettings) -> HTTPSettings:
    """The settings that say how to reach the server (`HTTPProvider`'s)."""
    return {
        "http_client": settings.get("http_client"),
        "timeout": settings.get("timeout", DEFAULT_TIMEOUT),
        "headers": settings.get("headers"),
    }


@dataclass(frozen=True, eq=False)
class ContentPolicy:
    """What a server's codec does with content holding a control token's text: the policy
    (`control_tokens=`) and the strings it looks for (the families' and
    `extra_control_tokens=`)."""

    policy: ControlTokenPolicy
    tokens: ControlTokens

    @classmethod
    def of(cls, settings: ServerSettings) -> ContentPolicy:
        """The policy `settings` set (`"reject"` and the families' strings by default)."""
        policy = check_policy(settings.get("control_tokens", "reject"))
        return cls(policy, ControlTokens.families(settings.get("extra_control_tokens", ())))

    def scope(self) -> dict[str, str | None]:
        """The policy as the response cache's key holds it: a request one policy, or one set of
        strings, refuses, another sends, so the answer of one is never the other's (the strings
        by their digest; none under `"allow"`, which looks for none)."""
        digest = self.tokens.digest if self.policy == "reject" else None
        return {"control_tokens": self.policy, "control_token_strings": digest}

    def check(self, request: CompletionRequest, server: str) -> None:
        """Apply the policy to the request's content (`check_request`)."""
        check_request(request, self.tokens, policy=self.policy, server=server)


_EXPECTS = {
    "timeout": "a number of seconds or an httpx.Timeout",
    "http_client": "an httpx.Client or httpx.AsyncClient (or None)",
}


def _check_timeout(timeout: object, where: str) -> None:
    """Refuse a `timeout=` a client cannot wait with, naming it, when the provider is made: a
    number of seconds (or each part of an `httpx.Timeout` that is not `None`) more than 0 and at
    most `LONGEST_WAIT` (a socket's timeout past about 9.2e9 s overflows the clock)."""
    if isinstance(timeout, httpx.Timeout):
        for part in ("connect", "read", "write", "pool"):
            value = getattr(timeout, part)
            if value is not None:
                check(f"timeout.{part}", value, SECONDS, where)
    else:
        check("timeout", timeout, SECONDS, where, _EXPECTS["timeout"])


def _text(value: str | bytes) -> str:
    """A header's value as a message would show it: bytes (httpx sends them as they are) as
    UTF-8, or byte for byte (Latin-1) when they are not UTF-8."""
    if isinstance(value, str):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value.decode("latin-1")


class HTTPProvider(Provider):
    """Base of providers that talk to a server over HTTP with httpx."""

    added_path: str = ""
    """A path suffix of the base URL the provider's routes add themselves (vLLM's `/v1`)."""

    def __init__(
        self,
        base_url: str,
        *,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str | bytes, str | bytes] | None = None,
    ) -> None:
        # `headers` (an `Authorization` for a server started with an API key, ...) go on every
        # request, whether the client is ours or injected; `timeout` only on clients we open.
        # Credentials in the URL become the `Authorization` header; its query stays on every
        # request (`sdk.providers._endpoint`).
        self.endpoint = Endpoint.of(base_url, strip_path=self.added_path)
        _check_timeout(timeout, f"{type(self).__name__}()")
        redact_request_logs()  # (the query, sent whole, may hold a credential: not logged)
        self.base_url = str(self.endpoint)
        """The base URL requests go to (with its query; its credentials are in a header)."""
        self._timeout = timeout
        self._headers = self.endpoint.headers(headers or {})
        self._sync: httpx.Client | None = None
        self._async: WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            WeakKeyDictionary()
        )
        self._given = http_client
        if http_client is not None and not isinstance(
            http_client, (httpx.Client, httpx.AsyncClient)
        ):
            raise TypeError(
                f"http_client must be an httpx.Client or httpx.AsyncClient, not {http_client!r}"
            )
        self._keyed: tuple[object, dict[str, str]] = (object(), {})  # (made at the first call)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.redactor(self.base_url)!r})"

    def cache_scope(self) -> dict[str, Any]:
        # A server is known by where it runs (a model name alone may be another model there):
        # its URL without credentials, query kept (an API version may be there).
        return {**super().cache_scope(), "server": endpoint(self.base_url)}

    def keyed_query(self) -> str:
        # (an injected client's `params=`, which httpx adds to every request's URL)
        return str(self._given.params) if self._given is not None else ""

    def keyed_headers(self) -> dict[str, str]:
        # The headers sent (an injected client's own, then `headers=`): a gateway in front of
        # the server may route by one. Not the server's key (`Authorization`, or the URL's
        # credentials), so clients with different keys of one server share answers. An
        # injected client's headers are its owner's to change: read at each call (its raw
        # list compared, the scope made again only when it changed).
        given = self._given.headers.raw if self._given is not None else None
        seen, keyed = self._keyed
        if given != seen:
            sent = sent_headers(given or (), self._headers.items())
            credentials = [value for name, value in sent if name == "authorization"]
            keyed = header_scope(sent, credentials)
            self._keyed = (given, keyed)  # (one assignment: a thread sees a pair, never half)
        return keyed

    def secrets(self) -> Iterable[str]:
        """Header values, and the credentials and query values of the base URL."""
        endpoint = self.endpoint
        found = [_text(value) for value in self._headers.values() if value]
        found.extend(value for value in (endpoint.username, endpoint.password) if value)
        found.extend(value for _, value in parse_qsl(endpoint.query) if value)
        for value in list(found):
            # "Bearer KEY": the key alone may be quoted too.
            found.extend(word for word in value.split() if len(word) >= 6)
        return found

    # --- transports ---

    def transport(self) -> HTTPTransport:
        return HTTPTransport(self._client(), self.name, self.endpoint, headers=self._headers)

    def atransport(self) -> AsyncHTTPTransport:
        return AsyncHTTPTransport(self._aclient(), self.name, self.endpoint, headers=self._headers)

    def _client(self) -> httpx.Client:
        if isinstance(self._given, httpx.Client):
            return self._given
        if self._given is not None:
            raise TypeError(
                f"{type(self).__name__} was given an httpx.AsyncClient: use the async calls, "
                "or pass an httpx.Client"
            )
        if self._sync is None:
            verify = tls_verify(self.base_url)
            self._sync = httpx.Client(
                timeout=self._timeout,
                transport=PooledTransport(verify=verify, limits=POOL),
                mounts=proxy_mounts(verify, POOL),  # (`HTTP_PROXY`, ...: httpx's, as before)
            )
        return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        if isinstance(self._given, httpx.AsyncClient):
            return self._given
        if self._given is not None:
            raise TypeError(
                f"{type(self).__name__} was given an httpx.Client: use the sync calls, "
                "or pass an httpx.AsyncClient"
            )
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            verify = tls_verify(self.base_url)
            client = httpx.AsyncClient(
                timeout=self._timeout,
                transport=AsyncPooledTransport(verify=verify, limits=POOL),
                mounts=async_proxy_mounts(verify, POOL),  # (`HTTP_PROXY`, ...: httpx's)
            )
            self._async[loop] = client
        return client

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        """Close the async client of the running event loop (and the sync one)."""
        client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        self.close()


class OneRouteCodec(Codec):
    """Base of the codecs of one-route servers that render the chat template themselves and
    tokenize it with special tokens parsed (vLLM, Ollama): the model, how a request's schema is
    written, and the control-token policy every request passes before it is built."""

    def __init__(self, model: str, content: ContentPolicy) -> None:
        self.model = model
        self.content = content
        self.control_tokens: ControlTokenPolicy = content.policy

    def checked(self, request: CompletionRequest) -> dict[str, Any] | None:
        """Check the request's content against the control-token policy (the server would
        read a control-token string as the real token); the schema it sends, if any."""
        self.content.check(request, self.provider)
        return self.request_schema(request)


CodecT = TypeVar("CodecT", bound=Codec)
OneRouteCodecT = TypeVar("OneRouteCodecT", bound=OneRouteCodec)


class ServerProvider(HTTPProvider, Generic[CodecT]):
    """Base of the self-hosted servers' providers (llama.cpp, vLLM, Ollama): their one way of
    being made, from the keywords they took (`ServerSettings`, or a `TypedDict` that extends
    it)."""

    codec: CodecT

    def __init__(
        self,
        base_url: str,
        settings: ServerSettings,
        keywords: type[Any],
        codec: Callable[[ContentPolicy], CodecT],
    ) -> None:
        """Refuse a keyword the `keywords` `TypedDict` (`ServerSettings` or one extending it) does
        not name (in the provider's name); make the codec
        with the control-token policy `settings` set (its own settings are checked before any
        client is made); keep how to reach the server; vet `extra_body` against the codec."""
        check_given(settings, keywords, f"{type(self).__name__}()", _EXPECTS)
        made = codec(ContentPolicy.of(settings))
        if isinstance(made, OneRouteCodec):  # (vLLM, Ollama: the model every request names)
            check_model(made.model, f"{type(self).__name__}()")
        super().__init__(base_url, **connection(settings))
        self.codec = made
        self._keep_extra_body(settings.get("extra_body"))


class OneRouteProvider(ServerProvider[OneRouteCodecT]):
    """A provider that posts every request to one route for one model (vLLM, Ollama)."""

    @property
    def model(self) -> str:
        return self.codec.model

    def cache_scope(self) -> dict[str, Any]:
        return {**super().cache_scope(), **self.codec.content.scope()}


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
