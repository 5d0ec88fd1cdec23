"""`BatchJob`: one contract over a whole input file, through a batch backend, resumable.

    job = BatchJob.create("job.db", contract=Decision, backend=AnthropicBatches(provider),
                          input="items.jsonl", out="results.jsonl")
    summary = job.run()  # submit, poll, collect, follow up: until every item is done
    # after a crash, a redeploy, a closed laptop:
    summary = BatchJob.open("job.db", contract=Decision, backend=...).run()

The job's whole state is in its SQLite file (`sdk.batch._state`), and every step is one
transaction, so `run` may be interrupted anywhere and run again:

1. index: the input is read as a stream; each item's id and byte offset are stored (resumed
   from the last indexed line);
2. submit: pending items are grouped into submissions within the backend's request and byte
   limits; a submission is recorded *before* the backend is asked, so that one created but not
   recorded (a crash, a lost answer) is looked up by its metadata and adopted, never sent twice
   blindly;
3. poll each open batch with backoff until it ends;
4. collect: results are streamed back, routed by `custom_id` to the items still waiting for
   that submission, parsed by the live calls' parser and retry machine
   (`sdk.batch._outcome`), and committed a chunk at a time with their output lines
   (`sdk.batch._output`); items to retry go back to pending with their feedback and are sent in
   a follow-up submission.

An item's line is written exactly once: lines are appended and committed in the same
transaction as the items they are for, and a resumed run cuts the output back to what was
committed.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sdk.batch._errors import BatchError, BatchInputError, JobMismatch
from sdk.batch._hosted import HostedBackend, RemoteResult
from sdk.batch._items import InputItem, InputReader, file_identity, read_index
from sdk.batch._local import LocalBackend, Outcome, run_local
from sdk.batch._outcome import (
    Decision,
    JobSettings,
    decide_failure,
    decide_live,
    decide_reply,
    request_for,
)
from sdk.batch._output import OutputLog
from sdk.batch._state import ItemRow, JobState, SubmissionRow
from sdk.batch._summary import JobProgress, JobSummary, summarize
from sdk.contract import Contract
from sdk.providers._errors import provider_error
from sdk.schema.canonical import schema_info

__all__ = ["BatchJob"]

Backend = HostedBackend | LocalBackend

_INDEX_CHUNK = 5000
_ENVELOPE = 64
"""Bytes a batch's envelope may add around its requests (`{"requests":[...]}`, separators)."""
_PAGE = 1000


class BatchJob:
    """A contract over an input file through a backend; see the module docstring.

    `poll_interval` and `poll_max`: seconds between status checks, growing by half each
    unchanged round up to the maximum. `collect_chunk`: results committed per transaction.
    `sleep`: how polling waits (tests pass a recorder).
    """

    def __init__(
        self,
        state: JobState,
        *,
        contract: type[Contract],
        backend: Backend,
        poll_interval: float = 10.0,
        poll_max: float = 300.0,
        collect_chunk: int = 1000,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.state = state
        self.contract = contract
        self.backend = backend
        self.job_id: str = state.get("job")
        self.input = Path(state.get("input"))
        self.out = Path(state.get("out"))
        self.settings = JobSettings(**state.get("settings"))
        self.poll_interval = poll_interval
        self.poll_max = poll_max
        self.collect_chunk = collect_chunk
        self._sleep = sleep
        self._progress: Callable[[JobProgress], None] | None = None
        self._reported = 0.0
        self._progress_every = 0.2
        self._check(contract, backend)

    # --- opening ---

    @classmethod
    def create(
        cls,
        state: str | Path,
        *,
        contract: type[Contract],
        backend: Backend,
        input: str | Path,
        out: str | Path,
        settings: JobSettings | None = None,
        **options: Any,
    ) -> BatchJob:
        """A new job (or, if `state` already holds this same job, that job to resume)."""
        store = JobState(state)
        try:
            input_path = Path(input).resolve()
            out_path = Path(out).resolve()
            if not input_path.is_file():
                raise BatchInputError(f"{input}: no such input file")
            if store.get("job") is None:
                if out_path.exists() and out_path.stat().st_size > 0:
                    raise BatchError(
                        f"{out} already holds data: give a new output file (a job appends "
                        "to its own output only)"
                    )
                info = schema_info(contract)
                with store.transaction() as db:
                    store.put("job", secrets.token_hex(6), db)
                    store.put("contract", f"{contract.__module__}:{contract.__qualname__}", db)
                    store.put("schema", [info.name, info.version, info.fingerprint], db)
                    store.put("backend", backend.name, db)
                    store.put("provider", backend.provider.name, db)
                    store.put("model", backend.provider.model, db)
                    store.put("input", str(input_path), db)
                    store.put("input_identity", file_identity(input_path), db)
                    store.put("out", str(out_path), db)
                    store.put("out_length", 0, db)
                    store.put("settings", asdict(settings or JobSettings()), db)
                    store.put("created", time.time(), db)
            elif Path(store.get("input")) != input_path or Path(store.get("out")) != out_path:
                raise JobMismatch(
                    f"{state} is the job over {store.get('input')} -> {store.get('out')}; "
                    "resume it, or give another state file"
                )
            return cls(store, contract=contract, backend=backend, **options)
        except BaseException:
            store.close()
            raise

    @classmethod
    def open(
        cls, state: str | Path, *, contract: type[Contract], backend: Backend, **options: Any
    ) -> BatchJob:
        """The job in `state`, to resume, see or cancel."""
        if not Path(state).is_file():
            raise BatchError(f"{state}: no such job state file")
        store = JobState(state)
        if store.get("job") is None:
            store.close()
            raise BatchError(f"{state} holds no job")
        try:
            return cls(store, contract=contract, backend=backend, **options)
        except BaseException:
            store.close()
            raise

    def _check(self, contract: type[Contract], backend: Backend) -> None:
        info = schema_info(contract)
        name, version, fingerprint = self.state.get("schema")
        if info.fingerprint != fingerprint:
            raise JobMismatch(
                f"the job ran {name} v{version} ({fingerprint[:12]}), not {info.name} "
                f"v{info.version} ({info.fingerprint[:12]}): resume it with the same contract"
            )
        if backend.name != self.state.get("backend") or (
            backend.provider.name != self.state.get("provider")
        ):
            raise JobMismatch(
                f"the job runs on {self.state.get('backend')} ({self.state.get('provider')}), "
                f"not {backend.name} ({backend.provider.name})"
            )

    def close(self) -> None:
        """Close the state file."""
        self.state.close()

    def __enter__(self) -> BatchJob:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- the public steps ---

    def run(
        self,
        progress: Callable[[JobProgress], None] | None = None,
        *,
        progress_every: float = 0.2,
    ) -> JobSummary:
        """Run (or resume) the job until every item is done; the summary. `progress` is called
        with a `JobProgress` as items finish, at most every `progress_every` seconds."""
        started = time.monotonic()
        self._progress = progress
        self._progress_every = progress_every
        self._reported = 0.0
        self._index()
        reader = InputReader(self.input, self.contract)
        out = OutputLog(self.out, int(self.state.get("out_length")))
        try:
            self._reader, self._output = reader, out
            self._report()
            if isinstance(self.backend, LocalBackend):
                self._run_local(self.backend)
            else:
                self._run_hosted(self.backend)
            self._report(force=True)
        finally:
            reader.close()
            out.close()
        return self.summary(seconds=time.monotonic() - started)

    def summary(self, seconds: float | None = None) -> JobSummary:
        """The job's counts now (from the state file alone)."""
        return summarize(self.state, seconds)

    def cancel(self) -> JobSummary:
        """Cancel the job: open backend batches are cancelled, nothing more is sent. Run the
        job again (`resume`) to collect what the batches finished and close the rest."""
        self.state.put("cancelled", True)
        if isinstance(self.backend, HostedBackend):
            for batch in self.state.batches("open"):
                status = self.backend.cancel(batch.remote_id)
                self.state.set_batch(batch.remote_id, status=status.status)
        return self.summary()

    # --- indexing ---

    def _index(self) -> None:
        if self.state.get("indexed"):
            if file_identity(self.input) != self.state.get("input_identity"):
                raise JobMismatch(f"{self.input} changed since the job indexed it")
            return
        # Resumed from the end of the last indexed line (line numbers in errors then count
        # from there: the byte offset is what is exact).
        start = self.state.last_indexed_end()
        batch: list[tuple[str, int, int]] = []
        for entry in read_index(self.input, self.contract, start):
            batch.append((entry.id, entry.offset, entry.length))
            if len(batch) >= _INDEX_CHUNK:
                self._add(batch)
                batch = []
        self._add(batch)
        with self.state.transaction() as db:
            self.state.put("indexed", True, db)
            self.state.put("input_identity", file_identity(self.input), db)

    def _add(self, batch: list[tuple[str, int, int]]) -> None:
        if not batch:
            return
        try:
            with self.state.transaction() as db:
                self.state.add_items(batch, db)
        except sqlite3.IntegrityError:
            ids = [item_id for item_id, _, _ in batch]
            duplicate = next((i for i in ids if ids.count(i) > 1 or self._known_id(i)), ids[0])
            raise BatchInputError(
                f"{self.input}: item id {duplicate!r} appears more than once"
            ) from None

    def _known_id(self, item_id: str) -> bool:
        return bool(self.state.items_with_id(item_id))

    # --- committing outcomes ---

    def _commit(self, decisions: Sequence[Decision]) -> None:
        """Append the finished items' lines, then commit them and every state change at once."""
        if not decisions:
            return
        length = self._output.append([d.line for d in decisions if d.line is not None])
        with self.state.transaction() as db:
            self.state.update_items([d.update for d in decisions], db)
            self.state.put("out_length", length, db)
        self._report()

    def _report(self, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if not force and now - self._reported < self._progress_every:
            return  # counting is a scan of the items table: a few times a second is enough
        self._reported = now
        counts = self.state.counts()
        running = self.backend.in_flight if isinstance(self.backend, LocalBackend) else 0
        self._progress(
            JobProgress(
                total=self.state.item_count(),
                ok=counts.get("done:ok", 0),
                failed=counts.get("done", 0) - counts.get("done:ok", 0),
                in_flight=counts.get("submitted", 0) + running,
            )
        )

    def _cancel_pending(self) -> None:
        """A cancelled job: every item not yet sent is done, as cancelled."""
        error = provider_error(self.backend.provider.name, "the job was cancelled")
        while True:
            rows = self.state.pending(_PAGE)
            if not rows:
                return
            self._commit(
                [
                    decide_failure(
                        self.contract,
                        self.backend.provider,
                        self.settings,
                        row,
                        error,
                        None,
                        cancelled=True,
                    )
                    for row in rows
                ]
            )

    # --- hosted ---

    def _run_hosted(self, backend: HostedBackend) -> None:
        self._recover(backend)
        delay = self.poll_interval
        while True:
            if self.state.get("cancelled"):
                self._cancel_pending()
            else:
                self._submit_pending(backend)
            open_batches = self.state.batches("open")
            ended_before = self.state.batches("ended")
            if not open_batches and not ended_before:
                if not self.state.pending(1):
                    return
                continue
            changed = False
            for batch in open_batches:
                status = backend.poll(batch.remote_id)
                self.state.set_batch(
                    batch.remote_id,
                    status=status.status,
                    state="ended" if status.ended else None,
                )
                changed = changed or status.ended
            for batch in self.state.batches("ended"):
                self._collect(backend, batch.remote_id, batch.submission)
            if self.state.batches("open") and not self.state.pending(1):
                self._sleep(delay)
                delay = self.poll_interval if changed else min(delay * 1.5, self.poll_max)

    def _recover(self, backend: HostedBackend) -> None:
        """Submissions recorded but without a batch: find their batch, or send them now; and
        submissions whose batches were all collected but not closed (a crash in between)."""
        waiting = {b.submission for b in self.state.batches() if b.state in ("open", "ended")}
        for submission in self.state.submissions("open"):
            if submission.key not in waiting:
                self._close(submission.key, None, bool(self.state.get("cancelled")))
        known = self.state.known_batch_ids()
        for submission in self.state.submissions("submitting"):
            found = backend.find(self.job_id, submission, known)
            if found:
                with self.state.transaction() as db:
                    for status in found:
                        self.state.add_batch(status.remote_id, submission.key, status.status, db)
                    self.state.set_submission(submission.key, state="open", db=db)
                known.update(status.remote_id for status in found)
                continue
            if self.state.get("cancelled"):  # never created, and now not to be
                self._close(submission.key, None, True)
                continue
            rows = self.state.in_submission(submission.key)
            entries = [self._entry(submission.key, row)[0] for row in rows]
            self._send(backend, submission, entries)

    def _entry(self, key: str, row: ItemRow) -> tuple[bytes, InputItem]:
        item = self._reader.read(row.offset, row.length)
        request = request_for(self.contract, item, row, self.settings)
        exchange = self.backend.provider.codec.build(request, stream=False)
        assert isinstance(self.backend, HostedBackend)
        return self.backend.entry(f"{key}-{row.seq}", exchange), item

    def _submit_pending(self, backend: HostedBackend) -> None:
        """Every pending item, in submissions within the backend's limits."""
        key = _key()
        seqs: list[int] = []
        entries: list[bytes] = []
        size = _ENVELOPE
        after = -1
        too_big: list[Decision] = []
        while True:
            rows = self.state.pending(_PAGE, after)
            if not rows:
                break
            for row in rows:
                after = row.seq
                entry, _ = self._entry(key, row)
                cost = len(entry) + 1
                if cost + _ENVELOPE > backend.max_bytes:
                    too_big.append(self._too_big(row, cost, backend))
                    continue
                if seqs and (len(seqs) >= backend.max_requests or size + cost > backend.max_bytes):
                    self._start(backend, key, seqs, entries, size)
                    key, seqs, entries, size = _key(), [], [], _ENVELOPE
                    entry, _ = self._entry(key, row)
                    cost = len(entry) + 1
                seqs.append(row.seq)
                entries.append(entry)
                size += cost
        if seqs:
            self._start(backend, key, seqs, entries, size)
        self._commit(too_big)

    def _too_big(self, row: ItemRow, size: int, backend: HostedBackend) -> Decision:
        error = provider_error(
            backend.provider.name,
            f"the request is {size:,} bytes, over the batch limit of {backend.max_bytes:,}",
        )
        error.transient = False
        return decide_failure(self.contract, backend.provider, self.settings, row, error, None)

    def _start(
        self,
        backend: HostedBackend,
        key: str,
        seqs: list[int],
        entries: list[bytes],
        size: int,
    ) -> None:
        with self.state.transaction() as db:
            self.state.add_submission(key, seqs, size, db)
        submission = self.state.submission(key)
        self._send(backend, submission, entries)
        self._report()

    def _send(
        self, backend: HostedBackend, submission: SubmissionRow, entries: list[bytes]
    ) -> None:
        """Create the submission's batch and record it (see the module docstring for why the
        submission is recorded first and the batch after)."""
        prepared = submission.file_id or backend.find_prepared(self.job_id, submission.key)
        if prepared is None:
            prepared = backend.prepare(self.job_id, submission.key, entries)
            if prepared is not None:
                self.state.set_submission(submission.key, file_id=prepared)
        status = backend.create(self.job_id, submission.key, prepared, entries)
        self._after_create(submission.key, status.remote_id)
        with self.state.transaction() as db:
            self.state.add_batch(status.remote_id, submission.key, status.status, db)
            self.state.set_submission(submission.key, state="open", db=db)

    def _after_create(self, key: str, remote_id: str) -> None:
        """A hook between a batch's creation and its record (tests inject a crash here)."""

    def _collect(self, backend: HostedBackend, remote_id: str, submission: str) -> None:
        """Stream a batch's results, commit them a chunk at a time, then close the submission
        once all its batches are collected."""
        cancelled = bool(self.state.get("cancelled"))
        chunk: list[RemoteResult] = []
        for result in backend.results(remote_id):
            chunk.append(result)
            if len(chunk) >= self.collect_chunk:
                self._apply(chunk, remote_id, cancelled)
                chunk = []
        self._apply(chunk, remote_id, cancelled)
        others = [
            batch
            for batch in self.state.batches()
            if batch.submission == submission
            and batch.remote_id != remote_id
            and batch.state in ("open", "ended")
        ]
        if not others:
            self._close(submission, remote_id, cancelled)
        self.state.set_batch(remote_id, state="collected")

    def _close(self, submission: str, remote_id: str | None, cancelled: bool) -> None:
        """A submission whose batches are all collected: its items that no batch answered for
        were never run (resubmitted while allowed). Run again after a crash, it finds none."""
        status = next((b.status for b in self.state.batches() if b.remote_id == remote_id), None)
        where = f"batch {remote_id} ({status})" if remote_id else "any batch"
        missing = provider_error(self.backend.provider.name, f"no result for the item in {where}")
        # A batch the provider refused whole (OpenAI `failed`: its input did not validate)
        # would be refused again; any other missing result is resent.
        missing.transient = not (status or "").startswith("failed")
        self._commit(
            [
                decide_failure(
                    self.contract,
                    self.backend.provider,
                    self.settings,
                    row,
                    missing,
                    remote_id,
                    cancelled=cancelled,
                )
                for row in self.state.in_submission(submission)
            ]
        )
        self.state.set_submission(submission, state="closed")

    def _apply(self, chunk: list[RemoteResult], remote_id: str, cancelled: bool) -> None:
        routed: dict[int, tuple[str, RemoteResult]] = {}
        for result in chunk:
            key, _, number = result.custom_id.rpartition("-")
            if key and number.isdigit():
                routed[int(number)] = (key, result)
        rows = self.state.items(sorted(routed))
        decisions: list[Decision] = []
        for seq, (key, result) in routed.items():
            row = rows.get(seq)
            if row is None or row.state != "submitted" or row.submission != key:
                continue  # another submission's, already collected, or not ours at all
            if result.completion is not None:
                item = self._reader.read(row.offset, row.length)
                decisions.append(
                    decide_reply(
                        self.contract,
                        self.backend.provider,
                        self.settings,
                        item,
                        row,
                        result.completion,
                        remote_id,
                    )
                )
            else:
                assert result.error is not None
                decisions.append(
                    decide_failure(
                        self.contract,
                        self.backend.provider,
                        self.settings,
                        row,
                        result.error,
                        remote_id,
                        cancelled=cancelled,
                    )
                )
        self._commit(decisions)

    # --- local ---

    def _run_local(self, backend: LocalBackend) -> None:
        if self.state.get("cancelled"):
            self._cancel_pending()
            return

        def pages() -> Iterator[list[ItemRow]]:
            after = -1
            while True:
                rows = self.state.pending(_PAGE, after)
                if not rows:
                    return
                after = rows[-1].seq
                yield rows

        def read(row: ItemRow) -> InputItem:
            return self._reader.read(row.offset, row.length)

        def commit(outcomes: list[Outcome]) -> None:
            provider = self.backend.provider
            self._commit(
                [decide_live(self.contract, provider, row, outcome) for row, outcome in outcomes]
            )

        asyncio.run(
            run_local(
                backend,
                self.contract,
                pages(),
                read,
                commit,
                stop=lambda: bool(self.state.get("cancelled")),
                max_tokens=self.settings.max_tokens,
            )
        )
        if self.state.get("cancelled"):  # cancelled from elsewhere while running
            self._cancel_pending()


def _key() -> str:
    """A submission's key: in every `custom_id` of it, so its results prove whose they are."""
    return "s" + secrets.token_hex(6)
