"""Does a grammar's language depend on how its text is split into terminals?

Lark and llguidance split text greedily (a lexeme runs as far as any allowed terminal can
still match); GBNF has no terminals at all, only characters. The two readings admit the same
texts exactly when no split is ever in doubt: after a whole match of a terminal T, the next
character of the text (a first character of whatever can follow T in the grammar) never lets
T, or another terminal that can start where T started, run on. `lexing_conflicts` checks that,
conservatively (every terminal counts as one that can start where T starts, and what follows T
is taken over every context; and since llguidance reads bytes, a next character that merely
starts with the same byte counts), and names each conflict; an empty list means the grammar reads
the same under both, and the converter to GBNF is exact. `%ignore`d terminals are taken as one
run (the GBNF writes them as one repeated class) that may come between any two terminals.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator

from sdk.grammar._compiled import CompiledGrammar
from sdk.grammar._compiled import TerminalDef
from sdk.grammar._compiled import same_lead_byte
from sdk.schema import _regex as rx

__all__ = ["END", "first_and_follow", "lexing_conflicts"]

END = ""
"""Stands for the end of the text in a follow set."""
_MAX_PAIRS = 20_000


def first_and_follow(grammar: CompiledGrammar) -> tuple[set[str], dict[str, set[str]]]:
    """The terminals that can start a sentence, and for each terminal those that can follow
    it (`END` for the end of the text), `%ignore`d terminals included."""
    rules = [(rule.origin, rule.expansion) for rule in grammar.rules]
    nullable: set[str] = set()
    first: dict[str, set[str]] = {rule.origin: set() for rule in grammar.rules}
    changed = True
    while changed:
        changed = False
        for origin, expansion in rules:
            was = (origin in nullable, len(first[origin]))
            seq_first, seq_nullable = _sequence_first(expansion, first, nullable)
            first[origin] |= seq_first
            if seq_nullable:
                nullable.add(origin)
            changed |= was != (origin in nullable, len(first[origin]))
    follow_rule: dict[str, set[str]] = {name: set() for name in first}
    follow_rule["start"].add(END)
    follow: dict[str, set[str]] = {name: set() for name in grammar.terminals}
    changed = True
    while changed:
        changed = False
        for origin, expansion in rules:
            for index, symbol in enumerate(expansion):
                rest_first, rest_nullable = _sequence_first(expansion[index + 1 :], first, nullable)
                target = follow if symbol.is_term else follow_rule
                before = len(target[symbol.name])
                target[symbol.name] |= rest_first
                if rest_nullable:
                    target[symbol.name] |= follow_rule[origin]
                changed |= len(target[symbol.name]) != before
    start_first = set(first["start"]) | ({END} if "start" in nullable else set())
    ignored = set(grammar.ignore)
    if ignored:
        anywhere = (start_first | {t for f in follow.values() for t in f}) - ignored
        for name in follow:
            follow[name] = anywhere if name in ignored else follow[name] | ignored
        start_first |= ignored
    return start_first, follow


def _sequence_first(
    symbols: tuple[object, ...] | list[object], first: dict[str, set[str]], nullable: set[str]
) -> tuple[set[str], bool]:
    out: set[str] = set()
    for symbol in symbols:
        name: str = symbol.name  # type: ignore[attr-defined]
        if symbol.is_term:  # type: ignore[attr-defined]
            out.add(name)
            return out, False
        out |= first[name]
        if name not in nullable:
            return out, False
    return out, True


@functools.cache
def _first_chars(terminal: TerminalDef) -> rx.Ranges:
    return terminal.automaton.next_ranges(terminal.automaton.start)


def lexing_conflicts(grammar: CompiledGrammar) -> list[str]:
    """Every terminal whose greedy match can run past where the grammar needs it to end,
    written as a sentence naming both terminals and a character; [] when there is none."""
    _, follow = first_and_follow(grammar)
    terminals = grammar.terminals
    found = []
    for skipped in grammar.ignore:
        for name, terminal in sorted(terminals.items()):
            if name not in grammar.ignore and _runs_on(terminal, terminals[skipped], whole=True):
                found.append(
                    f"{terminal.shown} and the ignored {terminals[skipped].shown} match the "
                    "same text, which llguidance skips and GBNF may not"
                )
    for name, terminal in sorted(terminals.items()):
        after = rx.union(*(_first_chars(terminals[t]) for t in follow[name] if t != END))
        if not after:
            continue
        for _, other in sorted(terminals.items()):
            if not _intersect(_first_chars(terminal), _first_chars(other)):
                continue
            # llguidance reads bytes: a character that only shares its first byte with one
            # the terminal could continue with already makes it read on (and fail).
            overlap = _intersect(_lead_bytes(_runs_on(terminal, other)), after)
            if overlap:
                char = chr(overlap[0][0])
                found.append(
                    f"after a whole match of {terminal.shown}, a following {char!r} lets "
                    f"{other.shown} run on: greedy splitting and GBNF disagree"
                )
                break
    return found


def _runs_on(terminal: TerminalDef, other: TerminalDef, *, whole: bool = False) -> rx.Ranges:
    """The characters c such that some whole match t of `terminal` has t + c as the start of
    a match of `other` (the product of the two automata, explored breadth first). With
    `whole`, instead: any character at all when some text is a whole match of both."""
    a, b = terminal.automaton, other.automaton
    start = (a.start, b.start)
    seen = {start}
    queue = deque([start])
    out: list[rx.Ranges] = []
    while queue:
        if len(seen) > _MAX_PAIRS:
            return rx.complement(())  # too large to decide: count it as a conflict
        left, right = queue.popleft()
        if whole and a.accepting(left) and b.accepting(right):
            return rx.complement(())
        if a.accepting(left) and not whole:
            out.append(b.next_ranges(right))
        for pair in _overlaps(a.step_ranges(left), b.step_ranges(right)):
            if pair not in seen:
                seen.add(pair)
                queue.append(pair)
    return rx.union(*out) if out else ()


def _overlaps(
    first: list[tuple[int, int, int]], second: list[tuple[int, int, int]]
) -> Iterator[tuple[int, int]]:
    """The (next, next) state pairs of two sorted, disjoint transition lists wherever their
    characters overlap (one merge pass)."""
    i = j = 0
    while i < len(first) and j < len(second):
        lo_a, hi_a, next_a = first[i]
        lo_b, hi_b, next_b = second[j]
        if max(lo_a, lo_b) <= min(hi_a, hi_b):
            yield next_a, next_b
        if hi_a < hi_b:
            i += 1
        else:
            j += 1


def _lead_bytes(ranges: rx.Ranges) -> rx.Ranges:
    """Every character whose UTF-8 encoding starts like one of `ranges`."""
    return rx.normalize([(same_lead_byte(lo)[0], same_lead_byte(hi)[1]) for lo, hi in ranges])


def _intersect(first: rx.Ranges, second: rx.Ranges) -> rx.Ranges:
    """The characters in both sets (one merge pass over the sorted ranges)."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(first) and j < len(second):
        lo, hi = max(first[i][0], second[j][0]), min(first[i][1], second[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)
