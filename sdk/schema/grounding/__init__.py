"""Grounded grammars: a contract's grammar in which every `SourceQuote` and `Verbatim` string can
only be a span of the source document. Sans-IO builders, one per grammar engine:

- `grounded_lark(schema, source, json_options=...)`: llguidance's Lark (the embedded provider,
  vLLM's guidance backend): the substring lexeme for grounded strings, `%json` for the rest;
- `grounded_gbnf(schema, source)`: GBNF for llama.cpp, the spans written as the rules of the
  source's suffix automaton beside the SDK's own schema converter; its size grows with the source,
  so callers bound the source (`GBNF_SOURCE_LIMIT`) and check after parsing above it.

Both cut the source into the same chunks (`source_chunks`: a value starts and ends on a word,
whitespace or punctuation boundary, never inside a word or a number, and a `Verbatim` holds a
word: `whole_span` is the check after parsing) and write each chunk as a JSON string escapes
it, so a span is always valid JSON string content and an escape sequence is never cut in half.

An `Anchor` on a `Verbatim` field says whose value it is: the regions its labels open (both
grammars offer only their spans, from `anchor_regions`) and the labels its value never follows;
the parser checks both after decoding (`anchor_problem`).
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_names
from sdk._lazy import listed
from sdk.schema.grounding._anchors import ANCHOR_KEY
from sdk.schema.grounding._anchors import Anchor
from sdk.schema.grounding._anchors import anchor_of
from sdk.schema.grounding._anchors import anchor_problem
from sdk.schema.grounding._anchors import anchor_regions
from sdk.schema.grounding._anchors import anchored
from sdk.schema.grounding._anchors import branch_anchors
from sdk.schema.grounding._anchors import load_anchors
from sdk.schema.grounding._errors import GroundingUnsupported
from sdk.schema.grounding._spans import GROUNDED_KEYS
from sdk.schema.grounding._spans import SOURCE_QUOTE_KEY
from sdk.schema.grounding._spans import VERBATIM_KEY
from sdk.schema.grounding._spans import SpanAutomaton
from sdk.schema.grounding._spans import cluster_edge
from sdk.schema.grounding._spans import cluster_occurrences
from sdk.schema.grounding._spans import escaped_chunks
from sdk.schema.grounding._spans import grounded_kind
from sdk.schema.grounding._spans import is_grounded
from sdk.schema.grounding._spans import is_word_chunk
from sdk.schema.grounding._spans import source_chunks
from sdk.schema.grounding._spans import span_automaton
from sdk.schema.grounding._spans import whole_span

if TYPE_CHECKING:
    from sdk.schema.grounding._gbnf import GBNF_SOURCE_LIMIT
    from sdk.schema.grounding._gbnf import grounded_gbnf
    from sdk.schema.grounding._lark import COMPACT_JSON
    from sdk.schema.grounding._lark import grounded_lark

# The grammar builders load on first use (a local engine's request): the parser needs only the
# spans' vocabulary.
__getattr__ = lazy_names(
    __name__,
    {
        "GBNF_SOURCE_LIMIT": "sdk.schema.grounding._gbnf",
        "grounded_gbnf": "sdk.schema.grounding._gbnf",
        "COMPACT_JSON": "sdk.schema.grounding._lark",
        "grounded_lark": "sdk.schema.grounding._lark",
    },
)
__dir__ = listed(globals())

__all__ = [
    "ANCHOR_KEY",
    "COMPACT_JSON",
    "GBNF_SOURCE_LIMIT",
    "GROUNDED_KEYS",
    "SOURCE_QUOTE_KEY",
    "VERBATIM_KEY",
    "Anchor",
    "GroundingUnsupported",
    "SpanAutomaton",
    "anchor_of",
    "anchor_problem",
    "anchor_regions",
    "anchored",
    "branch_anchors",
    "cluster_edge",
    "cluster_occurrences",
    "escaped_chunks",
    "grounded_gbnf",
    "grounded_kind",
    "grounded_lark",
    "is_grounded",
    "is_word_chunk",
    "load_anchors",
    "source_chunks",
    "span_automaton",
    "whole_span",
]
