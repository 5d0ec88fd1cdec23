"""`MemoryCache`: entries in this process's memory, for tests and short scripts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sdk import _fork
from sdk.cache._entry import CacheStats
from sdk.cache._entry import Entry
from sdk.cache._entry import check_settings
from sdk.cache._entry import checked_key
from sdk.cache._entry import expired
from sdk.cache._entry import stored_form

__all__ = ["MemoryCache"]


class MemoryCache:
    """A cache in memory: `ttl` seconds per entry (`None`: no expiry), at most `max_entries`
    (the oldest written go first). It takes the keys and entries every store takes, no more
    (`NotStorable` for the others, as a file or a server refuses them), though it keeps the
    entries themselves, not their stored form."""

    waits = False
    """Its calls never wait (a lock held for a dictionary's step): the async client asks it on
    the event loop (`Cache`)."""

    def __init__(
        self,
        *,
        ttl: float | None = None,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_settings("MemoryCache", ttl=ttl, max_entries=max_entries, clock=clock)
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._lock = _fork.lock()  # (in a forked child: its own copy of the entries)
        # Entries are immutable (frozen records), so they are kept as they are, not as JSON.
        self._entries: dict[str, tuple[Entry, float | None]] = {}
        self._hits = self._misses = self._expired = self._refused = 0

    def __repr__(self) -> str:
        return f"MemoryCache({len(self._entries)} entries, ttl={self.ttl})"

    def __copy__(self) -> MemoryCache:
        # (as before pickling was refused: another object over the same entries and lock)
        made = object.__new__(type(self))
        made.__dict__.update(self.__dict__)
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(
            "a MemoryCache is this process's memory and does not pickle: make it where it is "
            "used (in a Ray StructuredMap's client factory: each actor its own), or share a "
            "SQLiteCache or a RedisCache, which pickle as their file or server"
        )

    def get(self, key: str) -> Entry | None:
        checked_key(key)
        with self._lock:
            found = self._entries.get(key)
            if found is not None and expired(found[1], self._clock):
                del self._entries[key]
                self._expired += 1
                found = None
            if found is None:
                self._misses += 1
                return None
            self._hits += 1
        return found[0]

    def put(self, key: str, entry: Entry) -> None:
        stored_form(key, entry)  # (refused as every store refuses it)
        expires = self._clock() + self.ttl if self.ttl is not None else None
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (entry, expires)
            while len(self._entries) > self.max_entries:
                del self._entries[next(iter(self._entries))]

    def discard(self, key: str) -> None:
        checked_key(key)
        with self._lock:
            self._entries.pop(key, None)

    def refuse(self, key: str) -> None:
        """The entry `get` handed back for `key` was not served: dropped, its lookup a miss."""
        checked_key(key)
        with self._lock:
            self._entries.pop(key, None)
            if self._hits:  # (not if a `clear` since has started the counts afresh)
                self._hits -= 1
                self._misses += 1
                self._refused += 1

    def stats(self) -> CacheStats:
        with self._lock:
            size = sum(
                len(entry.encode().encode("utf-8", "surrogatepass"))
                for entry, _ in self._entries.values()
            )
            return CacheStats(
                len(self._entries), size, self._hits, self._misses, self._expired, self._refused
            )

    def clear(self) -> int:
        """Drop every entry, and start the counts afresh (as every store does)."""
        with self._lock:
            count = len(self._entries)
            self._entries.clear()
            self._hits = self._misses = self._expired = self._refused = 0
            return count
