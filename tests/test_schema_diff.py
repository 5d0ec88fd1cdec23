"""`diff_schemas`: every kind of change, where it is, and whom it breaks."""

from __future__ import annotations

from typing import Annotated
from typing import Any
from typing import Literal
from typing import Union

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from pydantic import Discriminator
from pydantic import Field
from pydantic import Tag

from contracts import Decision
from contracts import InvoiceExtraction
from sdk import Contract
from sdk import ContractViolation
from sdk import SourceQuote
from sdk import WireEnum
from sdk import parse
from sdk.workflow.diff import Change
from sdk.workflow.diff import ChangeKind
from sdk.workflow.diff import Impact
from sdk.workflow.diff import diff_schemas
from tests.schema_support import contract
from tests.strategies import from_schema

B, C = Impact.BREAKING, Impact.COMPATIBLE


class Color(WireEnum):
    RED = "red"
    GREEN = "green"


class ColorMore(WireEnum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class ColorSwapped(WireEnum):
    GREEN = "green"
    RED = "red"


def _text(**extra: Any) -> tuple[type, Any]:
    return (str, Field(description="Some text.", **extra))


class Approve(Contract):
    """Approve the request."""

    kind: Literal["approve"] = Field(default="approve", description="The outcome's tag.")
    note: str = Field(default="", description="A note for the requester.")


class Reject(Contract):
    """Reject the request."""

    kind: Literal["reject"] = Field(default="reject", description="The outcome's tag.")
    reason: str = Field(default="", description="Why it is rejected.")


# One outcome field, as a discriminated union (`oneOf` + `discriminator`) and as a plain one.
_TAGGED = (
    Annotated[Approve | Reject, Field(discriminator="kind")],
    Field(description="The outcome."),
)
_PLAIN = (Approve | Reject, Field(description="The outcome."))


# (kind, old fields, new fields, pointer, producers, consumers): one row per kind of change.
CASES: list[tuple[ChangeKind, dict[str, Any], dict[str, Any], str, Impact, Impact]] = [
    (
        ChangeKind.FIELD_ADDED_REQUIRED,
        {"a": _text()},
        {"a": _text(), "b": _text()},
        "/properties/b",
        B,
        B,
    ),
    (
        ChangeKind.FIELD_ADDED_OPTIONAL,
        {"a": _text()},
        {"a": _text(), "b": (str | None, Field(default=None, description="Maybe."))},
        "/properties/b",
        C,
        C,
    ),
    (ChangeKind.FIELD_REMOVED, {"a": _text(), "b": _text()}, {"a": _text()}, "/properties/b", C, B),
    (
        ChangeKind.FIELD_NOW_REQUIRED,
        {"a": (str, Field(default="x", description="Some text."))},
        {"a": _text()},
        "/properties/a",
        B,
        B,
    ),
    (
        ChangeKind.FIELD_NOW_OPTIONAL,
        {"a": _text()},
        {"a": (str, Field(default="x", description="Some text."))},
        "/properties/a",
        C,
        C,
    ),
    (
        ChangeKind.TYPE_NARROWED,
        {"n": (float, Field(description="N."))},
        {"n": (int, Field(description="N."))},
        "/properties/n",
        B,
        B,
    ),
    (
        ChangeKind.TYPE_WIDENED,
        {"n": (int, Field(description="N."))},
        {"n": (float, Field(description="N."))},
        "/properties/n",
        C,
        C,
    ),
    (
        ChangeKind.TYPE_CHANGED,
        {"n": (int, Field(description="N."))},
        {"n": (str, Field(description="N."))},
        "/properties/n",
        B,
        B,
    ),
    (
        ChangeKind.ENUM_MEMBER_ADDED,
        {"c": (Color, Field(description="C."))},
        {"c": (ColorMore, Field(description="C."))},
        "/properties/c",
        C,
        C,
    ),
    (
        ChangeKind.ENUM_MEMBER_REMOVED,
        {"c": (ColorMore, Field(description="C."))},
        {"c": (Color, Field(description="C."))},
        "/properties/c",
        B,
        B,
    ),
    (
        ChangeKind.ENUM_REORDERED,
        {"c": (Color, Field(description="C."))},
        {"c": (ColorSwapped, Field(description="C."))},
        "/properties/c",
        C,
        C,
    ),
    (
        ChangeKind.ALTERNATIVES_REORDERED,
        {"p": (int | str, Field(description="P."))},
        {"p": (str | int, Field(description="P."))},
        "/properties/p",
        B,
        B,
    ),
    (
        ChangeKind.NULLABLE_ADDED,
        {"a": _text()},
        {"a": (str | None, Field(description="Some text."))},
        "/properties/a",
        C,
        C,
    ),
    (
        ChangeKind.NULLABLE_REMOVED,
        {"a": (str | None, Field(description="Some text."))},
        {"a": _text()},
        "/properties/a",
        B,
        B,
    ),
    (ChangeKind.DISCRIMINATOR_ADDED, {"o": _PLAIN}, {"o": _TAGGED}, "/properties/o", B, B),
    (ChangeKind.DISCRIMINATOR_REMOVED, {"o": _TAGGED}, {"o": _PLAIN}, "/properties/o", B, C),
    (
        ChangeKind.CONSTRAINT_TIGHTENED,
        {"n": (int, Field(ge=0, description="N."))},
        {"n": (int, Field(ge=1, description="N."))},
        "/properties/n",
        B,
        B,
    ),
    (
        ChangeKind.CONSTRAINT_LOOSENED,
        {"a": _text(max_length=10)},
        {"a": _text(max_length=20)},
        "/properties/a",
        C,
        C,
    ),
    (
        ChangeKind.CONSTRAINT_CHANGED,
        {"a": _text(pattern="^a+$")},
        {"a": _text(pattern="^b+$")},
        "/properties/a",
        B,
        B,
    ),
    (
        ChangeKind.DESCRIPTION_CHANGED,
        {"a": (str, Field(description="Old words."))},
        {"a": (str, Field(description="New words."))},
        "/properties/a",
        C,
        C,
    ),
    (
        ChangeKind.DEFAULT_CHANGED,
        {"a": (int, Field(default=3, description="A."))},
        {"a": (int, Field(default=4, description="A."))},
        "/properties/a",
        B,
        B,
    ),
    (
        ChangeKind.ORDER_CHANGED,
        {"a": _text(), "b": _text()},
        {"b": _text(), "a": _text()},
        "/properties",
        B,
        C,
    ),
    (
        ChangeKind.KEYWORD_CHANGED,
        {"q": (str, Field(description="Q."))},
        {"q": (SourceQuote, Field(description="Q."))},
        "/properties/q",
        B,
        B,
    ),
]


def test_every_kind_has_a_case() -> None:
    # Grammar kinds have theirs in tests/test_grammar_diff.py.
    grammar_kinds = {k for k in ChangeKind if k.value.startswith("grammar-")}
    assert {case[0] for case in CASES} == set(ChangeKind) - grammar_kinds


@pytest.mark.parametrize(
    ("kind", "old", "new", "pointer", "producers", "consumers"),
    CASES,
    ids=[case[0].value for case in CASES],
)
def test_each_kind_is_found_and_classified(
    kind: ChangeKind,
    old: dict[str, Any],
    new: dict[str, Any],
    pointer: str,
    producers: Impact,
    consumers: Impact,
) -> None:
    diff = diff_schemas(contract(**old).json_schema(), contract(version=2, **new).json_schema())
    found = diff.of_kind(kind)
    assert [change.pointer for change in found] == [pointer]
    change = found[0]
    assert (change.producers, change.consumers) == (producers, consumers)
    assert change.detail and change.why
    assert diff.breaking_for_producers == any(c.producers is B for c in diff.changes)
    assert diff.breaking_for_consumers == any(c.consumers is B for c in diff.changes)


def _kinds(old: type[Contract], new: type[Contract]) -> list[tuple[ChangeKind, str]]:
    return [(c.kind, c.pointer) for c in diff_schemas(old.json_schema(), new.json_schema()).changes]


def test_a_rename_is_a_removal_plus_an_addition_with_a_hint() -> None:
    old = contract(a=_text(), b=(int, Field(description="B.")))
    new = contract(a=_text(), c=(int, Field(description="B.")))
    diff = diff_schemas(old.json_schema(), new.json_schema())
    assert [(c.kind, c.pointer) for c in diff.changes] == [
        (ChangeKind.FIELD_REMOVED, "/properties/b"),
        (ChangeKind.FIELD_ADDED_REQUIRED, "/properties/c"),
    ]
    assert "renamed?" in diff.changes[0].detail


def test_an_unchanged_schema_has_no_changes_and_the_same_fingerprint() -> None:
    diff = diff_schemas(Decision.json_schema(), Decision.json_schema())
    assert diff.changes == []
    assert diff.identical
    assert diff.old == diff.new
    assert diff.new.fingerprint == Decision.fingerprint()


def test_a_version_bump_alone_changes_the_fingerprint_but_lists_no_change() -> None:
    old = contract(a=_text())
    new = contract(version=2, a=_text())
    diff = diff_schemas(old.json_schema(), new.json_schema())
    assert diff.changes == []
    assert not diff.identical
    assert (diff.old.version, diff.new.version) == (1, 2)
    assert diff.new.fingerprint == new.fingerprint()


def test_the_docstring_is_the_root_description() -> None:
    old = contract(doc="Old summary.", a=_text())
    new = contract(doc="New summary.", a=_text())
    assert _kinds(old, new) == [(ChangeKind.DESCRIPTION_CHANGED, "")]


def test_changes_inside_a_nested_contract_point_into_its_definition() -> None:
    inner_old = contract("Inner", x=(int, Field(ge=0, description="X.")))
    inner_new = contract("Inner", x=(int, Field(ge=5, description="X.")), y=_text())
    old = contract(items=(list[inner_old], Field(description="All.")))  # type: ignore[valid-type]
    new = contract(items=(list[inner_new], Field(description="All.")))  # type: ignore[valid-type]
    assert _kinds(old, new) == [
        (ChangeKind.CONSTRAINT_TIGHTENED, "/$defs/Inner/properties/x"),
        (ChangeKind.FIELD_ADDED_REQUIRED, "/$defs/Inner/properties/y"),
    ]


def test_a_constraint_inside_a_nullable_field_is_compared() -> None:
    old = InvoiceExtraction.json_schema()
    new = InvoiceExtraction.json_schema()
    new["properties"]["currency"]["anyOf"][0]["maxLength"] = 4
    new["$defs"]["LineItem"]["properties"]["quantity"]["anyOf"][0]["minimum"] = 1
    changes = diff_schemas(old, new).changes
    # In field order: currency comes before line_items, whose items are LineItems.
    assert [(c.kind, c.pointer, c.detail) for c in changes] == [
        (ChangeKind.CONSTRAINT_LOOSENED, "/properties/currency", "maxLength 3 -> 4"),
        (ChangeKind.CONSTRAINT_TIGHTENED, "/$defs/LineItem/properties/quantity", "minimum 0 -> 1"),
    ]


def test_bounds_move_the_right_way() -> None:
    def kind(old: dict[str, Any], new: dict[str, Any]) -> ChangeKind:
        schema = {"type": "object", "properties": {"n": {"type": "number"}}}
        before = {**schema, "properties": {"n": {"type": "number", **old}}}
        after = {**schema, "properties": {"n": {"type": "number", **new}}}
        (change,) = diff_schemas(before, after).changes
        return change.kind

    assert kind({"maximum": 10}, {"maximum": 5}) is ChangeKind.CONSTRAINT_TIGHTENED
    assert kind({"maximum": 5}, {"maximum": 10}) is ChangeKind.CONSTRAINT_LOOSENED
    assert kind({"minimum": 5}, {}) is ChangeKind.CONSTRAINT_LOOSENED
    assert kind({"multipleOf": 0.5}, {"multipleOf": 1.5}) is ChangeKind.CONSTRAINT_TIGHTENED
    assert kind({"multipleOf": 1.5}, {"multipleOf": 0.5}) is ChangeKind.CONSTRAINT_LOOSENED
    assert kind({"multipleOf": 2}, {"multipleOf": 3}) is ChangeKind.CONSTRAINT_CHANGED


class Node(Contract):
    """A tree."""

    label: str = Field(description="The label.")
    children: list[Node] = Field(description="Sub-trees.")


class Node2(Contract):
    """A tree."""

    label: str = Field(description="The node's label.")
    children: list[Node2] = Field(description="Sub-trees.")


def test_a_recursive_schema_is_compared_once_and_terminates() -> None:
    old, new = Node.json_schema(), Node2.json_schema()
    changes = diff_schemas(old, new).changes
    # The root is the definition too (Pydantic refs it from $defs): one description change.
    descriptions = [c for c in changes if c.kind is ChangeKind.DESCRIPTION_CHANGED]
    assert len(descriptions) == 1
    assert descriptions[0].detail == 'description: "The label." -> "The node\'s label."'


def test_to_json_carries_the_classification() -> None:
    old = contract(a=_text(), b=_text())
    new = contract(version=2, a=_text())
    data = diff_schemas(old.json_schema(), new.json_schema()).to_json()
    assert data["old"]["version"] == 1 and data["new"]["version"] == 2
    assert data["breaking_for_consumers"] is True
    assert data["breaking_for_producers"] is False
    assert data["changes"] == [
        Change(ChangeKind.FIELD_REMOVED, "/properties/b", "field 'b' removed").to_json()
    ]


COMPATIBLE_FOR_STORED = [case for case in CASES if case[5] is C]


@pytest.mark.parametrize(
    ("kind", "old", "new"),
    [case[:3] for case in COMPATIBLE_FOR_STORED],
    ids=[case[0].value for case in COMPATIBLE_FOR_STORED],
)
def test_what_the_diff_calls_compatible_for_stored_values_reads_without_a_migration(
    kind: ChangeKind, old: dict[str, Any], new: dict[str, Any]
) -> None:
    # The diff's word on stored values is what `from_stored` does: values of the old version
    # read as the new one with no migrate_from step written.
    before, after = contract(**old), contract(version=2, **new)
    diff = diff_schemas(before.json_schema(), after.json_schema())
    assert not diff.breaking_for_consumers

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(from_schema(before.json_schema()))
    def reads(value: dict[str, Any]) -> None:
        after.from_stored(value, version=1)

    reads()


# A tagged union (`oneOf` + `discriminator`) and the same edits under a plain one (`anyOf`): the
# diff walks both kinds of alternatives by one path, so each edit inside branch A is found alike.
_BRANCH_A: dict[str, dict[str, Any]] = {
    "old": {"n": (int, Field(description="N."))},
    "field removed": {},
    "required field added": {"n": (int, Field(description="N.")), "m": _text()},
    "constraint tightened": {"n": (int, Field(le=3, description="N."))},
    "type changed": {"n": (str, Field(description="N."))},
}
_BRANCH_EDITS: list[tuple[str, ChangeKind, str]] = [
    ("field removed", ChangeKind.FIELD_REMOVED, "/$defs/A/properties/n"),
    ("required field added", ChangeKind.FIELD_ADDED_REQUIRED, "/$defs/A/properties/m"),
    ("constraint tightened", ChangeKind.CONSTRAINT_TIGHTENED, "/$defs/A/properties/n"),
    ("type changed", ChangeKind.TYPE_CHANGED, "/$defs/A/properties/n"),
]


def _tagged(tags: list[str], *, a: str = "old", discriminated: bool = True) -> type[Contract]:
    """`p: A | B | ...`, one branch per tag (`k` its const), A with `_BRANCH_A[a]`'s fields."""
    branches = [
        contract(
            tag.upper(),
            k=(Literal[tag], Field(description="Tag.")),
            **(_BRANCH_A[a] if tag == "a" else {}),
        )
        for tag in tags
    ]
    union: Any = Union[tuple(branches)] if len(branches) > 1 else branches[0]  # noqa: UP007
    if discriminated:
        return contract(p=(union, Field(discriminator="k", description="P.")))
    return contract(p=(union, Field(description="P.")))


@pytest.mark.parametrize(
    ("edit", "kind", "pointer"), _BRANCH_EDITS, ids=[e[0] for e in _BRANCH_EDITS]
)
@pytest.mark.parametrize("discriminated", [True, False], ids=["oneOf", "anyOf"])
def test_an_edit_inside_a_union_branch_is_found_under_oneof_and_anyof(
    edit: str, kind: ChangeKind, pointer: str, discriminated: bool
) -> None:
    old = _tagged(["a", "b"], discriminated=discriminated)
    new = _tagged(["a", "b"], a=edit, discriminated=discriminated)
    assert ("oneOf" in old.json_schema()["properties"]["p"]) is discriminated
    diff = diff_schemas(old.json_schema(), new.json_schema())
    assert [(c.kind, c.pointer) for c in diff.changes] == [(kind, pointer)]
    assert diff.breaking_for_consumers


def test_tagged_branches_are_matched_by_their_discriminator_value() -> None:
    # Reordered and one added: matched by `k`, so the edit inside A is still found, at A.
    old = _tagged(["a", "b"])
    new = _tagged(["c", "b", "a"], a="constraint tightened")
    changes = diff_schemas(old.json_schema(), new.json_schema()).changes
    assert [(c.kind, c.pointer, c.detail) for c in changes] == [
        (ChangeKind.TYPE_WIDENED, "/properties/p", 'alternative k="c" (#/$defs/C) added'),
        (ChangeKind.CONSTRAINT_TIGHTENED, "/$defs/A/properties/n", "maximum (none) -> 3"),
    ]
    assert not changes[0].breaking


def test_a_tagged_branch_removed_is_a_narrowing_naming_the_branch() -> None:
    old = _tagged(["a", "b", "c"])
    new = _tagged(["a", "c"])
    diff = diff_schemas(old.json_schema(), new.json_schema())
    assert [(c.kind, c.pointer, c.detail) for c in diff.changes] == [
        (ChangeKind.TYPE_NARROWED, "/properties/p", 'alternative k="b" (#/$defs/B) removed'),
    ]
    assert diff.breaking_for_consumers and diff.breaking_for_producers


def test_a_changed_default_is_found_as_a_change_of_values() -> None:
    # The same output reads as another value, so it is not a description change.
    old = contract(a=(int, Field(default=3, description="A.")))
    new = contract(version=2, a=(int, Field(default=4, description="A.")))
    assert (old.model_validate_json("{}").a, new.model_validate_json("{}").a) == (3, 4)
    diff = diff_schemas(old.json_schema(), new.json_schema())
    assert [(c.kind, c.detail) for c in diff.changes] == [
        (ChangeKind.DEFAULT_CHANGED, "default: 3 -> 4")
    ]
    assert diff.breaking_for_producers and diff.breaking_for_consumers


def _pick(value: Any) -> str | None:
    """A callable discriminator: the branch a value names in `kind`."""
    found = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return found if isinstance(found, str) else None


# Tagged by a function: Pydantic writes the same `oneOf`, with no `discriminator` beside it.
def _by_function(first: tuple[type[Contract], str], second: tuple[type[Contract], str]) -> Any:
    """The union of two (contract, tag) branches, tagged by `_pick` (each by its tag's value)."""
    return (
        Annotated[
            Annotated[first[0], Tag(first[1])] | Annotated[second[0], Tag(second[1])],
            Discriminator(_pick),
        ],
        Field(description="The outcome."),
    )


_TAGGED_BY_FUNCTION = _by_function((Approve, "approve"), (Reject, "reject"))


@pytest.mark.parametrize(
    ("old", "new", "kind", "detail"),
    [
        (
            _TAGGED,
            _TAGGED_BY_FUNCTION,
            ChangeKind.DISCRIMINATOR_REMOVED,
            'discriminator "kind" removed',
        ),
        (
            _TAGGED_BY_FUNCTION,
            _TAGGED,
            ChangeKind.DISCRIMINATOR_ADDED,
            'discriminator "kind" added',
        ),
    ],
    ids=["removed", "added"],
)
def test_a_discriminator_that_comes_or_goes_under_the_same_oneof_is_found(
    old: Any, new: Any, kind: ChangeKind, detail: str
) -> None:
    # The same branches, the same `oneOf`: only the `discriminator` mapping differs (it was
    # "0 change(s)"), and it is breaking either way, so `--fail-on-breaking` stops on it.
    before, after = contract(o=old).json_schema(), contract(o=new).json_schema()
    assert "oneOf" in before["properties"]["o"] and "oneOf" in after["properties"]["o"]
    diff = diff_schemas(before, after)
    assert [(c.kind, c.pointer, c.detail) for c in diff.changes] == [
        (kind, "/properties/o", detail)
    ]
    assert diff.breaking_for_producers


def test_the_discriminator_kinds_say_what_parse_does_with_an_untagged_output() -> None:
    # Each branch's tag has a default, so an output may leave it out: a plain union reads it by
    # its shape, a discriminated one refuses it. The diff names the change once, with the
    # `anyOf`/`oneOf` switch Pydantic writes beside it, not as a loosened or tightened keyword.
    plain, tagged = contract(o=_PLAIN), contract(version=2, o=_TAGGED)
    untagged = '{"o": {"reason": "Out of policy."}}'
    assert isinstance(parse(plain, untagged, stop_reason="end_turn").value.o, Reject)
    with pytest.raises(ContractViolation, match="Unable to extract tag"):
        parse(tagged, untagged, stop_reason="end_turn")
    # Without the tag, the branch is the first that fits: `{}` was refused, now it is an Approve.
    assert isinstance(parse(plain, '{"o": {}}', stop_reason="end_turn").value.o, Approve)
    added = diff_schemas(plain.json_schema(), tagged.json_schema())
    assert [(c.kind, c.detail) for c in added.changes] == [
        (ChangeKind.DISCRIMINATOR_ADDED, 'discriminator "kind" added (anyOf -> oneOf)')
    ]
    assert added.breaking_for_producers and added.breaking_for_consumers
    removed = diff_schemas(tagged.json_schema(), plain.json_schema())
    assert [(c.kind, c.detail) for c in removed.changes] == [
        (ChangeKind.DISCRIMINATOR_REMOVED, 'discriminator "kind" removed (oneOf -> anyOf)')
    ]
    assert removed.breaking_for_producers and not removed.breaking_for_consumers


@pytest.mark.parametrize("nullable", [False, True], ids=["A", "A | None"])
def test_one_contract_with_a_defaulted_tag_that_gains_or_loses_a_discriminator_is_found(
    nullable: bool,
) -> None:
    # `Approve` (its tag has a default) grown into the tagged `Approve | Reject`, and back: not
    # only a branch added or removed. An output that leaves the tag out read as an Approve, the
    # discriminated union refuses it; and the reverse. The same kinds and judgments as between
    # two unions (`test_the_discriminator_kinds_say_what_parse_does_with_an_untagged_output`).
    outcome = _TAGGED[0] | None if nullable else _TAGGED[0]
    lone = contract(o=(Approve | None if nullable else Approve, Field(description="The outcome.")))
    tagged = contract(version=2, o=(outcome, Field(description="The outcome.")))
    untagged = '{"o": {"note": "Fine."}}'
    assert parse(lone, untagged, stop_reason="end_turn").value.o == Approve(note="Fine.")
    with pytest.raises(ContractViolation, match="Unable to extract tag"):
        parse(tagged, untagged, stop_reason="end_turn")
    reject = 'kind="reject" (#/$defs/Reject)'
    added = diff_schemas(lone.json_schema(), tagged.json_schema())
    assert [(c.kind, c.pointer, c.detail) for c in added.changes] == [
        (
            ChangeKind.DISCRIMINATOR_ADDED,
            "/properties/o",
            'discriminator "kind" added (one alternative -> oneOf)',
        ),
        (ChangeKind.TYPE_WIDENED, "/properties/o", f"alternative {reject} added"),
    ]
    assert added.breaking_for_producers and added.breaking_for_consumers
    removed = diff_schemas(tagged.json_schema(), lone.json_schema())
    assert [(c.kind, c.pointer, c.detail) for c in removed.changes] == [
        (
            ChangeKind.DISCRIMINATOR_REMOVED,
            "/properties/o",
            'discriminator "kind" removed (oneOf -> one alternative)',
        ),
        (ChangeKind.TYPE_NARROWED, "/properties/o", f"alternative {reject} removed"),
    ]
    assert [(c.producers, c.consumers) for c in removed.changes] == [(B, C), (B, B)]


def test_a_nullable_union_that_loses_its_discriminator_is_found() -> None:
    old = contract(o=(_TAGGED[0] | None, Field(description="The outcome, or null.")))
    new = contract(o=(Approve | Reject | None, Field(description="The outcome, or null.")))
    assert [
        (c.kind, c.pointer) for c in diff_schemas(old.json_schema(), new.json_schema()).changes
    ] == [(ChangeKind.DISCRIMINATOR_REMOVED, "/properties/o")]


# Branches `A` (`n`, and `n <= 3` once edited), `B` and `C` of a field `p`, each tagged by `k`.
_A = contract("A", k=(Literal["a"], Field(description="Tag.")), n=(int, Field(description="N.")))
_A_EDITED = contract(
    "A", k=(Literal["a"], Field(description="Tag.")), n=(int, Field(le=3, description="N."))
)
_B = contract("B", k=(Literal["b"], Field(description="Tag.")), m=_text())
_C = contract("C", k=(Literal["c"], Field(description="Tag.")), z=_text())
_A_TIGHTENED = (ChangeKind.CONSTRAINT_TIGHTENED, "/$defs/A/properties/n", "maximum (none) -> 3")


def _field(annotation: Any, **extra: Any) -> type[Contract]:
    return contract(p=(annotation, Field(description="P.", **extra)))


@pytest.mark.parametrize("nullable", [False, True], ids=["A", "A | None"])
def test_a_union_narrowed_to_one_branch_keeps_that_branch_and_its_edit(nullable: bool) -> None:
    # `A | B` becoming `A` (A edited): B removed and A walked, not "A and B removed, an object
    # added" (the lone side was compared resolved, its `$ref` lost).
    old = _field(_A | _B | None if nullable else _A | _B)
    new = _field(_A_EDITED | None if nullable else _A_EDITED)
    changes = diff_schemas(old.json_schema(), new.json_schema()).changes
    assert [(c.kind, c.pointer, c.detail) for c in changes] == [
        (ChangeKind.TYPE_NARROWED, "/properties/p", 'alternative {"$ref": "#/$defs/B"} removed'),
        _A_TIGHTENED,
    ]


@pytest.mark.parametrize("discriminated", [True, False], ids=["oneOf", "anyOf"])
def test_one_type_grown_into_a_union_keeps_its_branch_and_its_edit(discriminated: bool) -> None:
    old = _field(_A)
    new = _field(_A_EDITED | _B, **({"discriminator": "k"} if discriminated else {}))
    changes = diff_schemas(old.json_schema(), new.json_schema()).changes
    added = 'k="b" (#/$defs/B)' if discriminated else '{"$ref": "#/$defs/B"}'
    assert [(c.kind, c.pointer, c.detail) for c in changes] == [
        (ChangeKind.TYPE_WIDENED, "/properties/p", f"alternative {added} added"),
        _A_TIGHTENED,
    ]


def test_an_untagged_branch_is_matched_by_its_definition_name_when_branches_come() -> None:
    # A's branch carries its own description, so its bytes change with it: matched by `A`.
    old = _field(Annotated[_A, Field(description="An A.")] | _B)
    new = _field(Annotated[_A, Field(description="An A, kept.")] | _B | _C)
    changes = diff_schemas(old.json_schema(), new.json_schema()).changes
    assert [(c.kind, c.pointer, c.detail) for c in changes] == [
        (ChangeKind.TYPE_WIDENED, "/properties/p", 'alternative {"$ref": "#/$defs/C"} added'),
        (
            ChangeKind.DESCRIPTION_CHANGED,
            "/properties/p/anyOf/0",
            'description: "An A." -> "An A, kept."',
        ),
    ]


def test_an_inline_branch_is_matched_by_its_only_shared_type_when_branches_come() -> None:
    old = contract(p=(Union[Literal["x"], int], Field(description="P.")))  # noqa: UP007
    new = contract(p=(Union[Literal["x", "y"], int, bool], Field(description="P.")))  # noqa: UP007
    changes = diff_schemas(old.json_schema(), new.json_schema()).changes
    assert [(c.kind, c.pointer, c.detail) for c in changes] == [
        (ChangeKind.TYPE_WIDENED, "/properties/p", 'alternative {"type": "boolean"} added'),
        (ChangeKind.ENUM_MEMBER_ADDED, "/properties/p/anyOf/0", 'member "y" added'),
    ]


def test_untagged_branches_reordered_are_one_change_not_each_compared_to_another() -> None:
    # Matched by name, not side by side (A against B was a list of field changes); the order
    # itself is reported, since Pydantic reads a value that fits both as the first.
    changes = diff_schemas(_field(_A | _B).json_schema(), _field(_B | _A).json_schema()).changes
    assert [(c.kind, c.pointer, c.detail) for c in changes] == [
        (
            ChangeKind.ALTERNATIVES_REORDERED,
            "/properties/p",
            "alternatives reordered: A, B -> B, A (a value that fits more than one may now read "
            "as another)",
        )
    ]
    tagged = diff_schemas(
        _field(_A | _B, discriminator="k").json_schema(),
        _field(_B | _A, discriminator="k").json_schema(),
    )
    assert tagged.changes == []  # the tag alone picks the branch: the order does not matter
    # Why it is breaking for both sides: a value that fits both branches (`{}`, every field
    # defaulted) reads as the first, so the same output or stored value is now another branch.
    first = contract(o=_PLAIN)
    second = contract(version=2, o=(Reject | Approve, Field(description="The outcome.")))
    assert isinstance(parse(first, '{"o": {}}', stop_reason="end_turn").value.o, Approve)
    assert isinstance(parse(second, '{"o": {}}', stop_reason="end_turn").value.o, Reject)
    swapped = diff_schemas(first.json_schema(), second.json_schema())
    assert [(c.kind, c.producers, c.consumers) for c in swapped.changes] == [
        (ChangeKind.ALTERNATIVES_REORDERED, B, B)
    ]


class Grant(Contract):
    """Grant the request (its tag required)."""

    kind: Literal["grant"] = Field(description="The outcome's tag.")
    note: str = Field(default="", description="A note for the requester.")


class Deny(Contract):
    """Deny the request (its tag required)."""

    kind: Literal["deny"] = Field(description="The outcome's tag.")
    reason: str = Field(default="", description="Why it is denied.")


_REQUIRED_TAGGED = (
    Annotated[Grant | Deny, Field(discriminator="kind")],
    Field(description="The outcome."),
)
_REQUIRED_BY_FUNCTION = _by_function((Grant, "grant"), (Deny, "deny"))


@pytest.mark.parametrize(
    ("old", "new"),
    [(_REQUIRED_BY_FUNCTION, _REQUIRED_TAGGED), (_REQUIRED_TAGGED, _REQUIRED_BY_FUNCTION)],
    ids=["added", "removed"],
)
def test_a_discriminator_over_required_tags_is_no_change(old: Any, new: Any) -> None:
    # Every branch requires its tag, so every value carries it and picks the same branch with
    # the discriminator or without it: nothing to report (a review of the discriminator kinds
    # found them reported as breaking here, tripping `--fail-on-breaking` for nothing).
    before, after = contract(o=old).json_schema(), contract(o=new).json_schema()
    for schema in (before, after):
        for output in ('{"o": {"kind": "deny"}}', '{"o": {"kind": "grant", "note": "ok"}}'):
            model = contract(o=old) if schema is before else contract(version=2, o=new)
            assert parse(model, output, stop_reason="end_turn").value.o.kind in ("grant", "deny")
    assert diff_schemas(before, after).changes == []
