"""Control-token strings in message content: finding them, and the policy for servers that render.

A local server that renders the chat template and then tokenizes the result with special-token
parsing on (llama.cpp's OpenAI route, vLLM with Hugging Face tokenizers, Ollama) turns the text
`<|im_end|>` inside a document into the real end-of-turn token: a document can close the user's
turn and write a system turn of its own. The SDK cannot change those servers' tokenizers, so the
codecs of those routes look for the control-token strings of the common template families (and
any the caller adds) in the system prompt and every message, and apply a policy:

- `"reject"` (the default): `ControlTokenInContent` naming the string and where it is, raised
  while the request is built, so nothing is sent;
- `"allow"`: sent as it is. Unsafe with untrusted documents: the server will parse the strings
  as control tokens.

Content is never rewritten: a `SourceQuote` must still match the source it quotes.

llama.cpp's native route does not need this: it sends message content as token ids tokenized
without special parsing (`sdk.providers._llamacpp_prompt`), so the strings stay text there.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from typing import Literal

from sdk._values.position import TextPosition
from sdk.errors import ControlTokenInContent
from sdk.providers._base import CompletionRequest

__all__ = [
    "CONTROL_TOKEN_POLICIES",
    "FAMILY_TOKENS",
    "ControlTokenPolicy",
    "ControlTokens",
    "Found",
    "check_policy",
    "check_request",
]

ControlTokenPolicy = Literal["reject", "allow"]
CONTROL_TOKEN_POLICIES: tuple[ControlTokenPolicy, ...] = ("reject", "allow")

FAMILY_TOKENS: dict[str, tuple[str, ...]] = {
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "llama3": (
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
    ),
    "mistral": (
        "[INST]",
        "[/INST]",
        "[SYSTEM_PROMPT]",
        "[/SYSTEM_PROMPT]",
        "[TOOL_CALLS]",
        "[AVAILABLE_TOOLS]",
        "[TOOL_RESULTS]",
    ),
    "gemma": ("<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"),
    "gpt2": ("<|endoftext|>",),
    "sentencepiece": ("<s>", "</s>"),
    # DeepSeek's bars are U+FF5C (fullwidth), its spaces U+2581.
    "deepseek": (
        "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
        "<\uff5cUser\uff5c>",
        "<\uff5cAssistant\uff5c>",
    ),
}
"""The control-token strings of the common chat-template families, by family."""

# Beyond the list: the `<|name|>` convention, which ChatML, Llama 3, Phi (`<|user|>`, `<|end|>`),
# Qwen (`<|vision_start|>`) and gpt-oss (`<|channel|>`, `<|message|>`) all follow, so that a
# family not listed above is still caught.
_BAR_TOKEN = r"<\|[A-Za-z0-9_.:/-]{1,48}\|>"


@dataclass(frozen=True, slots=True)
class Found:
    """A control-token string in some content: the string, and where it starts."""

    token: str
    position: int


class ControlTokens:
    """A matcher for a set of control-token strings (literal), plus optional extra patterns."""

    def __init__(self, strings: Iterable[str], *, patterns: Iterable[str] = ()) -> None:
        self.strings: frozenset[str] = frozenset(s for s in strings if s)
        # The strings as one trie-shaped pattern: a plain alternation of a few thousand strings
        # (Gemma lists over 6,000 special tokens) costs `re` 12 ms per 20 KB, the trie 0.1 ms.
        alternatives = ([_trie_pattern(self.strings)] if self.strings else []) + list(patterns)
        self._regex = re.compile("|".join(alternatives)) if alternatives else None
        # (as JSON, each string quoted whole: joined by a separator, `["a\nb"]` and `["a", "b"]`
        # were one digest, and a provider refusing a prompt was served another one's answer)
        looked_for = json.dumps([sorted(self.strings), list(patterns)], ensure_ascii=True)
        self.digest = hashlib.sha256(looked_for.encode()).hexdigest()
        """What is looked for, by the sha256 of the strings in order and the patterns (the
        response cache's key: a request one set refuses, another sends). Not of the one pattern
        made of them: a set's order, and so the pattern's, differs from process to process."""

    @classmethod
    def families(cls, extra: Iterable[str] = ()) -> ControlTokens:
        """The common families' strings, the `<|name|>` convention, and `extra`."""
        strings = [s for family in FAMILY_TOKENS.values() for s in family]
        return cls([*strings, *extra], patterns=[_BAR_TOKEN])

    def find(self, text: str) -> Found | None:
        """The first control-token string in `text`, if any."""
        match = self._regex.search(text) if self._regex is not None else None
        return Found(match.group(), match.start()) if match else None

    def __bool__(self) -> bool:
        return self._regex is not None


def _trie_pattern(strings: Iterable[str]) -> str:
    """A pattern matching exactly `strings`, shared prefixes factored out (longest first)."""
    root: dict[str, Any] = {}
    for string in strings:
        node = root
        for char in string:
            node = node.setdefault(char, {})
        node[""] = {}  # a string ends here

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in node.items() if char]
        if not branches:
            return ""
        ends = "" in node
        body = branches[0] if len(branches) == 1 and not ends else f"(?:{'|'.join(branches)})"
        return body + ("?" if ends else "")  # greedy: the longer string is tried first

    return pattern(root)


def contents(request: CompletionRequest) -> Iterator[tuple[str, str]]:
    """Every content of a request with where it is: `("system", ...)`, `("messages[i]", ...)`."""
    if request.system:
        yield "system", request.system
    for index, message in enumerate(request.messages):
        yield f"messages[{index}]", message.text
        # A tool's result is data from outside as much as a document is.
        for number, result in enumerate(message.tool_results):
            yield f"messages[{index}].tool_results[{number}]", result.content


def check_request(
    request: CompletionRequest, tokens: ControlTokens, *, policy: ControlTokenPolicy, server: str
) -> None:
    """Apply `policy` to the request's content: under `"reject"`, `ControlTokenInContent` for the
    first control-token string found (in the system prompt, then the messages in order)."""
    if policy == "allow":
        return
    for where, text in contents(request):
        found = tokens.find(text)
        if found is not None:
            at = TextPosition.of(text, found.position)
            raise ControlTokenInContent(
                f"{server}: {where} contains the control-token string {found.token!r} at "
                f"{at.by_index('character')}; "
                "the server would parse it as a control token (a document could open a chat "
                "turn of its own). Remove it from the content, or pass control_tokens='allow' "
                "to send it anyway (unsafe with untrusted text)",
                token=found.token,
                where=where,
                position=at.index,
                line=at.line,
                column=at.column,
            )


def check_policy(policy: str) -> ControlTokenPolicy:
    """`policy` if it is one (a `ValueError` naming the valid ones otherwise)."""
    if policy not in CONTROL_TOKEN_POLICIES:
        raise ValueError(f"control_tokens must be 'reject' or 'allow', not {policy!r}")
    return "reject" if policy == "reject" else "allow"
