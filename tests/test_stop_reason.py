"""Every provider's raw stop value maps to one normalized StopReason; unknown values to OTHER."""

from __future__ import annotations

import pytest

from sdk import StopReason
from sdk._values.profile import builtin_profiles

EXPECTED = {
    ("anthropic", "end_turn"): StopReason.END_TURN,
    ("anthropic", "max_tokens"): StopReason.MAX_TOKENS,
    ("anthropic", "stop_sequence"): StopReason.STOP_SEQUENCE,
    ("anthropic", "tool_use"): StopReason.TOOL_USE,
    ("anthropic", "pause_turn"): StopReason.PAUSE_TURN,
    ("anthropic", "refusal"): StopReason.REFUSAL,
    ("anthropic", "model_context_window_exceeded"): StopReason.CONTEXT_WINDOW,
    ("openai_responses", "completed"): StopReason.END_TURN,
    ("openai_responses", "incomplete:max_output_tokens"): StopReason.MAX_TOKENS,
    ("openai_responses", "incomplete:content_filter"): StopReason.CONTENT_FILTER,
    # The bare `incomplete_details.reason` (on main: OTHER, an `UnexpectedStop`).
    ("openai_responses", "max_output_tokens"): StopReason.MAX_TOKENS,
    # ... and its other value (on main: OTHER, while `incomplete:content_filter` was filtered).
    ("openai_responses", "content_filter"): StopReason.CONTENT_FILTER,
    ("openai_chat", "stop"): StopReason.END_TURN,
    ("openai_chat", "length"): StopReason.MAX_TOKENS,
    ("openai_chat", "tool_calls"): StopReason.TOOL_USE,
    ("openai_chat", "function_call"): StopReason.TOOL_USE,
    ("openai_chat", "content_filter"): StopReason.CONTENT_FILTER,
    ("llamacpp", "eos"): StopReason.END_TURN,
    ("llamacpp", "limit"): StopReason.MAX_TOKENS,
    ("llamacpp", "word"): StopReason.STOP_SEQUENCE,
    ("ollama", "stop"): StopReason.END_TURN,
    ("ollama", "length"): StopReason.MAX_TOKENS,
    # vLLM speaks Chat Completions.
    ("vllm", "stop"): StopReason.END_TURN,
    ("vllm", "length"): StopReason.MAX_TOKENS,
    ("vllm", "tool_calls"): StopReason.TOOL_USE,
    ("vllm", "function_call"): StopReason.TOOL_USE,
    ("vllm", "content_filter"): StopReason.CONTENT_FILTER,
    # Gemini: its filters are content filters, a blocked prompt a refusal, tool and language
    # stops and unspecified ones never a clean end.
    ("gemini", "STOP"): StopReason.END_TURN,
    ("gemini", "MAX_TOKENS"): StopReason.MAX_TOKENS,
    ("gemini", "SAFETY"): StopReason.CONTENT_FILTER,
    ("gemini", "RECITATION"): StopReason.CONTENT_FILTER,
    ("gemini", "BLOCKLIST"): StopReason.CONTENT_FILTER,
    ("gemini", "PROHIBITED_CONTENT"): StopReason.CONTENT_FILTER,
    ("gemini", "SPII"): StopReason.CONTENT_FILTER,
    ("gemini", "IMAGE_SAFETY"): StopReason.CONTENT_FILTER,
    ("gemini", "IMAGE_PROHIBITED_CONTENT"): StopReason.CONTENT_FILTER,
    ("gemini", "IMAGE_RECITATION"): StopReason.CONTENT_FILTER,
    ("gemini", "MALFORMED_FUNCTION_CALL"): StopReason.OTHER,
    ("gemini", "UNEXPECTED_TOOL_CALL"): StopReason.OTHER,
    ("gemini", "TOO_MANY_TOOL_CALLS"): StopReason.OTHER,
    ("gemini", "LANGUAGE"): StopReason.OTHER,
    ("gemini", "OTHER"): StopReason.OTHER,
    ("gemini", "FINISH_REASON_UNSPECIFIED"): StopReason.OTHER,
    ("gemini", "MALFORMED_RESPONSE"): StopReason.OTHER,
    ("gemini", "MISSING_THOUGHT_SIGNATURE"): StopReason.OTHER,
    ("gemini", "NO_IMAGE"): StopReason.OTHER,
    ("gemini", "IMAGE_OTHER"): StopReason.OTHER,
    ("gemini", "blocked:SAFETY"): StopReason.REFUSAL,
    ("gemini", "blocked:OTHER"): StopReason.REFUSAL,
    ("gemini", "blocked:BLOCKLIST"): StopReason.REFUSAL,
    ("gemini", "blocked:PROHIBITED_CONTENT"): StopReason.REFUSAL,
    ("gemini", "blocked:IMAGE_SAFETY"): StopReason.REFUSAL,
    ("gemini", "blocked:MODEL_ARMOR"): StopReason.REFUSAL,
    ("gemini", "blocked:JAILBREAK"): StopReason.REFUSAL,
    ("gemini", "blocked:BLOCKED_REASON_UNSPECIFIED"): StopReason.REFUSAL,
}


@pytest.mark.parametrize(("provider", "raw"), sorted(EXPECTED))
def test_raw_value_maps_per_provider_and_globally(provider: str, raw: str) -> None:
    assert StopReason.from_raw(raw, provider) is EXPECTED[provider, raw]
    assert StopReason.from_raw(raw) is EXPECTED[provider, raw]


def test_every_table_entry_is_covered_by_this_test() -> None:
    table = {(p.name, raw) for p in builtin_profiles() for raw in p.stop_reasons or {}}
    assert table - set(EXPECTED) <= {
        ("openai_responses", "refusal"),
        ("openai_chat", "refusal"),
        ("vllm", "refusal"),
    }


@pytest.mark.parametrize(
    ("alias", "raw", "expected"),
    [("openai", "completed", StopReason.END_TURN), ("llama.cpp", "limit", StopReason.MAX_TOKENS),
     ("Llama-CPP", "eos", StopReason.END_TURN), ("openai-chat", "length", StopReason.MAX_TOKENS),
     ("embedded", "max_tokens", StopReason.MAX_TOKENS),
     ("google", "SPII", StopReason.CONTENT_FILTER)],
)  # fmt: skip
def test_provider_aliases_pick_the_family_table(
    alias: str, raw: str, expected: StopReason
) -> None:
    assert StopReason.from_raw(raw, alias) is expected


def test_an_unknown_provider_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown provider 'openia'.*openai_responses"):
        StopReason.from_raw("stop", "openia")


@pytest.mark.parametrize(
    ("raw", "provider"),
    [("failed", "openai_responses"), ("incomplete:steered", "openai_responses"),
     ("none", "llamacpp"), ("load", "ollama"), ("brand_new", None), (None, None),
     ("stop", "anthropic")],
)  # fmt: skip
def test_unknown_values_are_other_never_a_clean_end(raw: str | None, provider: str | None) -> None:
    assert StopReason.from_raw(raw, provider) is StopReason.OTHER


@pytest.mark.parametrize("raw", [["stop"], {"stop": 1}, 5], ids=["list", "dict", "int"])
@pytest.mark.parametrize("provider", [None, "openai_chat"])
def test_a_raw_value_of_the_wrong_type_is_a_type_error_naming_it(
    raw: object, provider: str | None
) -> None:
    # On main: a list or a dict was a bare "unhashable type" from the table, naming nothing.
    with pytest.raises(TypeError, match=r"^StopReason.from_raw\(\): raw must be a string or None"):
        StopReason.from_raw(raw, provider)  # type: ignore[arg-type]


def test_the_normalized_vocabulary() -> None:
    names = {s.value for s in StopReason}
    assert {
        "end_turn", "max_tokens", "refusal", "stop_sequence", "tool_use", "content_filter",
        "pause_turn", "context_window", "other",
    } == names  # fmt: skip
    assert str(StopReason.MAX_TOKENS) == "max_tokens"


def test_a_bare_responses_incomplete_reason_is_truncation_when_parsed() -> None:
    # `sdk.parse` given what `incomplete_details.reason` says alone: on main `UnexpectedStop`
    # (still never a success), though the text was cut at the token limit.
    from contracts import Decision
    from sdk import TruncatedOutput
    from sdk import parse

    text = '{"reasoning": "r", "answer": "approve", "confidence": "high"}'
    with pytest.raises(TruncatedOutput) as info:
        parse(Decision, text, stop_reason="max_output_tokens")
    assert info.value.text == text and info.value.raw_stop_reason == "max_output_tokens"
