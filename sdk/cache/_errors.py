"""The response cache's errors (a leaf: every other cache module imports them from here)."""

from __future__ import annotations

__all__ = [
    "CacheClosed",
    "CacheError",
    "CacheFileError",
    "CacheGivenUp",
    "CacheServerError",
    "DamagedEntry",
    "NotStorable",
]


class CacheError(Exception):
    """The response cache cannot be used: its file or its server (named in the message)."""


class CacheFileError(CacheError, ValueError):
    """A cache file that is not this SDK's, is damaged, or stayed busy past its timeout: named,
    and left as it is."""


class CacheServerError(CacheError, ConnectionError):
    """A cache server that did not answer within its timeout, refused the connection, or holds
    something else under the cache's keys."""


class CacheClosed(CacheError):
    """A call a store's `close()` in another thread cut short (one still under way when the
    close stopped waiting for it), or that waited for a close that did not end: named."""


class CacheGivenUp(CacheError):
    """A `BestEffortCache` that gave its store up (said once, as a warning) did not keep this
    answer: the call's `cache_not_stored` note, once, and no second warning."""


class DamagedEntry(ValueError):
    """A stored entry that does not decode into replies: a miss, and replaced."""


class NotStorable(ValueError):
    """A key or an entry no store takes: text UTF-8 cannot encode (a lone surrogate), or an
    entry a store would not read back (longer than `MAX_ENTRY_CHARS`, or a value its decoding
    refuses). Nothing is stored or looked up; the store itself is fine (not a `CacheError`: a
    call answers with a `cache_not_stored` note, and `BestEffortCache` keeps its store)."""


def failed_in(store: object, method: str, error: Exception) -> str:
    """What a store that failed in `method` with `error`, not a `CacheError` (a store of your
    own's server's error, a bug), is told as: the store, the method and the error."""
    return f"{type(store).__name__}.{method}() failed: {type(error).__name__}: {error}"
