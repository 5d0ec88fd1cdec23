"""Prompt caching on the hosted providers: the static part of a structured-output prompt (the
system prompt, the tool and schema definitions, a shared document) is what repeats from call to
call, so it is what the provider should cache.

- Anthropic caches a prefix up to a `cache_control` breakpoint (tools, then system, then the
  messages), for requests whose prefix is long enough (a minimum that depends on the model).
  `anthropic_breakpoints` puts one at the end of the static prefix (the system prompt, or the last
  tool when there is no system prompt) once it is long enough, one at the end of a prompt
  template's literal start (`Message.static_prefix`: that text cut into a block of its own)
  once everything up to it is long enough, and one at the end of the first user turn when that
  turn alone is long enough to cache (a document: a retry, two-phase reasoning, an eval's arms
  or several contracts send it again). Writing a cache costs 1.25x the input price of what is
  written, reading it 0.1x: a long document sent once costs a quarter more, one sent twice
  already less. At most 4 breakpoints are allowed; this uses 3 at most.
- OpenAI caches prefixes itself; a `prompt_cache_key` routes requests that share one to the same
  cache. `prompt_cache_key` derives it from what the static part is made of: the fingerprint of
  what is asked for and the system prompt.
- Gemini caches implicitly (2.5 models and later); explicit context caches are resources of
  their own, with a lifetime and a price, which the SDK does not create.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from typing import assert_never

from sdk._tools import ToolOffer
from sdk.providers._base import CompletionRequest
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument

__all__ = ["anthropic_breakpoints", "min_cacheable_tokens", "prompt_cache_key"]

EPHEMERAL = {"type": "ephemeral"}

# Anthropic's smallest cacheable prompt, in tokens, by model family (a shorter prefix is not
# cached, and a breakpoint on it is wasted): the first prefix that matches wins.
_MINIMUMS = (
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-3-haiku", 2048),
    ("claude-3-5-haiku", 2048),
    ("claude-haiku", 2048),
)
_DEFAULT_MINIMUM = 1024
# A character estimate of tokens (the request is not tokenized here): about four a token.
_CHARS_PER_TOKEN = 4


def min_cacheable_tokens(model: str) -> int:
    """The shortest prompt, in tokens, Anthropic caches for `model`."""
    return next((tokens for prefix, tokens in _MINIMUMS if model.startswith(prefix)),
                _DEFAULT_MINIMUM)  # fmt: skip


def anthropic_breakpoints(kwargs: dict[str, Any], model: str, static_prefix: int = 0) -> None:
    """Put `cache_control` breakpoints on the static prefix of `messages.create`'s keyword
    arguments, in place (see the module docstring). `static_prefix`: how many leading
    characters of the first turn's text are the same on every call (a prompt template's
    literal start, `Message.static_prefix`)."""
    minimum = min_cacheable_tokens(model) * _CHARS_PER_TOKEN
    tools: list[dict[str, Any]] = kwargs.get("tools") or []
    system = kwargs.get("system")
    length = _size(tools) + (len(system) if isinstance(system, str) else 0)
    if length >= minimum:
        if isinstance(system, str) and system:
            kwargs["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
        elif tools:
            tools[-1] = {**tools[-1], "cache_control": EPHEMERAL}
    messages: list[dict[str, Any]] = kwargs.get("messages") or []
    first = messages[0] if messages else None
    if first is None or first.get("role") != "user":
        return
    if static_prefix > 0 and length + static_prefix >= minimum:
        first["content"] = _static_marked(first["content"], static_prefix)
    if _size(first["content"]) >= minimum:
        first["content"] = _marked(first["content"])


def prompt_cache_key(request: CompletionRequest) -> str:
    """A key naming the static part of `request`: what is asked for and the system prompt."""
    match request.output:
        case JsonDocument() as document:
            asked = document.info.fingerprint
        case GrammarSentence(grammar):
            asked = grammar.fingerprint()
        case ToolOffer(tools):
            asked = ",".join(tool.name for tool in tools)
        case FreeText():
            asked = ""
        case unknown:
            assert_never(unknown)
    digest = hashlib.sha256(f"{asked}\n{request.system or ''}".encode()).hexdigest()
    return f"sdk-{digest[:32]}"


def _static_marked(content: Any, static_prefix: int) -> Any:
    """A turn's content with a breakpoint at the end of its first text's static prefix, that
    text cut in two blocks there: the template's literal start is then a prefix of its own,
    the same on every call (a breakpoint after the variables would write a new cache entry
    on every call and read none)."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    first = blocks[0] if blocks else None
    if first is None or first.get("type") != "text" or "cache_control" in first:
        return content
    text: str = first["text"]
    if static_prefix > len(text):
        return content
    head = {"type": "text", "text": text[:static_prefix], "cache_control": EPHEMERAL}
    rest = [{"type": "text", "text": text[static_prefix:]}] if static_prefix < len(text) else []
    return [head, *rest, *blocks[1:]]


def _marked(content: Any) -> list[dict[str, Any]]:
    """A turn's content with a breakpoint on its last block."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
    return blocks


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
