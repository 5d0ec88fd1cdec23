"""The client's recognizer: an Earley parser that splits text into terminals as llguidance does.

Where a terminal ends is decided the way llguidance's lexer decides it, so that the client and
the engine behind the embedded provider and OpenAI's custom tools admit the same texts: at each
boundary the terminals the parser allows there are matched together, the lexeme runs as far as
any of them can still match (one character past a whole match is how far llguidance looks
back), and every allowed terminal that matches exactly that lexeme is taken. `%ignore`d
terminals are skipped as llguidance skips them: matched alongside the allowed terminals (the
longest lexeme wins, an ignored one on a tie), never before the first terminal, and only where
another terminal could follow (at the end of the text too). `"xy" | "x" "yz"` therefore
rejects `xyz` (the lexeme is `xy`), as llguidance does, and `/[a-z]+/ "x"` rejects `abx`.
llguidance reads bytes, and this is followed too: when the next character only shares its
first UTF-8 byte with one a terminal could continue with, llguidance reads on and fails inside
that character (it backs up one byte only), so the lexeme fails here as well.

Earley sets exist only at lexeme boundaries; nullable rules are handled as Aycock and Horspool
do, and right recursion with Joop Leo's memoized reductions, so recognition time grows linearly
with the text for the grammars people write (LR-regular ones), and never recursively. A work
budget bounds the rest: a grammar ambiguous enough to exceed it raises `InvalidGrammar`.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field

from sdk.grammar._compiled import CompiledGrammar
from sdk.grammar._errors import InvalidGrammar

__all__ = ["WORK_PER_CHARACTER", "Outcome", "Recognizer"]

WORK_PER_CHARACTER = 400
"""Earley items the recognizer may add per character of text (plus a fixed allowance)."""
_WORK_BASE = 200_000

Item = tuple[int, int, int]  # (rule, dot, origin set)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What recognition found: accepted, or where the text leaves the language.

    `position` is a character index: the start of the lexeme no allowed terminal matches, or
    the text's length when the text ends first (`at_end`: a prefix of a sentence).
    """

    accepted: bool
    position: int
    at_end: bool
    expected: tuple[str, ...]
    """The terminals allowed at the miss (their names)."""
    could_end: bool
    """The text up to the miss is a sentence (the grammar allowed it to end there)."""
    steps: int = 0
    """Earley items the recognition added: what the work budget counts."""


class _Work:
    """What recognizing one text may still spend: every item the parser adds or tries to add
    (a duplicate too: the attempt is the cost) spends one step."""

    __slots__ = ("left", "spent", "text_length")

    def __init__(self, text_length: int) -> None:
        self.text_length = text_length
        self.left = _WORK_BASE + WORK_PER_CHARACTER * text_length
        self.spent = 0

    def spend(self, steps: int) -> None:
        self.spent += steps
        self.left -= steps
        if self.left < 0:
            raise InvalidGrammar(
                f"recognizing a {self.text_length}-character text needs more than "
                f"{WORK_PER_CHARACTER} parser steps a character: the grammar is too "
                "ambiguous to recognize in bounded time"
            )


@dataclass(slots=True)
class _Set:
    items: list[Item] = field(default_factory=list)
    seen: set[Item] = field(default_factory=set)
    waiting: dict[int, list[Item]] = field(default_factory=dict)
    scanning: dict[int, list[Item]] = field(default_factory=dict)
    leo: dict[int, Item | None] = field(default_factory=dict)
    accepting: bool = False


class Recognizer:
    """Recognition for one compiled grammar (built once per grammar, used for many texts)."""

    def __init__(self, grammar: CompiledGrammar) -> None:
        names = sorted({rule.origin for rule in grammar.rules})
        self._nonterminal = {name: index for index, name in enumerate(names)}
        self.terminal_names = sorted(grammar.terminals)
        terminal_id = {name: index for index, name in enumerate(self.terminal_names)}
        self._matchers = [grammar.terminals[name] for name in self.terminal_names]
        self._lhs: list[int] = []
        self._rhs: list[tuple[int, ...]] = []
        self._rules_of: list[list[int]] = [[] for _ in names]
        for rule in grammar.rules:
            symbols = tuple(
                ~terminal_id[s.name] if s.is_term else self._nonterminal[s.name]
                for s in rule.expansion
            )
            self._rules_of[self._nonterminal[rule.origin]].append(len(self._rhs))
            self._lhs.append(self._nonterminal[rule.origin])
            self._rhs.append(symbols)
        self._start = self._nonterminal["start"]
        self._ignore = [terminal_id[name] for name in grammar.ignore]
        self._nullable = self._nullable_set()

    def _nullable_set(self) -> set[int]:
        nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in zip(self._lhs, self._rhs, strict=True):
                if lhs not in nullable and all(s >= 0 and s in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        return nullable

    # --- the parse -----------------------------------------------------------------------

    def run(self, text: str) -> Outcome:
        """Recognize `text`; never recursive, bounded by the work budget.

        The cyclic garbage collector is paused meanwhile (and resumed if it was on): the
        parse makes no reference cycles, and its collections, each a pass over every Earley
        set kept so far, would make the time grow faster than the text."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run(text)
        finally:
            if collecting:
                gc.enable()

    def _run(self, text: str) -> Outcome:
        work = _Work(len(text))
        sets: list[_Set] = [_Set()]
        for rule in self._rules_of[self._start]:
            self._add(sets[0], (rule, 0, 0))
        pos = 0
        while True:
            current = sets[-1]
            self._close(sets, len(sets) - 1, work)
            steps = work.spent
            if pos == len(text):
                return self._outcome(current, pos, steps, at_end=not current.accepting, done=True)
            allowed = list(current.scanning)
            if pos and current.scanning:
                allowed += [t for t in self._ignore if t not in current.scanning]
            length, matched, cut = self._lex(text, pos, allowed)
            if cut:
                return self._outcome(current, len(text), steps, at_end=True)
            if not matched:
                return self._outcome(current, pos, steps, at_end=False)
            following = _Set()
            if any(t in self._ignore for t in matched):
                for item in current.items:
                    self._add(following, item)  # skipped: the same items, further on
            else:
                for terminal in matched:
                    for rule, dot, origin in current.scanning[terminal]:
                        self._add(following, (rule, dot + 1, origin))
            sets.append(following)
            pos += length

    def _lex(self, text: str, pos: int, allowed: Sequence[int]) -> tuple[int, list[int], bool]:
        """The lexeme at `pos`: its length, the allowed terminals it is whole for, and whether
        the text ended inside it (no terminal whole at the end: a cut, not a miss)."""
        extents = [(terminal, *self._matchers[terminal].extent(text, pos)) for terminal in allowed]
        longest = max((length for _, length, _, _ in extents), default=0)
        if longest == 0 or any(on for _, length, _, on in extents if length == longest):
            # Nothing starts here, or llguidance would read into the next character's bytes
            # and fail inside it: the text leaves the language at the lexeme's start.
            return 0, [], False
        matched = [t for t, length, whole, _ in extents if length == longest and whole]
        cut = pos + longest == len(text) and not matched
        return longest, matched, cut

    def _outcome(
        self, current: _Set, pos: int, steps: int, *, at_end: bool, done: bool = False
    ) -> Outcome:
        expected = tuple(sorted(self.terminal_names[t] for t in current.scanning))
        return Outcome(
            accepted=done and current.accepting,
            position=pos,
            at_end=at_end,
            expected=expected,
            could_end=current.accepting,
            steps=steps,
        )

    # --- Earley sets -----------------------------------------------------------------------

    def _add(self, target: _Set, item: Item) -> None:
        if item in target.seen:
            return
        target.seen.add(item)
        target.items.append(item)
        rule, dot, origin = item
        if origin == 0 and self._lhs[rule] == self._start and dot == len(self._rhs[rule]):
            target.accepting = True

    def _close(self, sets: list[_Set], index: int, work: _Work) -> None:
        """Predict and complete set `index` to its fixed point, spending `work` as it goes."""
        current = sets[index]
        cursor = 0
        while cursor < len(current.items):
            item = current.items[cursor]
            cursor += 1
            work.spend(1)
            rule, dot, origin = item
            rhs = self._rhs[rule]
            if dot == len(rhs):
                work.spend(self._complete(sets, index, self._lhs[rule], origin))
                continue
            symbol = rhs[dot]
            if symbol < 0:
                current.scanning.setdefault(~symbol, []).append(item)
                continue
            waiting = current.waiting.get(symbol)
            if waiting is None:
                current.waiting[symbol] = [item]
                work.spend(len(self._rules_of[symbol]))
                for predicted in self._rules_of[symbol]:
                    self._add(current, (predicted, 0, index))
            else:
                waiting.append(item)
            if symbol in self._nullable:
                self._add(current, (rule, dot + 1, origin))

    def _complete(self, sets: list[_Set], index: int, lhs: int, origin: int) -> int:
        """Advance the items waiting for `lhs` since `origin`; returns how many were tried."""
        current = sets[index]
        if origin != index:
            top = self._leo(sets, origin, lhs)
            if top is not None:
                self._add(current, top)
                return 1
        parents = list(sets[origin].waiting.get(lhs, ()))
        for rule, dot, parent_origin in parents:
            self._add(current, (rule, dot + 1, parent_origin))
        return len(parents)

    def _leo(self, sets: list[_Set], origin: int, lhs: int) -> Item | None:
        """The topmost item of a deterministic reduction path from (set, nonterminal), if any:
        completing `lhs` there completes exactly one item, which ends with `lhs`, and so on up.
        Walked iteratively and memoized, so a chain of any length costs one step per link."""
        chain: list[tuple[int, int]] = []
        result: Item | None = None
        key = (origin, lhs)
        visited: set[tuple[int, int]] = set()
        while True:
            at, symbol = key
            memo = sets[at].leo
            if symbol in memo:
                result = memo[symbol] if memo[symbol] is not None else result
                break
            waiting = sets[at].waiting.get(symbol)
            if not waiting or len(waiting) != 1 or key in visited:
                memo[symbol] = None
                break
            rule, dot, parent_origin = waiting[0]
            if dot + 1 != len(self._rhs[rule]):
                memo[symbol] = None
                break
            visited.add(key)
            chain.append(key)
            result = (rule, dot + 1, parent_origin)
            key = (parent_origin, self._lhs[rule])
        for at, symbol in chain:
            sets[at].leo[symbol] = result
        return result
