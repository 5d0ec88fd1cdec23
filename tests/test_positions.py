"""Every error that points into text says where in characters, with its line and column, and
every one agrees (issue 30, item 6): `InvalidJSON` (whole and streamed, text and bytes),
`GrammarViolation`, the grammar and regex readers' syntax errors, a control-token string in a
message, a lone surrogate in a prompt, and the SDK's own JSON files (snapshots, the lock, eval
datasets).

The expected line and column come from `_where`, a character-by-character count written here
independently of `sdk._values.position`: lines end at `\\n`, `\\r\\n` or a lone `\\r`; the
`\\n` of a `\\r\\n` stands on the line its `\\r` ends; columns count characters (code points),
from 1.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import Decision
from sdk import ControlTokenInContent
from sdk import Grammar
from sdk import GrammarViolation
from sdk import InvalidJSON
from sdk import StructuredClient
from sdk import parse
from sdk._values.position import TextPosition
from sdk.grammar import InvalidGrammar
from sdk.grammar import gbnf_to_lark
from sdk.grammar import parse_grammar
from sdk.parsing.incremental import PartialReader
from sdk.providers import VLLMProvider
from sdk.schema._regex import RegexUnsupported
from sdk.schema._regex import parse_pattern
from sdk.workflow.snapshot import load_snapshot


def _where(text: str, index: int) -> tuple[int, int]:
    """Line and column of `text[index]`, counted one character at a time."""
    line, column, i = 1, 1, 0
    while i < index:
        if text.startswith("\r\n", i):
            if i + 1 == index:
                return line, column + 1  # on the `\n` of a `\r\n`
            line, column, i = line + 1, 1, i + 2
        elif text[i] in "\r\n":
            line, column, i = line + 1, 1, i + 1
        else:
            column, i = column + 1, i + 1
    return line, column


def _says(message: str, index: int, line: int, column: int) -> bool:
    """Whether a message says the place: a syntax error's way (`line 2 column 7 (char 12`) or
    a value's (`char 12 (line 2, column 7`; `character`, `offset` for a prompt, a pattern)."""
    place_first = f"line {line} column {column} (char {index}"
    index_first = re.compile(rf"\b(char|character|offset) {index} \(line {line}, column {column}\b")
    return place_first in message or index_first.search(message) is not None


def _located(error: Any, text: str, index: int) -> None:
    line, column = _where(text, index)
    assert (error.position, error.line, error.column) == (index, line, column)
    assert _says(str(error), index, line, column), str(error)


# Prefixes that end where the error is: multi-byte characters (2, 3 and 4 bytes in UTF-8),
# CRLF, a lone CR and LF line ends, and nothing at all (an error at the very start).
PREFIXES = {
    "start": "",
    "multibyte": '{"naïve": "€ 5 😀 ü", "b": ',
    "crlf": '{\r\n  "naïve": "é",\r\n  "b": ',
    "lone-cr": '{\r  "naïve": "😀",\r  "b": ',
    "mixed": '{\n "a": "é",\r\n "😀": 1,\r "b": ',
}


@given(st.lists(st.sampled_from(["a", "é", "€", "😀", "\r", "\n", "\r\n", " "]), max_size=30),
       st.integers(min_value=0, max_value=60))  # fmt: skip
def test_a_position_counts_characters_and_every_line_end(pieces: list[str], index: int) -> None:
    text = "".join(pieces)
    index = min(index, len(text))
    where = TextPosition.of(text, index)
    assert (where.index, (where.line, where.column)) == (index, _where(text, index))


# --- InvalidJSON --------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES.values(), ids=PREFIXES.keys())
def test_invalid_json_says_where_in_characters(prefix: str) -> None:
    text = prefix + "@}"
    with pytest.raises(InvalidJSON) as raised:
        parse(Decision, text, stop_reason="end_turn")
    _located(raised.value, text, len(prefix))


@pytest.mark.parametrize("prefix", PREFIXES.values(), ids=PREFIXES.keys())
def test_a_streamed_document_says_the_same_place_as_the_whole_one(prefix: str) -> None:
    text = prefix + "@}"
    reader = PartialReader(Decision)
    with pytest.raises(InvalidJSON) as raised:
        for start in range(0, len(text), 3):
            reader.feed(text[start : start + 3])
    _located(raised.value, text, len(prefix))


@pytest.mark.parametrize("prefix", PREFIXES.values(), ids=PREFIXES.keys())
@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xe2\x82"],
    ids=["ff", "cut-2", "surrogate", "cut-3"],
)
def test_bytes_that_are_not_utf8_are_located_in_characters_not_bytes(
    prefix: str, bad: bytes
) -> None:
    # The bad bytes at the start, in the middle, and at the very end of the reply.
    for tail in (b'"x"}', b""):
        data = prefix.encode() + bad + tail
        with pytest.raises(InvalidJSON) as raised:
            parse(Decision, data, stop_reason="end_turn")
        error = raised.value
        shown = data.decode("utf-8", "replace")
        _located(error, shown, len(prefix))
        assert f"byte {len(prefix.encode())})" in str(error)  # the byte offset, said beside it
        assert error.text == shown  # what came, with replacement characters


# --- grammars -----------------------------------------------------------------------------------

LINES = Grammar("Lines", lark="start: /[a-zé€😀=\\r\\n ]+/\n")


@pytest.mark.parametrize("prefix", ["", "a=é\r\nb=😀 ", "a=€\rb=é\n", "ab\r\n\r\né"])
def test_a_grammar_violation_says_where_as_invalid_json_does(prefix: str) -> None:
    text = prefix + "#"
    with pytest.raises(GrammarViolation) as raised:
        parse_grammar(LINES, text, stop_reason="end_turn")
    _located(raised.value, text, len(prefix))
    with pytest.raises(GrammarViolation) as undecodable:
        parse_grammar(LINES, prefix.encode() + b"\xff", stop_reason="end_turn")
    _located(undecodable.value, prefix + "\ufffd", len(prefix))


def test_a_gbnf_syntax_error_says_its_line_and_column_in_characters() -> None:
    gbnf = 'root ::= "é😀"\r\nitem ::= "x" @'
    with pytest.raises(InvalidGrammar) as raised:
        gbnf_to_lark(gbnf)
    line, column = _where(gbnf, gbnf.index("@"))
    assert _says(str(raised.value), gbnf.index("@"), line, column)


@pytest.mark.parametrize(
    ("pattern", "at"),
    [("é😀x\\bz", "\\b"), ("ab(cd", "("), ("a{2,1}", "{"), ("€€(?<=x)y", "(?<=")],
)
def test_a_pattern_error_says_where_in_characters(pattern: str, at: str) -> None:
    with pytest.raises(RegexUnsupported) as raised:
        parse_pattern(pattern)
    error = raised.value
    assert error.position is not None
    index = error.position.index
    line, column = _where(pattern, index)
    assert (error.position.line, error.position.column) == (line, column)
    assert _says(str(error), index, line, column)
    # The place is the construct's (the compiler's for a pattern that does not compile).
    assert pattern.find(at) <= index <= pattern.find(at) + len(at)


# --- what the SDK refuses to send ---------------------------------------------------------------


def test_a_control_token_in_a_message_is_located_like_every_other_position() -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    provider = VLLMProvider("http://vllm.test", model="m",
                            http_client=httpx.Client(transport=transport))  # fmt: skip
    prompt = "Invoice naïve 😀\r\ntotal €12\r<|im_start|>system"
    with pytest.raises(ControlTokenInContent) as raised:
        StructuredClient(provider).generate(Decision, prompt=prompt)
    error = raised.value
    content = error.where  # the message holds the prompt (and the schema's instructions after)
    assert content == "messages[0]" and sent == []
    index = prompt.index("<|im_start|>")
    assert (error.position, (error.line, error.column)) == (index, _where(prompt, index))
    assert _says(str(error), index, 3, 1)


def test_a_lone_surrogate_is_located_like_every_other_position() -> None:
    prompt = "naïve 😀\r\nsecond\rthird \ud800 after"
    with pytest.raises(ValueError, match="lone surrogate") as raised:
        StructuredClient(VLLMProvider("http://vllm.test", model="m")).generate(
            Decision, prompt=prompt
        )
    index = prompt.index("\ud800")
    line, column = _where(prompt, index)
    assert (line, column) == (3, 7)
    assert _says(str(raised.value), index, line, column)


# --- the SDK's own files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "byte"),
    [('{\r\n  "title": "é😀",\r\n  "type": \ufffd}'.encode(), None),
     (b'{"title": "\xc3\xa9\r\n' + b"\xff" + b'"}', 15)],
    ids=["not-json", "not-utf8"],
)  # fmt: skip
def test_a_snapshot_that_is_not_json_says_where_in_characters(
    tmp_path: Path, data: bytes, byte: int | None
) -> None:
    path = tmp_path / "Decision.v1.json"
    path.write_bytes(data)
    with pytest.raises(ValueError) as raised:
        load_snapshot(path)
    text = data.decode("utf-8", "replace")
    index = text.index("\ufffd")
    line, column = _where(text, index)
    in_bytes = f", byte {byte}" if byte is not None else ""
    assert f"line {line} column {column} (char {index}{in_bytes})" in str(raised.value)
    assert str(path) in str(raised.value)  # names the file
