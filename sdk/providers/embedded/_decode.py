"""`EmbeddedProvider`'s decoding loop: logits, mask, choice, advance, one token at a time."""

from __future__ import annotations

import codecs
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sdk._result import Usage
from sdk.diagnostics import (
    ConstraintDiagnostics,
    TokenStep,
    diagnose,
)
from sdk.errors import GrammarStuck, ProviderError
from sdk.providers._base import Completion, CompletionRequest, TextDelta
from sdk.providers.embedded._engine import _Cancelled, _clip
from sdk.providers.embedded._sampling import (
    _REPEAT_LAST_N,
    _Settings,
    masked_choice,
    repeat_penalized,
    surviving_mass,
)
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from llguidance import LLMatcher

    from sdk.providers.embedded._engine import _Engine

# Raw stop values (llama.cpp's own words where it has them).
_EOS, _LIMIT, _CONTEXT = "eos", "limit", "context"


def generate(
    engine: _Engine,
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

    With `settings.fast_forward`, the tokens the grammar forces after a chosen token are decoded
    with it in one batch (`forced_tokens`) instead of one forward pass each.

    Call with the engine's `lock` held.
    """
    from llguidance import LLMatcher
    from llguidance.numpy import fill_next_token_bitmask

    np = engine.np
    prompt = engine.prompt_tokens(request, instruction)
    if len(prompt) >= engine.n_ctx:
        raise ProviderError(
            f"embedded: the prompt is {len(prompt)} tokens, the context window {engine.n_ctx}: "
            "pass a larger n_ctx or a shorter prompt",
            status_code=400,  # a request no retry can fix
        )
    matcher = LLMatcher(engine.tokenizer, grammar, log_level=0) if grammar is not None else None
    if matcher is not None and matcher.is_error():
        raise ProviderError(
            f"embedded: the grammar does not load: {matcher.get_error()}", status_code=400
        )
    rng = np.random.default_rng(settings.seed)
    engine._evaluate_prompt(prompt)

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
        if len(prompt) + generated >= engine.n_ctx:
            stop = _CONTEXT
            break
        logits = engine._logits()
        # What the choice is made on: the logits with recent tokens penalized. The surviving
        # mass is measured on the model's own logits, untouched.
        scores = repeat_penalized(logits, recent, settings.repeat_penalty)

        if matcher is None:
            if settings.ignore_eos:
                # Benchmarks: exactly max_tokens tokens, as llama.cpp's `ignore_eos`.
                scores = scores.copy()
                scores[list(engine.end_tokens)] = -np.inf
            token = masked_choice(scores, None, settings, rng)
            if token in engine.end_tokens:
                stop = _EOS
                break
        else:
            fill_next_token_bitmask(matcher, engine.bitmask)
            if matcher.is_error():
                # llguidance's dead end: it then allows only EOS, so the mask is not empty;
                # taking that EOS would end a half-written document as if it were complete.
                raise stuck(matcher.get_error().splitlines()[0])
            allowed = np.unpackbits(engine.bitmask.view(np.uint8), bitorder="little")
            allowed = allowed[: engine.n_vocab].view(bool)
            count = int(np.count_nonzero(allowed))
            if count == 0:
                raise stuck("empty mask")
            token = masked_choice(scores, allowed, settings, rng, count=count)
            steps.append(TokenStep(token, "", length, surviving_mass(logits, allowed), count))
            if token == engine.eos:
                if not matcher.is_accepting():  # llguidance allows EOS only when accepting
                    raise stuck("end of sequence in an unfinished state")
                stop = _EOS
                break
            if not matcher.consume_token(token):
                raise stuck(matcher.get_error().splitlines()[0] or "token rejected")
        generated += 1
        recent.append(token)
        piece = decoder.decode(engine._piece(token))
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
        forced: list[int] = []
        if matcher is not None and settings.fast_forward:
            room = min(request.max_tokens, engine.n_ctx - len(prompt)) - generated
            forced = forced_tokens(engine, matcher, room)
        if not forced:
            engine.llm.eval([token])
            continue
        # The forced run: the chosen token and the forced ones in one decode, logits kept at
        # every position, so each forced token's surviving mass is measured on the model's own
        # prediction for it, as token by token. The last forced token is decoded only when a
        # token follows it (token by token would not decode it either).
        done = matcher is not None and matcher.is_stopped()
        done = done or generated + len(forced) >= request.max_tokens
        rows = engine.decode_all([token, *forced] if not done else [token, *forced[:-1]])
        for forced_token, row in zip(forced, rows, strict=False):
            only = np.zeros(engine.n_vocab, dtype=bool)
            only[forced_token] = True
            steps.append(TokenStep(forced_token, "", length, surviving_mass(row, only), 1))
            generated += 1
            recent.append(forced_token)
            piece = decoder.decode(engine._piece(forced_token))
            steps[-1] = replace(steps[-1], text=piece)
            if piece:
                parts.append(piece)
                length += len(piece)
                yield TextDelta(piece)
        if matcher is not None and matcher.is_stopped():
            stop = _EOS
            break
        if generated >= request.max_tokens:
            break

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
        model=Path(engine.llm.model_path).name.removesuffix(".gguf"),
        diagnostics=diagnostics,
    )


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
