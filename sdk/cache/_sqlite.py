"""`SQLiteCache`: one SQLite file, shared safely by several processes and threads.

The file is created readable and writable by its owner only (it holds prompts' answers, and the
key hashes prompts and documents). It runs in WAL mode, so readers never wait for a writer; each
write is one transaction (an entry is there whole or not at all, whatever kills the process), and
a busy file is waited for, not failed on. A file that is not a cache of this SDK (another
application's database, a damaged page) is refused with `CacheFileError`, never changed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sdk.cache._entry import FORMAT
from sdk.cache._entry import CacheStats
from sdk.cache._entry import Entry
from sdk.cache._entry import default_path

__all__ = ["CacheFileError", "SQLiteCache"]

_APPLICATION_ID = 0x53444B43  # "SDKC": marks the file as this SDK's cache
_SCHEMA = (
    "CREATE TABLE entries (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL, "
    "expires REAL)",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


class CacheFileError(ValueError):
    """The file is not a cache of this SDK (or is damaged): it is left as it is."""


class SQLiteCache:
    """A cache in one SQLite file (see the module docstring): `ttl` seconds per entry (`None`:
    no expiry; default a week)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        ttl: float | None = 7 * 24 * 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl is not None and not ttl > 0:
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
        self.path = Path(path) if path is not None else default_path()
        self.ttl = ttl
        self._clock = clock
        self._local = threading.local()
        self._open()  # fail now, not at the first call, on a file that is not a cache

    def __repr__(self) -> str:
        return f"SQLiteCache({str(self.path)!r}, ttl={self.ttl})"

    # --- the protocol ---

    def get(self, key: str) -> Entry | None:
        now = self._clock()
        with self._transaction() as db:
            row = db.execute("SELECT value, expires FROM entries WHERE key = ?", (key,)).fetchone()
            if row is not None and row[1] is not None and row[1] <= now:
                db.execute("DELETE FROM entries WHERE key = ?", (key,))
                _count(db, "expired")
                row = None
            _count(db, "hits" if row is not None else "misses")
        if row is None:
            return None
        try:
            return Entry.from_json(row[0])
        except (ValueError, KeyError, TypeError):
            self.discard(key)  # a damaged entry is a miss, and goes
            return None

    def put(self, key: str, entry: Entry) -> None:
        now = self._clock()
        expires = now + self.ttl if self.ttl is not None else None
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO entries (key, value, created, expires) VALUES (?, ?, ?, ?)",
                (key, entry.to_json(), now, expires),
            )

    def discard(self, key: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM entries WHERE key = ?", (key,))

    def stats(self) -> CacheStats:
        with self._transaction() as db:
            entries, size = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(value AS BLOB))), 0) FROM entries"
            ).fetchone()
            counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
        return CacheStats(
            entries,
            size,
            counters.get("hits", 0),
            counters.get("misses", 0),
            counters.get("expired", 0),
        )

    def clear(self) -> int:
        with self._transaction() as db:
            count: int = db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            db.execute("DELETE FROM entries")
            db.execute("DELETE FROM counters")
        return count

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # --- the file ---

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._open()
        return db

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Created private before SQLite opens it (O_EXCL: no race with another creator).
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            application = db.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            if application == 0 and not tables:
                with _immediate(db):
                    if db.execute("PRAGMA application_id").fetchone()[0] == 0:
                        db.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                        db.execute(f"PRAGMA user_version = {FORMAT}")
                        for statement in _SCHEMA:  # (executescript would commit midway)
                            db.execute(statement)
            elif application != _APPLICATION_ID:
                raise CacheFileError(f"{self.path} is not a structured-sdk cache: left as it is")
            db.execute("PRAGMA journal_mode = WAL")
            # In WAL mode NORMAL still commits each transaction whole; it only lets the last
            # commits go on a power cut (then asked again), for a write without an fsync.
            db.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as error:
            db.close()
            raise CacheFileError(f"{self.path} is not a usable cache ({error})") from error
        except BaseException:
            db.close()
            raise
        self._local.db = db
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        with _immediate(db):
            yield db


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (`BEGIN IMMEDIATE`): all of it commits, or none of it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _count(db: sqlite3.Connection, name: str) -> None:
    db.execute(
        "INSERT INTO counters (name, value) VALUES (?, 1) "
        "ON CONFLICT(name) DO UPDATE SET value = value + 1",
        (name,),
    )
