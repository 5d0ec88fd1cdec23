"""Schemas: canonical form, fingerprints, provider dialects and GBNF.

Nothing here imports a contract: `sdk.contract` is built on this package. The names that live
above it are re-exported here and loaded on first use: the contracts derived from a contract
(`widen`, `answer_first`, ..., in `sdk.contract.derived`) and the offline workflow's
`diff_schemas` and `lint` (`sdk.workflow`, which `import sdk` never loads).
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_names
from sdk._lazy import listed
from sdk.schema.canonical import DRAFT_2020_12
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import canonical_bytes
from sdk.schema.canonical import canonical_schema
from sdk.schema.canonical import fingerprint
from sdk.schema.canonical import schema_info
from sdk.schema.dialects import Dialect
from sdk.schema.dialects import Removal
from sdk.schema.dialects import WireSchema
from sdk.schema.dialects import to_wire

if TYPE_CHECKING:
    from sdk.schema.dialects import ANTHROPIC
    from sdk.schema.dialects import DIALECTS
    from sdk.schema.dialects import GEMINI
    from sdk.schema.dialects import LLAMACPP
    from sdk.schema.dialects import OLLAMA
    from sdk.schema.dialects import OPENAI_STRICT
    from sdk.schema.dialects import VLLM
    from sdk.schema.gbnf import UnsupportedSchema
    from sdk.schema.gbnf import contract_gbnf
    from sdk.schema.gbnf import to_gbnf

# Names loaded on first use, by the module that defines them: the dialects (each a provider
# profile's), the GBNF converter, and the names that live above this package.
_LAZY = {
    **dict.fromkeys(("UnsupportedSchema", "contract_gbnf", "to_gbnf"), "sdk.schema.gbnf"),
    **dict.fromkeys(
        ("ANTHROPIC", "DIALECTS", "GEMINI", "LLAMACPP", "OLLAMA", "OPENAI_STRICT", "VLLM"),
        "sdk.schema.dialects",
    ),
    "ESCAPE_MEMBER": "sdk.contract.derived",
    "answer_first": "sdk.contract.derived",
    "escape_members": "sdk.contract.derived",
    "is_escape_member": "sdk.contract.derived",
    "reasoning_field": "sdk.contract.derived",
    "widen": "sdk.contract.derived",
    "diff_schemas": "sdk.workflow",
    "lint": "sdk.workflow",
}


__getattr__ = lazy_names(__name__, _LAZY)
__dir__ = listed(globals())


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
