"""The SQLite files the SDK shares between threads and processes (the response cache, a batch job's
state) under one discipline (`sdk._sqlite`): many opening a new file at once, a hit while another
process writes, a busy file, read-only files and folders, damaged pages, owner-only files.

Real threads and processes behind a barrier (`tests.shared_file_process`); every wait bounded.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import sqlite3
import stat
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from contracts import Decision
from sdk import StructuredClient
from sdk.batch import BatchError
from sdk.batch import BatchJob
from sdk.batch import LocalBackend
from sdk.batch import job_summary
from sdk.batch._state import JobState
from sdk.cache import CacheFileError
from sdk.cache import Entry
from sdk.cache import SQLiteCache
from sdk.providers import TestProvider
from tests.batch_support import ERRORED
from tests.batch_support import AnthropicBatchAPI
from tests.batch_support import Script
from tests.batch_support import anthropic_backend
from tests.batch_support import job_for
from tests.batch_support import local_clients
from tests.batch_support import write_items
from tests.process_support import read_line
from tests.shared_file_process import WAIT
from tests.shared_file_process import create_job
from tests.shared_file_process import open_cache
from tests.shared_file_process import together
from tests.shared_file_process import wait_for

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})
THREADS, PROCESSES, ROUNDS = 16, 3, 5


# --- many at once ---


def _all_at_once(mode: str, prefix: Path, work: Callable[[Path, int], None]) -> list[str]:
    """ROUNDS rounds in which THREADS threads here and THREADS in each of PROCESSES processes
    open (or create) the file PREFIX-R.db at the same moment; every failure."""
    gate = prefix.parent / "gate"
    for round_ in range(ROUNDS):
        (gate / str(round_)).mkdir(parents=True)
    command = [sys.executable, "-m", "tests.shared_file_process", mode, str(prefix), str(gate),
               str(THREADS), str(ROUNDS)]  # fmt: skip
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    runs = [
        subprocess.Popen(command, cwd=REPO, env=ENV, text=True, **pipes) for _ in range(PROCESSES)
    ]
    failures: list[str] = []
    try:
        for round_ in range(ROUNDS):
            _one_round(gate / str(round_), Path(f"{prefix}-{round_}.db"), work, failures)
        for run in runs:
            out, err = run.communicate(timeout=WAIT)
            assert run.returncode == 0, err
            failures.extend(json.loads(out))
    finally:
        for run in runs:
            run.kill()
    return failures


def _one_round(
    folder: Path, target: Path, work: Callable[[Path, int], None], failures: list[str]
) -> None:
    """This process's threads in one round; the go file once every process is ready."""
    here = threading.Thread(
        target=lambda: failures.extend(together(THREADS, folder, lambda n: work(target, n)))
    )
    here.start()
    wait_for(lambda: len(list(folder.glob("ready-*"))) == PROCESSES + 1, "every process")
    (folder / "go").touch()
    here.join(WAIT)


def test_threads_and_processes_open_a_new_cache_file_at_once(tmp_path: Path) -> None:
    failures = _all_at_once("open-cache", tmp_path / "cache", open_cache)
    assert failures == []
    opens = ROUNDS * THREADS * (PROCESSES + 1)
    for round_ in range(ROUNDS):
        path = Path(f"{tmp_path / 'cache'}-{round_}.db")
        assert SQLiteCache(path).stats().entries == THREADS * (PROCESSES + 1)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert opens == 320
    # Made whole beside the file and linked into place: no temporary file is left behind.
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_threads_and_processes_create_one_job_state_at_once(tmp_path: Path) -> None:
    failures = _all_at_once("create-job", tmp_path / "job", create_job)
    assert failures == []
    for round_ in range(ROUNDS):
        state = JobState(Path(f"{tmp_path / 'job'}-{round_}.db"))
        assert state.get("job")  # one creator's meta, whole
        state.close()


# --- a writer elsewhere ---


@contextmanager
def held_write(path: Path) -> Iterator[None]:
    """Another process holding `path`'s write lock (an uncommitted write) until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.shared_file_process", "hold", str(path)],
        cwd=REPO, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert read_line(holder.stdout).strip() == "held"
        yield
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert read_line(holder.stdout).strip() == "released"
        holder.wait(timeout=WAIT)
    finally:
        holder.kill()


def test_a_hit_while_another_process_holds_a_long_write_does_not_wait(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    provider = TestProvider([ANSWER], repeat=True)
    # A short busy timeout: a hit that waited for the writer would fail with it.
    store = SQLiteCache(path, timeout=1.0)
    client = StructuredClient(provider, cache=store)
    client.generate(Decision, prompt="Approve?")
    with held_write(path):
        hits = [client.generate(Decision, prompt="Approve?") for _ in range(5)]
        other = SQLiteCache(path, timeout=1.0)  # opening an existing file does not wait either
        assert all(hit.cached for hit in hits) and other.get("no such key") is None
    assert len(provider.requests) == 1
    # The hits were counted in memory, and are written once the file is free.
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.entries) == (5, 1, 1)


def test_a_store_that_only_read_ends_without_waiting_for_another_process_s_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # On main: `close()` of a store that had only hit waited for the writer up to its timeout
    # (30 s by default) to write its counts, and so did a store dropped after one call, whose
    # end ran inside the caller's next statement (up to 5 s). Counts only: past a short bound
    # they are dropped, with a warning.
    path = tmp_path / "c.db"
    provider = TestProvider([ANSWER], repeat=True)
    StructuredClient(provider, cache=SQLiteCache(path)).generate(Decision, prompt="Approve?")
    ended: list[str] = []

    def reads_then_ends() -> None:
        store = SQLiteCache(path)  # (the default timeout: 30 s)
        assert StructuredClient(provider, cache=store).generate(Decision, prompt="Approve?").cached
        store.close()
        ended.append("closed")
        hit = StructuredClient(provider, cache=SQLiteCache(path))  # dropped after its call
        assert hit.generate(Decision, prompt="Approve?").cached
        del hit
        ended.append("dropped")

    with held_write(path), caplog.at_level(logging.WARNING, logger="sdk.cache"):
        reader = threading.Thread(target=reads_then_ends, daemon=True)
        reader.start()
        reader.join(20.0)  # (the writer holds on until this block ends; ending takes ~2 s)
        assert ended == ["closed", "dropped"], "a reader's end waited for the writer"
    assert "counts of hits and misses not written" in caplog.text and str(path) in caplog.text
    assert len(provider.requests) == 1
    # The file is whole and usable: the counts dropped were counts only.
    stats = SQLiteCache(path, readonly=True).stats()
    assert stats.entries == 1 and stats.misses == 1


def test_counts_kept_in_memory_are_written_with_the_next_write_and_at_the_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    client = StructuredClient(TestProvider([ANSWER], repeat=True), cache=store)
    client.generate(Decision, prompt="a")  # a miss, then the answer stored (counts written)
    for _ in range(3):
        client.generate(Decision, prompt="a")  # hits: counted in memory
    assert SQLiteCache(path, readonly=True).stats().hits == 0
    assert store.stats().hits == 3  # asked for its stats, a store writes its counts first
    client.generate(Decision, prompt="a")
    script = (
        "import sys; from sdk.cache import SQLiteCache; from sdk.cache import Entry\n"
        "c = SQLiteCache(sys.argv[1]); c.get('x'); c.get('y')\n"  # two misses, then exit
    )
    subprocess.run([sys.executable, "-c", script, str(path)], env=ENV, check=True, timeout=WAIT)
    store.close()
    stats = SQLiteCache(path, readonly=True).stats()
    assert (stats.hits, stats.misses) == (4, 3)


def _store_one(store: SQLiteCache) -> None:
    """In a forked worker: store an answer (a write, which writes the counts it holds)."""
    store.put("answer", Entry((TestProvider.refusal("x"),)))


def _look_up(store: SQLiteCache) -> None:
    store.get("a-key")


def test_forked_workers_neither_count_the_parent_s_lookups_again_nor_hang_on_its_lock(
    tmp_path: Path,
) -> None:
    # A forked child starts with a copy of the parent's memory: its counts not yet written (which
    # each child then wrote again with its first write: 10 lookups were counted 40 times) and the
    # lock guarding them, as it was at the fork (held by another thread counting a lookup: the
    # child's first lookup waited for it forever).
    import multiprocessing

    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    for n in range(10):
        store.get(f"k{n}")  # 10 misses, counted in memory
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=_store_one, args=(store,)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT)
        assert worker.exitcode == 0
    assert store.stats().misses == 10

    counting, release = threading.Event(), threading.Event()

    def counts_a_lookup() -> None:  # (holding the lock a lookup takes to count itself)
        with store._tally._lock:
            counting.set()
            release.wait(WAIT)

    thread = threading.Thread(target=counts_a_lookup)
    thread.start()
    counting.wait(WAIT)
    child = fork.Process(target=_look_up, args=(store,))
    child.start()
    release.set()
    thread.join(WAIT)
    child.join(WAIT)
    hung = child.is_alive()
    child.kill()
    assert not hung and child.exitcode == 0, "the forked child waited for its parent's lock"
    store.close()


def test_a_file_kept_busy_past_the_timeout_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = SQLiteCache(path, timeout=0.3)
    with held_write(path):
        with pytest.raises(CacheFileError, match="stayed busy") as caught:
            store.put("k", Entry((TestProvider.refusal("x"),)))
        assert str(path) in str(caught.value)
        client = StructuredClient(TestProvider([ANSWER]), cache=store)
        answered = client.generate(Decision, prompt="Approve?")  # a miss: the answer is kept
    assert not answered.cached and answered.value.answer == "approve"
    assert [note.kind for note in answered.notes] == ["cache_not_stored"]
    assert str(path) in str(answered.notes[0].received)


# --- read-only files and folders ---


def _no_write_permission() -> None:
    """In the child (as root, whom permissions do not stop): drop the capabilities that
    override them, so the file's and folder's modes hold as for any other user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3, 4):  # DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_as_reader(*args: str) -> subprocess.CompletedProcess[str]:
    """`sdk ARGS` in a process that cannot write what it may not (another user's files)."""
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=WAIT,
        preexec_fn=_no_write_permission if os.geteuid() == 0 else None,
    )  # fmt: skip


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` and everything in it read-only (and writable again after)."""
    files = [p for p in folder.iterdir() if p.is_file()]
    for file in files:
        file.chmod(0o400)
    folder.chmod(0o500)
    try:
        yield
    finally:
        folder.chmod(0o700)
        for file in files:
            file.chmod(0o600)


def test_batch_status_reads_a_job_in_a_read_only_folder(tmp_path: Path) -> None:
    folder = tmp_path / "archive"
    folder.mkdir()
    items = tmp_path / "items.jsonl"
    write_items(items, 4)
    job = job_for(folder, items, anthropic_backend(AnthropicBatchAPI()))
    job.run()
    job.close()
    before = sorted(p.name for p in folder.iterdir())
    with read_only(folder):
        shown = run_as_reader("batch", "status", "--state", str(folder / "job.db"), "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["ok"] == 4
        assert sorted(p.name for p in folder.iterdir()) == before  # nothing made beside it


_KILLED_MAKING = """
import os, sys
from pathlib import Path
import sdk._sqlite
sdk._sqlite._link = lambda *args: os._exit(9)  # (killed after its file is whole, before the link)
if sys.argv[1] == "cache":
    from sdk.cache import SQLiteCache
    SQLiteCache(sys.argv[2])
else:
    from sdk.batch._state import JobState
    JobState.create(Path(sys.argv[2]), {"job": "x"})
"""


def _make(kind: str, path: Path) -> None:
    if kind == "cache":
        SQLiteCache(path).close()
    else:
        JobState.create(path, {"job": "x"}).close()


def _killed_making(kind: str, path: Path) -> list[str]:
    """Make a cache or a job's state file at `path` in a process killed after the file is
    whole and before it is linked into place: the names left in the folder."""
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MAKING, kind, str(path)], cwd=REPO, env=ENV,
        capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    assert killed.returncode == 9, killed.stderr
    left = sorted(p.name for p in path.parent.iterdir())
    assert left and all(name.startswith(f".{path.name}.") for name in left), left
    return left


@pytest.mark.parametrize("kind", ["cache", "job"])
def test_what_a_maker_killed_before_its_link_left_is_removed_by_the_next(
    tmp_path: Path, kind: str
) -> None:
    # A cache or a job's state file is made whole in a temporary file beside its place, then
    # linked there. On main a maker killed in between left its temporary file (and SQLite's
    # beside it) for good: the next `run` made the job and finished it, the file still there.
    path = tmp_path / "shared.db"
    _killed_making(kind, path)
    _make(kind, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.db"]


@pytest.mark.parametrize("kind", ["cache", "job"])
def test_only_a_dead_maker_s_files_of_this_host_and_user_are_removed(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "shared.db"
    [made] = [name for name in _killed_making(kind, path) if name.endswith(".tmp")]
    host_part, dead = made.split(".")[3], killed_pid(made)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        kept = [
            f".shared.db.{host_part}.{alive.pid}.abcdefgh.tmp",  # a maker alive
            f".shared.db.another-host.{dead}.abcdefgh.tmp",  # on another host
            f".shared.db.{host_part}.notapid.abcdefgh.tmp",  # not a maker's name
            f".other.db.{host_part}.{dead}.abcdefgh.tmp",  # another file's
            f".shared.db.{host_part}.{'9' * 20}.abcdefgh.tmp",  # past a pid (`os.kill`)
            f".shared.db.{host_part}.\u00b2.abcdefgh.tmp",  # a digit `int` refuses
        ]
        for name in kept:
            (tmp_path / name).write_bytes(b"x")
        (tmp_path / f".shared.db.{host_part}.{dead}.folder.tmp").mkdir()  # not a file
        kept.append(f".shared.db.{host_part}.{dead}.folder.tmp")
        if os.geteuid() == 0:
            theirs = tmp_path / f".shared.db.{host_part}.{dead}.zzzzzzzz.tmp"
            theirs.write_bytes(b"x")
            os.chown(theirs, 65534, 65534)  # another user's: not this process's to remove
            kept.append(theirs.name)
        _make(kind, path)
    finally:
        alive.kill()
        alive.wait(timeout=WAIT)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, "shared.db"])


def killed_pid(name: str) -> int:
    """The pid in a temporary file's name (`.NAME.HOST.PID.RANDOM.tmp`)."""
    return int(name.split(".")[4])


_MAKE_CACHE = """
import sys
from sdk.cache import CacheFileError, SQLiteCache
try:
    SQLiteCache(sys.argv[1]).close()
except CacheFileError as error:
    print(error)
"""


def test_a_new_cache_in_a_folder_this_process_cannot_write_names_the_folder(
    tmp_path: Path,
) -> None:
    # On main "<file> cannot be made: Permission denied": neither the folder nor whose it is.
    folder = tmp_path / "archive"
    folder.mkdir()
    path = folder / "new.db"
    with read_only(folder):
        made = subprocess.run(
            [sys.executable, "-c", _MAKE_CACHE, str(path)], cwd=REPO, env=ENV,
            capture_output=True, text=True, timeout=WAIT,
            preexec_fn=_no_write_permission if os.geteuid() == 0 else None,
        )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == (
        f"{path} cannot be made (Permission denied): the folder {folder} cannot be written by "
        "this process (a read-only file system, or another user's folder)"
    ), made.stdout
    assert list(folder.iterdir()) == []


def test_cache_stats_reads_a_cache_in_a_read_only_folder(tmp_path: Path) -> None:
    folder = tmp_path / "archive"
    path = folder / "c.db"
    store = SQLiteCache(path)
    client = StructuredClient(TestProvider([ANSWER], repeat=True), cache=store)
    client.generate(Decision, prompt="a")
    client.generate(Decision, prompt="a")
    # Once with the writer's connection open (its write-ahead log and index beside the file),
    # once after it closed (nothing beside it, and nothing can be made there).
    for closed in (False, True):
        if closed:
            store.close()
        before = sorted(p.name for p in folder.iterdir())
        assert ("c.db-wal" in before) != closed
        with read_only(folder):
            shown = run_as_reader("cache", "stats", "--path", str(path), "--json")
            assert shown.returncode == 0, shown.stderr
            stats = json.loads(shown.stdout)
            # A live store's hit is in its memory until its next write (or its close).
            assert (stats["entries"], stats["hits"], stats["misses"]) == (1, int(closed), 1)
            assert sorted(p.name for p in folder.iterdir()) == before


_READER = """
import sys
from contracts import Decision
from sdk import StructuredClient
from sdk.cache import CacheFileError, SQLiteCache
from sdk.providers import TestProvider
store = SQLiteCache(sys.argv[1])  # (not readonly=True: a client's store, on another's file)
client = StructuredClient(TestProvider([sys.argv[2]], repeat=True), cache=store)
hits = sum(client.generate(Decision, prompt="a").cached for _ in range(600))
fresh = client.generate(Decision, prompt="b")  # a miss: answered, not stored
print(store.stats().entries, hits, fresh.cached, [note.kind for note in fresh.notes],
      fresh.notes[0].received)
store.close()  # (the counts kept: such a file never takes them, and nothing is said)
"""


@pytest.mark.parametrize("folder_too", [False, True], ids=["file", "file-and-folder"])
def test_hits_on_a_cache_file_this_process_cannot_write_are_all_served(
    tmp_path: Path, folder_too: bool
) -> None:
    # Another user's cache file, readable but not writable (in a folder this process may
    # write), opened by a client: every 256th lookup tried to write the counts kept in memory
    # and failed the call with a `CacheFileError` saying the file was "damaged or not a
    # structured-sdk cache" (as the note of an answer it could not store said). And `stats()`
    # failed ("cannot be written"), and so did the store itself in a folder of theirs too.
    folder = tmp_path / "shared"
    path = folder / "c.db"
    store = SQLiteCache(path)
    StructuredClient(TestProvider([ANSWER]), cache=store).generate(Decision, prompt="a")
    store.close()

    path.chmod(0o400)
    if folder_too:
        folder.chmod(0o500)
    try:
        run = subprocess.run(
            [sys.executable, "-c", _READER, str(path), ANSWER], cwd=REPO, env=ENV,
            capture_output=True, text=True, timeout=WAIT,
            preexec_fn=_no_write_permission if os.geteuid() == 0 else None,
        )  # fmt: skip
    finally:
        folder.chmod(0o700)
        path.chmod(0o600)
    assert run.returncode == 0, run.stderr
    assert "not written" not in run.stderr, run.stderr
    entries, hits, cached, kinds, why = run.stdout.strip().split(" ", 4)
    assert (entries, hits, cached, kinds) == ("1", "600", "False", "['cache_not_stored']")
    assert "cannot be written" in why and "readonly=True" in why and "damaged" not in why


def test_read_only_opening_never_changes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    SQLiteCache(path).put("k", Entry((TestProvider.refusal("x"),)))
    before = path.read_bytes()
    store = SQLiteCache(path, readonly=True)
    assert store.get("k") is not None and store.get("nope") is None
    assert store.stats().entries == 1
    with pytest.raises(CacheFileError, match="read-only"):
        store.put("j", Entry((TestProvider.refusal("y"),)))
    store.close()
    assert path.read_bytes() == before
    with pytest.raises(CacheFileError, match="no such file"):
        SQLiteCache(tmp_path / "none.db", readonly=True)
    assert not (tmp_path / "none.db").exists()


# --- a read-only view of a file another process writes ---
# A store that reads a cache through a view it cannot write (a read-only mount of the folder,
# another user's folder) while the file's owner writes it. Where no write-ahead log was beside
# the file when the store opened it, it read it as SQLite's `immutable` (a promise that the file
# never changes): on main it then served entries the writer had cleared or replaced for the
# rest of its life, and on a file bigger than SQLite's page cache said the healthy file "is
# damaged" (probe13a D2). And a default store (not `readonly=True`) on a read-only file system
# was refused as "damaged" (SQLite's "unable to open database file"), where a file it cannot
# write serves its hits (probe13a D5).

_CLONE_NEWNS = 0x20000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 0x4000, 0x40000


def _in_a_read_only_view(folder: Path) -> Callable[[], None]:
    """For a child process (`preexec_fn`): `folder` read-only for it alone, as a read-only
    bind mount in a mount namespace of its own (root only), while others write there."""
    where = str(folder).encode()

    def enter() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
        steps: list[tuple[Callable[..., int], tuple[object, ...]]] = [
            (libc.unshare, (_CLONE_NEWNS,)),
            (libc.mount, (None, b"/", None, _MS_REC | _MS_PRIVATE, None)),
            (libc.mount, (where, where, None, _MS_BIND, None)),
            (libc.mount, (None, where, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)),
        ]
        for call, arguments in steps:
            if call(*arguments) != 0:
                raise OSError(ctypes.get_errno(), "unshare/mount")

    return enter


@pytest.fixture
def read_only_views(tmp_path: Path) -> None:
    """Skip where a child cannot have a read-only mount of its own (not root, no namespaces)."""
    if os.geteuid() != 0:
        pytest.skip("a read-only mount of one's own needs root")
    try:
        subprocess.run(
            [sys.executable, "-c", "pass"], timeout=WAIT, check=True,
            preexec_fn=_in_a_read_only_view(tmp_path),
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError) as error:
        pytest.skip(f"no mount namespace here: {error}")


_VIEWER = """
import json, random, sys, threading
from sdk.cache import SQLiteCache
path, how, keys = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = SQLiteCache(path, readonly=how == "readonly")
names = [f"k{n}" for n in range(keys)]
def text(key):
    found = store.get(key)
    return None if found is None else found.completions[0].refusal
done, seen = threading.Event(), {"lookups": 0, "errors": 0, "first": [], "wrong": 0}
def keep_looking():  # lookups all the time, in a thread of their own (its own connection)
    while not done.is_set():
        key = random.choice(names)
        try:
            value = text(key)
        except Exception as error:
            seen["errors"] += 1
            seen["first"] = seen["first"][:2] + [f"{type(error).__name__}: {error}"]
        else:
            seen["lookups"] += 1
            seen["wrong"] += value is not None and not value.startswith(key + ":")
looker = threading.Thread(target=keep_looking)
if sys.argv[4] == "busy":
    looker.start()
print("ready", flush=True)
for line in sys.stdin:  # "look": 20 lookups, and the entries stats() counts
    if line.strip() != "look":
        break
    try:
        found = {key: text(key) for key in random.sample(names, 20)}
        print(json.dumps({"found": found, "entries": store.stats().entries}), flush=True)
    except Exception as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
done.set()
if looker.is_alive():
    looker.join(60)
print(json.dumps(seen), flush=True)
"""


@pytest.mark.usefixtures("read_only_views")
@pytest.mark.parametrize(
    ("how", "keys", "busy"),
    [("readonly", 200, False), ("default", 200, False), ("readonly", 3000, True)],
    ids=["readonly", "default-store", "readonly-big-file-busy-reader"],
)
def test_a_reader_through_a_read_only_view_never_serves_what_the_writer_cleared_or_replaced(
    tmp_path: Path, how: str, keys: int, busy: bool
) -> None:
    folder = tmp_path / "shared"
    path = folder / "c.db"
    pad = "p" * (3000 if keys > 1000 else 500)  # the big file: ~9 MB, past SQLite's page cache

    def fill(store: SQLiteCache, generation: int) -> None:
        for n in range(keys):
            store.put(f"k{n}", Entry((TestProvider.refusal(f"k{n}:g{generation}:{pad}"),)))

    writer = SQLiteCache(path)
    fill(writer, 0)
    writer.close()  # nothing beside the file: the reader's view cannot have its index made
    assert sorted(p.name for p in folder.iterdir()) == ["c.db"]
    reader = subprocess.Popen(
        [sys.executable, "-c", _VIEWER, str(path), how, str(keys), "busy" if busy else "calm"],
        cwd=REPO, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_in_a_read_only_view(folder),
    )  # fmt: skip
    assert reader.stdin is not None and reader.stdout is not None

    def look() -> tuple[dict[str, str | None], int]:
        """What the reader finds, asked now (after what the writer did has committed)."""
        assert reader.stdin is not None and reader.stdout is not None
        reader.stdin.write("look\n")
        reader.stdin.flush()
        line = read_line(reader.stdout, WAIT)
        answer = json.loads(line) if line else {"error": "ended"}
        assert "error" not in answer, answer
        return answer["found"], answer["entries"]

    try:
        line = read_line(reader.stdout, WAIT)
        assert line == "ready\n", line or (reader.stderr and reader.stderr.read())
        found, entries = look()
        assert entries == keys and all(v == f"{k}:g0:{pad}" for k, v in found.items())
        for generation in (1, 2, 3):
            writer = SQLiteCache(path)
            writer.clear()
            if generation == 2:  # the writer still open, its write-ahead log beside the file
                found, entries = look()
                assert (entries, set(found.values())) == (0, {None}), "a cleared entry served"
            fill(writer, generation)
            if generation != 2:  # cleared, filled and closed: the file changed in place
                writer.close()
            found, entries = look()
            assert entries == keys, f"generation {generation}: {entries} entries seen"
            stale = {k: v[:12] for k, v in found.items() if v != f"{k}:g{generation}:{pad}"}
            assert stale == {}, f"generation {generation}: replaced entries served"
            writer.close()
        reader.stdin.write("end\n")
        reader.stdin.flush()
        seen = json.loads(read_line(reader.stdout, WAIT))
        assert (seen["errors"], seen["first"], seen["wrong"]) == (0, [], 0)
        assert seen["lookups"] > 0 or not busy
    finally:
        if reader.poll() is None:
            reader.kill()
        reader.wait(WAIT)


_OUT_OF_DESCRIPTORS = """
import resource, sys
from sdk.cache import CacheFileError, SQLiteCache
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
held = []
try:
    while True:
        held.append(open(sys.argv[1], "rb"))  # (the file is never opened through these)
except OSError:
    pass
try:
    SQLiteCache(sys.argv[2]).get("k")
    print("opened")
except CacheFileError as error:
    print(error)
"""


def test_a_file_that_cannot_be_opened_is_not_called_damaged(tmp_path: Path) -> None:
    # A process at its limit of open files: SQLite's "unable to open database file" was
    # reported as "damaged or not a structured-sdk cache" (probe13a D5): an operator told so
    # may delete a good file.
    path = tmp_path / "c.db"
    SQLiteCache(path).put("k", Entry((TestProvider.refusal("x"),)))
    run = subprocess.run(
        [sys.executable, "-c", _OUT_OF_DESCRIPTORS, os.devnull, str(path)], cwd=REPO,
        env=ENV, capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    said = run.stdout.strip()
    assert said.startswith(f"{path} cannot be opened"), said
    assert "too many open files" in said and "damaged" not in said


# --- a full disk is a full disk, not damage ---
# SQLite's `max_page_count` (per connection) makes a write past it fail with SQLite's own
# SQLITE_FULL, on a real file: what a full disk gives. On main each said the file "is damaged
# or not a structured-sdk cache / job state file" (probe12a D3): an operator told so may delete
# a good file.


def _full(db: sqlite3.Connection) -> None:
    """No page more for this connection's file."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")


def test_an_answer_a_full_cache_file_cannot_take_says_the_disk_is_full(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    _full(store._connection())  # (this thread's connection: the one the call uses)
    long = json.dumps({"reasoning": "r" * 20_000, "answer": "approve", "confidence": "high"})
    result = StructuredClient(TestProvider([long]), cache=store).generate(Decision, prompt="p")
    assert result.value.answer == "approve"  # the answer is returned all the same
    [note] = [n for n in result.notes if n.kind == "cache_not_stored"]
    assert f"{path} cannot be written: the disk is full" in note.received, note.received
    assert "damaged" not in note.received
    with pytest.raises(CacheFileError) as caught:
        store.put("k", Entry((TestProvider.refusal("x" * 20_000),)))
    assert str(caught.value).startswith(f"{path} cannot be written: the disk is full")
    assert "damaged" not in str(caught.value)


def test_a_job_whose_state_file_is_full_says_the_disk_is_full(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 300)
    with job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))) as job:
        _full(job.state._db)  # (indexing writes through this thread's connection)
        with pytest.raises(BatchError) as caught:
            job.run()
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'job.db'} cannot be written: the disk is full")
    assert "damaged" not in message


_COUNTS_AT_A_FAILED_COMMIT = """
import json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the limit fails, EFBIG)
from contracts import Decision
from sdk import StructuredClient
from sdk.cache import SQLiteCache
from sdk.providers import TestProvider
store = SQLiteCache(sys.argv[1])
answer = json.dumps({"reasoning": "r", "answer": "approve", "confidence": "high"})
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))  # the write-ahead log cannot grow
for number in range(3):
    client = StructuredClient(TestProvider([answer]), cache=store)
    print([note.kind for note in client.generate(Decision, prompt=str(number)).notes])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
print(store.stats().misses, store.stats().entries)
"""


def _run_script(script: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`script` run in a fresh interpreter with `arguments` (bounded: 120 s)."""
    return subprocess.run(
        [sys.executable, "-c", script, *arguments],
        env=ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_counts_taken_by_a_write_whose_commit_fails_are_kept(tmp_path: Path) -> None:
    # A full disk fails a write at its commit (the write-ahead log cannot grow), after the
    # counts kept in memory were added to it: they were lost (probe12a D3: 2 hits and 53
    # misses served, 0 and 8 counted). They are given back, and written with the next write.
    done = _run_script(_COUNTS_AT_A_FAILED_COMMIT, str(tmp_path / "c.db"))
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said[:3] == ["['cache_not_stored']"] * 3, said  # (each answer returned all the same)
    assert said[3] == "3 0", said


_STATS_AND_CLOSE_ON_A_FULL_DISK = """
import json, logging, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the limit fails, EFBIG)
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
from contracts import Decision
from sdk import StructuredClient
from sdk.cache import SQLiteCache
from sdk.providers import TestProvider
store = SQLiteCache(sys.argv[1])
answer = json.dumps({"reasoning": "r", "answer": "approve", "confidence": "high"})
client = StructuredClient(TestProvider([answer], repeat=True), cache=store)
client.generate(Decision, prompt="p")  # a miss, stored (its count written with the entry)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))  # the write-ahead log cannot grow
print(sum(client.generate(Decision, prompt="p").cached for _ in range(5)))
stats = store.stats()  # the 5 hits are in memory alone: the disk takes no count
print(stats.entries, stats.hits, stats.misses)
store.close()  # counts only: said, dropped, and the store closed all the same
print(getattr(store._local, "db", None))
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
stats = SQLiteCache(sys.argv[1], readonly=True).stats()
print(stats.entries, stats.hits, stats.misses)
"""


def test_stats_and_close_on_a_full_disk_still_answer_and_close(tmp_path: Path) -> None:
    # `stats()` writes this store's counts first and `close()` writes what is left: on a full
    # disk both raised `CacheFileError` (untested before; "What is left" 16), `close()`
    # leaving its connection open. `stats()` reads the file with the counts held in memory;
    # `close()` says the counts were dropped, and why, and closes.
    path = tmp_path / "c.db"
    done = _run_script(_STATS_AND_CLOSE_ON_A_FULL_DISK, str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["5", "1 5 1", "None", "1 0 1"], done.stdout
    [warning] = [line for line in done.stderr.splitlines() if line.startswith("sdk.cache ")]
    assert warning.startswith(f"sdk.cache {path}: 5 counts of hits and misses not written ("), (
        warning
    )
    assert "SQLITE_IOERR_WRITE" in warning and warning.endswith("): dropped"), warning


_CANNOT_GROW = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the limit fails, EFBIG)
from sdk.batch import StateFileError
from sdk.batch._state import JobState
from sdk.cache import CacheFileError
from sdk.cache import SQLiteCache
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
for make in (lambda: SQLiteCache(sys.argv[1]), lambda: JobState.create(sys.argv[2], {})):
    try:
        make()
        print("made")
    except (CacheFileError, StateFileError) as error:
        print(type(error).__name__, error)
"""


_NO_FILE_CAN_OPEN = """
import os, resource, sys
from sdk.batch import StateFileError
from sdk.batch._state import JobState
from sdk.cache import CacheFileError
from sdk.cache import SQLiteCache
free = os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: none from it on
os.close(free)
resource.setrlimit(resource.RLIMIT_NOFILE, (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
for make in (lambda: SQLiteCache(sys.argv[1]), lambda: JobState.create(sys.argv[2], {})):
    try:
        make()
        print("made")
    except (CacheFileError, StateFileError) as error:
        print(type(error).__name__, error)
"""


def test_a_new_file_whose_temporary_file_cannot_be_made_is_one_typed_error(
    tmp_path: Path,
) -> None:
    # The temporary file a new file is made in cannot be opened (as when the disk has no inode
    # left): a raw OSError traceback from `SQLiteCache(path)` on main.
    cache, state = tmp_path / "c.db", tmp_path / "job.db"
    done = _run_script(_NO_FILE_CAN_OPEN, str(cache), str(state))
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said == [
        f"CacheFileError {cache} cannot be made: Too many open files",
        f"StateFileError {state} cannot be made: Too many open files",
    ], said
    assert list(tmp_path.iterdir()) == []


def test_a_new_file_the_disk_cannot_take_is_not_made_and_not_called_damaged(
    tmp_path: Path,
) -> None:
    # No file may grow (RLIMIT_FSIZE 0: every write fails as on a failing disk, an I/O error):
    # `SQLiteCache(path)` and a new job's state are refused naming the file, saying it cannot
    # be made; on main: "is damaged or not a structured-sdk cache (disk I/O error)", for a file
    # that does not exist.
    cache, state = tmp_path / "c.db", tmp_path / "job.db"
    done = _run_script(_CANNOT_GROW, str(cache), str(state))
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said[0].startswith(f"CacheFileError {cache} cannot be made: an I/O error"), said
    assert said[1].startswith(f"StateFileError {state} cannot be made: an I/O error"), said
    assert not any("damaged" in line for line in said), said
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing left behind


# --- adopted and created files are owner-only ---


def test_an_empty_file_at_the_cache_path_is_adopted_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    store = SQLiteCache(path)
    store.put("k", Entry((TestProvider.refusal("x"),)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.get("k") is not None
    for beside in ("-wal", "-shm"):
        if Path(f"{path}{beside}").exists():  # SQLite gives them the file's mode
            assert stat.S_IMODE(Path(f"{path}{beside}").stat().st_mode) == 0o600


@pytest.mark.parametrize("content", [b"\n", b"x", b"\x00"], ids=["newline", "letter", "nul"])
def test_a_one_byte_file_is_refused_naming_it_and_left_as_it_is(
    tmp_path: Path, content: bytes
) -> None:
    # Only an empty file (0 bytes) is adopted. SQLite reads a file of one byte as an empty
    # database, so `echo > c.db` (a newline) was taken as one and overwritten with a cache, its
    # mode made 0600 (probe12a D7); two bytes or more were refused. A job's state file: refused
    # on main too, but as "an empty database".
    for path, opening, error in [
        (tmp_path / "c.db", SQLiteCache, CacheFileError),
        (tmp_path / "r.db", lambda p: SQLiteCache(p, readonly=True), CacheFileError),
        (tmp_path / "job.db", JobState, BatchError),
    ]:
        path.write_bytes(content)
        path.chmod(0o644)
        with pytest.raises(error) as caught:
            opening(path)
        assert str(caught.value).startswith(f"{path} is not a "), caught.value
        assert "left as it is" in str(caught.value)
        assert path.read_bytes() == content
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db", "job.db", "r.db"]


def test_an_empty_output_file_a_job_adopts_ends_owner_only(tmp_path: Path) -> None:
    # `touch out.jsonl` before the job (an empty output is taken as the job's): it held every
    # answer with the mode it was made with (0644: readable by anyone on the machine).
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    write_items(items, 5)
    out.touch(mode=0o644)
    out.chmod(0o644)
    backend = LocalBackend(local_clients(Counter(), {}))
    with job_for(tmp_path, items, backend) as job:
        assert job.run().ok == 5
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "job.db").stat().st_mode) == 0o600


def test_a_new_cache_folder_and_file_are_the_owner_s_only(tmp_path: Path) -> None:
    # Every folder the SDK makes on the way is the owner's: on main only the last one was
    # (`mkdir(parents=True)` makes the parents with the default mode, 0755 here).
    tmp_path.chmod(0o755)
    path = tmp_path / "new" / "folder" / "c.db"
    SQLiteCache(path).put("k", Entry((TestProvider.refusal("x"),)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # (one there before is left as it is)


def test_a_job_s_new_output_folders_are_the_owner_s_only(tmp_path: Path) -> None:
    # The output holds every answer, as the state file does: every folder made on the way to
    # it is the owner's (0700), as `sdk._files.private_folder` makes the state file's. On main
    # the output's were made by `mkdir(parents=True)` (0755 here) when the state file was
    # elsewhere.
    tmp_path.chmod(0o755)
    items, out = tmp_path / "items.jsonl", tmp_path / "new" / "answers" / "out.jsonl"
    write_items(items, 2)
    backend = LocalBackend(local_clients(Counter(), {}))
    job = BatchJob.create(
        tmp_path / "job.db", contract=Decision, backend=backend, input=items, out=out
    )
    with job:
        assert job.run().ok == 2
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # (one there before is left as it is)


# --- damaged pages ---


def _damage(path: Path, page: int, noise: bytes) -> None:
    data = bytearray(path.read_bytes())
    size = 4096
    start = (page % max(1, len(data) // size)) * size
    data[start : start + len(noise)] = noise
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def pristine_cache(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A cache file of 60 answers (a few dozen pages), checkpointed: its bytes."""
    path = tmp_path_factory.mktemp("pristine") / "c.db"
    store = SQLiteCache(path)
    client = StructuredClient(TestProvider([ANSWER], repeat=True), cache=store)
    for n in range(60):
        client.generate(Decision, prompt=_prompt(n))
    store.close()
    return path.read_bytes()


def _prompt(n: int) -> str:
    return f"Approve invoice {n}? " + "context " * 200


_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
_PAGES = st.integers(min_value=0, max_value=400)
_NOISE = st.binary(min_size=1, max_size=4096)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(page=_PAGES, noise=_NOISE)
def test_a_damaged_cache_page_is_a_typed_error_or_a_miss(
    tmp_path_factory: pytest.TempPathFactory, pristine_cache: bytes, page: int, noise: bytes
) -> None:
    path = tmp_path_factory.mktemp("damaged") / "c.db"
    path.write_bytes(pristine_cache)
    _damage(path, page, noise)
    provider = TestProvider([ANSWER], repeat=True)
    try:
        client = StructuredClient(provider, cache=SQLiteCache(path))
        for n in range(0, 60, 7):
            assert client.generate(Decision, prompt=_prompt(n)).value.answer == "approve"
    except CacheFileError as error:  # nothing else: no raw sqlite3 error, no traceback
        assert str(path) in str(error)


@pytest.fixture(scope="module")
def pristine_job(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A finished job of 300 items: its state file's bytes."""
    folder = tmp_path_factory.mktemp("pristine-job")
    items = folder / "items.jsonl"
    write_items(items, 300)
    job = job_for(folder, items, anthropic_backend(AnthropicBatchAPI()))
    job.run()
    job.close()
    return (folder / "job.db").read_bytes()


def _overwritten(data: bytes, value: bytes, how: str) -> bytes:
    """`data` with the stored `value` damaged in place (the file's length and pages kept)."""
    start = data.index(value)
    damaged = {
        "not JSON": value[:-1] + b"!",
        "JSON of another shape": b"null".ljust(len(value)),
        "not UTF-8": value[:2] + b"\xff" + value[3:],
    }[how]
    return data[:start] + damaged + data[start + len(value) :]


@pytest.mark.parametrize("how", ["not JSON", "JSON of another shape", "not UTF-8"])
@pytest.mark.parametrize("value", ["schema", "settings"])
def test_a_damaged_value_in_a_job_state_file_is_one_typed_error_naming_it(
    tmp_path: Path, pristine_job: bytes, value: str, how: str
) -> None:
    # Bytes of one stored value overwritten (the pages stay sound): it was a bare JSON error
    # not naming the file (exit 2 from the CLI with "Expecting ',' delimiter"), or a raw
    # `TypeError` traceback (exit 1) for JSON of another shape.
    opening, closing = (b'["Decision", 1, "', b"]") if value == "schema" else (b'{"retries', b"}")
    start = pristine_job.index(opening)
    stored = pristine_job[start : pristine_job.index(closing, start) + 1]
    path = tmp_path / "job.db"
    path.write_bytes(_overwritten(pristine_job, stored, how))
    backend = anthropic_backend(AnthropicBatchAPI())
    with pytest.raises(BatchError) as caught:
        BatchJob.open(path, contract=Decision, backend=backend)
    assert str(path) in str(caught.value)
    if value != "schema":
        return  # (`status` does not read the settings)
    with pytest.raises(BatchError) as caught:
        job_summary(path)
    assert str(path) in str(caught.value)
    command = [sys.executable, "-m", "sdk.cli", "batch", "status", "--state", str(path)]
    status = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=WAIT)
    assert status.returncode == 2 and len(status.stderr.strip().splitlines()) == 1
    assert str(path) in status.stderr


def _job_with_a_failed_item(
    folder: Path, *, retried: bool = False
) -> tuple[Path, Path, AnthropicBatchAPI]:
    """A hosted job of 5 items run to its end with item 1 failed (`retried`: then put back to
    pending by `retry`): its state file, its input, and the batch API it ran on."""
    items = folder / "items.jsonl"
    write_items(items, 5)
    api = AnthropicBatchAPI(Script({1: [ERRORED]}))
    with job_for(folder, items, anthropic_backend(api)) as job:
        assert job.run().failed == 1
        if retried:
            assert job.retry() == 1
    return folder / "job.db", items, api


@pytest.mark.parametrize("column", ["id", "error_type", "error"])
def test_a_failed_item_s_text_stored_as_bytes_is_one_typed_error_in_status(
    tmp_path: Path, column: str
) -> None:
    # A damaged record gives bytes where text was written: `sdk batch status --json` was a
    # `TypeError` traceback (bytes are not JSON), exit 1.
    path, _, _ = _job_with_a_failed_item(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE items SET {column} = x'00ff' WHERE outcome = 'failed'")
    command = [sys.executable, "-m", "sdk.cli", "batch", "status", "--state", str(path), "--json"]
    status = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=WAIT)
    assert status.returncode == 2 and len(status.stderr.strip().splitlines()) == 1
    assert str(path) in status.stderr and f"items.{column}" in status.stderr


@pytest.mark.parametrize(
    ("column", "value"),
    [("feedback", "'[[\"user\"'"), ("feedback", "'[7]'"), ("offset", "'x'"), ("id", "x'00'")],
)
def test_a_pending_item_s_damaged_row_stops_the_run_with_one_typed_error(
    tmp_path: Path, column: str, value: str
) -> None:
    # A damaged record of an item still to run (its feedback not JSON or not a list of turns,
    # its offset or id of another type): `run` raised a raw JSON error or `TypeError`.
    path, items, api = _job_with_a_failed_item(tmp_path, retried=True)
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE items SET {column} = {value} WHERE state = 'pending'")
    resumed = job_for(tmp_path, items, anthropic_backend(api))
    with resumed, pytest.raises(BatchError) as caught:
        resumed.run()
    assert str(path) in str(caught.value) and f"items.{column}" in str(caught.value)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(page=_PAGES, noise=_NOISE)
def test_a_damaged_job_state_page_is_one_typed_error(
    tmp_path_factory: pytest.TempPathFactory, pristine_job: bytes, page: int, noise: bytes
) -> None:
    path = tmp_path_factory.mktemp("damaged-job") / "job.db"
    path.write_bytes(pristine_job)
    _damage(path, page, noise)
    try:
        summary = job_summary(path)
        assert summary.ok + summary.failed <= 300
    except BatchError as error:
        assert str(path) in str(error)


def test_threads_and_processes_adopt_one_empty_cache_file_at_once(tmp_path: Path) -> None:
    # A file made beforehand (`touch`) is adopted in place, by whichever opener comes first.
    for round_ in range(ROUNDS):
        Path(f"{tmp_path / 'cache'}-{round_}.db").touch()
    failures = _all_at_once("open-cache", tmp_path / "cache", open_cache)
    assert failures == []
    for round_ in range(ROUNDS):
        path = Path(f"{tmp_path / 'cache'}-{round_}.db")
        assert SQLiteCache(path).stats().entries == THREADS * (PROCESSES + 1)
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user is made by root alone")
@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_log_or_index_another_user_planted_beside_a_shared_file_is_refused(
    tmp_path: Path, suffix: str
) -> None:
    # Another user's empty `-wal` or `-shm` (the probe's 0666; 0600 is theirs all the same),
    # made in a shared folder before the cache or the job's state was: SQLite used it as it
    # was, and wrote the file's content into it (a job's paths, ids, errors and feedback; a
    # cache's answers), theirs to read and change, the run ending 0 (probe23a: 152,472 bytes
    # read); a `-journal` of theirs SQLite would play back into the file. Refused now, naming
    # it and its owner, for a new file, one there already, and a read-only opening alike.
    nobody = 65534
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    items = shared / "items.jsonl"
    write_items(items, 2)
    cache, state = shared / "c.db", shared / "job.db"

    def planted(path: Path) -> Path:
        sibling = Path(f"{path}{suffix}")
        sibling.touch()
        os.chown(sibling, nobody, nobody)
        sibling.chmod(0o600)  # (theirs: open to them whatever its mode)
        return sibling

    told = f"is another user's (uid {nobody};"
    sibling = planted(cache)
    with pytest.raises(CacheFileError, match=re.escape(told)) as caught:
        SQLiteCache(cache)
    assert str(caught.value).startswith(str(sibling)) and sibling.stat().st_size == 0
    sibling.unlink()
    SQLiteCache(cache).close()  # (made now: its own log and index, then closed)
    for readonly in (False, True):
        sibling = planted(cache)
        with pytest.raises(CacheFileError, match=re.escape(told)):
            SQLiteCache(cache, readonly=readonly)
        sibling.unlink()
    sibling = Path(f"{cache}{suffix}")  # (the owner's, but open to others: made so by them)
    sibling.touch()
    sibling.chmod(0o644)
    with pytest.raises(CacheFileError, match=re.escape("open to more users (0644) than c.db")):
        SQLiteCache(cache)
    sibling.unlink()
    # Beside a file its owner let others read (0644), another user's of no wider mode is a
    # reader's (SQLite makes them as whoever opens the file): used, as ever (the review found a
    # reader of another user's cache refused, and the owner after it).
    cache.chmod(0o644)
    sibling = Path(f"{cache}{suffix}")
    sibling.touch()
    os.chown(sibling, nobody, nobody)
    sibling.chmod(0o644)
    if suffix != "-journal":  # (an empty journal is no journal: SQLite leaves it)
        assert SQLiteCache(cache, readonly=True).stats().entries == 0
        SQLiteCache(cache).close()
    sibling.unlink(missing_ok=True)
    sibling = planted(state)
    backend = LocalBackend(local_clients(Counter(), {}))
    with pytest.raises(BatchError, match=re.escape(told)), job_for(shared, items, backend) as job:
        job.run()
    assert sibling.stat().st_size == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="a link of another user is made by root alone")
def test_a_link_of_another_user_to_a_file_not_there_is_not_followed_to_make_it(
    tmp_path: Path,
) -> None:
    # Another user's link at the cache's path in a shared folder, naming a file not there yet
    # (anywhere: another user's folder, a system file): the SDK made the cache there, as root
    # too, where the kernel refuses to follow such a link (`fs.protected_symlinks`). Made
    # nowhere now: the opening fails, typed.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "c.db"
    link = shared / "c.db"
    link.symlink_to(target)
    os.lchown(link, 65534, 65534)
    with pytest.raises(CacheFileError):
        SQLiteCache(link)
    assert not target.exists() and sorted(p.name for p in shared.iterdir()) == ["c.db"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user is made by root alone")
def test_an_empty_file_of_another_user_is_not_adopted(tmp_path: Path) -> None:
    # An empty file another user left at the path (world-writable, in a shared folder) was
    # adopted, its owner and mode kept: every answer the cache or job then wrote was theirs to
    # read (probe12a). It is refused now, naming the file and its owner, and left as it is.
    nobody = 65534
    items = tmp_path / "items.jsonl"
    write_items(items, 2)
    cache, out = tmp_path / "c.db", tmp_path / "out.jsonl"
    for path in (cache, out):
        path.touch()
        os.chown(path, nobody, nobody)
        path.chmod(0o666)
    with pytest.raises(CacheFileError) as caught:
        SQLiteCache(cache)
    assert str(caught.value).startswith(f"{cache} is an empty file of another user (uid 65534)")
    backend = LocalBackend(local_clients(Counter(), {}))
    with pytest.raises(BatchError) as refused, job_for(tmp_path, items, backend) as job:
        job.run()
    assert str(refused.value).startswith(f"{out} is an empty file of another user (uid 65534)")
    for path in (cache, out):
        found = path.stat()
        assert (found.st_size, found.st_uid, stat.S_IMODE(found.st_mode)) == (0, nobody, 0o666)


def test_hosts_whose_names_differ_only_in_what_a_file_name_cannot_hold_are_told_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A maker's temporary file is named by its host: `a.b` and `a-b` written alike would take
    # each other's makers (alive on the other host) for their own, gone here.
    from sdk import _sqlite

    prefixes = set()
    for hostname in ("a.b", "a-b", "a_b", "a" * 40 + "x", "a" * 40 + "y"):
        monkeypatch.setattr(_sqlite.socket, "gethostname", lambda name=hostname: name)
        prefix = _sqlite._maker_prefix(Path("job.db"))
        host_part = prefix.removeprefix(".job.db.").removesuffix(".")
        assert host_part and "." not in host_part, prefix  # (the pid follows the next dot)
        prefixes.add(prefix)
    assert len(prefixes) == 5
