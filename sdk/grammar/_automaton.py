"""A terminal's language as an automaton: how far a text stays inside it, and where it is whole.

Built from the syntax tree `sdk.schema._regex` reads a terminal into (the same tree the GBNF
converter writes out), so the client recognizes exactly the language the converter sends: a
Thompson NFA over character ranges, turned into a DFA lazily, one (state, character) step at a
time, as texts need it. Every NFA state can still reach the end (the tree has no empty class),
so a state is dead only when it is empty.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import pairwise

from sdk.schema import _regex as rx

__all__ = ["MAX_STATES", "Automaton", "TerminalTooLarge"]

MAX_STATES = 20_000
"""NFA states one terminal may need (`/x{1,5000}/` needs as many as it repeats)."""

_DEAD = -1


class TerminalTooLarge(ValueError):
    """A terminal needs more automaton states than `MAX_STATES`."""


class _Edge:
    """A transition on any character of `ranges`, kept as two sorted lists for bisection."""

    __slots__ = ("highs", "lows", "target")

    def __init__(self, ranges: rx.Ranges, target: int) -> None:
        self.lows = [lo for lo, _ in ranges]
        self.highs = [hi for _, hi in ranges]
        self.target = target

    def takes(self, point: int) -> bool:
        index = bisect_right(self.lows, point) - 1
        return index >= 0 and point <= self.highs[index]


class _Builder:
    """Thompson construction: each fragment is (entry state, exit state)."""

    def __init__(self) -> None:
        self.edges: list[list[_Edge]] = []
        self.empty: list[list[int]] = []

    def state(self) -> int:
        if len(self.edges) >= MAX_STATES:
            raise TerminalTooLarge(f"a terminal needs more than {MAX_STATES} automaton states")
        self.edges.append([])
        self.empty.append([])
        return len(self.edges) - 1

    def fragment(self, node: rx.Node) -> tuple[int, int]:
        if isinstance(node, rx.CharSet):
            entry, exit_ = self.state(), self.state()
            self.edges[entry].append(_Edge(node.ranges, exit_))
            return entry, exit_
        if isinstance(node, rx.Seq):
            return self.chain([self.fragment(item) for item in node.items])
        if isinstance(node, rx.Alt):
            entry, exit_ = self.state(), self.state()
            for option in node.options:
                inner_entry, inner_exit = self.fragment(option)
                self.empty[entry].append(inner_entry)
                self.empty[inner_exit].append(exit_)
            return entry, exit_
        return self.repeat(node)

    def chain(self, parts: list[tuple[int, int]]) -> tuple[int, int]:
        if not parts:
            state = self.state()
            return state, state
        for (_, exit_), (entry, _) in pairwise(parts):
            self.empty[exit_].append(entry)
        return parts[0][0], parts[-1][1]

    def repeat(self, node: rx.Repeat) -> tuple[int, int]:
        parts = [self.fragment(node.node) for _ in range(node.lo)]
        if node.hi is None:
            entry, exit_ = self.state(), self.state()
            inner_entry, inner_exit = self.fragment(node.node)
            self.empty[entry] += [inner_entry, exit_]
            self.empty[inner_exit] += [inner_entry, exit_]
            parts.append((entry, exit_))
        else:
            end = self.state()
            optional = []
            for _ in range(node.hi - node.lo):
                entry, exit_ = self.fragment(node.node)
                self.empty[entry].append(end)  # stop before this copy
                optional.append((entry, exit_))
            parts.extend(optional)
            parts.append((end, end))
        return self.chain(parts)


class Automaton:
    """The DFA of one terminal, built lazily; states are ints, `-1` is dead."""

    def __init__(self, node: rx.Node) -> None:
        builder = _Builder()
        entry, self._final = builder.fragment(node)
        self._edges = builder.edges
        self._empty = builder.empty
        self._sets: list[frozenset[int]] = []
        self._ids: dict[frozenset[int], int] = {}
        self._steps: list[dict[str, int]] = []
        self._accepting: list[bool] = []
        self._ranges: dict[int, list[tuple[int, int, int]]] = {}
        self.start = self._intern(self._closure({entry}))

    def _closure(self, states: set[int]) -> frozenset[int]:
        stack = list(states)
        seen = set(states)
        while stack:
            for nxt in self._empty[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return frozenset(seen)

    def _intern(self, states: frozenset[int]) -> int:
        known = self._ids.get(states)
        if known is not None:
            return known
        self._ids[states] = len(self._sets)
        self._sets.append(states)
        self._steps.append({})
        self._accepting.append(self._final in states)
        return len(self._sets) - 1

    def step(self, state: int, char: str) -> int:
        """The state after reading `char`, or -1 when no string of the terminal continues so."""
        cached = self._steps[state].get(char)
        if cached is not None:
            return cached
        point = ord(char)
        reached = {
            edge.target
            for nfa in self._sets[state]
            for edge in self._edges[nfa]
            if edge.takes(point)
        }
        result = self._intern(self._closure(reached)) if reached else _DEAD
        self._steps[state][char] = result
        return result

    def accepting(self, state: int) -> bool:
        """Whether the text read so far is a whole string of the terminal."""
        return self._accepting[state]

    def extent(self, text: str, pos: int) -> tuple[int, bool]:
        """How many characters from `pos` stay a prefix of some string of the terminal, and
        whether those characters are a whole string of it."""
        length, state = self.walk(text, pos)
        return length, self._accepting[state]

    def walk(self, text: str, pos: int) -> tuple[int, int]:
        """How many characters from `pos` stay a prefix of some string, and the state there."""
        state, length, steps = self.start, 0, self._steps
        for index in range(pos, len(text)):
            char = text[index]
            nxt = steps[state].get(char)
            if nxt is None:
                nxt = self.step(state, char)
            if nxt == _DEAD:
                break
            state, length = nxt, length + 1
        return length, state

    def next_ranges(self, state: int) -> rx.Ranges:
        """The characters that keep a state alive (for the converter's checks and sampling)."""
        pieces = [
            (lo, hi)
            for nfa in self._sets[state]
            for edge in self._edges[nfa]
            for lo, hi in zip(edge.lows, edge.highs, strict=True)
        ]
        return rx.normalize(pieces)

    def step_ranges(self, state: int) -> list[tuple[int, int, int]]:
        """The state's transitions as sorted, disjoint (first, last character, next state)."""
        known = self._ranges.get(state)
        if known is not None:
            return known
        cuts: set[int] = set()
        for nfa in self._sets[state]:
            for edge in self._edges[nfa]:
                for lo, hi in zip(edge.lows, edge.highs, strict=True):
                    cuts.update((lo, hi + 1))
        out: list[tuple[int, int, int]] = []
        for lo, nxt_lo in pairwise(sorted(cuts)):
            nxt = self.step(state, chr(lo))
            if nxt != _DEAD:
                out.append((lo, nxt_lo - 1, nxt))
        self._ranges[state] = out
        return out
