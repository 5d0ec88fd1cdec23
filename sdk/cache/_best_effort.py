"""`BestEffortCache`: a store used while it works, for work that can go on without it.

A batch job's items must not fail because the response cache beside them is damaged or its server
is gone: the cache only saves calls. So a job opens its store through this wrapper, which opens it
on first use and, at the first `CacheError` (opening it, reading, writing), says so once (a
warning naming the store and the error) and from then on answers every lookup with a miss and
stores nothing. The first answer it then does not store is told too, once: its `put` raises
that `CacheError`, so the call returns the answer with a `cache_not_stored` note, and a job's
output line carries it (the warning alone reached no one where it runs apart from the job's
command: a Ray actor's log). A damaged entry is not such an error: the call takes it as a miss
and replaces it, as with any store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sdk import _fork
from sdk._threads import CacheThreads
from sdk._threads import cache_threads
from sdk._threads import lookups_wait
from sdk._threads import store_waits
from sdk._threads import threads_for
from sdk.cache._entry import Cache
from sdk.cache._entry import CacheStats
from sdk.cache._entry import Entry
from sdk.cache._entry import not_served
from sdk.cache._errors import CacheError
from sdk.cache._errors import CacheGivenUp
from sdk.cache._errors import NotStorable
from sdk.cache._errors import failed_in

__all__ = ["BestEffortCache"]

logger = logging.getLogger("sdk.cache")


class BestEffortCache:
    """The store `open_store()` makes, until its first `CacheError`; then none (see the module
    docstring). `say` is told once, with one line, when the store is given up (default: a
    warning on the `sdk.cache` logger)."""

    def __init__(
        self, open_store: Callable[[], Cache], *, say: Callable[[str], None] | None = None
    ) -> None:
        self._open = open_store
        self._say = say if say is not None else logger.warning
        self._lock = _fork.rlock()  # (giving up happens inside opening, too)
        self._store: Cache | None = None
        self.given_up: str | None = None
        """Why the store was given up (`None` while it is used)."""
        self._told_a_call = False  # (the first answer not stored since: its note says why)

    @property
    def waits(self) -> bool:
        """Whether its calls may wait: its store's (`Cache.waits`), once opened; opening may."""
        store = self._store
        return store is None or store_waits(store)

    @property
    def lookups_wait(self) -> bool:
        """Whether a lookup may wait: its store's (`Cache.lookups_wait`), once opened; opening
        may (and a store given up answers at once)."""
        if self.given_up is not None:
            return False
        store = self._store
        return store is None or lookups_wait(store)

    @property
    def threads(self) -> CacheThreads:
        """The threads the async client asks it from: its store's, once opened."""
        store = self._store
        return cache_threads() if store is None else threads_for(store)

    @property
    def timeout(self) -> float | None:
        """Its store's `timeout`, once opened (how often a call waiting for its turn in
        `threads` looks whether the store failed: `sdk._threads.turn_bound`)."""
        store = self._store
        bound = getattr(store, "timeout", None)
        return bound if type(bound) in (int, float) else None

    def __repr__(self) -> str:
        state = f"given up: {self.given_up}" if self.given_up else repr(self._store)
        return f"BestEffortCache({state})"

    def _using(self) -> Cache | None:
        if self.given_up is not None:
            return None
        if self._store is None:
            with self._lock:
                if self._store is None and self.given_up is None:
                    try:
                        self._store = self._open()
                    except CacheError as error:
                        self._give_up(error)
        return self._store

    def _give_up(self, error: CacheError) -> None:
        with self._lock:
            if self.given_up is not None:
                return
            self.given_up = " ".join(str(error).split())
            self._store = None
        self._say(f"{self.given_up}: going on without the response cache")

    def get(self, key: str) -> Entry | None:
        store = self._using()
        if store is None:
            return None
        try:
            return store.get(key)
        except Exception as error:
            self._give_up(_as_cache_error(store, "get", error))
            return None

    def put(self, key: str, entry: Entry) -> None:
        store = self._using()
        if store is not None:
            try:
                store.put(key, entry)
                return
            except (NotStorable, UnicodeEncodeError):  # (this answer only: the store is fine)
                raise
            except Exception as error:
                self._give_up(_as_cache_error(store, "put", error))
        with self._lock:
            told, self._told_a_call = self._told_a_call, True
        if not told:  # (the call's `cache_not_stored` note, once)
            raise CacheGivenUp(f"{self.given_up}: going on without the response cache")

    def discard(self, key: str) -> None:
        store = self._using()
        if store is not None:
            try:
                store.discard(key)
            except Exception as error:
                self._give_up(_as_cache_error(store, "discard", error))

    def refuse(self, key: str) -> None:
        store = self._using()
        if store is not None:
            try:
                not_served(store, key)
            except Exception as error:
                self._give_up(_as_cache_error(store, "refuse", error))

    def stats(self) -> CacheStats:
        store = self._using()
        return store.stats() if store is not None else CacheStats(0, 0, 0, 0)

    def clear(self) -> int:
        store = self._using()
        return store.clear() if store is not None else 0

    def close(self) -> None:
        """Close the store, if it has a `close` (and was opened)."""
        close = getattr(self._store, "close", None)
        if close is not None:
            close()


def _as_cache_error(store: Cache, method: str, error: Exception) -> CacheError:
    """`error` from `store`'s `method` as the `CacheError` it gives the store up for: a store
    of your own's other errors too (its server's, a bug), named as the call would name them."""
    return error if isinstance(error, CacheError) else CacheError(failed_in(store, method, error))
