"""GBNF (llama.cpp's grammar syntax) -> Lark, keeping the language exactly.

GBNF has no lexer: it is a plain context-free grammar over characters. Lark's readers (the
client's recognizer and llguidance) split text into terminals greedily, so turning a run of GBNF
character classes into one regex terminal can change the language (`[a-z]+ "x"` accepts `abx`
in GBNF; a greedy `/[a-z]+/` would eat the `x`), and so can a literal (`"ab" "c" | "a" "bd"`:
the lexeme is `ab` whenever it can be). This converter therefore writes every character class,
and every character of a literal, as a one-character terminal: a lexeme is then always one
character, greedy splitting and plain CFG derivation agree, and the Lark grammar has exactly
the GBNF grammar's language. (For speed under llguidance, a grammar written in Lark with regex
terminals is better.) Literals are written by `lark_literal`, which Lark and llguidance read
alike, astral characters included.

Supported: rules `name ::= ...` (names of letters, digits and `-`; `root` is the start),
alternatives, grouping, literals with `\\x`, `\\u`, `\\U`, `\\t`, `\\n`, `\\r`, `\\\\`, `\\"`
escapes, character classes (negated, ranges, the same escapes), `.`, `*`, `+`, `?`, `{m}`,
`{m,}`, `{m,n}`, `#` comments. Anything else (token references such as `<[1234]>`, an
undefined rule) raises `UnconvertibleGrammar` / `InvalidGrammar` naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sdk._values.position import TextPosition
from sdk.grammar._compiled import lark_literal
from sdk.grammar._errors import InvalidGrammar
from sdk.grammar._errors import UnconvertibleGrammar
from sdk.schema import _regex as rx
from sdk.schema.gbnf._gbnf_text import char_class as gbnf_char_class

__all__ = ["gbnf_for_llamacpp", "gbnf_to_lark"]

_NAME = re.compile(r"[A-Za-z0-9-]+")
_MAX_NESTING = 64
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX_WIDTH = {"x": 2, "u": 4, "U": 8}
_MAX_CODE_POINT = 0x10FFFF


@dataclass
class _Reader:
    text: str
    pos: int = 0
    line: int = 1

    def where(self) -> str:
        return str(TextPosition.of(self.text, self.pos))

    def fail(self, what: str) -> InvalidGrammar:
        return InvalidGrammar(f"GBNF: {what} at {self.where()}")

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def skip_space(self, *, newlines: bool) -> None:
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            elif char in " \t" or (newlines and char in "\r\n"):
                self.pos += 1
            else:
                return

    def name(self) -> str:
        match = _NAME.match(self.text, self.pos)
        if not match:
            raise self.fail("expected a rule name")
        self.pos = match.end()
        return match.group()


@dataclass(frozen=True)
class _Expr:
    """What the checks need of a GBNF item: whether it can match nothing, and which rules it
    can begin with (`refs`, each with whether what comes before it in the item can be empty)."""

    kind: str  # "text" (a literal or class), "empty" (""), "ref", "group", "repeat"
    name: str = ""
    options: tuple[tuple[_Expr, ...], ...] = ()
    low: int = 1
    high: int | None = 1


class _Converter:
    def __init__(self, text: str) -> None:
        self.reader = _Reader(text)
        self.defined: dict[str, str] = {}  # GBNF name -> Lark expansion text
        self.trees: dict[str, tuple[tuple[_Expr, ...], ...]] = {}  # GBNF name -> alternatives
        self.referenced: dict[str, str] = {}  # GBNF name -> where first referenced
        self.lark_names: dict[str, str] = {}
        self.depth = 0
        self.rewrites: list[tuple[int, int, str]] = []  # (start, end, GBNF) of class to resend

    def lark_name(self, name: str) -> str:
        known = self.lark_names.get(name)
        if known is not None:
            return known
        if name == "root":
            candidate = "start"
        else:
            candidate = re.sub(r"[^a-z0-9_]", "_", name.lower())
            if not candidate[0].isalpha():
                candidate = "r_" + candidate
        taken = set(self.lark_names.values()) | {"start"}
        base, number = candidate, 2
        while candidate in taken and name != "root":
            candidate = f"{base}_{number}"
            number += 1
        self.lark_names[name] = candidate
        return candidate

    def convert(self) -> str:
        reader = self.reader
        self.lark_name("root")
        reader.skip_space(newlines=True)
        while reader.pos < len(reader.text):
            name = reader.name()
            reader.skip_space(newlines=False)
            if not reader.text.startswith("::=", reader.pos):
                raise reader.fail(f"expected '::=' after rule name {name!r}")
            reader.pos += 3
            reader.skip_space(newlines=True)
            if name in self.defined:
                raise reader.fail(f"rule {name!r} defined twice")
            self.defined[name], self.trees[name] = self.alternatives(nested=False)
            reader.skip_space(newlines=True)
        if "root" not in self.defined:
            raise InvalidGrammar("GBNF: no `root` rule (the start of a GBNF grammar)")
        for name, where in self.referenced.items():
            if name not in self.defined:
                raise InvalidGrammar(f"GBNF: rule {name!r} is used at {where} but not defined")
        _check_runnable(self.trees)
        lines = [f"{self.lark_name(name)}: {body}" for name, body in self.defined.items()]
        root = lines.pop(list(self.defined).index("root"))
        return "\n".join([root, *lines]) + "\n"

    def alternatives(self, *, nested: bool) -> tuple[str, tuple[tuple[_Expr, ...], ...]]:
        reader = self.reader
        options = [self.sequence(nested=nested)]
        while reader.peek() == "|":
            reader.pos += 1
            reader.skip_space(newlines=True)
            options.append(self.sequence(nested=nested))
        return " | ".join(text for text, _ in options), tuple(tree for _, tree in options)

    def sequence(self, *, nested: bool) -> tuple[str, tuple[_Expr, ...]]:
        reader = self.reader
        items: list[str] = []
        trees: list[_Expr] = []
        while True:
            reader.skip_space(newlines=nested)
            char = reader.peek()
            if char in ("", "|", ")") or (char in "\r\n" and not nested):
                break
            item, tree = self.item()
            text, tree = self.quantified(item, tree)
            items.append(text)
            trees.append(tree)
        # An empty alternative is written as an empty group, which Lark reads as "nothing".
        return (" ".join(items) if items else "()"), tuple(trees)

    def item(self) -> tuple[str, _Expr]:
        reader = self.reader
        char = reader.peek()
        if char == '"':
            text = self.literal()
            return text, _Expr("empty" if text == "()" else "text")
        if char == "[":
            return self.char_class(), _Expr("text")
        if char == ".":
            reader.pos += 1
            return r"/[^\n]|\n/", _Expr("text")
        if char == "(":
            reader.pos += 1
            self.depth += 1
            if self.depth > _MAX_NESTING:
                raise reader.fail(f"groups nested more than {_MAX_NESTING} deep")
            reader.skip_space(newlines=True)
            inner, options = self.alternatives(nested=True)
            self.depth -= 1
            reader.skip_space(newlines=True)
            if reader.peek() != ")":
                raise reader.fail("expected ')'")
            reader.pos += 1
            return f"({inner})", _Expr("group", options=options)
        if char == "<" or char == "!":
            raise UnconvertibleGrammar(
                f"GBNF: token reference at {reader.where()} has no Lark equivalent here "
                "(grammars describe text, not token ids)",
                construct="token reference",
            )
        if _NAME.match(char):
            where = reader.where()
            name = reader.name()
            self.referenced.setdefault(name, where)
            return self.lark_name(name), _Expr("ref", name=name)
        raise reader.fail(f"unexpected {char!r}")

    def quantified(self, item: str, tree: _Expr) -> tuple[str, _Expr]:
        reader = self.reader
        char = reader.peek()
        if char not in "*+?{" or not char:
            return item, tree
        if tree.kind == "empty":
            # llama.cpp reads `""` as no item at all, so an operator after it has nothing to repeat.
            raise reader.fail('a repetition of the empty literal "" (llama.cpp refuses it)')
        if char in "*+?":
            reader.pos += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
            return f"{item}{char}", _Expr("repeat", options=((tree,),), low=low, high=high)
        match = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(reader.text, reader.pos)
        if not match:
            raise reader.fail("malformed repetition {m,n}")
        reader.pos = match.end()
        low = int(match.group(1))
        if match.group(2) is None:
            text = f"({item}) ~ {low}" if low else "()"
            return text, _Expr("repeat", options=((tree,),), low=low, high=low)
        if not match.group(3):
            text = f"({item})*" if low == 0 else f"(({item}) ~ {low} ({item})*)"
            return text, _Expr("repeat", options=((tree,),), low=low, high=None)
        high = int(match.group(3))
        if high < low:
            raise reader.fail(f"repetition {{{low},{high}}} has its bounds reversed")
        if high == 0:
            return "()", _Expr("empty")
        text = f"({item}) ~ {low}..{high}" if low else f"[({item}) ~ 1..{high}]"
        return text, _Expr("repeat", options=((tree,),), low=low, high=high)

    def literal(self) -> str:
        reader = self.reader
        reader.pos += 1
        chars: list[str] = []
        while True:
            char = reader.peek()
            if char == "":
                raise reader.fail("unterminated string literal")
            if char in "\r\n":
                raise reader.fail("newline inside a string literal")
            if char == '"':
                reader.pos += 1
                break
            chars.append(self.char())
        # An empty literal matches the empty string; Lark has no empty terminal.
        if not chars:
            return "()"
        written = [lark_literal(char) for char in chars]
        return written[0] if len(written) == 1 else "(" + " ".join(written) + ")"

    def char(self) -> str:
        reader = self.reader
        char = reader.peek()
        reader.pos += 1
        if char != "\\":
            return char
        escape = reader.peek()
        reader.pos += 1
        if escape in _ESCAPES:
            return _ESCAPES[escape]
        width = _HEX_WIDTH.get(escape)
        if width is None:
            raise reader.fail(f"unknown escape \\{escape}")
        digits = reader.text[reader.pos : reader.pos + width]
        if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise reader.fail(f"malformed \\{escape} escape")
        reader.pos += width
        point = int(digits, 16)
        if point > _MAX_CODE_POINT or 0xD800 <= point <= 0xDFFF:
            raise reader.fail(f"\\{escape}{digits} is not a character")
        return chr(point)

    def char_class(self) -> str:
        reader = self.reader
        start = reader.pos
        reader.pos += 1
        negated = reader.peek() == "^"
        if negated:
            reader.pos += 1
        parts: list[str] = []
        points: list[tuple[int, int]] = []
        while True:
            char = reader.peek()
            if char == "":
                raise reader.fail("unterminated character class")
            if char == "]":
                reader.pos += 1
                break
            low = self.char()
            if reader.peek() == "-" and reader.peek(1) not in ("]", ""):
                reader.pos += 1
                high = self.char()
                if ord(high) < ord(low):
                    raise reader.fail("character range out of order")
                parts.append(f"{_class_char(low)}-{_class_char(high)}")
                points.append((ord(low), ord(high)))
            else:
                parts.append(_class_char(low))
                points.append((ord(low), ord(low)))
        if not parts:
            raise reader.fail("empty character class")
        excluded = rx.normalize(points)
        if negated and excluded and excluded[-1][1] >= 0x80:
            # llama.cpp refuses a character that shares its first UTF-8 byte with a non-ASCII
            # exclusion of a negated class: the class is sent written as the ranges around it.
            self.rewrites.append((start, reader.pos, gbnf_char_class(rx.complement(excluded))))
        return "/[" + ("^" if negated else "") + "".join(parts) + "]/"


def _class_char(char: str) -> str:
    """A character inside a regex class, read alike by Lark (which evaluates `\\xHH` escapes
    to raw characters before compiling the regex) and by llguidance (which does not).

    So the characters special in a class are escaped with a backslash, never as `\\x5c` and
    the like: Lark would turn `\\x5d` into a raw `]` and end the class early. `&` and `~` too:
    doubled, the Rust regex crate reads them as set operations.
    """
    point = ord(char)
    if char in "\\]/-^[&~":
        return "\\" + char
    if point < 0x20 or point == 0x7F:
        return f"\\x{point:02x}"
    return char


def gbnf_to_lark(gbnf: str) -> str:
    """The Lark grammar with exactly the language of a GBNF grammar (`root` becomes `start`)."""
    return _Converter(gbnf).convert()


def gbnf_for_llamacpp(gbnf: str) -> str:
    """The GBNF to send for a grammar written in GBNF: as written, but for each negated class
    that leaves out a non-ASCII character, written instead as the ranges it keeps (llama.cpp
    rejects a token ending partway through a character whose first byte is shared with such
    an exclusion, so `[^é]` would refuse text it admits)."""
    converter = _Converter(gbnf)
    converter.convert()
    out, last = [], 0
    for start, end, replacement in converter.rewrites:
        out += [gbnf[last:start], replacement]
        last = end
    return "".join(out) + gbnf[last:]


# --- what llama.cpp's grammar parser refuses, or loops on ----------------------------------

Trees = dict[str, tuple[tuple[_Expr, ...], ...]]


def _check_runnable(trees: Trees) -> None:
    """Refuse what llama.cpp cannot run: left recursion (direct, indirect, or behind items that
    can match nothing, on which llama.cpp's server can hang), and an unbounded repetition of
    something that can match nothing."""
    nullable = _nullable_rules(trees)
    corners: dict[str, set[str]] = {}
    for name, options in trees.items():
        found: set[str] = set()
        for option in options:
            found |= _corners(option, nullable)
            for item in option:
                _check_repeats(item, nullable, name)
        corners[name] = found
    for name in trees:
        path = _path(corners, name, name)
        if path:
            shown = " -> ".join([name, *path])
            raise UnconvertibleGrammar(
                f"GBNF: left recursion ({shown}): llama.cpp cannot run it; rewrite it with "
                "`*`/`+` or put a character first",
                construct=f"left recursion {shown}",
            )


def _nullable_rules(trees: Trees) -> set[str]:
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, options in trees.items():
            if name not in nullable and any(_all_nullable(o, nullable) for o in options):
                nullable.add(name)
                changed = True
    return nullable


def _all_nullable(items: tuple[_Expr, ...], nullable: set[str]) -> bool:
    return all(_can_be_empty(item, nullable) for item in items)


def _can_be_empty(item: _Expr, nullable: set[str]) -> bool:
    if item.kind == "empty":
        return True
    if item.kind == "text":
        return False
    if item.kind == "ref":
        return item.name in nullable
    if item.kind == "repeat" and item.low == 0:
        return True
    return any(_all_nullable(option, nullable) for option in item.options)


def _corners(items: tuple[_Expr, ...], nullable: set[str]) -> set[str]:
    """The rules a sequence can begin with (through items that can match nothing)."""
    found: set[str] = set()
    for item in items:
        if item.kind == "ref":
            found.add(item.name)
        for option in item.options:
            found |= _corners(option, nullable)
        if not _can_be_empty(item, nullable):
            break
    return found


def _check_repeats(item: _Expr, nullable: set[str], rule: str) -> None:
    if item.kind == "repeat" and item.high is None and _all_nullable(item.options[0], nullable):
        raise UnconvertibleGrammar(
            f"GBNF: rule {rule} repeats without bound something that can match nothing, "
            "which llama.cpp refuses",
            construct="repetition of something that can be empty",
        )
    for option in item.options:
        for inner in option:
            _check_repeats(inner, nullable, rule)


def _path(edges: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """A path of one or more edges from `start` to `goal`, or [] (breadth first)."""
    queue: list[tuple[str, list[str]]] = [(start, [])]
    seen: set[str] = set()
    while queue:
        node, path = queue.pop(0)
        for nxt in sorted(edges.get(node, ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, [*path, nxt]))
    return []
