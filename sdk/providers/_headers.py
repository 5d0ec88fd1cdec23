"""The headers a provider's requests carry, as the response cache's key holds them.

A gateway may route by a header (to another provider, model or deployment), and a vendor's API
version or beta features change what it does, so the key holds every header sent on every
request that may decide the answer (`header_scope`): exactly the lines sent (`sent_headers`, as
httpx merges a client's headers with a request's), never a value in clear.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

__all__ = ["header_digest", "header_scope", "sent_headers"]


_HEADERS_NOT_DECIDING = frozenset({
    "accept", "content-type", "user-agent", "x-goog-api-client",  # what the SDK sends of itself
    "accept-encoding", "connection",  # how the bytes travel
    "openai-organization", "openai-project",  # the account, like its key: not the answer
})  # fmt: skip
"""Headers a vendor SDK sets that do not decide an answer (with every `x-stainless-` header:
the SDK's version, language and platform), left out of the response cache's key."""


def sent_headers(
    client: Iterable[tuple[object, object]],
    request: Iterable[tuple[object, object]],
    *,
    request_folded: bool = False,
) -> tuple[tuple[str, str], ...]:
    """The headers httpx sends for a request given `request` headers through an HTTP client
    holding `client` (httpx's `Client._merge_headers`, `Headers.update`): a name the request's
    headers hold, in any case, replaces every one of the client's of that name; every other
    pair of either is sent, several of one name too (`{"X-Route": "a", "x-route": "b"}` sends
    both lines). `request_folded`: the request's headers were folded by name first, in any
    case, a later one replacing an earlier and a value neither text nor bytes removing it (the
    `anthropic` and `openai` clients fold their own so; aiohttp, where a request's headers
    replace a session's, so sends them too).

    As (lowercased name, value) text pairs in the order sent, read as httpx reads them: text
    (a `str` subclass, such as a `StrEnum` member or aiohttp's `istr`, by its characters), or
    bytes (as Latin-1, one character per byte, so other bytes are another value); a pair whose
    name or value is neither is left out (not sent: the vendor SDKs' `Omit`, a header removed).
    Made once for the same pairs (`_remembered_sent`): a client sends the same headers on every
    call, and the key is made on every call, a hit's too."""
    client_pairs = tuple(client)
    # (a value not sent, as `None`: the vendor SDKs make a new `Omit` for each request)
    request_pairs = tuple([
        (name, value) if type(value) is str or isinstance(value, (str, bytes)) else (name, None)
        for name, value in request
    ])  # fmt: skip
    try:
        return _remembered_sent(client_pairs, request_pairs, request_folded)
    except TypeError:  # (a name or value that cannot be hashed: not sent, not remembered)
        return _sent(client_pairs, request_pairs, request_folded)


def _sent(
    client: tuple[tuple[object, object], ...],
    request: tuple[tuple[object, object], ...],
    request_folded: bool,
) -> tuple[tuple[str, str], ...]:
    """`sent_headers`, made."""
    given = _text_pairs(request, folded=request_folded)
    replaced = {name for name, _ in given}
    return (*(pair for pair in _text_pairs(client) if pair[0] not in replaced), *given)


_remembered_sent = functools.lru_cache(maxsize=64)(_sent)


def _text_pairs(
    headers: tuple[tuple[object, object], ...], *, folded: bool = False
) -> list[tuple[str, str]]:
    """Headers as (lowercased name, value) text pairs; `folded`: one a name (`sent_headers`)."""
    if folded:
        last: dict[str, str] = {}
        for name, value in headers:
            name_text, value_text = _header_text(name), _header_text(value)
            if name_text is None:
                continue
            if value_text is None:
                last.pop(name_text.lower(), None)
            else:
                last[name_text.lower()] = value_text
        return list(last.items())
    pairs = []
    for name, value in headers:
        name_text, value_text = _header_text(name), _header_text(value)
        if name_text is not None and value_text is not None:
            pairs.append((name_text.lower(), value_text))
    return pairs


def header_scope(
    headers: Iterable[tuple[str, str]], credentials: Iterable[str] = ()
) -> dict[str, str]:
    """The headers every request carries that may decide its answer, for the response cache's
    key: a gateway may route by one (to another provider, model or deployment), and a vendor's
    API version or beta features change what it does. By lowercased name, each value by its
    sha256 (a header may hold a gateway's credentials: no secret goes into a scope in clear);
    a name sent on several lines (case-variants of one name in one dict), by the digest of its
    values in the order sent, so only the same lines share a key. Left out: the provider's own
    credentials (`credentials`, the values its `secrets()` lists: a header holding one, bare or
    after a scheme such as "Bearer ", so clients of one account with different keys share
    answers) and what the SDK says of itself (`_HEADERS_NOT_DECIDING`). `headers`: the
    (lowercased name, value) pairs sent, as `sent_headers` gives them.

    Made once for the same headers and credentials (`_remembered_scope`): a client sends the
    same headers on every call, and the key is made on every call, a hit's too. The scope
    returned is shared: not to be changed."""
    return _remembered_scope(tuple(headers), tuple(credentials))


@functools.lru_cache(maxsize=64)
def _remembered_scope(
    headers: tuple[tuple[str, str], ...], credentials: tuple[str, ...]
) -> dict[str, str]:
    """`header_scope`, made."""
    own = {credential for credential in credentials if credential}
    sent: dict[str, list[str]] = {}
    for name, value in headers:
        if (
            name in _HEADERS_NOT_DECIDING
            or name.startswith("x-stainless-")
            or value in own
            or value.partition(" ")[2] in own
        ):
            continue
        sent.setdefault(name, []).append(value)
    # (several lines joined by a newline, which no header value sent holds: httpx's transports
    # refuse one, `LocalProtocolError: Illegal header value`)
    return {name: header_digest("\n".join(values)) for name, values in sorted(sent.items())}


def _header_text(value: object) -> str | None:
    """A header's name or value as the text httpx sends: a `str` subclass's characters, bytes
    as Latin-1; `None` for anything else (not sent)."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return None


@functools.lru_cache(maxsize=256)
def header_digest(value: str) -> str:
    """A header's value (or any text a request carries that may hold a credential) as the key
    holds it: its sha256, made once per value (a client's headers are the same on every
    call)."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
