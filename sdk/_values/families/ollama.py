"""Ollama's `/api/chat` (`sdk.providers.ollama`)."""

from __future__ import annotations

from dataclasses import replace

from sdk._values.families.llamacpp import LLAMACPP_DIALECT
from sdk._values.profile import Profile
from sdk._values.profile import StopReason

__all__ = ["OLLAMA", "OLLAMA_DIALECT", "PROFILES"]

OLLAMA_DIALECT = replace(
    LLAMACPP_DIALECT,
    name="ollama",
    doc="Ollama `format`: converted by llama.cpp's grammar generator, so the llama.cpp rules.",
)

OLLAMA = Profile(
    name="ollama",
    display_name="Ollama",
    stop_reasons={"stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS},
    dialect=OLLAMA_DIALECT,
    carries={"documents": "format (a JSON schema)", "tools": "tools"},
    provider="sdk.providers.ollama:OllamaProvider",
)

PROFILES = (OLLAMA,)
