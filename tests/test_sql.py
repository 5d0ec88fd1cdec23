"""`sdk.sql`: the SELECT-only grammar of a schema (joins, aggregates), and bounded execution.

The grammar's language is checked against SQLite itself (every sentence drawn from it prepares
over hostile schemas, foreign keys included); `run_query` is checked against the attacks the
issue lists: functions outside the grammar, a query that runs forever, values that fill memory,
a sort over the whole table before the row bound.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tracemalloc
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

import sdk.sql
from contracts.sql import DEMO_TABLES
from contracts.sql import create_demo_database
from sdk.grammar import parse_grammar
from sdk.grammar import recognize
from sdk.grammar import to_gbnf
from sdk.grammar._compiled import compiled_lark
from sdk.sql import ALLOWED_FUNCTIONS
from sdk.sql import DEFAULT_MAX_RESULT_BYTES
from sdk.sql import ForeignKey
from sdk.sql import QueryTimeout
from sdk.sql import ResultTooLarge
from sdk.sql import Table
from sdk.sql import bounded_statement
from sdk.sql import grammar_from_sqlite
from sdk.sql import run_query
from sdk.sql import sql_grammar
from sdk.sql import sql_prompt
from sdk.sql import tables_from_sqlite
from tests.grammar_support import grammar_accepts
from tests.grammar_support import lark_accepts
from tests.test_sql_grammar import _prepares

# Names that break naive grammars and quoting: keywords, quotes, spaces, a control character
# (U+0008, which JSON writes as \b and Lark reads as a backslash and a b), non-ASCII.
HOSTILE = (
    Table("select", {"id": "integer", "from": "text", "a\bb": "real"}),
    Table(
        'we"ird join',
        {"key": "integer", "select_id": "integer", "Zoë ☃": "any", "limit": "text"},
        foreign_keys=(ForeignKey("select_id", "select", "id"),),
    ),
    Table(
        "on",
        {"id": "integer", "key": "integer"},
        foreign_keys=(ForeignKey("key", 'we"ird join', "key"),),
    ),
)
_TEXT = st.characters(codec="utf-8", exclude_characters="\x00")


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return create_demo_database(tmp_path / "shop.db")


# --- the module ----------------------------------------------------------------------------


def test_sql_is_a_documented_module_of_the_sdk_without_the_repository(tmp_path: Path) -> None:
    assert sdk.sql.__doc__ and "not an authorization layer" in sdk.sql.__doc__
    for name in ("sql_grammar", "grammar_from_sqlite", "tables_from_sqlite", "run_query"):
        assert name in sdk.sql.__all__
    # In a fresh interpreter away from the clone: the installed package has it.
    script = (
        "import sdk.sql, sys; print(sdk.sql.run_query.__module__); "
        "print('contracts' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sdk.sql._run", "False"]


# --- the language ----------------------------------------------------------------------------


def test_a_control_character_in_a_name_is_exact() -> None:
    grammar = sql_grammar(HOSTILE)
    assert recognize(grammar, 'SELECT "a\bb" FROM "select"') is None
    assert recognize(grammar, 'SELECT "a\\bb" FROM "select"') is not None  # not a column
    assert lark_accepts(grammar.lark, 'SELECT "a\bb" FROM "select"')
    assert not lark_accepts(grammar.lark, 'SELECT "a\\bb" FROM "select"')


def test_joins_follow_the_declared_foreign_keys_only() -> None:
    grammar = sql_grammar(DEMO_TABLES)
    join = 'SELECT "customers"."name" FROM "customers" JOIN "orders" ON '
    assert recognize(grammar, join + '"customers"."id" = "orders"."customer_id"') is None
    assert recognize(grammar, join + '"orders"."customer_id" = "customers"."id"') is None
    assert recognize(grammar, join + '"customers"."id" = "orders"."id"') is not None
    # Two hops along the hostile schema's keys: "on" -> 'we"ird join' -> "select".
    two = (
        'SELECT COUNT(*) FROM "select" JOIN "we""ird join" ON "select"."id" = '
        '"we""ird join"."select_id" JOIN "on" ON "on"."key" = "we""ird join"."key"'
    )
    assert recognize(sql_grammar(HOSTILE), two) is None
    assert recognize(sql_grammar(HOSTILE, max_joins=1), two) is not None


def test_aggregates_group_by_and_having() -> None:
    grammar = sql_grammar(DEMO_TABLES)
    for query in [
        'SELECT "status", COUNT(*) FROM "orders" GROUP BY "status" HAVING SUM("total") > 100',
        'select avg("total") from "orders" where "status" = \'shipped\'',
        'SELECT "customer_id" FROM "orders" GROUP BY "customer_id" ORDER BY MAX("total") DESC',
    ]:
        assert recognize(grammar, query) is None, query
        assert _prepares(DEMO_TABLES, query), query
    for query in [
        'SELECT * FROM "orders" ORDER BY COUNT(*)',  # SQLite: misuse of aggregate
        'SELECT SUM("status") FROM "orders"',  # not a number
        'SELECT COUNT(*) FROM "orders" HAVING COUNT(*) > 1',  # HAVING without GROUP BY
    ]:
        assert recognize(grammar, query) is not None, query


@pytest.mark.parametrize("tables", [DEMO_TABLES, HOSTILE], ids=["demo", "hostile"])
def test_every_sentence_prepares_in_sqlite(tables: tuple[Table, ...]) -> None:
    grammar = sql_grammar(tables)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(from_lark(compiled_lark(grammar.lark), alphabet=_TEXT))
    def prepares(query: str) -> None:
        assert recognize(grammar, query) is None
        assert _prepares(tables, query), query
        parse_grammar(grammar, query, stop_reason="end_turn")  # its check agrees

    prepares()


def test_the_grammar_converts_to_gbnf_that_llguidance_reads_alike() -> None:
    grammar = sql_grammar(HOSTILE)
    gbnf = to_gbnf(grammar)
    query = (
        'SELECT "we""ird join"."limit", "select"."a\bb" FROM "we""ird join" JOIN "select" '
        'ON "select"."id" = "we""ird join"."select_id"'
    )
    assert recognize(grammar, query) is None
    assert grammar_accepts(gbnf, query) and lark_accepts(grammar.lark, query)


def test_too_many_join_paths_is_a_clear_error() -> None:
    hub = Table("hub", {"id": "integer"})
    spokes = [
        Table(f"t{i}", {"id": "integer", "hub": "integer"}, (ForeignKey("hub", "hub", "id"),))
        for i in range(12)
    ]
    with pytest.raises(ValueError, match="join paths"):
        sql_grammar([hub, *spokes], max_joins=3)
    with pytest.raises(ValueError, match="not in the schema"):
        sql_grammar([Table("t", {"a": "integer"}, (ForeignKey("a", "nowhere", "id"),))])


# --- the database ----------------------------------------------------------------------------


def test_the_schema_and_its_foreign_keys_are_read_back(shop: Path) -> None:
    assert tables_from_sqlite(shop) == sorted(DEMO_TABLES, key=lambda t: t.name)
    assert grammar_from_sqlite(shop).lark == sql_grammar(tables_from_sqlite(shop)).lark


def test_the_prompt_lists_the_joins() -> None:
    prompt = sql_prompt("Who spent most?", DEMO_TABLES)
    assert 'join: "orders"."customer_id" = "customers"."id"' in prompt
    assert "GROUP BY" in prompt and prompt.endswith("Question: Who spent most?")


def test_a_join_with_an_aggregate_runs(shop: Path) -> None:
    query = (
        'SELECT "customers"."country", SUM("orders"."total") FROM "customers" JOIN "orders" '
        'ON "customers"."id" = "orders"."customer_id" WHERE "orders"."status" = \'shipped\' '
        'GROUP BY "customers"."country" ORDER BY SUM("orders"."total") DESC'
    )
    assert parse_grammar(sql_grammar(DEMO_TABLES), query, stop_reason="end_turn")
    assert run_query(shop, query) == [("US", 410.25 + 980.0), ("UK", 120.5)]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT fts3_tokenizer('simple')",  # returns a native pointer
        "SELECT fts3_tokenizer('x', x'0000000000000000')",  # registers one
        "SELECT zeroblob(1000000000)",  # allocates a gigabyte
        "SELECT randomblob(1000000000)",
        "SELECT load_extension('libevil')",
        'SELECT upper("name") FROM "customers"',  # harmless, but not the grammar's
    ],
)
def test_functions_outside_the_grammar_are_refused(shop: Path, query: str) -> None:
    with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
        run_query(shop, query)


def test_the_grammars_functions_are_allowed(shop: Path) -> None:
    assert {"count", "sum", "avg", "min", "max", "like"} == ALLOWED_FUNCTIONS
    query = (
        'SELECT COUNT(*), SUM("total"), AVG("total"), MIN("total"), MAX("total") FROM "orders" '
        "WHERE \"status\" LIKE 'ship%'"
    )
    assert run_query(shop, query) == [(3, 1510.75, 1510.75 / 3, 120.5, 980.0)]


def test_a_query_past_its_time_bound_is_interrupted(shop: Path) -> None:
    # The case, a self-join of 5 rows (each join multiplies the work by 5), made 14-way:
    # 10-way ends within 0.2 s on a fast machine; 14-way would take minutes on any.
    join = "SELECT COUNT(*) FROM " + ", ".join(f'"orders" AS o{i}' for i in range(14))
    with pytest.raises(QueryTimeout, match="time bound"):
        run_query(shop, join, timeout=0.2)
    assert issubclass(QueryTimeout, sqlite3.OperationalError)


def test_values_are_bounded_in_size(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    with closing(sqlite3.connect(path)) as database:
        database.execute('CREATE TABLE "t" ("big" TEXT)')
        database.execute('INSERT INTO "t" VALUES (?)', ("x" * 2_000_000,))
        database.commit()
    with pytest.raises(sqlite3.DataError, match="too big"):
        run_query(path, 'SELECT "big" FROM "t"')
    assert len(run_query(path, 'SELECT "big" FROM "t"', max_value_bytes=3_000_000)[0][0]) == 2e6


def test_rows_are_bounded_before_the_sort(shop: Path) -> None:
    query = 'SELECT * FROM "orders" ORDER BY "total" DESC'
    with closing(sqlite3.connect(shop)) as database:
        plain = [row[1] for row in database.execute("EXPLAIN " + query)]
        bounded = [row[1] for row in database.execute("EXPLAIN " + bounded_statement(query), (2,))]
    # Unbounded: every row goes to the sorter. Bounded: a sorted index that drops the row past
    # the bound as it goes (SQLite's ORDER BY ... LIMIT plan), through the flattened subquery.
    assert "SorterOpen" in plain
    assert "SorterOpen" not in bounded and {"IfNotZero", "Last", "Delete"} <= set(bounded)
    assert run_query(shop, query, max_rows=2) == [
        (5, 4, 980.0, "shipped", "2026-03-01"),
        (3, 2, 410.25, "shipped", "2026-02-11"),
    ]


def test_a_trailing_comment_cannot_lift_the_row_bound(shop: Path) -> None:
    assert len(run_query(shop, 'SELECT * FROM "orders" -- all of them', max_rows=1)) == 1


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_bounds_are_checked(shop: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="max_rows"):
        run_query(shop, 'SELECT * FROM "orders"', max_rows=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["max_value_bytes", "cache_kib"])
@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "8"])
def test_every_bound_is_checked_naming_it(shop: Path, name: str, bad: object) -> None:
    # On main: max_value_bytes=-1 left SQLite's own limit (1 GB: no bound on a value), True
    # bounded values to 1 byte, 1.5 a bare TypeError; cache_kib=-5 made `PRAGMA cache_size =
    # --5` (a comment: "incomplete input"), "8" a bare int() error.
    with pytest.raises(ValueError, match=name):
        run_query(shop, 'SELECT * FROM "orders"', **{name: bad})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1.5, True, "5", float("nan")])
def test_the_time_bound_is_checked_naming_it(shop: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="timeout"):  # on main "5": a bare TypeError
        run_query(shop, 'SELECT * FROM "orders"', timeout=bad)  # type: ignore[arg-type]


def test_a_row_bound_past_sqlite_s_integers_is_no_bound_not_an_error(shop: Path) -> None:
    # On main: OverflowError, "Python int too large to convert to SQLite INTEGER".
    assert run_query(shop, 'SELECT * FROM "orders"', max_rows=10**30) == run_query(
        shop, 'SELECT * FROM "orders"'
    )


def _wide(tmp_path: Path, rows: int, value: str) -> Path:
    path = tmp_path / "wide.db"
    with closing(sqlite3.connect(path)) as database:
        database.execute('CREATE TABLE "t" ("v" TEXT, "n" INTEGER)')
        database.executemany('INSERT INTO "t" VALUES (?, ?)', [(value, i) for i in range(rows)])
        database.commit()
    return path


def test_the_whole_result_is_bounded_in_size_not_only_each_value(tmp_path: Path) -> None:
    # 40 rows of 300 KB each: every value is under `max_value_bytes` and the rows under
    # `max_rows`, but together 12 MB, past the default bound on the whole result.
    path = _wide(tmp_path, 40, "x" * 300_000)
    with pytest.raises(ResultTooLarge, match="max_result_bytes=8000000") as raised:
        run_query(path, 'SELECT "v" FROM "t"')
    assert raised.value.max_result_bytes == DEFAULT_MAX_RESULT_BYTES == 8_000_000
    assert raised.value.rows == 26  # 26 rows (7.8 MB) fit; the 27th passes the bound
    assert isinstance(raised.value, sqlite3.DataError)  # as the bound on one value is
    assert len(run_query(path, 'SELECT "v" FROM "t"', max_result_bytes=13_000_000)) == 40


def test_the_result_s_size_counts_text_in_utf8_bytes(tmp_path: Path) -> None:
    # Each row: "é" * 100 is 200 bytes of UTF-8, and the integer 8: 208 bytes.
    path = _wide(tmp_path, 10, "é" * 100)
    assert len(run_query(path, 'SELECT "v", "n" FROM "t"', max_result_bytes=2080)) == 10
    with pytest.raises(ResultTooLarge) as raised:
        run_query(path, 'SELECT "v", "n" FROM "t"', max_result_bytes=2079)
    assert raised.value.rows == 9


def test_rows_past_the_result_bound_are_never_held(tmp_path: Path) -> None:
    # 40 rows of 900 KB, the bound 1 MB: the second row passes it. Read 64 rows at a time,
    # every row was made into Python text before the first was counted (58 MB held; 1.15 GB
    # for the same column asked 20 times); read one row at a time, at most the rows kept and
    # the one that passes the bound are held.
    path = _wide(tmp_path, 40, "x" * 900_000)
    tracemalloc.start()
    try:
        with pytest.raises(ResultTooLarge) as raised:
            run_query(path, 'SELECT "v" FROM "t"', max_result_bytes=1_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raised.value.rows == 1
    assert peak < 3_000_000, f"{peak:,} bytes held for a 1 MB bound"


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_the_result_bound_is_checked(shop: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="max_result_bytes"):
        run_query(shop, 'SELECT * FROM "orders"', max_result_bytes=bad)  # type: ignore[arg-type]
