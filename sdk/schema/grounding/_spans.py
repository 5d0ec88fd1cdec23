"""The source as a grammar sees it: the markers of grounded strings, the source cut into chunks
(where a copied value may start and end), each chunk JSON-escaped, and the suffix automaton of
the chunk sequence (the spans of the source, as states and transitions)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Final

from sdk.schema._walk import SchemaWalker

if TYPE_CHECKING:
    import regex

__all__ = [
    "GROUNDED_KEYS",
    "SOURCE_QUOTE_KEY",
    "VERBATIM_KEY",
    "ClusterEdges",
    "SpanAutomaton",
    "cluster_edge",
    "cluster_occurrences",
    "escaped_chunks",
    "grounded_kind",
    "grounded_walker",
    "is_grounded",
    "is_word_chunk",
    "matching_spans",
    "occurrences",
    "source_chunks",
    "span_automaton",
    "whole_span",
]

SOURCE_QUOTE_KEY: Final = "x-source-quote"
"""Schema annotation of a `SourceQuote`: evidence found verbatim in the source (or empty)."""
VERBATIM_KEY: Final = "x-verbatim"
"""Schema annotation of a `Verbatim`: a value copied exactly from the source (never empty,
unless the source is)."""
GROUNDED_KEYS: Final = (SOURCE_QUOTE_KEY, VERBATIM_KEY)
"""The annotations of strings that are spans of the source."""

# Where a copied value may start and end (DESIGN.md, docs/guides/contracts.md "Whole spans"): the
# source is cut into words, runs of whitespace, and any other character alone, and a value is a
# run of whole chunks holding at least one word, its edges not whitespace. A word is a run of
# Unicode word characters (letters, digits, marks, `_`), with a joiner between two of them
# kept inside it (`-`, U+2010, U+2011, `.`, `'`, U+2019, `@`; and `,`, `:`, `/` between two
# digits), so `FH-5079207`, `2.9`, `1,250.00`, `10:30`, `03/04/2026`, `O'Brien` and
# `ops@example.com` are each one word and never cut, while `Ref:A-12` is `Ref`, `:`, `A-12`;
# `Ltd.` at the end of a sentence is the word `Ltd` and the chunk `.`. A character of a script
# written without spaces (Han, Hiragana, Katakana and its prolonged sound mark, Thai, Lao,
# Khmer, Myanmar) is a word by itself: without a dictionary no boundary between its words can be
# found, and one character a word keeps every real word copyable (at the price that a value can
# end inside a longer word of those scripts, which no check without a segmenter can see).
_UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}\u30fc\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
_JOINERS = r"[\-\u2010\u2011.'\u2019@]|(?<=\d)[,:/](?=\d)"
_LETTERS = rf"(?:(?![{_UNSPACED}])\w)+"
_WORD = rf"[{_UNSPACED}]|{_LETTERS}(?:(?:{_JOINERS}){_LETTERS})*"
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class _Chunking:
    chunk: regex.Pattern[str]
    """A word, a run of whitespace, or any other character alone."""
    is_word: regex.Pattern[str]
    word_character: regex.Pattern[str]


@functools.cache
def _chunking() -> _Chunking:
    """The chunk patterns, compiled on first use (the `regex` module, for `\\p{...}`, loads
    when a source is first cut, never for a program that grounds nothing)."""
    import regex

    return _Chunking(
        regex.compile(rf"{_WORD}|\s+|.", regex.DOTALL),
        regex.compile(rf"(?:{_WORD})\Z"),
        regex.compile(r"\w"),
    )


def grounded_kind(node: Mapping[str, Any]) -> str | None:
    """`VERBATIM_KEY` or `SOURCE_QUOTE_KEY` for a grounded string node, else `None`."""
    if node.get(VERBATIM_KEY) is True:
        return VERBATIM_KEY
    if node.get(SOURCE_QUOTE_KEY) is True:
        return SOURCE_QUOTE_KEY
    return None


def grounded_walker(schema: dict[str, Any]) -> SchemaWalker:
    """The parser's schema walker over `schema`, wanting grounded strings: `contains(node)` says
    whether a subschema has one below it (through `$ref`s, cycles included)."""
    return SchemaWalker(schema, lambda node: grounded_kind(node) is not None)


def is_grounded(schema: dict[str, Any]) -> bool:
    """Whether a document of `schema` can hold a `SourceQuote` or `Verbatim` string."""
    return grounded_walker(schema).any_wanted


def source_chunks(source: str) -> list[str]:
    """The source cut into chunks (words, runs of whitespace, any other character alone: see
    `_Chunking.chunk`); they join back into the source."""
    return list(_chunking().chunk.findall(source))


def is_word_chunk(chunk: str) -> bool:
    """Whether a chunk of `source_chunks` is a word (a copied value holds at least one)."""
    return bool(chunk) and _chunking().is_word.match(chunk) is not None


@functools.lru_cache(maxsize=8)
def _boundaries(source: str) -> frozenset[int]:
    """Where chunks of the source start and end (in characters)."""
    offsets, at = {0}, 0
    for chunk in source_chunks(source):
        at += len(chunk)
        offsets.add(at)
    return frozenset(offsets)


def whole_span(value: str, source: str) -> bool:
    """Whether `value` is written in `source` as a run of whole chunks (it starts and ends at
    boundaries: never inside a word or a number), holding a word, its edges not whitespace:
    what a `Verbatim` value must be. An empty value is one only in an empty source."""
    if not value:
        return not source
    if value[0].isspace() or value[-1].isspace() or not _chunking().word_character.search(value):
        return False
    edges = _boundaries(source)
    end = len(value)
    return any(start in edges and start + end in edges for start in occurrences(value, source))


_OVERLAP_ALLOWANCE: Final = 4096
"""Characters `occurrences` may compare again for overlapping occurrences, beyond twice the
text searched, before it leaves `str.find` for its own scan."""


def occurrences(value: str, source: str, low: int = 0, high: int | None = None) -> Iterator[int]:
    """Every start of `value` (not empty) in `source[low:high]`, overlapping ones included, in
    order, in time linear in the text searched and the value, however the value repeats.

    `str.find` (C, linear per search) finds them while they seldom overlap. Restarting it one
    character after an occurrence the value overlaps compares the whole value again, so a
    value that repeats itself inside a text that repeats it too (`"aaa…"` inside a long run of
    `a`s, `"a from a from …"` in a document of that line) costs occurrences x length: a 20 KB
    value in a 200 KB run took 8 s. Once overlaps have cost more than twice the text searched,
    the rest is scanned once with the value's failure function (Knuth-Morris-Pratt)."""
    if not value:
        raise ValueError("occurrences of an empty value")
    high = len(source) if high is None else min(high, len(source))
    length = len(value)
    allowance = 2 * max(high - low, 0) + _OVERLAP_ALLOWANCE
    previous = -length
    start = source.find(value, low, high)
    while start >= 0:
        if start < previous + length:  # it overlaps the last one: found again at a cost
            allowance -= length
            if allowance < 0:
                yield from _scanned(value, source, start, high)
                return
        yield start
        previous = start
        start = source.find(value, start + 1, high)


_INDICATOR_RANGE: Final = ("\U0001f1e6", "\U0001f1ff")
_INDICATORS: Final = "\U0001f1e6-\U0001f1ff"  # the regional indicator symbols, A to Z
_CLUSTER_CONTEXT: Final = 128
"""How far back `cluster_edge` reads a run of extending marks, joiners and regional indicators,
so that a hostile run costs each offset asked this much, never the whole run. No text has a
longer one (a flag is two regional indicators, an emoji sequence a few joiners). Past it, only
the last ones are read (an emoji joined after more marks than this would be taken for a cluster
of its own), and no offset inside a longer run of regional indicators (more than 64 flags
without a space) is an edge: their pairing is not known without the whole run."""


@dataclass(frozen=True, slots=True)
class _Clusters:
    joining: regex.Pattern[str]
    """Read backwards from an offset: the extending marks and joiners right before it, which a
    cluster's rules read beyond the previous character; the one before them starts every rule
    that decides the offset."""
    indicators: regex.Pattern[str]
    """Read backwards from an offset: the regional indicators right before it."""
    before_last: regex.Pattern[str]
    """Every cluster of a text but its last one."""


@functools.cache
def _clusters() -> _Clusters:
    import regex

    return _Clusters(
        regex.compile(r"(?r)[\p{Grapheme_Cluster_Break=Extend}\p{Grapheme_Cluster_Break=ZWJ}]*"),
        regex.compile(rf"(?r)[{_INDICATORS}]*"),
        regex.compile(r"(?:\X(?=\X))*", regex.DOTALL),
    )


def cluster_edge(text: str, at: int) -> bool:
    """Whether offset `at` of `text` is the edge of a user-perceived character (an extended
    grapheme cluster of Unicode UAX #29, as the `regex` module's `\\X` reads it): never between
    a letter and its combining marks, inside an emoji sequence (joined by U+200D, or followed by
    its variation selector or skin tone), between the two regional indicators of a flag, or
    between CR and LF. Only the characters around `at` are read: the one before it, and back to
    the first that is no extending mark or joiner (the rules' whole context), or the regional
    indicators before it (flags pair them from the first), at most `_CLUSTER_CONTEXT`
    characters (see there for longer runs), so asking costs the same in a long text as in a
    short one."""
    if at <= 0 or at >= len(text):
        return True
    before, after = text[at - 1], text[at]
    if before < "\u0300" and after < "\u0300":  # Latin and its symbols: no marks, no joiners
        return before != "\r" or after != "\n"
    clusters = _clusters()
    low = max(at - _CLUSTER_CONTEXT, 0)
    if _INDICATOR_RANGE[0] <= before <= _INDICATOR_RANGE[1] >= after >= _INDICATOR_RANGE[0]:
        # Between two regional indicators: an edge after an even number of them (whole flags).
        # Counted here, for the `regex` module reads a whole run of them back at every `\X`.
        run = clusters.indicators.match(text, low, at)
        if run is None or (run.start() == low > 0 and text[low - 1] >= _INDICATOR_RANGE[0]):
            return False  # a longer run than is read: no edge is vouched for inside it
        return (at - run.start()) % 2 == 0
    run = clusters.joining.match(text, low, at)
    start = max((run.start() if run else at) - 1, 0)
    last = clusters.before_last.match(text, start, at + 1)
    return last is not None and last.end() == at


def cluster_occurrences(
    value: str, source: str, low: int = 0, high: int | None = None
) -> Iterator[int]:
    """The starts of the occurrences of `value` (not empty) in `source[low:high]` that start and
    end on edges of the source's user-perceived characters (`cluster_edge`), in order: `"x"` is
    not one in `"x\\u0301"` (an x with an acute accent), nor a lone emoji in a sequence of
    them joined by U+200D. Each occurrence found (`occurrences`) is read at its two edges only."""
    length = len(value)
    return (
        start
        for start in occurrences(value, source, low, high)
        if cluster_edge(source, start) and cluster_edge(source, start + length)
    )


@dataclass(frozen=True, slots=True)
class ClusterEdges:
    """The edges of a text's user-perceived characters as a container (`at in edges`), read
    around each offset asked (`cluster_edge`), never for the whole text at once."""

    text: str

    def __contains__(self, at: object) -> bool:
        return isinstance(at, int) and 0 <= at <= len(self.text) and cluster_edge(self.text, at)


def _scanned(value: str, source: str, low: int, high: int) -> Iterator[int]:
    """`occurrences` by one pass over `source[low:high]` (Knuth-Morris-Pratt): each character
    is read once, whatever the value's repeats."""
    failure = [0] * len(value)  # the longest proper border of each prefix of the value
    border = 0
    for index in range(1, len(value)):
        while border and value[index] != value[border]:
            border = failure[border - 1]
        if value[index] == value[border]:
            border += 1
        failure[index] = border
    matched, last = 0, len(value) - 1
    for index in range(low, high):
        character = source[index]
        while matched and character != value[matched]:
            matched = failure[matched - 1]
        if character == value[matched]:
            if matched == last:
                yield index - last
                matched = failure[last]
            else:
                matched += 1


def escaped_chunks(source: str) -> list[str]:
    """Each chunk as it is written inside a JSON string: escaped as JSON escapes it (`"`, `\\`,
    control characters), everything else raw. Escaped chunks join into the escaped source, and
    no escape sequence is ever split between two chunks, so any run of them is valid JSON
    string content that decodes to the same run of the source."""
    return [_escaped(chunk) for chunk in source_chunks(source)]


def _escaped(chunk: str) -> str:
    text = json.dumps(chunk, ensure_ascii=False)[1:-1]
    # A lone surrogate (possible in a Python str) cannot be written as UTF-8: its JSON escape
    # decodes back to it.
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


@dataclass
class SpanAutomaton:
    """The suffix automaton of a chunk sequence: every path from state 0 spells a run of
    consecutive chunks (a span), and every span is spelled by exactly one path.

    All transitions into a state carry the same chunk (`label`), so whether a span may end in a
    state (a `Verbatim` never ends on whitespace) is a property of the state.
    """

    transitions: list[dict[str, int]] = field(default_factory=lambda: [{}])
    label: list[str] = field(default_factory=lambda: [""])
    _link: list[int] = field(default_factory=lambda: [-1])
    _length: list[int] = field(default_factory=lambda: [0])
    _last: int = 0

    def __len__(self) -> int:
        return len(self.transitions)

    def length(self, state: int) -> int:
        """The length (in chunks) of the longest span that ends in `state`."""
        return self._length[state]

    def edges(self) -> Iterator[tuple[int, str, int]]:
        """Every transition: (from, chunk, to)."""
        for state, moves in enumerate(self.transitions):
            for chunk, target in moves.items():
                yield state, chunk, target

    def _new(self, length: int, label: str, moves: dict[str, int], link: int) -> int:
        self.transitions.append(moves)
        self.label.append(label)
        self._length.append(length)
        self._link.append(link)
        return len(self.transitions) - 1

    def extend(self, chunk: str) -> None:
        """Append one chunk to the sequence (the standard online construction)."""
        current = self._new(self._length[self._last] + 1, chunk, {}, -1)
        state = self._last
        while state != -1 and chunk not in self.transitions[state]:
            self.transitions[state][chunk] = current
            state = self._link[state]
        if state == -1:
            self._link[current] = 0
        else:
            target = self.transitions[state][chunk]
            if self._length[state] + 1 == self._length[target]:
                self._link[current] = target
            else:
                clone = self._new(
                    self._length[state] + 1,
                    chunk,
                    dict(self.transitions[target]),
                    self._link[target],
                )
                while state != -1 and self.transitions[state].get(chunk) == target:
                    self.transitions[state][chunk] = clone
                    state = self._link[state]
                self._link[target] = clone
                self._link[current] = clone
        self._last = current


def span_automaton(chunks: list[str]) -> SpanAutomaton:
    """The suffix automaton of `chunks` (at most 2n - 1 states, 3n - 4 transitions)."""
    automaton = SpanAutomaton()
    for chunk in chunks:
        automaton.extend(chunk)
    return automaton


def matching_spans(source: str, pattern: str, low: int, longest: int) -> list[str]:
    """Every span (chunk-aligned, not edged with whitespace, holding a word) of at most
    `longest` characters that `pattern` matches, as JSON writes it. Linear in the source: a
    span is never longer."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return []
    chunks = source_chunks(source)
    written = escaped_chunks(source)
    found: set[str] = set()
    for start, chunk in enumerate(chunks):
        if chunk.isspace():
            continue
        text, spelled = "", ""
        for end in range(start, len(chunks)):
            text += chunks[end]
            spelled += written[end]
            if len(text) > longest:
                break
            if (
                not chunks[end].isspace()
                and len(text) >= low
                and compiled.search(text)
                and any(is_word_chunk(chunk) for chunk in chunks[start : end + 1])
            ):
                found.add(spelled)
    return sorted(found)
