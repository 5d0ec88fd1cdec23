"""Token probabilities as servers report them, read into `sdk.confidence.TokenLogprob`s (no I/O).

- Chat Completions (`logprobs: true`: OpenAI, vLLM, llama.cpp's OpenAI route):
  `choices[0].logprobs.content`, one `{token, logprob, bytes}` per generated token.
- llama.cpp's native `/completion` (`n_probs > 0`): `completion_probabilities`, one
  `{token, bytes, logprob}` per token: the probability under the model's own distribution (a
  softmax of the logits before any sampler and before the grammar, as llama-server computes it
  without `post_sampling_probs`; measured on the real server in
  `tests/test_confidence_routes.py`). With `post_sampling_probs` it reports `prob` after its
  sampler chain instead (1.0 for every token under greedy decoding: nothing a confidence can
  use), which is read as given.

Each token's text is its `bytes` decoded in order (a token may end inside a character: its
bytes show up with the next one), so offsets are characters of the generated text, whatever the
tokenizer. An entry without bytes uses its `token` text. Entries of another shape make the whole
list unusable: `None` (no confidence), never a guess.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from sdk.confidence import TokenLogprob

__all__ = ["chat_logprobs", "llamacpp_probabilities", "tokens_of"]


def chat_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    """A choice's `logprobs` object (`{"content": [...]}`, or the `openai` client's model of it)
    as tokens; `None` when it holds none."""
    content = _field(logprobs, "content")
    if not isinstance(content, list):
        return None
    return tokens_of(content)


def llamacpp_probabilities(body: Mapping[str, Any]) -> tuple[TokenLogprob, ...] | None:
    """A `/completion` reply's `completion_probabilities` as tokens; `None` when absent."""
    entries = body.get("completion_probabilities")
    if not isinstance(entries, list):
        return None
    return tokens_of(entries)


def tokens_of(entries: Iterable[Any]) -> tuple[TokenLogprob, ...] | None:
    """Per-token entries (`logprob`, or `prob`; `bytes` or `token`) as tokens with character
    offsets; `None` if one of them is not such an entry."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tokens: list[TokenLogprob] = []
    offset = 0
    for entry in entries:
        logprob = _logprob(entry)
        if logprob is None:
            return None
        raw = _field(entry, "bytes")
        if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw):
            text = decoder.decode(bytes(raw))
        else:
            token = _field(entry, "token")
            if not isinstance(token, str):
                return None
            text = token
        tokens.append(TokenLogprob(text, offset, logprob, None))
        offset += len(text)
    return tuple(tokens)


def _logprob(entry: Any) -> float | None:
    value = _field(entry, "logprob")
    if _number(value):
        return min(float(value), 0.0)
    probability = _field(entry, "prob")
    if _number(probability) and 0.0 <= probability <= 1.0:
        return math.log(probability) if probability > 0 else -math.inf
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _field(entry: Any, name: str) -> Any:
    """A field of a JSON object or of the `openai` client's model of it."""
    if isinstance(entry, Mapping):
        return entry.get(name)
    return getattr(entry, name, None)
