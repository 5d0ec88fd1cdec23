"""llama.cpp reads the GBNF the SDK writes: its own parser takes it, its sampler agrees on the sets.

Two llama.cpp surfaces: the grammar engine inside llama-cpp-python (`tests.llamacpp_grammar`:
parse, then accept or reject a given text) and a real llama-server (`llama_server` fixture)
generating under the SQL grammar, whose output the client then recognizes and checks.
Marked `local`: skipped without the local extra, failed in CI.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import given
from hypothesis import settings
from hypothesis.extra.lark import from_lark

from contracts.sql import DEMO_TABLES
from contracts.sql import SELECT_QUERY
from contracts.sql import create_demo_database
from contracts.sql import run_query
from contracts.sql import sql_grammar
from contracts.sql import sql_prompt
from sdk import Grammar
from sdk.errors import TruncatedOutput
from sdk.grammar import lark_to_gbnf
from sdk.grammar import parse_grammar
from sdk.grammar import recognize
from sdk.grammar import to_gbnf
from sdk.grammar._compiled import compiled_lark
from sdk.grammar.wire import llamacpp_grammar
from tests.grammar_support import grammar_accepts_prefix
from tests.llamacpp_grammar import LlamaCppGrammarError
from tests.llamacpp_grammar import llamacpp_accepts
from tests.llamacpp_grammar import require_llamacpp
from tests.llamacpp_grammar import round_trips
from tests.test_grammar import NAIVE_GBNF
from tests.test_sql_grammar import ACCEPT
from tests.test_sql_grammar import HOSTILE_TABLES
from tests.test_sql_grammar import REJECT

pytestmark = pytest.mark.local

require_llamacpp()


def test_the_sql_gbnf_parses_and_agrees_on_the_sets() -> None:
    gbnf = to_gbnf(SELECT_QUERY)
    for cases, expected in ((ACCEPT, True), (REJECT, False)):
        for query in cases:
            assert llamacpp_accepts(gbnf, query) is expected, query


def test_the_naive_gbnf_takes_the_counter_example_in_llama_cpp_too() -> None:
    assert llamacpp_accepts(NAIVE_GBNF, "SELECT from FROM select;")
    assert not llamacpp_accepts(to_gbnf(SELECT_QUERY), "SELECT from FROM select;")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(from_lark(compiled_lark(sql_grammar(HOSTILE_TABLES).lark)))
def test_sentences_of_the_lark_grammar_are_sentences_of_its_gbnf(query: str) -> None:
    assume(round_trips(query))
    assert llamacpp_accepts(to_gbnf(sql_grammar(HOSTILE_TABLES)), query), query


@pytest.mark.parametrize(
    ("lark", "texts"),
    [
        ('start: "a" ("," "a")*\n', {"a": True, "a,a,a": True, "a,": False, "": False}),
        (
            'start: "a" "b"\n%import common.WS\n%ignore WS\n',
            {"ab": True, "a \n b": True, " a b": False, "a b ": False, "a": False, "a c b": False},
        ),
        ('start: "select"i " *"\n', {"SeLeCt *": True, "SELEC *": False}),
        (
            'start: item+\nitem: /[a-f0-9]{2}/ | "-"\n',
            {"0a-ff": True, "0": False, "-": True, "0g": False},
        ),
    ],
)
def test_converted_constructs_run_in_llama_cpp(lark: str, texts: dict[str, bool]) -> None:
    gbnf = lark_to_gbnf(lark)
    grammar = Grammar("Construct", lark=lark)
    for text, expected in texts.items():
        assert (recognize(grammar, text) is None) is expected, text
        assert llamacpp_accepts(gbnf, text) is expected, text


@pytest.mark.parametrize(
    ("lark", "texts"),
    [
        # Unicode classes: once narrowed to ASCII, so llama.cpp refused what the client took.
        ("start: /\\d/\n", {"٣": True, "3": True, "x": False}),
        ("start: /\\w+/\n", {"жук": True, "_a1": True, "-": False}),
        ("start: /./\n", {"\u2028": True, "é": True, "\n": False}),
        # Case folding: `ß` upper-cases to "SS" (a TypeError once), regexes with `i` (refused).
        ('start: "straße"i\n', {"STRAẞE": True, "straße": True, "STRASSE": False}),
        ("start: /[a-z]+/i\n", {"aBc": True, "K": True, "1": False}),
    ],
)
def test_unicode_meaning_is_the_same_in_llama_cpp(lark: str, texts: dict[str, bool]) -> None:
    grammar = Grammar("Unicode", lark=lark)
    gbnf = to_gbnf(grammar)
    for text, expected in texts.items():
        assert (recognize(grammar, text) is None) is expected, text
        assert llamacpp_accepts(gbnf, text) is expected, text


def test_an_astral_gbnf_literal_reads_the_same_on_the_client() -> None:
    gbnf = 'root ::= "😀" [😀-😂]\n'
    grammar = Grammar("Emoji", gbnf=gbnf)
    for text, expected in {"😀😁": True, "😀😃": False, "😀": False}.items():
        assert (recognize(grammar, text) is None) is expected, text
        assert llamacpp_accepts(gbnf, text) is expected, text


def test_llama_cpp_rejects_what_the_converter_refuses_to_write() -> None:
    with pytest.raises(LlamaCppGrammarError):
        llamacpp_accepts('root ::= a\na ::= a "x"\n', "x")  # left recursion, no base


def test_llama_server_generates_inside_the_sql_grammar(llama_server: str, tmp_path: Path) -> None:
    database = create_demo_database(tmp_path / "shop.db")
    question = "List the names of the customers in the US."
    body = {
        "prompt": sql_prompt(question, DEMO_TABLES) + "\nQuery: ",
        "n_predict": 96,
        "temperature": 0,
        "cache_prompt": False,
        **llamacpp_grammar(SELECT_QUERY),
    }
    reply = httpx.post(f"{llama_server}/completion", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    text = data["content"]
    stop = data.get("stop_type", "eos")
    if stop == "limit":
        # A cut query is only a prefix: llama.cpp must still have stayed inside the language
        # (asked of llguidance, the independent engine), and the parser must not take it.
        assert grammar_accepts_prefix(to_gbnf(SELECT_QUERY), text), text
        with pytest.raises(TruncatedOutput):
            parse_grammar(SELECT_QUERY, text, stop_reason=stop)
        return
    parsed = parse_grammar(SELECT_QUERY, text, stop_reason=stop)
    rows = run_query(database, parsed.value)
    assert isinstance(rows, list)


def test_llama_server_parses_every_grammar_it_is_sent(llama_server: str) -> None:
    # The GBNF of each reference grammar is taken by the server's own parser (no 400), and
    # what it generates under it stays inside the language.
    for grammar in (SELECT_QUERY, sql_grammar(HOSTILE_TABLES), Grammar("N", gbnf=NAIVE_GBNF)):
        body = {"prompt": "SELECT", "n_predict": 8, "temperature": 0, **llamacpp_grammar(grammar)}
        reply = httpx.post(f"{llama_server}/completion", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        assert grammar_accepts_prefix(to_gbnf(grammar), reply.json()["content"])
