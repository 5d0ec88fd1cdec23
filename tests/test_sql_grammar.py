"""The SQL reference grammar: inside SQLite's dialect, tested against its sets, executed read-only.

The property test that draws sentences from the grammar and has SQLite prepare each one, over
hostile schemas with foreign keys, is in `tests/test_sql.py` with the rest of `sdk.sql`.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import strategies as st

from contracts.sql import DEMO_TABLES
from contracts.sql import SELECT_QUERY
from contracts.sql import Table
from contracts.sql import affinity
from contracts.sql import connect_read_only
from contracts.sql import create_demo_database
from contracts.sql import prepares_in
from contracts.sql import quote_identifier
from contracts.sql import run_query
from contracts.sql import schema_ddl
from contracts.sql import sql_grammar
from contracts.sql import sql_prompt
from contracts.sql import tables_from_sqlite
from sdk import Grammar
from sdk import GrammarViolation
from sdk.errors import CheckFailed
from sdk.grammar import check_cases
from sdk.grammar import parse_cases
from sdk.grammar import parse_grammar
from sdk.grammar import recognize
from sdk.grammar import to_gbnf
from tests.grammar_support import grammar_accepts
from tests.grammar_support import lark_accepts
from tests.test_grammar import NAIVE_GBNF

CONTRACTS = Path(__file__).resolve().parent.parent / "contracts"
ACCEPT = parse_cases((CONTRACTS / "sql.accept.txt").read_text(encoding="utf-8"))
REJECT = parse_cases((CONTRACTS / "sql.reject.txt").read_text(encoding="utf-8"))

# Names that break a naive grammar or a naive quoting: keywords, spaces, quotes, non-ASCII.
HOSTILE_TABLES = (
    Table("select", {"from": "text", "where": "integer", "order by": "real", "blob": "any"}),
    Table('we"ird', {'a"b': "text", "Zoë ☃": "integer", "limit": "any"}),
)

# Sentence text without surrogates or NUL: what a UTF-8 decoded model output can hold.
_TEXT = st.characters(codec="utf-8", exclude_characters="\x00")


def _prepares(tables: tuple[Table, ...], query: str) -> bool:
    with closing(sqlite3.connect(":memory:")) as database:
        for statement in schema_ddl(tables):
            database.execute(statement)
        try:
            database.execute("EXPLAIN " + query)
        except sqlite3.Error:
            return False
    return True


# --- the language ------------------------------------------------------------------------------


def test_the_committed_sets_pass() -> None:
    assert len(ACCEPT) >= 10 and len(REJECT) >= 20
    report = check_cases(SELECT_QUERY, accept=ACCEPT, reject=REJECT)
    assert report.ok, "\n".join(report.lines())
    assert report.untested == []


def test_every_accept_case_prepares_and_passes_the_check() -> None:
    for query in ACCEPT:
        assert _prepares(DEMO_TABLES, query), query
        assert parse_grammar(SELECT_QUERY, query, stop_reason="end_turn").value == query


def test_llguidance_agrees_on_the_sets_for_the_lark_and_the_gbnf_forms() -> None:
    gbnf = to_gbnf(SELECT_QUERY)
    for cases, expected in ((ACCEPT, True), (REJECT, False)):
        for query in cases:
            assert lark_accepts(SELECT_QUERY.lark, query) is expected, query
            assert grammar_accepts(gbnf, query) is expected, query


def test_the_naive_grammar_is_the_counter_example() -> None:
    naive = Grammar("Naive", gbnf=NAIVE_GBNF)
    sentence = "SELECT from FROM select;"
    assert recognize(naive, sentence) is None  # conformance to the naive grammar ...
    assert not _prepares(DEMO_TABLES, sentence)  # ... is not validity in SQLite
    with pytest.raises(GrammarViolation) as raised:
        parse_grammar(SELECT_QUERY, sentence, stop_reason="end_turn")
    assert raised.value.position == len("SELECT ")
    assert not check_cases(naive, reject=REJECT).ok  # the sets catch the permissive grammar


def test_identifiers_are_exact_and_quoted() -> None:
    grammar = sql_grammar(HOSTILE_TABLES)
    accepted = [
        'SELECT "from", "order by" FROM "select" WHERE "where" = 3 ORDER BY "from" DESC',
        'SELECT "a""b" FROM "we""ird" WHERE "Zoë ☃" >= -2 AND "limit" = \'x\'',
        'SELECT * FROM "select" WHERE "blob" = 1.5 OR "blob" LIKE \'%\'',
    ]
    for query in accepted:
        assert recognize(grammar, query) is None, query
        assert _prepares(HOSTILE_TABLES, query), query
    for query in [
        "SELECT from FROM select",
        'SELECT "from" FROM "we""ird"',  # a column of the other table
        'SELECT "a"b" FROM "we""ird"',  # quote not doubled
        'SELECT * FROM "select" WHERE "where" = \'1\'',  # text for an INTEGER column
    ]:
        assert recognize(grammar, query) is not None, query


def test_quote_identifier() -> None:
    assert quote_identifier('a"b') == '"a""b"'
    with pytest.raises(ValueError, match="NUL"):
        quote_identifier("a\x00b")


def test_a_grammar_needs_tables_with_columns() -> None:
    with pytest.raises(ValueError, match="at least one table"):
        sql_grammar([])
    with pytest.raises(ValueError, match="share a name"):
        sql_grammar([DEMO_TABLES[0], DEMO_TABLES[0]])
    with pytest.raises(ValueError, match="at least one column"):
        Table("empty", {})
    with pytest.raises(ValueError, match="not one of"):
        Table("t", {"c": "date"})  # type: ignore[dict-item]


# --- the check ---------------------------------------------------------------------------------


def test_the_check_fails_a_sentence_sqlite_cannot_prepare() -> None:
    # The grammar knows a column the database lacks: SQLite says so, as CheckFailed.
    wider = (Table("customers", {"id": "integer", "nickname": "text"}),)
    narrower = (Table("customers", {"id": "integer"}),)
    grammar = Grammar("Drifted", lark=sql_grammar(wider).lark, checks=[prepares_in(narrower)])
    query = 'SELECT "nickname" FROM "customers"'
    with pytest.raises(CheckFailed) as raised:
        parse_grammar(grammar, query, stop_reason="end_turn")
    # SQLite itself would read the unknown "nickname" as a string literal and prepare it.
    assert _prepares(narrower, query)
    assert '"nickname" as a string' in str(raised.value)
    assert raised.value.text == query
    assert parse_grammar(grammar, 'SELECT "id" FROM "customers"', stop_reason="end_turn")


@pytest.mark.parametrize(
    "statement",
    ["SELECT 1; DROP TABLE x", "SELECT \x00", "SELEC 1", "SELECT * FROM nowhere", 'SELECT "zz"'],
)
def test_the_check_turns_every_sqlite_complaint_into_a_value_error(statement: str) -> None:
    check = prepares_in(DEMO_TABLES)
    with pytest.raises(ValueError, match="SQLite"):
        check(statement, {})


# --- the database ------------------------------------------------------------------------------


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return create_demo_database(tmp_path / "shop? #1.db")  # characters a URI must escape


def test_the_schema_is_read_back_from_the_database(shop: Path) -> None:
    assert tables_from_sqlite(shop) == sorted(DEMO_TABLES, key=lambda t: t.name)
    assert sql_grammar(tables_from_sqlite(shop)).lark == sql_grammar(DEMO_TABLES).lark


@pytest.mark.parametrize(
    ("declared", "kind"),
    [
        ("INTEGER", "integer"),
        ("BIGINT", "integer"),
        ("VARCHAR(20)", "text"),
        ("CLOB", "text"),
        ("DOUBLE PRECISION", "real"),
        ("FLOAT", "real"),
        ("", "any"),
        ("BLOB", "any"),
        ("NUMERIC", "any"),
        ("DECIMAL(10,2)", "any"),
    ],
)
def test_affinity_follows_sqlite(declared: str, kind: str) -> None:
    assert affinity(declared) == kind


def test_queries_run_read_only(shop: Path) -> None:
    rows = run_query(
        shop, 'SELECT "name" FROM "customers" WHERE "country" = \'US\' ORDER BY "name"'
    )
    assert rows == [("Grace",), ("Margaret",)]
    assert run_query(shop, 'SELECT * FROM "orders"', max_rows=2) == run_query(
        shop, 'SELECT * FROM "orders" LIMIT 2'
    )
    for attack in [
        'DROP TABLE "orders"',
        'DELETE FROM "orders"',
        "INSERT INTO \"customers\" VALUES (9, 'Eve', 'XX')",
        "ATTACH DATABASE ':memory:' AS other",
        "PRAGMA query_only = OFF",
    ]:
        with pytest.raises(sqlite3.DatabaseError):
            run_query(shop, attack)
    assert len(run_query(shop, 'SELECT * FROM "orders"')) == 5


def test_read_only_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(sqlite3.OperationalError):
        connect_read_only(missing)
    assert not missing.exists()


def test_the_prompt_names_the_quoted_schema_and_the_question() -> None:
    prompt = sql_prompt("Which customers are in the US?", DEMO_TABLES)
    assert '"customers": "id" INTEGER, "name" TEXT, "country" TEXT' in prompt
    assert prompt.endswith("Question: Which customers are in the US?")

