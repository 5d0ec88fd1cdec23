"""Where a provider's requests go: a base URL read once, by one rule for every provider.

Two things in a base URL need care, because a URL is printed wherever it goes (httpx's own
`HTTP Request: POST <url>` INFO log, reprs, error messages, a batch job's files):

- **Credentials** (`https://user:key@gateway/...`). Where the SDK sends the requests itself
  (llama.cpp, vLLM, Ollama, through httpx), they are moved out of the URL into an
  `Authorization: Basic` header, which is what userinfo means over HTTP (RFC 7617; curl and httpx
  send it so): the URL requests are sent to, and logged with, no longer holds them. Given with an
  `Authorization` header of their own, they are refused: two credentials for one header. An
  official client's base URL (`anthropic`, `openai`, `google-genai`) with credentials is refused
  when the provider is made: the client, not the SDK, builds and logs its URLs, and its API key
  already owns the `Authorization` header (the URL's credentials would silently replace the
  key); give a gateway's credentials as the client's `default_headers`.
- **A query string** (`?api-version=2024-10-21`, as Azure-style gateways need). It is kept on
  every request, whole and streamed, on every route (llama.cpp's preliminary template,
  tokenizer and model requests too), after the route's path: `base/route?query`, never
  `base?query/route`. The official `anthropic` and `openai` clients would put a route after the
  query, so their providers hand it to the client's `default_query` instead; `google-genai`
  appends its own query to streamed routes (`?alt=sse?api-version=...`), so a Gemini client's
  base URL with a query is refused. A parameter that carries a credential (`SECRET_QUERY_NAMES`)
  is sent whole but redacted from the request logs (`sdk.providers._logs`).
"""

from __future__ import annotations

import base64
import hashlib
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Final
from urllib.parse import SplitResult
from urllib.parse import parse_qsl
from urllib.parse import unquote
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

from sdk.providers._headers import sent_headers

__all__ = [
    "WITHHELD",
    "Endpoint",
    "client_endpoint",
    "client_headers",
    "client_query",
    "gemini_base_url",
    "keyed_parameters",
    "keyed_query",
    "server_of",
    "withheld",
]

WITHHELD = "***"
"""What a base URL kept in a file holds in place of its credentials (`https://***@host/...`,
`?key=***`): they were withheld, and must be given again to send requests there."""

SECRET_QUERY_NAMES = (
    r"(?:[a-z0-9]+[_.-])*(?:apikey|key|token|secret|password|passwd|sig|signature|credential|auth)"
    r"|code"
)
"""The query parameters that carry a credential, as a regular expression of their names (matched
whole, in any case): one of `key`, `token`, `secret`, `password`, `sig`, `signature`,
`credential`, `auth`, ..., or a name ending in one after a `-`, `_` or `.` (a gateway's
`?key=`, Azure API Management's `subscription-key=`, a signed URL's `sig=` or
`X-Amz-Signature=`, `client_secret=`); and `code` alone (an Azure Functions function key:
`country-code` routes). Never kept in a file (`withheld`), redacted from errors
(`sdk.providers._boundary`) and from the request logs (`sdk.providers._logs`)."""
_SECRET_PARAMETER = re.compile(rf"(?i)(^|&)((?:{SECRET_QUERY_NAMES})=)[^&]*")
_SECRET_NAME = re.compile(rf"(?i)(?:{SECRET_QUERY_NAMES})")
_WITHHELD_PARAMETER = re.compile(
    rf"(?i)(?:^|&)(?:{SECRET_QUERY_NAMES})={re.escape(WITHHELD)}(?:&|$)"
)


@dataclass(frozen=True)
class Endpoint:
    """A base URL split into what every request's URL is made of, and its credentials."""

    base: str
    """`scheme://host[:port][/path]`: no credentials, query, fragment or trailing slash."""
    query: str = ""
    """The raw query string (without `?`), kept as written on every request."""
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, url: str, *, strip_path: str = "") -> Endpoint:
        """`url` read (`strip_path`: a path suffix the provider adds itself, as vLLM's `/v1`);
        a `ValueError` for a URL that is not `http(s)://host...`."""
        if not isinstance(url, str):
            raise TypeError(f"base_url must be a string, not {type(url).__name__}")
        _refuse_blanks(url.strip(), "base_url")
        parts = urlsplit(url.strip())
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL, not {_shown(url)!r}")
        _refuse_hidden_userinfo(parts, "base_url")
        path = parts.path.rstrip("/")
        if strip_path:
            path = path.removesuffix(strip_path)
        base = urlunsplit((*server_of(parts), path, "", ""))
        username = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password) if parts.password is not None else None
        return cls(base, parts.query, username, password)

    @property
    def has_credentials(self) -> bool:
        return bool(self.username or self.password)

    @property
    def withheld(self) -> bool:
        """Whether this is a kept URL whose credentials were withheld (see `withheld`)."""
        in_userinfo = self.username == WITHHELD and self.password is None
        return in_userinfo or bool(_WITHHELD_PARAMETER.search(self.query))

    @property
    def shown(self) -> str:
        """The base URL for a message or a file: its query's credentials withheld (`str`
        gives the URL requests go to, its query whole)."""
        query = _masked(self.query)
        return f"{self.base}?{query}" if query else self.base

    def same_server(self, other: Endpoint) -> bool:
        """Whether requests to `other` go where this one's go (credentials aside: in the
        userinfo or in the query)."""
        return (self.base, _masked(self.query)) == (other.base, _masked(other.query))

    def url(self, route: str) -> str:
        """The URL of `route` (`/completion`, `/v1/models`, ...), with the base URL's query."""
        if not self.query:
            return f"{self.base}{route}"
        joiner = "&" if "?" in route else "?"
        return f"{self.base}{route}{joiner}{self.query}"

    def __str__(self) -> str:
        """The base URL as requests use it (its query too): never its credentials."""
        return f"{self.base}?{self.query}" if self.query else self.base

    def headers(self, given: Mapping[str | bytes, str | bytes]) -> dict[str | bytes, str | bytes]:
        """`given`, with the credentials as a Basic `Authorization` header; a `ValueError` if
        `given` has one already, its name as text or as bytes (two credentials for one header:
        which one is meant?)."""
        headers = dict(given)
        if not self.has_credentials:
            return headers
        if any(_header_name(name) == "authorization" for name in headers):
            raise ValueError(
                "base_url holds credentials (user:password@) and headers= has an Authorization "
                "header too: give one of them (the URL's are sent as Basic authorization)"
            )
        pair = f"{self.username or ''}:{self.password or ''}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return headers


def _header_name(name: str | bytes) -> str:
    """A header's name as text, in lower case (httpx sends a name given as bytes as it is)."""
    return (name.decode("latin-1") if isinstance(name, bytes) else name).lower()


def server_of(parts: SplitResult) -> tuple[str, str]:
    """The scheme and the host (with its port) of a URL as every client reaches them, without
    credentials: in lower case, a scheme's own port left out (`http://Gateway.test:80` is
    `http://gateway.test`), so one server written two ways is one server (`Endpoint.same_server`,
    the response cache's key: `sdk.providers._provider.endpoint`). A port that is not one is
    kept as written."""
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return scheme, parts.netloc.rpartition("@")[2]
    name = parts.hostname or ""
    host = f"[{name}]" if ":" in name else name  # (an IPv6 address, in its brackets again)
    return scheme, host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def withheld(url: str) -> str:
    """`url` as a file may keep it (a batch job's state): its credentials replaced by `***`
    (`WITHHELD`: given again when requests are sent), in the userinfo (`***@`) and as the value
    of a query parameter that carries one (`SECRET_QUERY_NAMES`), the rest as written; `url`
    itself when it has none. Errors as `Endpoint.of`'s."""
    endpoint = Endpoint.of(url)
    query = _masked(endpoint.query)
    if not endpoint.has_credentials and query == endpoint.query:
        return url
    parts = urlsplit(url.strip())
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{WITHHELD}@{host}" if endpoint.has_credentials else host
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def keyed_query(query: str) -> str:
    """`query` as the response cache's key holds it: the value of each parameter that carries a
    credential (`SECRET_QUERY_NAMES`) by its sha256 (as a header's: two credentials key apart,
    and neither is written in a provider's `cache_scope()`), the rest as written."""
    if not query:
        return query
    return _SECRET_PARAMETER.sub(
        lambda found: (
            found.group(1)
            + found.group(2)
            + "sha256:"
            + _digest(found.group(0)[len(found.group(1)) :])
        ),
        query,
    )


def keyed_parameters(parameters: Mapping[str, object]) -> dict[str, object]:
    """An official client's `default_query` as the key holds it (`keyed_query`'s rule)."""
    return {
        name: "sha256:" + _digest(f"{name}={value}")
        if isinstance(value, str) and _SECRET_NAME.fullmatch(name)
        else value
        for name, value in parameters.items()
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _masked(query: str) -> str:
    """`query` with the value of each parameter that carries a credential withheld."""
    return _SECRET_PARAMETER.sub(rf"\1\2{WITHHELD}", query) if query else query


def client_endpoint(client: Any, owner: str) -> dict[str, Any]:
    """The `with_options` arguments that keep an official `anthropic` / `openai` client's base
    URL query on every request (its `default_query`, the URL without it); `{}` when it has none.
    A `ValueError` when the URL holds credentials (see the module docstring)."""
    url = str(client.base_url)
    parts = urlsplit(url)
    _refuse_hidden_userinfo(parts, f"{owner}: the client's base_url")
    _refuse_credentials(parts.username, parts.password, owner, "default_headers")
    if not parts.query:
        return {}
    query = parts.query
    if query.endswith("/") and not parts.path.endswith("/"):
        query = query[:-1]  # the client appended the base URL's missing slash after the query
    pairs = dict(parse_qsl(query, keep_blank_values=True))
    return {
        "base_url": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
        "default_query": {**pairs, **dict(getattr(client, "_custom_query", None) or {})},
    }


def client_headers(client: Any, *, asynchronous: bool = False) -> tuple[tuple[str, str], ...]:
    """The headers an official client (`anthropic`, `openai`, `google-genai`) sends on every
    request, as `sent_headers` gives them: those of the HTTP client it was given (which it
    sends too; httpx's raw bytes), but a name its own replace (`default_headers`, Gemini's
    `http_options` headers). `anthropic` and `openai` fold their own by name (the last of a
    name's case-variants is sent; an `Omit` removes it); `google-genai` hands its dict to httpx
    as it is (each case-variant is sent), or to aiohttp (the last is sent). A `google-genai`
    client holds two HTTP clients: `asynchronous` reads the one its async calls go through
    (`_http_client`)."""
    api = getattr(client, "_api_client", None)
    if api is None:  # anthropic, openai
        own, folded = client.default_headers, True
    else:  # google-genai
        own = getattr(getattr(api, "_http_options", None), "headers", None) or {}
        folded = asynchronous and _uses_aiohttp(api)
    given = getattr(_http_client(client, asynchronous), "headers", None)
    raw = getattr(given, "raw", None)  # (httpx: the bytes sent, read without decoding them)
    sent = raw if raw is not None else (given or {}).items()
    return sent_headers(sent, own.items(), request_folded=folded)


def client_query(client: Any) -> str:
    """The query the HTTP client an official client was given adds to every request (httpx's
    `params=`), as text: a `google-genai` client's async one's after its sync one's when they
    differ; `""` when none adds one."""
    sync, other = (_http_client(client, side) for side in (False, True))
    query = str(getattr(sync, "params", ""))
    if other is sync:  # (anthropic, openai: one HTTP client, read once)
        return query
    other_query = str(getattr(other, "params", ""))
    return query if query == other_query else f"{query} (async calls: {other_query})"


def _http_client(client: Any, asynchronous: bool) -> Any:
    """The HTTP client an official client's requests go through: a `google-genai` client's for
    its sync or its async calls (for those, an aiohttp session when it uses one: the one it was
    given, else `None`, its own adding nothing)."""
    api = getattr(client, "_api_client", None)
    if api is None:  # anthropic, openai: one HTTP client
        return getattr(client, "_client", None)
    options = getattr(api, "_http_options", None)
    if not asynchronous:
        return getattr(options, "httpx_client", None) or getattr(api, "_httpx_client", None)
    if _uses_aiohttp(api):
        return getattr(options, "aiohttp_client", None)
    return getattr(options, "httpx_async_client", None) or getattr(api, "_async_httpx_client", None)


def _uses_aiohttp(api: Any) -> bool:
    """Whether a `google-genai` client's async calls go through aiohttp (installed), not httpx."""
    return bool(getattr(api, "_use_aiohttp", bool)())


def gemini_base_url(url: str | None) -> None:
    """Refuse a `google-genai` client's base URL with credentials or a query (see the module
    docstring)."""
    if not url:
        return
    parts = urlsplit(url)
    _refuse_hidden_userinfo(parts, "gemini: the client's base_url")
    _refuse_credentials(parts.username, parts.password, "gemini", "http_options headers")
    if parts.query:
        raise ValueError(
            "gemini: the client's base_url has a query string (?...): google-genai appends its "
            "own to streamed requests (?alt=sse?...), which breaks the URL; give the gateway's "
            "parameters as headers (http_options={'headers': {...}}) if it takes them there"
        )


def _refuse_credentials(user: str | None, password: str | None, owner: str, instead: str) -> None:
    if user or password:
        raise ValueError(
            f"{owner}: the client's base_url holds credentials (user:password@): the client "
            "would print them in its request log and send them in place of its API key; give "
            f"them as the client's {instead} instead (never in the URL)"
        )


def _refuse_blanks(url: str, what: str) -> None:
    """Refuse a URL holding white space or a control character (past the ends, which are
    trimmed): `urlsplit` drops a tab or a line end silently (`/v1\\nx` was sent to `/v1x`), a
    space in the host failed each attempt as a connection error, and a NUL failed every call as
    an unusable reply, blaming the server. Only the position is said (the URL may hold a
    credential)."""
    for position, char in enumerate(url):
        if char.isspace() or unicodedata.category(char) == "Cc":
            raise ValueError(
                f"{what} holds white space or a control character (at character {position}): "
                "a URL cannot; percent-encode it (a space as %20)"
            )


def _refuse_hidden_userinfo(parts: SplitResult, what: str) -> None:
    """Refuse a URL with an `@` after its host, or a port that is not a number: a password
    holding an unescaped `/`, `?` or `#` (a base64 key, say) ends the authority there, so the
    rest of the password and the real host would be sent (and logged) as the path, query or
    fragment of a request to another host. Nothing of the URL is echoed."""
    after_host = "@" in parts.path or "@" in parts.query or "@" in parts.fragment
    try:
        port_ok = parts.port is None or parts.port >= 0
    except ValueError:  # not a number, or past 65535
        port_ok = False
    if after_host or not port_ok:
        raise ValueError(
            f"{what} has {'an @ after its host' if after_host else 'a port that is not 0 to 65535'}"
            ": a password holding '/', '?' or '#' ends the host there; percent-encode them in "
            "user:password@ (%2F, %3F, %23), and an @ meant in the path or query as %40"
        )


def _shown(url: str) -> str:
    """A URL for a message: credentials (up to the last `@`, wherever it stands) and query
    values replaced."""
    scheme, separator, rest = url.strip().partition("://")
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    parts = urlsplit(f"{scheme}{separator}{rest}")
    host = parts.netloc.rpartition("@")[2]
    netloc = f"***@{host}" if "@" in parts.netloc else host
    query = "&".join(f"{name}=***" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
