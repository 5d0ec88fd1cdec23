"""The four loops every call kind runs: whole or streamed, sync or async.

Each only moves data between the attempts machine (which decides) and the provider's driver
(which does the I/O): the sync and async loops differ by the `await` alone, and everything else
is shared below. A caller that stops early (a stream closed, a task cancelled, an interrupt)
ends the call through `Attempts.on_abandon`, so no hook or span is left open.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from sdk.engine.attempts import Attempts, Decision, Done, Fail, Retry, Send
from sdk.errors import ProviderError, StructuredOutputError
from sdk.providers._base import Completion, TextDelta

__all__ = ["acomplete", "astream", "complete", "stream"]


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


def _after(machine: Attempts, failure: BaseException, shown: Any) -> Decision:
    """The decision on a request that raised: a transport error, or refused before sending."""
    if isinstance(failure, ProviderError):
        return machine.on_transport_error(failure, shown)
    if isinstance(failure, StructuredOutputError):
        return machine.on_refused(failure)
    raise failure


def _wait(decision: Decision) -> float:
    """How long to wait before the next request; a `Fail`'s error raised."""
    if isinstance(decision, Fail):
        raise decision.error
    assert isinstance(decision, Retry)
    return decision.wait


class _Shown:
    """One streamed attempt: what its view shows, the last of it, and its completion."""

    def __init__(self, machine: Attempts) -> None:
        self._machine = machine
        self._view = machine.view()
        self.last: Any = None
        self.completion: Completion | None = None

    def show(self, item: TextDelta | Completion) -> list[Any]:
        if isinstance(item, Completion):
            self.completion = item
            return []
        return self._keep(self._view.feed(item))

    def end(self) -> list[Any]:
        return self._keep(self._view.finish())

    def decide(self) -> Decision:
        assert self.completion is not None  # the driver ends every stream with one, or raises
        return self._machine.on_reply(self.completion, self.last)

    def _keep(self, shown: list[Any]) -> list[Any]:
        if shown:
            self.last = shown[-1]
        return shown


# --- sync ---


def complete(machine: Attempts, sleep: Callable[[float], None]) -> Any:
    """Run a call to its result (or raise its error)."""
    with machine.abandoned_on_exit() as cached:
        while cached is None:
            send = _next(machine)
            try:
                reply = send.provider.complete(send.request, deadline=_deadline(machine, send))
            except StructuredOutputError as failure:
                decision = _after(machine, failure, None)
            else:
                decision = machine.on_reply(reply)
            if isinstance(decision, Done):
                return decision.result
            sleep(_wait(decision))
        return cached.result  # the response cache had the answer


def stream(machine: Attempts, sleep: Callable[[float], None]) -> Iterator[Any]:
    """What each attempt shows as it streams, then the result (last)."""
    with machine.abandoned_on_exit() as cached:
        while cached is None:
            send, shown = _next(machine), _Shown(machine)
            try:
                items = send.provider.stream(send.request, deadline=_deadline(machine, send))
                with contextlib.closing(items):  # type: ignore[type-var]
                    for item in items:
                        yield from shown.show(item)
                yield from shown.end()
                decision = shown.decide()
            except StructuredOutputError as failure:
                decision = _after(machine, failure, shown.last)
            if isinstance(decision, Done):
                yield decision.result
                return
            sleep(_wait(decision))
        yield cached.result


# --- async: the same loops, awaited ---


async def acomplete(machine: Attempts, sleep: Callable[[float], Awaitable[None]]) -> Any:
    """Run a call to its result (or raise its error)."""
    with machine.abandoned_on_exit() as cached:
        while cached is None:
            send = _next(machine)
            try:
                deadline = _deadline(machine, send)
                reply = await send.provider.acomplete(send.request, deadline=deadline)
            except StructuredOutputError as failure:
                decision = _after(machine, failure, None)
            else:
                decision = machine.on_reply(reply)
            if isinstance(decision, Done):
                return decision.result
            await sleep(_wait(decision))
        return cached.result


async def astream(
    machine: Attempts, sleep: Callable[[float], Awaitable[None]]
) -> AsyncIterator[Any]:
    """What each attempt shows as it streams, then the result (last)."""
    with machine.abandoned_on_exit() as cached:
        while cached is None:
            send, shown = _next(machine), _Shown(machine)
            try:
                items = send.provider.astream(send.request, deadline=_deadline(machine, send))
                async with contextlib.aclosing(items):  # type: ignore[type-var]
                    async for item in items:
                        for each in shown.show(item):
                            yield each
                for each in shown.end():
                    yield each
                decision = shown.decide()
            except StructuredOutputError as failure:
                decision = _after(machine, failure, shown.last)
            if isinstance(decision, Done):
                yield decision.result
                return
            await sleep(_wait(decision))
        yield cached.result
