"""The canonical schema and its fingerprint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from pydantic import Field

from contracts import Decision
from contracts import InvoiceExtraction
from contracts import ReviewFinding
from contracts import Sentiment
from sdk import Contract
from sdk import SchemaViolation
from sdk import WireEnum
from sdk import parse
from sdk.schema import DRAFT_2020_12
from sdk.schema import canonical_bytes
from sdk.schema import to_wire
from sdk.schema.canonical import subschemas
from sdk.schema.dialects import dialects

REFERENCE = [Decision, ReviewFinding, InvoiceExtraction, Sentiment]


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for _, child in subschemas(node):
        yield from _nodes(child)


@pytest.mark.parametrize("contract", REFERENCE)
def test_schema_is_a_valid_draft_2020_12_schema(contract: type[Contract]) -> None:
    schema = contract.json_schema()
    assert schema["$schema"] == DRAFT_2020_12
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("contract", REFERENCE)
def test_properties_follow_declaration_order(contract: type[Contract]) -> None:
    assert list(contract.json_schema()["properties"]) == list(contract.model_fields)


def test_nested_properties_follow_declaration_order_too() -> None:
    fix = ReviewFinding.json_schema()["$defs"]["Fix"]
    assert list(fix["properties"]) == ["description", "confident"]


@pytest.mark.parametrize("contract", REFERENCE)
def test_every_object_is_closed(contract: type[Contract]) -> None:
    objects = [n for n in _nodes(contract.json_schema()) if n.get("type") == "object"]
    assert objects
    assert all(node["additionalProperties"] is False for node in objects)


def test_enums_are_strings_with_the_wire_names() -> None:
    answer = Decision.json_schema()["properties"]["answer"]
    assert answer["type"] == "string"
    assert answer["enum"] == ["approve", "reject", "escalate"]


def test_nested_contracts_live_under_defs() -> None:
    schema = ReviewFinding.json_schema()
    assert set(schema["$defs"]) == {"Fix"}
    assert {"$ref": "#/$defs/Fix"} in schema["properties"]["fix"]["anyOf"]


def test_constraints_and_descriptions_are_kept() -> None:
    invoice = InvoiceExtraction.json_schema()["properties"]
    assert invoice["issue_date"]["anyOf"][0]["pattern"] == r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
    assert invoice["currency"]["anyOf"][0]["minLength"] == 3
    assert invoice["currency"]["anyOf"][0]["maxLength"] == 3
    score = Sentiment.json_schema()["properties"]["score"]
    assert (score["minimum"], score["maximum"]) == (0, 1)
    assert ReviewFinding.json_schema()["properties"]["line"]["anyOf"][0]["minimum"] == 1
    assert "before answering" in Decision.json_schema()["properties"]["reasoning"]["description"]


@pytest.mark.parametrize("contract", REFERENCE)
def test_no_title_noise_below_the_root(contract: type[Contract]) -> None:
    schema = contract.json_schema()
    assert schema["title"] == contract.__name__
    assert [n for n in _nodes(schema) if n is not schema and "title" in n] == []


def test_schema_version_is_in_the_schema() -> None:
    class Versioned(Contract):
        schema_version = 3
        name: str

    assert Versioned.json_schema()["x-schema-version"] == 3


def test_json_schema_returns_a_copy() -> None:
    schema = Decision.json_schema()
    schema["properties"].clear()
    assert list(Decision.json_schema()["properties"]) == ["reasoning", "answer", "confidence"]


def test_fingerprint_is_sha256_of_the_canonical_bytes() -> None:
    import hashlib

    expected = hashlib.sha256(canonical_bytes(Decision.json_schema())).hexdigest()
    assert Decision.fingerprint() == expected
    assert len(expected) == 64


def test_fingerprint_is_the_same_in_another_process() -> None:
    code = "from contracts import InvoiceExtraction; print(InvoiceExtraction.fingerprint())"
    outputs = set()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        outputs.add(run.stdout.strip())
    assert outputs == {InvoiceExtraction.fingerprint()}


def test_canonical_bytes_sort_keys_but_keep_property_order() -> None:
    data = canonical_bytes({"type": "object", "properties": {"z": {"type": "string"}, "a": {}}})
    assert data == b'{"properties":{"z":{"type":"string"},"a":{}},"type":"object"}'


class Level(WireEnum):
    LOW = "low"
    HIGH = "high"


def _variant(name: str = "Probe", **overrides: Any) -> type[Contract]:
    """A contract whose namespace and annotations are the defaults changed by `overrides`."""
    namespace: dict[str, Any] = {
        "__annotations__": {"reason": str, "level": Level, "count": int},
        "reason": Field(description="why"),
        "level": Field(description="how much"),
        "count": Field(ge=0, description="how many"),
        "__module__": __name__,
    }
    namespace.update(overrides.pop("namespace", {}))
    namespace["__annotations__"] = overrides.pop("annotations", namespace["__annotations__"])
    return type(name, (Contract,), namespace)


def test_fingerprint_changes_with_every_part_of_the_schema() -> None:
    class Level2(WireEnum):
        LOW = "low"
        HIGH = "high"
        NONE = "none"

    base = _variant().fingerprint()
    variants = {
        "field added": _variant(
            annotations={"reason": str, "level": Level, "count": int, "extra": str}
        ),
        "type changed": _variant(annotations={"reason": str, "level": Level, "count": float}),
        "enum changed": _variant(annotations={"reason": str, "level": Level2, "count": int}),
        "constraint changed": _variant(namespace={"count": Field(ge=1, description="how many")}),
        "description changed": _variant(namespace={"reason": Field(description="why, briefly")}),
        "order changed": _variant(annotations={"level": Level, "reason": str, "count": int}),
        "version bumped": _variant(namespace={"schema_version": 2}),
    }
    fingerprints = {name: contract.fingerprint() for name, contract in variants.items()}
    assert base not in fingerprints.values()
    assert len(set(fingerprints.values())) == len(fingerprints)


def test_fingerprint_ignores_the_module_but_not_the_name() -> None:
    here = _variant()
    moved = _variant(namespace={"__module__": "somewhere.else"})
    renamed = _variant("Renamed")
    assert here.fingerprint() == moved.fingerprint()
    assert renamed.fingerprint() != here.fingerprint()


def _same_named(modules: tuple[str, str], outer_module: str) -> type[Contract]:
    """`Outer` with two nested contracts both called `Item`, living in `modules`."""
    first = type("Item", (Contract,), {"__annotations__": {"x": int}, "__module__": modules[0]})
    second = type("Item", (Contract,), {"__annotations__": {"y": str}, "__module__": modules[1]})
    namespace = {
        "__annotations__": {"a": first, "b": second, "more": list[second] | None},
        "__module__": outer_module,
    }
    return type("Outer", (Contract,), namespace)


_HERE = ("origin_pkg.first_mod", "origin_pkg.second_mod")
# Moved, and the module names now sort the other way round.
_MOVED = ("moved_lib.zeta_mod", "moved_lib.alpha_mod")


def _module_words(text: str) -> list[str]:
    words = ("_pkg", "_mod", "_lib", "outer", "elsewhere", "__")
    return [word for word in words if word in text]


def test_same_named_nested_contracts_are_named_without_their_module() -> None:
    schema = _same_named(_HERE, "origin_pkg.outer").json_schema()
    assert list(schema["$defs"]) == ["Item_1", "Item_2"]
    assert schema["properties"]["a"] == {"$ref": "#/$defs/Item_1"}
    assert schema["properties"]["b"] == {"$ref": "#/$defs/Item_2"}
    assert list(schema["$defs"]["Item_1"]["properties"]) == ["x"]
    assert list(schema["$defs"]["Item_2"]["properties"]) == ["y"]
    assert _module_words(canonical_bytes(schema).decode()) == []


def test_moving_same_named_nested_contracts_keeps_schema_and_fingerprint() -> None:
    here = _same_named(_HERE, "origin_pkg.outer")
    moved = _same_named(_MOVED, "elsewhere")
    assert moved.json_schema() == here.json_schema()
    assert canonical_bytes(moved.json_schema()) == canonical_bytes(here.json_schema())
    assert moved.fingerprint() == here.fingerprint()


def test_a_class_named_like_a_numbered_definition_still_gets_no_module() -> None:
    outer = _same_named(_HERE, "origin_pkg.outer")
    clash = type("Item_1", (Contract,), {"__annotations__": {"z": str}, "__module__": "third_mod"})
    namespace = {"__annotations__": {"nested": outer, "clash": clash}, "__module__": "elsewhere"}
    schema = type("Both", (Contract,), namespace).json_schema()
    assert len(schema["$defs"]) == 4
    assert _module_words(canonical_bytes(schema).decode()) == []
    jsonschema.Draft202012Validator.check_schema(schema)


_GOOD = '{"a":{"x":1},"b":{"y":"s"},"more":[{"y":"t"}]}'
_SWAPPED = (
    '{"a":{"y":"s"},"b":{"x":1},"more":null}',
    '{"a":{"x":1},"b":{"y":"s"},"more":[{"x":2}]}',
)


def test_same_named_nested_contracts_keep_the_module_out_of_every_wire_schema() -> None:
    contract = _same_named(_HERE, "origin_pkg.outer")
    for name, dialect in dialects().items():
        wire = to_wire(contract, dialect).schema
        text = json.dumps(wire)
        assert _module_words(text) == [], name
        assert set(re.findall(r'"\$ref": "#/\$defs/([^"]+)"', text)) <= set(wire["$defs"]), name
        # Every `$ref` resolves to the right definition: one document fits, the swapped ones not.
        validator = jsonschema.Draft202012Validator(wire)
        assert validator.is_valid(json.loads(_GOOD)), name
        assert not any(validator.is_valid(json.loads(each)) for each in _SWAPPED), name


def test_same_named_nested_contracts_stay_distinct_when_parsing() -> None:
    contract = _same_named(_HERE, "origin_pkg.outer")
    parsed = parse(contract, _GOOD, stop_reason="end_turn")
    assert parsed.value.model_dump() == {"a": {"x": 1}, "b": {"y": "s"}, "more": [{"y": "t"}]}
    for swapped in _SWAPPED:
        with pytest.raises(SchemaViolation):
            parse(contract, swapped, stop_reason="end_turn")


def test_definitions_whose_names_hold_a_double_underscore_of_their_own_are_kept() -> None:
    # A generic's key (`Page_list_Item__`) and a class called `My__Thing` hold `__` without any
    # module path: their keys stay as Pydantic wrote them (the renaming first took them for
    # module paths, changing those contracts' schemas and fingerprints).
    from typing import Generic
    from typing import TypeVar

    kind = TypeVar("kind")

    # (Contracts, not plain BaseModels: a contract refuses to hold a plain one.)
    class Item(Contract):
        x: int

    class Page(Contract, Generic[kind]):
        v: kind

    thing = type("My__Thing", (Contract,), {"__annotations__": {"y": int}})
    namespace = {
        "__annotations__": {"a": Page[list[Item]], "b": Page[dict[str, Item]], "t": thing},
        "__module__": "elsewhere",
    }
    outer = type("Pages", (Contract,), namespace)
    pydantics = outer.model_json_schema(ref_template="#/$defs/{model}")["$defs"]
    assert {"Page_list_Item__", "My__Thing"} <= set(pydantics)
    assert set(outer.json_schema()["$defs"]) == set(pydantics)
