"""Sentences drawn from a grammar: what the grammar diff and the tests' fuzzer compare on.

A random derivation from `start` (seeded, so a run can be repeated): an alternative is chosen at
random until the derivation is deep, then the one closest to a finished sentence; each terminal
is replaced by a random string of its language (a character of a class drawn from anywhere in
the class, repetitions a few times). `%ignore`d terminals are put between terminals now and
then. A draw is kept only if the client recognizes it: a greedy split can reject a
concatenation that plain derivation allows, and the sentences must be the grammar's own.

`forced` draws sentences that go through one particular rule alternative or terminal, which is
how the diff asks "is this removed alternative still expressible otherwise?".
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from sdk.grammar._compiled import CompiledGrammar
from sdk.grammar._compiled import GrammarRule
from sdk.grammar._compiled import Symbol
from sdk.grammar._earley import Recognizer
from sdk.schema import _regex as rx

__all__ = ["Sampler"]

_MAX_DEPTH = 12
_MAX_SYMBOLS = 400
_EXTRA_REPEATS = 3


@dataclass
class _Draw:
    rng: random.Random
    budget: int


class Sampler:
    """Draws sentences from one compiled grammar."""

    def __init__(self, grammar: CompiledGrammar) -> None:
        self.grammar = grammar
        self.recognizer = Recognizer(grammar)
        self.options: dict[str, list[GrammarRule]] = {}
        for rule in grammar.rules:
            self.options.setdefault(rule.origin, []).append(rule)
        self.height = self._heights()

    def _heights(self) -> dict[str, int]:
        """For each rule, the fewest derivation levels to a string of terminals."""
        height: dict[str, int] = {}
        changed = True
        while changed:
            changed = False
            for rule in self.grammar.rules:
                needed = [height.get(s.name) for s in rule.expansion if not s.is_term]
                if any(h is None for h in needed):
                    continue
                value = 1 + max((h for h in needed if h is not None), default=0)
                if value < height.get(rule.origin, value + 1):
                    height[rule.origin] = value
                    changed = True
        return height

    def sentences(
        self, count: int, *, seed: int = 0, through: GrammarRule | str | None = None
    ) -> list[str]:
        """Up to `count` distinct sentences (fewer when the grammar has fewer, or draws fail).

        `through` forces every draw to use that rule alternative (a `GrammarRule`) or that
        terminal (its name) at least once.
        """
        rng = random.Random(seed)
        found: dict[str, None] = {}
        for _ in range(count * 4):
            if len(found) >= count:
                break
            text = self._draw(rng, through)
            if text is not None and text not in found and self.recognizer.run(text).accepted:
                found[text] = None
        return list(found)

    def _draw(self, rng: random.Random, through: GrammarRule | str | None) -> str | None:
        draw = _Draw(rng, _MAX_SYMBOLS)
        try:
            if through is None:
                return "".join(self._expand("start", draw, 0, None))
            path = self._path_to(through, rng)
            if path is None:
                return None
            return "".join(self._expand("start", draw, 0, path))
        except _TooLong:
            return None

    def _path_to(self, target: GrammarRule | str, rng: random.Random) -> list[GrammarRule] | None:
        """A chain of alternatives from `start` whose last one uses `target` (breadth first)."""

        def uses(rule: GrammarRule) -> bool:
            if isinstance(target, str):
                return any(s.is_term and s.name == target for s in rule.expansion)
            return rule == target

        queue: list[tuple[str, list[GrammarRule]]] = [("start", [])]
        seen = {"start"}
        while queue:
            name, path = queue.pop(0)
            rules = list(self.options.get(name, ()))
            rng.shuffle(rules)
            for rule in rules:
                if uses(rule):
                    return [*path, rule]
                for symbol in rule.expansion:
                    if not symbol.is_term and symbol.name not in seen:
                        seen.add(symbol.name)
                        queue.append((symbol.name, [*path, rule]))
        return None

    def _expand(
        self, name: str, draw: _Draw, depth: int, path: list[GrammarRule] | None
    ) -> Iterator[str]:
        """The pieces of a derivation of `name`, left to right (iterative over siblings)."""
        rule = self._choose(name, draw, depth, path)
        forced_child = None
        if path and path[0] == rule and len(path) > 1:
            forced_child = path[1].origin
        rest = path[1:] if path else None
        for symbol in rule.expansion:
            draw.budget -= 1
            if draw.budget < 0:
                raise _TooLong
            if symbol.is_term:
                yield from self._ignored(draw)
                yield self.terminal_text(symbol, draw.rng)
                continue
            child_path = None
            if forced_child is not None and symbol.name == forced_child:
                child_path, forced_child = rest, None
            yield from self._expand(symbol.name, draw, depth + 1, child_path)

    def _choose(
        self, name: str, draw: _Draw, depth: int, path: list[GrammarRule] | None
    ) -> GrammarRule:
        if path:
            return path[0]
        options = self.options[name]
        if depth < _MAX_DEPTH:
            return draw.rng.choice(options)
        return min(options, key=lambda rule: self._rule_height(rule))

    def _rule_height(self, rule: GrammarRule) -> int:
        heights = [self.height.get(s.name, 10**6) for s in rule.expansion if not s.is_term]
        return max(heights, default=0)

    def _ignored(self, draw: _Draw) -> Iterator[str]:
        if self.grammar.ignore and draw.rng.random() < 0.3:
            name = draw.rng.choice(self.grammar.ignore)
            yield self.string(self.grammar.terminals[name].node, draw.rng)

    def terminal_text(self, symbol: Symbol, rng: random.Random) -> str:
        """A random string of a terminal's language."""
        terminal = self.grammar.terminals[symbol.name]
        if terminal.literal is not None:
            return terminal.literal
        return self.string(terminal.node, rng)

    def string(self, node: rx.Node, rng: random.Random) -> str:
        """A random string of a regex tree's language."""
        if isinstance(node, rx.CharSet):
            return chr(_pick(node.ranges, rng))
        if isinstance(node, rx.Seq):
            return "".join(self.string(item, rng) for item in node.items)
        if isinstance(node, rx.Alt):
            return self.string(rng.choice(node.options), rng)
        high = node.lo + _EXTRA_REPEATS if node.hi is None else node.hi
        times = rng.randint(node.lo, min(high, node.lo + _EXTRA_REPEATS))
        return "".join(self.string(node.node, rng) for _ in range(times))


class _TooLong(Exception):
    """A derivation outgrew its symbol budget (a draw that recursion keeps growing)."""


def _pick(ranges: rx.Ranges, rng: random.Random) -> int:
    """A code point of the set: a range at random, then a point at random inside it, so that
    small ranges (the ones a grammar spells out) are drawn as often as the wide ones."""
    lo, hi = rng.choice(ranges)
    if rng.random() < 0.3:
        return rng.choice((lo, hi))
    return rng.randint(lo, hi)
