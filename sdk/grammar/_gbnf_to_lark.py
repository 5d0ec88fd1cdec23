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

from sdk.grammar._compiled import lark_literal
from sdk.grammar._errors import InvalidGrammar, UnconvertibleGrammar

__all__ = ["gbnf_to_lark"]

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
        line = self.text.count("\n", 0, self.pos) + 1
        column = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        return f"line {line} column {column}"

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


class _Converter:
    def __init__(self, text: str) -> None:
        self.reader = _Reader(text)
        self.defined: dict[str, str] = {}  # GBNF name -> Lark expansion text
        self.referenced: dict[str, str] = {}  # GBNF name -> where first referenced
        self.lark_names: dict[str, str] = {}
        self.depth = 0

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
            self.defined[name] = self.alternatives(nested=False)
            reader.skip_space(newlines=True)
        if "root" not in self.defined:
            raise InvalidGrammar("GBNF: no `root` rule (the start of a GBNF grammar)")
        for name, where in self.referenced.items():
            if name not in self.defined:
                raise InvalidGrammar(f"GBNF: rule {name!r} is used at {where} but not defined")
        lines = [f"{self.lark_name(name)}: {body}" for name, body in self.defined.items()]
        root = lines.pop(list(self.defined).index("root"))
        return "\n".join([root, *lines]) + "\n"

    def alternatives(self, *, nested: bool) -> str:
        reader = self.reader
        options = [self.sequence(nested=nested)]
        while reader.peek() == "|":
            reader.pos += 1
            reader.skip_space(newlines=True)
            options.append(self.sequence(nested=nested))
        return " | ".join(options)

    def sequence(self, *, nested: bool) -> str:
        reader = self.reader
        items: list[str] = []
        while True:
            reader.skip_space(newlines=nested)
            char = reader.peek()
            if char in ("", "|", ")") or (char in "\r\n" and not nested):
                break
            item = self.item()
            if item is not None:
                items.append(self.quantified(item))
        # An empty alternative is written as an empty group, which Lark reads as "nothing".
        return " ".join(items) if items else "()"

    def item(self) -> str | None:
        reader = self.reader
        char = reader.peek()
        if char == '"':
            return self.literal()
        if char == "[":
            return self.char_class()
        if char == ".":
            reader.pos += 1
            return r"/[^\n]|\n/"
        if char == "(":
            reader.pos += 1
            self.depth += 1
            if self.depth > _MAX_NESTING:
                raise reader.fail(f"groups nested more than {_MAX_NESTING} deep")
            reader.skip_space(newlines=True)
            inner = self.alternatives(nested=True)
            self.depth -= 1
            reader.skip_space(newlines=True)
            if reader.peek() != ")":
                raise reader.fail("expected ')'")
            reader.pos += 1
            return f"({inner})"
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
            return self.lark_name(name)
        raise reader.fail(f"unexpected {char!r}")

    def quantified(self, item: str) -> str:
        reader = self.reader
        char = reader.peek()
        if char in "*+?":
            reader.pos += 1
            return f"{item}{char}"
        if char != "{":
            return item
        match = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(reader.text, reader.pos)
        if not match:
            raise reader.fail("malformed repetition {m,n}")
        reader.pos = match.end()
        low = int(match.group(1))
        if match.group(2) is None:
            return f"({item}) ~ {low}" if low else "()"
        if not match.group(3):
            return f"({item})*" if low == 0 else f"(({item}) ~ {low} ({item})*)"
        high = int(match.group(3))
        if high < low:
            raise reader.fail(f"repetition {{{low},{high}}} has its bounds reversed")
        if high == 0:
            return "()"
        return f"({item}) ~ {low}..{high}" if low else f"[({item}) ~ 1..{high}]"

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
        reader.pos += 1
        negated = reader.peek() == "^"
        if negated:
            reader.pos += 1
        parts: list[str] = []
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
            else:
                parts.append(_class_char(low))
        if not parts:
            raise reader.fail("empty character class")
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
