"""A store closed while other threads use it (a service's shutdown hook, a per-request cleanup).

- Every call that fails is `CacheClosed` (a `CacheError`) naming the store, never an error of a
  connection torn down under it (a raw `AttributeError` out of `generate()` from redis-py).
- No answer the provider gave is lost: a `put` that meets the close is a `cache_not_stored`
  note on the answer.
- A store closed is not ended: a later call, in any thread, opens new connections (as
  `SQLiteCache` always did, and `RedisCache` said it did).
- `RedisCache.close()` waits for a call already under way (at most `timeout`), which finishes.

Real threads behind a barrier, a real `redis-server`, every wait bounded.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from contracts import Decision
from sdk import StructuredClient
from sdk.cache import CacheClosed
from sdk.cache import CacheError
from sdk.cache import Entry
from sdk.cache import RedisCache
from sdk.cache import SQLiteCache
from sdk.providers import TestProvider
from tests.redis_support import redis_server
from tests.shared_file_process import WAIT
from tests.shared_file_process import wait_for

ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})
THREADS = 8
CLOSES = 20  # close() again and again, 10 ms apart (each after the first does nothing more)
CLOSED_CALLS = 3  # calls each thread makes after the last close, every one served

_prefixes = iter(range(1_000_000))


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _store(kind: str, folder: Path, request: pytest.FixtureRequest) -> RedisCache | SQLiteCache:
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        return RedisCache(url, prefix=f"closing{next(_prefixes)}:")
    return SQLiteCache(folder / "c.db")


def _named(store: RedisCache | SQLiteCache) -> str:
    return store.server if isinstance(store, RedisCache) else str(store.path)


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_a_store_closed_under_eight_threads_of_calls_fails_them_typed_and_loses_no_answer(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = _store(kind, tmp_path, request)
    provider = TestProvider([ANSWER], repeat=True)
    client = StructuredClient(provider, cache=store)
    barrier = threading.Barrier(THREADS + 1, timeout=WAIT)
    closed = threading.Event()  # set once close() has returned
    results: list[Any] = []
    failures: list[BaseException] = []
    after: list[BaseException] = []  # failures of calls begun after the last close() returned
    served_after: list[Any] = []  # results of such calls (every one: the store opens again)

    def calls(number: int) -> None:
        barrier.wait()
        deadline = time.monotonic() + WAIT
        index = 0
        while len([r for r in served_after if r[0] == number]) < CLOSED_CALLS:
            assert time.monotonic() < deadline, "a call after the close was never served"
            index += 1
            began_closed = closed.is_set()
            try:  # 40 sources: hits and misses, so both `get` and `put` meet the close
                result = client.generate(
                    Decision, prompt="p", source=f"s{(number * 7 + index) % 40}"
                )
                results.append(result)
                if began_closed:
                    served_after.append((number, result))
            except Exception as error:  # (any kind: what is asserted is which)
                failures.append(error)
                if began_closed:
                    after.append(error)

    threads = [threading.Thread(target=calls, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    wait_for(lambda: len(results) >= 200, "the threads' first calls")
    for _ in range(CLOSES):
        store.close()
        time.sleep(0.01)
    closed.set()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)

    odd = [f"{type(error).__name__}: {error}" for error in failures
           if not isinstance(error, CacheClosed)]  # fmt: skip
    assert odd == [], f"{len(odd)} calls failed otherwise than CacheClosed: {odd[:3]}"
    assert all(isinstance(error, CacheError) for error in failures)
    assert all(_named(store) in str(error) for error in failures)
    assert after == []  # once closed, the store opens again in every thread
    assert len(served_after) >= THREADS * CLOSED_CALLS
    # Every answer the provider gave was returned (one a closed store did not take, with a note).
    asked = [result for result in results if not result.cached]
    assert len(provider.requests) == len(asked)
    assert {result.value.answer for result in results} == {"approve"}
    for result in asked:
        kinds = [note.kind for note in result.notes]
        assert kinds in ([], ["cache_not_stored"])
        if kinds:
            assert "closed" in str(result.notes[0].received)
    store.put("k", Entry((TestProvider.refusal("x"),)))  # (and every other call, as before)
    assert store.get("k") is not None and store.stats().entries >= 1
    store.close()


def _look(store: RedisCache | SQLiteCache, got: list[object]) -> None:
    """Look `k` up (in a thread of its own): its refusal's text, `None`, or the error, in `got`."""
    try:
        found = store.get("k")
        got.append(found.completions[0].refusal if found is not None else None)
    except BaseException as error:
        got.append(error)


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_a_closed_store_opens_again_in_a_thread_that_never_used_it(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = _store(kind, tmp_path, request)
    store.put("k", Entry((TestProvider.refusal("x"),)))
    store.close()
    store.close()  # nothing more
    got: list[object] = []
    look = functools.partial(_look, store, got)
    thread = threading.Thread(target=look)
    thread.start()
    thread.join(WAIT)
    assert got == ["x"]
    store.close()


def test_redis_close_waits_for_a_call_under_way_which_finishes(
    redis_url: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The server holds the call (`CLIENT PAUSE`) while another thread closes the store: the call
    finishes with its answer (on main it was cut short by the teardown: a raw error of
    redis-py)."""
    store = _store("redis", tmp_path, request)
    assert isinstance(store, RedisCache)
    store.put("k", Entry((TestProvider.refusal("held"),)))
    raw = redis.Redis.from_url(redis_url, socket_timeout=WAIT)
    got: list[object] = []
    look = functools.partial(_look, store, got)
    raw.client_pause(1500)  # every client's next command waits 1.5 s on the server
    thread = threading.Thread(target=look)
    thread.start()
    wait_for(lambda: store._running == 1 or bool(got), "the lookup under way")
    began = time.monotonic()
    store.close()
    waited = time.monotonic() - began
    thread.join(WAIT)
    raw.close()
    assert got == ["held"]
    assert 0.3 < waited < store.timeout  # it waited for the call, no longer than its bound
    found = store.get("k")  # (a later call: new connections)
    assert found is not None and found.completions[0].refusal == "held"
    store.close()
