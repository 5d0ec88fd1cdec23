"""A child forked while another thread of its parent holds an SDK lock never waits for it.

A child made by `os.fork` (multiprocessing's "fork" start method, a worker pool) has only the
thread that forked: a lock another thread held at that moment stays held in the child, and the
child's first use of it waited forever. Every lock of the SDK comes from `sdk._fork`, which frees
them all in a child as it starts (one handler); the matrix below holds each lock in a thread of
the parent, forks, and has the child use what the lock guards (a real call through it where there
is one), within a bound; the structure test refuses a lock made anywhere else.

Every wait is bounded (`WAIT`): a child that hangs is killed, and the test fails.
"""

from __future__ import annotations

import ast
import json
import logging
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import core_schema

from contracts import Decision
from sdk import Contract
from sdk import StructuredClient
from sdk import _files
from sdk import _fork
from sdk._values import profile as _profile
from sdk.batch._state import JobState
from sdk.cache import BestEffortCache
from sdk.cache import MemoryCache
from sdk.cache import RedisCache
from sdk.cache import SQLiteCache
from sdk.cache import _entry
from sdk.cache import _key
from sdk.cache._entry import Cache
from sdk.contract import derived
from sdk.parsing import _compiled
from sdk.providers import TestProvider
from sdk.providers import _grounding
from sdk.providers import _provider
from sdk.providers._llamacpp_prompt import NativePrompts
from sdk.schema import dialects
from sdk.schema import gbnf
from sdk.sql import run_query
from sdk.wire import _memory
from tests.redis_support import redis_server

SDK = Path(__file__).resolve().parent.parent / "sdk"
ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})
WAIT = 60.0
"""A bound on every wait (a child's work takes milliseconds): reached only by a child that hangs."""


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def _fresh_contract() -> type[Decision]:
    """A contract no process has compiled, keyed or turned into a dialect's schema yet (made in
    the child: the first use of each memo then takes its lock)."""

    class Fresh(Decision):
        pass

    return Fresh


def _generate(cache: Cache | None, contract: type[Decision] = Decision) -> None:
    """A call through a client with `cache` (a miss: keyed, looked up, asked, stored)."""
    client = StructuredClient(TestProvider([ANSWER], repeat=True), cache=cache)
    assert client.generate(contract, prompt="Approve?").value.answer == "approve"


class _Template:
    def render(self, messages: object) -> str:
        return str(messages)


def _sites(
    held: str, tmp_path: Path, request: pytest.FixtureRequest
) -> tuple[Any, Callable[[], object]]:
    """The lock of the site `held`, and the child's use of what it guards."""
    if held == "entry memo (entries decoded lately)":
        return _entry._recent_lock, lambda: _generate(MemoryCache())
    if held == "key memo (digests remembered)":
        return _key._remembering, lambda: _generate(MemoryCache(), _fresh_contract())
    if held == "memory cache":
        memory = MemoryCache()
        return memory._lock, lambda: _generate(memory)
    if held == "SQLite cache tally":
        store = SQLiteCache(tmp_path / "c.db")
        _generate(store)  # (counts in memory the child must not write again)
        return store._tally._lock, lambda: _generate(store)
    if held == "Redis cache":
        redis = RedisCache(request.getfixturevalue("redis_url"), prefix="forks:")
        redis.close()  # the next call connects (under the lock)
        return redis._lock, lambda: _generate(redis)
    if held == "best-effort cache (a batch job's store)":
        best = BestEffortCache(MemoryCache)  # opened at its first use (under the lock)
        return best._lock, lambda: _generate(best)
    if held == "compiled contracts":
        return _compiled._lock, lambda: _generate(None, _fresh_contract())
    if held == "provider naming":
        return _provider._naming, lambda: _provider.callable_identity(_Template().render)
    if held == "test provider":
        provider = TestProvider([ANSWER], repeat=True)
        return provider._lock, lambda: StructuredClient(provider).generate(Decision, prompt="?")
    if held == "derived contracts (widened)":
        return derived._lock, lambda: derived.widen(_fresh_contract())
    if held == "dialect schemas":
        strict = dialects.dialects()["openai_strict"]
        return dialects._lock, lambda: dialects.to_wire(_fresh_contract(), strict)
    if held == "contract grammars":
        return gbnf._contract_lock, lambda: gbnf.contract_gbnf(Decision)
    if held == "grounded grammars":
        return _grounding._BUILT_LOCK, lambda: _grounding._built(
            lambda schema, source: "root ::= x", Decision, {}, "a source"
        )
    if held == "in-memory providers (sdk.wire)":
        return _memory._lock, lambda: _memory.memory_provider("ollama", {"model": "m"})
    if held == "file digests":
        (tmp_path / "model.gguf").write_bytes(b"weights")
        return _files._digesting, lambda: _files.file_digest(tmp_path / "model.gguf")
    if held == "provider profiles":
        return _profile._lock, _profile.profiles
    if held == "llama.cpp learned prompts":
        prompts = NativePrompts()
        return prompts._lock, prompts.learned
    raise AssertionError(held)


SITES = [
    "entry memo (entries decoded lately)",
    "key memo (digests remembered)",
    "memory cache",
    "SQLite cache tally",
    "Redis cache",
    "best-effort cache (a batch job's store)",
    "compiled contracts",
    "provider naming",
    "test provider",
    "derived contracts (widened)",
    "dialect schemas",
    "contract grammars",
    "grounded grammars",
    "in-memory providers (sdk.wire)",
    "file digests",
    "provider profiles",
    "llama.cpp learned prompts",
]
# Not in the matrix: the embedded provider's engine, engine pool and model assembly locks
# (`sdk/providers/embedded`), which need a model loaded; they come from `sdk._fork` all the
# same (`test_every_lock_of_the_sdk_is_one_a_forked_child_gets_free`).


@pytest.mark.parametrize("held", SITES)
def test_a_child_forked_while_its_parent_holds_a_lock_uses_what_it_guards(
    held: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    lock, work = _sites(held, tmp_path, request)
    holding, release = threading.Event(), threading.Event()

    def holds() -> None:
        with lock:
            holding.set()
            release.wait(WAIT)

    thread = threading.Thread(target=holds)
    thread.start()
    try:
        assert holding.wait(WAIT)
        hung, exitcode = _run_forked(work)
    finally:
        release.set()
        thread.join(WAIT)
    assert not hung, f"the forked child waited for the {held} lock its parent held"
    assert exitcode == 0


def _run_forked(target: Callable[[], None]) -> tuple[bool, int | None]:
    """`target` run in a child forked now, joined within `WAIT`: whether it was still running
    then (it hung, and is killed), and its exit code."""
    child = multiprocessing.get_context("fork").Process(target=target)
    child.start()
    child.join(WAIT)
    hung = child.is_alive()
    child.kill()
    child.join(WAIT)
    return hung, child.exitcode


_MODULE_STATE: list[str] = []


def test_a_forked_child_starts_each_registered_reset_after_every_lock_is_free() -> None:
    # `in_child`, then `after_fork`: run in the child, in order, once the locks are free (a reset
    # may take one); an owner's no more once the owner is gone.
    class Owner:
        def __init__(self) -> None:
            self.lock = _fork.lock()
            self.seen: list[str] = []

    kept, dropped = Owner(), Owner()
    _fork.in_child(lambda: _MODULE_STATE.append("module"))
    _fork.after_fork(kept, lambda o: o.seen.append("first"))
    _fork.after_fork(kept, lambda o: o.seen.append("second"))
    _fork.after_fork(dropped, lambda o: o.seen.append("dropped"))
    del dropped
    reader, writer = multiprocessing.get_context("fork").Pipe(duplex=False)

    def child() -> None:
        with kept.lock:  # free in the child, though the parent holds it
            writer.send(_MODULE_STATE + kept.seen)

    with kept.lock:
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
    assert reader.poll(WAIT), "the forked child waited for the lock its parent held"
    assert reader.recv() == ["module", "first", "second"]
    process.join(WAIT)
    assert process.exitcode == 0 and kept.seen == _MODULE_STATE == []  # (the parent's: as it was)


class _Code(str):
    """A field type whose schema blocks the thread named "widener" (in the midst of widening its
    contract, under the lock) until told to go on."""

    going_on = threading.Event()
    inside = threading.Event()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        if threading.current_thread().name == "widener":
            cls.inside.set()
            cls.going_on.wait(WAIT)
        return core_schema.str_schema()


class _Ticket(Contract):
    code: _Code


def _widened_in_child() -> None:
    assert derived.widen(_Ticket).__name__ == "_TicketWidened"


def test_a_contract_another_thread_was_widening_at_the_fork_is_widened_in_the_child() -> None:
    # The lock freed is not enough: the child must not take the contract the parent's thread
    # was widening as one being widened now (it raised "widen does not support recursive
    # contracts").
    widener = threading.Thread(target=derived.widen, args=(_Ticket,), name="widener")
    widener.start()
    try:
        assert _Code.inside.wait(WAIT)
        hung, exitcode = _run_forked(_widened_in_child)
    finally:
        _Code.going_on.set()
        widener.join(WAIT)
    assert not hung and exitcode == 0


# --- no lock made elsewhere ---

_MADE = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore", "Event", "Barrier"}
"""`threading`'s lock types (and those made of a lock: a child may inherit any of them held)."""

ALLOWED = {
    ("sdk/providers/embedded/_provider.py", "Event"): (
        "a call's cancel flag, made per call and set or read only by that call's threads; a "
        "forked child has none of them and never resumes the call"
    ),
}
"""Locks made outside `sdk._fork`, each with why no forked child can use it held."""


def _locks_made(path: Path) -> Iterator[str]:
    """The `threading` lock types a module makes (`threading.X()`, `_thread.allocate_lock()`,
    or a name imported from `threading`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("threading", "_thread")
        for alias in node.names
        if alias.name in _MADE or alias.name in ("allocate_lock", "LockType")
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = node.func
        if isinstance(called, ast.Attribute) and isinstance(called.value, ast.Name):
            if called.value.id == "threading" and called.attr in _MADE:
                yield called.attr
            if called.value.id == "_thread" and called.attr in ("allocate_lock", "LockType"):
                yield called.attr
        if isinstance(called, ast.Name) and called.id in imported:
            yield called.id


def test_every_lock_of_the_sdk_is_one_a_forked_child_gets_free() -> None:
    made = {
        (str(path.relative_to(SDK.parent)), kind)
        for path in sorted(SDK.rglob("*.py"))
        if path.name != "_fork.py" or path.parent != SDK
        for kind in _locks_made(path)
    }
    assert made - ALLOWED.keys() == set(), "make it with sdk._fork (lock, rlock, condition)"
    assert ALLOWED.keys() <= made  # (an entry no longer needed goes)


def test_the_lock_finder_finds_each_way_of_making_a_lock(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import threading, _thread\nfrom threading import RLock as R, Condition\n"
        "a = threading.Lock()\nb = R()\nc = Condition()\nd = _thread.allocate_lock()\n"
        "e = threading.Semaphore(2)\nf = threading.local()\n"
    )
    assert sorted(_locks_made(module)) == ["Condition", "Lock", "R", "Semaphore", "allocate_lock"]


# --- the fork gate: no child forked while an SDK thread is inside SQLite ---
#
# SQLite's own mutexes cannot be freed in a child as the SDK's locks are: a fork waits, at most
# `_fork.GATE_BOUND`, until no SDK thread is inside SQLite (`_fork.gate`).

HOLD = 1.0
"""Seconds another connection (the test's own) keeps a file locked while an SDK thread waits."""


def _until_inside(count: int) -> None:
    """Wait (at most `WAIT`) until `count` other threads are inside a gated region."""
    deadline = time.monotonic() + WAIT
    while _fork.inside() != count:
        assert time.monotonic() < deadline, "the thread never entered the fork gate"
        time.sleep(0.005)


def _generated_twice_in(path: Path) -> bool:
    """A call through a new SQLite cache at `path` (a miss, stored), then the same call (a hit)."""
    store = SQLiteCache(path)
    _generate(store)
    _generate(store)
    return store.stats().hits == 1


def _a_child_reports(
    send: Callable[[], object], poll: float = WAIT
) -> tuple[multiprocessing.process.BaseProcess, Any]:
    """Fork a child running `send` (its result sent back through a pipe): the child and what it
    sent, within `poll` seconds (an `AssertionError` if nothing came: it hung)."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=lambda: writer.send(send()))
    child.start()
    try:
        assert reader.poll(poll), "the forked child hung (no answer within the bound)"
        return child, reader.recv()
    finally:
        child.join(WAIT)
        if child.is_alive():
            child.kill()
            child.join(WAIT)


def _locked_cache(tmp_path: Path) -> tuple[Callable[[], object], sqlite3.Connection]:
    store = SQLiteCache(tmp_path / "shared.sqlite")
    store.get("a key")  # (this thread's connection opened: `clear` below is one gated region)

    def operation() -> object:
        store.get("a key")
        return store.clear()  # waits for the test's write lock (busy timeout, inside SQLite)

    holder = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return operation, holder


def _locked_database(tmp_path: Path) -> tuple[Callable[[], object], sqlite3.Connection]:
    path = tmp_path / "shop.db"
    with closing(sqlite3.connect(path)) as made, made:
        made.execute("CREATE TABLE t (i INTEGER)")
        made.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # (rollback journal: a reader waits for it)
    return lambda: run_query(path, "SELECT count(*) FROM t AS a, t AS b"), holder


@pytest.mark.parametrize("operation", ["cache clear", "run_query"])
def test_a_fork_waits_until_no_sdk_thread_is_inside_sqlite_and_the_child_uses_a_cache(
    operation: str, tmp_path: Path
) -> None:
    # A parent thread inside a real SDK SQLite call that lasts: it waits (SQLite's busy
    # handler) for a lock the test's own connection holds and lets go at `released`. The fork
    # must wait for the call to end, so the child starts after `released`: causally, not by
    # timing luck. Without the gate the child started at once (before `released`).
    work, holder = (_locked_cache if operation == "cache clear" else _locked_database)(tmp_path)
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(work()))
    released: list[float] = []

    def release() -> None:
        released.append(time.monotonic())
        holder.execute("ROLLBACK")

    thread.start()
    try:
        _until_inside(1)
        timer = threading.Timer(HOLD, release)
        timer.start()
        child, (started, worked) = _a_child_reports(
            lambda: (time.monotonic(), _generated_twice_in(tmp_path / "child.sqlite"))
        )
    finally:
        thread.join(WAIT)
        holder.close()
    assert released and started > released[0], "the child was forked while SQLite was in use"
    assert done and worked and child.exitcode == 0


def test_a_fork_goes_on_past_the_bound_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A region that never ends (a thread of the test holds the gate): the fork waits
    # `GATE_BOUND` (made short here), then goes on, saying why the child may hang; the gate
    # works again in the parent and is free in the child.
    monkeypatch.setattr(_fork, "GATE_BOUND", 0.5)
    holding, release = threading.Event(), threading.Event()

    def holds() -> None:
        with _fork.gate():
            holding.set()
            release.wait(WAIT)

    thread = threading.Thread(target=holds)
    thread.start()
    try:
        assert holding.wait(WAIT)
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="sdk.fork"):
            child, worked = _a_child_reports(lambda: _generated_twice_in(tmp_path / "c.sqlite"))
        waited = time.monotonic() - began
    finally:
        release.set()
        thread.join(WAIT)
    assert worked and child.exitcode == 0
    assert waited >= 0.5
    assert [r.getMessage() for r in caplog.records if r.name == "sdk.fork"] == [
        "forking while 1 thread(s) of this process stay inside an SDK SQLite call past 0.5 s "
        "(sdk._fork.GATE_BOUND): the child may wait forever on its first SQLite use (SQLite's "
        "own locks can be copied held into it); fork before starting threads that use a cache "
        "or a job's state, or use the spawn or forkserver start method"
    ]
    assert _fork.inside() == 0  # (the thread left; nothing of the fork is still held)
    other = threading.Thread(target=lambda: _generated_twice_in(tmp_path / "after.sqlite"))
    other.start()
    other.join(WAIT)
    assert not other.is_alive()


def test_a_thread_forking_from_inside_its_own_gated_region_does_not_wait_for_itself(
    tmp_path: Path,
) -> None:
    # Inside a job state's transaction (a gated region), twice over: the fork does not wait
    # for the forking thread; its regions end cleanly in the parent and in the child.
    state = JobState.create(tmp_path / "job.db", {"note": "parent"})

    began = time.monotonic()
    with state.transaction() as db, _fork.gate():
        state.put("note", "forking", db)
        forked, worked = _a_child_reports(lambda: _generated_twice_in(tmp_path / "c.sqlite"))
    assert time.monotonic() - began < _fork.GATE_BOUND  # (it never waited for the bound)
    assert worked and forked.exitcode == 0
    assert state.get("note") == "forking"
    other = threading.Thread(target=lambda: _generated_twice_in(tmp_path / "after.sqlite"))
    other.start()
    other.join(WAIT)
    assert not other.is_alive()  # (the gates the fork took are free again)


def test_children_forked_while_sixteen_threads_read_a_cache_all_work(tmp_path: Path) -> None:
    store = SQLiteCache(tmp_path / "shared.sqlite")
    _generate(store)  # (stored: the threads' calls are hits)
    barrier, stop = threading.Barrier(17), threading.Event()
    errors: list[BaseException] = []
    hits = [0] * 16

    def reads(index: int) -> None:
        try:
            barrier.wait(WAIT)
            while not stop.is_set():
                _generate(store)
                hits[index] += 1
        except BaseException as error:  # (reported below)
            errors.append(error)

    threads = [threading.Thread(target=reads, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    reports = []
    try:
        barrier.wait(WAIT)
        for n in range(3):
            reports.append(
                _a_child_reports(
                    lambda n=n: (
                        _generated_twice_in(tmp_path / f"child{n}.sqlite"),
                        SQLiteCache(store.path).get(_first_key(store)) is not None,
                    )
                )
            )
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT)
    assert not errors and all(hits)
    assert [(child.exitcode, report) for child, report in reports] == [(0, (True, True))] * 3


def _first_key(store: SQLiteCache) -> str:
    with closing(sqlite3.connect(store.path)) as db:
        key: str = db.execute("SELECT key FROM entries").fetchone()[0]
    return key
