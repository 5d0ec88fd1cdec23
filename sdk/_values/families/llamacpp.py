"""llama.cpp's `llama-server` (`sdk.providers.llamacpp`), and the rules of its JSON-schema
grammar converter, which Ollama uses too."""

from __future__ import annotations

from sdk._values.dialect import BOUNDS
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import LOCAL_KEYWORDS
from sdk._values.dialect import Dialect
from sdk._values.profile import Profile
from sdk._values.profile import StopReason

__all__ = ["LLAMACPP", "LLAMACPP_DIALECT", "PROFILES"]

LLAMACPP_DIALECT = Dialect(
    name="llamacpp",
    keywords=CORE_KEYWORDS | BOUNDS | LOCAL_KEYWORDS,
    formats=frozenset({"date", "time", "date-time", "uuid"}),
    integer_bounds_only=True,
    all_required=True,
    portable_patterns=True,
    doc="llama.cpp json_schema (server grammar converter): bounds on integers only, four "
    "formats, no multipleOf/uniqueItems/not; all properties required to keep their order.",
)

# The native `/completion` route reports `stop_type`; the OpenAI-compatible route reads Chat
# Completions' `finish_reason` (`sdk._values.families.openai.CHAT_STOP_REASONS`).
LLAMACPP = Profile(
    name="llamacpp",
    display_name="llama.cpp",
    aliases=frozenset({"llama_cpp", "llama.cpp", "llama_server"}),
    stop_reasons={
        "eos": StopReason.END_TURN,
        "limit": StopReason.MAX_TOKENS,
        "word": StopReason.STOP_SEQUENCE,
    },
    dialect=LLAMACPP_DIALECT,
    carries={
        "documents": "the SDK's own GBNF, or json_schema",
        "grammars": "GBNF",
        "tools": "a GBNF of the calls, or the OpenAI route's tools",
    },
    provider="sdk.providers.llamacpp:LlamaCppProvider",
)

PROFILES = (LLAMACPP,)
