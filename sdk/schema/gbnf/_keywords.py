"""What the converter knows: whitespace modes, digit caps, keyword tables, format patterns."""

from __future__ import annotations

from typing import Literal

Whitespace = Literal["bounded", "compact"]
"""`bounded`: one space, or a newline and up to `MAX_INDENT` spaces/tabs, between tokens;
`compact`: no whitespace at all."""

MAX_INDENT = 16
MAX_INTEGER_DIGITS = 19  # enough for any 64-bit integer
MAX_FRACTION_DIGITS = 20  # enough for the shortest repr of any double written positionally >= 1e-4
MAX_EXPONENT_DIGITS = 3  # enough for any double

# llama.cpp turns a repetition bound above 2000 into "unbounded" (and rejects a minimum above
# 2000), so larger bounds are split into blocks: see `RuleBook.repeat`.
MAX_REPEAT = 2000

# Keywords that never constrain a value: ignored. So is every keyword outside `HANDLED` and
# `UNSUPPORTED` (JSON Schema ignores unknown keywords: `id`, `self`, `_format`, `example`...).
ANNOTATIONS = frozenset(
    {
        "$anchor", "$comment", "$dynamicAnchor", "$id", "$schema", "$vocabulary",
        "contentEncoding", "contentMediaType", "contentSchema", "default", "deprecated",
        "description", "discriminator", "examples", "readOnly", "title", "writeOnly",
    }
)  # fmt: skip
# Containers of subschemas that are reached through `$ref` only.
CONTAINERS = frozenset({"$defs", "definitions"})
# Keywords the converter expresses (for some values: see the handlers).
HANDLED = frozenset(
    {
        "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf",
        "properties", "required", "additionalProperties", "unevaluatedProperties",
        "minProperties", "maxProperties",
        "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
        "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    }
)  # fmt: skip
# Known constraint keywords a context-free grammar cannot express here, with the reason.
UNSUPPORTED = {
    "multipleOf": "divisibility is not expressible as a grammar here",
    "not": "a complement is not expressible as a context-free grammar",
    "if": "conditional subschemas need an intersection",
    "then": "conditional subschemas need an intersection",
    "else": "conditional subschemas need an intersection",
    "patternProperties": "property names matched by pattern are not supported",
    "propertyNames": "constraints on property names are not supported",
    "dependentRequired": "dependencies between properties are not supported",
    "dependentSchemas": "dependencies between properties are not supported",
    "dependencies": "dependencies between properties are not supported",
    "contains": "`contains` needs counting across array items",
    "minContains": "`contains` needs counting across array items",
    "maxContains": "`contains` needs counting across array items",
    "unevaluatedItems": "unevaluated items are not supported",
    "$dynamicRef": "dynamic references are not supported",
    "$recursiveRef": "recursive references (draft 2019-09) are not supported",
    # Draft 3 assertions: refused rather than ignored, since a draft-3 validator applies them.
    "extends": "draft 3's `extends` is not supported (use `allOf`)",
    "disallow": "draft 3's `disallow` is not supported",
    "divisibleBy": "draft 3's `divisibleBy` is not supported",
}
TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")

# Calendar-exact date (0001-01-01 to 9999-12-31, Feb 29 only in leap years) and RFC 3339 time,
# written with `\d`, which `_regex` reads as [0-9].
_YEAR = r"(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d\d\d)"
_LEAP_YEAR = r"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
    r"|02-(?:0[1-9]|1\d|2[0-8]))"
)
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
_HEX = "[0-9a-fA-F]"
FORMATS = {
    "date": rf"^{_DATE}$",
    "date-time": rf"^{_DATE}T{_TIME}$",
    "time": rf"^{_TIME}$",
    "uuid": rf"^{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}$",
}
