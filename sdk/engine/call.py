"""The retry engine: one `generate` call's state across its attempts, as one small state machine.

    call = Call(contract, conversation, settings=..., ...)
    while True:
        request = call.request()                  # what to send next
        try:
            completion = provider.complete(request, deadline=call.send_deadline())
        except ProviderError as error:
            sleep(call.on_transport_error(error))  # the wait, or the final error raised
            continue
        result = call.on_reply(completion)         # a Result, None (retry prepared), or raises
        if result is not None:
            return result

The client loops (sync and async, whole and streamed) only pass data through it; which failure
gets which retry lives in one table (`_POLICIES`), and nothing outside this class writes its
fields. Its parts live beside it: the settings and transport retries (`sdk.engine.retry`),
the conversation and retry feedback (`sdk.engine.conversation`), what a stream shows
(`sdk.engine.snapshots`).

Each kind of failure has its own policy and budget, because each costs differently:

- invalid output (`InvalidOutput`: `InvalidJSON`, `SchemaViolation`, `ContractViolation`,
  `CheckFailed`): retried up to `retries` times; the next request is the original conversation
  plus the previous output (as the assistant's turn) and a short list of what was wrong. The
  feedback grows with the number of errors, never with the document, and replaces the last
  retry's feedback instead of piling up history.
- truncation (`TruncatedOutput`): fails fast by default (the same limit cuts the same document
  again); `MaxTokensRamp` opts in to retries with a larger `max_tokens`.
- refusal (`RefusedOutput`): not retried unless `refusal_retries` says so.
- transport and API errors (`ProviderError`): retried with exponential backoff and full jitter,
  honouring `retry-after` (tenacity's retry, stop and wait strategies decide), when the error is
  transient (no status, 408, 429, 5xx, a cut stream); other 4xx are not retried.

An error raised at the end carries every attempt (`.attempts`) and their summed `.usage`; when a
policy's retries ran out it is `RetriesExhausted` (`ProviderRetriesExhausted` for transport
errors) holding them all.
"""

from __future__ import annotations

import json
import logging
import math
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

from sdk._cost import attempts_cost
from sdk._result import Attempt, Result, Usage
from sdk.contract import Contract
from sdk.engine.conversation import (
    FEEDBACK_WHOLE_REPLY,
    MessageLike,
    PromptLike,
    conversation,
    feedback_message,
    feedback_turns,
)
from sdk.engine.envelope import Envelope
from sdk.engine.retry import (
    DEFAULT_BACKOFF,
    Backoff,
    MaxTokensRamp,
    RetrySettings,
    TransportRetries,
)
from sdk.engine.snapshots import Snapshots, StreamView
from sdk.errors import (
    InvalidOutput,
    ProviderError,
    ProviderRetriesExhausted,
    RefusedOutput,
    RetriesExhausted,
    SourceMissing,
    StructuredOutputError,
    TruncatedOutput,
)
from sdk.grammar import Grammar, parse_grammar
from sdk.hooks import CallInfo, Hooks, run_hooks
from sdk.parsing import Parsed, parse
from sdk.parsing.parser import EnumCase, check_stop
from sdk.providers._base import Completion, CompletionRequest, Message, unsupported
from sdk.providers._errors import is_retryable, provider_error
from sdk.providers._provider import Provider
from sdk.schema.canonical import SchemaInfo, schema_info
from sdk.stop_reason import StopReason

__all__ = [
    "DEFAULT_BACKOFF",
    "FEEDBACK_WHOLE_REPLY",
    "Backoff",
    "Call",
    "MaxTokensRamp",
    "MessageLike",
    "PromptLike",
    "Reasoning",
    "RetrySettings",
    "Snapshots",
    "StreamView",
    "conversation",
    "feedback_message",
]

logger = logging.getLogger("sdk.client")

T = TypeVar("T")

Reasoning = Literal["two_phase", "native"]
"""How the model reasons before the constrained output: `"two_phase"` is a first, unconstrained
call in which it works the problem through in prose, then the constrained call that transcribes
that working into the contract; `"native"` is the provider's own thinking channel before the
output (Anthropic extended thinking, OpenAI reasoning with a summary)."""

# The two-phase prompts: the working is asked for in prose (no document yet), then transcribed.
_WORK_IT_THROUGH = (
    "Before answering, work the problem through step by step in plain prose: what the question "
    "asks, the facts that matter, any comparison or calculation. Do not write the final answer "
    "in JSON or any other format yet."
)
_TRANSCRIBE = (
    "Now give the final answer, following your working above exactly, as the requested output "
    "and nothing else."
)

# --- the policy table ---


@dataclass(frozen=True, slots=True)
class _Policy:
    """Which failures a policy covers, how many retries the settings give it, and how the next
    request changes (`advance` returns False when another try would be the same)."""

    name: str
    covers: type[StructuredOutputError]
    allowed: Callable[[RetrySettings], int]
    advance: Callable[[Call[Any], StructuredOutputError], bool]


def _advance_invalid(call: Call[Any], error: StructuredOutputError) -> bool:
    assert isinstance(error, InvalidOutput)
    call._feedback = call._feedback_for(error)
    return True


def _advance_truncated(call: Call[Any], error: StructuredOutputError) -> bool:
    ramp = call.settings.truncation
    assert ramp is not None
    if call.max_tokens >= ramp.cap:
        return False  # a ramp at its cap would send the same limit again
    call.max_tokens = min(ramp.cap, math.ceil(call.max_tokens * ramp.factor))
    return True


def _advance_same(call: Call[Any], error: StructuredOutputError) -> bool:
    return True


# First match wins: `SourceMissing` (the caller forgot the source, no retry can supply it) is
# an `InvalidOutput` too, so it comes first.
_POLICIES: tuple[_Policy, ...] = (
    _Policy("source", SourceMissing, lambda settings: 0, _advance_same),
    _Policy("invalid", InvalidOutput, lambda settings: settings.retries, _advance_invalid),
    _Policy(
        "truncation",
        TruncatedOutput,
        lambda settings: settings.truncation.retries if settings.truncation else 0,
        _advance_truncated,
    ),
    _Policy("refusal", RefusedOutput, lambda settings: settings.refusal_retries, _advance_same),
)


def _policy(error: StructuredOutputError) -> _Policy | None:
    return next((policy for policy in _POLICIES if isinstance(error, policy.covers)), None)


# --- the call ---


class Call(Generic[T]):
    """One `generate` call across its attempts (see the module docstring).

    `output` is a `Contract` subclass (the value is its instance) or a `Grammar` (the value is
    the text). With `reasoning="two_phase"`, the first request asks for free text (the working)
    and the ones after it for the output, the working in the conversation.
    """

    def __init__(
        self,
        output: type[Contract] | Grammar,
        messages: tuple[Message, ...],
        envelope: Envelope | None = None,
        *,
        provider: Provider,
        settings: RetrySettings,
        enum_case: EnumCase,
        system: str | None,
        source: str | None,
        max_tokens: int,
        options: dict[str, Any],
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        hooks: Sequence[Hooks] = (),
        streaming: bool = False,
    ) -> None:
        if reasoning not in (None, "two_phase", "native"):
            raise ValueError(f"reasoning must be 'two_phase', 'native' or None, not {reasoning!r}")
        if reasoning == "native" and not provider.supports_native_reasoning:
            raise unsupported(
                provider.name, 'reasoning="native" (no thinking channel)', ['reasoning="two_phase"']
            )
        self._native_reasoning = reasoning == "native"
        self.envelope = envelope
        """A top-level list or union: `output` is its envelope contract, the value unwrapped."""
        self.grammar = output if isinstance(output, Grammar) else None
        self.contract = None if isinstance(output, Grammar) else output
        self.name = output.name if isinstance(output, Grammar) else output.__name__
        self.context = context
        self.messages = messages
        # A `FallbackProvider` lists several: the call starts with the first and moves on
        # (`_fall_back`) when one's transport retries are spent.
        self._candidates = list(provider.candidates())
        self._fallback_on_refusal = provider.fallback_on_refusal
        self.provider = self._candidates.pop(0)
        """The provider the next request goes to."""
        self.settings = settings
        self.enum_case: EnumCase = enum_case
        self.system = system
        self.source = source
        self.max_tokens = max_tokens
        self.options = options
        self.wire = provider.wire_schema(self.contract) if self.contract is not None else None
        self.reasoning: str | None = None
        """The working, once the first call of two-phase reasoning has answered."""
        self._reasoning_pending = reasoning == "two_phase"
        self.attempts: list[Attempt] = []
        self.partial: Any = None
        """Streaming: the last snapshot of the current attempt (put on its error if it fails)."""
        self._feedback: tuple[Message, ...] = ()
        self._used: dict[str, int] = {}
        self._over_budget = False
        self._transport: TransportRetries | None = None
        self._deadline = (
            time.monotonic() + settings.deadline if settings.deadline is not None else None
        )
        self.hooks = tuple(hooks)
        self.info = CallInfo(provider.name, provider.model, self.schema, streaming)
        run_hooks(self.hooks, "on_call", self.info)

    @property
    def usage(self) -> Usage:
        """Tokens over every attempt so far."""
        return sum((attempt.usage for attempt in self.attempts), Usage())

    # --- the three transitions ---

    def request(self) -> CompletionRequest:
        """The next request to send (the same one again after a transport error)."""
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise self._final(self._deadline_error())
        self.partial = None
        logger.debug(
            "attempt %d: %s v%d%s -> %s (model %s), max_tokens=%d, %d message(s)",
            len(self.attempts) + 1,
            self.name,
            self.schema.version,
            " (working)" if self._reasoning_pending else "",
            self.provider.name,
            self.provider.model,
            self.max_tokens,
            len(self.messages) + len(self._feedback),
        )
        if self._reasoning_pending:
            request = CompletionRequest(
                contract=None,
                messages=(*self.messages, Message("user", _WORK_IT_THROUGH)),
                max_tokens=self.max_tokens,
                system=self.system,
                options=self.options,
            )
        else:
            request = CompletionRequest(
                contract=self.contract,
                grammar=self.grammar,
                messages=self.messages + self._feedback,
                max_tokens=self.max_tokens,
                system=self.system,
                options=self.options,
                reasoning=self._native_reasoning,
                source=self.source,
            )
        run_hooks(self.hooks, "before_request", self.info, request, len(self.attempts) + 1)
        return request

    def send_deadline(self) -> float | None:
        """The `time.monotonic()` instant the next request must be answered by, if any."""
        deadlines = [d for d in (self._deadline, self._attempt_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    def on_transport_error(self, error: ProviderError) -> float:
        """Record an attempt that got no usable reply; the seconds to wait before sending the
        same request again, or the final error raised."""
        self.attempts.append(
            Attempt(
                number=len(self.attempts) + 1,
                text=None,
                stop_reason=None,
                raw_stop_reason=None,
                usage=Usage(),
                error=error,
                request_id=error.request_id,
                max_tokens=self.max_tokens,
                provider=self.provider.name,
                model=self.provider.model,
            )
        )
        logger.debug("attempt %d: %s", len(self.attempts), error)
        run_hooks(self.hooks, "on_error", self.info, error, len(self.attempts))
        if self._transport is None:
            self._transport = TransportRetries(self.settings.backoff, self._transient)
        delay = self._transport.delay(error)
        if delay is None:
            if self._fall_back():
                return 0.0
            raise self._final(error)
        if self._deadline is not None and time.monotonic() + delay >= self._deadline:
            error.add_note("not retried: the wait would pass the call's deadline")
            raise self._final(error)
        return delay

    @property
    def working(self) -> bool:
        """Whether the next request is the first call of two-phase reasoning (free text)."""
        return self._reasoning_pending

    def on_reply(self, completion: Completion) -> Result[T] | None:
        """Parse a reply and record the attempt: the `Result`, or `None` when a retry (or the
        second phase of two-phase reasoning) has been prepared (call `request()` again), or the
        final error raised."""
        settled = self._settle(completion)
        if settled is None:
            return None
        value, parsed = settled
        if self._native_reasoning:
            self.reasoning = completion.reasoning
        if self.envelope is not None:
            value = self.envelope.unwrap(cast(Contract, value))
        result: Result[T] = Result(
            value=value,
            stop_reason=parsed.stop_reason,
            text=parsed.text,
            notes=[*completion.notes, *parsed.notes],
            usage=self.usage,
            attempts=list(self.attempts),
            schema=self.schema,
            provider=self.provider.name,
            model=completion.model or self.provider.model,
            raw_stop_reason=parsed.raw_stop_reason,
            request_id=completion.request_id,
            removed=list(self.wire.removed) if self.wire is not None else [],
            diagnostics=completion.diagnostics,
            reasoning=self.reasoning,
            cost=attempts_cost(self.attempts),
        )
        run_hooks(self.hooks, "on_result", self.info, result)
        return result

    def _settle(self, completion: Completion) -> tuple[T, Parsed[Any]] | None:
        """Parse a reply and record its attempt: the value and what it was decided on, or
        `None` when another request has been prepared, or the final error raised. (What
        `on_reply` and the tool-call machine share.)"""
        self._transport = None  # the next request is a new one: its transport retries start over
        text = completion.text
        number = len(self.attempts) + 1
        run_hooks(self.hooks, "after_reply", self.info, completion, number)
        try:
            if self._reasoning_pending:
                self._take_working(completion)
                self.attempts.append(self._attempt(number, completion, None))
                return None
            value, parsed = self._parse(completion)
        except StructuredOutputError as error:
            if text is None:
                error.text = None  # there was no output at all (a refusal field, a filter)
            if error.partial is None:
                error.partial = self.partial
            self.attempts.append(self._attempt(number, completion, error))
            logger.debug(
                "attempt %d: %s, %s: %s",
                number,
                completion.raw_stop_reason,
                _tokens(completion.usage),
                type(error).__name__,
            )
            run_hooks(self.hooks, "on_error", self.info, error, number)
            if self._retry(error):
                return None
            final = self._final(error)
            if final is error:
                raise
            raise final from error
        self.attempts.append(self._attempt(number, completion, None))
        logger.debug(
            "attempt %d: %s, %s: valid",
            number,
            completion.raw_stop_reason,
            _tokens(completion.usage),
        )
        return value, parsed

    def _attempt(
        self, number: int, completion: Completion, error: StructuredOutputError | None
    ) -> Attempt:
        return Attempt(
            number=number,
            text=completion.text,
            stop_reason=completion.stop_reason,
            raw_stop_reason=completion.raw_stop_reason,
            usage=completion.usage,
            error=error,
            request_id=completion.request_id,
            max_tokens=self.max_tokens,
            diagnostics=completion.diagnostics,
            provider=self.provider.name,
            model=completion.model or self.provider.model,
        )

    def _fall_back(self) -> bool:
        """Move on to the next of a `FallbackProvider`'s providers, if one is left: the next
        request goes there, with fresh transport retries and its own wire dialect."""
        if not self._candidates:
            return False
        previous = self.provider.name
        self.provider = self._candidates.pop(0)
        self._transport = None
        if self.contract is not None:
            self.wire = self.provider.wire_schema(self.contract)
        logger.debug("falling back from %s to %s", previous, self.provider.name)
        return True

    @property
    def schema(self) -> SchemaInfo:
        """Name, version and fingerprint of the contract's schema or the grammar."""
        if self.grammar is not None:
            return self.grammar.info()
        assert self.contract is not None
        return schema_info(self.contract)

    def _parse(self, completion: Completion) -> tuple[T, Parsed[Any]]:
        """The defensive parser for this call's output kind: the value and what it was
        decided on."""
        text = completion.text if completion.text is not None else ""
        common: dict[str, Any] = {
            "stop_reason": completion.stop_reason,
            "raw_stop_reason": completion.raw_stop_reason,
            "source": self.source,
            "clean_stops": self.provider.clean_stops,
            "refusal": completion.refusal,
            "refusal_category": completion.refusal_category,
            "context": self.context,
        }
        parsed: Parsed[Any]
        if self.grammar is not None:
            parsed = parse_grammar(self.grammar, text, **common)
        else:
            assert self.contract is not None
            parsed = parse(
                self.contract,
                text,
                enum_case=self.enum_case,
                absent_nulls=self.wire is not None and bool(self.wire.nullable),
                **common,
            )
        return cast(T, parsed.value), parsed

    def snapshots(self) -> StreamView:
        """A fresh reader of what a stream shows of the next attempt's growing output."""
        self.partial = None
        return Snapshots(self)

    def validated_item(self, item: Any) -> Any:
        """A streamed list item, checked as its own document (schema, contract, quotes against
        the source); `None` if it fails (the whole list then fails at the end, with its
        pointers)."""
        assert self.envelope is not None and self.contract is not None
        item_contract = self.contract.model_fields[self.envelope.field].annotation
        contract = typing.get_args(item_contract)[0]
        try:
            return parse(
                contract,
                json.dumps(item),
                stop_reason=StopReason.END_TURN,
                source=self.source,
                enum_case=self.enum_case,
                context=self.context,
            ).value
        except StructuredOutputError:
            return None

    def _feedback_for(self, error: InvalidOutput) -> tuple[Message, ...]:
        """The messages that tell the model what was wrong with its last reply."""
        output = self.grammar or self.contract
        return feedback_turns(output, error, self.settings.feedback_whole_reply)

    def _take_working(self, completion: Completion) -> None:
        """The first call of two-phase reasoning answered: keep its working (a cut or refused
        working raises, like any output) and put it in the conversation for the second."""
        text = completion.text if completion.text is not None else ""
        check_stop(
            text,
            stop_reason=completion.stop_reason,
            raw_stop_reason=completion.raw_stop_reason,
            clean_stops={StopReason.END_TURN},
            refusal=completion.refusal,
            refusal_category=completion.refusal_category,
        )
        self.reasoning = text
        self._reasoning_pending = False
        self.messages = (
            *self.messages,
            Message("user", _WORK_IT_THROUGH),
            Message("assistant", text),
            Message("user", _TRANSCRIBE),
        )

    # --- decisions ---

    def _attempt_deadline(self) -> float | None:
        seconds = self.settings.attempt_deadline
        return time.monotonic() + seconds if seconds is not None else None

    def _deadline_error(self) -> ProviderError:
        error = provider_error(
            self.provider.name, f"the call's deadline of {self.settings.deadline:g}s passed"
        )
        error.transient = False
        return error

    def _transient(self, error: BaseException) -> bool:
        if not isinstance(error, ProviderError) or not is_retryable(error):
            return False
        retry_after = error.retry_after
        return retry_after is None or retry_after <= self.settings.backoff.max_retry_after

    def _retry(self, error: StructuredOutputError) -> bool:
        """Whether a policy retries after `error`; if so, the next request is prepared."""
        if isinstance(error, RefusedOutput) and self._fallback_on_refusal and self._fall_back():
            return True
        policy = _policy(error)
        if policy is None or self._used.get(policy.name, 0) >= policy.allowed(self.settings):
            return False
        if not self._within_budget():
            self._over_budget = True
            return False
        if not policy.advance(self, error):
            return False
        self._used[policy.name] = self._used.get(policy.name, 0) + 1
        logger.debug("retrying after %s", type(error).__name__)
        return True

    def _within_budget(self) -> bool:
        budget = self.settings.token_budget
        if budget is None or not self.attempts:
            return True
        # The next attempt costs about what the last one did (the same conversation, plus a
        # bounded feedback): start it only if that still fits.
        expected = self.attempts[-1].usage.total_tokens
        return self.usage.total_tokens + expected <= budget

    def _has_policy(self, error: StructuredOutputError) -> bool:
        """Whether this call retries this kind of failure at all (its budget aside)."""
        if isinstance(error, ProviderError):
            return self._transient(error)
        policy = _policy(error)
        return policy is not None and policy.allowed(self.settings) > 0

    def _final(self, error: StructuredOutputError) -> StructuredOutputError:
        """The error to raise, carrying every attempt and their usage: `error` itself, or
        `RetriesExhausted` after a policy's retries ran out."""
        final = self._give_up(error)
        final.attempts = list(self.attempts)
        final.usage = self.usage
        run_hooks(self.hooks, "on_failure", self.info, final)
        return final

    def _give_up(self, error: StructuredOutputError) -> StructuredOutputError:
        if self._over_budget:
            error.add_note(
                f"not retried: another attempt would pass the token budget of "
                f"{self.settings.token_budget} ({self.usage.total_tokens} spent)"
            )
        if len(self.attempts) < 2:
            return error
        if not self._has_policy(error):
            # A failure no policy retries speaks for itself (a refusal stays `RefusedOutput`);
            # a note keeps the earlier attempts visible.
            earlier = "; ".join(
                f"attempt {a.number}: {type(a.error).__name__}"
                for a in self.attempts[:-1]
                if a.error
            )
            error.add_note(f"attempt {len(self.attempts)} of this call; before it: {earlier}")
            return error
        headline = error.message.splitlines()[0] if error.message else type(error).__name__
        budget = (
            f" (token budget {self.settings.token_budget} reached)" if self._over_budget else ""
        )
        message = (
            f"{self.name}: {len(self.attempts)} attempts, none valid{budget}; "
            f"last: {type(error).__name__}: {headline}"
        )
        if isinstance(error, ProviderError):
            return ProviderRetriesExhausted(message, attempts=self.attempts, last=error)
        return RetriesExhausted(
            message,
            attempts=self.attempts,
            text=error.text,
            stop_reason=error.stop_reason,
            raw_stop_reason=error.raw_stop_reason,
        )


def _tokens(usage: Usage) -> str:
    return f"{usage.input_tokens} in / {usage.output_tokens} out tokens"
