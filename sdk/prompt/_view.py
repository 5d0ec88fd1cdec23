"""What a template sees of the call's output as `contract`: its name, schema and fields.

A prompt that says what each field means reads it from the contract (`{{ contract.compact }}`,
`{% for field in contract.fields %}`) instead of repeating it, so the prompt follows the
contract: rename a field or change its description, and every prompt that reads it changes too
(the contract's own fingerprint and lock record that change).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from sdk.schema.canonical import schema_info
from sdk.schema.canonical import shared_schema
from sdk.schema.compact import compact_schema
from sdk.schema.compact import field_types

__all__ = ["ContractView", "FieldView", "view_of"]


@dataclass(frozen=True, slots=True)
class FieldView:
    """One top-level field: its name, its type as the compact definition writes it, its
    description and whether it is required."""

    name: str
    type: str
    description: str
    required: bool


@dataclass(frozen=True, slots=True)
class ContractView:
    """The output a template is rendered for (`contract` in the template)."""

    name: str
    version: int
    description: str
    schema: str
    """The canonical JSON Schema, indented."""
    compact: str
    """The short type definition (`sdk.schema.compact`): a quarter of the schema's tokens."""
    fields: tuple[FieldView, ...]

    def __str__(self) -> str:
        return self.name


def view_of(output: Any) -> ContractView:
    """The view of a contract class or a `Grammar` (its Lark text stands for the schema)."""
    if isinstance(output, type) and issubclass(output, BaseModel):
        return _contract_view(output)
    name, version = getattr(output, "name", None), getattr(output, "version", 1)
    lark = getattr(output, "definition", None)
    if not isinstance(name, str) or not isinstance(lark, str):
        raise TypeError(f"a prompt renders for a contract or a grammar, not {output!r}")
    description = getattr(output, "description", None) or ""
    return ContractView(name, version, description, lark, lark, ())


def _contract_view(contract: type[BaseModel]) -> ContractView:
    schema = shared_schema(contract)
    info = schema_info(contract)
    compact = compact_schema(schema)
    required = set(schema.get("required", ()))
    types = field_types(schema)
    fields = []
    for name, node in schema.get("properties", {}).items():
        description = node.get("description", "") if isinstance(node, dict) else ""
        fields.append(FieldView(name, types[name], description, name in required))
    described = schema.get("description")
    return ContractView(
        name=info.name,
        version=info.version,
        description=described if isinstance(described, str) else "",
        schema=json.dumps(schema, indent=2, ensure_ascii=False),
        compact=compact,
        fields=tuple(fields),
    )
