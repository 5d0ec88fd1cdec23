"""Objects: declared properties in declared order, and maps (`additionalProperties`)."""

from __future__ import annotations

from typing import Any

from sdk.schema.canonical import escape_pointer
from sdk.schema.gbnf._gbnf_text import join_terms, literal, slug
from sdk.schema.gbnf._json_values import json_string
from sdk.schema.gbnf._walker import SchemaWalker


class ObjectRules(SchemaWalker):
    """Rules for object nodes."""

    def object(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        properties = node.get("properties", {})
        if not isinstance(properties, dict):
            return self.problem(pointer, "properties", "`properties` must be an object")
        additional = node.get("additionalProperties", True)
        if node.get("unevaluatedProperties", False) is not False:
            self.problem(pointer, "unevaluatedProperties", "only `false` is supported")
        required = node.get("required", [])
        if not isinstance(required, list):
            return self.problem(pointer, "required", "`required` must be a list")
        if not properties:
            if required:
                self.problem(pointer, "required", "`required` without `properties`")
            return self.mapping(node, additional, pointer, hint)
        for name in required:
            if name not in properties:
                self.problem(
                    pointer,
                    "required",
                    f"required property {name!r} is not in `properties` (only declared"
                    " properties are generated)",
                )
        if isinstance(additional, dict) and additional:
            self.problem(
                pointer,
                "additionalProperties",
                "an `additionalProperties` schema beside `properties` is not supported",
            )
        count_required = sum(1 for name in properties if name in required)
        min_props = self.count(node, "minProperties", pointer)
        max_props = self.limit(node, "maxProperties", pointer)
        if min_props > count_required or (max_props is not None and max_props < len(properties)):
            self.problem(
                pointer,
                "minProperties" if min_props > count_required else "maxProperties",
                "a property count beside `properties` is only supported when already implied",
            )
        fresh: frozenset[str] = frozenset()  # "{" was read: recursion below is not left
        members: list[tuple[str, str, bool]] = []  # (key: value, rule hint, required)
        for name, schema in properties.items():
            value = self.node(
                schema,
                f"{pointer}/properties/{escape_pointer(name)}",
                f"{hint}-{slug(name)}",
                fresh,
            )
            key = literal(json_string(name))
            member = join_terms(key, self.ws, literal(":"), self.ws, value)
            members.append((member, f"{hint}-{slug(name)}-kv", name in required))
        open_, close = literal("{"), literal("}")
        comma = join_terms(self.ws, literal(","), self.ws)
        if all(is_required for _, _, is_required in members):
            # The common case, written flat: `"{" kv , kv , kv "}"`.
            inner = f" {comma} ".join(member for member, _, _ in members)
            return self.define(hint, join_terms(open_, self.ws, inner, self.ws, close))
        return self.define(hint, self.ordered_members(members, hint, open_, close, comma))

    def ordered_members(
        self, members: list[tuple[str, str, bool]], hint: str, open_: str, close: str, comma: str
    ) -> str:
        """Declared order with optional members: choose the first member written, then each
        later member in order, an optional one behind `( , kv )?`.

        `tail-i` is everything after member i-1, so the rules grow linearly with the number of
        properties, and the grammar stays unambiguous (every member starts with its own key).
        """
        names = [self.define(kv_hint, member) for member, kv_hint, _ in members]
        tails: dict[int, str] = {}
        for index in range(len(members) - 1, 0, -1):
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
        body = join_terms(open_, self.ws, "( " + " | ".join(firsts) + " )", self.ws, close)
        if not any(is_required for _, _, is_required in members):
            body += " | " + join_terms(open_, self.ws, close)
        return body

    def mapping(self, node: dict[str, Any], additional: Any, pointer: str, hint: str) -> str:
        """An object without `properties`: any keys, values from `additionalProperties`."""
        open_, close = literal("{"), literal("}")
        min_props = self.count(node, "minProperties", pointer)
        max_props = self.limit(node, "maxProperties", pointer)
        if additional is False:
            max_props = 0
        if additional == {}:
            additional = True
        if max_props is not None and max_props < min_props:
            return self.problem(pointer, "maxProperties", "maxProperties below minProperties")
        if max_props == 0:
            return self.define(hint, join_terms(open_, self.ws, close))
        if additional is True and (min_props, max_props) == (0, None):
            return self.shared("object")
        value = self.node(
            additional, f"{pointer}/additionalProperties", f"{hint}-value", frozenset()
        )
        member = self.define(
            f"{hint}-member",
            join_terms(self.shared("string"), self.ws, literal(":"), self.ws, value),
        )
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
