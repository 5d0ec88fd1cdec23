"""Walk a JSON instance together with its schema, visiting only the nodes a caller wants.

The parser uses it to find enum positions (casing policy) and source-quote positions (evidence
checks) in a document. Subschemas that cannot contain a wanted node are never entered, and that
pruning is computed once per (schema, predicate), so a document with no wanted node costs almost
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sdk.schema.canonical import escape_pointer, subschemas

__all__ = ["Hit", "SchemaWalker"]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


@dataclass(slots=True)
class Hit:
    """A wanted node: where it is, its schema, its value, and its container (for rewriting)."""

    pointer: str
    schema: dict[str, Any]
    value: Any
    container: dict[str, Any] | list[Any] | None
    key: str | int | None


@dataclass
class SchemaWalker:
    """Visits the instance nodes whose schema satisfies `wanted`."""

    root: dict[str, Any]
    wanted: Callable[[dict[str, Any]], bool]
    _contains: dict[int, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Fill the pruning table now, so that walking is read-only and safe across threads.
        self.contains(self.root)
        for definition in self.root.get("$defs", {}).values():
            self.contains(definition)

    @property
    def any_wanted(self) -> bool:
        """Whether the schema has any wanted node at all."""
        return self._contains[id(self.root)]

    def contains(self, node: dict[str, Any]) -> bool:
        """Whether `node` or anything below it (through `$ref` too) is wanted."""
        key = id(node)
        known = self._contains.get(key)
        if known is not None:
            return known
        self._contains[key] = False  # a recursive schema reaching itself adds nothing new
        result = self.wanted(node)
        target = self._resolve(node)
        if target is not node:
            result = self.contains(target) or result
        for suffix, child in subschemas(node):
            if not suffix.startswith("/$defs/"):  # definitions count where they are referenced
                result = self.contains(child) or result
        self._contains[key] = result
        return result

    def walk(self, instance: Any) -> Iterator[Hit]:
        """Every wanted node in `instance`, in document order."""
        if self.any_wanted:
            yield from self._walk(self.root, instance, "", None, None)

    def _walk(
        self,
        node: dict[str, Any],
        value: Any,
        pointer: str,
        container: dict[str, Any] | list[Any] | None,
        key: str | int | None,
    ) -> Iterator[Hit]:
        if not self._contains.get(id(node), False):
            return
        node = self._resolve(node)
        expected = node.get("type")
        if isinstance(expected, str) and not _is_type(value, expected):
            return
        if self.wanted(node):
            yield Hit(pointer, node, value, container, key)
        for keyword in ("anyOf", "oneOf", "allOf"):
            for branch in node.get(keyword, ()):
                yield from self._walk(branch, value, pointer, container, key)
        # A child whose subschema holds nothing wanted is skipped here, before its pointer is
        # built and its generator started: in a large document that is nearly every child.
        wanted = self._contains
        if isinstance(value, dict):
            properties: dict[str, Any] = node.get("properties", {})
            extra = node.get("additionalProperties")
            for name, item in value.items():
                child = properties.get(name, extra)
                if isinstance(child, dict) and wanted.get(id(child), False):
                    yield from self._walk(
                        child, item, f"{pointer}/{escape_pointer(name)}", value, name
                    )
        elif isinstance(value, list):
            prefix: list[dict[str, Any]] = node.get("prefixItems", [])
            items = node.get("items")
            if not prefix and not (isinstance(items, dict) and wanted.get(id(items), False)):
                return
            for index, item in enumerate(value):
                child = prefix[index] if index < len(prefix) else items
                if isinstance(child, dict) and wanted.get(id(child), False):
                    yield from self._walk(child, item, f"{pointer}/{index}", value, index)

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target: dict[str, Any] = self.root["$defs"][ref[len("#/$defs/") :]]
            return target
        return node


def _is_type(value: Any, json_type: str) -> bool:
    if isinstance(value, bool) and json_type in ("integer", "number"):
        return False
    return isinstance(value, _JSON_TYPES.get(json_type, (object,)))
