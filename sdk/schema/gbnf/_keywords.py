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
        "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not",
        "properties", "required", "additionalProperties", "patternProperties",
        "dependencies", "dependentRequired", "dependentSchemas",
        "unevaluatedProperties",
        "minProperties", "maxProperties",
        "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
        "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    }
)  # fmt: skip
# Known constraint keywords a context-free grammar cannot express here, with the reason.
UNSUPPORTED = {
    "multipleOf": "divisibility is not expressible as a grammar here",
    "if": "conditional subschemas need an intersection",
    "then": "conditional subschemas need an intersection",
    "else": "conditional subschemas need an intersection",
    "propertyNames": "constraints on property names are not supported",
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
# Internal: "any string except these", written by `_merge.exclude` (an `x-` keyword, so that a
# validator reading the intersected schema never sees it; the converter handles it itself).
NOT_IN = "x-gbnf-not-in"
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
# RFC 3986, ASCII only and without IP-literal hosts (`[::1]`): narrower than any URI checker.
_PCT = rf"%{_HEX}{_HEX}"
_PCHAR = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_PCT})"
_AUTHORITY = (
    rf"(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_PCT})*@)?"
    rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_PCT})*(?::[0-9]*)?"
)
_QUERY_FRAGMENT = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_SEGMENT_NZ_NC = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|{_PCT})+"
_HIER = (
    rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*)?"
)
_URI = rf"[A-Za-z][A-Za-z0-9+.\-]*:{_HIER}{_QUERY_FRAGMENT}"
_RELATIVE = (
    rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
    rf"|{_SEGMENT_NZ_NC}(?:/{_PCHAR}*)*)?{_QUERY_FRAGMENT}"
)
# Narrowed so that no checker's length limit is reached: an email's local part at most 64
# characters, a host name at most 4 labels of up to 60 (243 < 253), the last one not numeric.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,58}[A-Za-z0-9])?"
_TOP_LABEL = r"[A-Za-z](?:[A-Za-z0-9\-]{0,58}[A-Za-z0-9])?"
_HOSTNAME = rf"(?:{_LABEL}\.){{0,3}}{_TOP_LABEL}"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
FORMATS = {
    "date": rf"^{_DATE}$",
    "date-time": rf"^{_DATE}T{_TIME}$",
    "time": rf"^{_TIME}$",
    "uuid": rf"^{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}$",
    "uri": rf"^{_URI}$",
    "uri-reference": rf"^(?:{_URI}|{_RELATIVE})$",
    "email": rf"^{_ATEXT}{{1,32}}(?:\.{_ATEXT}{{1,31}})?@(?:{_LABEL}\.){{1,3}}{_TOP_LABEL}$",
    "hostname": rf"^{_HOSTNAME}$",
    "ipv4": rf"^{_OCTET}(?:\.{_OCTET}){{3}}$",
    "json-pointer": r"^(?:/(?:[^/~]|~[01])*)*$",
}
# The formats JSON Schema defines (2020-12 and earlier drafts): one not in `FORMATS` is refused.
# Any other `format` is an annotation that validators ignore, and so does the converter.
SPEC_FORMATS = frozenset(
    {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
        "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
        "uri-template", "json-pointer", "relative-json-pointer", "regex",
        "host-name", "ip-address", "color", "utc-millisec",
    }
)  # fmt: skip
