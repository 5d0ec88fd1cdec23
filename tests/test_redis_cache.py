"""`RedisCache` against a real `redis-server` (started on a free port by a fixture): the same key
as every store, the same damage rules as `SQLiteCache` (a damaged entry is a miss, replaced, with
a note; a server that cannot be used is one `CacheServerError` naming it without credentials),
threads and processes at once, and a job that goes on without a server that went away.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import pickle
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from contracts import Decision
from sdk import StructuredClient
from sdk.cache import BestEffortCache
from sdk.cache import CacheClosed
from sdk.cache import CacheServerError
from sdk.cache import Entry
from sdk.cache import RedisCache
from sdk.cache import SQLiteCache
from sdk.cache._entry import FORMAT
from sdk.cache._redis import _LOOKUP
from sdk.cache._redis import _REFUSAL
from sdk.providers import TestProvider
from tests.redis_support import redis_server
from tests.shared_file_process import WAIT
from tests.shared_file_process import together
from tests.shared_file_process import wait_for

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})
THREADS, PROCESSES, ROUNDS = 16, 3, 3
_SCRIPTS = (_LOOKUP, _REFUSAL)


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
    # An entry of bytes that are not UTF-8 is damaged, a miss replaced: redis-py's decoding
    # raised a raw `UnicodeDecodeError` at every call for that key.
    (name,) = _raw(redis_url).scan_iter(match=f"{store.prefix}e:*")
    _raw(redis_url).set(name, b"\xff\xfe not text")
    damaged = client.generate(Decision, prompt="a")
    assert not damaged.cached and "cache_damaged" in [note.kind for note in damaged.notes]
    assert client.generate(Decision, prompt="a").cached and len(provider.requests) == 2
    assert store.stats().entries == 1 and store.clear() == 1
    store.close()


def test_stats_count_a_damaged_entry_and_counters_that_are_not_a_hash(
    store: RedisCache, redis_url: str
) -> None:
    """Another Redis type under one entry's key (which `get` takes as a damaged entry) made
    all of `stats()` fail (WRONGTYPE, blamed on the server); so did counters that are not a
    hash, which the store documents as uncounted."""
    client, _ = _client(store)
    for prompt in ("a", "b", "c"):
        client.generate(Decision, prompt=prompt)
    raw = _raw(redis_url)
    name = next(iter(raw.scan_iter(match=f"{store.prefix}e:*")))
    raw.delete(name)
    raw.hset(name, "not", "an entry")
    counted = store.stats()
    assert counted.entries == 3 and counted.misses == 3
    raw.delete(f"{store.prefix}counters")
    raw.set(f"{store.prefix}counters", "not a hash")
    assert store.stats().entries == 3 and store.stats().misses == 0


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


def test_a_ttl_under_a_millisecond_is_stored_not_refused_by_the_server(
    store: RedisCache, redis_url: str
) -> None:
    # `ttl` admits any positive number of seconds; Redis's `PX` a whole number of milliseconds
    # of at least 1. On main `ttl=0.0004` sent `PX 0`: every `put` raised CacheServerError
    # ("invalid expire time"), and every call said its answer was not stored.
    short = RedisCache(redis_url, prefix=store.prefix, ttl=0.0004)
    client, provider = _client(short)
    result = client.generate(Decision, prompt="a")
    assert [note.kind for note in result.notes if note.kind.startswith("cache")] == []
    assert len(provider.requests) == 1
    short.put("k", Entry((TestProvider.refusal("x"),)))  # stored, for a moment
    short.close()


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


@pytest.mark.parametrize("first", ["outer", "inner"])
def test_a_cache_among_another_s_entries_keys_is_refused_either_way(
    redis_url: str, first: str
) -> None:
    """Entries live at `PREFIX e:KEY`: a cache at `PREFIX e:x:` had its entries, mark and
    counters counted by the other's `stats()` (which then failed, WRONGTYPE) and dropped by
    its `clear()`. Whichever is made second is refused, and nothing of the first is changed;
    a cache nested beside the entries (`PREFIX team-a:`) is still taken."""
    outer = f"n{next(_prefixes)}:"
    inner = f"{outer}e:x:"
    made = RedisCache(redis_url, prefix=outer if first == "outer" else inner)
    client, _ = _client(made)
    client.generate(Decision, prompt="kept")
    raw = _raw(redis_url)
    before = sorted(raw.scan_iter(match=f"{outer}*"))
    with pytest.raises(CacheServerError, match=r"among|another cache's") as refused:
        RedisCache(redis_url, prefix=inner if first == "outer" else outer)
    assert made.prefix in str(refused.value)
    assert sorted(raw.scan_iter(match=f"{outer}*")) == before  # nothing written, nothing lost
    assert made.stats().entries == 1 and client.generate(Decision, prompt="kept").cached
    beside = RedisCache(redis_url, prefix=f"{outer}team-a:")
    assert beside.stats().entries == 0
    made.close()
    beside.close()
    # Another application's key of another type where an enclosing mark would be is no mark,
    # and no error (it was WRONGTYPE, failing a legitimate prefix).
    other = f"o{next(_prefixes)}"
    raw.hset(f"{other}format", "a", "b")
    RedisCache(redis_url, prefix=f"{other}e:x:").close()


def test_a_server_that_does_not_answer_is_asked_once_per_call_not_again() -> None:
    """redis-py retries a timed-out command by default: a call on a server that stopped
    answering waited twice its `timeout`, making a store four times. A server that takes
    connections and answers nothing here counts how often it was asked: once."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    connections: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                connections.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        with pytest.raises(CacheServerError, match="Timeout"):
            RedisCache(f"redis://127.0.0.1:{port}/0", timeout=0.2)
        assert len(connections) == 1
    finally:
        listener.close()
        for connection in connections:
            connection.close()


def test_a_cache_nested_while_its_outer_one_is_made_is_never_called_another_application_s(
    redis_url: str,
) -> None:
    """An outer cache made at the moment a cache nested under it (`P` and `P team:`) was made
    and written to: the outer one looked for nested marks, then for keys outside its layout,
    and took the nested cache's keys, marked between the two, for another application's
    (2 of 30 tries in the probe). Threads behind a barrier, many tries: never refused."""
    refused: list[str] = []

    def attempt(prefix: str, barrier: threading.Barrier, nested: bool) -> None:
        barrier.wait(timeout=WAIT)
        try:
            made = RedisCache(redis_url, prefix=prefix)
            if nested:
                for index in range(20):
                    made.put(f"{index:064x}", Entry((TestProvider.refusal("x"),)))
            made.close()
        except CacheServerError as error:
            refused.append(str(error))

    for _ in range(40):
        outer = f"race{next(_prefixes)}:"
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(target=attempt, args=(outer, barrier, False)),
            threading.Thread(target=attempt, args=(f"{outer}team:", barrier, True)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT)
            assert not thread.is_alive()
    assert refused == []


def _make_or_refuse(url: str, prefix: str) -> str:
    try:
        RedisCache(url, prefix=prefix).close()
    except CacheServerError:
        return "refused"
    return "made"


def _race_in_process(url: str, prefix: str, barrier: Any, out: Any) -> None:
    for round_ in range(_PROCESS_ROUNDS):
        barrier.wait(timeout=WAIT)
        out.put((round_, prefix, _make_or_refuse(url, f"p{round_}{prefix}")))


_PROCESS_ROUNDS = 25


def test_a_cache_and_one_among_its_entries_made_at_once_are_never_both_made(
    redis_url: str,
) -> None:
    """`P` and `P e:` (among `P`'s entries' keys) made at the same moment: each looked for the
    other before either had marked its prefix, and both were made in 99 of 100 rounds of the
    probe (processes behind a barrier); the outer one's `clear` then dropped the inner one's
    keys. Each looks again once marked: never both (threads, then processes)."""
    for _ in range(40):
        outer = f"nest{next(_prefixes)}:"
        barrier = threading.Barrier(2, timeout=WAIT)
        got: dict[str, str] = {}

        def make(
            prefix: str, barrier: threading.Barrier = barrier, got: dict[str, str] = got
        ) -> None:
            barrier.wait()
            got[prefix] = _make_or_refuse(redis_url, prefix)

        threads = [threading.Thread(target=make, args=(p,)) for p in (outer, f"{outer}e:")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT)
            assert not thread.is_alive()
        assert list(got.values()).count("made") <= 1, got
    spawn = multiprocessing.get_context("spawn")
    barrier, out = spawn.Barrier(2), spawn.Queue()
    outer = f"nestp{next(_prefixes)}:"
    children = [
        spawn.Process(target=_race_in_process, args=(redis_url, prefix, barrier, out))
        for prefix in (outer, f"{outer}e:")
    ]
    for child in children:
        child.start()
    rounds: dict[int, list[str]] = {}
    for _ in range(2 * _PROCESS_ROUNDS):
        round_, _prefix, made = out.get(timeout=WAIT)
        rounds.setdefault(round_, []).append(made)
    for child in children:
        child.join(timeout=WAIT)
        assert child.exitcode == 0
    assert all(outcomes.count("made") <= 1 for outcomes in rounds.values()), rounds


def test_many_stores_of_a_cache_and_one_among_its_entries_made_at_once_hold_one_prefix(
    redis_url: str,
) -> None:
    """Six stores of `P` and six of `P e:x:` made at once (a pool of workers each opening the
    store it was given): the store that marked its prefix looked again, saw the other cache and
    gave its mark back, but a store of its prefix that had read the mark meanwhile was made
    without looking: stores of both prefixes were made in the first round of every probe run,
    and the outer one's `clear` dropped the inner one's keys. Now every round, every store of
    one prefix is made and every store of the other refused, and that prefix alone is marked."""
    each = 6
    for _ in range(15):
        outer = f"m{next(_prefixes)}:"
        inner = f"{outer}e:x:"
        barrier = threading.Barrier(2 * each, timeout=WAIT)
        got: list[tuple[str, str]] = []

        def make(
            prefix: str, barrier: threading.Barrier = barrier, got: list[tuple[str, str]] = got
        ) -> None:
            barrier.wait()
            got.append((prefix, _make_or_refuse(redis_url, prefix)))

        threads = [
            threading.Thread(target=make, args=(prefix,)) for prefix in [outer, inner] * each
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT)
            assert not thread.is_alive()
        made = {prefix for prefix, outcome in got if outcome == "made"}
        assert len(got) == 2 * each and len(made) == 1, got
        (winner,) = made
        assert sorted(got).count((winner, "made")) == each, got  # none wrongly refused
        marks = sorted(name.decode() for name in _raw(redis_url).scan_iter(match=f"{outer}*"))
        assert marks == [f"{winner}format"], marks


def test_a_cache_among_the_entries_is_seen_on_a_database_too_large_to_read_through(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `_MARKING_SCANS` keys the marking script does not read through the database (it
    would hold the server): a prefix with a cache among its entries' keys, marked before, is
    refused all the same by the look before the script, and nothing of it changed."""
    from sdk.cache import _redis

    monkeypatch.setattr(_redis, "_MARKING_SCANS", 0)  # (this database is then "too large")
    outer = f"m{next(_prefixes)}:"
    RedisCache(redis_url, prefix=f"{outer}e:x:").stats()
    before = sorted(_raw(redis_url).scan_iter(match=f"{outer}*"))
    assert _make_or_refuse(redis_url, outer) == "refused"
    assert sorted(_raw(redis_url).scan_iter(match=f"{outer}*")) == before


def test_key_names_that_are_not_utf8_under_decode_responses_are_one_typed_error(
    redis_url: str,
) -> None:
    """With `decode_responses` in the URL, a key name under the prefix that is not UTF-8
    (another application's, or among the entries') raised a raw `UnicodeDecodeError` from the
    store's making, `stats()` and `clear()` (the entries' values were already a damaged entry)."""
    raw, url = _raw(redis_url), f"{redis_url}?decode_responses=True"
    foreign = f"kb{next(_prefixes)}:"
    raw.set(foreign.encode() + b"\xff\xfe", b"x")
    with pytest.raises(CacheServerError, match=r"not UTF-8 text.*decode_responses"):
        RedisCache(url, prefix=foreign)
    prefix = f"kb{next(_prefixes)}:"
    store = RedisCache(url, prefix=prefix)
    raw.set(prefix.encode() + b"e:\xff\xfe", b"x")
    for call in (store.stats, store.clear):
        with pytest.raises(CacheServerError, match="not UTF-8 text"):
            call()
    store.close()
    assert raw.get(prefix.encode() + b"e:\xff\xfe") == b"x"  # left as it is


def test_a_prefix_another_application_uses_is_refused_and_left(redis_url: str) -> None:
    raw = _raw(redis_url)
    raw.set("other:format", "some-app/2")
    raw.hset("third:format", "a", "b")
    for prefix in ("other:", "third:"):
        with pytest.raises(CacheServerError, match="not a structured-sdk cache's"):
            RedisCache(redis_url, prefix=prefix)
    assert raw.get("other:format") == b"some-app/2" and raw.hgetall("third:format") == {
        b"a": b"b"}  # fmt: skip


def test_a_prefix_holding_another_application_s_keys_without_a_mark_is_refused_and_left(
    redis_url: str,
) -> None:
    # On main: the store adopted the prefix, writing its mark among the other application's
    # keys (the caching guide says such a prefix is `CacheServerError`).
    raw = _raw(redis_url)
    prefix = f"app{next(_prefixes)}:"
    raw.set(f"{prefix}user:1", "alice")
    raw.hset(f"{prefix}session:9", "who", "bob")
    before = sorted(raw.scan_iter(match=f"{prefix}*"))
    with pytest.raises(CacheServerError, match=rf"{prefix}user:1|{prefix}session:9") as refused:
        RedisCache(redis_url, prefix=prefix)
    assert "another application's" in str(refused.value)
    assert sorted(raw.scan_iter(match=f"{prefix}*")) == before  # nothing written among them
    # A prefix holding only the cache's own layout, unmarked (the mark deleted by hand), is
    # adopted: its entries are the cache's.
    own = RedisCache(redis_url, prefix=f"own{next(_prefixes)}:")
    client, _ = _client(own)
    client.generate(Decision, prompt="a")  # (an entry and the counts: the cache's layout)
    mark = raw.get(f"{own.prefix}format")
    raw.delete(f"{own.prefix}format")
    again, provider = _client(RedisCache(redis_url, prefix=own.prefix))
    assert again.generate(Decision, prompt="a").cached and not provider.requests
    assert raw.get(f"{own.prefix}format") == mark


@pytest.mark.parametrize(
    "keys",
    [
        {"counters": ("hash", {"orders": "3", "visits": "9"})},
        {"counters": ("hash", {"hits": "1", "orders": "3"})},
        {"counters": ("string", "42")},
        {"counters": ("hash", {"hits": "1"}), "e:mails": ("list", ["a", "b"])},
        {"e:config": ("string", "x"), "e:seen": ("set", ["a"])},
        {"e:prefs": ("hash", {"a": "b"})},
    ],
    ids=["counters-other-fields", "counters-one-other", "counters-string", "entry-list",
         "entry-set", "entry-hash"],
)  # fmt: skip
def test_a_prefix_holding_another_application_s_keys_named_as_the_cache_s_is_refused_and_left(
    redis_url: str, keys: dict[str, tuple[str, Any]]
) -> None:
    """Another application's `P counters` (a hash of its own fields) and `P e:mails` (a list)
    under a prefix not marked were taken for the cache's layout by their names alone: the
    prefix was adopted, every lookup counted into the application's hash and `clear` dropped
    its keys. A key the cache cannot have written (an entry that is not a string, counters
    that are not a hash of its counts) is another application's: refused, nothing changed."""
    raw = _raw(redis_url)
    prefix = f"shop{next(_prefixes)}:"
    for name, (kind, value) in keys.items():
        key = f"{prefix}{name}"
        if kind == "hash":
            raw.hset(key, mapping=value)
        elif kind == "list":
            raw.rpush(key, *value)
        elif kind == "set":
            raw.sadd(key, *value)
        else:
            raw.set(key, value)
    before = {name: raw.dump(name) for name in raw.scan_iter(match=f"{prefix}*")}
    with pytest.raises(CacheServerError, match="another application's"):
        RedisCache(redis_url, prefix=prefix)
    after = {name: raw.dump(name) for name in raw.scan_iter(match=f"{prefix}*")}
    assert after == before  # no mark written, nothing dropped or counted


def test_a_cache_whose_prefix_holds_another_cache_s_prefix_is_made(redis_url: str) -> None:
    # A team's cache under `base:team-a:` made first, then one at `base:`: its keys are a
    # cache's, not another application's (the look for foreign keys first refused the second).
    raw = _raw(redis_url)
    base = f"base{next(_prefixes)}:"
    team, _ = _client(RedisCache(redis_url, prefix=f"{base}team-a:"))
    team.generate(Decision, prompt="a")
    outer, provider = _client(RedisCache(redis_url, prefix=base))
    assert not outer.generate(Decision, prompt="a").cached and len(provider.requests) == 1
    # Keys named like a mark that are no cache's (another word, another type) are foreign.
    fresh = f"fresh{next(_prefixes)}:"
    raw.set(f"{fresh}x:format", "some-app/2")
    raw.hset(f"{fresh}y:format", "a", "b")
    with pytest.raises(CacheServerError, match="another application's"):
        RedisCache(redis_url, prefix=fresh)


def test_a_call_close_cut_short_is_not_sent_again_on_a_new_connection(redis_url: str) -> None:
    """A lookup still running when `close()` gave up waiting for it (here: the server holds
    its writes, `CLIENT PAUSE WRITE`, longer than the wait) was not cut short: redis-py's one
    retry reconnected on the closed store's pool, sent it again and the call returned an entry
    seconds after `close()` returned (the lookup counted twice). It is `CacheClosed` now, at
    once, and not sent again."""
    store = RedisCache(redis_url, prefix=f"cl{next(_prefixes)}:")
    key = "ab" * 32
    store.put(key, Entry((TestProvider.refusal("x"),)))
    store.timeout = 0.3  # (close's wait, shorter than the 5 s each read may take)
    raw = _raw(redis_url)
    outcome: list[object] = []

    def look_up() -> None:
        try:
            outcome.append(store.get(key))
        except Exception as error:
            outcome.append(error)

    raw.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    try:
        thread = threading.Thread(target=look_up)
        thread.start()
        wait_for(lambda: any(c["cmd"] == "evalsha" for c in raw.client_list()), "the lookup held")
        store.close()
        thread.join(timeout=2)
        alive = thread.is_alive()
    finally:
        raw.execute_command("CLIENT", "UNPAUSE")
    thread.join(timeout=WAIT)
    assert not alive and len(outcome) == 1, outcome
    assert isinstance(outcome[0], CacheClosed), outcome
    assert raw.hget(f"{store.prefix}counters", "hits") is None  # (sent once, never run)


class _TricklingProxy:
    """A TCP proxy to the test server that, once `slow` is set, sends each reply's first
    bytes one at a time, `gap` seconds apart (no single read waits a whole `timeout`)."""

    def __init__(self, url: str, gap: float, bytes_slow: int) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.gap, self.bytes_slow, self.slow = gap, bytes_slow, False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                near = self.listener.accept()[0]
                far = socket.create_connection(self.target, timeout=WAIT)
                far.settimeout(None)
                self.sockets += [near, far]
                threading.Thread(target=self._pipe, args=(near, far, False), daemon=True).start()
                threading.Thread(target=self._pipe, args=(far, near, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if replies and self.slow:
                    for index in range(min(self.bytes_slow, len(data))):
                        time.sleep(self.gap)
                        sink.sendall(data[index : index + 1])
                    data = data[self.bytes_slow :]
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()
        for end in self.sockets:
            end.close()


def test_a_lookup_on_a_server_that_answers_a_byte_at_a_time_waits_at_most_timeout(
    redis_url: str,
) -> None:
    """`timeout` bounded each read, not the round trip: a server (or a proxy in front of it)
    sending a byte of the reply every 0.3 s held a lookup with `timeout=0.5` for as long as
    it went on (27 s in the probe). The whole round trip ends at `timeout` now: one
    `CacheServerError` saying it timed out, and the next call, the server quick again, works."""
    proxy = _TricklingProxy(redis_url, gap=0.3, bytes_slow=12)
    try:
        store = RedisCache(proxy.url, prefix=f"tr{next(_prefixes)}:", timeout=0.5)
        key = "cd" * 32
        store.put(key, Entry((TestProvider.refusal("x"),)))
        proxy.slow = True
        began = time.monotonic()
        with pytest.raises(CacheServerError, match="Timeout"):
            store.get(key)
        assert time.monotonic() - began < 1.5
        proxy.slow = False
        assert store.get(key) is not None
        store.close()
    finally:
        proxy.close()


def test_a_url_that_is_not_text_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match=r"RedisCache\(\): url must be a Redis URL"):
        RedisCache(12345)  # type: ignore[arg-type]


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


# --- the scripts ---


def _counting_registrations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scripts redis-py is asked to register from now on (its own `register_script`, run)."""
    registered: list[str] = []
    register = redis.Redis.register_script

    def counted(self: redis.Redis, script: Any) -> Any:
        registered.append(script)
        return register(self, script)

    monkeypatch.setattr(redis.Redis, "register_script", counted)
    return registered


def _look_up_and_refuse(store: RedisCache, key: str) -> None:
    store.put(key, Entry((TestProvider.refusal(key),)))
    assert store.get(key) is not None
    store.refuse(key)
    assert store.get(key) is None


def test_a_store_registers_its_scripts_once_whatever_its_threads_do(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THREADS threads behind a barrier, each finding and refusing entries ROUNDS times: the
    two scripts (lookup, refusal) are registered once for the store (the refusal was registered
    again on every `refuse`), and every count is exact."""
    registered = _counting_registrations(monkeypatch)
    store = RedisCache(redis_url, prefix=f"t{next(_prefixes)}:")
    barrier = threading.Barrier(THREADS, timeout=WAIT)
    failures: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            barrier.wait()
            for round_ in range(ROUNDS):
                _look_up_and_refuse(store, f"k{thread}-{round_}")
        except BaseException as error:  # (reported below, with the thread's own traceback)
            failures.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert failures == [] and not any(thread.is_alive() for thread in threads)
    assert len(registered) == 2 and len(set(registered)) == 2
    stats = store.stats()
    # Each round: a hit refused (a miss), then a miss.
    assert (stats.hits, stats.misses, stats.refused) == (0, 2 * THREADS * ROUNDS, THREADS * ROUNDS)
    store.close()


def test_a_server_that_forgot_the_scripts_is_given_them_again(
    store: RedisCache, redis_url: str
) -> None:
    """`SCRIPT FLUSH` (or a restart without persistence) drops every script the server knew:
    the store's next lookup and refusal load theirs again, and count as before."""
    _look_up_and_refuse(store, "before")
    server = _raw(redis_url)
    server.script_flush()
    assert server.script_exists(*(hashlib.sha1(s.encode()).hexdigest() for s in _SCRIPTS)) == [
        False, False]  # fmt: skip
    _look_up_and_refuse(store, "after")
    assert server.script_exists(*(hashlib.sha1(s.encode()).hexdigest() for s in _SCRIPTS)) == [
        True, True]  # fmt: skip
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.refused) == (0, 4, 2)


def _child_looks_up_and_refuses(store: RedisCache, barrier: Any, child: int) -> None:
    barrier.wait(WAIT)
    for round_ in range(ROUNDS):
        _look_up_and_refuse(store, f"child{child}-{round_}")


def test_forked_children_use_the_parent_s_scripts_on_connections_of_their_own(
    store: RedisCache, redis_url: str
) -> None:
    """PROCESSES children forked from a process whose store has connected and run its scripts,
    on a server that forgot them since, behind a barrier: each looks up and refuses through
    the scripts it inherited (loaded again where the server lacks them), on its own connection,
    and every count lands; the parent's store goes on working."""
    _look_up_and_refuse(store, "parent")
    _raw(redis_url).script_flush()
    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(PROCESSES)
    children = [
        fork.Process(target=_child_looks_up_and_refuses, args=(store, barrier, n))
        for n in range(PROCESSES)
    ]
    try:
        for child in children:
            child.start()
        for child in children:
            child.join(WAIT)
        assert [child.exitcode for child in children] == [0] * PROCESSES
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
    _look_up_and_refuse(store, "parent again")
    stats = store.stats()
    done = PROCESSES * ROUNDS + 2
    assert (stats.hits, stats.misses, stats.refused) == (0, 2 * done, done)
