"""A contract as a short type definition, for prompts: what a model reads where no grammar or
native structured output holds it to the schema (a prompt-only route, and retry feedback).

    >>> from contracts import Decision
    >>> print(compact_schema(Decision))
    Decision {
      // Work through the case here before answering. Multiple sentences.
      reasoning: string
      // The decision. Escalate when unsure.
      answer: "approve" | "reject" | "escalate"
      // How certain the decision is.
      confidence: "low" | "medium" | "high"
    }

A JSON Schema spends most of its tokens on JSON Schema's own keywords (`"type"`, `"anyOf"`,
`"additionalProperties"`, `"$ref"`); a type definition in the style of TypeScript (BAML's
rendering) says the same to a model in a fraction of them (`bench/compact_prompts.py` measures
both through the eval, with a prompt template for each). Fields keep the generation order; a
constraint is a short comment after the type (`// 3 characters`, `// >= 0`), descriptions a
comment line above the field. Each definition a schema refers to (a nested contract) is
written once, after the root, by name.

Pure: a canonical schema in, text out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from sdk.schema.canonical import shared_schema
from sdk.schema.grounding._spans import SOURCE_QUOTE_KEY
from sdk.schema.grounding._spans import VERBATIM_KEY

__all__ = ["compact_schema", "field_types"]

# Constraint keywords written as a comment after a type, each with how it reads.
_SHOWN = (
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("pattern", "matches {}"),
    ("format", "format {}"),
    ("minimum", ">= {}"),
    ("maximum", "<= {}"),
    ("exclusiveMinimum", "> {}"),
    ("exclusiveMaximum", "< {}"),
    ("multipleOf", "a multiple of {}"),
    ("minItems", "at least {} items"),
    ("maxItems", "at most {} items"),
    ("uniqueItems", "no duplicates"),
)
_INDENT = "  "


def compact_schema(schema: type[BaseModel] | Mapping[str, Any]) -> str:
    """The type definition of a contract (or of a canonical schema document)."""
    root = dict(shared_schema(schema) if isinstance(schema, type) else schema)
    writer = _Writer(root)
    title = root.get("title")
    head = writer.object_body(root, 0) if "properties" in root else writer.type_of(root, 0)
    blocks = [f"{title} {head}" if isinstance(title, str) else head]
    while writer.pending:
        name = writer.pending.pop(0)
        node = root.get("$defs", {}).get(name, {})
        body = writer.object_body(node, 0) if "properties" in node else writer.type_of(node, 0)
        blocks.append(f"{name} {body}")
    return "\n".join(blocks)


def field_types(schema: Mapping[str, Any]) -> dict[str, str]:
    """Each top-level field's type expression, as `compact_schema` writes it (`string | null`)."""
    writer = _Writer(dict(schema))
    properties: Mapping[str, Any] = schema.get("properties", {})
    return {name: writer.type_of(node, 1) for name, node in properties.items()}


class _Writer:
    """One rendering: the definitions met so far (written once each, after the root)."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.pending: list[str] = []
        self._named: set[str] = set()

    def type_of(self, node: Mapping[str, Any], depth: int) -> str:
        """The type expression of a schema node (without its constraint comment)."""
        if not isinstance(node, Mapping) or not node:
            return "any"
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self.named(ref)
        if "const" in node:
            return _literal(node["const"])
        if isinstance(node.get("enum"), list):
            return " | ".join(_literal(value) for value in node["enum"])
        for keyword in ("anyOf", "oneOf"):
            options = node.get(keyword)
            if isinstance(options, list):
                return " | ".join(dict.fromkeys(self.type_of(o, depth) for o in options))
        kind = node.get("type")
        if isinstance(kind, list):
            return " | ".join(self.type_of({**node, "type": k}, depth) for k in kind)
        if kind == "array":
            return self.array(node, depth)
        if kind == "object" or "properties" in node:
            return self.object_type(node, depth)
        return {"integer": "int", "number": "float", "boolean": "bool"}.get(str(kind), str(kind))

    def array(self, node: Mapping[str, Any], depth: int) -> str:
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):
            return "[" + ", ".join(self.type_of(item, depth) for item in prefix) + "]"
        inner = self.type_of(node.get("items", {}), depth)
        return f"({inner})[]" if " | " in inner else f"{inner}[]"

    def object_type(self, node: Mapping[str, Any], depth: int) -> str:
        if "properties" in node:
            return self.object_body(node, depth)
        values = node.get("additionalProperties")
        if isinstance(values, Mapping):
            return f"map<string, {self.type_of(values, depth)}>"
        return "{}" if values is False else "map<string, any>"

    def object_body(self, node: Mapping[str, Any], depth: int) -> str:
        properties: Mapping[str, Any] = node.get("properties", {})
        required = set(node.get("required", ()))
        pad = _INDENT * (depth + 1)
        lines = ["{"]
        for name, child in properties.items():
            child = child if isinstance(child, Mapping) else {}
            description = child.get("description")
            if isinstance(description, str) and description.strip():
                lines.extend(f"{pad}// {line}" for line in description.strip().splitlines())
            optional = "" if name in required else "?"
            key = name if name.isidentifier() else json.dumps(name)
            comment = _constraints(child)
            line = f"{pad}{key}{optional}: {self.type_of(child, depth + 1)}"
            lines.append(f"{line}  // {comment}" if comment else line)
        lines.append(_INDENT * depth + "}")
        return "\n".join(lines)

    def named(self, ref: str) -> str:
        """A reference by the definition's name, written once after the root."""
        if ref == "#":
            title = self.root.get("title")
            return title if isinstance(title, str) else "any"
        name = ref.rsplit("/", 1)[-1]
        if name not in self._named:
            self._named.add(name)
            self.pending.append(name)
        return name


def _constraints(node: Mapping[str, Any]) -> str:
    """The constraints of a node (and of its non-null branches) as a short comment."""
    any_of = node.get("anyOf")
    options = any_of if isinstance(any_of, list) else []
    nodes = [node, *(o for o in options if isinstance(o, Mapping) and o.get("type") != "null")]
    shown: list[str] = []
    for each in nodes:
        if each.get("minLength") is not None and each.get("minLength") == each.get("maxLength"):
            shown.append(f"exactly {each['minLength']} characters")
            each = {k: v for k, v in each.items() if k not in ("minLength", "maxLength")}
        shown += [text.format(_plain(each[key])) for key, text in _SHOWN if key in each]
        if each.get(SOURCE_QUOTE_KEY) or each.get(VERBATIM_KEY):
            shown.append("copied exactly from the document")
    return ", ".join(dict.fromkeys(shown))


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
