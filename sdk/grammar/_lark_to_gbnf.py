"""Lark -> GBNF, for llama.cpp's `grammar` field (and any GBNF/EBNF engine).

The input is the compiled grammar (`sdk.grammar._compiled`): Lark's rules with EBNF already
expanded, and each terminal read into the one syntax tree the client recognizes with, so the
GBNF says exactly what the client and llguidance read: `.`, `\\d`, `\\w`, `\\s` keep their
Unicode meaning (written out as classes), case-insensitive strings and regexes become classes
of the characters that simple case folding matches (`"ß"i` is `[ßẞ]`), and whatever the compiled
grammar refused never gets here. `%ignore`d terminals become a `ws` rule allowed where
llguidance skips them: before every terminal but the first (each rule that can begin the text
gets a version, `NAME-first`, whose first terminal has no `ws`). llguidance also skips them at
the end of the text where another terminal could have followed, which a context-free grammar
cannot say in general; so `%ignore` converts only when no sentence can go on (no terminal
that can end a sentence can also be followed by another), and is refused otherwise.

One difference cannot be written in GBNF: Lark and llguidance split text into terminals
greedily, GBNF has no terminals at all. Where that split could change the language (a terminal
whose match can run on into what follows it, as `/[a-z]+/ "x"`), the conversion is refused with
`UnconvertibleGrammar` (`sdk.grammar._lexing` decides, conservatively): the GBNF is exact or
not written. Left recursion is rewritten (llama.cpp cannot run it): direct left recursion
becomes repetition, indirect left recursion is refused.
"""

from __future__ import annotations

import re
from collections import defaultdict

from lark.grammar import NonTerminal
from lark.grammar import Terminal

from sdk.grammar._compiled import CompiledGrammar
from sdk.grammar._compiled import compile_grammar
from sdk.grammar._errors import UnconvertibleGrammar
from sdk.grammar._gbnf_to_lark import gbnf_for_llamacpp
from sdk.grammar._grammar import Grammar
from sdk.grammar._lexing import END
from sdk.grammar._lexing import first_and_follow
from sdk.grammar._lexing import lexing_conflicts
from sdk.schema import _regex as rx
from sdk.schema.gbnf._gbnf_text import char_class as _char_class
from sdk.schema.gbnf._gbnf_text import literal as _literal

__all__ = ["lark_to_gbnf", "to_gbnf"]

_WS = "ws"
_ROOT = "root"


def to_gbnf(grammar: Grammar) -> str:
    """The GBNF of a grammar: its own text if it was written in GBNF (negated classes that leave
    out non-ASCII characters written as the ranges they keep: `gbnf_for_llamacpp`), else
    converted from Lark."""
    if grammar.gbnf is not None:
        return gbnf_for_llamacpp(grammar.gbnf)
    return lark_to_gbnf(grammar.lark)


def lark_to_gbnf(lark_text: str) -> str:
    """A GBNF grammar for a Lark grammar text (entry rule `start`, written as `root`)."""
    compiled = compile_grammar(lark_text)
    if compiled.ignore:
        _check_trailing_ignore(compiled)
    conflicts = lexing_conflicts(compiled)
    if conflicts:
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise UnconvertibleGrammar(
            f"{conflicts[0]}{more}: llama.cpp's GBNF cannot express greedy terminals; make "
            "each terminal end where the next cannot continue it (a separator, a closing quote)",
            construct="greedy terminal split",
        )
    return _Writer(compiled).write()


def _check_trailing_ignore(grammar: CompiledGrammar) -> None:
    _, follow = first_and_follow(grammar)
    ignored = set(grammar.ignore)
    for name, after in sorted(follow.items()):
        if name not in ignored and END in after and after - ignored - {END}:
            raise UnconvertibleGrammar(
                f"%ignore in a grammar whose sentences can go on (after "
                f"{grammar.terminals[name].shown} the text may end or continue): llguidance "
                "takes ignored text at the end exactly where another terminal could follow, "
                "which GBNF cannot say; write the whitespace into the rules instead",
                construct="%ignore after a sentence that can go on",
            )


class _Writer:
    def __init__(self, grammar: CompiledGrammar) -> None:
        self.grammar = grammar
        self.names: dict[str, str] = {}
        # `start` too: converters back to Lark (llguidance's) rename `root` to `start`.
        self.taken = {_ROOT, _WS, "start"}
        self.ignored = list(grammar.ignore)
        self.terminal_rules: dict[str, str] = {}  # GBNF name -> body, for regex terminals

    def name(self, lark_name: str, *, terminal: bool) -> str:
        key = ("T:" if terminal else "R:") + lark_name
        known = self.names.get(key)
        if known is not None:
            return known
        base = re.sub(r"[^a-z0-9]+", "-", lark_name.lower()).strip("-") or "anon"
        base = ("t-" if terminal else "") + base
        candidate, number = base, 2
        while candidate in self.taken:
            candidate = f"{base}-{number}"
            number += 1
        self.taken.add(candidate)
        self.names[key] = candidate
        return candidate

    def write(self) -> str:
        rules: dict[str, list[list[Terminal | NonTerminal]]] = defaultdict(list)
        for rule in self.grammar.rules:
            rules[rule.origin].append(list(rule.expansion))
        entry = "start"
        root = self.name(entry, terminal=False)
        if self.ignored:
            entry = _first_versions(rules, _nullable(rules))
            root = self.name(entry, terminal=False)
        nullable = _nullable(rules)
        corners: dict[str, set[str]] = {}
        lines = [f"{_ROOT} ::= {root}"]
        for origin, options in rules.items():
            # llama.cpp cannot run a left-recursive rule, and Lark writes `x*` as one
            # (`r: x | r x`): `A ::= A a | b` becomes `A ::= (b) (a)*`, the same language.
            base = [option for option in options if option[:1] != [NonTerminal(origin)]]
            tails = [option[1:] for option in options if option[:1] == [NonTerminal(origin)]]
            if not base:
                raise UnconvertibleGrammar(
                    f"rule {origin} derives no finite text (every alternative starts with it)",
                    construct=f"left recursion in {origin}",
                )
            body = self.alternatives(base)
            corners[origin] = _left_corners(base, nullable)
            if any(_sequence_nullable(option, nullable) for option in tails):
                # `(x)*` where x can be empty loops forever; llama.cpp refuses the grammar.
                raise UnconvertibleGrammar(
                    f"rule {origin} repeats something that can be empty, which llama.cpp "
                    "rejects as left recursion: repeat only what always takes a character",
                    construct="repetition of something that can be empty",
                )
            if tails:
                body = f"({body}) ({self.alternatives(tails)})*"
                if all(_sequence_nullable(option, nullable) for option in base):
                    corners[origin] |= _left_corners(tails, nullable)
            lines.append(f"{self.name(origin, terminal=False)} ::= {body}")
        cycle = _cycle(corners)
        if cycle:
            path = " -> ".join(cycle)
            raise UnconvertibleGrammar(
                f"indirect left recursion ({path}) cannot be run by llama.cpp's GBNF engine: "
                "rewrite it with `*`/`+`",
                construct=f"left recursion {path}",
            )
        lines.extend(f"{name} ::= {body}" for name, body in self.terminal_rules.items())
        if self.ignored:
            lines.append(f"{_WS} ::= {self.ignore_body()}")
        return "\n".join(lines) + "\n"

    def alternatives(self, options: list[list[Terminal | NonTerminal]]) -> str:
        written = []
        for option in options:
            items = [self.symbol(symbol) for symbol in option]
            written.append(" ".join(items) if items else '""')
        return " | ".join(written)

    def symbol(self, symbol: Terminal | NonTerminal) -> str:
        if isinstance(symbol, NonTerminal):
            return self.name(symbol.name, terminal=False)
        term = self.terminal(symbol.name)
        return f"{_WS} {term}" if self.ignored and not isinstance(symbol, _Bare) else term

    def terminal(self, lark_name: str) -> str:
        """A literal inline, or the name of the rule the terminal was written to."""
        definition = self.grammar.terminals[lark_name]
        if definition.literal is not None:
            return _literal(definition.literal)
        name = self.name(lark_name, terminal=True)
        if name not in self.terminal_rules:
            try:
                self.terminal_rules[name] = self.node(definition.node) or '""'
            except rx.RegexUnsupported as error:
                raise UnconvertibleGrammar(
                    f"terminal {lark_name}: {definition.shown} cannot be converted to GBNF: "
                    f"{error}",
                    construct=str(error),
                ) from error
        return name

    def node(self, node: rx.Node) -> str:
        if isinstance(node, rx.CharSet):
            return _char_class(node.ranges)
        if isinstance(node, rx.Seq):
            return " ".join(part for part in (self.node(item) for item in node.items) if part)
        if isinstance(node, rx.Alt):
            return "(" + " | ".join(self.node(option) or '""' for option in node.options) + ")"
        inner = self.node(node.node)
        if not inner:
            return ""
        if node.hi is None and rx.length_range(node.node)[0] == 0:
            # `x*` where x can match "" never ends for llama.cpp (left recursion).
            raise rx.RegexUnsupported("unbounded repetition of something that can match ''")
        atom = inner if _is_atom(inner) else f"({inner})"
        if (node.lo, node.hi) == (0, None):
            return f"{atom}*"
        if (node.lo, node.hi) == (1, None):
            return f"{atom}+"
        if (node.lo, node.hi) == (0, 1):
            return f"{atom}?"
        if node.hi is None:
            return f"{atom}{{{node.lo},}}"
        if node.lo == node.hi:
            return f"{atom}{{{node.lo}}}"
        return f"{atom}{{{node.lo},{node.hi}}}"

    def ignore_body(self) -> str:
        """`ws`: any run of ignored terminals. One repeated class is written flat, because a
        nested repetition such as `([ \\t]+)*` multiplies llama.cpp's parse stacks."""
        flat = []
        for lark_name in self.ignored:
            node = self.grammar.terminals[lark_name].node
            if (
                isinstance(node, rx.Repeat)
                and node.lo <= 1
                and node.hi is None
                and isinstance(node.node, rx.CharSet)
            ):
                flat.append(node.node.ranges)
                continue
            flat = []
            break
        if flat:
            return f"{_char_class(rx.union(*flat))}*"
        options = [self.terminal(lark_name) for lark_name in self.ignored]
        return "(" + " | ".join(options) + ")*"


class _Bare(Terminal):
    """A terminal that begins the text: written without the `ws` before it."""


def _first_versions(
    rules: dict[str, list[list[Terminal | NonTerminal]]], nullable: set[str]
) -> str:
    """Add `NAME first` versions of the rules that can begin the text (their first terminal
    bare, rules that derive nothing dropped before it) and return the entry rule's name."""
    pending, done = ["start"], set()
    while pending:
        origin = pending.pop()
        if origin in done:
            continue
        done.add(origin)
        versions: list[list[Terminal | NonTerminal]] = []
        for option in rules[origin]:
            for index, symbol in enumerate(option):
                if isinstance(symbol, Terminal):
                    versions.append([_Bare(symbol.name), *option[index + 1 :]])
                    break
                versions.append([NonTerminal(f"{symbol.name} first"), *option[index + 1 :]])
                pending.append(symbol.name)
                if symbol.name not in nullable:
                    break
            else:
                versions.append([])  # every symbol derived nothing
        rules[f"{origin} first"] = versions
    return "start first"


def _nullable(rules: dict[str, list[list[Terminal | NonTerminal]]]) -> set[str]:
    """The rules that derive the empty string (terminals never do: Lark has no empty ones)."""
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for origin, options in rules.items():
            if origin not in nullable and any(
                _sequence_nullable(option, nullable) for option in options
            ):
                nullable.add(origin)
                changed = True
    return nullable


def _sequence_nullable(option: list[Terminal | NonTerminal], nullable: set[str]) -> bool:
    return all(isinstance(s, NonTerminal) and s.name in nullable for s in option)


def _left_corners(options: list[list[Terminal | NonTerminal]], nullable: set[str]) -> set[str]:
    """The rules that can be entered at an alternative's first character."""
    corners = set()
    for option in options:
        for symbol in option:
            if isinstance(symbol, Terminal):
                break
            corners.add(symbol.name)
            if symbol.name not in nullable:
                break
    return corners


def _cycle(edges: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph, as a path that starts and ends at the same rule, or []."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def _is_atom(expr: str) -> bool:
    if re.fullmatch(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[a-z0-9-]+', expr):
        return True
    if expr.startswith("(") and expr.endswith(")"):
        depth = 0
        for index, char in enumerate(expr):
            depth += char == "("
            depth -= char == ")"
            if depth == 0 and index < len(expr) - 1:
                return False
        return True
    return False
