"""What a job's status says (probe13b): `finished` only once every input line is indexed and
every item is done, a total known to be partial said so, counts read in one snapshot, cancelled
items kept out of the failures, and text from the input printed with its control characters
escaped.

What is the CLI's runs as `sdk batch` processes (bench/fanout_server.py answering, bounded
waits); the summary of a job at a given moment runs in-process.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sdk.batch import BatchError
from sdk.batch import LocalBackend
from sdk.batch import job_summary
from sdk.batch._state import JobState
from tests.batch_support import fanout
from tests.batch_support import job_for
from tests.batch_support import local_clients
from tests.batch_support import write_items
from tests.test_batch_integrity import counted
from tests.test_batch_integrity import local_run
from tests.test_batch_integrity import one_line
from tests.test_batch_integrity import sdk_process
from tests.test_batch_integrity import sdk_run
from tests.test_batch_integrity import stop
from tests.test_batch_integrity import wait_for

NOWHERE = "http://127.0.0.1:1"  # (no call is made: the input stops the job first)


def _status(state: Path) -> dict[str, Any]:
    shown = sdk_run("batch", "status", "--state", str(state), "--json")
    assert shown.returncode == 0, shown.stderr
    data: dict[str, Any] = json.loads(shown.stdout)
    return data


def _adds_up(data: dict[str, Any]) -> bool:
    parts = ("ok", "failed", "cancelled", "pending", "in_flight")
    return sum(int(data[part]) for part in parts) == int(data["total"])


# --- 1. `finished` means the whole input indexed and every item done ---


def test_a_job_created_and_not_run_is_not_finished(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 5)
    with job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))) as job:
        before = job.summary()
        # On main: finished True, "items: 0 total, ... 0 pending" for a job that has not begun.
        assert not before.finished and not before.indexed
        assert before.state == "not started (resume it)"
        assert before.to_json()["finished"] is False
        assert "0 total so far (the input is not all indexed yet)" in before.lines()[1]
        after = job.run()
    assert after.finished and after.indexed and after.total == after.ok == 5
    assert job_summary(tmp_path / "job.db").finished


def _stopped_by_a_bad_line(
    tmp_path: Path, good: int, bad: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`sdk batch run` over `good` items and then the line `bad`: the run, and its state."""
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, good)
    with items.open("a") as file:
        file.write(bad + "\n")
    return sdk_run(*local_run(NOWHERE, items, out, "--state", str(state))), state


def test_a_run_stopped_by_a_bad_input_line_is_not_finished(tmp_path: Path) -> None:
    ran, state = _stopped_by_a_bad_line(tmp_path, 3, "not json")
    assert ran.returncode == 2 and ":4: not a JSON object" in one_line(ran.stderr)
    data = _status(state)
    # On main: {"finished": true, "total": 0, "state": "stopped (resume it)"}.
    assert data["finished"] is False and data["indexed"] is False
    assert data["state"] == "not started (resume it)" and data["total"] == 0
    text = sdk_run("batch", "status", "--state", str(state))
    assert "items: 0 total so far (the input is not all indexed yet)" in text.stdout


def test_a_job_stopped_while_indexing_says_its_total_is_partial(tmp_path: Path) -> None:
    # The first 5,000 lines (one indexing chunk) are committed before line 5,002 stops the run:
    # the state a kill during indexing leaves too.
    ran, state = _stopped_by_a_bad_line(tmp_path, 5001, '{"id": "doc-x"')
    assert ran.returncode == 2 and ":5002:" in one_line(ran.stderr)
    data = _status(state)
    # On main: "finished": false but "state": "stopped (resume it)", "total": 5000, with nothing
    # saying the input has more lines.
    assert data["indexed"] is False and data["finished"] is False
    assert data["state"] == "stopped while indexing (resume it)"
    assert data["total"] == data["pending"] == 5000
    text = sdk_run("batch", "status", "--state", str(state))
    assert "items: 5,000 total so far (the input is not all indexed yet)" in text.stdout


def test_a_job_indexing_now_says_so_and_is_not_finished(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 5003)
    seen: list[Any] = []

    def progress(now: Any) -> None:
        if now.phase == "indexing" and not seen:  # after the first chunk's commit
            seen.append(job_summary(tmp_path / "job.db"))  # what `status` reads

    with job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))) as job:
        done = job.run(progress=progress, progress_every=0)
    (indexing,) = seen
    assert indexing.state == "indexing" and indexing.runner is not None
    assert not indexing.finished and not indexing.indexed and indexing.total == 5000
    assert done.finished and done.total == done.ok == 5003


def test_a_summary_is_one_snapshot_whatever_commits_between_its_reads(tmp_path: Path) -> None:
    # Another process's commit lands between the summary's first read (the counts) and the
    # next: on main the total was read after it, so the counts did not add up to it.
    items = tmp_path / "items.jsonl"
    write_items(items, 10)
    with job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))) as job:
        job.run()
    state = tmp_path / "job.db"
    writer = JobState(state)
    reader = JobState(state, readonly=True)
    committed: list[int] = []

    def between(statement: str) -> None:
        if "GROUP BY state, outcome" in statement or committed or "meta" not in statement:
            return
        with writer.transaction() as db:  # (another connection: as another process would)
            writer.add_items([(f"new-{n}", 0, 1, 0, False) for n in range(7)], db)
            writer.put("indexed", False, db)
        committed.append(1)

    db = reader._connection()
    db.set_trace_callback(between)
    try:
        read = job_summary_of(reader)
    finally:
        db.set_trace_callback(None)
        reader.close()
        writer.close()
    assert committed, "the commit did not come between the reads"
    # The snapshot is the one before the commit: 10 items, all ok, finished.
    assert (read.total, read.ok, read.pending, read.finished) == (10, 10, 0, True)
    # And after it: 17 items, 7 pending, not indexed.
    after = job_summary(state)
    assert (after.total, after.ok, after.pending, after.finished) == (17, 10, 7, False)


def job_summary_of(state: JobState) -> Any:
    from sdk.batch._summary import summarize

    return summarize(state)


def test_status_polled_while_a_run_starts_never_says_finished_early(tmp_path: Path) -> None:
    # What a script polling `status --json` until `finished` sees: on main, samples taken in
    # the run's first moments said finished with total 0, and counts that did not add up.
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    count = 12000
    write_items(items, count)
    samples: list[Any] = []
    with fanout(0.01) as url:
        runner = sdk_process(*local_run(url, items, out, "--state", str(state)))
        try:
            end = time.monotonic() + 120
            while runner.poll() is None and time.monotonic() < end:
                if state.exists():
                    with contextlib.suppress(BatchError, sqlite3.Error):  # (not yet whole)
                        samples.append(job_summary(state))
                    if any(s.ok for s in samples[-1:]):
                        break
            assert runner.poll() is None or runner.returncode == 0
        finally:
            stop(runner)
    assert len(samples) >= 5, "too few samples of the run's start"
    for sample in samples:
        data = sample.to_json()
        assert _adds_up(data), data
        assert not sample.finished and sample.state != "finished", data
        assert sample.indexed or "total so far" in sample.lines()[1], data


# --- 3. cancelled items are not failures ---


def test_cancelled_items_are_not_listed_as_failed_by_error(tmp_path: Path) -> None:
    # Items 0 and 1 are cut off (TruncatedOutput); the job is cancelled once they are in.
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 200)
    lines = items.read_text().splitlines()
    for number in (0, 1):
        line = json.loads(lines[number])
        lines[number] = json.dumps({**line, "source": line["source"] + " [long]"})
    items.write_text("\n".join(lines) + "\n")
    options = ("--state", str(state), "--max-tokens", "100", "--retries", "0")
    with fanout(0.3, "--truncate-below", "500") as url:
        runner = sdk_process(*local_run(url, items, out, *options, "--concurrency", "2"))
        try:
            wait_for(lambda: counted(state, "failed") >= 2, "the two failures committed", 120)
            cancel = sdk_run("batch", "cancel", "--state", str(state))
            assert cancel.returncode == 0, cancel.stderr
            _, errors = runner.communicate(timeout=120)
            assert runner.returncode == 1, errors
        finally:
            stop(runner)
        data = _status(state)
        assert data["state"] == "cancelled" and data["failed"] == 2 and data["cancelled"] > 100
        # On main: "failure_types": {"ProviderError": <the cancelled>, "TruncatedOutput": 2},
        # and 18 of the 20 failures listed were cancelled items.
        assert data["failure_types"] == {"TruncatedOutput": 2}
        assert [failure["id"] for failure in data["failures"]] == ["doc-0", "doc-1"]
        text = sdk_run("batch", "status", "--state", str(state)).stdout
        assert "failed by error: TruncatedOutput: 2\n" in text and "ProviderError" not in text
        # `retry` runs failed items only: the type status lists is the one it selects.
        retried = sdk_run(
            "batch", "retry", "--state", str(state), "--error-type", "TruncatedOutput"
        )  # fmt: skip
        assert "retrying 2 failed items (TruncatedOutput)" in retried.stderr, retried.stderr
    after = _status(state)
    assert after["failure_types"] == {"TruncatedOutput": 2}  # (cut off again: --max-tokens 100)
    assert after["cancelled"] == data["cancelled"]


# --- 4. text from the input is printed with its control characters escaped ---

HOSTILE_IDS = ["\x1b[2J\x1b[31mCLEARED", "ok\rFAKE", "bell\x07", "nl\nitems: 0 total", "\u202eevil"]


def test_ids_with_control_characters_are_printed_escaped(tmp_path: Path) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    with items.open("w", encoding="utf-8") as file:
        for number, item_id in enumerate(HOSTILE_IDS):
            line = {"id": item_id, "prompt": "Approve?", "source": f"Invoice {number}: [long]"}
            file.write(json.dumps(line) + "\n")
    with fanout(0.01, "--truncate-below", "500") as url:
        ran = sdk_run(
            *local_run(url, items, out, "--state", str(state), "--max-tokens", "100"),
            "--retries", "0",
        )  # fmt: skip
    assert ran.returncode == 1, ran.stderr
    status = sdk_run("batch", "status", "--state", str(state))
    as_json = sdk_run("batch", "status", "--state", str(state), "--json")
    for shown in (ran.stdout, status.stdout, as_json.stdout):
        # On main: ESC, the override and the newline were printed as they are (CR and BEL
        # stripped by rich).
        assert not any(char in shown for char in "\x1b\r\x07\u202e"), repr(shown)
    for shown in (ran.stdout, status.stdout):
        assert "  \\x1b[2J\\x1b[31mCLEARED: TruncatedOutput" in shown
        assert "  ok\\rFAKE: " in shown and "  bell\\x07: " in shown
        assert "  \\u202eevil: " in shown
        assert "  nl\\nitems: 0 total: " in shown
        assert sum(line.startswith("items: ") for line in shown.splitlines()) == 1
    ids = [failure["id"] for failure in json.loads(as_json.stdout)["failures"]]
    assert ids == HOSTILE_IDS  # the same data, escaped as JSON


def test_every_cli_line_escapes_control_characters() -> None:
    from io import StringIO

    from sdk.cli._app import Output

    out = Output()
    out.out.file = StringIO()
    out.err.file = StringIO()
    out.line("a\x1b]0;title\x07b\x9bc\x7f")
    out.error("bad \x1b[31mid\u202e")
    out.json({"id": "x\x1b\x9b\u202e\x7f"})
    printed = out.out.file.getvalue()
    assert printed.splitlines()[0] == "a\\x1b]0;title\\x07b\\x9bc\\x7f"
    assert "bad \\x1b[31mid\\u202e" in out.err.file.getvalue()
    assert json.loads("\n".join(printed.splitlines()[1:])) == {"id": "x\x1b\x9b\u202e\x7f"}
    assert not any(char in printed for char in "\x1b\x9b\u202e\x7f")


def test_a_state_file_is_still_read_after_a_summary(tmp_path: Path) -> None:
    # The snapshot's read transaction ends with the summary: the writer is not kept waiting
    # on a reader (a checkpoint can run) and the next summary sees the new commit.
    items = tmp_path / "items.jsonl"
    write_items(items, 3)
    with job_for(tmp_path, items, LocalBackend(local_clients(Counter(), {}))) as job:
        job.run()
        reader = JobState(tmp_path / "job.db", readonly=True)
        try:
            job_summary_of(reader)
            assert not reader._connection().in_transaction
            with job.state.transaction() as db:
                job.state.put("cancelled", True, db)
            assert job_summary_of(reader).state == "cancelled"  # (the new commit, seen)
        finally:
            reader.close()
    with sqlite3.connect(tmp_path / "job.db") as db:
        assert db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0


def test_a_job_s_notes_on_stderr_show_a_path_as_it_is(tmp_path: Path) -> None:
    # "job state: PATH" and a retry's "retrying ... (TYPES)" went out through rich's markup:
    # a folder named `[red]x` lost its brackets (read as a style), and control characters were
    # sent as they are (the review of this change found the three lines that skipped `Output`).
    folder = tmp_path / "[red]x\x1b[2J"
    folder.mkdir()
    items, out, state = folder / "items.jsonl", folder / "out.jsonl", folder / "job.db"
    items.write_text(json.dumps({"id": 1, "prompt": "Approve?"}) + "\n")
    with fanout(0.01) as url:
        ran = sdk_run(*local_run(url, items, out, "--state", str(state)))
    assert ran.returncode == 0, ran.stderr
    shown = str(state).replace("\x1b", "\\x1b")
    assert f"job state: {shown}" in ran.stderr, ran.stderr
    assert "\x1b" not in ran.stderr


def test_status_cancel_and_resume_do_not_wait_on_a_named_pipe_at_the_lock_path(
    tmp_path: Path,
) -> None:
    # `status`, `cancel` and the summary `resume` ends with look at the runner's lock file
    # (`job.db.lock`) to tell whether a process runs the job. On main they opened it with a
    # plain O_RDONLY open, which waits for a writer when the path is a named pipe (put there
    # by anyone who can write the folder): each hung for ever (bounded here by the processes'
    # timeout).
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 3)
    with fanout(0.01) as url:
        ran = sdk_run(*local_run(url, items, out, "--state", str(state)), timeout=60)
        assert ran.returncode == 0, ran.stderr
        lock = tmp_path / "job.db.lock"
        lock.unlink()
        os.mkfifo(lock)
        shown = sdk_run("batch", "status", "--state", str(state), "--json", timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["finished"] is True
        cancelled = sdk_run("batch", "cancel", "--state", str(state), timeout=60)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "nothing to cancel" in cancelled.stdout + cancelled.stderr
        # `resume` does not wait on it either: it is refused in one line (on main it was taken
        # for the lock file and locked, and the job ran under it).
        resumed = sdk_run("batch", "resume", "--state", str(state), timeout=60)
        assert resumed.returncode == 2, resumed.stderr
        assert resumed.stderr.splitlines()[-1] == (
            f"error: {lock} is a named pipe, not a file: a job locks only a file of its own, so "
            "it does not run on this; remove it, or give another --state"
        )
    assert job_summary(state).ok == 3 and len(out.read_text().splitlines()) == 3
