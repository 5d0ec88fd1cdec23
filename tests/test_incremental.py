"""PartialReader: streaming partial objects from a JSON document cut anywhere, in linear time.

The central property: the snapshot after any prefix of the text is the same however that
prefix was cut into chunks. `reference` computes it by reading each prefix in one piece (which
also exercises the C fast paths); every chunking must then hand out exactly the snapshots
whose visible state (value and completeness) changed, at the same text lengths.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import model_validator

import sdk
from contracts import Decision
from contracts import InvoiceExtraction
from sdk import Contract
from sdk import InvalidJSON
from sdk import Partial
from sdk import PartialReader
from sdk.parsing import MAX_DEPTH
from sdk.parsing import Partial as PartialFromParsing
from sdk.parsing import PartialReader as PartialReaderFromParsing

# A document with every kind of token, escapes of every kind, and nesting.
DOCUMENT = json.dumps(
    {
        "reasoning": 'Tab\there, "quoted", back\\slash, caf\u00e9, emoji \U0001f600, slash /',
        "answer": "approve",
        "confidence": "high",
        "numbers": [0, -0, 7, -12, 3.25, -0.5, 1e5, 2.5e-3, 12345678901234567890],
        "flags": [True, False, None],
        "empty": {"object": {}, "array": [], "string": ""},
        "nested": {"a": [{"b": [1, {"c": "d"}]}, []]},
    },
    ensure_ascii=True,
    indent=1,
)


def visible(partial: Partial[Any] | None) -> tuple[Any, frozenset[str]] | None:
    """What a consumer sees: the value and which parts of it are complete."""
    return None if partial is None else (partial.value, partial.complete)


def reference(document: str) -> list[Partial[Any] | None]:
    """The snapshot after each prefix of `document`, each prefix read in one piece."""
    snapshots: list[Partial[Any] | None] = [None]
    for end in range(1, len(document) + 1):
        reader = PartialReader(Decision)
        reader.feed(document[:end])
        snapshots.append(reader.latest)
    return snapshots


def check_chunking(document: str, chunks: list[str], refs: list[Partial[Any] | None]) -> int:
    """Feed `chunks`; assert the snapshots match `refs` at every chunk end. Returns how many."""
    assert "".join(chunks) == document
    reader = PartialReader(Decision)
    last: Partial[Any] | None = None
    emitted = 0
    position = 0
    for chunk in chunks:
        position += len(chunk)
        got = reader.feed(chunk)
        want = refs[position]
        if visible(want) == visible(last):
            assert got is None, f"snapshot at {position} although nothing visible changed"
            continue
        assert got is not None, f"no snapshot at {position} although {visible(want)} changed"
        assert want is not None
        assert got.text_length == position
        assert visible(got) == visible(want)
        assert got.open_pointer == want.open_pointer
        assert got.done == want.done
        last = got
        emitted += 1
    final = reader.finish()
    assert final.done
    assert final.value == json.loads(document)
    assert reader.text == document
    return emitted


DOCUMENT_REFS = reference(DOCUMENT)


# --- The same partial sequence however the text is cut ---


def test_one_character_chunks_give_the_reference_sequence() -> None:
    emitted = check_chunking(DOCUMENT, list(DOCUMENT), DOCUMENT_REFS)
    assert emitted > 100  # every string character, container and value shows up


def test_every_two_way_split_gives_the_reference_sequence() -> None:
    for split in range(len(DOCUMENT) + 1):
        chunks = [part for part in (DOCUMENT[:split], DOCUMENT[split:]) if part]
        check_chunking(DOCUMENT, chunks, DOCUMENT_REFS)


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(DOCUMENT) - 1), max_size=40))
def test_random_chunks_give_the_reference_sequence(cuts: list[int]) -> None:
    bounds = [0, *sorted(set(cuts)), len(DOCUMENT)]
    chunks = [DOCUMENT[a:b] for a, b in itertools.pairwise(bounds)]
    check_chunking(DOCUMENT, chunks, DOCUMENT_REFS)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=120, deadline=None)
@given(
    value=_json_values,
    ensure_ascii=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    data=st.data(),
)
def test_any_json_value_cut_anywhere_reads_as_json_loads(
    value: Any, ensure_ascii: bool, indent: int | None, data: st.DataObject
) -> None:
    document = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(document)), max_size=12))
    bounds = sorted({0, len(document), *cuts})
    chunks = [document[a:b] for a, b in itertools.pairwise(bounds)]
    check_chunking(document, chunks, reference(document))


# --- Escapes, surrogate pairs, numbers and literals cut at every position ---

ESCAPES = '{"s": "a\\ud83d\\ude00b\\u00e9\\n\\"\\\\\\/\\b\\f\\r\\t\\ud83dx\\udc00y\\ud83d\\u0041"}'


def test_escapes_and_surrogate_pairs_split_at_every_position() -> None:
    expected = json.loads(ESCAPES)
    assert "\U0001f600" in expected["s"] and "\ud83dx" in expected["s"]  # a pair, a lone half
    refs = reference(ESCAPES)
    for first in range(1, len(ESCAPES)):
        for second in range(first + 1, len(ESCAPES)):
            check_chunking(
                ESCAPES, [ESCAPES[:first], ESCAPES[first:second], ESCAPES[second:]], refs
            )


def test_a_cut_surrogate_pair_never_shows_half_a_character() -> None:
    reader = PartialReader(Decision)
    reader.feed('{"reasoning": "x\\ud83d')
    assert reader.feed("\\ude") is None  # nothing decodable yet: the prefix is still "x"
    partial = reader.feed("00")
    assert partial is not None
    assert partial.value == {"reasoning": "x\U0001f600"}


NUMBERS = "[0, -0, 12, -3.25, 1e5, 2E-3, 1.5e+10, -0.0e0, 123456789012345678901234567890]"


def test_numbers_split_at_every_position_keep_value_and_type() -> None:
    expected = json.loads(NUMBERS)
    refs = reference(NUMBERS)
    for split in range(1, len(NUMBERS)):
        check_chunking(NUMBERS, [NUMBERS[:split], NUMBERS[split:]], refs)
    final = PartialReader(Decision)
    for char in NUMBERS:
        final.feed(char)
    value = final.finish().value
    assert value == expected
    assert [type(item) for item in value] == [type(item) for item in expected]


def test_a_number_is_shown_only_once_a_delimiter_closes_it() -> None:
    reader = PartialReader(Decision)
    reader.feed('{"reasoning": "r", "n": 12')
    assert reader.feed("3") is None  # 123 may still become 1234
    partial = reader.latest
    assert partial is not None
    assert "n" not in partial.value
    assert partial.open_pointer == "/n"  # started, but hidden until closed
    assert not partial.is_complete("/n")
    closed = reader.feed(",")
    assert closed is not None
    assert closed.value == {"reasoning": "r", "n": 123}
    assert closed.is_complete("/n")


def test_a_bare_number_document_closes_at_the_end_of_the_text() -> None:
    reader = PartialReader(Decision)
    assert reader.feed("-12") is None
    assert reader.feed(".5") is None
    final = reader.finish()
    assert final.done and final.value == -12.5


def test_literals_split_at_every_position() -> None:
    document = '[true, false, null, {"t": true}]'
    refs = reference(document)
    for split in range(1, len(document)):
        check_chunking(document, [document[:split], document[split:]], refs)


# Every kind of whitespace around every token, and each delimiter after a number: the reader's
# patterns read a whole member (`, "name": 12`) in one step, so where one stops matters.
SPACED = (
    '\r\n{\t"a"\t:\t1\t,\r\n "b" :-2.5e3\n, "c":\r[0\t,1.5 ,-0\r]\t,"d"\n:\n'
    '{"e":true\r}\t, "f":"x y" ,"g":null , "h":[12]}\n\t '
)


def test_whitespace_and_delimiters_around_members_split_at_every_position() -> None:
    assert json.loads(SPACED)["c"] == [0, 1.5, 0]
    refs = reference(SPACED)
    for split in range(1, len(SPACED)):
        check_chunking(SPACED, [SPACED[:split], SPACED[split:]], refs)
    for first in range(1, len(SPACED), 3):
        for second in range(first + 1, len(SPACED), 2):
            chunks = [SPACED[:first], SPACED[first:second], SPACED[second:]]
            check_chunking(SPACED, chunks, refs)


# --- What a snapshot says ---


def test_snapshot_shows_the_open_string_prefix_and_what_is_complete() -> None:
    reader = PartialReader(Decision)
    partial = reader.feed('{"reasoning": "The request is fine", "answer": "appr')
    assert partial is not None
    assert partial.value == {"reasoning": "The request is fine", "answer": "appr"}
    assert partial.complete == frozenset({"/reasoning"})
    assert partial.is_complete("/reasoning")
    assert not partial.is_complete("/answer")
    assert not partial.is_complete("")
    assert not partial.is_complete("/confidence")  # not there yet
    assert partial.open_pointer == "/answer"
    assert partial.get("/answer") == "appr"
    assert partial.get("/confidence", "absent") == "absent"
    assert partial.text_length == len(reader.text)
    assert not partial.done
    assert partial.contract is Decision


def test_property_names_and_punctuation_change_nothing_visible() -> None:
    reader = PartialReader(Decision)
    assert reader.feed('{"reasoning": "r"') is not None
    assert reader.feed(', "answ') is None
    assert reader.feed('er"') is None
    assert reader.feed(" :  ") is None
    started = reader.feed('"')
    assert started is not None
    assert started.value == {"reasoning": "r", "answer": ""}
    assert started.open_pointer == "/answer"


def test_snapshots_are_read_only() -> None:
    partial = PartialReader(Decision).feed('{"reasoning": "x"}')
    assert partial is not None
    with pytest.raises(AttributeError):
        partial.value = {}  # type: ignore[misc]
    with pytest.raises(AttributeError):
        partial.text_length = 0  # type: ignore[misc]


def test_final_snapshot_is_complete_everywhere() -> None:
    reader = PartialReader(Decision)
    for char in DOCUMENT:
        reader.feed(char)
    final = reader.finish()
    assert final.done
    assert final.open_pointer is None
    assert final.is_complete("")
    assert final.is_complete("/nested/a/0/b/1/c")
    assert "" in final.complete and "/empty/array" in final.complete
    assert reader.finish() is final  # idempotent


def test_snapshots_never_change_after_they_are_handed_out() -> None:
    document = '{"a": [1, {"b": "xy"}, [2]], "a": {"c": "late"}, "d": "text"}'
    eager = [json.dumps(p.value) for p in _snapshots(document) if p is not None]
    late = [p for p in _snapshots(document) if p is not None]
    # The second run's values are built only now, after the reader has moved on.
    assert [json.dumps(p.value) for p in late] == eager
    backwards = [p for p in _snapshots(document) if p is not None]
    assert [json.dumps(p.value) for p in reversed(backwards)] == eager[::-1]
    assert late[-1].value == json.loads(document)  # a repeated name: the last one wins


def _snapshots(document: str) -> list[Partial[Any] | None]:
    reader = PartialReader(Decision)
    found = [reader.feed(char) for char in document]
    found.append(reader.finish())
    return found


def _all_pointers(value: Any, pointer: str = "") -> list[str]:
    found = [pointer]
    if isinstance(value, dict):
        for name, item in value.items():
            escaped = name.replace("~", "~0").replace("/", "~1")
            found += _all_pointers(item, f"{pointer}/{escaped}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _all_pointers(item, f"{pointer}/{index}")
    return found


def _check_lookups(document: str) -> None:
    """`is_complete` and `get` (which read open containers in place, never building `.value`
    for a closed value) agree with `.complete` and `.value` at every snapshot of a stream, read
    when it is handed out and again once the reader has moved on (the containers have grown)."""
    final = json.loads(document)
    pointers = [*_all_pointers(final), "/absent", "/0/absent", "/nested/a/9"]
    reader = PartialReader(Decision)
    snapshots = [reader.feed(char) for char in document]
    snapshots.append(reader.finish())
    for partial in snapshots:
        if partial is None:
            continue
        reference, lookups = _copy(partial), _copy(partial)  # `.value` built late, or never
        for pointer in pointers:
            complete = lookups.is_complete(pointer)
            assert complete == (pointer in reference.complete), pointer
            assert lookups.get(pointer, "<absent>") == _get(reference.value, pointer), pointer
            if complete:
                untouched = _copy(partial)
                assert untouched.get(pointer) == _get(reference.value, pointer)
                assert not hasattr(untouched, "_value")  # a closed value: nothing built


def _copy(partial: Partial[Any]) -> Partial[Any]:
    """The same snapshot, with nothing built yet."""
    return Partial(partial._state)


def _get(value: Any, pointer: str) -> Any:
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return "<absent>"
    return value


def test_is_complete_and_get_agree_with_the_built_value_at_every_snapshot() -> None:
    _check_lookups(DOCUMENT)
    _check_lookups('{"a": [1, {"b": "xy"}, [2]], "a": {"c": "late", "c": 3}, "d": "text"}')
    _check_lookups('[[[]], [{"k": [true, null]}, -1.5], "s", {"x~/y": {"": 0}}]')


@settings(max_examples=60, deadline=None)
@given(value=_json_values)
def test_lookups_agree_with_the_built_value_for_any_json(value: Any) -> None:
    _check_lookups(json.dumps(value))


# --- No validation on partial snapshots ---


class Audited(Contract):
    """A contract whose cross-field validator records every call."""

    calls: ClassVar[list[str]] = []

    reasoning: str
    total: int

    @model_validator(mode="after")
    def _record(self) -> Audited:
        Audited.calls.append(self.reasoning)
        return self


def test_partial_snapshots_never_run_the_contract_or_its_validators() -> None:
    document = '{"reasoning": "counts every call", "total": 3}'
    Audited.calls.clear()
    reader = PartialReader(Audited)
    for char in document:
        partial = reader.feed(char)
        if partial is not None:
            assert isinstance(partial.value, dict)  # plain JSON, not an `Audited`
            assert partial.complete is not None
    final = reader.finish()
    assert final.value == {"reasoning": "counts every call", "total": 3}
    assert Audited.calls == []
    # The same text through the parser does run it: the check above could fail.
    parsed = sdk.parse(Audited, reader.text, stop_reason="end_turn")
    assert parsed.value.total == 3
    assert Audited.calls == ["counts every call"]


# --- Malformed input ---


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ('{"a" 1}', 5),  # no colon
        ("[1,]", 3),  # trailing comma in an array
        ('{"a": 1,}', 8),  # trailing comma in an object
        ("[01]", 2),  # leading zero
        ("[-]", 2),
        ("[1.]", 3),
        ("[1e]", 3),
        ("[1 2]", 3),
        ("[1}", 2),  # mismatched bracket
        ('{"a": tru e}', 9),
        ('"\\x"', 2),  # unknown escape
        ('"\\u12G4"', 5),  # non-hex digit
        ('"a\nb"', 2),  # raw control character in a string
        ("NaN", 0),
        ("{} x", 3),  # extra data
        ("{'a': 1}", 1),  # single quotes
        ('{"a": 01}', 7),  # the same inside a member (read by a member's pattern)
        ('{"a": 1.}', 8),
        ('{"a": 1.5.3}', 9),
        ('{"a": -x}', 7),
        ('{"a": 2, "b" 3}', 13),
        ('{"a": 2 "b": 3}', 8),
    ],
)
def test_malformed_input_raises_where_it_becomes_impossible(text: str, position: int) -> None:
    with pytest.raises(ValueError):  # the reference agrees (NaN included, as in sdk.parse)
        json.loads(text, parse_constant=_reject_constant)
    reader = PartialReader(Decision)
    for index, char in enumerate(text):
        if index < position:
            reader.feed(char)  # everything before the offending character is fine
            continue
        with pytest.raises(InvalidJSON) as caught:
            reader.feed(char)
        break
    error = caught.value
    assert error.position == position
    assert error.text == text[: position + 1]
    assert error.line == 1 + text.count("\n", 0, position)
    assert f"char {position}" in str(error)
    with pytest.raises(InvalidJSON):
        reader.feed("more")  # a broken reader stays broken


def test_error_position_counts_from_the_start_of_the_whole_text() -> None:
    reader = PartialReader(Decision)
    reader.feed('{\n  "reasoning": "fine",\n')
    with pytest.raises(InvalidJSON) as caught:
        reader.feed('  "answer" = 1}')
    assert caught.value.position == len('{\n  "reasoning": "fine",\n  "answer" ')
    assert (caught.value.line, caught.value.column) == (3, 12)


def test_finish_on_an_unclosed_document_raises_at_its_end() -> None:
    reader = PartialReader(Decision)
    reader.feed('{"reasoning": "cut sho')
    with pytest.raises(InvalidJSON) as caught:
        reader.finish()
    assert caught.value.position == len('{"reasoning": "cut sho')
    assert caught.value.text == '{"reasoning": "cut sho'
    assert reader.latest is not None and reader.latest.value == {"reasoning": "cut sho"}


# Cut right after a complete member or item, where every value read so far is whole: the
# document is still open (a reader that took "nothing pending" for "done" would accept it).
_CUT_AFTER_A_WHOLE_PART = [
    '{"reasoning": "fine"',
    '{"reasoning": "fine",',
    '{"reasoning": "fine", "answer": "approve"',
    '{"reasoning": "fine", "answer": "approve", "confidence": "high"',
    '{"vendor": "Acme", "line_items": [{"description": "a", "quantity": 1, "amount": 1.5}',
    '{"vendor": "Acme", "line_items": [{"description": "a", "quantity": 1, "amount": 1.5}]',
    '{"vendor": "Acme", "line_items": [{"description": "a", "quantity": 1, "amount": 1.5},',
    '{"vendor": "Acme", "total": 12',
    '{"vendor": "Acme", "total": 12.5',
]


@pytest.mark.parametrize("text", _CUT_AFTER_A_WHOLE_PART)
def test_finish_after_a_whole_member_of_an_open_document_raises(text: str) -> None:
    contract = InvoiceExtraction if "vendor" in text else Decision
    reader = PartialReader(contract)
    reader.feed(text)
    with pytest.raises(InvalidJSON) as caught:
        reader.finish()
    assert caught.value.position == len(text)
    assert caught.value.text == text
    assert "ended inside the document" in str(caught.value)
    with pytest.raises(InvalidJSON):  # and again: the reader stays failed
        reader.finish()


def test_finish_on_an_empty_text_raises() -> None:
    with pytest.raises(InvalidJSON):
        PartialReader(Decision).finish()


# --- Linear work: counted, never timed ---


def _invoice_document(items: int) -> str:
    value = InvoiceExtraction.example()
    value["line_items"] = [
        {"description": f'Line {i}: "quoted" caf\u00e9 \\ path', "quantity": i, "amount": i * 1.5}
        for i in range(items)
    ]
    return json.dumps(value, ensure_ascii=True)


@pytest.mark.parametrize("size", [1, 7, 16, 100, 1000, 10**6])
def test_every_character_is_read_a_bounded_number_of_times(size: int) -> None:
    document = _invoice_document(300)  # about 20 KB, escapes everywhere
    reader = PartialReader(InvoiceExtraction)
    chunks = [document[i : i + size] for i in range(0, len(document), size)]
    for chunk in chunks:
        reader.feed(chunk)
    assert reader.finish().value == json.loads(document)
    # Each chunk re-reads at most a cut escape (12 characters) and, through at most two
    # failed C-scanner attempts, the rest of its buffer twice: never the text from the start.
    assert reader.chars_scanned <= 3 * len(document) + 12 * len(chunks)
    if size < 128:  # no fast path: only cut escapes are read again
        assert reader.chars_scanned <= len(document) + 12 * len(chunks)


def test_nesting_up_to_the_limit_is_read_character_by_character() -> None:
    depth = MAX_DEPTH
    document = "[" * depth + "]" * depth
    reader = PartialReader(Decision)
    for char in document:
        reader.feed(char)
    final = reader.finish()
    assert len(final.complete) == depth
    assert final.is_complete("/0" * (depth - 1))
    assert reader.chars_scanned == len(document)


@pytest.mark.parametrize("chunk", [1, 64, 1_000_000])
def test_nesting_past_the_limit_is_invalid_json_where_it_starts(chunk: int) -> None:
    depth = 3_000  # past Python's recursion limit too
    document = "[" * depth + "]" * depth
    reader = PartialReader(Decision)
    with pytest.raises(InvalidJSON, match=f"nested deeper than {MAX_DEPTH} levels") as caught:
        for index in range(0, len(document), chunk):
            reader.feed(document[index : index + chunk])
    assert caught.value.position == MAX_DEPTH  # the bracket that opens one level too many


def test_plain_text_in_small_chunks_is_read_exactly_once() -> None:
    document = json.dumps({"reasoning": "word " * 2000, "answer": "approve", "confidence": "low"})
    reader = PartialReader(Decision)
    for index in range(0, len(document), 16):
        reader.feed(document[index : index + 16])
    reader.finish()
    assert reader.chars_scanned == len(document)


# --- API ---


def test_reader_and_snapshot_are_exported() -> None:
    assert PartialReaderFromParsing is PartialReader
    assert PartialFromParsing is Partial
    assert "PartialReader" in sdk.__all__ and "Partial" in sdk.__all__


def test_empty_chunks_change_nothing_and_feed_after_finish_is_refused() -> None:
    reader = PartialReader(Decision)
    assert reader.feed("") is None
    assert reader.feed("[1]") is not None
    assert reader.feed("") is None
    assert reader.feed("  \n") is None
    assert reader.finish().value == [1]
    with pytest.raises(RuntimeError):
        reader.feed("[]")
