"""A job's output and state file under other processes' hands (probe12a D1, D2, D5, D6).

A running job holds its output whole: cut under it (logrotate's copytruncate, `: > out`),
moved, deleted, replaced by a copy or appended to by another process, the job stops within a
tick, exit 2 with one line naming the file and what happened, every committed result kept; the
same for its state file deleted or replaced. `resume` never cuts lines the job did not write
(its own uncommitted tail, a crash between an append and its commit, still goes). A write the
file system refuses (a full disk; here a file size limit, EFBIG through the same `pwrite`) is
exit 2 and one line, and `resume` finishes exactly once afterwards. An output path that is a
dangling symbolic link is refused, and nothing is created along it.

What needs processes runs in processes: the CLI, the fanout server (bench/fanout_server.py),
the other process changing the files is the test itself.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts import Decision
from sdk.batch import BatchError
from sdk.batch import BatchJob
from sdk.batch import LocalBackend
from sdk.batch import OutputChanged
from sdk.batch import job_summary
from sdk.batch._output import OutputLog
from tests.batch_support import INVALID_JSON
from tests.batch_support import AnthropicBatchAPI
from tests.batch_support import Script
from tests.batch_support import Sleeps
from tests.batch_support import anthropic_backend
from tests.batch_support import by_id
from tests.batch_support import fanout
from tests.batch_support import gate
from tests.batch_support import local_clients
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.test_batch_integrity import REPO
from tests.test_batch_integrity import counted
from tests.test_batch_integrity import local_run
from tests.test_batch_integrity import one_line
from tests.test_batch_integrity import sdk_process
from tests.test_batch_integrity import sdk_run
from tests.test_batch_integrity import stop
from tests.test_batch_integrity import wait_for

ITEMS = 120


def _answered(url: str) -> int:
    return int(httpx.get(f"{url}/stats", timeout=10).json()["answered"])


def _quiet(url: str, state: Path) -> int:
    """Close the server's gate, let the calls in service end, and wait until the job has
    committed every answer it got: nothing is written until the gate opens again. The number
    of items committed."""
    gate(url, open=False)
    time.sleep(0.3)  # the calls in service (0.05 s each) end; the rest are held
    answered = _answered(url)
    wait_for(lambda: counted(state, "ok") == answered, "the job to commit what it got")
    return answered


def _half_then_held(url: str) -> None:
    """Let half the job's items through, then hold every call: the server closes its gate
    itself, so the job cannot finish while a loaded machine deschedules the test (it has
    120 items of 0.05 s on two workers: 3 s)."""
    gate(url, open=True, count=ITEMS // 2)


def _ended(runner: subprocess.Popen[str], what: str, within: float = 20) -> tuple[int, str]:
    """The runner's exit code and stderr, once it stopped (bounded: on main it never does,
    the server holding every call while the job waits)."""
    try:
        _, errors = runner.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not stop within {within:.0f} s of {what}") from None
    return runner.returncode, errors


def _started(url: str, files: Path, *extra: str, count: int = ITEMS) -> subprocess.Popen[str]:
    items, out, state = files / "items.jsonl", files / "out.jsonl", files / "job.db"
    write_items(items, count)
    arguments = local_run(url, items, out, "--state", str(state), "--concurrency", "2", *extra)
    return sdk_process(*arguments)


CHANGES = {
    "truncate": "was cut to 0 bytes while the job ran",
    "copytruncate": "was cut to 0 bytes while the job ran",
    "move": "was deleted or moved away while the job ran",
    "delete": "was deleted while the job ran: the job stopped without writing more, and wrote",
    "replace": "was replaced by another file while the job ran",
    "append": "grew by 17 bytes the job did not write while it ran",
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_running_job_stops_when_its_output_changes_under_it(tmp_path: Path, change: str) -> None:
    # On main the job went on writing at its own offset (NUL bytes at the front of a cut
    # file, results in a moved or deleted inode, a foreign line overwritten) and ended exit 0
    # "all ok"; here, with the server holding every call, it never ended at all.
    out, state, aside = tmp_path / "out.jsonl", tmp_path / "job.db", tmp_path / "out.jsonl.1"
    with fanout(0.05, "--closed") as url:
        runner = _started(url, tmp_path)
        try:
            _half_then_held(url)
            wait_for(lambda: counted(state, "ok") > 0, "the job's first commit")
            committed = _quiet(url, state)
            kept = out.read_bytes()
            if change == "truncate":
                os.truncate(out, 0)
            elif change == "copytruncate":  # logrotate's: copy, then cut the file in place
                shutil.copy(out, aside)
                os.truncate(out, 0)
            elif change == "move":
                os.rename(out, aside)
            elif change == "delete":
                out.unlink()
            elif change == "replace":  # an editor's save: a copy renamed over the file
                shutil.copy(out, aside)
                os.replace(aside, out)
            else:
                with open(out, "ab") as other:
                    other.write(b'{"id": "note-1"}\n')
            code, errors = _ended(runner, change)
        finally:
            stop(runner)
        assert code == 2, errors
        line = one_line(errors)
        assert f"{out} {CHANGES[change]}" in line, line
        summary = job_summary(state)  # every committed result kept, nothing else claimed
        assert (summary.ok, summary.pending, summary.failed) == (committed, ITEMS - committed, 0)

        # What is left where, and the way on that the message gives.
        if change == "truncate":  # the lines are gone: nothing written since
            assert out.read_bytes() == b""
            refused = sdk_run("batch", "resume", "--state", str(state), timeout=60)
            assert refused.returncode == 2 and str(out) in one_line(refused.stderr)
            return
        if change == "append":
            assert out.read_bytes() == kept + b'{"id": "note-1"}\n'  # never written over
            refused = sdk_run("batch", "resume", "--state", str(state), timeout=60)
            assert refused.returncode == 2, refused.stderr
            assert f"{out}:{committed + 1}: past the" in one_line(refused.stderr)
            assert out.read_bytes() == kept + b'{"id": "note-1"}\n'  # resume kept it too
            os.truncate(out, len(kept))  # the line moved out, as the message says
        elif change in ("copytruncate", "move"):
            assert aside.read_bytes() == kept and not (out.exists() and out.read_bytes())
            os.replace(aside, out)  # the rotated or moved file put back
        elif change == "delete":  # written back from the file the job held open (on main:
            # lost, "start a new job"), owner-only as the job's output is
            assert out.read_bytes() == kept and stat.S_IMODE(out.stat().st_mode) == 0o600
            assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
        else:
            assert out.read_bytes() == kept  # the copy: the job wrote into neither file
        gate(url, open=True)
        resumed = sdk_run("batch", "resume", "--state", str(state), timeout=120)
        assert resumed.returncode == 0, resumed.stderr
    records = by_id(read_output(out))  # each line whole (no NUL bytes), each item once
    assert len(records) == ITEMS and {r["outcome"] for r in records.values()} == {"ok"}


def test_a_ray_job_stops_when_its_output_is_cut_under_it(tmp_path: Path) -> None:
    # The engine's driver ticks as the local runner does (the watch is the job's, shared).
    # Its actors answer 64 items a call: the server lets the first calls through, then holds
    # the rest, so the job has committed some and waits on the others.
    pytest.importorskip("ray")
    out, state = tmp_path / "out.jsonl", tmp_path / "job.db"
    with fanout(0.05, "--closed") as url:
        runner = _started(url, tmp_path, "--engine", "ray", count=400)
        try:
            wait_for(lambda: counted(state, "total") == 400, "the job to index", timeout=120)
            # (Calls of 0.05 s: after the first commit the job has at least 8 s of calls left,
            # for the test to close the gate on a loaded machine. The server's own count does
            # not serve here: half the items left every call of 64 unfinished, and all but the
            # last item's call brought the job so near its end that Ray's shutdown raced the
            # driver, which exited 1, "The core worker has already been shutdown".)
            gate(url, open=True)
            # The first commit waits for the local Ray cluster to start (head, raylet, actors)
            # and its first batch: on a loaded 2-CPU machine the last actor came up 96 s after
            # the cluster's start and 120 s ran out before the commit. A bound on a hang, as
            # the whole runs of the other Ray tests have (300 s), not a measure.
            wait_for(lambda: counted(state, "ok") > 0, "the job's first commit", timeout=300)
            gate(url, open=False)
            os.truncate(out, 0)
            code, errors = _ended(runner, "the cut", within=60)  # (the cluster's shutdown)
        finally:
            stop(runner)
    assert code == 2, errors
    # One line; Ray's own shutdown may log a traceback of its stats thread, never one of ours.
    lines = [line for line in errors.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f'File "{REPO / "sdk"}' not in errors, errors
    assert f"{out} was cut to 0 bytes while the job ran" in lines[0]
    assert out.read_bytes() == b""  # nothing written at the old offset: no NUL bytes
    summary = job_summary(state)
    assert 0 < summary.ok < 400 and summary.ok + summary.pending == 400


@pytest.mark.parametrize("change", ["delete", "replace"])
def test_a_running_job_stops_when_its_state_file_is_deleted_or_replaced(
    tmp_path: Path, change: str
) -> None:
    # On main the job committed into the deleted (or replaced) file to the end, exit 0 and
    # "all ok", while `status` and `resume` then said "no such job state file" or read a
    # file that did not say what the output holds.
    out, state = tmp_path / "out.jsonl", tmp_path / "job.db"
    with fanout(0.05, "--closed") as url:
        runner = _started(url, tmp_path)
        try:
            _half_then_held(url)
            wait_for(lambda: counted(state, "ok") > 0, "the job's first commit")
            committed = _quiet(url, state)
            if change == "delete":
                state.unlink()
            else:
                shutil.copy(state, tmp_path / "copy.db")
                os.replace(tmp_path / "copy.db", state)
            gate(url, open=True)  # the job would now commit again, into the old file
            code, errors = _ended(runner, f"its state file's {change}")
        finally:
            stop(runner)
    assert code == 2, errors
    verb = "deleted" if change == "delete" else "replaced by another file"
    assert f"{state} was {verb} while the job ran" in one_line(errors)
    # Nothing was committed after the change: the output holds what was committed before.
    assert len(by_id(read_output(out))) == committed


def test_a_full_disk_is_one_line_and_resume_finishes_exactly_once(tmp_path: Path) -> None:
    # The output's file system refuses the job's next append. Here a file size limit set on
    # the runner (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG from the same `pwrite` a full disk
    # fails with ENOSPC), at the output's length: its state files are smaller, so the output
    # is the first file to reach it. On main: a chained OSError traceback and exit 1 ("some
    # items failed").
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 600)
    with fanout(0.01, "--closed") as url:
        runner = sdk_process(
            *local_run(url, items, out, "--state", str(state), "--concurrency", "2")
        )
        try:
            # 400 answered, the rest held by the server itself: a test closing the gate after
            # seeing 400 let the job finish all 600 on a loaded machine.
            gate(url, open=True, count=400)
            wait_for(lambda: counted(state, "ok") >= 400, "the first commits")
            runner.send_signal(signal.SIGINT)  # stopped, with items left to run
            _, errors = runner.communicate(timeout=60)
        finally:
            stop(runner)
        assert runner.returncode == 130, errors
        first = job_summary(state)
        assert first.pending > 0 and first.failed == 0
        size = out.stat().st_size
        assert size > max(state.stat().st_size, 64 * 1024), "the state would reach the limit"

        def limited() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))

        gate(url, open=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
        full = subprocess.run(
            [sys.executable, "-m", "sdk.cli", "batch", "resume", "--state", str(state)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
            preexec_fn=limited,
        )  # fmt: skip
        assert full.returncode == 2, full.stderr
        line = one_line(full.stderr)
        assert f"{out}: the output cannot be written (File too large)" in line, line
        after = job_summary(state)
        assert (after.ok, after.pending) == (first.ok, first.pending)  # nothing claimed
        # The space freed (no limit): resume finishes, each item once, every line whole.
        resumed = sdk_run("batch", "resume", "--state", str(state), timeout=120)
        assert resumed.returncode == 0, resumed.stderr
    records = by_id(read_output(out))
    assert len(records) == 600 and {r["outcome"] for r in records.values()} == {"ok"}


# --- the job's own uncommitted tail, and lines it did not write ---


def _local_job(tmp_path: Path, items: Path, plan: dict[int, list[str]] | None = None) -> BatchJob:
    backend = LocalBackend(local_clients(Counter(), plan or {}))
    return BatchJob.create(
        tmp_path / "job.db", contract=Decision, backend=backend, input=items,
        out=tmp_path / "out.jsonl",
    )  # fmt: skip


FOREIGN = b'{"id": "note", "text": "checked by hand"}\n'


def test_resume_and_retry_never_cut_a_line_appended_to_a_finished_job(tmp_path: Path) -> None:
    # On main both exited 0 having cut the line silently.
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    write_items(items, 5)
    with _local_job(tmp_path, items, {3: [INVALID_JSON]}) as job:
        summary = job.run()
    assert (summary.ok, summary.failed) == (4, 1)
    with open(out, "ab") as file:
        file.write(FOREIGN)
    before = out.read_bytes()
    for step in ("run", "retry"):
        backend = LocalBackend(local_clients(Counter(), {}))
        with (
            BatchJob.open(tmp_path / "job.db", contract=Decision, backend=backend) as again,
            pytest.raises(OutputChanged) as raised,
        ):
            again.retry() if step == "retry" else again.run()
        message = str(raised.value)
        assert message.startswith(f"{out}:6: past the ") and "not one the job has still" in message
        assert out.read_bytes() == before, step  # the line kept, the job's lines as they were


def _crashing(api: AnthropicBatchAPI, at: int) -> Any:
    backend = anthropic_backend(api)
    original = backend.results

    def results(remote_id: str) -> Any:
        for number, result in enumerate(original(remote_id)):
            if number == at:
                raise KeyboardInterrupt("killed while collecting")
            yield result

    backend.results = results  # type: ignore[method-assign]
    return backend


def _hosted_job(folder: Path, items: Path, backend: Any) -> BatchJob:
    folder.mkdir(exist_ok=True)
    return BatchJob.create(
        folder / "job.db", contract=Decision, backend=backend, input=items,
        out=folder / "out.jsonl", sleep=Sleeps(), collect_chunk=2,
    )  # fmt: skip


@pytest.mark.parametrize("tail", ["own", "own-then-foreign"])
def test_resume_cuts_the_job_s_own_uncommitted_lines_and_nothing_else(
    tmp_path: Path, tail: str
) -> None:
    # A crash between an append and its commit leaves whole lines of the job's own, for items
    # it has not marked done (here: the lines another run of the same job wrote for them),
    # and maybe a torn one: `resume` cuts those and writes the items once. A line after them
    # that is not the job's is refused, naming its line, and nothing is cut.
    items = tmp_path / "items.jsonl"
    write_items(items, 10)
    with _hosted_job(tmp_path / "whole", items, anthropic_backend(AnthropicBatchAPI())) as whole:
        assert whole.run().ok == 10
    theirs = {r["id"]: r for r in read_output(tmp_path / "whole" / "out.jsonl")}
    api = AnthropicBatchAPI(Script())
    with (
        _hosted_job(tmp_path / "cut", items, _crashing(api, 4)) as job,
        pytest.raises(KeyboardInterrupt),
    ):
        job.run()
    out = tmp_path / "cut" / "out.jsonl"
    done = {r["id"] for r in read_output(out)}
    assert len(done) == 4  # two chunks of 2 committed
    left = [theirs[f"doc-{n}"] for n in range(10) if f"doc-{n}" not in done]
    marked = [{**record, "request_id": "uncommitted"} for record in left[:3]]
    tail_lines = [json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in marked]
    with open(out, "ab") as file:
        file.write(b"".join(tail_lines))
        file.write(FOREIGN if tail == "own-then-foreign" else tail_lines[0][:40])  # or torn
    before = out.read_bytes()
    with BatchJob.open(
        tmp_path / "cut" / "job.db", contract=Decision, backend=anthropic_backend(api),
        sleep=Sleeps(),
    ) as resumed:  # fmt: skip
        if tail == "own-then-foreign":
            with pytest.raises(
                OutputChanged, match=f'{out}:8: past the .* \\(item "note" is not one'
            ):
                resumed.run()
            assert out.read_bytes() == before
            return
        assert resumed.run().ok == 10
    records = by_id(read_output(out))
    assert set(records) == {f"doc-{n}" for n in range(10)}
    assert "uncommitted" not in {r["request_id"] for r in records.values()}  # cut, written anew


# --- D5: a dangling symbolic link as the output ---


def test_an_output_through_a_dangling_link_is_refused_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    # On main the job followed the link, made the missing folders along its target (0700) and
    # wrote its answers there, exit 0.
    items = tmp_path / "items.jsonl"
    write_items(items, 3)
    target = tmp_path / "elsewhere" / "deep" / "x.jsonl"
    link = tmp_path / "out.jsonl"
    link.symlink_to(target)
    folder_link = tmp_path / "results"
    folder_link.symlink_to(tmp_path / "missing-folder")
    for given in (link, folder_link / "sub" / "out.jsonl"):
        ran = sdk_run(*local_run("http://127.0.0.1:9", items, given, "--state",
                                 str(tmp_path / "j.db")), timeout=60)  # fmt: skip
        assert ran.returncode == 2, ran.stderr
        line = one_line(ran.stderr)
        assert "is a symbolic link to" in line and "which does not exist" in line, line
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "missing-folder").exists()
    assert not (tmp_path / "j.db").exists()
    # A link to a file that exists is that file (resolved once, when the job is made): the
    # job's answers are in its target, under the same checks as a file given by its path.
    real = tmp_path / "real.jsonl"
    real.touch()
    (tmp_path / "to-real.jsonl").symlink_to(real)
    with BatchJob.create(
        tmp_path / "k.db", contract=Decision, backend=LocalBackend(local_clients(Counter(), {})),
        input=items, out=tmp_path / "to-real.jsonl",
    ) as job:  # fmt: skip
        assert job.run().ok == 3
    assert set(by_id(read_output(real))) == {"doc-0", "doc-1", "doc-2"}


def test_a_dangling_link_at_the_lock_path_is_refused_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    # The runner's lock file (`job.db.lock`) is made with O_CREAT: on main a link planted at
    # its path made the job create an empty file wherever it pointed (a folder that exists),
    # or fail with a bare "[Errno 2] No such file or directory" (one that does not), which
    # the CLI printed as such.
    items = tmp_path / "items.jsonl"
    write_items(items, 3)
    state = tmp_path / "job.db"
    with BatchJob.create(
        state, contract=Decision, backend=LocalBackend(local_clients(Counter(), {})),
        input=items, out=tmp_path / "out.jsonl",
    ) as job:  # fmt: skip
        assert job.run().ok == 3
    lock = tmp_path / "job.db.lock"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for target in (elsewhere / "planted", tmp_path / "missing" / "planted"):
        lock.unlink()
        lock.symlink_to(target)
        backend = LocalBackend(local_clients(Counter(), {}))
        refused = r"is a symbolic link to .* which does not exist"
        with (
            BatchJob.open(state, contract=Decision, backend=backend) as again,
            pytest.raises(BatchError, match=refused),
        ):
            again.run()
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "missing").exists()
    assert job_summary(state).ok == 3
    # A link to a file that exists is refused too: the job would lock, and hold open for
    # writing, a file that is not its own (on main it did, silently).
    victim = elsewhere / "notes.txt"
    victim.write_text("someone's notes\n")
    victim.chmod(0o644)
    lock.unlink()
    lock.symlink_to(victim)
    backend = LocalBackend(local_clients(Counter(), {}))
    with (
        BatchJob.open(state, contract=Decision, backend=backend) as again,
        pytest.raises(BatchError, match=r"is a symbolic link to .*notes\.txt: a job's lock"),
    ):
        again.run()
    assert victim.read_text() == "someone's notes\n"
    assert victim.stat().st_mode & 0o777 == 0o644 and lock.is_symlink()


@pytest.mark.parametrize("then", ["nothing", "folder removed", "another file made"])
def test_an_output_deleted_under_a_job_is_written_back_from_the_file_it_holds(
    tmp_path: Path, then: str
) -> None:
    # The job holds its output open: a deleted output's committed bytes are still readable
    # there, and are written back to the path (on main they were lost with the file). A file
    # someone made at the path since is never replaced.
    folder = tmp_path / "results"
    folder.mkdir(mode=0o700)
    path = folder / "out.jsonl"
    log = OutputLog(path, 0)
    try:
        log.append([b'{"id":1,"outcome":"ok"}\n', b'{"id":2,"outcome":"ok"}\n'])
        kept = path.read_bytes()
        log.append([b'{"id":3,"outcome":"ok"}\n'])  # its commit failed: not the job's yet
        log.length = len(kept)
        path.unlink()
        if then == "folder removed":
            folder.rmdir()
        elif then == "another file made":
            path.write_bytes(b"someone else's\n")
        with pytest.raises(OutputChanged) as stopped:
            log.check()
    finally:
        log.close()
    said = str(stopped.value)
    if then == "another file made":
        assert "was replaced by another file while the job ran" in said, said
        assert path.read_bytes() == b"someone else's\n"
    else:
        assert f"wrote its {len(kept)} committed bytes back to {path}" in said, said
        assert path.read_bytes() == kept  # the committed lines alone, whole
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [p.name for p in folder.iterdir()] == ["out.jsonl"]  # no temporary file left
