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
from typing import TYPE_CHECKING
from typing import Annotated

from sdk._values.declared import AtLeast
from sdk._values.declared import check_fields
from sdk._values.seconds import WAIT
from sdk.errors import ProviderError

if TYPE_CHECKING:
    import tenacity

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

    retries: Annotated[int, AtLeast(0)] = 3
    initial: WAIT = 0.5
    maximum: WAIT = 30.0
    max_retry_after: WAIT = 60.0

    def __post_init__(self) -> None:
        check_fields(self)


DEFAULT_BACKOFF = Backoff()
"""The clients' default transport retries."""


@dataclass(frozen=True, slots=True)
class MaxTokensRamp:
    """Opt-in retries of truncated output with `max_tokens` multiplied by `factor`, up to `cap`."""

    factor: Annotated[float, AtLeast(1)] = 2.0
    cap: Annotated[int, AtLeast(1)] = 16384
    retries: Annotated[int, AtLeast(0)] = 2

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """A call's retry and limit settings: the call spec's attempts projection (each field an
    option, declared and checked in `sdk.engine.options`)."""

    retries: int
    truncation: MaxTokensRamp | None
    refusal_retries: int
    backoff: Backoff
    token_budget: int | None
    deadline: float | None
    """Seconds a whole call may take, retries and their waits included."""
    attempt_deadline: float | None
    """Seconds one request may take."""


class _RetryAfter:
    """Wait what `retry-after` says when the provider said it, else exponential with jitter."""

    def __init__(self, backoff: Backoff) -> None:
        import tenacity

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
        import tenacity  # loaded with the first request, not with `import sdk`

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
