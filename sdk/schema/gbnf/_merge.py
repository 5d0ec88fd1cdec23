"""Intersection of two subschemas (`allOf`, keywords beside `$ref`/`anyOf`/`oneOf`), exactly or
not at all.

`intersect(a, b)` returns one schema admitting exactly the values both admit, or raises
`Unmergeable` naming the keyword it cannot intersect (two different `pattern`s, say). It works
keyword by keyword and never reads a `$ref`: a reference on one side is kept as the result's
`$ref` (the compiler then intersects its target with the rest, once per target and rest, so a
recursive schema stays finite); references on both sides become `$ref` plus `allOf: [{"$ref"}]`,
and `allOf` lists are joined (the compiler flattens them before intersecting).
`False` is the schema no value satisfies (an empty type set, disjoint `enum`s...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from sdk.schema.gbnf._json_values import json_kind
from sdk.schema.gbnf._keywords import HANDLED
from sdk.schema.gbnf._keywords import NOT_IN
from sdk.schema.gbnf._keywords import UNSUPPORTED

_LOWER = frozenset({"minimum", "minLength", "minItems", "minProperties", "minContains"})
_UPPER = frozenset({"maximum", "maxLength", "maxItems", "maxProperties", "maxContains"})
# At most this many branches from intersecting two unions (a cross product).
MAX_BRANCHES = 256


class Unmergeable(Exception):
    """Two subschemas whose intersection this converter cannot write as one schema."""

    def __init__(self, keyword: str, reason: str) -> None:
        super().__init__(reason)
        self.keyword = keyword
        self.reason = reason


def value_key(value: Any) -> str:
    """A key equal for two JSON values JSON Schema calls equal (1 and 1.0 included)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{value_key(v)}" for k, v in sorted(value.items()))
    if isinstance(value, list):
        return "[" + ",".join(value_key(item) for item in value)
    return json_kind(value)[0] + json.dumps(value)


def _same(x: Any, y: Any) -> bool:
    """JSON equality, cheaply: Python's `==` is coarser (`True == 1`), so only its "equal"
    needs the exact check; its "different" is final."""
    if x is y:
        return True
    return bool(x == y) and value_key(x) == value_key(y)


def flatten(node: Any) -> list[Any]:
    """`node` as a list of `allOf`-free members whose intersection it is."""
    if not isinstance(node, dict) or "allOf" not in node:
        return [node]
    members = node["allOf"]
    if not isinstance(members, list) or not members:
        raise Unmergeable("allOf", "`allOf` must be a non-empty list")
    rest = {key: value for key, value in node.items() if key != "allOf"}
    out = flatten(rest) if rest else []
    for member in members:
        out += flatten(member)
    return out


def intersect_all(members: list[Any]) -> Any:
    result: Any = True
    for member in members:
        result = intersect(result, member)
        if result is False:
            return False
    return result


def intersect(a: Any, b: Any) -> Any:
    if a is True or b is False:
        return b
    if b is True or a is False:
        return a
    if not isinstance(a, dict) or not isinstance(b, dict):
        raise Unmergeable("", "a schema must be an object or a boolean")
    for one, other in ((a, b), (b, a)):
        if ("unevaluatedProperties" in one or "unevaluatedItems" in one) and set(other) - {"type"}:
            # What counts as evaluated depends on the schema object the keyword sits in.
            raise Unmergeable("unevaluatedProperties", "`unevaluated*` in an intersection")
    out: dict[str, Any] = {}
    extra: list[Any] = []  # `allOf` members to add: the second of two different `$ref`s
    for key in [*a, *(k for k in b if k not in a)]:
        if key not in b:
            out[key] = a[key]
        elif key not in a:
            out[key] = b[key]
        elif _same(a[key], b[key]):
            out[key] = a[key]
        else:
            merged = _merge_keyword(key, a[key], b[key], extra)
            if merged is False and key not in ("properties", "additionalProperties", "items"):
                return False
            out[key] = merged
    if extra:
        out["allOf"] = [*out.get("allOf", []), *extra]
    _patterns(a, b, out)
    if not _objects(a, b, out):
        return False
    return out


def _patterns(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any]) -> None:
    """A name one side constrains by a `patternProperties` pattern is, for the other side, an
    additional property: in the intersection it must satisfy the other side's
    `additionalProperties` too (else `allOf [{additionalProperties: false}, {patternProperties:
    {"^x": {}}}]` would take `{"x1": 1}`). Where a name the other side declares matches the
    pattern, that would also constrain a declared name: refused as unmergeable."""
    for side, other in ((a, b), (b, a)):
        patterns = side.get("patternProperties")
        if not isinstance(patterns, dict) or not patterns or "patternProperties" in other:
            continue
        extra = other.get("additionalProperties", True)
        if extra is True or extra == {}:
            continue
        declared = other.get("properties", {})
        for pattern in patterns:
            try:
                clash = [n for n in declared if re.search(pattern, n)] if isinstance(
                    declared, dict
                ) else []
            except re.error as error:
                raise Unmergeable("patternProperties", f"pattern {pattern!r}: {error}") from None
            if clash:
                raise Unmergeable(
                    "patternProperties",
                    f"pattern {pattern!r} covers {clash[0]!r}, which the other side declares "
                    "beside its additionalProperties",
                )
        out["patternProperties"] = {
            pattern: intersect(schema, extra) for pattern, schema in patterns.items()
        }


def _merge_keyword(key: str, x: Any, y: Any, extra: list[Any]) -> Any:
    if key == "type":
        return _types(x, y)
    if key in _LOWER or key in _UPPER or key in ("exclusiveMinimum", "exclusiveMaximum"):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y)):
            raise Unmergeable(key, f"two different `{key}`s")
        return max(x, y) if key in _LOWER or key == "exclusiveMinimum" else min(x, y)
    if key == "required":
        if not isinstance(x, list) or not isinstance(y, list):
            raise Unmergeable(key, "`required` must be a list")
        return list(dict.fromkeys([*x, *y]))
    if key == "enum":
        if not isinstance(x, list) or not isinstance(y, list):
            raise Unmergeable(key, "`enum` must be a list")
        keys = {value_key(v) for v in y}
        kept = [v for v in x if value_key(v) in keys]
        return kept or False
    if key == "const":
        return False  # two different constants: no value
    if key == "uniqueItems":
        return bool(x) or bool(y)
    if key in ("additionalProperties", "items", "unevaluatedProperties"):
        if isinstance(x, list) or isinstance(y, list):
            raise Unmergeable(key, f"two different `{key}` lists")
        return intersect(x, y)
    if key == "properties":
        if not isinstance(x, dict) or not isinstance(y, dict):
            raise Unmergeable(key, "`properties` must be an object")
        names = [*x, *(name for name in y if name not in x)]
        return {name: intersect(x.get(name, True), y.get(name, True)) for name in names}
    if key in ("anyOf", "oneOf"):
        if not isinstance(x, list) or not isinstance(y, list):
            raise Unmergeable(key, f"`{key}` must be a list")
        if len(x) * len(y) > MAX_BRANCHES:
            raise Unmergeable(key, f"two `{key}`s of {len(x)} and {len(y)} branches")
        # oneOf over the pairs is exact: a value matches exactly one pair iff it matches
        # exactly one branch of each.
        pairs = [intersect(p, q) for p in x for q in y]
        return [p for p in pairs if p is not False] or False
    if key == "not":
        return {"anyOf": [x, y]}  # not A and not B is not (A or B)
    if key == "$ref":
        extra.append({"$ref": y})
        return x
    if key == "allOf":
        if not isinstance(x, list) or not isinstance(y, list):
            raise Unmergeable(key, "`allOf` must be a list")
        return [*x, *y]
    if key == NOT_IN:
        return list(dict.fromkeys([*x, *y]))  # outside both sets
    if key not in HANDLED and key not in UNSUPPORTED:
        return x  # an annotation or an unknown keyword: ignored either way
    raise Unmergeable(key, f"two different `{key}`s need an intersection")


def _types(x: Any, y: Any) -> Any:
    xs = x if isinstance(x, list) else [x]
    ys = y if isinstance(y, list) else [y]
    if not all(isinstance(t, str) for t in [*xs, *ys]):
        raise Unmergeable("type", "`type` must be a string or a list of strings")
    found = []
    for kind in xs:
        if kind in ys:
            found.append(kind)
        elif (kind == "integer" and "number" in ys) or (kind == "number" and "integer" in ys):
            found.append("integer")
    found = list(dict.fromkeys(found))
    if not found:
        return False
    return found[0] if len(found) == 1 else found


def _objects(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any]) -> bool:
    """Properties one side declares and the other covers by `additionalProperties` (or a
    `patternProperties` pattern) must satisfy both: False when a required one cannot."""
    properties = out.get("properties")
    if not isinstance(properties, dict):
        return True
    merged = dict(properties)
    for side, other in ((a, b), (b, a)):
        declared = side.get("properties", {})
        if not isinstance(declared, dict):
            continue
        for name in declared:
            theirs = other.get("properties", {})
            if isinstance(theirs, dict) and name in theirs:
                continue
            for schema in _covering(other, name):
                merged[name] = intersect(merged[name], schema)
    out["properties"] = merged
    required = out.get("required", [])
    return not any(merged.get(name) is False for name in required if isinstance(name, str))


def _covering(side: dict[str, Any], name: str) -> list[Any]:
    """The schemas `side` applies to an undeclared property called `name`."""
    patterns = side.get("patternProperties", {})
    found = []
    if isinstance(patterns, dict):
        for pattern, schema in patterns.items():
            try:
                if re.search(pattern, name):
                    found.append(schema)
            except re.error as error:
                raise Unmergeable("patternProperties", f"pattern {pattern!r}: {error}") from None
    if not found:
        found.append(side.get("additionalProperties", True))
    return found


_JSON_SPECIAL = re.compile(r'["\\\x00-\x1f]')
_ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")


def is_never(schema: Any) -> bool:
    """Whether the schema is written to admit no value (`false`, `{"not": {}}`)."""
    if schema is False:
        return True
    if not isinstance(schema, dict):
        return False
    keys = {key for key in schema if key in HANDLED or key in UNSUPPORTED}
    return keys == {"not"} and _constraint_free(schema["not"])


def _constraint_free(schema: Any) -> bool:
    if schema is True:
        return True
    return isinstance(schema, dict) and not any(k in HANDLED or k in UNSUPPORTED for k in schema)


def exclude(schema: Any, deref: Callable[[Any], Any]) -> Any:
    """A schema whose every value fails `schema`: its complement where this converter can write
    that (`not`, `type`, `required`, unions of those), else a part of it (objects missing a
    required name, values of another type), or None when nothing is known to fail. A part of the
    complement is what `not` and `oneOf` need: the grammar may be narrower, never wider."""
    schema = deref(schema)
    if schema is False:
        return True
    if _constraint_free(schema):
        return False
    if not isinstance(schema, dict):
        return None
    keys = {key for key in schema if key in HANDLED or key in UNSUPPORTED}
    if keys == {"not"}:
        return schema["not"]
    for keyword, joined in (("anyOf", "allOf"), ("allOf", "anyOf")):
        if keys == {keyword} and isinstance(schema[keyword], list):
            each = [exclude(part, deref) for part in schema[keyword]]
            if joined == "allOf":  # not (A or B) is (not A) and (not B): each one is needed
                return None if any(p is None for p in each) else {"allOf": each}
            known = [p for p in each if p is not None]  # not (A and B): either will do
            return {"anyOf": known} if known else None
    parts: list[Any] = []
    listed = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if ("enum" in keys or "const" in keys) and isinstance(listed, list):
        plain = all(isinstance(v, str) and not _JSON_SPECIAL.search(v) for v in listed)
        if not plain:
            return None
        # Anything but a string, or a string outside the listed ones.
        others = [kind for kind in _ALL_TYPES if kind != "string"]
        return {"anyOf": [{"type": others}, {"type": "string", NOT_IN: list(listed)}]}
    if "type" in keys:
        named = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        # The numbers that are not integers have no grammar rule: with `integer` alone, every
        # number is left out (a narrowing).
        left = [
            kind
            for kind in _ALL_TYPES
            if kind not in named and not (kind == "number" and "integer" in named)
        ]
        if left:
            parts.append({"type": left})
        if keys == {"type"}:
            return parts[0] if parts else False
    parts.extend(_failing_objects(schema, deref))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"anyOf": parts}


def _failing_objects(schema: dict[str, Any], deref: Callable[[Any], Any]) -> list[Any]:
    """Objects known to fail `schema`'s object keywords (`exclude`'s part for objects)."""
    parts: list[Any] = []
    required = schema.get("required")
    if isinstance(required, list) and required and all(isinstance(n, str) for n in required):
        declared = schema.get("type")
        if declared in (None, "object") or (isinstance(declared, list) and "object" in declared):
            # `required` holds for every non-object; objects missing a name fail it.
            missing = [{"properties": {name: False}} for name in required]
            parts.append({"type": "object", "anyOf": missing})
    properties = schema.get("properties")
    if isinstance(properties, dict) and len(properties) <= 8:
        for name, sub in properties.items():
            # An object whose `name` holds a value failing its schema fails the whole.
            failing = exclude(sub, deref)
            if failing is not None and failing is not False:
                parts.append({"type": "object", "required": [name], "properties": {name: failing}})
    return parts


def required_names(node: dict[str, Any]) -> set[str]:
    required = node.get("required", [])
    if not isinstance(required, list):
        return set()
    return {name for name in required if isinstance(name, str)}


def properties_of(node: dict[str, Any]) -> dict[str, Any]:
    properties = node.get("properties", {})
    return properties if isinstance(properties, dict) else {}


def forbids_a_required(node: dict[str, Any]) -> bool:
    """An object schema requiring a property it forbids, with no type but object allowed."""
    declared = node.get("type")
    if declared != "object" and declared != ["object"]:
        return False
    return any(forbids(node, name) for name in required_names(node))


def forbids(node: dict[str, Any], name: str) -> bool:
    """Whether an object schema forbids a property called `name`."""
    properties = properties_of(node)
    if name in properties:
        return is_never(properties[name])
    patterns = node.get("patternProperties", {})
    for pattern in patterns if isinstance(patterns, dict) else ():
        try:
            if re.search(pattern, name):
                return is_never(patterns[pattern])
        except (re.error, TypeError):
            return False
    return node.get("additionalProperties", True) is False
