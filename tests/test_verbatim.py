"""`Verbatim`: a value copied exactly from the source, checked by the parser after parsing (the
same mechanism as `SourceQuote`, with its own marker and its own rule for the empty string)."""

from __future__ import annotations

import json

import pytest
from pydantic import Field

from sdk import CheckFailed
from sdk import Contract
from sdk import SchemaViolation
from sdk import SourceMissing
from sdk import SourceQuote
from sdk import Verbatim
from sdk import parse
from sdk.contract import GROUNDED_KEYS
from sdk.contract import SOURCE_QUOTE_KEY
from sdk.contract import VERBATIM_KEY

SOURCE = (
    "Your parcel from Royal Mail is on its way.\n"
    "Tracking number: RR123456785GB\nOrder: ORD-55123\nRecipient: Ana Lucía Restrepo\n"
)


class Notice(Contract):
    carrier: Verbatim | None = Field(description="The carrier's name, as written.")
    tracking_number: Verbatim | None = Field(pattern=r"^[A-Z]{2}[0-9]{9}[A-Z]{2}$")
    recipient: Verbatim


def _notice(**changes: object) -> str:
    value = {"carrier": "Royal Mail", "tracking_number": "RR123456785GB"}
    return json.dumps({**value, "recipient": "Ana Lucía Restrepo", **changes})


def test_verbatim_is_marked_in_the_schema_beside_its_other_constraints() -> None:
    properties = Notice.json_schema()["properties"]
    assert properties["recipient"] == {"type": "string", VERBATIM_KEY: True}
    [string, null] = properties["tracking_number"]["anyOf"]
    assert string[VERBATIM_KEY] is True and string["pattern"].startswith("^[A-Z]{2}")
    assert null == {"type": "null"}
    assert VERBATIM_KEY in GROUNDED_KEYS and SOURCE_QUOTE_KEY in GROUNDED_KEYS


def test_copied_values_and_nulls_pass() -> None:
    parsed = parse(Notice, _notice(carrier=None), stop_reason="end_turn", source=SOURCE)
    assert parsed.value.carrier is None
    assert parsed.value.tracking_number == "RR123456785GB"
    assert parsed.value.recipient == "Ana Lucía Restrepo"


def test_a_value_not_in_the_source_fails_naming_the_field_the_value_and_the_pointer() -> None:
    text = _notice(tracking_number="RR123456786GB")  # one digit off: well-formed, not copied
    with pytest.raises(CheckFailed) as info:
        parse(Notice, text, stop_reason="end_turn", source=SOURCE)
    [violation] = info.value.violations
    assert violation.pointer == "/tracking_number"
    assert violation.keyword == VERBATIM_KEY
    assert "'tracking_number'" in violation.message and "RR123456786GB" in violation.message
    assert info.value.text == text
    assert not isinstance(info.value, SourceMissing)


def test_a_copy_must_be_exact_not_a_case_or_space_variant() -> None:
    for garbled in ("royal mail", "Royal  Mail", "RoyalMail", "Royal Mail."):
        with pytest.raises(CheckFailed):
            parse(Notice, _notice(carrier=garbled), stop_reason="end_turn", source=SOURCE)


def test_an_empty_verbatim_value_fails_unlike_an_empty_quote() -> None:
    with pytest.raises(CheckFailed) as info:
        parse(Notice, _notice(recipient=""), stop_reason="end_turn", source=SOURCE)
    [violation] = info.value.violations
    assert violation.pointer == "/recipient" and "empty" in violation.message

    class Quoted(Contract):
        evidence: SourceQuote

    assert parse(Quoted, '{"evidence": ""}', stop_reason="end_turn", source=SOURCE).value


def test_an_empty_verbatim_value_passes_when_the_source_is_empty() -> None:
    parsed = parse(Notice, _notice(carrier=None, tracking_number=None, recipient=""),
                   stop_reason="end_turn", source="")  # fmt: skip
    assert parsed.value.recipient == ""
    with pytest.raises(CheckFailed):
        parse(Notice, _notice(carrier="Royal Mail"), stop_reason="end_turn", source="")


def test_the_schema_step_still_runs_first() -> None:
    # In the source, but not what the pattern allows: a schema violation, not a check.
    with pytest.raises(SchemaViolation) as info:
        parse(Notice, _notice(tracking_number="ORD-55123"), stop_reason="end_turn", source=SOURCE)
    assert info.value.violations[0].pointer == "/tracking_number"


def test_verbatim_without_a_source_is_source_missing() -> None:
    with pytest.raises(SourceMissing) as info:
        parse(Notice, _notice(), stop_reason="end_turn")
    assert [(v.pointer, v.keyword) for v in info.value.violations] == [
        ("/carrier", VERBATIM_KEY),
        ("/tracking_number", VERBATIM_KEY),
        ("/recipient", VERBATIM_KEY),
    ]
    assert "source=" in str(info.value)


def test_verbatim_values_not_stated_need_no_source_but_an_empty_one_does() -> None:
    class Optional(Contract):
        carrier: Verbatim | None = None

    assert parse(Optional, '{"carrier": null}', stop_reason="end_turn").value.carrier is None
    # An empty Verbatim is not "not stated": only the source can say whether it is a copy.
    with pytest.raises(SourceMissing) as info:
        parse(Optional, '{"carrier": ""}', stop_reason="end_turn")
    assert [v.pointer for v in info.value.violations] == ["/carrier"]


def test_quotes_and_verbatim_values_in_lists_and_nested_contracts_fail_together() -> None:
    class Party(Contract):
        name: Verbatim
        quote: SourceQuote

    class Parties(Contract):
        parties: list[Party]
        ids: list[Verbatim]

    text = json.dumps(
        {
            "parties": [
                {"name": "Royal Mail", "quote": "is on its way"},
                {"name": "DHL", "quote": "is late"},
            ],
            "ids": ["ORD-55123", "ORD-55124"],
        }
    )
    with pytest.raises(CheckFailed) as info:
        parse(Parties, text, stop_reason="end_turn", source=SOURCE)
    assert [(v.pointer, v.keyword) for v in info.value.violations] == [
        ("/parties/1/name", VERBATIM_KEY),
        ("/parties/1/quote", SOURCE_QUOTE_KEY),
        ("/ids/1", VERBATIM_KEY),
    ]


def test_a_list_item_is_named_by_its_pointer_not_by_its_index() -> None:
    class Carriers(Contract):
        carriers: list[Verbatim]
        quotes: list[SourceQuote]

    text = json.dumps({"carriers": ["Royal Mail", "Globex"], "quotes": ["is late"]})
    with pytest.raises(CheckFailed) as info:
        parse(Carriers, text, stop_reason="end_turn", source=SOURCE)
    assert [(v.pointer, v.message) for v in info.value.violations] == [
        (
            "/carriers/1",
            "value in field '/carriers/1' is not copied exactly from the source: 'Globex'",
        ),
        ("/quotes/0", "quote in field '/quotes/0' is not in the source: 'is late'"),
    ]


def test_escaped_characters_are_compared_after_decoding() -> None:
    source = 'Ref "A\\B" \U0001f4e6 line\nnext'

    class Ref(Contract):
        ref: Verbatim

    for value in ('"A\\B"', "\U0001f4e6 line\nnext", 'Ref "A'):
        parsed = parse(Ref, json.dumps({"ref": value}), stop_reason="end_turn", source=source)
        assert parsed.value.ref == value
    with pytest.raises(CheckFailed):
        parse(Ref, json.dumps({"ref": "A\\\\B"}), stop_reason="end_turn", source=source)


def test_a_huge_invented_value_is_reported_shortened() -> None:
    text = _notice(carrier="X" * 10_000)
    with pytest.raises(CheckFailed) as info:
        parse(Notice, text, stop_reason="end_turn", source=SOURCE)
    assert len(info.value.violations[0].message) < 300
    assert info.value.text == text
