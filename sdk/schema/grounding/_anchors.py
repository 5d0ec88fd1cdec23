"""Anchors: whose value a copied string is (issue 32 item 4).

A grounded string may be a span of the whole source, so a small model asked for a notice's
carrier copies the shop's name, or the recipient from the carrier's line: a span of the source,
of the wrong party. An `Anchor` on a `Verbatim` field names where in the source its value may
come from, by the labels around it:

- `after`: the value is copied from the rest of a line that one of these labels opens (`"Dear"`,
  `"addressed to"`): the grounded grammar offers only spans of those regions, and where none of
  the labels occurs no span is left (a nullable field can then only be `null`);
- `not_after`: the value is not the word(s) right after one of these labels (`"from"` introduces
  the sender, not the carrier): `anchored` says so after decoding, and the caller abstains.

Labels are matched case-insensitively as whole words. They are the contract author's knowledge of
the documents (what introduces each party), written into the schema as `x-anchor`.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Final

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from sdk.schema.grounding._spans import _boundaries

__all__ = ["ANCHOR_KEY", "Anchor", "anchor_of", "anchor_regions", "anchored", "load_anchors"]

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
    return Anchor(tuple(data.get("after", ())), tuple(data.get("not_after", ())))


@functools.lru_cache(maxsize=64)
def _label(label: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(word) for word in label.split())
    return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)


def anchor_regions(source: str, anchor: Anchor) -> list[tuple[int, int]]:
    """Where an anchored value may lie (character offsets): the rest of the line after each
    occurrence of an `after` label, its leading whitespace skipped; the whole source when the
    anchor has no `after` labels; none when no label occurs."""
    if not anchor.after:
        return [(0, len(source))]
    regions: set[tuple[int, int]] = set()
    for label in anchor.after:
        for found in _label(label).finditer(source):
            start = found.end()
            while start < len(source) and source[start] in " \t":
                start += 1
            end = source.find("\n", start)
            end = len(source) if end < 0 else end
            if end > start:
                regions.add((start, end))
    return sorted(regions)


def _follows_label(source: str, start: int, labels: tuple[str, ...]) -> bool:
    before = source[:start].rstrip()
    return any(
        (found := list(_label(label).finditer(before))) and found[-1].end() == len(before)
        for label in labels
    )


def anchored(value: str, source: str, anchor: Anchor) -> bool:
    """Whether `value` is written in `source` somewhere its anchor allows: as whole chunks, inside
    a region of its `after` labels (when it has any), and not right after a `not_after` label."""
    if not value:
        return True
    edges = _boundaries(source)
    regions = anchor_regions(source, anchor)
    start = source.find(value)
    while start >= 0:
        end = start + len(value)
        if (
            start in edges
            and end in edges
            and any(low <= start and end <= high for low, high in regions)
            and not _follows_label(source, start, anchor.not_after)
        ):
            return True
        start = source.find(value, start + 1)
    return False


def load_anchors(path: str | os.PathLike[str]) -> dict[str, Anchor]:
    """Anchors by field from a JSON file: `{"recipient": {"after": ["Dear"]}, "carrier":
    {"not_after": ["from"]}}`; `ValueError` naming what is wrong."""
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
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
