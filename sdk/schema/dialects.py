"""Provider wire dialects: the subset of JSON Schema each provider family enforces.

Every provider accepts only part of JSON Schema, and each one differs. A `Dialect` says, in data,
what a provider family accepts; `to_wire(schema, dialect)` turns a canonical schema into the wire
schema to send and lists every `Removal` it made, each with the JSON pointer of the schema node,
the keyword and its value. Removed constraints are not lost: the parser validates the reply
against the canonical schema, so `minimum`, `maxLength` and the rest stay enforced even when the
provider could not constrain generation with them.

    >>> from contracts import ReviewFinding
    >>> wire = to_wire(ReviewFinding, ANTHROPIC)
    >>> [(r.pointer, r.keyword, r.value) for r in wire.removed if r.is_constraint]
    [('/properties/line/anyOf/0', 'minimum', 1)]

This module is pure (no I/O) and its API is stable: the providers use it to build requests, and
`sdk schema lint` uses it to report what each provider would strip. The dialect constants are
the supported way to ask "what would provider X do with this schema". Each is a provider
family's, part of its profile (`sdk.providers.profile("anthropic").dialect`), and looked up
there on first use.

Two rewrites are not removals, because nothing is lost:

- `all_required` dialects (OpenAI strict, llama.cpp, Ollama) list every property in `required`
  and make an optional property nullable (`anyOf: [..., {"type": "null"}]`). OpenAI demands it;
  llama.cpp and Ollama need it because their grammar generator moves required properties ahead
  of optional ones, which would change the generation order. A `null` the model writes for such
  a property means "absent": the parser drops it (`parse(..., absent_nulls=True)`). The
  pointers of these properties are in `WireSchema.nullable`.
- llama.cpp's regex converter cannot handle `\\d`, `\\w` and `\\s` in a `pattern`; dialects with
  `portable_patterns` rewrite them as explicit character classes (ECMA-262 semantics, ASCII).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from weakref import WeakKeyDictionary

# The keyword families (map / list / single subschema) are the canonical module's knowledge of
# JSON Schema's structure; the transform below walks the same structure.
from pydantic import BaseModel

from sdk import _fork
from sdk._values.dialect import BOUNDS
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import HOSTED_FORMATS
from sdk._values.dialect import LOCAL_KEYWORDS
from sdk._values.dialect import Dialect
from sdk._values.dialect import GrammarLimits
from sdk._values.profile import builtin_profiles
from sdk._values.profile import profile
from sdk.schema._shape import resolve
from sdk.schema._shape import shape_of
from sdk.schema.canonical import _SCHEMA_LISTS
from sdk.schema.canonical import _SCHEMA_MAPS
from sdk.schema.canonical import _SCHEMA_SINGLE
from sdk.schema.canonical import escape_pointer
from sdk.schema.canonical import shared_schema

__all__ = [
    "ANNOTATIONS",
    "ANTHROPIC",
    "BOUNDS",
    "CORE_KEYWORDS",
    "DIALECTS",
    "GEMINI",
    "HOSTED_FORMATS",
    "LLAMACPP",
    "LOCAL_KEYWORDS",
    "OLLAMA",
    "OPENAI_STRICT",
    "VLLM",
    "Dialect",
    "GrammarLimits",
    "Removal",
    "WireSchema",
    "dialects",
    "to_wire",
]

ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
     "readOnly", "writeOnly"}
)  # fmt: skip
"""Keywords that describe a value without constraining it: removing one loses no check."""

# ECMA-262 meaning of the class escapes, spelled without escapes (literal whitespace characters).
_CLASS_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_", "s": " \t\n\r\f\v"}

# The built-in dialects by their constant's name: each is the dialect of the family named here
# (its profile holds it; `openai_strict` is both OpenAI APIs').
_CONSTANTS = {
    "ANTHROPIC": "anthropic",
    "OPENAI_STRICT": "openai_responses",
    "GEMINI": "gemini",
    "LLAMACPP": "llamacpp",
    "OLLAMA": "ollama",
    "VLLM": "vllm",
}

if TYPE_CHECKING:
    ANTHROPIC: Dialect
    OPENAI_STRICT: Dialect
    GEMINI: Dialect
    LLAMACPP: Dialect
    OLLAMA: Dialect
    VLLM: Dialect
    DIALECTS: Mapping[str, Dialect]


def __getattr__(name: str) -> Any:
    # The dialects are part of the provider profiles: looked up there on first use.
    if name == "DIALECTS":
        return dialects()
    family = _CONSTANTS.get(name)
    if family is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    dialect = profile(family).dialect
    assert dialect is not None, family
    return dialect


def dialects() -> dict[str, Dialect]:
    """Every built-in family's dialect by the dialect's name (`DIALECTS`)."""
    found = (each.dialect for each in builtin_profiles())
    return {dialect.name: dialect for dialect in found if dialect is not None}


@dataclass(frozen=True, slots=True)
class Removal:
    """One keyword a dialect took out of the wire schema.

    `pointer` is the JSON pointer of the schema node in the canonical schema (`""` is the root,
    `/properties/line/anyOf/0` a branch of a property); `keyword` is what was removed there and
    `value` its value. When a keyword was rewritten into a weaker one (`oneOf` sent as `anyOf`),
    `replaced_with` names what was sent instead.
    """

    pointer: str
    keyword: str
    value: Any
    replaced_with: str | None = None

    @property
    def is_constraint(self) -> bool:
        """Whether the removed keyword constrains values (an annotation or `x-` key does not)."""
        return self.keyword not in ANNOTATIONS and not self.keyword.startswith("x-")

    @property
    def location(self) -> str:
        """The pointer of the removed keyword itself, such as `/properties/line/minimum`."""
        return f"{self.pointer}/{escape_pointer(self.keyword)}"

    def __str__(self) -> str:
        shown = json.dumps(self.value, ensure_ascii=False, default=str)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        rewritten = f" (sent as {self.replaced_with})" if self.replaced_with else ""
        return f"{self.pointer or '/'}: {self.keyword}={shown}{rewritten}"


@dataclass(frozen=True, slots=True)
class WireSchema:
    """A schema as sent to one provider, and what the dialect removed to get there.

    Results of `to_wire` for a contract are cached and shared: treat `schema` as read-only.
    """

    schema: dict[str, Any]
    removed: list[Removal]
    """The constraints the dialect stripped: each one a check the provider does not make (the
    parser still does). What `Result.removed` reports."""
    dialect: str = ""
    nullable: tuple[str, ...] = ()
    """Pointers of optional properties made required and nullable (`all_required` dialects)."""
    annotations_removed: list[Removal] = field(default_factory=list)
    """Annotations and bookkeeping keys taken out (`$schema`, `description`, `x-...`): no check
    is lost with them, so they are kept apart from `removed`."""


def to_wire(schema: type[BaseModel] | Mapping[str, Any], dialect: Dialect) -> WireSchema:
    """The wire schema of `schema` in `dialect`, and every removal made on the way.

    `schema` is a contract class (the result is cached per contract and dialect, and shared) or
    a canonical schema dict (computed each time; the dict is not modified).
    """
    if isinstance(schema, Mapping):
        return _Transform(schema, dialect).run()
    per_contract = _cache.get(schema)
    if per_contract is None:
        with _lock:
            per_contract = _cache.setdefault(schema, {})
    wire = per_contract.get(dialect)
    if wire is None:
        wire = _Transform(shared_schema(schema), dialect).run()
        per_contract[dialect] = wire
    return wire


_cache: WeakKeyDictionary[type[BaseModel], dict[Dialect, WireSchema]] = WeakKeyDictionary()
_lock = _fork.lock()


class _Transform:
    """One run of the dialect transform over one schema (pure: the input is not modified)."""

    def __init__(self, root: Mapping[str, Any], dialect: Dialect) -> None:
        self.root = root
        self.dialect = dialect
        self.removed: dict[tuple[str, str], Removal] = {}  # keyed to drop inlining duplicates
        self.nullable: list[str] = []

    def run(self) -> WireSchema:
        schema = self.node(self.root, "")
        removals = list(self.removed.values())
        return WireSchema(
            schema=schema,
            removed=[removal for removal in removals if removal.is_constraint],
            dialect=self.dialect.name,
            nullable=tuple(dict.fromkeys(self.nullable)),
            annotations_removed=[removal for removal in removals if not removal.is_constraint],
        )

    def remove(
        self, pointer: str, keyword: str, value: Any, replaced_with: str | None = None
    ) -> None:
        self.removed.setdefault(
            (pointer, keyword), Removal(pointer, keyword, copy.deepcopy(value), replaced_with)
        )

    def node(self, node: Mapping[str, Any], pointer: str) -> dict[str, Any]:
        ref = node.get("$ref")
        if isinstance(ref, str) and len(node) > 1 and self.dialect.ref_siblings != "keep":
            return self.ref_with_siblings(node, ref, pointer)
        out: dict[str, Any] = {}
        hints: list[str] = []
        for key, value in node.items():
            if key in _SCHEMA_MAPS:
                self.schema_map(out, key, value, pointer)
            elif key in _SCHEMA_LISTS:
                self.schema_list(out, key, value, pointer)
            elif key in _SCHEMA_SINGLE:
                self.schema_single(out, key, value, pointer)
            elif self.keeps(key, value, node):
                out[key] = self.rewrite(key, value, pointer)
            else:
                self.remove(pointer, key, value)
                if self.dialect.hint_removed and Removal(pointer, key, value).is_constraint:
                    hints.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
        if self.dialect.all_required and isinstance(out.get("properties"), dict):
            self.require_all(out, node, pointer)
        if hints:
            # Like the Anthropic SDK's own helper: the API cannot enforce these, but the model
            # reads descriptions, so saying them raises the chance the first answer is valid.
            said = out.get("description")
            hint = "{" + ", ".join(hints) + "}"
            out["description"] = f"{said}\n\n{hint}" if isinstance(said, str) else hint
        return out

    def ref_with_siblings(self, node: Mapping[str, Any], ref: str, pointer: str) -> dict[str, Any]:
        # `$defs` beside a `$ref` (the root of a recursive contract) is where the `$ref` points:
        # it is kept in every dialect; only the other siblings are dropped or inlined.
        defs: dict[str, Any] = {}
        if "$defs" in node:
            self.schema_map(defs, "$defs", node["$defs"], pointer)
        siblings = {key: value for key, value in node.items() if key not in ("$ref", "$defs")}
        if not siblings:
            return {**defs, "$ref": ref}
        if self.dialect.ref_siblings == "drop":
            for key, value in siblings.items():
                self.remove(pointer, key, value)
            return {**defs, "$ref": ref}
        # Inline one level: the target's own `$ref`s stay references, so recursion terminates.
        target_pointer, target = resolve(dict(self.root), {"$ref": ref})
        inlined = self.node(target, target_pointer or "")
        return {**defs, **inlined, **self.node(siblings, pointer)}

    def schema_map(self, out: dict[str, Any], key: str, value: Any, pointer: str) -> None:
        if key not in self.dialect.keywords or not isinstance(value, Mapping):
            self.remove(pointer, key, value)
            return
        out[key] = {
            name: self.node(child, f"{pointer}/{key}/{escape_pointer(name)}")
            if isinstance(child, Mapping)
            else child
            for name, child in value.items()
        }

    def schema_list(self, out: dict[str, Any], key: str, value: Any, pointer: str) -> None:
        sent = "anyOf" if key == "oneOf" and self.dialect.one_of_as_any_of else key
        if sent not in self.dialect.keywords or not isinstance(value, list):
            self.remove(pointer, key, value)
            return
        if sent != key:
            self.remove(pointer, key, value, replaced_with=sent)
        out[sent] = [
            self.node(child, f"{pointer}/{key}/{index}") if isinstance(child, Mapping) else child
            for index, child in enumerate(value)
        ]

    def schema_single(self, out: dict[str, Any], key: str, value: Any, pointer: str) -> None:
        if key == "additionalProperties" and value is not False and self.dialect.closed_objects:
            # A dict field (`dict[str, X]`) cannot be expressed: the provider only generates `{}`.
            self.remove(pointer, key, value, replaced_with="false")
            out[key] = False
            return
        if key not in self.dialect.keywords:
            self.remove(pointer, key, value)
            return
        out[key] = self.node(value, f"{pointer}/{key}") if isinstance(value, Mapping) else value

    def keeps(self, key: str, value: Any, node: Mapping[str, Any]) -> bool:
        dialect = self.dialect
        if key not in dialect.keywords:
            return False
        if key == "format":
            return dialect.formats is None or value in dialect.formats
        if key == "minItems":
            return dialect.max_min_items is None or value <= dialect.max_min_items
        if key in BOUNDS and dialect.integer_bounds_only:
            return node.get("type") == "integer"
        if key == "pattern" and dialect.portable_patterns:
            return isinstance(value, str) and _portable_pattern(value) is not None
        return True

    def rewrite(self, key: str, value: Any, pointer: str) -> Any:
        if key == "pattern" and self.dialect.portable_patterns:
            return _portable_pattern(value)
        if key == "required" and isinstance(value, list):
            return list(value)
        if isinstance(value, (dict, list)):
            return copy.deepcopy(value)
        return value

    def require_all(self, out: dict[str, Any], node: Mapping[str, Any], pointer: str) -> None:
        properties: dict[str, Any] = out["properties"]
        required = set(node.get("required", ()))
        for name, child in properties.items():
            if name in required or not isinstance(child, dict):
                continue
            self.nullable.append(f"{pointer}/properties/{escape_pointer(name)}")
            if not _admits_null(child, self.root):
                properties[name] = {"anyOf": [child, {"type": "null"}]}
        out["required"] = list(properties)


def _admits_null(node: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    """Whether `null` is valid against `node` (a nullable union, type or enum)."""
    return shape_of(dict(root), dict(node)).nullable


def _portable_pattern(pattern: str) -> str | None:
    """`pattern` with `\\d`, `\\w`, `\\s` spelled out; `None` if a negated one sits in a class."""
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            escaped = pattern[index + 1]
            index += 2
            lower = escaped.lower()
            if lower in _CLASS_ESCAPES:
                negated = escaped != lower
                if in_class and negated:
                    return None  # [^...] cannot be nested in a class: leave it to the parser
                members = _CLASS_ESCAPES[lower]
                out.append(members if in_class else f"[{'^' if negated else ''}{members}]")
            else:
                out.append(char + escaped)
            continue
        if char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class:
            in_class = False
        out.append(char)
        index += 1
    return "".join(out)
