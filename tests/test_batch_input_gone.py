"""A job whose input was moved or deleted (probe13b D5): `resume` and `retry` say so as `run`
does (`error: FILE: no such input file`, exit 2), never with the bare `[Errno 2]` of an open; a
finished job, which needs its input no more, resumes to its summary as with the input there;
`retry` refuses before it reopens any item. The local server is bench/fanout_server.py, cutting
off `[long]` prompts under a 500-token limit (`tests/test_batch_retry.py`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sdk.batch import job_summary
from tests.batch_support import fanout
from tests.batch_support import write_items
from tests.test_batch_integrity import local_run
from tests.test_batch_integrity import one_line
from tests.test_batch_integrity import sdk_run
from tests.test_batch_retry import _items


@pytest.mark.parametrize("failures", [False, True])
def test_a_finished_job_whose_input_is_gone_resumes_to_its_summary(
    tmp_path: Path, failures: bool
) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    _items(items) if failures else write_items(items, 10)
    with fanout(0.0, "--truncate-below", "500") as url:
        run = sdk_run(*local_run(url, items, out, "--state", str(state), "--max-tokens", "300"))
    assert run.returncode == (1 if failures else 0), run.stderr
    kept = out.read_bytes()
    os.rename(items, tmp_path / "moved.jsonl")
    resumed = sdk_run("batch", "resume", "--state", str(state))  # no server: nothing is sent
    # On main: exit 2, "error: [Errno 2] No such file or directory: '.../items.jsonl'".
    assert resumed.returncode == (1 if failures else 0), resumed.stderr
    assert "error:" not in resumed.stderr, resumed.stderr
    ok, failed = (7, 3) if failures else (10, 0)
    assert f"items: 10 total, {ok} ok, {failed} failed, 0 cancelled, 0 in flight, 0 pending" in (
        resumed.stdout
    )
    assert "(nothing left to run)" in resumed.stdout
    assert out.read_bytes() == kept


def test_resume_of_a_job_that_needs_its_input_says_it_is_gone(tmp_path: Path) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 5)
    with items.open("a", encoding="utf-8") as file:
        file.write("not json\n")  # the run stops at it, before the job is indexed
    with fanout(0.0) as url:
        run = sdk_run(*local_run(url, items, out, "--state", str(state)))
    assert run.returncode == 2 and state.exists(), run.stderr
    items.unlink()
    resumed = sdk_run("batch", "resume", "--state", str(state))
    assert resumed.returncode == 2, resumed.stderr
    assert one_line(resumed.stderr) == f"error: {items.resolve()}: no such input file"


def test_retry_of_a_job_whose_input_is_gone_says_so_and_reopens_nothing(tmp_path: Path) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    _items(items)
    with fanout(0.0, "--truncate-below", "500") as url:
        run = sdk_run(*local_run(url, items, out, "--state", str(state), "--max-tokens", "300"))
        assert run.returncode == 1, run.stderr
        kept = out.read_bytes()
        os.rename(items, tmp_path / "moved.jsonl")
        retried = sdk_run("batch", "retry", "--state", str(state), "--base-url", url)
    # On main: the failed items were reopened (taken out of the output), then the run met the
    # missing input with a bare "[Errno 2]".
    assert retried.returncode == 2, retried.stderr
    assert one_line(retried.stderr) == f"error: {items.resolve()}: no such input file"
    summary = job_summary(state)
    assert (summary.ok, summary.failed, summary.pending) == (7, 3, 0)
    assert out.read_bytes() == kept
    assert sorted(json.loads(line)["outcome"] for line in kept.splitlines()).count("failed") == 3


@pytest.mark.parametrize("kind", ["folder", "named pipe"])
def test_an_input_that_is_there_but_no_file_is_said_so_not_missing(
    tmp_path: Path, kind: str
) -> None:
    # On main `run` and `resume` said "FILE: no such input file" of a folder or a named pipe
    # at the input's path: a reader looked for a file that is there.
    if kind == "named pipe" and not hasattr(os, "mkfifo"):
        pytest.skip("named pipes")
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 5)
    with items.open("a", encoding="utf-8") as file:
        file.write("not json\n")  # the run stops at it, before the job is indexed
    with fanout(0.0) as url:
        run = sdk_run(*local_run(url, items, out, "--state", str(state)), timeout=60)
        assert run.returncode == 2 and state.exists(), run.stderr
        items.unlink()
        if kind == "folder":
            items.mkdir()
        else:
            os.mkfifo(items)
        said = f"error: {items.resolve()}: not a regular file (a folder, a named pipe or a device)"
        resumed = sdk_run("batch", "resume", "--state", str(state), timeout=60)
        assert resumed.returncode == 2, resumed.stderr
        assert one_line(resumed.stderr).startswith(said)
        fresh = tmp_path / "fresh.jsonl"
        ran = sdk_run(*local_run(url, items, fresh), timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert one_line(ran.stderr).startswith(f"error: {items}: not a regular file")
    assert not fresh.exists()
