"""A job's durable state: one SQLite file (stdlib `sqlite3`, WAL, one transaction per step).

Tables:

- `meta`: the job's settings and progress marks (contract fingerprint, input identity, the
  committed length of the output file, ...), JSON values.
- `items`: one row per input line: id, where the line is, its state (`pending` -> `submitted`
  -> `done`), the submission it is in, its retry counts and pending feedback, its tokens, and
  once done its outcome and last error.
- `submissions`: one row per group of items sent together, written *before* the backend is
  asked (state `submitting`), so that a crash between the backend's answer and our record of it
  leaves a trace to look the batch up by.
- `batches`: the backend's batches of a submission (`open` -> `ended` -> `collected`).

Every change of state is one transaction; the output file's committed length moves in the same
transaction as the items whose lines were appended (see `sdk.batch._output`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk.batch._errors import BatchError

__all__ = ["BatchRow", "ItemRow", "JobState", "SubmissionRow"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
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
    error TEXT
);
CREATE INDEX IF NOT EXISTS items_by_state ON items (state, seq);
CREATE INDEX IF NOT EXISTS items_by_submission ON items (submission);
CREATE TABLE IF NOT EXISTS submissions (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    count INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    started REAL NOT NULL,
    file_id TEXT
);
CREATE TABLE IF NOT EXISTS batches (
    remote_id TEXT PRIMARY KEY,
    submission TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT
);
"""


@dataclass(frozen=True, slots=True)
class ItemRow:
    """An item's row."""

    seq: int
    id: str
    offset: int
    length: int
    state: str
    submission: str | None
    requests: int
    retries_used: int
    resubmits_used: int
    feedback: list[tuple[str, str]]
    input_tokens: int
    output_tokens: int


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
    "seq, id, offset, length, state, submission, requests, retries_used, resubmits_used, "
    "feedback, input_tokens, output_tokens"
)


def _item(row: sqlite3.Row) -> ItemRow:
    feedback = json.loads(row["feedback"]) if row["feedback"] else []
    return ItemRow(
        seq=row["seq"],
        id=row["id"],
        offset=row["offset"],
        length=row["length"],
        state=row["state"],
        submission=row["submission"],
        requests=row["requests"],
        retries_used=row["retries_used"],
        resubmits_used=row["resubmits_used"],
        feedback=[(str(role), str(content)) for role, content in feedback],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
    )


class JobState:
    """The state file of one job (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: transactions are opened explicitly (`transaction()`), so none is
        # ever left open by an implicit BEGIN.
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed transaction survives a power cut, not only a crashed process.
            self._db.execute("PRAGMA synchronous=FULL")
            with self.transaction():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise BatchError(f"{self.path} is not a job state file: {error}") from error

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed whole at the end of the block, or rolled back."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # --- meta ---

    def get(self, key: str, default: Any = None) -> Any:
        """A meta value (JSON), or `default`."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row["value"]) if row is not None else default

    def put(self, key: str, value: Any, db: sqlite3.Connection | None = None) -> None:
        """Set a meta value (inside the caller's transaction when `db` is given)."""
        (db or self._db).execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value)),
        )

    # --- items ---

    def add_items(self, entries: Iterable[tuple[str, int, int]], db: sqlite3.Connection) -> None:
        """Index items (id, offset, length); a duplicate id raises `sqlite3.IntegrityError`."""
        db.executemany("INSERT INTO items (id, offset, length) VALUES (?, ?, ?)", entries)

    def last_indexed_end(self) -> int:
        """The byte just past the last indexed line (where indexing resumes)."""
        row = self._db.execute(
            "SELECT offset + length AS end FROM items ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return int(row["end"]) if row is not None else 0

    def items_with_id(self, item_id: str) -> list[int]:
        """The seq of the item with this id (empty if none)."""
        rows = self._db.execute("SELECT seq FROM items WHERE id = ?", (item_id,))
        return [int(row[0]) for row in rows]

    def item_count(self) -> int:
        """How many items the job has."""
        return int(self._db.execute("SELECT count(*) FROM items").fetchone()[0])

    def pending(self, limit: int, after: int = -1) -> list[ItemRow]:
        """Up to `limit` pending items after seq `after`, in input order."""
        rows = self._db.execute(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE state = 'pending' AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (after, limit),
        )
        return [_item(row) for row in rows]

    def items(self, seqs: Sequence[int]) -> dict[int, ItemRow]:
        """The rows of these items, by seq."""
        found: dict[int, ItemRow] = {}
        for start in range(0, len(seqs), 500):
            part = seqs[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE seq IN ({marks})", tuple(part)
            )
            found.update((row["seq"], _item(row)) for row in rows)
        return found

    def in_submission(self, key: str, state: str = "submitted") -> list[ItemRow]:
        """The items of a submission still in `state`."""
        rows = self._db.execute(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE submission = ? AND state = ? ORDER BY seq",
            (key, state),
        )
        return [_item(row) for row in rows]

    def update_items(self, updates: Sequence[ItemUpdate], db: sqlite3.Connection) -> None:
        """Write what collecting decided (inside the caller's transaction)."""
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

    def counts(self) -> dict[str, int]:
        """Items by state, and done items by outcome (`done:ok`, `done:failed`, ...)."""
        counts: dict[str, int] = {}
        for row in self._db.execute(
            "SELECT state, outcome, count(*) AS n FROM items GROUP BY state, outcome"
        ):
            counts[row["state"]] = counts.get(row["state"], 0) + row["n"]
            if row["state"] == "done":
                counts[f"done:{row['outcome']}"] = row["n"]
        return counts

    def tokens(self) -> tuple[int, int]:
        """Input and output tokens over every item."""
        row = self._db.execute(
            "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM items"
        ).fetchone()
        return int(row[0]), int(row[1])

    def failures(self, limit: int) -> list[tuple[str, str, str]]:
        """Up to `limit` failed items: id, error type, last error."""
        rows = self._db.execute(
            "SELECT id, error_type, error FROM items WHERE state = 'done' AND outcome != 'ok' "
            "ORDER BY seq LIMIT ?",
            (limit,),
        )
        return [(row["id"], row["error_type"] or "", row["error"] or "") for row in rows]

    def failure_types(self) -> dict[str, int]:
        """Failed items by error type."""
        rows = self._db.execute(
            "SELECT error_type, count(*) AS n FROM items WHERE state = 'done' "
            "AND outcome != 'ok' GROUP BY error_type"
        )
        return {row["error_type"] or "?": row["n"] for row in rows}

    # --- submissions and batches ---

    def add_submission(
        self, key: str, seqs: Sequence[int], size: int, db: sqlite3.Connection
    ) -> None:
        """Record a submission about to be sent, and assign its items to it."""
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
        query = "SELECT key, state, count, bytes, started, file_id FROM submissions"
        rows = (
            self._db.execute(query + " WHERE state = ? ORDER BY started", (state,))
            if state is not None
            else self._db.execute(query + " ORDER BY started")
        )
        return [SubmissionRow(**dict(row)) for row in rows]

    def submission(self, key: str) -> SubmissionRow:
        """One submission's row."""
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
        conn = db or self._db
        if state is not None:
            conn.execute("UPDATE submissions SET state = ? WHERE key = ?", (state, key))
        if file_id is not None:
            conn.execute("UPDATE submissions SET file_id = ? WHERE key = ?", (file_id, key))

    def add_batch(
        self, remote_id: str, submission: str, status: str, db: sqlite3.Connection
    ) -> None:
        """Record a backend batch of a submission (a second record of the same id is a no-op)."""
        db.execute(
            "INSERT OR IGNORE INTO batches (remote_id, submission, state, status) "
            "VALUES (?, ?, 'open', ?)",
            (remote_id, submission, status),
        )

    def batches(self, state: str | None = None) -> list[BatchRow]:
        """Backend batches (in one state, or all)."""
        query = "SELECT remote_id, submission, state, status FROM batches"
        rows = (
            self._db.execute(query + " WHERE state = ? ORDER BY rowid", (state,))
            if state is not None
            else self._db.execute(query + " ORDER BY rowid")
        )
        return [BatchRow(**dict(row)) for row in rows]

    def known_batch_ids(self) -> set[str]:
        """Every backend batch id this job has recorded."""
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
        conn = db or self._db
        if state is not None:
            conn.execute("UPDATE batches SET state = ? WHERE remote_id = ?", (state, remote_id))
        if status is not None:
            conn.execute("UPDATE batches SET status = ? WHERE remote_id = ?", (status, remote_id))
