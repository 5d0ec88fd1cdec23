"""Normalized stop reasons, and the mapping from every provider's raw value.

Every provider says "why generation ended" in its own words: Anthropic's `stop_reason`, OpenAI
Responses' `status` plus `incomplete_details.reason`, Chat Completions' `finish_reason`, Gemini's
`finishReason` (or its prompt feedback's `blockReason`, written `blocked:<reason>`),
llama.cpp's `stop_type`, Ollama's `done_reason`. The parser decides on the normalized value and
keeps the raw one beside it, so nothing a provider said is lost.
"""

from __future__ import annotations

from enum import Enum

from sdk._names import canonical_provider

__all__ = ["RAW_STOP_REASONS", "StopReason"]


class StopReason(str, Enum):
    """Why generation ended, in one vocabulary for all providers."""

    END_TURN = "end_turn"
    """The model finished the document on its own (the only clean end in JSON mode)."""
    MAX_TOKENS = "max_tokens"
    """The output token limit cut the document: what is there is a prefix."""
    CONTEXT_WINDOW = "context_window"
    """The context window filled up: also a cut document."""
    REFUSAL = "refusal"
    """The model declined; the text need not match the schema."""
    CONTENT_FILTER = "content_filter"
    """The provider's filter stopped the output."""
    STOP_SEQUENCE = "stop_sequence"
    """A caller-given stop sequence ended the output."""
    TOOL_USE = "tool_use"
    """The model called a tool (the document is the tool input in tool mode)."""
    PAUSE_TURN = "pause_turn"
    """The provider paused a long turn; the caller has to continue it."""
    OTHER = "other"
    """Anything not known to this SDK: never treated as a clean end."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_raw(cls, raw: str | None, provider: str | None = None) -> StopReason:
        """Normalize a provider's raw stop value; unknown values become `OTHER`.

        `provider` is a provider family name or an alias of one (`sdk._names`; an unknown name is
        a `ValueError` listing the valid ones) and picks that provider's table; a provider with
        no table of its own (embedded, test), or no provider, looks the value up in every table,
        which is unambiguous because no two providers use one word for different things.
        """
        table = _ANY_PROVIDER
        if provider is not None:
            table = RAW_STOP_REASONS.get(canonical_provider(provider), _ANY_PROVIDER)
        if raw is None:
            return cls.OTHER
        return table.get(raw, cls.OTHER)


_GEMINI_FILTERS = (
    "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION",
)  # fmt: skip
_GEMINI_OTHER = (
    "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "LANGUAGE", "OTHER",
    "FINISH_REASON_UNSPECIFIED", "MALFORMED_RESPONSE", "MISSING_THOUGHT_SIGNATURE", "NO_IMAGE",
    "IMAGE_OTHER",
)  # fmt: skip
_GEMINI_BLOCKS = (
    "SAFETY", "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT", "IMAGE_SAFETY", "MODEL_ARMOR",
    "JAILBREAK", "BLOCKED_REASON_UNSPECIFIED",
)  # fmt: skip

# Raw values per provider family. OpenAI Responses has no single field: its raw value is written
# `status` or `incomplete:<incomplete_details.reason>` so that one string keeps both.
RAW_STOP_REASONS: dict[str, dict[str, StopReason]] = {
    "anthropic": {
        "end_turn": StopReason.END_TURN,
        "max_tokens": StopReason.MAX_TOKENS,
        "stop_sequence": StopReason.STOP_SEQUENCE,
        "tool_use": StopReason.TOOL_USE,
        "pause_turn": StopReason.PAUSE_TURN,
        "refusal": StopReason.REFUSAL,
        "model_context_window_exceeded": StopReason.CONTEXT_WINDOW,
    },
    "openai_responses": {
        "completed": StopReason.END_TURN,
        "incomplete:max_output_tokens": StopReason.MAX_TOKENS,
        "incomplete:content_filter": StopReason.CONTENT_FILTER,
        "refusal": StopReason.REFUSAL,
    },
    "openai_chat": {
        "stop": StopReason.END_TURN,
        "length": StopReason.MAX_TOKENS,
        "tool_calls": StopReason.TOOL_USE,
        "function_call": StopReason.TOOL_USE,
        "content_filter": StopReason.CONTENT_FILTER,
        "refusal": StopReason.REFUSAL,
    },
    # Gemini's `finishReason`; a prompt blocked before any candidate is `blocked:<blockReason>`,
    # a refusal of the request. Safety, recitation, blocklist, prohibited content and personal
    # data stops are the provider's filters; tool and language stops are not a document's end.
    "gemini": {
        "STOP": StopReason.END_TURN,
        "MAX_TOKENS": StopReason.MAX_TOKENS,
        **dict.fromkeys(_GEMINI_FILTERS, StopReason.CONTENT_FILTER),
        **dict.fromkeys(_GEMINI_OTHER, StopReason.OTHER),
        **{f"blocked:{reason}": StopReason.REFUSAL for reason in _GEMINI_BLOCKS},
    },
    # llama.cpp native /completion reports `stop_type`; its OpenAI route uses the chat table.
    "llamacpp": {
        "eos": StopReason.END_TURN,
        "limit": StopReason.MAX_TOKENS,
        "word": StopReason.STOP_SEQUENCE,
    },
    "ollama": {
        "stop": StopReason.END_TURN,
        "length": StopReason.MAX_TOKENS,
    },
}
# vLLM speaks Chat Completions: its `finish_reason` is that table's.
RAW_STOP_REASONS["vllm"] = RAW_STOP_REASONS["openai_chat"]

_ANY_PROVIDER: dict[str, StopReason] = {
    **{member.value: member for member in StopReason if member is not StopReason.OTHER},
}
for _table in RAW_STOP_REASONS.values():
    for _raw, _normalized in _table.items():
        # Guard the claim in from_raw's docstring: one raw word, one meaning.
        assert _ANY_PROVIDER.get(_raw, _normalized) is _normalized, _raw
        _ANY_PROVIDER[_raw] = _normalized
