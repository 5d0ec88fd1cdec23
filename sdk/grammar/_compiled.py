"""A Lark grammar text, compiled once into what every grammar module works on.

Lark reads the text (its own grammar syntax, EBNF expanded into plain rules, terminals reduced
to one string or regex each); each terminal is then read by `sdk.schema._regex` in its grammar
dialect, the one meaning Lark's `regex` module and llguidance's Rust `regex` crate share, into
a syntax tree and an automaton. What the engines read differently is refused here, where the
grammar is defined, with `InvalidGrammar` (or `UnconvertibleGrammar`, which names the
construct): an anchor or lookaround, a regex construct one engine lacks, a `\\xHH` escape that
Lark evaluates before the regex is compiled and llguidance after, an `%import` of anything but
Lark's `common` library (llguidance has no other; a grammar contract is self-contained, and its
fingerprint covers all of it), a terminal that can match nothing or the empty string, and a
grammar nested deeper than the parsers can follow.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lark
import regex
from lark.grammar import NonTerminal
from lark.grammar import Terminal
from lark.load_grammar import _parse_grammar
from lark.load_grammar import eval_escaping
from lark.load_grammar import load_grammar
from lark.load_grammar import stdlib_loader

from sdk.grammar._automaton import Automaton
from sdk.grammar._automaton import TerminalTooLarge
from sdk.grammar._errors import InvalidGrammar
from sdk.grammar._errors import UnconvertibleGrammar
from sdk.schema import _regex as rx
from sdk.schema._unicode import case_fold

__all__ = [
    "CompiledGrammar",
    "GrammarRule",
    "Symbol",
    "TerminalDef",
    "compile_grammar",
    "compiled_lark",
    "lark_literal",
]

Symbol = Terminal | NonTerminal


@dataclass(frozen=True, slots=True)
class TerminalDef:
    """One terminal: its name, how a Lark grammar writes it, its language and automaton."""

    name: str
    shown: str
    """As written in a Lark grammar: `"SELECT "`, `/[0-9]+/`."""
    node: rx.Node
    literal: str | None
    """The exact text of a case-sensitive string terminal, else None."""
    automaton: Automaton

    def extent(self, text: str, pos: int) -> tuple[int, bool, bool]:
        """How far from `pos` the text stays inside the terminal, whether it is whole there,
        and whether a reader of bytes would read on into the next character: its first UTF-8
        byte starts a character the terminal could continue with (llguidance then fails in
        the middle of that character, as it backs up one byte only)."""
        if self.literal is not None:
            if text.startswith(self.literal, pos):
                return len(self.literal), True, False
            length = 0
            for want, got in zip(self.literal, text[pos:], strict=False):
                if want != got:
                    break
                length += 1
            following = self.literal[length] if length < len(self.literal) else None
            reads_on = following is not None and pos + length < len(text)
            if reads_on:
                got_lo, got_hi = same_lead_byte(ord(text[pos + length]))
                reads_on = got_lo <= ord(following) <= got_hi  # type: ignore[arg-type]
            return length, False, reads_on
        length, state = self.automaton.walk(text, pos)
        reads_on = False
        if pos + length < len(text) and ord(text[pos + length]) >= 0x80:
            lo, hi = same_lead_byte(ord(text[pos + length]))
            reads_on = any(a <= hi and lo <= b for a, b in self.automaton.next_ranges(state))
        return length, self.automaton.accepting(state), reads_on


def same_lead_byte(point: int) -> tuple[int, int]:
    """The code points whose UTF-8 encoding starts with the same byte as `point`'s."""
    if point < 0x80:
        return point, point
    for width_bits, first, limit in (
        (6, 0x80, 0x800),
        (12, 0x800, 0x10000),
        (18, 0x10000, 0x110000),
    ):
        if point < limit:
            lead = point >> width_bits
            return max(lead << width_bits, first), min(((lead + 1) << width_bits) - 1, limit - 1)
    return point, point


@dataclass(frozen=True, slots=True)
class GrammarRule:
    """`origin: expansion`, one alternative, with EBNF already expanded."""

    origin: str
    expansion: tuple[Symbol, ...]


@dataclass(frozen=True)
class CompiledGrammar:
    """Rules (entry `start`), terminals by name, and the `%ignore`d terminals."""

    rules: tuple[GrammarRule, ...]
    terminals: Mapping[str, TerminalDef]
    ignore: tuple[str, ...]


_GRAMMAR_OPTIONS: dict[str, Any] = {
    "start": "start",
    "parser": "earley",
    "lexer": "dynamic",
    "ambiguity": "forest",
    "regex": True,
    "g_regex_flags": regex.POSIX,
}


class _RefusedImport(Exception):
    """An `%import` a grammar contract may not make (raised through Lark, caught below)."""


def _only_common(base_path: Any, grammar_path: str) -> tuple[Any, str]:
    """Lark's import hook, tried first: Lark's own `common` library, and nothing else."""
    if base_path is not None or grammar_path != "common.lark":
        name = grammar_path.removesuffix(".lark").replace("/", ".")
        raise _RefusedImport(
            f"%import of {name!r}: a grammar contract is self-contained; only Lark's `common` "
            "library (which llguidance has too) may be imported, never a file"
        )
    result: tuple[Any, str] = stdlib_loader(base_path, grammar_path)
    return result


@functools.lru_cache(maxsize=128)
def compiled_lark(text: str) -> lark.Lark:
    """A `lark.Lark` parser of a grammar text (for tools that want one, such as hypothesis's
    `from_lark`; the SDK itself needs only `compile_grammar`)."""
    with _lark_errors():
        return lark.Lark(text, import_paths=[_only_common], **_GRAMMAR_OPTIONS)


@functools.lru_cache(maxsize=128)
def _lark_compile(text: str) -> tuple[list[Any], list[Any], list[str]]:
    """Lark's compiled form of a grammar text: terminals, rules with EBNF expanded, ignored
    terminal names (without building a Lark parser, which large grammars make slow)."""
    with _lark_errors():
        built, _ = load_grammar(text, "<grammar>", [_only_common], False)  # type: ignore[no-untyped-call]
        terminals, rules, ignore = built.compile(["start"], set())
        return list(terminals), list(rules), list(ignore)


@contextlib.contextmanager
def _lark_errors() -> Iterator[None]:
    """Lark's errors (and the ways it fails on a hostile text) as `InvalidGrammar`."""
    try:
        yield
    except _RefusedImport as error:
        raise InvalidGrammar(f"not a valid grammar contract: {error}") from None
    except RecursionError:
        raise InvalidGrammar(
            "not a valid Lark grammar: nested too deeply for the grammar parser"
        ) from None
    except lark.exceptions.GrammarError as error:
        raise InvalidGrammar(f"not a valid Lark grammar: {error}") from error
    except lark.exceptions.LarkError as error:
        raise InvalidGrammar(f"not a valid Lark grammar: {_first_line(error)}") from error
    except regex.error as error:
        raise InvalidGrammar(f"not a valid Lark grammar: a terminal's regex: {error}") from error
    except (OSError, ValueError, TypeError, AssertionError) as error:
        # Lark reports some mistakes this way (an import it cannot find, a bad escape).
        raise InvalidGrammar(f"not a valid Lark grammar: {_first_line(error)}") from error


@functools.lru_cache(maxsize=128)
def compile_grammar(text: str) -> CompiledGrammar:
    """The compiled grammar of a Lark text, checked for what the engines read differently."""
    lark_terminals, lark_rules, ignore = _lark_compile(text)
    _check_as_written(text)
    terminals = {
        term.name: _terminal(term.name, term.pattern, _shown(term.pattern))
        for term in lark_terminals
    }
    rules = []
    for rule in lark_rules:
        expansion = tuple(s for s in rule.expansion if isinstance(s, Terminal | NonTerminal))
        for symbol in expansion:
            if isinstance(symbol, Terminal) and symbol.name not in terminals:
                raise UnconvertibleGrammar(
                    f"terminal {symbol.name} is declared (%declare) but never defined: no "
                    "engine can generate it",
                    construct=f"%declare {symbol.name}",
                )
        rules.append(GrammarRule(rule.origin.name, expansion))
    if not any(rule.origin == "start" for rule in rules):
        raise InvalidGrammar("not a valid Lark grammar: no `start` rule")
    return CompiledGrammar(tuple(rules), terminals, tuple(ignore))


def _shown(pattern: lark.lexer.Pattern) -> str:
    """A terminal as a user would write it: control characters and surrogates escaped."""
    flags = "".join(sorted(pattern.flags))
    if isinstance(pattern, lark.lexer.PatternStr):
        return _printable(json.dumps(pattern.value, ensure_ascii=False)) + flags
    return f"/{_printable(pattern.value)}/{flags}"


def _printable(text: str) -> str:
    out = []
    for char in text:
        point = ord(char)
        if point < 0x20 or point == 0x7F:
            out.append(f"\\x{point:02x}")
        elif 0xD800 <= point <= 0xDFFF:
            out.append(f"\\u{point:04x}")
        else:
            out.append(char)
    return "".join(out)


def _terminal(name: str, pattern: lark.lexer.Pattern, shown: str) -> TerminalDef:
    flags = "".join(sorted(pattern.flags))
    try:
        if isinstance(pattern, lark.lexer.PatternStr):
            branches = [rx.Branch(_string_node(pattern.value, flags), False, False)]
        else:
            branches = rx.parse_pattern(pattern.value, dialect="lark", flags=flags)
        node = branches[0].node if len(branches) == 1 else rx.Alt(tuple(b.node for b in branches))
        if rx.length_range(node)[0] == 0:
            raise rx.RegexUnsupported("a terminal that matches the empty string")
        automaton = Automaton(node)
    except rx.RegexUnsupported as error:
        if str(error).startswith(rx.INVALID_REGEX):  # a broken regex, not a construct refused
            raise InvalidGrammar(
                f"not a valid Lark grammar: terminal {name}: {shown}: {error}"
            ) from error
        raise UnconvertibleGrammar(
            f"terminal {name}: {shown}: {error}: the engines read it differently, or one "
            "cannot read it",
            construct=error.construct,
        ) from error
    except TerminalTooLarge as error:
        raise InvalidGrammar(f"terminal {name}: {shown}: {error}") from error
    literal = pattern.value if isinstance(pattern, lark.lexer.PatternStr) and not flags else None
    return TerminalDef(name, shown, node, literal, automaton)


def _string_node(text: str, flags: str) -> rx.Node:
    sets = []
    for char in text:
        ranges = rx.normalize([(ord(char), ord(char))])
        if not ranges:
            raise rx.RegexUnsupported("a surrogate code point (never in UTF-8 text)")
        if "i" in flags:
            ranges = rx.normalize(case_fold(ranges))
        sets.append(rx.CharSet(ranges))
    return sets[0] if len(sets) == 1 else rx.Seq(tuple(sets))


def _check_as_written(text: str) -> None:
    """Every string and regex literal of the grammar text must mean the same to Lark and to
    llguidance, which read escapes differently: Lark keeps an unknown escape (`\\b`, `\\/`,
    `\\'`) as a backslash and a letter where llguidance reads a control character or refuses
    it, llguidance refuses a raw control character, and Lark evaluates `\\xHH` before a regex
    is compiled where llguidance reads the escape inside the regex (`[\\x5d]`)."""
    tree = _parse_grammar(text, "<grammar>")  # type: ignore[no-untyped-call]
    for token in tree.scan_values(lambda v: isinstance(v, lark.Token)):
        if token.type == "STRING":
            _check_string(token.value[: token.value.rindex('"') + 1])
        elif token.type == "REGEXP":
            _check_regexp(token.value)


_STRING_ESCAPE = re.compile(r'\\(?:["\\ntrf]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})')


def _check_string(literal: str) -> None:
    body, index = literal[1:-1], 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            match = _STRING_ESCAPE.match(body, index)
            if match is None:
                raise InvalidGrammar(
                    f"string {literal}: the escape {body[index : index + 2]!r} is read differently "
                    'by Lark and llguidance: use \\" \\\\ \\n \\t \\r \\f \\xHH or \\uHHHH'
                )
            index = match.end()
            continue
        if ord(char) < 0x20 or ord(char) == 0x7F:
            raise InvalidGrammar(
                f"string {literal!r}: a raw control character U+{ord(char):04X} (llguidance "
                f"refuses it): write it as \\x{ord(char):02x}"
            )
        index += 1


def _check_regexp(token: str) -> None:
    end = token.rindex("/")
    body, flags = token[1:end], token[end + 1 :]
    try:
        evaluated: str = eval_escaping(body)  # type: ignore[no-untyped-call]
        as_lark = rx.parse_pattern(evaluated, dialect="lark", flags=flags)
    except (rx.RegexUnsupported, lark.exceptions.GrammarError):
        return  # refused, with the terminal's name, when the terminal is compiled
    try:
        as_written = rx.parse_pattern(body.replace("\\/", "/"), dialect="lark", flags=flags)
    except rx.RegexUnsupported:
        as_written = []
    if as_written != as_lark:
        raise UnconvertibleGrammar(
            f"regex {token}: an escape that Lark evaluates before the regex is read and "
            "llguidance after (write a special character escaped with a backslash, as \\] or "
            "\\.)",
            construct="escape evaluated before the regex",
        )


def lark_literal(text: str) -> str:
    """A Lark string literal that Lark and llguidance both read as exactly `text`.

    `"` and `\\` are escaped with a backslash, control characters as `\\xHH` (both engines
    read that escape; a raw one breaks llguidance's lexer, `\\b` means backspace to one and a
    backslash to the other); everything else, astral characters included, is written raw
    (JSON's surrogate-pair escapes would be two characters to Lark).
    """
    if not text:
        raise ValueError("a Lark string literal cannot be empty")
    out = []
    for char in text:
        point = ord(char)
        if 0xD800 <= point <= 0xDFFF:
            raise ValueError(f"a surrogate code point cannot be in a grammar: {text!r}")
        if char in '"\\':
            out.append("\\" + char)
        elif point < 0x20 or point == 0x7F:
            out.append(f"\\x{point:02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
