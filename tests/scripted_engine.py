"""A scripted model for `EmbeddedProvider`: fixed logits over a tiny vocabulary, so that every
probability a result reports can be worked out by hand.

Only the model is scripted: the engine's forward pass (`_logits`, `decode_all`, the prompt's
evaluation) returns the logits a script gives for the text generated so far. Everything else is
the SDK's own code on real parts: llguidance compiles the contract's grammar over this
vocabulary and computes every mask, and the provider's decoding loop (`_decode.generate`), its
sampling, its diagnostics and `Result.confidence` run unchanged.

    engine = ScriptedEngine(VOCABULARY, script)      # script(text so far) -> {token: logit}
    with engine.installed(tmp_path) as path:          # a provider on that path uses it
        client = StructuredClient(EmbeddedProvider(path, n_threads=1))
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llguidance
import numpy as np
from llguidance.numpy import allocate_token_bitmask

from sdk.providers.embedded import _engine as engine_module
from sdk.providers.embedded._engine import _Engine

Script = Callable[[str], Mapping[str, float]]
"""The model: the text generated so far -> logits of the tokens it names (the others get the
engine's `default` logit)."""

EOS = "<eos>"


class _Vocabulary:
    """What llguidance's `TokenizerWrapper` reads: each token's bytes, the end token, and a
    greedy longest-match tokenizer."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.tokens = [token.encode() for token in tokens] + [EOS.encode()]
        self.eos_token_id = len(tokens)
        self.bos_token_id = None
        self.special_token_ids = [len(tokens)]

    def __call__(self, text: str | bytes) -> list[int]:
        data = text if isinstance(text, bytes) else text.encode()
        out: list[int] = []
        while data:
            fits = [i for i, t in enumerate(self.tokens[:-1]) if t and data.startswith(t)]
            if not fits:
                raise ValueError(f"the scripted vocabulary cannot write {data[:10]!r}")
            best = max(fits, key=lambda i: len(self.tokens[i]))
            out.append(best)
            data = data[len(self.tokens[best]) :]
        return out


class _Llm:
    """The part of llama-cpp-python's `Llama` the decoding loop touches: it feeds tokens."""

    def __init__(self, engine: ScriptedEngine) -> None:
        self._engine = engine
        self.n_batch = 64
        self.model_path = "scripted.gguf"

    def eval(self, tokens: Sequence[int]) -> None:
        self._engine.fed.extend(tokens)


class ScriptedEngine(_Engine):
    """An `_Engine` whose model is a script (module docstring)."""

    def __init__(self, vocabulary: Sequence[str], script: Script, *, default: float = -10.0):
        self.vocabulary = [*vocabulary, EOS]
        self.script = script
        self.default = default
        self.np = np
        self.n_ctx = 4096
        self.n_vocab = len(self.vocabulary)
        wrapper = llguidance.TokenizerWrapper(_Vocabulary(vocabulary))
        self.tokenizer = llguidance.LLTokenizer(wrapper)
        self.eos = self.n_vocab - 1
        self.end_tokens = frozenset({self.eos})
        self.bitmask = allocate_token_bitmask(1, self.n_vocab)
        self.lock = threading.Lock()
        self._grammars: OrderedDict[tuple[str, str | None], str] = OrderedDict()
        self._pieces: dict[int, bytes] = {}
        self.llm: Any = _Llm(self)
        self.fed: list[int] = []
        """Every generated token fed back to the model, in order."""
        self.prompt_length = 0

    # --- the model: the script ---

    def prompt_tokens(self, request: Any, instruction: str | None) -> list[int]:
        return [0]  # the script does not read the prompt

    def _evaluate_prompt(self, tokens: list[int]) -> None:
        self.fed = []

    def logits_after(self, text: str) -> np.ndarray:
        """The logits the script gives after `text` (the model's whole distribution)."""
        given = self.script(text)
        unknown = sorted(set(given) - set(self.vocabulary))
        if unknown:
            raise KeyError(f"the script names tokens outside the vocabulary: {unknown}")
        logits = np.full(self.n_vocab, self.default, dtype=np.float32)
        for token, logit in given.items():
            logits[self.vocabulary.index(token)] = logit
        return logits

    def _text(self, tokens: Sequence[int]) -> str:
        return "".join(self.vocabulary[t] for t in tokens if t != self.eos)

    def _logits(self) -> np.ndarray:
        return self.logits_after(self._text(self.fed))

    def decode_all(self, tokens: list[int]) -> list[np.ndarray]:
        rows = []
        for token in tokens:
            self.fed.append(token)
            rows.append(self.logits_after(self._text(self.fed)))
        return rows

    # --- installing it where a provider finds its engine ---

    @contextlib.contextmanager
    def installed(self, folder: Path, n_ctx: int = 4096) -> Iterator[Path]:
        """A model path under `folder` whose provider (with `n_ctx` and `n_threads=1`) runs this
        engine: the engines' registry is keyed by path and settings, as a loaded model is."""
        path = folder / "scripted.gguf"
        path.write_bytes(b"GGUF scripted")
        self.n_ctx = n_ctx
        key = (str(path.resolve()), n_ctx, 1)
        engine_module._ENGINES[key] = self
        try:
            yield path
        finally:
            engine_module._ENGINES.pop(key, None)


def softmax_share(
    logits: Mapping[str, float],
    chosen: str,
    among: Sequence[str],
    *,
    vocabulary: Sequence[str],
    default: float = -10.0,
) -> tuple[float, float]:
    """Worked by hand: the probability of `chosen` among the tokens `among` (the allowed ones),
    and the share of the whole distribution those tokens hold (the surviving mass)."""

    def logit(token: str) -> float:
        return logits.get(token, default)

    total = sum(math.exp(logit(token)) for token in vocabulary)
    allowed = sum(math.exp(logit(token)) for token in among)
    return math.exp(logit(chosen)) / allowed, allowed / total
