"""Arrays: `items`, `prefixItems`, item counts."""

from __future__ import annotations

from typing import Any

from sdk.schema.gbnf._gbnf_text import join_terms
from sdk.schema.gbnf._gbnf_text import literal
from sdk.schema.gbnf._walker import SchemaWalker


class ArrayRules(SchemaWalker):
    """Rules for array nodes."""

    def array(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        min_items = self.count(node, "minItems", pointer)
        max_items = self.limit(node, "maxItems", pointer)
        items = node.get("items", True)
        prefix = node.get("prefixItems", [])
        if not isinstance(prefix, list):
            return self.problem(pointer, "prefixItems", "`prefixItems` must be a list")
        if isinstance(items, list):
            # Drafts 4 to 2019-09: `items` as a list is a tuple, then `additionalItems`.
            if "prefixItems" in node:
                return self.problem(pointer, "items", "`items` as a list beside `prefixItems`")
            prefix, items = items, node.get("additionalItems", True)
        if items is False:
            max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
        if node.get("uniqueItems") is True and (max_items is None or max_items > 1):
            self.problem(pointer, "uniqueItems", "uniqueness across items is not expressible")
        if max_items is not None and max_items < min_items:
            return self.problem(pointer, "maxItems", "maxItems below minItems: no value")
        open_, close = literal("["), literal("]")
        if max_items == 0:
            return self.define(hint, join_terms(open_, self.ws, close))
        fresh: frozenset[str] = frozenset()  # "[" was read: recursion below is not left
        elements = [
            self.node(p, f"{pointer}/prefixItems/{i}", f"{hint}-{i + 1}", fresh)
            for i, p in enumerate(prefix)
        ]
        item = "" if items is False else self.node(items, f"{pointer}/items", f"{hint}-item", fresh)
        comma = join_terms(self.ws, literal(","), self.ws)

        def after(count: int) -> str:
            """What may follow once `count` (>= 1) items were written."""
            if max_items is not None and count >= max_items:
                return ""
            if count < len(elements):
                rest = join_terms(comma, elements[count], after(count + 1))
                if count >= min_items:
                    return f"{self.define(f'{hint}-from-{count + 1}', rest)}?"
                return rest
            lo = max(min_items - count, 0)
            hi = None if max_items is None else max_items - count
            more = self.define(f"{hint}-more", join_terms(comma, item))
            return self.repeat(more, lo, hi, f"{hint}-more")

        content = join_terms(elements[0] if elements else item, after(1))
        if min_items == 0:
            body = join_terms(open_, self.ws, f"( {join_terms(content, self.ws)} )?", close)
        else:
            body = join_terms(open_, self.ws, content, self.ws, close)
        return self.define(hint, body)
