"""Walk a JSON instance together with its schema, visiting only the nodes a caller wants.

It reads nothing but schemas and JSON values, so it lives in the schema layer: the parser uses
it to find enum positions (casing policy) and source-quote positions (evidence checks) in a
document, the grounding code to find grounded strings. Subschemas that cannot contain a wanted
node are never entered, and that pruning is computed once per (schema, predicate), so a document
with no wanted node costs almost nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from sdk._values.pointer import escape_pointer
from sdk._values.pointer import resolve_ref
from sdk.schema.canonical import subschemas

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
    _wanted: set[int] = field(default_factory=set)
    _targets: dict[int, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Fill the tables now, so that walking is read-only and safe across threads.
        self._fill()

    @property
    def any_wanted(self) -> bool:
        """Whether the schema has any wanted node at all."""
        return self._contains[id(self.root)]

    def contains(self, node: dict[str, Any]) -> bool:
        """Whether `node` or anything below it (through `$ref` too) is wanted."""
        return self._contains.get(id(node), False)

    def _fill(self) -> None:
        """Which nodes reach a wanted node, following subschemas and `$ref`s.

        A reachability question on a graph that has cycles (a recursive contract refers to
        itself), so it is answered on the graph, not by recursion: every node is collected
        once, then "contains" spreads from each wanted node back to everything that reaches it.
        A node inside a cycle therefore gets its final answer, never an in-progress one.
        """
        nodes: dict[int, dict[str, Any]] = {}
        parents: dict[int, list[int]] = {}
        pending = [self.root]
        while pending:
            node = pending.pop()
            key = id(node)
            if key in nodes:
                continue
            nodes[key] = node
            parents.setdefault(key, [])
            children = []
            for suffix, child in subschemas(node):
                pending.append(child)
                if not suffix.startswith("/$defs/"):  # definitions count where referenced
                    children.append(child)
            ref = node.get("$ref")
            if isinstance(ref, str):
                _, target = resolve_ref(self.root, ref)
                self._targets[key] = target
                pending.append(target)
                children.append(target)
            for child in children:
                parents.setdefault(id(child), []).append(key)
        reached = [key for key, node in nodes.items() if self.wanted(node)]
        self._wanted = set(reached)
        contains = dict.fromkeys(nodes, False)
        while reached:
            key = reached.pop()
            if contains[key]:
                continue
            contains[key] = True
            reached.extend(parents[key])
        self._contains = contains

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
        wanted = self._contains
        if not wanted.get(id(node), False):
            return
        target = self._targets.get(id(node))
        if target is not None:
            # `$ref` with siblings: the siblings are checked here, the target below.
            if id(node) in self._wanted and _is_type(value, node.get("type")):
                yield Hit(pointer, node, value, container, key)
            yield from self._walk(target, value, pointer, container, key)
            return
        if not _is_type(value, node.get("type")):
            return
        if id(node) in self._wanted:
            yield Hit(pointer, node, value, container, key)
        for keyword in ("anyOf", "oneOf", "allOf"):
            for branch in node.get(keyword, ()):
                yield from self._walk(branch, value, pointer, container, key)
        # A child whose subschema holds nothing wanted is skipped here, before its pointer is
        # built and its generator started: in a large document that is nearly every child.
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


def _is_type(value: Any, json_type: Any) -> bool:
    """Whether `value` has the node's `type` (a node without a single declared type: yes)."""
    if not isinstance(json_type, str):
        return True
    if isinstance(value, bool) and json_type in ("integer", "number"):
        return False
    return isinstance(value, _JSON_TYPES.get(json_type, (object,)))
