"""Failed items retried on purpose (issue 31, item 5): `BatchJob.retry` and `sdk batch retry`.

A job whose long documents were cut off at `--max-tokens` runs them again with a larger limit:
every finished line stays as it was, the failed items' lines are replaced by their new ones, and
each item has exactly one line, through a crash at the worst moment too. The local server is
bench/fanout_server.py in its own process, cutting off answers to `[long]` prompts asked with a
token limit under 500; the hosted path runs through the real Anthropic client over the fake
Message Batches API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts import Decision
from sdk.batch import BatchError
from sdk.batch import BatchJob
from sdk.batch import JobMismatch
from sdk.batch import JobSettings
from sdk.batch import LocalBackend
from sdk.batch import job_summary
from sdk.client import AsyncStructuredClient
from sdk.providers.llamacpp import LlamaCppProvider
from tests.batch_support import INVALID_JSON
from tests.batch_support import VALID
from tests.batch_support import AnthropicBatchAPI
from tests.batch_support import Script
from tests.batch_support import anthropic_backend
from tests.batch_support import by_id
from tests.batch_support import completions
from tests.batch_support import fanout
from tests.batch_support import gate
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.test_batch_integrity import local_run
from tests.test_batch_integrity import one_line
from tests.test_batch_integrity import sdk_process
from tests.test_batch_integrity import sdk_run
from tests.test_batch_integrity import stop
from tests.test_batch_integrity import wait_for

LONG = {2, 5, 8}
"""The items whose documents are long: cut off under a 500-token limit."""


def _items(path: Path, count: int = 10) -> None:
    with path.open("w", encoding="utf-8") as file:
        for number in range(count):
            long = " [long]" if number in LONG else ""
            record = {
                "id": f"doc-{number}",
                "source": f"Invoice {number}: $4,180.00 for PO-{2000 + number}.{long}",
                "prompt": "Approve this purchase?",
            }
            file.write(json.dumps(record) + "\n")


def _backend(url: str, retries: int = 0) -> LocalBackend:
    client = AsyncStructuredClient(LlamaCppProvider(url), retries=retries, max_concurrency=4)
    return LocalBackend(client, flush_every=2)


def _lines(out: Path) -> list[bytes]:
    return out.read_bytes().splitlines(keepends=True)


def test_retry_with_a_larger_limit_reruns_the_cut_off_items_and_keeps_every_other_line(
    tmp_path: Path,
) -> None:
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    _items(items)
    with fanout(0.0, "--truncate-below", "500") as url:
        first = BatchJob.create(
            tmp_path / "job.db", contract=Decision, backend=_backend(url), input=items, out=out,
            settings=JobSettings(retries=0, max_tokens=300),
        )  # fmt: skip
        with first:
            summary = first.run()
        assert summary.ok == 7 and summary.failed == 3
        assert job_summary(tmp_path / "job.db").failure_types == {"TruncatedOutput": 3}
        kept = [line for line in _lines(out) if b'"outcome":"ok"' in line]
        before = {r["id"]: r for r in read_output(out)}

        again = BatchJob.create(
            tmp_path / "job.db", contract=Decision, backend=_backend(url), input=items, out=out,
            settings=JobSettings(retries=0, max_tokens=800), update=True,
        )  # fmt: skip
        with again:
            assert again.retry(["InvalidOutput"]) == 0  # none failed so: nothing reopened
            assert again.retry() == 3
            assert job_summary(tmp_path / "job.db").pending == 3
            sent = completions(url)
            summary = again.run()
        assert completions(url) - sent == 3  # only the failed items were asked again
    assert summary.ok == 10 and summary.failed == 0 and summary.finished
    lines = _lines(out)
    assert lines[: len(kept)] == kept  # every finished line as it was, where it was
    records = by_id(read_output(out))  # each item exactly once
    assert set(records) == {f"doc-{n}" for n in range(10)}
    for number in LONG:
        record = records[f"doc-{number}"]
        assert record["outcome"] == "ok" and record["value"]["answer"] == "approve"
        # the tries and tokens of the failed run stay counted
        assert record["attempts"] == 2
        assert record["usage"]["output_tokens"] > before[f"doc-{number}"]["usage"]["output_tokens"]
    meta = job_summary(tmp_path / "job.db")
    assert meta.ok == 10


def test_retry_on_a_hosted_job_sends_the_failed_items_in_a_new_batch(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 6)
    script = Script({1: [INVALID_JSON, INVALID_JSON, VALID], 4: [INVALID_JSON, INVALID_JSON]})
    api = AnthropicBatchAPI(script)
    settings = JobSettings(retries=1)
    with BatchJob.create(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), input=items,
        out=tmp_path / "out.jsonl", settings=settings, sleep=lambda seconds: None,
    ) as job:  # fmt: skip
        assert job.run().failed == 2
        creates = api.creates()
        assert job.retry() == 2
        summary = job.run()
    # doc-1 answers validly on its third try; doc-4 stays invalid (its script has no valid one)
    assert summary.ok == 5 and summary.failed == 1
    assert api.creates() > creates
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 6
    assert records["doc-1"]["outcome"] == "ok" and records["doc-4"]["outcome"] == "failed"
    assert records["doc-1"]["attempts"] == 3


class CrashAfterCommit(Exception):
    """Stands for the process dying between the retry's commit and its rename."""


class _CrashingJob(BatchJob):
    def _after_reopen(self) -> None:
        raise CrashAfterCommit


def test_a_crash_between_the_retry_s_commit_and_its_rename_is_completed_by_the_next_run(
    tmp_path: Path,
) -> None:
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    _items(items)
    with fanout(0.0, "--truncate-below", "500") as url:
        settings = JobSettings(retries=0, max_tokens=300)
        with BatchJob.create(
            tmp_path / "job.db", contract=Decision, backend=_backend(url), input=items, out=out,
            settings=settings,
        ) as job:  # fmt: skip
            assert job.run().failed == 3
        old = out.read_bytes()
        crashing = _CrashingJob.open(tmp_path / "job.db", contract=Decision, backend=_backend(url))
        with crashing, pytest.raises(CrashAfterCommit):
            crashing.retry()
        assert out.read_bytes() == old  # the rename never came
        assert len(list(tmp_path.glob(".out.jsonl.*.retry"))) == 1
        assert job_summary(tmp_path / "job.db").pending == 3  # but the commit did
        with BatchJob.open(tmp_path / "job.db", contract=Decision, backend=_backend(url)) as job:
            summary = job.run()  # completes the swap first, then runs the three again
    assert summary.ok == 7 and summary.failed == 3  # the same limit: cut off again
    assert not list(tmp_path.glob(".out.jsonl.*.retry"))
    records = by_id(read_output(out))
    assert len(records) == 10
    assert {n for n in range(10) if records[f"doc-{n}"]["attempts"] == 2} == LONG


def test_a_retry_refuses_an_output_that_is_not_the_job_s_and_changes_nothing(
    tmp_path: Path,
) -> None:
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    _items(items)
    with fanout(0.0, "--truncate-below", "500") as url:
        settings = JobSettings(retries=0, max_tokens=300)
        with BatchJob.create(
            tmp_path / "job.db", contract=Decision, backend=_backend(url), input=items, out=out,
            settings=settings,
        ) as job:  # fmt: skip
            job.run()
        out.write_bytes(b"".join(line for line in _lines(out) if b'"doc-5"' not in line))
        job = BatchJob.open(tmp_path / "job.db", contract=Decision, backend=_backend(url))
        with job, pytest.raises(JobMismatch, match="2 lines for the 3 failed items"):
            job.retry()
    assert job_summary(tmp_path / "job.db").failed == 3  # nothing reopened
    assert not list(tmp_path.glob(".out.jsonl.*.retry"))


def _cli_items(tmp_path: Path) -> tuple[Path, Path, Path]:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    _items(items)
    return items, out, state


def test_cli_retry_with_max_tokens(tmp_path: Path) -> None:
    items, out, state = _cli_items(tmp_path)
    with fanout(0.0, "--truncate-below", "500") as url:
        run = sdk_run(*local_run(url, items, out, "--state", str(state), "--max-tokens", "300"))
        assert run.returncode == 1, run.stderr  # done, three items failed
        assert "TruncatedOutput" in run.stdout
        none = sdk_run("batch", "retry", "--state", str(state), "--error-type", "InvalidOutput")
        assert none.returncode == 1 and "retrying 0 failed items (InvalidOutput)" in none.stderr
        retried = sdk_run("batch", "retry", "--state", str(state), "--max-tokens", "800", "--json")
        assert retried.returncode == 0, retried.stderr
        assert "retrying 3 failed items" in retried.stderr
        summary = json.loads(retried.stdout)
        assert summary["ok"] == 10 and summary["failed"] == 0
    records = by_id(read_output(out))
    assert len(records) == 10 and {r["outcome"] for r in records.values()} == {"ok"}
    meta = _meta(state)
    assert meta["settings"]["max_tokens"] == 800
    assert any(change.get("max_tokens") == [300, 800] for change in _changed(meta))
    assert any(change.get("retried") == 3 for change in meta["changes"])


def _meta(state: Path) -> dict[str, Any]:
    import sqlite3

    with sqlite3.connect(f"{state.as_uri()}?mode=ro", uri=True) as db:
        return {key: json.loads(value) for key, value in db.execute("SELECT key, value FROM meta")}


def _changed(meta: dict[str, Any]) -> list[dict[str, Any]]:
    return [change["changed"] for change in meta["changes"] if "changed" in change]


def test_cli_retry_is_refused_while_the_job_runs(tmp_path: Path) -> None:
    items, out, state = _cli_items(tmp_path)
    with fanout(0.0, "--closed") as url:
        runner = sdk_process(*local_run(url, items, out, "--state", str(state)))
        try:
            wait_for(lambda: completions(url) >= 1, "the job's first call")
            refused = sdk_run("batch", "retry", "--state", str(state))
            assert refused.returncode == 2
            assert "is running" in one_line(refused.stderr)
            gate(url, open=True)
            _, errors = runner.communicate(timeout=120)
            assert runner.returncode == 0, errors
        finally:
            stop(runner)


def test_retry_of_a_job_with_items_in_provider_batches_is_refused(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    write_items(items, 4)
    api = AnthropicBatchAPI(polls=1000)
    with BatchJob.create(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), input=items,
        out=tmp_path / "out.jsonl",
        sleep=lambda seconds: (_ for _ in ()).throw(KeyboardInterrupt),
    ) as job:  # fmt: skip
        with pytest.raises(KeyboardInterrupt):
            job.run()  # submitted, then interrupted while waiting for the batch
        with pytest.raises(BatchError, match="in flight"):
            job.retry()
