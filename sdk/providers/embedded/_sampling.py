"""Sampling within the grammar's mask for `EmbeddedProvider`: the per-call settings, llama.cpp's
repetition penalty, greedy or temperature/top-k/top-p choice among the allowed tokens, and the
surviving mass the diagnostics record. Pure numpy, no model: tested directly."""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any

from sdk.errors import GrammarStuck

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


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
    {
        "temperature",
        "top_p",
        "top_k",
        "repeat_penalty",
        "seed",
        "constrained",
        "ignore_eos",
        "fast_forward",
        "grounding",
    }
)


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
    fast_forward: bool = False
    grounding: bool | str = True
    """True, False, or `"values"`: grounded, every nullable copied value written where a span
    can fill it (the first pass of mass-aware abstention, `sdk.abstention`)."""


def surviving_mass(logits: npt.NDArray[np.float32], allowed: npt.NDArray[np.bool_]) -> float:
    """The probability the grammar left allowed: softmax(logits) (temperature 1) summed over
    `allowed`, in [0, 1]."""
    import numpy as np

    exp = np.exp(logits - logits.max())
    return float(np.clip(exp.sum(where=allowed) / exp.sum(), 0.0, 1.0))


def token_probability(
    logits: npt.NDArray[np.float32], allowed: npt.NDArray[np.bool_] | None, token: int
) -> tuple[float, float]:
    """The surviving mass at a step and the log probability of the chosen `token` among the
    tokens allowed there (every token where `allowed` is `None`), both from softmax(logits) at
    temperature 1: what a value's confidence is made of (`sdk.confidence`)."""
    import numpy as np

    top = logits.max()
    exp = np.exp(logits - top)
    total = float(exp.sum())
    kept = float(exp.sum(where=allowed)) if allowed is not None else total
    mass = float(np.clip(kept / total, 0.0, 1.0))
    chosen = float(exp[token])
    if chosen <= 0.0 or kept <= 0.0:
        # The token's own logit underflows next to the best one: its log probability directly.
        log_kept = math.log(kept) if kept > 0.0 else 0.0
        return mass, min(float(logits[token] - top) - log_kept, 0.0)
    return mass, min(math.log(chosen / kept), 0.0)


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
    if settings.seed is not None and settings.seed < 0:
        raise ValueError(f"{where}: seed cannot be negative ({settings.seed})")
    if settings.repeat_penalty <= 0:
        raise ValueError(f"{where}: repeat_penalty must be positive (1.0 means none)")
    if settings.grounding not in (True, False, "values"):
        raise ValueError(f"{where}: grounding must be True, False or 'values'")
    if settings.ignore_eos and settings.constrained:
        raise ValueError(
            f"{where}: ignore_eos is for unconstrained runs (a grammar decides the end)"
        )
    return settings
