"""Unicode character sets asked of the engines themselves, and simple case folding.

Two readers of regular expressions matter for grammars: the `regex` module (which Lark
compiles terminals with) and the Rust `regex` crate (llguidance's). Both give `\\d`, `\\w`, `\\s`
their Unicode meaning (UTS #18), so the sets are taken from the `regex` module itself, once, by
matching every code point, and kept to the characters Python's own Unicode tables assign: each
engine ships its own Unicode version, and a character assigned since the oldest of them is read
differently by each (the client and the GBNF leave it out).

Case-insensitive matching (`"select"i`, `/[a-z]+/i`) is Unicode *simple* case folding, as the
Rust crate does it: two characters match when they fold to the same character (`k`, `K` and the
Kelvin sign; `ß` and `ẞ`; never `İ` and `i`, a Turkish-only fold). Python exposes full folding
(`str.casefold`), from which the simple fold is derived: a one-character full fold is the simple
one (status C), else a one-character lower case (status S, as `ẞ` -> `ß`), else the character
itself. The tables are Python's (`unicodedata.unidata_version`): a cased letter that a newer
Unicode added folds on llguidance only.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from bisect import bisect_right
from typing import Any

import regex

__all__ = ["case_fold", "engine_class", "python_class"]

MAX_CODE_POINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
# The highest code point with a case mapping in any Unicode version Python ships (U+1E943,
# ADLAM SMALL LETTER SHA, in Unicode 14): folding only looks below this bound.
_CASED_BOUND = 0x1F000

Ranges = tuple[tuple[int, int], ...]


@functools.cache
def _every_character() -> str:
    """Every code point but the surrogates, in order: one string the engines can scan."""
    return "".join(
        chr(point)
        for point in range(MAX_CODE_POINT + 1)
        if not _SURROGATES[0] <= point <= _SURROGATES[1]
    )


def _runs(engine: Any, escape: str) -> Ranges:
    """The code points a one-character pattern matches, as sorted ranges, found in one scan
    (a run may step over the surrogates, which the string lacks: callers normalize)."""
    text = _every_character()
    return tuple(
        (ord(text[match.start()]), ord(text[match.end() - 1]))
        for match in engine.finditer(f"(?:{escape})+", text)
    )


@functools.cache
def python_class(escape: str) -> Ranges:
    """The code points Python's `re` puts in `\\d`, `\\w` or `\\s` (Unicode semantics)."""
    return _runs(re, escape)


@functools.cache
def engine_class(escape: str) -> Ranges:
    """The code points the `regex` module (Lark's) puts in `\\d`, `\\w` or `\\s`: UTS #18, the
    meaning the Rust `regex` crate (llguidance's) gives them too, among assigned characters."""
    assigned = _assigned()
    out: list[tuple[int, int]] = []
    for lo, hi in _runs(regex, escape):
        start = bisect_right(assigned, (lo, MAX_CODE_POINT)) - 1
        for a_lo, a_hi in assigned[max(start, 0) :]:
            if a_lo > hi:
                break
            if a_hi >= lo:
                out.append((max(lo, a_lo), min(hi, a_hi)))
    return tuple(out)


@functools.cache
def _assigned() -> list[tuple[int, int]]:
    """The code points Python's Unicode tables assign (any category but Cn), as ranges."""
    out: list[tuple[int, int]] = []
    for char in _every_character():
        if unicodedata.category(char) == "Cn":
            continue
        point = ord(char)
        if out and out[-1][1] + 1 == point:
            out[-1] = (out[-1][0], point)
        else:
            out.append((point, point))
    return out


def _simple_fold(char: str) -> str:
    full = char.casefold()
    if len(full) == 1:
        return full
    lower = char.lower()
    return lower if len(lower) == 1 else char


@functools.cache
def _orbits() -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Sorted cased code points, and for each the code points it matches case-insensitively."""
    groups: dict[str, list[int]] = {}
    for point in range(_CASED_BOUND):
        if _SURROGATES[0] <= point <= _SURROGATES[1]:
            continue
        groups.setdefault(_simple_fold(chr(point)), []).append(point)
    orbit_of: dict[int, tuple[int, ...]] = {}
    for members in groups.values():
        if len(members) > 1:
            for point in members:
                orbit_of[point] = tuple(members)
    keys = tuple(sorted(orbit_of))
    return keys, tuple(orbit_of[key] for key in keys)


def case_fold(ranges: Ranges) -> list[tuple[int, int]]:
    """`ranges` plus every character that matches one of them case-insensitively."""
    keys, orbits = _orbits()
    out = list(ranges)
    for lo, hi in ranges:
        if lo >= _CASED_BOUND:
            break
        start = bisect_right(keys, lo - 1)
        for index in range(start, len(keys)):
            if keys[index] > hi:
                break
            out.extend((point, point) for point in orbits[index])
    return out
