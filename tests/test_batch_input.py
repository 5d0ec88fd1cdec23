"""A batch job under a changing input, and its ids (issue 30, items 4 and 7).

An input line edited while a local job runs stops the job within a tick, naming the line, with
every finished result kept, and `resume` goes on once the input is restored; the runs go through
the CLI in a process of their own, bounded by a timeout (without the fix, `--concurrency 1` hung
forever). Ids keep their JSON type in output lines, and ids equal as text are one id, refused as
a duplicate when the input is indexed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from contracts import Decision
from sdk.batch import BatchError
from sdk.batch import BatchInputError
from sdk.batch import BatchJob
from sdk.batch import JobSettings
from sdk.batch import LocalBackend
from sdk.batch import job_summary
from sdk.batch._state import FORMAT
from tests.batch_support import AnthropicBatchAPI
from tests.batch_support import anthropic_backend
from tests.batch_support import by_id
from tests.batch_support import completions
from tests.batch_support import gate
from tests.batch_support import job_for
from tests.batch_support import local_clients
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.test_batch_integrity import _index_then_crash
from tests.test_batch_integrity import counted
from tests.test_batch_integrity import local_job
from tests.test_batch_integrity import one_line
from tests.test_batch_integrity import sdk_run
from tests.test_batch_integrity import wait_for

COUNT = 200
EDITED = 100
"""The line edited (item `doc-99`): far enough that it is still pending when edited."""


def _edit_line(items: Path, number: int, *, keep_mtime: bool) -> bytes:
    """Change one character of line `number` in place (same length, same inode); with
    `keep_mtime`, put the file's modification time back, so that only the line's hash tells.
    The original bytes."""
    original = items.read_bytes()
    lines = original.split(b"\n")
    assert b"$4,180.00" in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(b"$4,180.00", b"$9,180.00")
    before = os.stat(items)
    with open(items, "r+b") as file:  # in place: the inode stays
        file.write(b"\n".join(lines))
    if keep_mtime:
        os.utime(items, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(items).st_mtime_ns == before.st_mtime_ns
    return original


def _some_done_then_held(url: str, state: Path) -> None:
    """Let the job index and answer 20 items, then hold every completion (the server closes
    its gate itself: whatever the machine's load, the job is then far from the edited line; a
    test closing it after seeing 20 let 150 through once, past the edited line, on CI)."""
    wait_for(lambda: counted(state, "total") == COUNT, "the job to index its input")
    gate(url, open=True, count=20)
    wait_for(lambda: completions(url) >= 20, "the job's first completions")


@pytest.mark.parametrize(
    ("concurrency", "keep_mtime"),
    [(1, False), (4, False), (1, True), (4, True)],
    ids=["one-worker-watched", "four-workers-watched", "one-worker-read", "four-workers-read"],
)
def test_an_input_line_edited_while_a_local_job_runs_stops_it_naming_the_line(
    tmp_path: Path, concurrency: int, keep_mtime: bool
) -> None:
    # Watched: the edit is seen by the tick's look at the input (size, inode, mtime, ctime),
    # while the calls in flight are still held by the server: the job stops without waiting
    # for them. Read: the mtime is put back and the server goes on answering, so the job finds
    # the change when a worker reads the edited line back (the path that hung with one worker
    # and sent every later item with four), or at the next tick by its ctime, whichever is
    # first: either way before any later item is sent.
    extra = ("--concurrency", str(concurrency))
    with local_job(tmp_path, COUNT, 0.01, *extra, closed=True) as (runner, url, files):
        os.utime(files.items, ns=(10**18, 10**18))  # a fixed mtime, as a copy with -p has
        _some_done_then_held(url, files.state)
        original = _edit_line(files.items, EDITED, keep_mtime=keep_mtime)
        if keep_mtime:
            gate(url, open=True)
        _, errors = runner.communicate(timeout=60)  # without the fix: never returns
        sent = completions(url)
        assert runner.returncode == 2, errors
        line = one_line(errors)
        assert f"{files.items}:{EDITED}: changed since indexing" in line
        assert f"'doc-{EDITED - 1}'" in line
        # Never past the edited line: no later item was sent (at most the calls in flight).
        assert sent < EDITED + concurrency
        kept = by_id(read_output(files.out))
        assert f"doc-{EDITED - 1}" not in kept
        assert all(record["outcome"] == "ok" for record in kept.values())
        assert len(kept) >= 20 - concurrency - 2, "the finished results were not kept"

        # Resume refuses the changed input, naming the same line, and sends nothing.
        refused = sdk_run("batch", "resume", "--state", str(files.state), timeout=60)
        assert refused.returncode == 2 and completions(url) == sent
        assert f"{files.items}:{EDITED}:" in one_line(refused.stderr)

        files.items.write_bytes(original)  # restored: the job goes on where it stopped
        gate(url, open=True)
        resumed = sdk_run("batch", "resume", "--state", str(files.state), timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        assert completions(url) - sent == COUNT - len(kept)  # the kept ones are not redone
    records = by_id(read_output(files.out))
    assert len(records) == COUNT and set(records) == {f"doc-{n}" for n in range(COUNT)}


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_finished_line_edited_with_its_mtime_put_back_stops_the_job(
    tmp_path: Path, engine: str
) -> None:
    """An edit to a line already read and answered (with the local engine, its answer
    written), the file's size and modification time put back (`touch -r`, a tool that keeps
    times): no worker reads that line again, so only the tick's look at the file can see it,
    and the change time (which no one can set) moves. On main the look compared size and
    mtime alone and the job went on answering for an input that was no longer the one indexed
    (here: it waited on the held calls for ever, bounded by the test's timeout)."""
    if engine == "ray":
        pytest.importorskip("ray")
    extra = ("--concurrency", "1", *(("--engine", "ray") if engine == "ray" else ()))
    with local_job(tmp_path, COUNT, 0.01, *extra, closed=True) as (runner, url, files):
        _some_done_then_held(url, files.state)  # (the fifth line read, its call answered)
        if engine == "local":  # (Ray commits a batch of the actors' answers at a time)
            wait_for(lambda: len(read_output(files.out)) >= 5, "the fifth answer written")
            assert "doc-4" in by_id(read_output(files.out))
        _edit_line(files.items, 5, keep_mtime=True)
        _, errors = runner.communicate(timeout=90)  # (the calls stay held: no answer moves it)
        assert runner.returncode == 2, errors
        line = one_line(errors)
        assert f"{files.items}:5: changed since indexing" in line and "'doc-4'" in line


def test_an_input_replaced_by_another_file_stops_the_job(tmp_path: Path) -> None:
    # An editor that saves to a new file and renames it over the input: the job's open handle
    # still reads the old file, so only the look at the path sees it.
    with local_job(tmp_path, COUNT, 0.01, "--concurrency", "2", closed=True) as (
        runner, url, files,
    ):  # fmt: skip
        _some_done_then_held(url, files.state)
        lines = files.items.read_bytes().split(b"\n")
        lines[EDITED - 1] = lines[EDITED - 1].replace(b"$4,180.00", b"$9,180.00")
        replacement = tmp_path / "items.new"
        replacement.write_bytes(b"\n".join(lines))
        replacement.replace(files.items)
        _, errors = runner.communicate(timeout=60)
        assert runner.returncode == 2, errors
        assert f"{files.items}:{EDITED}: changed since indexing" in one_line(errors)
        assert completions(url) < EDITED


def test_an_input_deleted_under_a_running_job_stops_it_with_one_line(tmp_path: Path) -> None:
    with local_job(tmp_path, COUNT, 0.01, "--concurrency", "2", closed=True) as (
        runner, url, files,
    ):  # fmt: skip
        _some_done_then_held(url, files.state)
        files.items.unlink()
        _, errors = runner.communicate(timeout=60)
        assert runner.returncode == 2, errors
        line = one_line(errors)
        assert str(files.items) in line and "cannot be read" in line
        assert completions(url) < COUNT
    assert len(by_id(read_output(files.out))) >= 15


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_an_input_replaced_by_a_named_pipe_stops_the_job_instead_of_hanging(
    tmp_path: Path,
) -> None:
    # On main the job's look at the moved input opened the path with a plain open(), which
    # waits for a writer on a named pipe: the job hung for ever in the open (Ctrl-C too:
    # the open is retried after the signal), bounded here by communicate()'s timeout.
    with local_job(tmp_path, COUNT, 0.01, "--concurrency", "2", closed=True) as (
        runner, url, files,
    ):  # fmt: skip
        _some_done_then_held(url, files.state)
        original = files.items.read_bytes()
        files.items.unlink()
        os.mkfifo(files.items)
        _, errors = runner.communicate(timeout=60)
        assert runner.returncode == 2, errors
        line = one_line(errors)
        assert str(files.items) in line and "not a regular file" in line
        assert completions(url) < COUNT
        kept = len(by_id(read_output(files.out)))
        assert kept >= 15

        # resume is refused the same way (it never waits on the pipe), then goes on once
        # the input is back.
        refused = sdk_run("batch", "resume", "--state", str(files.state), timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert str(files.items) in one_line(refused.stderr)
        files.items.unlink()
        files.items.write_bytes(original)
        gate(url, open=True)
        resumed = sdk_run("batch", "resume", "--state", str(files.state), timeout=120)
        assert resumed.returncode == 0, resumed.stderr
    records = by_id(read_output(files.out))
    assert len(records) == COUNT and set(records) == {f"doc-{n}" for n in range(COUNT)}


def test_touching_the_input_does_not_stop_the_job(tmp_path: Path) -> None:
    # The file's mtime moves but every indexed line is as it was: the job goes on.
    with local_job(tmp_path, 120, 0.02, "--concurrency", "2") as (runner, url, files):
        wait_for(lambda: completions(url) >= 10, "the job's first completions")
        os.utime(files.items)
        _, errors = runner.communicate(timeout=60)
        assert runner.returncode == 0, errors
    assert len(by_id(read_output(files.out))) == 120


def test_the_missing_newline_of_the_last_line_added_is_no_change(tmp_path: Path) -> None:
    # An editor that ends the file with a newline on save: every indexed line is as it was.
    # On main `resume` refused it, "items.jsonl:4: changed since indexing (it was item
    # 'doc-3')" (the line read back held its new newline, the index the line without one).
    items = tmp_path / "items.jsonl"
    write_items(items, 4)
    items.write_bytes(items.read_bytes().rstrip(b"\n"))
    counter: Counter[str] = Counter()
    with job_for(tmp_path, items, LocalBackend(local_clients(counter, {}))) as job:
        assert job.run().ok == 4
    asked = sum(counter.values())
    with items.open("ab") as file:
        file.write(b"\n")
    backend = LocalBackend(local_clients(counter, {}))
    with BatchJob.open(tmp_path / "job.db", contract=Decision, backend=backend) as job:
        assert job.run().ok == 4
    assert sum(counter.values()) == asked  # nothing sent again
    with items.open("ab") as file:  # a line after it is still a change
        file.write(b'{"id": "more", "prompt": "x"}\n')
    with (
        BatchJob.open(tmp_path / "job.db", contract=Decision, backend=backend) as job,
        pytest.raises(BatchError, match=r":5: a line added after indexing"),
    ):
        job.run()


def _open_here(path: Path) -> bool:
    """Whether this process has `path` open (Linux: its file descriptors in /proc)."""
    folder = Path("/proc/self/fd")
    for fd in folder.iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd) == str(path):
                return True
    return False


def _append_as_indexing_ends(folder: Path) -> dict[str, Any] | None:
    """Run a job over 4,900 items in a thread and append a line once its indexing has read the
    input to its end, before it records the indexing done: another connection holds the state
    file's write lock from while the job reads (its input open) until the line is appended, so
    the job waits at its last indexing commit with the input closed. What the run gave, or
    `None` if the job indexed before the lock was taken (a machine too slow to catch it)."""
    folder.mkdir()
    items = folder / "items.jsonl"
    write_items(items, 4900)  # one indexing chunk (5,000): one commit, at the end
    ran: dict[str, Any] = {"items": items, "state": folder / "job.db"}

    def run() -> None:
        backend = LocalBackend(local_clients(Counter(), {}))
        try:
            with job_for(folder, items, backend, settings=JobSettings(retries=1)) as job:
                ran["summary"] = job.run()
        except BaseException as error:  # reported by the test
            ran["error"] = error

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while not _open_here(items) and runner.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    with sqlite3.connect(ran["state"], timeout=60) as holder:
        holder.execute("BEGIN IMMEDIATE")
        caught = holder.execute("SELECT 1 FROM meta WHERE key = 'indexed'").fetchone() is None
        while caught and _open_here(items) and time.monotonic() < deadline:
            time.sleep(0.001)
        if caught:
            with items.open("a", encoding="utf-8") as file:
                file.write(json.dumps({"id": "late", "prompt": "Approve?", "source": "x"}) + "\n")
        holder.rollback()
    runner.join(timeout=120)
    assert not runner.is_alive(), "the job did not end"
    return ran if caught else None


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_a_line_appended_as_indexing_ends_is_run_or_stops_the_job_never_lost(
    tmp_path: Path,
) -> None:
    # On main the identity (taken after the line was appended) covered the line, the index did
    # not: the job ended ok with one item fewer than the input holds, and resume saw nothing.
    for attempt in range(5):
        ran = _append_as_indexing_ends(tmp_path / str(attempt))
        if ran is not None:
            break
    else:
        raise AssertionError("the job indexed before the lock was taken, 5 times")
    items = ran["items"]
    if "error" in ran:  # stopped, naming the line: acceptable, never silent
        assert isinstance(ran["error"], BatchError), ran["error"]
        assert f"{items}:4901: a line added after indexing" in str(ran["error"])
        backend = LocalBackend(local_clients(Counter(), {}))
        with (
            BatchJob.open(ran["state"], contract=Decision, backend=backend) as job,
            pytest.raises(BatchError) as again,  # and resume says so too
        ):
            job.run()
        assert f"{items}:4901: a line added after indexing" in str(again.value)
        return
    written = set(by_id(read_output(items.with_name("out.jsonl"))))
    assert "late" in written and len(written) == 4901, ran["summary"]


# --- ids ---


def _ids_input(path: Path) -> None:
    lines = [
        {"id": 7, "source": "Invoice 1: $4,180.00 for PO-2001.", "prompt": "Approve?"},
        {"id": "8", "source": "Invoice 2: $4,180.00 for PO-2002.", "prompt": "Approve?"},
        {"id": -3, "source": "Invoice 3: $4,180.00 for PO-2003.", "prompt": "Approve?"},
        {"id": 10**30, "source": "Invoice 4: $4,180.00 for PO-2004.", "prompt": "Approve?"},
        {"id": "doc-5", "prompt": "Approve?", "options": {"system": "twice"}},  # fails alone
        {"id": 11, "prompt": "Approve?", "options": {"system": "twice"}},  # fails alone
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _typed_ids(out: Path) -> dict[str, object]:
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return {str(record["id"]): record["id"] for record in records}


EXPECTED_IDS: dict[str, object] = {
    "7": 7, "8": "8", "-3": -3, str(10**30): 10**30, "doc-5": "doc-5", "11": 11,
}  # fmt: skip


def test_local_output_lines_keep_each_id_s_json_type(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    _ids_input(items)
    backend = LocalBackend(local_clients(Counter(), {}))
    with job_for(tmp_path, items, backend, settings=JobSettings(retries=1)) as job:
        summary = job.run()
    assert summary.ok == 4 and summary.failed == 2
    assert _typed_ids(tmp_path / "out.jsonl") == EXPECTED_IDS  # 7 is 7, "8" is "8"
    # and the raw text says so too: no quotes around an integer id
    raw = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
    assert '"id":7,' in raw and '"id":"8",' in raw and '"id":11,' in raw


def test_hosted_output_lines_keep_each_id_s_json_type(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    _ids_input(items)
    with job_for(tmp_path, items, anthropic_backend(AnthropicBatchAPI())) as job:
        summary = job.run()
    assert summary.ok == 4 and summary.failed == 2
    assert _typed_ids(tmp_path / "out.jsonl") == EXPECTED_IDS


def test_status_names_failed_items_by_their_id_s_json_type(tmp_path: Path) -> None:
    # `sdk batch status --json` lists the failed items: on main 11 came back as "11", so it
    # matched no output line's id (11) when joined.
    items = tmp_path / "items.jsonl"
    _ids_input(items)
    backend = LocalBackend(local_clients(Counter(), {}))
    with job_for(tmp_path, items, backend, settings=JobSettings(retries=1)) as job:
        job.run()
    failures = job_summary(tmp_path / "job.db").to_json()["failures"]
    assert [failure["id"] for failure in failures] == ["doc-5", 11]
    assert {failure["id"] for failure in failures} <= set(
        _typed_ids(tmp_path / "out.jsonl").values()
    )


def test_a_cancelled_item_s_line_keeps_its_id_s_type(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    _ids_input(items)
    with job_for(tmp_path, items, anthropic_backend(AnthropicBatchAPI())) as job:
        job.cancel()
        job.run()
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert {record["outcome"] for record in records} == {"cancelled"}
    assert _typed_ids(tmp_path / "out.jsonl") == EXPECTED_IDS


@pytest.mark.parametrize(
    ("first", "second", "said"),
    [
        (7, "7", 'item id "7" appears more than once: line 1 has 7 (the same id as text'),
        ("7", 7, 'item id 7 appears more than once: line 1 has "7" (the same id as text'),
        ("a", "a", 'item id "a" appears more than once: line 1 has "a"'),
    ],
)
@pytest.mark.parametrize("apart", [1, 6000], ids=["same-chunk", "chunks-apart"])
def test_ids_equal_as_text_are_reported_as_duplicates_naming_both_lines(
    tmp_path: Path, first: object, second: object, said: str, apart: int
) -> None:
    # 6000 lines apart: the first was committed in an earlier indexing chunk (5000 a chunk).
    items = tmp_path / "items.jsonl"
    with items.open("w", encoding="utf-8") as file:
        file.write(json.dumps({"id": first, "prompt": "x"}) + "\n")
        for number in range(apart - 1):
            file.write(json.dumps({"id": f"filler-{number}", "prompt": "x"}) + "\n")
        file.write(json.dumps({"id": second, "prompt": "y"}) + "\n")
    backend = anthropic_backend(AnthropicBatchAPI())
    with job_for(tmp_path, items, backend) as job, pytest.raises(BatchInputError) as caught:
        job.run()
    message = str(caught.value)
    assert message.startswith(f"{items}:{apart + 1}: {said}"), message
    assert ("the same id as text" in message) == (type(first) is not type(second))


def test_an_integer_id_past_python_s_digit_limit_is_a_clear_input_error(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": 1' + "0" * 5000 + ', "prompt": "x"}\n', encoding="utf-8")
    backend = anthropic_backend(AnthropicBatchAPI())
    with job_for(tmp_path, items, backend) as job, pytest.raises(BatchInputError) as caught:
        job.run()
    assert f"{items}:1: not a JSON object" in str(caught.value)
    assert "digits" in str(caught.value)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        # "é😀" is 2 characters and 6 bytes: the 0xff is character 24, byte 28
        (b'{"id": "\xc3\xa9\xf0\x9f\x98\x80", "prompt": "\xff"}\n',
         "not utf-8 text (invalid start byte) at line 1 column 25 (char 24, byte 28)"),
        # a lone CR ends a line, as everywhere the SDK says where (json's own count says 1)
        ('{"id": "é😀",\r"prompt": @}\n'.encode(), "line 2 column 11 (char 23)"),
    ],
    ids=["not-utf8", "lone-cr"],
)  # fmt: skip
def test_an_unreadable_input_line_says_where_in_characters(
    tmp_path: Path, line: bytes, said: str
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_bytes(b'{"id": "a", "prompt": "x"}\n' + line)
    backend = anthropic_backend(AnthropicBatchAPI())
    with job_for(tmp_path, items, backend) as job, pytest.raises(BatchInputError) as caught:
        job.run()
    message = str(caught.value)
    assert message.startswith(f"{items}:2: not a JSON object"), message
    assert said in message, message


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('{"id": "a0", "id": "a1", "prompt": "x"}', "id"),
        ('{"id": "b", "prompt": "x", "prompt": "y"}', "prompt"),
        ('{"id": "b", "source": "x", "prompt": "p", "source": "y"}', "source"),
        ('{"id": "b", "prompt": "p", "options": {"temperature": 0, "temperature": 1}}',
         "temperature"),
    ],
    ids=["id", "prompt", "source", "nested"],
)  # fmt: skip
def test_an_input_line_giving_a_key_twice_stops_the_job_naming_the_line_and_the_key(
    tmp_path: Path, line: str, key: str
) -> None:
    # json.loads keeps the last value: `{"id": "a0", "id": "a1"}` ran as item a1 (probe12a D8).
    # A reply with a repeated key is refused by the parser; an input line is too, before
    # anything is sent.
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "first", "prompt": "x"}\n' + line + "\n", encoding="utf-8")
    api = AnthropicBatchAPI()
    with (
        job_for(tmp_path, items, anthropic_backend(api)) as job,
        pytest.raises(BatchInputError) as caught,
    ):
        job.run()
    message = str(caught.value)
    assert message.startswith(f"{items}:2: duplicate key {key!r}"), message
    assert not api.calls  # nothing was sent


def _downgrade(state: Path) -> None:
    """Make a job's state file what the previous format wrote (no `id_number`)."""
    with sqlite3.connect(state) as db:
        db.execute("ALTER TABLE items DROP COLUMN id_number")
        db.execute("UPDATE meta SET value = ? WHERE key = 'format'", (json.dumps("sdk-batch/2"),))


def _format(state: Path) -> str:
    with sqlite3.connect(state) as db:
        return str(
            json.loads(db.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0])
        )


def test_a_job_of_the_previous_state_format_is_upgraded_and_resumes(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 6)
    api = AnthropicBatchAPI()
    _index_then_crash(tmp_path, items, api)  # indexed, nothing sent
    state = tmp_path / "job.db"
    _downgrade(state)
    assert job_summary(state).total == 6  # read-only: read as it is, and not changed
    assert _format(state) == "sdk-batch/2"
    with BatchJob.open(state, contract=Decision, backend=anthropic_backend(api)) as job:
        summary = job.run()
    assert summary.ok == 6 and _format(state) == FORMAT
    assert set(by_id(read_output(tmp_path / "out.jsonl"))) == {f"doc-{n}" for n in range(6)}


def test_a_local_backend_refuses_more_in_flight_than_its_bound() -> None:
    # The Python API's bound is the CLI's (`--concurrency`): 10,000 per client, two clients here.
    clients = local_clients(Counter(), {})
    assert LocalBackend(clients, concurrency=20_000).concurrency == 20_000
    with pytest.raises(ValueError, match=r"^concurrency must be at most 20,000 .*not 1,000,000$"):
        LocalBackend(clients, concurrency=1_000_000)


@pytest.mark.parametrize(
    ("setting", "value", "error", "said"),
    [
        ("concurrency", 3.5, TypeError, "concurrency must be a whole number or None, not 3.5"),
        ("concurrency", float("nan"), TypeError, "concurrency must be a whole number or None"),
        ("concurrency", "8", TypeError, "concurrency must be a whole number or None, not '8'"),
        ("concurrency", True, TypeError, "concurrency must be a whole number or None, not True"),
        ("concurrency", 0, ValueError, "concurrency must be at least 1, not 0"),
        ("flush_every", 2.5, TypeError, "flush_every must be a whole number, not 2.5"),
        ("flush_every", float("nan"), TypeError, "flush_every must be a whole number, not nan"),
        ("flush_every", None, TypeError, "flush_every must be a whole number, not None"),
        ("flush_seconds", float("inf"), ValueError, "flush_seconds must be a finite number"),
        ("flush_seconds", float("nan"), ValueError, "flush_seconds must be a finite number"),
        ("flush_seconds", 1e300, ValueError, "flush_seconds must be between 0 and 86400"),
        ("flush_seconds", "2", TypeError, "flush_seconds must be a number, not '2'"),
        ("flush_seconds", 0, ValueError, "flush_seconds must be a positive number, not 0"),
    ],
)
def test_a_local_backend_refuses_a_wrong_setting_where_it_is_given_naming_it(
    setting: str, value: object, error: type[Exception], said: str
) -> None:
    # On main `concurrency=3.5` (or NaN) was taken and the job's run then failed with a bare
    # "TypeError: 'float' object cannot be interpreted as an integer" after the job was made;
    # `flush_every=nan`, `flush_seconds=inf` or `1e300` were taken and nothing finished was
    # committed until the run stopped (a crash lost every answer); `"8"` or `None` were a
    # bare "'<' not supported between instances of 'str' and 'int'".
    clients = local_clients(Counter(), {})
    with pytest.raises(error, match="^LocalBackend\\(\\): " + re.escape(said)):
        LocalBackend(clients, **{setting: value})


@pytest.mark.parametrize("clients", ["http://a:8080", [object()], 7])
def test_a_local_backend_refuses_what_is_not_a_client(clients: object) -> None:
    # On main: a bare AttributeError ("'str' object has no attribute 'provider'").
    with pytest.raises(TypeError, match=r"^LocalBackend\(\): clients must be"):
        LocalBackend(clients)  # type: ignore[arg-type]
