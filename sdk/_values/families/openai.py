"""OpenAI's Responses and Chat Completions APIs (`sdk.providers.openai`): two families, one
dialect."""

from __future__ import annotations

from sdk._values.dialect import BOUNDS
from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import HOSTED_FORMATS
from sdk._values.dialect import Dialect
from sdk._values.dialect import GrammarLimits
from sdk._values.profile import Pricing
from sdk._values.profile import Profile
from sdk._values.profile import StopReason

__all__ = ["OPENAI_CHAT", "OPENAI_RESPONSES", "OPENAI_STRICT", "PROFILES"]

OPENAI_STRICT = Dialect(
    name="openai_strict",
    keywords=CORE_KEYWORDS | BOUNDS | {"pattern", "format", "multipleOf", "minItems", "maxItems"},
    formats=HOSTED_FORMATS,
    one_of_as_any_of=True,
    ref_siblings="inline",
    closed_objects=True,
    all_required=True,
    hint_removed=True,
    # OpenAI strict counts properties, object nesting levels and enum values.
    limits=GrammarLimits(max_properties=5000, max_depth=10, max_enum_values=1000),
    doc="OpenAI strict structured outputs (Responses and Chat): every property required, "
    "optional ones nullable; no minLength/maxLength, allOf, not, or conditional keywords.",
)

_PRICING = Pricing("openai")

# The Responses API has no single stop field: its raw value is written `status` or
# `incomplete:<incomplete_details.reason>` so that one string keeps both.
OPENAI_RESPONSES = Profile(
    name="openai_responses",
    display_name="OpenAI Responses",
    # The strict dialect is shared by both OpenAI APIs: its name means the Responses API.
    aliases=frozenset({"openai", "responses", "openai_strict"}),
    stop_reasons={
        "completed": StopReason.END_TURN,
        "incomplete:max_output_tokens": StopReason.MAX_TOKENS,
        "incomplete:content_filter": StopReason.CONTENT_FILTER,
        "refusal": StopReason.REFUSAL,
    },
    dialect=OPENAI_STRICT,
    carries={
        "documents": "text.format json_schema, strict",
        "grammars": "a custom tool with a Lark grammar",
        "tools": "strict function calls",
        "native_reasoning": "reasoning summaries",
    },
    pricing=_PRICING,
    telemetry_name="openai",
    provider="sdk.providers.openai:OpenAIResponsesProvider",
)

CHAT_STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTER,
    "refusal": StopReason.REFUSAL,
}
"""Chat Completions' `finish_reason` (and `refusal` for a reply that carries one): the table of
every server that speaks that API (vLLM, llama.cpp's OpenAI route)."""

OPENAI_CHAT = Profile(
    name="openai_chat",
    display_name="OpenAI Chat Completions",
    aliases=frozenset({"chat"}),
    stop_reasons=CHAT_STOP_REASONS,
    dialect=OPENAI_STRICT,
    carries={
        "documents": "response_format json_schema, strict",
        "tools": "strict function calls",
    },
    pricing=_PRICING,
    telemetry_name="openai",
    provider="sdk.providers.openai:OpenAIChatProvider",
)

PROFILES = (OPENAI_RESPONSES, OPENAI_CHAT)
