"""The response cache's errors (a leaf: every other cache module imports them from here)."""

from __future__ import annotations

__all__ = ["CacheError", "CacheFileError", "CacheServerError", "DamagedEntry"]


class CacheError(Exception):
    """The response cache cannot be used: its file or its server (named in the message)."""


class CacheFileError(CacheError, ValueError):
    """A cache file that is not this SDK's, is damaged, or stayed busy past its timeout: named,
    and left as it is."""


class CacheServerError(CacheError, ConnectionError):
    """A cache server that did not answer within its timeout, refused the connection, or holds
    something else under the cache's keys."""


class DamagedEntry(ValueError):
    """A stored entry that does not decode into replies: a miss, and replaced."""
