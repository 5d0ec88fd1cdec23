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

from sdk._values.pointer import escape_pointer

__all__ = [
    "DRAFT_2020_12",
    "VERSION_KEY",
    "SchemaInfo",
    "canonical_bytes",
    "canonical_schema",
    "escape_pointer",
    "fingerprint",
    "schema_info",
    "shared_schema",
    "subschemas",
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
            version=_version_of(contract),
            fingerprint=hashlib.sha256(data).hexdigest(),
        )
        cached = _Canonical(schema=schema, data=data, info=info)
        _cache[contract] = cached
    return cached


def _version_of(contract: type[BaseModel]) -> int:
    # A `Contract`'s `schema_version`; this module works on any model so that it stays below
    # `sdk.contract` (which builds on it) instead of importing it back.
    version = getattr(contract, "schema_version", 1)
    return version if isinstance(version, int) else 1


def _build(contract: type[BaseModel]) -> dict[str, Any]:
    generated = contract.model_json_schema(ref_template="#/$defs/{model}", mode="validation")
    _clean(generated)
    generated.pop("title", None)
    schema: dict[str, Any] = {
        "$schema": DRAFT_2020_12,
        "title": contract.__name__,
        VERSION_KEY: _version_of(contract),
        **generated,
    }
    ordered: dict[str, Any] = _ordered(schema)
    return ordered


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
