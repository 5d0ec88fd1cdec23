"""The threads the async client asks a response cache that may wait from (a file's lock, a
server: `Attempts.cache_waits`), so that a busy store holds up its own call, never the event loop
and every other call on it.

They are the SDK's own, not `concurrent.futures`' pool:
- daemon threads, which take work for as long as the process runs (a pool of
  `concurrent.futures` refuses new work once the main thread has ended: an event loop running in
  another thread then failed at every cache hand-over, after the provider had answered);
- each ends after `IDLE_SECONDS` without work, and what it held per thread goes with it (a
  `SQLiteCache` opens a connection per thread: a pool's threads, which never ended, kept up to
  64 of each store's connections open, `close()` or not).

A store may have threads of its own (`threads`, a `CacheThreads`: `SQLiteCache`'s few, so that
it opens few connections); any other is asked from the process's (`cache_threads()`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from concurrent.futures import Future
from typing import Any
from typing import Final
from typing import TypeVar

from sdk import _fork

__all__ = [
    "CACHE_THREADS",
    "IDLE_SECONDS",
    "CacheThreads",
    "at_thread_end",
    "cache_threads",
    "lookups_wait",
    "store_waits",
    "threads_for",
    "turn_bound",
]

_T = TypeVar("_T")

logger = logging.getLogger("sdk.cache")

CACHE_THREADS: Final = 64
"""The threads the async client asks a store that may wait from, at most: the SDK's own, not
the event loop's default executor (a few threads, which the loop's DNS lookups and every
`asyncio.to_thread` share: 80 calls on a store that waited 1 s held one another, and a
`getaddrinfo` beside them, for 27 s). Calls past this many at once wait their turn."""

_FAILURES_KEPT: Final = 256
"""The stores whose last failure a `CacheThreads` remembers (`tell_failed`), at most."""

IDLE_SECONDS: Final = 5.0
"""How long a thread waits for work before it ends (a thread is started again for work when none
waits): a run of calls keeps its threads, an idle service holds none."""


class CacheThreads(Executor):
    """Up to `most` daemon threads that run the work given (`submit`), each ending after `idle`
    seconds without work. (An executor, so `loop.run_in_executor` takes it.)"""

    def __init__(self, most: int = CACHE_THREADS, idle: float = IDLE_SECONDS) -> None:
        # (no thread, or none that waits for work, would leave work pending for ever)
        if type(most) is not int or most < 1:
            raise ValueError(f"CacheThreads(most=...) must be a whole number >= 1, not {most!r}")
        if type(idle) not in (int, float) or not 0 < idle < math.inf:
            raise ValueError(f"CacheThreads(idle=...) must be seconds > 0, not {idle!r}")
        self.most = most
        self.idle = idle
        self._ready = _fork.condition()  # (guards what follows; waited on by idle threads)
        self._in_child()
        _fork.after_fork(self, CacheThreads._in_child)  # (none of the parent's threads there)

    def _in_child(self) -> None:
        self._pending: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._threads = 0
        self._waiting = 0  # (threads waiting for work now)
        self._failed: dict[int, float] = {}  # (`tell_failed`: by the store's id, when)

    def tell_failed(self, store: object) -> None:
        """`store`, asked from these threads, failed now (its timeout, its server gone): the
        calls waiting for their turn for it are given up (`failed_since`)."""
        with self._ready:
            self._failed.pop(id(store), None)
            self._failed[id(store)] = time.monotonic()
            if len(self._failed) > _FAILURES_KEPT:
                del self._failed[next(iter(self._failed))]

    def failed_since(self, store: object, since: float) -> bool:
        """Whether `store` failed (`tell_failed`) at or after `since` (`time.monotonic()`): a
        store whose calls fail, not one that is only busy. (By id: a store gone whose id is
        another's now failed before that one's calls were given to these threads.)"""
        return self._failed.get(id(store), -math.inf) >= since

    @property
    def threads(self) -> int:
        """The threads running now (busy or waiting for work)."""
        return self._threads

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        done: Future[_T] = Future()
        work = (done, lambda: fn(*args, **kwargs))
        with self._ready:
            self._pending.append(work)
            # A thread for each piece of work no waiting thread is there for, up to `most`
            # (past it, the work waits for a busy thread, which takes it when it is done).
            if len(self._pending) > self._waiting and self._threads < self.most:
                try:
                    threading.Thread(target=self._run, name="sdk-cache", daemon=True).start()
                except RuntimeError:  # (no thread can be started: the interpreter finalizing)
                    self._pending.remove(work)
                else:
                    self._threads += 1
                    return done
            else:
                self._ready.notify()
                return done
        _ran(*work)  # (in the caller's thread: the work never waits for a thread that is not)
        return done

    def _run(self) -> None:
        _ending.releases = []
        while (taken := self._next()) is not None:
            done, work = taken
            _ran(done, work)
            del done, work, taken  # (nothing of the last work is held while waiting)
        for release in _ending.releases:
            try:
                release()
            except Exception:  # (a store's own: the thread ends all the same)
                logger.warning("a cache thread did not release what it held", exc_info=True)

    def _next(self) -> tuple[Future[Any], Callable[[], Any]] | None:
        """The next work, or `None` when none came for `idle` seconds: the thread ends (under
        the lock, with none pending, so no work is left with no thread to run it)."""
        with self._ready:
            while not self._pending:
                self._waiting += 1
                woken = self._ready.wait(timeout=self.idle)
                self._waiting -= 1
                if not woken and not self._pending:
                    self._threads -= 1
                    return None
            return self._pending.popleft()


def _ran(done: Future[Any], work: Callable[[], Any]) -> None:
    """`work()`, its result or error given to `done` (unless it was cancelled meanwhile)."""
    if done.set_running_or_notify_cancel():
        try:
            result = work()
        except BaseException as error:  # (the caller's, through its future)
            done.set_exception(error)
        else:
            done.set_result(result)


_ending = threading.local()  # (`releases`: what a `CacheThreads` thread runs as it ends)


def at_thread_end(release: Callable[[], None]) -> None:
    """Run `release()` as this thread ends, if it is one of a `CacheThreads` (which end when
    idle): a store's connection of the thread, closed then. (Another thread's goes with the
    garbage collection after it ends: an `sqlite3` connection is in a reference cycle with its
    statement cache.)"""
    releases: list[Callable[[], None]] | None = getattr(_ending, "releases", None)
    if releases is not None:
        releases.append(release)


_made: list[CacheThreads] = []  # (made at the first async call on a store that may wait)
_made_lock = _fork.lock()


def cache_threads() -> CacheThreads:
    """The process's `CacheThreads`, for a store with none of its own."""
    if not _made:
        with _made_lock:
            if not _made:
                _made.append(CacheThreads())
    return _made[0]


def store_waits(store: object) -> bool:
    """Whether a response cache's calls may wait (a file's lock, a server): all but a store's
    that says they never do (`waits = False`: `MemoryCache`)."""
    return getattr(store, "waits", True) is not False


def lookups_wait(store: object) -> bool:
    """Whether a response cache's lookups may wait: its calls may (`store_waits`), and it does
    not say its lookups never do (`lookups_wait = False`: a `SQLiteCache` that writes its file,
    which reads without the write lock)."""
    return store_waits(store) and getattr(store, "lookups_wait", True) is not False


def turn_bound(store: object) -> float | None:
    """How often a call waiting for its turn in the threads it asks `store` from (`threads_for`)
    looks whether the store failed meanwhile (`CacheThreads.failed_since`), and is then given
    up, not run: the store's own `timeout` (`SQLiteCache`'s, `RedisCache`'s). A store that is
    busy, not failing, has its calls wait their turn; one whose calls ahead failed (each after
    its timeout) does not hold the ones queued a turn of its timeout for each call ahead of
    them. `None`, no bound, for a store with no timeout of its own (its calls wait their turn)."""
    try:
        bound: object = getattr(store, "timeout", None)
    except Exception:  # (a store's own property that fails: no bound, as with none)
        return None
    if isinstance(bound, int | float) and type(bound) is not bool and 0 < bound < math.inf:
        return float(bound)
    return None


def threads_for(store: object) -> CacheThreads:
    """The threads the async client asks a response cache from: its own (`threads`: the SDK's
    stores have theirs, so a store that does not answer holds up no other's calls), else the
    process's (`cache_threads`)."""
    own = getattr(store, "threads", None)
    return own if isinstance(own, CacheThreads) else cache_threads()
