"""The schema linter: each finding fires on a small bad contract and not on the fixed one."""

from __future__ import annotations

from typing import Any
from typing import ClassVar

import pytest
from pydantic import Field

from sdk import Contract
from sdk import SourceQuote
from sdk import WireEnum
from sdk.contract import LintIgnore
from sdk.schema.dialects import DIALECTS
from sdk.workflow.lint import LintCode
from sdk.workflow.lint import lint
from sdk.workflow.lint import lint_schema
from sdk.workflow.versioning import discover
from tests.schema_support import contract


class Topic(WireEnum):
    BILLING = "billing"
    SHIPPING = "shipping"


class TopicWithEscape(WireEnum):
    BILLING = "billing"
    SHIPPING = "shipping"
    OTHER = "other"


class Level(WireEnum):
    LOW = "low"
    HIGH = "high"


def _f(kind: Any, **extra: Any) -> tuple[Any, Any]:
    return (kind, Field(description=extra.pop("description", "A field."), **extra))


# (code, bad fields, fixed fields, pointer of the finding, provider)
CASES: list[tuple[LintCode, dict[str, Any], dict[str, Any], str, str | None]] = [
    (
        LintCode.UNBOUNDED_OUTPUT,
        {"labels": _f(list[Level])},
        {"labels": _f(list[Level], max_length=10)},
        "/properties/labels",
        "llamacpp",
    ),
    (
        LintCode.NO_ABSTENTION,
        {"price": _f(float)},
        {"price": _f(float | None)},
        "/properties/price",
        None,
    ),
    (
        LintCode.NO_ABSTENTION,
        {"due_date": _f(str)},
        {"due_date": _f(str | None)},
        "/properties/due_date",
        None,
    ),
    (
        LintCode.NO_ABSTENTION,
        {"created_at": _f(str)},
        {"created_at": _f(str | None)},
        "/properties/created_at",
        None,
    ),
    (
        LintCode.NO_ABSTENTION,
        {"order_id": _f(str)},
        {"order_id": _f(str | None)},
        "/properties/order_id",
        None,
    ),
    (
        LintCode.NO_ABSTENTION,
        {"invoiceNumber": _f(str)},
        {"invoiceNumber": _f(str | None)},
        "/properties/invoiceNumber",
        None,
    ),
    (
        LintCode.ENUM_NO_ESCAPE,
        {"topic": _f(Topic)},
        {"topic": _f(TopicWithEscape)},
        "/properties/topic",
        None,
    ),
    (
        LintCode.ENUM_NO_ESCAPE,
        {"topic": _f(Topic)},
        {"topic": _f(Topic | None)},
        "/properties/topic",
        None,
    ),
    (
        LintCode.REASONING_AFTER_ANSWER,
        {"label": _f(TopicWithEscape), "reasoning": _f(str)},
        {"reasoning": _f(str), "label": _f(TopicWithEscape)},
        "/properties/reasoning",
        None,
    ),
    (
        LintCode.REASONING_AFTER_ANSWER,
        {"decision": _f(bool), "rationale": _f(str)},
        {"rationale": _f(str), "decision": _f(bool)},
        "/properties/rationale",
        None,
    ),
    (
        LintCode.PATTERN_ON_FREE_TEXT,
        {"summary": _f(str, pattern=r"^[A-Z].*\.$")},
        {"summary": _f(str)},
        "/properties/summary",
        None,
    ),
    (
        LintCode.PATTERN_ON_FREE_TEXT,
        {"evidence": _f(SourceQuote, pattern="^.+$")},
        {"evidence": _f(SourceQuote)},
        "/properties/evidence",
        None,
    ),
    (
        LintCode.PATTERN_ON_FREE_TEXT,
        {"notes": _f(list[str], json_schema_extra={"items": {"type": "string", "pattern": "^x"}})},
        {"notes": _f(list[str])},
        "/properties/notes/items",
        None,
    ),
    (
        LintCode.TIGHT_MAX_LENGTH,
        {"explanation": _f(str, max_length=40)},
        {"explanation": _f(str, max_length=2000)},
        "/properties/explanation",
        None,
    ),
    (
        LintCode.DIALECT_STRIPS,
        {"pages": _f(int | None, ge=1)},
        {"pages": _f(int | None)},
        "/properties/pages/anyOf/0/minimum",
        "anthropic",
    ),
    (
        LintCode.DIALECT_STRIPS,
        {"code": _f(str | None, max_length=2)},
        {"code": _f(str | None)},
        "/properties/code/anyOf/0/maxLength",
        "openai_strict",
    ),
    (
        LintCode.VOLATILE_TEXT,
        {
            "body": _f(
                str, description="Reply to request req_8f3a9c2b1d, sent 2026-03-14T09:12:00Z."
            )
        },
        {"body": _f(str, description="The reply to the customer's request.")},
        "/properties/body",
        None,
    ),
    (
        LintCode.VOLATILE_TEXT,
        {"body": _f(str, description="Session 6f1c2a44-93b1-4c0e-8d7a-2f0e4b9c1a77 reply.")},
        {"body": _f(str, description="The reply.")},
        "/properties/body",
        None,
    ),
    (
        LintCode.VOLATILE_TEXT,
        {"body": _f(str, description="As of 2026-03-14, write the reply.")},
        {"body": _f(str, description="Write the reply.")},
        "/properties/body",
        None,
    ),
]


@pytest.mark.parametrize(
    ("code", "bad", "fixed", "pointer", "provider"),
    CASES,
    ids=[f"{case[0].value}-{next(iter(case[1]))}" for case in CASES],
)
def test_finding_fires_on_the_bad_contract_and_not_on_the_fixed_one(
    code: LintCode, bad: dict[str, Any], fixed: dict[str, Any], pointer: str, provider: str | None
) -> None:
    report = lint(contract(**bad), provider=provider)
    hits = [f for f in report.findings if f.code is code]
    assert [f.pointer for f in hits] == [pointer]
    finding = hits[0]
    assert finding.message and finding.fix
    assert "\n" not in finding.message  # one line
    if provider is not None:
        assert finding.provider == provider
        assert provider in finding.message
    assert code not in lint(contract(**fixed), provider=provider).codes()


def test_every_code_has_a_case() -> None:
    covered = {case[0] for case in CASES} | {
        LintCode.TOO_LARGE,  # size tests below
        LintCode.TOO_DEEP,
        LintCode.RECURSIVE_SCHEMA,
        LintCode.BAD_SUPPRESSION,  # suppression tests below
    }
    assert covered == set(LintCode)


def test_identifiers_and_structured_strings_are_not_free_text() -> None:
    report = lint(contract(sku=_f(str | None, pattern="^[A-Z]{3}-[0-9]{4}$", max_length=8)))
    assert report.findings == []


def test_scales_need_no_escape_member() -> None:
    report = lint(contract(reasoning=_f(str), confidence=_f(Level), severity=_f(Level)))
    assert report.findings == []


def test_stripped_constraints_are_reported_only_for_a_chosen_provider() -> None:
    bounded = contract(pages=_f(int | None, ge=1))
    assert lint(bounded).findings == []
    assert lint(bounded, provider="vllm").findings == []  # vLLM enforces minimum
    assert lint(bounded, provider="anthropic").codes() == [LintCode.DIALECT_STRIPS]


def test_an_unknown_provider_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="anthropic"):
        lint(contract(a=_f(str)), provider="nope")


# --- grammar limits ------------------------------------------------------------------------


def _optional_fields(count: int) -> dict[str, Any]:
    return {
        f"note_{i}": (str | None, Field(default=None, description="A note.")) for i in range(count)
    }


def test_too_many_optional_fields_for_anthropic() -> None:
    report = lint(contract(**_optional_fields(25)), provider="anthropic")
    assert report.codes().count(LintCode.TOO_LARGE) == 2  # 25 optional, 25 unions
    assert any(
        "25 optional fields: anthropic compiles at most 24" in f.message for f in report.findings
    )
    assert (
        LintCode.TOO_LARGE
        not in lint(contract(**_optional_fields(16)), provider="anthropic").codes()
    )


def test_too_many_union_fields_for_anthropic() -> None:
    nullable = {f"v{i}": (float | None, Field(description="A value.")) for i in range(17)}
    report = lint(contract(**nullable), provider="anthropic")
    assert [f.code for f in report.findings] == [LintCode.TOO_LARGE]
    assert "17 fields with union types" in report.findings[0].message


def test_without_a_provider_every_documented_limit_is_checked() -> None:
    report = lint(contract(**_optional_fields(25)))
    assert {f.provider for f in report.findings} == {"anthropic"}
    assert report.codes() == [LintCode.TOO_LARGE, LintCode.TOO_LARGE]


def _nested(levels: int) -> type[Contract]:
    inner = contract("Level0", text=_f(str))
    for level in range(1, levels):
        inner = contract(f"Level{level}", child=_f(inner))
    return inner


def test_nesting_deeper_than_openai_accepts() -> None:
    report = lint(_nested(11), provider="openai_strict")
    assert report.codes() == [LintCode.TOO_DEEP]
    assert report.findings[0].pointer == "/$defs/Level0"
    assert "11 levels" in report.findings[0].message
    assert lint(_nested(10), provider="openai_strict").findings == []


class Tree(Contract):
    """A tree of labels."""

    label: str = Field(description="The node's label.")
    children: list[Tree] = Field(description="Sub-trees, possibly none.")


def test_recursion_is_reported_for_anthropic_only() -> None:
    report = lint(Tree, provider="anthropic")
    assert report.codes() == [LintCode.RECURSIVE_SCHEMA]
    assert report.findings[0].pointer == "/$defs/Tree"
    assert lint(Tree, provider="openai_strict").findings == []


# --- suppressions --------------------------------------------------------------------------


class Rated(Contract):
    """A rating with a deliberate required score."""

    lint_ignore: ClassVar[LintIgnore] = {
        "/properties/score": {"no-abstention": "every review has a star rating"},
    }

    reasoning: str = Field(description="Why.")
    score: int = Field(description="Stars.")


def test_a_suppression_with_a_reason_moves_the_finding_aside() -> None:
    report = lint(Rated)
    assert report.findings == []
    (suppressed,) = report.suppressed
    assert suppressed.finding.code is LintCode.NO_ABSTENTION
    assert suppressed.reason == "every review has a star rating"


def test_a_suppression_does_not_change_the_fingerprint() -> None:
    plain = contract(
        "Rated",
        doc="A rating with a deliberate required score.",
        reasoning=(str, Field(description="Why.")),
        score=(int, Field(description="Stars.")),
    )
    assert plain.fingerprint() == Rated.fingerprint()


class Line(Contract):
    """One line."""

    lint_ignore: ClassVar[LintIgnore] = {
        "/properties/qty": {"no-abstention": "lines state a quantity"}
    }

    qty: int = Field(description="How many.")


class Order(Contract):
    """An order."""

    lines: list[Line] = Field(description="Its lines.")
    total: float | None = Field(description="Total, or null.")


def test_a_nested_contracts_suppressions_apply_where_it_is_used() -> None:
    report = lint(Order)
    assert report.findings == []
    assert [s.finding.pointer for s in report.suppressed] == ["/$defs/Line/properties/qty"]


@pytest.mark.parametrize(
    ("ignore", "message"),
    [
        ({"/properties/score": {"no-such-code": "why"}}, "unknown code"),
        ({"/properties/score": {"no-abstention": "  "}}, "without a reason"),
        ({"/properties/stars": {"no-abstention": "renamed"}}, "not in the schema"),
    ],
)
def test_a_bad_suppression_is_itself_a_finding(ignore: dict[str, Any], message: str) -> None:
    schema = Rated.json_schema()
    report = lint_schema(schema, ignore=ignore)
    bad = [f for f in report.findings if f.code is LintCode.BAD_SUPPRESSION]
    assert len(bad) == 1 and message in bad[0].message
    # and the finding it meant to hide is not hidden
    assert LintCode.NO_ABSTENTION in report.codes()


# --- the reference contracts ---------------------------------------------------------------


@pytest.mark.parametrize("provider", [None, *DIALECTS])
def test_reference_contracts_lint_clean_with_reasons_for_each_suppression(
    provider: str | None,
) -> None:
    for reference in discover("contracts"):
        report = lint(reference, provider=provider)
        assert report.findings == [], (reference.__name__, report.findings)
        assert all(len(item.reason) > 20 for item in report.suppressed)


def test_reference_suppressions_are_deliberate_and_few() -> None:
    suppressed = {
        (reference.__name__, item.finding.pointer, item.finding.code.value)
        for reference in discover("contracts")
        for item in lint(reference).suppressed
    }
    assert suppressed == {
        ("Decision", "/properties/answer", "enum-no-escape"),
        ("Sentiment", "/properties/sentiment", "enum-no-escape"),
        ("Sentiment", "/properties/score", "no-abstention"),
    }
