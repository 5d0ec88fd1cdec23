"""What a job reports: `JobProgress` while it runs, `JobSummary` at the end or on `status`."""

from __future__ import annotations

from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from sdk._terminal import visible
from sdk.batch._lock import running_holder
from sdk.batch._state import JobState
from sdk.batch._state import state_errors

__all__ = ["JobProgress", "JobSummary", "job_summary", "summarize"]


@dataclass(frozen=True, slots=True)
class JobProgress:
    """Where a job is: items done (valid, failed, cancelled) and in flight, of the total.

    `phase`: `"indexing"` (then `total` counts the items indexed so far) or `"running"`.
    `resumed_from`: items already done when this run started (a rate or an ETA counts the items
    done since, not these)."""

    total: int
    ok: int
    failed: int
    in_flight: int
    cancelled: int = 0
    phase: str = "running"
    resumed_from: int = 0

    @property
    def done(self) -> int:
        """Items finished either way."""
        return self.ok + self.failed + self.cancelled


@dataclass(frozen=True)
class JobSummary:
    """A job's counts by outcome, its tokens, and the items that stayed failed: all read in one
    transaction of the state file (they add up to `total`)."""

    job: str
    provider: str
    model: str | None
    schema: str
    total: int
    ok: int
    failed: int
    cancelled: int
    pending: int
    in_flight: int
    input_tokens: int
    output_tokens: int
    batches: int
    failure_types: dict[str, int] = field(default_factory=dict)
    """Failed items by error type (cancelled items are counted in `cancelled` only)."""
    failures: list[tuple[str | int, str, str]] = field(default_factory=list)
    """Up to 20 failed items (not cancelled ones): id (with its JSON type, as in the output),
    error type, last error."""
    seconds: float | None = None
    state: str = "running"
    ran: int | None = None
    """Items this run finished (with `seconds`, the run's rate)."""
    runner: str | None = None
    """The process running the job now (`pid ... on HOST since ...`), if one is."""
    indexed: bool = True
    """Whether every line of the input is indexed. Until it is (a job created and not run yet,
    one indexing now, one stopped while indexing or by a bad input line), `total` counts the
    items indexed so far, not the input's."""

    @property
    def finished(self) -> bool:
        """Whether the job is done: every input line indexed, and every item done (valid,
        failed or cancelled), none pending or in flight."""
        return self.indexed and self.pending == 0 and self.in_flight == 0

    def lines(self) -> list[str]:
        """The summary as text lines."""
        lines = [
            f"job {self.job}: {self.schema} via {self.provider}"
            + (f" ({self.model})" if self.model else "")
            + f", {self.state}"
            + (f" ({self.runner})" if self.runner else ""),
            f"items: {self.total:,} "
            + ("total" if self.indexed else "total so far (the input is not all indexed yet)")
            + f", {self.ok:,} ok, {self.failed:,} failed, "
            f"{self.cancelled:,} cancelled, {self.in_flight:,} in flight, "
            f"{self.pending:,} pending",
            f"tokens: {self.input_tokens:,} in, {self.output_tokens:,} out"
            + (f"; {self.batches:,} provider batches" if self.batches else ""),
        ]
        if self.seconds is not None and self.ran is not None:
            rate = (
                f"{self.ran:,} items, {self.ran / self.seconds:,.1f} items/s"
                if self.ran and self.seconds > 0
                else "nothing left to run"
            )
            lines.append(f"time: {self.seconds:.1f} s this run ({rate})")
        if self.failure_types:
            kinds = ", ".join(
                f"{visible(k)}: {n:,}" for k, n in sorted(self.failure_types.items())
            )
            lines.append(f"failed by error: {kinds}")
        for item_id, kind, message in self.failures:
            # (from the input and the provider: control characters escaped, one line each)
            lines.append(f"  {visible(str(item_id))}: {visible(kind)}: {visible(message)}")
        return lines

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data."""
        data = asdict(self)
        data["failures"] = [{"id": i, "error_type": k, "error": m} for i, k, m in self.failures]
        data["finished"] = self.finished
        return data


def summarize(state: JobState, seconds: float | None = None, ran: int | None = None) -> JobSummary:
    """A job's summary from its state file alone (no backend needed), naming the process that
    runs it now, if one does. Everything is read in one transaction (counts that add up)."""
    with state.snapshot():
        return _summarize(state, seconds, ran)


def _summarize(state: JobState, seconds: float | None, ran: int | None) -> JobSummary:
    counts = state.counts()
    name, version, _ = state.schema()
    tokens_in, tokens_out = state.tokens()
    pending = counts.get("pending", 0)
    in_flight = counts.get("submitted", 0)
    holder = running_holder(state)
    if holder is not None:
        in_flight += holder.in_flight  # the local backend's calls: pending in the file
        pending = max(0, pending - holder.in_flight)
    indexed = bool(state.get("indexed"))
    total = state.item_count()
    ended = pending + in_flight == 0 and indexed
    if state.get("cancelled"):
        label = "cancelled" if ended else "cancelling"
    elif ended:
        label = "finished"
    elif not indexed:
        if holder is not None:
            label = "indexing"
        elif total or state.get("index_progress"):
            label = "stopped while indexing (resume it)"
        else:
            label = "not started (resume it)"
    else:
        label = "running" if holder is not None else "stopped (resume it)"
    return JobSummary(
        job=state.get("job"),
        provider=state.get("provider"),
        model=state.get("model"),
        schema=f"{name} v{version}",
        total=total,
        ok=counts.get("done:ok", 0),
        failed=counts.get("done:failed", 0),
        cancelled=counts.get("done:cancelled", 0),
        pending=pending,
        in_flight=in_flight,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        batches=len(state.batches()),
        failure_types=state.failure_types(),
        failures=state.failures(20),
        seconds=seconds,
        state=label,
        ran=ran,
        runner=holder.describe() if holder is not None and holder.pid else None,
        indexed=indexed,
    )


def job_summary(path: str | Path) -> JobSummary:
    """The summary of the job in a state file, without its contract or backend (`status`): the
    file is opened read-only, so nothing in it changes (a file that is not a job's included);
    a running job's counts are its last commit's (every few seconds)."""
    state = JobState(path, readonly=True)
    try:
        with state_errors(path):
            return summarize(state)
    finally:
        state.close()
