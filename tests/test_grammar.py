"""Grammar contracts: definition, fingerprint, the grammar parser's order, conversions, harness.

The client-side recognizer is the pure-Python `lark` package; llguidance (the engine behind the
embedded provider and OpenAI's custom tools) is asked the same questions as an independent
judge, through `tests.grammar_support`, on the same texts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sdk
from sdk import Grammar
from sdk import GrammarViolation
from sdk import InvalidOutput
from sdk.cli import app
from sdk.errors import CheckFailed
from sdk.errors import RefusedOutput
from sdk.errors import TruncatedOutput
from sdk.errors import UnexpectedStop
from sdk.grammar import InvalidGrammar
from sdk.grammar import UnconvertibleGrammar
from sdk.grammar import check_cases
from sdk.grammar import gbnf_to_lark
from sdk.grammar import lark_to_gbnf
from sdk.grammar import parse_cases
from sdk.grammar import parse_grammar
from sdk.grammar import recognize
from sdk.grammar import to_gbnf
from tests.grammar_support import grammar_accepts
from tests.grammar_support import lark_accepts

runner = CliRunner()

# The reference texts' grammar (seed 000, section 32.5), verbatim: the counter-example.
NAIVE_GBNF = """\
# GBNF-style grammar constraining output to a SELECT-only SQL subset.
root        ::= select-stmt
select-stmt ::= "SELECT " columns " FROM " table where-clause? ";"
columns     ::= column (", " column)*
column      ::= [a-z_]+
table       ::= [a-z_]+
where-clause::= " WHERE " condition (" AND " condition)*
condition   ::= column " " op " " value
op          ::= "=" | ">" | "<" | ">=" | "<=" | "!="
value       ::= "'" [^']* "'" | [0-9]+
"""

KEY_VALUE = Grammar(
    "KeyValue",
    lark="""
start: pair ("\\n" pair)*
pair: KEY "=" VALUE
KEY: /[a-z][a-z0-9_]*/
VALUE: /[0-9]+/ | /"[^"\\n]*"/
""",
)


def _must_fail(check: Any, *args: Any) -> None:
    raise ValueError("never")


# --- the Grammar value ---------------------------------------------------------------------------


def test_grammar_is_public_and_violation_is_an_invalid_output() -> None:
    assert sdk.Grammar is Grammar
    assert "Grammar" in sdk.__all__ and "GrammarViolation" in sdk.__all__
    assert issubclass(GrammarViolation, InvalidOutput)
    assert GrammarViolation.__doc__ and "\n" not in GrammarViolation.__doc__.strip()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "x y", "lark": 'start: "a"'}, "identifier"),
        ({"name": "G"}, "no text"),
        ({"name": "G", "lark": "   "}, "no text"),
        ({"name": "G", "lark": 'start: "a"', "gbnf": 'root ::= "a"'}, "not both"),
        ({"name": "G", "lark": 'start: "a"', "version": 0}, "version"),
        ({"name": "G", "lark": 'start: "a"', "version": True}, "version"),
    ],
)
def test_a_grammar_is_checked_where_it_is_defined(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Grammar(**kwargs)


@pytest.mark.parametrize(
    "text",
    ["start: undefined_rule\n", 'start: "a" (\n', 'rule_without_start: "a"\n', "start: /[/\n"],
)
def test_an_invalid_lark_grammar_raises_invalid_grammar(text: str) -> None:
    with pytest.raises(InvalidGrammar, match="not a valid Lark grammar"):
        Grammar("Broken", lark=text)


def test_a_check_must_be_callable() -> None:
    with pytest.raises(TypeError, match="not callable"):
        Grammar("G", lark='start: "a"', checks=["not a function"])  # type: ignore[list-item]


def test_the_fingerprint_depends_on_content_only() -> None:
    base = Grammar("G", lark='start: "a"\n')
    same = Grammar("G", lark='start: "a"\n', checks=[_must_fail], description="other words")
    assert base.fingerprint() == same.fingerprint()
    assert len(base.fingerprint()) == 64
    others = {
        Grammar("H", lark='start: "a"\n').fingerprint(),
        Grammar("G", lark='start: "a"\n', version=2).fingerprint(),
        Grammar("G", lark='start: "b"\n').fingerprint(),
        Grammar("G", gbnf='root ::= "a"\n').fingerprint(),
    }
    assert base.fingerprint() not in others and len(others) == 4
    info = base.info()
    assert (info.name, info.version, info.fingerprint) == ("G", 1, base.fingerprint())


# --- GBNF -> Lark ------------------------------------------------------------------------------


def test_gbnf_is_converted_to_lark_with_root_as_start() -> None:
    grammar = Grammar("Naive", gbnf=NAIVE_GBNF)
    assert grammar.syntax == "gbnf" and grammar.definition == NAIVE_GBNF
    assert grammar.lark.startswith("start: select_stmt\n")
    assert recognize(grammar, "SELECT a, b FROM t WHERE a >= 'x';") is None
    assert recognize(grammar, "SELECT a FROM t") is not None  # the `;` is required


def test_gbnf_conversion_keeps_cfg_semantics_where_a_greedy_lexer_would_not() -> None:
    # A greedy terminal /[a-z]+/ would eat the final x; GBNF derives it as the literal.
    grammar = Grammar("Tail", gbnf='root ::= word "x"\nword ::= [a-z]+\n')
    assert recognize(grammar, "abx") is None
    assert recognize(grammar, "x") is not None
    assert recognize(grammar, "ab") is not None


def test_gbnf_escapes_classes_and_repetitions() -> None:
    gbnf = r"""root ::= "\x41\u00e9\"" [^"\\\n]{2,3} tab? . num
tab ::= "\t"
num ::= [0-9]{2,} | "n"{0} "z"
"""
    grammar = Grammar("Escapes", gbnf=gbnf)
    assert recognize(grammar, 'Aé"xy\t\n12') is None
    assert recognize(grammar, 'Aé"xyzq99') is None
    assert recognize(grammar, 'Aé"x\n12') is not None  # class repeated 2..3 times
    assert recognize(grammar, 'Aé"x\\y\t\n12') is not None  # backslash excluded
    assert recognize(grammar, 'Aé"xyz\t\n1') is not None  # {2,} digits
    assert recognize(grammar, 'Aé"xyzqz') is None


@pytest.mark.parametrize(
    ("gbnf", "error", "names"),
    [
        ('root ::= "a" <[1234]>\n', UnconvertibleGrammar, "token reference"),
        ("root ::= thing\n", InvalidGrammar, "'thing'"),
        ('rule ::= "a"\n', InvalidGrammar, "root"),
        ('root ::= "a\n', InvalidGrammar, "line 1"),
        ("root ::= [z-a]\n", InvalidGrammar, "out of order"),
        ('root ::= "a" "b"{3,1}\n', InvalidGrammar, "reversed"),
        ('root ::= "\\q"\n', InvalidGrammar, "unknown escape"),
        ('root ::= "a"\nroot ::= "b"\n', InvalidGrammar, "twice"),
    ],
)
def test_gbnf_errors_name_the_construct(gbnf: str, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names):
        gbnf_to_lark(gbnf)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="SELCTFROMWHEAND abz_'=<>!;,019", max_size=40))
def test_gbnf_conversion_agrees_with_llguidance_on_the_naive_grammar(text: str) -> None:
    grammar = Grammar("Naive", gbnf=NAIVE_GBNF)
    assert (recognize(grammar, text) is None) == grammar_accepts(NAIVE_GBNF, text)


# --- the grammar parser ------------------------------------------------------------------------


def test_the_stop_reason_is_decided_before_the_text() -> None:
    sentence = "a=1"
    with pytest.raises(TruncatedOutput) as cut:
        parse_grammar(KEY_VALUE, sentence, stop_reason="max_tokens")
    assert cut.value.text == sentence
    with pytest.raises(RefusedOutput):
        parse_grammar(KEY_VALUE, "I can't help with that.", stop_reason="refusal")
    with pytest.raises(UnexpectedStop) as other:
        parse_grammar(KEY_VALUE, sentence, stop_reason="surprise")
    assert other.value.raw_stop_reason == "surprise"


def test_a_sentence_comes_back_as_the_value() -> None:
    parsed = parse_grammar(KEY_VALUE, 'a=1\nb="two"', stop_reason="end_turn")
    assert parsed.value == parsed.text == 'a=1\nb="two"'
    assert parsed.stop_reason is sdk.StopReason.END_TURN
    stopped = parse_grammar(
        KEY_VALUE, "a=1", stop_reason="stop_sequence", clean_stops={sdk.StopReason.STOP_SEQUENCE}
    )
    assert stopped.raw_stop_reason == "stop_sequence"


def test_a_text_outside_the_language_is_a_grammar_violation_with_its_position() -> None:
    text = "a=1\nb=two"
    with pytest.raises(GrammarViolation) as raised:
        parse_grammar(KEY_VALUE, text, stop_reason="end_turn")
    error = raised.value
    assert (error.position, error.line, error.column) == (6, 2, 3)
    assert error.text == text and error.stop_reason is sdk.StopReason.END_TURN
    assert "KeyValue" in str(error) and "'two'" in str(error)
    assert error.violations and error.violations[0].keyword == "grammar"


def test_a_text_cut_inside_a_literal_misses_at_its_end() -> None:
    grammar = Grammar("Keyword", lark='start: "SELECT " "*"\n')
    miss = recognize(grammar, "SELE")
    assert miss is not None and miss.at_end and miss.position == 4
    wrong = recognize(grammar, "SELX")
    assert wrong is not None and not wrong.at_end and wrong.position == 0
    quoted = 'a="unfinished'  # partway through a regex terminal
    cut = recognize(KEY_VALUE, quoted)
    assert cut is not None and cut.at_end and cut.position == len(quoted)
    astray = recognize(KEY_VALUE, 'a="x\n"')  # the regex excludes the newline
    assert astray is not None and not astray.at_end and astray.position == 2


def test_trailing_text_after_a_sentence_is_named() -> None:
    miss = recognize(KEY_VALUE, "a=1;")
    assert miss is not None and miss.position == 3
    assert "end of the text" in miss.describe("a=1;")


def test_undecodable_bytes_are_a_grammar_violation_after_the_stop_reason() -> None:
    with pytest.raises(GrammarViolation) as raised:
        parse_grammar(KEY_VALUE, b"a=\xff", stop_reason="end_turn")
    assert raised.value.position == 2 and "UTF-8" in str(raised.value)
    with pytest.raises(TruncatedOutput):
        parse_grammar(KEY_VALUE, b"a=\xff", stop_reason="max_tokens")
    assert parse_grammar(KEY_VALUE, b"a=1", stop_reason="end_turn").value == "a=1"


def test_wrong_argument_types_are_type_errors() -> None:
    with pytest.raises(TypeError, match=r"sdk\.Grammar"):
        parse_grammar("start: x", "x", stop_reason="end_turn")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str or bytes"):
        parse_grammar(KEY_VALUE, 12, stop_reason="end_turn")  # type: ignore[arg-type]


def test_checks_run_after_recognition_and_all_failures_are_reported() -> None:
    seen: list[dict[str, Any]] = []

    def records_context(text: str, context: Any) -> None:
        seen.append(dict(context))

    def no_zero(text: str, context: Any) -> None:
        if "=0" in text:
            raise ValueError("a value is zero")

    def breaks(text: str, context: Any) -> None:
        raise KeyError("missing")

    grammar = Grammar("Checked", lark=KEY_VALUE.lark, checks=[records_context, no_zero, breaks])
    with pytest.raises(CheckFailed) as raised:
        parse_grammar(grammar, "a=0", stop_reason="end_turn", source="doc", context={"k": 1})
    messages = [v.message for v in raised.value.violations]
    assert messages == ["no_zero: a value is zero", "breaks: KeyError: 'missing'"]
    assert seen == [{"source": "doc", "k": 1}]
    assert raised.value.text == "a=0"
    with pytest.raises(GrammarViolation):  # recognition first: the checks never see non-sentences
        parse_grammar(grammar, "a=", stop_reason="end_turn")
    assert len(seen) == 1


def test_long_and_deep_texts_are_recognized_without_recursion_errors() -> None:
    nested = Grammar("Nested", lark='start: "(" start ")" | "x"\n')
    depth = 5000
    assert recognize(nested, "(" * depth + "x" + ")" * depth) is None
    miss = recognize(nested, "(" * depth + "x" + ")" * (depth - 1))
    assert miss is not None and miss.at_end
    long_text = "\n".join(f"k{i}={i}" for i in range(5000))
    assert recognize(KEY_VALUE, long_text) is None


@pytest.mark.parametrize(
    "text", ["", "a", "a=", "=1", "a=1\n", "A=1", 'a="x\ny"', "a=1\n\nb=2", "a=1 ", "a=1\nb=2"]
)
def test_the_recognizer_agrees_with_llguidance(text: str) -> None:
    assert (recognize(KEY_VALUE, text) is None) == lark_accepts(KEY_VALUE.lark, text)


@pytest.mark.parametrize(
    ("lark", "text", "expected"),
    [
        ("start: A\nA: /a|ab/\n", "ab", True),  # leftmost-longest, not Python's first branch
        ("start: A\nA: /ab|a/\n", "a", True),
        ('start: A B\nA: /a+/\nB: "a"\n', "aa", False),  # greedy terminals, in both
        ('start: A "x"\nA: /[a-z]+/\n', "abx", False),
        ('start: KW | ID\nKW: "select"\nID: /[a-z]+/\n', "selected", True),  # no keyword lexing
        ("start: /[\\]\\-]+/\n", "]-]", True),  # class specials escaped with a backslash
    ],
)
def test_lexing_semantics_agree_with_llguidance(lark: str, text: str, expected: bool) -> None:
    assert (recognize(Grammar("Lexing", lark=lark), text) is None) is expected
    assert lark_accepts(lark, text) is expected


# --- Lark -> GBNF ------------------------------------------------------------------------------


def test_repetition_is_written_without_left_recursion() -> None:
    gbnf = lark_to_gbnf('start: "a" ("," "a")*\n')
    assert "::= (" in gbnf and ")*" in gbnf
    for name, body in (line.split(" ::= ", 1) for line in gbnf.splitlines()):
        assert not body.startswith(name + " "), f"left-recursive rule {name}"
    for text, expected in [("a", True), ("a,a,a", True), ("a,", False), ("", False)]:
        assert grammar_accepts(gbnf, text) is expected


def test_a_gbnf_grammar_is_sent_as_written() -> None:
    assert to_gbnf(Grammar("Naive", gbnf=NAIVE_GBNF)) == NAIVE_GBNF


def test_ignored_terminals_become_a_flat_whitespace_rule_between_terminals() -> None:
    # llguidance skips %ignore'd text between terminals only: never before the first or after
    # the last; the client and the GBNF say the same.
    lark = 'start: "a" "b"\n%import common.WS\n%ignore WS\n'
    gbnf = lark_to_gbnf(lark)
    assert gbnf.startswith("root ::= start-first\n") and "\nws ::= [" in gbnf
    grammar = Grammar("Spaced", lark=lark)
    for text, expected in [
        ("ab", True), ("a \n b", True), (" a b", False), ("a b\t", False), ("a", False),
        ("a c b", False),
    ]:  # fmt: skip
        assert (recognize(grammar, text) is None) is expected, text
        assert lark_accepts(lark, text) is expected, text
        assert grammar_accepts(gbnf, text) is expected, text


def test_case_insensitive_literals_become_classes() -> None:
    gbnf = lark_to_gbnf('start: "select"i " *"\n')
    for text, expected in [("SELECT *", True), ("SeLeCt *", True), ("SELEC *", False)]:
        assert grammar_accepts(gbnf, text) is expected


@pytest.mark.parametrize(
    ("lark", "construct"),
    [
        ("start: /a(?=b)/ /b/\n", "lookaround"),
        ("start: /a b/x\n", "regex flag x"),
        ('start: /[a-z]+/ "x"\n', "greedy terminal split"),
        ("start: /^a/\n", "anchor"),
        ('start: a\na: b "x" | "y"\nb: a "z"\n', "left recursion a -> b -> a"),
        ("start: A\n%declare A\n", "%declare A"),
    ],
)
def test_unconvertible_lark_names_the_construct(lark: str, construct: str) -> None:
    with pytest.raises(UnconvertibleGrammar) as raised:
        lark_to_gbnf(lark)
    assert construct in raised.value.construct


# --- the accept/reject harness -----------------------------------------------------------------


def test_check_cases_reports_both_kinds_of_failure() -> None:
    report = check_cases(KEY_VALUE, accept=["a=1", "a=x", 'b="y"'], reject=["a=", "c=3"])
    assert not report.ok
    assert [(f.number, f.case) for f in report.rejected] == [(2, "a=x")]
    miss = report.rejected[0].miss
    assert miss is not None and miss.position == 2
    assert [(f.number, f.case) for f in report.accepted] == [(2, "c=3")]
    assert report.untested == []
    text = "\n".join(report.lines())
    assert "a=x" in text and "too permissive" in text


def test_a_missing_set_is_untested_not_passed() -> None:
    report = check_cases(KEY_VALUE, accept=["a=1"])
    assert report.ok and report.untested == ["reject"]
    assert any("untested" in line for line in report.lines())
    assert check_cases(KEY_VALUE, reject=[]).untested == ["accept"]


def test_case_files_in_both_formats() -> None:
    assert parse_cases("# comment\na=1\r\n\n  \nb=2\n") == ["a=1", "b=2"]
    assert parse_cases('["a=1\\nb=2", "#x"]', json_format=True) == ["a=1\nb=2", "#x"]
    with pytest.raises(ValueError, match="array of strings"):
        parse_cases('{"a": 1}', json_format=True)
    with pytest.raises(ValueError, match="JSON"):
        parse_cases("[", json_format=True)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_cli_reports_and_exits_1_on_either_failure(tmp_path: Path) -> None:
    grammar = tmp_path / "kv.lark"
    grammar.write_text(KEY_VALUE.lark)
    good = _write(tmp_path / "good.txt", ["a=1", 'b="x"'])
    bad = _write(tmp_path / "bad.txt", ["a=", "a=1;"])
    ok = runner.invoke(
        app, ["grammar", "test", str(grammar), "--accept", str(good), "--reject", str(bad)]
    )
    assert ok.exit_code == 0, ok.output
    assert "2/2" in ok.stdout and "untested" not in ok.stdout

    narrow = runner.invoke(app, ["grammar", "test", str(grammar), "--accept", str(bad)])
    assert narrow.exit_code == 1
    assert "#1 'a=': rejected" in narrow.stdout and "reject: untested" in narrow.stdout

    wide = runner.invoke(app, ["grammar", "test", str(grammar), "--reject", str(good)])
    assert wide.exit_code == 1 and "too permissive" in wide.stdout
    assert "accept: untested" in wide.stdout


def test_the_cli_refuses_to_test_nothing_and_names_a_case_file_it_cannot_read(
    tmp_path: Path,
) -> None:
    # On main: with neither --accept nor --reject it printed "ok" and exited 0 (both sides
    # untested), and a case file that is not UTF-8 was "'utf-8' codec can't decode ..."
    # without its name.
    grammar = tmp_path / "kv.lark"
    grammar.write_text(KEY_VALUE.lark)
    nothing = runner.invoke(app, ["grammar", "test", str(grammar)])
    assert nothing.exit_code == 2 and "--accept, --reject" in nothing.output
    assert "ok" not in nothing.stdout.split()
    latin = tmp_path / "latin.txt"
    latin.write_bytes("a=\"caf\xe9\"\n".encode("latin-1"))
    broken = tmp_path / "broken.json"
    broken.write_text("[")
    for path, said in ((latin, "not UTF-8"), (broken, "JSON")):
        shown = runner.invoke(app, ["grammar", "test", str(grammar), "--accept", str(path)])
        assert shown.exit_code == 2 and f"{path}: " in shown.output and said in shown.output


def test_the_cli_takes_modules_gbnf_files_and_prints_json(tmp_path: Path) -> None:
    naive = tmp_path / "naive.gbnf"
    naive.write_text(NAIVE_GBNF)
    cases = _write(tmp_path / "reject.txt", ["SELECT from FROM select;"])
    result = runner.invoke(app, ["grammar", "test", str(naive), "--reject", str(cases), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["grammar"] == "naive" and report["untested"] == ["accept"]
    assert [item["case"] for item in report["accepted"]] == ["SELECT from FROM select;"]

    by_module = runner.invoke(
        app, ["grammar", "test", "contracts.sql:SELECT_QUERY", "--reject", str(cases)]
    )
    assert by_module.exit_code == 0, by_module.output


@pytest.mark.parametrize(
    "arguments",
    [
        ["grammar", "test", "contracts.sql:NOPE"],
        ["grammar", "test", "contracts.no_such_module:X"],
        ["grammar", "test", "sdk"],  # holds no grammar
        ["grammar", "test", "contracts.sql:SELECT_QUERY", "--accept", "/no/such/file.txt"],
    ],
)
def test_the_cli_exits_2_when_it_cannot_run(arguments: list[str]) -> None:
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2, result.output


def test_the_cli_rejects_an_invalid_grammar_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.lark"
    broken.write_text("start: nothing_here\n")
    result = runner.invoke(app, ["grammar", "test", str(broken)])
    assert result.exit_code == 2 and "not a valid Lark grammar" in result.stderr


def test_recognition_needs_no_local_extra() -> None:
    # In a fresh interpreter where llguidance and llama_cpp cannot be imported at all.
    script = """
import sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("llguidance", "llama_cpp", "numpy"):
            raise ImportError(f"{name} is blocked")
        return None

sys.meta_path.insert(0, Blocked())
from contracts.sql import SELECT_QUERY
from sdk.grammar import parse_grammar, to_gbnf
from sdk.grammar.wire import openai_custom_tool
parse_grammar(SELECT_QUERY, 'SELECT * FROM "orders" LIMIT 1', stop_reason="end_turn")
to_gbnf(SELECT_QUERY)
openai_custom_tool(SELECT_QUERY)
print("ok")
"""
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
