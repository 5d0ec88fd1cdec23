"""Local `$ref` (recursion included) and `anyOf`/`oneOf` (a `oneOf` only when provably disjoint)."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from sdk.schema.gbnf._gbnf_text import slug
from sdk.schema.gbnf._json_values import json_kind
from sdk.schema.gbnf._walker import SchemaWalker


class UnionRules(SchemaWalker):
    """Rules for references and unions."""

    def ref(self, ref: Any, pointer: str, hint: str, guard: frozenset[str]) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return self.problem(pointer, "$ref", f"only local references are supported: {ref!r}")
        target_pointer = urllib.parse.unquote(ref[1:])
        target = self.resolve(target_pointer)
        if target is None:
            return self.problem(pointer, "$ref", f"cannot resolve {ref!r}")
        if target_pointer in guard:
            return self.problem(
                pointer, "$ref", f"{ref!r} reaches itself without reading input (left recursion)"
            )
        name = self.refs.get(target_pointer)
        if name is not None:
            return name
        last = target_pointer.rsplit("/", 1)[-1]
        name = self.unique(slug(last) if target_pointer else "document")
        self.refs[target_pointer] = name
        self.pending.add(name)
        expr = self.node(target, target_pointer, name, guard | {target_pointer})
        if name in self.pending:  # the body was an inline term, not a rule of its own
            self.pending.discard(name)
            self.rules[name] = expr
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
        for other in sorted(keys - {keyword}):
            self.problem(pointer, other, f"`{other}` beside `{keyword}` needs an intersection")
        options = node[keyword]
        if not isinstance(options, list) or not options:
            return self.problem(pointer, keyword, f"`{keyword}` must be a non-empty list")
        if keyword == "oneOf" and not self.disjoint(options):
            self.problem(
                pointer,
                keyword,
                "`oneOf` alternatives that may overlap (use anyOf, or make them disjoint by type"
                " or by a const discriminator)",
            )
        terms = []
        for index, option in enumerate(options):
            kind = option.get("type") if isinstance(option, dict) else None
            # Name an alternative after its type where it has one: `price-number`.
            option_hint = f"{hint}-{kind}" if isinstance(kind, str) else f"{hint}-{index + 1}"
            terms.append(self.node(option, f"{pointer}/{keyword}/{index}", option_hint, guard))
        return self.alternatives(terms, hint)

    def disjoint(self, options: list[Any]) -> bool:
        """Whether no value can match two of the options (so oneOf == anyOf)."""
        kinds = [self.kinds(option, 0) for option in options]
        if all(k is not None for k in kinds):
            seen: set[str] = set()
            for kind in kinds:
                assert kind is not None
                if kind & seen:
                    break
                seen |= kind
            else:
                return True
        constants = [self.constants(option) for option in options]
        if all(c is not None for c in constants):
            flat = [text for group in constants if group is not None for text in group]
            if len(flat) == len(set(flat)):
                return True
        return self.discriminated(options)

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
            return [json.dumps(v, sort_keys=True) for v in values]
        except (TypeError, ValueError):
            return None

    def discriminated(self, options: list[Any]) -> bool:
        """All options are objects sharing a required property with disjoint constant values."""
        objects = [self.deref(option, 0) for option in options]
        if not all(isinstance(o, dict) and isinstance(o.get("properties"), dict) for o in objects):
            return False
        shared = set.intersection(*(set(o.get("required", [])) for o in objects))
        for name in sorted(shared):
            groups = [self.constants(o["properties"].get(name)) for o in objects]
            if all(g is not None for g in groups):
                flat = [text for group in groups if group is not None for text in group]
                if len(flat) == len(set(flat)):
                    return True
        return False
