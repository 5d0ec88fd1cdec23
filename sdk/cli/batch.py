"""`sdk batch run|resume|retry|status|cancel`: resumable jobs over large inputs (`sdk.batch`)."""

from __future__ import annotations

import shlex
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Annotated
from typing import Any

import typer

from sdk._values.seconds import LONGEST_INTERVAL
from sdk.cli._app import CacheOption
from sdk.cli._app import CachePathOption
from sdk.cli._app import ContractOption
from sdk.cli._app import JsonOption
from sdk.cli._app import Output
from sdk.cli._app import PromptOption
from sdk.cli._app import cache_named
from sdk.cli._app import command_group
from sdk.cli._app import errors_exit
from sdk.cli._app import prompt_named
from sdk.cli._signals import stop_signals
from sdk.workflow.versioning import contract_named

if TYPE_CHECKING:
    from sdk.batch import BatchJob
    from sdk.batch import JobProgress
    from sdk.batch._state import JobState
    from sdk.contract import Contract

__all__ = ["batch_app", "progress_text"]

batch_app = command_group(
    "batch",
    "Run a contract over a large input (provider batch APIs or local servers); resumable.",
    "Run a contract over a large JSONL input as a resumable job (run, status, retry, ...).",
)

StateOption = Annotated[
    Path, typer.Option("--state", help="The job's state file (SQLite), as `run` made it.")
]
ProviderOption = Annotated[
    str,
    typer.Option(
        "--provider",
        help="anthropic, openai (Responses), openai_chat; llamacpp, vllm, ollama (local "
        "servers, with --base-url); or embedded (the bundled model, in this process).",
    ),
]
InputOption = Annotated[
    Path, typer.Option("--input", help="JSONL: id, prompt/source/messages, options.")
]
OutOption = Annotated[Path, typer.Option("--out", help="JSONL results, one line per item.")]
NewStateOption = Annotated[
    Path | None, typer.Option("--state", help="State file (default: OUT.job.db).")
]
PollOption = Annotated[
    float | None,
    typer.Option(
        "--poll-interval",
        min=0.0,
        max=LONGEST_INTERVAL,
        help="Hosted: seconds between status checks (grows; default 10).",
    ),
]

ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model (embedded: smollm2-135m, gemma3-270m or a GGUF file).",
    ),
]
BaseUrlOption = Annotated[
    list[str] | None,
    typer.Option(
        "--base-url",
        help="A local server; repeat for several. Its credentials (user:password@, ?key=...) "
        "are not kept in the job: give it again to resume or retry.",
    ),
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option("--concurrency", min=1, help="Local: in flight per server (embedded: 1)."),
]
MaxRequestsOption = Annotated[
    int | None, typer.Option("--max-requests", min=1, help="Hosted: requests per batch.")
]
RetriesOption = Annotated[
    int | None,
    typer.Option("--retries", min=0, help="Invalid-output retries per item (default 2)."),
]
ResubmitsOption = Annotated[
    int | None,
    typer.Option(
        "--resubmits", min=0, help="Resends of items the provider did not run (default 3)."
    ),
]
MaxTokensOption = Annotated[
    int | None, typer.Option("--max-tokens", min=1, help="Output limit (default 4096).")
]
UpdateOption = Annotated[
    bool,
    typer.Option(
        "--update",
        help="On an existing job: take a new model, provider, contract or --max-tokens "
        "(refused without it; recorded in the job).",
    ),
]

EngineOption = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Local servers and the embedded model: where the calls run: `local` (this "
        "process) or `ray` (Ray actors; the `ray` extra).",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address", help="--engine ray: a running cluster (default: a local one for the run)."
    ),
]
NewRayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="A job run with --engine ray: the cluster to run on now, in place of the job's "
        "(recorded in the job).",
    ),
]
ActorsOption = Annotated[
    int | None, typer.Option("--actors", min=1, help="--engine ray: actors (default 2).")
]

_PLAIN_EVERY = 10.0
"""Seconds between progress lines when stderr is not a terminal (a log, a pipe)."""


@batch_app.command("run")
def batch_run_command(
    contract_ref: ContractOption,
    provider: ProviderOption,
    input_path: InputOption,
    out: OutOption,
    prompt_ref: PromptOption = None,
    state: NewStateOption = None,
    model: ModelOption = None,
    base_urls: BaseUrlOption = None,
    concurrency: ConcurrencyOption = None,
    max_requests: MaxRequestsOption = None,
    retries: RetriesOption = None,
    resubmits: ResubmitsOption = None,
    max_tokens: MaxTokensOption = None,
    poll_interval: PollOption = None,
    update: UpdateOption = False,
    cache: CacheOption = False,
    cache_path: CachePathOption = None,
    engine: EngineOption = "local",
    ray_address: RayAddressOption = None,
    actors: ActorsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a job (or continue the same one, if its state file exists) and run it to the end.

    `--engine ray [--ray-address ADDRESS] [--actors N]` (local servers and the embedded model):
    the calls run in Ray actors (a local cluster when no address is given), into the same
    state and output files, with the same exit codes; `resume` and `retry` use Ray again.
    `--concurrency` stays the calls in flight per server, shared by the actors.

    `--cache`/`--cache-path` (local servers and the embedded model): each item's call is
    answered from the response cache when it was asked before, and stored there otherwise; the
    job keeps the cache's file, so `resume` uses it too. A hosted batch API refuses it.

    Exit code 0: every item done and valid; 1: done, some items failed or were cancelled
    (listed), or the provider failed (unreachable, refusing the credentials: `sdk batch
    resume` goes on); 2: the job could not run (bad input, another job's files, already
    running); 130: interrupted (run `sdk batch resume` to go on); SIGTERM and SIGHUP stop the
    job as Ctrl-C does, with 143 and 129 (128 + the signal's number).
    """
    out_ = Output()
    state_path = state if state is not None else out.with_name(out.name + ".job.db")
    with errors_exit(out_), _batch_errors(out_):
        given = {"provider": provider, "model": model, "base_urls": list(base_urls or []),
                 "concurrency": concurrency, "max_requests": max_requests,
                 "cache": _cache_file(provider, cache, cache_path), "engine": engine,
                 "ray_address": ray_address, "actors": actors}  # fmt: skip
        _check_flags(given)
        limits = {"retries": retries, "resubmits": resubmits, "max_tokens": max_tokens}
        prompt = prompt_named(prompt_ref) if prompt_ref is not None else None
        files = {"input": input_path, "out": out, "prompt": prompt}
        job = _start_job(state_path, contract_named(contract_ref), given, limits,
                         {**files, "update": update, "poll_interval": poll_interval},
                         out_)  # fmt: skip
        out_.note(f"job state: {state_path}", style="dim")
    _run_batch(out_, job, state_path, as_json)


def _start_job(
    state: Path,
    contract: type[Contract],
    given: dict[str, Any],
    limits: dict[str, int | None],
    job: dict[str, Any],
    out: Output,
) -> BatchJob:
    """The job in `state` (new, or the same one continued): its backend built from the given
    options, or from the state file's where they are left out (`_wanted`); `job` are
    `BatchJob.create`'s other keywords (its files, prompt, update, polling)."""
    from sdk.batch import BatchJob
    from sdk.batch._setup import build_backend

    if state.is_file():
        _refuse_unwritable(state, "continued")
    spec, settings = _wanted(state, given, limits)
    _check_poll(spec.provider, job["poll_interval"])
    _withhold_stored(state, out)
    return BatchJob.create(
        state,
        contract=contract,
        backend=build_backend(spec),
        settings=settings,
        extra_meta={"backend_spec": spec.to_json()},
        **job,
    )


@batch_app.command("resume")
def batch_resume_command(
    state: StateOption,
    base_urls: BaseUrlOption = None,
    ray_address: NewRayAddressOption = None,
    poll_interval: PollOption = None,
    as_json: JsonOption = False,
) -> None:
    """Go on with a job after a crash or an interruption: nothing lost, nothing sent twice.

    A local server's credentials (`https://user:password@host/...`) are not kept in the state
    file: give its `--base-url` again, with them (each must be one of the job's servers).
    `--ray-address`: a job run with `--engine ray` goes on on another cluster (recorded).
    """
    out_ = Output()
    with errors_exit(out_), _batch_errors(out_):
        _check_ray_address(ray_address)
        job = _open_job(
            state, poll_interval, base_urls=base_urls or [], ray_address=ray_address, out=out_
        )
    _run_batch(out_, job, state, as_json)


@batch_app.command("retry")
def batch_retry_command(
    state: StateOption,
    error_types: Annotated[
        list[str] | None,
        typer.Option(
            "--error-type",
            help="Only the items that failed with this error (TruncatedOutput, ...); repeat "
            "for several. Default: every failed item.",
        ),
    ] = None,
    max_tokens: MaxTokensOption = None,
    retries: RetriesOption = None,
    resubmits: ResubmitsOption = None,
    base_urls: BaseUrlOption = None,
    ray_address: NewRayAddressOption = None,
    poll_interval: PollOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a job's failed items again, optionally with new settings (--max-tokens, --retries,
    --resubmits: recorded in the job, as `run --update` records them). A local server's
    credentials are given again with `--base-url`, and another cluster with `--ray-address`,
    as for `resume`.

    Every finished line stays; the failed items' lines are taken out of the output and written
    again once they have run, so each item still has exactly one line. Their tries and tokens so
    far stay counted. Cancelled items are not retried. Exit codes as `run`.
    """
    out_ = Output()
    limits = {"max_tokens": max_tokens, "retries": retries, "resubmits": resubmits}
    with errors_exit(out_), _batch_errors(out_):
        _check_ray_address(ray_address)
        job = _open_job(
            state, poll_interval, limits, base_urls=base_urls or [], ray_address=ray_address,
            out=out_,
        )  # fmt: skip
        try:
            count = job.retry(error_types or None)
        except BaseException:
            job.close()
            raise
    which = f" ({', '.join(error_types)})" if error_types else ""
    out_.note(f"retrying {count:,} failed items{which}")
    _run_batch(out_, job, state, as_json)


@batch_app.command("status")
def batch_status_command(state: StateOption, as_json: JsonOption = False) -> None:
    """A job's counts by outcome, its tokens, the items that failed, and the process running it
    (read from the state file, which it never changes; a running job commits every few
    seconds)."""
    from sdk.batch import job_summary

    out_ = Output()
    with errors_exit(out_), _batch_errors(out_):
        summary = job_summary(state)
    if as_json:
        out_.json(summary.to_json())
        return
    for line in summary.lines():
        out_.line(line)


@batch_app.command("cancel")
def batch_cancel_command(state: StateOption) -> None:
    """Cancel a job: nothing more is sent and its open batches are cancelled. A running job
    (in any process) stops within seconds; a stopped one is closed by `resume`."""
    out_ = Output()
    with errors_exit(out_), _batch_errors(out_):
        job = _open_job(state, None, sending=False)
        try:
            summary = job.cancel()
        finally:
            job.close()
    for line in summary.lines():
        out_.line(line)
    if summary.state == "finished":
        out_.line("nothing to cancel: every item is done")
    elif summary.runner:
        out_.line(f"cancel requested: the running job ({summary.runner}) stops within seconds")
    else:
        out_.line(
            f"cancel requested: run `sdk batch resume --state {shlex.quote(str(state))}` to "
            "collect and close the job",
            "dim",
        )


def _wanted(state: Path, given: dict[str, Any], limits: dict[str, int | None]) -> tuple[Any, Any]:
    """The backend spec and job settings `run` asks for: what was given, and for what was not,
    the existing job's own (a new job: the defaults)."""
    from sdk._values.profile import profile
    from sdk.batch import JobSettings
    from sdk.batch._setup import BackendSpec
    from sdk.batch._setup import spec_from
    from sdk.batch._setup import with_retries

    stored_spec, stored_settings = _stored(state)
    settings = JobSettings(
        **{
            **stored_settings,
            **{key: value for key, value in limits.items() if value is not None},
        }
    )
    provider = profile(given["provider"]).name
    if stored_spec is not None and stored_spec.get("provider") == provider:
        spec = spec_from(stored_spec, [(k, v) for k, v in given.items() if k != "provider"])
    else:
        spec = BackendSpec(**given)
    # The local clients retry as the job says (`BatchJob` refuses clients that differ).
    return with_retries(spec, settings.retries), settings


def _stored(state: Path) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """An existing job's backend spec and settings (`None` and `{}` for a new job)."""
    from sdk.batch._state import JobState
    from sdk.batch._state import state_errors

    if not state.exists():
        return None, {}
    stored = JobState(state, readonly=True)
    try:
        with state_errors(state):
            return stored.get("backend_spec"), dict(stored.get("settings") or {})
    finally:
        stored.close()


def _cache_file(provider: str, enabled: bool, path: Path | None) -> str | None:
    """The response cache's file `--cache`/`--cache-path` name, checked to be a cache (made if
    new); refused for a hosted batch API before any file is made."""
    from sdk.batch._setup import check_cache

    check_cache(provider, enabled or path is not None)
    store = cache_named(enabled, path)
    if store is None:
        return None
    store.close()
    return str(store.path.resolve())


def _check_ray_address(address: str | None) -> None:
    """`--ray-address` checked as the job's setting is (`RAY_ADDRESS`), before any file is
    made or Ray is started: a `ValueError` naming the flag (exit 2)."""
    from sdk._values.declared import check
    from sdk.batch._ray import RAY_ADDRESS

    check("--ray-address", address, RAY_ADDRESS)


_SPEC_FLAGS = {
    "concurrency": "--concurrency",
    "max_requests": "--max-requests",
    "engine": "--engine",
    "ray_address": "--ray-address",
    "actors": "--actors",
}
"""The options of `run` that are `BackendSpec` settings, by field."""


def _check_flags(given: dict[str, Any]) -> None:
    """The options that are the job's settings, each checked against its declaration in
    `BackendSpec` (bounds included: `--concurrency` at most `MOST_IN_FLIGHT`) before any file
    is made or Ray is started: a `ValueError` naming the option (exit 2), not the class."""
    from typing import get_type_hints

    from sdk._values.declared import check
    from sdk.batch._setup import BackendSpec

    declared = get_type_hints(BackendSpec, include_extras=True)
    for field, flag in _SPEC_FLAGS.items():
        check(flag, given[field], declared[field])


def _check_poll(provider: str, poll_interval: float | None) -> None:
    from sdk.batch._setup import HOSTED_PROVIDERS

    if poll_interval is not None and provider not in HOSTED_PROVIDERS:
        raise ValueError(f"--poll-interval is for hosted batch APIs, not {provider}")


def _open_job(
    state: Path,
    poll_interval: float | None,
    limits: dict[str, int | None] | None = None,
    *,
    base_urls: list[str] | None = None,
    ray_address: str | None = None,
    out: Output | None = None,
    sending: bool = True,
) -> BatchJob:
    """The job in `state` with the backend it was started with (its servers' credentials from
    `base_urls`, given again: `spec_from`); with `limits` given (new `max_tokens`, `retries`,
    `resubmits`), or another cluster (`ray_address`), those taken and recorded first (the
    backend spec's change in the job's `changes`). `out`: a job that will run, whose state file
    is rid of credentials an older version kept there (`_withhold_stored`); `sending=False`:
    a job only cancelled (nothing sent to a local server, no credentials needed)."""
    from sdk.batch import BatchError
    from sdk.batch import BatchJob
    from sdk.batch import JobSettings
    from sdk.batch._setup import build_backend
    from sdk.batch._setup import spec_from
    from sdk.batch._setup import with_retries
    from sdk.batch._state import JobState
    from sdk.batch._state import state_errors

    stored = JobState(state, readonly=True)
    try:
        _refuse_unwritable(state, "resumed or retried" if sending else "cancelled")
        with state_errors(state):
            contract_ref, spec = stored.get("contract"), stored.get("backend_spec")
            prompt_ref = stored.get("prompt_ref")
            paths, settings = (stored.get("input"), stored.get("out")), stored.get("settings")
    finally:
        stored.close()
    if spec is None:
        raise BatchError(f"{state} was not started by `sdk batch run`: resume it from Python")
    moved = [("ray_address", ray_address)] if ray_address is not None else []
    backend_spec = spec_from(spec, moved, base_urls=base_urls or [], sending=sending)
    _check_poll(backend_spec.provider, poll_interval)
    if out is not None:
        _withhold_stored(state, out)
    prompt = prompt_named(prompt_ref) if prompt_ref else None
    changed = {key: value for key, value in (limits or {}).items() if value is not None}
    if not changed and ray_address is None:
        return BatchJob.open(
            state,
            contract=contract_named(contract_ref),
            backend=build_backend(backend_spec),
            prompt=prompt,
            poll_interval=poll_interval,
        )
    wanted = JobSettings(**{**settings, **changed})
    backend_spec = with_retries(backend_spec, wanted.retries)
    return BatchJob.create(
        state,
        contract=contract_named(contract_ref),
        backend=build_backend(backend_spec),
        prompt=prompt,
        input=paths[0],
        out=paths[1],
        settings=wanted,
        update=bool(changed),  # (another cluster changes nothing that is asked)
        extra_meta={"backend_spec": backend_spec.to_json()},
        poll_interval=poll_interval,
    )


def _refuse_unwritable(state: Path, doing: str) -> None:
    """`BatchError` if this process cannot write the state file or its folder (a read-only
    file system, another user's folder), before SQLite or the lock file fails on it with a bare
    errno or the Python API's advice."""
    from sdk._sqlite import unwritable_because
    from sdk.batch import BatchError

    why = unwritable_because(state.absolute())
    if why is None:
        return
    raise BatchError(
        f"{state} cannot be {doing} here: {why}; "
        f"`sdk batch status --state {shlex.quote(str(state))}` reads it without writing"
    )


def _withhold_stored(state: Path, out: Output) -> None:
    """An existing job's state file made by a version that kept its servers' credentials
    (`user:password@` in a stored base URL, and in the record of a change of servers): those
    rewritten as this version keeps them (`***@`), said on stderr; nothing done otherwise."""
    from sdk.batch._state import JobState
    from sdk.batch._state import state_errors

    if not state.exists():
        return
    store = JobState(state)
    try:
        with state_errors(state):
            _rewrite_withheld(store, out)
    finally:
        store.close()


def _rewrite_withheld(store: JobState, out: Output) -> None:
    from sdk.batch._lock import RunnerLock

    if not _withheld_changes(store):
        return  # (the usual case: no lock taken)
    with RunnerLock(store):  # read again under it: what another process recorded is kept
        kept = _withheld_changes(store)
        if not kept:
            return
        store.overwrite(kept)
    out.note(
        f"job state: removed the servers' credentials from {store.path} (an older version kept "
        "them): give --base-url again with them to resume or retry",
        style="dim",
    )


def _withheld_changes(store: JobState) -> dict[str, Any]:
    """The stored fields that hold a server's credentials (the spec, the record of changes of
    servers), as this version keeps them; empty when none does."""
    spec, changes = store.get("backend_spec"), store.get("changes")
    stored = {"backend_spec": spec, "changes": changes}
    kept = {
        "backend_spec": _spec_withheld(spec),
        "changes": [_change_withheld(change) for change in changes] if changes else changes,
    }
    return {key: value for key, value in kept.items() if value != stored[key]}


def _spec_withheld(spec: Any) -> Any:
    """A stored spec (or a change's record of one) with its base URLs' credentials withheld."""
    from sdk.providers._endpoint import withheld

    if not isinstance(spec, dict) or not isinstance(spec.get("base_urls"), list):
        return spec
    urls: list[Any] = []
    for url in spec["base_urls"]:
        try:
            urls.append(withheld(url))
        except (TypeError, ValueError):  # not a URL the job could have run on: as it is
            urls.append(url)
    return {**spec, "base_urls": urls}


def _change_withheld(change: Any) -> Any:
    changed = change.get("changed") if isinstance(change, dict) else None
    if not isinstance(changed, dict) or not isinstance(changed.get("backend_spec"), list):
        return change
    pair = [_spec_withheld(spec) for spec in changed["backend_spec"]]
    return {**change, "changed": {**changed, "backend_spec": pair}}


@contextmanager
def _batch_errors(out: Output) -> Iterator[None]:
    """A job's own errors (bad input, another job's state, a job already running) -> one line
    and exit code 2."""
    from sdk.batch import BatchError

    try:
        yield
    except BatchError as error:
        out.error(" ".join(str(error).split()))
        raise typer.Exit(2) from error


def progress_text(progress: JobProgress, seconds: float) -> str:
    """A job's progress in a line: counts, and this run's rate and the time left at that rate
    (items done before a resume are not counted in the rate)."""
    if progress.phase == "indexing":
        return f"indexing: {progress.total:,} items"
    parts = [
        f"{progress.done:,}/{progress.total:,} done",
        f"ok {progress.ok:,}",
        f"failed {progress.failed:,}",
    ]
    if progress.cancelled:
        parts.append(f"cancelled {progress.cancelled:,}")
    parts.append(f"in flight {progress.in_flight:,}")
    ran = progress.done - progress.resumed_from
    if ran > 0 and seconds > 0:
        rate = ran / seconds
        left = progress.total - progress.done
        parts.append(f"{rate:,.1f} items/s")
        parts.append(f"ETA {_duration(left / rate)}")
    return ", ".join(parts)


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


class _Display:
    """Where progress goes: a bar with counts, rate and ETA on a terminal; a plain line every
    `_PLAIN_EVERY` seconds (and at the end) anywhere else."""

    def __init__(self, out: Output) -> None:
        from rich.progress import BarColumn
        from rich.progress import Progress

        self.out = out
        self.started = time.monotonic()
        self.last: JobProgress | None = None
        self.printed = 0.0
        self.shown = ""  # the last plain line printed: the one at the end is not printed twice
        self.bar = (
            Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                "{task.fields[detail]}",
                console=out.err,
            )
            if out.err.is_terminal
            else None
        )
        self.task = self.bar.add_task("batch", total=None, detail="") if self.bar else None

    def __call__(self, progress: JobProgress) -> None:
        self.last = progress
        text = progress_text(progress, time.monotonic() - self.started)
        if self.bar is not None and self.task is not None:
            total = progress.total if progress.phase == "running" else None
            self.bar.update(
                self.task, completed=progress.done, total=total, detail=text,
                description=progress.phase,
            )  # fmt: skip
        elif time.monotonic() - self.printed >= _PLAIN_EVERY:
            self.printed = time.monotonic()
            self._plain(text)

    def __enter__(self) -> _Display:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.bar is not None:
            self.bar.stop()
        elif self.last is not None:
            text = progress_text(self.last, time.monotonic() - self.started)
            if text != self.shown:
                self._plain(text)

    def _plain(self, text: str) -> None:
        self.shown = text
        self.out.note(f"batch: {text}")


def _run_batch(out: Output, job: BatchJob, state: Path, as_json: bool) -> None:
    from sdk.batch import BatchError
    from sdk.errors import ProviderError

    resume = f"run `sdk batch resume --state {shlex.quote(str(state))}` to go on"
    received: list[int] = []
    try:
        with _Display(out) as display, stop_signals() as received:
            summary = job.run(progress=display, progress_every=0.5)
    except KeyboardInterrupt:
        # Ctrl-C, or SIGTERM/SIGHUP taken as it: 128 + the signal's number (130, 143, 129).
        if received:
            out.error(f"stopped by {signal.Signals(received[0]).name}; {resume}")
        else:
            out.error(f"interrupted; {resume}")
        raise typer.Exit(128 + (received[0] if received else signal.SIGINT)) from None
    except BatchError as error:  # bad input, another job's files, another runner
        out.error(" ".join(str(error).split()))
        raise typer.Exit(2) from error
    except ProviderError as error:
        out.error(f"the provider failed: {error}; {resume}")
        raise typer.Exit(1) from error
    finally:
        job.close()
    if as_json:
        out.json(summary.to_json())
    else:
        for line in summary.lines():
            out.line(line)
    if summary.failed or summary.cancelled:
        raise typer.Exit(1)
