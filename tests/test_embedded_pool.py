"""`EmbeddedProvider(engines=N)`: N generations at once; with one engine, calls queue and the
first that waits says so, once.

Real generation with the bundled model. Concurrency is shown without timing anything: a stream
suspended mid-generation holds its engine (its generator is inside the engine's hold), so a
second call can finish meanwhile only if another engine is free; with one engine the second call
waits, and the warning it logs is what the test waits for (bounded).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from contracts import Decision
from contracts import Sentiment
from sdk import AsyncStructuredClient
from sdk import Partial
from sdk import Result
from sdk import StructuredClient
from tests.local_deps import import_local
from tests.schema_support import REPO

pytestmark = pytest.mark.local

PROMPT = "Approve a $12 taxi receipt? Policy: taxis under $50 are fine."
LOGGER = "sdk.providers.embedded"
WAIT = 120.0  # a bound on every wait: never reached unless something hangs


@pytest.fixture(scope="module")
def pooled() -> Iterator[Any]:
    """A provider with two engines (the first shared with any other provider of the model)."""
    import_local("llama_cpp")
    from sdk.providers.embedded import EmbeddedProvider

    provider = EmbeddedProvider(engines=2)
    yield provider
    provider.close()


def _single() -> Any:
    from sdk.providers.embedded import EmbeddedProvider

    return EmbeddedProvider()  # the shared engine: loaded once per process


def _suspended_stream(client: StructuredClient) -> Iterator[Any]:
    """A Decision stream advanced to its first snapshot: its generation is under way, holding
    an engine, and stays suspended until the test reads on."""
    stream = client.stream(Decision, prompt=PROMPT, max_tokens=120)
    first = next(stream)
    assert isinstance(first, Partial)
    return stream


def _waiting_notes(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == LOGGER and "waits for a free engine" in r.message
    ]


def test_two_engines_run_two_generations_at_once(
    pooled: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    client = StructuredClient(pooled, retries=0)
    stream = _suspended_stream(client)  # engine 1 busy, mid-generation
    try:
        # Finishes while the stream holds the other engine: two generations at once.
        result = client.generate(Sentiment, prompt="I love this phone.", max_tokens=60)
        assert isinstance(result.value, Sentiment)
    finally:
        *_, last = stream  # the suspended generation goes on to its end
    assert isinstance(last, Result) and isinstance(last.value, Decision)
    assert _waiting_notes(caplog) == []  # nobody waited


def _generate_into(client: StructuredClient, done: list[Result[Any]]) -> None:
    done.append(client.generate(Sentiment, prompt="Great!", max_tokens=60))


def test_one_engine_queues_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    import_local("llama_cpp")
    caplog.set_level(logging.WARNING, LOGGER)
    client = StructuredClient(_single(), retries=0)
    for round_ in range(2):
        stream = _suspended_stream(client)  # the one engine, mid-generation
        done: list[Result[Any]] = []
        waiter = threading.Thread(target=_generate_into, args=(client, done))
        waiter.start()
        if round_ == 0:
            deadline = time.monotonic() + WAIT
            while not _waiting_notes(caplog):  # the second call is waiting: it said so
                assert time.monotonic() < deadline, "the second call never waited"
                time.sleep(0.02)
        assert not done  # it cannot have run: the engine is held by the stream
        *_, last = stream  # the first generation ends, the engine is free
        waiter.join(WAIT)
        assert not waiter.is_alive()
        assert isinstance(last, Result) and len(done) == 1
    notes = _waiting_notes(caplog)
    assert len(notes) == 1  # once, though a call waited in both rounds
    assert "EmbeddedProvider(engines=N)" in notes[0].message
    # The local models guide shows this message as it is.
    assert notes[0].getMessage() in (REPO / "docs" / "guides" / "local-models.md").read_text()


def test_a_pool_under_gather_gives_the_results_of_one_engine(pooled: Any) -> None:
    prompts = [f"Approve a ${amount} taxi receipt? Taxis under $50 are fine." for amount in (9, 70)]

    async def run(provider: Any) -> list[Any]:
        client = AsyncStructuredClient(provider, retries=0)
        results = await asyncio.gather(
            *(client.generate(Decision, prompt=p, max_tokens=120) for p in prompts)
        )
        return [result.value for result in results]

    # Greedy decoding: each engine is the same model with the same settings.
    assert asyncio.run(run(pooled)) == asyncio.run(run(_single()))


def test_engines_is_checked_and_shown() -> None:
    import_local("llama_cpp")
    from sdk.providers.embedded import EmbeddedProvider

    with pytest.raises(ValueError, match="engines must be at least 1, not 0"):
        EmbeddedProvider(engines=0)
    with pytest.raises(TypeError, match="engines must be an int"):
        EmbeddedProvider(engines=1.5)  # type: ignore[arg-type]
    assert "engines" not in repr(_single())


def test_the_pool_is_in_the_repr(pooled: Any) -> None:
    assert repr(pooled).endswith(", engines=2)")
    assert pooled.engines == 2


def test_a_call_cancelled_while_it_waits_for_the_engine_stops_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A call that gave up (a timeout around it) while queued for the engine: on main its worker
    # thread went on waiting until the engine was free, only to stop at its first token, so
    # timed-out calls piled up in the executor. `asyncio.run` waits for its worker threads at
    # the end, so it returns (bounded) only if the waiting one stopped.
    import_local("llama_cpp")
    caplog.set_level(logging.WARNING, LOGGER)
    provider = _single()  # a pool of its own: its first wait is logged
    stream = _suspended_stream(StructuredClient(provider, retries=0))  # the engine, held

    async def give_up() -> None:
        client = AsyncStructuredClient(provider, retries=0)
        call = asyncio.ensure_future(client.generate(Sentiment, prompt="Great!", max_tokens=60))
        deadline = time.monotonic() + WAIT
        while not _waiting_notes(caplog):  # it is queued for the engine
            assert time.monotonic() < deadline, "the call never waited"
            await asyncio.sleep(0.02)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    failures: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(give_up())
        except BaseException as error:  # handed to the test's thread
            failures.append(error)

    runner = threading.Thread(target=run)
    try:
        runner.start()
        runner.join(30.0)
        assert not runner.is_alive(), "the cancelled call still waits for the engine"
        assert failures == []
    finally:
        *_, last = stream  # frees the engine (and, on main, the waiting thread)
        runner.join(WAIT)
    assert isinstance(last, Result)
