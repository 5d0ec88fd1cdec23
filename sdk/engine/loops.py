"""The four loops every call kind runs: whole or streamed, sync or async.

Each only moves data between the attempts machine (which decides) and the provider's driver
(which does the I/O): the sync and async loops differ by the `await` alone, and everything else
is shared below. A caller that stops early (a stream closed, a task cancelled, an interrupt)
ends the call through `Attempts.on_abandon`, so no hook or span is left open.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any
from typing import TypeVar

from sdk._values.records import Usage
from sdk.cache import CacheError
from sdk.engine.attempts import Attempts
from sdk.engine.attempts import Decision
from sdk.engine.attempts import Done
from sdk.engine.attempts import Fail
from sdk.engine.attempts import Retry
from sdk.engine.attempts import Send
from sdk.engine.attempts import Store
from sdk.engine.attempts import Stored
from sdk.errors import ProviderError
from sdk.errors import RunawayOutput
from sdk.errors import StructuredOutputError
from sdk.errors import Violation
from sdk.parsing.runaway import Runaway
from sdk.parsing.runaway import RunawayWatch
from sdk.providers._base import Completion
from sdk.providers._base import TextDelta

__all__ = ["acomplete", "astream", "complete", "stream"]

_T = TypeVar("_T")

logger = logging.getLogger("sdk.cache")


def _next(machine: Attempts) -> Send:
    """The next request, or the call's final error raised (its deadline passed)."""
    send = machine.send()
    if isinstance(send, Fail):
        raise send.error
    return send


def _deadline(machine: Attempts, send: Send) -> float | None:
    """The send's deadline as a `time.monotonic()` instant, which the drivers read (the
    machine's clock may be a test's)."""
    if send.deadline is None:
        return None
    return time.monotonic() + (send.deadline - machine.clock())


def _decision(machine: Attempts, outcome: Completion | BaseException, shown: Any) -> Decision:
    """The machine's decision on one request's outcome (its completion, or the error it raised:
    a transport error, or a request refused before sending); anything else raised is raised."""
    if isinstance(outcome, Completion):
        return machine.on_reply(outcome, shown)
    if isinstance(outcome, RunawayOutput):
        return machine.on_runaway(outcome, shown)
    if isinstance(outcome, ProviderError):
        return machine.on_transport_error(outcome, shown)
    if isinstance(outcome, StructuredOutputError):
        return machine.on_refused(outcome)
    raise outcome


def _decided(machine: Attempts, outcome: Completion | BaseException, shown: Any) -> Done | float:
    """The call's result after one request's outcome, or how long to wait before the next
    request (a `Fail`'s error is raised); an answer to keep in the cache is kept here."""
    return _answer(machine.settled(_decision(machine, outcome, shown)))


def _answer(decision: Retry | Done | Fail) -> Done | float:
    """The call's result, or how long to wait (a `Fail`'s error raised)."""
    if isinstance(decision, Fail):
        raise decision.error
    if isinstance(decision, Done):
        return decision
    return decision.wait


class _Shown:
    """One streamed attempt: what its view shows, the last of it, and its completion."""

    def __init__(self, machine: Attempts) -> None:
        self._view = machine.view()
        self._watch = RunawayWatch(machine.runaway) if machine.runaway is not None else None
        self.last: Any = None
        self.completion: Completion | None = None
        self._usage: Usage | None = None  # what the stream said the reply cost so far

    def show(self, item: TextDelta | Completion) -> list[Any]:
        """What the view shows of one item; `RunawayOutput` raised (ending the stream, which
        cancels the request) once the reply's tail is a runaway."""
        if isinstance(item, Completion):
            self.completion = item
            return []
        if item.usage is not None:
            self._usage = item.usage
        if self._watch is not None:
            runaway = self._watch.feed(item.text)
            if runaway is not None:
                raise _runaway_error(self._watch, runaway, self._usage or Usage())
        return self._keep(self._view.feed(item))

    def end(self) -> list[Any]:
        return self._keep(self._view.finish())

    def outcome(self) -> Completion:
        assert self.completion is not None  # the driver ends every stream with one, or raises
        return self.completion

    def _keep(self, shown: list[Any]) -> list[Any]:
        if shown:
            self.last = shown[-1]
        return shown


def _runaway_error(watch: RunawayWatch, runaway: Runaway, said: Usage) -> RunawayOutput:
    """The error of a stopped reply: what ran away, where in the document, what it cost (`said`:
    what the stream said so far, its input tokens; its output, at least a token a piece)."""
    from sdk.diagnostics import char_pointers

    owners = char_pointers(watch.text)
    pointer = owners[runaway.start] if runaway.start < len(owners) else ""
    what = runaway.describe()
    problem = f"the reply ran away here: {what}; write each value once and finish the document"
    tokens = max(watch.deltas, said.output_tokens)
    return RunawayOutput(
        f"runaway output stopped after {watch.deltas} streamed pieces: {what}",
        tokens=tokens,
        usage=replace(said, output_tokens=tokens),
        piece=runaway.piece,
        start=runaway.start,
        text=watch.text,
        violations=[Violation(pointer, problem, "runaway")],
    )


# --- sync ---
# Each loop starts its call (`done`: the response cache's answer, None on a miss), then runs it
# inside `Attempts.abandoned_if_left()`, the one place a call left early is ended; a whole call
# answered by the cache returns before it (a hit is the whole of its call: no context manager).
# Each loop turn sends one request and reads the machine's answer: done, or a wait before the
# next turn.


def complete(machine: Attempts, sleep: Callable[[float], None]) -> Any:
    """Run a call to its result (or raise its error)."""
    done = machine.start()
    if done is not None:
        return done.result
    with machine.abandoned_if_left():
        while True:
            send = _next(machine)
            try:
                outcome: Completion | BaseException = send.provider.complete(
                    send.request, deadline=_deadline(machine, send)
                )
            except StructuredOutputError as failure:
                outcome = failure
            answer = _decided(machine, outcome, None)
            if isinstance(answer, Done):
                return answer.result
            sleep(answer)


def stream(machine: Attempts, sleep: Callable[[float], None]) -> Iterator[Any]:
    """What each attempt shows as it streams, then the result (last)."""
    done = machine.start()
    with machine.abandoned_if_left():
        while done is None:
            send, shown = _next(machine), _Shown(machine)
            try:
                items = send.provider.stream(send.request, deadline=_deadline(machine, send))
                with contextlib.closing(items):  # type: ignore[type-var]
                    for item in items:
                        yield from shown.show(item)
                yield from shown.end()
                outcome: Completion | BaseException = shown.outcome()
            except StructuredOutputError as failure:
                outcome = failure
            answer = _decided(machine, outcome, shown.last)
            if not isinstance(answer, Done):
                sleep(answer)
                continue
            done = answer
        yield done.result


# --- async: the same loops, awaited ---
# A response cache that may wait (a file's lock, a server: `Attempts.cache_waits`) is asked
# from threads of the SDK's own (`sdk._threads`: the store's, `Attempts.cache_threads`), its
# lookup and its writes alike, so that a busy store holds up its own calls, never the event loop
# and every other call on it.


async def _off_loop(work: Callable[[], _T], machine: Attempts) -> _T:
    """`work()` in one of the call's cache threads (`machine.cache_threads`), in a copy of the
    caller's context (as `asyncio.to_thread` runs it), while the event loop runs the other
    calls. Work no thread has taken while the store failed (`CacheThreads.failed_since`: its
    calls ahead each waited its timeout, a file another process holds, a server gone) is not
    run: a `CacheError` saying so, looked for every `machine.turn_bound` seconds (the last of
    100 calls on a store that waits its timeout at each waited 25 turns of it, its answer paid
    for and waiting). A store only busy has its calls wait their turn."""
    import asyncio
    import contextvars

    loop = asyncio.get_running_loop()
    threads, store, bound = machine.cache_threads, machine.cache, machine.turn_bound
    asked = time.monotonic()
    taken: Future[_T] = threads.submit(contextvars.copy_context().run, work)
    waited = asyncio.wrap_future(taken, loop=loop)
    if bound is not None:
        try:
            while not waited.done():
                await asyncio.wait((waited,), timeout=bound)
                if waited.done() or not threads.failed_since(store, asked):
                    continue  # (its turn comes)
                if taken.cancel():  # (not taken yet: it never runs)
                    raise CacheError(
                        f"the response cache ({type(store).__name__}) failed calls given to "
                        "it before this one while this one waited for its turn: given up "
                        "before it was made"
                    )
        except BaseException:  # (the caller left: the work is cancelled, as awaited it would be)
            waited.cancel()
            raise
    return await waited


async def _astart(machine: Attempts) -> Done | None:
    """`machine.start()`, the store's I/O apart from the event loop where the store may wait:
    its lookup (but a `SQLiteCache`'s, which never waits for a writer) and the drop of an entry
    not served (a write). Before the hooks hear of the call, as `start()` looks up: a call left
    meanwhile (cancelled) has not begun."""
    if not machine.cache_waits:
        return machine.start()
    machine.store_apart = True
    stored: Stored | None
    if machine.lookup_waits:
        stored = await _off_loop(machine.lookup, machine)
    else:  # (`SQLiteCache`: a lookup never waits; its writes may)
        stored = machine.lookup()
    if machine.unserved:
        try:
            await _off_loop(machine.drop_unserved, machine)
        except CacheError as error:  # (no turn: the entry stays, and the call goes on)
            logger.warning("a response cache entry not served was not dropped: %s", error)
    machine.begin()
    return machine.served(stored)


async def _adecided(
    machine: Attempts, outcome: Completion | BaseException, shown: Any
) -> Done | float:
    """`_decided`, an answer to keep in the cache kept from a worker thread (`Store`: a store
    that may wait, `store_apart`)."""
    decision = _decision(machine, outcome, shown)
    if isinstance(decision, Store):
        try:
            await _off_loop(machine.store, machine)
        except CacheError as error:  # (no turn: `store` catches the store's own errors)
            machine.not_stored(str(error))
        decision = machine.finish()
    return _answer(decision)


async def acomplete(machine: Attempts, sleep: Callable[[float], Awaitable[None]]) -> Any:
    """Run a call to its result (or raise its error), as `complete` does."""
    done = await _astart(machine)
    if done is not None:
        return done.result
    with machine.abandoned_if_left():
        while True:
            send = _next(machine)
            outcome: Completion | BaseException
            try:
                deadline = _deadline(machine, send)
                outcome = await send.provider.acomplete(send.request, deadline=deadline)
            except StructuredOutputError as failure:
                outcome = failure
            answer = await _adecided(machine, outcome, None)
            if isinstance(answer, Done):
                return answer.result
            await sleep(answer)


async def astream(
    machine: Attempts, sleep: Callable[[float], Awaitable[None]]
) -> AsyncIterator[Any]:
    """What each attempt shows as it streams, then the result (last)."""
    done = await _astart(machine)
    with machine.abandoned_if_left():
        while done is None:
            send, shown = _next(machine), _Shown(machine)
            outcome: Completion | BaseException
            try:
                items = send.provider.astream(send.request, deadline=_deadline(machine, send))
                async with contextlib.aclosing(items):  # type: ignore[type-var]
                    async for item in items:
                        for each in shown.show(item):
                            yield each
                for each in shown.end():
                    yield each
                outcome = shown.outcome()
            except StructuredOutputError as failure:
                outcome = failure
            answer = await _adecided(machine, outcome, shown.last)
            if not isinstance(answer, Done):
                await sleep(answer)
                continue
            done = answer
        yield done.result
