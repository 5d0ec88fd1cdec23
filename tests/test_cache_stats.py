"""What `stats()` (and so `sdk cache stats`) counts is what happened, on every store.

- A hit is a stored answer served. One the call then refuses (a damaged entry, or a stored
  answer today's checks reject: the provider is asked and the entry replaced) is a miss, and
  `refused` says how many there were; a store written against the `Cache` protocol alone (no
  `refuse`) still works.
- A `clear` starts the counts afresh for every process: counts another process kept in memory
  from before it are never written after it (real processes behind a barrier).
- A damaged count (not a whole number) is counted on from 0, and never fails a lookup.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sdk import StructuredClient
from sdk.cache import BestEffortCache
from sdk.cache import Cache
from sdk.cache import CacheStats
from sdk.cache import Entry
from sdk.cache import MemoryCache
from sdk.cache import RedisCache
from sdk.cache import SQLiteCache
from sdk.providers import TestProvider
from tests.cache_support import Verdict
from tests.cache_support import tightened
from tests.redis_support import redis_server
from tests.shared_file_process import WAIT
from tests.shared_file_process import wait_for

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}

ESCALATE, APPROVE = json.dumps({"answer": "escalate"}), json.dumps({"answer": "approve"})


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


_prefixes = iter(range(1_000_000))

STORES: dict[str, Callable[[Path, str], Any]] = {
    "memory": lambda folder, url: MemoryCache(),
    "sqlite": lambda folder, url: SQLiteCache(folder / "c.db"),
    "redis": lambda folder, url: RedisCache(url, prefix=f"stats{next(_prefixes)}:"),
    "best-effort sqlite": lambda folder, url: BestEffortCache(lambda: SQLiteCache(folder / "c.db")),
}


@pytest.fixture(params=list(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    url = request.getfixturevalue("redis_url") if "redis" in request.param else ""
    made = STORES[request.param](tmp_path, url)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def _keys(store: Any) -> list[str]:
    """The keys a store holds (each store's own way: the test reads, the call does not)."""
    if isinstance(store, BestEffortCache):
        return _keys(store._store)
    if isinstance(store, MemoryCache):
        return list(store._entries)
    if isinstance(store, SQLiteCache):
        db = sqlite3.connect(store.path)
        try:
            return [key for (key,) in db.execute("SELECT key FROM entries")]
        finally:
            db.close()
    assert isinstance(store, RedisCache)
    raw = redis.Redis.from_url(store.url, socket_timeout=WAIT)
    try:
        start = len(f"{store.prefix}e:")
        return [name.decode()[start:] for name in raw.scan_iter(match=f"{store.prefix}e:*")]
    finally:
        raw.close()


def test_a_stored_answer_today_s_checks_refuse_is_a_miss_not_a_hit(store: Any) -> None:
    provider = TestProvider([ESCALATE, APPROVE])
    client = StructuredClient(provider, cache=store)
    assert client.generate(Verdict, prompt="Verdict?").value.answer == "escalate"  # a miss
    with tightened():
        asked = client.generate(Verdict, prompt="Verdict?")  # found, refused: the provider asked
    assert not asked.cached and asked.value.answer == "approve" and len(provider.requests) == 2
    served = client.generate(Verdict, prompt="Verdict?")  # the replacement: a hit
    assert served.cached and served.value.answer == "approve"
    stats = store.stats()
    assert (stats.hits, stats.misses) == (1, 2) and stats.refused == 1  # (before: 2 hits, 1 miss)
    assert store.clear() == 1
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.refused) == (0, 0, 0)  # a clear starts them afresh


def test_a_damaged_entry_is_a_miss_not_a_hit(store: Any) -> None:
    provider = TestProvider([APPROVE], repeat=True)
    client = StructuredClient(provider, cache=store)
    client.generate(Verdict, prompt="Verdict?")  # a miss, stored
    [key] = _keys(store)
    _plant(store, key, "{not an entry")  # what the store now hands back: damaged
    asked = client.generate(Verdict, prompt="Verdict?")
    assert not asked.cached and [note.kind for note in asked.notes] == ["cache_damaged"]
    assert client.generate(Verdict, prompt="Verdict?").cached  # replaced: a hit
    assert len(provider.requests) == 2
    stats = store.stats()
    assert (stats.hits, stats.misses) == (1, 2) and stats.refused == 1  # (before: 2 hits, 1 miss)
    assert "1 hits, 2 misses (hit rate 33%), 0 expired, 1 refused" in store.stats().lines()


def _plant(store: Any, key: str, text: str) -> None:
    """`text` stored under `key` the store's own way (its `put` refuses an entry a read would
    call damaged: damage happens in the store)."""
    if isinstance(store, BestEffortCache):
        _plant(store._store, key, text)
    elif isinstance(store, MemoryCache):
        store._entries[key] = (Entry.stored(text), None)
    elif isinstance(store, SQLiteCache):
        with sqlite3.connect(store.path) as db:
            db.execute("UPDATE entries SET value = ? WHERE key = ?", (text, key))
        db.close()
    else:
        assert isinstance(store, RedisCache)
        raw = redis.Redis.from_url(store.url, socket_timeout=WAIT)
        try:
            assert raw.set(f"{store.prefix}e:{key}", text, keepttl=True, xx=True)
        finally:
            raw.close()


class _ProtocolOnly:
    """A store written against the `Cache` protocol's five methods (no `refuse`)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.discarded: list[str] = []

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def put(self, key: str, entry: Entry) -> None:
        self.entries[key] = entry

    def discard(self, key: str) -> None:
        self.discarded.append(key)
        self.entries.pop(key, None)

    def stats(self) -> CacheStats:
        return CacheStats(len(self.entries), 0, 0, 0)

    def clear(self) -> int:
        count = len(self.entries)
        self.entries.clear()
        return count


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_store_without_refuse_still_works_its_refused_entries_discarded(wrapped: bool) -> None:
    third: _ProtocolOnly = _ProtocolOnly()
    store: Cache = BestEffortCache(lambda: third) if wrapped else third
    provider = TestProvider([ESCALATE, APPROVE])
    client = StructuredClient(provider, cache=store)
    client.generate(Verdict, prompt="Verdict?")
    with tightened():
        asked = client.generate(Verdict, prompt="Verdict?")
    assert asked.value.answer == "approve" and len(third.discarded) == 1
    assert client.generate(Verdict, prompt="Verdict?").cached


@pytest.mark.parametrize("refusal", ["damaged", "refused by today's checks"])
def test_an_entry_a_read_only_store_cannot_drop_is_not_served_and_the_provider_asked(
    tmp_path: Path, refusal: str
) -> None:
    path = tmp_path / "c.db"
    StructuredClient(TestProvider([ESCALATE]), cache=SQLiteCache(path)).generate(
        Verdict, prompt="Verdict?"
    )
    if refusal == "damaged":
        db = sqlite3.connect(path)
        db.execute("UPDATE entries SET value = '{not an entry'")
        db.commit()
        db.close()
    provider = TestProvider([APPROVE])
    client = StructuredClient(provider, cache=SQLiteCache(path, readonly=True))
    # (before: CacheFileError "opened read-only", dropping the entry, and nothing asked)
    with tightened(refusal != "damaged"):
        asked = client.generate(Verdict, prompt="Verdict?")
    assert not asked.cached and asked.value.answer == "approve" and len(provider.requests) == 1
    kinds = [note.kind for note in asked.notes]
    assert kinds == ["cache_damaged", "cache_not_stored"][refusal != "damaged" :]


# --- a clear in one process while others hold counts in memory ---

COUNTERS = 3  # processes counting lookups, beside the one that clears


def _lookups_around_a_clear(path: str, clears: bool, gate: Any) -> None:
    """In a process of its own: lookups counted in memory (5 hits, 1 miss), then, behind the
    gate, one process clears while the others still hold those counts; then each looks up an
    answer of its own (a miss), stores it (a write), finds it twice (2 hits), and closes (the
    counts written)."""
    store = SQLiteCache(path)
    for _ in range(5):
        assert store.get("before") is not None
    assert store.get("no such key") is None
    gate.wait()  # every process holds 6 counts, unwritten
    if clears:
        store.clear()
    gate.wait()  # cleared
    own = f"after-{clears}-{multiprocessing.current_process().pid}"
    assert store.get(own) is None
    store.put(own, Entry((TestProvider.refusal(own),)))
    for _ in range(2):
        assert store.get(own) is not None
    store.close()


def test_a_clear_in_one_process_drops_the_counts_others_held_from_before_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    first = SQLiteCache(path)
    first.put("before", Entry((TestProvider.refusal("before"),)))
    first.close()
    fork = multiprocessing.get_context("fork")
    gate = fork.Barrier(COUNTERS + 1, timeout=WAIT)
    workers = [
        fork.Process(target=_lookups_around_a_clear, args=(str(path), n == 0, gate))
        for n in range(COUNTERS + 1)
    ]
    for worker in workers:
        worker.start()
    try:
        for worker in workers:
            worker.join(WAIT)
            assert worker.exitcode == 0
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
    stats = SQLiteCache(path, readonly=True).stats()
    # Only the lookups after the clear, every one of them: a miss and 2 hits in each process
    # (before: 3 x 6 lookups more).
    processes = COUNTERS + 1
    assert (stats.entries, stats.hits, stats.misses) == (processes, 2 * processes, processes)


def _damage_counter(store: Any, name: str, value: str) -> None:
    """A counter of the store overwritten by a value that is not a whole number (a byte damaged,
    a hand edit), the way each store holds it."""
    if isinstance(store, SQLiteCache):
        db = sqlite3.connect(store.path)
        try:
            with db:  # (an INTEGER column keeps a fraction as a REAL)
                db.execute(
                    "INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)",
                    (name, float(value)),
                )
        finally:
            db.close()
        return
    assert isinstance(store, RedisCache)
    raw = redis.Redis.from_url(store.url, socket_timeout=WAIT)
    try:
        raw.hset(f"{store.prefix}counters", name, value)
    finally:
        raw.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("name", ["hits", "misses"])
def test_a_damaged_count_is_counted_afresh_and_the_calls_served(
    kind: str, name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A count the store holds damaged (2.5) is taken as 0 and counted on from there (not stuck
    at a number `stats()` reads as 0 forever, nor failing every lookup)."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else ""
    store = STORES[kind](tmp_path, url)
    client = StructuredClient(TestProvider([ESCALATE], repeat=True), cache=store)
    assert client.generate(Verdict, prompt="Escalate?").cached is False
    _damage_counter(store, name, "2.5")
    for _ in range(2):
        assert client.generate(Verdict, prompt="Escalate?").cached is True
        assert client.generate(Verdict, prompt="Something else?").value.answer == "escalate"
    counted = store.stats()
    # 3 hits, 2 misses; the damaged count taken as 0 (the one miss before it, if misses)
    assert (counted.hits, counted.misses) == ((3, 2) if name == "hits" else (3, 1))
    if isinstance(store, SQLiteCache):
        store.close()


def test_a_clear_over_a_damaged_count_of_clears_is_still_seen_by_other_processes(
    tmp_path: Path,
) -> None:
    """The counters' row `clears` damaged (not a whole number): a clear still counts itself, so
    a store that kept counts from before it drops them (another store stands for another
    process: each has its own counts in memory)."""
    path = tmp_path / "c.db"
    writer, other = SQLiteCache(path), None
    asked = StructuredClient(TestProvider([ESCALATE]), cache=writer)
    assert asked.generate(Verdict, prompt="Escalate?").cached is False
    _damage_counter(writer, "clears", "0.5")
    other = SQLiteCache(path)  # knows the damaged number as 0
    served = StructuredClient(TestProvider([]), cache=other)
    assert served.generate(Verdict, prompt="Escalate?").cached is True  # kept in memory
    writer.clear()
    other.close()  # writes what it kept: made before the clear, so dropped
    counted = writer.stats()
    assert (counted.hits, counted.misses) == (0, 0)
    writer.close()


def test_hits_made_after_another_process_s_clear_are_counted_with_no_miss_between(
    tmp_path: Path,
) -> None:
    """Hits a store makes after another process's clear, with no miss or write of its own
    between to tell it of the clear, are counted; its hits from before the clear are not.
    Stores stand for processes (each has its own counts in memory); the threads' version is
    below."""
    path = tmp_path / "c.db"
    first, second = SQLiteCache(path), SQLiteCache(path)
    first.put("answer", Entry((TestProvider.refusal("before"),)))
    for _ in range(2):
        assert first.get("answer") is not None  # before the clear: dropped with it
    second.clear()
    second.put("answer", Entry((TestProvider.refusal("after"),)))
    for _ in range(3):
        assert first.get("answer") is not None  # after it
    first.close()  # (before: every count it held was dropped here, the 3 hits with them)
    counted = second.stats()
    assert (counted.hits, counted.misses) == (3, 0)
    second.close()


def test_hits_of_many_threads_around_another_process_s_clear_count_only_those_after_it(
    tmp_path: Path,
) -> None:
    """16 threads of one store look an answer up behind a barrier, before and after another
    process clears the file and stores the answer again: exactly the hits after the clear are
    counted."""
    path = tmp_path / "c.db"
    shared, other = SQLiteCache(path), SQLiteCache(path)
    shared.put("answer", Entry((TestProvider.refusal("before"),)))
    threads = 16
    gate = threading.Barrier(threads + 1, timeout=WAIT)
    found: list[bool] = []

    def lookups() -> None:
        for _ in range(4):
            found.append(shared.get("answer") is not None)  # before: dropped
        gate.wait()  # every thread done before the clear
        gate.wait()  # cleared, stored again
        for _ in range(5):
            found.append(shared.get("answer") is not None)

    workers = [threading.Thread(target=lookups) for _ in range(threads)]
    for worker in workers:
        worker.start()
    gate.wait()
    other.clear()
    other.put("answer", Entry((TestProvider.refusal("after"),)))
    gate.wait()
    for worker in workers:
        worker.join(WAIT)
        assert not worker.is_alive()
    assert found.count(True) == threads * 9
    shared.close()
    counted = other.stats()
    assert (counted.hits, counted.misses) == (threads * 5, 0)
    other.close()


def test_a_refused_entry_whose_hit_a_clear_dropped_takes_back_no_other_process_s_hit(
    tmp_path: Path,
) -> None:
    """A call's hit kept in memory, dropped when another thread of its process learns of another
    process's clear; the call then refuses the entry: its lookup was before the clear (counted
    nowhere), so the hit another process made after the clear stays counted (it was taken back:
    `(0, 3)` with 1 refused). Stores stand for processes (each has its own counts in memory)."""
    path = tmp_path / "c.db"
    first, second = SQLiteCache(path), SQLiteCache(path)
    StructuredClient(TestProvider([ESCALATE]), cache=first).generate(Verdict, prompt="Escalate?")
    (key,) = _keys(first)
    assert first.get(key) is not None  # the call's lookup: a hit, kept in memory
    second.clear()
    assert first.get("another call's key") is None  # a miss: learns of the clear
    other = StructuredClient(TestProvider([ESCALATE]), cache=second)
    for cached in (False, True):  # after the clear: a miss, a hit
        assert other.generate(Verdict, prompt="Escalate?").cached is cached
    second.close()
    first.refuse(key)  # the call refuses the entry it was handed
    first.close()
    counted = SQLiteCache(path, readonly=True).stats()  # (a closed store stays closed)
    assert (counted.hits, counted.misses, counted.refused) == (1, 2, 0)


def _counts_around_a_clear(path: Path) -> tuple[bool, int, CacheStats]:
    """A write of `store` takes its 100 misses and waits for the lock (another writer holds
    it); another store's clear commits meanwhile, and `store` looks up while its write still
    waits. Whether its lookups saw the clear before its write committed, how many there were
    after the clear, and the file's counts in the end."""
    store, other = SQLiteCache(path), SQLiteCache(path)
    store.put("x", Entry((TestProvider.refusal("x"),)))
    for number in range(100):
        assert store.get(f"absent-{number}") is None  # misses from before the clear
    holder = sqlite3.connect(path, isolation_level=None, timeout=WAIT)
    holder.execute("BEGIN IMMEDIATE")  # another writer, for a moment
    put_done, cleared = threading.Event(), threading.Event()
    entry = Entry((TestProvider.refusal("w"),))
    put = threading.Thread(target=lambda: (store.put("w", entry), put_done.set()))
    put.start()
    clearing = threading.Thread(target=lambda: (other.clear(), cleared.set()))
    try:
        wait_for(lambda: store._tally.pending == 0, "the put to take the counts and wait")
        time.sleep(1.0)  # (its waits for the lock grow to a tenth of a second: the clear's don't)
        clearing.start()
        time.sleep(0.05)
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert cleared.wait(WAIT) or put_done.wait(WAIT)
    after = 0
    saw_it = cleared.is_set() and not put_done.is_set()
    while not put_done.is_set() and after < 10_000:  # lookups after the clear, before the put
        assert store.get(f"later-{after}") is None
        after += 1
    put.join(WAIT)
    clearing.join(WAIT)
    store.close()
    other.close()
    return saw_it and after > 0, after, SQLiteCache(path, readonly=True).stats()


def test_counts_a_write_took_before_a_clear_are_not_added_after_it(tmp_path: Path) -> None:
    # On main the waiting write found the count of clears it expected (a lookup had just
    # updated it) and added the 100 misses made before the clear to the fresh counters
    # (probe13a D3: +100 in 10 of 10 runs). Each try must count exactly the lookups after the
    # clear; the interleaving that showed it must have happened at least once.
    seen = 0
    for attempt in range(5):
        saw_it, after, stats = _counts_around_a_clear(tmp_path / f"c{attempt}.db")
        assert (stats.hits, stats.misses) == (0, after), (saw_it, after, stats)
        seen += saw_it
        if seen >= 2:
            break
    assert seen >= 1, "no try had a lookup between the clear and the waiting write"


_AFTER_A_CHDIR = """
import os, sys, threading
from sdk.cache import Entry, SQLiteCache
from sdk.providers import TestProvider
os.chdir(sys.argv[1])
store = SQLiteCache("rel.db")  # relative, as a daemon's configuration may give it
os.chdir(sys.argv[2])  # the daemon changes folder
found = []
thread = threading.Thread(target=lambda: (
    store.put("b", Entry((TestProvider.refusal("b"),))), found.append(store.get("b") is not None)))
thread.start()
thread.join(60)
print(found, store.get("b") is not None, store.path)
"""


def test_a_store_s_threads_open_the_file_it_was_given_after_a_chdir(tmp_path: Path) -> None:
    # Each thread connects when it first uses the store: on main a relative path was read then,
    # after the process had changed folder, so one store wrote two files and its threads missed
    # each other's entries (probe13a D7).
    first, second = tmp_path / "x", tmp_path / "y"
    first.mkdir()
    second.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _AFTER_A_CHDIR, str(first), str(second)],
        capture_output=True, text=True, timeout=WAIT, env=ENV,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[True]", "True", "rel.db"], done.stdout  # (named as given)
    assert (first / "rel.db").is_file()
    assert sorted(p.name for p in second.iterdir()) == []


_INHERITED: dict[str, SQLiteCache] = {}
"""The store forked workers inherit (a `Pool`'s task names it, by the one key)."""


def _ten_hits(_: object = None) -> int:
    store = _INHERITED["store"]
    return sum(store.get("kept") is not None for _ in range(10))


def test_a_forked_worker_s_hits_are_counted_when_it_ends(tmp_path: Path) -> None:
    # A multiprocessing worker forked from a process holding the store ends through
    # `os._exit`, which runs no exit hook: its hits were never written (probe13a D4: 0 of 10
    # for a `Process`, 0 of 20 for a `Pool` closed and joined). multiprocessing's own
    # finalizers run before that exit, and write them.
    store = _INHERITED["store"] = SQLiteCache(tmp_path / "c.db")
    try:
        store.put("kept", Entry((TestProvider.refusal("kept"),)))
        fork = multiprocessing.get_context("fork")
        worker = fork.Process(target=_ten_hits)
        worker.start()
        worker.join(WAIT)
        assert worker.exitcode == 0
        pool = fork.Pool(2)
        try:
            assert pool.map(_ten_hits, range(2), chunksize=1) == [10, 10]
            pool.close()
            pool.join()
        finally:
            pool.terminate()
        assert store.stats().hits == 30  # (none in this process)
    finally:
        del _INHERITED["store"]
        store.close()
