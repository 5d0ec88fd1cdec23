"""A small regular-expression front end for the GBNF converters: `pattern` -> syntax tree.

Two dialects. A grammar terminal (`dialect="lark"`) is read the way Lark's `regex` module and
llguidance's Rust `regex` crate both read it (see `parse_pattern`). A JSON Schema `pattern`
(`dialect="json-schema"`, the default) is read as below.

JSON Schema says a `pattern` is an ECMA-262 regex; the SDK's parser checks it with two engines
(Python's `re` and the Rust `regex`-based `jsonschema-rs`). A grammar built from a pattern must
therefore never admit a string that either engine would reject. Where the dialects disagree,
this module takes the narrower meaning:

- `.` is any character except `\\n`, `\\r`, U+2028 and U+2029 (ECMA; Python only excludes `\\n`);
- `\\d`, `\\w`, `\\s` are the characters both dialects agree on (`[0-9]`, `[A-Za-z0-9_]`, the
  whitespace both call whitespace), and `\\D`, `\\W`, `\\S` are the characters neither calls a
  digit / word character / whitespace. A negated class such as `[^\\d]` is built from the wide
  meaning of its members, so that its complement stays narrow too.

Anything whose meaning is not plain "a set of strings" (backreferences, lookaround, word
boundaries, inline flags, possessive quantifiers) or that the dialects read differently (`{,n}`,
an empty class `[]`) raises `RegexUnsupported`, which the converter turns into an
`UnsupportedSchema` entry: a pattern is translated exactly or not at all.

The tree is deliberately tiny: character sets, sequences, alternations and bounded repetitions,
plus `^`/`$` anchors allowed only at the two ends of a top-level alternative.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from typing import Literal

import regex

from sdk._values.position import TextPosition
from sdk.schema._unicode import case_fold
from sdk.schema._unicode import engine_class
from sdk.schema._unicode import python_class

__all__ = [
    "INVALID_REGEX",
    "MAX_CODE_POINT",
    "MAX_NESTING",
    "Alt",
    "Branch",
    "CharSet",
    "Dialect",
    "Node",
    "RegexUnsupported",
    "Repeat",
    "Seq",
    "complement",
    "length_range",
    "longest_match",
    "normalize",
    "parse_pattern",
    "subtract",
    "union",
]

MAX_CODE_POINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)

# A set of code points as sorted, disjoint, non-adjacent inclusive ranges.
Ranges = tuple[tuple[int, int], ...]


INVALID_REGEX = "invalid regular expression"
"""How a `RegexUnsupported` for a pattern that does not compile at all begins."""


class RegexUnsupported(ValueError):
    """The pattern uses a feature the converter cannot express exactly (or is invalid);
    `.construct` names it and `.position` says where, when the pattern's reader found it."""

    def __init__(self, message: str, *, construct: str | None = None,
                 position: TextPosition | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.construct = construct if construct is not None else message
        self.position = position


@dataclass(frozen=True, slots=True)
class CharSet:
    """Exactly one character from `ranges` (never a surrogate: UTF-8 cannot carry one)."""

    ranges: Ranges


@dataclass(frozen=True, slots=True)
class Seq:
    """The items one after another (empty: the empty string)."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Alt:
    """Any one of the options."""

    options: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    """`node` between `lo` and `hi` times (`hi` None: unbounded)."""

    node: Node
    lo: int
    hi: int | None


Node = CharSet | Seq | Alt | Repeat


@dataclass(frozen=True, slots=True)
class Branch:
    """One top-level alternative and whether it is anchored at the start (`^`) / end (`$`)."""

    node: Node
    anchored_start: bool
    anchored_end: bool


# --- character-set algebra ----------------------------------------------------------------


def normalize(ranges: list[tuple[int, int]] | Ranges) -> Ranges:
    """Sort and merge ranges; drop the surrogate block."""
    cleaned: list[tuple[int, int]] = []
    first, last = _SURROGATES
    for lo, hi in ranges:
        # Surrogates cannot appear in UTF-8 text, so no set ever contains them.
        if hi < first or lo > last:
            cleaned.append((lo, hi))
            continue
        if lo < first:
            cleaned.append((lo, first - 1))
        if hi > last:
            cleaned.append((last + 1, hi))
    cleaned.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in cleaned:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def union(*sets: Ranges) -> Ranges:
    """All code points in any of the sets."""
    return normalize([r for s in sets for r in s])


def complement(ranges: Ranges) -> Ranges:
    """All (non-surrogate) code points not in `ranges`."""
    out: list[tuple[int, int]] = []
    next_lo = 0
    for lo, hi in normalize(ranges):
        if lo > next_lo:
            out.append((next_lo, lo - 1))
        next_lo = hi + 1
    if next_lo <= MAX_CODE_POINT:
        out.append((next_lo, MAX_CODE_POINT))
    return normalize(out)


def subtract(ranges: Ranges, removed: Ranges) -> Ranges:
    """Code points in `ranges` and not in `removed`."""
    return complement(union(complement(ranges), removed))


def _chars(*points: int | tuple[int, int]) -> Ranges:
    return normalize([(p, p) if isinstance(p, int) else p for p in points])


# ECMA-262 WhiteSpace and LineTerminator code points (what `\s` means there).
_ECMA_SPACE = _chars(
    (0x09, 0x0D), 0x20, 0xA0, 0x1680, (0x2000, 0x200A), 0x2028, 0x2029, 0x202F, 0x205F,
    0x3000, 0xFEFF,
)  # fmt: skip
_ASCII_DIGIT = _chars((0x30, 0x39))
_ASCII_WORD = _chars((0x30, 0x39), (0x41, 0x5A), 0x5F, (0x61, 0x7A))
# `.`: ECMA excludes every line terminator, Python only `\n`; take the narrower.
_DOT = complement(_chars(0x0A, 0x0D, 0x2028, 0x2029))
# In a grammar terminal (Lark, llguidance) `.` is anything but `\n`, or anything with `s`.
_LARK_DOT = complement(_chars(0x0A))
_ANY = complement(())


def _class_escape(letter: str, *, wide: bool) -> Ranges:
    """`\\d`-style escapes: the narrow (both dialects agree) or wide (either dialect) meaning."""
    lower = letter.lower()
    if lower == "d":
        narrow, broad = _ASCII_DIGIT, normalize(python_class(r"\d"))
    elif lower == "w":
        narrow, broad = _ASCII_WORD, normalize(python_class(r"\w"))
    else:
        python_space = normalize(python_class(r"\s"))
        narrow = subtract(_ECMA_SPACE, complement(python_space))
        broad = union(_ECMA_SPACE, python_space)
    if letter.islower():
        return broad if wide else narrow
    # Upper case is the complement; its narrow meaning is the complement of the wide one.
    return complement(narrow) if wide else complement(broad)


def _engine_escape(letter: str) -> Ranges:
    """`\\d`-style escapes in a grammar terminal: the one Unicode meaning both engines use."""
    ranges = normalize(engine_class("\\" + letter.lower()))
    return ranges if letter.islower() else complement(ranges)


# Single-character escapes that mean the same in ECMA and Python.
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_UNSUPPORTED_ESCAPES = {
    "b": "word boundary \\b",
    "B": "non-boundary \\B",
    "A": "\\A anchor (Python only)",
    "Z": "\\Z anchor (Python only)",
    "z": "\\z anchor",
    "G": "\\G anchor",
    "k": "named backreference \\k",
    "p": "Unicode property \\p",
    "P": "Unicode property \\P",
    "c": "control escape \\c",
    "N": "named character \\N",
}
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")
# Flags a grammar terminal may carry (Lark's `/.../flags`, an inline `(?flags:...)` group):
# `i` (case-insensitive), `s` (`.` takes `\n`), `m` and `u` (no effect without anchors, and
# Unicode is the default). `x` (verbose) and `l` (locale) are read differently by the engines.
_LARK_FLAGS = frozenset("ismu")
MAX_NESTING = 64
"""Groups nested deeper than this are refused (the parser and its callers recurse on them)."""

Dialect = Literal["json-schema", "lark"]


# --- parser --------------------------------------------------------------------------------


def parse_pattern(
    pattern: str, *, dialect: Dialect = "json-schema", flags: str = ""
) -> list[Branch]:
    """Parse a regex into top-level branches (one per `|` at the top).

    `dialect="json-schema"` reads a JSON Schema `pattern` with the narrow meanings above.
    `dialect="lark"` reads a grammar terminal as the `regex` module (Lark) and the Rust `regex`
    crate (llguidance) both do: `.` is anything but `\\n`, `\\d`/`\\w`/`\\s` are Unicode, `flags`
    (`i`, `s`, `m`, `u`) apply, and what the two read differently is refused: anchors, lazy
    quantifiers, `\\0`, `\\b` in a class, an unescaped `[`, `{` or class operator (`&&`, `--`,
    `~~`) where the Rust crate would read syntax.
    """
    if dialect == "lark":
        unknown = set(flags) - _LARK_FLAGS
        if unknown:
            raise RegexUnsupported(f"regex flag {''.join(sorted(unknown))}")
    try:
        if dialect == "lark":
            regex.compile(pattern)
        else:
            re.compile(pattern)
    except (re.error, regex.error) as error:
        raise _invalid(pattern, error) from None
    except RecursionError:
        raise RegexUnsupported(f"groups nested more than {MAX_NESTING} deep") from None
    return _Parser(pattern, dialect, flags).parse()


def _invalid(pattern: str, error: re.error | regex.error) -> RegexUnsupported:
    """A pattern that does not compile, at the place the compiler stopped (in characters)."""
    stopped = getattr(error, "pos", None)
    if not isinstance(stopped, int):
        return RegexUnsupported(f"{INVALID_REGEX}: {error}")
    where = TextPosition.of(pattern, stopped)
    problem = str(getattr(error, "msg", error))
    return RegexUnsupported(f"{INVALID_REGEX}: {problem} at {where.by_index('offset')} of "
                            f"{pattern!r}",
                            construct=INVALID_REGEX, position=where)  # fmt: skip


class _Parser:
    """Recursive descent over the pattern text; `self.pos` is the next character to read.

    `self.flags` holds the flags in force (a scoped `(?i:...)` group adds to them)."""

    def __init__(self, pattern: str, dialect: Dialect, flags: str) -> None:
        self.text = pattern
        self.pos = 0
        self.lark = dialect == "lark"
        self.flags = frozenset(flags)
        self.depth = 0

    def fail(self, what: str) -> RegexUnsupported:
        where = TextPosition.of(self.text, self.pos)
        return RegexUnsupported(f"{what} at {where.by_index('offset')} of {self.text!r}",
                                construct=what,
                                position=where)  # fmt: skip

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def eat(self, token: str) -> bool:
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def chars(self, ranges: Ranges) -> CharSet:
        """A set as read under the flags in force (folded for `i`)."""
        if not ranges:
            raise self.fail("a surrogate code point (never in UTF-8 text)")
        if "i" in self.flags:
            ranges = normalize(case_fold(ranges))
        return CharSet(ranges)

    def parse(self) -> list[Branch]:
        branches: list[Branch] = []
        while True:
            start = self.eat("^")
            if start and self.lark:
                raise self.fail("an anchor (^) inside a terminal")
            node, end = self.sequence(top=True)
            branches.append(Branch(node, start, end))
            if not self.eat("|"):
                break
        if self.pos != len(self.text):
            raise self.fail("unbalanced ')'")
        return branches

    def alternation(self) -> Node:
        options = [self.sequence(top=False)[0]]
        while self.eat("|"):
            options.append(self.sequence(top=False)[0])
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self, *, top: bool) -> tuple[Node, bool]:
        """Items up to `|`, `)` or the end; returns whether a final `$` anchored it."""
        items: list[Node] = []
        while self.peek() and self.peek() not in "|)":
            char = self.peek()
            if self.lark and char in "^$":
                raise self.fail(f"an anchor ({char}) inside a terminal")
            if char == "$":
                following = self.peek(1)
                if top and following in ("", "|") and not self.lark:
                    self.pos += 1
                    return _seq(items), True
                raise self.fail("'$' anchor anywhere but at the end of the pattern")
            if char == "^":
                raise self.fail("'^' anchor anywhere but at the start of the pattern")
            items.append(self.quantified(self.atom()))
        return _seq(items), False

    def atom(self) -> Node:
        char = self.peek()
        if char == "(":
            return self.group()
        if char == "[":
            return self.char_class()
        if char == ".":
            self.pos += 1
            if not self.lark:
                return CharSet(_DOT)
            return CharSet(_ANY if "s" in self.flags else _LARK_DOT)
        if char == "\\":
            return self.chars(self.escape(in_class=False, wide=False))
        if char in "*+?":
            raise self.fail("nothing to repeat")
        if char == "{" and _QUANTIFIER.match(self.text, self.pos):
            raise self.fail("nothing to repeat")
        if self.lark and char in "{}":
            raise self.fail(f"an unescaped {char!r} (the Rust regex crate reads a repetition)")
        self.pos += 1
        return self.chars(_chars(ord(char)))

    def group(self) -> Node:
        self.pos += 1  # "("
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(f"groups nested more than {MAX_NESTING} deep")
        outer = self.flags
        if self.eat("?"):
            self.group_kind()
        node = self.alternation()
        if not self.eat(")"):
            raise self.fail("missing ')'")
        self.flags = outer
        self.depth -= 1
        return node

    def group_kind(self) -> None:
        """After `(?`: a non-capturing, named or (in a terminal) scoped-flag group."""
        if self.eat(":"):
            return
        if (self.peek() == "P" and self.peek(1) == "<") or (
            self.peek() == "<" and self.peek(1) not in "=!"
        ):
            # A named group: the name changes nothing about the language.
            end = self.text.find(">", self.pos)
            if end < 0:
                raise self.fail("unterminated group name")
            self.pos = end + 1
            return
        if self.peek() in "=!" or self.text.startswith(("<=", "<!"), self.pos):
            raise self.fail("lookaround assertion")
        scoped = re.compile(r"([a-zA-Z]+):").match(self.text, self.pos)
        if self.lark and scoped is not None:
            letters = scoped.group(1)
            if set(letters) - _LARK_FLAGS:
                raise self.fail(f"regex flag {letters}")
            self.flags = self.flags | set(letters)
            self.pos = scoped.end()
            return
        raise self.fail("inline flag or extension group '(?'")

    def quantified(self, node: Node) -> Node:
        char = self.peek()
        lo: int
        hi: int | None
        if char == "*":
            lo, hi, self.pos = 0, None, self.pos + 1
        elif char == "+":
            lo, hi, self.pos = 1, None, self.pos + 1
        elif char == "?":
            lo, hi, self.pos = 0, 1, self.pos + 1
        elif char == "{" and (match := _QUANTIFIER.match(self.text, self.pos)):
            lo = int(match.group(1))
            if match.group(2) is None:  # {n}
                hi = lo
            elif match.group(3):  # {n,m}
                hi = int(match.group(3))
            else:  # {n,}
                hi = None
            if hi is not None and hi < lo:
                raise self.fail("quantifier range out of order")
            self.pos = match.end()
        else:
            if char == "{" and self.text.startswith("{,", self.pos):
                # Python reads `{,n}` as `{0,n}`, ECMA as the literal text.
                raise self.fail("'{,n}' quantifier (read differently by ECMA and Python)")
            return node
        if self.eat("+"):
            raise self.fail("possessive quantifier")
        if self.eat("?") and self.lark:
            # llguidance reads a whole lexeme as lazy or greedy, never one quantifier.
            raise self.fail("lazy quantifier")
        if self.peek() in ("*", "+", "?") or (
            self.peek() == "{" and _QUANTIFIER.match(self.text, self.pos)
        ):
            raise self.fail("multiple repeat")
        return Repeat(node, lo, hi)

    def escape(self, *, in_class: bool, wide: bool) -> Ranges:
        """One backslash escape; `wide` picks the meaning used inside a negated class."""
        self.pos += 1  # "\\"
        char = self.peek()
        if not char:
            raise self.fail("trailing backslash")
        self.pos += 1
        if char in "dDwWsS":
            return _engine_escape(char) if self.lark else _class_escape(char, wide=wide)
        if char in _CONTROL_ESCAPES:
            return _chars(_CONTROL_ESCAPES[char])
        if char == "b" and in_class and not self.lark:
            return _chars(0x08)  # backspace, inside a class, in both dialects
        if char == "0" and not self.peek().isdigit() and not self.lark:
            return _chars(0)
        if char in "xuU" and (char != "U" or self.lark):
            return self.hex_escape(char)
        if char in _UNSUPPORTED_ESCAPES:
            raise self.fail(_UNSUPPORTED_ESCAPES[char])
        if char.isdigit():
            raise self.fail("backreference")
        if char.isalnum():
            raise self.fail(f"unknown escape \\{char}")
        return _chars(ord(char))  # an escaped punctuation character stands for itself

    def hex_escape(self, letter: str) -> Ranges:
        width = {"x": 2, "u": 4, "U": 8}[letter]
        digits = self.text[self.pos : self.pos + width]
        if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise self.fail(f"malformed \\{letter} escape")
        self.pos += width
        point = int(digits, 16)
        if point > MAX_CODE_POINT:
            raise self.fail(f"\\{letter}{digits} is not a character")
        return _chars(point)

    def char_class(self) -> Node:
        start = self.pos
        self.pos += 1  # "["
        negated = self.eat("^")
        if self.peek() == "]":
            # ECMA: `[]` is the empty class; Python: `]` first is a literal.
            raise self.fail("']' first in a character class (read differently by dialects)")
        members: list[Ranges] = []
        while True:
            char = self.peek()
            if not char:
                self.pos = start
                raise self.fail("unterminated character class")
            if char == "]":
                self.pos += 1
                break
            if self.lark and (char == "[" or self.text.startswith(("&&", "--", "~~"), self.pos)):
                # The Rust regex crate reads a nested class or a set operation here.
                raise self.fail(f"an unescaped {char!r} in a class (escape it with a backslash)")
            low = self.class_atom(wide=negated)
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high = self.class_atom(wide=negated)
                if (
                    len(low) != 1
                    or len(high) != 1
                    or low[0][0] != low[0][1]
                    or (high[0][0] != high[0][1])
                ):
                    raise self.fail("range with a class escape as an end")
                if low[0][0] > high[0][0]:
                    raise self.fail("character range out of order")
                members.append(normalize([(low[0][0], high[0][0])]))
            else:
                members.append(low)
        chosen = union(*members)
        if "i" in self.flags:
            # Folded before negation, as both engines do: `[^a]` with `i` takes neither a nor A.
            chosen = normalize(case_fold(chosen))
        result = complement(chosen) if negated else chosen
        if not result:
            raise self.fail("character class that matches no character")
        return CharSet(result)

    def class_atom(self, *, wide: bool) -> Ranges:
        if self.peek() == "\\":
            ranges = self.escape(in_class=True, wide=wide)
            if not ranges:
                raise self.fail("a surrogate code point (never in UTF-8 text)")
            return ranges
        char = self.peek()
        self.pos += 1
        return _chars(ord(char))


def _seq(items: list[Node]) -> Node:
    return items[0] if len(items) == 1 else Seq(tuple(items))


# --- analysis ------------------------------------------------------------------------------


def longest_match(pattern: str, max_length: Any) -> int | None:
    """The longest string `pattern` (a JSON Schema pattern, which searches: an end not anchored
    takes any text) or `maxLength` allows, if either bounds it."""
    bounds = [max_length] if isinstance(max_length, int) else []
    try:
        branches = parse_pattern(pattern)
    except RegexUnsupported:
        branches = []
    if branches and all(b.anchored_start and b.anchored_end for b in branches):
        highs = [length_range(branch.node)[1] for branch in branches]
        if all(high is not None for high in highs):
            bounds.append(max(high for high in highs if high is not None))
    return min(bounds) if bounds else None


def length_range(node: Node) -> tuple[int, int | None]:
    """The fewest and most characters a match of `node` can have (None: unbounded)."""
    if isinstance(node, CharSet):
        return 1, 1
    if isinstance(node, Seq):
        lo, hi = 0, 0
        bounded = True
        for item in node.items:
            item_lo, item_hi = length_range(item)
            lo += item_lo
            if item_hi is None:
                bounded = False
            else:
                hi += item_hi
        return lo, hi if bounded else None
    if isinstance(node, Alt):
        ranges = [length_range(option) for option in node.options]
        highs = [h for _, h in ranges]
        return min(lo for lo, _ in ranges), None if None in highs else max(
            h for h in highs if h is not None
        )
    item_lo, item_hi = length_range(node.node)
    if node.hi is None:
        return item_lo * node.lo, None if item_hi != 0 else 0
    return item_lo * node.lo, None if item_hi is None else item_hi * node.hi
