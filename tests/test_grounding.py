"""The grounded-grammar builders, sans-IO: the source's chunks and their JSON escaping, the span
automaton, and the Lark (llguidance) and GBNF (llama.cpp) grammars in which a `Verbatim` or
`SourceQuote` string can only be a span of the source.

Acceptance is decided by llguidance over a byte-level vocabulary (no model: `tests.grammar_support`)
and, for GBNF, also by llama.cpp's own grammar engine where llama-cpp-python is installed.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import llguidance
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import Field

from sdk import Contract
from sdk import SourceQuote
from sdk import Verbatim
from sdk.schema.gbnf import UnsupportedSchema
from sdk.schema.grounding import COMPACT_JSON
from sdk.schema.grounding import GroundingUnsupported
from sdk.schema.grounding import escaped_chunks
from sdk.schema.grounding import grounded_gbnf
from sdk.schema.grounding import grounded_lark
from sdk.schema.grounding import is_grounded
from sdk.schema.grounding import source_chunks
from sdk.schema.grounding import span_automaton
from tests.grammar_support import _tokenizer
from tests.grammar_support import grammar_accepts
from tests.grammar_support import grammar_accepts_prefix
from tests.grammar_support import lark_accepts
from tests.strategies import from_schema

SOURCE = (
    'SHIPPING NOTICE\nCarrier: Royal Mail, "Tracked 48"\nTracking number: RR123456785GB\n'
    "Order ORD-55123 for Ana Lucía Restrepo \U0001f4e6 (C:\\depot\\bay 4)\tweight 2.5 kg\n"
)


class Line(Contract):
    sku: Verbatim
    qty: int = Field(ge=1, le=99)


class Notice(Contract):
    carrier: Verbatim | None = Field(description="The carrier, as written.")
    tracking_number: Verbatim | None = Field(pattern=r"^[A-Z]{2}[0-9]{9}[A-Z]{2}$")
    weight_kg: float | None = None
    lines: list[Line] = Field(max_length=3)
    note: str | None = Field(default=None, max_length=20)
    evidence: SourceQuote = ""


class Node(Contract):
    """Recursive, with a grounded string at every level."""

    label: Verbatim
    children: list[Node] = Field(default_factory=list, max_length=2)


SCHEMA = Notice.json_schema()
OPTIONS = dict(COMPACT_JSON)


def _plain_lark(schema: dict[str, Any]) -> str:
    """The ungrounded reference: the whole schema as llguidance's `%json`, the same options."""
    return "start: %json " + json.dumps({"x-guidance": OPTIONS, **schema}) + "\n"


def _prefix_ok(lark: str, text: str) -> bool:
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    matcher = llguidance.LLMatcher(_tokenizer(), grammar, log_level=0)
    return bool(matcher.consume_tokens(list(text.encode())))


# --- chunks and escaping ---


def test_chunks_join_back_and_cut_on_word_whitespace_and_punctuation() -> None:
    assert "".join(source_chunks(SOURCE)) == SOURCE
    # An id joined by `-` and a decimal number are one word each: never cut.
    assert source_chunks("Ltd., ORD-55123  x\n\ty 2.9") == [
        "Ltd", ".", ",", " ", "ORD-55123", "  ", "x", "\n\t", "y", " ", "2.9",
    ]  # fmt: skip
    assert source_chunks("a\U0001f4e6\U0001f4e6b") == ["a", "\U0001f4e6", "\U0001f4e6", "b"]
    assert source_chunks("") == []


@given(st.text())
def test_escaped_chunks_join_into_the_escaped_source_and_each_decodes_alone(text: str) -> None:
    chunks = escaped_chunks(text)
    joined = "".join(chunks)
    assert json.loads(f'"{joined}"') == text
    for chunk in chunks:  # no escape sequence is split between chunks
        assert json.loads(f'"{chunk}"') is not None


def test_escaping_covers_quotes_backslashes_controls_astral_and_lone_surrogates() -> None:
    assert escaped_chunks('"a\\b"') == ['\\"', "a", "\\\\", "b", '\\"']
    assert escaped_chunks("a\x00b\n\t") == ["a", "\\u0000", "b", "\\n\\t"]
    assert escaped_chunks("\U0001f4e6\u2028") == ["\U0001f4e6", "\u2028"]
    assert escaped_chunks("x\ud800") == ["x", "\\ud800"]


# --- the span automaton ---


@settings(max_examples=200)
@given(st.lists(st.sampled_from(["a", "b", " ", "c"]), max_size=12))
def test_the_automaton_spells_exactly_the_runs_of_consecutive_chunks(chunks: list[str]) -> None:
    automaton = span_automaton(chunks)
    spelled: set[tuple[str, ...]] = set()
    pending: list[tuple[int, tuple[str, ...]]] = [(0, ())]
    while pending:
        state, path = pending.pop()
        assert path not in spelled  # every span by exactly one path
        spelled.add(path)
        pending.extend(
            (target, (*path, chunk)) for chunk, target in automaton.transitions[state].items()
        )
    runs = {tuple(chunks[i:j]) for i in range(len(chunks) + 1) for j in range(i, len(chunks) + 1)}
    assert spelled == runs
    assert len(automaton) <= max(1, 2 * len(chunks) - 1) + 1
    for state, chunk, target in automaton.edges():  # one label into each state
        assert automaton.label[target] == chunk and automaton.length(target) > automaton.length(
            state
        )


# --- the reference: which values a grounded grammar admits ---


def _spans(source: str) -> set[str]:
    """Every non-empty run of chunks that starts and ends on a non-whitespace chunk."""
    chunks = source_chunks(source)
    return {
        "".join(chunks[i:j])
        for i in range(len(chunks))
        for j in range(i + 1, len(chunks) + 1)
        if not chunks[i].isspace() and not chunks[j - 1].isspace()
    }


def _allowed(value: str, verbatim: bool, source: str, spans: set[str]) -> bool:
    if value == "":
        return not verbatim or source == ""
    # A copied value holds a word (a letter, digit or mark): `"` or `.` alone is no copy.
    return value in spans and (not verbatim or re.search(r"\w", value) is not None)


def _grounded_values_allowed(document: Any, source: str, spans: set[str]) -> bool:
    carrier, tracking = document.get("carrier"), document.get("tracking_number")
    values = [(carrier, True), (tracking, True), (document.get("evidence", ""), False)]
    values += [(line.get("sku"), True) for line in document.get("lines", [])]
    return all(
        _allowed(value, verbatim, source, spans)
        for value, verbatim in values
        if isinstance(value, str)
    )


SPANS = _spans(SOURCE)
CANDIDATES = [
    *sorted(SPANS)[:200],
    "RR123456785GB", "Royal Mail", '"Tracked 48"', "C:\\depot\\bay 4", "Ana Lucía Restrepo",
    "Ana Lucía Restrepo \U0001f4e6", "Royal Mail ", " Royal Mail", "Royal  Mail", "DHL", "",
    "RR123456786GB", "Restrepo \U0001f4e6 (C:", "2.5 kg\n", "weight 2.5",
]  # fmt: skip


def _grounded_document(rng: random.Random, value: dict[str, Any]) -> dict[str, Any]:
    """`value` with its grounded strings replaced by candidates (spans and non-spans)."""
    document = dict(value)
    for name in ("carrier", "tracking_number"):
        if document.get(name) is not None:
            document[name] = rng.choice(CANDIDATES)
    if "evidence" in document:
        document["evidence"] = rng.choice(CANDIDATES)
    document["lines"] = [{**line, "sku": rng.choice(CANDIDATES)} for line in document["lines"]]
    return document


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(from_schema(SCHEMA), st.randoms(use_true_random=False), st.booleans())
def test_lark_accepts_what_the_schema_grammar_accepts_with_grounded_strings_spans(
    value: dict[str, Any], rng: random.Random, compact: bool
) -> None:
    grounded = grounded_lark(SCHEMA, SOURCE, json_options=OPTIONS)
    plain = _plain_lark(SCHEMA)
    document = _grounded_document(rng, value)
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(document, ensure_ascii=False, separators=separators)
    expected = lark_accepts(plain, text) and _grounded_values_allowed(document, SOURCE, SPANS)
    assert lark_accepts(grounded, text) == expected, text


@pytest.mark.parametrize(
    "text",
    [
        '{"tracking_number": null, "carrier": null, "lines": []}',  # declared order
        '{"carrier": null, "lines": []}',  # a required member missing
        '{"carrier": null, "tracking_number": null, "lines": [], "extra": 1}',
        '{"carrier": null, "tracking_number": null, "lines": [{"sku": "ORD", "qty": 0}]}',
        '{"carrier": null, "tracking_number": null, "lines": [], "note": "' + "n" * 21 + '"}',
        '{"carrier": null , "tracking_number": null, "lines": []}',  # whitespace bound
        '{"carrier": null,  "tracking_number": null, "lines": []}',
        '{"carrier": null, "tracking_number": null, "lines": [],}',
        '{"carrier": 5, "tracking_number": null, "lines": []}',
        '{"carrier": null, "tracking_number": null, "lines": []} ',
    ],
)
def test_lark_rejects_what_the_schema_grammar_rejects(text: str) -> None:
    assert not lark_accepts(_plain_lark(SCHEMA), text)
    assert not lark_accepts(grounded_lark(SCHEMA, SOURCE, json_options=OPTIONS), text)


def test_lark_grounds_a_recursive_contract_at_every_level() -> None:
    schema = Node.json_schema()
    grammar = grounded_lark(schema, SOURCE, json_options=OPTIONS)
    deep = {"label": "Royal Mail", "children": [{"label": "ORD-55123", "children": [
        {"label": "Tracking number", "children": []}]}]}  # fmt: skip
    assert lark_accepts(grammar, json.dumps(deep))
    deep["children"][0]["children"][0]["label"] = "Tracking numbers"
    assert lark_accepts(_plain_lark(schema), json.dumps(deep))
    assert not lark_accepts(grammar, json.dumps(deep))


def test_where_no_span_matches_the_pattern_only_null_can_start_the_value() -> None:
    source = "Your parcel is on its way. Order ORD-55123, 2 items, 2.5 kg."
    grammar = grounded_lark(SCHEMA, source, json_options=OPTIONS)
    assert _prefix_ok(grammar, '{"carrier": null, "tracking_number": n')
    assert not _prefix_ok(grammar, '{"carrier": null, "tracking_number": "')
    stated = grounded_lark(SCHEMA, source + " Tracking RR123456785GB.", json_options=OPTIONS)
    assert _prefix_ok(stated, '{"carrier": null, "tracking_number": "RR1')
    assert not _prefix_ok(stated, '{"carrier": null, "tracking_number": "ORD')


def test_a_branch_no_value_fits_is_left_out_so_decoding_never_walks_into_a_dead_end() -> None:
    from contracts import ShipmentNotice
    from sdk.contract.derived import evidence_gated

    source = "Hello Ana Lopez, your parcel from Lumen Books is on its way. Weight 2 kg."
    grammar = grounded_lark(evidence_gated(ShipmentNotice).json_schema(), source)
    # No span looks like a tracking number: the evidence-and-value object cannot be finished,
    # so it cannot be started either; null is what is left.
    assert _prefix_ok(grammar, '{"carrier": null, "tracking_number": null')
    assert not _prefix_ok(grammar, '{"carrier": null, "tracking_number": {')
    assert _prefix_ok(grammar, '{"carrier": {"evidence": "Lumen Books", "value": "Lumen')

    class Required(Contract):
        code: Verbatim = Field(pattern="^[A-Z]{2}-[0-9]{4}$")

    with pytest.raises(GroundingUnsupported, match="no document"):
        grounded_lark(Required.json_schema(), source)
    assert lark_accepts(
        grounded_lark(Required.json_schema(), source + " Ref AB-1234."), '{"code": "AB-1234"}'
    )


def test_prefer_values_writes_every_value_a_span_can_fill() -> None:
    source = "Your parcel is on its way with Royal Mail. Order ORD-55123."
    grammar = grounded_lark(SCHEMA, source, prefer_values=True)
    # A span can fill the carrier: null is not offered; none has a tracking number's form:
    # null is all that is left.
    assert not _prefix_ok(grammar, '{"carrier": n')
    assert _prefix_ok(grammar, '{"carrier": "Royal Mail", "tracking_number": null')
    assert not _prefix_ok(grammar, '{"carrier": "Royal Mail", "tracking_number": "')
    assert lark_accepts(grounded_lark(SCHEMA, source), '{"carrier": null, "tracking_number": '
                        'null, "lines": []}')  # fmt: skip


def test_an_empty_source_admits_only_the_empty_string_or_null() -> None:
    grammar = grounded_lark(SCHEMA, "", json_options=OPTIONS)
    empty = '{"carrier": "", "tracking_number": null, "lines": [], "evidence": ""}'
    assert lark_accepts(grammar, empty)
    assert lark_accepts(grammar, '{"carrier": null, "tracking_number": null, "lines": []}')
    assert not lark_accepts(grammar, empty.replace('"carrier": ""', '"carrier": "a"'))
    assert not lark_accepts(grammar, empty.replace('"evidence": ""', '"evidence": " "'))
    # "" is no tracking number (the pattern): only null is left there.
    assert not lark_accepts(
        grammar, empty.replace('"tracking_number": null', '"tracking_number": ""')
    )


def test_values_with_quotes_backslashes_and_astral_characters_are_spans_as_json_writes_them() -> (
    None
):
    grammar = grounded_lark(SCHEMA, SOURCE, json_options=OPTIONS)
    for value in ('"Tracked 48"', "C:\\depot\\bay 4", "Restrepo \U0001f4e6", "4)\tweight"):
        document = {"carrier": value, "tracking_number": None, "lines": []}
        assert lark_accepts(grammar, json.dumps(document, ensure_ascii=False)), value
    # The same characters escaped another way are not the canonical spelling of the span.
    assert not lark_accepts(
        grammar, '{"carrier": "\\u0022Tracked 48\\"", "tracking_number": null, "lines": []}'
    )


def test_a_grounded_string_where_the_builder_cannot_write_it_is_refused() -> None:
    class Mapped(Contract):
        ids: dict[str, Verbatim]

    with pytest.raises(GroundingUnsupported) as info:
        grounded_lark(Mapped.json_schema(), SOURCE, json_options=OPTIONS)
    assert info.value.pointer == "/properties/ids"
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match="whitespace_flexible"):
        grounded_lark(SCHEMA, SOURCE, json_options={"whitespace_flexible": True})


def test_is_grounded_follows_refs_and_unions() -> None:
    assert is_grounded(SCHEMA) and is_grounded(Node.json_schema())

    class Plain(Contract):
        lines: list[str]

    assert not is_grounded(Plain.json_schema())


def test_a_100_kb_source_builds_and_compiles() -> None:
    rng = random.Random(7)
    kinds = ["ORD", "RR", "Parcel", "kg"]
    words = [f"{rng.choice(kinds)}-{rng.randrange(10**6)}" for _ in range(12_000)]
    source = " ".join(words)[:100_000]
    grammar = grounded_lark(SCHEMA, source, json_options=OPTIONS)
    # The source once (each chunk a JSON string in a list), plus the rules: linear.
    assert len(grammar) < len(source) + 4 * len(source_chunks(source)) + 4000
    compiled = llguidance.LLMatcher.grammar_from_lark(grammar)
    assert llguidance.LLMatcher.validate_grammar(compiled, _tokenizer()) == ""
    gbnf = grounded_gbnf(SCHEMA, source)
    assert gbnf.count("\n") < 3 * len(source_chunks(source))  # linear: states, not spans
    value = words[100] + " " + words[101]
    document = json.dumps({"carrier": value, "tracking_number": None, "lines": []})
    assert lark_accepts(grammar, document)


# --- GBNF ---


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(from_schema(SCHEMA), st.randoms(use_true_random=False))
def test_gbnf_admits_spans_in_the_patterns_form_and_refuses_other_values(
    value: dict[str, Any], rng: random.Random
) -> None:
    gbnf = grounded_gbnf(SCHEMA, SOURCE)
    document = _grounded_document(rng, value)
    document.pop("note", None)  # keep to what the GBNF grammar writes alike
    text = json.dumps(document, ensure_ascii=False)
    pattern_ok = document.get("tracking_number") is None or bool(
        re.fullmatch(r"[A-Z]{2}[0-9]{9}[A-Z]{2}", document["tracking_number"])
    )
    expected = _grounded_values_allowed(document, SOURCE, SPANS) and pattern_ok
    assert grammar_accepts(gbnf, text) == expected, text


def test_gbnf_lists_the_spans_of_an_ids_form_and_leaves_null_where_there_is_none() -> None:
    source = "Your parcel is on its way. Order ORD-55123, 2 items, 2.5 kg."
    gbnf = grounded_gbnf(SCHEMA, source)
    assert grammar_accepts(gbnf, '{"carrier": null, "tracking_number": null, "lines": []}')
    assert not grammar_accepts_prefix(gbnf, '{"carrier": null, "tracking_number": "')
    stated = grounded_gbnf(SCHEMA, source + " Tracking RR123456785GB.")
    text = '{"carrier": "Order", "tracking_number": "RR123456785GB", "lines": []}'
    assert grammar_accepts(stated, text)
    assert not grammar_accepts(stated, text.replace("RR123456785GB", "ORD-55123"))

    class Free(Contract):  # an unbounded pattern: the spans, and the parser checks after
        code: Verbatim = Field(pattern="^ORD")

    assert grammar_accepts(grounded_gbnf(Free.json_schema(), source), '{"code": "2.5 kg"}')


def test_gbnf_for_an_empty_source_and_for_a_contract_without_grounded_strings() -> None:
    gbnf = grounded_gbnf(SCHEMA, "")
    assert grammar_accepts(
        gbnf, '{"carrier": "", "tracking_number": null, "lines": [], "evidence": ""}'
    )
    assert not grammar_accepts(gbnf, '{"carrier": "x", "tracking_number": null, "lines": []}')

    class Dated(Contract):
        when: str = Field(pattern="^[0-9]{4}$")

    assert grounded_gbnf(Dated.json_schema(), SOURCE) == grounded_gbnf(Dated.json_schema(), "")


def test_gbnf_keeps_refusing_what_the_converter_refuses() -> None:
    class Odd(Contract):
        name: Verbatim
        step: int = Field(multiple_of=3)

    with pytest.raises(UnsupportedSchema):
        grounded_gbnf(Odd.json_schema(), SOURCE)


@pytest.mark.local
def test_llama_cpps_own_grammar_engine_reads_the_grounded_gbnf() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is the local extra")
    from tests.grammar_support import llama_accepts

    gbnf = grounded_gbnf(SCHEMA, SOURCE)
    for value, expected in [
        ("RR123456785GB", True), ("Ana Lucía Restrepo \U0001f4e6", True), ('"Tracked 48"', True),
        ("C:\\depot\\bay 4", True), ("Royal Mail ", False), ("DHL", False), ("", False),
    ]:  # fmt: skip
        document = {"carrier": value, "tracking_number": None, "lines": []}
        assert llama_accepts(gbnf, json.dumps(document, ensure_ascii=False)) == expected, value
