"""Runaway output, seen while it streams: a run of whitespace, or one piece of text repeated back
to back, past a bound (`RunawayBound`).

A model held to a grammar can still write blanks or repeat one list item until `max_tokens`
(`"products": ["Dmitri Smith3", "Dmitri Smith3", ...`), and every one of those tokens is paid
for. `RunawayWatch` reads a reply's text as it arrives and says, as soon as the tail of the text
is such a run, what the run is; the streaming loop then cancels the request and the attempt ends
in `RunawayOutput` (its text and the tokens spent kept), retried with feedback like an invalid
reply. Pure: text in, a verdict out; checking a piece costs the length of the tail it reads,
never the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_RUNAWAY", "Runaway", "RunawayBound", "RunawayWatch"]


@dataclass(frozen=True, slots=True)
class RunawayBound:
    """When a reply is a runaway: `whitespace` whitespace characters in a row, or a piece of
    at most `longest_piece` characters repeated back to back over `repetition` characters (and
    at least `min_repeats` times). `None` turns a check off."""

    whitespace: int | None = 64
    repetition: int | None = 240
    longest_piece: int = 64
    min_repeats: int = 4

    def __post_init__(self) -> None:
        for name in ("whitespace", "repetition"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 8):  # fmt: skip
                raise ValueError(f"RunawayBound.{name} is a whole number >= 8, or None")
        if self.longest_piece < 1 or self.min_repeats < 2:
            raise ValueError("RunawayBound needs longest_piece >= 1 and min_repeats >= 2")


DEFAULT_RUNAWAY = RunawayBound()
"""The bound streaming calls watch for unless told otherwise (`runaway=`)."""


@dataclass(frozen=True, slots=True)
class Runaway:
    """A runaway seen: the repeated piece, how many characters the run covers, where it starts."""

    piece: str
    length: int
    start: int
    kind: str
    """`"whitespace"` or `"repetition"`."""

    def describe(self) -> str:
        shown = self.piece if len(self.piece) <= 40 else self.piece[:37] + "..."
        if self.kind == "whitespace":
            return f"{self.length} whitespace characters in a row"
        times = self.length // max(len(self.piece), 1)
        return f"{shown!r} repeated {times} times in a row ({self.length} characters)"


class RunawayWatch:
    """One reply's watch: `feed(delta)` after each piece of text, a `Runaway` once it is one."""

    def __init__(self, bound: RunawayBound) -> None:
        self.bound = bound
        self.text = ""
        self.deltas = 0
        """How many pieces arrived: each one carried at least one token."""
        self._whitespace_run = 0

    def feed(self, delta: str) -> Runaway | None:
        """Read one more piece of the reply; the runaway its tail now is, if any."""
        if not delta:
            return None
        self.deltas += 1
        self.text += delta
        stripped = delta.rstrip()
        if stripped:
            self._whitespace_run = len(delta) - len(stripped)
        else:
            self._whitespace_run += len(delta)
        limit = self.bound.whitespace
        if limit is not None and self._whitespace_run >= limit:
            run = self._whitespace_run
            return Runaway(self.text[-run:][:1], run, len(self.text) - run, "whitespace")
        return self._repetition()

    def _repetition(self) -> Runaway | None:
        bound = self.bound
        if bound.repetition is None:
            return None
        text = self.text
        for size in range(1, bound.longest_piece + 1):
            repeats = max(bound.min_repeats, -(-bound.repetition // size))
            span = size * repeats
            if span > len(text):
                continue
            piece = text[-size:]
            if text[-span:] == piece * repeats:
                start = len(text) - span
                # Back to where the run began, a character at a time (its first piece whole).
                while start > 0 and text[start - 1] == text[start - 1 + size]:
                    start -= 1
                piece = text[start : start + size]
                kind = "whitespace" if not piece.strip() else "repetition"
                return Runaway(piece, len(text) - start, start, kind)
        return None
