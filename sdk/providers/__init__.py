"""Providers: one module per provider family, each a codec (sans-IO request builder, reply and
stream reader); two drivers (`_drivers`) send them, sync and async, inside one fault boundary."""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_names
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
from sdk.providers._base import StreamReader
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolOffer
from sdk.providers._provider import Provider
from sdk.providers.fallback import FallbackProvider
from sdk.providers.limit import ConcurrencyLimit
from sdk.providers.llamacpp import LlamaCppProvider
from sdk.providers.ollama import OllamaProvider
from sdk.providers.test import TestProvider
from sdk.providers.vllm import VLLMProvider

if TYPE_CHECKING:
    from sdk.providers.anthropic import AnthropicProvider
    from sdk.providers.embedded import EmbeddedProvider
    from sdk.providers.gemini import GeminiProvider
    from sdk.providers.openai import OpenAIChatProvider
    from sdk.providers.openai import OpenAIResponsesProvider

# The hosted adapters import their SDK (an optional extra), so they load on first use: importing
# `sdk.providers` works without the `anthropic`, `openai` or `google-genai` package installed.
_HOSTED = {
    "AnthropicProvider": "sdk.providers.anthropic",
    "OpenAIChatProvider": "sdk.providers.openai",
    "OpenAIResponsesProvider": "sdk.providers.openai",
    "GeminiProvider": "sdk.providers.gemini",
    # In-process llama.cpp: its dependencies are the `local` extra, imported on first use too.
    "EmbeddedProvider": "sdk.providers.embedded",
}


__getattr__ = lazy_names(__name__, _HOSTED)


def __dir__() -> list[str]:
    # The lazily loaded providers too, so that completion in a REPL finds them.
    return sorted(set(globals()) | set(__all__))


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
    "JsonDocument",
    "LlamaCppProvider",
    "Message",
    "OllamaProvider",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "Output",
    "Provider",
    "Reply",
    "StreamReader",
    "TestProvider",
    "TextDelta",
    "ToolOffer",
    "VLLMProvider",
]
