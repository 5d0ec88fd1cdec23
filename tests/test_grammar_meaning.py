"""One meaning on every engine: what the issue found, each case asked of the client and of
llguidance (the engine behind the embedded provider and OpenAI's custom tools).

llama.cpp's side of the same cases is in `tests/test_grammar_llamacpp.py` (it needs the local
extra); the fuzzer that looks for more is `tests/test_grammar_fuzz.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contracts.sql import SELECT_QUERY
from sdk import Grammar
from sdk import GrammarViolation
from sdk.cli import app
from sdk.grammar import InvalidGrammar
from sdk.grammar import UnconvertibleGrammar
from sdk.grammar import gbnf_to_lark
from sdk.grammar import lark_literal
from sdk.grammar import lark_to_gbnf
from sdk.grammar import parse_grammar
from sdk.grammar import recognize
from sdk.grammar import to_gbnf
from sdk.grammar._compiled import compile_grammar
from sdk.grammar._earley import WORK_PER_CHARACTER
from sdk.grammar._earley import Recognizer
from tests.grammar_support import grammar_accepts
from tests.grammar_support import lark_accepts
from tests.grammar_support import lark_accepts_prefix

runner = CliRunner()


def _agree(lark: str, text: str) -> bool:
    """The client's verdict, asserted equal to llguidance's on the same Lark text."""
    client = recognize(Grammar("Same", lark=lark), text) is None
    assert lark_accepts(lark, text) is client, (lark, text)
    return client


# --- literals are written for each syntax ------------------------------------------------------


@pytest.mark.parametrize("text", ["a\bb", "tab\there", 'q"uote', "back\\slash", "\x00\x1f\x7f"])
def test_a_lark_literal_is_read_alike_by_lark_and_llguidance(text: str) -> None:
    lark = f"start: {lark_literal(text)}\n"
    assert _agree(lark, text)
    if "\b" in text:  # json.dumps wrote `\b`, which Lark reads as a backslash and a b
        assert not _agree(lark, text.replace("\b", "\\b"))


def test_escapes_the_engines_read_differently_are_refused() -> None:
    # Lark keeps `\b` as a backslash and a b, llguidance reads a backspace: one text, two
    # languages. So is a raw control character (llguidance's lexer refuses it).
    for lark in ['start: "a\\bb"\n', 'start: "a\\/b"\n', 'start: "a\x08b"\n', "start: /[\\x5d]/\n"]:
        with pytest.raises(InvalidGrammar):
            Grammar("Escapes", lark=lark)


def test_an_astral_literal_from_gbnf_is_one_character() -> None:
    # GBNF -> Lark once wrote "😀" as a surrogate pair, two characters to Lark.
    grammar = Grammar("Emoji", gbnf='root ::= "😀" "\\U0001F600"\n')
    assert recognize(grammar, "😀😀") is None
    assert lark_accepts(grammar.lark, "😀😀")


# --- Unicode classes keep their meaning --------------------------------------------------------


@pytest.mark.parametrize(
    ("regex", "text"), [(r"\d", "٣"), (r"\w", "ж"), (".", "\u2028"), (r"\s", "\u3000")]
)
def test_class_escapes_keep_their_unicode_meaning_in_gbnf(regex: str, text: str) -> None:
    lark = f"start: /{regex}/\n"
    assert _agree(lark, text)
    assert grammar_accepts(lark_to_gbnf(lark), text)  # once narrowed to ASCII here


# --- case-insensitive literals and regexes convert exactly -------------------------------------


def test_a_case_insensitive_literal_that_grows_in_upper_case_converts() -> None:
    lark = 'start: "straße"i\n'
    gbnf = lark_to_gbnf(lark)  # `ß`.upper() is "SS": this raised TypeError
    for text in ["straße", "STRAẞE", "StRaßE"]:
        assert _agree(lark, text)
        assert grammar_accepts(gbnf, text), text
    for text in ["STRASSE", "strase"]:  # simple case folding, as both engines fold
        assert not _agree(lark, text)
        assert not grammar_accepts(gbnf, text), text


def test_a_case_insensitive_regex_converts() -> None:
    lark = "start: /[a-z]+/i\n"
    gbnf = lark_to_gbnf(lark)  # this raised UnconvertibleGrammar
    long_s = "\u017f"  # folds to s
    for text, expected in [("abc", True), ("ABC", True), ("K", True), (long_s, True), ("1", False)]:
        assert _agree(lark, text) is expected, text
        assert grammar_accepts(gbnf, text) is expected, text


def test_a_regex_for_no_character_is_an_invalid_grammar() -> None:
    with pytest.raises(UnconvertibleGrammar, match="surrogate"):
        Grammar("Surrogate", lark="start: /\\ud800/\n")  # this was an IndexError in to_gbnf


# --- %import ------------------------------------------------------------------------------------


def test_import_of_a_missing_grammar_is_an_invalid_grammar() -> None:
    with pytest.raises(InvalidGrammar, match="self-contained"):
        Grammar("Imports", lark="%import missing.X\nstart: X\n")  # was FileNotFoundError


def test_import_never_reads_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "evil.lark").write_text('X: "pwned"\n')
    monkeypatch.chdir(tmp_path)
    for lark in ["%import evil.X\nstart: X\n", "%import .evil.X\nstart: X\n"]:
        with pytest.raises(InvalidGrammar, match="self-contained"):
            Grammar("Imports", lark=lark)
    assert Grammar("Common", lark="%import common.INT\nstart: INT\n")  # Lark's own library


# --- positions ----------------------------------------------------------------------------------


def test_undecodable_bytes_are_reported_in_characters_with_line_and_column() -> None:
    grammar = Grammar("Lines", lark='start: /[a-zé=\\n]+/\n')
    text = "a=1\nb=é".encode() + b"\xff"
    with pytest.raises(GrammarViolation) as raised:
        parse_grammar(grammar, text, stop_reason="end_turn")
    # The bad byte is the 9th byte but the 8th character, on line 2.
    assert (raised.value.position, raised.value.line, raised.value.column) == (7, 2, 4)


@pytest.mark.parametrize(
    ("lark", "text"),
    [
        ('start: "SELECT"i " *"\n', "SEL"),  # inside a case-insensitive literal
        ('start: "(" A ")"\nA: /[a-z]+[0-9]/\n', "(ab"),
        ('start: "x" | "xy" "z"\n', "xy"),
        # A shorter terminal matches first: the old recognizer missed at "b", in the middle.
        ('start: "a" | "abc"\n', "ab"),
        ("start: NUMBER\nNUMBER: /-?[0-9]+(\\.[0-9]+)?/\n", "1."),
        (SELECT_QUERY.lark, 'SELECT * FROM "orders" WHERE "total" > 1.'),
    ],
)
def test_a_proper_prefix_misses_at_its_end(lark: str, text: str) -> None:
    assert lark_accepts_prefix(lark, text) and not lark_accepts(lark, text)
    miss = recognize(Grammar("Prefix", lark=lark), text)
    assert miss is not None and miss.at_end and miss.position == len(text)


def test_splitting_into_terminals_follows_llguidance() -> None:
    # The lexeme is the longest an allowed terminal can match: `xy` here, so `xyz` is not a
    # sentence (Lark's Earley parser alone took it, llguidance never generates it).
    assert not _agree('start: "xy" | "x" "yz"\n', "xyz")
    assert _agree('start: "x" | "xy" "z"\n', "xyz")


# --- deep grammars and long texts ---------------------------------------------------------------


def test_deep_grammars_are_invalid_grammars_not_recursion_errors() -> None:
    deep_lark = 'start: "a" | ' + "(" * 1000 + '"b"' + ")" * 1000 + "\n"
    deep_gbnf = 'root ::= "a" | ' + "(" * 400 + '"b"' + ")" * 400 + "\n"
    with pytest.raises(InvalidGrammar):
        Grammar("Deep", lark=deep_lark)
    with pytest.raises(InvalidGrammar):
        gbnf_to_lark(deep_gbnf)


def test_the_cli_exits_2_on_a_deep_grammar(tmp_path: Path) -> None:
    for name, text in [
        ("deep.lark", 'start: "a" | ' + "(" * 1000 + '"b"' + ")" * 1000 + "\n"),
        ("deep.gbnf", 'root ::= "a" | ' + "(" * 400 + '"b"' + ")" * 400 + "\n"),
    ]:
        path = tmp_path / name
        path.write_text(text)
        result = runner.invoke(app, ["grammar", "test", str(path)])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and "nested" in result.stderr


@pytest.mark.parametrize(
    "lark",
    [
        'start: item start | item\nitem: "ab"\n',  # right recursion (Earley's quadratic case)
        'start: item+\nitem: "ab"\n',
        'start: "(" start ")" | "ab"\n',
    ],
)
def test_recognition_work_grows_linearly_with_the_text(lark: str) -> None:
    # Work, counted in parser items, not time: 100 KB of text takes a bounded number of
    # items a character (bench/run.py row 8, "grammar", measures the time).
    recognizer = Recognizer(compile_grammar(lark))
    text = "ab" * 50_000 if "(" not in lark else "(" * 25_000 + "ab" + ")" * 25_000
    outcome = recognizer.run(text)
    assert outcome.accepted
    assert outcome.steps <= 20 * len(text) < WORK_PER_CHARACTER * len(text)


def test_an_ambiguous_grammar_exhausts_its_budget_as_an_invalid_grammar() -> None:
    grammar = Grammar("Ambiguous", lark='start: x+\nx: x x | "a"\n')
    with pytest.raises(InvalidGrammar, match="too ambiguous"):
        recognize(grammar, "a" * 3000)


def test_gbnf_left_recursion_is_refused_before_llama_cpp_loops_on_it() -> None:
    for gbnf in ['root ::= root "a" | "b"\n', 'root ::= x root "a" | "b"\nx ::= "c"?\n']:
        with pytest.raises(UnconvertibleGrammar, match="left recursion"):
            Grammar("Left", gbnf=gbnf)


def test_to_gbnf_rewrites_a_negated_non_ascii_class_only() -> None:
    # llama.cpp refuses a character that shares its first UTF-8 byte with a non-ASCII
    # exclusion of a negated class; the class is sent as the ranges around it.
    assert to_gbnf(Grammar("Ascii", gbnf='root ::= [^a"]\n')) == 'root ::= [^a"]\n'
    sent = to_gbnf(Grammar("Wide", gbnf="root ::= [^퀀]+\n"))
    assert "^" not in sent and sent.endswith("]+\n")


@pytest.mark.skipif(os.name != "posix", reason="POSIX paths")
def test_grammar_test_cli_refuses_an_import_of_a_neighbour_file(tmp_path: Path) -> None:
    (tmp_path / "words.lark").write_text('WORD: "w"\n')
    grammar = tmp_path / "g.lark"
    grammar.write_text("%import .words.WORD\nstart: WORD\n")
    result = runner.invoke(app, ["grammar", "test", str(grammar)])
    assert result.exit_code == 2 and "self-contained" in result.stderr
