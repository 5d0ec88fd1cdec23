"""Hypothesis strategies that write grammars: Lark and GBNF texts for the differential fuzzer.

Literals draw from the whole Unicode range (surrogates excepted: no text can hold one), written
with the SDK's own writers or, now and then, as escapes; classes mix single characters, ranges
and class escapes, negated or not; items are repeated (`?`, `*`, `+`, bounded), grouped into
alternations, and rules refer to each other and to themselves (recursion, left recursion
included). The first alternative of every rule uses terminals only, so every rule derives a
sentence. Sentences come from the SDK's sampler (`sdk.grammar._sentences`) and from near-miss
mutations of them (`near_misses`).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from sdk.grammar import lark_literal
from sdk.schema.gbnf._gbnf_text import literal as gbnf_literal

__all__ = ["gbnf_grammars", "lark_grammars", "near_misses"]

# Case-insensitive literals: assigned characters only (Python's Unicode tables decide folding;
# a letter a newer Unicode assigned folds on llguidance alone, a documented difference).
_ASSIGNED = st.characters(exclude_categories=("Cs", "Cn", "Co"))
# Anything but a surrogate, assigned characters most of the time.
_ANY = st.one_of(_ASSIGNED, _ASSIGNED, _ASSIGNED, st.characters(exclude_categories=("Cs",)))
_CLASS_ESCAPES = ["\\d", "\\w", "\\s", "\\D", "\\W", "\\S"]
_REGEX_SPECIAL = set("\\^$.|?*+()[]{}/-&~#")


def _regex_char(char: str) -> str:
    point = ord(char)
    if point < 0x20 or point == 0x7F:
        return f"\\x{point:02x}"
    if char in _REGEX_SPECIAL:
        return "\\" + char
    return char


@st.composite
def _char_class(draw: st.DrawFn) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["char", "range", "escape"]))
        if kind == "escape":
            items.append(draw(st.sampled_from(_CLASS_ESCAPES)))
        elif kind == "range":
            low, high = sorted([ord(draw(_ANY)), ord(draw(_ANY))])
            items.append(f"{_regex_char(chr(low))}-{_regex_char(chr(high))}")
        else:
            items.append(_regex_char(draw(_ANY)))
    negated = "^" if draw(st.booleans()) and draw(st.booleans()) else ""
    return f"[{negated}{''.join(items)}]"


@st.composite
def _regex_atom(draw: st.DrawFn, depth: int = 0) -> str:
    kinds = ["class", "class", "dot", "escape", "char"] + (["group"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "class":
        atom = draw(_char_class())
    elif kind == "dot":
        atom = "."
    elif kind == "escape":
        atom = draw(st.sampled_from(_CLASS_ESCAPES))
    elif kind == "char":
        atom = _regex_char(draw(_ANY))
    else:
        options = [
            "".join(draw(st.lists(_regex_atom(depth + 1), min_size=1, max_size=2)))
            for _ in range(draw(st.integers(2, 3)))
        ]
        atom = "(?:" + "|".join(options) + ")"
    quantifier = draw(st.sampled_from(["", "", "", "?", "*", "+", "{2}", "{1,3}", "{0,2}"]))
    return atom + quantifier


@st.composite
def _regex(draw: st.DrawFn) -> str:
    body = "".join(draw(st.lists(_regex_atom(), min_size=0, max_size=2)))
    # One atom that always takes a character: an empty-matching terminal is refused by Lark.
    body += draw(st.sampled_from([_regex_char(draw(_ANY)), draw(_char_class()), "."]))
    flags = draw(st.sampled_from(["", "", "", "i", "s"]))
    return f"/{body}/{flags}"


@st.composite
def _lark_literal(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 4)) == 0:
        text = draw(st.text(_ASSIGNED, min_size=1, max_size=3))
        return lark_literal(text) + "i"
    text = draw(st.text(_ANY, min_size=1, max_size=3))
    if draw(st.booleans()):
        return lark_literal(text)
    # The same literal spelled with the escapes both engines read.
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else c for c in text) + '"'


@st.composite
def _lark_item(draw: st.DrawFn, rules: list[str], terminals_only: bool, depth: int = 0) -> str:
    kinds = ["literal", "literal", "regex"]
    if not terminals_only:
        kinds += ["rule", "rule"]
    if depth < 1:
        kinds.append("group")
    kind = draw(st.sampled_from(kinds))
    if kind == "literal":
        item = draw(_lark_literal())
    elif kind == "regex":
        item = draw(_regex())
    elif kind == "rule":
        item = draw(st.sampled_from(rules))
    else:
        options = [
            draw(_lark_sequence(rules, terminals_only, depth + 1))
            for _ in range(draw(st.integers(2, 3)))
        ]
        item = "(" + " | ".join(options) + ")"
    operator = draw(st.sampled_from(["", "", "", "?", "*", "+", " ~ 1..2"]))
    return item + operator


@st.composite
def _lark_sequence(draw: st.DrawFn, rules: list[str], terminals_only: bool, depth: int = 0) -> str:
    items = draw(st.lists(_lark_item(rules, terminals_only, depth), min_size=1, max_size=3))
    return " ".join(items)


def _rules(
    draw: st.DrawFn,
    names: list[str],
    sequence: Callable[..., st.SearchStrategy[str]],
    defines: str,
) -> list[str]:
    """One rule per name, in either syntax: a first alternative of terminals only (so every
    rule can end), then up to two that may reference the rules."""
    lines = []
    for name in names:
        alternatives = [draw(sequence(names, terminals_only=True))]
        for _ in range(draw(st.integers(0, 2))):
            alternatives.append(draw(sequence(names, terminals_only=False)))
        lines.append(f"{name}{defines}" + " | ".join(alternatives))
    return lines


@st.composite
def lark_grammars(draw: st.DrawFn) -> str:
    """A Lark grammar text: `start` and up to two more rules, and maybe an `%ignore`."""
    names = ["start", "r1", "r2"][: draw(st.integers(1, 3))]
    lines = _rules(draw, names, _lark_sequence, ": ")
    if draw(st.integers(0, 4)) == 0:
        lines += ["WS: /[ \\t]+/", "%ignore WS"]
    return "\n".join(lines) + "\n"


# --- GBNF ----------------------------------------------------------------------------------


def _gbnf_class_char(char: str) -> str:
    point = ord(char)
    if char in "]\\-^" or point < 0x20 or point == 0x7F:
        return f"\\x{point:02X}" if point < 0x100 else f"\\u{point:04X}"
    return char


@st.composite
def _gbnf_literal(draw: st.DrawFn) -> str:
    text = draw(st.text(_ANY, min_size=0 if draw(st.integers(0, 5)) == 0 else 1, max_size=3))
    if draw(st.booleans()):
        return gbnf_literal(text)
    # The escapes llama.cpp reads: \xHH, \uHHHH, \UHHHHHHHH.
    out = []
    for char in text:
        point = ord(char)
        out.append(f"\\x{point:02X}" if point < 0x100 else (
            f"\\u{point:04X}" if point <= 0xFFFF else f"\\U{point:08X}"
        ))  # fmt: skip
    return '"' + "".join(out) + '"'


@st.composite
def _gbnf_class(draw: st.DrawFn) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            low, high = sorted([ord(draw(_ANY)), ord(draw(_ANY))])
            items.append(f"{_gbnf_class_char(chr(low))}-{_gbnf_class_char(chr(high))}")
        else:
            items.append(_gbnf_class_char(draw(_ANY)))
    negated = "^" if draw(st.integers(0, 3)) == 0 else ""
    return f"[{negated}{''.join(items)}]"


@st.composite
def _gbnf_item(draw: st.DrawFn, rules: list[str], terminals_only: bool, depth: int = 0) -> str:
    kinds = ["literal", "literal", "class", "class", "dot"]
    if not terminals_only:
        kinds += ["rule", "rule"]
    if depth < 1:
        kinds.append("group")
    kind = draw(st.sampled_from(kinds))
    if kind == "literal":
        item = draw(_gbnf_literal())
        if item == '""':
            return item  # llama.cpp reads no item there: nothing to repeat
    elif kind == "class":
        item = draw(_gbnf_class())
    elif kind == "dot":
        item = "."
    elif kind == "rule":
        item = draw(st.sampled_from(rules))
    else:
        options = [
            draw(_gbnf_sequence(rules, terminals_only, depth + 1))
            for _ in range(draw(st.integers(2, 3)))
        ]
        item = "(" + " | ".join(options) + ")"
    operator = draw(st.sampled_from(["", "", "", "?", "*", "+", "{2}", "{1,3}", "{0,2}", "{1,}"]))
    return item + operator


@st.composite
def _gbnf_sequence(draw: st.DrawFn, rules: list[str], terminals_only: bool, depth: int = 0) -> str:
    return " ".join(
        draw(st.lists(_gbnf_item(rules, terminals_only, depth), min_size=1, max_size=3))
    )


@st.composite
def gbnf_grammars(draw: st.DrawFn) -> str:
    """A GBNF grammar text: `root` and up to two more rules."""
    names = ["root", "r-one", "r-two"][: draw(st.integers(1, 3))]
    lines = _rules(draw, names, _gbnf_sequence, " ::= ")
    return "\n".join(lines) + "\n"


# --- sentences -----------------------------------------------------------------------------


@st.composite
def near_misses(draw: st.DrawFn, sentence: str, alphabet: str) -> str:
    """`sentence` changed a little: a character deleted, inserted, replaced or doubled, two
    swapped, or the text cut short. Inserted characters come from `alphabet` (the grammar's
    own characters) or anywhere."""
    chars = st.sampled_from(alphabet) if alphabet else _ANY
    kind = draw(st.sampled_from(["delete", "insert", "replace", "double", "swap", "cut"]))
    if not sentence:
        return draw(chars)
    index = draw(st.integers(0, len(sentence) - 1))
    if kind == "delete":
        return sentence[:index] + sentence[index + 1 :]
    if kind == "insert":
        return sentence[:index] + draw(st.one_of(chars, _ANY)) + sentence[index:]
    if kind == "replace":
        return sentence[:index] + draw(st.one_of(chars, _ANY)) + sentence[index + 1 :]
    if kind == "double":
        return sentence[:index] + sentence[index] + sentence[index:]
    if kind == "swap" and index + 1 < len(sentence):
        return sentence[:index] + sentence[index + 1] + sentence[index] + sentence[index + 2 :]
    return sentence[:index]
