"""JSON values as the grammar writes them (canonical spelling) and their JSON Schema types."""

from __future__ import annotations

import json
import math
from typing import Any

from sdk.schema import _regex as rx

# Code points a JSON string never carries raw: control characters, quote and backslash.
JSON_SPECIAL: rx.Ranges = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}


def json_string(text: str) -> str:
    """`text` as a canonical JSON string: raw characters, short escapes, \\u00XX for controls."""
    out = ['"']
    for char in text:
        point = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif point in SHORT_ESCAPES:
            out.append("\\" + SHORT_ESCAPES[point])
        elif point < 0x20 or 0xD800 <= point <= 0xDFFF:
            out.append(f"\\u{point:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def json_text(value: Any) -> str:
    """`value` as compact canonical JSON (the spelling enum/const literals are generated in)."""
    if isinstance(value, str):
        return json_string(value)
    if value is None or isinstance(value, bool | int):
        return json.dumps(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(json_text(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json_string(k)}:{json_text(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"{value!r} is not a JSON value")


def has_type(value: Any, kind: str) -> bool:
    """JSON Schema's `type` check for one value."""
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    return json_kind(value) == kind


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
