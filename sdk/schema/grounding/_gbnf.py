"""The grounded grammar in GBNF, for llama.cpp: the SDK's schema converter (`sdk.schema.gbnf`),
with every `SourceQuote` and `Verbatim` string written as a span of the source.

GBNF has no substring operator, so the spans are written out as the rules of the source's suffix
automaton over its chunks: one rule per state, one alternative per transition, about two states
and three transitions per chunk. The grammar therefore grows linearly with the source (the
builder is linear too), and llama.cpp's grammar engine pays for it at the value's first token,
where every distinct chunk is an alternative: callers bound the source (`GBNF_SOURCE_LIMIT`, set
from measurements on the real llama-server, `bench/grounding_cost.py`) and above it send the
plain grammar, the parser checking the values after.

As in the Lark builder, a span neither starts nor ends with whitespace, a `Verbatim` is never
empty (but `""` for an empty source) and a `SourceQuote` may be empty. GBNF cannot intersect,
so a field's `pattern` is applied by listing the spans that match it, where the pattern (or
`maxLength`) bounds the length (an id: the list is short, and found in time linear in the
source); a nullable field whose pattern no span matches is left `null` alone, as in Lark. An
unbounded pattern, and length bounds alone, are left to the parser: there the grammar is wider
than the schema, where the plain converter is never wider.
"""

from __future__ import annotations

from typing import Any
from typing import Final

from sdk.schema.gbnf._compiler import Compiler
from sdk.schema.gbnf._gbnf_text import join_terms
from sdk.schema.gbnf._gbnf_text import literal
from sdk.schema.gbnf._keywords import Whitespace
from sdk.schema.grounding._spans import VERBATIM_KEY
from sdk.schema.grounding._spans import SpanAutomaton
from sdk.schema.grounding._spans import escaped_chunks
from sdk.schema.grounding._spans import grounded_kind
from sdk.schema.grounding._spans import is_word_chunk
from sdk.schema.grounding._spans import longest_match
from sdk.schema.grounding._spans import matching_spans
from sdk.schema.grounding._spans import source_chunks
from sdk.schema.grounding._spans import span_automaton

__all__ = ["GBNF_SOURCE_LIMIT", "grounded_gbnf"]

GBNF_SOURCE_LIMIT: Final = 100_000
"""Longest source (in characters) whose spans a llama.cpp request carries as grammar rules; a
longer one is checked after parsing instead. Set from `bench/grounding_cost.py` on the real
llama-server: at 100 KB of source the grammar is about 1.4 MB and still takes well under a
second to build and to parse, and a request's time grows by about a tenth; past that, the
grammar's size (about 14 bytes per source character) goes on growing for nothing a server
with a few thousand tokens of context can use."""


def grounded_gbnf(
    schema: dict[str, Any], source: str, *, whitespace: Whitespace = "bounded"
) -> str:
    """A GBNF grammar (start rule `root`) for `schema`'s documents, grounded strings confined to
    spans of `source`; `UnsupportedSchema` as `sdk.schema.gbnf.to_gbnf` for the rest."""
    if whitespace not in ("bounded", "compact"):
        raise ValueError(f"whitespace must be 'bounded' or 'compact', not {whitespace!r}")
    return _GroundedCompiler(schema, whitespace, source).compile()


class _GroundedCompiler(Compiler):
    """The schema converter, with grounded strings written as source spans."""

    def __init__(self, root: dict[str, Any], whitespace: Whitespace, source: str) -> None:
        super().__init__(root, whitespace)
        self.source = source
        self.values: dict[bool, str] = {}  # verbatim? -> the rule of the quoted value
        self.span_matches: dict[tuple[str, int, int], list[str]] = {}
        self.starts: dict[bool, str] = {}  # holding a word? -> the rule of a non-empty span

    def string(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        kind = grounded_kind(node)
        if kind is None:
            return super().string(node, pointer, hint)
        verbatim = kind == VERBATIM_KEY
        quote = literal('"')
        if not self.source:
            return self.define("source-empty", join_terms(quote, quote))
        matching = self.matching(node)
        if matching is not None:
            if not matching:  # no span has the pattern's form: the parser will say so
                return super().string(node, pointer, hint)
            options = " | ".join(literal(value) for value in matching)
            empty = "" if verbatim else '| ""'
            return self.define(f"{hint}-span", join_terms(quote, f"( {options} {empty})", quote))
        known = self.values.get(verbatim)
        if known is None:
            span = self.spans(word=verbatim)
            known = self.define(
                "source-verbatim" if verbatim else "source-quote",
                join_terms(quote, span if verbatim else f"{span}?", quote),
            )
            self.values[verbatim] = known
        return known

    def writable(self, options: list[Any]) -> list[Any]:
        """A union's branches without the grounded strings that no span of the source can fill
        (an id's pattern matched nowhere): `null` is then what is left of `Verbatim | None`."""
        kept = [o for o in options if not (isinstance(o, dict) and self.matching(o) == [])]
        return kept or options

    def matching(self, node: dict[str, Any]) -> list[str] | None:
        """For a grounded string with a `pattern` that bounds its length: the spans (as JSON
        writes them) that match it and the length bounds; `None` when there is no such pattern,
        and the span rules apply (the parser checks the pattern after)."""
        pattern = node.get("pattern")
        if grounded_kind(node) is None or not isinstance(pattern, str) or not self.source:
            return None
        longest = longest_match(pattern, node.get("maxLength"))
        if longest is None:
            return None
        low = node.get("minLength", 0)
        key = (pattern, low, longest)
        found = self.span_matches.get(key)
        if found is None:
            found = matching_spans(self.source, pattern, low, longest)
            self.span_matches[key] = found
        return found

    def spans(self, *, word: bool) -> str:
        """The rule of a non-empty span that neither starts nor ends with whitespace (`word`:
        holding at least one word, as a `Verbatim` must): the automaton's states as rules,
        written once per kind for every grounded string in the grammar. With `word`, a state
        is paired with whether a word was passed yet; only paths from the start through
        punctuation alone are doubled, so the size stays about the same."""
        known = self.starts.get(word)
        if known is not None:
            return known
        written = escaped_chunks(self.source)
        automaton = span_automaton(written)
        raw = source_chunks(self.source)
        # The automaton reads chunks as JSON writes them: `\\n` is whitespace too.
        spaces = {w for w, chunk in zip(written, raw, strict=True) if chunk.isspace()}
        words = {w for w, chunk in zip(written, raw, strict=True) if is_word_chunk(chunk)}
        moves = _useful_moves(automaton, spaces, words if word else None)
        names: dict[tuple[int, bool], str] = {}
        for pair in moves:
            if moves[pair] or pair[0] == 0:
                names[pair] = self.unique("span")
                self.pending.add(names[pair])  # reserved: the next name is another one
        for pair, name in names.items():
            options = [
                join_terms(literal(chunk), names.get(target, "")) for chunk, target in moves[pair]
            ]
            body = " | ".join(options)
            if pair[1] and _may_end(automaton, pair[0], spaces):
                body = f"( {body} )?"
            self.pending.discard(name)
            self.rules[name] = body
        self.starts[word] = names[(0, not word)]
        return self.starts[word]


def _may_end(automaton: SpanAutomaton, state: int, spaces: set[str]) -> bool:
    """Whether a span may end in `state`: not at the start, nor after a whitespace chunk."""
    return state != 0 and automaton.label[state] not in spaces


def _useful_moves(
    automaton: SpanAutomaton, spaces: set[str], words: set[str] | None
) -> dict[tuple[int, bool], list[tuple[str, tuple[int, bool]]]]:
    """Per (state, word passed) pair a span can go through, the transitions that can still lead
    to an end: from the start, no whitespace chunk (a span does not start with one); with
    `words`, an end only after a word (`None`: every pair counts as past a word). Transitions
    lead to longer states, so one pass from the longest state down settles which pairs can
    end."""
    order = sorted(range(len(automaton)), key=automaton.length, reverse=True)
    alive: dict[tuple[int, bool], bool] = {}
    for seen in (True, False):
        for state in order:
            ends = seen and _may_end(automaton, state, spaces)
            alive[state, seen] = ends or any(
                alive[target, seen or words is None or chunk in words]
                for chunk, target in automaton.transitions[state].items()
            )
    moves: dict[tuple[int, bool], list[tuple[str, tuple[int, bool]]]] = {}
    pending = [(0, words is None)]
    while pending:
        pair = pending.pop()
        if pair in moves:
            continue
        state, seen = pair
        moves[pair] = []
        for chunk, target in automaton.transitions[state].items():
            after = (target, seen or words is None or chunk in words)
            if alive[after] and not (state == 0 and chunk in spaces):
                moves[pair].append((chunk, after))
        pending.extend(after for _, after in moves[pair])
    return moves
