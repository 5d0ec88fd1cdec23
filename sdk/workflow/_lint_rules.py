"""The linter's rules: one function per finding code, each reading a `Context`.

The rules judge fields by their names (a field called `reasoning` is free text, `invoice_id` an
identifier) because a schema says nothing else about intent. The word lists below are therefore
the rules' real content: extend them here, and add a test for the word you add.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING
from typing import Any

from sdk.schema._shape import Field
from sdk.schema._shape import Shape
from sdk.schema._shape import iter_nodes
from sdk.schema._shape import name_tokens
from sdk.schema._shape import node_at
from sdk.schema._shape import object_fields
from sdk.schema._shape import resolve
from sdk.schema._shape import shape_of
from sdk.schema._vocabulary import ANSWER_WORDS
from sdk.schema._vocabulary import DATE_FORMATS
from sdk.schema._vocabulary import DATE_SUFFIXES
from sdk.schema._vocabulary import DATE_WORDS
from sdk.schema._vocabulary import IDENTIFIER_WORDS
from sdk.schema._vocabulary import PROSE_WORDS
from sdk.schema._vocabulary import REASONING_WORDS
from sdk.schema._vocabulary import SCALE_WORDS
from sdk.schema._vocabulary import is_escape
from sdk.schema.canonical import subschemas
from sdk.workflow._linting import Finding
from sdk.workflow._linting import LintCode

if TYPE_CHECKING:
    from sdk.schema.dialects import Dialect

__all__ = ["LOCAL_DIALECTS", "RULES", "TIGHT_MAX_LENGTH", "Context"]

LOCAL_DIALECTS = frozenset({"llamacpp", "ollama", "vllm"})
"""The dialects of local engines: a small model there can repeat itself until `max_tokens`."""

TIGHT_MAX_LENGTH = 200
"""A `maxLength` below this on free text is "tight": prose gets cut or squeezed."""

# Content that differs per request: one in a description means the schema never caches.
VOLATILE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "UUID",
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
    ),
    ("timestamp", re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?")),
    ("date", re.compile(r"\b(19|20)\d{2}-\d{2}-\d{2}\b")),
    ("time of day", re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b")),
    ("Unix timestamp", re.compile(r"\b1[5-9]\d{8}(\d{3})?\b")),
    (
        "request id",
        re.compile(
            r"\b(req|request|msg|chatcmpl|resp|run|trace|span|session|call)[_-][A-Za-z0-9]*\d"
            r"[A-Za-z0-9_-]{4,}"
        ),
    ),
    (
        "request id",
        re.compile(
            r"\b(request|trace|correlation|session)[ _-]?id\s*[:=#]?\s*[A-Za-z0-9_-]*\d", re.I
        ),
    ),
    ("hex token", re.compile(r"\b[0-9a-f]{16,}\b", re.I)),
)


# --- context ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldView:
    """A property with its shape: what most rules look at."""

    field: Field
    shape: Shape
    object_pointer: str

    @property
    def tokens(self) -> list[str]:
        return name_tokens(self.field.name)

    @property
    def free_text(self) -> bool:
        """A string of prose: no enum, const or format, and named like prose or a quote."""
        core = self.shape.core
        if self.shape.types != {"string"} or self.shape.enum is not None or "format" in core:
            return False
        return bool(core.get("x-source-quote")) or bool(set(self.tokens) & PROSE_WORDS)


class Context:
    """One schema being linted, and the dialect(s) it is linted for."""

    def __init__(
        self,
        root: dict[str, Any],
        dialect: Dialect | None,
        limit_dialects: list[Dialect],
        local: str | None = None,
    ) -> None:
        self.root = root
        self.dialect = dialect
        self.limit_dialects = limit_dialects
        self.local = local
        """The local target linted for (`None`: a hosted one, or none)."""

    @cached_property
    def fields(self) -> list[FieldView]:
        """Every property of every object node (definitions included), in document order."""
        views = []
        for pointer, node in iter_nodes(self.root):
            for field in object_fields(node, pointer):
                views.append(FieldView(field, shape_of(self.root, field.schema), pointer))
        return views

    @cached_property
    def stats(self) -> _Stats:
        return _Stats.of(self.root)


# --- rules -----------------------------------------------------------------------------------

Rule = Callable[[Context], Iterator[Finding]]


def _finding(
    code: str, pointer: str, message: str, fix: str, provider: str | None = None
) -> Finding:
    return Finding(LintCode(code), pointer, message, fix, provider)


def no_abstention(ctx: Context) -> Iterator[Finding]:
    """A required, non-nullable number, date or identifier: often absent from the source."""
    for view in ctx.fields:
        if not view.field.required or view.shape.nullable or view.shape.enum is not None:
            continue
        kind = _absent_prone(view)
        if kind is None:
            continue
        name = view.field.name
        yield _finding(
            "no-abstention",
            view.field.pointer,
            f"required {kind} {name!r} cannot be null: when the source does not state it, the "
            "grammar leaves the model no way to say so, and it invents one",
            f"make it nullable (`{_python_type(view.shape)} | None`, saying in its description "
            "when null applies), or suppress with the reason it is always present",
        )


def _absent_prone(view: FieldView) -> str | None:
    types, tokens = view.shape.types, view.tokens
    if not types or not tokens:
        return None
    if types <= {"number", "integer"}:
        return "number"
    if types == {"string"} and (
        view.shape.core.get("format") in DATE_FORMATS
        or set(tokens) & DATE_WORDS
        or (len(tokens) > 1 and tokens[-1] in DATE_SUFFIXES)
    ):
        return "date"
    if types <= {"string", "integer"} and tokens[-1] in IDENTIFIER_WORDS:
        return "identifier"
    return None


def _python_type(shape: Shape) -> str:
    names = {"number": "float", "integer": "int", "string": "str"}
    return " | ".join(names.get(t, t) for t in sorted(shape.types))


def enum_no_escape(ctx: Context) -> Iterator[Finding]:
    """A classification enum with no member that means "none of these"."""
    for view in ctx.fields:
        members = view.shape.enum
        if members is None or len(members) < 2 or view.shape.nullable:
            continue
        if set(view.tokens) & SCALE_WORDS:
            continue
        if any(is_escape(member) for member in members):
            continue
        shown = ", ".join(str(m) for m in members)
        yield _finding(
            "enum-no-escape",
            view.field.pointer,
            f"{view.field.name!r} must be one of {shown}: an input that fits none of them is "
            "forced into one, and the wrong label looks as confident as a right one",
            "add an `unknown` (or `other`, `none`) member, or make the field nullable",
        )


def reasoning_after_answer(ctx: Context) -> Iterator[Finding]:
    """A reasoning-like free-text field generated after an answer-like field."""
    by_object: dict[str, list[FieldView]] = {}
    for view in ctx.fields:
        by_object.setdefault(view.object_pointer, []).append(view)
    for views in by_object.values():
        answer: FieldView | None = None
        for view in views:
            tokens = set(view.tokens)
            if answer is None and tokens & ANSWER_WORDS and not tokens & REASONING_WORDS:
                answer = view
            elif answer is not None and tokens & REASONING_WORDS and view.shape.types == {"string"}:
                a, r = answer.field.name, view.field.name
                yield _finding(
                    "reasoning-after-answer",
                    view.field.pointer,
                    f"{r!r} comes after {a!r}: fields are generated in order, so it is written "
                    f"after the model has committed to {a!r} and can only justify it",
                    f"declare {r!r} before {a!r}",
                )


def free_text_constraints(ctx: Context) -> Iterator[Finding]:
    """A `pattern` or a tight `maxLength` on prose (or on the items of a list of prose)."""
    for view in ctx.fields:
        pointer, text = view.field.pointer, view
        items = view.shape.core.get("items")
        if view.shape.types == {"array"} and isinstance(items, dict):
            # `notes: list[str]`: the items are judged by the list's name.
            pointer = f"{pointer}/items"
            text = FieldView(view.field, shape_of(ctx.root, items), view.object_pointer)
        if not text.free_text:
            continue
        name, core = view.field.name, text.shape.core
        if "pattern" in core:
            yield _finding(
                "pattern-on-free-text",
                pointer,
                f"regex pattern on free text {name!r}: the grammar forces the model off its "
                "natural tokens, which degrades this field and the ones after it",
                "drop the pattern and check the text after parsing (a model validator), or "
                "make the field a structured value (an enum, a number)",
            )
        limit = core.get("maxLength")
        if isinstance(limit, int) and limit < TIGHT_MAX_LENGTH:
            yield _finding(
                "tight-max-length",
                pointer,
                f"maxLength {limit} on free text {name!r}: the model is cut off mid-thought "
                "or squeezes the content to fit",
                f"drop maxLength or raise it to {TIGHT_MAX_LENGTH} or more; ask for brevity "
                "in the description instead",
            )


def dialect_strips(ctx: Context) -> Iterator[Finding]:
    """Constraints the chosen provider's dialect does not send (the parser still checks them)."""
    if ctx.dialect is None:
        return
    from sdk.schema.dialects import to_wire
    from sdk.schema.preflight import closes_a_map

    name = ctx.dialect.name
    for removal in to_wire(ctx.root, ctx.dialect).removed:
        if removal.keyword in _STRUCTURE:
            continue  # how the document is organised, not a check on values
        if closes_a_map(removal):  # no parser check can catch it: the call is refused
            yield _finding(
                "dialect-strips",
                removal.location,
                f"{name} closes every object: this map (additionalProperties="
                f"{_short(removal.value)}, sent as false) can only be generated as {{}}, which "
                "passes every check, so a call is refused (UnsupportedRequest) unless it passes "
                "accept_weakened_schema=True",
                "use a list of key/value items (list[Entry]) instead of a map, or a provider "
                "that keeps maps; a suppression does not make the call go through",
                provider=name,
            )
            continue
        sent = f" (sent as {removal.replaced_with})" if removal.replaced_with else ""
        yield _finding(
            "dialect-strips",
            removal.location,  # the keyword itself: two stripped from one node stay apart
            f"{name} does not enforce {removal.keyword}={_short(removal.value)}{sent}: the "
            "model is not held to it, so a value breaking it fails in the parser and costs a retry",
            f"drop or loosen it if retries are too costly for {name}; otherwise suppress with "
            "the reason the parser-side check is enough",
            provider=name,
        )


_STRUCTURE = frozenset({"$defs", "$ref"})


def volatile_text(ctx: Context) -> Iterator[Finding]:
    """Per-request content (timestamps, UUIDs, request ids) in descriptions or titles."""
    for pointer, node in iter_nodes(ctx.root):
        for keyword in ("title", "description", "$comment"):
            text = node.get(keyword)
            if not isinstance(text, str):
                continue
            for label, pattern in VOLATILE_PATTERNS:
                match = pattern.search(text)
                if match is None:
                    continue
                yield _finding(
                    "volatile-text",
                    pointer,
                    f"{keyword} contains what looks like a {label} ({match.group(0)!r}): a schema "
                    "whose bytes change per request never hits the provider's schema cache or "
                    "the prompt cache",
                    "keep schema text static; put per-request values in the prompt",
                )
                break  # one finding per text is enough


def size_limits(ctx: Context) -> Iterator[Finding]:
    """Counts, depth and recursion beyond what a provider's grammar compiler accepts."""
    stats = ctx.stats
    for dialect in ctx.limit_dialects:
        limits, name = dialect.limits, dialect.name
        if limits is None:
            continue
        note = f" ({limits.note})" if limits.note else ""
        counted = (
            ("properties", stats.properties, limits.max_properties),
            ("optional fields", stats.optional, limits.max_optional),
            ("fields with union types (nullable included)", stats.unions, limits.max_unions),
            ("enum values", stats.enum_values, limits.max_enum_values),
        )
        for what, count, limit in counted:
            if limit is not None and count > limit:
                yield _finding(
                    "too-large",
                    "",
                    f"{count} {what}: {name} compiles at most {limit}{note}",
                    "split the contract in two calls, or make fields required (nullable where "
                    "they may be absent) and flatten what you can",
                    provider=name,
                )
        if limits.max_depth is not None and stats.depth > limits.max_depth:
            yield _finding(
                "too-deep",
                stats.deepest,
                f"objects nest {stats.depth} levels deep: {name} accepts at most "
                f"{limits.max_depth}",
                "flatten the nesting (a nested object whose fields can live in its parent)",
                provider=name,
            )
        if not limits.recursion:
            for pointer in stats.recursive:
                yield _finding(
                    "recursive-schema",
                    pointer,
                    f"this definition refers to itself: {name} compiles no recursive schema",
                    "bound the recursion (a fixed number of nested levels, each its own "
                    "contract), or use a provider that compiles recursion",
                    provider=name,
                )


def unbounded_output(ctx: Context) -> Iterator[Finding]:
    """A list with no `maxItems`, a map with no `maxProperties` or a free string with no
    `maxLength` on a local target: where a small model repeats an item, a phrase or a blank until
    `max_tokens`, paid in full (the stream guard stops what it sees; a bound in the grammar ends
    it there). A string copied from the source (`Verbatim`, `SourceQuote`) is bounded by the
    source on a target that grounds copied values while decoding."""
    if ctx.local is None:
        return
    from sdk.schema.grounding import SOURCE_QUOTE_KEY
    from sdk.schema.grounding import VERBATIM_KEY
    from sdk.schema.preflight import target_named
    from sdk.schema.preflight import unbounded

    grounded = bool(target_named(ctx.local).grounding)
    for item in unbounded(ctx.root):
        if item.keyword in ("maxItems", "maxProperties"):
            what = "list" if item.keyword == "maxItems" else "map"
            yield _finding(
                "unbounded-output",
                item.pointer,
                f"a {what} with no upper bound ({item.keyword}) on {ctx.local}: a small model "
                "can repeat an item here until max_tokens, paid in full",
                f"bound it with Field(max_length=N), N the most items a real document has: "
                f"the grammar then ends the {what} there",
                provider=ctx.local,
            )
            continue
        node = node_at(ctx.root, item.pointer)
        if grounded and (node.get(SOURCE_QUOTE_KEY) or node.get(VERBATIM_KEY)):
            continue
        yield _finding(
            "unbounded-output",
            item.pointer,
            f"a string with no upper bound (maxLength) on {ctx.local}: a small model can "
            "repeat a phrase or write blanks here until max_tokens, paid in full",
            "bound it with Field(max_length=N), N the longest real value: the grammar then "
            "ends the string there",
            provider=ctx.local,
        )


RULES: tuple[Rule, ...] = (
    no_abstention,
    enum_no_escape,
    reasoning_after_answer,
    free_text_constraints,
    dialect_strips,
    volatile_text,
    size_limits,
    unbounded_output,
)


# --- schema statistics for the size rules ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Stats:
    properties: int
    optional: int
    unions: int
    enum_values: int
    depth: int
    deepest: str
    recursive: tuple[str, ...]

    @classmethod
    def of(cls, root: dict[str, Any]) -> _Stats:
        properties = optional = unions = enum_values = 0
        for pointer, node in iter_nodes(root):
            fields = object_fields(node, pointer)
            properties += len(fields)
            optional += sum(1 for field in fields if not field.required)
            unions += sum(1 for field in fields if _is_union(field.schema))
            if isinstance(node.get("enum"), list):
                enum_values += len(node["enum"])
        walk = _DepthWalk(root)
        depth, deepest = walk.depth(root, "", ())
        return cls(properties, optional, unions, enum_values, depth, deepest, tuple(walk.recursive))


def _is_union(node: dict[str, Any]) -> bool:
    return isinstance(node.get("anyOf"), list) or isinstance(node.get("type"), list)


class _DepthWalk:
    """Object nesting depth through `$ref`s, and the definitions that reach themselves."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.recursive: list[str] = []
        self._memo: dict[str, tuple[int, str]] = {}

    def depth(self, node: dict[str, Any], pointer: str, stack: tuple[str, ...]) -> tuple[int, str]:
        """(levels of objects at and below `node`, pointer of the deepest object)."""
        target, resolved = resolve(self.root, node)
        if target is not None:
            if target in stack:
                if target not in self.recursive:
                    self.recursive.append(target)
                return 0, pointer
            if target not in self._memo:
                self._memo[target] = self.depth(
                    {k: v for k, v in resolved.items() if k != "$ref"}, target, (*stack, target)
                )
            return self._memo[target]
        best, deepest = 0, pointer
        for suffix, child in subschemas(node):
            if suffix.startswith("/$defs/"):
                continue  # definitions count where they are referenced
            below, where = self.depth(child, pointer + suffix, stack)
            if below > best:
                best, deepest = below, where
        if "properties" in node:
            return best + 1, deepest if best else pointer
        return best, deepest


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
