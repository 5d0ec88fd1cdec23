"""The embedded model: llama.cpp in this process (`sdk.providers.embedded`)."""

from __future__ import annotations

from sdk._values.profile import Profile

__all__ = ["EMBEDDED", "PROFILES"]

# The engine is the SDK's own: it reports stop reasons in the SDK's vocabulary (no table), and
# masks tokens with the canonical schema's grammar (no dialect, nothing stripped).
EMBEDDED = Profile(
    name="embedded",
    display_name="embedded model",
    aliases=frozenset({"local"}),
    carries={
        "documents": "a grammar of the canonical schema, masking every token",
        "grammars": "Lark",
        "tools": "a grammar of the calls",
    },
    provider="sdk.providers.embedded:EmbeddedProvider",
)

PROFILES = (EMBEDDED,)
