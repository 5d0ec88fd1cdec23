"""The SELECT-only grammar of a table schema, its SQLite check, and the prompt that goes with it.

The grammar's sentences are the questions people ask of a database, and nothing else:

- `SELECT` columns, `*`, or aggregates (`COUNT(*)`, `COUNT(col)`, `COUNT(DISTINCT col)`,
  `SUM`/`AVG` of numeric columns, `MIN`/`MAX`), `FROM` a table, `JOIN`ed to others along the
  foreign keys the schema declares (`ON a.fk = b.key`, up to `max_joins` joins);
- `WHERE` comparisons with literals typed by the column's SQLite affinity, `LIKE` on text,
  `IS [NOT] NULL`, joined by `AND`/`OR`; `GROUP BY` columns with `HAVING` on aggregates;
  `ORDER BY` columns or aggregates, `ASC`/`DESC`; `LIMIT`;
- keywords in upper or lower case; every identifier exactly the schema's, double-quoted as
  SQLite requires (`"from"` is a column, never a keyword), qualified (`"orders"."id"`) in a
  query that joins, where a bare name could be ambiguous;
- no subquery, no `UNION`, no comment, no function but those: no sentence writes, attaches,
  runs a PRAGMA or loads an extension, whatever the schema's names are.

Its check prepares every query (`EXPLAIN`) in an in-memory database built from the schema, so
a sentence SQLite would not accept is a `CheckFailed`, not a surprise at execution.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk import _fork
from sdk.grammar import Grammar
from sdk.grammar import GrammarCheck
from sdk.grammar import lark_literal
from sdk.sql._run import tables_from_sqlite
from sdk.sql._schema import ColumnType
from sdk.sql._schema import Table
from sdk.sql._schema import declared_type
from sdk.sql._schema import quote_identifier
from sdk.sql._schema import schema_ddl

__all__ = ["MAX_JOIN_PATHS", "grammar_from_sqlite", "prepares_in", "sql_grammar", "sql_prompt"]

MAX_JOIN_PATHS = 256
"""`FROM` clauses (a table and the tables joined to it) one grammar may hold."""

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


# Keywords, each a rule of its upper- and lower-case spellings (named rules, so that Lark does
# not multiply the alternatives of every rule that uses several of them).
_KEYWORDS = {
    "kw_select": "SELECT ", "kw_from": " FROM ", "kw_join": " JOIN ", "kw_on": " ON ",
    "kw_where": " WHERE ", "kw_and": " AND ", "kw_or": " OR ", "kw_like": " LIKE ",
    "kw_is_null": " IS NULL", "kw_is_not_null": " IS NOT NULL", "kw_group_by": " GROUP BY ",
    "kw_having": " HAVING ", "kw_order_by": " ORDER BY ", "kw_asc": " ASC", "kw_desc": " DESC",
    "kw_limit": " LIMIT ", "kw_count": "COUNT(", "kw_distinct": "DISTINCT ", "kw_sum": "SUM(",
    "kw_avg": "AVG(", "kw_min": "MIN(", "kw_max": "MAX(",
}  # fmt: skip


@dataclass(frozen=True)
class _Join:
    table: Table
    on: tuple[tuple[str, str], ...]
    """Each way to join it: (column reference of an earlier table, of this one)."""


def sql_grammar(
    tables: Sequence[Table], *, name: str = "SelectQuery", version: int = 1, max_joins: int = 2
) -> Grammar:
    """The SELECT-only grammar of `tables`, with the SQLite prepare check."""
    tables = list(tables)
    if not tables:
        raise ValueError("a SQL grammar needs at least one table")
    names = [table.name for table in tables]
    if len(set(names)) != len(names):
        raise ValueError(f"two tables share a name: {names}")
    by_name = {table.name: table for table in tables}
    for table in tables:
        for key in table.foreign_keys:
            target = by_name.get(key.table)
            if target is None or key.references not in target.columns:
                raise ValueError(
                    f"table {table.name!r}: foreign key {key.column!r} refers to "
                    f"{key.table}.{key.references}, which is not in the schema"
                )
    sources = list(_sources(tables, max_joins))
    lines = ["start: " + " | ".join(f"select_{index}" for index in range(len(sources)))]
    for index, source in enumerate(sources):
        lines.extend(_source_rules(index, source))
    lines += [
        "bool_op: kw_and | kw_or",
        'cmp: " = " | " != " | " < " | " <= " | " > " | " >= "',
        "direction: kw_asc | kw_desc",
        "after_order: kw_limit COUNT end | end",
        'end: ";"?',
    ]
    lines += [
        f"{rule}: {lark_literal(word)} | {lark_literal(word.lower())}"
        for rule, word in _KEYWORDS.items()
    ]
    return Grammar(
        name,
        lark="\n".join(lines) + "\n" + _TERMINALS,
        version=version,
        checks=(prepares_in(tables),),
        description="One SQLite SELECT query over the tables "
        + ", ".join(quote_identifier(table.name) for table in tables),
    )


def grammar_from_sqlite(
    path: str | Path, *, name: str = "SelectQuery", version: int = 1, max_joins: int = 2
) -> Grammar:
    """`sql_grammar` of the tables of a SQLite database file (read read-only)."""
    return sql_grammar(tables_from_sqlite(path), name=name, version=version, max_joins=max_joins)


def _sources(tables: list[Table], max_joins: int) -> Iterator[list[_Join]]:
    """Every `FROM` clause: a table alone, then chains that add a table joined along a
    foreign key to one already in the chain (each table once: no self-joins)."""
    edges = _edges(tables)
    pending: list[list[_Join]] = [[_Join(table, ())] for table in tables]
    count = 0
    while pending:
        chain = pending.pop(0)
        count += 1
        if count > MAX_JOIN_PATHS:
            raise ValueError(
                f"the schema's foreign keys give more than {MAX_JOIN_PATHS} join paths: pass "
                "a smaller max_joins, or fewer tables"
            )
        yield chain
        if len(chain) > max_joins:
            continue
        present = {join.table.name for join in chain}
        for table in tables:
            if table.name in present:
                continue
            on = [
                pair
                for (earlier, joined), pairs in edges.items()
                if joined == table.name and earlier in present
                for pair in pairs
            ]
            if on:
                pending.append([*chain, _Join(table, tuple(on))])


def _edges(tables: list[Table]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(earlier table, joined table) -> the qualified column pairs that join them."""
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for table in tables:
        for key in table.foreign_keys:
            if key.table == table.name:
                continue  # a self-reference needs an alias: not in the grammar
            mine = _qualified(table.name, key.column)
            theirs = _qualified(key.table, key.references)
            edges.setdefault((key.table, table.name), []).append((theirs, mine))
            edges.setdefault((table.name, key.table), []).append((mine, theirs))
    return edges


def _qualified(table: str, column: str) -> str:
    return f"{quote_identifier(table)}.{quote_identifier(column)}"


def _source_rules(index: int, source: list[_Join]) -> list[str]:
    joined = len(source) > 1
    columns: list[tuple[str, ColumnType]] = []
    for join in source:
        for column, kind in join.table.columns.items():
            text = _qualified(join.table.name, column) if joined else quote_identifier(column)
            columns.append((lark_literal(text), kind))
    refs = [ref for ref, _ in columns]
    numeric = [ref for ref, kind in columns if kind in ("integer", "real", "any")]
    k = index
    # The optional clauses chain (`after_from` is a WHERE or not, then `after_where` ...), so
    # the rules grow with the clauses, not with the product of their combinations. A query is
    # an aggregate one (its ORDER BY may use aggregates, SQLite refuses them elsewhere) when its
    # columns hold an aggregate (`agg_select`) or it has a GROUP BY.
    return [
        f"select_{k}: kw_select columns_{k} {_from(source)} after_from_{k} "
        f"| kw_select agg_columns_{k} {_from(source)} agg_after_from_{k}",
        f'columns_{k}: "*" | col_{k} (", " col_{k})*',
        f'agg_columns_{k}: (col_{k} ", ")* agg_{k} (", " (col_{k} | agg_{k}))*',
        f"col_{k}: " + " | ".join(refs),
        f"agg_{k}: " + " | ".join(_aggregates(k, numeric)),
        f"where_{k}: kw_where cond_{k} (bool_op cond_{k})*",
        f"cond_{k}: " + " | ".join(_conditions(k, columns)),
        f"after_from_{k}: where_{k} after_where_{k} | after_where_{k}",
        f"after_where_{k}: group_{k} agg_order_{k} | order_{k}",
        f"agg_after_from_{k}: where_{k} agg_after_where_{k} | agg_after_where_{k}",
        f"agg_after_where_{k}: group_{k} agg_order_{k} | agg_order_{k}",
        f'group_{k}: kw_group_by col_{k} (", " col_{k})* having_{k}',
        f"having_{k}: kw_having agg_{k} cmp NUMBER (bool_op agg_{k} cmp NUMBER)* | ()",
        f'order_{k}: kw_order_by col_{k} (direction | ()) (", " col_{k} (direction | ()))* '
        "after_order | after_order",
        f'agg_order_{k}: kw_order_by okey_{k} (", " okey_{k})* after_order | after_order',
        f"okey_{k}: (col_{k} | agg_{k}) (direction | ())",
    ]


def _from(source: list[_Join]) -> str:
    parts = ["kw_from", lark_literal(quote_identifier(source[0].table.name))]
    for join in source[1:]:
        ways = " | ".join(
            f'{lark_literal(first)} " = " {lark_literal(second)}'
            for a, b in join.on
            for first, second in ((a, b), (b, a))
        )
        parts += ["kw_join", lark_literal(quote_identifier(join.table.name)), "kw_on"]
        parts.append(f"({ways})")
    return " ".join(parts)


def _aggregates(index: int, numeric: list[str]) -> list[str]:
    out = [
        'kw_count "*" ")"',
        f'kw_count col_{index} ")"',
        f'kw_count kw_distinct col_{index} ")"',
        f'kw_min col_{index} ")"',
        f'kw_max col_{index} ")"',
    ]
    if numeric:
        out += [
            f'kw_sum ({" | ".join(numeric)}) ")"',
            f'kw_avg ({" | ".join(numeric)}) ")"',
        ]
    return out


def _conditions(index: int, columns: list[tuple[str, ColumnType]]) -> list[str]:
    conditions = []
    for ref, kind in columns:
        conditions.append(f"{ref} cmp {_LITERAL[kind]}")
        if kind in ("text", "any"):
            conditions.append(f"{ref} kw_like TEXT")
    conditions += [f"col_{index} kw_is_null", f"col_{index} kw_is_not_null"]
    return conditions


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

        with _fork.gate(), closing(sqlite3.connect(":memory:")) as database:
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


def sql_prompt(question: str, tables: Sequence[Table]) -> str:
    """The prompt for a question about `tables`: the schema, its joins, the rules, the
    question."""
    lines = []
    for table in tables:
        columns = ", ".join(
            f"{quote_identifier(c)} {declared_type(k) or 'ANY'}" for c, k in table.columns.items()
        )
        lines.append(f"- {quote_identifier(table.name)}: {columns}")
        for key in table.foreign_keys:
            lines.append(
                f"  join: {_qualified(table.name, key.column)} = "
                f"{_qualified(key.table, key.references)}"
            )
    return (
        "Write one SQLite SELECT query that answers the question. You may JOIN tables on the "
        "join columns listed, and use COUNT, SUM, AVG, MIN, MAX with GROUP BY and HAVING. "
        "Quote every table and column name with double quotes; when the query joins tables, "
        'write each column as "table"."column". Answer with the query alone.\n'
        "Tables:\n" + "\n".join(lines) + f"\nQuestion: {question}"
    )
