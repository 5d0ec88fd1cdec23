"""`RedisCache` against a real `redis-server` (started on a free port by a fixture): the same key
as every store, the same damage rules as `SQLiteCache` (a damaged entry is a miss, replaced, with
a note; a server that cannot be used is one `CacheServerError` naming it without credentials),
threads and processes at once, and a job that goes on without a server that went away.
"""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from contracts import Decision
from sdk import StructuredClient
from sdk.cache import BestEffortCache
from sdk.cache import CacheServerError
from sdk.cache import Entry
from sdk.cache import RedisCache
from sdk.cache import SQLiteCache
from sdk.cache._entry import FORMAT
from sdk.providers import TestProvider
from tests.redis_support import redis_server
from tests.shared_file_process import WAIT
from tests.shared_file_process import together
from tests.shared_file_process import wait_for

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})
THREADS, PROCESSES, ROUNDS = 16, 3, 3


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


_prefixes = iter(range(1_000_000))


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisCache]:
    """A store under a prefix of its own (tests share one server)."""
    cache = RedisCache(redis_url, prefix=f"t{next(_prefixes)}:")
    yield cache
    cache.close()


def _raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=WAIT)


def _client(cache: object) -> tuple[StructuredClient, TestProvider]:
    provider = TestProvider([ANSWER], repeat=True)
    return StructuredClient(provider, cache=cache), provider  # type: ignore[arg-type]


def test_a_call_asked_again_is_answered_from_redis(store: RedisCache) -> None:
    client, provider = _client(store)
    asked = [client.generate(Decision, prompt=p).cached for p in ("a", "a", "b", "a")]
    assert asked == [False, True, False, True] and len(provider.requests) == 2
    stats = store.stats()
    assert (stats.entries, stats.hits, stats.misses) == (2, 2, 2) and stats.bytes > 0
    assert store.clear() == 2 and store.stats().entries == 0
    assert not client.generate(Decision, prompt="a").cached


def test_a_url_asking_for_decoded_responses_still_hits(redis_url: str) -> None:
    # `?decode_responses=True` in the URL (redis-py lets the query win over the store's own
    # settings): a hit was a raw `AttributeError` ('str' object has no attribute 'decode').
    store = RedisCache(f"{redis_url}?decode_responses=True", prefix=f"t{next(_prefixes)}:")
    client, provider = _client(store)
    asked = [client.generate(Decision, prompt="a").cached for _ in range(3)]
    assert asked == [False, True, True] and len(provider.requests) == 1
    assert store.stats().entries == 1 and store.clear() == 1
    store.close()


def test_the_key_is_the_same_as_every_store_s(store: RedisCache, tmp_path: Path) -> None:
    """One key for a call, whichever store keeps it (what decides the answer, nothing else)."""
    sqlite = SQLiteCache(tmp_path / "c.db")
    for cache in (store, sqlite):
        client, _ = _client(cache)
        for prompt in ("a", "b"):
            client.generate(Decision, prompt=prompt, source=f"source {prompt}")
    sqlite.close()
    with sqlite3.connect(tmp_path / "c.db") as db:
        in_sqlite = {key for (key,) in db.execute("SELECT key FROM entries")}
    in_redis = {
        name.decode().removeprefix(f"{store.prefix}e:")
        for name in _raw(store.url).scan_iter(match=f"{store.prefix}e:*")
    }
    assert in_redis == in_sqlite and len(in_redis) == 2


def test_entries_expire_in_redis(store: RedisCache, redis_url: str) -> None:
    short = RedisCache(redis_url, prefix=store.prefix, ttl=30)
    short.put("k", Entry((TestProvider.refusal("x"),)))
    assert 0 < _raw(redis_url).pttl(f"{store.prefix}e:k") <= 30_000
    forever = RedisCache(redis_url, prefix=store.prefix, ttl=None)
    forever.put("k", Entry((TestProvider.refusal("x"),)))
    assert _raw(redis_url).pttl(f"{store.prefix}e:k") == -1


# --- damage: a miss, replaced, with a note ---


def _stored_key(store: RedisCache) -> str:
    (name,) = list(_raw(store.url).scan_iter(match=f"{store.prefix}e:*"))
    return str(name.decode())


DAMAGE = {
    "not an entry": lambda r, k: r.set(k, b"{not json"),
    "not UTF-8": lambda r, k: r.set(k, b"sdk-cache-entry/%d \xff\xfe" % FORMAT),
    # A valid answer of its own, but not the one stored (a byte changed: the checksum's case).
    "one letter of the answer changed": lambda r, k: r.set(
        k, r.get(k).replace(b"Within policy", b"Within polica")
    ),
    "cut short": lambda r, k: r.set(k, r.get(k)[:-5]),
    "a hash under the key": lambda r, k: (r.delete(k), r.hset(k, "a", "b")),
    "a list under the key": lambda r, k: (r.delete(k), r.rpush(k, "a")),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_a_miss_replaced_with_a_note(store: RedisCache, damage: str) -> None:
    client, provider = _client(store)
    client.generate(Decision, prompt="a")
    key = _stored_key(store)
    DAMAGE[damage](_raw(store.url), key)
    again = client.generate(Decision, prompt="a")
    assert not again.cached and again.value.answer == "approve" and len(provider.requests) == 2
    assert [note.kind for note in again.notes] == ["cache_damaged"]
    assert client.generate(Decision, prompt="a").cached  # replaced (whatever type was there)
    assert _raw(store.url).type(key) == b"string"


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(stored=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_under_an_entry_s_key_are_a_hit_or_a_miss(
    store: RedisCache, stored: bytes
) -> None:
    client, _ = _client(store)
    client.generate(Decision, prompt="a")
    _raw(store.url).set(_stored_key(store), stored)
    assert client.generate(Decision, prompt="a").value.answer == "approve"
    assert client.generate(Decision, prompt="a").cached
    store.clear()


# --- a server that cannot be used: one typed error naming it ---


def test_a_prefix_another_application_uses_is_refused_and_left(redis_url: str) -> None:
    raw = _raw(redis_url)
    raw.set("other:format", "some-app/2")
    raw.hset("third:format", "a", "b")
    for prefix in ("other:", "third:"):
        with pytest.raises(CacheServerError, match="not a structured-sdk cache's"):
            RedisCache(redis_url, prefix=prefix)
    assert raw.get("other:format") == b"some-app/2" and raw.hgetall("third:format") == {
        b"a": b"b"}  # fmt: skip


def test_a_wrong_password_is_a_typed_error_without_it(redis_url: str, tmp_path: Path) -> None:
    with redis_server(tmp_path, "--requirepass", "right-secret") as url:
        locked = url.replace("redis://", "redis://:wrong-secret-7@")
        with pytest.raises(CacheServerError) as caught:
            RedisCache(locked)
        assert "wrong-secret-7" not in str(caught.value) and "127.0.0.1" in str(caught.value)
        works = RedisCache(url.replace("redis://", "redis://:right-secret@"))
        assert "right-secret" not in repr(works) and works.stats().entries == 0


# A server gone refuses the connection at once; the timeout only bounds a command to the live
# server, which a loaded machine can stall for a second or two (10 s, not the 2 s it was).
ALIVE_TIMEOUT = 10.0


def test_a_server_gone_is_a_typed_error_before_anything_is_sent(tmp_path: Path) -> None:
    with redis_server(tmp_path) as url:
        store = RedisCache(url, timeout=ALIVE_TIMEOUT)
        client, provider = _client(store)
        client.generate(Decision, prompt="a")
    with pytest.raises(CacheServerError, match=r"127\.0\.0\.1") as caught:
        client.generate(Decision, prompt="a")
    assert not isinstance(caught.value, redis.RedisError) and len(provider.requests) == 1
    with pytest.raises(CacheServerError):
        RedisCache(url, timeout=ALIVE_TIMEOUT)


def test_a_job_goes_on_without_a_server_that_went_away_and_says_so_once(tmp_path: Path) -> None:
    said: list[str] = []
    with redis_server(tmp_path) as url:
        store = BestEffortCache(lambda: RedisCache(url, timeout=ALIVE_TIMEOUT), say=said.append)
        client, provider = _client(store)
        assert [client.generate(Decision, prompt="a").cached for _ in range(2)] == [False, True]
    results = [client.generate(Decision, prompt=f"p{n}") for n in range(4)]
    assert all(r.value.answer == "approve" and not r.cached for r in results)
    assert len(said) == 1 and "127.0.0.1" in said[0] and len(provider.requests) == 5


def test_a_store_pickles_as_its_url_and_opens_its_own_connections(store: RedisCache) -> None:
    client, _ = _client(store)
    client.generate(Decision, prompt="a")
    copy = pickle.loads(pickle.dumps(store))
    assert (copy.url, copy.prefix, copy.ttl) == (store.url, store.prefix, store.ttl)
    again, provider = _client(copy)
    assert again.generate(Decision, prompt="a").cached and provider.requests == []


# --- many at once ---


def test_threads_and_processes_share_one_server_at_once(redis_url: str, tmp_path: Path) -> None:
    """THREADS threads here and in each of PROCESSES processes, behind a barrier and a go file:
    each makes a store, asks a call twice (a miss, then a hit) and one call every process asks."""
    from tests.shared_file_process import open_redis

    gate = tmp_path / "gate"
    for round_ in range(ROUNDS):
        (gate / str(round_)).mkdir(parents=True)
    command = [sys.executable, "-m", "tests.shared_file_process", "redis", redis_url, str(gate),
               str(THREADS), str(ROUNDS)]  # fmt: skip
    runs = [
        subprocess.Popen(
            command, cwd=REPO, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(PROCESSES)
    ]
    failures: list[str] = []
    try:
        for round_ in range(ROUNDS):
            folder, prefix = gate / str(round_), f"round-{round_}:"
            here = threading.Thread(target=lambda f=folder, p=prefix: failures.extend(
                together(THREADS, f, lambda n: open_redis(redis_url, p, n))))  # fmt: skip
            here.start()
            wait_for(lambda f=folder: len(list(f.glob("ready-*"))) == PROCESSES + 1, "all")  # type: ignore[misc]
            (folder / "go").touch()
            here.join(WAIT)
        for run in runs:
            out, err = run.communicate(timeout=WAIT)
            assert run.returncode == 0, err
            failures.extend(json.loads(out))
    finally:
        for run in runs:
            run.kill()
    assert failures == []
    for round_ in range(ROUNDS):
        stats = RedisCache(redis_url, prefix=f"round-{round_}:").stats()
        # One entry per thread, and the THREADS calls every thread shares.
        assert stats.entries == THREADS * (PROCESSES + 1) + THREADS
        assert stats.hits + stats.misses == 3 * THREADS * (PROCESSES + 1)
