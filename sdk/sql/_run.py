"""Running a grammar-checked query: read-only, and within bounds of time, memory and rows.

The grammar keeps a model to SELECT; this keeps the query's cost to what the caller allows.
A connection from `connect_read_only` cannot write (`mode=ro`, `query_only`) and its
authorizer allows reading alone: a SELECT, a read of a column, and the functions the grammar
can write (`count`, `sum`, `avg`, `min`, `max`, and `like` behind the LIKE operator), nothing
else (no `fts3_tokenizer`, `zeroblob`, `randomblob`, `load_extension`; no ATTACH, PRAGMA,
recursive CTE or write). `run_query` adds the bounds:

- time: a progress handler interrupts the query past `timeout` seconds (`QueryTimeout`);
- memory: no string or blob longer than `max_value_bytes` (`SQLITE_LIMIT_LENGTH`), a page
  cache of `cache_kib` per database, temporary tables and sorts spilled to disk;
- rows: the query runs as `SELECT * FROM (query) LIMIT max_rows`, which SQLite flattens where
  it can, so an `ORDER BY` keeps only `max_rows` rows while it sorts instead of sorting the
  whole table first (an aggregate is sorted after grouping, over its groups);
- the whole result: rows are read one at a time and their values' sizes summed (text in
  UTF-8 bytes, blobs in bytes, a number as 8); past `max_result_bytes` the reading stops
  (`ResultTooLarge`), so at most the rows within the bound and the one row that passes it are
  ever held (that row: at most its columns times `max_value_bytes`).

None of this says which rows a caller may see: that is the application's rule. Every call into
SQLite here is inside the calling thread's fork gate (`sdk._fork.gate`: no fork while inside).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any
from typing import TypedDict
from typing import Unpack

from sdk import _fork
from sdk._values.declared import check_keywords
from sdk.sql._schema import Table
from sdk.sql._schema import tables_from_connection

__all__ = [
    "ALLOWED_FUNCTIONS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TIMEOUT",
    "QueryBounds",
    "QueryTimeout",
    "ResultTooLarge",
    "bounded_statement",
    "connect_read_only",
    "run_query",
    "tables_from_sqlite",
]

ALLOWED_FUNCTIONS = frozenset({"count", "sum", "avg", "min", "max", "like"})
"""The SQL functions a query may call: what the grammar can write, and nothing else."""
DEFAULT_TIMEOUT = 5.0
"""Seconds a query may run before `run_query` interrupts it."""
DEFAULT_MAX_RESULT_BYTES = 8_000_000
"""The size `run_query`'s whole result may reach: its values summed (text in UTF-8 bytes)."""
_PROGRESS_STEPS = 1000  # virtual machine steps between two looks at the clock
_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ})


class QueryTimeout(sqlite3.OperationalError):
    """The query ran past `run_query`'s time bound and was interrupted."""


class ResultTooLarge(sqlite3.DataError):
    """The query's result passed `run_query`'s size bound: `.max_result_bytes` is the bound,
    `.rows` how many whole rows fitted under it."""

    def __init__(self, max_result_bytes: int, rows: int) -> None:
        super().__init__(
            f"the query's result is larger than its size bound, max_result_bytes="
            f"{max_result_bytes} (passed at row {rows + 1}); ask for fewer rows (max_rows) or "
            "fewer and smaller columns, or raise the bound"
        )
        self.max_result_bytes = max_result_bytes
        self.rows = rows


def _reads_only(action: int, first: str | None, second: str | None, *_: object) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (second or "").lower() in ALLOWED_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def connect_read_only(path: str | Path) -> sqlite3.Connection:
    """A connection that cannot write: `mode=ro` URI, `query_only`, a reads-only authorizer
    that allows the grammar's functions alone. A missing file is an error (`mode=ro` never
    creates one)."""
    with _fork.gate():
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        connection = sqlite3.connect(uri, uri=True)
        connection.execute("PRAGMA query_only = ON")
        connection.set_authorizer(_reads_only)
        return connection


def tables_from_sqlite(path: str | Path) -> list[Table]:
    """The tables of a SQLite database file: columns, affinities, foreign keys (read-only)."""
    with _fork.gate(), closing(connect_read_only(path)) as database:
        database.set_authorizer(None)  # reading the schema itself takes PRAGMAs
        return tables_from_connection(database)


class QueryBounds(TypedDict, total=False):
    """The bounds a query runs within: keywords of `run_query`, each optional."""

    max_rows: int
    """At most this many rows (default 1000)."""
    timeout: float
    """Seconds before the query is interrupted (`QueryTimeout`; default `DEFAULT_TIMEOUT`)."""
    max_value_bytes: int
    """No value longer (`sqlite3.DataError`, "string or blob too big"; default 1,000,000)."""
    cache_kib: int
    """The page cache, in KiB (default 8192)."""
    max_result_bytes: int
    """No result whose values add up to more (`ResultTooLarge`; default
    `DEFAULT_MAX_RESULT_BYTES`)."""


def run_query(path: str | Path, query: str, **bounds: Unpack[QueryBounds]) -> list[tuple[Any, ...]]:
    """Execute a (grammar-checked) query on a read-only connection, within `bounds`
    (`QueryBounds`: rows, time, value and result sizes, page cache).

    A refused action (a write, a function outside `ALLOWED_FUNCTIONS`) is a
    `sqlite3.DatabaseError` from the authorizer. The connection is closed either way.
    """
    check_keywords(bounds, QueryBounds, "run_query()")
    max_rows = bounds.get("max_rows", 1000)
    max_result_bytes = bounds.get("max_result_bytes", DEFAULT_MAX_RESULT_BYTES)
    max_value_bytes = bounds.get("max_value_bytes", 1_000_000)
    cache_kib = bounds.get("cache_kib", 8192)
    timeout = bounds.get("timeout", DEFAULT_TIMEOUT)
    for name, bound in (
        ("max_rows", max_rows),
        ("max_result_bytes", max_result_bytes),
        ("max_value_bytes", max_value_bytes),
        ("cache_kib", cache_kib),
    ):
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise ValueError(f"{name} is a positive integer, not {bound!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout is a positive number of seconds, not {timeout!r}")
    with _fork.gate(), closing(connect_read_only(path)) as database:
        # (SQLite's own ceilings: a value's length is a C int, a row count a 64-bit integer)
        _bound(database, max_value_bytes=min(max_value_bytes, 2**31 - 1), cache_kib=cache_kib)
        deadline = time.monotonic() + timeout
        database.set_progress_handler(_past(deadline), _PROGRESS_STEPS)
        try:
            cursor = database.execute(bounded_statement(query), (min(max_rows, 2**63 - 1),))
            return _fetched(cursor, max_rows, max_result_bytes)
        except sqlite3.OperationalError as error:
            if "interrupted" in str(error) and time.monotonic() >= deadline:
                raise QueryTimeout(
                    f"the query ran past its time bound ({timeout} s) and was interrupted"
                ) from error
            raise


def _fetched(cursor: sqlite3.Cursor, max_rows: int, max_bytes: int) -> list[tuple[Any, ...]]:
    """The cursor's rows (at most `max_rows`), read one at a time while their size stays
    within `max_bytes` (`ResultTooLarge` past it: the rest is never read)."""
    rows: list[tuple[Any, ...]] = []
    size = 0
    # One row at a time: a batch (`fetchmany`) makes every row of it Python values before the
    # first is counted, so 64 rows of values near `max_value_bytes` were held past the bound.
    for row in cursor:
        size += sum(map(_value_bytes, row))
        if size > max_bytes:
            raise ResultTooLarge(max_bytes, len(rows))
        rows.append(row)
        if len(rows) >= max_rows:
            break
    return rows


def _value_bytes(value: Any) -> int:
    """A value's size as SQLite holds it: UTF-8 bytes of text, bytes of a blob, 8 otherwise."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes):
        return len(value)
    return 8


def bounded_statement(query: str) -> str:
    """The statement `run_query` executes: the query as a subquery with a row bound (`?`),
    which SQLite's flattener turns into a sort that keeps only that many rows. Newlines
    around the query, so that a trailing `--` comment cannot swallow the bound."""
    body = query.strip().rstrip(";").rstrip()
    return f"SELECT * FROM (\n{body}\n) LIMIT ?"


def _bound(database: sqlite3.Connection, *, max_value_bytes: int, cache_kib: int) -> None:
    database.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
    database.set_authorizer(None)  # the bounds are PRAGMAs, set before the query's authorizer
    database.execute(f"PRAGMA cache_size = -{int(cache_kib)}")
    database.execute(f"PRAGMA temp.cache_size = -{int(cache_kib)}")
    database.execute("PRAGMA temp_store = FILE")
    database.set_authorizer(_reads_only)


def _past(deadline: float) -> Callable[[], int]:
    def handler() -> int:
        return 1 if time.monotonic() >= deadline else 0

    return handler
