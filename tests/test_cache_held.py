"""A `SQLiteCache` holds the entries it read in memory while no process writes its file
(`sdk.cache._held`, told by the kernel: `sdk._changes`): a held entry is served only while the
file holds exactly it.

What shows that an entry is held: two lookups hand back the very same `Entry` (a read of the file
makes a new one each time). What shows it is exact: a lookup made after another process's commit
returned never finds what the file held before it, from any thread or process, through a fork,
a symbolic link, or a queue of notices that overflowed."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sdk.cache import Entry
from sdk.cache import SQLiteCache
from sdk.cache import _held
from sdk.cache._entry import stored_form
from sdk.providers import TestProvider
from tests.shared_file_process import WAIT
from tests.shared_file_process import held_by_another_thread
from tests.shared_file_process import wait_for

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="changes are told by Linux's inotify"
)

FORK = multiprocessing.get_context("fork")


def _entry(text: str) -> Entry:
    return Entry((TestProvider.refusal(text),))


def _text(entry: Entry | None) -> str | None:
    return entry.completions[0].text if entry is not None else None


def _held_now(store: SQLiteCache, key: str) -> bool:
    """Whether `key`'s entry is served from memory: two lookups hand back one object."""
    first = store.get(key)
    return first is not None and store.get(key) is first


# --- held, and dropped at a write ---


def test_an_entry_read_before_is_served_from_memory_and_counted_a_hit(tmp_path: Path) -> None:
    store = SQLiteCache(tmp_path / "c.db")
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    assert _text(store.get("k")) == "one"
    assert store.stats().hits == 3


def test_another_store_s_write_in_this_process_is_seen_at_the_next_lookup(tmp_path: Path) -> None:
    store = SQLiteCache(tmp_path / "c.db")
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    SQLiteCache(tmp_path / "c.db").put("k", _entry("two"))
    assert _text(store.get("k")) == "two"
    SQLiteCache(tmp_path / "c.db").discard("k")
    assert store.get("k") is None


def test_a_clear_by_the_cli_in_another_process_is_seen_at_the_next_lookup(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    done = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "cache", "clear", "--path", str(path)],
        capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert store.get("k") is None


def test_a_held_entry_that_expired_is_a_miss_and_its_expiry_counted(tmp_path: Path) -> None:
    now = [1000.0]
    store = SQLiteCache(tmp_path / "c.db", ttl=10.0, clock=lambda: now[0])
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    now[0] += 11.0
    assert store.get("k") is None
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.expired, stats.entries) == (2, 1, 1, 0)


def test_a_store_opened_read_only_reads_its_file_each_time(tmp_path: Path) -> None:
    SQLiteCache(tmp_path / "c.db").put("k", _entry("one"))
    reader = SQLiteCache(tmp_path / "c.db", readonly=True)
    assert _text(reader.get("k")) == "one"
    assert not _held_now(reader, "k")


def test_a_store_holds_at_most_its_bound_the_oldest_going_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_held, "MAX_ENTRIES", 3)
    store = SQLiteCache(tmp_path / "c.db")
    writer = SQLiteCache(tmp_path / "c.db")
    for n in range(4):
        writer.put(f"k{n}", _entry(f"v{n}"))
    found = {n: store.get(f"k{n}") for n in range(4)}  # (read in order: k0 the oldest)
    # (newest first: a lookup of one no longer held reads it, and holds it, the oldest going)
    assert [store.get(f"k{n}") is found[n] for n in (3, 2, 1, 0)] == [True, True, True, False]


def test_an_entry_larger_than_the_text_bound_is_never_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_held, "MAX_TEXT", 1000)
    store = SQLiteCache(tmp_path / "c.db")
    store.put("small", _entry("s"))
    store.put("large", _entry("x" * 2000))
    assert _held_now(store, "small")
    assert _text(store.get("large")) == "x" * 2000
    assert not _held_now(store, "large")


def test_a_store_reached_through_a_symbolic_link_sees_writes_made_through_the_file(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real.db"
    SQLiteCache(real).put("k", _entry("one"))
    (tmp_path / "link.db").symlink_to(real)
    store = SQLiteCache(tmp_path / "link.db")
    assert _held_now(store, "k")  # (SQLite names the log after the file the link leads to)
    SQLiteCache(real).put("k", _entry("two"))
    assert _text(store.get("k")) == "two"


def _held_once_descriptors_are_free_again(path: str) -> None:
    """A process whose first lookup finds no descriptor left for an inotify instance (`ulimit
    -n` reached for a moment): it reads the file, and once descriptors are free again, holds
    (exit code 0), or not (1)."""
    _held._RETRY_SPACING = 0.0  # (this process only)
    store = SQLiteCache(path)
    taken: list[int] = []
    try:
        while True:
            taken.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    found = store.get("k")
    for fd in taken:
        os.close(fd)
    os._exit(0 if _text(found) == "one" and _held_now(store, "k") else 1)


def test_a_process_that_ran_out_of_descriptors_for_a_moment_holds_again_once_it_has_some(
    tmp_path: Path,
) -> None:
    """No descriptor left when the process's inotify instance is first asked for: the lookup
    reads the file, and the instance is asked for again later (as a watch is), not refused for
    the life of the process."""
    path = str(tmp_path / "c.db")
    SQLiteCache(path).put("k", _entry("one"))
    child = FORK.Process(target=_held_once_descriptors_are_free_again, args=(path,))
    child.start()
    child.join(WAIT)
    assert child.exitcode == 0


def test_a_closed_store_holds_nothing_and_holds_again_once_used(tmp_path: Path) -> None:
    store = SQLiteCache(tmp_path / "c.db")
    store.put("k", _entry("one"))
    first = store.get("k")
    store.close()
    again = store.get("k")
    assert again is not first and _text(again) == "one"
    assert store.get("k") is again


def _descriptors() -> tuple[int, int]:
    """This process's open descriptors, and the watches its inotify instances hold."""
    fds = os.listdir("/proc/self/fd")
    watches = 0
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                told = Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
                watches += sum(line.startswith("inotify wd:") for line in told)
        except OSError:  # (the listing's own descriptor, closed since)
            continue
    return len(fds), watches


def test_stores_made_and_closed_by_the_hundred_leave_no_descriptor_nor_watch_behind(
    tmp_path: Path,
) -> None:
    """Each store watches its file and asks its log's index whether a write is being committed
    (a descriptor of the index kept open): none of it outlives the files' use."""
    before = _descriptors()
    for n in range(200):
        store = SQLiteCache(tmp_path / f"c{n}.db")
        store.put("k", _entry("one"))
        assert _held_now(store, "k")
        store.close()
    files, watches = _descriptors()
    assert files <= before[0] + 4 and watches <= before[1], (before, (files, watches))


# --- exact under concurrency ---

VERSIONS = 150
READER_THREADS = 16


def _write_versions(path: str, committed: Any, start: Any) -> None:
    """Another process: version after version of one entry, each committed before
    `committed` says so, with a pause between (for the readers to hold each)."""
    store = SQLiteCache(path)
    start.wait()
    for version in range(1, VERSIONS + 1):
        store.put("k", _entry(str(version)))
        committed.value = version
        time.sleep(0.003)


def _read_versions(
    path: str, committed: Any, start: Any, store: SQLiteCache | None, last: int = VERSIONS
) -> list[str]:
    """Lookups until the `last` version: each must find at least the version committed before
    it began; what went wrong, and whether any lookup was served from memory."""
    store = store or SQLiteCache(path)
    wrong: list[str] = []
    held = 0
    previous: Entry | None = None
    start.wait()
    deadline = time.monotonic() + WAIT
    while True:
        if time.monotonic() > deadline:
            return [*wrong, f"the last version was not committed within {WAIT} s"]
        before = committed.value
        found = store.get("k")
        version = int(_text(found) or 0)
        if version < before:
            wrong.append(f"found version {version} after version {before} was committed")
        held += found is previous and found is not None
        previous = found
        if before == last:
            break
    return wrong if held else [*wrong, "no lookup was served from memory"]


def _reader_process(path: str, committed: Any, start: Any, results: Any) -> None:
    results.put(_read_versions(path, committed, start, None))


def test_no_lookup_of_any_thread_or_process_finds_a_version_older_than_one_committed(
    tmp_path: Path,
) -> None:
    """A writer process commits 150 versions of one entry; 16 threads of this process (one
    store) and two more processes look it up all along: none finds a version older than the one
    committed before its lookup began, and each serves some lookups from memory."""
    path = str(tmp_path / "c.db")
    SQLiteCache(path).put("k", _entry("0"))
    committed = FORK.Value("i", 0)
    start = FORK.Barrier(1 + READER_THREADS + 2 + 1, timeout=WAIT)
    results = FORK.Queue()
    shared = SQLiteCache(path)
    processes = [FORK.Process(target=_write_versions, args=(path, committed, start))]
    processes += [
        FORK.Process(target=_reader_process, args=(path, committed, start, results))
        for _ in range(2)
    ]
    for process in processes:
        process.start()
    found: list[list[str]] = []

    def read() -> None:
        found.append(_read_versions(path, committed, start, shared))

    threads = [threading.Thread(target=read) for _ in range(READER_THREADS)]
    for thread in threads:
        thread.start()
    start.wait()
    for thread in threads:
        thread.join(WAIT)
    found += [results.get(timeout=WAIT) for _ in range(2)]
    for process in processes:
        process.join(WAIT)
        assert process.exitcode == 0
    assert len(found) == READER_THREADS + 2
    assert [wrong for wrong in found if wrong] == []


PLAIN_VERSIONS = 60


def _write_versions_as_sqlite_does(path: str, committed: Any, start: Any) -> None:
    """Another process writing the file with Python's `sqlite3`, not the SDK, as SQLite writes
    by default (`synchronous=FULL`: each commit syncs its log after writing it and before
    making it visible): version after version of one entry."""
    db = sqlite3.connect(path, isolation_level=None, timeout=WAIT)
    start.wait()
    for version in range(1, PLAIN_VERSIONS + 1):
        db.execute(
            "INSERT OR REPLACE INTO entries (key, value, created, expires) VALUES (?, ?, ?, NULL)",
            ("k", stored_form("k", _entry(str(version))), time.time()),
        )
        committed.value = version
        time.sleep(0.003)
    db.close()


def test_no_lookup_finds_a_version_older_than_one_a_plain_sqlite3_writer_committed(
    tmp_path: Path,
) -> None:
    """A commit is told of (its log written) before it is visible (SQLite first syncs the log,
    then marks the commit in the log's index): a lookup reading the file in between finds the
    version before it, and must not hold it, nor serve it after the commit returned."""
    path = str(tmp_path / "c.db")
    store = SQLiteCache(path, ttl=None)
    store.put("k", _entry("0"))
    committed = FORK.Value("i", 0)
    start = FORK.Barrier(2, timeout=WAIT)
    writer = FORK.Process(target=_write_versions_as_sqlite_does, args=(path, committed, start))
    writer.start()
    try:
        wrong = _read_versions(path, committed, start, store, last=PLAIN_VERSIONS)
    finally:
        writer.join(WAIT)
    assert writer.exitcode == 0
    assert wrong[:3] == [], f"{len(wrong)} lookups went wrong"


def _looking_up(looping: Any, stop: Any) -> None:
    """A forked child looking the entry up with the store it inherited (draining notices)
    until told to stop."""
    store = _inherited[0]
    looping.set()
    while not stop.is_set():
        store.get("k")


_inherited: list[SQLiteCache] = []


def test_a_forked_child_takes_no_notice_its_parent_needs(tmp_path: Path) -> None:
    """A child forked from a process holding entries looks them up all along (with the store it
    inherited), while another store commits a new version: the parent still sees it (two
    processes draining one queue of notices would each take the other's)."""
    path = str(tmp_path / "c.db")
    store = SQLiteCache(path)
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    _inherited[:] = [store]
    looping, stop = FORK.Event(), FORK.Event()
    child = FORK.Process(target=_looking_up, args=(looping, stop))
    child.start()
    try:
        assert looping.wait(WAIT)
        SQLiteCache(path).put("k", _entry("two"))
        time.sleep(0.2)  # (the child looks up, and drains, meanwhile)
        assert _text(store.get("k")) == "two"
    finally:
        stop.set()
        child.join(WAIT)
        _inherited.clear()
    assert child.exitcode == 0


def _collecting_while_looking_up(folder: str, seconds: float) -> None:
    """A process whose stores in reference cycles are freed by the cyclic collector, which runs
    in whichever thread allocates when it is due: at times one taking the notices under their
    lock, where the freed store's finalizer stops watching its file."""
    store = SQLiteCache(f"{folder}/k.db")
    store.put("k", _entry("one"))
    stop = threading.Event()

    def dropped_in_cycles() -> None:
        n = 0
        while not stop.is_set():
            other = SQLiteCache(f"{folder}/c{n % 4}.db")
            other.get("k")
            other.itself = other  # type: ignore[attr-defined]
            del other
            n += 1
            time.sleep(0.0005)

    def writing() -> None:
        writer = SQLiteCache(f"{folder}/k.db")
        while not stop.is_set():
            writer.put("k", _entry("two"))

    threads = [threading.Thread(target=dropped_in_cycles), threading.Thread(target=writing)]
    for thread in threads:
        thread.start()
    gc.set_threshold(20, 10, 10)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        store.get("k")
    stop.set()
    for thread in threads:
        thread.join(WAIT)


def test_a_store_freed_by_the_cyclic_collector_while_notices_are_taken_stops_no_thread(
    tmp_path: Path,
) -> None:
    """A store in a reference cycle freed while this thread holds the notices' lock (the
    collector runs in the thread that allocates) stops watching without waiting for that lock,
    which its own thread holds: the process goes on."""
    child = FORK.Process(target=_collecting_while_looking_up, args=(str(tmp_path), 3.0))
    child.start()
    child.join(WAIT / 4)
    if child.is_alive():
        child.kill()
        child.join(WAIT)
        pytest.fail("the process stopped: a store's finalizer waited for a lock its thread held")
    assert child.exitcode == 0


def _a_daemon_s_files_left_open(folder: str) -> None:
    """A forked child that closes every descriptor it inherited, as a daemon does, opens files
    of its own (deleted ones: a temporary file's), then uses a cache on another file: exit code
    0 if every file it opened is still open, 1 if one was closed under it."""
    gc.collect()  # (what the parent left to the collector closes its own descriptors first)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    with contextlib.ExitStack() as opened:
        own = [opened.enter_context(tempfile.TemporaryFile()) for _ in range(64)]  # (the
        files = {file.fileno(): os.fstat(file.fileno()).st_ino for file in own}  # lowest numbers)
        store = SQLiteCache(f"{folder}/child.db")
        store.put("k", _entry("one"))
        store.get("k")
        closed = 0
        for fd, inode in files.items():
            try:
                closed += os.fstat(fd).st_ino != inode  # (its number given to another file)
            except OSError:
                closed += 1
        os._exit(1 if closed else 0)


def test_a_forked_child_that_closes_its_descriptors_has_none_of_its_files_closed_by_a_store(
    tmp_path: Path,
) -> None:
    """The parent read its file (a descriptor of its log's index kept open: see
    `sdk.cache._held`); its forked child closes every descriptor, as a daemon does, and the
    numbers then name the child's own files: no store closes one, nor asks it of locks."""
    store = SQLiteCache(tmp_path / "c.db")
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    child = FORK.Process(target=_a_daemon_s_files_left_open, args=(str(tmp_path),))
    child.start()
    child.join(WAIT)
    assert child.exitcode == 0


def _notices_overflowing(paths: list[str], count: int) -> None:
    """Another process: `count` changes to the watched files in turn (notices for one file in a
    row are merged by the kernel; alternated, each is queued)."""
    for n in range(count):
        os.utime(paths[n % 2])


def test_notices_lost_to_a_full_queue_drop_every_held_entry(tmp_path: Path) -> None:
    """The kernel's queue of notices overflows (more changes than it keeps, untaken): the
    notices after it are lost, that of a write to a held entry's file among them; every held
    entry is dropped all the same."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip(f"the kernel keeps {limit} notices: too many to fill in a test")
    held = SQLiteCache(tmp_path / "held.db")
    held.put("k", _entry("one"))
    busy = SQLiteCache(tmp_path / "busy.db")
    busy.put("b", _entry("b"))
    assert _held_now(held, "k") and _held_now(busy, "b")  # (both files watched)
    busy_files = [str(tmp_path / "busy.db"), str(tmp_path / "busy.db-wal")]
    flood = FORK.Process(target=_notices_overflowing, args=(busy_files, limit + 1000))
    flood.start()
    flood.join(WAIT)
    assert flood.exitcode == 0
    SQLiteCache(tmp_path / "held.db").put("k", _entry("two"))  # (its notice lost)
    assert _text(held.get("k")) == "two"


def test_entries_are_held_again_after_the_file_s_log_is_deleted_and_made_again(
    tmp_path: Path,
) -> None:
    """A store closed (its watch given up) whose log SQLite then deleted (the last connection
    gone, the log folded into the file): used again, it watches the new log and sees every
    write to it."""
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    store.close()  # (the last connection: SQLite folds the log in and deletes it)
    wait_for(lambda: not Path(f"{path}-wal").exists(), "the log to be deleted")
    assert _held_now(store, "k")
    SQLiteCache(path).put("k", _entry("two"))
    assert _text(store.get("k")) == "two"


def test_a_lookup_waits_for_the_notices_lock_at_most_its_bound_then_reads_the_file(
    tmp_path: Path,
) -> None:
    """The notices' lock held long by another thread (what the cyclic collector may run inside
    it: a store's finalizer writing its counts, waiting for another process's write): a lookup
    waits at most `LOCK_WAIT`, then reads the file and holds nothing from it."""
    from sdk import _changes

    store = SQLiteCache(tmp_path / "c.db")
    store.put("k", _entry("one"))
    assert _held_now(store, "k")
    SQLiteCache(tmp_path / "c.db").put("k", _entry("two"))  # (its notice queued, not taken)
    with held_by_another_thread(lambda: _changes._notices._lock):
        started = time.monotonic()
        found = store.get("k")
        waited = time.monotonic() - started
        again = store.get("k")
    assert _text(found) == "two" and _text(again) == "two"
    assert again is not found  # (read from the file each time: nothing held meanwhile)
    assert _changes.LOCK_WAIT <= waited < _changes.LOCK_WAIT + 2.0
    store.get("k")  # (takes the notices queued meanwhile: the other store's write)
    assert _held_now(store, "k")  # (held again once the lock is free)


def test_a_log_deleted_when_the_store_s_last_thread_ended_is_watched_again_once_made_again(
    tmp_path: Path,
) -> None:
    """A store made and used in one thread only: as the thread ends its connection closes, and
    SQLite, the last connection gone, folds the write-ahead log into the file and deletes it,
    while the store keeps its watch (no `close()`). Used again from another thread, the store
    reads the file through a new connection (a new log) and must watch that log: a write to it
    is seen, not the entry held from before."""
    path = tmp_path / "c.db"
    made: list[SQLiteCache] = []

    def in_one_thread() -> None:
        store = SQLiteCache(path)
        store.put("k", _entry("one"))
        assert _held_now(store, "k")
        made.append(store)

    thread = threading.Thread(target=in_one_thread)
    thread.start()
    thread.join(WAIT)
    [store] = made
    # (the thread's connection is freed with a reference cycle of the sqlite3 module's: the
    # collector closes it)
    wait_for(lambda: gc.collect() >= 0 and not Path(f"{path}-wal").exists(), "the log to go")
    store.get("k")  # (takes the notice of the deleted log)
    assert _held_now(store, "k")  # (watched again: the new log)
    SQLiteCache(path).put("k", _entry("two"))
    assert _text(store.get("k")) == "two"
