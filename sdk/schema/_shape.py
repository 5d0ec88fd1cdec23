"""Reading a canonical schema node the way a person reads a field: its type, nullability, bounds.

Pydantic writes `float | None` as `{"anyOf": [{"type": "number", ...}, {"type": "null"}],
"description": ...}` and a nested contract as `{"$ref": "#/$defs/Name"}`. The diff and the linter
both want to ask "is this field nullable, and what is it otherwise?" without caring about those
spellings; this module answers that, and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sdk._values.pointer import escape_pointer
from sdk._values.pointer import lookup
from sdk._values.pointer import resolve_ref
from sdk.schema.canonical import subschemas

__all__ = [
    "Field",
    "Shape",
    "iter_nodes",
    "name_tokens",
    "node_at",
    "object_fields",
    "resolve",
    "shape_of",
]


def resolve(root: dict[str, Any], node: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Follow a local `$ref`: (pointer of the target, target merged with the ref's siblings).

    Returns `(None, node)` for a node that is not a reference. Sibling keys of the `$ref`
    (Pydantic puts a field's `description` there) win over the target's own.
    """
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return None, node
    pointer, target = resolve_ref(root, ref)
    siblings = {key: value for key, value in node.items() if key != "$ref"}
    return pointer, {**target, **siblings}


@dataclass(frozen=True, slots=True)
class Shape:
    """A schema node with its nullability taken apart.

    `core` is the node without its `null` alternative (annotations such as `description` stay
    on it); `nullable` says whether `null` was allowed; `types` is the set of JSON types the
    core allows (`string` for an enum of strings, `object` for a reference to a contract).
    """

    core: dict[str, Any]
    nullable: bool
    types: frozenset[str]
    ref: str | None = None
    """Pointer of the `$defs` entry the core came from, when it was a reference."""

    @property
    def enum(self) -> list[Any] | None:
        """The allowed values, when the core is an enum (or a `const`)."""
        if "enum" in self.core and isinstance(self.core["enum"], list):
            return list(self.core["enum"])
        if "const" in self.core:
            return [self.core["const"]]
        return None


def shape_of(root: dict[str, Any], node: dict[str, Any]) -> Shape:
    """Take `node` apart into its non-null core and whether it is nullable (refs resolved)."""
    ref, node = resolve(root, node)
    nullable = False
    core = node
    declared = node.get("type")
    if isinstance(declared, list) and "null" in declared:
        nullable = True
        rest = [t for t in declared if t != "null"]
        core = {**node, "type": rest[0] if len(rest) == 1 else rest}
    branches = node.get("anyOf")
    if isinstance(branches, list) and any(_is_null(b) for b in branches):
        nullable = True
        others = [b for b in branches if not _is_null(b)]
        outer = {key: value for key, value in node.items() if key != "anyOf"}
        if len(others) == 1 and isinstance(others[0], dict):
            # The usual `X | None`: the annotations live on the outer node, the rest on X.
            ref, inner = resolve(root, others[0])
            core = {**inner, **outer}
        else:
            core = {**outer, "anyOf": others}
    if "enum" in core and isinstance(core["enum"], list) and None in core["enum"]:
        nullable = True
        core = {**core, "enum": [value for value in core["enum"] if value is not None]}
    return Shape(core=core, nullable=nullable, types=_types(root, core), ref=ref)


def node_at(root: dict[str, Any], pointer: str) -> dict[str, Any]:
    """The schema node a pointer such as `/$defs/Fix` names (RFC 6901 unescaping)."""
    found, node = lookup(root, pointer)
    if not found or not isinstance(node, dict):
        raise ValueError(f"{pointer!r} does not name a schema node")
    return node


def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "null" and len(node) == 1


def _types(root: dict[str, Any], node: dict[str, Any], depth: int = 0) -> frozenset[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(t for t in declared if isinstance(t, str))
    if "enum" in node or "const" in node:
        values = node.get("enum", [node.get("const")])
        return frozenset(_json_type(value) for value in values)
    if "$ref" in node and depth < 32:
        return _types(root, resolve(root, node)[1], depth + 1)
    branches = node.get("anyOf") or node.get("oneOf")
    if isinstance(branches, list) and depth < 32:
        found: set[str] = set()
        for branch in branches:
            if isinstance(branch, dict):
                found |= _types(root, branch, depth + 1)
        return frozenset(found)
    if "properties" in node:
        return frozenset({"object"})
    if "items" in node or "prefixItems" in node:
        return frozenset({"array"})
    return frozenset()


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


@dataclass(frozen=True, slots=True)
class Field:
    """One property of an object node, in declaration (= generation) order."""

    name: str
    pointer: str
    schema: dict[str, Any]
    required: bool
    position: int


def object_fields(node: dict[str, Any], pointer: str) -> list[Field]:
    """The properties of an object node, in order, each with its pointer and required flag."""
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return []
    required = set(node.get("required", []))
    return [
        Field(
            name=name,
            pointer=f"{pointer}/properties/{escape_pointer(name)}",
            schema=child,
            required=name in required,
            position=index,
        )
        for index, (name, child) in enumerate(properties.items())
        if isinstance(child, dict)
    ]


def iter_nodes(node: dict[str, Any], pointer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node of a document, `$defs` included, each once, with its JSON pointer."""
    yield pointer, node
    for suffix, child in subschemas(node):
        yield from iter_nodes(child, pointer + suffix)


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def name_tokens(name: str) -> list[str]:
    """`invoiceNumber`, `invoice_number` and `invoice-number` all give `["invoice", "number"]`."""
    spaced = _CAMEL_BOUNDARY.sub("_", name)
    return [token for token in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if token]
