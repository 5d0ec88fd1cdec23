"""Contract -> canonical JSON Schema, its deterministic bytes, and its fingerprint.

The canonical schema is the one the parser validates against: everything the contract declares,
nothing a provider's dialect stripped. Its serialization sorts every object's keys except
`properties`, whose order is the generation order of the fields and so part of the meaning; the
bytes are therefore the same in every process and for every Pydantic version that produces the
same schema.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from sdk._values.declared import Count
from sdk._values.declared import check
from sdk._values.pointer import escape_pointer

__all__ = [
    "DRAFT_2020_12",
    "VERSION_KEY",
    "SchemaInfo",
    "SchemaVersion",
    "canonical_bytes",
    "canonical_schema",
    "checked_version",
    "escape_pointer",
    "fingerprint",
    "schema_info",
    "shared_schema",
    "subschemas",
    "without_module_paths",
]

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
VERSION_KEY = "x-schema-version"

# Keywords whose value is a map of name -> subschema / a list of subschemas / one subschema.
_SCHEMA_MAPS = ("properties", "$defs", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_SINGLE = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """Which schema produced a value: contract name, `schema_version` and fingerprint."""

    name: str
    """The contract's (or grammar's) name."""
    version: int
    """Its `schema_version`."""
    fingerprint: str
    """The sha256 hex of its canonical schema (see `fingerprint`)."""


@dataclass(frozen=True, slots=True)
class _Canonical:
    schema: dict[str, Any]
    data: bytes
    info: SchemaInfo


_cache: WeakKeyDictionary[type[BaseModel], _Canonical] = WeakKeyDictionary()


def canonical_schema(contract: type[BaseModel]) -> dict[str, Any]:
    """The contract's canonical schema, as a fresh copy the caller may change."""
    return copy.deepcopy(_canonical(contract).schema)


def shared_schema(contract: type[BaseModel]) -> dict[str, Any]:
    """The cached canonical schema itself, shared: for the SDK's own read-only use."""
    return _canonical(contract).schema


def canonical_bytes(schema: dict[str, Any]) -> bytes:
    """Deterministic serialization: sorted keys except inside `properties`, ASCII, no spaces."""
    return json.dumps(_ordered(schema), ensure_ascii=True, separators=(",", ":")).encode()


def fingerprint(contract: type[BaseModel]) -> str:
    """sha256 hex of the canonical schema's bytes."""
    return _canonical(contract).info.fingerprint


def schema_info(contract: type[BaseModel]) -> SchemaInfo:
    """Name, version and fingerprint: what a `Result` and a stored value carry."""
    return _canonical(contract).info


def subschemas(node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each direct subschema of a schema node, with its JSON-pointer suffix (`/properties/x`)."""
    for keyword in _SCHEMA_MAPS:
        children = node.get(keyword)
        if isinstance(children, dict):
            for name, child in children.items():
                if isinstance(child, dict):
                    yield f"/{keyword}/{escape_pointer(name)}", child
    for keyword in _SCHEMA_LISTS:
        children = node.get(keyword)
        if isinstance(children, list):
            for index, child in enumerate(children):
                if isinstance(child, dict):
                    yield f"/{keyword}/{index}", child
    for keyword in _SCHEMA_SINGLE:
        child = node.get(keyword)
        if isinstance(child, dict):
            yield f"/{keyword}", child


def _canonical(contract: type[BaseModel]) -> _Canonical:
    cached = _cache.get(contract)
    if cached is None:
        schema = _build(contract)
        data = canonical_bytes(schema)
        info = SchemaInfo(
            name=contract.__name__,
            version=schema[VERSION_KEY],  # (checked by `_build`)
            fingerprint=hashlib.sha256(data).hexdigest(),
        )
        cached = _Canonical(schema=schema, data=data, info=info)
        _cache[contract] = cached
    return cached


SchemaVersion = Count
"""What `Contract.schema_version` takes: a whole number from 1 (not a bool, a float or text)."""


def checked_version(contract: type[BaseModel]) -> int:
    """A contract's `schema_version`, refused (naming the class) unless a `SchemaVersion`.

    Checked when a contract class is defined, and again here whenever a schema is built (the
    attribute can be set afterwards), so a bad version never reaches a snapshot or the lock.
    This module works on any model so that it stays below `sdk.contract` (which builds on it)
    instead of importing it back; a model without the attribute is version 1.
    """
    version = getattr(contract, "schema_version", 1)
    check(f"{contract.__name__}.schema_version", version, SchemaVersion)
    return int(version)  # (checked: an int)


def _build(contract: type[BaseModel]) -> dict[str, Any]:
    generated = contract.model_json_schema(ref_template="#/$defs/{model}", mode="validation")
    without_module_paths(generated)
    _clean(generated)
    generated.pop("title", None)
    schema: dict[str, Any] = {
        "$schema": DRAFT_2020_12,
        "title": contract.__name__,
        VERSION_KEY: checked_version(contract),
        **generated,
    }
    ordered: dict[str, Any] = _ordered(schema)
    return ordered


_QUALIFIED = "__"
"""What joins a module path to a class name in Pydantic's key for one of two classes of the same
name (`pkg__one__Item`)."""
_NORMALIZED = GenerateJsonSchema().normalize_name
"""A title as Pydantic writes it as a `$defs` key (`Page[list[Item]]`: `Page_list_Item__`)."""


def without_module_paths(schema: dict[str, Any]) -> None:
    """Rename the `$defs` keys Pydantic qualifies with their module path (two different classes
    of one name, `pkg__one__Item` and `pkg__two__Item`) to the class name and a number, `Item_1`
    for the one the schema reaches first (fields in order, depth first), `Item_2` for the next:
    the fingerprint is then the same wherever the modules live, and no module path reaches a
    provider. A contract without such a clash is left as it is (its fingerprint unchanged)."""
    definitions = schema.get("$defs")
    if not isinstance(definitions, dict) or not any(_QUALIFIED in key for key in definitions):
        return
    renamed: dict[str, str] = {}
    numbers: dict[str, int] = {}
    for key in _reached_keys(schema, definitions):
        title = definitions[key].get("title") if isinstance(definitions[key], dict) else None
        if not isinstance(title, str):
            continue
        # Qualified: the key is the class's own (its title as Pydantic writes keys) behind a
        # module path; a `__` of another origin (a generic's `Page_list_Item__`, a class
        # called `My__Thing`) is the name itself, kept.
        name = _NORMALIZED(title)
        if key == name or not key.endswith(_QUALIFIED + name):
            continue
        while True:  # (past a class really called `Item_1`: `Item-1` has no class's name)
            numbers[name] = numbers.get(name, 0) + 1
            for new in (f"{name}_{numbers[name]}", f"{name}-{numbers[name]}"):
                if new not in definitions and new not in renamed.values():
                    break
            else:
                continue
            break
        renamed[key] = new
    _rewrite_refs(schema, {f"#/$defs/{old}": f"#/$defs/{new}" for old, new in renamed.items()})
    schema["$defs"] = {renamed.get(key, key): value for key, value in definitions.items()}


def _reached_keys(schema: dict[str, Any], definitions: dict[str, Any]) -> list[str]:
    """The `$defs` keys in the order the schema's `$ref`s first reach them (depth first from
    the root, fields in order); any never reached after them, as listed."""
    reached: dict[str, None] = {}

    def visit(node: dict[str, Any]) -> None:
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            key = ref.removeprefix("#/$defs/")
            if key not in reached and isinstance(definitions.get(key), dict):
                reached[key] = None
                visit(definitions[key])
        for pointer, child in subschemas(node):
            if not (node is schema and pointer.startswith("/$defs/")):
                visit(child)

    visit(schema)
    return [*reached, *(key for key in definitions if key not in reached)]


def _rewrite_refs(node: dict[str, Any], refs: dict[str, str]) -> None:
    """Every `$ref` of `node` and its subschemas (not of values: a default, an example) that
    `refs` renames."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref in refs:
        node["$ref"] = refs[ref]
    for _, child in subschemas(node):
        _rewrite_refs(child, refs)


def _clean(node: dict[str, Any]) -> None:
    """Drop per-node `title` noise; close every object (`additionalProperties: false`)."""
    node.pop("title", None)
    if node.get("type") == "object" and "properties" in node:
        node.setdefault("additionalProperties", False)
    for _, child in subschemas(node):
        _clean(child)


def _ordered(node: Any, *, properties_map: bool = False) -> Any:
    """Sort object keys recursively, except the keys of a `properties` map."""
    if isinstance(node, dict):
        keys = list(node) if properties_map else sorted(node)
        return {
            key: _ordered(node[key], properties_map=not properties_map and key == "properties")
            for key in keys
        }
    if isinstance(node, list):
        return [_ordered(item) for item in node]
    return node
