"""Spans that are whole (issue 32): a `Verbatim` value starts and ends at word boundaries of the
source and holds a word, in the check after parsing and in both grounded grammars (llguidance's
Lark and llama.cpp's GBNF, each on its own engine's parser)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from sdk import CheckFailed
from sdk import Contract
from sdk import Verbatim
from sdk import parse
from sdk.schema.canonical import shared_schema
from sdk.schema.grounding import grounded_gbnf
from sdk.schema.grounding import grounded_lark
from sdk.schema.grounding import source_chunks
from sdk.schema.grounding import whole_span
from sdk.schema.grounding._lark import COMPACT_JSON

SOURCE = (
    "Kestrel Express will deliver parcel RR724800714FR (2.9 kg, 1 of 2) on 03/04/2026 at 10:30. "
    "Order FH-5079207. Questions: ops@kestrel-express.com, O'Brien Ltd., 1,250.00 EUR"
)


class Copy(Contract):
    value: Verbatim | None


class Tracking(Contract):
    number: Verbatim | None = Field(pattern=r"^[A-Z]{2}[0-9]{9}[A-Z]{2}$")


WHOLE = [
    "Kestrel Express", "Kestrel", "RR724800714FR", "2.9 kg", "2.9", "03/04/2026", "10:30",
    "FH-5079207", "Order FH-5079207.", "ops@kestrel-express.com", "O'Brien Ltd.", "1,250.00",
    "(2.9 kg, 1 of 2)",
]  # fmt: skip
CUT = [
    "Kestrel Expres",  # inside a word
    "estrel Express",
    ".9",  # the tail of a number
    "2.",  # the head of one
    "9 kg",
    "5079207",  # inside an id joined by "-"
    "FH",
    "30",  # inside a time
    "04/2026",  # inside a date
    "250.00",  # inside a number with a thousands separator
    "kestrel-express.com",  # inside an address
    ".",  # no word at all
    ". ",
    ", ",
    " Express",  # whitespace at an edge
]


@pytest.mark.parametrize("value", WHOLE)
def test_a_whole_span_is_copied(value: str) -> None:
    assert value in SOURCE and whole_span(value, SOURCE)
    parsed = parse(Copy, json.dumps({"value": value}), stop_reason="end_turn", source=SOURCE)
    assert parsed.value.value == value


@pytest.mark.parametrize("value", CUT)
def test_a_span_cut_inside_a_word_or_holding_no_word_fails_the_check(value: str) -> None:
    assert value in SOURCE and not whole_span(value, SOURCE)
    with pytest.raises(CheckFailed) as caught:
        parse(Copy, json.dumps({"value": value}), stop_reason="end_turn", source=SOURCE)
    violation = caught.value.violations[0]
    assert violation.pointer == "/value" and "not a whole span" in violation.message


def test_a_value_not_in_the_source_still_says_so() -> None:
    with pytest.raises(CheckFailed, match="not copied exactly"):
        parse(Copy, '{"value": "Royal Mail"}', stop_reason="end_turn", source=SOURCE)


def test_a_later_whole_occurrence_counts() -> None:
    # "Express" first appears inside "Expressway" (cut), then as a word of its own.
    source = "Expressway depot; Kestrel Express"
    assert whole_span("Express", source)
    assert not whole_span("Express", "Expressway depot")


@pytest.mark.parametrize(
    ("source", "value", "whole"),
    [
        # Han and kana: each character is a word of its own (no spaces to find words by).
        ("東京都渋谷区の倉庫から発送しました", "東京都", True),
        ("東京都渋谷区の倉庫から発送しました", "渋谷区", True),
        ("東京都渋谷区の倉庫から発送しました", "京", True),
        ("配送業者\uff1aヤマト運輸、追跡番号 1234-5678-9012", "ヤマト運輸", True),
        ("配送業者\uff1aヤマト運輸、追跡番号 1234-5678-9012", "1234-5678-9012", True),
        # A number written beside CJK text is still one word.
        ("配送業者\uff1aヤマト運輸、追跡番号 1234-5678-9012", "5678", False),
        ("配送業者\uff1aヤマト運輸、追跡番号 1234-5678-9012", "\uff1a", False),  # punctuation alone
        # Hangul is written with spaces: its words are whole words.
        ("한진택배 운송장 번호 123456", "한진택배", True),
        ("한진택배 운송장 번호 123456", "한진", False),
    ],
)
def test_cjk_text(source: str, value: str, whole: bool) -> None:
    assert value in source and whole_span(value, source) is whole


def test_chunks_of_unspaced_scripts_are_single_characters() -> None:
    assert source_chunks("ヤマト運輸 RR1") == ["ヤ", "マ", "ト", "運", "輸", " ", "RR1"]


# --- while decoding: the grounded grammars ---


def _document(value: str | None) -> str:
    return json.dumps({"value": value}, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("value", WHOLE[:6] + CUT)
def test_the_lark_grammar_admits_whole_spans_only(value: str) -> None:
    from tests.grammar_support import lark_accepts

    grammar = grounded_lark(shared_schema(Copy), SOURCE, json_options=COMPACT_JSON)
    assert lark_accepts(grammar, _document(value)) is whole_span(value, SOURCE)
    assert lark_accepts(grammar, _document(None))


@pytest.mark.parametrize("value", WHOLE[:6] + CUT)
def test_the_gbnf_grammar_admits_whole_spans_only(value: str) -> None:
    from tests.grammar_support import grammar_accepts

    grammar = grounded_gbnf(shared_schema(Copy), SOURCE, whitespace="compact")
    assert grammar_accepts(grammar, _document(value)) is whole_span(value, SOURCE)


def test_a_pattern_is_applied_to_whole_spans() -> None:
    from tests.grammar_support import grammar_accepts
    from tests.grammar_support import lark_accepts

    # The id inside a longer word is no span; standing alone it is.
    source = "Ref XRR724800714FR and RR724800714FR"
    lark = grounded_lark(shared_schema(Tracking), source, json_options=COMPACT_JSON)
    gbnf = grounded_gbnf(shared_schema(Tracking), source, whitespace="compact")
    document = json.dumps({"number": "RR724800714FR"}, separators=(",", ":"))
    assert lark_accepts(lark, document) and grammar_accepts(gbnf, document)
    cut = "Ref XRR724800714FRx"
    lark = grounded_lark(shared_schema(Tracking), cut, json_options=COMPACT_JSON)
    gbnf = grounded_gbnf(shared_schema(Tracking), cut, whitespace="compact")
    assert not lark_accepts(lark, document) and not grammar_accepts(gbnf, document)
    # No whole span has the id's form: null is all that is left.
    assert lark_accepts(lark, '{"number":null}') and grammar_accepts(gbnf, '{"number":null}')


# --- finding a value's occurrences: every one, in time linear however the value repeats ---


def _every_start(value: str, source: str, low: int, high: int) -> list[int]:
    """Every start of `value` in `source[low:high]`, the slow way (a comparison per place)."""
    return [at for at in range(low, high) if source.startswith(value, at, high)]


@given(
    value=st.text("ab", min_size=1, max_size=6),
    source=st.text("ab ", max_size=80),
    low=st.integers(0, 90),
    high=st.integers(0, 90),
)
def test_occurrences_are_every_start_of_the_value_overlapping_ones_included(
    value: str, source: str, low: int, high: int
) -> None:
    from sdk.schema.grounding._spans import _scanned
    from sdk.schema.grounding._spans import occurrences

    expected = _every_start(value, source, low, min(high, len(source)))
    assert list(occurrences(value, source, low, high)) == expected
    # The one-pass scan `occurrences` moves to once overlaps have cost too much, on its own.
    assert list(_scanned(value, source, low, min(high, len(source)))) == expected


def test_occurrences_move_to_one_pass_midway_and_miss_nothing() -> None:
    from sdk.schema.grounding._spans import occurrences

    # A value that overlaps itself at every other character, in a long run of it with breaks:
    # `str.find` restarted after each occurrence spends its allowance within the first run,
    # and the one-pass scan takes the rest (the runs after the breaks included).
    value = "ab" * 300 + "a"
    source = "ab" * 3_000 + "x" + "ab" * 3_000 + "a" + "b" * 7 + "ab" * 400
    expected = _every_start(value, source, 0, len(source))
    assert len(expected) > 2_000
    assert list(occurrences(value, source)) == expected
    assert list(occurrences(value, source, 5, len(source) - 3)) == _every_start(
        value, source, 5, len(source) - 3
    )
    with pytest.raises(ValueError, match="empty"):
        list(occurrences("", source))


_REPEATED_VALUES = """
import json
from sdk import CheckFailed, Contract, Verbatim, parse

class Copy(Contract):
    value: Verbatim | None

# A 100 KB value of one letter inside a 1 MB word of it: found at 900,000 places, none whole.
value, source = "x" * 100_000, "x" * 1_000_000
from sdk.schema.grounding import whole_span
print(whole_span(value, source))
try:
    parse(Copy, json.dumps({"value": value}), stop_reason="end_turn", source=source)
except CheckFailed as error:
    print(sorted({v.keyword for v in error.violations}))
# The same letter words apart: found, whole, at every other character.
print(whole_span(" ".join("x" * 50_000), " ".join("x" * 500_000)))
"""


def test_a_value_repeating_itself_in_a_document_that_repeats_it_is_checked_in_linear_time() -> None:
    # Restarting `str.find` one character after each occurrence compared the whole value again
    # at each of 900,000 places (a 20 KB value in a 200 KB word took 8 s; this, over 2 minutes
    # for its first line alone; now about 1 s in all). The check runs in a child process with a
    # bounded wait.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _REPEATED_VALUES], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False", "['x-verbatim']", "True"]
