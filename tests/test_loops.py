"""The loops (`sdk.engine.loops`): a whole call the caller leaves before it ends (an interrupt
in the request or in the backoff wait, a cancelled task) ends its call once, through
`Attempts.abandoned_if_left()`, the one place every loop (sync and async, whole and streamed)
ends a call left early; a call that ends by itself is not abandoned, a cache hit included.
(The streamed loops' abandoning is in the promise matrix.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import StructuredClient
from sdk.cache import MemoryCache
from sdk.hooks import CallInfo
from sdk.hooks import Hooks
from sdk.providers import TestProvider
from tests.wire_support import DECISION

BAD = '{"answer": "maybe"}'  # a schema violation: retried, after a (zero) wait


class Ends(Hooks):
    """How the call ended, and the attempts opened and closed."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_call(self, call: CallInfo) -> None:
        self.events.append("call")

    def before_request(self, call: CallInfo, request: Any, attempt: int) -> None:
        self.events.append(f"request {attempt}")

    def after_attempt(self, call: CallInfo, attempt: int, error: Any) -> None:
        self.events.append(f"attempt {attempt} over")

    def on_result(self, call: CallInfo, result: Any) -> None:
        self.events.append("result")

    def on_failure(self, call: CallInfo, error: Any) -> None:
        self.events.append("failure")

    def on_cancel(self, call: CallInfo, attempts: Any) -> None:
        self.events.append(f"cancel after {len(attempts)}")


def _interrupted(seconds: float) -> None:
    raise KeyboardInterrupt


def test_an_interrupt_in_the_request_ends_a_whole_call_as_abandoned() -> None:
    ends = Ends()
    client = StructuredClient(TestProvider([KeyboardInterrupt()]), hooks=[ends])
    with pytest.raises(KeyboardInterrupt):
        client.generate(Decision, prompt="Approve?")
    assert ends.events == ["call", "request 1", "attempt 1 over", "cancel after 0"]


def test_an_interrupt_in_the_backoff_wait_ends_a_whole_call_as_abandoned() -> None:
    ends = Ends()
    provider = TestProvider([BAD, DECISION])
    client = StructuredClient(provider, hooks=[ends], sleep=_interrupted)
    with pytest.raises(KeyboardInterrupt):
        client.generate(Decision, prompt="Approve?")
    assert ends.events == ["call", "request 1", "attempt 1 over", "cancel after 1"]


def test_a_cancelled_task_ends_a_whole_async_call_as_abandoned() -> None:
    ends = Ends()

    async def main() -> None:
        waiting = asyncio.Event()

        async def wait_forever(seconds: float) -> None:
            waiting.set()
            await asyncio.Event().wait()  # never set: only the cancel ends it

        client = AsyncStructuredClient(
            TestProvider([BAD, DECISION]), hooks=[ends], sleep=wait_forever
        )
        task = asyncio.create_task(client.generate(Decision, prompt="Approve?"))
        await asyncio.wait_for(waiting.wait(), timeout=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=30)

    asyncio.run(main())
    assert ends.events == ["call", "request 1", "attempt 1 over", "cancel after 1"]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_call_that_ends_by_itself_is_not_abandoned_a_cache_hit_included(run: str) -> None:
    ends = Ends()
    cache = MemoryCache()
    provider = TestProvider([BAD, DECISION])

    def generate() -> Any:
        if run == "sync":
            return StructuredClient(provider, hooks=[ends], cache=cache).generate(
                Decision, prompt="Approve?"
            )
        client = AsyncStructuredClient(provider, hooks=[ends], cache=cache)
        return asyncio.run(client.generate(Decision, prompt="Approve?"))

    first = generate()
    assert ends.events == [
        "call", "request 1", "attempt 1 over", "request 2", "attempt 2 over", "result"
    ]  # fmt: skip
    ends.events.clear()
    hit = generate()
    assert hit.cached and hit.value == first.value
    assert ends.events == ["call", "result"]
