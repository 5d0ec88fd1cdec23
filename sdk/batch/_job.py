"""`BatchJob`: one contract over a whole input file, through a batch backend, resumable.

    job = BatchJob.create("job.db", contract=Decision, backend=AnthropicBatches(provider),
                          input="items.jsonl", out="results.jsonl")
    summary = job.run()  # submit, poll, collect, follow up: until every item is done
    # after a crash, a redeploy, a closed laptop:
    summary = BatchJob.open("job.db", contract=Decision, backend=...).run()

The job's whole state is in its SQLite file (`sdk.batch._state`), and every step is one
transaction, so `run` may be interrupted anywhere and run again. One process runs a job at a
time: `run` holds the job's lock and lease for its whole length (`sdk.batch._lock`), and every
commit of output checks the lease first, so output is appended by the lock's holder only.

1. index: the input is read as a stream; each item's id, byte offset and a hash of its line are
   stored, a chunk at a time, resumed only over an unchanged prefix (`sdk.batch._index`);
2. submit: pending items are grouped into submissions within the backend's request and byte
   limits; a submission is recorded *before* the backend is asked, so that one created but not
   recorded (a crash, a lost answer) is looked up and adopted once proven the submission's,
   never sent twice blindly;
3. poll each open batch with backoff until it ends;
4. collect: results are streamed back, routed by `custom_id` to the items still waiting for
   that submission, parsed by the live calls' parser and retry machine
   (`sdk.batch._outcome`), and committed a chunk at a time with their output lines
   (`sdk.batch._output`); items to retry go back to pending with their feedback and are sent in
   a follow-up submission.

Every line of the input is read back through its identity check (`InputReader.read`): a line
that is not the one indexed for its item stops the job (`InputChanged`, naming the first changed
line), so no answer is computed from, or written under, another item's line. Every failure of
one item (a request that cannot be built, options the call rejects) fails that item alone.

An item's line is written exactly once: lines are appended and committed in the same
transaction as the items they are for, and a resumed run cuts the output back to what was
committed. `cancel` (from any process) is noticed by a running job within about a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated
from typing import Any
from typing import TypedDict
from typing import Unpack

from sdk._values.declared import Between
from sdk._values.declared import OptionalCount
from sdk._values.declared import Positive
from sdk._values.declared import check_given
from sdk._values.seconds import LONGEST_INTERVAL
from sdk.batch._errors import BatchError
from sdk.batch._errors import BatchInputError
from sdk.batch._errors import InputChanged
from sdk.batch._errors import JobMismatch
from sdk.batch._errors import JobRunning
from sdk.batch._errors import StateFileError
from sdk.batch._hosted import HostedBackend
from sdk.batch._hosted import RemoteResult
from sdk.batch._index import index_input
from sdk.batch._index import input_changed
from sdk.batch._index import input_stat
from sdk.batch._items import InputItem
from sdk.batch._items import InputReader
from sdk.batch._local import LocalBackend
from sdk.batch._local import LocalRun
from sdk.batch._local import Outcome
from sdk.batch._lock import RunnerLock
from sdk.batch._lock import refuse_unusable_lock
from sdk.batch._lock import running_holder
from sdk.batch._outcome import Decision
from sdk.batch._outcome import ItemJob
from sdk.batch._outcome import JobSettings
from sdk.batch._outcome import decide_error
from sdk.batch._outcome import decide_failure
from sdk.batch._outcome import decide_live
from sdk.batch._outcome import decide_reply
from sdk.batch._outcome import prompted
from sdk.batch._outcome import request_for
from sdk.batch._output import NOT_A_FILE
from sdk.batch._output import OutputHeld
from sdk.batch._output import OutputLog
from sdk.batch._output import finish_swap
from sdk.batch._output import foreign_tail
from sdk.batch._output import output_held
from sdk.batch._output import refuse_dangling_link
from sdk.batch._output import without_lines
from sdk.batch._ray import RayBackend
from sdk.batch._ray import RayRun
from sdk.batch._state import BatchRow
from sdk.batch._state import ItemRow
from sdk.batch._state import JobState
from sdk.batch._state import SubmissionRow
from sdk.batch._state import state_errors
from sdk.batch._summary import JobProgress
from sdk.batch._summary import JobSummary
from sdk.batch._summary import summarize
from sdk.contract import Contract
from sdk.errors import ProviderError
from sdk.prompt import Prompt
from sdk.providers._drivers import built
from sdk.providers._errors import provider_error
from sdk.schema.canonical import schema_info

__all__ = ["BatchJob", "HostedPolling", "JobOptions"]

Backend = HostedBackend | LocalBackend

_ENVELOPE = 64
"""Bytes a batch's envelope may add around its requests (`{"requests":[...]}`, separators)."""
_PAGE = 1000
_TICK = 1.0
"""Seconds between a waiting run's looks at the state file (a cancel, its lease)."""

_ASKED = ("schema", "prompt", "backend", "provider", "model", "max_tokens", "enum_case")
"""Settings that change what is asked or how answers are read: refused on an existing job
unless `update=True`."""


class HostedPolling(TypedDict, total=False):
    """How a job waits on a hosted batch API (keywords of `BatchJob.create`, `.open` and the
    constructor; a local backend refuses them: it has nothing to poll or collect)."""

    # (`Annotated` outermost: the bounds of a union's member are not read)
    poll_interval: Annotated[float | None, Positive(), Between(0, LONGEST_INTERVAL)]
    poll_max: Annotated[float | None, Positive(), Between(0, LONGEST_INTERVAL)]
    collect_chunk: OptionalCount
    sleep: Callable[[float], None] | None


_EXPECTS = {"sleep": "a function of the seconds to wait, or None"}


class JobOptions(HostedPolling, total=False):
    """What else a job is made with: `BatchJob.create`'s optional keywords."""

    prompt: type[Prompt] | None
    """A template (`sdk.Prompt`) the input's lines give `variables` for."""
    settings: JobSettings | None
    """Retries, resubmits, `max_tokens`, the enum policy (default: a local backend's clients')."""
    update: bool
    """Take changed settings of what is asked on an existing job (default False)."""
    extra_meta: Mapping[str, Any] | None
    """Values kept in the state file with the job."""


class BatchJob:
    """A contract over an input file through a backend; see the module docstring.

    Hosted backends only (a local backend refuses them: it has nothing to poll or collect):
    `poll_interval` and `poll_max`, seconds between status checks, growing by half each
    unchanged round up to the maximum (default 10 and 300); `collect_chunk`, results committed
    per transaction (default 1000); `sleep`, how polling waits (tests pass a recorder; by
    default in steps of a second that notice a cancel).
    """

    def __init__(
        self,
        state: JobState,
        *,
        contract: type[Contract],
        backend: Backend,
        prompt: type[Prompt] | None = None,
        **polling: Unpack[HostedPolling],
    ) -> None:
        check_given(polling, HostedPolling, "BatchJob()", _EXPECTS)
        _refuse_hosted_options(backend, polling)
        self.state = state
        self.contract = contract
        self.prompt = prompt
        self.backend = backend
        with state_errors(state.path):
            self.job_id: str = state.get("job")
            self.input = Path(state.get("input"))
            self.out = Path(state.get("out"))
            self.settings = _settings(state)
        poll_interval, poll_max = polling.get("poll_interval"), polling.get("poll_max")
        collect_chunk = polling.get("collect_chunk")
        self.poll_interval = poll_interval if poll_interval is not None else 10.0
        self.poll_max = poll_max if poll_max is not None else 300.0
        self.collect_chunk = collect_chunk if collect_chunk is not None else 1000
        self._sleep = polling.get("sleep")
        self._progress: Callable[[JobProgress], None] | None = None
        self._reported = 0.0
        self._progress_every = 0.2
        self._lock: RunnerLock | None = None
        self._done: Counter[str] = Counter()
        self._resumed_from = 0
        self._total = 0
        self._stopping = False
        self._input_seen: tuple[int, ...] = ()
        self._state_seen: tuple[int, int] | None = None
        self._output: OutputLog | None = None
        self._check(contract, backend)
        self._check_prompt(prompt)

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
        **options: Unpack[JobOptions],
    ) -> BatchJob:
        """A new job (or, if `state` already holds the job over this input and output, that job
        to resume). On an existing job, settings that change what is asked (contract, backend,
        provider, model, `max_tokens`, `enum_case`) are refused (`JobMismatch`) unless `update`;
        other settings (`retries`, `resubmits`) are taken; either change is recorded in the
        state file (`meta.changes`). Without `settings`, a local backend's jobs take their
        clients' `retries` and `enum_case` (given settings must match them: `BatchError`).
        `extra_meta`: values kept in the state file with the job (the CLI keeps how to rebuild
        its backend there). `prompt`: a template (`sdk.Prompt`) the input's lines give
        `variables` for; every output line names it (`"prompt"`: name, version, fingerprint).
        Every keyword after `out` is optional (`JobOptions`)."""
        check_given(options, JobOptions, "BatchJob.create()", _EXPECTS)
        prompt, settings = options.pop("prompt", None), options.pop("settings", None)
        update, extra_meta = options.pop("update", False), options.pop("extra_meta", None)
        polling = options  # what is left: how a hosted job polls
        refuse_dangling_link(Path(out))  # (before `resolve` follows it)
        refuse_dangling_link(Path(state))
        if Path(out).exists() and not Path(out).is_file():  # (`/dev/stdout` resolves to no file)
            raise BatchError(f"{out}: {NOT_A_FILE}")
        input_path, out_path = Path(input).resolve(), Path(out).resolve()
        if not input_path.is_file():
            raise _no_input(input)
        settings = settings if settings is not None else _clients_settings(backend)
        if isinstance(backend, LocalBackend):  # before anything is written
            _refuse_hosted_options(backend, polling)
            _check_local(backend, settings)
        wanted = {
            **_described(contract, backend, settings),
            **_prompt_described(prompt),
            **(extra_meta or {}),
            "input": str(input_path),
            "out": str(out_path),
        }
        refuse_unusable_lock(Path(state))  # (before its state file is made)
        store = _new_state(state, wanted, out_path)
        if store is None:  # the job is there already (or another process made it first)
            store = _same_job_state(state, wanted, update)
        return cls._opened(store, contract, backend, {**polling, "prompt": prompt})

    @classmethod
    def open(
        cls,
        state: str | Path,
        *,
        contract: type[Contract],
        backend: Backend,
        prompt: type[Prompt] | None = None,
        **polling: Unpack[HostedPolling],
    ) -> BatchJob:
        """The job in `state`, to resume, see or cancel (with its prompt template, if it has
        one)."""
        check_given(polling, HostedPolling, "BatchJob.open()", _EXPECTS)
        return cls._opened(JobState(state), contract, backend, {**polling, "prompt": prompt})

    @classmethod
    def _opened(
        cls,
        store: JobState,
        contract: type[Contract],
        backend: Backend,
        options: Mapping[str, Any],
    ) -> BatchJob:
        try:
            return cls(store, contract=contract, backend=backend, **options)
        except BaseException:
            store.close()
            raise

    def _check(self, contract: type[Contract], backend: Backend) -> None:
        info = schema_info(contract)
        with state_errors(self.state.path):
            name, version, fingerprint = self.state.schema()
            stored = {key: self.state.get(key) for key in ("backend", "provider", "model")}
        if info.fingerprint != fingerprint:
            raise JobMismatch(
                f"the job ran {name} v{version} ({fingerprint[:12]}), not {info.name} "
                f"v{info.version} ({info.fingerprint[:12]}): resume it with the same contract"
            )
        given = {
            "backend": backend.name,
            "provider": backend.provider.name,
            "model": backend.provider.model,
        }
        if given != stored:
            raise JobMismatch(
                f"the job runs on {stored['backend']} ({stored['provider']}, model "
                f"{stored['model']}), not {given['backend']} ({given['provider']}, model "
                f"{given['model']}): resume it with the same backend"
            )
        if isinstance(backend, LocalBackend):
            _check_local(backend, self.settings)

    def _check_prompt(self, prompt: type[Prompt] | None) -> None:
        with state_errors(self.state.path):
            stored = self.state.get("prompt")
        given = _prompt_described(prompt)["prompt"]
        if (stored and stored[2]) != (given and given[2]):
            ran = f"{stored[0]} v{stored[1]} ({stored[2][:12]})" if stored else "no prompt"
            now = f"{given[0]} v{given[1]} ({given[2][:12]})" if given else "none"
            raise JobMismatch(
                f"the job ran with {ran}, not {now}: resume it with the same prompt template"
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
        with a `JobProgress` as items finish, at most every `progress_every` seconds.
        `JobRunning` if another process runs the job now; `BatchInputError` if the job needs its
        input (to index it, or for an item not done) and it is not there (a finished job does
        not read it)."""
        started = time.monotonic()
        self._progress, self._progress_every, self._reported = progress, progress_every, 0.0
        with state_errors(self.state.path), RunnerLock(self.state) as lock:
            self._lock, self._stopping = lock, False
            self._state_seen = _device_and_inode(self.state.path)
            try:
                if lock.stopped_holder() is not None and output_held(self.out):
                    # (before anything is indexed or settled: the job is given back unchanged)
                    stopped = self._held_by_stopped_runner(lock)
                    if stopped is not None:  # (else it ended meanwhile: the run goes on)
                        raise stopped
                if not self.input.is_file():
                    if self._needs_input():
                        raise _no_input(self.input)
                    # Every item done: the input is not read (a finished job whose input was
                    # moved away resumes to "nothing left to run", as with its input there).
                    self._settle_output()
                    return self.summary(seconds=time.monotonic() - started, ran=0)
                # Looked at before indexing: a change made while the input is indexed (after
                # its identity is taken) is then found at the first tick, never taken as seen.
                self._input_seen = input_stat(self.input)
                index_input(self.state, self.input, self.contract, self._indexing, self.prompt)
                self._start_counts()
                self._reader = InputReader(self.input, self.contract, self.prompt)
                self._settle_output()
                committed = int(self.state.get("out_length"))
                claimed = committed > 0 or bool(self.state.get("out_claimed"))
                try:
                    self._output = OutputLog(
                        self.out, committed, claimed=claimed, own=self._own_line
                    )
                except OutputHeld as error:
                    raise self._held_by_stopped_runner(lock) or error from None
                try:
                    if not claimed:  # before its first line: a tail past 0 is then its own
                        self.state.put("out_claimed", True)
                    self._report(force=True)
                    if isinstance(self.backend, LocalBackend):
                        self._run_local(self.backend)
                    else:
                        self._run_hosted(self.backend)
                    self._report(force=True)
                finally:
                    self._reader.close()
                    self._output.close()
                    self._output = None
            finally:
                self._lock = None
        ran = sum(self._done.values()) - self._resumed_from
        return self.summary(seconds=time.monotonic() - started, ran=ran)

    def _held_by_stopped_runner(self, lock: RunnerLock) -> JobRunning | None:
        """The output held by the job's own previous runner, alive on this host but not renewing
        its lease (stopped: SIGSTOP, a debugger; its lock file deleted, or this run would not
        have got here): the lease is given back to it, so it goes on if it continues (probe13b
        D7: the output was blamed on "another job", and the lease this run then dropped stopped
        the first runner too). `None` when no such runner was replaced (another job's output)."""
        holder = lock.stopped_holder()
        if holder is None:
            return None
        lock.give_back()
        idle = time.time() - holder.renewed
        return JobRunning(
            f"the job in {self.state.path} is still held by its runner, {holder.describe()}, "
            f"which has not renewed its lease for {idle:,.0f} s (a stopped process?) and holds "
            f"{self.out} open; the job is left to it: continue it (`kill -CONT {holder.pid}`) "
            "or end it, then resume"
        )

    def _needs_input(self) -> bool:
        """Whether `run` reads the input: to index it, or for an item not done (pending, or in
        a provider batch), or a provider batch not yet collected."""
        if not self.state.get("indexed"):
            return True
        counts = self.state.counts()
        if counts.get("done", 0) != sum(n for key, n in counts.items() if ":" not in key):
            return True
        if self.state.submissions("submitting"):
            return True
        return any(self.state.batches(state) for state in ("open", "candidate", "ended"))

    def summary(self, seconds: float | None = None, ran: int | None = None) -> JobSummary:
        """The job's counts now (from the state file alone)."""
        with state_errors(self.state.path):
            return summarize(self.state, seconds, ran)

    def retry(self, error_types: Collection[str] | None = None) -> int:
        """Put the failed items (those whose error type is in `error_types`, default every
        failed item) back to run again, and say how many: their output lines are taken out of
        the output, so that once `run` has run them each item has exactly one line again
        (`sdk.batch._output`: a crash anywhere leaves the job as it was or fully reopened).
        Every finished line stays as it is; the items' tries and tokens so far stay counted in
        their new lines. New settings (`--max-tokens`) go through `create(..., update=True)`
        first. A cancelled job's flag is cleared (its cancelled items stay cancelled).
        `JobRunning` while the job runs; `BatchError` if items are still in flight (`run` first)."""
        with state_errors(self.state.path), RunnerLock(self.state):
            self._settle_output()
            if self.state.count_in("submitted"):
                raise BatchError(
                    f"{self.state.path} has items in flight in provider batches: resume the "
                    "job to collect them, then retry"
                )
            failed = self.state.failed(None if error_types is None else list(error_types))
            if not failed:
                return 0
            if not self.input.is_file():  # refused before any item is reopened
                raise _no_input(self.input)
            self._refuse_foreign_tail()  # (the copy keeps the committed lines only)
            self._reopen(failed, error_types)
            self._after_reopen()
            self._settle_output()
        return len(failed)

    def _after_reopen(self) -> None:
        """A hook between a retry's commit and its output's rename (tests inject a crash)."""

    def _reopen(self, failed: list[tuple[int, str]], error_types: Collection[str] | None) -> None:
        """The items back to pending and the output without their lines, in one commit."""
        ids = {item_id for _, item_id in failed}
        copy, length, dropped = without_lines(
            self.out,
            int(self.state.get("out_length")),
            lambda record: record.get("outcome") == "failed" and _text_id(record) in ids,
        )
        try:
            if dropped != len(failed):
                raise JobMismatch(
                    f"{self.out} holds {dropped:,} lines for the {len(failed):,} failed items of "
                    "the job: it is not the job's output as committed"
                )
            with self.state.transaction() as db:
                self.state.reopen([seq for seq, _ in failed], db)
                self.state.put("out_length", length, db)
                self.state.put("output_swap", {"copy": str(copy)}, db)
                self.state.put("cancelled", False, db)
                retried = {"retried": len(failed), "error_types": sorted(error_types or [])}
                history = self.state.get("changes") or []
                self.state.put("changes", [*history, {"at": time.time(), **retried}], db)
        except BaseException:
            copy.unlink(missing_ok=True)
            raise

    def _own_line(self, record: dict[str, Any]) -> bool:
        """Whether an output line past the committed length is the job's own, uncommitted (a
        crash between its append and its commit): in the job's line format, for one of its
        items that the state does not mark done."""
        schema = record.get("schema")
        rows = self.state.items_with_id(_text_id(record))
        return (
            record.get("outcome") in ("ok", "failed", "cancelled")
            and isinstance(schema, dict)
            and schema.get("fingerprint") == self.state.schema()[2]
            and len(rows) == 1
            and rows[0].state != "done"
        )

    def _refuse_foreign_tail(self) -> None:
        """`OutputChanged` if the output holds lines past the committed length that the job
        did not write (`retry` would drop them with the uncommitted tail)."""
        committed = int(self.state.get("out_length"))
        if self.out.is_file() and self.out.stat().st_size > committed:
            foreign = foreign_tail(self.out, committed, self._own_line)
            if foreign is not None:
                raise foreign

    def _settle_output(self) -> None:
        """Complete an output swap a retry recorded (a crash may have come before its rename)."""
        swap = self.state.get("output_swap")
        finish_swap(self.out, swap)
        if swap:
            self.state.put("output_swap", None)

    def cancel(self) -> JobSummary:
        """Cancel the job: nothing more is sent, open backend batches are cancelled. A running
        job (another process's included) notices within about a second, cancels its open
        batches and the calls in flight, and marks what is left cancelled; a job not running
        has its open batches cancelled here, and `run` (`resume`) then collects what they
        finished and marks the rest cancelled. A job with every item done has nothing left to
        cancel: it stays finished (its summary says so)."""
        with state_errors(self.state.path):
            # The check and the flag in one transaction: a runner's last commit comes wholly
            # before them (the job is finished, and stays so) or after (it sees the flag).
            with self.state.transaction() as db:
                done = summarize(self.state)
                if done.state == "finished":  # (indexed, every item done: not a job not yet read)
                    return done
                self.state.put("cancelled", True, db)
            if isinstance(self.backend, HostedBackend) and running_holder(self.state) is None:
                self._cancel_batches(self.backend)
            return self.summary()

    # --- shared by both paths ---

    def _cancelled(self) -> bool:
        return bool(self.state.get("cancelled"))

    def _read(self, row: ItemRow) -> InputItem:
        """The item of `row`, its identity checked; a changed input stops the job, naming the
        first changed line."""
        try:
            return self._reader.read(row)
        except InputChanged as changed:
            raise input_changed(self.state, self.input) or changed from None

    def _line(self, row: ItemRow) -> bytes:
        """The checked input line of `row` (as `_read` checks it)."""
        try:
            return self._reader.line(row)
        except InputChanged as changed:
            raise input_changed(self.state, self.input) or changed from None

    def _failed(
        self,
        row: ItemRow,
        error: ProviderError,
        remote_id: str | None,
        *,
        cancelled: bool = False,
    ) -> Decision:
        """The decision for an item that failed (or was cancelled) without a reply to judge."""
        return decide_failure(self._job(), row, error, remote_id, cancelled=cancelled)

    def _job(self) -> ItemJob:
        """What every item is asked and judged with (`sdk.batch._outcome`)."""
        return ItemJob(self.contract, self.backend.provider, self.settings)

    def _commit(self, decisions: Sequence[Decision], *, report: bool = True) -> None:
        """Append the finished items' lines, then commit them and every state change at once,
        after checking this run still holds the job's lease (nothing is written if not).
        `report=False`: the caller reports progress after it knows the commit went through
        (the local runner gives the items of a failed commit back: a progress callback raising
        inside the commit would have them committed twice)."""
        if not decisions:
            return
        assert self._lock is not None and self._output is not None
        output = self._output
        lines = [prompted(d.line, self.prompt) for d in decisions if d.line is not None]
        committed = output.length
        self._watch_state()  # (a commit into a state file no one reads again: none)
        try:
            with self.state.transaction() as db:
                self._lock.fence(db, self._in_flight_here())
                length = output.append(lines)
                self.state.update_items([d.update for d in decisions], db)
                self.state.put("out_length", length, db)
        except BaseException:
            output.length = committed  # what was appended is cut on close, or the next open
            raise
        self._done.update(d.outcome for d in decisions if d.outcome is not None)
        if report:
            self._report()

    def _start_counts(self) -> None:
        counts = self.state.counts()
        self._done = Counter(
            {kind: counts.get(f"done:{kind}", 0) for kind in ("ok", "failed", "cancelled")}
        )
        self._resumed_from = sum(self._done.values())
        self._total = self.state.item_count()

    def _in_flight_here(self) -> int:
        return self.backend.in_flight if isinstance(self.backend, LocalBackend) else 0

    def _indexing(self, indexed: int) -> None:
        assert self._lock is not None
        self._lock.renew()
        if self._progress is not None:
            self._progress(JobProgress(indexed, 0, 0, 0, phase="indexing"))

    def _report(self, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if not force and now - self._reported < self._progress_every:
            return
        self._reported = now
        in_flight = self._in_flight_here() or self.state.count_in("submitted")
        self._progress(
            JobProgress(
                total=self._total,
                ok=self._done["ok"],
                failed=self._done["failed"],
                in_flight=in_flight,
                cancelled=self._done["cancelled"],
                resumed_from=self._resumed_from,
            )
        )

    def _tick(self) -> None:
        """While a run waits or works: renew the lease, report progress, and stop if the
        input changed, or the output or the state file is not the one the job holds."""
        assert self._lock is not None
        self._watch_state()
        if self._output is not None:
            self._output.check()
        self._lock.renew(self._in_flight_here())
        self._watch_input()
        self._report()

    def _watch_state(self) -> None:
        """Stop the run (`StateFileError`) within a tick of its state file being deleted or
        replaced (a copy saved over it): what the job commits would go to a file no one reads
        again, while its output grows past what the file at the path says."""
        found = _device_and_inode(self.state.path)
        if found == self._state_seen:
            return
        if found is None:
            raise StateFileError(
                f"{self.state.path} was deleted while the job ran: the job stopped (its record "
                "of which items are done went with it). Put the file back and `sdk batch "
                "resume` goes on; without it, start a new job"
            )
        raise StateFileError(
            f"{self.state.path} was replaced by another file while the job ran: the job "
            "stopped (what it committed since then went to the file that was replaced). `sdk "
            "batch resume` goes on from the file at the path"
        )

    def _watch_input(self) -> None:
        """Stop the run (`InputChanged`, naming the first changed line) within a tick of an edit
        to the input, rather than when the edited line's turn comes: the job's answers are for
        the input as indexed, and `resume` refuses any other. A change that leaves every indexed
        line as it was (a `touch`, blank lines) is taken."""
        seen = input_stat(self.input)
        if seen == self._input_seen:
            return
        problem = input_changed(self.state, self.input)
        if problem is not None:
            raise problem
        self._input_seen = seen

    def _cancel_pending(self) -> None:
        """A cancelled job: every item not yet sent is done, as cancelled."""
        error = provider_error(self.backend.provider.name, "the job was cancelled")
        while True:
            rows = self.state.pending(_PAGE)
            if not rows:
                return
            self._commit([self._failed(row, error, None, cancelled=True) for row in rows])

    # --- local ---

    def _run_local(self, backend: LocalBackend) -> None:
        provider = backend.provider

        def commit(outcomes: list[Outcome]) -> None:
            self._commit(
                [
                    decide_live(self.contract, provider, self.settings, row, outcome)
                    for row, outcome in outcomes
                ],
                report=False,
            )

        # A pass runs every pending item; items a provider failure put back (`resubmits`) run
        # in the next pass.
        with backend.cluster() if isinstance(backend, RayBackend) else contextlib.nullcontext():
            while not self._cancelled() and self.state.pending(1):
                if isinstance(backend, RayBackend):
                    stopped = RayRun(
                        backend, self.contract, self.settings, self._line, self._commit,
                        stop=self._cancelled, tick=self._tick, prompt=self.prompt,
                    ).run(self._pages(backend.page))  # fmt: skip
                else:
                    run = LocalRun(
                        backend, self.contract, self._read, commit, stop=self._cancelled,
                        tick=self._tick, report=self._report,
                        max_tokens=self.settings.max_tokens,
                    )  # fmt: skip
                    stopped = asyncio.run(run.run(self._pages()))
                if stopped:
                    break
        if self._cancelled():
            self._cancel_pending()

    def _pages(self, size: int = _PAGE) -> Iterator[list[ItemRow]]:
        after = -1
        while True:
            rows = self.state.pending(size, after)
            if not rows:
                return
            after = rows[-1].seq
            yield rows

    # --- hosted ---

    def _run_hosted(self, backend: HostedBackend) -> None:
        self._recover(backend)
        delay = self.poll_interval
        while True:
            if self._cancelled():
                self._stop_hosted(backend)
            else:
                self._submit_pending(backend)
            self._resend_disproven(backend)
            watched = self.state.batches("open") + self.state.batches("candidate")
            if not watched and not self.state.batches("ended"):
                if not self.state.pending(1):
                    return
                continue
            changed = self._poll(backend, watched)
            for batch in self.state.batches("ended"):
                self._collect(backend, batch.remote_id, batch.submission)
            waiting = self.state.batches("open") or self.state.batches("candidate")
            if waiting and not self.state.pending(1):
                self._wait(delay)
                delay = self.poll_interval if changed else min(delay * 1.5, self.poll_max)

    def _wait(self, seconds: float) -> None:
        """Wait before the next poll: through the given `sleep`, or in steps of `_TICK` that
        renew the lease and end early when the job is cancelled."""
        if self._sleep is not None:
            self._sleep(seconds)
            return
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, _TICK))
            self._tick()
            if not self._stopping and self._cancelled():
                return

    def _poll(self, backend: HostedBackend, batches: list[BatchRow]) -> bool:
        """Each watched batch's status; candidates that ended are judged. Whether any ended."""
        changed = False
        for batch in batches:
            status = backend.poll(batch.remote_id)
            if batch.state == "candidate":
                self.state.set_batch(batch.remote_id, status=status.status)
                if status.ended:
                    self._judge(backend, batch)
            else:
                ended = "ended" if status.ended else None
                self.state.set_batch(batch.remote_id, status=status.status, state=ended)
            changed = changed or status.ended
        return changed

    def _judge(self, backend: HostedBackend, batch: BatchRow) -> None:
        """A candidate that ended: adopted if one of its results carries its submission's key,
        else recorded as another's (`foreign`)."""
        if not backend.proves(batch.remote_id, batch.submission):
            self.state.set_batch(batch.remote_id, state="foreign")
            return
        with self.state.transaction() as db:
            for other in self.state.batches("candidate"):
                if other.submission == batch.submission and other.remote_id != batch.remote_id:
                    self.state.set_batch(other.remote_id, state="foreign", db=db)
            self.state.set_batch(batch.remote_id, state="ended", db=db)
            self.state.set_submission(batch.submission, state="open", db=db)

    def _resend_disproven(self, backend: HostedBackend) -> None:
        """A lost submission whose every candidate proved to be another's was never created:
        send it now (or, if the job is cancelled, close it)."""
        batches = self.state.batches()
        for submission in self.state.submissions("submitting"):
            own = [b.state for b in batches if b.submission == submission.key]
            if not own or any(state != "foreign" for state in own):
                continue
            if self._cancelled():
                self._close(submission.key, None, True)
            else:
                self._send(backend, submission, self._entries(submission.key))

    def _stop_hosted(self, backend: HostedBackend) -> None:
        """The job was cancelled: (once) its open batches are cancelled and its unproven
        candidates dropped, their submissions closed; then every item not sent is cancelled."""
        if not self._stopping:
            self._stopping = True
            self._cancel_batches(backend)
            for batch in self.state.batches("candidate"):
                self.state.set_batch(batch.remote_id, state="dropped")
                self._close(batch.submission, None, True)
        self._cancel_pending()

    def _cancel_batches(self, backend: HostedBackend) -> None:
        for batch in self.state.batches("open"):
            status = backend.cancel(batch.remote_id)
            self.state.set_batch(batch.remote_id, status=status.status)

    def _recover(self, backend: HostedBackend) -> None:
        """Submissions recorded but without a batch: find their batch (or candidates, judged
        as they end), or send them now; and submissions whose batches were all collected but
        not closed (a crash in between)."""
        batches = self.state.batches()
        waiting = {b.submission for b in batches if b.state in ("open", "ended")}
        for submission in self.state.submissions("open"):
            if submission.key not in waiting:
                self._close(submission.key, None, self._cancelled())
        known = self.state.known_batch_ids()
        for submission in self.state.submissions("submitting"):
            if any(b.submission == submission.key for b in batches):
                continue  # candidates found by an earlier run: judged as they end
            found = backend.find(self.job_id, submission, known)
            if found:
                kind = "candidate" if backend.finds_candidates else "open"
                with self.state.transaction() as db:
                    for status in found:
                        self.state.add_batch(
                            status.remote_id, submission.key, status.status, db, state=kind
                        )
                    if kind == "open":
                        self.state.set_submission(submission.key, state="open", db=db)
                known.update(status.remote_id for status in found)
            elif self._cancelled():  # never created, and now not to be
                self._close(submission.key, None, True)
            else:
                self._send(backend, submission, self._entries(submission.key))

    def _entries(self, key: str) -> list[bytes]:
        """The requests of a recorded submission (to send it again); an item whose request
        cannot be built fails alone."""
        entries: list[bytes] = []
        failed: list[Decision] = []
        for row in self.state.in_submission(key):
            entry = self._entry_or_failure(key, row, failed)
            if entry is not None:
                entries.append(entry)
        self._commit(failed)
        return entries

    def _entry_or_failure(self, key: str, row: ItemRow, failed: list[Decision]) -> bytes | None:
        """The item's request as the batch takes it; or, if it cannot be built (options the
        codec rejects, text UTF-8 cannot encode, an unusable id), its failure added to
        `failed`. A changed input is not the item's failure: it stops the job."""
        item = self._read(row)
        try:
            if item.unusable is not None:
                raise BatchInputError(item.unusable)
            request = request_for(self._job(), item, row)
            # Built as a live call builds it (`built`): the provider's own `extra_body` merged
            # under the item's, then vetted (an option the provider does not take is a
            # `TypeError`; a schema the target would weaken silently, `UnsupportedRequest`).
            exchange = built(self.backend.provider, request, stream=False)
            assert isinstance(self.backend, HostedBackend)
            return self.backend.entry(_custom_id(key, row.seq), exchange)
        except Exception as error:  # the item's own failure
            failed.append(decide_error(self.contract, self.backend.provider, row, error))
            return None

    def _submit_pending(self, backend: HostedBackend) -> None:
        """Every pending item, in submissions within the backend's limits (stopping early if
        the job is cancelled meanwhile)."""
        key = _key()
        seqs: list[int] = []
        entries: list[bytes] = []
        size = _ENVELOPE
        after = -1
        failed: list[Decision] = []
        while not self._cancelled():
            rows = self.state.pending(_PAGE, after)
            if not rows:
                break
            for row in rows:
                after = row.seq
                entry = self._entry_or_failure(key, row, failed)
                if entry is None:
                    continue
                cost = len(entry) + 1
                if cost + _ENVELOPE > backend.max_bytes:
                    failed.append(self._too_big(row, cost, backend))
                    continue
                if seqs and (len(seqs) >= backend.max_requests or size + cost > backend.max_bytes):
                    self._start(backend, key, seqs, entries, size)
                    key, seqs, entries, size = _key(), [], [], _ENVELOPE
                    entry = self._entry_or_failure(key, row, failed)  # its custom_id changed
                    if entry is None:
                        continue
                    cost = len(entry) + 1
                seqs.append(row.seq)
                entries.append(entry)
                size += cost
            self._commit(failed)
            failed = []
            self._tick()  # building a large submission takes a while: the lease stays fresh
        if seqs and not self._cancelled():
            self._start(backend, key, seqs, entries, size)

    def _too_big(self, row: ItemRow, size: int, backend: HostedBackend) -> Decision:
        error = provider_error(
            backend.provider.name,
            f"the request is {size:,} bytes, over the batch limit of {backend.max_bytes:,}",
            transient=False,
        )
        return self._failed(row, error, None)

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
        if not entries:  # every item of it failed on its own
            self._close(submission.key, None, False)
            return
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
        cancelled = self._cancelled()
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
        # A batch the provider refused whole (OpenAI `failed`: its input did not validate)
        # would be refused again; any other missing result is resent.
        missing = provider_error(
            self.backend.provider.name,
            f"no result for the item in {where}",
            transient=not (status or "").startswith("failed"),
        )
        self._commit(
            [
                self._failed(row, missing, remote_id, cancelled=cancelled)
                for row in self.state.in_submission(submission)
            ]
        )
        self.state.set_submission(submission, state="closed")

    def _apply(self, chunk: list[RemoteResult], remote_id: str, cancelled: bool) -> None:
        routed: dict[int, tuple[str, RemoteResult]] = {}
        for result in chunk:
            named = _routed(result.custom_id)
            if named is not None:  # else no item of any submission: not ours at all
                key, seq = named
                routed[seq] = (key, result)
        rows = self.state.items(sorted(routed))
        decisions: list[Decision] = []
        for seq, (key, result) in routed.items():
            row = rows.get(seq)
            if row is None or row.state != "submitted" or row.submission != key:
                continue  # another submission's, already collected, or not ours at all
            if result.completion is not None:
                item = self._read(row)
                decisions.append(decide_reply(self._job(), item, row, result.completion, remote_id))
            else:
                assert result.error is not None
                decisions.append(self._failed(row, result.error, remote_id, cancelled=cancelled))
        self._commit(decisions)


def _no_input(path: str | Path) -> BatchInputError:
    """A job's input that is not there (moved or deleted), as `run`, `resume` and `retry` say it:
    every command that needs the input says it so (probe13b D5: `resume` gave the bare
    `[Errno 2] No such file or directory` of the open). A path that is there but is no regular
    file (a folder, a named pipe, a device) is said so: "no such input file" sent the reader
    looking for a file that is there."""
    if os.path.lexists(path) and Path(path).exists():
        return BatchInputError(
            f"{path}: not a regular file (a folder, a named pipe or a device): give the input "
            "file's path"
        )
    return BatchInputError(f"{path}: no such input file")


def _device_and_inode(path: Path) -> tuple[int, int] | None:
    """The file at `path` (device and inode), or `None` if there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def _custom_id(key: str, seq: int) -> str:
    """The `custom_id` of item `seq` in submission `key` (read back by `_routed`)."""
    return f"{key}-{seq}"


def _routed(custom_id: str) -> tuple[str, int] | None:
    """The submission key and item seq of a result's `custom_id`, or `None` for an id
    `_custom_id` never writes: it is read back as exactly what was written (`str(seq)`), not
    by a digit test (`"²"` is a digit, `"01"`, `"+1"` and `" 1"` read as 1, 5,000 digits are
    past what `int` reads). Not a JSON pointer's list index, though the same digits name it:
    this is the job's own naming, round-tripped."""
    key, _, number = custom_id.rpartition("-")
    try:
        seq = int(number)
    except ValueError:
        return None
    return (key, seq) if key and _custom_id(key, seq) == custom_id else None


def _text_id(record: dict[str, Any]) -> str:
    """An output line's id as the state file keeps it (as text: `7` is `"7"`)."""
    return str(record.get("id"))


def _key() -> str:
    """A submission's key: in every `custom_id` of it, so its results prove whose they are."""
    return "s" + secrets.token_hex(6)


def _described(contract: type[Contract], backend: Backend, settings: JobSettings) -> dict[str, Any]:
    """What a job is, as its state file keeps it (compared when it is created again)."""
    info = schema_info(contract)
    return {
        "contract": f"{contract.__module__}:{contract.__qualname__}",
        "schema": [info.name, info.version, info.fingerprint],
        "backend": backend.name,
        "provider": backend.provider.name,
        "model": backend.provider.model,
        "settings": asdict(settings),
    }


def _prompt_described(prompt: type[Prompt] | None) -> dict[str, Any]:
    """A job's prompt template, as its state file keeps it."""
    if prompt is None:
        return {"prompt": None, "prompt_ref": None}
    info = prompt.info()
    return {
        "prompt": [info.name, info.version, info.fingerprint],
        "prompt_ref": f"{prompt.__module__}:{prompt.__qualname__}",
    }


def _apply_changes(store: JobState, wanted: Mapping[str, Any], update: bool) -> None:
    """Compare an existing job with what `create` was given: refuse a change of what is asked
    unless `update`; record every change (under the job's lock: not while it runs)."""
    changed: dict[str, list[Any]] = {}
    for key, value in wanted.items():
        if key == "settings":
            before = store.get("settings") or {}
            changed.update(
                (name, [before.get(name), new])
                for name, new in value.items()
                if before.get(name) != new
            )
        elif key == "schema":
            if store.schema()[2] != value[2]:
                changed["schema"] = [list(store.schema()), value]
        elif key not in ("contract", "prompt_ref") and store.get(key) != value:
            changed[key] = [store.get(key), value]
    if not changed:
        return
    asked = sorted(key for key in changed if key in _ASKED)
    if asked and not update:
        shown = "; ".join(f"{key}: {changed[key][0]!r} -> {changed[key][1]!r}" for key in asked)
        raise JobMismatch(
            f"{store.path} is a job with other settings ({shown}): run it as it is, or pass "
            "update=True (`--update`) to change them (recorded in the job)"
        )
    with RunnerLock(store), store.transaction() as db:
        for key, value in wanted.items():
            store.put(key, value, db)
        history = store.get("changes") or []
        store.put("changes", [*history, {"at": time.time(), "changed": changed}], db)


def _settings(state: JobState) -> JobSettings:
    """The job's settings as stored (`StateFileError` if they are not settings: damaged)."""
    stored = state.get("settings")
    try:
        return JobSettings(**stored)
    except (TypeError, ValueError) as error:
        why = f"{stored!r:.60}, not the job's settings ({error})"
        raise state.damaged("settings", why) from None


def _clients_settings(backend: Backend) -> JobSettings:
    """A job's settings when none are given: a local backend's clients decide retries and the
    enum policy (each item is one of their live calls); a hosted job takes the defaults."""
    first = backend.clients[0] if isinstance(backend, LocalBackend) else None
    if first is None:
        return JobSettings()
    return JobSettings(retries=first.retries, enum_case=first.config.parsing.enum_case)


def _new_state(state: str | Path, wanted: dict[str, Any], out: Path) -> JobState | None:
    """The state file of a new job asking `wanted`, or None where `state` exists already (an
    earlier run, or another process that made it first)."""
    if Path(state).exists():
        return None
    if out.exists() and out.stat().st_size > 0:
        raise BatchError(
            f"{out} already holds data: give a new output file (a job appends to its own "
            "output only)"
        )
    new = {"job": secrets.token_hex(6), "out_length": 0, "created": time.time()}
    try:
        return JobState.create(state, {**wanted, **new})
    except FileExistsError:
        return None


def _same_job_state(state: str | Path, wanted: dict[str, Any], update: bool) -> JobState:
    """The existing job's state file, if it is the job over the same input and output; the
    settings `wanted` applied to it (`_apply_changes`)."""
    store = JobState(state)
    try:
        with state_errors(state):
            if store.get("input") != wanted["input"] or store.get("out") != wanted["out"]:
                raise JobMismatch(
                    f"{state} is the job over {store.get('input')} -> {store.get('out')}; "
                    "resume it, or give another state file"
                )
            _apply_changes(store, {k: v for k, v in wanted.items() if k not in _PLACES}, update)
    except BaseException:
        store.close()
        raise
    return store


_PLACES = ("input", "out")
"""The files a job is over: fixed at its creation, compared (never changed) on a rerun."""


def _refuse_hosted_options(backend: Backend, options: Mapping[str, Any]) -> None:
    """A local backend has nothing to poll or collect: its job refuses the options for that."""
    hosted_only = ("poll_interval", "poll_max", "collect_chunk", "sleep")
    given = [name for name in hosted_only if options.get(name) is not None]
    if isinstance(backend, LocalBackend) and given:
        raise ValueError(f"{', '.join(given)}: for hosted batch APIs, not a local backend")


def _check_local(backend: LocalBackend, settings: JobSettings) -> None:
    """The local path runs each item as one live call with the client's own retries and enum
    policy: the job's must be the same, or the job would say one thing and do another."""
    for client in backend.clients:
        enum_case = client.config.parsing.enum_case
        if client.retries != settings.retries or enum_case != settings.enum_case:
            raise BatchError(
                f"the job's settings (retries={settings.retries}, enum_case="
                f"{settings.enum_case!r}) are not its local clients' (retries="
                f"{client.retries}, enum_case={enum_case!r}): each item is one live "
                "call, so give the AsyncStructuredClient the job's settings"
            )
