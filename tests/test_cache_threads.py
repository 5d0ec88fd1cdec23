"""The threads the async client asks a response cache from (`sdk._threads`): its own daemon
threads, which end when idle and release what a store held in them, a few per `SQLiteCache` and
its own for each store, and a store's writes never on the event loop. And a call whose lookup
fails has not begun: no hook waits for its end (review and probe of the twentieth session's
change)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import StructuredClient
from sdk._threads import CacheThreads
from sdk._threads import at_thread_end
from sdk._threads import threads_for
from sdk.cache import Cache
from sdk.cache import CacheError
from sdk.cache import CacheServerError
from sdk.cache import CacheStats
from sdk.cache import Entry
from sdk.cache import MemoryCache
from sdk.cache import SQLiteCache
from sdk.hooks import Hooks
from sdk.providers import TestProvider

TEXT = json.dumps({"reasoning": "ok", "answer": "approve", "confidence": "high"})
WAIT = 30.0  # every wait below is bounded by it


def _descriptors_on(path: Path) -> int:
    """This process's open descriptors on `path` and its `-wal` and `-shm`."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (one closed since it was listed)
            count += os.readlink(f"/proc/self/fd/{fd}") in names
    return count


def _until(condition: Any) -> bool:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --- the threads ---


def test_cache_threads_run_at_most_their_number_and_end_when_idle_releasing_what_they_held() -> (
    None
):
    threads = CacheThreads(most=3, idle=0.2)
    started = threading.Barrier(3, timeout=WAIT)
    released: list[int] = []

    def work(n: int) -> int:
        at_thread_end(lambda: released.append(threading.get_ident()))
        if n < 3:
            started.wait()  # (the first three at once: three threads)
        return n * n

    futures = [threads.submit(work, n) for n in range(20)]
    assert [f.result(timeout=WAIT) for f in futures] == [n * n for n in range(20)]
    assert threads.threads == 3
    assert _until(lambda: threads.threads == 0)  # ended, idle
    assert len(set(released)) == 3 and len(released) == 20  # each thread released its own
    # Work given after they ended starts a thread again.
    assert threads.submit(work, 7).result(timeout=WAIT) == 49


def test_cache_threads_lose_no_work_to_threads_ending_as_it_is_given() -> None:
    """A thread ends only by taking back its own claim, as a submit decides: work given at the
    moment threads end is never left with no thread to run it."""
    threads = CacheThreads(most=2, idle=0.001)
    for _ in range(300):
        time.sleep(0.002)  # (the threads about to end as the work comes)
        assert threads.submit(lambda: 1).result(timeout=WAIT) == 1


def test_work_no_thread_can_be_started_for_runs_in_the_caller_s_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where no thread can be started (Python refuses new threads as it finalizes), the work
    runs in the caller's thread rather than wait for a thread that will never come."""
    threads = CacheThreads(most=2, idle=0.2)

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refused)
    ran_in: list[int] = []
    future = threads.submit(lambda: ran_in.append(threading.get_ident()) or 7)
    assert future.result(timeout=WAIT) == 7 and ran_in == [threading.get_ident()]
    failing = threads.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=WAIT)
    assert threads.threads == 0
    monkeypatch.undo()
    assert threads.submit(lambda: threading.get_ident()).result(timeout=WAIT) != ran_in[0]


def test_an_async_call_is_answered_and_stored_after_the_main_thread_ended(tmp_path: Path) -> None:
    """An event loop serving calls in a thread that outlives the main thread (a script that
    starts its service and returns): the cache's hand-over to `concurrent.futures`' pool, which
    refuses work once the main thread ended, raised a raw `RuntimeError` after the provider had
    answered, and the answer was lost."""
    script = textwrap.dedent(
        f"""
        import asyncio, json, threading, time
        from contracts import Decision
        from sdk import AsyncStructuredClient
        from sdk.cache import SQLiteCache
        from sdk.providers import TestProvider
        store = SQLiteCache({str(tmp_path / "c.db")!r})
        client = AsyncStructuredClient(TestProvider([{TEXT!r}], repeat=True), cache=store)

        def service():
            while threading.main_thread().is_alive():
                time.sleep(0.01)
            for _ in range(2):
                try:
                    result = asyncio.run(client.generate(Decision, prompt="Approve?"))
                    print("cached" if result.cached else "answered", flush=True)
                except BaseException as error:
                    print("raised", type(error).__name__, error, flush=True)

        threading.Thread(target=service).start()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stdout.split() == ["answered", "cached"], done.stdout + done.stderr


# --- a store's own threads, its connections ---


def test_an_async_client_opens_few_connections_to_a_sqlite_store_and_they_close(
    tmp_path: Path,
) -> None:
    """Every one of the 64 threads of one pool opened its own connection to each store, kept
    while the thread lived (forever: `close()` closed the caller's alone): a service with a
    store per tenant ran out of descriptors. A store has its own few threads now, which close
    their connections as they end."""
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=store)

    async def calls() -> None:
        prompts = [f"Approve {n}?" for n in range(64)]
        await asyncio.gather(*(client.generate(Decision, prompt=p) for p in prompts))

    asyncio.run(asyncio.wait_for(calls(), timeout=WAIT))
    assert threads_for(store) is store.threads and store.threads.most == 4
    assert store.stats().entries == 64
    connections = _descriptors_on(path)
    assert 0 < connections <= 3 * (store.threads.most + 1)  # (a file, its -wal and -shm each)
    store.close()
    assert _until(lambda: store.threads.threads == 0)  # (5 s idle: `IDLE_SECONDS`)
    assert _until(lambda: _descriptors_on(path) == 0)
    assert sorted(os.listdir(tmp_path)) == ["c.db"]  # the last connection closed cleanly


def test_after_close_a_thread_s_next_call_opens_the_file_the_path_names_now(
    tmp_path: Path,
) -> None:
    """`close()` closed the caller's connection alone: the async client's threads kept theirs,
    on the file a link named before, and stored there while lookups read the new one."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = tmp_path / "cache.db"
    link.symlink_to(tmp_path / "a" / "c.db")
    store = SQLiteCache(link)
    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=store)

    async def calls(tag: str) -> list[bool]:
        prompts = [f"{tag} {n}?" for n in range(5)]
        return [(await client.generate(Decision, prompt=p)).cached for p in prompts]

    assert asyncio.run(asyncio.wait_for(calls("Approve"), timeout=WAIT)) == [False] * 5
    store.close()
    SQLiteCache(tmp_path / "b" / "c.db").close()  # (another cache file, made by another store)
    link.unlink()
    link.symlink_to(tmp_path / "b" / "c.db")
    assert asyncio.run(asyncio.wait_for(calls("Deny"), timeout=WAIT)) == [False] * 5
    assert asyncio.run(asyncio.wait_for(calls("Deny"), timeout=WAIT)) == [True] * 5
    store.close()
    for folder, stored in (("a", 5), ("b", 5)):
        with sqlite3.connect(tmp_path / folder / "c.db") as db:
            assert db.execute("SELECT COUNT(*) FROM entries").fetchone() == (stored,)


def test_a_store_that_does_not_answer_holds_up_no_other_store_s_calls(tmp_path: Path) -> None:
    """One pool of 64 threads for every store: 64 calls waiting on a file another process held
    filled it, and calls on a healthy store waited behind them. Each store asks from its own."""
    held_path, healthy_path = tmp_path / "held.db", tmp_path / "healthy.db"
    held = SQLiteCache(held_path, timeout=WAIT)
    healthy = SQLiteCache(healthy_path)
    writer = sqlite3.connect(held_path, timeout=0, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # (another writer holds the file's write lock)
    stuck = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=held)
    free = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=healthy)

    async def main() -> list[bool]:
        waiting = [
            asyncio.ensure_future(stuck.generate(Decision, prompt=f"Approve {n}?"))
            for n in range(70)
        ]
        await asyncio.sleep(0.2)  # (their stores wait for the lock now)
        # Within the wait below, though the other store's stores wait for WAIT seconds.
        answered = await asyncio.wait_for(
            asyncio.gather(*(free.generate(Decision, prompt=f"Deny {n}?") for n in range(5))),
            timeout=WAIT / 2,
        )
        writer.execute("ROLLBACK")  # (the stuck stores go on)
        await asyncio.wait_for(asyncio.gather(*waiting), timeout=WAIT)
        return [result.cached for result in answered]

    assert asyncio.run(main()) == [False] * 5
    assert healthy.stats().entries == 5 and held.stats().entries == 70
    writer.close()
    held.close()
    healthy.close()


# --- the store's writes off the loop; a read-only store's lookups too ---


def test_an_entry_not_served_is_dropped_from_a_thread_not_on_the_event_loop(
    tmp_path: Path,
) -> None:
    """An async lookup of a `SQLiteCache` runs on the loop (it never waits for a writer); the
    drop of an entry it did not serve (damaged, or refused by today's checks) is a write, which
    waited for another writer on the loop, every call on it held up to `timeout=`."""
    dropped_in: list[int] = []

    class Watched(SQLiteCache):
        def refuse(self, key: str) -> None:
            dropped_in.append(threading.get_ident())
            super().refuse(key)

    store = Watched(tmp_path / "c.db")
    StructuredClient(TestProvider([TEXT]), cache=store).generate(Decision, prompt="Approve?")
    with sqlite3.connect(tmp_path / "c.db") as db:  # (the stored answer damaged)
        db.execute("UPDATE entries SET value = 'not an entry'")
    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=store)

    async def main() -> tuple[bool, int]:
        result = await client.generate(Decision, prompt="Approve?")
        return result.cached, threading.get_ident()

    cached, loop_thread = asyncio.run(asyncio.wait_for(main(), timeout=WAIT))
    assert not cached and dropped_in and loop_thread not in dropped_in
    store.close()


def test_a_read_only_sqlite_store_is_looked_up_from_a_thread(tmp_path: Path) -> None:
    """A store that reads its file as `readonly=True` checks each read against the file and
    reads again, waiting between reads: its lookups may wait, so they are not made on the
    loop (it said, as a store that writes its file, that they never wait)."""
    path = tmp_path / "c.db"
    StructuredClient(TestProvider([TEXT]), cache=SQLiteCache(path)).generate(
        Decision, prompt="Approve?"
    )
    assert SQLiteCache(path).lookups_wait is False
    reader = SQLiteCache(path, readonly=True)
    assert reader.lookups_wait is True
    looked_up_in: list[int] = []

    class Watched(SQLiteCache):
        def get(self, key: str) -> Entry | None:
            looked_up_in.append(threading.get_ident())
            return super().get(key)

    watched = Watched(path, readonly=True)
    client = AsyncStructuredClient(TestProvider([TEXT]), cache=watched)

    async def main() -> tuple[bool, int]:
        return (await client.generate(Decision, prompt="Approve?")).cached, threading.get_ident()

    cached, loop_thread = asyncio.run(asyncio.wait_for(main(), timeout=WAIT))
    assert cached and looked_up_in and loop_thread not in looked_up_in
    reader.close()
    watched.close()


# --- a lookup that fails: the call has not begun ---


class _Ends(Hooks):
    def __init__(self) -> None:
        self.told: list[str] = []

    def on_call(self, call: Any) -> None:
        self.told.append("on_call")

    def on_result(self, call: Any, result: Any) -> None:
        self.told.append("on_result")

    def on_failure(self, call: Any, error: Any) -> None:
        self.told.append("on_failure")

    def on_cancel(self, call: Any, attempts: Any) -> None:
        self.told.append("on_cancel")


class _Unreadable(MemoryCache):
    """A store that cannot be read (a server gone, a damaged file)."""

    waits = True

    def get(self, key: str) -> Entry | None:
        raise CacheServerError("the cache server test://gone failed reading an entry")


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_call_whose_lookup_fails_tells_no_hook_it_began(sync: bool) -> None:
    """A store that cannot be read is the call's `CacheError`, before anything is sent: the
    hooks were told `on_call` and never an end (an OpenTelemetry span left open per call).
    The lookup comes first now: the call has not begun."""
    hooks, provider = _Ends(), TestProvider([TEXT])
    with pytest.raises(CacheError, match="test://gone"):
        if sync:
            StructuredClient(provider, cache=_Unreadable(), hooks=[hooks]).generate(
                Decision, prompt="Approve?"
            )
        else:
            client = AsyncStructuredClient(provider, cache=_Unreadable(), hooks=[hooks])
            asyncio.run(asyncio.wait_for(client.generate(Decision, prompt="Approve?"), WAIT))
    assert hooks.told == [] and provider.requests == []
    # A call that reads the store tells both, as before.
    StructuredClient(provider, cache=MemoryCache(), hooks=[hooks]).generate(
        Decision, prompt="Approve?"
    )
    assert hooks.told == ["on_call", "on_result"]


# --- a call's turn in the threads of a store that fails ---


class _SlowStore(MemoryCache):
    """A store of your own with one thread and a timeout whose `put` (or `get`) takes `takes`
    seconds and then, if `fails`, fails as a store past its timeout does (a file another
    writer holds, a server that stalls)."""

    waits = True

    def __init__(self, slow: str, takes: float, fails: bool) -> None:
        super().__init__()
        self.threads = CacheThreads(most=1)
        self.timeout = 0.5
        self.slow, self.takes, self.fails = slow, takes, fails
        self.calls: list[str] = []

    def _slowly(self, method: str) -> None:
        self.calls.append(method)
        if self.slow == method:
            time.sleep(self.takes)
            if self.fails:
                raise CacheServerError(f"the cache server test://slow timed out in {method}")

    def get(self, key: str) -> Entry | None:
        self._slowly("get")
        return super().get(key)

    def put(self, key: str, entry: Entry) -> None:
        self._slowly("put")
        super().put(key, entry)


def test_calls_queued_behind_a_store_that_fails_are_given_up_before_their_turn() -> None:
    """Queued behind calls that each waited the store's timeout and failed, the last of 100
    calls waited 25 turns of it (12 minutes at SQLite's default 30 s), its answer paid for,
    and callers under `asyncio.wait_for` lost answers they had. Once calls given to the store
    before it fail, a call that had no turn is not run: its answer is the caller's, with a
    note."""
    store = _SlowStore(slow="put", takes=0.5, fails=True)
    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=store)

    async def main() -> list[Any]:
        calls = [client.generate(Decision, prompt=f"Approve {n}?") for n in range(6)]
        return await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    results = asyncio.run(main())
    assert all(r.value.answer == "approve" for r in results)
    notes = [str(n.received) for r in results for n in r.notes if n.kind == "cache_not_stored"]
    assert len(notes) == 6  # each told, none stored
    assert store.calls.count("put") <= 3  # (without the bound: 6, one after another)
    assert any("given up before it was made" in note for note in notes)


def test_calls_queued_behind_a_store_only_busy_wait_their_turn() -> None:
    """A store that is busy, not failing (each put takes a while, its one thread taken),
    keeps every answer, though calls wait longer than its timeout for their turn."""
    store = _SlowStore(slow="put", takes=0.1, fails=False)
    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=store)

    async def main() -> list[Any]:
        calls = [client.generate(Decision, prompt=f"Approve {n}?") for n in range(8)]
        return await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    results = asyncio.run(main())  # (the last waits 0.7 s, past the 0.5 s timeout)
    assert [r.notes for r in results] == [[]] * 8
    assert store.calls.count("put") == 8 and store.stats().entries == 8


def test_a_lookup_queued_behind_lookups_that_fail_is_a_cache_error_before_anything_is_sent() -> (
    None
):
    store = _SlowStore(slow="get", takes=0.5, fails=True)
    provider = TestProvider([TEXT], repeat=True)
    client = AsyncStructuredClient(provider, cache=store)

    async def main() -> list[Any]:
        calls = [client.generate(Decision, prompt=f"Approve {n}?") for n in range(5)]
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)

    outcomes = asyncio.run(main())
    assert all(isinstance(o, CacheError) for o in outcomes) and provider.requests == []
    assert store.calls.count("get") <= 3  # (without the bound: 5, one after another)
    assert any("given up before it was made" in str(o) for o in outcomes)


def test_a_store_whose_timeout_cannot_be_read_is_asked_without_a_bound() -> None:
    """The bound was read after the work was given to a thread: a store's `timeout` property
    that raised failed the call with its raw error, the store's put made all the same."""

    class Unreadable(MemoryCache):
        waits = True

        @property
        def timeout(self) -> float:
            raise RuntimeError("no timeout here")

    store = Unreadable()
    client = AsyncStructuredClient(TestProvider([TEXT]), cache=store)
    result = asyncio.run(asyncio.wait_for(client.generate(Decision, prompt="Approve?"), WAIT))
    assert result.notes == [] and store.stats().entries == 1


@pytest.mark.parametrize("most", [0, -1, 1.5, True])
def test_cache_threads_refuse_a_number_that_would_run_nothing(most: Any) -> None:
    """`CacheThreads(most=0)` was taken, and work given to it waited for ever."""
    with pytest.raises(ValueError, match="most"):
        CacheThreads(most=most)
    with pytest.raises(ValueError, match="idle"):
        CacheThreads(idle=0)


# --- a store of your own that fails with another error than CacheError ---


class _Failing(MemoryCache):
    def __init__(self, method: str) -> None:
        super().__init__()
        self.method = method

    def get(self, key: str) -> Entry | None:
        if self.method == "get":
            raise RuntimeError("the backend is gone")
        found = super().get(key)
        if self.method == "refuse" and found is None:
            return Entry.stored("not an entry")  # (damaged: not served, then refused)
        return found

    def put(self, key: str, entry: Entry) -> None:
        if self.method == "put":
            raise ConnectionError("the backend dropped the connection")
        super().put(key, entry)

    def refuse(self, key: str) -> None:
        raise OSError("the backend is read-only")


def _generate(sync: bool, store: MemoryCache, hooks: _Ends, provider: TestProvider) -> Any:
    if sync:
        client = StructuredClient(provider, cache=store, hooks=[hooks])
        return client.generate(Decision, prompt="Approve?")
    async_client = AsyncStructuredClient(provider, cache=store, hooks=[hooks])
    return asyncio.run(asyncio.wait_for(async_client.generate(Decision, prompt="Approve?"), WAIT))


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_put_that_fails_otherwise_keeps_the_answer_with_a_note(sync: bool) -> None:
    """A store of your own whose `put` raised its own error lost the answer paid for, the
    error raw, and the hooks told the call was cancelled."""
    hooks, provider = _Ends(), TestProvider([TEXT])
    result = _generate(sync, _Failing("put"), hooks, provider)
    assert result.value.answer == "approve" and not result.cached
    [note] = [n for n in result.notes if n.kind == "cache_not_stored"]
    assert "_Failing.put() failed: ConnectionError: the backend dropped" in note.received
    assert hooks.told == ["on_call", "on_result"]


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_get_that_fails_otherwise_is_a_cache_error_before_anything_is_sent(sync: bool) -> None:
    hooks, provider = _Ends(), TestProvider([TEXT])
    failed = re.escape("_Failing.get() failed: RuntimeError")
    with pytest.raises(CacheError, match=failed) as caught:
        _generate(sync, _Failing("get"), hooks, provider)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert hooks.told == [] and provider.requests == []


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_refuse_that_fails_otherwise_lets_the_call_go_on(sync: bool) -> None:
    hooks, provider = _Ends(), TestProvider([TEXT])
    result = _generate(sync, _Failing("refuse"), hooks, provider)
    assert result.value.answer == "approve" and not result.cached
    assert len(provider.requests) == 1 and hooks.told == ["on_call", "on_result"]


# --- a SQLiteCache's end ---


def test_close_never_makes_a_removed_cache_file_again(tmp_path: Path) -> None:
    """`close()` from a thread that held no connection of the store opened one to write the
    counts still in memory, making the folder's file again after the folder was removed."""
    folder = tmp_path / "sub"
    made: list[SQLiteCache] = []

    def calls() -> None:
        store = SQLiteCache(folder / "c.db")  # (made and used here: this thread's connection)
        made.append(store)
        client = StructuredClient(TestProvider([TEXT], repeat=True), cache=store)
        client.generate(Decision, prompt="Approve?")
        assert client.generate(Decision, prompt="Approve?").cached  # (a count kept in memory)

    worker = threading.Thread(target=calls)
    worker.start()
    worker.join(WAIT)
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    made[0].close()  # (from a thread that holds no connection of it)
    assert not folder.exists()


def test_close_never_makes_a_cache_file_removed_just_after_its_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`close()` looked for the file and then opened it to write the counts still in memory,
    which made it again (an empty cache holding those counts alone) if another process removed
    it between the two: the file is opened as it is now, never made for its counts."""
    file = tmp_path / "c.db"
    made: list[SQLiteCache] = []
    worker = threading.Thread(target=_hit_twice, args=(file, made))
    worker.start()
    worker.join(WAIT)
    looked: list[str] = []
    for name in ("exists", "is_file"):
        real = getattr(Path, name)

        def look(self: Path, *args: object, real: Any = real, name: str = name) -> bool:
            there: bool = real(self, *args)
            if self == file and there and not looked:  # another process removes it just after
                looked.append(name)
                for made in tmp_path.iterdir():
                    made.unlink()
            return there

        monkeypatch.setattr(Path, name, look)
    made[0].close()  # (from a thread that holds no connection of it)
    monkeypatch.undo()
    assert looked and not file.exists() and list(tmp_path.iterdir()) == []


def _hit_twice(file: Path, made: list[SQLiteCache]) -> None:
    """A store made and used in this thread (its connection this thread's), its hit counted in
    memory until a write."""
    store = SQLiteCache(file)
    made.append(store)
    client = StructuredClient(TestProvider([TEXT], repeat=True), cache=store)
    client.generate(Decision, prompt="Approve?")
    assert client.generate(Decision, prompt="Approve?").cached


def test_a_thread_opening_again_after_each_close_is_told_once_to_release_at_its_end(
    tmp_path: Path,
) -> None:
    """Each opening after a `close()` added one more release to the thread's end, which a
    thread that never went idle piled up (a thousand after a thousand closes)."""
    import sdk._threads

    store = SQLiteCache(tmp_path / "c.db")

    def opened_again() -> int:
        for _ in range(50):
            store.get("0" * 64)
            store.close()
        return len(sdk._threads._ending.releases)

    assert store.threads.submit(opened_again).result(timeout=WAIT) == 1
    store.close()



class _DiscardOnly(Cache):
    """A store of your own with no `refuse`: an entry not served is `discard`ed, which fails."""

    def get(self, key: str) -> Entry | None:
        return Entry.stored("not an entry")  # (damaged: not served, then dropped)

    def put(self, key: str, entry: Entry) -> None:
        pass

    def discard(self, key: str) -> None:
        raise OSError("the backend is read-only")

    def stats(self) -> CacheStats:
        return CacheStats(0, 0, 0, 0)

    def clear(self) -> int:
        return 0


def test_a_failed_drop_names_the_method_the_store_has(caplog: pytest.LogCaptureFixture) -> None:
    """An entry not served is dropped by the store's `refuse`, or by `discard` where it has
    none: `BestEffortCache` named a failed `discard` as `refuse()`'s."""
    from sdk.cache import BestEffortCache

    best_effort = BestEffortCache(_DiscardOnly, say=lambda _: None)
    for store in (_DiscardOnly(), best_effort):
        client = StructuredClient(TestProvider([TEXT], repeat=True), cache=store)
        assert client.generate(Decision, prompt="Approve?").value.answer == "approve"
    told = "_DiscardOnly.discard() failed: OSError: the backend is read-only"
    assert told in caplog.text and "refuse()" not in caplog.text
    assert best_effort.given_up is not None and told in best_effort.given_up


def test_a_best_effort_cache_gives_up_a_store_that_fails_otherwise() -> None:
    """`BestEffortCache` gave its store up on a `CacheError` only: a store of your own whose
    `get` raised its server's own error failed every call of a batch job, never given up."""
    from sdk.cache import BestEffortCache

    store = BestEffortCache(lambda: _Failing("get"), say=lambda _: None)
    provider = TestProvider([TEXT], repeat=True)
    client = StructuredClient(provider, cache=store)
    results = [client.generate(Decision, prompt=f"Approve {n}?") for n in range(3)]
    assert all(r.value.answer == "approve" for r in results) and len(provider.requests) == 3
    assert store.given_up is not None
    assert "_Failing.get() failed: RuntimeError: the backend is gone" in store.given_up
