"""Anchors: whose value a copied string is (issue 32 item 4).

A grounded string may be a span of the whole source, so a small model asked for a notice's
carrier copies the shop's name, or the recipient from the carrier's line: a span of the source,
of the wrong party. An `Anchor` on a `Verbatim` field names where in the source its value may
come from, by the labels around it:

- `after`: the value is copied from the rest of a line (lines end where `str.splitlines` cuts
  them) that one of these labels opens (`"Dear"`, `"addressed to"`): the grounded grammars
  (Lark and GBNF) offer only spans of those regions, and where none of the labels occurs no
  span is left (a nullable field can then only be `null`);
- `not_after`: the value is not the word(s) right after one of these labels (`"from"` introduces
  the sender, not the carrier): checked after decoding only.

The parser checks both on every route (`anchor_problem`: a `CheckFailed` violation of type
`x-anchor`), and `abstention="guided"` turns a nullable field's violation into `null`. Labels are
matched case-insensitively as whole chunks of the source (`source_chunks`). They are the contract
author's knowledge of the documents (what introduces each party), written into the schema as
`x-anchor`.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import re
from collections.abc import Container
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Final

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from sdk._files import read_regular_text
from sdk.schema.grounding._spans import ClusterEdges
from sdk.schema.grounding._spans import _boundaries
from sdk.schema.grounding._spans import occurrences
from sdk.schema.grounding._spans import whole_span

__all__ = [
    "ANCHOR_KEY",
    "Anchor",
    "anchor_of",
    "anchor_problem",
    "anchor_regions",
    "anchored",
    "branch_anchors",
    "load_anchors",
]

ANCHOR_KEY: Final = "x-anchor"
"""Schema annotation of an anchored grounded string: `{"after": [...], "not_after": [...]}`."""


@dataclass(frozen=True)
class Anchor:
    """Where a `Verbatim` value may be copied from: `Annotated[Verbatim | None,
    Anchor(after=("Dear", "Hello"), not_after=("from",))]`."""

    after: tuple[str, ...] = ()
    """Labels that open the region (the rest of their line) the value is copied from."""
    not_after: tuple[str, ...] = ()
    """Labels whose next words are another party's value, never this field's."""

    def __post_init__(self) -> None:
        for name in ("after", "not_after"):
            labels = getattr(self, name)
            if isinstance(labels, str):  # `after="Dear"` would be four one-letter labels
                raise TypeError(f"an anchor's {name} is a tuple of labels, not {labels!r}")
            object.__setattr__(self, name, tuple(labels))  # hashable: regions are cached by it
        for label in (*self.after, *self.not_after):
            if not isinstance(label, str) or not label.strip():
                raise ValueError(f"an anchor's labels are non-empty strings, not {label!r}")

    def to_json(self) -> dict[str, list[str]]:
        return {"after": list(self.after), "not_after": list(self.not_after)}

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema[ANCHOR_KEY] = self.to_json()
        return json_schema


def anchor_of(node: Mapping[str, Any]) -> Anchor | None:
    """The anchor a schema node carries (`x-anchor`), if any."""
    data = node.get(ANCHOR_KEY)
    if not isinstance(data, Mapping):
        return None
    # The raw values, so that `Anchor`'s own checks run: `"after": "Dear"` is refused, never
    # read as the four one-letter labels `tuple("Dear")` would make of it.
    try:
        return Anchor(data.get("after", ()), data.get("not_after", ()))
    except (TypeError, ValueError) as error:
        raise type(error)(f"{ANCHOR_KEY} {dict(data)!r}: {error}") from None


def branch_anchors(node: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Anchor | None]]:
    """Each branch of a union node (`anyOf`) but `null`, with the anchor that decides for it:
    the branch's own (`Annotated[Verbatim, Anchor(...)] | None` writes it there), else the
    union's (`Annotated[Verbatim | None, Anchor(...)]`). The innermost decides, as in the
    parser (which meets both at the value's pointer) and the grammars. Empty for no union."""
    branches = node.get("anyOf")
    if not isinstance(branches, list):
        return []
    union = anchor_of(node)
    kept = [b for b in branches if isinstance(b, Mapping) and b.get("type") != "null"]
    found = []
    for branch in kept:
        own = anchor_of(branch)
        found.append((branch, union if own is None else own))
    return found


@functools.lru_cache(maxsize=64)
def _label(label: str) -> re.Pattern[str]:
    """The label's words, any whitespace between them, any case (where it may start and end is
    `_label_spans`' business: on the source's chunk boundaries)."""
    return re.compile(r"\s+".join(re.escape(word) for word in label.split()), re.IGNORECASE)


def _label_spans(source: str, label: str, edges: frozenset[int]) -> list[tuple[int, int]]:
    """Where `label` occurs in `source` as whole chunks (`source_chunks`: a label never starts
    or ends inside a word, so `Order` is not found in `Orders`, and in text without spaces each
    character is a word, so `致` is found in `致王小明`). Every start is tried, overlapping ones
    included; the search is linear in the source for a label of a few words."""
    found: list[tuple[int, int]] = []
    pattern = _label(label)
    at = pattern.search(source)
    while at is not None:
        if at.start() in edges and at.end() in edges:
            found.append((at.start(), at.end()))
        at = pattern.search(source, at.start() + 1)
    return found


def anchor_regions(source: str, anchor: Anchor) -> list[tuple[int, int]]:
    """Where an anchored value may lie (character offsets): the rest of the line (up to the
    next line break `str.splitlines` knows: `\n`, `\r`, U+2028, ...) after each
    occurrence of an `after` label, its leading whitespace skipped; the whole source when the
    anchor has no `after` labels; none when no label occurs. A region starts on a chunk
    boundary of the source (the grammars cut a region's text into the source's own chunks)
    and holds something besides whitespace. The one region finder: the grammars offer spans of
    these regions, and `anchored` (the parser's check) reads them."""
    return list(_regions(source, anchor.after))


# Where a line ends: every boundary `str.splitlines` splits on (`\r` alone, `\r\n`, U+2028, ...),
# so a document of `\r`-only or Unicode line breaks has lines, each a region at most.
_LINE_END: Final = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


@functools.lru_cache(maxsize=32)
def _regions(source: str, after: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    if not after:
        return ((0, len(source)),)
    edges = _boundaries(source)
    regions: set[tuple[int, int]] = set()
    for label in after:
        for _, start in _label_spans(source, label, edges):
            while start < len(source) and source[start] in " \t":
                start += 1
            while start not in edges:  # the label ended inside a chunk: its next boundary
                start += 1
            line_end = _LINE_END.search(source, start)
            end = len(source) if line_end is None else line_end.start()
            if end > start and not source[start:end].isspace():
                regions.add((start, end))
    return tuple(sorted(regions))


@functools.lru_cache(maxsize=32)
def _label_ends(source: str, labels: tuple[str, ...]) -> frozenset[int]:
    """Where an occurrence of one of `labels` ends, whitespace after it skipped: a value that
    starts there follows the label."""
    edges = _boundaries(source)
    ends = set()
    for label in labels:
        for _, end in _label_spans(source, label, edges):
            while end < len(source) and source[end].isspace():
                end += 1
            ends.add(end)
    return frozenset(ends)


def _in_regions(start: int, end: int, regions: tuple[tuple[int, int], ...]) -> bool:
    """Whether `[start, end)` lies inside one region. Regions that share a line share its end,
    so the region starting last at or before `start` is the widest that can hold it."""
    index = bisect.bisect_right(regions, start, key=lambda region: region[0]) - 1
    return index >= 0 and regions[index][0] <= start and end <= regions[index][1]


def anchor_problem(value: str, source: str, anchor: Anchor, *, whole: bool = True) -> str | None:
    """Why `value` is not where its anchor allows in `source` (`None`: it is), in words the
    parser's error and a retry's feedback use: no line opened by an `after` label holds it as
    whole chunks, or every occurrence of it follows a `not_after` label. An empty value, and a
    value that is no whole span of the source at all, are the whole-span check's business
    (`whole_span`): `None` here. With `whole=False` (a `SourceQuote`, which the parser takes
    anywhere in the source) every occurrence on edges of the source's user-perceived characters
    counts (`ClusterEdges`: never a letter without its combining marks, nor part of an emoji
    sequence), whole chunks or not; one that is nowhere in the source is the quote check's
    business."""
    if not value:
        return None
    edges: Container[int] = _boundaries(source) if whole else ClusterEdges(source)
    regions = _regions(source, anchor.after)
    if next(_spans_of(value, source, edges, 0, len(source)), None) is None:
        return None
    after = ", ".join(repr(label) for label in anchor.after)
    if not regions:  # `after` labels and none of them opens a line: no need to look further
        return f"no line of the source has one of its labels ({after}) and text after it"
    # Only occurrences inside a region can be allowed: each line's widest region is searched
    # (regions sharing a line share its end), never the rest of the source, so a value that
    # recurs all over a hostile document costs what the lines its labels open hold.
    widest: dict[int, int] = {}
    for low, high in regions:
        widest[high] = min(low, widest.get(high, low))
    follows = _label_ends(source, anchor.not_after) if anchor.not_after else frozenset()
    inside = False
    for high, low in widest.items():
        for start in _spans_of(value, source, edges, low, high):
            inside = True
            if start not in follows:
                return None
    if not inside:
        return f"it is on no line after its labels ({after})"
    labels = ", ".join(repr(label) for label in anchor.not_after)
    return f"it follows {labels} (another party's value)"


def _spans_of(value: str, source: str, edges: Container[int], low: int, high: int) -> Iterator[int]:
    """Where `value` occurs in `source[low:high]` starting and ending on `edges`, in order."""
    length = len(value)
    return (s for s in occurrences(value, source, low, high) if s in edges and s + length in edges)


def anchored(value: str, source: str, anchor: Anchor) -> bool:
    """Whether `value` is written in `source` somewhere its anchor allows: as whole chunks, inside
    a region of its `after` labels (when it has any), and not right after a `not_after` label."""
    if not value:
        return True
    return whole_span(value, source) and anchor_problem(value, source, anchor) is None


def load_anchors(path: str | os.PathLike[str]) -> dict[str, Anchor]:
    """Anchors by field from a JSON file: `{"recipient": {"after": ["Dear"]}, "carrier":
    {"not_after": ["from"]}}`; `ValueError` naming what is wrong."""
    data = json.loads(read_regular_text(path))  # (a named pipe is refused, never waited on)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: anchors are an object of fields")
    anchors: dict[str, Anchor] = {}
    for name, given in data.items():
        if not isinstance(given, dict) or set(given) - {"after", "not_after"}:
            raise ValueError(f"{path}: {name!r} takes an object of after/not_after labels")
        labels = {key: given.get(key, []) for key in ("after", "not_after")}
        if not all(isinstance(value, list) for value in labels.values()):
            raise ValueError(f"{path}: {name!r}: after and not_after are lists of labels")
        anchors[name] = Anchor(tuple(labels["after"]), tuple(labels["not_after"]))
    return anchors
