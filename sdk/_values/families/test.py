"""`TestProvider`: scripted replies, no network (`sdk.providers.test`)."""

from __future__ import annotations

from sdk._values.profile import Profile

__all__ = ["PROFILES", "TEST"]

# A script's replies carry their stop reasons in the SDK's vocabulary (or any provider's raw
# words: every built-in table reads them); its dialect is chosen per instance.
TEST = Profile(
    name="test",
    display_name="test provider",
    carries={
        "documents": "scripted replies",
        "grammars": "scripted replies",
        "tools": "scripted calls",
        "native_reasoning": "a scripted Completion's reasoning",
    },
    provider="sdk.providers.test:TestProvider",
)

PROFILES = (TEST,)
