"""Wire dialects: what each provider family is sent, and the record of what was removed."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import Field

from contracts import InvoiceExtraction
from contracts import ReviewFinding
from sdk import Contract
from sdk import SchemaViolation
from sdk import TruncatedOutput
from sdk import WireEnum
from sdk import parse
from sdk.schema import ANTHROPIC
from sdk.schema import DIALECTS
from sdk.schema import GEMINI
from sdk.schema import LLAMACPP
from sdk.schema import OLLAMA
from sdk.schema import OPENAI_STRICT
from sdk.schema import VLLM
from sdk.schema import Dialect
from sdk.schema import Removal
from sdk.schema import to_wire
from tests.schema_support import contract


class Level(WireEnum):
    LOW = "low"
    HIGH = "high"


class Step(Contract):
    """One step, nested to test `$defs`."""

    zeta: str
    alpha: int = Field(ge=0)
    mid: Level | None = None


class Everything(Contract):
    """Declared out of alphabetical order on purpose: the order is the generation order."""

    reasoning: str = Field(description="First.")
    zulu: int = Field(ge=1, le=10, multiple_of=2)
    alpha: float = Field(gt=0, description="A ratio.")
    code: str = Field(min_length=2, max_length=4, pattern=r"^\d+[a-z]$")
    when: str = Field(json_schema_extra={"format": "date"})
    site: str = Field(json_schema_extra={"format": "uri"})
    tags: list[str] = Field(min_length=2, max_length=5)
    one: list[str] = Field(min_length=1)
    counts: dict[str, int]
    note: str = "none"
    step: Step = Field(description="The nested step.")
    maybe: Step | None = None


def _order(schema: dict[str, Any], defs: str | None = None) -> list[str]:
    node = schema["$defs"][defs] if defs else schema
    return list(node["properties"])


def _removed(dialect: Dialect, contract: type[Contract] = Everything) -> dict[tuple[str, str], Any]:
    wire = to_wire(contract, dialect)
    return {(r.pointer, r.keyword): r.value for r in wire.removed + wire.annotations_removed}


# --- property order, in every dialect ---


@pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=list(DIALECTS))
def test_property_order_survives_every_dialect(dialect: Dialect) -> None:
    wire = to_wire(Everything, dialect).schema
    assert _order(wire) == list(Everything.model_fields)
    assert _order(wire, "Step") == ["zeta", "alpha", "mid"]
    # And in the serialized body a provider receives, not only in the dict.
    sent = json.dumps(wire["properties"])  # nested fields come after their parents
    positions = [sent.index(f'"{name}":') for name in Everything.model_fields]
    assert positions == sorted(positions)


_NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True), min_size=1, max_size=12,
                  unique=True)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(names=_NAMES, optional=st.sets(st.integers(0, 11)))
def test_any_declared_order_survives_every_dialect(names: list[str], optional: set[int]) -> None:
    fields: dict[str, Any] = {
        name: ((int, 0) if index in optional else (int, ...)) for index, name in enumerate(names)
    }
    model = contract("Probe", **fields)
    for dialect in DIALECTS.values():
        assert _order(to_wire(model, dialect).schema) == names, dialect.name


# --- Anthropic ---


def test_anthropic_removes_bounds_lengths_patterns_and_records_each() -> None:
    removed = _removed(ANTHROPIC)
    assert removed[("/properties/zulu", "minimum")] == 1
    assert removed[("/properties/zulu", "maximum")] == 10
    assert removed[("/properties/zulu", "multipleOf")] == 2
    assert removed[("/properties/alpha", "exclusiveMinimum")] == 0
    assert removed[("/properties/code", "minLength")] == 2
    assert removed[("/properties/code", "maxLength")] == 4
    assert removed[("/properties/code", "pattern")] == r"^\d+[a-z]$"
    assert removed[("/properties/tags", "minItems")] == 2
    assert removed[("/properties/tags", "maxItems")] == 5
    assert removed[("/properties/note", "default")] == "none"
    assert removed[("/$defs/Step/properties/alpha", "minimum")] == 0
    assert removed[("", "x-schema-version")] == 1


def test_anthropic_keeps_what_it_enforces() -> None:
    wire = to_wire(Everything, ANTHROPIC).schema
    assert wire["properties"]["one"]["minItems"] == 1  # 0 and 1 are accepted
    assert wire["properties"]["when"]["format"] == "date"
    assert wire["properties"]["site"]["format"] == "uri"
    assert wire["properties"]["step"] == {"$ref": "#/$defs/Step"}
    assert wire["additionalProperties"] is False
    assert wire["required"] == Everything.json_schema()["required"]


def test_anthropic_closes_dict_fields_and_says_so() -> None:
    wire = to_wire(Everything, ANTHROPIC)
    (removal,) = [r for r in wire.removed if r.keyword == "additionalProperties"]
    assert removal.pointer == "/properties/counts"
    assert removal.value == {"type": "integer"}
    assert removal.replaced_with == "false"
    assert wire.schema["properties"]["counts"]["additionalProperties"] is False


def test_anthropic_drops_ref_siblings_and_records_them() -> None:
    removed = _removed(ANTHROPIC)
    assert removed[("/properties/step", "description")] == "The nested step."


def test_anthropic_hints_removed_constraints_in_the_description() -> None:
    zulu = to_wire(Everything, ANTHROPIC).schema["properties"]["zulu"]
    assert "minimum" not in zulu
    assert zulu["description"].endswith("{maximum: 10, minimum: 1, multipleOf: 2}")


def test_one_of_is_sent_as_any_of_and_recorded() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"oneOf": [{"type": "integer"}, {"type": "string"}]}},
        "required": ["x"],
        "additionalProperties": False,
    }
    wire = to_wire(schema, ANTHROPIC)
    assert wire.schema["properties"]["x"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    (removal,) = [r for r in wire.removed if r.keyword == "oneOf"]
    assert (removal.pointer, removal.replaced_with) == ("/properties/x", "anyOf")
    assert removal.is_constraint
    assert to_wire(schema, LLAMACPP).schema["properties"]["x"]["oneOf"]  # kept where accepted


# --- OpenAI strict ---


def test_openai_strict_requires_every_property_and_makes_optional_ones_nullable() -> None:
    wire = to_wire(Everything, OPENAI_STRICT)
    schema = wire.schema
    assert schema["required"] == list(Everything.model_fields)
    assert schema["properties"]["note"]["anyOf"][1] == {"type": "null"}
    assert schema["properties"]["note"]["anyOf"][0]["type"] == "string"
    # Already nullable: required, not wrapped again.
    assert schema["properties"]["maybe"]["anyOf"][1] == {"type": "null"}
    assert len(schema["properties"]["maybe"]["anyOf"]) == 2
    assert schema["$defs"]["Step"]["required"] == ["zeta", "alpha", "mid"]
    assert set(wire.nullable) == {
        "/properties/note",
        "/properties/maybe",
        "/$defs/Step/properties/mid",
    }


def test_openai_strict_keeps_bounds_removes_lengths_inlines_ref_siblings() -> None:
    wire = to_wire(Everything, OPENAI_STRICT)
    zulu = wire.schema["properties"]["zulu"]
    assert (zulu["minimum"], zulu["maximum"], zulu["multipleOf"]) == (1, 10, 2)
    removed = _removed(OPENAI_STRICT)
    assert removed[("/properties/code", "minLength")] == 2
    assert ("/properties/zulu", "minimum") not in removed
    step = wire.schema["properties"]["step"]
    assert "$ref" not in step
    assert step["description"] == "The nested step."
    assert list(step["properties"]) == ["zeta", "alpha", "mid"]


def test_openai_strict_schema_of_a_reference_contract_is_strict_everywhere() -> None:
    schema = to_wire(ReviewFinding, OPENAI_STRICT).schema

    def objects(node: Any) -> list[dict[str, Any]]:
        found = []
        if isinstance(node, dict):
            if node.get("type") == "object":
                found.append(node)
            for value in node.values():
                found.extend(objects(value))
        elif isinstance(node, list):
            for value in node:
                found.extend(objects(value))
        return found

    for node in objects(schema):
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])


# --- llama.cpp, Ollama, vLLM ---


@pytest.mark.parametrize("dialect", [LLAMACPP, OLLAMA], ids=["llamacpp", "ollama"])
def test_llamacpp_family_bounds_only_integers(dialect: Dialect) -> None:
    wire = to_wire(Everything, dialect)
    assert wire.schema["properties"]["zulu"]["minimum"] == 1
    removed = _removed(dialect)
    assert removed[("/properties/alpha", "exclusiveMinimum")] == 0
    assert removed[("/properties/zulu", "multipleOf")] == 2
    assert removed[("/properties/site", "format")] == "uri"
    assert wire.schema["properties"]["when"]["format"] == "date"
    assert wire.schema["required"] == list(Everything.model_fields)  # keeps generation order


@pytest.mark.parametrize(
    ("pattern", "portable"),
    [
        (r"^\d+[a-z]$", "^[0-9]+[a-z]$"),
        (r"^[\d-]+$", "^[0-9-]+$"),
        (r"\w\s\D", "[A-Za-z0-9_][ \t\n\r\f\v][^0-9]"),
        (r"a\.b\\d", r"a\.b\\d"),
    ],
)
def test_llamacpp_patterns_spell_out_class_escapes(pattern: str, portable: str) -> None:
    schema = {"type": "string", "pattern": pattern}
    wire = to_wire(schema, LLAMACPP)
    assert wire.schema["pattern"] == portable
    assert wire.removed == []
    for sample in ("12a", "9-9", "a b", "_\tx", "a.b\\d"):  # same verdicts on ASCII text
        assert bool(re.search(pattern, sample)) == bool(re.search(portable, sample))


def test_llamacpp_removes_a_pattern_it_cannot_spell_out() -> None:
    wire = to_wire({"type": "string", "pattern": r"^[\D]+$"}, LLAMACPP)
    assert "pattern" not in wire.schema
    assert wire.removed == [Removal("", "pattern", r"^[\D]+$")]


def test_vllm_removes_only_what_its_backends_ignore() -> None:
    removed = _removed(VLLM)
    assert removed[("/properties/zulu", "multipleOf")] == 2
    assert not any(key in removed for key in [("/properties/alpha", "exclusiveMinimum"),
                                              ("/properties/code", "maxLength")])  # fmt: skip
    wire = to_wire(Everything, VLLM).schema
    assert wire["properties"]["counts"]["additionalProperties"] == {"type": "integer"}
    assert "note" not in wire["required"]  # no required-first reordering to work around


# --- Gemini ---


def test_gemini_keeps_numeric_bounds_and_item_counts_removes_the_rest() -> None:
    removed = _removed(GEMINI)
    wire = to_wire(Everything, GEMINI).schema
    zulu, tags = wire["properties"]["zulu"], wire["properties"]["tags"]
    assert (zulu["minimum"], zulu["maximum"]) == (1, 10)
    assert (tags["minItems"], tags["maxItems"]) == (2, 5)
    assert removed[("/properties/zulu", "multipleOf")] == 2
    assert removed[("/properties/alpha", "exclusiveMinimum")] == 0
    assert removed[("/properties/code", "minLength")] == 2
    assert removed[("/properties/code", "pattern")] == r"^\d+[a-z]$"
    assert removed[("/properties/site", "format")] == "uri"  # only date-time, date, time
    assert wire["properties"]["when"]["format"] == "date"
    assert removed[("/properties/step", "description")] == "The nested step."  # $ref siblings
    assert wire["properties"]["counts"]["additionalProperties"] == {"type": "integer"}
    assert "note" not in wire["required"]  # optional properties stay optional


def test_gemini_removes_const_and_all_of_which_it_does_not_take() -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {"const": "refund"},
            "both": {"allOf": [{"type": "string"}, {"minLength": 1}]},
            "either": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        },
        "required": ["kind", "both", "either"],
        "additionalProperties": False,
    }
    wire = to_wire(schema, GEMINI)
    removed = {(r.pointer, r.keyword): r for r in wire.removed}
    assert removed[("/properties/kind", "const")].value == "refund"
    assert ("/properties/both", "allOf") in removed
    assert removed[("/properties/either", "oneOf")].replaced_with == "anyOf"
    assert wire.schema["properties"]["either"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}]
    }
    # The parser still enforces what was removed.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"kind": "other", "both": "", "either": 1}, schema)


class Node(Contract):
    """Recursive: the root is a `$ref` into `$defs`."""

    name: str
    children: list[Node]


@pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=list(DIALECTS))
def test_a_recursive_contract_keeps_its_definitions_in_every_dialect(dialect: Dialect) -> None:
    wire = to_wire(Node, dialect).schema
    assert list(wire["$defs"]["Node"]["properties"]) == ["name", "children"]
    assert wire["$defs"]["Node"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert "$defs" not in {r.keyword for r in to_wire(Node, dialect).removed}
    value = {"name": "a", "children": [{"name": "b", "children": []}]}
    jsonschema.validate(value, wire)  # the wire schema still resolves and admits the value
    if dialect is OPENAI_STRICT:
        assert wire["type"] == "object" and "$ref" not in wire  # strict roots are objects


# --- the record, caching, purity ---


def test_removal_record_is_precise_and_printable() -> None:
    removal = Removal("/properties/line/anyOf/0", "minimum", 1)
    assert removal.is_constraint
    assert removal.location == "/properties/line/anyOf/0/minimum"
    assert str(removal) == "/properties/line/anyOf/0: minimum=1"
    assert not Removal("", "x-schema-version", 1).is_constraint
    assert not Removal("", "description", "d").is_constraint


def test_removed_lists_only_stripped_constraints_not_bookkeeping_keys() -> None:
    wire = to_wire(ReviewFinding, ANTHROPIC)
    assert [(r.pointer, r.keyword, r.value) for r in wire.removed] == [
        ("/properties/line/anyOf/0", "minimum", 1)
    ]
    assert not hasattr(wire, "constraints_removed")  # the old alias is gone: one name
    assert {r.keyword for r in wire.annotations_removed} == {"$schema", "x-schema-version"}


def test_a_contract_with_nothing_stripped_reports_nothing_removed() -> None:
    class Plain(Contract):
        name: str
        count: int

    for dialect in DIALECTS.values():
        assert to_wire(Plain, dialect).removed == [], dialect.name


def test_wire_schema_is_cached_per_contract_and_dialect() -> None:
    assert to_wire(InvoiceExtraction, ANTHROPIC) is to_wire(InvoiceExtraction, ANTHROPIC)
    assert to_wire(InvoiceExtraction, ANTHROPIC) is not to_wire(InvoiceExtraction, OPENAI_STRICT)


def test_transform_does_not_touch_the_canonical_schema() -> None:
    schema = Everything.json_schema()
    before = copy.deepcopy(schema)
    for dialect in DIALECTS.values():
        to_wire(schema, dialect)
    assert schema == before
    assert Everything.json_schema() == before


def test_a_removed_constraint_is_still_enforced_by_the_parser() -> None:
    line = to_wire(ReviewFinding, ANTHROPIC).schema["properties"]["line"]
    assert "minimum" not in line["anyOf"][0]  # only hinted in the description
    bad = '{"reasoning": "r", "severity": "info", "file": "a.py", "line": 0, "fix": null}'
    with pytest.raises(SchemaViolation) as info:
        parse(ReviewFinding, bad, stop_reason="end_turn")
    assert [v.pointer for v in info.value.violations] == ["/line"]


# --- the all-required encoding, undone by the parser ---


def test_absent_nulls_drops_null_for_optional_non_nullable_properties_only() -> None:
    step = {"zeta": "z", "alpha": 1, "mid": None}
    text = json.dumps({**_everything(), "note": None, "step": step})
    parsed = parse(Everything, text, stop_reason="end_turn", absent_nulls=True)
    assert parsed.value.note == "none"  # absent: the default applies
    assert parsed.value.step is not None and parsed.value.step.mid is None  # null is a value
    assert [(n.pointer, n.kind) for n in parsed.notes] == [("/note", "absent_null")]
    assert parsed.text == text  # the raw reply, as received


def test_without_absent_nulls_a_null_for_an_optional_field_is_a_violation() -> None:
    text = json.dumps({**_everything(), "note": None})
    with pytest.raises(SchemaViolation) as info:
        parse(Everything, text, stop_reason="end_turn")
    assert [v.pointer for v in info.value.violations] == ["/note"]


def test_absent_nulls_keeps_the_text_of_a_truncated_reply_untouched() -> None:
    text = json.dumps({**_everything(), "note": None})[:-5]
    with pytest.raises(TruncatedOutput) as info:
        parse(Everything, text, stop_reason="max_tokens", absent_nulls=True)
    assert info.value.text == text


def _everything() -> dict[str, Any]:
    return {
        "reasoning": "r", "zulu": 2, "alpha": 0.5, "code": "12a", "when": "2026-01-01",
        "site": "https://example.com", "tags": ["a", "b"], "one": ["x"], "counts": {"a": 1},
        "step": {"zeta": "z", "alpha": 1},
    }  # fmt: skip
