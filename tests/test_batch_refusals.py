"""What a job says when it cannot go on (probe23a): a lock file planted by another user, a
refusal racing a new runner after a `kill -9`, a folder it cannot write, ids spelled `-0` and `0`,
and a folder given as the state file. Each refusal is one line naming the cause, exit 2.

The CLI's runs are `sdk batch` processes (bounded by their timeouts); the rest runs in-process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts import Decision
from sdk.batch import BatchError
from sdk.batch import BatchInputError
from sdk.batch import BatchJob
from sdk.batch import JobRunning
from sdk.batch import LocalBackend
from sdk.batch import job_summary
from sdk.batch._lock import LEASE_SECONDS
from sdk.batch._lock import RunnerLock
from sdk.batch._lock import lock_path
from sdk.batch._lock import running_holder
from sdk.batch._state import JobState
from tests.batch_support import fanout
from tests.batch_support import job_for
from tests.batch_support import local_clients
from tests.batch_support import write_items
from tests.test_batch_integrity import local_run
from tests.test_batch_integrity import sdk_run
from tests.test_shared_files import ENV
from tests.test_shared_files import REPO
from tests.test_shared_files import WAIT
from tests.test_shared_files import _no_write_permission
from tests.test_shared_files import read_only
from tests.test_shared_files import run_as_reader

NOWHERE = "http://127.0.0.1:1"  # (no call is made: the job is refused first)
NOBODY = 65534


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# --- a lock file of another user ---


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user is made by root alone")
def test_a_lock_file_of_another_user_is_refused_naming_its_owner(tmp_path: Path) -> None:
    # Another user planted `out.jsonl.job.db.lock` (world-writable, in a shared folder) and held
    # a flock on it: on main `run` said the job "is running: another process (starting)... stop
    # it with `sdk batch cancel`" (which did nothing), `status` said not started, and the job
    # was blocked for as long as they liked. (Here over a job run before, whose state file
    # `status` reads; a new job's is not made: the next test.)
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    write_items(items, 3)
    state = tmp_path / "out.jsonl.job.db"
    with fanout(0.0) as url:
        first = sdk_run(*local_run(url, items, out), timeout=60)
    assert first.returncode == 0, first.stderr
    lock = lock_path(state)
    lock.unlink()  # (the job's own, made by its run: another user's is put in its place)
    lock.touch()
    os.chown(lock, NOBODY, NOBODY)
    lock.chmod(0o666)
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        ran = sdk_run(*local_run(NOWHERE, items, out), timeout=60)
        shown = sdk_run("batch", "status", "--state", str(state), "--json", timeout=60)
    finally:
        os.close(fd)
    assert ran.returncode == 2, ran.stderr
    [error] = _error_lines(ran.stderr)
    assert error.startswith(f"error: {lock} is a lock file of another user (uid {NOBODY})"), error
    assert "is running" not in error and "cancel" not in error
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["runner"] is None  # (not taken for a runner of the job)
    found = lock.stat()
    assert (found.st_uid, found.st_size) == (NOBODY, 0)  # left as it was


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user is made by root alone")
def test_a_lock_file_of_another_user_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    # On main the refusal came from the run, after `BatchJob.create` had made the new job's
    # state file: the CLI printed `job state: ...` and left `out.jsonl.job.db` behind, a job that
    # could never run there.
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    write_items(items, 3)
    state = tmp_path / "out.jsonl.job.db"
    lock = lock_path(state)
    lock.touch()
    os.chown(lock, NOBODY, NOBODY)
    ran = sdk_run(*local_run(NOWHERE, items, out), timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.splitlines() == [
        f"error: {lock} is a lock file of another user (uid {NOBODY}): a job locks only a file "
        "of its own, so it does not run on theirs; remove it, or give another --state"
    ]
    backend = LocalBackend(local_clients(Counter(), {}))
    with pytest.raises(BatchError, match=f"is a lock file of another user \\(uid {NOBODY}\\)"):
        BatchJob.create(state, contract=Decision, backend=backend, input=items, out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl", lock.name]
    assert (lock.stat().st_uid, lock.stat().st_size) == (NOBODY, 0)  # left as it was


def _plant(kind: str, lock: Path) -> None:
    """Put `kind` at the lock's path (as another process could have, in a shared folder)."""
    if kind == "link to a file":
        victim = lock.with_name("victim")
        victim.touch()
        lock.symlink_to(victim)
    elif kind == "dangling link":
        lock.symlink_to(lock.with_name("nowhere"))
    elif kind == "folder":
        lock.mkdir()
    elif kind == "another user's folder":
        lock.mkdir()
        os.chown(lock, 12345, 12345)
    else:
        os.mkfifo(lock)


_NOT_A_LOCK_FILE = {
    "link to a file": "{lock} is a symbolic link to {target}: a job's lock file is its own, and "
    "a job does not lock a file through a link; remove the link",
    "dangling link": "{lock}: {lock} is a symbolic link to {target}, which does not exist: a job "
    "does not create files or folders through a dangling link; give a path that exists, or one "
    "without the link",
    "folder": "{lock} is a folder, not a file: a job locks only a file of its own, so it does not "
    "run on this; remove it, or give another --state",
    "another user's folder": "{lock} is a folder, not a file: a job locks only a file of its own, "
    "so it does not run on this; remove it, or give another --state",
    "named pipe": "{lock} is a named pipe, not a file: a job locks only a file of its own, so it "
    "does not run on this; remove it, or give another --state",
}


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(kind, marks=pytest.mark.skipif(
            "another user" in kind and os.geteuid() != 0,
            reason="a file of another user is made by root alone",
        ))
        for kind in _NOT_A_LOCK_FILE
    ],
)  # fmt: skip
def test_what_is_not_a_lock_file_is_refused_before_anything_is_made(
    tmp_path: Path, kind: str
) -> None:
    # On main only another user's regular file was refused before a new job's state file was
    # made: a link (dangling or not) or a folder there was refused by the run, after the state
    # file was made and left behind (a folder with a bare `[Errno 21] Is a directory`), and a
    # named pipe was taken for the lock file: the job ran, locking it.
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    write_items(items, 3)
    state = tmp_path / "out.jsonl.job.db"
    lock = lock_path(state)
    _plant(kind, lock)
    planted = sorted(p.name for p in tmp_path.iterdir())
    ran = sdk_run(*local_run(NOWHERE, items, out), timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.splitlines() == [f"error: {_said(kind, lock)}"]  # (no `job state: ...`)
    backend = LocalBackend(local_clients(Counter(), {}))
    with pytest.raises(BatchError) as refused:
        BatchJob.create(state, contract=Decision, backend=backend, input=items, out=out)
    assert str(refused.value) == _said(kind, lock)
    assert sorted(p.name for p in tmp_path.iterdir()) == planted  # nothing made
    # A job made before it was put there: its run is refused in the same words.
    job_for(tmp_path, items, backend).close()
    other = JobState(tmp_path / "job.db")
    _plant(kind, lock_path(other.path))
    try:
        with pytest.raises(BatchError) as refused_run:
            RunnerLock(other).acquire()
        assert str(refused_run.value) == _said(kind, lock_path(other.path))
    finally:
        other.close()


def _said(kind: str, lock: Path) -> str:
    target = os.readlink(lock) if lock.is_symlink() else ""
    return _NOT_A_LOCK_FILE[kind].format(lock=lock, target=target)


# --- a refusal never names a process that is gone ---


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return int(child.stdout)


def _lease(state: JobState, pid: int, host: str | None = None, age: float = 0.0) -> None:
    lease = {"token": "0" * 16, "pid": pid, "host": host or os.uname().nodename, "since": 1.0e9,
             "renewed": time.time() - age, "in_flight": 0}  # fmt: skip
    with state.transaction() as db:
        state.put("runner", lease, db)


@contextlib.contextmanager
def _locked_after_a_runner_gone(tmp_path: Path) -> Iterator[tuple[JobState, int]]:
    """A job whose runner was killed -9 (its lease left), its lock taken by a new runner that
    has not written its own lease yet; the state and the dead runner's pid."""
    items = tmp_path / "items.jsonl"
    write_items(items, 2)
    job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))).close()
    state = JobState(tmp_path / "job.db")
    dead = _dead_pid()
    _lease(state, dead)
    held = os.open(lock_path(state.path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield state, dead
    finally:
        os.close(held)
        state.close()


def test_a_refused_runner_never_names_a_holder_that_is_gone(tmp_path: Path) -> None:
    # A runner killed -9 leaves its lease; the next runner takes the lock and then writes its
    # own lease. A runner refused in between read the dead one's lease: on main it said the
    # job "is running: pid <the killed process>" (2 refusals in 18 with 4 resumes at once).
    with _locked_after_a_runner_gone(tmp_path) as (state, dead):
        with pytest.raises(JobRunning) as refused:
            RunnerLock(state).acquire()
        assert f"pid {dead}" not in str(refused.value)
        assert "is running: another process (starting)" in str(refused.value)
        # A holder that is alive is named, as before.
        _lease(state, os.getpid())
        with pytest.raises(JobRunning) as named:
            RunnerLock(state).acquire()
        assert f"is running: pid {os.getpid()} on " in str(named.value)


def test_status_never_names_a_runner_that_is_gone(tmp_path: Path) -> None:
    # As for a refused runner (above): between a new runner's taking the lock and its writing
    # its lease, on main `status` named the runner killed -9 before it as the job's runner.
    with _locked_after_a_runner_gone(tmp_path) as (state, _):
        summary = job_summary(state.path)
        assert (summary.state, summary.runner) == ("indexing", None)  # running, unnamed
        shown = sdk_run("batch", "status", "--state", str(state.path), "--json", timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["runner"] is None
        _lease(state, os.getpid())  # (its lease written: named)
        named = job_summary(state.path).runner
        assert named is not None and named.startswith(f"pid {os.getpid()} on ")


def test_a_status_probe_is_not_taken_for_a_runner(tmp_path: Path) -> None:
    # `status` takes the job's lock (shared) for an instant to see whether a runner holds it: on
    # main a `run` or `resume` trying the lock at that instant was refused, "running: another
    # process (starting)" (4 in 300 with `status` probing in a loop). It tries again for a
    # moment now: refused only by a lock held longer than a probe's.
    items = tmp_path / "items.jsonl"
    write_items(items, 2)
    job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))).close()
    state = JobState(tmp_path / "job.db")
    probers = 4
    start = threading.Barrier(probers + 1, timeout=60)
    stop = threading.Event()
    probes = Counter[int]()

    def probe(number: int) -> None:
        mine = JobState(state.path)
        try:
            start.wait()
            while not stop.is_set():
                running_holder(mine)  # (what `status` does)
                probes[number] += 1
        finally:
            mine.close()

    threads = [threading.Thread(target=probe, args=(n,), daemon=True) for n in range(probers)]
    for thread in threads:
        thread.start()
    refused: list[str] = []
    tries = 0
    try:
        start.wait()
        began = time.monotonic()
        while time.monotonic() - began < 4.0:
            tries += 1
            lock = RunnerLock(state)
            try:
                lock.acquire()
            except JobRunning as error:
                refused.append(str(error))
            else:
                lock.release()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    try:
        assert not any(thread.is_alive() for thread in threads)
        assert sum(probes.values()) > 100, probes  # (the probes ran meanwhile)
        assert refused == [], f"{len(refused)} of {tries} refused"
        # A runner's lock (held, not probed) is still refused, after a bounded wait.
        held = os.open(lock_path(state.path), os.O_RDWR)
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            began = time.monotonic()
            with pytest.raises(JobRunning, match="is running: another process"):
                RunnerLock(state).acquire()
            assert time.monotonic() - began < 5.0
        finally:
            os.close(held)
    finally:
        state.close()


def test_a_runner_on_another_host_is_one_for_status_as_for_run(tmp_path: Path) -> None:
    # A runner on another host (the state file on a network file system) renewing its lease,
    # its lock file here deleted (or never made on this side): on main `run` was refused naming
    # it, while `status` said no process ran the job (`"runner": null`, "not started (resume
    # it)"): `status` gave up at the missing lock file without reading the lease.
    items = tmp_path / "items.jsonl"
    write_items(items, 2)
    job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))).close()
    state = JobState(tmp_path / "job.db")
    far = _dead_pid()  # (no process here: a pid of another host is never looked up here)
    try:
        _lease(state, far, host="host-elsewhere")
        assert not lock_path(state.path).exists()
        shown = sdk_run("batch", "status", "--state", str(state.path), "--json", timeout=60)
        assert shown.returncode == 0, shown.stderr
        runner = json.loads(shown.stdout)["runner"]
        assert runner is not None and runner.startswith(f"pid {far} on host-elsewhere since ")
        with pytest.raises(JobRunning) as refused:  # (its lock file made here: the lease decides)
            RunnerLock(state).acquire()
        assert f"is running: pid {far} on host-elsewhere since " in str(refused.value)
        # Its lease not renewed for LEASE_SECONDS: taken over by a run, and not shown as a
        # runner by `status` either.
        _lease(state, far, host="host-elsewhere", age=LEASE_SECONDS + 1)
        assert job_summary(state.path).runner is None
        lock = RunnerLock(state)
        lock.acquire()
        try:
            assert lock.replaced is not None and lock.replaced.host == "host-elsewhere"
        finally:
            lock.release()
    finally:
        state.close()


# --- a folder this process cannot write ---


def test_resume_and_cancel_in_a_folder_this_process_cannot_write(tmp_path: Path) -> None:
    # On a read-only folder `status` works; on main `resume` printed a bare
    # `[Errno 30] Read-only file system: '.../job.db.lock'` (or `[Errno 13]`), and `cancel` and
    # `run` (continuing the job) told a CLI user to "open it with readonly=True".
    folder = tmp_path / "archive"
    folder.mkdir()
    items, out, state = tmp_path / "items.jsonl", folder / "out.jsonl", folder / "job.db"
    write_items(items, 3)
    with fanout(0.0) as url:
        ran = sdk_run(*local_run(url, items, out, "--state", str(state)), timeout=60)
    assert ran.returncode == 0, ran.stderr
    (folder / "job.db.lock").unlink()  # (as on a copy of the job: no lock file yet)
    with read_only(folder):
        again = local_run(NOWHERE, items, out, "--state", str(state))  # (the job continued)
        for command in (["batch", "resume"], ["batch", "cancel"], again[:-2]):
            done = run_as_reader(*command, "--state", str(state))
            assert done.returncode == 2, (command, done.stderr)
            [error] = _error_lines(done.stderr)
            assert error.startswith(f"error: {state} cannot be "), error
            assert f"the folder {folder} cannot be written by this process" in error, error
            assert "sdk batch status" in error and "Errno" not in error, error
            assert "readonly=True" not in error, error
        shown = run_as_reader("batch", "status", "--state", str(state), "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["ok"] == 3


_OPENER = """
import json, sys
from collections import Counter
from pathlib import Path
from sdk.batch import BatchError, BatchJob, LocalBackend, job_summary
from contracts import Decision
from tests.batch_support import local_clients
state, items = Path(sys.argv[1]), Path(sys.argv[2])
said = {}
for how in ("open", "create", "create new"):
    backend = LocalBackend(local_clients(Counter(), {}))
    try:
        if how == "open":
            job = BatchJob.open(state, contract=Decision, backend=backend)
        else:
            path = state if how == "create" else state.parent / "new.db"
            out = state.parent / ("out.jsonl" if how == "create" else "new.jsonl")
            job = BatchJob.create(path, contract=Decision, backend=backend, input=items, out=out)
        job.close()
        said[how] = None
    except BatchError as error:
        said[how] = [type(error).__name__, str(error)]
said["summary_ok"] = job_summary(state).ok  # (what the refusal says reads it)
print(json.dumps(said))
"""


def test_a_job_in_a_folder_this_process_cannot_write_opened_from_python(tmp_path: Path) -> None:
    # On main `BatchJob.open` and `BatchJob.create` there said "open it with readonly=True to
    # only read it": neither takes `readonly`, and the folder, the cause, went unnamed.
    folder = tmp_path / "archive"
    folder.mkdir()
    items = tmp_path / "items.jsonl"
    write_items(items, 3)
    with job_for(folder, items, LocalBackend(local_clients(Counter(), {}))) as job:
        assert job.run().ok == 3
    (folder / "job.db.lock").unlink()  # (as on a copy of the job: no lock file yet)
    state = folder / "job.db"
    with read_only(folder):
        opened = subprocess.run(
            [sys.executable, "-c", _OPENER, str(state), str(items)], cwd=REPO, env=ENV,
            capture_output=True, text=True, timeout=WAIT,
            preexec_fn=_no_write_permission if os.geteuid() == 0 else None,
        )  # fmt: skip
    assert opened.returncode == 0, opened.stderr
    said = json.loads(opened.stdout)
    assert said["summary_ok"] == 3
    for how in ("open", "create"):
        kind, error = said[how]
        assert kind == "StateFileError", (how, kind, error)
        assert error.startswith(f"{state} cannot be written by this process ("), (how, error)
        assert f"the folder {folder} cannot be written by this process (a read-only file" in error
        assert error.endswith(
            f"`sdk.batch.job_summary('{state}')` (`sdk batch status`) reads it without writing"
        ), (how, error)
        assert "readonly=True" not in error, (how, error)
    # A new job there: on main "{new} cannot be made: Permission denied", the folder unnamed.
    kind, error = said["create new"]
    new = folder / "new.db"
    assert kind == "StateFileError", (kind, error)
    assert error == (
        f"{new} cannot be made (Permission denied): the folder {folder} cannot be written by "
        "this process (a read-only file system, or another user's folder)"
    ), error
    assert not new.exists()


# --- ids and paths as given ---


def test_a_duplicate_id_is_shown_as_each_line_wrote_it(tmp_path: Path) -> None:
    # On main: "item id 0 appears more than once: line 1 has 0", though line 1 has `-0`, and
    # without the note that they are the same id as text.
    items = tmp_path / "items.jsonl"
    lines = [{"id": 0, "prompt": "Approve?", "source": "Invoice 2."}] * 2
    items.write_text(
        '{"id": -0, "prompt": "Approve?", "source": "Invoice 1."}\n'
        + "".join(json.dumps(line) + "\n" for line in lines)
    )
    backend = LocalBackend(local_clients(Counter(), {}))
    with pytest.raises(BatchInputError) as refused, job_for(tmp_path, items, backend) as job:
        job.run()
    assert str(refused.value) == (
        f"{items}:2: item id 0 appears more than once: line 1 has -0 (the same id as text: ids "
        "are unique as text)"
    )


def test_a_folder_given_as_the_state_file_is_said_to_be_one(tmp_path: Path) -> None:
    folder = tmp_path / "job.db"
    folder.mkdir()
    with pytest.raises(BatchError, match="is a folder, not a job state file"):
        JobState(folder)
    shown = sdk_run("batch", "status", "--state", str(folder), timeout=60)
    assert shown.returncode == 2
    assert _error_lines(shown.stderr) == [
        f"error: {folder} is a folder, not a job state file: give the state file's path"
    ]


# --- a last line still being written while the job indexes the input ---


def test_a_last_line_being_written_while_indexing_is_indexed_when_whole(tmp_path: Path) -> None:
    # A writer putting a line in two writes (a buffered writer flushing mid-line) while the job
    # indexes the input: on main the half line, with no newline yet, stopped the job as "line
    # 4: not a JSON object (Unterminated string ...)", a line that was whole by the time anyone
    # looked. It is left for later now, and indexed once written.
    items = tmp_path / "items.jsonl"
    write_items(items, 3)
    late = json.dumps({"id": "late", "prompt": "Approve?", "source": "Invoice 9: late."}) + "\n"
    with items.open("a") as file:
        file.write(late[:20])

    def finish() -> None:
        time.sleep(0.3)
        with items.open("a") as file:
            file.write(late[20:])

    writer = threading.Thread(target=finish)
    backend = LocalBackend(local_clients(Counter(), {}))
    with job_for(tmp_path, items, backend) as job:
        writer.start()
        try:
            summary = job.run()
        finally:
            writer.join(timeout=60)
    assert (summary.total, summary.ok) == (4, 4)
    assert {line["id"] for line in map(json.loads, (tmp_path / "out.jsonl").open())} == {
        "doc-0", "doc-1", "doc-2", "late"
    }  # fmt: skip


def test_a_last_line_that_stays_unparsable_is_still_refused(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 2)
    with items.open("a") as file:
        file.write('{"id": "cut", "prompt": "Appr')
    backend = LocalBackend(local_clients(Counter(), {}))
    began = time.monotonic()
    with pytest.raises(BatchInputError) as refused, job_for(tmp_path, items, backend) as job:
        job.run()
    assert str(refused.value).startswith(f"{items}:3: not a JSON object (Unterminated string")
    assert time.monotonic() - began < 30
