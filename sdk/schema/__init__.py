"""Schemas: canonical form, fingerprints, provider dialects, GBNF, linting and versioning."""

from sdk.schema.canonical import (
    DRAFT_2020_12,
    SchemaInfo,
    canonical_bytes,
    canonical_schema,
    fingerprint,
    schema_info,
)
from sdk.schema.dialects import (
    ANTHROPIC,
    DIALECTS,
    LLAMACPP,
    OLLAMA,
    OPENAI_STRICT,
    VLLM,
    Dialect,
    Removal,
    WireSchema,
    to_wire,
)

__all__ = [
    "ANTHROPIC",
    "DIALECTS",
    "DRAFT_2020_12",
    "LLAMACPP",
    "OLLAMA",
    "OPENAI_STRICT",
    "VLLM",
    "Dialect",
    "Removal",
    "SchemaInfo",
    "WireSchema",
    "canonical_bytes",
    "canonical_schema",
    "fingerprint",
    "schema_info",
    "to_wire",
]
