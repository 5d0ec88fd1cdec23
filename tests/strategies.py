"""Hypothesis strategies that generate JSON values from a canonical schema.

hypothesis-jsonschema would be the library for this, but its last release does not work with
current Hypothesis; this covers the keywords contracts produce, and nothing else (an unknown
keyword fails loudly, so a strategy never generates values the schema would reject).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

_HANDLED = {
    "$defs", "$ref", "$schema", "additionalProperties", "anyOf", "const", "default",
    "description", "discriminator", "enum", "exclusiveMaximum", "exclusiveMinimum", "items",
    "maxItems", "maxLength", "maximum", "minItems", "minLength", "minimum", "oneOf", "pattern",
    "properties", "required", "title", "type", "x-schema-version", "x-source-quote",
    "x-lint-ignore", "x-verbatim",
}  # fmt: skip

# JSON-safe text: any Unicode except lone surrogates, which JSON cannot carry.
_TEXT = st.characters(exclude_categories=("Cs",))


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid against `schema` (a canonical contract schema with its `$defs`)."""
    return _strategy(schema, schema.get("$defs", {}))


def _strategy(node: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    unknown = set(node) - _HANDLED
    if unknown:
        raise NotImplementedError(f"no strategy for keywords {sorted(unknown)}")
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        return st.deferred(lambda: _strategy(defs[name], defs))
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if "anyOf" in node:
        return st.one_of([_strategy(branch, defs) for branch in node["anyOf"]])
    if "oneOf" in node and isinstance(node.get("discriminator"), dict):
        # A discriminated union (a `oneOf` without one fails below): each branch with its tag
        # written, as the contract reads no value without it, so exactly one branch matches.
        tag = node["discriminator"]["propertyName"]
        return st.one_of([_tagged(branch, tag, defs) for branch in node["oneOf"]])
    kind = node.get("type")
    if kind == "object":
        properties: dict[str, Any] = node.get("properties", {})
        required = set(node.get("required", ()))
        fixed = {k: _strategy(v, defs) for k, v in properties.items() if k in required}
        optional = {k: _strategy(v, defs) for k, v in properties.items() if k not in required}
        # Keep the declared order: fixed_dictionaries preserves its mapping's order.
        return st.fixed_dictionaries(fixed, optional=optional).map(
            lambda value: {k: value[k] for k in properties if k in value}
        )
    if kind == "array":
        return st.lists(
            _strategy(node.get("items", {}), defs),
            min_size=node.get("minItems", 0),
            max_size=node.get("maxItems", 4),
        )
    if kind == "string":
        if "pattern" in node:
            return st.from_regex(node["pattern"], fullmatch=True, alphabet=_TEXT)
        return st.text(_TEXT, min_size=node.get("minLength", 0), max_size=node.get("maxLength", 40))
    if kind == "integer":
        return st.integers(node.get("minimum"), node.get("maximum"))
    if kind == "number":
        return st.floats(
            node.get("minimum"), node.get("maximum"), allow_nan=False, allow_infinity=False
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    raise NotImplementedError(f"no strategy for {node}")


def _tagged(branch: dict[str, Any], tag: str, defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of a discriminated union's branch (a `$ref` to a contract), its tag written."""
    const = defs[branch["$ref"].removeprefix("#/$defs/")]["properties"][tag]["const"]
    return _strategy(branch, defs).map(lambda value: {**value, tag: const})
