"""Providers: one module per provider family, each a codec (sans-IO request builder, reply and
stream reader); two drivers (`_drivers`) send them, sync and async, inside one fault boundary.

What the SDK knows about each family (its names, stop reasons, dialect, what it can carry, its
prices) is its `Profile`, found by name or alias with `profile(name)`; `profiles()` lists them,
and `register(Profile(...))` adds one (see the "Add a provider" guide).

The provider classes load on first use: `import sdk` pays for none of them, and a hosted one
imports its vendor's SDK (an optional extra) only when named.
"""

from typing import TYPE_CHECKING
from typing import Any

from sdk._lazy import lazy_names
from sdk._lazy import listed
from sdk._values.profile import Pricing
from sdk._values.profile import Profile
from sdk._values.profile import builtin_provider
from sdk._values.profile import profile
from sdk._values.profile import profiles
from sdk._values.profile import register
from sdk.providers._base import Codec
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Message
from sdk.providers._base import Output
from sdk.providers._base import Reply
from sdk.providers._base import Sampling
from sdk.providers._base import StreamReader
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolOffer
from sdk.providers._profile import WireProfile
from sdk.providers._provider import Provider

if TYPE_CHECKING:
    from sdk.providers._http import HTTPProvider
    from sdk.providers.anthropic import AnthropicProvider
    from sdk.providers.embedded import EmbeddedProvider
    from sdk.providers.fallback import FallbackProvider
    from sdk.providers.gemini import GeminiProvider
    from sdk.providers.limit import ConcurrencyLimit
    from sdk.providers.llamacpp import LlamaCppProvider
    from sdk.providers.ollama import OllamaProvider
    from sdk.providers.openai import OpenAIChatProvider
    from sdk.providers.openai import OpenAIResponsesProvider
    from sdk.providers.test import TestProvider
    from sdk.providers.vllm import VLLMProvider

# The wrappers that are no family of their own, and the base of providers over HTTP; every
# family's provider class is where its profile says (`Profile.provider`).
_ELSEWHERE = {
    "FallbackProvider": "sdk.providers.fallback",
    "ConcurrencyLimit": "sdk.providers.limit",
    "HTTPProvider": "sdk.providers._http",
}


_elsewhere = lazy_names(__name__, _ELSEWHERE)


def __getattr__(name: str) -> Any:
    try:
        return _elsewhere(name)  # a name defined elsewhere, or a submodule: that module only
    except AttributeError:
        if name.startswith("__"):  # asked of every module (`inspect.unwrap`'s `__wrapped__`)
            raise
    found = builtin_provider(name)  # a family's provider class: its module only
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found


__dir__ = listed(globals())


__all__ = [
    "AnthropicProvider",
    "Codec",
    "Completion",
    "CompletionRequest",
    "ConcurrencyLimit",
    "EmbeddedProvider",
    "Exchange",
    "FallbackProvider",
    "FreeText",
    "GeminiProvider",
    "GrammarSentence",
    "HTTPProvider",
    "JsonDocument",
    "LlamaCppProvider",
    "Message",
    "OllamaProvider",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "Output",
    "Pricing",
    "Profile",
    "Provider",
    "Reply",
    "Sampling",
    "StreamReader",
    "TestProvider",
    "TextDelta",
    "ToolOffer",
    "VLLMProvider",
    "WireProfile",
    "profile",
    "profiles",
    "register",
]
