"""AsyncStructuredClient: many calls at once, a shared concurrency limit, and cancellation that
leaves nothing behind. Through the real AsyncAnthropic client on an async mock transport."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

import httpx2
import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Partial
from sdk import Result
from sdk import SchemaViolation
from sdk.providers import AnthropicProvider
from tests.wire_support import ANTHROPIC_HEADERS
from tests.wire_support import DECISION
from tests.wire_support import SSE
from tests.wire_support import Sleeps
from tests.wire_support import Wire
from tests.wire_support import anthropic_async_client
from tests.wire_support import anthropic_reply
from tests.wire_support import error_reply
from tests.wire_support import fixture
from tests.wire_support import fixture_json

MODEL = "claude-sonnet-4-6"


def _client(handler: Any, **options: Any) -> AsyncStructuredClient:
    provider = AnthropicProvider(anthropic_async_client(handler), model=MODEL)
    return AsyncStructuredClient(provider, **options)


class EchoServer:
    """An async handler answering each request with a Decision that names the request's case,
    while counting how many requests are in flight at once."""

    def __init__(self, delay: float = 0.002) -> None:
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls = 0

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            case = re.search(r"case (\d+)", json.loads(request.content)["messages"][0]["content"])
            assert case is not None
            body = fixture_json("anthropic_success.json")
            answer = {**DECISION, "reasoning": f"Case {case.group(1)} is within policy."}
            body["content"] = [{"type": "text", "text": json.dumps(answer)}]
            return httpx2.Response(
                200, content=json.dumps(body).encode(), headers=ANTHROPIC_HEADERS
            )
        finally:
            self.in_flight -= 1


async def test_200_concurrent_calls_all_return_their_own_answer() -> None:
    server = EchoServer()
    client = _client(server, max_concurrency=32)
    results = await asyncio.gather(
        *(client.generate(Decision, prompt=f"Decide case {n}.") for n in range(200))
    )
    assert [r.value.reasoning for r in results] == [
        f"Case {n} is within policy." for n in range(200)
    ]
    assert all(len(r.attempts) == 1 for r in results)
    assert server.calls == 200
    assert 1 < server.most_in_flight <= 32  # concurrent, and bounded by the client


async def test_1000_concurrent_calls_succeed_under_the_default_limit() -> None:
    server = EchoServer(delay=0.001)
    client = _client(server)
    results = await asyncio.gather(
        *(client.generate(Decision, prompt=f"Decide case {n}.") for n in range(1000))
    )
    assert len({r.value.reasoning for r in results}) == 1000
    assert 1 < server.most_in_flight <= 64


async def test_async_retries_with_feedback() -> None:
    invalid = json.dumps({**DECISION, "answer": "maybe"})
    wire = Wire(anthropic_reply(text=invalid), anthropic_reply())
    result = await _client(wire).generate(Decision, prompt="Approve?")
    assert isinstance(result.attempts[0].error, SchemaViolation)
    assert wire.bodies()[1]["messages"][1] == {"role": "assistant", "content": invalid}


async def test_async_backoff_uses_the_injected_sleep() -> None:
    sleeps = Sleeps()
    wire = Wire(error_reply("anthropic_error_429.json", 429, retry_after="17"), anthropic_reply())
    result = await _client(wire, sleep=sleeps.asleep).generate(Decision, prompt="Approve?")
    assert sleeps.waits == [17.0]
    assert len(result.attempts) == 2


class Hang:
    """An async handler that never answers until cancelled, and remembers the cancellation."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.cancelled = False

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


def _others() -> set[asyncio.Task[Any]]:
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def test_cancelling_a_call_cancels_its_request_and_frees_its_slot() -> None:
    hang = Hang()
    client = _client(hang, max_concurrency=2)
    task = asyncio.create_task(client.generate(Decision, prompt="Approve?"))
    # Bounded: a call that never reached the server fails here instead of hanging the run.
    await asyncio.wait_for(hang.entered.wait(), timeout=60)
    limit = client.limit()
    assert limit is not None and limit.locked() is False and limit._value == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert hang.cancelled  # the request itself was cancelled, not left running
    assert limit._value == 2  # the slot is back
    assert _others() == set()  # nothing left running
    # And the client keeps working.
    server = EchoServer()
    client.provider = AnthropicProvider(anthropic_async_client(server), model=MODEL)
    assert (await client.generate(Decision, prompt="Decide case 7.")).value.reasoning.startswith(
        "Case 7"
    )


async def test_a_timeout_around_a_call_leaves_nothing_behind() -> None:
    hang = Hang()
    client = _client(hang, max_concurrency=1)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await client.generate(Decision, prompt="Approve?")
    assert hang.cancelled
    limit = client.limit()
    assert limit is not None and limit._value == 1
    assert _others() == set()


async def test_cancelling_during_backoff_stops_at_once() -> None:
    wire = Wire(error_reply("anthropic_error_429.json", 429, retry_after="30"))
    client = _client(wire)  # the real asyncio.sleep: 30 s unless cancelled
    task = asyncio.create_task(client.generate(Decision, prompt="Approve?"))
    while not wire.requests:
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    task.cancel()
    # No clock in the assertion: a backoff that ignored the cancellation would sleep its 30 s,
    # send a second request, and end in another way than CancelledError.
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(wire.requests) == 1
    assert _others() == set()


async def test_leaving_a_stream_early_closes_it_and_frees_its_slot() -> None:
    body = fixture("anthropic_stream_success.sse")
    closed = asyncio.Event()

    async def chunks() -> Any:
        try:
            for line in body.splitlines(keepends=True):
                yield line
                await asyncio.sleep(0)
        finally:
            closed.set()

    async def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=chunks(), headers={**ANTHROPIC_HEADERS, **SSE})

    client = _client(handler, max_concurrency=1)
    seen = []
    async with contextlib.aclosing(client.stream(Decision, prompt="Approve?")) as items:
        async for item in items:
            seen.append(item)
            if len(seen) == 3:
                break
    assert all(isinstance(item, Partial) for item in seen)
    # The HTTP body is closed (a moment later: its generator finalizes on the loop); the
    # timeout only keeps a regression from hanging the suite, it bounds no speed.
    await asyncio.wait_for(closed.wait(), timeout=60)
    limit = client.limit()
    assert limit is not None and limit._value == 1
    # A whole stream still works afterwards.
    items2 = [item async for item in client.stream(Decision, prompt="Approve?")]
    assert isinstance(items2[-1], Result)


async def test_concurrency_limit_is_per_event_loop_and_validated() -> None:
    with pytest.raises(ValueError):
        _client(Wire(anthropic_reply()), max_concurrency=0)
    unlimited = _client(Wire(anthropic_reply()), max_concurrency=None)
    assert unlimited.limit() is None
    assert (await unlimited.generate(Decision, prompt="Approve?")).value.answer.value == "approve"
