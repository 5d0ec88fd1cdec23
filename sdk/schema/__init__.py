"""Schemas: canonical form, fingerprints, provider dialects, GBNF, linting and versioning."""

from sdk.schema.canonical import (
    DRAFT_2020_12,
    SchemaInfo,
    canonical_bytes,
    canonical_schema,
    fingerprint,
    schema_info,
)

__all__ = [
    "DRAFT_2020_12",
    "SchemaInfo",
    "canonical_bytes",
    "canonical_schema",
    "fingerprint",
    "schema_info",
]
