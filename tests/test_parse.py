"""The defensive parser, step by step: each step raises its own error and keeps the evidence."""

from __future__ import annotations

import json
import unicodedata
from typing import Annotated
from typing import Any
from typing import Literal

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import Field
from pydantic import ValidationInfo
from pydantic import model_validator

from contracts import Decision
from contracts import DecisionAnswer
from contracts import InvoiceExtraction
from contracts import ReviewFinding
from contracts import Sentiment
from sdk import CheckFailed
from sdk import ContentFiltered
from sdk import Contract
from sdk import ContractViolation
from sdk import InvalidJSON
from sdk import RefusedOutput
from sdk import SchemaViolation
from sdk import SourceMissing
from sdk import SourceQuote
from sdk import StopReason
from sdk import StructuredOutputError
from sdk import TruncatedOutput
from sdk import UnexpectedStop
from sdk import parse
from sdk.parsing import compile_contract
from sdk.schema.grounding import Anchor
from tests.strategies import from_schema

DECISION = '{"reasoning": "Meets the policy.", "answer": "approve", "confidence": "high"}'
SOURCE = (
    "ACME GMBH - INVOICE INV-1042\nIssued 2026-03-14\nConsulting 10 x 120.00 = 1200.00\n"
    "Travel 80.50\nTotal due: EUR 1,280.50\n"
)


def _invoice(**changes: Any) -> str:
    return json.dumps({**InvoiceExtraction.example(), **changes})


# --- 1. Stop reason, decided before any JSON parsing ---


@pytest.mark.parametrize(
    "stop", [StopReason.MAX_TOKENS, "max_tokens", "length", "limit", "incomplete:max_output_tokens"]
)
def test_token_limit_stop_is_truncation_even_when_the_text_parses(stop: StopReason | str) -> None:
    with pytest.raises(TruncatedOutput) as info:
        parse(Decision, DECISION, stop_reason=stop)
    assert info.value.text == DECISION
    assert info.value.stop_reason is StopReason.MAX_TOKENS
    assert info.value.raw_stop_reason == str(stop)


def test_context_window_stop_is_truncation() -> None:
    with pytest.raises(TruncatedOutput) as info:
        parse(Decision, '{"reasoning": "', stop_reason="model_context_window_exceeded")
    assert info.value.stop_reason is StopReason.CONTEXT_WINDOW
    assert info.value.raw_stop_reason == "model_context_window_exceeded"
    assert info.value.text == '{"reasoning": "'


def test_refusal_keeps_the_refusal_text_and_category() -> None:
    prose = "I can't help with building malware."
    with pytest.raises(RefusedOutput) as info:
        parse(Decision, prose, stop_reason="refusal", refusal_category="cyber")
    error = info.value
    assert (error.refusal, error.category, error.text) == (prose, "cyber", prose)
    assert error.stop_reason is StopReason.REFUSAL
    assert "cyber" in str(error)


def test_refusal_reported_beside_the_text_is_kept() -> None:
    with pytest.raises(RefusedOutput) as info:
        parse(Decision, "", stop_reason=StopReason.REFUSAL, refusal="No.")
    assert info.value.refusal == "No."
    assert info.value.text == ""


def test_content_filter_is_a_refusal_by_the_provider() -> None:
    with pytest.raises(ContentFiltered) as info:
        parse(Decision, DECISION, stop_reason="content_filter")
    assert isinstance(info.value, RefusedOutput)
    assert info.value.category == "content_filter"


@pytest.mark.parametrize("raw", ["pause_turn", "tool_use", "stop_sequence", "cancelled", "weird"])
def test_other_stops_are_not_a_clean_end_and_keep_the_raw_value(raw: str) -> None:
    with pytest.raises(UnexpectedStop) as info:
        parse(Decision, DECISION, stop_reason=raw)
    assert info.value.raw_stop_reason == raw
    assert info.value.text == DECISION
    assert raw in str(info.value)


def test_unknown_raw_stop_reason_normalizes_to_other() -> None:
    with pytest.raises(UnexpectedStop) as info:
        parse(Decision, DECISION, stop_reason="eos_but_new")
    assert info.value.stop_reason is StopReason.OTHER


def test_a_mode_can_accept_stop_sequence_or_tool_use() -> None:
    accepted = {StopReason.END_TURN, StopReason.TOOL_USE}
    parsed = parse(Decision, DECISION, stop_reason="tool_use", clean_stops=accepted)
    assert parsed.stop_reason is StopReason.TOOL_USE
    assert parsed.raw_stop_reason == "tool_use"


@pytest.mark.parametrize("raw", ["end_turn", "stop", "eos", "completed", StopReason.END_TURN])
def test_clean_end_in_any_provider_vocabulary(raw: str) -> None:
    parsed = parse(Decision, DECISION, stop_reason=raw)
    assert parsed.value.answer is DecisionAnswer.APPROVE
    assert parsed.stop_reason is StopReason.END_TURN
    assert parsed.text == DECISION
    assert parsed.notes == []


# --- 2. JSON ---


def test_invalid_json_reports_the_position() -> None:
    text = '{"reasoning": "x",\n "answer": approve}'
    with pytest.raises(InvalidJSON) as info:
        parse(Decision, text, stop_reason="end_turn")
    error = info.value
    assert (error.line, error.column, error.position) == (2, 12, text.index("approve"))
    assert error.text == text
    assert error.stop_reason is StopReason.END_TURN


@pytest.mark.parametrize("text", ["", "   ", "```json\n{}\n```", "NaN", '{"score": Infinity}'])
def test_not_json_at_all(text: str) -> None:
    with pytest.raises(InvalidJSON):
        parse(Sentiment, text, stop_reason="end_turn")


def test_a_repeated_key_is_invalid_json_not_last_one_wins() -> None:
    text = '{"reasoning": "r", "answer": "reject", "answer": "approve", "confidence": "low"}'
    with pytest.raises(InvalidJSON, match="duplicate key 'answer'"):
        parse(Decision, text, stop_reason="end_turn")


class _Loose(Contract):
    a: dict[str, Any] | None = None
    c: list[float] | None = None
    s: str | None = None


_DIGITS = "9" * 5000  # longer than Python reads from text as an integer


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ('{"s": "NaN", "c": [1, 2, NaN]}', "NaN]"),
        ('{"c": [1, Infinity]}', "Infinity"),
        ('{"s": "-Infinity",\n "c": [-Infinity]}', "-Infinity]"),
        ('{"a": {"x": 1, "y": 2, "x": 3, "x": 4}}', '"x": 3'),
        # The decoder refuses an object when it closes: the inner one first.
        ('{"a": {"k": 1, "b": {"z": 1, "z": 2}, "k": 2}}', '"z": 2'),
        ('{"a": {"\\u0078": 1, "x": 2}}', '"x": 2'),  # the same key, escaped the first time
        ('[{"x": 1, "x": 2}, NaN]', '"x": 2'),
        ('{"a": {"x": 1, "x": 2, "y": NaN}}', "NaN"),
        ('{"s": "1e400", "c": [1e400]}', "1e400]"),
        ('{"s": "' + _DIGITS + '", "c": [' + _DIGITS + "]}", _DIGITS + "]"),
    ],
)
def test_a_refused_value_is_invalid_json_at_its_own_position(text: str, token: str) -> None:
    with pytest.raises(InvalidJSON) as info:
        parse(_Loose, text, stop_reason="end_turn")
    error = info.value
    position = text.index(token)
    assert error.position == position
    assert error.line == text.count("\n", 0, position) + 1
    assert error.column == position - text.rfind("\n", 0, position)


class _Note(Contract):
    name: str
    note: str


@pytest.mark.parametrize(
    ("text", "escape"),
    [
        ('{"name": "ok", "note": "abc \\ud800 def"}', "\\ud800"),
        ('{"name": "\\ud83d\\ude00", "note": "\\udc00"}', "\\udc00"),  # after a whole pair
        ('{"name": "ok", "note": "\\uDBFF\\uD800"}', "\\uDBFF"),  # a high one, then another
        ('{"name": "ok", "note": "\\\\\\ud800"}', "\\ud800"),  # an escaped backslash first
        ('{"name": "ok", "note": "x", "\\udfff": 1}', "\\udfff"),
    ],
)
def test_a_lone_surrogate_escape_is_invalid_json_at_the_escape(text: str, escape: str) -> None:
    with pytest.raises(InvalidJSON) as info:
        parse(_Note, text, stop_reason="end_turn")
    assert info.value.position == text.index(escape)
    [violation] = info.value.violations
    assert violation.pointer == "" and violation.keyword == "json"
    assert escape in violation.message and "surrogate" in violation.message


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "ok", "note": "abc \ud800 def"}',  # the characters themselves, not escapes
        '{"name": "ok", "note": "\udfff"}',
        '{"name": "\ud83d\ude00", "note": "x"}',  # a pair of them is no character either
        '{"name": "ok", "note": "x", "\udc00": 1}',
    ],
)
def test_a_surrogate_character_in_a_callers_text_is_invalid_json_at_it(text: str) -> None:
    # On main: a `ContractViolation` at the root pointer ("unable to parse raw data as a
    # unicode string"), which a retry fed back as the model's fault, with no position.
    with pytest.raises(InvalidJSON) as info:
        parse(_Note, text, stop_reason="end_turn")
    error = info.value
    position = next(i for i, char in enumerate(text) if 0xD800 <= ord(char) <= 0xDFFF)
    assert (error.position, error.line, error.column) == (position, 1, position + 1)
    [violation] = error.violations
    assert violation.keyword == "json" and f"U+{ord(text[position]):04X}" in violation.message
    assert error.text == text and error.stop_reason == "end_turn"


def test_surrogate_pairs_and_escaped_backslashes_are_not_lone_surrogates() -> None:
    text = '{"name": "\\ud83d\\ude00 \\uD83D\\uDCE6", "note": "\\\\ud800 \\\\\\\\udc00"}'
    parsed = parse(_Note, text, stop_reason="end_turn")
    assert parsed.value.name == "\U0001f600 \U0001f4e6"
    assert parsed.value.note == "\\ud800 \\\\udc00"


# Escapes of surrogates (high, low, a pair), escaped backslashes and letters that look like an
# escape after one, so that any of them may stand next to any other.
_STRING_PIECES = ["\\ud800", "\\uDBFF", "\\udc00", "\\uDFFF", "\\ud83d\\ude00"]
_STRING_PIECES += ["\\\\", "ud800", "dc00", "\\u00e9", '\\"', "a"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_STRING_PIECES), max_size=8))
def test_a_string_is_invalid_json_exactly_when_it_decodes_to_a_lone_surrogate(
    pieces: list[str],
) -> None:
    text = json.dumps({"name": "ok"})[:-1] + ', "note": "' + "".join(pieces) + '"}'
    note = json.loads(text)["note"]
    lone = [i for i, char in enumerate(note) if 0xD800 <= ord(char) <= 0xDFFF]
    if not lone:
        assert parse(_Note, text, stop_reason="end_turn").value.note == note
        return
    with pytest.raises(InvalidJSON) as info:
        parse(_Note, text, stop_reason="end_turn")
    escape = text[info.value.position : info.value.position + 6]
    assert escape.lower() == f"\\u{ord(note[lone[0]]):04x}"  # the first one, by its escape


def test_text_that_is_not_text_is_a_usage_error() -> None:
    with pytest.raises(TypeError, match="NoneType"):
        parse(Decision, None, stop_reason="end_turn")  # type: ignore[arg-type]


def test_a_byte_order_mark_is_invalid_json_at_position_zero() -> None:
    with pytest.raises(InvalidJSON) as info:
        parse(Decision, "\ufeff" + DECISION, stop_reason="end_turn")
    assert info.value.position == 0
    assert "BOM" in str(info.value)


def test_bytes_are_accepted_and_bad_utf8_is_invalid_json() -> None:
    assert parse(Decision, DECISION.encode(), stop_reason="end_turn").text == DECISION
    with pytest.raises(InvalidJSON) as info:
        parse(Decision, b'{"reasoning": "\xff"}', stop_reason="end_turn")
    assert info.value.position == 15


def test_bad_utf8_with_a_truncation_stop_is_still_truncation() -> None:
    with pytest.raises(TruncatedOutput):
        parse(Decision, b'{"reasoning": "\xe2\x82', stop_reason="max_tokens")


# --- 3. Enum casing policy ---


def test_normalize_rewrites_a_case_variant_and_notes_it() -> None:
    text = DECISION.replace('"approve"', '"Approve"').replace('"high"', '"HIGH"')
    parsed = parse(Decision, text, stop_reason="end_turn")
    assert parsed.value.answer is DecisionAnswer.APPROVE
    assert [(n.pointer, n.received, n.written) for n in parsed.notes] == [
        ("/answer", "Approve", "approve"),
        ("/confidence", "HIGH", "high"),
    ]
    assert parsed.text == text  # the raw text stays as received


def test_normalize_reaches_nested_and_nullable_enums() -> None:
    class Tagged(Contract):
        findings: list[ReviewFinding]
        answer: DecisionAnswer | None

    finding = {"reasoning": "r", "severity": "Error", "file": "a.py", "line": None, "fix": None}
    text = json.dumps({"findings": [finding, {**finding, "severity": "info"}], "answer": "REJECT"})
    parsed = parse(Tagged, text, stop_reason="end_turn")
    assert [str(n) for n in parsed.notes] == [
        "/findings/0/severity: enum_case 'Error' -> 'error'",
        "/answer: enum_case 'REJECT' -> 'reject'",
    ]


@pytest.mark.parametrize("bad", ["approve, reject", "Approved", "APPROVE ", 1, True, "yes"])
def test_normalize_leaves_anything_but_a_case_variant_to_the_schema(bad: object) -> None:
    text = json.dumps({"reasoning": "r", "answer": bad, "confidence": "low"})
    with pytest.raises(SchemaViolation) as info:
        parse(Decision, text, stop_reason="end_turn")
    assert {v.pointer for v in info.value.violations} == {"/answer"}


def test_reject_policy_rewrites_nothing() -> None:
    text = DECISION.replace('"approve"', '"Approve"')
    with pytest.raises(SchemaViolation) as info:
        parse(Decision, text, stop_reason="end_turn", enum_case="reject")
    assert [v.pointer for v in info.value.violations] == ["/answer"]
    assert "Approve" in info.value.violations[0].message


def test_unknown_enum_case_policy_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="enum_case"):
        parse(Decision, DECISION, stop_reason="end_turn", enum_case="lenient")  # type: ignore[arg-type]


# --- 4. Canonical schema ---


def test_schema_violation_lists_every_error_with_its_pointer() -> None:
    items = [{"description": f"line {i}", "quantity": 1, "amount": 1.0} for i in range(4)]
    items[3]["quantity"] = -2
    items[1]["unit"] = "h"
    del items[2]["amount"]
    text = _invoice(line_items=items, currency="EURO", category="food", total=None)
    with pytest.raises(SchemaViolation) as info:
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=SOURCE)
    pointers = sorted(v.pointer for v in info.value.violations)
    assert pointers == [
        "/category",
        "/currency",
        "/line_items/1/unit",
        "/line_items/2/amount",
        "/line_items/3/quantity",
    ]
    assert info.value.text == text
    assert "/line_items/3/quantity" in str(info.value)


def test_violations_come_in_document_order_list_items_by_number() -> None:
    # On main the pointers were ordered as text: `/line_items/10/...` before `/line_items/2/...`
    # (and so was the feedback a retry sends the model).
    items = [{"description": f"line {i}", "quantity": 1, "amount": 1.0} for i in range(12)]
    for index in (10, 2, 11):
        items[index]["quantity"] = -1
    with pytest.raises(SchemaViolation) as info:
        parse(InvoiceExtraction, _invoice(line_items=items), stop_reason="end_turn", source=SOURCE)
    assert [v.pointer for v in info.value.violations] == [
        "/line_items/2/quantity",
        "/line_items/10/quantity",
        "/line_items/11/quantity",
    ]


def test_a_source_that_is_not_text_is_a_type_error_naming_it() -> None:
    # On main: a bare TypeError from `re` ("cannot use a string pattern on a bytes-like object").
    with pytest.raises(TypeError, match="source must be str or None, not bytes"):
        parse(InvoiceExtraction, _invoice(), stop_reason="end_turn", source=SOURCE.encode())


@pytest.mark.parametrize("stop_reason", [["end_turn"], {"end_turn": 1}, 5],
                         ids=["list", "dict", "int"])  # fmt: skip
def test_a_stop_reason_of_the_wrong_type_is_a_type_error_naming_it(stop_reason: Any) -> None:
    # On main: a list or a dict was a bare "unhashable type: 'list'" from a stop table, naming
    # neither the argument nor what it takes (an int was read as an unknown stop).
    with pytest.raises(TypeError, match=r"^stop_reason must be a StopReason or a string or None"):
        parse(Decision, DECISION, stop_reason=stop_reason)


def test_a_nullable_fields_violation_names_the_branch_its_type_matches() -> None:
    with pytest.raises(SchemaViolation) as info:
        parse(InvoiceExtraction, _invoice(currency="Euro"), stop_reason="end_turn", source=SOURCE)
    [violation] = info.value.violations
    assert (violation.pointer, violation.keyword) == ("/currency", "maxLength")
    assert "too long" in violation.message


def test_schema_violation_for_missing_and_unknown_properties_names_them() -> None:
    text = json.dumps({"reasoning": "r", "answer": "approve", "priority": "p1"})
    with pytest.raises(SchemaViolation) as info:
        parse(Decision, text, stop_reason="end_turn")
    found = {v.pointer: v.keyword for v in info.value.violations}
    assert found == {"/confidence": "required", "/priority": "additionalProperties"}


def test_schema_enforces_bounds_that_provider_dialects_strip() -> None:
    text = json.dumps({"reasoning": "r", "sentiment": "positive", "score": 1.5})
    with pytest.raises(SchemaViolation) as info:
        parse(Sentiment, text, stop_reason="end_turn")
    assert [(v.pointer, v.keyword) for v in info.value.violations] == [("/score", "maximum")]


def test_pattern_follows_ecma_semantics_not_pythons_trailing_newline() -> None:
    # Python's re lets `$` match before a final newline; JSON Schema patterns are ECMA regexes.
    text = _invoice(issue_date="2026-03-14\n")
    with pytest.raises(SchemaViolation) as info:
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=SOURCE)
    assert [v.pointer for v in info.value.violations] == ["/issue_date"]


def test_violation_messages_stay_short_for_large_values() -> None:
    text = json.dumps({"reasoning": "r", "sentiment": "positive", "score": ["x" * 10_000]})
    with pytest.raises(SchemaViolation) as info:
        parse(Sentiment, text, stop_reason="end_turn")
    assert all(len(v.message) <= 160 for v in info.value.violations)


def test_validators_are_compiled_once_per_contract() -> None:
    assert compile_contract(InvoiceExtraction) is compile_contract(InvoiceExtraction)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["approve", "Approve", "high", "2026-01-01", "EUR"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


@st.composite
def _mutated(draw: st.DrawFn, contract: type[Contract]) -> Any:
    """A valid document with a few random paths replaced, dropped or added."""
    document = draw(from_schema(contract.json_schema()))
    for _ in range(draw(st.integers(0, 3))):
        node = document
        while isinstance(node, dict) and node and draw(st.booleans()):
            child = node[draw(st.sampled_from(sorted(node)))]
            if not isinstance(child, dict):
                break
            node = child
        if isinstance(node, dict):
            action = draw(st.sampled_from(["replace", "drop", "add"]))
            if action == "add" or not node:
                node[draw(st.text(max_size=6))] = draw(_json_values)
            elif action == "drop":
                del node[draw(st.sampled_from(sorted(node)))]
            else:
                node[draw(st.sampled_from(sorted(node)))] = draw(_json_values)
    return document


@pytest.mark.parametrize("contract", [Decision, ReviewFinding, InvoiceExtraction, Sentiment])
def test_fast_and_reference_validators_agree(contract: type[Contract]) -> None:
    compiled = compile_contract(contract)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_mutated(contract))
    def agree(document: Any) -> None:
        reference_errors = list(compiled.reference.iter_errors(document))
        assert compiled.is_valid(document) == (not reference_errors)
        assert bool(compiled.violations(document)) == (not compiled.is_valid(document))

    agree()


# --- 5. Typed contract ---


def test_what_the_schema_allows_but_the_contract_does_not_is_a_contract_violation() -> None:
    # JSON Schema counts 1.0 as an integer; the strict contract does not.
    text = json.dumps({"reasoning": "r", "severity": "info", "file": "a", "line": 1.0, "fix": None})
    with pytest.raises(ContractViolation) as info:
        parse(ReviewFinding, text, stop_reason="end_turn")
    assert [(v.pointer, v.keyword) for v in info.value.violations] == [("/line", "int_type")]
    assert info.value.text == text


# --- 6. Semantic checks ---


def test_valid_invoice_with_its_quote_in_the_source() -> None:
    parsed = parse(InvoiceExtraction, _invoice(), stop_reason="end_turn", source=SOURCE)
    assert parsed.value.total == 1280.5
    assert parsed.value.evidence == "Total due: EUR 1,280.50"


def test_quote_not_in_the_source_fails_naming_field_and_quote() -> None:
    text = _invoice(evidence="Total due: EUR 1,280.00")
    with pytest.raises(CheckFailed) as info:
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=SOURCE)
    [violation] = info.value.violations
    assert violation.pointer == "/evidence"
    assert "'evidence'" in violation.message and "EUR 1,280.00" in violation.message
    assert not isinstance(info.value, SourceMissing)


def test_quote_must_match_exactly_not_fuzzily() -> None:
    text = _invoice(evidence="total due: EUR 1,280.50")
    with pytest.raises(CheckFailed):
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=SOURCE)


def test_empty_quote_means_no_evidence_and_passes() -> None:
    parsed = parse(InvoiceExtraction, _invoice(evidence=""), stop_reason="end_turn", source=SOURCE)
    assert parsed.value.evidence == ""


def test_quotes_without_a_source_are_an_error_not_a_skipped_check() -> None:
    with pytest.raises(SourceMissing) as info:
        parse(InvoiceExtraction, _invoice(), stop_reason="end_turn")
    assert isinstance(info.value, CheckFailed) and isinstance(info.value, ValueError)
    assert [v.pointer for v in info.value.violations] == ["/evidence"]
    assert "source=" in str(info.value)


def test_empty_quotes_need_no_source_only_a_quote_with_text_does() -> None:
    # "" means "no evidence": nothing to verify, so no source is needed to accept it.
    parsed = parse(InvoiceExtraction, _invoice(evidence=""), stop_reason="end_turn")
    assert parsed.value.evidence == ""

    class Claim(Contract):
        quote: SourceQuote
        note: SourceQuote | None = None

    assert parse(Claim, '{"quote": "", "note": null}', stop_reason="end_turn").value.quote == ""
    with pytest.raises(SourceMissing) as info:
        parse(Claim, '{"quote": "", "note": "Taxi"}', stop_reason="end_turn")
    assert [v.pointer for v in info.value.violations] == ["/note"]


def test_quotes_in_lists_and_nested_contracts_are_checked() -> None:
    class Claim(Contract):
        quote: SourceQuote

    class Claims(Contract):
        claims: list[Claim]
        main: SourceQuote | None

    text = json.dumps({"claims": [{"quote": "Travel 80.50"}, {"quote": "Meals"}], "main": "Taxi"})
    with pytest.raises(CheckFailed) as info:
        parse(Claims, text, stop_reason="end_turn", source=SOURCE)
    assert [v.pointer for v in info.value.violations] == ["/claims/1/quote", "/main"]


# Every blank quote below is in this source (so only its blankness can fail it): white space,
# no-break and ideographic spaces, zero-width characters, a combining mark whose base has no
# composed form (so NFC keeps it apart), blank glyphs.
_BLANK_SOURCE = SOURCE + "Notes: \t\n\u00a0\u3000\u200b\u200d\ufeff x\u0301 \u2800\u3164 \u200b\n"
_BLANK_QUOTES = {
    "space": " ",
    "newline": "\n",
    "tab-newline": "\t\n",
    "no-break-space": "\u00a0",
    "ideographic-space": "\u3000",
    "zero-width-space": "\u200b",
    "zero-width-joiner-bom": "\u200b\u200d\ufeff",
    "combining-mark-alone": "\u0301",
    "braille-blank": "\u2800",
    "hangul-filler": "\u3164",
    "mixed": " \u200b\n",
}


@pytest.mark.parametrize("quote", _BLANK_QUOTES.values(), ids=_BLANK_QUOTES)
def test_a_quote_of_white_space_or_invisible_characters_fails_as_one_not_found(quote: str) -> None:
    # In the source, in either Unicode form: before, such a quote passed and proved nothing.
    assert unicodedata.normalize("NFC", quote) in unicodedata.normalize("NFC", _BLANK_SOURCE)
    text = _invoice(evidence=quote)
    with pytest.raises(CheckFailed) as info:
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=_BLANK_SOURCE)
    assert not isinstance(info.value, SourceMissing)
    [violation] = info.value.violations
    assert (violation.pointer, violation.keyword) == ("/evidence", "x-source-quote")
    assert violation.message.startswith(
        "quote in field 'evidence' is only white space or invisible characters: "
    )
    assert repr(quote) in violation.message


def test_a_blank_quote_fails_in_a_list_and_beside_a_failed_cross_field_check() -> None:
    # The same check on every path to it: list items, and the error that also lists the
    # contract's own failed validators ("" still passes: "no evidence").
    class Claim(Contract):
        quote: SourceQuote

    class Claims(Contract):
        claims: list[Claim]

    text = json.dumps({"claims": [{"quote": "Travel 80.50"}, {"quote": "\u200b"}, {"quote": ""}]})
    with pytest.raises(CheckFailed) as listed:
        parse(Claims, text, stop_reason="end_turn", source=_BLANK_SOURCE)
    assert [(v.pointer, v.keyword) for v in listed.value.violations] == [
        ("/claims/1/quote", "x-source-quote")
    ]
    text = _invoice(total=999.0, evidence=" ")
    with pytest.raises(CheckFailed) as both:
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=SOURCE)
    assert [v.pointer for v in both.value.violations] == ["/evidence", ""]
    assert "only white space" in both.value.violations[0].message


# (the last two: a spacing mark alone, Devanagari's visarga, and an Arabic number sign, both
# drawn though their categories hold invisible characters: on main they were blank)
@pytest.mark.parametrize("quote", ["x\u0301", "\u00a0Travel", ".", "\u20ac", "\u0903", "\u0600"])
def test_a_quote_with_something_visible_in_it_is_not_blank(quote: str) -> None:
    source = SOURCE + "x\u0301 \u00a0Travel. \u20ac\n\u0903 \u0600\n"  # (each a whole character)
    parsed = parse(
        InvoiceExtraction, _invoice(evidence=quote), stop_reason="end_turn", source=source
    )
    assert parsed.value.evidence == quote


_CAFE = "Caf\u00e9 M\u00fcller, Z\u00fcrich"  # NFC: é and ü are one character each


@pytest.mark.parametrize(
    ("quote", "source"),
    [
        # an NFC quote of an NFD source, and the reverse
        ("Caf\u00e9 M\u00fcller", unicodedata.normalize("NFD", f"Receipt\n{_CAFE}\n")),
        (unicodedata.normalize("NFD", "Caf\u00e9 M\u00fcller"), f"Receipt\n{_CAFE}\n"),
        # a quote longer than its source in characters: the same text in NFD
        ("Cafe\u0301", "Caf\u00e9"),
    ],
    ids=["nfc-of-nfd", "nfd-of-nfc", "longer-than-the-source"],
)
def test_a_quote_matches_its_source_in_either_unicode_form(quote: str, source: str) -> None:
    assert quote not in source  # not the same characters: the same text to a reader
    parsed = parse(
        InvoiceExtraction, _invoice(evidence=quote), stop_reason="end_turn", source=source
    )
    assert parsed.value.evidence == quote  # the value as written, not normalized


@pytest.mark.parametrize(
    ("quote", "source"),
    [
        # the base letter of a combining sequence: a span of the NFD characters, not of the text
        ("Cafe", unicodedata.normalize("NFD", _CAFE)),
        ("Zu", unicodedata.normalize("NFD", _CAFE)),
        # NFC only, never NFKC: a ligature is not the letters it is drawn from
        ("\ufb01le", "file"),
    ],
    ids=["cut-sequence-cafe", "cut-sequence-zu", "ligature"],
)
def test_a_quote_that_is_other_text_fails_in_any_unicode_form(quote: str, source: str) -> None:
    with pytest.raises(CheckFailed) as info:
        parse(InvoiceExtraction, _invoice(evidence=quote), stop_reason="end_turn", source=source)
    [violation] = info.value.violations
    assert violation.message == f"quote in field 'evidence' is not in the source: {quote!r}"


def test_every_route_to_the_quote_check_refuses_a_blank_quote_and_reads_nfc() -> None:
    # A document, a list stream's items, tool-call arguments: each parses through the one check,
    # so a blank quote is retried with its reason and an NFC quote of an NFD source is kept.
    from sdk import StructuredClient
    from sdk import Tool
    from sdk import ToolCall
    from sdk.providers import TestProvider

    class Claim(Contract):
        quote: SourceQuote

    source = unicodedata.normalize("NFD", f"Receipt\n{_CAFE}\n")
    blank, good = {"quote": "\u200b "}, {"quote": "Caf\u00e9 M\u00fcller"}
    source += blank["quote"]  # the blank quote is in the source too

    def routes(provider: TestProvider) -> list[Any]:
        client = StructuredClient(provider, retries=1)
        return [
            client.generate(Claim, prompt="x", source=source),
            list(client.stream(list[Claim], prompt="x", source=source))[-1],
            client.call_tools(tools=[Tool(Claim)], prompt="x", source=source),
        ]

    replies = [blank, good, {"items": [good, blank]}, {"items": [good, good]}]
    calls = [
        [ToolCall(f"c{n}", "Claim", json.dumps(quote))] for n, quote in enumerate([blank, good])
    ]
    provider = TestProvider([*replies, *calls])
    document, items, tools = routes(provider)
    assert document.value == Claim.model_validate(good)
    assert items.value == [Claim.model_validate(good)] * 2
    assert tools.calls[0].value == Claim.model_validate(good)
    for result, pointer in [(document, "/quote"), (items, "/items/1/quote"), (tools, "/quote")]:
        first = result.attempts[0].error
        assert isinstance(first, CheckFailed) and not isinstance(first, SourceMissing)
        assert [(v.pointer, v.keyword) for v in first.violations] == [(pointer, "x-source-quote")]
        assert "only white space" in first.violations[0].message


def test_an_anchored_quote_found_in_nfc_is_still_held_to_its_anchor() -> None:
    # The source in NFD, the quotes in NFC: every character offset after the first "ë" differs
    # between the two forms, and the anchor's regions and labels are read in the same form as
    # the quote (an NFD label too), so a quote found only in NFC is held to its anchor.
    class Evidence(Contract):
        recipient: Annotated[
            SourceQuote,
            Anchor(after=(unicodedata.normalize("NFD", "F\u00fcr"),), not_after=("from",)),
        ]

    source = unicodedata.normalize(
        "NFD",
        "A parcel from Zo\u00eb Caf\u00e9.\nF\u00fcr Zo\u00eb M\u00fcller, from Caf\u00e9 Post\n",
    )

    def check(quote: str) -> Evidence:
        return parse(
            Evidence, json.dumps({"recipient": quote}), stop_reason="end_turn", source=source
        ).value

    assert check("Zo\u00eb M\u00fcller").recipient == "Zo\u00eb M\u00fcller"
    refused = {
        "Zo\u00eb Caf\u00e9": "it is on no line after its labels ('F\u00fcr')",
        "Caf\u00e9 Post": "it follows 'from' (another party's value)",
    }
    for quote, reason in refused.items():
        with pytest.raises(CheckFailed) as failed:
            check(quote)
        [violation] = failed.value.violations
        assert (violation.pointer, violation.keyword) == ("/recipient", "x-anchor")
        assert violation.message.endswith(f"{quote!r}: {reason}")


# A quote that is part of one of the source's user-perceived characters (grapheme clusters), where
# NFC has no composed form to compare: a letter without its combining accent or vowel sign, an
# emoji without the rest of its sequence (joined by U+200D, a variation selector, a skin tone),
# one regional indicator of a flag or two of different flags. Each is in the source's characters.
_PART_OF_A_CHARACTER = {
    "letter-without-its-accent": ("q", "Ref q\u0301 "),
    "devanagari-consonant-without-its-vowel-sign": ("\u0915", "\u0915\u093f\u0930\u0923 "),
    "emoji-before-zwj": ("\U0001f469", "\U0001f469\u200d\U0001f4bb "),
    "emoji-after-zwj": ("\U0001f4bb", "\U0001f469\u200d\U0001f4bb "),
    "before-variation-selector": ("\u2764", "\u2764\ufe0f "),
    "before-skin-tone": ("\U0001f44d", "\U0001f44d\U0001f3fd "),
    "across-two-flags": ("\U0001f1f7\U0001f1e9", "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea "),
    "text-then-half-a-character": ("Ref q", "Ref q\u0301 "),
}


@pytest.mark.parametrize(("quote", "text"), _PART_OF_A_CHARACTER.values(), ids=_PART_OF_A_CHARACTER)
def test_a_quote_of_part_of_a_character_fails_and_its_whole_occurrence_passes(
    quote: str, text: str
) -> None:
    source = SOURCE + text
    assert quote in source and unicodedata.is_normalized("NFC", source)
    with pytest.raises(CheckFailed) as info:
        parse(InvoiceExtraction, _invoice(evidence=quote), stop_reason="end_turn", source=source)
    [violation] = info.value.violations
    assert (violation.pointer, violation.keyword) == ("/evidence", "x-source-quote")
    assert violation.message == (
        f"quote in field 'evidence' is not in the source as a reader sees it: {quote!r} starts "
        "or ends inside one of its characters (a letter without its accent, part of an emoji "
        "sequence: quote whole characters)"
    )
    # Every occurrence is tried: the same quote written whole later in the source passes.
    later = source + f"({quote})"
    parsed = parse(
        InvoiceExtraction, _invoice(evidence=quote), stop_reason="end_turn", source=later
    )
    assert parsed.value.evidence == quote


def test_whole_characters_around_a_quote_do_not_count_against_it() -> None:
    # Guards: a quote that starts or ends next to a whole cluster (a combining sequence, an
    # emoji sequence, a flag, CR LF) is not cut; a quote of whole clusters passes.
    source = SOURCE + "x\u0301y \U0001f469\u200d\U0001f4bb! \U0001f1eb\U0001f1f7\r\nEnd"
    for quote in [
        "x\u0301",
        "y",
        "x\u0301y",
        "\U0001f469\u200d\U0001f4bb",
        "! \U0001f1eb\U0001f1f7",
        "\U0001f1eb\U0001f1f7\r\nEnd",
    ]:
        parsed = parse(
            InvoiceExtraction, _invoice(evidence=quote), stop_reason="end_turn", source=source
        )
        assert parsed.value.evidence == quote
    with pytest.raises(CheckFailed):  # between CR and LF: one character too
        parse(
            InvoiceExtraction,
            _invoice(evidence="\U0001f1f7\r"),
            stop_reason="end_turn",
            source=source,
        )


def test_an_anchored_quote_counts_only_occurrences_of_whole_characters() -> None:
    # The quote is whole on the first line (so the quote check passes) and only part of a
    # character on the line its anchor opens: held to its anchor, it is on no line after "To".
    class Evidence(Contract):
        recipient: Annotated[SourceQuote, Anchor(after=("To",))]

    source = "From Kx Post\nTo Kx\u0301 Ops\n"

    def check(quote: str) -> Evidence:
        return parse(
            Evidence, json.dumps({"recipient": quote}), stop_reason="end_turn", source=source
        ).value

    assert check("Kx\u0301 Ops").recipient == "Kx\u0301 Ops"
    with pytest.raises(CheckFailed) as failed:
        check("Kx")
    [violation] = failed.value.violations
    assert (violation.pointer, violation.keyword) == ("/recipient", "x-anchor")
    assert violation.message.endswith("'Kx': it is on no line after its labels ('To')")


# Characters whose clusters the rules decide: letters, combining marks, a Devanagari consonant,
# virama and vowel sign, emoji with joiner, variation selector and skin tone, regional
# indicators, Hangul jamo and a syllable, an Arabic prepended mark, CR and LF.
_CLUSTER_ALPHABET = (
    "ax \r\n\u0301\u0915\u094d\u093f\u200d\U0001f469\U0001f4bb\ufe0f\U0001f3fd"
    "\U0001f1eb\U0001f1f7\u1100\u1161\u11a8\uac00\u0600"
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_CLUSTER_ALPHABET, max_size=40))
def test_cluster_edges_read_around_an_offset_are_those_of_the_whole_text(text: str) -> None:
    # `cluster_edge` reads only the characters around an offset; the `regex` module's `\X`
    # over the whole text is the reference.
    import regex

    from sdk.schema.grounding import cluster_edge

    edges = {0, len(text)} | {found.start() for found in regex.finditer(r"\X", text)}
    assert [at for at in range(len(text) + 1) if cluster_edge(text, at)] == sorted(edges)


def test_cross_field_check_failure_is_check_failed_not_contract_violation() -> None:
    text = _invoice(total=999.0)
    with pytest.raises(CheckFailed) as info:
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=SOURCE)
    assert not isinstance(info.value, ContractViolation)
    assert "sum to 1280.5" in info.value.violations[0].message


def test_cross_field_and_quote_failures_are_reported_together() -> None:
    text = _invoice(total=999.0, evidence="not there")
    with pytest.raises(CheckFailed) as info:
        parse(InvoiceExtraction, text, stop_reason="end_turn", source=SOURCE)
    assert len(info.value.violations) == 2


def test_checks_receive_the_source_through_the_validation_context() -> None:
    seen: list[object] = []

    class Mentioned(Contract):
        name: str = Field(description="A name that appears in the source.")

        @model_validator(mode="after")
        def _name_is_mentioned(self, info: ValidationInfo) -> Mentioned:
            source = (info.context or {}).get("source")
            seen.append(source)
            if source is not None and self.name not in source:
                raise ValueError(f"{self.name!r} is not mentioned in the source")
            return self

    assert parse(Mentioned, '{"name": "ACME"}', stop_reason="end_turn", source=SOURCE).value
    with pytest.raises(CheckFailed, match="'Initech' is not mentioned"):
        parse(Mentioned, '{"name": "Initech"}', stop_reason="end_turn", source=SOURCE)
    assert seen == [SOURCE, SOURCE]


def test_a_validator_raising_anything_else_is_a_failed_check() -> None:
    class Careless(Contract):
        name: str

        @model_validator(mode="after")
        def _lookup(self) -> Careless:
            raise KeyError(self.name)

    with pytest.raises(CheckFailed) as info:
        parse(Careless, '{"name": "x"}', stop_reason="end_turn")
    assert "KeyError" in info.value.violations[0].message
    assert isinstance(info.value.__cause__, KeyError)


# --- The whole: nothing but a value or a StructuredOutputError ---

_stops = st.sampled_from([*StopReason, "stop", "length", "eos", "completed", "whatever"])
_texts = st.one_of(
    st.text(max_size=200),
    st.sampled_from([DECISION, _invoice(), DECISION.replace("approve", "Approve")]),
    _json_values.map(json.dumps),
    st.builds(lambda s, n: s[:n], st.sampled_from([DECISION, _invoice()]), st.integers(0, 400)),
)


@pytest.mark.parametrize("contract", [Decision, InvoiceExtraction])
def test_parse_returns_a_valid_value_or_raises_a_structured_output_error(
    contract: type[Contract],
) -> None:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=_texts, stop=_stops, enum_case=st.sampled_from(["normalize", "reject"]))
    def total(text: str, stop: StopReason | str, enum_case: Any) -> None:
        try:
            parsed = parse(contract, text, stop_reason=stop, source=SOURCE, enum_case=enum_case)
        except StructuredOutputError as error:
            assert error.text is not None
            return
        # Whatever came back is a value the contract accepts, from its own serialization.
        again = contract.model_validate_json(
            parsed.value.model_dump_json(), context={"source": SOURCE}
        )
        assert again == parsed.value

    total()


# --- A pattern Python's `re` cannot compile (Pydantic's Rust engine can) ---


class _Letters(Contract):
    name: str = Field(pattern=r"^\p{L}+$")


@pytest.mark.parametrize("value", ["R2D2", "\uff11\uff12\uff13"])  # (fullwidth digits)
def test_a_unicode_class_pattern_is_checked_at_the_schema_step_not_a_bare_re_error(
    value: str,
) -> None:
    # On main: `re.error: bad escape \p` out of the schema step (untyped, no .text).
    text = json.dumps({"name": value})
    with pytest.raises(SchemaViolation) as info:
        parse(_Letters, text, stop_reason="end_turn")
    assert [v.pointer for v in info.value.violations] == ["/name"]
    assert "does not match" in info.value.violations[0].message
    assert info.value.text == text
    assert parse(_Letters, '{"name": "Zoë"}', stop_reason="end_turn").value.name == "Zoë"


def test_a_unicode_class_pattern_is_retried_with_feedback_by_the_client() -> None:
    from sdk import StructuredClient
    from sdk.providers.test import TestProvider

    client = StructuredClient(
        TestProvider(replies=['{"name": "R2D2"}', '{"name": "Zoë"}']), retries=1
    )
    result = client.generate(_Letters, prompt="name?")
    assert result.value.name == "Zoë"
    assert len(result.attempts) == 2


# --- Unions: the errors of the branch the value was meant for ---


class _Cat(Contract):
    kind: Literal["cat"]
    meow: int


class _Dog(Contract):
    kind: Literal["dog"]
    bark: int


class _Tagged(Contract):
    pet: Annotated[_Cat | _Dog, Field(discriminator="kind")]


class _Untagged(Contract):
    pet: _Cat | _Dog


@pytest.mark.parametrize("contract", [_Tagged, _Untagged], ids=["discriminated", "plain"])
@pytest.mark.parametrize(
    ("pet", "pointer", "words"),
    [
        ({"kind": "dog", "bark": "1"}, "/pet/bark", "is not of type 'integer'"),
        ({"kind": "dog", "bark": 1, "invented": 2}, "/pet/invented", "unknown property"),
    ],
)
def test_a_union_reports_the_intended_branch_at_the_exact_pointer(
    contract: type[Contract], pet: dict[str, Any], pointer: str, words: str
) -> None:
    # On main: `/pet: Additional properties are not allowed ('bark' ... were unexpected)`, the
    # Cat branch's error, which as retry feedback tells the model to drop valid fields.
    with pytest.raises(SchemaViolation) as info:
        parse(contract, json.dumps({"pet": pet}), stop_reason="end_turn")
    assert [(v.pointer, words in v.message) for v in info.value.violations] == [(pointer, True)]


def test_a_discriminator_naming_no_branch_is_reported_at_the_discriminator() -> None:
    with pytest.raises(SchemaViolation) as info:
        parse(_Tagged, '{"pet": {"kind": "cow", "bark": 1}}', stop_reason="end_turn")
    [violation] = info.value.violations
    assert violation.pointer == "/pet/kind"
    assert "'cow'" in violation.message and "'dog'" in violation.message


def test_a_case_variant_of_a_discriminator_is_normalized_like_any_wire_name() -> None:
    # On main: `"DOG"` was a SchemaViolation while a case variant of an enum was rewritten.
    parsed = parse(_Tagged, '{"pet": {"kind": "DOG", "bark": 1}}', stop_reason="end_turn")
    assert parsed.value.pet == _Dog(kind="dog", bark=1)
    assert [(n.pointer, n.received, n.written) for n in parsed.notes] == [
        ("/pet/kind", "DOG", "dog")
    ]
    with pytest.raises(SchemaViolation):
        parse(_Tagged, '{"pet": {"kind": "DOG", "bark": 1}}', stop_reason="end_turn",
              enum_case="reject")  # fmt: skip
