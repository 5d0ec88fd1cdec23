"""vLLM's OpenAI-compatible server with structured outputs (`sdk.providers.vllm`)."""

from __future__ import annotations

from sdk._values.dialect import BOUNDS
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import LOCAL_KEYWORDS
from sdk._values.dialect import Dialect
from sdk._values.families.openai import CHAT_STOP_REASONS
from sdk._values.profile import Profile

__all__ = ["PROFILES", "VLLM", "VLLM_DIALECT"]

VLLM_DIALECT = Dialect(
    name="vllm",
    keywords=CORE_KEYWORDS | BOUNDS | LOCAL_KEYWORDS | {"minProperties", "maxProperties"},
    doc="vLLM structured outputs (xgrammar, guidance fallback): no multipleOf, uniqueItems, "
    "not, or conditional keywords.",
)

VLLM = Profile(
    name="vllm",
    display_name="vLLM",
    stop_reasons=CHAT_STOP_REASONS,  # vLLM speaks Chat Completions
    dialect=VLLM_DIALECT,
    carries={
        "documents": "structured_outputs json",
        "grammars": "structured_outputs grammar (Lark)",
        "tools": "tools",
    },
    provider="sdk.providers.vllm:VLLMProvider",
)

PROFILES = (VLLM,)
