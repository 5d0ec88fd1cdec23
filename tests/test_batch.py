"""Batch jobs (`sdk.batch`): hosted lifecycles through the real clients on fake batch APIs,
crash-and-resume at every step, follow-ups with feedback, the local backend, and the CLI."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Contract
from sdk import StopReason
from sdk import StructuredClient
from sdk import parse
from sdk.batch import AnthropicBatches
from sdk.batch import BatchError
from sdk.batch import BatchInputError
from sdk.batch import BatchJob
from sdk.batch import JobMismatch
from sdk.batch import JobSettings
from sdk.batch import LocalBackend
from sdk.batch import job_summary
from sdk.batch._hosted import RemoteResult
from sdk.batch._hosted import RemoteStatus
from sdk.engine.conversation import feedback_message
from sdk.errors import InvalidJSON
from sdk.errors import SchemaViolation
from sdk.providers import AnthropicProvider
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import LlamaCppProvider
from sdk.providers import Message
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers.anthropic import build_request
from sdk.providers.openai import build_responses_request
from tests.batch_support import CANCELED
from tests.batch_support import ERRORED
from tests.batch_support import EXPIRED
from tests.batch_support import GARBAGE_LINE
from tests.batch_support import INVALID_JSON
from tests.batch_support import MISSING
from tests.batch_support import SERVER_ERROR
from tests.batch_support import VALID
from tests.batch_support import WRONG_ENUM
from tests.batch_support import WRONG_SHAPE
from tests.batch_support import AnthropicBatchAPI
from tests.batch_support import OpenAIBatchAPI
from tests.batch_support import Script
from tests.batch_support import Sleeps
from tests.batch_support import anthropic_backend
from tests.batch_support import by_id
from tests.batch_support import fanout
from tests.batch_support import job_for
from tests.batch_support import llamacpp_server
from tests.batch_support import llamacpp_setup
from tests.batch_support import local_clients
from tests.batch_support import openai_backend
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply


@pytest.fixture
def items(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    write_items(path, 25)
    return path


# --- hosted lifecycles ---


def test_anthropic_job_crosses_chunks_follows_up_and_writes_every_item_once(
    tmp_path: Path, items: Path
) -> None:
    script = Script(
        {
            2: [WRONG_ENUM, VALID],  # invalid output: a follow-up with feedback
            4: [ERRORED],  # a 400: not retried
            6: [EXPIRED, VALID],  # never run: resubmitted
            8: [CANCELED],  # cancelled every time: resubmitted until the limit
            10: [SERVER_ERROR, VALID],  # overloaded: resubmitted
            12: [INVALID_JSON],  # invalid every time: retries run out
        }
    )
    api = AnthropicBatchAPI(script)
    sleeps = Sleeps()
    job = job_for(
        tmp_path,
        items,
        anthropic_backend(api, max_requests=10),
        settings=JobSettings(retries=2, resubmits=2, max_tokens=512),
        sleep=sleeps,
    )
    summary = job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))

    assert set(records) == {f"doc-{n}" for n in range(25)}
    first = [batch for batch in api.batches.values()][:3]
    assert [len(batch.requests) for batch in first] == [10, 10, 5]  # the 25 items, in 3 chunks
    assert records["doc-0"]["outcome"] == "ok"
    assert records["doc-0"]["value"]["answer"] == "approve"
    assert records["doc-0"]["schema"] == {
        "name": "Decision",
        "version": 1,
        "fingerprint": Decision.fingerprint(),
    }
    assert records["doc-0"]["provider"] == "anthropic"
    assert records["doc-2"]["outcome"] == "ok" and records["doc-2"]["attempts"] == 2
    assert records["doc-4"]["outcome"] == "failed"
    assert records["doc-4"]["error"]["status_code"] == 400
    assert records["doc-6"]["outcome"] == "ok"
    assert records["doc-8"]["outcome"] == "failed"
    assert "canceled" in records["doc-8"]["error"]["message"]
    assert len(script.bodies[8]) == 3  # the first try and two resubmits
    assert records["doc-10"]["outcome"] == "ok"
    assert records["doc-12"]["outcome"] == "failed"
    assert records["doc-12"]["error"]["type"] == "InvalidJSON"
    assert records["doc-12"]["error"]["text"] == INVALID_JSON  # the raw output is kept
    assert len(script.bodies[12]) == 3  # the first try and two retries
    assert summary.ok == 22 and summary.failed == 3 and summary.finished
    assert summary.failure_types == {"ProviderError": 2, "InvalidJSON": 1}
    assert sleeps and sleeps[0] == 10.0  # polled with backoff, through the given sleep


def test_anthropic_requests_are_the_live_codec_s_and_the_follow_up_carries_feedback(
    tmp_path: Path, items: Path
) -> None:
    script = Script({3: [WRONG_ENUM, VALID]})
    api = AnthropicBatchAPI(script)
    job_for(tmp_path, items, anthropic_backend(api), settings=JobSettings(max_tokens=512)).run()

    first = api.batches[next(iter(api.batches))].requests
    custom_ids = [request["custom_id"] for request in first]
    assert len(set(custom_ids)) == 25
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", cid) for cid in custom_ids)
    sent = script.bodies[3][0]
    source = "Invoice 3: $4,180.00 for PO-2003."
    live = build_request(
        CompletionRequest(
            JsonDocument(Decision),
            (Message("user", f"Approve this purchase?\n\n<document>\n{source}\n</document>"),),
            max_tokens=512,
        ),
        model="claude-sonnet-4-6",
    )
    assert sent == json.loads(json.dumps(live))  # exactly what a live call sends
    retry = script.bodies[3][1]["messages"]
    assert retry[:1] == sent["messages"]
    assert retry[1] == {"role": "assistant", "content": WRONG_ENUM}
    with pytest.raises(SchemaViolation) as caught:
        parse(Decision, WRONG_ENUM, stop_reason=StopReason.END_TURN)
    assert retry[2] == {"role": "user", "content": feedback_message(Decision, caught.value)}


class Inventory(Contract):
    """Stock per product: a map field, which Anthropic and OpenAI's strict mode close."""

    counts: dict[str, int]


@pytest.mark.parametrize("family", ["anthropic", "openai"])
def test_a_hosted_job_refuses_a_schema_its_target_would_weaken_before_sending(
    tmp_path: Path, family: str
) -> None:
    """Issue 33 item 2: a schema whose promise the target would weaken silently is refused
    before sending, on every route a call takes. A hosted job built its requests without the
    codec's vetting, so every item of a map-field contract went out, came back `{}` and was
    written "ok". Now each such item fails alone with the live call's `UnsupportedRequest`,
    unsent, and a line that accepts the weakening (`accept_weakened_schema`) is sent."""
    path = tmp_path / "items.jsonl"
    accepted = {"options": {"accept_weakened_schema": True}}
    with open(path, "w", encoding="utf-8") as file:
        for n in range(3):
            line = {"id": f"doc-{n}", "prompt": f"Invoice {n}: count the stock.",
                    **(accepted if n == 1 else {})}  # fmt: skip
            file.write(json.dumps(line) + "\n")
    script = Script({1: ['{"counts": {}}']})
    if family == "anthropic":
        api: Any = AnthropicBatchAPI(script)
        backend: Any = anthropic_backend(api)
    else:
        api = OpenAIBatchAPI(script)
        backend = openai_backend(api)
    job = BatchJob.create(tmp_path / "job.db", contract=Inventory, backend=backend, input=path,
                          out=tmp_path / "out.jsonl", sleep=Sleeps())  # fmt: skip
    summary = job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 1 and summary.failed == 2
    assert set(script.bodies) == {1}  # the refused items were never sent
    for refused in ("doc-0", "doc-2"):
        error = records[refused]["error"]
        assert error["type"] == "UnsupportedRequest"
        said = "would silently weaken Inventory: /properties/counts: additionalProperties"
        assert said in error["message"]
    assert records["doc-1"]["outcome"] == "ok" and records["doc-1"]["value"] == {"counts": {}}


def test_a_hosted_job_sends_the_provider_s_own_extra_body(tmp_path: Path, items: Path) -> None:
    """A provider's `extra_body=` goes with every request of a live call; a hosted job's
    requests left it out (built by the codec alone)."""
    script = Script()
    api = AnthropicBatchAPI(script)
    provider = AnthropicProvider(anthropic_client(api), model="claude-sonnet-4-6",
                                 extra_body={"metadata": {"user_id": "team-7"}})  # fmt: skip
    job_for(tmp_path, items, AnthropicBatches(provider)).run()
    assert script.bodies[3][0]["metadata"] == {"user_id": "team-7"}


def test_openai_responses_job_uploads_files_and_reads_output_and_error_files(
    tmp_path: Path, items: Path
) -> None:
    script = Script({1: [EXPIRED, VALID], 5: [ERRORED], 9: [WRONG_ENUM, VALID]})
    api = OpenAIBatchAPI(script)
    job = job_for(tmp_path, items, openai_backend(api, max_requests=10))
    summary = job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))

    assert set(records) == {f"doc-{n}" for n in range(25)}
    assert summary.ok == 24 and summary.failed == 1
    assert records["doc-5"]["error"]["status_code"] == 400
    assert records["doc-9"]["attempts"] == 2 and records["doc-1"]["attempts"] == 2
    assert records["doc-0"]["provider"] == "openai_responses"
    # Three chunks, then one follow-up for the expired and the invalid item.
    assert api.uploads() == 4 and api.creates() == 4
    batches = list(api.batches.values())
    assert [len(b.requests) for b in batches] == [10, 10, 5, 2]
    job_key = job.job_id
    for batch in batches:
        assert batch.metadata is not None and batch.metadata["sdk_job"] == job_key
        filename = api.files[batch.input_file_id][0]["filename"]  # type: ignore[index]
        assert filename == f"sdk-batch-{job_key}-{batch.metadata['sdk_submission']}.jsonl"
    line = batches[0].requests[0]
    assert line["method"] == "POST" and line["url"] == "/v1/responses"
    assert line["body"]["text"]["format"]["name"] == "Decision_v1"
    source = "Invoice 0: $4,180.00 for PO-2000."
    live = build_responses_request(
        CompletionRequest(
            JsonDocument(Decision),
            (Message("user", f"Approve this purchase?\n\n<document>\n{source}\n</document>"),),
            max_tokens=4096,
        ),
        model="gpt-5.1-mini",
    )
    assert line["body"] == json.loads(json.dumps(live))


def test_openai_hostile_result_files(tmp_path: Path, items: Path) -> None:
    # A result line that is not one (skipped: the item is sent again) and a 200 whose body is
    # not a reply (a typed ProviderError on that item, with the body kept; not resent).
    api = OpenAIBatchAPI(Script({2: [GARBAGE_LINE, VALID], 3: [WRONG_SHAPE]}))
    summary = job_for(tmp_path, items, openai_backend(api)).run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 25 and summary.ok == 24
    assert records["doc-2"]["outcome"] == "ok" and records["doc-2"]["attempts"] == 2
    assert records["doc-3"]["outcome"] == "failed"
    assert records["doc-3"]["error"]["type"] == "ProviderError"
    assert "unusable reply" in records["doc-3"]["error"]["message"]


@pytest.mark.parametrize("seq", ["\u00b2", "1" * 5000, "01", "+1", " 1", "1_0"])
def test_a_result_line_naming_no_item_of_the_job_is_skipped(
    tmp_path: Path, items: Path, seq: str
) -> None:
    # A custom id the job never writes (its item's seq is `str(seq)`), with an invalid reply,
    # in every batch's results, after the item's own line. Digits `int()` does not read ("²":
    # `str.isdigit` says yes; 5,000 digits: past `int`'s limit) were a raw `ValueError` out of
    # `run`; "01" was read as item 1's, which took the invalid reply (re-asked, then failed).
    api = AnthropicBatchAPI()
    sleeps = Sleeps()

    def hostile_line_added(seconds: float) -> None:
        for batch in api.batches.values():
            key = batch.requests[0]["custom_id"].rpartition("-")[0]
            line = {"custom_id": f"{key}-{seq}", "result": AnthropicBatchAPI._result(INVALID_JSON)}
            if line not in batch.results:
                batch.results.append(line)
        sleeps(seconds)

    summary = job_for(tmp_path, items, anthropic_backend(api), sleep=hostile_line_added).run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 25 and len(records) == 25
    assert {record["attempts"] for record in records.values()} == {1}


def test_openai_batch_refused_whole_fails_its_items_with_the_reason(
    tmp_path: Path, items: Path
) -> None:
    api = OpenAIBatchAPI(refuse=True)
    summary = job_for(tmp_path, items, openai_backend(api)).run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 25 and summary.failed == 25
    message = records["doc-0"]["error"]["message"]
    assert "does not support the batch API" in message
    assert api.creates() == 1  # a refused batch is not sent again


def test_openai_chat_job(tmp_path: Path, items: Path) -> None:
    api = OpenAIBatchAPI(Script({0: [INVALID_JSON, VALID]}), chat=True)
    summary = job_for(tmp_path, items, openai_backend(api, chat=True)).run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert summary.ok == 25 and len(records) == 25
    assert records["doc-0"]["provider"] == "openai_chat" and records["doc-0"]["attempts"] == 2
    first = next(iter(api.batches.values())).requests[0]
    assert first["url"] == "/v1/chat/completions"
    assert first["body"]["response_format"]["json_schema"]["name"] == "Decision_v1"


# --- crash and resume ---


class Crash(Exception):
    """Stands for the process dying (raised where a kill could land)."""


class CrashAfterCreate(BatchJob):
    """Dies once right after the backend created a batch, before the job recorded it."""

    crashed = False

    def _after_create(self, key: str, remote_id: str) -> None:
        if not CrashAfterCreate.crashed:
            CrashAfterCreate.crashed = True
            raise Crash(remote_id)


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_crash_after_submission_before_recording_finds_the_batch_again(
    tmp_path: Path, items: Path, kind: str
) -> None:
    CrashAfterCreate.crashed = False
    api: Any = AnthropicBatchAPI(Script()) if kind == "anthropic" else OpenAIBatchAPI(Script())

    def backend() -> Any:
        limits = {"max_requests": 10}
        return (
            anthropic_backend(api, **limits)
            if kind == "anthropic"
            else openai_backend(api, **limits)
        )

    job = CrashAfterCreate.create(
        tmp_path / "job.db",
        contract=Decision,
        backend=backend(),
        input=items,
        out=tmp_path / "out.jsonl",
        sleep=Sleeps(),
    )
    with pytest.raises(Crash):
        job.run()
    job.close()
    assert api.creates() == 1  # the first chunk's batch exists, unrecorded

    resumed = BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=backend(), sleep=Sleeps()
    )
    summary = resumed.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 25 and summary.ok == 25
    assert api.creates() == 3  # found again, not sent twice: 3 chunks, 3 batches
    if kind == "openai":
        assert api.uploads() == 3
    assert sum(api.asked.values()) == 25  # every item ran exactly once


def test_crash_after_upload_before_recording_reuses_the_uploaded_file(
    tmp_path: Path, items: Path
) -> None:
    api = OpenAIBatchAPI(Script())
    backend = openai_backend(api, max_requests=10)
    original = backend.prepare

    def prepare(job: str, key: str, entries: list[bytes]) -> str | None:
        original(job, key, entries)
        raise Crash("killed after the upload, before its id was recorded")

    backend.prepare = prepare  # type: ignore[method-assign]
    job = job_for(tmp_path, items, backend)
    with pytest.raises(Crash):
        job.run()
    job.close()
    assert api.uploads() == 1 and api.creates() == 0

    resumed = BatchJob.open(
        tmp_path / "job.db",
        contract=Decision,
        backend=openai_backend(api, max_requests=10),
        sleep=Sleeps(),
    )
    assert resumed.run().ok == 25
    assert api.uploads() == 3 and api.creates() == 3  # the first file found by its name
    assert len(by_id(read_output(tmp_path / "out.jsonl"))) == 25


def test_crash_during_polling_resumes_polling(tmp_path: Path, items: Path) -> None:
    api = AnthropicBatchAPI(Script(), polls=4)
    backend = anthropic_backend(api, max_requests=10)
    polls = 0
    original = backend.poll

    def poll(remote_id: str) -> RemoteStatus:
        nonlocal polls
        polls += 1
        if polls == 4:
            raise Crash("killed while polling")
        return original(remote_id)

    backend.poll = poll  # type: ignore[method-assign]
    job = job_for(tmp_path, items, backend)
    with pytest.raises(Crash):
        job.run()
    job.close()
    assert job_summary(tmp_path / "job.db").in_flight == 25

    resumed = BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), sleep=Sleeps()
    )
    assert resumed.run().ok == 25
    assert len(by_id(read_output(tmp_path / "out.jsonl"))) == 25
    assert api.creates() == 3


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_crash_halfway_through_collecting_writes_each_item_once(
    tmp_path: Path, items: Path, kind: str
) -> None:
    api: Any = AnthropicBatchAPI(Script()) if kind == "anthropic" else OpenAIBatchAPI(Script())
    backend: Any = anthropic_backend(api) if kind == "anthropic" else openai_backend(api)
    original = backend.results

    def results(remote_id: str) -> Iterator[RemoteResult]:
        for number, result in enumerate(original(remote_id)):
            if number == 13:
                raise Crash("killed while collecting")
            yield result

    backend.results = results
    job = job_for(tmp_path, items, backend, collect_chunk=4)
    with pytest.raises(Crash):
        job.run()
    job.close()
    out = tmp_path / "out.jsonl"
    assert len(read_output(out)) == 12  # three chunks of 4 committed
    with open(out, "ab") as file:  # and a torn write that never committed
        file.write(b'{"id": "doc-99", "outcome": "o')

    fresh: Any = anthropic_backend(api) if kind == "anthropic" else openai_backend(api)
    resumed = BatchJob.open(tmp_path / "job.db", contract=Decision, backend=fresh, sleep=Sleeps())
    assert resumed.run().ok == 25
    records = by_id(read_output(out))
    assert set(records) == {f"doc-{n}" for n in range(25)}
    assert api.creates() == 1


def test_a_crash_after_the_last_result_and_a_lost_result_still_end_each_item_once(
    tmp_path: Path, items: Path
) -> None:
    api = AnthropicBatchAPI(Script({3: [MISSING, VALID]}))
    backend = anthropic_backend(api)
    original = backend.results

    def results(remote_id: str) -> Iterator[RemoteResult]:
        yield from original(remote_id)
        raise Crash("killed after reading every result, before closing the batch")

    backend.results = results  # type: ignore[method-assign]
    job = job_for(tmp_path, items, backend, collect_chunk=6)
    with pytest.raises(Crash):
        job.run()
    job.close()
    assert len(read_output(tmp_path / "out.jsonl")) == 24  # all but the lost one

    resumed = BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), sleep=Sleeps()
    )
    summary = resumed.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 25 and summary.ok == 25 and summary.finished
    assert records["doc-3"]["attempts"] == 2  # resubmitted once, in a follow-up batch
    assert api.creates() == 2


def test_cancelling_a_finished_job_leaves_it_finished(tmp_path: Path, items: Path) -> None:
    # On main: `cancel` marked a job whose every item was done "cancelled" for good (all its
    # items ok), and `status` and `resume` said so.
    counter: Counter[str] = Counter()
    job = job_for(tmp_path, items, LocalBackend(local_clients(counter, {})))
    assert job.run().ok == 25
    summary = job.cancel()
    assert summary.finished and summary.state == "finished" and summary.ok == 25
    job.close()
    again = BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=LocalBackend(local_clients(counter, {}))
    )
    assert again.summary().state == "finished"
    assert again.run().ok == 25 and again.summary().state == "finished"
    again.close()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 25 and {r["outcome"] for r in records.values()} == {"ok"}


def test_a_cancel_racing_the_last_commit_leaves_the_job_finished(
    tmp_path: Path, items: Path
) -> None:
    # On main: `cancel` read the job (not finished) and then set its flag in a second
    # statement; a runner committing the last item between them (held open here, as a runner in
    # another process holds its commit) had a job of 25 ok items labelled "cancelled" for good.
    counter: Counter[str] = Counter()
    job = job_for(tmp_path, items, LocalBackend(local_clients(counter, {})))
    assert job.run().ok == 25
    runner = sqlite3.connect(tmp_path / "job.db", isolation_level=None, timeout=30)
    last = "(SELECT max(seq) FROM items)"
    runner.execute(f"UPDATE items SET state = 'pending', outcome = NULL WHERE seq = {last}")
    runner.execute("BEGIN IMMEDIATE")  # the runner's last commit, under way
    runner.execute(f"UPDATE items SET state = 'done', outcome = 'ok' WHERE seq = {last}")
    cancelled: list[Any] = []

    def cancel() -> None:  # (as `sdk batch cancel` does, in a process of its own)
        other = BatchJob.open(
            tmp_path / "job.db", contract=Decision, backend=LocalBackend(local_clients(counter, {}))
        )
        cancelled.append(other.cancel())
        other.close()

    thread = threading.Thread(target=cancel)
    thread.start()
    time.sleep(0.5)  # (the cancel has read the job, or waits to)
    runner.execute("COMMIT")
    thread.join(timeout=30)
    assert not thread.is_alive()
    runner.close()
    assert cancelled[0].state == "finished" and cancelled[0].ok == 25
    assert job.summary().state == "finished"
    job.close()


def test_a_job_run_in_one_thread_is_cancelled_and_read_from_another(
    tmp_path: Path, items: Path
) -> None:
    # On main: the job's one SQLite connection belonged to the thread that opened it, so
    # `cancel()` (or `summary()`) from another thread, the way an application stops a job it
    # runs in a worker, failed with "job.db is damaged or not a job state file".
    counter: Counter[str] = Counter()
    answer = llamacpp_server(counter, "a", {}, Counter())
    released = threading.Event()

    async def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        if llamacpp_setup(request.url.path, body) is None and counter["a"] >= 5:
            for _ in range(3000):  # (a server that takes its time: the calls wait, at most 30 s)
                if released.is_set():
                    break
                await asyncio.sleep(0.01)
        return await answer(request)

    provider = LlamaCppProvider(
        "http://a.test:8080",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
        prompt_template=lambda request: "\n".join(m.text for m in request.messages),
    )
    client = AsyncStructuredClient(provider, retries=1, max_concurrency=3)
    job = job_for(tmp_path, items, LocalBackend([client]))
    ended: list[Any] = []
    worker = threading.Thread(target=lambda: ended.append(job.run()))
    worker.start()
    for _ in range(3000):
        if counter["a"] >= 5:
            break
        time.sleep(0.01)
    assert job.summary().state == "running"
    assert job.cancel().state == "cancelling"
    worker.join(timeout=30)  # (the run notices within about a second: its calls are cancelled)
    released.set()
    assert not worker.is_alive() and ended, "the run did not end"
    assert ended[0].state == "cancelled" and ended[0].cancelled > 0
    assert ended[0].ok + ended[0].cancelled == 25
    job.close()
    with pytest.raises(BatchError, match="the job was closed"):
        job.summary()


_CLOSE_RACE = """
import collections, sys, tempfile, threading, time
from pathlib import Path
from sdk import AsyncStructuredClient
from sdk.batch import LocalBackend
from sdk.providers import LlamaCppProvider
from tests.batch_support import job_for, write_items

seen = collections.Counter()
for _ in range(4):
    tmp = Path(tempfile.mkdtemp())
    write_items(tmp / "items.jsonl", 200)
    client = AsyncStructuredClient(LlamaCppProvider("http://127.0.0.1:9"))
    job = job_for(tmp, tmp / "items.jsonl", LocalBackend([client]))
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                job.summary()
            except Exception as error:
                seen[f"{type(error).__name__}: {str(error).split(': ', 1)[-1]}"] += 1
                return

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    time.sleep(0.2)
    job.close()
    stop.set()
    for reader in readers:
        reader.join()
print(dict(seen))
"""


def test_closing_a_job_while_other_threads_read_it_is_their_batch_error() -> None:
    # On main: close() closed every thread's connection at once, one another thread was inside
    # a statement on among them; the interpreter crashed (SIGSEGV) in most runs of this race.
    ran = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CLOSE_RACE)],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "{'BatchError: the job was closed': 16}"


def test_cancel_stops_sending_and_closes_every_item(tmp_path: Path, items: Path) -> None:
    api = AnthropicBatchAPI(Script(), polls=5)
    backend = anthropic_backend(api, max_requests=10)
    original = backend.poll
    calls = 0

    def poll(remote_id: str) -> RemoteStatus:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt
        return original(remote_id)

    backend.poll = poll  # type: ignore[method-assign]
    job = job_for(tmp_path, items, backend)
    with pytest.raises(KeyboardInterrupt):
        job.run()
    job.close()

    with BatchJob.open(
        tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api), sleep=Sleeps()
    ) as cancelling:
        cancelling.cancel()
        summary = cancelling.run()
    assert all(batch.cancelled for batch in api.batches.values())
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 25
    assert {record["outcome"] for record in records.values()} == {"cancelled"}
    assert summary.cancelled == 25 and summary.state == "cancelled"
    assert api.creates() == 3  # nothing resubmitted after the cancel


# --- input and state errors ---


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a", "prompt": "x"}', '{"id": "a", "prompt": "y"}'], "more than once"),
        (['{"id": "a", "prompt": "x"}', "{not json"], ":2: not a JSON object"),
        (['{"prompt": "x"}'], "`id` must be"),
        (['{"id": "a"}'], "pass a prompt"),
        (['{"id": "a", "prompt": "x", "max_tokens": -1}'], "max_tokens"),
        (['{"id": "a", "prompt": "x", "extra": 1}'], "unknown keys"),
        (["[1, 2]"], "not a JSON object"),
        (["[" * 100_000], "nested too deeply"),
        (['{"id": "a", "prompt": "caf\udcff"}'], "not a JSON object"),
        (['{"id": true, "prompt": "x"}'], "`id` must be"),
        (['{"id": "a", "messages": [{"role": "system", "content": "x"}]}'], "role"),
        # a system prompt of white space or invisible characters alone, refused as a call's
        # `system=` is (on main it was sent)
        (['{"id": "a", "prompt": "x", "system": " \\u200b"}'], "system must be text that"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_line(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    api = AnthropicBatchAPI()
    job = job_for(tmp_path, path, anthropic_backend(api))
    with pytest.raises(BatchInputError, match=re.escape(message)):
        job.run()
    assert api.creates() == 0


def test_a_state_file_refuses_another_contract_or_a_changed_input(
    tmp_path: Path, items: Path
) -> None:
    from contracts import Sentiment

    api = AnthropicBatchAPI()
    job_for(tmp_path, items, anthropic_backend(api)).run()
    with pytest.raises(JobMismatch, match="same contract"):
        BatchJob.open(tmp_path / "job.db", contract=Sentiment, backend=anthropic_backend(api))
    out = tmp_path / "out.jsonl"
    kept = out.read_bytes()
    out.write_bytes(kept[:100])  # someone cut the output: the job will not write over it
    with pytest.raises(JobMismatch, match="shorter"):
        BatchJob.open(tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api)).run()
    out.write_bytes(kept)
    with items.open("a") as file:
        file.write('{"id": "late", "prompt": "x"}\n')
    with pytest.raises(JobMismatch, match="changed"):
        BatchJob.open(tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api)).run()


def test_submissions_respect_the_byte_limit(tmp_path: Path, items: Path) -> None:
    api = AnthropicBatchAPI()
    limit = 2_500  # room for three of this job's requests (each under 800 bytes), not four
    summary = job_for(tmp_path, items, anthropic_backend(api, max_bytes=limit)).run()
    assert summary.ok == 25
    sizes = [len(batch.requests) for batch in api.batches.values()]
    assert sum(sizes) == 25 and len(sizes) >= 7 and max(sizes) <= 3
    for batch in api.batches.values():
        body = json.dumps({"requests": batch.requests}, ensure_ascii=False, separators=(",", ":"))
        assert len(body.encode()) <= limit


def test_a_request_over_the_byte_limit_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 3)
    with path.open("a") as file:
        file.write(json.dumps({"id": "huge", "prompt": "x" * 5000}) + "\n")
    api = AnthropicBatchAPI()
    summary = job_for(tmp_path, path, anthropic_backend(api, max_bytes=4000)).run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert records["huge"]["outcome"] == "failed"
    assert "over the batch limit" in records["huge"]["error"]["message"]
    assert summary.ok == 3


# --- the local backend ---


def test_local_job_over_two_servers_with_live_retries(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 60)
    counter: Counter[str] = Counter()
    plan = {7: [WRONG_ENUM, VALID], 8: [INVALID_JSON]}
    backend = LocalBackend(local_clients(counter, plan), flush_every=7)
    seen: list[int] = []
    job = job_for(tmp_path, path, backend, settings=JobSettings(retries=1, max_tokens=300))
    summary = job.run(progress=lambda p: seen.append(p.done), progress_every=0)
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 60 and summary.ok == 59 and summary.failed == 1
    assert records["doc-7"]["attempts"] == 2
    assert records["doc-8"]["error"]["type"] == "RetriesExhausted"
    assert counter["a"] > 10 and counter["b"] > 10  # both servers took work
    assert counter["n_predict=300"] == counter["a"] + counter["b"]  # the job's max_tokens
    assert seen == sorted(seen) and seen[-1] == 60


def test_local_job_resumes_after_a_crash_without_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_items(path, 60)
    counter: Counter[str] = Counter()
    reports = 0

    def progress(_: Any) -> None:
        nonlocal reports
        reports += 1
        if reports == 4:
            raise Crash("killed mid-job")

    job = job_for(tmp_path, path, LocalBackend(local_clients(counter, {}), flush_every=5))
    with pytest.raises(Crash):
        job.run(progress=progress, progress_every=0)
    job.close()
    done = len(read_output(tmp_path / "out.jsonl"))
    assert 0 < done < 60

    resumed = BatchJob.open(
        tmp_path / "job.db",
        contract=Decision,
        backend=LocalBackend(local_clients(counter, {}), flush_every=5),
    )
    assert resumed.run().ok == 60
    assert len(by_id(read_output(tmp_path / "out.jsonl"))) == 60


def test_invalid_json_reaches_the_parser_not_the_transport() -> None:
    # The batch path and a live call read a reply the same way: InvalidJSON, with position.
    with pytest.raises(InvalidJSON):
        parse(Decision, INVALID_JSON, stop_reason=StopReason.END_TURN)


# --- the CLI, against a real local server ---


@pytest.fixture
def fanout_server() -> Iterator[str]:
    with fanout(0.005) as url:
        yield url


def test_cli_run_status_resume(tmp_path: Path, fanout_server: str) -> None:
    from typer.testing import CliRunner

    from sdk.cli import app

    write_items(tmp_path / "items.jsonl", 30)
    out = tmp_path / "results.jsonl"
    runner = CliRunner()
    ran = runner.invoke(
        app,
        [
            "batch",
            "run",
            "--contract",
            "contracts:Decision",
            "--provider",
            "llamacpp",
            "--base-url",
            fanout_server,
            "--base-url",
            fanout_server,
            "--concurrency",
            "4",
            "--input",
            str(tmp_path / "items.jsonl"),
            "--out",
            str(out),
        ],
    )
    assert ran.exit_code == 0, ran.output
    assert "30 ok" in ran.output
    assert len(by_id(read_output(out))) == 30
    state = str(tmp_path / "results.jsonl.job.db")
    status = runner.invoke(app, ["batch", "status", "--state", state, "--json"])
    assert status.exit_code == 0
    data = json.loads(status.stdout)
    assert data["ok"] == 30 and data["finished"] and data["provider"] == "llamacpp"
    again = runner.invoke(app, ["batch", "resume", "--state", state])
    assert again.exit_code == 0
    assert len(by_id(read_output(out))) == 30  # nothing run or written twice
    missing = runner.invoke(app, ["batch", "status", "--state", str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "no such job state file" in missing.stderr
    bad = runner.invoke(
        app,
        [
            "batch",
            "run",
            "--contract",
            "contracts:Decision",
            "--provider",
            "vllm",
            "--base-url",
            fanout_server,
            "--input",
            str(tmp_path / "items.jsonl"),
            "--out",
            str(tmp_path / "other.jsonl"),
        ],
    )
    assert bad.exit_code == 2 and "--model is required" in bad.stderr
    (tmp_path / "dup.jsonl").write_text('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n')
    dup = runner.invoke(
        app,
        ["batch", "run", "--contract", "contracts:Decision", "--provider", "llamacpp",
         "--base-url", fanout_server, "--input", str(tmp_path / "dup.jsonl"),
         "--out", str(tmp_path / "dup-out.jsonl")],
    )  # fmt: skip
    assert dup.exit_code == 2 and "appears more than once" in dup.stderr


def test_cli_hosted_run_without_a_key_says_which_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from sdk.cli import app

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    write_items(tmp_path / "items.jsonl", 3)
    ran = CliRunner().invoke(
        app,
        ["batch", "run", "--contract", "contracts:Decision", "--provider", "anthropic",
         "--model", "claude-sonnet-4-6", "--input", str(tmp_path / "items.jsonl"),
         "--out", str(tmp_path / "out.jsonl")],
    )  # fmt: skip
    assert ran.exit_code == 2, ran.output
    assert "ANTHROPIC_API_KEY" in ran.stderr


def test_a_new_job_refuses_an_output_file_that_holds_data(tmp_path: Path, items: Path) -> None:
    from sdk.batch import BatchError

    out = tmp_path / "out.jsonl"
    out.write_text('{"someone": "else\'s data"}\n')
    with pytest.raises(BatchError, match="already holds data"):
        job_for(tmp_path, items, anthropic_backend(AnthropicBatchAPI()))
    assert out.read_text() == '{"someone": "else\'s data"}\n'


def test_the_example_runs_offline(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    example = Path(__file__).parents[1] / "examples" / "batch_archive.py"
    env = {key: value for key, value in os.environ.items() if key != "ANTHROPIC_API_KEY"}
    env["PYTHONPATH"] = str(example.parents[1])  # this checkout's sdk and contracts
    done = subprocess.run(
        [sys.executable, str(example)],
        capture_output=True, text=True, env=env, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "items: 5 total, 5 ok, 0 failed" in done.stdout
    assert "r-4472: ok reject (attempts: 2)" in done.stdout  # the follow-up with feedback
    assert "resumed: 5 ok, nothing sent again" in done.stdout


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # 10^6 made a million worker tasks and never started, memory growing (probe12c D2)
        (["--concurrency", "1000000"], "--concurrency must be between 1 and 10000, not 1000000"),
        (["--engine", "bogus"], "--engine must be 'local' or 'ray', not 'bogus'"),
    ],
)
def test_cli_run_refuses_a_job_setting_out_of_its_declaration_naming_the_option(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    """`--concurrency` has an upper bound (`MOST_IN_FLIGHT`), declared on `BackendSpec`, and a
    refused job setting names the option, not the internal `BackendSpec()`; nothing is made."""
    from typer.testing import CliRunner

    from sdk.batch._setup import BackendSpec
    from sdk.cli import app

    write_items(tmp_path / "items.jsonl", 2)
    ran = CliRunner().invoke(
        app,
        ["batch", "run", "--contract", "contracts:Decision", "--provider", "llamacpp",
         "--base-url", "http://127.0.0.1:9", "--input", str(tmp_path / "items.jsonl"),
         "--out", str(tmp_path / "out.jsonl"), *flags],
    )  # fmt: skip
    assert ran.exit_code == 2, ran.output
    assert ran.stderr.strip().splitlines() == [f"error: {said}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl"]
    with pytest.raises(ValueError, match="concurrency must be between 1 and 10000"):
        BackendSpec("llamacpp", base_urls=["http://127.0.0.1:9"], concurrency=10_001)
    assert BackendSpec("llamacpp", base_urls=["http://x"], concurrency=10_000).concurrency == 10_000


@pytest.mark.parametrize(
    ("setting", "value", "error", "said"),
    [
        ("poll_interval", "10", TypeError, "poll_interval must be a number or None, not '10'"),
        ("poll_interval", -1.0, ValueError, "poll_interval must be a positive number, not -1.0"),
        ("poll_interval", 0, ValueError, "poll_interval must be a positive number, not 0"),
        ("poll_interval", float("nan"), ValueError, "poll_interval must be a finite number"),
        ("poll_interval", 1e300, ValueError, "poll_interval must be between 0 and 86400"),
        ("poll_max", -5.0, ValueError, "poll_max must be a positive number, not -5.0"),
        ("collect_chunk", 0, ValueError, "collect_chunk must be at least 1, not 0"),
        ("collect_chunk", "x", TypeError, "collect_chunk must be a whole number or None, not 'x'"),
        ("sleep", 5, TypeError, "sleep must be a function of the seconds to wait, or None"),
        ("settings", "x", TypeError, "settings must be a JobSettings or None, not 'x'"),
    ],
)
def test_a_hosted_job_s_setting_is_refused_before_any_file_is_made_or_batch_sent(
    tmp_path: Path, setting: str, value: object, error: type[Exception], said: str
) -> None:
    # On main these were only checked to be known keywords: `poll_interval="10"`,
    # `collect_chunk="x"` and `sleep=5` failed with a bare TypeError after the first batch was
    # created (sent and paid for); NaN, 0 or a negative interval was taken (polling with no
    # wait), and 1e300 waited with no bound.
    api = AnthropicBatchAPI()
    items = tmp_path / "items.jsonl"
    write_items(items, 3)
    with pytest.raises(error, match=r"^BatchJob\.create\(\): " + re.escape(said)):
        job_for(tmp_path, items, anthropic_backend(api), **{setting: value})
    assert api.calls == [] and sorted(path.name for path in tmp_path.iterdir()) == ["items.jsonl"]
    if setting != "settings":
        with job_for(tmp_path, items, anthropic_backend(api)) as job:
            job.cancel()
        with pytest.raises(error, match=r"^BatchJob\.open\(\): " + re.escape(said)):
            BatchJob.open(tmp_path / "job.db", contract=Decision,
                          backend=anthropic_backend(api), **{setting: value})  # fmt: skip
        assert api.calls == []


@pytest.mark.parametrize(
    ("setting", "value", "error", "said"),
    [
        ("max_requests", 0, ValueError, "max_requests must be at least 1, not 0"),
        ("max_requests", -1, ValueError, "max_requests must be at least 1, not -1"),
        ("max_requests", "x", TypeError, "max_requests must be a whole number, not 'x'"),
        ("max_requests", 2.5, TypeError, "max_requests must be a whole number, not 2.5"),
        ("max_bytes", 0, ValueError, "max_bytes must be at least 1, not 0"),
        ("max_bytes", None, TypeError, "max_bytes must be a whole number, not None"),
    ],
)
def test_a_hosted_backend_s_batch_limit_is_checked_where_it_is_given(
    setting: str, value: object, error: type[Exception], said: str
) -> None:
    # On main `max_requests="x"` was a bare TypeError from the job's first submission, and 0,
    # -1 or 2.5 were taken (0 and -1 as one request a batch).
    api = AnthropicBatchAPI()
    with pytest.raises(error, match=r"^AnthropicBatches\(\): " + re.escape(said)):
        anthropic_backend(api, **{setting: value})  # type: ignore[arg-type]
    with pytest.raises(error, match=r"^OpenAIBatches\(\): " + re.escape(said)):
        openai_backend(OpenAIBatchAPI(), **{setting: value})  # type: ignore[arg-type]
    assert api.calls == []
    assert anthropic_backend(api, **{setting: 7}).max_requests in (7, 100_000)


# Fields the installed client's method does not take (`context_management` is newer than some
# `anthropic` releases; `my_field` no OpenAI method knows), given by the job's line. A live call
# hands them to the client's `extra_body`, which merges them into the body it sends; a batch
# line carries the body itself, and on main carried them under a literal `"extra_body"` key,
# a field no API has.
_UNKNOWN_FIELDS = {"anthropic": {"context_management": {"edits": []}}, "responses": {"my_field": 1},
                   "chat": {"my_field": 1}}  # fmt: skip


@pytest.mark.parametrize("route", list(_UNKNOWN_FIELDS))
def test_a_hosted_line_carries_the_body_a_live_call_sends_extra_body_merged_in(
    tmp_path: Path, route: str
) -> None:
    extra = _UNKNOWN_FIELDS[route]
    path = tmp_path / "items.jsonl"
    line = {"id": "a", "prompt": "Invoice 1: approve?", "options": {"extra_body": extra}}
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    script = Script()
    wire = Wire(anthropic_reply(text=VALID) if route == "anthropic" else (
        chat_reply(text=VALID) if route == "chat" else responses_reply(text=VALID)))  # fmt: skip
    if route == "anthropic":
        backend: Any = anthropic_backend(AnthropicBatchAPI(script))
        live: Any = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    else:
        backend = openai_backend(OpenAIBatchAPI(script, chat=route == "chat"), chat=route == "chat")
        made = OpenAIChatProvider if route == "chat" else OpenAIResponsesProvider
        live = made(openai_client(wire), model="gpt-5.1-mini")
    with job_for(tmp_path, path, backend) as job:
        assert job.run().ok == 1
    [[sent]] = script.bodies.values()
    StructuredClient(live).generate(
        Decision, prompt="Invoice 1: approve?", extra_body=extra, max_tokens=4096
    )
    [request] = wire.requests
    assert sent == json.loads(request.content)  # the body a live call sends, field for field
    assert "extra_body" not in sent and sent[next(iter(extra))] == extra[next(iter(extra))]


def test_a_line_whose_options_hold_a_lone_surrogate_fails_alone_as_the_caller_s(
    tmp_path: Path,
) -> None:
    # On main its call failed in the client's encoder: the output line blamed the reply
    # ("ProviderError: llamacpp: unusable reply: UnicodeEncodeError"), an attempt counted.
    path = tmp_path / "items.jsonl"
    write_items(path, 2)
    with path.open("a", encoding="utf-8") as file:
        line = '{"id": "lone", "prompt": "Invoice 7: approve?", "options": {"stop": ["\\ud800"]}}'
        file.write(line + "\n")
    counter: Counter[str] = Counter()
    backend = LocalBackend(local_clients(counter, {}))
    with job_for(tmp_path, path, backend, settings=JobSettings(retries=1)) as job:
        summary = job.run()
    records = by_id(read_output(tmp_path / "out.jsonl"))
    error = records["lone"]["error"]
    assert summary.ok == 2 and summary.failed == 1
    assert error["type"] == "ValueError" and records["lone"]["attempts"] == 0
    assert "stop must be text a request can carry (no lone surrogate)" in error["message"]
    assert counter["a"] + counter["b"] == 2  # the two others alone were sent
