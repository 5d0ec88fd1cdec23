"""A batch job's output is right or the job refuses (issue 21): one runner per job, cancel from
anywhere, item identity, every per-item failure contained, state files, lost batches proven,
settings, and the numbers a user reads.

What needs processes runs in processes: two runners at once, a cancel from a third process,
SIGKILL during indexing, SIGINT, `status` of a running job, two `create`s at once. The local
server is bench/fanout_server.py in its own process (it counts the completions it was asked
for); hosted jobs in a process of their own run `tests/batch_process.py`.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contracts import Decision
from sdk.batch import BatchError
from sdk.batch import BatchJob
from sdk.batch import JobMismatch
from sdk.batch import JobSettings
from sdk.batch import LocalBackend
from sdk.batch import job_summary
from sdk.cli import app
from tests.batch_support import INVALID_JSON
from tests.batch_support import NO_CUSTOM_ID
from tests.batch_support import NO_RESULT
from tests.batch_support import NOT_JSON_LINE
from tests.batch_support import RESULT_NOT_OBJECT
from tests.batch_support import VALID
from tests.batch_support import AnthropicBatchAPI
from tests.batch_support import Script
from tests.batch_support import Sleeps
from tests.batch_support import anthropic_backend
from tests.batch_support import by_id
from tests.batch_support import completions
from tests.batch_support import fanout
from tests.batch_support import gate
from tests.batch_support import job_for
from tests.batch_support import local_clients
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.process_support import interruptible

REPO = Path(__file__).resolve().parents[1]


# --- running the CLI and the job helpers as processes ---


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def sdk_process(*args: str) -> subprocess.Popen[str]:
    """`sdk ARGS` in a process of its own, interruptible with SIGINT as from a terminal."""
    return subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", *args],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=interruptible,
    )  # fmt: skip


def sdk_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def helper_process(*args: str) -> subprocess.Popen[str]:
    """`python -m tests.batch_process ARGS` in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.batch_process", *args],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def local_run(url: str, items: Path, out: Path, *extra: str) -> list[str]:
    return [
        "batch", "run", "--contract", "contracts:Decision", "--provider", "llamacpp",
        "--base-url", url, "--input", str(items), "--out", str(out), *extra,
    ]  # fmt: skip


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def summary_of(state: Path) -> Any:
    """The job's summary as `sdk batch status` reads it, or `None` before the file is whole."""
    if not state.exists():
        return None
    try:
        return job_summary(state)
    except (BatchError, sqlite3.Error):
        return None


def counted(state: Path, what: str) -> int:
    summary = summary_of(state)
    return int(getattr(summary, what)) if summary is not None else 0


def one_line(text: str) -> str:
    """The one error line of a command's stderr (and no traceback)."""
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in text, f"expected one error line: {text!r}"
    return errors[0]


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.communicate(timeout=30)


@dataclass(frozen=True)
class JobFiles:
    items: Path
    out: Path
    state: Path


@contextmanager
def local_job(
    tmp_path: Path, count: int, delay: float, *extra: str, closed: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str, JobFiles]]:
    """`sdk batch run` over `count` items against a fanout server answering after `delay`
    seconds (`closed`: holding every completion until its gate opens), in a process of its own:
    the process, the server's URL and the job's files. The process is killed on the way out if
    it still runs."""
    files = JobFiles(tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db")
    write_items(files.items, count)
    with fanout(delay, *(["--closed"] if closed else [])) as url:
        arguments = local_run(url, files.items, files.out, "--state", str(files.state), *extra)
        runner = sdk_process(*arguments)
        try:
            yield runner, url, files
        finally:
            stop(runner)


# --- 1. one runner per job ---


def test_a_second_runner_is_refused_while_the_first_runs_and_nothing_is_sent_twice(
    tmp_path: Path,
) -> None:
    # The server holds every completion until its gate opens: the first runner is running for
    # as long as the test needs, however loaded the machine.
    with local_job(tmp_path, 60, 0.01, "--concurrency", "2", closed=True) as (first, url, files):
        state = files.state
        wait_for(lambda: counted(state, "total") == 60, "the first runner to index")
        second = sdk_run("batch", "resume", "--state", str(state))
        assert second.returncode == 2, second.stderr
        assert first.poll() is None, "the first runner ended before the second started"
        line = one_line(second.stderr)
        assert "is running" in line and f"pid {first.pid} on " in line and "since" in line
        again = sdk_run(*local_run(url, files.items, files.out, "--state", str(state)))
        assert again.returncode == 2 and f"pid {first.pid}" in one_line(again.stderr)
        assert first.poll() is None
        gate(url, open=True)
        _, errors = first.communicate(timeout=120)
        assert first.returncode == 0, errors
        assert completions(url) == 60  # every item sent once, by the one runner
    records = by_id(read_output(files.out))  # each line whole, each item once
    assert len(records) == 60 and {r["outcome"] for r in records.values()} == {"ok"}


def test_a_dead_runner_s_successor_takes_the_job_over(tmp_path: Path) -> None:
    with local_job(tmp_path, 40, 0.2, "--concurrency", "2") as (first, _, files):
        wait_for(lambda: counted(files.state, "ok") >= 2, "the first runner's first commit")
        os.kill(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
        assert "running" not in job_summary(files.state).state  # its lock died with it
        resumed = sdk_run("batch", "resume", "--state", str(files.state))
        assert resumed.returncode == 0, resumed.stderr
    records = by_id(read_output(files.out))
    assert len(records) == 40 and all(r["outcome"] == "ok" for r in records.values())


def test_the_lease_fences_a_runner_whose_job_was_taken_over(tmp_path: Path) -> None:
    # What a flock cannot see: the lock file replaced under a running job (or a network file
    # system whose locks do not reach the other host). The lease decides, and fences.
    from sdk.batch import JobRunning
    from sdk.batch._lock import LEASE_SECONDS
    from sdk.batch._lock import RunnerLock
    from sdk.batch._lock import lock_path
    from sdk.batch._state import JobState

    path = tmp_path / "items.jsonl"
    write_items(path, 2)
    job_for(tmp_path, path, anthropic_backend(AnthropicBatchAPI())).close()
    first_state, second_state = JobState(tmp_path / "job.db"), JobState(tmp_path / "job.db")
    first = RunnerLock(first_state)
    first.acquire()
    with pytest.raises(JobRunning, match=f"pid {os.getpid()} on "):
        RunnerLock(second_state).acquire()  # the flock
    lock_path(tmp_path / "job.db").unlink()  # someone removes the lock file
    with pytest.raises(JobRunning, match="is running"):
        RunnerLock(second_state).acquire()  # the lease: fresh, its holder alive
    with first_state.transaction() as db:  # the holder stalls past its lease
        lease = first_state.get("runner")
        first_state.put("runner", {**lease, "renewed": lease["renewed"] - LEASE_SECONDS}, db)
    second = RunnerLock(second_state)
    second.acquire()  # taken over
    with pytest.raises(JobRunning, match="took the job over"), first_state.transaction() as db:
        first.fence(db)  # the first runner's next commit writes nothing
    first.release()
    assert first_state.get("runner")["token"] == second.token  # its release left the lease
    second.release()
    assert first_state.get("runner") is None
    first_state.close()
    second_state.close()


def _local_job_over(tmp_path: Path, state: str, items: Path, out: Path) -> BatchJob:
    backend = LocalBackend(local_clients(Counter(), {}))
    return BatchJob.create(
        tmp_path / state, contract=Decision, backend=backend, input=items, out=out
    )


def test_a_job_never_cuts_lines_another_job_wrote_to_its_output(tmp_path: Path) -> None:
    # Two jobs (two state files) made over one output while it was empty; the first runs. On
    # main the second then cut the output back to its own committed length (0), every line of
    # the first gone, and the first's resume refused its own output as "shorter".
    first, second, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "out.jsonl"
    write_items(first, 6, prefix="a")
    write_items(second, 4, prefix="b")
    with (
        _local_job_over(tmp_path, "a.db", first, out) as a,
        _local_job_over(tmp_path, "b.db", second, out) as b,
    ):
        assert a.run().ok == 6
        with pytest.raises(JobMismatch) as raised:
            b.run()
    assert f"{out} holds" in str(raised.value) and "did not write" in str(raised.value)
    assert set(by_id(read_output(out))) == {f"a-{n}" for n in range(6)}


def test_a_second_job_writing_to_a_running_job_s_output_is_refused(tmp_path: Path) -> None:
    # Two `sdk batch run` over one output (a shard each, their own state files), the first
    # running (its server holding every completion). On main the second ran too, both writing
    # at their own offsets of one file (lines overwritten); it is refused before it sends.
    with local_job(tmp_path, 40, 0.01, "--concurrency", "2", closed=True) as (runner, url, files):
        wait_for(lambda: completions(url) >= 2, "the first job's calls")
        other = tmp_path / "shard2.jsonl"
        write_items(other, 10, prefix="shard2")
        try:
            second = sdk_run(*local_run(url, other, files.out, "--state", str(tmp_path / "2.db")),
                             timeout=60)  # fmt: skip
        finally:
            gate(url, open=True)
        assert second.returncode == 2, second.stderr
        assert f"{files.out} is being written by another job" in one_line(second.stderr)
        _, errors = runner.communicate(timeout=120)
        assert runner.returncode == 0, errors
    assert set(by_id(read_output(files.out))) == {f"doc-{n}" for n in range(40)}


@pytest.mark.parametrize("where", ["fifo", "under-a-file", "stdout", "folder"])
def test_an_output_that_cannot_be_a_job_s_file_is_one_line_not_a_traceback(
    tmp_path: Path, where: str
) -> None:
    # On main: a traceback and exit 1 for each (OSError "Illegal seek" on a fifo,
    # FileExistsError from mkdir under a file, FileNotFoundError for /dev/stdout resolved to
    # /proc/<pid>/fd/pipe:[...], IsADirectoryError).
    items = tmp_path / "items.jsonl"
    write_items(items, 3)
    out = {"fifo": tmp_path / "fifo", "under-a-file": items / "out.jsonl",
           "stdout": Path("/dev/stdout"), "folder": tmp_path}[where]  # fmt: skip
    if where == "fifo":
        os.mkfifo(out)
    ran = sdk_run(*local_run("http://127.0.0.1:9", items, out, "--state", str(tmp_path / "j.db")),
                  timeout=60)  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    line = one_line(ran.stderr)
    assert str(out) in line or where == "stdout", line
    assert "not a regular file" in line or "cannot be opened to write" in line, line


# --- 2. cancel from anywhere ---


def test_cancel_from_a_third_process_stops_a_running_local_job_within_seconds(
    tmp_path: Path,
) -> None:
    with local_job(tmp_path, 400, 0.2, "--concurrency", "2") as (runner, url, files):
        state, out = files.state, files.out
        wait_for(lambda: counted(state, "ok") >= 2, "the job's first commit", timeout=120)
        # From here the server holds every completion: however long the cancel takes to start
        # on a loaded machine, the job can neither finish nor send more than the two calls it
        # has in flight, so what it sent tells the queue drained from the queue sent.
        gate(url, open=False)
        cancel = sdk_run("batch", "cancel", "--state", str(state))
        assert cancel.returncode == 0, cancel.stderr
        assert "stops within seconds" in cancel.stdout
        _, errors = runner.communicate(timeout=120)  # a bound on a hang, not a measure
        sent = completions(url)
    assert runner.returncode == 1, errors  # items cancelled
    records = by_id(read_output(out))
    outcomes = Counter(record["outcome"] for record in records.values())
    assert len(records) == 400 and set(outcomes) == {"ok", "cancelled"}
    # The queue was drained, not sent: nothing went out but the answered calls and the two
    # held in flight when the job stopped (cancelled, to run again later).
    assert sent <= outcomes["ok"] + 2 and outcomes["cancelled"] >= 400 - sent
    assert job_summary(state).state == "cancelled"


def test_cancel_from_a_third_process_stops_a_running_hosted_job(tmp_path: Path) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 20)
    # The batch never ends unless cancelled; the runner polls every hour, so it ends inside the
    # bounded wait below only if the cancel cut its wait short (no timed assert: load cannot
    # turn an hour into the wait's two minutes).
    runner = helper_process(
        "hosted-run", str(state), str(items), str(out), "--poll-interval", "3600"
    )
    try:
        wait_for(lambda: counted(state, "in_flight") == 20, "the batch to be submitted")
        cancel = subprocess.run(
            [sys.executable, "-m", "tests.batch_process", "hosted-cancel", str(state)],
            cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        # The canceller's API knows no batch: the running job cancels its own batches.
        assert cancel.returncode == 0, cancel.stderr
        printed, errors = runner.communicate(timeout=120)
    finally:
        stop(runner)
    assert runner.returncode == 0, errors
    summary = json.loads(printed.splitlines()[-1])
    assert summary["cancelled"] == 20 and summary["state"] == "cancelled"
    assert summary["batches_cancelled"] == [True]
    records = by_id(read_output(out))
    assert {record["outcome"] for record in records.values()} == {"cancelled"}


# --- 3. item identity ---


def test_sigkill_during_indexing_then_an_edited_input_is_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"

    def indexed_some() -> bool:
        if not state.exists():
            return False
        try:
            with sqlite3.connect(f"{state.as_uri()}?mode=ro", uri=True) as db:
                return int(db.execute("SELECT count(*) FROM items").fetchone()[0]) > 0
        except sqlite3.Error:
            return False

    with local_job(tmp_path, 200_000, 0.0) as (runner, url, _):
        wait_for(indexed_some, "the first indexed chunk", timeout=60)
        os.kill(runner.pid, signal.SIGKILL)
        runner.communicate(timeout=30)
        with sqlite3.connect(f"{state.as_uri()}?mode=ro", uri=True) as db:
            marks = dict(db.execute("SELECT key, value FROM meta").fetchall())
            indexed = db.execute("SELECT count(*) FROM items").fetchone()[0]
        assert "indexed" not in marks and 0 < indexed < 200_000, "not killed while indexing"
        lines = items.read_bytes().split(b"\n")
        assert len(lines[1]) == len(lines[2])  # doc-1 and doc-2: the same length
        lines[1], lines[2] = lines[2], lines[1]  # swapped: every offset still starts a line
        items.write_bytes(b"\n".join(lines))
        resumed = sdk_run("batch", "resume", "--state", str(state), timeout=60)
        assert completions(url) == 0
    assert resumed.returncode == 2, resumed.stderr
    line = one_line(resumed.stderr)
    assert f"{items}:2:" in line and "changed" in line and "doc-1" in line
    assert not out.exists() or out.read_bytes() == b""


def _padded_items(path: Path, count: int) -> None:
    """Items with a 2 KB system prompt each: the input is past 3 MB, so a change in its middle
    is outside its first and last megabyte."""
    with path.open("w", encoding="utf-8") as file:
        for number in range(count):
            record = {
                "id": f"doc-{number}",
                "source": f"Invoice {number}: $4,180.00 for PO-{2000 + number}.",
                "prompt": "Approve this purchase?",
                "system": "Policy. " * 256,
            }
            file.write(json.dumps(record) + "\n")


class Crash(Exception):
    """Stands for the process dying."""


def _index_then_crash(tmp_path: Path, items: Path, api: AnthropicBatchAPI) -> None:
    job = job_for(tmp_path, items, anthropic_backend(api))

    def crash(progress: Any) -> None:
        if getattr(progress, "phase", "running") == "running":
            raise Crash("killed once indexing was done")

    with pytest.raises(Crash):
        job.run(progress=crash, progress_every=0)
    job.close()


def test_two_swapped_lines_of_equal_length_stop_the_job_naming_the_first(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    _padded_items(items, 1500)
    api = AnthropicBatchAPI(Script())
    _index_then_crash(tmp_path, items, api)
    lines = items.read_bytes().split(b"\n")
    assert len(lines[699]) == len(lines[700])  # doc-699 and doc-700, mid-file
    lines[699], lines[700] = lines[700], lines[699]
    items.write_bytes(b"\n".join(lines))

    resumed = BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), sleep=Sleeps()
    )
    with pytest.raises(JobMismatch, match=r"items\.jsonl:700: changed .*'doc-699'"):
        resumed.run()
    resumed.close()
    assert api.creates() == 0  # nothing sent: no answer under the wrong id
    assert not (tmp_path / "out.jsonl").exists() or read_output(tmp_path / "out.jsonl") == []


def test_an_item_whose_line_changed_is_never_answered_under_its_id(tmp_path: Path) -> None:
    # The lines stay where they were, one item's text changes (same length): the job stops
    # at that item, after committing the ones before it, and writes nothing for it.
    items = tmp_path / "items.jsonl"
    _padded_items(items, 1500)
    api = AnthropicBatchAPI(Script())
    _index_then_crash(tmp_path, items, api)
    data = items.read_bytes()
    edited = data.replace(b"Invoice 900: $4,180.00", b"Invoice 900: $9,999.00")
    assert len(edited) == len(data) and edited != data
    items.write_bytes(edited)
    resumed = BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), sleep=Sleeps()
    )
    with pytest.raises(JobMismatch, match=r"items\.jsonl:901: changed .*'doc-900'"):
        resumed.run()
    resumed.close()
    written = {record["id"] for record in read_output(tmp_path / "out.jsonl")}
    assert "doc-900" not in written


# --- 4. every per-item failure contained ---


def test_local_items_whose_call_raises_fail_alone_and_the_job_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 6)
    with path.open("a", encoding="utf-8") as file:
        # `system` twice: generate() raises TypeError before sending anything.
        file.write('{"id": "bad-options", "prompt": "x", "options": {"system": "y"}}\n')
        file.write('{"id": "\\ud800", "prompt": "an id that is not text"}\n')
        file.write('{"id": "bad-text", "prompt": "caf\\udcff"}\n')  # not encodable on the wire
    counter: Counter[str] = Counter()
    backend = LocalBackend(local_clients(counter, {}), flush_every=3)
    job = job_for(tmp_path, path, backend, settings=JobSettings(retries=1))
    summary = job.run()
    job.close()
    raw = (tmp_path / "out.jsonl").read_bytes()
    raw.decode("utf-8")  # the output is valid UTF-8, whatever the input held
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 6 and summary.failed == 3 and summary.finished
    assert records["bad-options"]["error"]["type"] == "TypeError"
    assert "system" in records["bad-options"]["error"]["message"]
    assert records["\\ud800"]["outcome"] == "failed"
    assert "not valid Unicode" in records["\\ud800"]["error"]["message"]
    assert records["bad-text"]["outcome"] == "failed"


def test_hosted_items_whose_request_cannot_be_built_fail_alone(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 5)
    with path.open("a", encoding="utf-8") as file:
        file.write('{"id": "bad-options", "prompt": "x", "options": {"output_config": 5}}\n')
        file.write('{"id": "\\ud800", "prompt": "an id that is not text"}\n')
    api = AnthropicBatchAPI(Script())
    job = job_for(tmp_path, path, anthropic_backend(api))
    summary = job.run()
    job.close()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 5 and summary.failed == 2
    assert records["bad-options"]["error"]["type"] == "TypeError"
    assert "output_config" in records["bad-options"]["error"]["message"]  # as a live call says
    assert records["\\ud800"]["error"]["type"] == "BatchInputError"
    assert sum(len(batch.requests) for batch in api.batches.values()) == 5


@pytest.mark.parametrize("hostile", [NOT_JSON_LINE, NO_CUSTOM_ID, NO_RESULT, RESULT_NOT_OBJECT])
def test_anthropic_result_lines_of_any_shape_are_contained(tmp_path: Path, hostile: str) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 8)
    api = AnthropicBatchAPI(Script({3: [hostile, VALID], 5: [hostile, VALID]}))
    job = job_for(tmp_path, path, anthropic_backend(api))
    summary = job.run()
    job.close()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 8 and summary.finished  # the two were resent and answered
    assert records["doc-3"]["attempts"] == 2 and records["doc-5"]["attempts"] == 2
    assert api.creates() == 2


# --- 5. state files ---


def test_status_never_changes_another_application_s_sqlite_file(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('job', 'not json at all')")
        db.execute("CREATE TABLE users (name TEXT)")
    before = other.read_bytes()
    runner = CliRunner()
    for command in (["status"], ["resume"], ["cancel"]):
        result = runner.invoke(app, ["batch", *command, "--state", str(other)])
        assert result.exit_code == 2, (command, result.output)
        assert "not a job state file" in one_line(result.stderr)
    assert other.read_bytes() == before  # no tables added, no WAL switched on
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_damaged_state_file_is_one_line_and_exit_2(tmp_path: Path, fanout_url: str) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 3000)
    runner = CliRunner()
    ran = runner.invoke(app, local_run(fanout_url, items, out, "--state", str(state)))
    assert ran.exit_code == 0, ran.output
    data = bytearray(state.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    data[5 * page : 7 * page] = bytes(range(256)) * (2 * page // 256)  # two pages of garbage
    state.write_bytes(bytes(data))
    for command in (["status"], ["resume"]):
        result = runner.invoke(app, ["batch", *command, "--state", str(state)])
        assert result.exit_code == 2, (command, result.output, result.exception)
        assert str(state) in one_line(result.stderr)
    state.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)  # a cut-off header
    result = runner.invoke(app, ["batch", "status", "--state", str(state)])
    assert result.exit_code == 2 and str(state) in one_line(result.stderr)


def test_a_missing_input_leaves_no_state_file(tmp_path: Path) -> None:
    state = tmp_path / "job.db"
    with pytest.raises(BatchError, match="no such input file"):
        BatchJob.create(
            state, contract=Decision, backend=anthropic_backend(AnthropicBatchAPI()),
            input=tmp_path / "missing.jsonl", out=tmp_path / "out.jsonl",
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_two_creates_at_once_on_a_fresh_file_make_one_job(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 5)
    for round_ in range(6):
        folder = tmp_path / f"round-{round_}"
        folder.mkdir()
        state, out = folder / "job.db", folder / "out.jsonl"
        at = time.time() + 4.0  # both processes are up and waiting by then
        both = [
            helper_process("create", str(state), str(items), str(out), "--at", str(at))
            for _ in range(2)
        ]
        printed = [process.communicate(timeout=120) for process in both]
        for process, (_, errors) in zip(both, printed, strict=True):
            assert process.returncode == 0, errors
        ids = {stdout.strip() for stdout, _ in printed}
        stored = job_summary(state).job
        assert ids == {stored}, f"round {round_}: {ids} but the file holds {stored}"
        assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


# --- 6. lost batches: adopted only on proof ---


class CrashBeforeCreate(Exception):
    """Stands for the process dying after recording a submission, before creating its batch."""


def test_a_lost_submission_is_not_adopted_by_another_job_s_batch_of_its_size(
    tmp_path: Path,
) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 10)
    api = AnthropicBatchAPI(Script(), polls=2)
    backend = anthropic_backend(api)

    def create(job: str, key: str, prepared: Any, entries: list[bytes]) -> Any:
        raise CrashBeforeCreate(key)

    backend.create = create  # type: ignore[method-assign]
    job = job_for(tmp_path, path, backend, settings=JobSettings(resubmits=0))
    with pytest.raises(CrashBeforeCreate):
        job.run()
    job.close()
    # Meanwhile another job (another key) created a batch of the same size.
    foreign = [
        {"custom_id": f"sforeign0001-{n}", "params": {"model": "m", "max_tokens": 5,
                                                     "messages": [{"role": "user",
                                                                   "content": f"Invoice {n}:"}]}}
        for n in range(10)
    ]  # fmt: skip
    anthropic_backend(api).provider.client.messages.batches.create(requests=foreign)  # type: ignore[attr-defined]
    assert api.creates() == 1

    resumed = BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), sleep=Sleeps()
    )
    summary = resumed.run()
    resumed.close()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 10 and len(records) == 10  # its own batch, sent once proven lost
    assert api.creates() == 2
    first = next(iter(api.batches.values()))
    assert not first.cancelled  # the other job's batch was never touched


# --- 7. progress that survives a stop ---


def test_an_interrupted_local_job_keeps_what_finished_and_says_how_to_resume(
    tmp_path: Path,
) -> None:
    with local_job(tmp_path, 50, 0.25, "--concurrency", "2") as (runner, url, files):
        state, out = files.state, files.out
        wait_for(lambda: completions(url) >= 12, "a dozen completions")
        runner.send_signal(signal.SIGINT)
        _, errors = runner.communicate(timeout=60)
        assert runner.returncode == 130, errors
        assert f"sdk batch resume --state {state}" in errors
        kept = len(read_output(out))
        sent_before = completions(url)
        assert kept >= 8  # at most the calls in flight are lost
        resumed = sdk_run("batch", "resume", "--state", str(state))
        assert resumed.returncode == 0, resumed.stderr
        assert completions(url) - sent_before == 50 - kept  # the kept ones are not redone
    assert len(by_id(read_output(out))) == 50


def test_status_shows_a_running_job_s_live_counts(tmp_path: Path) -> None:
    with local_job(tmp_path, 80, 0.25, "--concurrency", "2") as (runner, _, files):
        state = files.state
        wait_for(lambda: 0 < counted(state, "ok") < 40, "committed progress", timeout=60)
        status = sdk_run("batch", "status", "--state", str(state), "--json")
        still_running = runner.poll() is None
        _, errors = runner.communicate(timeout=120)
    assert status.returncode == 0, status.stderr
    live = json.loads(status.stdout)
    assert still_running and live["state"] == "running"
    assert live["runner"].startswith(f"pid {runner.pid} on ")
    assert 0 < live["ok"] < 80 and live["pending"] + live["in_flight"] + live["ok"] == 80
    assert runner.returncode == 0, errors
    assert "items/s" in errors and "ETA" in errors  # the progress line off a terminal


def test_progress_text_has_this_run_s_rate_and_an_eta() -> None:
    from sdk.batch import JobProgress
    from sdk.cli.batch import progress_text

    resumed = JobProgress(total=1000, ok=590, failed=5, in_flight=4, cancelled=5, resumed_from=500)
    text = progress_text(resumed, 10.0)
    # 100 items this run in 10 s (the 500 from before do not count): 10/s, 400 left: 40 s.
    assert "600/1,000 done" in text and "failed 5" in text and "cancelled 5" in text
    assert "10.0 items/s" in text and "ETA 40s" in text
    assert "items/s" not in progress_text(JobProgress(10, 10, 0, 0, resumed_from=10), 3.0)


def test_progress_counts_cancelled_items_apart_from_failed(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 12)
    job = job_for(tmp_path, path, anthropic_backend(AnthropicBatchAPI()))
    job.cancel()
    seen: list[Any] = []
    summary = job.run(progress=seen.append, progress_every=0)
    job.close()
    assert summary.cancelled == 12 and summary.failed == 0
    last = seen[-1]
    assert last.failed == 0 and last.cancelled == 12 and last.done == 12


def test_a_resume_with_nothing_left_reports_no_rate(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 8)
    api = AnthropicBatchAPI()
    with job_for(tmp_path, path, anthropic_backend(api)) as job:
        first = job.run()
    with BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), sleep=Sleeps()
    ) as job:
        again = job.run()
    assert first.ran == 8 and again.ran == 0
    text = "\n".join(again.lines())
    assert "items/s" not in text and "nothing left to run" in text


# --- 7 and 8. settings: honoured on every backend, or refused ---


def test_job_settings_the_local_clients_would_not_honour_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 4)
    counter: Counter[str] = Counter()
    clients = local_clients(counter, {})  # retries=1
    with pytest.raises(BatchError, match="retries=2"):
        job_for(tmp_path, path, LocalBackend(clients), settings=JobSettings(retries=2))
    assert not (tmp_path / "job.db").exists()
    # Without settings, the job takes the clients' own: what it says is what it does.
    plan = {0: [INVALID_JSON]}
    with job_for(tmp_path, path, LocalBackend(local_clients(counter, plan))) as job:
        assert job.settings.retries == 1
        job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert records["doc-0"]["attempts"] == 2  # one retry, as the settings say


def test_resubmits_are_honoured_on_the_local_path(tmp_path: Path) -> None:
    from sdk import Backoff
    from tests.batch_support import SERVER_ERROR

    path = tmp_path / "items.jsonl"
    write_items(path, 6)
    counter: Counter[str] = Counter()
    plan = {2: [SERVER_ERROR, SERVER_ERROR, VALID], 4: [SERVER_ERROR]}
    clients = local_clients(counter, plan, backoff=Backoff(retries=0))
    settings = JobSettings(retries=1, resubmits=2)
    with job_for(tmp_path, path, LocalBackend(clients), settings=settings) as job:
        summary = job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 5 and summary.failed == 1
    assert records["doc-2"]["outcome"] == "ok" and records["doc-2"]["attempts"] == 3
    assert records["doc-4"]["error"]["status_code"] == 503 and records["doc-4"]["attempts"] == 3


def test_run_again_refuses_another_model_unless_update_and_honours_new_limits(
    tmp_path: Path, fanout_url: str
) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 5)
    runner = CliRunner()
    base = local_run(fanout_url, items, out, "--state", str(state), "--model", "model-a")
    assert runner.invoke(app, base).exit_code == 0
    stored = job_summary(state)
    assert stored.model == "model-a"

    other = local_run(fanout_url, items, out, "--state", str(state), "--model", "model-b")
    refused = runner.invoke(app, other)
    assert refused.exit_code == 2
    line = one_line(refused.stderr)
    assert "model" in line and "model-a" in line and "model-b" in line and "--update" in line
    assert job_summary(state).model == "model-a"  # nothing overwritten

    for flag in ("--max-tokens", "--retries"):
        refused = runner.invoke(app, [*base, flag, "7"])
        assert (refused.exit_code == 2) == (flag == "--max-tokens"), refused.output

    taken = runner.invoke(app, [*other, "--update", "--resubmits", "1"])
    assert taken.exit_code == 0, taken.output
    with sqlite3.connect(f"{state.as_uri()}?mode=ro", uri=True) as db:
        meta = {key: json.loads(value) for key, value in db.execute("SELECT * FROM meta")}
    assert meta["model"] == "model-b" and meta["backend_spec"]["model"] == "model-b"
    assert meta["settings"]["retries"] == 7 and meta["settings"]["resubmits"] == 1
    changed = [change["changed"] for change in meta["changes"]]
    assert any(c.get("retries") == [2, 7] for c in changed)
    assert any(c.get("model") == ["model-a", "model-b"] for c in changed)


def test_open_refuses_a_backend_with_another_model(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 3)
    api = AnthropicBatchAPI()
    job = job_for(tmp_path, path, anthropic_backend(api))
    job.close()
    from sdk.batch import AnthropicBatches
    from sdk.providers import AnthropicProvider
    from tests.wire_support import anthropic_client

    other = AnthropicBatches(AnthropicProvider(anthropic_client(api), model="claude-opus-4-1"))
    with pytest.raises(JobMismatch, match="claude-opus-4-1"):
        BatchJob.open(tmp_path / "job.db", contract=Decision, backend=other)


def test_flags_a_backend_would_not_use_are_refused(tmp_path: Path, fanout_url: str) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 2)
    runner = CliRunner()
    cases = [
        (["--max-requests", "10"], "--max-requests"),
        (["--poll-interval", "5"], "--poll-interval"),
    ]
    for extra, flag in cases:
        result = runner.invoke(app, local_run(fanout_url, items, tmp_path / "o.jsonl", *extra))
        assert result.exit_code == 2 and flag in one_line(result.stderr)
    hosted = runner.invoke(
        app,
        ["batch", "run", "--contract", "contracts:Decision", "--provider", "anthropic",
         "--model", "claude-sonnet-4-6", "--concurrency", "4", "--input", str(items),
         "--out", str(tmp_path / "h.jsonl")],
    )  # fmt: skip
    assert hosted.exit_code == 2 and "--concurrency" in one_line(hosted.stderr)
    assert not (tmp_path / "o.jsonl.job.db").exists()
    local = LocalBackend(local_clients(Counter(), {}))
    with pytest.raises(ValueError, match="poll_interval, collect_chunk: for hosted"):
        job_for(tmp_path, items, local, poll_interval=5.0, collect_chunk=10)
    assert not (tmp_path / "job.db").exists()


def test_batch_run_cache_answers_a_local_job_asked_again_and_a_hosted_one_refuses_it(
    tmp_path: Path, fanout_url: str
) -> None:
    items, cache = tmp_path / "items.jsonl", tmp_path / "answers.db"
    write_items(items, 6)
    runner = CliRunner()
    cached = ("--cache-path", str(cache))
    first = runner.invoke(app, local_run(fanout_url, items, tmp_path / "a.jsonl", *cached))
    assert first.exit_code == 0, first.output
    asked = completions(fanout_url)
    assert asked == 6 and cache.stat().st_mode & 0o077 == 0
    # The same items in another job: every call answered from the cache, none sent.
    second = runner.invoke(app, local_run(fanout_url, items, tmp_path / "b.jsonl", *cached))
    assert second.exit_code == 0, second.output
    assert completions(fanout_url) == asked
    again = by_id(read_output(tmp_path / "b.jsonl"))
    assert set(again) == {f"doc-{n}" for n in range(6)}
    assert all(record["outcome"] == "ok" for record in again.values())
    # The job keeps the cache's file, so `resume` rebuilds the same clients.
    with sqlite3.connect(f"{(tmp_path / 'b.jsonl.job.db').as_uri()}?mode=ro", uri=True) as db:
        meta = {key: json.loads(value) for key, value in db.execute("SELECT * FROM meta")}
    assert meta["backend_spec"]["cache"] == str(cache.resolve())
    # Without it, the calls are sent.
    plain = runner.invoke(app, local_run(fanout_url, items, tmp_path / "c.jsonl"))
    assert plain.exit_code == 0 and completions(fanout_url) == asked + 6
    hosted = runner.invoke(
        app,
        ["batch", "run", "--contract", "contracts:Decision", "--provider", "anthropic",
         "--model", "claude-sonnet-4-6", "--cache-path", str(tmp_path / "h-cache.db"),
         "--input", str(items), "--out", str(tmp_path / "h.jsonl")],
    )  # fmt: skip
    assert hosted.exit_code == 2 and "--cache" in one_line(hosted.stderr)
    assert not (tmp_path / "h-cache.db").exists() and not (tmp_path / "h.jsonl.job.db").exists()


@pytest.fixture
def fanout_url() -> Iterator[str]:
    with fanout(0.0) as url:
        yield url


@pytest.mark.local
def test_the_cli_runs_a_job_on_the_embedded_model(tmp_path: Path, embedded_model: None) -> None:
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    write_items(items, 2)
    ran = CliRunner().invoke(
        app,
        ["batch", "run", "--contract", "contracts:Decision", "--provider", "embedded",
         "--max-tokens", "160", "--retries", "0", "--input", str(items), "--out", str(out)],
    )  # fmt: skip
    assert ran.exit_code in (0, 1), ran.output  # 1: the small model's answer did not validate
    records = by_id(read_output(out))
    assert set(records) == {"doc-0", "doc-1"}
    assert {record["provider"] for record in records.values()} == {"embedded"}
    assert job_summary(tmp_path / "out.jsonl.job.db").model == "SmolLM2-135M-Instruct.Q4_1"
    assert all(record["outcome"] in ("ok", "failed") for record in records.values())


# What a line's `options` may not set, though a call's may: what the job chooses, not a line of
# its data. On main `cache: true` answered its item from (and wrote it to) the default cache
# file, `cache: false` took the job's cache away from it, a deadline of a week or none held a
# worker that long, and `max_tokens` in options was the item's limit on the hosted path but
# overridden by the job's on the local one.
_REFUSED_OPTIONS = {
    "cache-on": ({"cache": True}, "the job's response cache is the job's own"),
    "cache-off": ({"cache": False}, "the job's response cache is the job's own"),
    "deadline": ({"deadline": 604800}, "the job's clients bound each call's time"),
    "attempt-deadline": ({"attempt_deadline": None}, "the job's clients bound each call's time"),
    "runaway": ({"runaway": None}, "the job's clients' runaway guard bounds each call"),
    "limit": ({"max_tokens": 5}, "it is a key of the line itself"),
    "source": ({"source": "Invoice 9."}, "it is a key of the line itself"),
}


def _with_refused_options(path: Path) -> None:
    write_items(path, 3)
    with path.open("a", encoding="utf-8") as file:
        for name, (options, _) in _REFUSED_OPTIONS.items():
            file.write(json.dumps({"id": name, "prompt": "Approve?", "options": options}) + "\n")
        # (an option of the call's own is the line's to set: taken)
        options = {"abstention_thresholds": 0.5}
        line = {"id": "threshold", "prompt": "Approve?", "options": options,
                "source": "Invoice 7: $4,180.00 for PO-2007."}  # fmt: skip
        file.write(json.dumps(line) + "\n")


def _refused_as_said(records: dict[Any, dict[str, Any]]) -> None:
    for name, (options, said) in _REFUSED_OPTIONS.items():
        error = records[name]["error"]
        assert records[name]["outcome"] == "failed", name
        assert error["type"] == "TypeError", name
        [option] = options
        assert f"a batch item's options may not set {option!r}: {said}" in error["message"]
    assert {records[f"doc-{n}"]["outcome"] for n in range(3)} == {"ok"}
    assert records["threshold"]["outcome"] == "ok"


def test_a_line_s_options_may_not_set_what_the_job_chooses_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "default-cache"))
    path = tmp_path / "items.jsonl"
    _with_refused_options(path)
    counter: Counter[str] = Counter()
    backend = LocalBackend(local_clients(counter, {}))
    with job_for(tmp_path, path, backend, settings=JobSettings(retries=1)) as job:
        summary = job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    _refused_as_said(records)
    assert summary.ok == 4 and summary.failed == len(_REFUSED_OPTIONS)
    assert counter["a"] + counter["b"] == 4  # the refused items sent nothing
    assert not (tmp_path / "default-cache").exists()


def test_a_line_s_options_may_not_set_what_the_job_chooses_hosted(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    _with_refused_options(path)
    api = AnthropicBatchAPI(Script())
    with job_for(tmp_path, path, anthropic_backend(api)) as job:
        summary = job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    _refused_as_said(records)
    assert summary.ok == 4 and summary.failed == len(_REFUSED_OPTIONS)
    assert sum(len(batch.requests) for batch in api.batches.values()) == 4
