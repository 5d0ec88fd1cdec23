"""`sdk.schema.widen` and `sdk.schema.answer_first`: derived contracts for the eval's arms."""

from __future__ import annotations

import json
from typing import Annotated
from typing import Literal

import pytest
from pydantic import Field
from pydantic import ValidationError

from contracts import Decision
from contracts import InvoiceExtraction
from contracts import ReviewFinding
from contracts import Sentiment
from sdk import CheckFailed
from sdk import Contract
from sdk import SchemaViolation
from sdk import WireEnum
from sdk import parse
from sdk.schema import ESCAPE_MEMBER
from sdk.schema import OPENAI_STRICT
from sdk.schema import answer_first
from sdk.schema import escape_members
from sdk.schema import is_escape_member
from sdk.schema import lint
from sdk.schema import reasoning_field
from sdk.schema import to_wire
from sdk.schema import widen
from sdk.schema._shape import object_fields
from sdk.schema._shape import shape_of
from sdk.workflow.lint import LintCode

REFERENCE = [Decision, InvoiceExtraction, ReviewFinding, Sentiment]


class Colour(WireEnum):
    """A colour."""

    RED = "red"
    BLUE = "blue"


class Part(Contract):
    """A part."""

    name: str = Field(description="Its name.")
    colour: Colour


class Order(Contract):
    """Everything widen has to reach."""

    reasoning: str
    parts: list[Part]
    by_name: dict[str, Part]
    kind: Literal["new", "repeat"]
    note: Annotated[str, Field(max_length=400)]
    count: int = Field(ge=1)


def _every_field(contract: type[Contract]) -> list[tuple[str, dict[str, object]]]:
    root = contract.json_schema()
    nodes = [("", root), *((f"/$defs/{k}", v) for k, v in root.get("$defs", {}).items())]
    return [(f.pointer, f.schema) for p, node in nodes for f in object_fields(node, p)]


@pytest.mark.parametrize("contract", [*REFERENCE, Order])
def test_every_field_may_be_absent_and_every_enum_can_escape(contract: type[Contract]) -> None:
    widened = widen(contract)
    root = widened.json_schema()
    for pointer, node in _every_field(widened):
        shape = shape_of(root, node)  # type: ignore[arg-type]
        assert shape.nullable, pointer
        if shape.enum is not None:
            assert ESCAPE_MEMBER in shape.enum or "other" in shape.enum, pointer
    assert root.get("required", []) == []  # may be left out: absent reads as null
    assert list(root["properties"]) == list(contract.model_fields)  # same generation order
    empty = parse(widened, "{}", stop_reason="end_turn").value
    assert all(getattr(empty, name) is None for name in contract.model_fields)
    # A strict dialect, which wants every field, gets them required and nullable.
    strict = to_wire(widened, OPENAI_STRICT).schema
    assert strict["required"] == list(contract.model_fields)


@pytest.mark.parametrize("contract", REFERENCE)
def test_the_widened_reference_contracts_pass_the_linter(contract: type[Contract]) -> None:
    report = lint(widen(contract))
    assert report.findings == []
    assert LintCode.NO_ABSTENTION not in [s.finding.code for s in report.suppressed]


def test_widened_is_its_own_schema_built_once() -> None:
    widened = widen(Decision)
    assert widen(Decision) is widened
    assert widened.__name__ == "DecisionWidened"
    assert widened.fingerprint() != Decision.fingerprint()
    assert widened.schema_version == Decision.schema_version
    assert widened.json_schema()["description"] == Decision.json_schema()["description"]


def test_an_enum_with_an_escape_member_is_kept_as_it_is() -> None:
    widened = widen(InvoiceExtraction)
    category = widened.json_schema()["properties"]["category"]
    enum = next(option["enum"] for option in category["anyOf"] if "enum" in option)
    assert enum.count("unknown") == 1  # InvoiceCategory had one already: none added
    answer = widen(Decision).json_schema()["properties"]["answer"]
    options = next(option["enum"] for option in answer["anyOf"] if "enum" in option)
    assert options == ["approve", "reject", "escalate", "unknown"]


def test_the_widened_contract_accepts_abstention_and_keeps_bounds() -> None:
    widened = widen(Order)
    value = widened.model_validate_json(
        json.dumps(
            {
                "reasoning": None,
                "parts": [{"name": None, "colour": "unknown"}],
                "by_name": {"x": {"name": "x", "colour": None}},
                "kind": "unknown",
                "note": None,
                "count": None,
            }
        )
    )
    assert value.model_dump(mode="json")["parts"] == [{"name": None, "colour": "unknown"}]
    with pytest.raises(ValidationError):  # ge=1 still holds on the value when there is one
        widened.model_validate_json(json.dumps({**value.model_dump(mode="json"), "count": 0}))
    with pytest.raises(ValidationError):  # max_length too
        widened.model_validate_json(
            json.dumps({**value.model_dump(mode="json"), "note": "x" * 401})
        )
    with pytest.raises(ValidationError):  # and strictness: no coercion, no unknown member
        widened.model_validate_json(json.dumps({**value.model_dump(mode="json"), "kind": "old"}))


def test_a_field_that_was_required_says_null_is_allowed() -> None:
    properties = widen(Decision).json_schema()["properties"]
    assert properties["answer"]["description"].endswith("Null when the source does not say.")
    # A field that was nullable already keeps its description as it was.
    assert (
        widen(InvoiceExtraction).json_schema()["properties"]["total"]["description"]
        == InvoiceExtraction.json_schema()["properties"]["total"]["description"]
    )


def test_the_original_checks_run_on_values_that_fit_the_original() -> None:
    widened = widen(InvoiceExtraction)
    document = InvoiceExtraction.example()
    source = "Total due: EUR 1,280.50"
    wrong_total = json.dumps({**document, "total": 999.0})
    with pytest.raises(CheckFailed, match=r"line items sum to 1280\.5"):
        parse(widened, wrong_total, stop_reason="end_turn", source=source)
    # Evidence quotes are still checked against the source.
    with pytest.raises(CheckFailed, match="not in the source"):
        parse(widened, json.dumps({**document, "evidence": "Total: 5"}), stop_reason="end_turn",
              source=source)  # fmt: skip
    # Where the value used the widened room (no line items at all), the original's sum check,
    # written for a list, does not apply; the value is checked for form.
    absent = json.dumps({**document, "line_items": None, "total": 999.0, "evidence": None})
    parsed = parse(widened, absent, stop_reason="end_turn", source=source)
    assert parsed.value.model_dump()["line_items"] is None


def test_the_schema_validator_enforces_the_widened_schema() -> None:
    with pytest.raises(SchemaViolation):
        parse(widen(Decision), '{"reasoning": null, "answer": "maybe", "confidence": null}',
              stop_reason="end_turn")  # fmt: skip


def test_widen_refuses_what_is_not_a_contract() -> None:
    with pytest.raises(TypeError):
        widen(dict)  # type: ignore[arg-type]


class Node(Contract):
    """A tree: a contract that contains itself."""

    label: str
    children: list[Node]


def test_widen_refuses_a_recursive_contract() -> None:
    with pytest.raises(ValueError, match="recursive"):
        widen(Node)
    with pytest.raises(ValueError, match="recursive"):  # and says so again, not a stale half
        widen(Node)


def test_escape_members_per_field() -> None:
    assert escape_members(InvoiceExtraction)["category"] == frozenset({"unknown"})
    assert escape_members(Decision)["answer"] == frozenset()  # escalate is not "none of these"
    assert escape_members(widen(Decision))["answer"] == frozenset({"unknown"})
    assert is_escape_member("n/a") and is_escape_member("other")
    assert not is_escape_member("escalate") and not is_escape_member(None)


def test_answer_first_moves_the_reasoning_after_the_answer() -> None:
    reordered = answer_first(Decision)
    assert list(reordered.model_fields) == ["answer", "confidence", "reasoning"]
    assert answer_first(Decision) is reordered
    assert reordered.__name__ == "DecisionAnswerFirst"
    # The linter sees what the arm measures.
    assert LintCode.REASONING_AFTER_ANSWER in lint(reordered).codes()
    assert LintCode.REASONING_AFTER_ANSWER not in lint(Decision).codes()
    value = reordered.model_validate_json(
        '{"answer": "approve", "confidence": "high", "reasoning": "fits the cap"}'
    )
    assert value.model_dump(mode="json")["answer"] == "approve"


def test_answer_first_needs_a_reasoning_field_that_is_not_last() -> None:
    assert reasoning_field(Decision) == "reasoning"
    assert reasoning_field(InvoiceExtraction) is None
    with pytest.raises(ValueError, match="no reasoning field"):
        answer_first(InvoiceExtraction)

    class Last(Contract):
        answer: str
        reasoning: str

    with pytest.raises(ValueError, match="already generated last"):
        answer_first(Last)
