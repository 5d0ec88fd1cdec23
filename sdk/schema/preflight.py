"""Preflight: what a target (provider, route, decoding engine) will do with a contract's schema,
said before anything is sent.

For each target the SDK states four things about a schema:

- **enforced while decoding**: the constraint keywords the target's engine holds the model to;
- **stripped or ignored**: what the SDK's wire dialect removes for it (`sdk.schema.dialects`)
  and what its engine accepts but does not enforce (vLLM's xgrammar ignores `allOf`, say);
- **re-checked after parsing**: of those, what the defensive parser still checks (the schema
  step validates the canonical schema, the contract step the Python types): the promise holds,
  a reply that breaks it costs a retry;
- **cannot promise**: what no step can check. Some of it is true of every target (a valid
  document can still be wrong about the world), some is a weakening a target would make
  silently: a map field (`dict[str, X]`) sent to a target whose objects are closed can only be
  generated empty, and an empty map is valid, so no check after parsing can catch it. Such a
  schema is refused before sending (`UnsupportedRequest` naming the keyword and the target)
  unless the caller accepts the weakening explicitly.

And what it does with an `Anchor` (`x-anchor`): its `after` regions are enforced while
decoding where the target grounds copied values (`Target.grounding`), and every anchor is
re-checked after parsing, on every target.

Targets are data (`TARGETS`): the docs' preflight table is generated from them
(`preflight_table`), and `tests/test_preflight.py` holds the docs to it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

from pydantic import BaseModel

from sdk.schema._shape import iter_nodes
from sdk.schema.canonical import shared_schema
from sdk.schema.dialects import ANNOTATIONS
from sdk.schema.dialects import ANTHROPIC
from sdk.schema.dialects import GEMINI
from sdk.schema.dialects import LLAMACPP
from sdk.schema.dialects import OLLAMA
from sdk.schema.dialects import OPENAI_STRICT
from sdk.schema.dialects import VLLM
from sdk.schema.dialects import Dialect
from sdk.schema.dialects import Removal
from sdk.schema.dialects import to_wire
from sdk.schema.grounding import ANCHOR_KEY

__all__ = [
    "ALWAYS_UNPROMISED",
    "TARGETS",
    "Preflight",
    "PreflightItem",
    "Target",
    "closes_a_map",
    "preflight",
    "preflight_table",
    "target_named",
    "target_of",
    "unbounded",
    "weakened_error_message",
]

Grammar = Literal["gbnf", "llguidance"]

ALWAYS_UNPROMISED: tuple[str, ...] = (
    "that the values are true: a grammar guarantees form, never content (semantic checks and "
    "`SourceQuote`/`Verbatim` spans catch part of it)",
    "a whole document: a reply cut by `max_tokens` is a prefix (`TruncatedOutput`, decided "
    "before parsing)",
)
"""What no target and no check can promise."""

_STRUCTURE = frozenset(
    {"type", "properties", "required", "items", "$ref", "$defs", "anyOf", "prefixItems",
     "additionalProperties"}
)  # fmt: skip
"""Keywords that shape a document rather than constrain its values (listed apart)."""


@dataclass(frozen=True)
class Target:
    """One way a schema reaches a model: a provider, a route, a decoding engine."""

    name: str
    """The table row's name (`vllm-xgrammar`)."""
    provider: str
    """The provider family (a registered `Profile`'s name: `sdk.providers.profile(name)`)."""
    route: str
    """Where the schema goes on the wire."""
    engine: str
    """What enforces it while decoding."""
    dialect: Dialect | None = None
    """The wire dialect the SDK sends in; `None`: the SDK's own grammar (`grammar`)."""
    grammar: Grammar | None = None
    """The SDK's own converter, when the target decodes with the SDK's grammar."""
    ignores: frozenset[str] = frozenset()
    """Keywords the engine accepts and does not enforce while decoding (the parser still does)."""
    whitespace: str = "the provider's own (not bounded by the SDK)"
    """The whitespace and repetition bound the SDK sends, if the target takes one."""
    unpromised: tuple[str, ...] = ()
    """What this target cannot promise, beyond `ALWAYS_UNPROMISED`."""
    grounding: str = ""
    """The grammar that confines copied values (`SourceQuote`, `Verbatim`) to spans of the
    source while decoding, and with them an `Anchor`'s `after` regions (`x-anchor`); empty:
    the target grounds nothing while decoding (the parser checks after)."""

    @property
    def closed_objects(self) -> bool:
        return self.dialect is not None and self.dialect.closed_objects


_GBNF_WHITESPACE = (
    "bounded by the SDK's grammar: one space, or a newline and at most 16 spaces, between "
    "tokens; numbers of at most 16 digits"
)
_VLLM_WHITESPACE = (
    "none: the SDK sends `structured_outputs.disable_any_whitespace` (a compact document; "
    "xgrammar and guidance honour it)"
)

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "anthropic",
            "anthropic",
            "Messages `output_config.format` json_schema (or strict tool input)",
            "Anthropic's constrained decoding",
            ANTHROPIC,
        ),
        Target(
            "openai-responses",
            "openai_responses",
            "Responses `text.format` json_schema, strict",
            "OpenAI's constrained decoding",
            OPENAI_STRICT,
        ),
        Target(
            "openai-chat",
            "openai_chat",
            "Chat Completions `response_format` json_schema, strict",
            "OpenAI's constrained decoding",
            OPENAI_STRICT,
        ),
        Target(
            "gemini",
            "gemini",
            "`generation_config.response_json_schema`",
            "Gemini's controlled generation",
            GEMINI,
        ),
        Target(
            "llamacpp",
            "llamacpp",
            '`/completion` `grammar` (mode="auto" and "grammar")',
            "llama.cpp's GBNF sampler, on the SDK's grammar",
            grammar="gbnf",
            whitespace=_GBNF_WHITESPACE,
            grounding="the grounded GBNF (a source longer than `grounding_limit`, "
            "`GBNF_SOURCE_LIMIT` characters by default, goes with the plain grammar)",
        ),
        Target(
            "llamacpp-json-schema",
            "llamacpp",
            '`/completion` `json_schema` (mode="json_schema")',
            "llama.cpp's own schema converter",
            LLAMACPP,
            whitespace="bounded by llama.cpp's converter, not the SDK: a space, or one or two "
            "newlines and at most 20 spaces or tabs, between tokens",
            unpromised=(
                "that the schema was applied: a schema its converter cannot compile is "
                "generated unconstrained, with status 200 (the parser re-checks every reply)",
            ),
        ),
        Target(
            "vllm-xgrammar",
            "vllm",
            "`structured_outputs.json`",
            "xgrammar",
            VLLM,
            ignores=frozenset({"allOf", "minProperties", "maxProperties", "format"}),
            whitespace=_VLLM_WHITESPACE,
            grounding="the grounded Lark grammar, which vLLM's `auto` backend hands to "
            "`guidance` (xgrammar cannot read it)",
        ),
        Target(
            "vllm-guidance",
            "vllm",
            "`structured_outputs.json`",
            "llguidance",
            VLLM,
            whitespace=_VLLM_WHITESPACE,
            grounding="the grounded Lark grammar",
        ),
        Target(
            "ollama",
            "ollama",
            "`/api/chat` `format` schema",
            "llama.cpp's schema converter, inside Ollama",
            OLLAMA,
            unpromised=(
                "the generation order on older servers (alphabetical keys, ollama #8003): "
                "a reasoning field may be written after the answer",
            ),
        ),
        Target(
            "embedded",
            "embedded",
            "in-process (the canonical schema, compiled by llguidance)",
            "llguidance",
            grammar="llguidance",
            whitespace="at most one space after `,` and `:` (llguidance's compile options)",
            grounding="the grounded Lark grammar",
        ),
    )
}
"""Every target, by name."""

# Each provider family's default target, and the targets a `--target` alias names.
_DEFAULT_TARGET = {t.provider: t.name for t in reversed(list(TARGETS.values()))}
_DEFAULT_TARGET["vllm"] = "vllm-xgrammar"  # vLLM's "auto" backend tries xgrammar first
_DEFAULT_TARGET["llamacpp"] = "llamacpp"


def target_named(name: str) -> Target:
    """A target by its name or by a provider's name (its default route); `ValueError` naming
    the valid names otherwise."""
    key = name.strip().lower().replace("_", "-")
    if key in TARGETS:
        return TARGETS[key]
    from sdk._values.profile import profile

    try:
        provider = profile(name).name
    except ValueError:
        provider = ""
    if provider in _DEFAULT_TARGET:
        return TARGETS[_DEFAULT_TARGET[provider]]
    raise ValueError(f"unknown target {name!r}; targets: {', '.join(TARGETS)}")


def target_of(chosen: Target | str | Any) -> Target:
    """The target of a `Target`, a name (`target_named`), or a provider: the route its codec
    sends on (`ValueError` for a fallback list, which goes to several in turn; `TypeError` for
    anything else)."""
    if isinstance(chosen, Target):
        return chosen
    if isinstance(chosen, str):
        return target_named(chosen)
    candidates = getattr(chosen, "candidates", None)
    profile = getattr(getattr(chosen, "codec", None), "profile", None)
    if not callable(candidates) or profile is None:
        raise TypeError(
            f"preflight takes a target (a Target, a target's or a provider's name) or a "
            f"provider, not {chosen!r}"
        )
    routes = candidates()
    if len(routes) > 1:
        raise ValueError(
            f"{chosen!r} goes to {len(routes)} providers in turn: preflight each of its "
            "candidates()"
        )
    if routes and routes[0] is not chosen:
        return target_of(routes[0])
    try:
        return target_named(profile.target or profile.name)
    except ValueError:
        raise ValueError(
            f"{chosen!r} sends no schema to a target of the preflight table; targets: "
            f"{', '.join(TARGETS)}"
        ) from None


@dataclass(frozen=True, slots=True)
class PreflightItem:
    """One keyword at one place of the schema, and what happens to it."""

    pointer: str
    keyword: str
    value: Any
    why: str = ""

    def __str__(self) -> str:
        where = f"{self.pointer or '/'}: {self.keyword}"
        return f"{where} ({self.why})" if self.why else where


@dataclass(frozen=True)
class Preflight:
    """What one target will do with one schema (see the module docstring)."""

    target: Target
    schema: str
    """The contract's name."""
    enforced: list[PreflightItem] = field(default_factory=list)
    stripped: list[PreflightItem] = field(default_factory=list)
    rechecked: list[PreflightItem] = field(default_factory=list)
    weakened: list[PreflightItem] = field(default_factory=list)
    """Promises the target would weaken silently and no check can restore: refused."""
    refused_by_converter: list[PreflightItem] = field(default_factory=list)
    """What the SDK's own grammar converter cannot write (the call goes another way or fails)."""
    unbounded: list[PreflightItem] = field(default_factory=list)
    """Lists and strings with no upper bound: room for a runaway reply (the linter's fix)."""

    @property
    def unpromised(self) -> list[str]:
        """What cannot be promised: this schema's weakenings, the target's, everyone's."""
        said = [f"{item} on {self.target.name}" for item in self.weakened]
        return [*said, *self.target.unpromised, *ALWAYS_UNPROMISED]

    def lines(self) -> list[str]:
        """The preflight as a reader takes it in, a line a statement."""
        t = self.target
        out = [f"{self.schema} on {t.name} ({t.route}; {t.engine}):"]
        sections = (
            ("enforced while decoding", _keywords(self.enforced)),
            ("stripped or ignored", ", ".join(map(str, self.stripped)) or "nothing"),
            ("re-checked after parsing", ", ".join(map(str, self.rechecked)) or "nothing"),
            ("whitespace", t.whitespace),
            ("unbounded", ", ".join(map(str, self.unbounded)) or "nothing"),
        )
        out += [f"  {label}: {text}" for label, text in sections]
        if self.refused_by_converter:
            shown = ", ".join(map(str, self.refused_by_converter))
            out.append(f"  the SDK's grammar converter refuses: {shown}")
        out += [f"  cannot promise: {text}" for text in self.unpromised]
        return out


def preflight(schema: type[BaseModel] | Mapping[str, Any], target: Target | str | Any) -> Preflight:
    """What `target` will do with a contract (or a canonical schema document). `target`: a
    `Target`, its name or a provider family's, or a provider (`AnthropicProvider(...)`): the
    target of the route it was built for (`LlamaCppProvider(mode="json_schema")` is
    `llamacpp-json-schema`)."""
    target = target_of(target)
    root = dict(shared_schema(schema) if isinstance(schema, type) else schema)
    title = root.get("title")
    report = Preflight(target, title if isinstance(title, str) else "(schema)")
    if target.dialect is not None:
        _dialect_preflight(root, target, report)
    else:
        _grammar_preflight(root, target, report)
    report.unbounded.extend(unbounded(root))
    _anchor_preflight(root, target, report)
    return report


def _anchor_preflight(root: dict[str, Any], target: Target, report: Preflight) -> None:
    """Each anchor (`x-anchor`): enforced while decoding where the target grounds copied
    values and the anchor has `after` labels, and checked after parsing everywhere."""
    for pointer, node in iter_nodes(root):
        anchor = node.get(ANCHOR_KEY)
        if not isinstance(anchor, Mapping):
            continue
        if target.grounding and anchor.get("after"):
            why = f"its `after` labels' regions, by {target.grounding}, given a source"
            report.enforced.append(PreflightItem(pointer, ANCHOR_KEY, anchor, why))
        why = "by the source check: its regions and its `not_after` labels"
        report.rechecked.append(PreflightItem(pointer, ANCHOR_KEY, anchor, why))


def _dialect_preflight(root: dict[str, Any], target: Target, report: Preflight) -> None:
    assert target.dialect is not None
    wire = to_wire(root, target.dialect)
    for removal in wire.removed:
        item = PreflightItem(removal.pointer, removal.keyword, removal.value,
                             f"sent as {removal.replaced_with}" if removal.replaced_with
                             else "removed")  # fmt: skip
        if closes_a_map(removal):
            report.weakened.append(
                PreflightItem(
                    removal.pointer,
                    removal.keyword,
                    removal.value,
                    "a map field: the target closes every object, so only {} can be "
                    "generated, and {} passes every check",
                )
            )
            continue
        report.stripped.append(item)
        report.rechecked.append(_rechecked(item))
    for pointer, keyword, value in _constraints(wire.schema):
        if keyword in target.ignores:
            item = PreflightItem(pointer, keyword, value, f"ignored by {target.engine}")
            report.stripped.append(item)
            report.rechecked.append(_rechecked(item))
        else:
            report.enforced.append(PreflightItem(pointer, keyword, value))


def closes_a_map(removal: Removal) -> bool:
    """Whether a dialect's removal closes a map (`additionalProperties` sent as `false`): only
    `{}` can then be generated, and `{}` passes every check (a weakening, refused)."""
    return removal.keyword == "additionalProperties" and removal.replaced_with == "false"


def _grammar_preflight(root: dict[str, Any], target: Target, report: Preflight) -> None:
    if target.grammar == "gbnf":
        from sdk.schema.gbnf import UnsupportedSchema
        from sdk.schema.gbnf import to_gbnf

        try:
            to_gbnf(root)
        except UnsupportedSchema as error:
            for problem in error.problems:
                report.refused_by_converter.append(
                    PreflightItem(problem.pointer, problem.keyword, None, problem.reason)
                )
    overlapping = set(_overlapping_one_of(root)) if target.grammar == "gbnf" else set()
    # A `oneOf` the converter refuses is not generated at all: said there, not as narrowed.
    overlapping -= {
        item.pointer.removesuffix("/oneOf")
        for item in report.refused_by_converter
        if item.keyword == "oneOf"
    }
    for pointer, keyword, value in _constraints(root):
        if keyword == "oneOf" and pointer in overlapping:
            item = PreflightItem(pointer, keyword, value, _OVERLAP)
            report.stripped.append(item)
            report.rechecked.append(_rechecked(item))
        else:
            report.enforced.append(PreflightItem(pointer, keyword, value))


_OVERLAP = (
    "branches may overlap: each is written minus the others where the grammar can say it; "
    "exclusivity is checked after parsing"
)


def _overlapping_one_of(root: dict[str, Any]) -> Iterator[str]:
    """Pointers of `oneOf`s whose branches the GBNF converter cannot prove disjoint."""
    from sdk.schema.gbnf._compiler import Compiler

    compiler = Compiler(root, "bounded")
    for pointer, node in iter_nodes(root):
        options = node.get("oneOf")
        if isinstance(options, list) and len(options) > 1 and not compiler.disjoint(options):
            yield pointer


def _rechecked(item: PreflightItem) -> PreflightItem:
    why = (
        "by the contract's Python type where it has one (date, datetime, UUID, ...)"
        if item.keyword == "format"
        else "by the schema step"
    )
    return PreflightItem(item.pointer, item.keyword, item.value, why)


def _constraints(root: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """Every constraint keyword of a schema document, where it is."""
    for pointer, node in iter_nodes(dict(root)):
        for keyword, value in node.items():
            if keyword in ANNOTATIONS or keyword.startswith("x-") or keyword in _STRUCTURE:
                continue
            if keyword == "additionalProperties" and value is False:
                continue
            yield pointer, keyword, value


def unbounded(root: dict[str, Any]) -> Iterator[PreflightItem]:
    """Arrays with no `maxItems`, maps (`additionalProperties` a schema) with no
    `maxProperties`, and free strings with no `maxLength` (no enum, const or format that
    bounds them, and no pattern whose longest match is bounded: `^[A-Z]+$` bounds nothing)."""
    for pointer, node in iter_nodes(root):
        kind = node.get("type")
        if kind == "array" and "maxItems" not in node and "prefixItems" not in node:
            yield PreflightItem(pointer, "maxItems", None, "a list with no upper bound")
        extra = node.get("additionalProperties")
        if kind == "object" and isinstance(extra, Mapping) and "maxProperties" not in node:
            yield PreflightItem(pointer, "maxProperties", None, "a map with no upper bound")
        if kind == "string" and not _bounded_string(node):
            yield PreflightItem(pointer, "maxLength", None, "a string with no upper bound")


def _bounded_string(node: Mapping[str, Any]) -> bool:
    """Whether a string node's length is bounded by its keywords (as the grammars keep them)."""
    if {"maxLength", "enum", "const", "format"} & set(node):
        return True
    pattern = node.get("pattern")
    if not isinstance(pattern, str):
        return False
    from sdk.schema._regex import longest_match  # (the `regex` module: for a pattern only)

    return longest_match(pattern, None) is not None


def _keywords(items: list[PreflightItem]) -> str:
    """`enum x3, minimum, pattern`: the enforced keywords, counted."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item.keyword] = counts.get(item.keyword, 0) + 1
    shown = [f"{k} x{n}" if n > 1 else k for k, n in sorted(counts.items())]
    return ", ".join(shown) or "the document's shape only"


def weakened_error_message(report: Preflight) -> str:
    """The message of the refusal: each weakened keyword, the target, and the way out."""
    first = report.weakened[0]
    more = f" (and {len(report.weakened) - 1} more)" if len(report.weakened) > 1 else ""
    return (
        f"{report.target.name} would silently weaken {report.schema}: "
        f"{first.pointer or '/'}: {first.keyword} ({first.why}){more}; no check after parsing "
        "can restore it. Change the field (a list of key/value items instead of a map), use "
        "another provider, or accept it with accept_weakened_schema=True"
    )


# --- the table -------------------------------------------------------------------------------


def preflight_table() -> str:
    """The docs' table of targets (Markdown), generated from `TARGETS` and the dialects."""
    rows = [
        "| target | route | decoding engine | enforced while decoding | stripped or ignored "
        "(re-checked after parsing) | anchors (`x-anchor`) | whitespace the SDK sends | "
        "cannot promise |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target in TARGETS.values():
        rows.append(
            "| "
            + " | ".join(
                (
                    f"`{target.name}`",
                    target.route.replace("|", "\\|"),
                    target.engine,
                    _enforced_summary(target),
                    _stripped_summary(target),
                    _anchors_summary(target),
                    target.whitespace,
                    _unpromised_summary(target),
                )
            )
            + " |"
        )
    return "\n".join(rows) + "\n"


_ALL_CONSTRAINTS = (
    "enum", "const", "oneOf", "allOf", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "format", "minItems",
    "maxItems", "uniqueItems", "minProperties", "maxProperties", "not",
)  # fmt: skip


def _enforced_summary(target: Target) -> str:
    if target.grammar == "llguidance":
        return "every keyword llguidance compiles (a schema it cannot compile is refused)"
    if target.dialect is None:
        return (
            "every keyword the converter writes (exact, or the schema is refused); overlapping "
            "`oneOf` branches narrowed"
        )
    kept = [k for k in _ALL_CONSTRAINTS if k in target.dialect.keywords and k not in target.ignores]
    notes = []
    if target.dialect.integer_bounds_only:
        notes.append("bounds on integers only")
    if target.dialect.max_min_items is not None:
        notes.append(f"minItems up to {target.dialect.max_min_items}")
    if target.dialect.formats is not None:
        notes.append(f"{len(target.dialect.formats)} formats")
    said = ", ".join(f"`{k}`" for k in kept)
    return f"{said} ({'; '.join(notes)})" if notes else said


def _stripped_summary(target: Target) -> str:
    if target.grammar == "llguidance":
        return "nothing stripped: the canonical schema is compiled as it is"
    if target.dialect is None:
        return (
            "nothing stripped; what the converter cannot write is refused (`UnsupportedSchema`); "
            "an overlapping `oneOf`'s exclusivity is re-checked"
        )
    as_any_of = target.dialect.one_of_as_any_of
    removed = [
        k
        for k in _ALL_CONSTRAINTS
        if k not in target.dialect.keywords and not (k == "oneOf" and as_any_of)
    ]
    said = [f"`{k}`" for k in removed]
    if as_any_of:
        said.append("`oneOf` sent as `anyOf` (exclusivity re-checked)")
    said += [f"`{k}` ignored by {target.engine}" for k in sorted(target.ignores)]
    return ", ".join(said) or "nothing"


_ANCHORS_CHECKED = (
    "checked after parsing (a value outside its anchor is a `CheckFailed`, `x-anchor`, retried "
    'with the reason; `abstention="guided"` nulls it where it may be null)'
)


def _anchors_summary(target: Target) -> str:
    if not target.grounding:
        return f"not enforced while decoding; {_ANCHORS_CHECKED}"
    return (
        f"`after` labels enforced while decoding by {target.grounding} (only spans of the "
        "regions they open; none in the source: `null` only); `not_after` and every anchor "
        f"{_ANCHORS_CHECKED}"
    )


def _unpromised_summary(target: Target) -> str:
    said = list(target.unpromised)
    if target.closed_objects:
        said.insert(0, "map fields (`dict[str, X]`): only `{}` can be generated, so refused")
    return "; ".join(said) or "only what no target can (content, a cut reply)"
