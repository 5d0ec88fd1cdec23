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

A string under an `Anchor` with `after` labels is a span of the anchor's regions only
(`anchor_regions`): the automaton of the regions' chunks, a break between two regions that no
span crosses. Where no region holds a word, a nullable field is left `null` alone, and one that
cannot be null has no grounded grammar (`GroundingUnsupported`: the plain grammar goes, and the
parser refuses the value after).
"""

from __future__ import annotations

from typing import Any
from typing import Final

from sdk.schema import _regex as rx
from sdk.schema.gbnf._compiler import Compiler
from sdk.schema.gbnf._gbnf_text import join_terms
from sdk.schema.gbnf._gbnf_text import literal
from sdk.schema.gbnf._keywords import Whitespace
from sdk.schema.grounding._anchors import ANCHOR_KEY
from sdk.schema.grounding._anchors import Anchor
from sdk.schema.grounding._anchors import anchor_of
from sdk.schema.grounding._anchors import anchor_regions
from sdk.schema.grounding._errors import GroundingUnsupported
from sdk.schema.grounding._spans import VERBATIM_KEY
from sdk.schema.grounding._spans import SpanAutomaton
from sdk.schema.grounding._spans import escaped_chunks
from sdk.schema.grounding._spans import grounded_kind
from sdk.schema.grounding._spans import is_word_chunk
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

# Between two regions' chunks in an anchored span automaton: never a chunk (a JSON-escaped chunk
# holds no raw control character), and its transitions are removed.
_BREAK: Final = "\x00"


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
        # By (verbatim?, anchor): the rule of the quoted value.
        self.values: dict[tuple[bool, Anchor | None], str] = {}
        self.span_matches: dict[tuple[str, int, int, Anchor | None], list[str]] = {}
        # By (holding a word?, anchor): the rule of a non-empty span.
        self.starts: dict[tuple[bool, Anchor | None], str] = {}
        self.anchor: Anchor | None = None  # the anchor of the node being written, if any
        self.region_texts: dict[Anchor, list[str]] = {}
        # Under each anchor, its own memo of terms and its own `$ref` rules: a subschema (a
        # shared sub-model) reached under two anchors is two rules, each confined by its own.
        self.anchored_terms: dict[Anchor, dict[tuple[int, frozenset[str]], Any]] = {}
        self.anchored_refs: dict[Anchor, dict[str, str]] = {}

    def node(self, node: Any, pointer: str, hint: str, guard: frozenset[str]) -> str:
        if self.anchor is None:
            return super().node(node, pointer, hint, guard)
        outer, self.terms = self.terms, self.anchored_terms.setdefault(self.anchor, {})
        try:
            return super().node(node, pointer, hint, guard)
        finally:
            self.terms = outer

    def ref(
        self,
        ref: Any,
        pointer: str,
        hint: str,
        guard: frozenset[str],
        siblings: dict[str, Any] | None = None,
    ) -> str:
        if self.anchor is None:
            return super().ref(ref, pointer, hint, guard, siblings)
        outer, self.refs = self.refs, self.anchored_refs.setdefault(self.anchor, {})
        try:
            return super().ref(ref, pointer, hint, guard, siblings)
        finally:
            self.refs = outer

    def defer(self, name: str, schema: Any, pointer: str, guard: frozenset[str]) -> None:
        """A `$ref`'s rule is written later, outside the anchor it was reached under: the
        schema carries that anchor along (its own, if it has one, is innermost and decides)."""
        if self.anchor is not None and isinstance(schema, dict) and ANCHOR_KEY not in schema:
            schema = {**schema, ANCHOR_KEY: self.anchor.to_json()}
        super().defer(name, schema, pointer, guard)

    def walk(self, node: dict[str, Any], pointer: str, hint: str, guard: frozenset[str]) -> str:
        anchor = anchor_of(node)
        if anchor is None:
            return super().walk(node, pointer, hint, guard)
        # The innermost anchor decides, as in the Lark builder; only `after` labels confine.
        outer, self.anchor = self.anchor, anchor if anchor.after else None
        try:
            return super().walk(node, pointer, hint, guard)
        finally:
            self.anchor = outer

    def string(self, node: dict[str, Any], pointer: str, hint: str) -> str:
        kind = grounded_kind(node)
        if kind is None:
            return super().string(node, pointer, hint)
        verbatim = kind == VERBATIM_KEY
        quote = literal('"')
        if not self.source:
            return self.define("source-empty", join_terms(quote, quote))
        if self.anchor is not None and not self.regions(self.anchor):
            if not verbatim:  # a quote may be empty: "no evidence" is all that is left
                return self.define("source-empty", join_terms(quote, quote))
            labels = ", ".join(repr(label) for label in self.anchor.after)
            raise GroundingUnsupported(
                pointer,
                f"no line of the source has one of its anchor's labels ({labels}) and a word "
                "after it, and the field cannot be null",
            )
        matching = self.matching(node)
        if matching is not None:
            if not matching:  # no span has the pattern's form: the parser will say so
                return super().string(node, pointer, hint)
            options = " | ".join(literal(value) for value in matching)
            empty = "" if verbatim else '| ""'
            return self.define(f"{hint}-span", join_terms(quote, f"( {options} {empty})", quote))
        known = self.values.get((verbatim, self.anchor))
        if known is None:
            span = self.spans(word=verbatim)
            name = "source-verbatim" if verbatim else "source-quote"
            known = self.define(
                name if self.anchor is None else f"anchored-{name.split('-')[1]}",
                join_terms(quote, span if verbatim else f"{span}?", quote),
            )
            self.values[(verbatim, self.anchor)] = known
        return known

    def writable(self, options: list[Any]) -> list[Any]:
        """A union's branches without the grounded strings that no span of the source can fill
        (an id's pattern matched nowhere, an anchor whose labels are not in the source): `null`
        is then what is left of `Verbatim | None`."""
        kept = [o for o in options if not (isinstance(o, dict) and self.unfillable(o))]
        return kept or options

    def unfillable(self, node: dict[str, Any]) -> bool:
        """Whether no span of the source can be this grounded `Verbatim` (a quote can always
        be empty)."""
        if grounded_kind(node) != VERBATIM_KEY or not self.source:
            return False
        # The branch's own anchor, if it has one, is innermost and decides (as in `walk`, which
        # sets it only once it reaches the branch): `Annotated[Verbatim, Anchor(...)] | None`.
        own = anchor_of(node)
        anchor = self.anchor if own is None else own if own.after else None
        if anchor is not None and not self.regions(anchor):
            return True
        return self.matching(node) == []

    def regions(self, anchor: Anchor) -> list[str]:
        """The texts of the regions `anchor`'s labels open (`anchor_regions`), those holding a
        word only (a `Verbatim` holds one): the part of the source its spans come from."""
        known = self.region_texts.get(anchor)
        if known is None:
            texts = [self.source[low:high] for low, high in anchor_regions(self.source, anchor)]
            words = (t for t in texts if any(is_word_chunk(c) for c in source_chunks(t)))
            known = list(dict.fromkeys(words))  # a label met many times: each text once
            self.region_texts[anchor] = known
        return known

    def matching(self, node: dict[str, Any]) -> list[str] | None:
        """For a grounded string with a `pattern` that bounds its length: the spans (as JSON
        writes them) that match it and the length bounds, from the anchor's regions where the
        string is anchored; `None` when there is no such pattern, and the span rules apply
        (the parser checks the pattern after)."""
        pattern = node.get("pattern")
        if grounded_kind(node) is None or not isinstance(pattern, str) or not self.source:
            return None
        longest = rx.longest_match(pattern, node.get("maxLength"))
        if longest is None:
            return None
        low = node.get("minLength", 0)
        key = (pattern, low, longest, self.anchor)
        found = self.span_matches.get(key)
        if found is None:
            texts = [self.source] if self.anchor is None else self.regions(self.anchor)
            found = sorted(
                {span for text in texts for span in matching_spans(text, pattern, low, longest)}
            )
            self.span_matches[key] = found
        return found

    def spans(self, *, word: bool) -> str:
        """The rule of a non-empty span that neither starts nor ends with whitespace (`word`:
        holding at least one word, as a `Verbatim` must): the automaton's states as rules,
        written once per kind (and anchor) for every grounded string in the grammar. With
        `word`, a state is paired with whether a word was passed yet; only paths from the start
        through punctuation alone are doubled, so the size stays about the same. Anchored: the
        automaton of its regions' chunks, a break between two regions that no span crosses."""
        key = (word, self.anchor)
        known = self.starts.get(key)
        if known is not None:
            return known
        texts = [self.source] if self.anchor is None else self.regions(self.anchor)
        written: list[str] = []
        raw: list[str] = []
        for text in texts:
            if written:
                written.append(_BREAK)
                raw.append(_BREAK)
            written += escaped_chunks(text)
            raw += source_chunks(text)
        automaton = span_automaton(written)
        for moves_of_state in automaton.transitions:
            moves_of_state.pop(_BREAK, None)  # a span never crosses from one region to the next
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
        self.starts[key] = names[(0, not word)]
        return self.starts[key]


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
