"""Anthropic's Messages API (`sdk.providers.anthropic`)."""

from __future__ import annotations

from sdk._values.dialect import CORE_KEYWORDS
from sdk._values.dialect import HOSTED_FORMATS
from sdk._values.dialect import Dialect
from sdk._values.dialect import GrammarLimits
from sdk._values.profile import Pricing
from sdk._values.profile import Profile
from sdk._values.profile import StopReason

__all__ = ["ANTHROPIC", "ANTHROPIC_DIALECT", "PROFILES"]

ANTHROPIC_DIALECT = Dialect(
    name="anthropic",
    keywords=CORE_KEYWORDS | {"allOf", "format", "minItems"},
    formats=HOSTED_FORMATS | {"uri"},
    max_min_items=1,
    one_of_as_any_of=True,
    ref_siblings="drop",
    closed_objects=True,
    hint_removed=True,
    # Anthropic counts optional parameters and parameters with union types (`anyOf`, type
    # arrays: a nullable field is one) and compiles no recursion.
    limits=GrammarLimits(
        max_optional=24,
        max_unions=16,
        recursion=False,
        note="each optional field roughly doubles the compiled grammar",
    ),
    doc="Anthropic structured outputs and strict tools: no numeric or length bounds, no "
    "pattern, ten string formats, minItems 0 or 1, closed objects, $ref without siblings.",
)

ANTHROPIC = Profile(
    name="anthropic",
    display_name="Anthropic",
    aliases=frozenset({"claude"}),
    stop_reasons={
        "end_turn": StopReason.END_TURN,
        "max_tokens": StopReason.MAX_TOKENS,
        "stop_sequence": StopReason.STOP_SEQUENCE,
        "tool_use": StopReason.TOOL_USE,
        "pause_turn": StopReason.PAUSE_TURN,
        "refusal": StopReason.REFUSAL,
        "model_context_window_exceeded": StopReason.CONTEXT_WINDOW,
    },
    dialect=ANTHROPIC_DIALECT,
    carries={
        "documents": "structured outputs (output_config.format), or a forced strict tool",
        "tools": "strict tool use",
        "native_reasoning": "extended thinking",
    },
    pricing=Pricing("anthropic", input_excludes_cache=True),
    telemetry_name="anthropic",
    provider="sdk.providers.anthropic:AnthropicProvider",
)

PROFILES = (ANTHROPIC,)
