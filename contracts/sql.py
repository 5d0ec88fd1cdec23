"""The SQL reference grammar: SELECT-only queries over a known table schema, for SQLite.

A question in natural language becomes a query under a grammar that admits only `SELECT`, so
`DROP TABLE` is not in the language: a model decoding under it cannot emit one, whatever the
prompt says. The reference texts' naive grammar (`[a-z_]+` for tables and columns) admits
`SELECT from FROM select;`, a syntax error in SQLite: conformance to a grammar is not validity
in a dialect. This grammar closes that gap:

- identifiers are exactly the schema's tables and columns, double-quoted as SQLite requires
  (`"from"` is a column, never a keyword), and each table's query names only its own columns;
- `WHERE` with comparisons, `IS [NOT] NULL`, `LIKE` on text, joined by `AND`/`OR`; `ORDER BY`
  with `ASC`/`DESC`; `LIMIT`; literals typed by the column's SQLite affinity (integers for
  INTEGER, numbers for REAL, quoted strings for TEXT, any of them for a column with none);
- its check prepares the query (`EXPLAIN`) in an in-memory database built from the schema, so a
  sentence that SQLite would not accept is a `CheckFailed`, not a surprise at execution.

**The grammar is not an authorization layer.** Masking `DROP` says nothing about which rows
(or which tables of the schema) this caller may read. Execute with `run_query`, which opens the
database read-only (`mode=ro`, `query_only`, and an authorizer that allows reads alone), and
give it only the tables the caller may see; row-level rules belong to the application.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sdk import Grammar
from sdk.grammar import GrammarCheck

__all__ = [
    "DEMO_TABLES",
    "SELECT_QUERY",
    "ColumnType",
    "Table",
    "affinity",
    "connect_read_only",
    "create_demo_database",
    "prepares_in",
    "quote_identifier",
    "run_query",
    "schema_ddl",
    "sql_grammar",
    "sql_prompt",
    "tables_from_sqlite",
]

ColumnType = Literal["integer", "real", "text", "any"]

_DECLARED: dict[ColumnType, str] = {"integer": "INTEGER", "real": "REAL", "text": "TEXT", "any": ""}

# Terminals, shared by every table. Bounded digit counts keep integers inside SQLite's 64 bits.
_TERMINALS = r"""
INTEGER: /-?[0-9]{1,18}/
NUMBER: /-?[0-9]{1,15}(\.[0-9]{1,15})?/
TEXT: /'([^'\x00-\x1f\x7f]|'')*'/
COUNT: /[0-9]{1,6}/
"""

_LITERAL: dict[ColumnType, str] = {
    "integer": "INTEGER",
    "real": "NUMBER",
    "text": "TEXT",
    "any": "(NUMBER | TEXT)",
}


@dataclass(frozen=True)
class Table:
    """A table's name and its columns (name -> SQLite affinity), in declaration order."""

    name: str
    columns: Mapping[str, ColumnType]

    def __post_init__(self) -> None:
        if not self.name or not self.columns:
            raise ValueError("a table has a name and at least one column")
        for column, kind in self.columns.items():
            if not column:
                raise ValueError(f"table {self.name!r} has a column with an empty name")
            if kind not in _DECLARED:
                raise ValueError(
                    f"column {self.name}.{column}: type {kind!r} is not one of {sorted(_DECLARED)}"
                )
        object.__setattr__(self, "columns", dict(self.columns))


def quote_identifier(name: str) -> str:
    """An SQLite identifier, double-quoted (`"` inside doubled): never read as a keyword."""
    if "\x00" in name:
        raise ValueError(f"an SQLite identifier cannot contain NUL: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def affinity(declared: str) -> ColumnType:
    """The column type of a declared SQLite type, by SQLite's affinity rules (section 3.1)."""
    upper = declared.upper()
    if "INT" in upper:
        return "integer"
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return "real"
    return "any"  # BLOB, none, or NUMERIC: a literal of any kind is meaningful there


def _lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def sql_grammar(tables: Sequence[Table], *, name: str = "SelectQuery", version: int = 1) -> Grammar:
    """The SELECT-only grammar of `tables`, with the SQLite prepare check."""
    tables = list(tables)
    if not tables:
        raise ValueError("a SQL grammar needs at least one table")
    names = [table.name for table in tables]
    if len(set(names)) != len(names):
        raise ValueError(f"two tables share a name: {names}")
    lines = ["start: " + " | ".join(f"select_{index}" for index in range(len(tables)))]
    for index, table in enumerate(tables):
        lines.extend(_table_rules(index, table))
    lines += [
        'bool_op: " AND " | " OR "',
        'cmp: " = " | " != " | " < " | " <= " | " > " | " >= "',
        'direction: " ASC" | " DESC"',
        'limit: " LIMIT " COUNT',
    ]
    return Grammar(
        name,
        lark="\n".join(lines) + "\n" + _TERMINALS,
        version=version,
        checks=(prepares_in(tables),),
        description="One SQLite SELECT query over the tables "
        + ", ".join(quote_identifier(table.name) for table in tables),
    )


def _table_rules(index: int, table: Table) -> list[str]:
    columns = list(table.columns.items())
    quoted = {column: _lark_string(quote_identifier(column)) for column, _ in columns}
    conditions = []
    for column, kind in columns:
        conditions.append(f"{quoted[column]} cmp {_LITERAL[kind]}")
        if kind in ("text", "any"):
            conditions.append(f'{quoted[column]} " LIKE " TEXT')
    conditions += [f'col_{index} " IS NULL"', f'col_{index} " IS NOT NULL"']
    return [
        f'select_{index}: "SELECT " columns_{index} " FROM " '
        f"{_lark_string(quote_identifier(table.name))} "
        f'where_{index}? order_{index}? limit? ";"?',
        f'columns_{index}: "*" | col_{index} (", " col_{index})*',
        f"col_{index}: " + " | ".join(quoted[column] for column, _ in columns),
        f'where_{index}: " WHERE " cond_{index} (bool_op cond_{index})*',
        f"cond_{index}: " + " | ".join(conditions),
        f'order_{index}: " ORDER BY " col_{index} direction? (", " col_{index} direction?)*',
    ]


def schema_ddl(tables: Iterable[Table]) -> list[str]:
    """`CREATE TABLE` statements that rebuild the schema (types by affinity, no rows)."""
    statements = []
    for table in tables:
        columns = ", ".join(
            f"{quote_identifier(column)} {_DECLARED[kind]}".rstrip()
            for column, kind in table.columns.items()
        )
        statements.append(f"CREATE TABLE {quote_identifier(table.name)} ({columns})")
    return statements


def prepares_in(tables: Sequence[Table]) -> GrammarCheck:
    """The check that SQLite prepares the query (`EXPLAIN`) against the schema of `tables`.

    In a fresh in-memory database built from the schema: nothing of the real database is
    touched, and the judge is the dialect's own parser, not an imitation of it. One trap of
    SQLite's is closed on top: a double-quoted name that is no column is silently read as a
    string literal (`SELECT "nickname"` prepares, and returns the word), so the check also
    requires every double-quoted name of the query to be a table or column SQLite read.
    """
    ddl = schema_ddl(tables)

    def prepares_in_sqlite(text: str, context: Mapping[str, Any]) -> None:
        resolved: set[str] = set()

        def record_reads(action: int, table: str | None, column: str | None, *_: object) -> int:
            if action == sqlite3.SQLITE_READ:
                resolved.update(name for name in (table, column) if name is not None)
            return sqlite3.SQLITE_OK

        with closing(sqlite3.connect(":memory:")) as database:
            for statement in ddl:
                database.execute(statement)
            database.set_authorizer(record_reads)
            try:
                database.execute("EXPLAIN " + text).fetchall()
            except (sqlite3.Error, ValueError) as error:
                raise ValueError(f"SQLite cannot prepare the query: {error}") from error
        strings = sorted(_quoted_names(text) - resolved)
        if strings:
            raise ValueError(
                "SQLite reads "
                + ", ".join(quote_identifier(name) for name in strings)
                + " as a string, not as a column of the schema"
            )

    return prepares_in_sqlite


_QUOTED = re.compile(r"'(?:[^']|'')*'|\"((?:[^\"]|\"\")*)\"")


def _quoted_names(query: str) -> set[str]:
    """The double-quoted names of a query (single-quoted strings skipped)."""
    return {
        match.group(1).replace('""', '"')
        for match in _QUOTED.finditer(query)
        if match.group(1) is not None
    }


# --- the database: read-only access --------------------------------------------------------

_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION})


def _reads_only(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def connect_read_only(path: str | Path) -> sqlite3.Connection:
    """A connection that cannot write: `mode=ro` URI, `query_only`, a reads-only authorizer.

    A missing file is an error (`mode=ro` never creates one).
    """
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    connection = sqlite3.connect(uri, uri=True)
    connection.execute("PRAGMA query_only = ON")
    connection.set_authorizer(_reads_only)
    return connection


def tables_from_sqlite(path: str | Path) -> list[Table]:
    """The tables of a SQLite database file and their columns' affinities (read-only)."""
    with closing(connect_read_only(path)) as database:
        database.set_authorizer(None)  # reading the schema itself is a PRAGMA
        names = [
            row[0]
            for row in database.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
            )
        ]
        tables = []
        for name in names:
            info = database.execute(f"PRAGMA table_info({quote_identifier(name)})").fetchall()
            tables.append(Table(name, {row[1]: affinity(row[2] or "") for row in info}))
    return tables


def run_query(path: str | Path, query: str, *, max_rows: int = 1000) -> list[tuple[Any, ...]]:
    """Execute a (grammar-checked) query on a read-only connection; at most `max_rows` rows."""
    with closing(connect_read_only(path)) as database:
        return database.execute(query).fetchmany(max_rows)


# --- the demo's database and prompt ----------------------------------------------------------

DEMO_TABLES: tuple[Table, ...] = (
    Table("customers", {"id": "integer", "name": "text", "country": "text"}),
    Table(
        "orders",
        {
            "id": "integer",
            "customer_id": "integer",
            "total": "real",
            "status": "text",
            "placed_on": "text",
        },
    ),
)
"""A small shop: the schema of `create_demo_database` and of `SELECT_QUERY`."""

SELECT_QUERY = sql_grammar(DEMO_TABLES, name="SelectQuery", version=1)
"""The reference grammar contract, over `DEMO_TABLES` (locked in `contracts/schemas/`)."""

_DEMO_ROWS: dict[str, list[tuple[Any, ...]]] = {
    "customers": [(1, "Ada", "UK"), (2, "Grace", "US"), (3, "Linus", "FI"), (4, "Margaret", "US")],
    "orders": [
        (1, 1, 120.5, "shipped", "2026-01-04"),
        (2, 2, 35.0, "pending", "2026-01-09"),
        (3, 2, 410.25, "shipped", "2026-02-11"),
        (4, 3, 15.75, "cancelled", "2026-02-14"),
        (5, 4, 980.0, "shipped", "2026-03-01"),
    ],
}


def create_demo_database(path: str | Path) -> Path:
    """Write the demo's small shop database to `path` (replacing it) and return the path."""
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    temporary.unlink(missing_ok=True)
    with closing(sqlite3.connect(temporary)) as database:
        for statement in schema_ddl(DEMO_TABLES):
            database.execute(statement)
        for table in DEMO_TABLES:
            marks = ", ".join("?" * len(table.columns))
            database.executemany(
                f"INSERT INTO {quote_identifier(table.name)} VALUES ({marks})",
                _DEMO_ROWS[table.name],
            )
        database.commit()
    temporary.replace(target)  # atomic: a reader never sees half a database
    return target


def sql_prompt(question: str, tables: Sequence[Table]) -> str:
    """The prompt for a question about `tables`: the schema, the rules, the question."""
    schema = "\n".join(
        f"- {quote_identifier(table.name)}: "
        + ", ".join(
            f"{quote_identifier(c)} {_DECLARED[k] or 'ANY'}" for c, k in table.columns.items()
        )
        for table in tables
    )
    return (
        "Write one SQLite SELECT query over one table that answers the question. "
        "Quote every table and column name with double quotes. Answer with the query alone.\n"
        f"Tables:\n{schema}\n"
        f"Question: {question}"
    )
