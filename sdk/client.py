"""`StructuredClient` and `AsyncStructuredClient`: ask a provider for a contract, get a `Result`.

    client = StructuredClient(AnthropicProvider(anthropic.Anthropic(), model="claude-sonnet-4-6"))
    result = client.generate(Decision, prompt="Approve this refund?", source=ticket)
    result.value          # a Decision that passed every check
    result.usage          # tokens over every attempt

The two clients share everything but the call to the transport (the way httpx's `Client` and
`AsyncClient` share a base): `_BaseClient` holds the request building, the parsing and the
retry decisions; each client only sends.

Each kind of failure has its own retry policy and budget, because each costs differently:

- invalid output (`InvalidJSON`, `SchemaViolation`, `ContractViolation`, `CheckFailed`): retried
  up to `retries` times. The next request is the original conversation plus the previous output
  (as the assistant's turn) and a short list of what was wrong (JSON pointer and message per
  violation): the feedback grows with the number of errors, never with the document, and each
  retry replaces the last one's feedback instead of piling up history.
- truncation (`TruncatedOutput`): fails fast by default, because the same limit cuts the same
  document again. `truncation=MaxTokensRamp(...)` opts in to retries with a larger `max_tokens`.
- refusal (`RefusedOutput`): not retried unless `refusal_retries` says so.
- transport and API errors (`ProviderError`: rate limits, 5xx, timeouts, connection failures) are
  retried with exponential backoff and full jitter, honouring `retry-after` (tenacity's retry,
  stop and wait strategies decide); other 4xx (bad request, auth) are not retried.

When retries run out, `RetriesExhausted` holds every `Attempt` (its text, error, usage). An error
that no policy retries is raised as itself. A `token_budget` stops retrying before the next
attempt would take the spent tokens past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from weakref import WeakKeyDictionary

import tenacity

from sdk._result import Attempt, Result, Usage
from sdk.contract import Contract
from sdk.errors import (
    InvalidOutput,
    ProviderError,
    ProviderRetriesExhausted,
    RefusedOutput,
    RetriesExhausted,
    SourceMissing,
    StructuredOutputError,
    TruncatedOutput,
    Violation,
)
from sdk.parsing import parse
from sdk.parsing.incremental import Partial, PartialReader
from sdk.parsing.parser import EnumCase
from sdk.providers._base import Completion, CompletionRequest, Message, Provider
from sdk.providers._errors import is_retryable
from sdk.schema.canonical import schema_info
from sdk.schema.dialects import WireSchema

__all__ = [
    "AsyncStructuredClient",
    "Backoff",
    "MaxTokensRamp",
    "StructuredClient",
    "feedback_message",
]

logger = logging.getLogger(__name__)

C = TypeVar("C", bound=Contract)

MessageLike = Message | Mapping[str, str]
"""A conversation turn: a `Message`, or a mapping with `role` and `content`."""

# Retry feedback lists at most this many violations, each message at most this long: the
# feedback is bounded whatever the document or its errors look like.
_FEEDBACK_VIOLATIONS = 20
_FEEDBACK_MESSAGE_CHARS = 200


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


@dataclass(frozen=True, slots=True)
class MaxTokensRamp:
    """Opt-in retries of truncated output with `max_tokens` multiplied by `factor`, up to `cap`."""

    factor: float = 2.0
    cap: int = 16384
    retries: int = 2


@dataclass
class _Call(Generic[C]):
    """The state of one `generate` call across its attempts."""

    contract: type[C]
    messages: tuple[Message, ...]
    system: str | None
    source: str | None
    max_tokens: int
    options: dict[str, Any]
    wire: WireSchema | None
    attempts: list[Attempt] = field(default_factory=list)
    feedback: tuple[Message, ...] = ()
    invalid_retries: int = 0
    ramp_retries: int = 0
    refusal_retries: int = 0
    over_budget: bool = False
    partial: Any = None
    """Streaming: the last snapshot of the current attempt (put on its error if it fails)."""

    def request(self) -> CompletionRequest:
        return CompletionRequest(
            contract=self.contract,
            messages=self.messages + self.feedback,
            max_tokens=self.max_tokens,
            system=self.system,
            options=self.options,
        )

    @property
    def usage(self) -> Usage:
        return sum((attempt.usage for attempt in self.attempts), Usage())


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


class _TransportRetries:
    """The transport retries of one request: tenacity's retry, stop and wait strategies.

    The clients drive them from their own loops rather than through `tenacity.Retrying`:
    a streaming attempt yields snapshots between tries, which a `with attempt:` block cannot
    host safely (it would swallow the generator's close or a cancellation), and one loop shape
    for sync, async and streaming keeps the three identical.
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


class _BaseClient:
    """Everything the two clients share: all but sending the request."""

    def __init__(
        self,
        provider: Provider,
        *,
        retries: int,
        enum_case: EnumCase,
        max_tokens: int,
        truncation: MaxTokensRamp | None,
        refusal_retries: int,
        backoff: Backoff,
        token_budget: int | None,
    ) -> None:
        if retries < 0 or refusal_retries < 0 or backoff.retries < 0:
            raise ValueError("retry counts cannot be negative")
        if enum_case not in ("normalize", "reject"):
            raise ValueError(f"enum_case must be 'normalize' or 'reject', not {enum_case!r}")
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.provider = provider
        self.retries = retries
        self.enum_case: EnumCase = enum_case
        self.max_tokens = max_tokens
        self.truncation = truncation
        self.refusal_retries = refusal_retries
        self.backoff = backoff
        self.token_budget = token_budget

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.provider!r}, retries={self.retries})"

    # --- before the first attempt ---

    def _call(
        self,
        contract: type[C],
        prompt: str | None,
        messages: Sequence[MessageLike] | None,
        system: str | None,
        source: str | None,
        max_tokens: int | None,
        options: dict[str, Any],
    ) -> _Call[C]:
        return _Call(
            contract=contract,
            messages=_conversation(contract, prompt, messages, source),
            system=system,
            source=source,
            max_tokens=max_tokens if max_tokens is not None else self.max_tokens,
            options=options,
            wire=self.provider.wire_schema(contract),
        )

    # --- transport retries ---

    def _transport(self) -> _TransportRetries:
        return _TransportRetries(self.backoff, self._transient)

    def _transient(self, error: BaseException) -> bool:
        if not isinstance(error, ProviderError) or not is_retryable(error):
            return False
        return error.retry_after is None or error.retry_after <= self.backoff.max_retry_after

    def _transport_failure(
        self, call: _Call[Any], retries: _TransportRetries, error: ProviderError
    ) -> float:
        """Record an attempt that got no reply; the wait before the next try, or raise."""
        call.attempts.append(
            Attempt(
                number=len(call.attempts) + 1,
                text=None,
                stop_reason=None,
                raw_stop_reason=None,
                usage=Usage(),
                error=error,
                request_id=error.request_id,
                max_tokens=call.max_tokens,
            )
        )
        logger.debug("attempt %d: %s", len(call.attempts), error)
        delay = retries.delay(error)
        if delay is None:
            raise error
        return delay

    def _starting(self, call: _Call[Any]) -> None:
        logger.debug(
            "attempt %d: %s v%d -> %s (model %s), max_tokens=%d, %d message(s)",
            len(call.attempts) + 1,
            call.contract.__name__,
            call.contract.schema_version,
            self.provider.name,
            self.provider.model,
            call.max_tokens,
            len(call.messages) + len(call.feedback),
        )

    # --- after a reply ---

    def _finish(self, call: _Call[C], completion: Completion) -> Result[C]:
        """Parse the reply; record the attempt; a `Result`, or the parser's error raised."""
        text = completion.text
        number = len(call.attempts) + 1
        try:
            parsed = parse(
                call.contract,
                text if text is not None else "",
                stop_reason=completion.stop_reason,
                raw_stop_reason=completion.raw_stop_reason,
                source=call.source,
                enum_case=self.enum_case,
                clean_stops=self.provider.clean_stops,
                refusal=completion.refusal,
                refusal_category=completion.refusal_category,
                absent_nulls=call.wire is not None and bool(call.wire.nullable),
            )
        except StructuredOutputError as error:
            if text is None:
                error.text = None  # there was no output at all (a refusal field, a filter)
            call.attempts.append(_attempt(number, call, completion, text, error))
            logger.debug(
                "attempt %d: %s, %s: %s",
                number,
                completion.raw_stop_reason,
                _tokens(completion.usage),
                type(error).__name__,
            )
            raise
        call.attempts.append(_attempt(number, call, completion, text, None))
        logger.debug(
            "attempt %d: %s, %s: valid",
            number,
            completion.raw_stop_reason,
            _tokens(completion.usage),
        )
        return Result(
            value=parsed.value,
            stop_reason=parsed.stop_reason,
            text=parsed.text,
            notes=parsed.notes,
            usage=call.usage,
            attempts=list(call.attempts),
            schema=schema_info(call.contract),
            provider=self.provider.name,
            model=completion.model or self.provider.model,
            raw_stop_reason=parsed.raw_stop_reason,
            request_id=completion.request_id,
            removed=list(call.wire.removed) if call.wire is not None else [],
            diagnostics=completion.diagnostics,
        )

    def _retry(self, call: _Call[Any], error: StructuredOutputError) -> bool:
        """Whether a policy retries after `error`; if so, prepare the call's next request."""
        if not self._retryable(call, error):
            return False
        if not self._within_budget(call):
            call.over_budget = True
            return False
        if isinstance(error, InvalidOutput):
            call.invalid_retries += 1
            call.feedback = _feedback(call.contract, error)
        elif isinstance(error, TruncatedOutput):
            assert self.truncation is not None
            call.ramp_retries += 1
            raised = math.ceil(call.max_tokens * self.truncation.factor)
            call.max_tokens = min(self.truncation.cap, raised)
        elif isinstance(error, RefusedOutput):
            call.refusal_retries += 1
        logger.debug("retrying after %s", type(error).__name__)
        return True

    def _after(self, call: _Call[Any], error: StructuredOutputError) -> None:
        """Return if a policy retries after `error` (the call is then ready for it); else raise
        the final error."""
        if self._retry(call, error):
            return
        final = self._give_up(call, error)
        if final is error:
            raise error
        raise final from error

    def _retry_counts(
        self, call: _Call[Any], error: StructuredOutputError
    ) -> tuple[int, int] | None:
        """(retries used, retries allowed) by the policy that covers `error`; `None` if none does.

        Provider errors are not here: their retries happen inside one attempt's send.
        """
        if isinstance(error, SourceMissing):
            return None  # the caller forgot the source: no retry can supply it
        if isinstance(error, InvalidOutput):
            return call.invalid_retries, self.retries
        if isinstance(error, TruncatedOutput) and self.truncation is not None:
            return call.ramp_retries, self.truncation.retries
        if isinstance(error, RefusedOutput):
            return call.refusal_retries, self.refusal_retries
        return None

    def _has_policy(self, call: _Call[Any], error: StructuredOutputError) -> bool:
        """Whether this client retries this kind of failure at all (its budget aside)."""
        if isinstance(error, ProviderError):
            return self._transient(error)
        counts = self._retry_counts(call, error)
        return counts is not None and counts[1] > 0

    def _retryable(self, call: _Call[Any], error: StructuredOutputError) -> bool:
        counts = self._retry_counts(call, error)
        if counts is None or counts[0] >= counts[1]:
            return False
        # A ramp that has reached its cap would send the same limit again.
        if isinstance(error, TruncatedOutput) and self.truncation is not None:
            return call.max_tokens < self.truncation.cap
        return True

    def _within_budget(self, call: _Call[Any]) -> bool:
        if self.token_budget is None or not call.attempts:
            return True
        # The next attempt costs about what the last one did (the same conversation, plus a
        # bounded feedback): start it only if that still fits.
        expected = call.attempts[-1].usage.total_tokens
        return call.usage.total_tokens + expected <= self.token_budget

    def _give_up(self, call: _Call[Any], error: StructuredOutputError) -> StructuredOutputError:
        """The error to raise: `error` itself, or `RetriesExhausted` after retries ran out."""
        spent = call.usage.total_tokens
        if call.over_budget:
            error.add_note(
                f"not retried: another attempt would pass the token budget of "
                f"{self.token_budget} ({spent} spent)"
            )
        if len(call.attempts) < 2:
            return error
        if not self._has_policy(call, error):
            # A failure no policy retries speaks for itself (a refusal stays `RefusedOutput`);
            # a note keeps the earlier attempts visible.
            earlier = "; ".join(
                f"attempt {a.number}: {type(a.error).__name__}"
                for a in call.attempts[:-1]
                if a.error
            )
            error.add_note(f"attempt {len(call.attempts)} of this call; before it: {earlier}")
            return error
        headline = error.message.splitlines()[0] if error.message else type(error).__name__
        budget = f" (token budget {self.token_budget} reached)" if call.over_budget else ""
        message = (
            f"{call.contract.__name__}: {len(call.attempts)} attempts, none valid{budget}; "
            f"last: {type(error).__name__}: {headline}"
        )
        if isinstance(error, ProviderError):
            return ProviderRetriesExhausted(message, attempts=call.attempts, last=error)
        return RetriesExhausted(
            message,
            attempts=call.attempts,
            text=error.text,
            stop_reason=error.stop_reason,
            raw_stop_reason=error.raw_stop_reason,
        )


class StructuredClient(_BaseClient):
    """Generate contracts through a provider, synchronously.

    `retries`: invalid-output retries (with feedback). `enum_case`: the parser's casing policy.
    `max_tokens`: the default output limit. `truncation`: opt-in `MaxTokensRamp`.
    `refusal_retries`: retries after a refusal (default none). `backoff`: transport retries.
    `token_budget`: no retry starts that would take the tokens spent past it. `sleep`: how
    backoff waits (tests pass a recorder).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        retries: int = 2,
        enum_case: EnumCase = "normalize",
        max_tokens: int = 4096,
        truncation: MaxTokensRamp | None = None,
        refusal_retries: int = 0,
        backoff: Backoff = Backoff(),
        token_budget: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(
            provider,
            retries=retries,
            enum_case=enum_case,
            max_tokens=max_tokens,
            truncation=truncation,
            refusal_retries=refusal_retries,
            backoff=backoff,
            token_budget=token_budget,
        )
        self._sleep = sleep

    def __enter__(self) -> StructuredClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what the provider opened itself (never a client you passed in)."""
        self.provider.close()

    def generate(
        self,
        contract: type[C],
        *,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        **provider_options: Any,
    ) -> Result[C]:
        """A `contract` value from the provider, or a typed error.

        Pass a `prompt` (and optionally a `source` document, which is added to the prompt and
        checked against every `SourceQuote`), or whole `messages`. `provider_options` go to the
        provider's call as they are (`temperature=0`, ...).
        """
        call = self._call(contract, prompt, messages, system, source, max_tokens, provider_options)
        while True:
            try:
                return self._finish(call, self._send(call))
            except StructuredOutputError as error:
                self._after(call, error)

    def stream(
        self,
        contract: type[C],
        *,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        **provider_options: Any,
    ) -> Iterator[Partial[C] | Result[C]]:
        """Like `generate`, streaming: `Partial` snapshots as the document arrives, then the
        `Result` (last). Snapshots are never validated; only the `Result` passed every check.
        After a retry, the snapshots start again from the new attempt's first character.
        """
        call = self._call(contract, prompt, messages, system, source, max_tokens, provider_options)
        while True:
            try:
                completion = yield from self._stream_attempt(call)
                result = self._finish(call, completion)
            except StructuredOutputError as error:
                _keep_partial(call, error)
                self._after(call, error)
                continue
            yield result
            return

    def _send(self, call: _Call[Any]) -> Completion:
        request, retries = call.request(), self._transport()
        while True:
            self._starting(call)
            try:
                return self.provider.complete(request)
            except ProviderError as error:
                delay = self._transport_failure(call, retries, error)
            self._sleep(delay)

    def _stream_attempt(self, call: _Call[C]) -> Generator[Partial[C], None, Completion]:
        request, retries = call.request(), self._transport()
        while True:
            self._starting(call)
            reader = _Reader(call.contract)
            call.partial = None
            items = self.provider.stream(request)
            try:
                for item in items:
                    if isinstance(item, Completion):
                        return item
                    snapshot = reader.feed(item.text)
                    if snapshot is not None:
                        call.partial = snapshot
                        yield snapshot
                raise _no_completion(self.provider)
            except ProviderError as error:
                delay = self._transport_failure(call, retries, error)
            finally:
                _close(items)  # the provider's stream and its HTTP response, even on early exit
            self._sleep(delay)


class AsyncStructuredClient(_BaseClient):
    """Generate contracts through a provider, asynchronously; many calls at once.

    Takes the options of `StructuredClient`, plus `max_concurrency`: at most this many provider
    requests are in flight at once across all calls of this client (the rest wait their turn),
    so a burst of a thousand calls neither opens a thousand connections nor trips rate limits.
    Cancelling a call cancels its request and frees its place; nothing is left running.
    """

    def __init__(
        self,
        provider: Provider,
        *,
        retries: int = 2,
        enum_case: EnumCase = "normalize",
        max_tokens: int = 4096,
        truncation: MaxTokensRamp | None = None,
        refusal_retries: int = 0,
        backoff: Backoff = Backoff(),
        token_budget: int | None = None,
        max_concurrency: int | None = 64,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(
            provider,
            retries=retries,
            enum_case=enum_case,
            max_tokens=max_tokens,
            truncation=truncation,
            refusal_retries=refusal_retries,
            backoff=backoff,
            token_budget=token_budget,
        )
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1 (or None for no limit)")
        self.max_concurrency = max_concurrency
        self._sleep = sleep
        # One semaphore per event loop: an asyncio primitive belongs to the loop that uses it.
        self._limits: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            WeakKeyDictionary()
        )

    async def __aenter__(self) -> AsyncStructuredClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close what the provider opened itself (never a client you passed in)."""
        await self.provider.aclose()

    def limit(self) -> asyncio.Semaphore | None:
        """The semaphore bounding this client's requests in the running event loop."""
        if self.max_concurrency is None:
            return None
        loop = asyncio.get_running_loop()
        limit = self._limits.get(loop)
        if limit is None:
            limit = self._limits[loop] = asyncio.Semaphore(self.max_concurrency)
        return limit

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        limit = self.limit()
        return limit if limit is not None else contextlib.nullcontext()

    async def generate(
        self,
        contract: type[C],
        *,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        **provider_options: Any,
    ) -> Result[C]:
        """A `contract` value from the provider, or a typed error (see `StructuredClient`)."""
        call = self._call(contract, prompt, messages, system, source, max_tokens, provider_options)
        while True:
            try:
                return self._finish(call, await self._send(call))
            except StructuredOutputError as error:
                self._after(call, error)

    async def stream(
        self,
        contract: type[C],
        *,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        **provider_options: Any,
    ) -> AsyncIterator[Partial[C] | Result[C]]:
        """`Partial` snapshots as the document arrives, then the `Result` (see
        `StructuredClient.stream`)."""
        call = self._call(contract, prompt, messages, system, source, max_tokens, provider_options)
        while True:
            try:
                completion: Completion | None = None
                async with contextlib.aclosing(self._stream_attempt(call)) as items:
                    async for item in items:
                        if isinstance(item, Completion):
                            completion = item
                        else:
                            yield item
                assert completion is not None
                result = self._finish(call, completion)
            except StructuredOutputError as error:
                _keep_partial(call, error)
                self._after(call, error)
                continue
            yield result
            return

    async def _send(self, call: _Call[Any]) -> Completion:
        request, retries = call.request(), self._transport()
        while True:
            try:
                async with self._slot():
                    self._starting(call)
                    return await self.provider.acomplete(request)
            except ProviderError as error:
                delay = self._transport_failure(call, retries, error)
            await self._sleep(delay)

    async def _stream_attempt(
        self, call: _Call[C]
    ) -> AsyncGenerator[Partial[C] | Completion, None]:
        request, retries = call.request(), self._transport()
        while True:
            try:
                async with self._slot():
                    self._starting(call)
                    reader = _Reader(call.contract)
                    call.partial = None
                    items = self.provider.astream(request)
                    try:
                        async for item in items:
                            if isinstance(item, Completion):
                                yield item
                                return
                            snapshot = reader.feed(item.text)
                            if snapshot is not None:
                                call.partial = snapshot
                                yield snapshot
                    finally:
                        await _aclose(items)
                raise _no_completion(self.provider)
            except ProviderError as error:
                delay = self._transport_failure(call, retries, error)
            await self._sleep(delay)


# --- helpers ---


def _keep_partial(call: _Call[Any], error: StructuredOutputError) -> None:
    """Put the failed attempt's last snapshot on its error: a cut stream loses nothing."""
    if error.partial is None:
        error.partial = call.partial


class _Reader(Generic[C]):
    """A `PartialReader` that goes quiet instead of raising when the text is not JSON.

    A refusal streams prose, and a cut document ends early: the stop reason, which arrives last,
    decides what that means, so a snapshot failure mid-stream must not end the stream.
    """

    def __init__(self, contract: type[C]) -> None:
        self._reader: PartialReader[C] | None = PartialReader(contract)

    def feed(self, text: str) -> Partial[C] | None:
        if self._reader is None:
            return None
        try:
            return self._reader.feed(text)
        except InvalidOutput:
            self._reader = None
            return None


def _close(items: Iterator[Any]) -> None:
    close = getattr(items, "close", None)
    if callable(close):
        close()


async def _aclose(items: AsyncIterator[Any]) -> None:
    aclose = getattr(items, "aclose", None)
    if callable(aclose):
        await aclose()


def _no_completion(provider: Provider) -> ProviderError:
    return ProviderError(f"{provider.name}: the stream ended without a final completion")


def _conversation(
    contract: type[Contract],
    prompt: str | None,
    messages: Sequence[MessageLike] | None,
    source: str | None,
) -> tuple[Message, ...]:
    if messages is not None:
        if prompt is not None:
            raise ValueError("pass either prompt or messages, not both")
        if not messages:
            raise ValueError("messages is empty")
        return tuple(_message(message) for message in messages)
    if prompt is None and source is None:
        raise ValueError("pass a prompt, messages, or a source document")
    parts = [prompt if prompt is not None else f"Fill in a {contract.__name__} from this document."]
    if source is not None:
        parts.append(f"<document>\n{source}\n</document>")
    return (Message("user", "\n\n".join(parts)),)


def _message(message: MessageLike) -> Message:
    if isinstance(message, Message):
        return message
    role, content = message.get("role"), message.get("content")
    if isinstance(content, str):
        if role == "user":
            return Message("user", content)
        if role == "assistant":
            return Message("assistant", content)
    raise ValueError(
        "a message needs role 'user' or 'assistant' and string content "
        "(pass the system prompt as system=...)"
    )


def feedback_message(contract: type[Contract], error: InvalidOutput) -> str:
    """What the model is told after an invalid reply: each violation with its JSON pointer.

    Bounded: at most 20 violations, each message cut at 200 characters; the document itself is
    never repeated here (the previous reply is sent once, as the assistant's turn).
    """
    violations = error.violations or [Violation("", error.message.splitlines()[0])]
    lines = [f"That reply is not a valid {contract.__name__}. Problems (JSON pointer: problem):"]
    for violation in violations[:_FEEDBACK_VIOLATIONS]:
        message = " ".join(violation.message.split())
        if len(message) > _FEEDBACK_MESSAGE_CHARS:
            message = message[: _FEEDBACK_MESSAGE_CHARS - 3] + "..."
        lines.append(f"- {violation.pointer or '/'}: {message}")
    if len(violations) > _FEEDBACK_VIOLATIONS:
        lines.append(f"- ... and {len(violations) - _FEEDBACK_VIOLATIONS} more")
    lines.append("Reply with the whole corrected JSON document, and nothing else.")
    return "\n".join(lines)


def _feedback(contract: type[Contract], error: InvalidOutput) -> tuple[Message, ...]:
    said = (Message("assistant", error.text),) if error.text else ()
    return (*said, Message("user", feedback_message(contract, error)))


def _attempt(
    number: int,
    call: _Call[Any],
    completion: Completion,
    text: str | None,
    error: StructuredOutputError | None,
) -> Attempt:
    return Attempt(
        number=number,
        text=text,
        stop_reason=completion.stop_reason,
        raw_stop_reason=completion.raw_stop_reason,
        usage=completion.usage,
        error=error,
        request_id=completion.request_id,
        max_tokens=call.max_tokens,
        diagnostics=completion.diagnostics,
    )


def _tokens(usage: Usage) -> str:
    return f"{usage.input_tokens} in / {usage.output_tokens} out tokens"
