"""`EmbeddedProvider`'s decoding loop: logits, mask, choice, advance, one token at a time."""

from __future__ import annotations

import codecs
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Final

from sdk._result import Usage
from sdk.confidence import TokenLogprob
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import TokenStep
from sdk.diagnostics import diagnose
from sdk.errors import GrammarStuck
from sdk.errors import ProviderError
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import TextDelta
from sdk.providers.embedded._engine import _Cancelled
from sdk.providers.embedded._engine import _clip
from sdk.providers.embedded._sampling import _REPEAT_LAST_N
from sdk.providers.embedded._sampling import _Settings
from sdk.providers.embedded._sampling import masked_choice
from sdk.providers.embedded._sampling import repeat_penalized
from sdk.providers.embedded._sampling import surviving_mass
from sdk.providers.embedded._sampling import token_probability
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from llguidance import LLMatcher

    from sdk.providers.embedded._engine import _Engine

# Raw stop values (llama.cpp's own words where it has them).
_EOS, _LIMIT, _CONTEXT = "eos", "limit", "context"


@dataclass(frozen=True, slots=True)
class Constraint:
    """What a generation is held to, and how its diagnostics read what it wrote."""

    grammar: str | None
    """The grammar for llguidance (Lark text); None decodes unconstrained."""
    json_text: bool
    """The grammar's sentences are JSON documents (the diagnostics read them as such)."""
    threshold: float
    """Surviving mass under which the diagnostics call a token's choice the grammar's."""


def generate(
    engine: _Engine,
    request: CompletionRequest,
    settings: _Settings,
    constraint: Constraint,
    *,
    instruction: str | None,
    cancel: threading.Event | None,
) -> Iterator[TextDelta | Completion]:
    """The loop: logits, mask, sample, advance; a delta per token, then the `Completion`.

    With `settings.fast_forward`, the tokens the grammar forces after a chosen token are decoded
    with it in one batch (`forced_tokens`) instead of one forward pass each.

    Call with the engine's `lock` held.
    """
    prompt, matcher = _start(engine, request, instruction, constraint.grammar)
    rng = engine.np.random.default_rng(settings.seed)
    run = _Run(engine, constraint)
    room = min(request.max_tokens, engine.n_ctx - len(prompt))  # tokens that may be generated
    stop = _LIMIT
    while True:
        if cancel is not None and cancel.is_set():
            raise _Cancelled
        if run.generated >= request.max_tokens:
            stop = _LIMIT
            break
        if len(prompt) + run.generated >= engine.n_ctx:
            stop = _CONTEXT
            break
        token = _choose(engine, matcher, settings, rng, run)
        if token is None:
            stop = _EOS
            break
        yield from run.take(token)
        if matcher is not None and matcher.is_stopped():
            stop = _EOS  # the document is complete and nothing may follow it
            break
        if run.generated >= request.max_tokens:
            break  # no next token: spare the decode (and keep both arms of the bench even)
        forced: list[int] = []
        if matcher is not None and settings.fast_forward:
            forced = forced_tokens(engine, matcher, room - run.generated)
        if matcher is None or not forced:
            engine.llm.eval([token])
            continue
        yield from _take_forced(run, matcher, [token, *forced], request.max_tokens)
        if matcher.is_stopped():
            stop = _EOS
            break
        if run.generated >= request.max_tokens:
            break
    yield from run.finish()
    yield run.completion(len(prompt), stop, diagnosed=matcher is not None)


def _take_forced(
    run: _Run, matcher: LLMatcher, tokens: list[int], max_tokens: int
) -> Iterator[TextDelta]:
    """The forced run: the chosen token (first of `tokens`) and the tokens the grammar forces
    after it in one decode, logits kept at every position, so each forced token's surviving
    mass is measured on the model's own prediction for it, as token by token. The last forced
    token is decoded only when a token follows it (token by token would not decode it
    either)."""
    engine = run.engine
    chosen, forced = tokens[0], tokens[1:]
    done = matcher.is_stopped() or run.generated + len(forced) >= max_tokens
    rows = engine.decode_all(tokens if not done else [chosen, *forced[:-1]])
    for forced_token, row in zip(forced, rows, strict=False):
        only = engine.np.zeros(engine.n_vocab, dtype=bool)
        only[forced_token] = True
        mass = surviving_mass(row, only)
        run.steps.append(TokenStep(forced_token, "", run.length, mass, 1))
        run.tokens.append(TokenLogprob("", run.length, 0.0, mass))
        yield from run.take(forced_token)


def _start(
    engine: _Engine, request: CompletionRequest, instruction: str | None, grammar: str | None
) -> tuple[list[int], LLMatcher | None]:
    """The prompt's tokens, evaluated, and the grammar's matcher; `ProviderError` (a request
    no retry can fix) for a prompt the context cannot hold or a grammar that does not load."""
    from llguidance import LLMatcher

    prompt = engine.prompt_tokens(request, instruction)
    if len(prompt) >= engine.n_ctx:
        raise ProviderError(
            f"embedded: the prompt is {len(prompt)} tokens, the context window {engine.n_ctx}: "
            "pass a larger n_ctx or a shorter prompt",
            status_code=400,
        )
    matcher = LLMatcher(engine.tokenizer, grammar, log_level=0) if grammar is not None else None
    if matcher is not None and matcher.is_error():
        raise ProviderError(
            f"embedded: the grammar does not load: {matcher.get_error()}", status_code=400
        )
    engine._evaluate_prompt(prompt)
    return prompt, matcher


class _Run:
    """What one generation has written so far: its text, its tokens and their steps."""

    def __init__(self, engine: _Engine, constraint: Constraint) -> None:
        self.engine = engine
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._constraint = constraint
        self.parts: list[str] = []
        self.length = 0
        """Characters of text so far."""
        self.steps: list[TokenStep] = []
        """One per token chosen under the grammar (none unconstrained)."""
        self.tokens: list[TokenLogprob] = []
        """One per token chosen, with or without a grammar: its probability (`sdk.confidence`)."""
        self.generated = 0
        self.recent: deque[int] = deque(maxlen=_REPEAT_LAST_N)

    def take(self, token: int) -> Iterator[TextDelta]:
        """Count `token` as generated; its text, as a delta when it completes characters (and
        on the last step, whose text it is)."""
        self.generated += 1
        self.recent.append(token)
        piece = self._decoder.decode(self.engine._piece(token))
        if self.steps:
            self.steps[-1] = replace(self.steps[-1], text=piece)
        if self.tokens:
            self.tokens[-1] = replace(self.tokens[-1], text=piece)
        if piece:
            self.parts.append(piece)
            self.length += len(piece)
            yield TextDelta(piece)

    def finish(self) -> Iterator[TextDelta]:
        """A multi-byte character the end cut, as U+FFFD."""
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self.parts.append(tail)
            yield TextDelta(tail)

    def stuck(self, reason: str) -> GrammarStuck:
        """The error for a grammar that allows no way on, with the text and steps so far."""
        text = "".join(self.parts) + self._decoder.decode(b"", final=True)
        return GrammarStuck(
            f"embedded: the grammar allows no token after {self.generated} tokens ({reason}); "
            f"text so far: {_clip(text)!r}",
            text=text,
            diagnostics=self._diagnosed(text),
        )

    def completion(self, prompt_tokens: int, stop: str, *, diagnosed: bool) -> Completion:
        """The generation's completion, ended by `stop` (its diagnostics where a grammar held
        it)."""
        text = "".join(self.parts)
        return Completion(
            text=text,
            stop_reason=_STOP_REASONS[stop],
            raw_stop_reason=stop,
            usage=Usage(prompt_tokens, self.generated),
            model=Path(self.engine.llm.model_path).name.removesuffix(".gguf"),
            diagnostics=self._diagnosed(text) if diagnosed else None,
            tokens=tuple(self.tokens),
        )

    def _diagnosed(self, text: str) -> ConstraintDiagnostics:
        held = self._constraint
        return diagnose(text, self.steps, threshold=held.threshold, json_text=held.json_text)


def _choose(
    engine: _Engine, matcher: LLMatcher | None, settings: _Settings, rng: Any, run: _Run
) -> int | None:
    """The next token, consumed into the matcher, its step recorded; `None` at the end of the
    sequence (under a grammar, only where the document is complete)."""
    from llguidance.numpy import fill_next_token_bitmask

    np = engine.np
    logits = engine._logits()
    # What the choice is made on: the logits with recent tokens penalized. The surviving mass is
    # measured on the model's own logits, untouched.
    scores = repeat_penalized(logits, run.recent, settings.repeat_penalty)
    if matcher is None:
        if settings.ignore_eos:
            # Benchmarks: exactly max_tokens tokens, as llama.cpp's `ignore_eos`.
            scores = scores.copy()
            scores[list(engine.end_tokens)] = -np.inf
        token = masked_choice(scores, None, settings, rng)
        _, logprob = token_probability(logits, None, token)
        run.tokens.append(TokenLogprob("", run.length, logprob, 1.0))  # no grammar: all kept
        return None if token in engine.end_tokens else token
    fill_next_token_bitmask(matcher, engine.bitmask)
    if matcher.is_error():
        # llguidance's dead end: it then allows only EOS, so the mask is not empty; taking that
        # EOS would end a half-written document as if it were complete.
        raise run.stuck(matcher.get_error().splitlines()[0])
    allowed = np.unpackbits(engine.bitmask.view(np.uint8), bitorder="little")
    allowed = allowed[: engine.n_vocab].view(bool)
    count = int(np.count_nonzero(allowed))
    if count == 0:
        raise run.stuck("empty mask")
    token = masked_choice(scores, allowed, settings, rng, count=count)
    mass, logprob = token_probability(logits, allowed, token)
    run.steps.append(TokenStep(token, "", run.length, mass, count))
    run.tokens.append(TokenLogprob("", run.length, 0.0 if count == 1 else logprob, mass))
    if token == engine.eos:
        if not matcher.is_accepting():  # llguidance allows EOS only when accepting
            raise run.stuck("end of sequence in an unfinished state")
        return None
    if not matcher.consume_token(token):
        raise run.stuck(matcher.get_error().splitlines()[0] or "token rejected")
    return token


def forced_tokens(engine: _Engine, matcher: LLMatcher, room: int) -> list[int]:
    """The tokens the grammar forces next (at most `room`), consumed into `matcher`.

    llguidance's fast-forward tokens (`compute_ff_tokens`) are the forced bytes in the tokenizer's
    canonical split, the last token held back when a longer token could still continue it (the
    boundary the reference texts call token healing): a model fed them stays on the token paths
    it was trained on. The run is cut where the grammar's mask allows more than that one token,
    because token by token the model would choose there; so the tokens, and the text, are exactly
    those of the token-by-token loop, and no random draw is skipped (a forced choice draws
    none), whatever the temperature.
    """
    from llguidance.numpy import fill_next_token_bitmask

    np = engine.np
    run: list[int] = []
    # The batch holds the chosen token too; llama.cpp's batch has `n_batch` slots.
    candidates = matcher.compute_ff_tokens()[: max(0, min(room, engine.llm.n_batch - 1))]
    for token in candidates:
        if token in engine.end_tokens:
            break  # the end is the normal path's to take (it checks the document is complete)
        fill_next_token_bitmask(matcher, engine.bitmask)
        if matcher.is_error():
            break
        allowed = np.unpackbits(engine.bitmask.view(np.uint8), bitorder="little")
        allowed = allowed[: engine.n_vocab].view(bool)
        if not allowed[token] or int(np.count_nonzero(allowed)) != 1:
            break
        if not matcher.consume_token(token):  # pragma: no cover - the mask allowed it
            break
        run.append(token)
    return run


_STOP_REASONS: Final = {
    _EOS: StopReason.END_TURN,
    _LIMIT: StopReason.MAX_TOKENS,
    _CONTEXT: StopReason.CONTEXT_WINDOW,
}
