"""The small value types that errors, the parser and results all carry.

A leaf: `sdk.errors`, `sdk.parsing` and `sdk._result` import these records from here (and
re-export them), so every import arrow points one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Note", "PromptInfo", "Usage", "Violation", "shorten"]

# How much of a pointer and of a message a one-line rendering shows; the record keeps all.
POINTER_SHOWN = 120
MESSAGE_SHOWN = 200


def shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


@dataclass(frozen=True, slots=True)
class Violation:
    """One thing wrong with a value: where (JSON pointer), what, and which rule said so.

    The fields hold the whole pointer and message; `str(violation)` and `shown()` are bounded,
    so a reply with a huge key cannot make an error message or retry feedback huge.
    """

    pointer: str
    message: str
    keyword: str | None = None

    def shown(self, pointer_chars: int = POINTER_SHOWN, message_chars: int = MESSAGE_SHOWN) -> str:
        """`pointer: message` on one line, each part cut with an ellipsis past its limit."""
        message = shorten(" ".join(self.message.split()), message_chars)
        return f"{shorten(self.pointer, pointer_chars) or '/'}: {message}"

    def __str__(self) -> str:
        return self.shown()


@dataclass(frozen=True, slots=True)
class Note:
    """A change the parser made to the raw JSON, such as an enum case normalization."""

    pointer: str
    received: Any
    written: Any
    kind: str = "enum_case"

    def __str__(self) -> str:
        received = shorten(repr(self.received), MESSAGE_SHOWN)
        return f"{shorten(self.pointer, POINTER_SHOWN)}: {self.kind} {received} -> {self.written!r}"


@dataclass(frozen=True, slots=True)
class PromptInfo:
    """Which prompt template produced a request: its name, version and fingerprint (what a
    `Result`, a batch output line and an eval row say, and what the lock file pins)."""

    name: str
    version: int
    fingerprint: str
    """The sha256 hex of the template's content (`sdk.Prompt.fingerprint()`)."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "fingerprint": self.fingerprint}


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens spent; `Result.usage` sums it over every attempt.

    Each count is what the provider itself reported, under its own definition: `input_tokens`
    is what the provider calls input (Anthropic's excludes the cached tokens, which it reports
    apart; OpenAI's and Gemini's include them), `output_tokens` what it calls output (OpenAI's
    includes the reasoning tokens; Gemini's candidates exclude the thoughts). The cache and
    reasoning counts are kept apart, never folded in, so `total_tokens` is input plus output as
    the provider reported them.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    """Input tokens served from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache (Anthropic's cache creation)."""
    reasoning_tokens: int = 0
    """Tokens the model spent thinking (OpenAI reasoning tokens, Gemini thoughts)."""

    @property
    def total_tokens(self) -> int:
        """Input plus output, as the provider reported them."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )
