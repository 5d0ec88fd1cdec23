"""Table schemas for the SQL grammar: tables, their columns' affinities, their foreign keys."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Literal

from sdk import _fork

__all__ = [
    "ColumnType",
    "ForeignKey",
    "Table",
    "affinity",
    "declared_type",
    "quote_identifier",
    "schema_ddl",
    "tables_from_connection",
]

ColumnType = Literal["integer", "real", "text", "any"]

_DECLARED: dict[ColumnType, str] = {"integer": "INTEGER", "real": "REAL", "text": "TEXT", "any": ""}


@dataclass(frozen=True)
class ForeignKey:
    """`column` of a table holds values of `references` in `table`: a join the grammar offers."""

    column: str
    table: str
    references: str


@dataclass(frozen=True)
class Table:
    """A table's name, its columns (name -> SQLite affinity) in declaration order, and the
    single-column foreign keys it declares."""

    name: str
    columns: Mapping[str, ColumnType]
    foreign_keys: tuple[ForeignKey, ...] = field(default=())

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
        object.__setattr__(self, "foreign_keys", tuple(self.foreign_keys))
        for key in self.foreign_keys:
            if key.column not in self.columns:
                raise ValueError(
                    f"table {self.name!r}: foreign key column {key.column!r} is not a column"
                )


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


def declared_type(kind: ColumnType) -> str:
    """The SQLite type name a column of this affinity is declared with ("" for any)."""
    return _DECLARED[kind]


def schema_ddl(tables: Iterable[Table]) -> list[str]:
    """`CREATE TABLE` statements that rebuild the schema (types by affinity, foreign keys,
    no rows)."""
    statements = []
    for table in tables:
        parts = [
            f"{quote_identifier(column)} {_DECLARED[kind]}".rstrip()
            for column, kind in table.columns.items()
        ]
        parts += [
            f"FOREIGN KEY ({quote_identifier(key.column)}) REFERENCES "
            f"{quote_identifier(key.table)} ({quote_identifier(key.references)})"
            for key in table.foreign_keys
        ]
        statements.append(f"CREATE TABLE {quote_identifier(table.name)} ({', '.join(parts)})")
    return statements


def tables_from_connection(database: sqlite3.Connection) -> list[Table]:
    """The tables of an open database, by name: columns, affinities, single-column foreign
    keys (a key without a named column refers to the primary key; composite keys are left
    out, as the grammar joins on one column)."""
    with _fork.gate():
        names = [
            row[0]
            for row in database.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
            )
        ]
        infos = {
            name: database.execute(f"PRAGMA table_info({quote_identifier(name)})").fetchall()
            for name in names
        }
        tables = []
        for name in names:
            columns = {row[1]: affinity(row[2] or "") for row in infos[name]}
            keys = _foreign_keys(database, name, infos)
            tables.append(Table(name, columns, tuple(keys)))
        return tables


def _foreign_keys(
    database: sqlite3.Connection, name: str, infos: Mapping[str, list[tuple[object, ...]]]
) -> list[ForeignKey]:
    with _fork.gate():
        rows = database.execute(f"PRAGMA foreign_key_list({quote_identifier(name)})").fetchall()
        widths: dict[object, int] = {}
        for row in rows:
            widths[row[0]] = widths.get(row[0], 0) + 1
        keys = []
        for key_id, _, target, column, referenced, *_ in rows:
            if widths[key_id] != 1 or target not in infos:
                continue
            if referenced is None:  # REFERENCES t without a column: t's primary key
                primary = [row[1] for row in infos[target] if row[5]]
                if len(primary) != 1:
                    continue
                referenced = primary[0]
            keys.append(ForeignKey(str(column), str(target), str(referenced)))
        return keys
