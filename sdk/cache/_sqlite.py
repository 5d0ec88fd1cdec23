"""`SQLiteCache`: one SQLite file, shared safely by several processes and threads.

The file follows the SDK's discipline for shared files (`sdk._sqlite`): made whole before it
appears, identified inside one transaction (any number of threads and processes may open a new
file at once), owner-only (it holds answers, and its keys hash prompts and documents), WAL, every
wait bounded by `timeout`, and any SQLite error a `CacheFileError` naming the file. A file that
is not a cache of this SDK is refused and never changed.

A hit only reads: it takes no write lock, so it never waits for another connection's write; a
hit on an entry the store read before is served from memory while no process has written the
file since (`sdk.cache._held`: the kernel tells of every write). Its count, and a miss's, is
kept in memory and written with this store's next write (and when it is closed, asked for
`stats()`, or its process ends; in a long run of reads, at most once a second, never waiting);
an expired entry found by a read goes with the next write too. A hit whose entry
the call does not serve (`refuse`: damaged, or refused by today's checks) is counted a miss
(unless a clear dropped its hit since: the lookup came before the clear, and is counted nowhere).

A `clear` starts the counts afresh for every process: it counts itself in the file (the counters'
row `clears`), and every lookup reads that row in the statement that finds the entry, so each
count a store keeps belongs to the clear it saw. A lookup that sees a clear the store did not
know of drops the counts the store held (made before it); so does a write that finds one (the
counts held were made before it).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import TypeVar

from sdk import _fork
from sdk import _sqlite
from sdk._threads import CacheThreads
from sdk._threads import at_thread_end
from sdk.cache._entry import CacheStats
from sdk.cache._entry import Entry
from sdk.cache._entry import check_settings
from sdk.cache._entry import checked_key
from sdk.cache._entry import default_path
from sdk.cache._entry import expired
from sdk.cache._entry import stored_form
from sdk.cache._errors import CacheFileError
from sdk.cache._held import Generation
from sdk.cache._held import Held
from sdk.cache._held import HeldEntries
from sdk.cache._held import file_identity

__all__ = ["ExistingCache", "SQLiteCache"]

logger = logging.getLogger("sdk.cache")

LAYOUT = _sqlite.Layout(
    name="structured-sdk cache",
    application_id=0x53444B43,  # "SDKC"
    version=2,  # the tables' layout (the entries' format is in their keys)
    schema=(
        "CREATE TABLE entries (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT "
        "NULL, expires REAL)",
        "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    ),
    error=CacheFileError,
)

_CLEARS = "clears"
"""The counters' row counting the file's `clear`s (absent: none)."""
_LOOKUP = (  # one row, found or not: an entry's value and expiry, and the count of clears
    "SELECT e.value, e.expires, c.value FROM (SELECT 1) LEFT JOIN entries e ON e.key = ? "
    f"LEFT JOIN counters c ON c.name = '{_CLEARS}'"
)
"""A lookup reads the file's count of clears in the same statement (one snapshot): each count
it makes belongs to the clear it saw, so one made after another process's clear is kept."""
_NOT_UTF8 = "Could not decode to UTF-8"
"""How Python's `sqlite3` says a stored text is not UTF-8 (an `OperationalError` of its own,
with no SQLite error code)."""

_ADD_COUNT = (  # (a count that is not a whole number, damaged, is 0 as `_count` reads it)
    "INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = "
    "MAX(0, CASE typeof(value) WHEN 'integer' THEN value ELSE 0 END + excluded.value)"
)

_COUNTS_WAIT = 1.0
"""The longest the end of a store (its `close`, or its process's) waits for another process's
write to record the counts it kept (at most its `timeout`): counts only, so past it they are
dropped with a warning, and a process that only read never waits long for a writer."""
_FLUSH_EVERY = 256
"""Counts kept in memory before a write is tried for them alone (without waiting)..."""
_FLUSH_SPACING = 1.0
"""...and seconds since the last such write: a run of hits writes its counts once a second
(each write is a transaction, and now and then a checkpoint of the write-ahead log)."""
_REREADS = 2
"""The most times one read is read again because its `immutable` connection read a file that
changed, or found it damaged (`SQLiteCache._settled`)."""
_INDEX_WAIT = 0.005
"""Seconds between tries of a read while the writer sets its write-ahead log's index up."""

_THREADS = 4
"""The threads the async client asks a store from (`SQLiteCache.threads`), at most."""


def _called(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    """The method called, if its object still lives."""
    bound = method()
    if bound is not None:
        bound()


_T = TypeVar("_T")


class SQLiteCache:
    """A cache in one SQLite file (see the module docstring): `ttl` seconds per entry (`None`:
    no expiry; default a week); `timeout`, the longest wait for another connection's write;
    `readonly=True` opens an existing file so that nothing in it can change (what `sdk cache
    stats` does: it works on a file, or in a folder, that cannot be written)."""

    _layout: ClassVar[_sqlite.Layout] = LAYOUT
    """What the file is opened as (`ExistingCache`: an empty file is refused, not adopted)."""

    @property
    def lookups_wait(self) -> bool:
        """Whether a lookup may wait (`Cache`): a store that writes its file never does (it
        reads without the write lock, and writes the counts only when no one else is writing),
        and the async client asks it on its event loop, and stores from a thread of its own; one
        that reads it as `readonly=True` (or a file it cannot write) checks each read against
        the file and reads again, waiting between reads, and is asked from a thread too."""
        return self.readonly or self._tally.unwritable

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        ttl: float | None = 7 * 24 * 3600.0,
        timeout: float = _sqlite.DEFAULT_TIMEOUT,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_settings("SQLiteCache", ttl=ttl, timeout=timeout, clock=clock)
        self.path = Path(path) if path is not None else default_path()  # (as given: messages)
        # Opened at the path made absolute once: every thread opens its own connection, later,
        # and a relative path read after the process changed folder (`chdir`) named another file.
        self._file = self.path.absolute()
        self.ttl = ttl
        self.timeout = timeout
        self.readonly = readonly
        self._clock = clock
        self._local = threading.local()
        self._closes = 0  # (`close()`s so far: a thread's connection opened before one is old)
        self.threads = CacheThreads(_THREADS)
        """The threads the async client asks the store from (`sdk._threads`): few, as each
        opens its own connection, and writes to one file are made one at a time anyway."""
        self._held = HeldEntries(self._file)  # (entries read before, while the file is unchanged)
        # A forked child opens its own connections (those it inherits are its parent's).
        _fork.after_fork(self, SQLiteCache._forget_connections)
        self._tally = _Tally()
        db = self._connection()  # fail now, not at the first call, on a file that is not a cache
        try:  # (counts made before a later `clear` are then not written)
            with _fork.gate(), self._errors():
                self._tally.clears = _clears(db)
        except CacheFileError:  # a damaged page: the call that reads it says so; the counts
            pass  # taken at the first write are dropped (made before a clear or not: unknown)
        if not readonly:  # counts still in memory are written when the process ends
            weakref.finalize(
                self, _write_tally, self._file, self._layout, self.timeout, self._tally
            )
        weakref.finalize(self, self._held.release)  # (its watches go with it)

    def __repr__(self) -> str:
        return f"SQLiteCache({str(self.path)!r}, ttl={self.ttl})"

    def __reduce__(self) -> tuple[Any, ...]:
        # As its file and settings, as a `RedisCache` pickles as its URL: a Ray actor or a
        # worker process given one opens its own store on the same file (its connections,
        # held entries and counts are its process's). It failed, deep in Ray's serializer
        # ("cannot pickle '_thread._local' object").
        # (its own class: an `ExistingCache`, a subclass of yours, is made again as itself)
        settings = (self._file, self.ttl, self.timeout, self.readonly, self._clock)
        return (_reopened, (type(self), *settings))

    # --- the protocol ---

    def get(self, key: str) -> Entry | None:
        checked_key(key)
        db = self._connection()
        # (a store opened read-only reads its file each time: see `sdk.cache._held`)
        reads = None if _sqlite.read_only(db) else self._local.reads
        generation = None if reads is None else self._held.current(reads)
        held = generation.entries.get(key) if generation is not None else None
        if held is not None and not expired(held.expires, self._clock):
            self._tally.hit(held.clears)
            entry: Entry | None = held.entry
        else:  # (held only if no write is being committed now: `HeldEntries.settled`)
            entry = self._read(db, key, self._held.settled(generation))
        tally = self._tally
        if tally.pending >= _FLUSH_EVERY and not self.readonly and not tally.unwritable:
            now = time.monotonic()
            if now - tally.tried >= _FLUSH_SPACING:
                tally.tried = now
                try:
                    self._write_counts()
                except CacheFileError as error:  # counts only: the hit is served all the same
                    logger.debug("the response cache's counts were not written: %s", error)
        return entry

    def _read(
        self, db: sqlite3.Connection, key: str, generation: Generation | None
    ) -> Entry | None:
        """The entry for `key` read from the file (counted a hit or a miss), held in
        `generation` if it is one."""
        if _sqlite.read_only(db):  # (one type check on a file opened for writing)
            row, expires, clears = self._settled(db, lambda db: self._lookup(db, key))
        else:
            row, expires, clears = self._lookup(db, key)
        if expires is not None and type(expires) is not float and type(expires) is not int:
            # The expiry stored as text or bytes (a damaged record): a damaged entry, replaced.
            row = (f"<an expiry of {type(expires).__name__} in the entry's row>", None)
            expires = None
        elif expired(expires, self._clock):
            row = None  # (a miss, counted below with its key to delete)
        if row is None:
            self._tally.missed(clears, key if expires is not None else None)
            return None
        self._tally.hit(clears)
        entry = Entry.stored(row[0], key)
        if generation is not None:
            self._held.keep(generation, key, Held(entry, expires, clears, len(row[0])))
        return entry

    def _lookup(
        self, db: sqlite3.Connection, key: str
    ) -> tuple[tuple[Any, Any] | None, Any, int | None]:
        """The entry's row for `key` (its value and expiry; `None`: none), its expiry, and the
        file's count of clears (`None`: not known)."""
        row: tuple[Any, Any] | None
        clears: int | None
        try:  # a read in autocommit: no lock a writer holds is waited for
            with _fork.gate():  # (no fork while inside SQLite: `sdk._fork`)
                value, expires, clears_held = db.execute(_LOOKUP, (key,)).fetchone()
            row = (value, expires) if value is not None else None
            clears = _count(clears_held)
        except sqlite3.Error as error:
            row = self._undecodable(db, key, error)
            expires = row[1] if row is not None else None
            clears = self._clears_now(db)
        return row, expires, clears

    def _clears_now(self, db: sqlite3.Connection) -> int | None:
        """The file's count of clears (`None` if it cannot be read now: a write says why)."""
        try:
            with _fork.gate():
                return _clears(db)
        except sqlite3.Error:
            return None

    def _undecodable(
        self, db: sqlite3.Connection, key: str, error: sqlite3.Error
    ) -> tuple[bytes, float | None] | None:
        """The row of an entry whose stored text is not UTF-8 (bytes overwritten in the file),
        as bytes: a damaged entry, which the call takes as a miss and replaces; any other
        error is the file's (`CacheFileError`)."""
        if not str(error).startswith(_NOT_UTF8):
            raise _sqlite.typed(error, self.path, self._layout, self.timeout) from error
        with _fork.gate(), self._errors():
            found: tuple[bytes, float | None] | None = db.execute(
                # (an expiry stored as text may not be UTF-8 either: as bytes, damaged below)
                "SELECT CAST(value AS BLOB), CASE WHEN typeof(expires) = 'text' THEN "
                "CAST(expires AS BLOB) ELSE expires END FROM entries WHERE key = ?",
                (key,),
            ).fetchone()
        return found

    def put(self, key: str, entry: Entry) -> None:
        value = stored_form(key, entry)  # (`NotStorable`: refused as every store refuses it)
        now = self._clock()
        expires = now + self.ttl if self.ttl is not None else None
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO entries (key, value, created, expires) VALUES (?, ?, ?, ?)",
                (key, value, now, expires),
            )

    def discard(self, key: str) -> None:
        checked_key(key)
        with self._write() as db:
            db.execute("DELETE FROM entries WHERE key = ?", (key,))

    def refuse(self, key: str) -> None:
        """The entry `get` handed back for `key` was not served: dropped, its lookup a miss."""
        checked_key(key)
        self._tally.refused()
        self.discard(key)  # (which writes the counts)

    def stats(self) -> CacheStats:
        held: dict[str, int] = {}
        if self.readonly:  # (its counts are never written: they are added to the file's)
            held = self._tally.held()
        else:
            try:
                with self._write():
                    pass  # this store's counts, written first
            except CacheFileError as error:
                # A file it cannot write, or not now (a full disk): read as it is, with the
                # counts this store holds in memory (a busy file is its error, as for a write).
                if not (_sqlite.cannot_write(error) or _sqlite.no_room(error)):
                    raise
                held = self._tally.held()
        db = self._connection()
        if _sqlite.read_only(db):
            entries, size, counters = self._settled(db, self._read_stats)
        else:
            entries, size, counters = self._read_stats(db)
        counted = {name: _count(counters.get(name)) + held.get(name, 0) for name in _Tally.NAMES}
        return CacheStats(entries, size, **counted)

    def _read_stats(self, db: sqlite3.Connection) -> tuple[int, int, dict[str, object]]:
        """The file's count of entries, their size, and its counters, from one snapshot."""
        with _fork.gate(), self._errors():
            db.execute("BEGIN")  # both numbers from one snapshot
            try:
                entries, size = db.execute(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(value AS BLOB))), 0) FROM entries"
                ).fetchone()
                counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
            finally:
                db.execute("COMMIT")
        return entries, size, counters

    def clear(self) -> int:
        """Drop every entry and start the counts afresh, for every process (see the module
        docstring)."""
        with self._write() as db:
            count: int = db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            db.execute("DELETE FROM entries")
            db.execute("DELETE FROM counters WHERE name <> ?", (_CLEARS,))
            db.execute(_ADD_COUNT, (_CLEARS, 1))
            self._tally.clears = _clears(db)
            self._tally.written_hits = 0
        return count

    def close(self) -> None:
        """Write the counts still in memory, and close this thread's connection; another
        thread's closes when that thread ends (the async client's, `threads`, end
        `sdk._threads.IDLE_SECONDS` after their last call) or at its next call, which opens one
        again, as any later call does."""
        try:
            self._write_counts_at_close()  # (through this thread's connection, as it is)
        finally:
            self._closes += 1
            self._held.release()
            self._drop_connection()

    def _write_counts_at_close(self) -> None:
        if self.readonly or not self._tally.pending or self._tally.unwritable:
            return
        wait = min(self.timeout, _COUNTS_WAIT)
        why = f"another process held the write lock past {wait:g} s"
        try:
            # (counts are written to a file that is there, never one made again for them, as
            # at the process's end: `_write_tally`)
            written = self._write_counts(wait, make=False)
        except CacheFileError as error:
            if not self._file.is_file():  # (removed, or its folder: before or while opening)
                logger.debug("%s: gone; %d counts not written", self.path, self._tally.drop())
                return
            if not (_sqlite.cannot_write(error) or _sqlite.no_room(error)):
                raise
            written = self._tally.unwritable = _sqlite.cannot_write(error)
            why = str(error)  # (a full disk: counts only, so the store still closes)
        if not written:
            dropped = self._tally.drop()
            logger.warning(
                "%s: %d counts of hits and misses not written (%s): dropped",
                self.path, dropped, why,
            )  # fmt: skip

    # --- the file ---

    def _connection(self, make: bool = True) -> sqlite3.Connection:
        """This thread's connection to the file, opened if it has none (or the file changed
        since); a missing file is made (`make`) or refused."""
        local = self._local
        found: sqlite3.Connection | None = getattr(local, "db", None)
        if found is not None:
            # (one type check but for an immutable connection; a connection opened before a
            # `close()` is opened again: the path may name another file since)
            if local.closes == self._closes and not _sqlite.stale(found):
                return found
            self._drop_connection()  # the file changed since it was opened: opened again
        # The file the connection reads, for the entries held (`HeldEntries.current`): as the
        # path names it before and after the opening (`None`, never held, if they differ; a
        # file the opening made is the one named after it).
        before = file_identity(self._file)
        try:
            db = _sqlite.open_file(
                self._file, self._layout, readonly=self.readonly, timeout=self.timeout, make=make
            )
        except CacheFileError as error:
            if self.readonly or not (
                _sqlite.cannot_write(error) or _sqlite.cannot_open_here(error, self.path)
            ):
                raise
            # Another user's file, or in a folder of theirs, or on a read-only file system:
            # read as `readonly=True` reads it (its hits are served, its counts kept; a store
            # says the file cannot be written).
            db = _sqlite.open_file(self._file, self._layout, readonly=True, timeout=self.timeout)
            self._tally.unwritable = True
        after = file_identity(self._file)
        self._local.reads = after if before in (None, after) else None  # (None: made by it)
        self._local.closes = self._closes
        self._local.db = db
        # (an async client's thread closes it as it ends: unclosed, a connection waits for
        # the garbage collector, its descriptors open; told once a thread, whichever
        # connection it holds then: a thread that opened again after each `close()` piled up
        # one for each)
        if not getattr(local, "told_at_end", False):
            drop = weakref.WeakMethod(self._drop_connection)
            at_thread_end(lambda: _called(drop))
            local.told_at_end = True
        return db

    def _settled(self, db: sqlite3.Connection, read: Callable[[sqlite3.Connection], _T]) -> _T:
        """`read(db)` through a read-only opening's connection (`sdk._sqlite`), believed only
        as far as it can be:
        - through an `immutable` one (SQLite then takes the file as never changing), only if
          the file was the same from the connection's opening to the read's end; else, or if
          the read found the file damaged (pages of two states of a file changing under it),
          it is read again through a new connection, at most `_REREADS` times, the last read
          believed (a file that is damaged stays so);
        - while the process writing the file sets its write-ahead log's index up (which a
          connection that cannot write it cannot help with, and SQLite does not wait for),
          it is tried again through a new connection, for at most `timeout` seconds."""
        rereads, deadline = 0, time.monotonic() + self.timeout
        while True:
            try:
                found = read(db)
            except CacheFileError as error:
                if _sqlite.index_not_ready(error) and time.monotonic() < deadline:
                    time.sleep(_INDEX_WAIT)
                elif _sqlite.immutable(db) and _sqlite.changed_under(error) and rereads < _REREADS:
                    rereads += 1
                else:
                    raise
            else:
                if rereads >= _REREADS or not _sqlite.stale(db):
                    return found
                rereads += 1
            db = self._reopened()

    def _reopened(self) -> sqlite3.Connection:
        """This thread's connection closed, and a new one opened."""
        self._drop_connection()
        return self._connection()

    def _drop_connection(self) -> None:
        """Close this thread's connection (SQLite keeps the locks other connections of this
        process hold on the file: it closes its descriptor only once none is held)."""
        found = getattr(self._local, "db", None)
        self._local.db = None
        if found is not None:
            with _fork.gate():
                found.close()

    def _forget_connections(self) -> None:
        """In a forked child, as it starts: no connection yet (`_fork.after_fork`). A child
        ends through `os._exit`, which runs no exit hook; a `multiprocessing` worker (a
        `Process`, a `Pool`'s worker closed and joined) runs multiprocessing's own finalizers
        first, so the counts it kept are written there (`_written_at_worker_end`)."""
        self._local = threading.local()
        self._held.forget()
        helpers = sys.modules.get("multiprocessing.util")
        if helpers is not None and not self.readonly:
            # (now, before the worker starts: multiprocessing then drops the finalizers it
            # inherited and runs the hooks registered for after a fork, this one among them)
            helpers.register_after_fork(self, SQLiteCache._written_at_worker_end)

    def _written_at_worker_end(self) -> None:
        """In a `multiprocessing` worker: its counts written as it ends (a weak reference to
        the store, as `weakref.finalize`'s)."""
        helpers = sys.modules["multiprocessing.util"]
        arguments = (self._file, self._layout, self.timeout, self._tally)
        helpers.Finalize(self, _write_tally, arguments, exitpriority=0)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        with _sqlite.errors(self.path, self._layout, self.timeout):
            yield

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, which also writes the counts kept in memory."""
        if self.readonly:
            raise CacheFileError(f"{self.path} was opened read-only")
        db = self._connection()
        with self._errors(), self._tally.written(self._clock()) as add_counts, _sqlite.write(db):
            add_counts(db)
            yield db

    def _write_counts(self, wait: float = 0.0, *, make: bool = True) -> bool:
        """Write the counts kept in memory if no other connection is writing, or stops within
        `wait` seconds; whether they were written (to a file made first if missing: `make`)."""
        with _fork.gate(), self._errors():
            db = self._connection(make)
            if not _sqlite.try_write(db, wait):
                return False
            try:
                with self._tally.written(self._clock()) as add_counts:  # (its commit inside)
                    add_counts(db)
                    db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # (SQLite rolls back itself on a full disk)
                    db.execute("ROLLBACK")
                raise
            return True


class ExistingCache(SQLiteCache):
    """A `SQLiteCache` over a file that is one already, opened for writing (what `sdk cache
    clear` opens): an empty file, or none, is refused as not a cache, as `readonly=True`
    refuses it, never made into one (a command pointed at a file does not convert it; a client
    given an empty file at its cache path adopts it)."""

    _layout = dataclasses.replace(LAYOUT, adopt_empty=False)


class _Tally:
    """Hits, misses and expiries counted in memory (a reader never waits to count itself), and
    the expired keys to delete, until a write takes them."""

    NAMES = ("hits", "misses", "expired", "refused")
    """What is counted (`CacheStats`'s fields of the same names)."""
    unwritable = False
    """The store's file cannot be written by this process (it was opened as `readonly=True`
    opens it): the counts are kept, never written."""
    clears: int | None = None
    """The file's count of `clear`s when this tally last wrote (or its store was made; `None`:
    unknown): counts taken at a write that finds another are dropped."""
    written_hits: int
    """Hits this tally wrote to the file since it last knew of a clear: with those in memory,
    the hits a `refused` may take back (none left: the refused lookup's hit was dropped with a
    clear, and is counted nowhere)."""

    def __init__(self) -> None:
        self._lock = _fork.lock()  # (free in a forked child)
        _fork.after_fork(self, _Tally.start)  # (the parent's counts are the parent's to write)
        self.start()

    def start(self) -> None:
        """Nothing counted yet (also in a forked child: `_fork.after_fork`)."""
        self._counts = dict.fromkeys(_Tally.NAMES, 0)
        self._expired: set[str] = set()
        self.pending = 0
        self.written_hits = 0  # (a forked child's are its own)
        self.tried = -math.inf
        """When (`time.monotonic`) a write was last tried for the counts alone."""

    def refused(self) -> None:
        """A lookup counted a hit whose entry was not served: a miss."""
        with self._lock:
            counts = self._counts
            if self.written_hits + counts["hits"] <= 0:  # dropped with a clear since
                return
            counts["hits"] -= 1
            counts["misses"] += 1
            counts["refused"] += 1
            self.pending += 1

    def missed(self, clears: int | None, expired_key: str | None) -> None:
        """A miss (an expired entry's, with its key) by a lookup that saw the file cleared
        `clears` times (`_saw`)."""
        with self._lock:
            self._saw(clears)
            if expired_key is not None:
                self._counts["expired"] += 1
                self._expired.add(expired_key)
                self.pending += 1
            self._counts["misses"] += 1
            self.pending += 1

    def hit(self, clears: int | None) -> None:
        """A hit by a lookup that saw the file cleared `clears` times (`_saw`)."""
        with self._lock:
            self._saw(clears)
            self._counts["hits"] += 1
            self.pending += 1

    def _saw(self, clears: int | None) -> None:
        """A lookup saw the file cleared `clears` times (`None`: it could not tell): if that is
        not what this tally knew, the counts it holds were made before a clear since, and are
        dropped; the number is known from now on. (Under the lock. A lookup that began before
        a clear and is counted after another thread's lookup saw it drops that one's count: a
        race with a clear miscounts by the lookups inside it, never more.)"""
        if clears is not None and clears != self.clears:
            self._counts = dict.fromkeys(self._counts, 0)
            self.pending = 0
            self.clears = clears
            self.written_hits = 0

    def held(self) -> dict[str, int]:
        """The counts kept in memory now, by name."""
        with self._lock:
            return dict(self._counts)

    def drop(self) -> int:
        """Forget the counts kept (a store's end that could not write them); how many were
        counted. The expired keys go too: a later lookup finds them again."""
        with self._lock:
            dropped = self.pending
            self._counts = dict.fromkeys(self._counts, 0)
            self._expired = set()
            self.pending = 0
        return dropped

    @contextmanager
    def written(self, now: float) -> Iterator[Callable[[sqlite3.Connection], None]]:
        """The counts, taken from memory now, for `add_counts(db)` to add to the file's inside
        a write transaction (no `clear` can come between taking them and committing) that the
        block holds whole, its commit too: given back should the block fail (a full disk fails
        at the commit), dropped if the file was cleared since they were counted. The clear
        they belong to is the one the tally knew as it handed them over (`epoch`): a lookup of
        another thread may learn of a newer clear while this write waits for the lock, and
        counts taken before it must not be added after it."""
        with self._lock:
            counts = {name: n for name, n in self._counts.items() if n}
            expired = list(self._expired)
            epoch = self.clears
            self._counts = dict.fromkeys(self._counts, 0)
            self._expired = set()
            self.pending = 0

        def add_counts(db: sqlite3.Connection) -> None:
            clears = _clears(db)
            if clears != epoch:  # (they were made before that `clear`)
                counts.clear()
                with self._lock:
                    if self.clears != clears:  # (not known yet: what the tally holds is older)
                        self._counts = dict.fromkeys(self._counts, 0)
                        self.pending = 0
                    self.clears = clears
                    self.written_hits = 0
            if counts:
                db.executemany(_ADD_COUNT, list(counts.items()))
            if expired:
                db.executemany(
                    "DELETE FROM entries WHERE key = ? AND expires IS NOT NULL AND expires <= ?",
                    [(key, now) for key in expired],
                )

        try:
            yield add_counts
            with self._lock:
                self.written_hits += counts.get("hits", 0)
        except BaseException:
            with self._lock:
                if self.clears == epoch:  # (else made before a clear learnt of since: dropped)
                    for name, n in counts.items():
                        self._counts[name] += n
                self._expired.update(expired)
                self.pending = sum(self._counts.values())
            raise


def _clears(db: sqlite3.Connection) -> int:
    """How many times the file was cleared (see `_CLEARS`)."""
    row = db.execute("SELECT value FROM counters WHERE name = ?", (_CLEARS,)).fetchone()
    return _count(row[0] if row is not None else 0)


def _count(value: object) -> int:
    """A count as the file holds it (not below zero; a damaged one, not a whole number, as 0)."""
    return max(0, value) if type(value) is int else 0


def _write_tally(path: Path, layout: _sqlite.Layout, timeout: float, tally: _Tally) -> None:
    """At the end of a store (or of its process): write the counts it kept in memory, if its
    file is still there (never making one again), with a bounded wait; a failure loses only
    counts, so it is logged, not raised."""
    if not tally.pending or tally.unwritable or not path.is_file():
        return
    wait = min(timeout, _COUNTS_WAIT)
    try:
        with _fork.gate(), _sqlite.errors(path, layout, wait):
            db = _sqlite.open_file(path, layout, timeout=wait, make=False)
            try:
                with tally.written(time.time()) as add_counts, _sqlite.write(db):
                    add_counts(db)
            finally:
                db.close()
    except (CacheFileError, OSError) as error:
        # (a file this process cannot write never takes its counts: the caching guide says so)
        # (nor one removed since the look above)
        gone = _sqlite.cannot_write(error) or not path.is_file()
        logger.log(logging.DEBUG if gone else logging.WARNING,
                   "the response cache's counts were not written: %s", error)  # fmt: skip


def _reopened(
    cls: type[SQLiteCache],
    path: Path,
    ttl: float | None,
    timeout: float,
    readonly: bool,
    clock: Callable[[], float],
) -> SQLiteCache:
    return cls(path, ttl=ttl, timeout=timeout, readonly=readonly, clock=clock)
