"""Lark -> GBNF, for llama.cpp's `grammar` field (and any GBNF/EBNF engine).

The input is Lark's own compiled form of the grammar (rules already in BNF, `?`, `*`, `+`,
`~` and templates expanded, terminals reduced to one string or regex each), so every Lark
construct the recognizer understands reaches this converter the same way.

Regex terminals are translated exactly by `sdk.schema._regex` (the regex subset Python's `re`
and the Rust `regex` crate read alike); a terminal outside it, a regex flag, or a case-folded
regex raises `UnconvertibleGrammar` naming the terminal and the construct. `%ignore`d terminals
become a `ws` rule allowed before every terminal and at the end.

One difference cannot be written in GBNF: Lark and llguidance match each terminal greedily,
GBNF has no terminals at all. Where a greedy match matters (a regex terminal whose match could
stop early and let the next terminal start, as `/[a-z]+/ "x"`), the GBNF grammar admits a text
that the client-side recognizer then rejects (`GrammarViolation`, retried): the client decides,
never the server's mask. Grammars whose terminals end unambiguously (quoted identifiers, keywords
followed by a fixed separator, as the SQL reference grammar) have one language under both.
"""

from __future__ import annotations

import re
from collections import defaultdict

import lark
from lark.grammar import NonTerminal, Terminal

from sdk.grammar._grammar import Grammar, UnconvertibleGrammar, compiled_lark
from sdk.schema import _regex as rx
from sdk.schema.gbnf._gbnf_text import char_class as _char_class
from sdk.schema.gbnf._gbnf_text import literal as _literal

__all__ = ["lark_to_gbnf", "to_gbnf"]

_WS = "ws"
_ROOT = "root"


def to_gbnf(grammar: Grammar) -> str:
    """The GBNF of a grammar: its own text if it was written in GBNF, else converted from Lark."""
    return grammar.gbnf if grammar.gbnf is not None else lark_to_gbnf(grammar.lark)


def lark_to_gbnf(lark_text: str) -> str:
    """A GBNF grammar for a Lark grammar text (entry rule `start`, written as `root`)."""
    return _Writer(compiled_lark(lark_text)).write()


class _Writer:
    def __init__(self, parser: lark.Lark) -> None:
        self.parser = parser
        self.names: dict[str, str] = {}
        # `start` too: converters back to Lark (llguidance's) rename `root` to `start`.
        self.taken = {_ROOT, _WS, "start"}
        self.terminals = {term.name: term for term in parser.terminals}
        self.ignored = list(parser.ignore_tokens)
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
        for rule in self.parser.rules:
            rules[rule.origin.name].append(
                [s for s in rule.expansion if isinstance(s, Terminal | NonTerminal)]
            )
        if "start" not in rules:
            raise UnconvertibleGrammar("the Lark grammar has no `start` rule", construct="start")
        nullable = _nullable(rules)
        corners: dict[str, set[str]] = {}
        start = self.name("start", terminal=False)
        lines = [f"{_ROOT} ::= {start}" + (f" {_WS}" if self.ignored else "")]
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
        return f"{_WS} {term}" if self.ignored else term

    def terminal(self, lark_name: str) -> str:
        """A literal inline, or the name of the rule a regex terminal was written to."""
        definition = self.terminals.get(lark_name)
        if definition is None:
            raise UnconvertibleGrammar(
                f"terminal {lark_name} has no definition (%declare) to convert",
                construct=f"%declare {lark_name}",
            )
        pattern = definition.pattern
        if isinstance(pattern, lark.lexer.PatternStr):
            if "i" in pattern.flags:
                return self.case_folded(pattern.value)
            return _literal(pattern.value)
        name = self.name(lark_name, terminal=True)
        if name not in self.terminal_rules:
            self.terminal_rules[name] = self.regex(lark_name, pattern)
        return name

    def case_folded(self, text: str) -> str:
        parts = []
        for char in text:
            forms = {char, char.lower(), char.upper()}
            if len(forms) == 1:
                parts.append(_literal(char))
            else:
                parts.append(_char_class(rx.normalize([(ord(f), ord(f)) for f in forms])))
        return " ".join(parts)

    def regex(self, lark_name: str, pattern: lark.lexer.Pattern) -> str:
        shown = f"{lark_name}: /{pattern.value}/"
        if pattern.flags:
            flags = "".join(sorted(pattern.flags))
            raise UnconvertibleGrammar(
                f"terminal {shown}{flags}: regex flags ({flags}) cannot be converted to GBNF",
                construct=f"regex flag {flags}",
            )
        try:
            branches = rx.parse_pattern(pattern.value)
            if any(branch.anchored_start or branch.anchored_end for branch in branches):
                raise rx.RegexUnsupported("an anchor (^ or $) inside a terminal")
            options = [self.node(branch.node) for branch in branches]
        except rx.RegexUnsupported as error:
            raise UnconvertibleGrammar(
                f"terminal {shown} cannot be converted to GBNF: {error}", construct=str(error)
            ) from error
        return " | ".join(option or '""' for option in options)

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
            pattern = self.terminals[lark_name].pattern
            branches = _branches(pattern)
            node = branches[0].node if branches and len(branches) == 1 else None
            repeated = isinstance(node, rx.Repeat) and node.lo <= 1 and node.hi is None
            if repeated and isinstance(node, rx.Repeat) and isinstance(node.node, rx.CharSet):
                flat.append(node.node.ranges)
                continue
            flat = []
            break
        if flat:
            return f"{_char_class(rx.union(*flat))}*"
        options = [self.terminal(lark_name) for lark_name in self.ignored]
        return "(" + " | ".join(options) + ")*"


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


def _branches(pattern: lark.lexer.Pattern) -> list[rx.Branch]:
    if isinstance(pattern, lark.lexer.PatternStr) or pattern.flags:
        return []
    try:
        return rx.parse_pattern(pattern.value)
    except rx.RegexUnsupported:
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
