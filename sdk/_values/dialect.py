"""`Dialect`: what one provider family's structured-output API accepts of JSON Schema, as data.

A value type only: the transform that reads it (`to_wire`) is `sdk.schema.dialects`, and each
family's dialect is part of its profile (in its provider module). The keyword families below are
what most dialects are made of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BOUNDS",
    "CORE_KEYWORDS",
    "HOSTED_FORMATS",
    "LLAMACPP_CONVERTER",
    "LOCAL_KEYWORDS",
    "Dialect",
    "GrammarLimits",
]

CORE_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "$ref", "$defs", "anyOf",
     "enum", "const", "description", "title"}
)  # fmt: skip
"""Keywords every dialect accepts: the structure of a contract's schema."""
BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
"""The numeric bounds."""
LOCAL_KEYWORDS = frozenset(
    {"oneOf", "allOf", "prefixItems", "pattern", "format", "minLength", "maxLength",
     "minItems", "maxItems"}
)  # fmt: skip
"""What the local grammar engines (llama.cpp, Ollama, vLLM) accept beyond the core and bounds."""
HOSTED_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
"""String formats both hosted APIs enforce (Anthropic adds `uri`)."""


@dataclass(frozen=True, slots=True)
class GrammarLimits:
    """What a provider's grammar compiler accepts, counted over the whole schema document;
    `None` is no limit (`sdk schema lint` reports what goes past them)."""

    max_properties: int | None = None
    max_optional: int | None = None
    max_unions: int | None = None
    max_depth: int | None = None
    max_enum_values: int | None = None
    recursion: bool = True
    note: str = ""


@dataclass(frozen=True, slots=True)
class Dialect:
    """What one provider family accepts, as data. The transform in `to_wire` reads it.

    `keywords` is the allow-list: any other keyword is removed wherever it appears (keywords in
    the allow-list may still be limited by the fields below).
    """

    name: str
    keywords: frozenset[str]
    formats: frozenset[str] | None = None
    """String formats kept; `None` keeps all."""
    max_min_items: int | None = None
    """Largest `minItems` kept (Anthropic accepts only 0 and 1); `None` keeps any."""
    integer_bounds_only: bool = False
    """Numeric bounds are enforced on integers only (llama.cpp), so removed from numbers."""
    one_of_as_any_of: bool = False
    """Send `oneOf` as `anyOf` (exclusivity is then checked by the parser only)."""
    ref_siblings: Literal["keep", "drop", "inline"] = "keep"
    """Keys beside a `$ref`: kept, dropped (Anthropic), or the target inlined (OpenAI)."""
    closed_objects: bool = False
    """`additionalProperties` must be `false`: a schema-valued one (a dict field) is removed."""
    all_required: bool = False
    """Every property required, optional ones nullable (see `sdk.schema.dialects`)."""
    portable_patterns: bool = False
    """Rewrite `\\d`, `\\w`, `\\s` in patterns as explicit classes."""
    hint_removed: bool = False
    """Append removed constraints to the node's description, as a hint the model can follow."""
    limits: GrammarLimits | None = None
    """The documented limits of the provider's grammar compiler, if it documents any."""
    doc: str = ""

    def __repr__(self) -> str:
        return f"Dialect({self.name!r})"


LLAMACPP_CONVERTER = Dialect(
    name="llamacpp",
    keywords=CORE_KEYWORDS | BOUNDS | LOCAL_KEYWORDS,
    formats=frozenset({"date", "time", "date-time", "uuid"}),
    integer_bounds_only=True,
    all_required=True,
    portable_patterns=True,
    doc="llama.cpp json_schema (server grammar converter): bounds on integers only, four "
    "formats, no multipleOf/uniqueItems/not; all properties required to keep their order.",
)
"""The rules of llama.cpp's JSON-schema-to-grammar converter: llama-server's dialect, and the
ground of Ollama's (which converts with it), so it lives below both families' modules."""
