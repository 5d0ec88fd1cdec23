"""What a JSON document may hold before it is rejected: nesting depth, numbers, escapes.

Shared by the whole-document parser and the streaming reader, so that the same text gets the
same verdict and the same words from both.

- Nesting: at most `MAX_DEPTH` arrays and objects inside each other. Deeper input is
  `InvalidJSON`, decided right after decoding and before any schema check, so that no later
  step (the reference validator, the walkers, Pydantic) meets a depth it would handle by
  running out of stack. Pydantic's own JSON limit is 200 levels; with this one lower, a
  document never reaches it.
- Numbers: JSON has no infinity, so a number too large for a float (`1e999999`) is invalid
  input, never `inf`; an integer longer than Python reads from text (4300 digits by default,
  `sys.set_int_max_str_digits`) is invalid input too, never a bare `ValueError`.
- Strings: a `\\uXXXX` escape of half a surrogate pair alone (`"\\ud800"`) is invalid input:
  `json` decodes it, but UTF-8 text cannot hold the character it makes (`lone_surrogate`). The
  whole-document parser alone refuses it: the streaming reader's snapshots keep it, and the
  final text, parsed whole, is refused.

The whole-document parser refuses `NaN`, `Infinity`, a repeated key and an out-of-range number
from hooks of the C decoder, which do not know where they are: `fault_position` finds the place
again, on the error path only.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any
from typing import Final

from sdk._values.pointer import resolve_ref
from sdk._values.records import shorten

__all__ = [
    "MAX_DEPTH",
    "NumberOutOfRange",
    "depth_position",
    "fault_position",
    "finite_float",
    "json_int",
    "lone_surrogate",
    "schema_depth",
    "too_deep",
    "too_long",
]

MAX_DEPTH: Final = 128
"""The deepest nesting of arrays and objects a document may have."""

_TOKENS: Final = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


class NumberOutOfRange(ValueError):
    """A JSON number that no Python number represents faithfully."""

    def __init__(self, token: str, reason: str) -> None:
        super().__init__(f"number {shorten(token, 40)} {reason}")
        self.token = token


def finite_float(token: str) -> float:
    """`float(token)`, refusing what overflows to infinity."""
    value = float(token)
    if math.isinf(value):
        raise NumberOutOfRange(token, "is out of range: JSON has no infinity")
    return value


def json_int(token: str) -> int:
    """`int(token)`, with a message that says what is wrong with an over-long integer."""
    try:
        return int(token)
    except ValueError as error:
        raise NumberOutOfRange(token, too_long(token)) from error


def too_long(token: str) -> str:
    """Why an integer this long is not read."""
    digits = len(token.lstrip("-"))
    return f"has {digits} digits, more than the {sys.get_int_max_str_digits()} read from text"


def too_deep(value: Any, limit: int = MAX_DEPTH, start: int = 0) -> bool:
    """Whether `value` nests arrays and objects deeper than `limit` (iterative: any depth).

    `start` is how deep `value` itself already sits.
    """
    pending = [(value, start + 1)]
    while pending:
        node, depth = pending.pop()
        kind = type(node)
        if kind is not dict and kind is not list:
            continue
        if depth > limit:
            return True
        children = node.values() if kind is dict else node
        pending.extend((child, depth + 1) for child in children if type(child) in (dict, list))
    return False


def depth_position(text: str, limit: int = MAX_DEPTH) -> int:
    """The position of the first bracket that opens level `limit + 1` of `text` (0 if none)."""
    depth = 0
    for match in _TOKENS.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > limit:
                return match.start()
        elif char in "]}":
            depth -= 1
    return 0


# One JSON token after optional whitespace; only as much of JSON as the places the decoder's
# hooks refuse need (the text before them is JSON: the decoder read it).
_TOKEN: Final = re.compile(
    r'[ \t\n\r]*(?:(?P<string>"[^"\\]*(?:\\.[^"\\]*)*")|(?P<constant>NaN|-?Infinity)'
    r"|(?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"
    r"|(?P<mark>[{}\[\],:])|true|false|null)",
    re.DOTALL,
)


class _Members:
    """An open object, as `fault_position` reads it: the keys so far, where the first repeated
    one is, and whether the next string is a key."""

    __slots__ = ("key_next", "keys", "repeated")

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.repeated = -1
        self.key_next = True


def fault_position(text: str) -> int:
    """Where the first value of `text` that the parser's decoder refuses from a hook stands, in
    the order the decoder meets them: a `NaN`, `Infinity` or `-Infinity`; a number out of range
    (`finite_float`, or an integer longer than Python reads from text), each where it is read;
    and a repeated key, when its object closes (the place is the key's second occurrence). 0 if
    there is none (the decoder met something else).

    Error path only: it reads the text again, token by token, in Python.
    """
    frames: list[_Members | None] = []  # the open containers, innermost last (None: an array)
    pos = 0
    while (match := _TOKEN.match(text, pos)) is not None and match.end() > pos:
        pos = match.end()
        kind = match.lastgroup
        top = frames[-1] if frames else None
        if kind == "string":
            if top is not None and top.key_next:
                key = json.loads(match.group(kind))
                if key in top.keys and top.repeated < 0:
                    top.repeated = match.start(kind)
                top.keys.add(key)
                top.key_next = False
        elif kind == "constant":
            return match.start(kind)
        elif kind == "number":
            token = match.group(kind)
            try:
                if "." in token or "e" in token or "E" in token:
                    finite_float(token)
                else:
                    int(token)
            except ValueError:
                return match.start(kind)
        elif kind == "mark":
            mark = match.group(kind)
            if mark == "{":
                frames.append(_Members())
            elif mark == "[":
                frames.append(None)
            elif mark in "]}" and frames:
                closed = frames.pop()
                if closed is not None and closed.repeated >= 0:
                    return closed.repeated
            elif mark == "," and top is not None:
                top.key_next = True
    return 0


# What may be a lone surrogate's `\\uXXXX` escape (D800-DBFF high, DC00-DFFF low): a high one
# not followed by a low one; a low one not after a high one; or a pair after a backslash, which
# is a pair or, after an escaped backslash, plain letters then a low one alone. Each match is
# one only if its first backslash starts an escape (`lone_surrogate` counts the ones before).
_LONE_SURROGATE: Final = re.compile(
    r"\\u[dD](?:(?<=\\\\u[dD])(?P<pair>[89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|[89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD])[c-fC-F][0-9a-fA-F]{2})"
)  # (each branch after the literal `\\u`: the engine looks for that text first, fast)


def lone_surrogate(text: str) -> int:
    """The position of the first escape in `text` of half a surrogate pair alone (a high one
    not followed by a low one, or a low one after no high one), or -1 if there is none.

    `text` is a document `json` has decoded, so every backslash in it is inside a string and
    starts an escape unless it is the second of an escaped backslash. A text without a backslash
    costs one character search; otherwise the search runs in the regular expression engine, and
    only its rare matches are looked at in Python (a whole pair is no match).
    """
    if "\\" not in text:  # (one character: `memchr`, far faster than looking for `\\u`)
        return -1
    for match in _LONE_SURROGATE.finditer(text):
        start = match.start()
        before = start
        while before > 0 and text[before - 1] == "\\":
            before -= 1
        escape = (start - before) % 2 == 0  # not the second half of an escaped backslash
        if match.group("pair") is not None:
            if not escape:
                return start + 6  # `\\` then the letters `ud8..`, then a low escape alone
        elif escape:
            return start
    return -1


_SCALARS: Final = frozenset({"string", "integer", "number", "boolean", "null"})


def schema_depth(root: dict[str, Any]) -> int | None:
    """The deepest nesting an instance valid against `root` can have, or `None` if unbounded.

    Unbounded: a recursive schema, or a part that admits any JSON (an untyped field, an open
    object, an array without `items`). When the bound is at most `MAX_DEPTH`, a document the
    schema accepts needs no depth walk: the parser walks only documents the schema rejects.
    """
    known: dict[int, int | None] = {}
    in_progress: set[int] = set()

    def depth(node: Any) -> int | None:
        if node is False:
            return 0
        if not isinstance(node, dict):
            return None  # `true` or anything unexpected: any JSON
        key = id(node)
        if key in known:
            return known[key]
        if key in in_progress:
            return None  # a cycle: recursive, unbounded
        in_progress.add(key)
        result = _node_depth(root, node, depth)
        in_progress.discard(key)
        known[key] = result
        return result

    return depth(root)


def _node_depth(
    root: dict[str, Any], node: dict[str, Any], depth: Callable[[Any], int | None]
) -> int | None:
    """The depth of one schema node of `root`, its sub-schemas measured by `depth`."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            found: int | None = depth(resolve_ref(root, ref)[1])
        except ValueError:
            return None
        return found
    if "const" in node or "enum" in node:
        values = node.get("enum", [node.get("const")])
        return (
            max((_value_depth(v) for v in values), default=0) if isinstance(values, list) else None
        )
    branches = [node[k] for k in ("anyOf", "oneOf") if isinstance(node.get(k), list)]
    if branches:
        depths = [depth(branch) for group in branches for branch in group]
        bounded = [d for d in depths if d is not None]
        return None if len(bounded) < len(depths) else max(bounded, default=0)
    declared = node.get("type")
    types = [declared] if isinstance(declared, str) else declared
    if not isinstance(types, list) or not types:
        return None
    deepest = 0
    for kind in types:
        if kind in _SCALARS:
            continue
        if kind == "object":
            if node.get("additionalProperties") is not False:
                return None
            if node.get("patternProperties"):
                return None
            children = [depth(child) for child in node.get("properties", {}).values()]
        elif kind == "array":
            items = [*node.get("prefixItems", []), node.get("items", True)]
            children = [depth(child) for child in items]
        else:
            return None
        if any(child is None for child in children):
            return None
        deepest = max(deepest, 1 + max((c for c in children if c is not None), default=0))
    return deepest


def _value_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_value_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_value_depth(v) for v in value), default=0)
    return 0
