"""Local `$ref` (recursion included) and `anyOf`/`oneOf` (a `oneOf` only when provably disjoint)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from sdk.schema.gbnf._gbnf_text import slug
from sdk.schema.gbnf._json_values import json_kind
from sdk.schema.gbnf._merge import Unmergeable
from sdk.schema.gbnf._merge import exclude
from sdk.schema.gbnf._merge import flatten
from sdk.schema.gbnf._merge import forbids
from sdk.schema.gbnf._merge import intersect
from sdk.schema.gbnf._merge import intersect_all
from sdk.schema.gbnf._merge import properties_of
from sdk.schema.gbnf._merge import required_names
from sdk.schema.gbnf._merge import value_key
from sdk.schema.gbnf._walker import SchemaWalker


class UnionRules(SchemaWalker):
    """Rules for references and unions."""

    def target(self, ref: Any, pointer: str) -> tuple[str, Any] | None:
        """(pointer, subschema) of a local `$ref`; None after a recorded problem."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            self.problem(pointer, "$ref", f"only local references are supported: {ref!r}")
            return None
        if any(pointer == base or pointer.startswith(base + "/") for base in self.bases):
            self.problem(pointer, "$ref", "a `$ref` below a subschema with its own `$id`")
            return None
        target_pointer = urllib.parse.unquote(ref[1:])
        target = self.resolve(target_pointer)
        if target is None:
            self.problem(pointer, "$ref", f"cannot resolve {ref!r}")
            return None
        return target_pointer, target

    def ref_beside(
        self, node: dict[str, Any], keys: set[str], pointer: str, hint: str, guard: frozenset[str]
    ) -> str:
        """`$ref` with constraint keywords beside it: the intersection of its target and them,
        one rule per (target, keywords), so a recursive schema stays finite."""
        siblings = {key: node[key] for key in keys if key != "$ref"}
        return self.ref(node["$ref"], pointer, hint, guard, siblings)

    def ref(
        self,
        ref: Any,
        pointer: str,
        hint: str,
        guard: frozenset[str],
        siblings: dict[str, Any] | None = None,
    ) -> str:
        """The rule for what `ref` reaches (with `siblings`: for its intersection with them),
        shared by every reference to the same thing."""
        found = self.target(ref, pointer)
        if found is None:
            return '"?"'
        target_pointer, target = found
        key = f"{target_pointer} & {value_key(siblings)}" if siblings else target_pointer
        if key in guard:
            return self.problem(
                pointer, "$ref", f"{ref!r} reaches itself without reading input (left recursion)"
            )
        name = self.refs.get(key)
        if name is not None:
            return name
        if siblings:
            try:
                merged = intersect(target, siblings)
            except Unmergeable as error:
                return self.problem(pointer, error.keyword or "$ref", error.reason)
            if merged is False:
                return self.problem(
                    pointer, "$ref", "no value satisfies the target and its siblings"
                )
            target = merged
        return self.new_ref_rule(key, target_pointer, target, guard)

    def new_ref_rule(
        self, key: str, target_pointer: str, schema: Any, guard: frozenset[str]
    ) -> str:
        """A rule for what a `$ref` reaches (named after its target, written later), remembered
        under `key` so each reference to it shares the one rule."""
        last = target_pointer.rsplit("/", 1)[-1]
        name = self.unique(slug(last) if target_pointer else "document")
        self.refs[key] = name
        self.defer(name, schema, target_pointer, guard | {key})
        return name

    def union(
        self,
        node: dict[str, Any],
        keyword: str,
        keys: set[str],
        pointer: str,
        hint: str,
        guard: frozenset[str],
    ) -> str:
        options = node[keyword]
        if not isinstance(options, list) or not options:
            return self.problem(pointer, keyword, f"`{keyword}` must be a non-empty list")
        options = self.writable(options)
        siblings = {key: node[key] for key in keys if key != keyword}
        if siblings or any(isinstance(o, dict) and "allOf" in o for o in options):
            # (S and anyOf [A, B]) is anyOf [S and A, S and B]; the same for oneOf. A branch
            # no value satisfies is dropped: it changes neither anyOf nor oneOf.
            try:
                options = [self.merged_branch(siblings, option) for option in options]
            except Unmergeable as error:
                return self.problem(pointer, error.keyword or keyword, error.reason)
            options = [option for option in options if not self.provably_empty(option, 0)]
            if not options:
                return self.problem(pointer, keyword, "no branch satisfies the keywords beside")
        if keyword == "oneOf" and not self.disjoint(options):
            exclusive = self.exclusive(options)
            if exclusive is None:
                return self.problem(
                    pointer,
                    keyword,
                    "`oneOf` alternatives that may overlap (use anyOf, or make them disjoint by"
                    " type or by a const discriminator)",
                )
            options = exclusive
        terms = []
        for index, option in enumerate(options):
            kind = option.get("type") if isinstance(option, dict) else None
            # Name an alternative after its type where it has one: `price-number`.
            option_hint = f"{hint}-{kind}" if isinstance(kind, str) else f"{hint}-{index + 1}"
            terms.append(self.node(option, f"{pointer}/{keyword}/{index}", option_hint, guard))
        return self.alternatives(terms, hint)

    def writable(self, options: list[Any]) -> list[Any]:
        """A union's branches this compiler can write (all of them: a subclass that knows some
        branch can hold no value drops it here)."""
        return options

    def merged_branch(self, siblings: dict[str, Any], option: Any) -> Any:
        merged = intersect(siblings, option) if siblings else option
        if isinstance(merged, dict) and "allOf" in merged and "$ref" not in merged:
            merged = intersect_all(flatten(merged))
        return merged

    def exclusive(self, options: list[Any]) -> list[Any] | None:
        """oneOf [A, B, C] as anyOf [A and not B and not C, ...], each `not` only where the
        pair is not proven disjoint, and written with `exclude` (a part of the complement:
        narrower, never wider). None when some branch cannot be excluded."""
        if len(options) > MAX_EXCLUSIVE:
            return None
        out = []
        for i, option in enumerate(options):
            parts = [option]
            for j, other in enumerate(options):
                if i != j and not self.pair_disjoint(option, other, 0):
                    excluded = exclude(other, lambda n: self.deref(n, 0))
                    if excluded is None:
                        return None
                    parts.append(excluded)
            try:
                merged = self.merged_branch({}, {"allOf": parts})
            except Unmergeable:
                return None
            if not self.provably_empty(merged, 0):
                out.append(merged)
        return out or None

    def disjoint(self, options: list[Any]) -> bool:
        """Whether no value can match two of the options (so oneOf == anyOf): every pair is
        proven disjoint (see `pair_disjoint`)."""
        if len(options) > MAX_PAIRWISE:
            return False
        return all(
            self.pair_disjoint(options[i], options[j], 0)
            for i in range(len(options))
            for j in range(i + 1, len(options))
        )

    def pair_disjoint(self, a: Any, b: Any, depth: int) -> bool:
        """Proven: no value matches both. By JSON type, by constant values, or, for objects,
        by a property both require with disjoint schemas, or one requires and the other
        forbids. Reading through `$ref` ignores keywords beside it: they only narrow."""
        kinds_a, kinds_b = self.kinds(a, 0), self.kinds(b, 0)
        if kinds_a is not None and kinds_b is not None and not kinds_a & kinds_b:
            return True
        constants_a, constants_b = self.constants(a), self.constants(b)
        known = constants_a is not None and constants_b is not None
        if known and not {*(constants_a or ())} & {*(constants_b or ())}:
            return True
        return self.disjoint_objects(a, b, kinds_a, kinds_b, depth)

    def disjoint_objects(
        self, a: Any, b: Any, kinds_a: set[str] | None, kinds_b: set[str] | None, depth: int
    ) -> bool:
        """Objects only (in what both admit), told apart by one property."""
        if not (kinds_a or _ALL_KINDS) & (kinds_b or _ALL_KINDS) <= {"object"} or depth >= 4:
            return False
        object_a, object_b = self.deref(a, 0), self.deref(b, 0)
        if not isinstance(object_a, dict) or not isinstance(object_b, dict):
            return False
        required_a, required_b = required_names(object_a), required_names(object_b)
        properties_a, properties_b = properties_of(object_a), properties_of(object_b)
        for name in required_a & required_b:
            both = name in properties_a and name in properties_b
            if both and self.pair_disjoint(properties_a[name], properties_b[name], depth + 1):
                return True
        return any(forbids(object_b, name) for name in required_a) or any(
            forbids(object_a, name) for name in required_b
        )

    def kinds(self, node: Any, depth: int) -> set[str] | None:
        """The JSON types a node can produce (integer counted as number), None if unknown."""
        node = self.deref(node, depth)
        if not isinstance(node, dict):
            return None
        if "const" in node or "enum" in node:
            values = node.get("enum", [node.get("const")])
            return {json_kind(v) for v in values} if isinstance(values, list) else None
        for keyword in ("anyOf", "oneOf"):
            if isinstance(node.get(keyword), list):
                found: set[str] = set()
                for option in node[keyword]:
                    kind = self.kinds(option, depth + 1)
                    if kind is None:
                        return None
                    found |= kind
                return found
        declared = node.get("type")
        if declared is None:
            return None
        names = declared if isinstance(declared, list) else [declared]
        return {"number" if name == "integer" else str(name) for name in names}

    def constants(self, node: Any) -> list[str] | None:
        node = self.deref(node, 0)
        if not isinstance(node, dict):
            return None
        if "const" in node:
            values = [node["const"]]
        elif isinstance(node.get("enum"), list):
            values = node["enum"]
        else:
            return None
        try:
            return [value_key(v) for v in values]
        except (TypeError, ValueError):
            return None


_ALL_KINDS = frozenset({"null", "boolean", "object", "array", "number", "string"})
MAX_PAIRWISE = 128  # a `oneOf` with more branches is refused rather than checked pair by pair
MAX_EXCLUSIVE = 16  # a `oneOf` with overlapping branches is rewritten up to this many branches
