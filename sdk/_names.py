"""One name per provider family, everywhere a user meets it.

`Result.provider`, `StopReason.from_raw(raw, provider)`, `ProviderError.provider`, the CLI's
`--provider` and the wire dialect a provider sends its schema in all use these names. The obvious
spellings a user types (`openai`, `llama.cpp`, `openai-chat`) are aliases of them.
"""

from __future__ import annotations

__all__ = ["PROVIDERS", "PROVIDER_DIALECTS", "canonical_provider"]

PROVIDERS: tuple[str, ...] = (
    "anthropic",
    "openai_responses",
    "openai_chat",
    "gemini",
    "llamacpp",
    "vllm",
    "ollama",
    "embedded",
    "test",
)
"""Every provider family's name."""

PROVIDER_DIALECTS: dict[str, str] = {
    "anthropic": "anthropic",
    "openai_responses": "openai_strict",
    "openai_chat": "openai_strict",
    "gemini": "gemini",
    "llamacpp": "llamacpp",
    "vllm": "vllm",
    "ollama": "ollama",
}
"""The wire dialect (`sdk.schema.dialects.DIALECTS`) each hosted or server provider sends."""

_ALIASES: dict[str, str] = {
    "openai": "openai_responses",
    "responses": "openai_responses",
    "chat": "openai_chat",
    "claude": "anthropic",
    "google": "gemini",
    "google_genai": "gemini",
    "google-genai": "gemini",
    "llama_cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama.cpp": "llamacpp",
    "llama-server": "llamacpp",
    "local": "embedded",
    # The OpenAI strict dialect is shared by both OpenAI APIs: its name means the Responses API.
    "openai_strict": "openai_responses",
}


def canonical_provider(name: str) -> str:
    """The provider family `name` means (case, `-` and `_` aside); `ValueError` naming the valid
    names when it means none."""
    key = name.strip().lower()
    if key in PROVIDERS:
        return key
    key = _ALIASES.get(key, key.replace("-", "_"))
    if key in PROVIDERS:
        return key
    valid = ", ".join(PROVIDERS)
    aliases = ", ".join(sorted(_ALIASES))
    raise ValueError(f"unknown provider {name!r}: valid names are {valid} (aliases: {aliases})")
