"""The attempts machine: one call across its attempts, answering each reply with a decision.

    machine = Attempts(kind, turns, spec, provider)     # spec: sdk.engine.options.CallSpec
    done = machine.start()                              # cache lookup, on_call; a hit's Done
    with machine.abandoned_if_left():                   # on_cancel if left early
        while done is None:
            step = machine.send()                       # Send (or Fail: the deadline passed)
            try:
                completion = step.provider.complete(step.request, deadline=step.deadline)
            except ProviderError as error:
                decision = machine.on_transport_error(error)
            else:
                decision = machine.on_reply(completion)  # Retry, Done, Fail or Store
            ...                                          # (`sdk.engine.loops`)

It knows nothing of output kinds (the kind builds each request and judges each reply) and does
no I/O: the sync, async, streaming and batch paths all read the same decisions (`Retry`: send
again, after `wait` seconds, with `feedback`; `Done`: the result; `Fail`: the error to raise,
carrying every attempt and their usage; `Store`: an answer for the loop to keep in the cache from
a thread, then `finish()`). Nothing outside it writes its fields but `store_apart`, which a loop
sets before it starts the call (the async loops, for a store that may wait).

Each kind of failure has its own policy and budget, because each costs differently:

- invalid output (`InvalidOutput`): retried up to `retries` times; the next request is the
  conversation plus the kind's feedback on the last reply, which replaces the previous retry's
  feedback instead of piling up history;
- truncation (`TruncatedOutput`): fails fast by default (the same limit cuts the same output
  again); `MaxTokensRamp` opts in to retries with a larger `max_tokens`;
- refusal (`RefusedOutput`): not retried unless `refusal_retries` says so (or, through a
  `FallbackProvider(on_refusal=True)`, sent to the next provider);
- transport and API errors (`ProviderError`): retried with exponential backoff and full jitter,
  honouring `retry-after` (tenacity's strategies), when transient; once one provider's retries
  are spent, a `FallbackProvider` moves the call to the next.

Around all of that: the token budget (no retry starts that would pass it), the call's deadline
(read from an injectable clock, so tests need no wall-clock bound), and the hooks, told of the
call, of every attempt's start and end, and of how the call ends (result, failure, or abandoned).
"""

from __future__ import annotations

import functools
import logging
import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeVar

from sdk._cost import attempts_cost
from sdk._threads import CacheThreads
from sdk._threads import lookups_wait
from sdk._threads import store_waits
from sdk._threads import threads_for
from sdk._threads import turn_bound
from sdk._values.records import Note
from sdk._values.records import PromptInfo
from sdk._values.records import Usage
from sdk.cache import Cache
from sdk.cache import CacheError
from sdk.cache import CacheGivenUp
from sdk.cache import DamagedEntry
from sdk.cache import Entry
from sdk.cache import NotStorable
from sdk.cache import failed_in
from sdk.cache import not_served
from sdk.cache import rendered_key
from sdk.cache import settings_digest
from sdk.engine.conversation import without_control_tokens
from sdk.engine.kinds._kind import Accepted
from sdk.engine.kinds._kind import Ask
from sdk.engine.kinds._kind import Ending
from sdk.engine.kinds._kind import NextPhase
from sdk.engine.kinds._kind import OutputKind
from sdk.engine.kinds._kind import StreamView
from sdk.engine.retry import RetrySettings
from sdk.engine.retry import TransportRetries
from sdk.errors import Attempt
from sdk.errors import InvalidOutput
from sdk.errors import ProviderError
from sdk.errors import ProviderRetriesExhausted
from sdk.errors import RefusedOutput
from sdk.errors import RetriesExhausted
from sdk.errors import RunawayOutput
from sdk.errors import SourceMissing
from sdk.errors import StructuredOutputError
from sdk.errors import TruncatedOutput
from sdk.errors import UnsupportedRequest
from sdk.hooks import CallInfo
from sdk.hooks import run_hooks
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._errors import is_retryable
from sdk.providers._errors import provider_error
from sdk.providers._provider import Provider
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.engine.options import CallSpec

__all__ = ["Attempts", "Decision", "Done", "Fail", "Retry", "Send", "Store", "Stored"]

logger = logging.getLogger("sdk.client")
_NO_USAGE = Usage()  # (frozen: shared)

E = TypeVar("E", bound=StructuredOutputError)


# --- decisions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Send `request` to `provider`, to be answered by `deadline` (the machine's clock)."""

    request: CompletionRequest
    provider: Provider
    deadline: float | None
    attempt: int


@dataclass(frozen=True, slots=True)
class Retry:
    """Send again after `wait` seconds (`machine.send()` gives the request); `feedback` is
    what the next request adds to the conversation (empty for a transport retry)."""

    wait: float
    feedback: tuple[Message, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Done:
    """The call succeeded: `result` is what it returns."""

    result: Any


@dataclass(frozen=True, slots=True)
class Fail:
    """The call failed: raise `error` (it carries every attempt and their usage)."""

    error: StructuredOutputError


@dataclass(frozen=True, slots=True)
class Store:
    """The call has its answer: keep it in the response cache (`Attempts.store()`), then end
    the call (`Attempts.finish()`, the call's `Done`). Only where the loop asked to keep it
    itself (`store_apart`): the async loops run the store's I/O apart from the event loop."""


Stored = tuple[Accepted[Any], OutputKind[Any], Provider, Completion, Usage]
"""The response cache's answer to a call (`Attempts.lookup`), judged again and found valid:
what was accepted, the kind it ended in, the provider that gave it, its last reply and what it
cost. (A plain tuple: made at every hit, where a record's constructor costs a call.)"""


Decision = Retry | Done | Fail | Store


# --- the policy table --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Policy:
    """Which failures a policy covers and how many retries the settings give it."""

    name: str
    covers: type[StructuredOutputError]
    allowed: Callable[[RetrySettings], int]


# First match wins: `SourceMissing` (the caller forgot the source, no retry can supply it) is
# an `InvalidOutput` too, so it comes first.
_POLICIES: tuple[_Policy, ...] = (
    _Policy("source", SourceMissing, lambda settings: 0),
    _Policy("invalid", InvalidOutput, lambda settings: settings.retries),
    _Policy(
        "truncation",
        TruncatedOutput,
        lambda settings: settings.truncation.retries if settings.truncation else 0,
    ),
    _Policy("refusal", RefusedOutput, lambda settings: settings.refusal_retries),
)


def _policy(error: StructuredOutputError) -> _Policy | None:
    return next((policy for policy in _POLICIES if isinstance(error, policy.covers)), None)


def _with(error: E, *, partial: Any, **changes: Any) -> E:
    """`error` with `changes`, and the stream's last `partial` when it has none: a copy only
    when something changes (errors are sealed)."""
    if error.partial is None and partial is not None:
        changes["partial"] = partial
    changed = {k: v for k, v in changes.items() if getattr(error, k) is not v}
    return error.evolve(**changed) if changed else error


# --- the machine -------------------------------------------------------------------------------


class Attempts:
    """One call across its attempts (see the module docstring)."""

    def __init__(
        self,
        kind: OutputKind[Any],
        turns: tuple[Message, ...],
        spec: CallSpec,
        provider: Provider,
        prompt: PromptInfo | None = None,
    ) -> None:
        self.kind = kind
        self._asked = kind  # (what the call asks for: its cache key's; `kind` moves by phase)
        self.prompt = prompt
        """The prompt template the call renders (on its result, and in its cache key)."""
        self.runaway = spec.runaway
        """What a streamed reply is stopped for (`None`: never)."""
        self._spec = spec  # (what decides its retries: `_retry_digest`)
        self._cache = spec.cache
        # The cache key of the provider a live answer comes from (`_cache_key_of`), and that
        # provider: a fallback list's each answers under its own (`_store`).
        self._cache_key: str | None = None
        self._keyed: Provider | None = None
        # What each provider's setting rendered for its key's request (`Codec.rendered_prompt`),
        # sent as rendered by the attempt whose request equals it (`send`, `send_rendered`).
        self._renderings: list[tuple[Provider, CompletionRequest, object]] = []
        self._unstored: tuple[Accepted[Any], Completion] | None = None  # (`Store`'s answer)
        self._unserved: list[str] = []  # (keys of entries not served, to drop: `store_apart`)
        self.store_apart = False
        """Whether the store's writes are left to the loop: `_done`'s `put` (`Store`) and the
        drop of an entry not served (`drop_unserved`). The async loops set it for a cache that
        may wait (`cache_waits`)."""
        self._replies: list[Completion] = []  # the replies that make the answer (to cache it)
        self._repliers: list[Provider] = []  # (the provider of each)
        self._notes: list[Note] = []  # what the call met on the way (the cache's notes)
        self._last_key = spec.last_call.key  # (a call made again has its request's key kept)
        self._turns = turns
        self._shared = spec.transport
        self.settings = spec.attempts
        self.clock = spec.clock
        """What deadlines are read from (`time.monotonic`, or a test's clock)."""
        # A `FallbackProvider` lists several: the call starts with the first and moves on when
        # one's transport retries are spent (or it cannot take the request).
        self._candidates = list(provider.candidates())
        self._fallback_on_refusal = provider.fallback_on_refusal
        self.provider = self._first_able(kind)
        """The provider the next request goes to."""
        self.attempts: list[Attempt] = []
        self._feedback: tuple[Message, ...] = ()
        self._max_tokens = spec.transport.max_tokens
        self._used: dict[str, int] = {}
        # Whether a fallback list's provider was sent the retry another provider's reply led to
        # (its feedback, a ramped `max_tokens`): its answer is then not stored (`_store`).
        self._carried_over = False
        # The retries used before the call moved to the provider it is with (a fallback list's
        # later one): its answer was made after retries only if it used some of its own.
        self._used_before: dict[str, int] = {}
        self._over_budget = False
        self._transport: TransportRetries | None = None
        deadline = self.settings.deadline
        self._deadline = self.clock() + deadline if deadline is not None else None
        self._open: int | None = None  # the attempt sent and not yet over
        self._ended = False
        self._hooks = spec.hooks
        self._streaming = spec.method.streaming

    @functools.cached_property
    def info(self) -> CallInfo:
        """What the hooks are told of the call (the provider the current attempt goes to). Made
        when a hook is first told something (`on_call`), so a call without hooks (most calls,
        every cache hit) makes none."""
        provider = self.provider
        return CallInfo(provider.name, provider.model, self.kind.schema, self._streaming)

    def _tell(self, method: str, *args: Any) -> None:
        """Tell the hooks of `method` (`run_hooks`, with the call's `info` first), if any."""
        if self._hooks:
            run_hooks(self._hooks, method, self.info, *args)

    def start(self) -> Done | None:
        """The call begins: `Done` when the response cache has the answer, judged again and
        found valid (then nothing is sent); a loop calls it once, before the first `send` (so a
        stream never iterated starts nothing). The lookup comes before the hooks hear of the
        call (`on_call`): a store that cannot be read (a `CacheError`, raised here) ends the
        call before it begins, as a request that cannot be made does, and no hook is left
        waiting for an end. (`lookup`, `begin` and `served` in turn: the async loops look up
        apart from the event loop.)"""
        stored = self.lookup() if self._cache is not None else None
        self._tell("on_call")  # (`begin()`, spelt out: every call, every cache hit, runs it)
        return self.served(stored)

    def begin(self) -> None:
        """The call begins: the hooks' `on_call`."""
        self._tell("on_call")

    @property
    def cache_waits(self) -> bool:
        """Whether the call's response cache may wait (a file's lock, a server): the async loops
        ask it from a thread (`cache_threads`: `lookup`, `store`), never on the event loop. A
        store of your own says it never waits with `waits = False` (`MemoryCache` does)."""
        return self._cache is not None and store_waits(self._cache)

    @property
    def lookup_waits(self) -> bool:
        """Whether the call's cache lookup may wait (`cache_waits`, but for a store whose
        lookups never wait: `lookups_wait = False`, as `SQLiteCache`'s read without the write
        lock): the async loops then look up on the event loop and store from a thread."""
        return self._cache is not None and lookups_wait(self._cache)

    @property
    def cache_threads(self) -> CacheThreads:
        """The threads the async loops ask the call's cache from (`sdk._threads.threads_for`)."""
        return threads_for(self._cache)

    @property
    def cache(self) -> Cache | None:
        """The call's response cache (`None`: none)."""
        return self._cache

    @property
    def turn_bound(self) -> float | None:
        """How often the call, waiting for its turn in `cache_threads`, looks whether its store
        failed meanwhile (`sdk._threads.turn_bound`)."""
        return turn_bound(self._cache)

    def abandoned_if_left(self) -> _AbandonedIfLeft:
        """Around a started call: should the caller leave it before it ends (an exception, a
        closed stream, a cancelled task), tell the hooks it was abandoned (`on_abandon`). Every
        loop, sync and async, whole and streamed, runs its call inside it, the one place a call
        left early is ended; a whole call answered by the cache (`start()`'s `Done`) returns
        before it, paying for no context manager."""
        return _AbandonedIfLeft(self)

    # --- the response cache ---

    def lookup(self) -> Stored | None:
        """The response cache's answer, judged again by today's kind and parser (the store's
        I/O, and no hook told: any thread may run it while the call waits); a stored answer
        that no longer passes (a check tightened since) is dropped, and the call goes on; so is
        a damaged one, with a note on the result. A cache that cannot be read at all (a
        damaged file, a server that does not answer) is its `CacheError`, before anything is
        sent."""
        assert self._cache is not None
        self._keyed = self.provider
        self._cache_key = self._cache_key_of(self.provider)
        stored = self._stored(self.provider, self._cache_key)
        if stored is None and self._candidates:
            return self._from_cache_of_others()
        return stored

    def served(self, stored: Stored | None) -> Done | None:
        """The call answered by the cache's `stored` answer (`lookup`'s), `None` on a miss."""
        if stored is None:
            return None
        accepted, self.kind, provider, completion, usage = stored
        if provider is not self.provider:  # (a fallback list's later provider gave it)
            self._moved_to(provider)
        return self._finished(accepted, completion, usage)

    def _from_cache_of_others(self) -> Stored | None:
        """The stored answer of the next providers of a fallback list that can take the call,
        in order, each under its own key: an answer one of them gave is served as its own (its
        name on the result, judged by its own dialect's rules)."""
        assert self._cache is not None
        for candidate in self._candidates:
            try:
                self.kind.vet(candidate)
            except UnsupportedRequest:
                continue
            stored = self._stored(candidate, self._cache_key_of(candidate))
            if stored is not None:
                return stored
        return None

    def _stored(self, provider: Provider, key: str) -> Stored | None:
        """The answer the store holds under `key`, `provider`'s, judged again (`_judged`); a
        store of your own that fails otherwise than with a `CacheError` (its server's own
        error, a bug) fails the call as one would, before anything is sent, its error chained."""
        assert self._cache is not None
        try:
            entry = self._cache.get(key)
        except CacheError:
            self._told_failed()
            raise
        except Exception as error:
            self._told_failed()
            raise CacheError(failed_in(self._cache, "get", error)) from error
        return self._judged(entry, provider, key) if entry is not None else None

    def _cache_key_of(self, provider: Provider) -> str:
        """The cache key of the call's answer from `provider`: its scope (where it runs, its
        settings) and its request, in its own wire dialect. Each provider of a fallback list
        keys its own answers, so a hit names the provider that gave the answer and is judged
        by its rules (a strict dialect's `null` for an absent field among them). What the
        request is sent as beyond its fields where a setting of the provider's makes it
        (`Codec.rendered_prompt`: the prompt llama.cpp's `prompt_template=` renders) is in the
        scope by its digest (`rendered_key`): a template is known by what it renders, so
        whatever it reads (a setting, a module-level value changed since) keys the call by the
        prompt sent; one that fails keys its call apart (and its build raises)."""
        first = self._asked.answer_request(Ask(self._turns, (), self._shared, provider))
        wire = provider.codec.request_schema(first)
        scope = provider.cache_scope()
        if self.prompt is not None:
            scope = {**scope, "prompt": self.prompt.to_json()}
        rendered = None
        if self._renderings:  # (rendered once a call: a fallback's store keys what it sent)
            rendered = next(
                (kept for made, asked, kept in self._renderings
                 if made is provider and asked == first),
                None,
            )  # fmt: skip
        if rendered is None:
            try:
                rendered = provider.codec.rendered_prompt(first)
            except Exception as failed:  # (keyed by a token of its own: `rendered_key`)
                rendered = failed
            else:
                if rendered is not None:
                    self._renderings.append((provider, first, rendered))
        if rendered is not None:  # (none without a template: the scope as it was)
            scope = {**scope, "rendered_prompt": rendered_key(rendered)}
        return self._last_key.key(scope, first, wire)

    def _judged(self, entry: Entry, provider: Provider, key: str) -> Stored | None:
        """The answer `entry` holds, judged again by today's kind and parser as `provider`'s
        (which gave it); `None` when it no longer passes or is damaged: not served."""
        assert self._cache is not None
        if type(entry) is not Entry and not isinstance(entry, Entry):  # (a store of your own)
            raise TypeError(
                f"{type(self._cache).__name__}.get() returned {type(entry).__name__}: a "
                "response cache's get returns an sdk.cache.Entry or None (Entry.stored(text) "
                "for the text it keeps)"
            )
        judged: Accepted[Any] | None = None
        kind = self.kind  # each phase's kind, as the replay moves through them
        try:
            completions = entry.completions  # (decoded once: `DamagedEntry` if they do not)
            if entry.retried is not None and entry.retried != self._retry_digest():
                raise ValueError("an answer made after retries other settings decided")
            for index, completion in enumerate(completions):
                verdict = kind.judge(completion, provider)
                last = index == len(completions) - 1
                if isinstance(verdict, Accepted) != last:
                    raise ValueError("a stored answer out of step with its kind")
                if isinstance(verdict, NextPhase):
                    kind = verdict.next
                judged = verdict if isinstance(verdict, Accepted) else None
        except DamagedEntry as damaged:
            logger.warning("a damaged response cache entry (%s): asking the provider", damaged)
            self._notes.append(Note("", str(damaged), "asked the provider", kind="cache_damaged"))
            self._not_served(key)
            return None
        except (StructuredOutputError, ValueError) as refused:
            logger.debug("cached answer refused now (%s): asking the provider", refused)
            self._not_served(key)
            return None
        assert judged is not None
        return judged, kind, provider, completions[-1], entry.usage

    def _retry_digest(self) -> str:
        """What decides the retries of the call (`Entry.retried`): whether it streams (a
        streamed reply is stopped as a runaway), its retries of each kind, the truncation ramp,
        the token budget, the runaway bound, and the settings its replies are judged by (an
        answer made after retries is served only to a call that would have asked the same:
        another's first request may be refused, cut off at its own `max_tokens`, or not retried
        where this one was)."""
        spec = self._spec
        attempts, parsing, output = spec.attempts, spec.parsing, spec.output
        return settings_digest((
            spec.method.streaming, attempts.retries, attempts.refusal_retries, attempts.truncation,
            attempts.token_budget, spec.runaway, parsing.context, parsing.enum_case,
            parsing.min_confidence, parsing.confidence_calibration, parsing.whole_reply,
            output.abstention, output.abstention_thresholds, self._fallback_on_refusal,
        ))  # fmt: skip

    def _not_served(self, key: str) -> None:
        """The entry found under `key` is not served: dropped, and counted a miss, not a hit;
        where the loop keeps the store's writes apart (`store_apart`), dropped when it says
        (`drop_unserved`: a lookup on the event loop writes nothing there)."""
        if self.store_apart:
            self._unserved.append(key)
        else:
            self._drop(key)

    @property
    def unserved(self) -> bool:
        """Whether entries the lookup did not serve wait to be dropped (`drop_unserved`)."""
        return bool(self._unserved)

    def drop_unserved(self) -> None:
        """Drop the entries the lookup did not serve (the store's I/O, and no hook told: any
        thread may run it while the call waits)."""
        keys, self._unserved = self._unserved, []
        for key in keys:
            self._drop(key)

    def _drop(self, key: str) -> None:
        """Drop the entry under `key`, not served. A store that cannot (a file opened
        read-only, a server gone since the lookup) does not fail the call: the provider is
        asked all the same."""
        assert self._cache is not None
        try:
            not_served(self._cache, key)
        except CacheError as error:  # (a store of your own's other errors chained to one)
            if error.__cause__ is not None:
                logger.debug("a response cache's drop failed", exc_info=error.__cause__)
            logger.warning("a response cache entry not served was not dropped: %s", error)

    def store(self) -> None:
        """Keep the answer `Store` named in the cache (the store's I/O, and no hook told: any
        thread may run it while the call waits); `finish()` then ends the call with it."""
        assert self._unstored is not None
        self._store()

    def settled(self, decision: Decision) -> Retry | Done | Fail:
        """`decision`, a `Store` carried out here and now (the caller's thread: the sync loops,
        a batch job's items) and the call ended: its `Done`."""
        if isinstance(decision, Store):
            self.store()
            return self.finish()
        return decision

    def finish(self) -> Done:
        """The call ended with the answer `Store` named, kept in the cache (`store()`)."""
        assert self._unstored is not None
        accepted, completion = self._unstored
        self._unstored = None
        return self._finished(accepted, completion, None)

    def _store(self) -> None:
        """Keep the answer just made in the cache, under the key of the provider that gave it
        (a fallback list's later one: its own, `_cache_key_of`); one the cache cannot take (a
        damaged file, a server gone) is still the caller's, with a note saying it was not
        stored."""
        assert self._cache is not None and self._cache_key is not None
        if any(replier is not self.provider for replier in self._repliers):
            # Two-phase reasoning whose working one provider of a fallback list wrote and
            # another answered from: no provider's answer alone (a client of the one that
            # answered would be served the other's working as its own).
            why = "an answer two providers of the fallback list made (one phase each)"
            self._notes.append(Note("", why, None, kind="cache_not_stored"))
            return
        if self._carried_over:
            # The provider that answered was sent the retry an earlier provider's reply led to
            # (that reply quoted in feedback, or the `max_tokens` its cut-off raised), not its
            # own first request, which is all its key says: a client of it alone would be
            # served an answer it could not get.
            why = (
                "an answer the fallback list's next provider made to the retry of another's "
                "reply (its feedback or raised max_tokens), not to its own first request"
            )
            self._notes.append(Note("", why, None, kind="cache_not_stored"))
            return
        key = self._cache_key
        if self.provider is not self._keyed:
            key = self._cache_key_of(self.provider)
        try:
            retried = self._retry_digest() if self._used != self._used_before else None
            self._cache.put(key, Entry(tuple(self._replies), retried))
        except NotStorable as error:  # (this answer only: the store is fine)
            self.not_stored(str(error))
        except CacheError as error:  # (a store closed under the call among them)
            # (a store given up was said once already, as a warning: a note, and no other)
            given_up = isinstance(error, CacheGivenUp)
            if not given_up:
                self._told_failed()
            self.not_stored(str(error), quiet=given_up)
        except UnicodeEncodeError as error:  # a store of your own that takes UTF-8 (ours: above)
            self.not_stored(f"the answer holds text UTF-8 cannot encode ({error.reason})")
        except Exception as error:  # a store of your own's (its server's error, a bug): the
            # answer is paid for, and the caller's all the same
            logger.debug("a response cache's put failed", exc_info=True)
            self._told_failed()
            self.not_stored(failed_in(self._cache, "put", error))

    def _told_failed(self) -> None:
        """Tell the store's threads that it failed (a timeout, a server gone): the calls
        queued for their turn are given up (`sdk._threads.CacheThreads.failed_since`)."""
        self.cache_threads.tell_failed(self._cache)

    def not_stored(self, why: str, quiet: bool = False) -> None:
        """The answer was not kept in the cache, for `why`: a warning (`quiet`: said already),
        and a note on the result."""
        (logger.debug if quiet else logger.warning)(
            "the answer was not stored in the response cache: %s", why
        )
        self._notes.append(Note("", why, None, kind="cache_not_stored"))

    def _first_able(self, kind: OutputKind[Any]) -> Provider:
        """The first provider that can carry the kind (`UnsupportedRequest` from the first if
        none can: raised before the call starts, so no hook hears of it)."""
        first: UnsupportedRequest | None = None
        while self._candidates:
            candidate = self._candidates.pop(0)
            try:
                kind.vet(candidate)
            except UnsupportedRequest as refused:
                first = first or refused
                continue
            return candidate
        assert first is not None
        raise first

    @property
    def usage(self) -> Usage:
        """Tokens over every attempt so far."""
        if not self.attempts:  # (a cached answer's call: none)
            return _NO_USAGE
        return sum((attempt.usage for attempt in self.attempts), Usage())

    @property
    def number(self) -> int:
        """The number of the next attempt, or of the one in flight (1 first)."""
        return len(self.attempts) + 1

    # --- sending ---

    def send(self) -> Send | Fail:
        """The next request (the same one again after a transport error), or `Fail` when the
        call's deadline has passed."""
        if self._deadline is not None and self.clock() >= self._deadline:
            return self._fail(self._deadline_error())
        shared = replace(self._shared, max_tokens=self._max_tokens)
        request = self.kind.request(Ask(self._turns, self._feedback, shared, self.provider))
        for provider, keyed, rendered in self._renderings:  # (a template's: once a call)
            if provider is self.provider and keyed == request:
                provider.codec.send_rendered(request, rendered)
                break
        logger.debug(
            "attempt %d: %s v%d -> %s (model %s), max_tokens=%d, %d message(s)",
            self.number,
            self.kind.name,
            self.kind.schema.version,
            self.provider.name,
            self.provider.model,
            self._max_tokens,
            len(request.messages),
        )
        self._open = self.number
        self._tell("before_request", request, self.number)
        return Send(request, self.provider, self._send_deadline(), self.number)

    def view(self) -> StreamView:
        """A fresh reader of what a stream shows of the attempt in flight."""
        return self.kind.view(self.number, self.provider)

    # --- what came back ---

    def on_reply(self, completion: Completion, partial: Any = None) -> Decision:
        """A reply arrived: judge it (the kind, stop reason first) and decide."""
        self._transport = None  # the next request is a new one: its transport retries start over
        number = self.number
        self._tell("after_reply", completion, number)
        try:
            judged = self.kind.judge(completion, self.provider)
        except StructuredOutputError as refused:
            # No output at all (a refusal field, a filter): the error's text is None.
            silent = completion.text is None and not completion.tool_calls
            error = _with(refused, text=None if silent else refused.text, partial=partial)
            self._record(completion, error)
            return self._after_failure(error, completion)
        self._record(completion, None)
        self._replies.append(completion)
        self._repliers.append(self.provider)
        if not isinstance(judged, Accepted):  # a phase moved on (two-phase working)
            self.kind = judged.next
            return Retry(0.0, (), "next phase")
        return self._done(judged, completion)

    def on_transport_error(self, error: ProviderError, partial: Any = None) -> Decision:
        """The request got no usable reply: wait and send it again, fall back, or fail."""
        error = _with(error, partial=partial)
        # A stream cut midway: the text that arrived and the tokens the stream said it cost
        # (the driver put them on the error) are the attempt's, billed all the same.
        self.attempts.append(
            Attempt(
                number=self.number,
                text=error.text,
                stop_reason=None,
                raw_stop_reason=None,
                usage=error.usage if not error.attempts else Usage(),
                error=error,
                request_id=error.request_id,
                max_tokens=self._max_tokens,
                provider=self.provider.name,
                model=self.provider.model,
            )
        )
        logger.debug("attempt %d: %s", len(self.attempts), error)
        self._attempt_over(error)
        if self._transport is None:
            self._transport = TransportRetries(self.settings.backoff, self._transient)
        delay = self._transport.delay(error)
        if delay is None:
            if self._fall_back():
                return Retry(0.0, (), f"falling back to {self.provider.name}")
            return self._fail(error)
        if self._deadline is not None and self.clock() + delay >= self._deadline:
            return self._fail(error, "not retried: the wait would pass the call's deadline")
        return Retry(delay, (), "transport error")

    def on_runaway(self, error: RunawayOutput, partial: Any = None) -> Decision:
        """The loop stopped a streamed reply that ran away (and cancelled its request): the
        attempt is recorded with its text and the tokens it spent, then retried with feedback
        like an invalid reply (the `retries` budget), or the call fails with it."""
        self._transport = None
        if error.partial is None:
            error = error.evolve(partial=partial)
        self.attempts.append(
            Attempt(
                number=self.number,
                text=error.text,
                stop_reason=None,
                raw_stop_reason=None,
                usage=error.usage,  # (the stream's input tokens, where it said them)
                error=error,
                max_tokens=self._max_tokens,
                provider=self.provider.name,
                model=self.provider.model,
            )
        )
        logger.debug("attempt %d: %s", len(self.attempts), error)
        self._attempt_over(error)
        # What the model wrote before it was stopped, as the reply the feedback quotes (the
        # request was cancelled: no stop reason of the provider's).
        stopped = Completion(
            text=error.text,
            stop_reason=StopReason.OTHER,
            raw_stop_reason=None,
            usage=error.usage,
            model=self.provider.model,
        )
        return self._after_failure(error, stopped)

    def on_refused(self, error: StructuredOutputError) -> Decision:
        """The provider refused the request before sending it (`UnsupportedRequest` from its
        codec, a control token in the content): nothing was sent, so no attempt is recorded;
        another provider of a fallback list may take it."""
        self._attempt_over(error)
        if isinstance(error, UnsupportedRequest) and self._fall_back():
            return Retry(0.0, (), f"falling back to {self.provider.name}")
        return self._fail(error)

    def on_abandon(self) -> None:
        """The caller stopped the call (a stream closed early, a task cancelled, an interrupt):
        the hooks hear of it once, and nothing else happens."""
        if self._ended:
            return
        if self._open is not None:
            self._tell("after_attempt", self._open, None)
            self._open = None
        self._ended = True
        self._tell("on_cancel", list(self.attempts))

    # --- decisions ---

    def _after_failure(self, error: StructuredOutputError, completion: Completion) -> Decision:
        """A reply failed: retry with the kind's feedback, fall back, or fail."""
        if isinstance(error, RefusedOutput) and self._fallback_on_refusal and self._fall_back():
            return Retry(0.0, (), f"falling back to {self.provider.name} after a refusal")
        policy = _policy(error)
        if policy is None or self._used.get(policy.name, 0) >= policy.allowed(self.settings):
            return self._fail(error)
        if not self._within_budget():
            self._over_budget = True
            return self._fail(error)
        if isinstance(error, TruncatedOutput):
            ramp = self.settings.truncation
            assert ramp is not None
            if self._max_tokens >= ramp.cap:
                return self._fail(error)  # a ramp at its cap would send the same limit again
            self._max_tokens = min(ramp.cap, math.ceil(self._max_tokens * ramp.factor))
        elif isinstance(error, InvalidOutput):
            # Whatever the kind: nothing the model wrote goes back as a control token.
            said = self.kind.feedback(error, completion, self.provider)
            self._feedback = without_control_tokens(said)
        self._used[policy.name] = self._used.get(policy.name, 0) + 1
        logger.debug("retrying after %s", type(error).__name__)
        return Retry(0.0, self._feedback, type(error).__name__)

    def _done(self, accepted: Accepted[Any], completion: Completion) -> Done | Store:
        """The call's answer, made now: stored in the cache, where there is one, then the call
        ended with it; `Store` where the loop keeps it (`store_apart`: the async loops, for a
        cache that may wait)."""
        if self._cache is not None and self._cache_key is not None:
            if self.store_apart:
                self._unstored = (accepted, completion)
                return Store()
            self._store()
        return self._finished(accepted, completion, None)

    def _finished(
        self, accepted: Accepted[Any], completion: Completion, cached_usage: Usage | None
    ) -> Done:
        """The call ended with `accepted` (a reply of `completion`; `cached_usage`: the cache's
        answer, what it cost when it was made): its result, the hooks told."""
        reasoning = completion.reasoning if self._shared.reasoning == "native" else None
        ending = Ending(
            attempts=list(self.attempts),
            usage=self.usage,
            provider=self.provider,
            completion=completion,
            reasoning=reasoning,
            cost=attempts_cost(self.attempts),
            cached_usage=cached_usage,
            notes=tuple(self._notes),
        )
        result = self.kind.result(accepted, ending)
        if self.prompt is not None:
            result = replace(result, prompt=self.prompt)
        self._ended = True
        self._tell("on_result", result)
        return Done(result)

    def _fail(self, error: StructuredOutputError, why: str | None = None) -> Fail:
        """The final error, carrying every attempt and their usage: `error` itself, or
        `RetriesExhausted` after a policy's retries ran out (`why`: a note on both)."""
        if self._open is not None:
            self._attempt_over(error)
        if why is not None:
            error.add_note(why)
        final = self._give_up(error)
        if final is not error:  # built with every attempt
            final.__cause__ = error  # as `raise final from error`: the last error shows
            if why is not None:
                final.add_note(why)
        else:
            final = error.evolve(attempts=list(self.attempts), usage=self.usage)
        self._ended = True
        self._tell("on_failure", final)
        return Fail(final)

    def _record(self, completion: Completion, error: StructuredOutputError | None) -> None:
        number = self.number
        self.attempts.append(
            Attempt(
                number=number,
                text=completion.text,
                stop_reason=completion.stop_reason,
                raw_stop_reason=completion.raw_stop_reason,
                usage=completion.usage,
                error=error,
                request_id=completion.request_id,
                max_tokens=self._max_tokens,
                diagnostics=completion.diagnostics,
                provider=self.provider.name,
                model=completion.model or self.provider.model,
            )
        )
        usage = completion.usage
        outcome = type(error).__name__ if error is not None else "valid"
        logger.debug(
            "attempt %d: %s, %d in / %d out tokens: %s",
            number,
            completion.raw_stop_reason,
            usage.input_tokens,
            usage.output_tokens,
            outcome,
        )
        self._attempt_over(error)

    def _attempt_over(self, error: StructuredOutputError | None) -> None:
        """Tell the hooks the attempt in flight is over (`error`: what failed it)."""
        number = self._open if self._open is not None else self.number - 1
        self._open = None
        if error is not None:
            self._tell("on_error", error, number)
        self._tell("after_attempt", number, error)

    def _fall_back(self) -> bool:
        """Move on to the next of a `FallbackProvider`'s providers that can take the call: the
        next request goes there, with fresh transport retries and its own wire dialect."""
        while self._candidates:
            previous, candidate = self.provider, self._candidates.pop(0)
            try:
                self.kind.vet(candidate)
            except UnsupportedRequest as refused:
                logger.debug("not falling back to %s: %s", candidate.name, refused)
                continue
            self._moved_to(candidate)
            self._transport = None
            if self._feedback or self._max_tokens != self._spec.transport.max_tokens:
                # (the next request is the last one's retry, not the candidate's first: an
                # answer to it is no answer to the key it would be stored under)
                self._carried_over = True
            self._used_before = dict(self._used)
            logger.debug("falling back from %s to %s", previous.name, candidate.name)
            return True
        return False

    def _moved_to(self, provider: Provider) -> None:
        """The call goes on with `provider` (a fallback list's later one), as the hooks' `info`
        says (made when the call started; without hooks, none)."""
        self.provider = provider
        if self._hooks:
            self.info.provider, self.info.model = provider.name, provider.model

    def _send_deadline(self) -> float | None:
        """The instant (the machine's clock) the next request must be answered by, if any."""
        attempt = self.settings.attempt_deadline
        deadlines = [
            d
            for d in (self._deadline, self.clock() + attempt if attempt is not None else None)
            if d is not None
        ]
        return min(deadlines) if deadlines else None

    def _deadline_error(self) -> ProviderError:
        what = f"the call's deadline of {self.settings.deadline:g}s passed"
        if not self.attempts and self._cache is not None:
            # (nothing was sent: the lookup spent it, a store that waited on its file or server)
            what += " in the response cache's lookup, before any request was sent"
        return provider_error(self.provider.name, what, transient=False)

    def _transient(self, error: BaseException) -> bool:
        if not isinstance(error, ProviderError) or not is_retryable(error):
            return False
        retry_after = error.retry_after
        return retry_after is None or retry_after <= self.settings.backoff.max_retry_after

    def _within_budget(self) -> bool:
        budget = self.settings.token_budget
        if budget is None or not self.attempts:
            return True
        # The next attempt costs about what the last one did (the same conversation, plus a
        # bounded feedback): start it only if that still fits.
        expected = self.attempts[-1].usage.total_tokens
        return self.usage.total_tokens + expected <= budget

    def _retried(self, error: StructuredOutputError) -> bool:
        """Whether this call retries this kind of failure at all (its budget aside)."""
        if isinstance(error, ProviderError):
            return self._transient(error)
        policy = _policy(error)
        return policy is not None and policy.allowed(self.settings) > 0

    def _give_up(self, error: StructuredOutputError) -> StructuredOutputError:
        if self._over_budget:
            error.add_note(
                f"not retried: another attempt would pass the token budget of "
                f"{self.settings.token_budget} ({self.usage.total_tokens} spent)"
            )
        if len(self.attempts) < 2:
            return error
        if not self._retried(error):
            # A failure no policy retries speaks for itself (a refusal stays `RefusedOutput`);
            # a note keeps the earlier attempts visible.
            earlier = "; ".join(
                f"attempt {a.number}: {type(a.error).__name__}"
                for a in self.attempts[:-1]
                if a.error
            )
            if earlier:
                error.add_note(f"attempt {len(self.attempts)} of this call; before it: {earlier}")
            return error
        headline = error.message.splitlines()[0] if error.message else type(error).__name__
        budget = (
            f" (token budget {self.settings.token_budget} reached)" if self._over_budget else ""
        )
        message = (
            f"{self.kind.name}: {len(self.attempts)} attempts, none valid{budget}; "
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
            partial=error.partial,
        )


class _AbandonedIfLeft:
    """`Attempts.abandoned_if_left()`: a class, not a generator context manager (about a
    quarter of its cost)."""

    __slots__ = ("_machine",)

    def __init__(self, machine: Attempts) -> None:
        self._machine = machine

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        if error_type is not None:
            # Nothing once the call has ended (its error is on its way out).
            self._machine.on_abandon()
