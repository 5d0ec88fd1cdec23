"""Retry settings and the transport retries of one request (tenacity's strategies).

`RetrySettings` is what a client's calls share (`Backoff` for transport errors, `MaxTokensRamp`
for truncation, the invalid-output and refusal budgets, deadlines); `TransportRetries` decides,
request by request, whether and how long to wait after a provider error. Which failure gets
which retry is the attempts machine's policy table (`sdk.engine.attempts`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import tenacity

from sdk.engine.conversation import FEEDBACK_WHOLE_REPLY
from sdk.errors import ProviderError

__all__ = [
    "DEFAULT_BACKOFF",
    "Backoff",
    "MaxTokensRamp",
    "RetrySettings",
    "TransportRetries",
]

logger = logging.getLogger("sdk.client")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retries of transport and API errors: exponential backoff with full jitter.

    The n-th retry waits a random time between 0 and `min(maximum, initial * 2**(n-1))`
    seconds, or exactly what the provider's `retry-after` says. A `retry-after` longer than
    `max_retry_after` (a quota reset hours away) is not waited for: the error is raised at once.
    """

    retries: int = 3
    initial: float = 0.5
    maximum: float = 30.0
    max_retry_after: float = 60.0


DEFAULT_BACKOFF = Backoff()
"""The clients' default transport retries."""


@dataclass(frozen=True, slots=True)
class MaxTokensRamp:
    """Opt-in retries of truncated output with `max_tokens` multiplied by `factor`, up to `cap`."""

    factor: float = 2.0
    cap: int = 16384
    retries: int = 2


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """A client's retry and limit settings, shared by all its calls."""

    retries: int = 2
    truncation: MaxTokensRamp | None = None
    refusal_retries: int = 0
    backoff: Backoff = Backoff()
    token_budget: int | None = None
    deadline: float | None = None
    """Seconds a whole call may take, retries and their waits included."""
    attempt_deadline: float | None = None
    """Seconds one request may take."""
    feedback_whole_reply: int = FEEDBACK_WHOLE_REPLY
    """The longest invalid reply (in characters) a retry sends back whole; past it, the feedback
    quotes an excerpt around each problem instead (`feedback_message`)."""

    def __post_init__(self) -> None:
        if self.retries < 0 or self.refusal_retries < 0 or self.backoff.retries < 0:
            raise ValueError("retry counts cannot be negative")
        for name in ("deadline", "attempt_deadline"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")


class _RetryAfter(tenacity.wait.wait_base):
    """Wait what `retry-after` says when the provider said it, else exponential with jitter."""

    def __init__(self, backoff: Backoff) -> None:
        self._fallback = tenacity.wait_random_exponential(
            multiplier=backoff.initial, max=backoff.maximum
        )

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        error = retry_state.outcome.exception() if retry_state.outcome is not None else None
        if isinstance(error, ProviderError) and error.retry_after is not None:
            return error.retry_after
        return float(self._fallback(retry_state))


class TransportRetries:
    """The transport retries of one request: tenacity's retry, stop and wait strategies.

    Driven from the call's state machine rather than through `tenacity.Retrying`: a streaming
    attempt yields snapshots between tries, which a `with attempt:` block cannot host safely,
    and one shape serves sync, async and streaming alike.
    """

    def __init__(self, backoff: Backoff, transient: Callable[[BaseException], bool]) -> None:
        self._retry = tenacity.retry_if_exception(transient)
        self._stop = tenacity.stop_after_attempt(backoff.retries + 1)
        self._wait = _RetryAfter(backoff)
        self._state = tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})

    def delay(self, error: ProviderError) -> float | None:
        """Seconds to wait before trying again after `error`, or `None` to give up."""
        state = self._state
        state.set_exception((type(error), error, error.__traceback__))
        if not self._retry(state) or self._stop(state):
            return None
        seconds = self._wait(state)
        logger.debug("transport retry %d in %.2fs", state.attempt_number, seconds)
        state.prepare_for_next_attempt()
        return seconds
