"""Writing GBNF: literals, character classes, rule-name fragments, sequences."""

from __future__ import annotations

import re

from sdk.schema import _regex as rx


def literal(text: str) -> str:
    """A GBNF string literal matching `text` exactly."""
    out = []
    for char in text:
        point = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif point < 0x20 or point == 0x7F:
            out.append(f"\\x{point:02X}")
        else:
            out.append(char)  # non-ASCII stays raw UTF-8: both parsers decode it
    return '"' + "".join(out) + '"'


def _class_char(point: int) -> str:
    # ASCII punctuation is written as \xHH inside classes: `-`, `]`, `^`, `\` are special to
    # GBNF, and llguidance copies classes into Rust regexes where `&&`, `~~`, `--` are too.
    if point < 0x80 and not chr(point).isalnum():
        return f"\\x{point:02X}"
    return chr(point)


def char_class(ranges: rx.Ranges) -> str:
    """A GBNF character class for a non-empty set.

    Negated when the set reaches U+10FFFF and leaves out ASCII characters only: llama.cpp
    rejects a token that ends partway through a multi-byte character when the characters it
    could still become overlap a negated class's exclusions (`[^퀀]` refuses U+D7FF, sent as
    byte tokens), so non-ASCII exclusions are written as the ranges around them.
    """
    excluded = rx.complement(ranges)
    negate = ranges[-1][1] == rx.MAX_CODE_POINT and bool(excluded) and excluded[-1][1] < 0x80
    shown = rx.complement(ranges) if negate else ranges
    items = []
    for lo, hi in shown:
        if lo == hi:
            items.append(_class_char(lo))
        elif hi == lo + 1:
            items.append(_class_char(lo) + _class_char(hi))
        else:
            items.append(f"{_class_char(lo)}-{_class_char(hi)}")
    return "[" + ("^" if negate else "") + "".join(items) + "]"


def slug(text: str) -> str:
    """A rule-name fragment: llama.cpp names are [a-zA-Z0-9-]; lower case avoids llguidance's
    camelCase renaming."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return name or "x"


def is_atom(expr: str) -> bool:
    """Whether `expr` can take a repetition suffix as it is: a rule name, literal or class."""
    return bool(
        re.fullmatch(r"[a-z0-9-]+", expr)
        or re.fullmatch(r'"(?:[^"\\]|\\.)*"', expr)
        or re.fullmatch(r"\[(?:[^\]\\]|\\.)*\]", expr)
    )


def join_terms(*parts: str) -> str:
    return " ".join(part for part in parts if part)
