"""The four loops every call kind runs: whole or streamed, sync or async.

Each only moves data between the attempts machine (which decides) and the provider's driver
(which does the I/O): the two sync loops and the two async ones differ by the `await` alone. A
caller that stops early (a stream closed, a task cancelled, an interrupt) ends the call through
`Attempts.on_abandon`, so no hook or span is left open.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from sdk.engine.attempts import Attempts, Decision, Done, Fail, Send
from sdk.errors import ProviderError, StructuredOutputError
from sdk.providers._base import Completion

__all__ = ["acomplete", "astream", "complete", "stream"]

Slot = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
"""A concurrency slot each async request holds while in flight."""


def _driver_deadline(machine_clock: Callable[[], float], send: Send) -> float | None:
    """The send's deadline as a `time.monotonic()` instant, which the drivers read (the
    machine's clock may be a test's)."""
    if send.deadline is None:
        return None
    return time.monotonic() + (send.deadline - machine_clock())


def _finished(decision: Decision) -> Any:
    """A `Done`'s result, a `Fail`'s error raised; `None` to go on."""
    if isinstance(decision, Done):
        return decision
    if isinstance(decision, Fail):
        raise decision.error
    return None


# --- sync ---


def complete(
    machine: Attempts, sleep: Callable[[float], None], clock: Callable[[], float]
) -> Any:
    """Run a call to its result (or raise its error)."""
    try:
        machine.start()
        while True:
            send = machine.send()
            if isinstance(send, Fail):
                raise send.error
            try:
                reply = send.provider.complete(send.request, deadline=_driver_deadline(clock, send))
            except ProviderError as error:
                decision = machine.on_transport_error(error)
            except StructuredOutputError as error:
                decision = machine.on_refused(error)
            else:
                decision = machine.on_reply(reply)
            done = _finished(decision)
            if done is not None:
                return done.result
            sleep(decision.wait)  # type: ignore[union-attr]
    except BaseException:
        machine.on_abandon()  # a no-op once the call has ended
        raise


def stream(
    machine: Attempts, sleep: Callable[[float], None], clock: Callable[[], float]
) -> Iterator[Any]:
    """What each attempt shows as it streams, then the result (last)."""
    try:
        machine.start()
        while True:
            send = machine.send()
            if isinstance(send, Fail):
                raise send.error
            view, shown, completion = machine.view(), None, None
            items = send.provider.stream(send.request, deadline=_driver_deadline(clock, send))
            try:
                with contextlib.closing(items):  # type: ignore[type-var]
                    for item in items:
                        if isinstance(item, Completion):
                            completion = item
                            break
                        for shown in view.feed(item):
                            yield shown
                for shown in view.finish():
                    yield shown
                decision = machine.on_reply(_ended(completion), shown)
            except ProviderError as error:
                decision = machine.on_transport_error(error, shown)
            except StructuredOutputError as error:
                decision = machine.on_refused(error)
            done = _finished(decision)
            if done is not None:
                yield done.result
                return
            sleep(decision.wait)  # type: ignore[union-attr]
    except BaseException:
        machine.on_abandon()
        raise


# --- async: the same loops, awaited ---


async def acomplete(
    machine: Attempts,
    sleep: Callable[[float], Awaitable[None]],
    clock: Callable[[], float],
    slot: Slot,
) -> Any:
    """Run a call to its result (or raise its error), each request in a concurrency slot."""
    try:
        machine.start()
        while True:
            send = machine.send()
            if isinstance(send, Fail):
                raise send.error
            try:
                async with slot():
                    deadline = _driver_deadline(clock, send)
                    reply = await send.provider.acomplete(send.request, deadline=deadline)
            except ProviderError as error:
                decision = machine.on_transport_error(error)
            except StructuredOutputError as error:
                decision = machine.on_refused(error)
            else:
                decision = machine.on_reply(reply)
            done = _finished(decision)
            if done is not None:
                return done.result
            await sleep(decision.wait)  # type: ignore[union-attr]
    except BaseException:
        machine.on_abandon()
        raise


async def astream(
    machine: Attempts,
    sleep: Callable[[float], Awaitable[None]],
    clock: Callable[[], float],
    slot: Slot,
) -> AsyncIterator[Any]:
    """What each attempt shows as it streams, then the result (last)."""
    try:
        machine.start()
        while True:
            send = machine.send()
            if isinstance(send, Fail):
                raise send.error
            view, shown, completion = machine.view(), None, None
            try:
                async with slot():
                    deadline = _driver_deadline(clock, send)
                    items = send.provider.astream(send.request, deadline=deadline)
                    async with contextlib.aclosing(items):  # type: ignore[type-var]
                        async for item in items:
                            if isinstance(item, Completion):
                                completion = item
                                break
                            for shown in view.feed(item):
                                yield shown
                for shown in view.finish():
                    yield shown
                decision = machine.on_reply(_ended(completion), shown)
            except ProviderError as error:
                decision = machine.on_transport_error(error, shown)
            except StructuredOutputError as error:
                decision = machine.on_refused(error)
            done = _finished(decision)
            if done is not None:
                yield done.result
                return
            await sleep(decision.wait)  # type: ignore[union-attr]
    except BaseException:
        machine.on_abandon()
        raise


def _ended(completion: Completion | None) -> Completion:
    assert completion is not None  # the driver ends every stream with one, or raises
    return completion
