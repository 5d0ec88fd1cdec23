"""The base of the schema walk: the document, `$ref` lookup, counts, and the recursive step
that the compiler defines (the type-specific rule mixins call it for subschemas)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from sdk._values.pointer import lookup
from sdk.schema.gbnf._json_values import has_type
from sdk.schema.gbnf._keywords import HANDLED
from sdk.schema.gbnf._keywords import UNSUPPORTED
from sdk.schema.gbnf._keywords import Whitespace
from sdk.schema.gbnf._merge import Unmergeable
from sdk.schema.gbnf._merge import exclude
from sdk.schema.gbnf._merge import flatten
from sdk.schema.gbnf._merge import forbids_a_required
from sdk.schema.gbnf._merge import intersect
from sdk.schema.gbnf._merge import intersect_all
from sdk.schema.gbnf._rules import RuleBook


class SchemaWalker(RuleBook):
    """A rule book over one schema document."""

    def __init__(self, root: dict[str, Any], whitespace: Whitespace) -> None:
        super().__init__(whitespace)
        self.root = root
        self.refs: dict[str, str] = {}  # JSON pointer of a $ref target -> its rule name
        self.bases: list[str] = []  # pointers of subschemas with their own `$id`/`id`
        # Rules named but not yet written: (name, schema, pointer, guard). A `$ref` target is
        # compiled from this queue, not inside the reference, so that a long chain of
        # definitions does not nest Python calls (the depth stays that of one definition).
        self.deferred: list[tuple[str, Any, str, frozenset[str]]] = []
        self.keys_except: dict[tuple[str, ...], str] = {}  # see `StringRules.key_except`
        self.terms: dict[tuple[int, frozenset[str]], tuple[dict[str, Any], str]] = {}
        self.emptiness_budget = 20_000  # steps of `provably_empty`, so that time stays bounded

    def node(self, node: Any, pointer: str, hint: str, guard: frozenset[str]) -> str:
        """A GBNF term for the values `node` admits (defined by the compiler)."""
        raise NotImplementedError

    def provably_empty(self, schema: Any, depth: int) -> bool:
        """Whether no value satisfies `schema`, as far as a few steps of intersecting show (a
        union branch found empty is dropped instead of refused when it is compiled)."""
        if schema is False:
            return True
        if not isinstance(schema, dict) or depth > 4 or self.emptiness_budget <= 0:
            return False
        self.emptiness_budget -= 1
        keys = {key for key in schema if key in HANDLED or key in UNSUPPORTED}
        try:
            merged: Any = None
            if "$ref" in keys and keys != {"$ref"}:
                target = self.deref({"$ref": schema["$ref"]}, 0)
                if target is None:
                    return False
                merged = intersect(target, {key: schema[key] for key in keys if key != "$ref"})
            elif "not" in keys:
                excluded = exclude(schema["not"], lambda n: self.deref(n, 0))
                if excluded is None:
                    return False
                rest = {key: schema[key] for key in keys if key != "not"}
                merged = intersect_all(
                    flatten({**rest, "allOf": [*rest.get("allOf", []), excluded]})
                )
            elif "allOf" in keys:
                merged = intersect_all(flatten({key: schema[key] for key in keys}))
            else:
                for keyword in ("anyOf", "oneOf"):
                    if keyword in keys and isinstance(schema[keyword], list):
                        siblings = {key: schema[key] for key in keys if key != keyword}
                        return all(
                            self.provably_empty(intersect(siblings, option), depth + 1)
                            for option in schema[keyword]
                        )
                if ("enum" in keys or "const" in keys) and isinstance(schema.get("type"), str):
                    values = schema["enum"] if "enum" in keys else [schema["const"]]
                    if isinstance(values, list) and not any(
                        has_type(value, schema["type"]) for value in values
                    ):
                        return True
                return forbids_a_required(schema)
        except Unmergeable:
            return False
        return self.provably_empty(merged, depth + 1)

    def defer(self, name: str, schema: Any, pointer: str, guard: frozenset[str]) -> None:
        """Reserve `name` for the rule of `schema`, written when the queue is drained."""
        self.pending.add(name)
        self.deferred.append((name, schema, pointer, guard))

    def drain(self) -> None:
        while self.deferred:
            name, schema, pointer, guard = self.deferred.pop()
            expr = self.node(schema, pointer, name, guard)
            if name in self.pending:  # the body was an inline term, not a rule of its own
                self.pending.discard(name)
                self.rules[name] = expr

    def any_value(self) -> str:
        return self.shared("value")

    def count(self, node: dict[str, Any], keyword: str, pointer: str) -> int:
        """A lower count (`minLength`, `minItems`, ...): 0 when absent."""
        return self.limit(node, keyword, pointer) or 0

    def limit(self, node: dict[str, Any], keyword: str, pointer: str) -> int | None:
        """An upper count (`maxLength`, `maxItems`, ...): None when absent."""
        value = node.get(keyword)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        self.problem(pointer, keyword, f"`{keyword}` must be a non-negative integer")
        return None

    def resolve(self, pointer: str) -> Any:
        """The node at `pointer` in the root schema, or `None` where it names nothing."""
        try:
            found, node = lookup(self.root, pointer)
        except ValueError:  # not a pointer at all
            return None
        return node if found else None

    def deref(self, node: Any, depth: int) -> Any:
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 32:
            target = self.resolve(urllib.parse.unquote(node["$ref"][1:]))
            if target is None:
                return None
            node, depth = target, depth + 1
        return node
