"""Objects: declared properties in declared order, then the other members the schema allows
(`additionalProperties`, `patternProperties`), and maps.

A member beyond the declared ones must never repeat a declared key: its key is written from a
grammar of the strings that are *not* declared names (a trie of the names, each state allowing
any character that leaves it), in the canonical spelling only, so that `"n\\u0061me"` cannot
sneak in a second `"name"`. A `patternProperties` key comes from its pattern; when a pattern
matches a declared name, that member's value satisfies both schemas and no pattern key is
written (it could repeat the declared key): a narrowing.
"""

from __future__ import annotations

import re
from typing import Any

from sdk.schema.canonical import escape_pointer
from sdk.schema.gbnf._gbnf_text import join_terms
from sdk.schema.gbnf._gbnf_text import literal
from sdk.schema.gbnf._gbnf_text import slug
from sdk.schema.gbnf._json_values import json_string
from sdk.schema.gbnf._merge import Unmergeable
from sdk.schema.gbnf._merge import intersect
from sdk.schema.gbnf._merge import is_never
from sdk.schema.gbnf._merge import value_key
from sdk.schema.gbnf._strings import StringRules


class ObjectRules(StringRules):
    """Rules for object nodes."""

    def object(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        properties = node.get("properties", {})
        if not isinstance(properties, dict):
            return self.problem(pointer, "properties", "`properties` must be an object")
        if node.get("unevaluatedProperties", False) is not False:
            self.problem(pointer, "unevaluatedProperties", "only `false` is supported")
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
            return self.problem(pointer, "required", "`required` must be a list of names")
        declared = dict(properties)
        for name in required:
            if name not in declared:
                # A required name the schema does not declare: declared here, with the schema
                # that applies to it (a pattern's or `additionalProperties`).
                declared[name] = self.covering(node, name, pointer)
        if not declared:
            return self.mapping(node, pointer, hint)
        names = [name for name, schema in declared.items() if not is_never(schema)]
        for name in required:
            if is_never(declared[name]):
                self.problem(pointer, "required", f"required property {name!r} is forbidden")
        extra = self.extra_member(node, list(declared), pointer, hint)  # none may repeat
        non_empty = self.non_empty(node, len(set(required)), len(names), extra is not None, pointer)
        fresh: frozenset[str] = frozenset()  # "{" was read: recursion below is not left
        members: list[tuple[str, str, bool]] = []  # (key: value, rule hint, required)
        for name in names:
            where = "properties" if name in properties else "required"
            schema = declared[name]
            if where == "properties":
                # A declared property whose name matches a pattern satisfies both schemas.
                schema = self.with_patterns(node, name, schema, pointer)
            if name not in required and (is_never(schema) or self.provably_empty(schema, 0)):
                continue  # no value can be written for it: the property is left out
            value = self.node(
                schema,
                f"{pointer}/{where}/{escape_pointer(name)}" if where == "properties" else pointer,
                f"{hint}-{slug(name)}",
                fresh,
            )
            key = literal(json_string(name))
            member = join_terms(key, self.ws, literal(":"), self.ws, value)
            members.append((member, f"{hint}-{slug(name)}-kv", name in required))
        open_, close = literal("{"), literal("}")
        comma = join_terms(self.ws, literal(","), self.ws)
        if not members and extra is None:
            if non_empty:
                return self.problem(pointer, "minProperties", "no property can be written")
            return self.define(hint, join_terms(open_, self.ws, close))
        if extra is None and all(is_required for _, _, is_required in members):
            # The common case, written flat: `"{" kv , kv , kv "}"`.
            inner = f" {comma} ".join(member for member, _, _ in members)
            return self.define(hint, join_terms(open_, self.ws, inner, self.ws, close))
        body = self.ordered_members(members, extra, hint, empty=not non_empty)
        return self.define(hint, body)

    def non_empty(
        self, node: dict[str, Any], count_required: int, count_names: int, extra: bool, pointer: str
    ) -> bool:
        """Whether the object's property counts leave out only the empty object ("at least one
        property" with none required); a count not already implied is a problem."""
        min_props = self.count(node, "minProperties", pointer)
        max_props = self.limit(node, "maxProperties", pointer)
        non_empty = min_props == 1 and count_required == 0
        if (min_props > count_required and not non_empty) or (
            max_props is not None and (extra or max_props < count_names)
        ):
            self.problem(
                pointer,
                "minProperties" if min_props > count_required else "maxProperties",
                "a property count beside `properties` is only supported when already implied",
            )
        return non_empty

    def covering(self, node: dict[str, Any], name: str, pointer: str) -> Any:
        """The schema an undeclared property `name` must satisfy."""
        patterns = node.get("patternProperties", {})
        matched = [
            schema
            for pattern, schema in (patterns.items() if isinstance(patterns, dict) else ())
            if self.matches(pattern, name, pointer)
        ]
        if len(matched) > 1:
            self.problem(pointer, "patternProperties", f"{name!r} matches several patterns")
        if matched:
            return matched[0]
        return node.get("additionalProperties", True)

    def with_patterns(self, node: dict[str, Any], name: str, schema: Any, pointer: str) -> Any:
        patterns = node.get("patternProperties", {})
        for pattern, extra in patterns.items() if isinstance(patterns, dict) else ():
            if self.matches(pattern, name, pointer):
                try:
                    schema = intersect(schema, extra)
                except Unmergeable as error:
                    self.problem(pointer, "patternProperties", f"{name!r}: {error.reason}")
        return schema

    def matches(self, pattern: str, name: str, pointer: str) -> bool:
        try:
            return re.search(pattern, name) is not None
        except (re.error, TypeError) as error:
            self.problem(pointer, "patternProperties", f"pattern {pattern!r}: {error}")
            return False

    def extra_member(
        self, node: dict[str, Any], names: list[str], pointer: str, hint: str
    ) -> str | None:
        """The rule for one member beyond the declared ones, None when there is none."""
        patterns = node.get("patternProperties", {})
        if not isinstance(patterns, dict):
            self.problem(pointer, "patternProperties", "`patternProperties` must be an object")
            return None
        allowed = {pattern: schema for pattern, schema in patterns.items() if not is_never(schema)}
        if allowed:
            # Only keys matching a pattern are written (the others, if `additionalProperties`
            # allows them, are left out: a narrowing).
            if len({value_key(schema) for schema in allowed.values()}) > 1:
                self.problem(
                    pointer, "patternProperties", "several patterns with different schemas"
                )
                return None
            if any(self.matches(pattern, name, pointer) for pattern in allowed for name in names):
                # A pattern key could repeat a declared name: only the declared members are
                # written (a narrowing); their values already satisfy the pattern's schema too.
                return None
            keys = [
                self.pattern(pattern, "patternProperties", 0, None, pointer, f"{hint}-key")
                for pattern in allowed
            ]
            first = next(iter(allowed))
            value = self.node(
                allowed[first],
                f"{pointer}/patternProperties/{escape_pointer(first)}",
                f"{hint}-value",
                frozenset(),
            )
            key = self.alternatives(keys, f"{hint}-key")
        else:
            additional = node.get("additionalProperties", True)
            if additional is False or patterns:
                return None
            if "additionalProperties" not in node and node.get("unevaluatedProperties") is False:
                return None
            key_or_none = self.key_except(names, hint) if names else self.shared("string")
            if key_or_none is None:
                return None
            key = key_or_none
            value = self.node(
                additional, f"{pointer}/additionalProperties", f"{hint}-value", frozenset()
            )
        return self.define(f"{hint}-extra", join_terms(key, self.ws, literal(":"), self.ws, value))

    def ordered_members(
        self,
        members: list[tuple[str, str, bool]],
        extra: str | None,
        hint: str,
        *,
        empty: bool,
    ) -> str:
        """Declared order with optional members: choose the first member written, then each
        later member in order, an optional one behind `( , kv )?`, then any extra members;
        `empty`: the empty object too, when no member is required.

        `tail-i` is everything after member i-1, so the rules grow linearly with the number of
        properties, and the grammar stays unambiguous (every member starts with its own key,
        and an extra member's key is never a declared one).
        """
        open_, close = literal("{"), literal("}")
        comma = join_terms(self.ws, literal(","), self.ws)
        names = [self.define(kv_hint, member) for member, kv_hint, _ in members]
        extras = f"{self.define(f'{hint}-more', join_terms(comma, extra))}*" if extra else ""
        tails: dict[int, str] = {}
        for index in range(len(members), 0, -1):
            if index == len(members):
                if extras:
                    tails[index] = extras
                continue
            item = join_terms(comma, names[index])
            if not members[index][2]:
                item = f"( {item} )?"
            body = join_terms(item, tails.get(index + 1, ""))
            tails[index] = self.define(f"{hint}-after-{index}", body)
        firsts = []
        for index, (_, _, is_required) in enumerate(members):
            firsts.append(join_terms(names[index], tails.get(index + 1, "")))
            if is_required:
                break
        any_required = any(is_required for _, _, is_required in members)
        if not any_required and extra:
            firsts.append(join_terms(extra, extras))
        body = join_terms(open_, self.ws, "( " + " | ".join(firsts) + " )", self.ws, close)
        if not any_required and empty:
            body += " | " + join_terms(open_, self.ws, close)
        return body

    def mapping(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        """An object without declared properties: keys from `patternProperties` or any key,
        values from the pattern's schema or `additionalProperties`."""
        open_, close = literal("{"), literal("}")
        min_props = self.count(node, "minProperties", pointer)
        max_props = self.limit(node, "maxProperties", pointer)
        additional = node.get("additionalProperties", True)
        patterns = node.get("patternProperties")
        if (
            additional is True
            and not patterns
            and (min_props, max_props) == (0, None)
            and node.get("unevaluatedProperties") is not False
        ):
            return self.shared("object")
        member = self.extra_member(node, [], pointer, hint)
        if member is None:
            max_props = 0
        if max_props is not None and max_props < min_props:
            return self.problem(pointer, "maxProperties", "maxProperties below minProperties")
        if max_props == 0 or member is None:
            return self.define(hint, join_terms(open_, self.ws, close))
        comma = join_terms(self.ws, literal(","), self.ws)
        more = self.define(f"{hint}-more", join_terms(comma, member))
        rest = self.repeat(
            more, max(min_props - 1, 0), None if max_props is None else max_props - 1, hint
        )
        content = join_terms(member, rest)
        if min_props == 0:
            body = join_terms(open_, self.ws, f"( {join_terms(content, self.ws)} )?", close)
        else:
            body = join_terms(open_, self.ws, content, self.ws, close)
        return self.define(hint, body)
