"""The grounded grammar in llguidance's Lark: the contract's schema, with every `SourceQuote` and
`Verbatim` string written as a span of the source (llguidance's substring lexeme) and everything
else as llguidance's own `%json` of that part of the schema.

Only the path from the root to each grounded string is written as Lark rules (objects in their
declared property order, arrays, unions, `$ref` targets); every subschema without a grounded
string below it is one `%json` block, compiled by llguidance exactly as the whole schema is
otherwise, with the same separators. So the grammar accepts the documents the plain schema
grammar accepts, except that a grounded string can only be:

- a span of the source, cut on chunk boundaries (`source_chunks`: never inside a word or a
  number), written as JSON escapes it, and for a `Verbatim` holding at least one word (so `.`
  or `,` alone is never a copied value);
  the source's chunks are one shared terminal, however many fields copy from it;
- not starting or ending with whitespace (a copy of `Royal Mail` is never `Royal Mail `), and
  for a `Verbatim` not empty (unless the source is
  empty: then only `""`), where a `SourceQuote` may be empty (no evidence);
- with the field's `pattern`, `minLength` and `maxLength` applied to the span, when it has any
  (then only to spans without JSON escapes, where the written text is the value itself): where no
  span of the source matches an id's pattern, `null` is the only value left, and a nullable
  field abstains by the grammar alone. `format` is left to the parser;
- for a string with an `Anchor` naming `after` labels (`sdk.schema.grounding.Anchor`), a span of
  the regions those labels open (the rest of their lines) only: one substring terminal per
  region; where no label occurs, no span.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from typing import Final

from sdk._values.pointer import resolve_ref
from sdk.schema import _regex as rx
from sdk.schema.grounding._anchors import Anchor
from sdk.schema.grounding._anchors import anchor_of
from sdk.schema.grounding._anchors import anchor_regions
from sdk.schema.grounding._errors import GroundingUnsupported
from sdk.schema.grounding._spans import VERBATIM_KEY
from sdk.schema.grounding._spans import escaped_chunks
from sdk.schema.grounding._spans import grounded_kind
from sdk.schema.grounding._spans import grounded_walker
from sdk.schema.grounding._spans import is_word_chunk
from sdk.schema.grounding._spans import matching_spans
from sdk.schema.grounding._spans import source_chunks

__all__ = ["COMPACT_JSON", "grounded_lark"]

COMPACT_JSON: Final[Mapping[str, Any]] = {
    "whitespace_flexible": False,
    "item_separator": ", ?",
    "key_separator": ": ?",
}
"""llguidance's JSON compile options for compact JSON with at most one space after `,` and `:`
(the SDK's local engines write JSON this way: see `EmbeddedProvider`'s `JSON_GRAMMAR_OPTIONS`)."""

# Keywords that say nothing about which values are valid (ignored wherever they appear).
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
     "$comment", "$schema", "$id", "$defs", "definitions"}
)  # fmt: skip
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})
_ARRAY_KEYS = frozenset({"type", "items", "minItems", "maxItems"})
_STRING_KEYS = frozenset({"type", "pattern", "minLength", "maxLength", "format"})
# Longest `maxLength` written into the lexeme: a bounded repetition that long costs more to
# compile than it saves; above it the parser checks the length.
_MAX_LENGTH_IN_GRAMMAR = 1000

# The edges of a span as written in a JSON string: its first and its last character are not
# whitespace. Read on the JSON text one character or escape at a time, so that an escaped
# backslash followed by `n` is not taken for an escaped newline. The escapes are the ones
# `escaped_chunks` writes: a backslash and one of `"\bfnrt`, or `u` and four hex digits.
_ANY = r'(?:\\["\\bfnrt]|\\u[0-9a-fA-F]{4}|[^"\\])'
_NOT_SPACE = (
    r'(?:\\["\\b]|[^"\\\s]|\\u(?:000[0-8eEfF]|001[0-9aAbB]|00[2-9a-fA-F][0-9a-fA-F]'
    r"|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3}))"
)
_EDGES = f"/{_NOT_SPACE}(?s:.*)/ & /{_ANY}*{_NOT_SPACE}/"
_NO_ESCAPES = r"/[^\\]*/"
_HAS_WORD = r"/(?s:.*)\w(?s:.*)/"  # a copied value holds a word (`_spans.whole_span`)
_NOTHING = r"[^\x{0}-\x{10FFFF}]"  # a class no character is in


def grounded_lark(
    schema: dict[str, Any],
    source: str,
    *,
    json_options: Mapping[str, Any] = COMPACT_JSON,
    prefer_values: bool = False,
) -> str:
    """The Lark grammar of `schema`'s documents with grounded strings confined to `source`.

    `json_options` are llguidance's JSON compile options (`item_separator`, `key_separator`,
    `whitespace_flexible: False`; `COMPACT_JSON` by default), used for the `%json` parts and for
    the rules written here alike. Raises `GroundingUnsupported` where a grounded string sits
    somewhere this builder does not write (a map's values, `prefixItems`, `allOf`, ...): the
    caller then uses the plain grammar and the parser checks the values after.

    `prefer_values=True`: a grounded string that may be `null` (`Verbatim | None`) must be a
    span wherever a span can fill it, `null` only where none can. Not a contract's own
    grammar: the first pass of mass-aware abstention (`sdk.abstention`), which writes every
    value it can and then measures how much the model wanted each one.
    """
    options = dict(json_options)
    if options.get("whitespace_flexible", True) is not False:
        raise ValueError("grounded_lark writes compact JSON: pass whitespace_flexible=False")
    return _LarkBuilder(schema, source, options, prefer_values=prefer_values).build()


class _LarkBuilder:
    """One grammar: rules by name, `%json` blocks shared by text, grounded terminals by
    constraints. A term is `None` where no value fits the source (a required id no span of the
    source matches): such a branch is left out, so decoding never walks into a dead end."""

    def __init__(
        self, root: dict[str, Any], source: str, options: dict[str, Any], *, prefer_values: bool
    ) -> None:
        self.root = root
        self.prefer_values = prefer_values
        self.options = options
        self.source = source
        self.walker = grounded_walker(root)
        self.lines: list[str] = []
        self.names: set[str] = set()
        self.json_rules: dict[str, str] = {}  # %json text -> rule name
        self.terminals: dict[tuple[Any, ...], str | None] = {}  # grounded constraints -> terminal
        # ($ref target pointer, anchor) -> rule name (None: nothing)
        self.refs: dict[tuple[str, Anchor | None], str | None] = {}
        self.visiting: set[str] = set()  # $ref targets being written (recursion: assume a value)
        self.anchor: Anchor | None = None  # the anchor of the node being written, if any
        self.regions: dict[Anchor, str | None] = {}  # anchor -> terminal of its regions' spans

    def build(self) -> str:
        start = self.term(self.root, "", "doc")
        if start is None:
            raise GroundingUnsupported("", "no document of this schema can be made of the source")
        item = self.options.get("item_separator", ",")
        key = self.options.get("key_separator", ":")
        chunks = {"substring_chunks": escaped_chunks(self.source)}
        header = [
            f"start: {start}",
            f"COMMA: /{_slashed(item)}/",
            f"COLON: /{_slashed(key)}/",
            f"SPAN: %regex {json.dumps(chunks, ensure_ascii=False)}",
        ]
        return "\n".join(header + self.lines) + "\n"

    # --- naming ---

    def name(self, hint: str, *, terminal: bool = False) -> str:
        base = re.sub(r"[^a-z0-9]+", "_", hint.lower()).strip("_") or "x"
        base = base.upper() if terminal else base
        name, number = base, 1
        while name in self.names or name in ("start", "COMMA", "COLON", "SPAN"):
            number += 1
            name = f"{base}_{number}"
        self.names.add(name)
        return name

    def rule(self, hint: str, body: str) -> str:
        name = self.name(hint)
        self.lines.append(f"{name}: {body}")
        return name

    # --- terms ---

    def term(self, node: Any, pointer: str, hint: str) -> str | None:
        """A Lark expression for the values `node` admits (`None`: none fits the source)."""
        if not isinstance(node, dict):
            raise GroundingUnsupported(pointer, "a boolean schema on the way to a grounded string")
        if not self.walker.contains(node):
            return self.json_block(node, hint)
        anchor = anchor_of(node)
        if anchor is not None:  # the innermost anchor decides (only `after` labels confine)
            outer, self.anchor = self.anchor, anchor if anchor.after else None
            try:
                return self.unanchored_term(node, pointer, hint)
            finally:
                self.anchor = outer
        return self.unanchored_term(node, pointer, hint)

    def unanchored_term(self, node: dict[str, Any], pointer: str, hint: str) -> str | None:
        keys = {key for key in node if key not in _ANNOTATIONS and not key.startswith("x-")}
        if grounded_kind(node) is not None:
            return self.grounded(node, keys, pointer, hint)
        if "$ref" in node:
            self.only(keys, {"$ref"}, pointer)
            return self.ref(node["$ref"], pointer)
        for keyword in ("anyOf", "oneOf"):
            if keyword in node:
                self.only(keys, {keyword}, pointer)
                branches = [
                    self.term(branch, f"{pointer}/{keyword}/{index}", hint)
                    for index, branch in enumerate(node[keyword])
                ]
                options = node[keyword]
                if self.prefer_values and any(
                    b is not None and isinstance(o, dict) and grounded_kind(o) is not None
                    for b, o in zip(branches, options, strict=True)
                ):  # a span can fill it: no null
                    branches = [b if o.get("type") != "null" else None
                                for b, o in zip(branches, options, strict=True)]  # fmt: skip
                kept = list(dict.fromkeys(b for b in branches if b is not None))
                return "(" + " | ".join(kept) + ")" if kept else None
        if node.get("type") == "object":
            self.only(keys, _OBJECT_KEYS, pointer)
            return self.object(node, pointer, hint)
        if node.get("type") == "array":
            self.only(keys, _ARRAY_KEYS, pointer)
            return self.array(node, pointer, hint)
        raise GroundingUnsupported(pointer, f"keywords {sorted(keys)} around a grounded string")

    def only(self, keys: set[str], allowed: set[str] | frozenset[str], pointer: str) -> None:
        extra = sorted(keys - allowed)
        if extra:
            raise GroundingUnsupported(pointer, f"{', '.join(extra)} beside a grounded string")

    def json_block(self, node: dict[str, Any], hint: str) -> str:
        """`%json` of a subschema without grounded strings (with the root's definitions, which
        its `$ref`s point into, and the compile options)."""
        block: dict[str, Any] = {"x-guidance": self.options, **node}
        if "$defs" in self.root and "$ref" in json.dumps(node):
            block["$defs"] = self.root["$defs"]
        text = json.dumps(block, ensure_ascii=False, sort_keys=True)
        name = self.json_rules.get(text)
        if name is None:
            name = self.rule(f"{hint}_json", f"%json {text}")
            self.json_rules[text] = name
        return name

    def ref(self, ref: Any, pointer: str) -> str | None:
        if not isinstance(ref, str):
            raise GroundingUnsupported(pointer, "a $ref that is not a string")
        try:
            target_pointer, target = resolve_ref(self.root, ref)
        except ValueError as error:
            raise GroundingUnsupported(pointer, str(error)) from None
        # A target reached under two anchors (a shared sub-model) is two rules, each
        # confined by its own anchor.
        key = (target_pointer, self.anchor)
        if key in self.refs:
            return self.refs[key]
        name = self.name(f"def_{target_pointer.rsplit('/', 1)[-1]}")
        self.refs[key] = name  # a recursive reference meets the name
        self.visiting.add(target_pointer)
        try:
            body = self.term(target, target_pointer, name)
        finally:
            self.visiting.discard(target_pointer)
        if body is None:
            self.refs[key] = None
            return None
        self.lines.append(f"{name}: {body}")
        return name

    def object(self, node: dict[str, Any], pointer: str, hint: str) -> str | None:
        """Members in declared order, an optional one absent or present, commas between: rule
        `rest_i` is "members i.. after something was written", so the size stays linear. A
        required member no value fits leaves no object; an optional one is left out."""
        if node.get("additionalProperties", False) is not False:
            raise GroundingUnsupported(pointer, "additionalProperties beside a grounded string")
        properties: dict[str, Any] = node.get("properties", {})
        required = set(node.get("required", ()))
        members = []
        for name, child in properties.items():
            child_pointer = f"{pointer}/properties/{name}"
            value = self.term(child, child_pointer, f"{hint}_{name}")
            if value is None:
                if name in required:
                    return None
                continue
            key = json.dumps(json.dumps(name, ensure_ascii=False), ensure_ascii=False)
            members.append((f"{key} COLON {value}", name in required))
        rest: str | None = None  # members after the current one, something written before
        first: list[str] = []  # ways the members from the current one on can start
        empty_ok = True  # whether no member at all may be written from here on
        for index in range(len(members) - 1, -1, -1):
            member, is_required = members[index]
            tail = f" {rest}" if rest else ""
            first = [f"{member}{tail}", *first] if not is_required else [f"{member}{tail}"]
            empty_ok = empty_ok and not is_required
            if index:  # the first member is never written after a comma
                after = f"COMMA {member}" if is_required else f"(COMMA {member})?"
                rest = self.rule(f"{hint}_rest", f"{after}{tail}")
        if not first:
            return '"{}"'
        inner = self.rule(f"{hint}_members", " | ".join(first))
        return f'"{{" {inner}{"?" if empty_ok else ""} "}}"'

    def array(self, node: dict[str, Any], pointer: str, hint: str) -> str | None:
        items = node.get("items")
        if not isinstance(items, dict):
            raise GroundingUnsupported(pointer, "array items other than one schema")
        item = self.term(items, f"{pointer}/items", f"{hint}_item")
        low, high = node.get("minItems", 0), node.get("maxItems")
        if item is None:
            return None if low else '"[]"'
        if high == 0:
            return '"[]"'
        more = _repeat(f"(COMMA {item})", max(low - 1, 0), None if high is None else high - 1)
        listed = f"{item} {more}".strip()
        return f'"[" {listed} "]"' if low >= 1 else f'"[" ({listed})? "]"'

    def grounded(self, node: dict[str, Any], keys: set[str], pointer: str, hint: str) -> str | None:
        self.only(keys, _STRING_KEYS, pointer)
        if node.get("type") not in ("string", None):
            raise GroundingUnsupported(pointer, "a grounded value that is not a string")
        pattern, low = node.get("pattern"), int(node.get("minLength", 0))
        high = node.get("maxLength")
        if high is not None and high > _MAX_LENGTH_IN_GRAMMAR:
            high = None
        # A quote may be empty ("no evidence"); a copied value only when the source is.
        verbatim = grounded_kind(node) == VERBATIM_KEY
        empty = not verbatim or not self.source
        if pattern is not None and not isinstance(pattern, str):
            raise GroundingUnsupported(pointer, "a pattern that is not a string")
        signature = (empty, pattern, low, high, verbatim, self.anchor)
        if signature not in self.terminals:
            longest = rx.longest_match(pattern, high) if pattern is not None else None
            spans = self.spans()
            if spans is None:  # anchored, and no region of the anchor in the source
                body = json.dumps('""') if empty else None
            elif longest is not None or not self.source:
                body = self.listed(pattern, low, longest or 0, empty)
            else:
                body = self.intersected(
                    pattern, low, high, empty, pointer, verbatim=verbatim, spans=spans
                )
            name = self.name(f"{hint}_value", terminal=True) if body is not None else None
            if name is not None:
                self.lines.append(f"{name}: {body}")
            self.terminals[signature] = name
        return self.terminals[signature]

    def spans(self) -> str | None:
        """The terminal of the spans a grounded string may be: `SPAN` (the whole source), or
        for an anchored one the union of its regions' substring terminals (`None`: no region)."""
        if self.anchor is None:
            return "SPAN"
        if self.anchor not in self.regions:
            # A region without a word holds no copied value (`Verbatim` holds a word; a quote
            # may be empty anyway): left out, so that decoding never walks into a dead end.
            regions = anchor_regions(self.source, self.anchor)
            texts = [self.source[low:high] for low, high in regions]
            texts = [t for t in texts if any(is_word_chunk(c) for c in source_chunks(t))]
            names = []
            for text in dict.fromkeys(texts):
                name = self.name("region", terminal=True)
                chunks = {"substring_chunks": escaped_chunks(text)}
                self.lines.append(f"{name}: %regex {json.dumps(chunks, ensure_ascii=False)}")
                names.append(name)
            union = self.name("anchored", terminal=True) if names else None
            if union is not None:
                self.lines.append(f"{union}: {' | '.join(names)}")
            self.regions[self.anchor] = union
        return self.regions[self.anchor]

    def listed(self, pattern: str | None, low: int, longest: int, empty: bool) -> str | None:
        """Where the pattern (or `maxLength`) bounds a value's length to `longest`, or the
        source is empty: the spans that fit, one alternative each (an id: a short list), and
        `""` where that fits; `None` when no value fits. Anchored: the spans of its regions."""
        if self.anchor is None:
            found = matching_spans(self.source, pattern or "", low, longest)
        else:
            regions = anchor_regions(self.source, self.anchor)
            found = sorted(
                {
                    span
                    for start, end in regions
                    for span in matching_spans(self.source[start:end], pattern or "", low, longest)
                }
            )
        allows_empty = empty and low == 0 and (pattern is None or bool(re.search(pattern, "")))
        options = [json.dumps(f'"{span}"', ensure_ascii=False) for span in found]
        if allows_empty:
            options.append(json.dumps('""'))
        return " | ".join(options) or None

    def intersected(
        self,
        pattern: str | None,
        low: int,
        high: int | None,
        empty: bool,
        pointer: str,
        *,
        verbatim: bool,
        spans: str = "SPAN",
    ) -> str:
        """Any span (of `spans`), its edges not whitespace (a `Verbatim` holding a word),
        intersected with the pattern and the length bounds (read on spans without JSON escapes,
        where the text is the value itself)."""
        parts = [spans, _EDGES, *([_HAS_WORD] if verbatim else [])]
        if pattern is not None or low or high is not None:
            parts.append(_NO_ESCAPES)
        if pattern is not None:
            regex, empty_matches = _pattern_regex(pattern, pointer)
            parts.append(f"/{regex}/")
            empty = empty and empty_matches
        if low or high is not None:
            parts.append(f"/(?s:.{{{low},{'' if high is None else high}}})/")
            empty = empty and low == 0
        optional = "?" if empty else ""
        return f'"\\"" ({" & ".join(parts)}){optional} "\\""'


def _repeat(expr: str, low: int, high: int | None) -> str:
    if high == 0:
        return ""
    if high is None:
        return f"{expr}*" if low == 0 else f"{expr}+" if low == 1 else f"{expr}{{{low},}}"
    return f"{expr}{{{low},{high}}}"


def _slashed(regex: str) -> str:
    return regex.replace("/", "\\/")


def _pattern_regex(pattern: Any, pointer: str) -> tuple[str, bool]:
    """A JSON Schema `pattern` as a whole-string Rust regex (its meaning as in
    `sdk.schema._regex`: the narrower of ECMA's and Python's; unanchored ends take anything),
    and whether it matches the empty string."""
    if not isinstance(pattern, str):
        raise GroundingUnsupported(pointer, "a pattern that is not a string")
    try:
        branches = rx.parse_pattern(pattern)
    except rx.RegexUnsupported as error:
        raise GroundingUnsupported(pointer, f"pattern not expressible: {error}") from None
    rendered = []
    empty = any(rx.length_range(branch.node)[0] == 0 for branch in branches)
    for branch in branches:
        body = _node_regex(branch.node)
        start = "" if branch.anchored_start else "(?s:.*)"
        end = "" if branch.anchored_end else "(?s:.*)"
        rendered.append(f"{start}{body}{end}")
    if not rendered:
        return _NOTHING, False
    return "(?:" + "|".join(rendered) + ")", empty


def _node_regex(node: rx.Node) -> str:
    if isinstance(node, rx.CharSet):
        if not node.ranges:
            return _NOTHING
        items = "".join(
            _char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}" for lo, hi in node.ranges
        )
        return f"[{items}]"
    if isinstance(node, rx.Seq):
        return "".join(_node_regex(item) for item in node.items)
    if isinstance(node, rx.Alt):
        return "(?:" + "|".join(_node_regex(option) for option in node.options) + ")"
    inner = f"(?:{_node_regex(node.node)})"
    high = "" if node.hi is None else str(node.hi)
    return f"{inner}{{{node.lo},{high}}}"


def _char(point: int) -> str:
    char = chr(point)
    return char if char.isascii() and char.isalnum() else f"\\x{{{point:X}}}"
