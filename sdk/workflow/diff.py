"""What changed between two versions of a contract's schema, and whom it breaks.

A contract has two sides, and a change can break either, both or neither:

- **producers**: the model (and the prompts, few-shot examples and fine-tunes behind it) that
  generates values. A change breaks them when it takes away something the model could say (an
  enum member, `null`, a wider type), asks for something new (a required field), holds it to a
  tighter constraint, or changes the order in which it generates fields.
- **consumers of stored values**: code that reads, with the new contract, values stored under the
  old one. A change breaks them when some value valid under the old schema is invalid under the new
  one; such a change needs a `migrate_from` step (see `Contract.from_stored`).

Every change alters the schema's bytes, and so invalidates provider grammar caches and prompt
caches keyed on them; that is why even a description edit needs a version bump.

`diff_schemas(old, new)` walks both documents side by side (following `$ref`s, once per pair of
definitions, so recursive schemas terminate) and returns one `Change` per difference, each with
the JSON pointer where it happened (in the new document; a removed field's pointer is where it
was), a detail line, and its classification for each side.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from dataclasses import field
from enum import StrEnum
from fractions import Fraction
from typing import Any

from sdk._values.pointer import unescape_token
from sdk.schema._shape import node_at
from sdk.schema._shape import object_fields
from sdk.schema._shape import resolve
from sdk.schema._shape import shape_of
from sdk.schema.canonical import VERSION_KEY
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import canonical_bytes
from sdk.workflow.snapshot import info_of

__all__ = ["Change", "ChangeKind", "Impact", "SchemaDiff", "diff_schemas"]


class Impact(StrEnum):
    """How a change affects one side of the contract."""

    BREAKING = "breaking"
    COMPATIBLE = "compatible"


class ChangeKind(StrEnum):
    """Every kind of change the diff reports. A rename shows as a removal plus an addition."""

    FIELD_ADDED_REQUIRED = "field-added-required"
    FIELD_ADDED_OPTIONAL = "field-added-optional"
    FIELD_REMOVED = "field-removed"
    FIELD_NOW_REQUIRED = "field-now-required"
    FIELD_NOW_OPTIONAL = "field-now-optional"
    TYPE_NARROWED = "type-narrowed"
    TYPE_WIDENED = "type-widened"
    TYPE_CHANGED = "type-changed"
    ENUM_MEMBER_ADDED = "enum-member-added"
    ENUM_MEMBER_REMOVED = "enum-member-removed"
    ENUM_REORDERED = "enum-reordered"
    ALTERNATIVES_REORDERED = "alternatives-reordered"
    NULLABLE_ADDED = "nullable-added"
    NULLABLE_REMOVED = "nullable-removed"
    DISCRIMINATOR_ADDED = "discriminator-added"
    DISCRIMINATOR_REMOVED = "discriminator-removed"
    CONSTRAINT_TIGHTENED = "constraint-tightened"
    CONSTRAINT_LOOSENED = "constraint-loosened"
    CONSTRAINT_CHANGED = "constraint-changed"
    DESCRIPTION_CHANGED = "description-changed"
    DEFAULT_CHANGED = "default-changed"
    ORDER_CHANGED = "order-changed"
    KEYWORD_CHANGED = "keyword-changed"
    GRAMMAR_NARROWED = "grammar-narrowed"
    GRAMMAR_WIDENED = "grammar-widened"
    GRAMMAR_REWRITTEN = "grammar-rewritten"


_B, _C = Impact.BREAKING, Impact.COMPATIBLE

# kind -> (producers, consumers of stored values, why): the whole classification in one table.
_CLASSIFICATION: dict[ChangeKind, tuple[Impact, Impact, str]] = {
    ChangeKind.FIELD_ADDED_REQUIRED: (
        _B,
        _B,
        "the model must now generate it; stored values lack it (migrate_from must fill it)",
    ),
    ChangeKind.FIELD_ADDED_OPTIONAL: (
        _C,
        _C,
        "the model may leave it out; stored values without it still read",
    ),
    ChangeKind.FIELD_REMOVED: (
        _C,
        _B,
        "the model no longer generates it; stored values still carry it and contracts reject "
        "unknown fields (migrate_from must drop it)",
    ),
    ChangeKind.FIELD_NOW_REQUIRED: (
        _B,
        _B,
        "the model can no longer leave it out; stored values that omit it no longer read",
    ),
    ChangeKind.FIELD_NOW_OPTIONAL: (
        _C,
        _C,
        "the model may now leave it out; stored values still read",
    ),
    ChangeKind.TYPE_NARROWED: (
        _B,
        _B,
        "the model loses values it could give; stored values of the dropped type no longer read",
    ),
    ChangeKind.TYPE_WIDENED: (
        _C,
        _C,
        "the model may give more kinds of value; stored values still read",
    ),
    ChangeKind.TYPE_CHANGED: (
        _B,
        _B,
        "neither type contains the other: old prompts and stored values no longer fit",
    ),
    ChangeKind.ENUM_MEMBER_ADDED: (
        _C,
        _C,
        "the model gains an option; stored values still read",
    ),
    ChangeKind.ENUM_MEMBER_REMOVED: (
        _B,
        _B,
        "inputs that belonged to it are forced into another member; stored values holding it "
        "no longer read",
    ),
    ChangeKind.ENUM_REORDERED: (
        _C,
        _C,
        "same members in another order: values are unaffected, caches are invalidated",
    ),
    # Unlike an enum's members, a plain union's alternatives are tried in order: Pydantic's
    # smart mode reads a value that fits several equally well (`{}` where every field has a
    # default) as the first. A tagged union's order is never reported: the tag picks.
    ChangeKind.ALTERNATIVES_REORDERED: (
        _B,
        _B,
        "a value that fits more than one alternative equally well reads as the first: an output "
        "or a stored value like it may now read as another branch, without an error",
    ),
    ChangeKind.NULLABLE_ADDED: (
        _C,
        _C,
        "the model gains a way to abstain; stored values still read",
    ),
    ChangeKind.NULLABLE_REMOVED: (
        _B,
        _B,
        "the model loses its way to abstain and must invent a value; stored nulls no longer read",
    ),
    # A discriminator changes which documents a union accepts only through the tag: each branch
    # still holds its tag to its own constant, so a document that carries the tag matches the
    # same branch with or without one. What changes is the document without the tag (possible
    # where a branch's tag has a default): a plain union matches it by its shape (Pydantic's
    # smart mode, the first branch that fits on a tie), a discriminated one refuses it ("Unable
    # to extract tag"). So adding one breaks both sides; removing one lets an output leave the
    # tag out and be read, silently, as a branch it may not have meant (as `default-changed`,
    # breaking for producers), while every stored value carries its tag and reads as before.
    ChangeKind.DISCRIMINATOR_ADDED: (
        _B,
        _B,
        "the tag alone now picks the branch: an output or stored value that leaves a defaulted "
        "tag out, matched by its shape before, is refused (migrate_from must write the tag)",
    ),
    ChangeKind.DISCRIMINATOR_REMOVED: (
        _B,
        _C,
        "an output without the tag is no longer refused but read as whichever branch its shape "
        "fits first, without an error, and retry feedback no longer names the tagged branch; "
        "stored values carry their tag and read as the same branch",
    ),
    ChangeKind.CONSTRAINT_TIGHTENED: (
        _B,
        _B,
        "values the model gave before may now be rejected; stored values may no longer read",
    ),
    ChangeKind.CONSTRAINT_LOOSENED: (
        _C,
        _C,
        "more values are allowed; stored values still read",
    ),
    ChangeKind.CONSTRAINT_CHANGED: (
        _B,
        _B,
        "neither constraint contains the other, so it counts as tightened",
    ),
    ChangeKind.DESCRIPTION_CHANGED: (
        _C,
        _C,
        "values are unaffected, but the model reads a different instruction and schema and "
        "prompt caches are invalidated",
    ),
    ChangeKind.DEFAULT_CHANGED: (
        _B,
        _B,
        "an output that leaves the field out now reads as another value, without an error; "
        "stored values that left it out read as the new default (migrate_from must fill the "
        "old one)",
    ),
    ChangeKind.ORDER_CHANGED: (
        _B,
        _C,
        "generation order changed: fields now condition on different earlier output (a "
        "reasoning field moved after the answer becomes post-hoc); stored values still read",
    ),
    ChangeKind.KEYWORD_CHANGED: (
        _B,
        _B,
        "a keyword the diff does not classify changed: counted as breaking until reviewed",
    ),
    ChangeKind.GRAMMAR_NARROWED: (
        _B,
        _B,
        "a sentence of the old grammar is no longer in the language: the model loses a way to "
        "say it, and stored texts like it no longer parse",
    ),
    ChangeKind.GRAMMAR_WIDENED: (
        _C,
        _C,
        "the language gained sentences: every old sentence still parses",
    ),
    ChangeKind.GRAMMAR_REWRITTEN: (
        _C,
        _C,
        "the grammar text changed but no sentence drawn from either version tells the two "
        "languages apart; the provider's grammar cache restarts",
    ),
}


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between the old and the new schema."""

    kind: ChangeKind
    pointer: str
    detail: str

    @property
    def producers(self) -> Impact:
        """The change's effect on the model that generates values."""
        return _CLASSIFICATION[self.kind][0]

    @property
    def consumers(self) -> Impact:
        """The change's effect on code reading values stored under the old version."""
        return _CLASSIFICATION[self.kind][1]

    @property
    def why(self) -> str:
        """One line on why the change is classified the way it is."""
        return _CLASSIFICATION[self.kind][2]

    @property
    def breaking(self) -> bool:
        """Breaking for either side."""
        return Impact.BREAKING in (self.producers, self.consumers)

    def to_json(self) -> dict[str, str]:
        """A plain-data form, for `sdk schema diff --json`."""
        return {
            "kind": self.kind.value,
            "pointer": self.pointer,
            "detail": self.detail,
            "producers": self.producers.value,
            "consumers": self.consumers.value,
            "why": self.why,
        }


@dataclass(frozen=True)
class SchemaDiff:
    """Every change between two schemas, with the name, version and fingerprint of each."""

    old: SchemaInfo
    new: SchemaInfo
    changes: list[Change] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """Same bytes, so same fingerprint: nothing to review."""
        return self.old.fingerprint == self.new.fingerprint

    @property
    def breaking_for_producers(self) -> bool:
        """Whether any change is breaking for the model's side."""
        return any(change.producers is Impact.BREAKING for change in self.changes)

    @property
    def breaking_for_consumers(self) -> bool:
        """Whether any change is breaking for stored values (a migration is needed)."""
        return any(change.consumers is Impact.BREAKING for change in self.changes)

    def of_kind(self, kind: ChangeKind) -> list[Change]:
        """The changes of one kind."""
        return [change for change in self.changes if change.kind is kind]

    def to_json(self) -> dict[str, Any]:
        """A plain-data form, for `sdk schema diff --json`."""
        return {
            "old": _info_json(self.old),
            "new": _info_json(self.new),
            "identical": self.identical,
            "breaking_for_producers": self.breaking_for_producers,
            "breaking_for_consumers": self.breaking_for_consumers,
            "changes": [change.to_json() for change in self.changes],
        }


def _info_json(info: SchemaInfo) -> dict[str, Any]:
    return {"name": info.name, "version": info.version, "fingerprint": info.fingerprint}


def diff_schemas(old: dict[str, Any], new: dict[str, Any]) -> SchemaDiff:
    """Compare two schema documents (canonical schemas, or snapshots read back)."""
    differ = _Differ(old, new)
    differ.compare(old, new, "", root=True)
    return SchemaDiff(old=info_of(old), new=info_of(new), changes=differ.changes)


# Keywords that reject no value: a change to them is a description change, except a `default`
# changed from one value to another (`default-changed`: an absent field now reads as another
# value). A default that appears or goes comes with the field turning optional or required.
_ANNOTATIONS = ("title", "description", "examples", "$comment", "deprecated", "default")
# The two ways of listing alternatives, walked by one code path (`_Differ._union`): Pydantic
# writes a plain union as `anyOf` and a discriminated one as `oneOf` beside a `discriminator`.
_UNIONS = ("anyOf", "oneOf")
# Numeric and length bounds: for the lower ones a larger value is tighter, for the upper ones a
# smaller value is.
_LOWER_BOUNDS = (
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "minProperties",
    "minContains",
)
_UPPER_BOUNDS = (
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "maxProperties",
    "maxContains",
)
# Constraints with no order: adding one tightens, removing one loosens, changing one is neither.
_OTHER_CONSTRAINTS = ("pattern", "format", "contentEncoding", "contentMediaType")
# Keywords compared structurally by `_Differ` itself (or deliberately ignored: the root's name and
# version are reported as `SchemaDiff.old` / `.new`, and `$defs` is reached through `$ref`s).
_STRUCTURAL = frozenset(
    {
        "type",
        "enum",
        "const",
        *_UNIONS,
        "discriminator",
        "$ref",
        "$defs",
        "$schema",
        VERSION_KEY,
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "uniqueItems",
        "multipleOf",
        *_ANNOTATIONS,
        *_LOWER_BOUNDS,
        *_UPPER_BOUNDS,
        *_OTHER_CONSTRAINTS,
    }
)


class _Differ:
    """One walk over two documents; `changes` collects what it finds, in document order."""

    def __init__(self, old_root: dict[str, Any], new_root: dict[str, Any]) -> None:
        self.old_root = old_root
        self.new_root = new_root
        self.changes: list[Change] = []
        # Pairs of (old, new) definitions already compared: shared definitions are reported
        # once, and a recursive definition does not send the walk round forever.
        self._seen: set[tuple[str, str]] = set()

    def add(self, kind: ChangeKind, pointer: str, detail: str) -> None:
        self.changes.append(Change(kind, pointer, detail))

    def compare(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, *, root: bool = False
    ) -> None:
        """Compare two nodes found at the same place (a property, an item, a branch)."""
        # Annotations as written on this node (a field's description sits beside its `$ref`
        # or `anyOf`); the root's title is its name, reported in the header instead.
        self._annotations(old, new, pointer, skip=("title",) if root else ())
        old_shape = shape_of(self.old_root, old)
        new_shape = shape_of(self.new_root, new)
        if old_shape.nullable != new_shape.nullable:
            kind = ChangeKind.NULLABLE_ADDED if new_shape.nullable else ChangeKind.NULLABLE_REMOVED
            self.add(
                kind,
                pointer,
                "null now allowed" if new_shape.nullable else "null no longer allowed",
            )
        core_pointer = pointer
        if old_shape.ref is not None and new_shape.ref is not None:
            pair = (old_shape.ref, new_shape.ref)
            if pair in self._seen:
                return
            self._seen.add(pair)
            core_pointer = new_shape.ref
            # The definition's own annotations (a nested contract's docstring, say).
            self._annotations(
                node_at(self.old_root, old_shape.ref),
                node_at(self.new_root, new_shape.ref),
                core_pointer,
                skip=(),
            )
        self._core(
            old_shape.core,
            new_shape.core,
            old_shape.types,
            new_shape.types,
            core_pointer,
            refs=(old_shape.ref, new_shape.ref),
        )

    def _annotations(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, *, skip: tuple[str, ...]
    ) -> None:
        for keyword in _ANNOTATIONS:
            if keyword in skip or old.get(keyword) == new.get(keyword):
                continue
            before, after = old.get(keyword), new.get(keyword)
            kind = (
                ChangeKind.DEFAULT_CHANGED
                if keyword == "default" and keyword in old and keyword in new
                else ChangeKind.DESCRIPTION_CHANGED
            )
            self.add(kind, pointer, f"{keyword}: {_short(before)} -> {_short(after)}")

    def _core(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        old_types: frozenset[str],
        new_types: frozenset[str],
        pointer: str,
        *,
        refs: tuple[str | None, str | None] = (None, None),
    ) -> None:
        """Compare the non-null parts of two nodes (`refs`: the definitions they came from)."""
        if any(isinstance(node.get(k), list) for node in (old, new) for k in _UNIONS):
            self._union(old, new, pointer, refs)
            return
        if old_types != new_types and old_types and new_types:
            if _covers(new_types, old_types):
                kind = ChangeKind.TYPE_WIDENED
            elif _covers(old_types, new_types):
                kind = ChangeKind.TYPE_NARROWED
            else:
                kind = ChangeKind.TYPE_CHANGED
            self.add(kind, pointer, f"type {_types(old_types)} -> {_types(new_types)}")
            if kind is ChangeKind.TYPE_CHANGED:
                return  # the rest of the comparison would only be noise
        self._enum(old, new, pointer)
        self._constraints(old, new, pointer)
        if "properties" in old and "properties" in new:
            self._object(old, new, pointer)
        self._additional(old, new, pointer)
        self._items(old, new, pointer)
        for keyword in sorted((set(old) | set(new)) - _STRUCTURAL):
            if old.get(keyword) != new.get(keyword):
                self.add(
                    ChangeKind.KEYWORD_CHANGED,
                    pointer,
                    f"{keyword}: {_short(old.get(keyword))} -> {_short(new.get(keyword))}",
                )

    def _union(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        refs: tuple[str | None, str | None],
    ) -> None:
        """Compare alternatives (`anyOf` or `oneOf` alike), walking into each matched pair.

        Branches are matched as `_pair_branches` says: by their discriminator value where every
        branch of both sides has one, else by definition name or title, identical bytes, their
        only shared JSON type, and last by position. A side that is not a union (`A` becoming
        `A | B`) is its own one branch, still named by its definition. A branch added is a
        widening (the model gains an alternative, stored values still read), a branch removed a
        narrowing (stored values of it no longer read), as for enum members.
        """
        old_keyword, old_branches = _branches(old, refs[0])
        new_keyword, new_branches = _branches(new, refs[1])
        old_tag, new_tag = _discriminator(old), _discriminator(new)
        # (the side without the discriminator, whose branches may leave a defaulted tag out)
        root, branches = (
            (self.old_root, old_branches) if old_tag is None else (self.new_root, new_branches)
        )
        tag = old_tag or new_tag
        matters = tag is not None and any(_tag_defaulted(root, b, tag) for b in branches)
        self._union_keywords((old_keyword, old_tag), (new_keyword, new_tag), pointer, matters)
        self._lone_branch_tag(
            (old_keyword, old_branches, old_tag), (new_keyword, new_branches, new_tag), pointer
        )
        tag = (new_tag or old_tag) if not (old_tag and new_tag) or old_tag == new_tag else None
        old_labels = _tags(self.old_root, old_branches, tag)
        new_labels = _tags(self.new_root, new_branches, tag)
        pairs = _pair_branches(
            (self.old_root, old_branches, old_labels), (self.new_root, new_branches, new_labels)
        )
        matched_old = {before for before, _ in pairs}
        matched_new = {after for _, after in pairs}
        for index, branch in enumerate(old_branches):
            if index not in matched_old:
                label = _label(branch, tag, old_labels, index)
                self.add(ChangeKind.TYPE_NARROWED, pointer, f"alternative {label} removed")
        for index, branch in enumerate(new_branches):
            if index not in matched_new:
                label = _label(branch, tag, new_labels, index)
                self.add(ChangeKind.TYPE_WIDENED, pointer, f"alternative {label} added")
        pairs.sort(key=lambda pair: pair[1])
        if old_keyword and new_keyword and None in (old_labels, new_labels):
            self._reordered(old_branches, [before for before, _ in pairs], pointer)
        for before, after in pairs:
            # A branch's place in the new document; a new side that is no union is the node.
            inner = f"{pointer}/{new_keyword}/{after}" if new_keyword else pointer
            self.compare(old_branches[before], new_branches[after], inner)

    def _union_keywords(
        self,
        old: tuple[str | None, str | None],
        new: tuple[str | None, str | None],
        pointer: str,
        matters: bool,
    ) -> None:
        """A union's own keywords: its discriminator added, removed or renamed, and `anyOf`
        against `oneOf` (each side as its keyword and its discriminator's property). A
        discriminator added or removed is a change where it `matters`: a branch of the side
        without it has a defaulted tag, so an output may leave the tag out (where every branch
        requires its tag, each value carries it and picks the same branch either way)."""
        (old_keyword, old_tag), (new_keyword, new_tag) = old, new
        # Pydantic writes a discriminated union as `oneOf` and a plain one as `anyOf`: the
        # keyword that comes or goes with the discriminator is part of that one change.
        switch = f" ({old_keyword} -> {new_keyword})" if old_keyword != new_keyword else ""
        tagged_or_not = (old_tag is None) != (new_tag is None)
        if old_keyword and new_keyword and tagged_or_not and matters:
            added = new_tag is not None
            self.add(
                ChangeKind.DISCRIMINATOR_ADDED if added else ChangeKind.DISCRIMINATOR_REMOVED,
                pointer,
                f"discriminator {_short(new_tag or old_tag)} {'added' if added else 'removed'}"
                + switch,
            )
            if (old_keyword, new_keyword) == (("anyOf", "oneOf") if added else ("oneOf", "anyOf")):
                switch = ""
        if old_keyword and new_keyword and switch:
            # `oneOf` also refuses a value that matches two alternatives.
            tighter = new_keyword == "oneOf"
            self.add(
                ChangeKind.CONSTRAINT_TIGHTENED if tighter else ChangeKind.CONSTRAINT_LOOSENED,
                pointer,
                f"{old_keyword} -> {new_keyword}"
                + (" (a value must now match exactly one alternative)" if tighter else ""),
            )
        if old_tag and new_tag and old_tag != new_tag:
            self.add(
                ChangeKind.KEYWORD_CHANGED,
                pointer,
                f"discriminator {_short(old_tag)} -> {_short(new_tag)}",
            )

    def _lone_branch_tag(self, old: _Union, new: _Union, pointer: str) -> None:
        """A discriminator that comes or goes with the union itself: one contract `A` grown into
        `Annotated[A | B, Field(discriminator="kind")]`, or such a union narrowed to `A` (each
        side as its keyword, branches and discriminator's property). It is the same change as
        between two unions when `A`'s tag has a default: `A` read an output that left the tag
        out, the discriminated union refuses it ("Unable to extract tag"), and the reverse.
        Where `A` requires its tag, every value of it carries the tag and picks `A` either way:
        only the branch added or removed is a change."""
        (old_keyword, old_branches, old_tag), (new_keyword, new_branches, new_tag) = old, new
        if old_keyword is None and new_keyword is not None and new_tag is not None:
            lone, root, tag, kind = old_branches, self.old_root, new_tag, "added"
            switch = f"one alternative -> {new_keyword}"
        elif new_keyword is None and old_keyword is not None and old_tag is not None:
            lone, root, tag, kind = new_branches, self.new_root, old_tag, "removed"
            switch = f"{old_keyword} -> one alternative"
        else:
            return
        if len(lone) == 1 and _tag_defaulted(root, lone[0], tag):
            self.add(
                ChangeKind.DISCRIMINATOR_ADDED
                if kind == "added"
                else ChangeKind.DISCRIMINATOR_REMOVED,
                pointer,
                f"discriminator {_short(tag)} {kind} ({switch})",
            )

    def _reordered(
        self, old_branches: list[dict[str, Any]], order: list[int], pointer: str
    ) -> None:
        """Untagged branches matched out of order (`order`: the old index of each new one)."""
        if order == sorted(order):
            return
        # Without a tag, Pydantic reads a value that fits several branches as the first.
        names = [_name(old_branches[i]) or _short(old_branches[i], 30) for i in sorted(order)]
        moved = [_name(old_branches[i]) or _short(old_branches[i], 30) for i in order]
        self.add(
            ChangeKind.ALTERNATIVES_REORDERED,
            pointer,
            f"alternatives reordered: {', '.join(names)} -> {', '.join(moved)} (a value "
            "that fits more than one may now read as another)",
        )

    def _enum(self, old: dict[str, Any], new: dict[str, Any], pointer: str) -> None:
        before = _members(old)
        after = _members(new)
        if before is None and after is None:
            return
        if before is None or after is None:
            kind = (
                ChangeKind.CONSTRAINT_LOOSENED if after is None else ChangeKind.CONSTRAINT_TIGHTENED
            )
            self.add(kind, pointer, f"enum {_short(before)} -> {_short(after)}")
            return
        for value in after:
            if value not in before:
                self.add(ChangeKind.ENUM_MEMBER_ADDED, pointer, f"member {_short(value)} added")
        for value in before:
            if value not in after:
                self.add(ChangeKind.ENUM_MEMBER_REMOVED, pointer, f"member {_short(value)} removed")
        common_before = [value for value in before if value in after]
        common_after = [value for value in after if value in before]
        if common_before != common_after:
            self.add(
                ChangeKind.ENUM_REORDERED,
                pointer,
                f"members {_short(common_before)} -> {_short(common_after)}",
            )

    def _constraints(self, old: dict[str, Any], new: dict[str, Any], pointer: str) -> None:
        for keyword in (
            *_LOWER_BOUNDS,
            *_UPPER_BOUNDS,
            "multipleOf",
            "uniqueItems",
            *_OTHER_CONSTRAINTS,
        ):
            before, after = old.get(keyword), new.get(keyword)
            if before == after:
                continue
            detail = f"{keyword} {_short(before)} -> {_short(after)}"
            self.add(_constraint_kind(keyword, before, after), pointer, detail)

    def _object(self, old: dict[str, Any], new: dict[str, Any], pointer: str) -> None:
        """Fields removed first, then the new fields in their order, then an order change."""
        old_fields = {f.name: f for f in object_fields(old, pointer)}
        new_fields = {f.name: f for f in object_fields(new, pointer)}
        added = [f for name, f in new_fields.items() if name not in old_fields]
        for name, before in old_fields.items():
            if name in new_fields:
                continue
            detail = f"field {name!r} removed"
            twin = next(
                (f for f in added if canonical_bytes(f.schema) == canonical_bytes(before.schema)),
                None,
            )
            if twin is not None:
                detail += f" (same schema as added {twin.name!r}: renamed?)"
            self.add(ChangeKind.FIELD_REMOVED, before.pointer, detail)
        for name, after in new_fields.items():
            previous = old_fields.get(name)
            if previous is None:
                kind = (
                    ChangeKind.FIELD_ADDED_REQUIRED
                    if after.required
                    else ChangeKind.FIELD_ADDED_OPTIONAL
                )
                self.add(kind, after.pointer, f"field {name!r} added")
                continue
            if previous.required != after.required:
                kind = (
                    ChangeKind.FIELD_NOW_REQUIRED
                    if after.required
                    else ChangeKind.FIELD_NOW_OPTIONAL
                )
                state = "required" if after.required else "optional"
                self.add(kind, after.pointer, f"field {name!r} is now {state}")
            self.compare(previous.schema, after.schema, after.pointer)
        old_order = [name for name in old_fields if name in new_fields]
        new_order = [name for name in new_fields if name in old_fields]
        if old_order != new_order:
            self.add(
                ChangeKind.ORDER_CHANGED,
                f"{pointer}/properties",
                f"order {', '.join(old_order)} -> {', '.join(new_order)}",
            )

    def _additional(self, old: dict[str, Any], new: dict[str, Any], pointer: str) -> None:
        before, after = old.get("additionalProperties"), new.get("additionalProperties")
        if before == after:
            return
        if isinstance(before, dict) and isinstance(after, dict):
            self.compare(before, after, f"{pointer}/additionalProperties")
            return
        # `false` allows nothing, an absent keyword / `true` allows anything, a schema some.
        rank = {False: 0, None: 2, True: 2}
        old_rank = rank.get(before, 1) if not isinstance(before, dict) else 1
        new_rank = rank.get(after, 1) if not isinstance(after, dict) else 1
        if old_rank == new_rank:
            kind = ChangeKind.CONSTRAINT_CHANGED
        elif new_rank < old_rank:
            kind = ChangeKind.CONSTRAINT_TIGHTENED
        else:
            kind = ChangeKind.CONSTRAINT_LOOSENED
        self.add(kind, pointer, f"additionalProperties {_short(before)} -> {_short(after)}")

    def _items(self, old: dict[str, Any], new: dict[str, Any], pointer: str) -> None:
        before, after = old.get("items"), new.get("items")
        if isinstance(before, dict) and isinstance(after, dict):
            self.compare(before, after, f"{pointer}/items")
        before_prefix, after_prefix = old.get("prefixItems"), new.get("prefixItems")
        if isinstance(before_prefix, list) and isinstance(after_prefix, list):
            for index, (b, a) in enumerate(zip(before_prefix, after_prefix, strict=False)):
                if isinstance(b, dict) and isinstance(a, dict):
                    self.compare(b, a, f"{pointer}/prefixItems/{index}")
            if len(before_prefix) != len(after_prefix):
                self.add(
                    ChangeKind.KEYWORD_CHANGED,
                    pointer,
                    f"prefixItems length {len(before_prefix)} -> {len(after_prefix)}",
                )


def _constraint_kind(keyword: str, before: Any, after: Any) -> ChangeKind:
    """Tightened, loosened or changed: which way one constraint keyword moved."""
    if before is None:
        return ChangeKind.CONSTRAINT_TIGHTENED
    if after is None:
        return ChangeKind.CONSTRAINT_LOOSENED
    if keyword == "uniqueItems":
        return ChangeKind.CONSTRAINT_TIGHTENED if after else ChangeKind.CONSTRAINT_LOOSENED
    numbers = isinstance(before, int | float) and isinstance(after, int | float)
    if keyword in _LOWER_BOUNDS and numbers:
        return ChangeKind.CONSTRAINT_TIGHTENED if after > before else ChangeKind.CONSTRAINT_LOOSENED
    if keyword in _UPPER_BOUNDS and numbers:
        return ChangeKind.CONSTRAINT_TIGHTENED if after < before else ChangeKind.CONSTRAINT_LOOSENED
    if keyword == "multipleOf" and numbers and before and after:
        # Multiples of 0.5 include every multiple of 1.5, not the other way round.
        ratio = Fraction(str(after)) / Fraction(str(before))
        if ratio.denominator == 1:
            return ChangeKind.CONSTRAINT_TIGHTENED
        if (1 / ratio).denominator == 1:
            return ChangeKind.CONSTRAINT_LOOSENED
    return ChangeKind.CONSTRAINT_CHANGED


def _covers(wide: frozenset[str], narrow: frozenset[str]) -> bool:
    """Whether every type in `narrow` is allowed by `wide` (a number can be an integer)."""
    return all(t in wide or (t == "integer" and "number" in wide) for t in narrow)


def _members(node: dict[str, Any]) -> list[Any] | None:
    if isinstance(node.get("enum"), list):
        return list(node["enum"])
    if "const" in node:
        return [node["const"]]
    return None


def _branches(
    node: dict[str, Any], ref: str | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The keyword listing a node's alternatives and the alternatives; a node that is not a
    union is its own one alternative (keyword `None`), a reference again when it was resolved
    from the definition at `ref`, so that it is matched and walked as a union's `$ref` is."""
    for keyword in _UNIONS:
        branches = node.get(keyword)
        if isinstance(branches, list):
            return keyword, [b for b in branches if isinstance(b, dict)]
    if ref is not None:
        # `resolve_ref` percent-decodes a reference: a `%` of the pointer is written `%25`.
        return None, [{"$ref": "#" + ref.replace("%", "%25")}]
    return None, [{k: v for k, v in node.items() if k not in _ANNOTATIONS}]


# One side of a union for `_lone_branch_tag`: its keyword, its branches, its discriminator.
_Union = tuple[str | None, list[dict[str, Any]], str | None]
# One side of a union for `_pair_branches`: its document, its branches, its discriminator values.
_Side = tuple[dict[str, Any], list[dict[str, Any]], list[str] | None]


def _pair_branches(old: _Side, new: _Side) -> list[tuple[int, int]]:
    """Which old branch each new branch is, as (old index, new index) pairs.

    Where every branch of both sides has a discriminator value, that value is the branch's
    identity: a value on one side only is a branch added or removed. Otherwise the branches are
    matched, each step among those still unmatched, by definition name or title (`#/$defs/A`,
    whatever `A` now holds), by identical bytes, by a JSON type only one branch of each side
    has (`Literal["x"]` becoming `Literal["x", "y"]` beside an `int`), and last by position,
    when as many remain on each side. A branch edited inside so keeps its identity, and is
    walked, when other branches come or go.
    """
    old_root, old_branches, old_labels = old
    new_root, new_branches, new_labels = new
    if old_labels is not None and new_labels is not None:
        return [
            (old_labels.index(label), index)
            for index, label in enumerate(new_labels)
            if label in old_labels
        ]
    pairs: list[tuple[int, int]] = []
    old_left = list(range(len(old_branches)))
    new_left = list(range(len(new_branches)))

    def match(key_old: list[Any], key_new: list[Any]) -> None:
        for after in list(new_left):
            key = key_new[after]
            if key is None or [key_new[i] for i in new_left].count(key) != 1:
                continue
            found = [i for i in old_left if key_old[i] == key]
            if len(found) == 1:
                pairs.append((found[0], after))
                old_left.remove(found[0])
                new_left.remove(after)

    match([_name(b) for b in old_branches], [_name(b) for b in new_branches])
    match([canonical_bytes(b) for b in old_branches], [canonical_bytes(b) for b in new_branches])
    match(
        [shape_of(old_root, b).types or None for b in old_branches],
        [shape_of(new_root, b).types or None for b in new_branches],
    )
    if len(old_left) == len(new_left):
        pairs += zip(old_left, new_left, strict=True)
    return pairs


def _name(branch: dict[str, Any]) -> str | None:
    """A branch's name: the definition its `$ref` names, else its `title`."""
    ref = branch.get("$ref")
    if isinstance(ref, str):
        return unescape_token(urllib.parse.unquote(ref).rsplit("/", 1)[-1])
    title = branch.get("title")
    return title if isinstance(title, str) else None


def _discriminator(node: dict[str, Any]) -> str | None:
    """The property that tells a tagged union's branches apart (`discriminator.propertyName`)."""
    found = node.get("discriminator")
    name = found.get("propertyName") if isinstance(found, dict) else None
    return name if isinstance(name, str) else None


def _tags(
    root: dict[str, Any], branches: list[dict[str, Any]], tag: str | None
) -> list[str] | None:
    """Each branch's discriminator value (as JSON), or `None` unless every branch has its own."""
    if tag is None:
        return None
    labels: list[str] = []
    for branch in branches:
        properties = resolve(root, branch)[1].get("properties")
        tagged = properties.get(tag) if isinstance(properties, dict) else None
        members = _members(tagged) if isinstance(tagged, dict) else None
        if members is None or len(members) != 1:
            return None
        labels.append(json.dumps(members[0], ensure_ascii=False))
    return labels if len(set(labels)) == len(labels) else None


def _tag_defaulted(root: dict[str, Any], branch: dict[str, Any], tag: str) -> bool:
    """Whether `branch` (a contract) holds its `tag` property to one value and may leave it out
    (the tag has a default): a value of it without the tag reads."""
    node = resolve(root, branch)[1]
    properties = node.get("properties")
    tagged = properties.get(tag) if isinstance(properties, dict) else None
    members = _members(tagged) if isinstance(tagged, dict) else None
    required = node.get("required")
    return (
        members is not None
        and len(members) == 1
        and not (isinstance(required, list) and tag in required)
    )


def _label(branch: dict[str, Any], tag: str | None, labels: list[str] | None, index: int) -> str:
    """How a message names a branch: its discriminator value and definition, or its schema."""
    if labels is not None and tag is not None:
        ref = branch.get("$ref")
        return f"{tag}={labels[index]}" + (f" ({ref})" if isinstance(ref, str) else "")
    return _short(branch)


def _types(types: frozenset[str]) -> str:
    return " | ".join(sorted(types))


def _short(value: Any, limit: int = 60) -> str:
    """A value as JSON, cut to one readable line."""
    if value is None:
        return "(none)"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."
