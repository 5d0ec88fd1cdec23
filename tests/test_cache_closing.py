"""A store closed while other threads use it (a service's shutdown hook, a per-request cleanup).

- Every call that fails is `CacheClosed` (a `CacheError`) naming the store, never an error of a
  connection torn down under it (a raw `AttributeError` out of `generate()` from redis-py).
- No answer the provider gave is lost: a `put` that meets the closed store is a
  `cache_not_stored` note on the answer.
- A closed store stays closed, in every thread, for `RedisCache` and `SQLiteCache` alike (the
  latter reopened itself, the former reopened too until a call met the teardown).
- `RedisCache.close()` waits for a call already under way (at most `timeout`), which finishes.

Real threads behind a barrier, a real `redis-server`, every wait bounded.
"""

from __future__ import annotations

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
CLOSED_CALLS = 3  # calls each thread makes after the store closed, every one `CacheClosed`

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
    after: list[BaseException] = []  # failures of calls begun after close() returned
    served_after: list[Any] = []  # results of such calls (none: the store stays closed)

    def calls(number: int) -> None:
        barrier.wait()
        deadline = time.monotonic() + WAIT
        seen = 0
        index = 0
        while seen < CLOSED_CALLS and time.monotonic() < deadline:
            index += 1
            began_closed = closed.is_set()
            try:  # 40 sources: hits and misses, so both `get` and `put` meet the close
                result = client.generate(
                    Decision, prompt="p", source=f"s{(number * 7 + index) % 40}"
                )
                results.append(result)
                if began_closed:
                    served_after.append(result)
            except Exception as error:  # (any kind: what is asserted is which)
                failures.append(error)
                if began_closed:
                    after.append(error)
                    seen += 1

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
    assert len(after) == THREADS * CLOSED_CALLS  # a closed store stays closed, in every thread
    assert served_after == []
    # Every answer the provider gave was returned (one a closed store did not take, with a note).
    asked = [result for result in results if not result.cached]
    assert len(provider.requests) == len(asked)
    assert {result.value.answer for result in results} == {"approve"}
    for result in asked:
        kinds = [note.kind for note in result.notes]
        assert kinds in ([], ["cache_not_stored"])
        if kinds:
            assert "closed" in str(result.notes[0].received)
    for use in (lambda: store.get("k"), lambda: store.stats(), lambda: store.clear(),
                lambda: store.put("k", Entry((TestProvider.refusal("x"),)))):  # fmt: skip
        with pytest.raises(CacheClosed, match="closed"):
            use()


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_a_closed_store_says_so_in_a_thread_that_never_used_it_and_closes_again_quietly(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = _store(kind, tmp_path, request)
    store.put("k", Entry((TestProvider.refusal("x"),)))
    store.close()
    store.close()  # nothing more
    raised: list[BaseException] = []

    def look() -> None:
        try:
            store.get("k")
        except BaseException as error:
            raised.append(error)

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(WAIT)
    assert [type(error) for error in raised] == [CacheClosed]
    assert _named(store) in str(raised[0]) and "closed" in str(raised[0])
    again = _store(kind, tmp_path, request) if kind == "sqlite" else None
    if again is not None:  # a new store over the same file serves what the closed one stored
        found = again.get("k")
        assert found is not None and found.completions[0].refusal == "x"
        again.close()


def test_redis_close_waits_for_a_call_under_way_which_finishes(
    redis_url: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The server holds the call (`CLIENT PAUSE`) while another thread closes the store: the call
    finishes with its answer (it was cut short by the teardown: a raw error of redis-py)."""
    store = _store("redis", tmp_path, request)
    assert isinstance(store, RedisCache)
    store.put("k", Entry((TestProvider.refusal("held"),)))
    raw = redis.Redis.from_url(redis_url, socket_timeout=WAIT)
    got: list[object] = []

    def look() -> None:
        try:
            found = store.get("k")
            got.append(found.completions[0].refusal if found is not None else None)
        except BaseException as error:
            got.append(error)

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
    with pytest.raises(CacheClosed, match=r"is closed \(reading an entry\)"):
        store.get("k")
