"""The conversion: one walk over the schema, dispatching each node to its rules."""

from __future__ import annotations

from typing import Any

from sdk.schema.gbnf._arrays import ArrayRules
from sdk.schema.gbnf._enums import EnumRules
from sdk.schema.gbnf._keywords import HANDLED
from sdk.schema.gbnf._keywords import TYPES
from sdk.schema.gbnf._keywords import UNSUPPORTED
from sdk.schema.gbnf._merge import Unmergeable
from sdk.schema.gbnf._merge import exclude
from sdk.schema.gbnf._merge import flatten
from sdk.schema.gbnf._merge import intersect_all
from sdk.schema.gbnf._numbers import NumberRules
from sdk.schema.gbnf._objects import ObjectRules
from sdk.schema.gbnf._unions import UnionRules

_DEPENDENCIES = ("dependencies", "dependentRequired", "dependentSchemas")
# Each dependency doubles the branches of the union it becomes: at most this many per object.
MAX_DEPENDENCIES = 6


class Compiler(EnumRules, UnionRules, NumberRules, ArrayRules, ObjectRules):
    """One conversion: walks the schema once, collecting rules and problems."""

    terms: dict[tuple[int, frozenset[str]], tuple[dict[str, Any], str]]

    def compile(self) -> str:
        self.pending.add("root")
        try:
            expr = self.node(self.root, "", "root", frozenset())
            if "root" in self.pending:
                self.rules["root"] = expr
                self.pending.discard("root")
            self.drain()
        except RecursionError:
            self.problem("", "", "the schema is nested too deeply to convert")
        return self.render()

    def node(self, node: Any, pointer: str, hint: str, guard: frozenset[str]) -> str:
        """A GBNF term (usable in a sequence) for the values `node` admits.

        `guard` holds the `$ref` targets entered since the last consumed `{` or `[`: meeting
        one again would be left recursion, which llama.cpp rejects.
        """
        if node is True:
            return self.any_value()
        if node is False:
            return self.problem(pointer, "", "the schema `false` admits no value")
        if not isinstance(node, dict):
            return self.problem(pointer, "", "a schema must be an object or a boolean")
        # A subschema met again (a union's branches share their siblings' subschemas) is not
        # walked again: its term is the same. The entry keeps the dict alive, so its id holds.
        seen = self.terms.get((id(node), guard))
        if seen is not None and seen[0] is node:
            return seen[1]
        term = self.walk(node, pointer, hint, guard)
        self.terms[(id(node), guard)] = (node, term)
        return term

    def walk(self, node: dict[str, Any], pointer: str, hint: str, guard: frozenset[str]) -> str:
        keys = self.check_keywords(node, pointer, enumerated="enum" in node or "const" in node)
        if "enum" in keys or "const" in keys:
            return self.enum(node, pointer, hint)
        dependencies = [key for key in _DEPENDENCIES if key in keys]
        if dependencies:
            rewritten = self.without_dependencies(node, keys, dependencies, pointer)
            if rewritten is None:
                return '"?"'
            return self.node(rewritten, pointer, hint, guard)
        if "not" in keys:
            complement = exclude(node["not"], lambda n: self.deref(n, 0))
            if complement is None:
                return self.problem(
                    pointer, "not", "no part of this complement is expressible as a grammar"
                )
            rest = {key: node[key] for key in keys if key != "not"}
            return self.node(
                {**rest, "allOf": [*rest.get("allOf", []), complement]}, pointer, hint, guard
            )
        if "$ref" in keys:
            if keys == {"$ref"}:
                return self.ref(node["$ref"], pointer, hint, guard)
            return self.ref_beside(node, keys, pointer, hint, guard)
        if "allOf" in keys:
            try:
                merged = intersect_all(flatten({key: node[key] for key in keys}))
            except Unmergeable as error:
                return self.problem(pointer, error.keyword or "allOf", error.reason)
            if merged is False:
                return self.problem(pointer, "allOf", "no value satisfies every `allOf` member")
            return self.node(merged, pointer, hint, guard)
        for keyword in ("anyOf", "oneOf"):
            if keyword in keys:
                return self.union(node, keyword, keys, pointer, hint, guard)
        types = self.types(node, pointer, keys)
        if not types:
            return '"?"'
        terms = [
            self.typed(node, kind, pointer, hint if len(types) == 1 else f"{hint}-{kind}")
            for kind in types
        ]
        return self.alternatives(terms, hint)

    def without_dependencies(
        self, node: dict[str, Any], keys: set[str], dependencies: list[str], pointer: str
    ) -> dict[str, Any] | None:
        """The node with each dependency written as a union: "`name` absent, or `name` present
        and what it needs" (`dependentRequired` names, `dependentSchemas` schema)."""
        rest = {key: node[key] for key in keys if key not in dependencies}
        conditions: list[Any] = []
        for keyword in dependencies:
            table = node[keyword]
            if not isinstance(table, dict):
                self.problem(pointer, keyword, f"`{keyword}` must be an object")
                return None
            for name, needs in table.items():
                absent = {"properties": {name: False}}
                if isinstance(needs, list):
                    present: Any = {"required": [name, *needs]}
                elif needs is False:
                    present = False
                else:
                    present = {"required": [name], "allOf": [needs]}
                conditions.append(
                    {"anyOf": [absent, present] if present is not False else [absent]}
                )
        if len(conditions) > MAX_DEPENDENCIES:
            self.problem(pointer, dependencies[0], f"more than {MAX_DEPENDENCIES} dependencies")
            return None
        return {**rest, "allOf": [*rest.get("allOf", []), *conditions]}

    def check_keywords(self, node: dict[str, Any], pointer: str, *, enumerated: bool) -> set[str]:
        """The node's constraint keywords; unsupported ones are recorded, unknown ones ignored.

        Beside `enum`/`const` every known keyword is fine: the listed values are filtered
        through it (see `filter_values`), which is exact.
        """
        keys: set[str] = set()
        for keyword in node:
            base = node[keyword] if keyword in ("$id", "id") and pointer else None
            if isinstance(base, str) and not base.startswith("#"):
                self.bases.append(pointer)  # `$ref`s below resolve against another document
            if keyword in UNSUPPORTED and enumerated:
                keys.add(keyword)
            elif keyword in UNSUPPORTED:
                self.problem(pointer, keyword, UNSUPPORTED[keyword])
            elif keyword in HANDLED:
                keys.add(keyword)
        if isinstance(node.get("required"), bool):
            self.problem(pointer, "required", "draft 3's boolean `required` is not supported")
        if not pointer and isinstance(node.get("$schema"), str) and "draft-03" in node["$schema"]:
            self.problem(pointer, "$schema", "draft 3 schemas are not supported")
        return keys

    def types(self, node: dict[str, Any], pointer: str, keys: set[str]) -> list[str]:
        declared = node.get("type")
        if declared is None:
            if not keys:
                return ["any"]
            # Type-specific keywords without a type: every type, each with its own keywords.
            return ["null", "boolean", "object", "array", "number", "string"]
        names = declared if isinstance(declared, list) else [declared]
        if not names or not all(isinstance(n, str) and n in TYPES for n in names):
            self.problem(pointer, "type", f"invalid type {declared!r}")
            return []
        ordered = list(dict.fromkeys(names))
        if "number" in ordered and "integer" in ordered:
            ordered.remove("integer")  # every integer is a number
        return ordered

    def typed(self, node: dict[str, Any], kind: str, pointer: str, hint: str) -> str:
        if kind == "any":
            return self.any_value()
        if kind == "null":
            return self.shared("null")
        if kind == "boolean":
            return self.shared("boolean")
        if kind == "string":
            return self.string(node, pointer, hint)
        if kind == "integer":
            return self.integer(node, pointer, hint)
        if kind == "number":
            return self.number(node, pointer, hint)
        if kind == "array":
            return self.array(node, pointer, hint)
        return self.object(node, pointer, hint)
