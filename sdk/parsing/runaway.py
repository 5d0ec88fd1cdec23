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


MAX_PIECE = 4096
"""The longest repeated piece a watch looks for (a long list item and its comma fit)."""


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
            if value is not None and (not _whole(value) or value < 8):
                raise ValueError(f"RunawayBound.{name} is a whole number >= 8, or None")
        # (Checked here, where it is set: the watch builds a span per piece size on every
        # streamed attempt, so a huge `longest_piece` would cost each attempt before it starts.)
        if not _whole(self.longest_piece) or not 1 <= self.longest_piece <= MAX_PIECE:
            raise ValueError(f"RunawayBound.longest_piece is a whole number from 1 to {MAX_PIECE}")
        if not _whole(self.min_repeats) or self.min_repeats < 2:
            raise ValueError("RunawayBound.min_repeats is a whole number >= 2")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    """One reply's watch: `feed(delta)` after each piece of text, a `Runaway` once it is one.

    A piece costs about its own length: the watch keeps the text's last characters (enough for
    the longest run it looks for) and first asks `str.find`, in C, whether the tail could be a
    repetition at all; only a tail that could is checked piece size by piece size.
    """

    def __init__(self, bound: RunawayBound) -> None:
        self.bound = bound
        self.deltas = 0
        """How many pieces arrived: each one carried at least one token."""
        self._pieces: list[str] = []
        self._length = 0
        self._whitespace_run = 0
        # A piece of `size` characters repeated back to back over `span` characters, for each
        # size looked for, and the text's last `_keep` characters (every span fits in them).
        self._spans: tuple[tuple[int, int], ...] = ()
        if bound.repetition is not None:
            self._spans = tuple(
                (size, size * max(bound.min_repeats, -(-bound.repetition // size)))
                for size in range(1, bound.longest_piece + 1)
            )
        # If the tail is a repetition of a piece of `size` characters over `span` ones, its
        # last `_needle` characters (at most `span - size` for every size) also end `size`
        # characters earlier: if they occur nowhere that close, no size can match.
        self._needle = min((span - size for size, span in self._spans), default=0)
        self._keep = max((span for _, span in self._spans), default=0) + bound.longest_piece
        self._reach = self._needle + bound.longest_piece  # how far back the needle may occur
        self._tail = ""

    @property
    def text(self) -> str:
        """The reply's text so far."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def feed(self, delta: str) -> Runaway | None:
        """Read one more piece of the reply; the runaway its tail now is, if any."""
        if not delta:
            return None
        self.deltas += 1
        self._pieces.append(delta)
        self._length += len(delta)
        stripped = delta.rstrip()
        if stripped:
            self._whitespace_run = len(delta) - len(stripped)
        else:
            self._whitespace_run += len(delta)
        limit = self.bound.whitespace
        if limit is not None and self._whitespace_run >= limit:
            run = self._whitespace_run
            text = self.text
            return Runaway(text[-run:][:1], run, len(text) - run, "whitespace")
        if not self._spans:
            return None
        tail = self._tail + delta
        if len(tail) > self._keep:
            tail = tail[-self._keep :]
        self._tail = tail
        needle = self._needle
        end = len(tail)
        if end <= needle:
            return None
        nearest = max(0, end - self._reach)  # (`find` would read a negative start from the end)
        if tail.find(tail[-needle:], nearest, end - 1) < 0:
            return None
        found = _repetition(tail, self._spans)
        if found is not None and found.start == 0 and self._length > end:
            found = _repetition(self.text, self._spans)  # the run may begin before the tail
        elif found is not None:
            found = Runaway(found.piece, found.length, found.start + self._length - end, found.kind)
        return found


def _repetition(text: str, spans: tuple[tuple[int, int], ...]) -> Runaway | None:
    """The repetition `text` ends with: the first piece size whose span it repeats over."""
    for size, span in spans:
        if span > len(text):
            continue
        piece = text[-size:]
        if text[-span:] == piece * (span // size):
            start = len(text) - span
            # Back to where the run began, a character at a time (its first piece whole).
            while start > 0 and text[start - 1] == text[start - 1 + size]:
                start -= 1
            piece = text[start : start + size]
            kind = "whitespace" if not piece.strip() else "repetition"
            return Runaway(piece, len(text) - start, start, kind)
    return None
