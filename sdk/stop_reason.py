"""Normalized stop reasons, and the mapping from every provider's raw value.

Every provider says "why generation ended" in its own words: Anthropic's `stop_reason`, OpenAI
Responses' `status` plus `incomplete_details.reason`, Chat Completions' `finish_reason`, Gemini's
`finishReason` (or its prompt feedback's `blockReason`, written `blocked:<reason>`),
llama.cpp's `stop_type`, Ollama's `done_reason`. The parser decides on the normalized value and
keeps the raw one beside it, so nothing a provider said is lost.

Each family's raw words and what they mean are part of its profile
(`sdk.providers.profile(name).stop_reasons`); `StopReason.from_raw(raw, provider)` reads them.
"""

from sdk._values.profile import StopReason

__all__ = ["StopReason"]
