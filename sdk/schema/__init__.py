"""Schemas: canonical form, fingerprints, provider dialects, GBNF, linting and versioning."""

from sdk.schema.canonical import (
    DRAFT_2020_12,
    SchemaInfo,
    canonical_bytes,
    canonical_schema,
    fingerprint,
    schema_info,
)
from sdk.schema.derived import (
    ESCAPE_MEMBER,
    answer_first,
    escape_members,
    is_escape_member,
    reasoning_field,
    widen,
)
from sdk.schema.dialects import (
    ANTHROPIC,
    DIALECTS,
    GEMINI,
    LLAMACPP,
    OLLAMA,
    OPENAI_STRICT,
    VLLM,
    Dialect,
    Removal,
    WireSchema,
    to_wire,
)
from sdk.schema.diff import diff_schemas
from sdk.schema.gbnf import UnsupportedSchema, contract_gbnf, to_gbnf
from sdk.schema.lint import lint

__all__ = [
    "ANTHROPIC",
    "DIALECTS",
    "DRAFT_2020_12",
    "ESCAPE_MEMBER",
    "GEMINI",
    "LLAMACPP",
    "OLLAMA",
    "OPENAI_STRICT",
    "VLLM",
    "Dialect",
    "Removal",
    "SchemaInfo",
    "UnsupportedSchema",
    "WireSchema",
    "answer_first",
    "canonical_bytes",
    "canonical_schema",
    "contract_gbnf",
    "diff_schemas",
    "escape_members",
    "fingerprint",
    "is_escape_member",
    "lint",
    "reasoning_field",
    "schema_info",
    "to_gbnf",
    "to_wire",
    "widen",
]
