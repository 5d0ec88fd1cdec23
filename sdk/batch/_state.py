"""A job's durable state: one SQLite file (stdlib `sqlite3`, WAL, one transaction per step).

Tables:

- `meta`: the job's settings and progress marks (contract fingerprint, input identity, the
  committed length of the output file, the runner's lease, ...), JSON values; `format` says
  the file is a job's (`FORMAT`).
- `items`: one row per input line: id, where the line is and a hash of its bytes (the item's
  identity, checked each time it is read back), its state (`pending` -> `submitted` -> `done`),
  the submission it is in, its retry counts and pending feedback, its tokens, and once done its
  outcome and last error.
- `submissions`: one row per group of items sent together, written *before* the backend is
  asked (state `submitting`), so that a crash between the backend's answer and our record of it
  leaves a trace to look the batch up by.
- `batches`: the backend's batches of a submission (`open` -> `ended` -> `collected`). A lost
  submission's possible batch is a `candidate` until its results prove it the submission's
  (then `ended`) or not (`foreign`); a candidate left when the job is cancelled is `dropped`.

Every change of state is one transaction; the output file's committed length moves in the same
transaction as the items whose lines were appended (see `sdk.batch._output`).

A state file is made whole before it appears (`JobState.create`: a temporary file, linked into
place), so a failed `create` leaves nothing and two at once make one job. Opening checks that
the file is a job's (its tables and `format`) and never adds anything to a file that is not;
`readonly=True` (what `status` uses) cannot change the file at all. Any SQLite error later (a
damaged page) comes out of `state_errors` as a one-line `StateFileError`. Every call into SQLite
here is inside the calling thread's fork gate (`sdk._fork.gate`: no fork while it is inside).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk import _fork
from sdk import _sqlite
from sdk.batch._errors import BatchError
from sdk.batch._errors import StateFileError

__all__ = ["FORMAT", "BatchRow", "ItemRow", "JobState", "SubmissionRow", "state_errors"]

FORMAT = "sdk-batch/3"
"""What `meta.format` holds in a job's state file (a file without it is not a job's)."""
_OLDER = "sdk-batch/2"
"""The format before ids kept their JSON type (no `items.id_number`): opened for writing, a job
of it is upgraded in place; read-only commands read it as it is."""

_COLUMNS: dict[str, tuple[str, ...]] = {
    "meta": ("key", "value"),
    "items": (
        "seq", "id", "offset", "length", "hash", "state", "submission", "requests",
        "retries_used", "resubmits_used", "feedback", "input_tokens", "output_tokens",
        "outcome", "error_type", "error", "id_number",
    ),
    "submissions": ("key", "state", "count", "bytes", "started", "file_id"),
    "batches": ("remote_id", "submission", "state", "status"),
}  # fmt: skip

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE items (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    hash INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    submission TEXT,
    requests INTEGER NOT NULL DEFAULT 0,
    retries_used INTEGER NOT NULL DEFAULT 0,
    resubmits_used INTEGER NOT NULL DEFAULT 0,
    feedback TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    outcome TEXT,
    error_type TEXT,
    error TEXT,
    id_number INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX items_by_state ON items (state, seq);
CREATE INDEX items_by_submission ON items (submission);
CREATE TABLE submissions (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    count INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    started REAL NOT NULL,
    file_id TEXT
);
CREATE TABLE batches (
    remote_id TEXT PRIMARY KEY,
    submission TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT
);
"""


@contextmanager
def state_errors(path: str | Path) -> Iterator[None]:
    """SQLite's errors on a state file (a damaged page, a file that is not a database, a file
    kept busy past the timeout) as one `StateFileError` line naming the file."""
    with _sqlite.errors(Path(path), LAYOUT):
        yield


@dataclass(frozen=True, slots=True)
class ItemRow:
    """An item's row."""

    seq: int
    id: str
    offset: int
    length: int
    hash: int
    """The line's hash when it was indexed (`sdk.batch._items.line_hash`)."""
    state: str
    submission: str | None
    requests: int
    retries_used: int
    resubmits_used: int
    feedback: list[tuple[str, str]]
    input_tokens: int
    output_tokens: int
    id_number: bool = False
    """The id was a JSON integer in the input (`7`, not `"7"`)."""

    @property
    def output_id(self) -> str | int:
        """The id as its output line writes it: with the JSON type the input gave it."""
        return int(self.id) if self.id_number else self.id


@dataclass(frozen=True, slots=True)
class SubmissionRow:
    """A submission's row."""

    key: str
    state: str
    count: int
    bytes: int
    started: float
    file_id: str | None


@dataclass(frozen=True, slots=True)
class BatchRow:
    """A backend batch's row."""

    remote_id: str
    submission: str
    state: str
    status: str | None


@dataclass(frozen=True, slots=True)
class ItemUpdate:
    """What collecting decided for one item: done (with its outcome) or back to pending."""

    seq: int
    state: str
    retries_used: int
    resubmits_used: int
    feedback: list[tuple[str, str]] | None
    input_tokens: int
    output_tokens: int
    requests: int
    outcome: str | None = None
    error_type: str | None = None
    error: str | None = None


_ITEM_COLUMNS = (
    "seq, id, offset, length, hash, state, submission, requests, retries_used, resubmits_used, "
    "feedback, input_tokens, output_tokens, id_number"
)


_ITEM_NUMBERS = (
    "seq", "offset", "length", "hash", "requests", "retries_used", "resubmits_used",
    "input_tokens", "output_tokens", "id_number",
)  # fmt: skip
"""An item's columns that hold whole numbers."""


def _item(row: sqlite3.Row) -> ItemRow:
    """An item's row as stored; `_DamagedItem` (the column, why) for a value of another type
    than the job wrote (a damaged record)."""
    for column in _ITEM_NUMBERS:
        if type(row[column]) is not int:
            raise _DamagedItem(column, f"{type(row[column]).__name__}, not a whole number")
    for column in ("id", "state"):
        if not isinstance(row[column], str):
            raise _DamagedItem(column, f"{type(row[column]).__name__}, not text")
    try:
        feedback = json.loads(row["feedback"]) if row["feedback"] else []
        turns = [(str(role), str(content)) for role, content in feedback]
    except (ValueError, TypeError, RecursionError) as error:
        raise _DamagedItem("feedback", f"not a list of turns ({error})") from None
    return ItemRow(
        seq=row["seq"],
        id=row["id"],
        offset=row["offset"],
        length=row["length"],
        hash=row["hash"],
        state=row["state"],
        submission=row["submission"],
        requests=row["requests"],
        retries_used=row["retries_used"],
        resubmits_used=row["resubmits_used"],
        feedback=turns,
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        id_number=bool(row["id_number"]),
    )


class _DamagedItem(Exception):
    """An item's row that is not what the job wrote: its column and why (`JobState._items`
    names the file)."""

    def __init__(self, column: str, why: str) -> None:
        super().__init__(column, why)
        self.column, self.why = column, why


class JobState:
    """The state file of one job (see the module docstring).

    Opens an existing job's file (`BatchError` if there is none, `StateFileError` if it is not a
    job's); `readonly=True` opens it so that nothing can be written. `JobState.create` makes one.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)  # (as given: what messages name)
        self._file = self.path.absolute()  # (each thread connects later: not after a `chdir`)
        self.readonly = readonly
        if self.path.is_dir():
            raise BatchError(
                f"{path} is a folder, not a job state file: give the state file's path"
            )
        if not self.path.is_file():
            raise BatchError(f"{path}: no such job state file")
        # One connection per thread (a job run in one thread and cancelled or summarized from
        # another: each reads its own snapshot, none joins another's transaction), all closed
        # by `close` (and a dead thread's when another thread opens one). Each is identified
        # in one transaction (`sdk._sqlite`); autocommit mode, so transactions are opened
        # explicitly (`transaction()`) and none is ever left open by an implicit BEGIN.
        # Read-only (`status`): nothing can change, on a file or in a folder that cannot be
        # written too.
        self._local = threading.local()
        # Each thread's connection, with that thread's fork gate (held while it is inside
        # SQLite: `close` takes it before closing the connection under the thread's feet).
        self._opened: dict[threading.Thread, tuple[sqlite3.Connection, threading.RLock]] = {}
        self._opening = _fork.lock()  # (guards `_opened` and `_closed`)
        self._closed = False
        # A forked child opens its own connections (those it inherits are its parent's).
        _fork.after_fork(self, JobState._forget_connections)
        self._connection()  # fail now, not at the first read, on a file that is not a job's
        if not readonly and self.get("format") == _OLDER:
            try:
                with state_errors(self.path):
                    self._upgrade()
            except BaseException:
                self.close()
                raise

    @classmethod
    def create(cls, path: str | Path, meta: Mapping[str, Any]) -> JobState:
        """A new job's state file holding `meta` (and `format`), made whole in a temporary file
        and linked into place: `FileExistsError` if `path` exists (another process's `create`
        may have won), and nothing left behind on any failure."""

        def fill(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [(key, json.dumps(value)) for key, value in {**meta, "format": FORMAT}.items()],
            )

        with state_errors(path):
            _sqlite.make_whole(path, LAYOUT, fill)
        return cls(path)

    def _upgrade(self) -> None:
        """A job of the format before ids kept their JSON type: add the column saying which ids
        were integers (none, for its items: it wrote every id as a string, and they stay so)."""
        with self.transaction() as db:
            if self.get("format") == _OLDER:  # another process may have upgraded it meanwhile
                db.execute("ALTER TABLE items ADD COLUMN id_number INTEGER NOT NULL DEFAULT 0")
                self.put("format", FORMAT, db)

    def close(self) -> None:
        """Close the database: every thread's connection (no thread opens another since). A
        connection another thread is inside a statement or a transaction on is closed when it
        leaves it (closing it mid-statement crashes the interpreter); that thread's next use
        is the `BatchError` saying the job was closed."""
        with self._opening:
            self._closed = True
            opened = list(self._opened.values())
            self._opened.clear()
        for db, gate in opened:  # (`_opening` not held: a thread inside may be raising on it)
            with gate, _fork.gate():
                db.close()

    @property
    def _db(self) -> sqlite3.Connection:
        """The calling thread's connection."""
        return self._connection()

    def _forget_connections(self) -> None:
        """In a forked child, as it starts: no connection yet (`_fork.after_fork`)."""
        self._local = threading.local()
        self._opened = {}

    def _connection(self) -> sqlite3.Connection:
        found: sqlite3.Connection | None = getattr(self._local, "db", None)
        if found is not None and not self._closed:
            return found
        with self._opening:
            if self._closed:
                raise BatchError(f"{self.path}: the job was closed")
            with _fork.gate():  # (the connections of threads that ended: closed, not kept)
                for thread in [t for t in self._opened if not t.is_alive()]:
                    self._opened.pop(thread)[0].close()
            db = _sqlite.open_file(self._file, LAYOUT, readonly=self.readonly, closed_anywhere=True)
            db.row_factory = sqlite3.Row
            self._opened[threading.current_thread()] = (db, _fork.gate())
        self._local.db = db
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed whole at the end of the block, or rolled back (unless
        SQLite rolled it back itself, as on a full disk: its error is the one raised)."""
        with _sqlite.write(self._db) as db:
            yield db

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every read in the block (on this thread) sees the same commit,
        so counts read one after another add up (another process commits between them). Inside
        a transaction already open on this thread, that one is the snapshot."""
        db = self._db
        with _fork.gate():
            if db.in_transaction:
                yield
                return
            db.execute("BEGIN")
            try:
                yield
            finally:
                if db.in_transaction:
                    db.execute("COMMIT")  # (nothing written: ends the read)

    # --- meta ---

    def get(self, key: str, default: Any = None) -> Any:
        """A meta value (JSON), or `default` (`StateFileError` if it is not JSON: damaged)."""
        with _fork.gate():
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row is None:
                return default
            try:
                return json.loads(row["value"])
            except (ValueError, RecursionError) as error:
                raise self.damaged(key, f"not JSON: {error}") from None

    def damaged(self, key: str, why: str) -> StateFileError:
        """The error for a stored value that is not what the job wrote (bytes overwritten)."""
        return StateFileError(f"{self.path} is damaged: its stored {key!r} is {why}")

    def schema(self) -> tuple[str, int, str]:
        """The job's contract as stored: name, version, fingerprint."""
        found = self.get("schema")
        if (
            not isinstance(found, list)
            or len(found) != 3
            or not isinstance(found[0], str)
            or type(found[1]) is not int
            or not isinstance(found[2], str)
        ):
            raise self.damaged("schema", f"{found!r:.60}, not [name, version, fingerprint]")
        return found[0], found[1], found[2]

    def put(self, key: str, value: Any, db: sqlite3.Connection | None = None) -> None:
        """Set a meta value (inside the caller's transaction when `db` is given)."""
        with _fork.gate():
            (db or self._db).execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def overwrite(self, values: Mapping[str, Any]) -> None:
        """Set meta values in one transaction so that what they held is gone from the file:
        zeroed where SQLite frees it (`secure_delete`), and the write-ahead log copied into the
        file and emptied (a best effort while another connection reads). For what must not stay
        at rest: the credentials an older version kept in a job's base URLs."""
        with _fork.gate():
            self._db.execute("PRAGMA secure_delete = ON")
        try:
            with self.transaction() as db:
                for key, value in values.items():
                    self.put(key, value, db)
        finally:
            with _fork.gate():
                self._db.execute("PRAGMA secure_delete = OFF")
        with _fork.gate():
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # --- items ---

    def add_items(
        self, entries: Iterable[tuple[str, int, int, int, bool]], db: sqlite3.Connection
    ) -> None:
        """Index items (id, offset, length, hash, whether the id was a JSON integer); an id
        already there (as text: `7` and `"7"` are one) raises `sqlite3.IntegrityError`."""
        with _fork.gate():
            db.executemany(
                "INSERT INTO items (id, offset, length, hash, id_number) VALUES (?, ?, ?, ?, ?)",
                entries,
            )

    def in_order(self, after: int, limit: int) -> list[ItemRow]:
        """Up to `limit` items after seq `after`, whatever their state, in input order."""
        with _fork.gate():
            rows = self._db.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE seq > ? ORDER BY seq LIMIT ?",
                (after, limit),
            )
            return self._items(rows)

    def items_with_id(self, item_id: str) -> list[ItemRow]:
        """The item with this id as text (empty if none)."""
        with _fork.gate():
            rows = self._db.execute(f"SELECT {_ITEM_COLUMNS} FROM items WHERE id = ?", (item_id,))
            return self._items(rows)

    def _items(self, rows: Iterable[sqlite3.Row]) -> list[ItemRow]:
        """The items of `rows` (`StateFileError` naming the file for a damaged one)."""
        try:
            return [_item(row) for row in rows]
        except _DamagedItem as damaged:
            raise self.damaged(f"items.{damaged.column}", damaged.why) from None

    def item_count(self) -> int:
        """How many items the job has."""
        with _fork.gate():
            return int(self._db.execute("SELECT count(*) FROM items").fetchone()[0])

    def pending(self, limit: int, after: int = -1) -> list[ItemRow]:
        """Up to `limit` pending items after seq `after`, in input order."""
        with _fork.gate():
            rows = self._db.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE state = 'pending' AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (after, limit),
            )
            return self._items(rows)

    def items(self, seqs: Sequence[int]) -> dict[int, ItemRow]:
        """The rows of these items, by seq."""
        with _fork.gate():
            found: dict[int, ItemRow] = {}
            for start in range(0, len(seqs), 500):
                part = seqs[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT {_ITEM_COLUMNS} FROM items WHERE seq IN ({marks})", tuple(part)
                )
                found.update((item.seq, item) for item in self._items(rows))
            return found

    def in_submission(self, key: str, state: str = "submitted") -> list[ItemRow]:
        """The items of a submission still in `state`."""
        with _fork.gate():
            rows = self._db.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE submission = ? AND state = ? "
                "ORDER BY seq",
                (key, state),
            )
            return self._items(rows)

    def update_items(self, updates: Sequence[ItemUpdate], db: sqlite3.Connection) -> None:
        """Write what collecting decided (inside the caller's transaction)."""
        with _fork.gate():
            db.executemany(
                "UPDATE items SET state = ?, submission = CASE WHEN ? = 'pending' THEN NULL "
                "ELSE submission END, retries_used = ?, resubmits_used = ?, feedback = ?, "
                "input_tokens = ?, output_tokens = ?, requests = ?, outcome = ?, error_type = ?, "
                "error = ? WHERE seq = ?",
                [
                    (
                        update.state,
                        update.state,
                        update.retries_used,
                        update.resubmits_used,
                        json.dumps(update.feedback) if update.feedback else None,
                        update.input_tokens,
                        update.output_tokens,
                        update.requests,
                        update.outcome,
                        update.error_type,
                        update.error,
                        update.seq,
                    )
                    for update in updates
                ],
            )

    def failed(self, error_types: Sequence[str] | None = None) -> list[tuple[int, str]]:
        """The items done as failed (with one of `error_types`, if given): seq and id."""
        with _fork.gate():
            query = (
                "SELECT seq, id, error_type FROM items WHERE state = 'done' AND outcome = 'failed'"
            )
            rows = self._db.execute(query + " ORDER BY seq")
            wanted = None if error_types is None else set(error_types)
            return [
                (int(row["seq"]), str(row["id"]))
                for row in rows
                if wanted is None or row["error_type"] in wanted
            ]

    def reopen(self, seqs: Sequence[int], db: sqlite3.Connection) -> None:
        """Put done items back to pending, to run again from the start: no retries or resends
        used, no feedback, no outcome (their requests and tokens so far are kept)."""
        with _fork.gate():
            db.executemany(
                "UPDATE items SET state = 'pending', submission = NULL, retries_used = 0, "
                "resubmits_used = 0, feedback = NULL, outcome = NULL, error_type = NULL, "
                "error = NULL WHERE seq = ? AND state = 'done'",
                [(seq,) for seq in seqs],
            )

    def counts(self) -> dict[str, int]:
        """Items by state, and done items by outcome (`done:ok`, `done:failed`, ...)."""
        with _fork.gate():
            counts: dict[str, int] = {}
            for row in self._db.execute(
                "SELECT state, outcome, count(*) AS n FROM items GROUP BY state, outcome"
            ):
                counts[row["state"]] = counts.get(row["state"], 0) + row["n"]
                if row["state"] == "done":
                    counts[f"done:{row['outcome']}"] = row["n"]
            return counts

    def count_in(self, state: str) -> int:
        """How many items are in `state` (through the state index: cheap for a few)."""
        with _fork.gate():
            row = self._db.execute(
                "SELECT count(*) FROM items WHERE state = ?", (state,)
            ).fetchone()
            return int(row[0])

    def tokens(self) -> tuple[int, int]:
        """Input and output tokens over every item."""
        with _fork.gate():
            row = self._db.execute(
                "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM items"
            ).fetchone()
            return int(row[0]), int(row[1])

    def failures(self, limit: int) -> list[tuple[str | int, str, str]]:
        """Up to `limit` failed items (not cancelled ones: they are counted apart, and `retry`
        does not run them): id (with the JSON type the input gave it, as in the output), error
        type, last error."""
        number = "0" if self.get("format") == _OLDER else "id_number"  # (read-only: as it is)
        with _fork.gate():
            rows = self._db.execute(
                f"SELECT id, {number} AS id_number, error_type, error FROM items "
                "WHERE state = 'done' AND outcome = 'failed' ORDER BY seq LIMIT ?",
                (limit,),
            )
            return [
                (self._output_id(row), self._text(row, "error_type"), self._text(row, "error"))
                for row in rows
            ]

    def _output_id(self, row: sqlite3.Row) -> str | int:
        """An item's id as its output line writes it (`ItemRow.output_id`)."""
        text = self._text(row, "id")
        if not row["id_number"]:
            return text
        try:
            return int(text)
        except ValueError:
            raise self.damaged("items.id", f"{text!r}, not the integer it was indexed as") from None

    def failure_types(self) -> dict[str, int]:
        """Failed items by error type (cancelled items are not failures of any type)."""
        with _fork.gate():
            rows = self._db.execute(
                "SELECT error_type, count(*) AS n FROM items WHERE state = 'done' "
                "AND outcome = 'failed' GROUP BY error_type"
            )
            return {self._text(row, "error_type") or "?": row["n"] for row in rows}

    def _text(self, row: sqlite3.Row, column: str) -> str:
        """An item's text column as stored (`""` for none); `StateFileError` for bytes or a
        number where text was written (a damaged record)."""
        value = row[column]
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.damaged(f"items.{column}", f"{type(value).__name__}, not text")
        return value

    # --- submissions and batches ---

    def add_submission(
        self, key: str, seqs: Sequence[int], size: int, db: sqlite3.Connection
    ) -> None:
        """Record a submission about to be sent, and assign its items to it."""
        with _fork.gate():
            db.execute(
                "INSERT INTO submissions (key, state, count, bytes, started) "
                "VALUES (?, 'submitting', ?, ?, ?)",
                (key, len(seqs), size, time.time()),
            )
            db.executemany(
                "UPDATE items SET state = 'submitted', submission = ?, requests = requests + 1 "
                "WHERE seq = ? AND state = 'pending'",
                [(key, seq) for seq in seqs],
            )

    def submissions(self, state: str | None = None) -> list[SubmissionRow]:
        """Submissions (in one state, or all)."""
        with _fork.gate():
            query = "SELECT key, state, count, bytes, started, file_id FROM submissions"
            rows = (
                self._db.execute(query + " WHERE state = ? ORDER BY started", (state,))
                if state is not None
                else self._db.execute(query + " ORDER BY started")
            )
            return [SubmissionRow(**dict(row)) for row in rows]

    def submission(self, key: str) -> SubmissionRow:
        """One submission's row."""
        with _fork.gate():
            row = self._db.execute(
                "SELECT key, state, count, bytes, started, file_id FROM submissions WHERE key = ?",
                (key,),
            ).fetchone()
            if row is None:
                raise KeyError(key)
            return SubmissionRow(**dict(row))

    def set_submission(
        self,
        key: str,
        *,
        state: str | None = None,
        file_id: str | None = None,
        db: sqlite3.Connection | None = None,
    ) -> None:
        """Change a submission's state or record its uploaded file."""
        with _fork.gate():
            conn = db or self._db
            if state is not None:
                conn.execute("UPDATE submissions SET state = ? WHERE key = ?", (state, key))
            if file_id is not None:
                conn.execute("UPDATE submissions SET file_id = ? WHERE key = ?", (file_id, key))

    def add_batch(
        self,
        remote_id: str,
        submission: str,
        status: str,
        db: sqlite3.Connection,
        state: str = "open",
    ) -> None:
        """Record a backend batch of a submission (a second record of the same id is a no-op);
        `state="candidate"` for one that may be the submission's, not yet proven."""
        with _fork.gate():
            db.execute(
                "INSERT OR IGNORE INTO batches (remote_id, submission, state, status) "
                "VALUES (?, ?, ?, ?)",
                (remote_id, submission, state, status),
            )

    def batches(self, state: str | None = None) -> list[BatchRow]:
        """Backend batches (in one state, or all)."""
        with _fork.gate():
            query = "SELECT remote_id, submission, state, status FROM batches"
            rows = (
                self._db.execute(query + " WHERE state = ? ORDER BY rowid", (state,))
                if state is not None
                else self._db.execute(query + " ORDER BY rowid")
            )
            return [BatchRow(**dict(row)) for row in rows]

    def known_batch_ids(self) -> set[str]:
        """Every backend batch id this job has recorded."""
        with _fork.gate():
            return {row[0] for row in self._db.execute("SELECT remote_id FROM batches")}

    def set_batch(
        self,
        remote_id: str,
        *,
        state: str | None = None,
        status: str | None = None,
        db: sqlite3.Connection | None = None,
    ) -> None:
        """Change a batch's state or last seen status."""
        with _fork.gate():
            conn = db or self._db
            if state is not None:
                conn.execute("UPDATE batches SET state = ? WHERE remote_id = ?", (state, remote_id))
            if status is not None:
                conn.execute(
                    "UPDATE batches SET status = ? WHERE remote_id = ?", (status, remote_id)
                )


def _identify(db: sqlite3.Connection, path: Path) -> str | None:
    """Why the file is not a job's (`None` if it is): our four tables with their columns, and
    `format` (read inside the opening's transaction)."""
    with _fork.gate():
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        older_items = _COLUMNS["items"][:-1]  # `_OLDER`'s: no `id_number`
        items: tuple[str, ...] = ()
        for table, columns in _COLUMNS.items():
            found = tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
            if table == "items":
                items = found
            if found != columns and not (table == "items" and found == older_items):
                return f"{path} is not a job state file (its tables: {', '.join(sorted(tables))})"
        row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        try:
            made = json.loads(row[0]) if row is not None else None
        except ValueError:
            made = None
        if made == _OLDER and items == older_items:
            return None  # upgraded when opened for writing (`JobState._upgrade`)
        if made != FORMAT or items != _COLUMNS["items"]:
            return (
                f"{path} is not a job state file of this version ({made or 'no format'}, "
                f"not {FORMAT}): start the job again with a new state file"
            )
        return None


LAYOUT = _sqlite.Layout(
    name="job state file",
    application_id=0x53444B4A,  # "SDKJ"; files made before it was written are known by tables
    version=1,
    schema=tuple(statement for statement in _SCHEMA.split(";") if statement.strip()),
    error=StateFileError,
    identify=_identify,
    adopt_empty=False,
    synchronous="FULL",  # a committed transaction survives a power cut, not only a crash
    # (`BatchJob` opens a job to run it, and takes no `readonly`)
    reading="`sdk.batch.job_summary({path!r})` (`sdk batch status`) reads it without writing",
)
