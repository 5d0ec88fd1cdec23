"""`sdk batch run|resume|status|cancel`: resumable jobs over large inputs (`sdk.batch`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from sdk.cli._app import JsonOption, Output, app, contract_named, errors_exit

__all__ = ["batch_app"]

batch_app = typer.Typer(
    help="Run a contract over a large input (provider batch APIs or local servers); resumable.",
    no_args_is_help=True,
)
app.add_typer(
    batch_app,
    name="batch",
    short_help="Run a contract over a large JSONL input as a resumable job (run, status, ...).",
)

StateOption = Annotated[
    Path, typer.Option("--state", help="The job's state file (SQLite), as `run` made it.")
]
PollOption = Annotated[
    float,
    typer.Option("--poll-interval", min=0.0, help="Seconds between status checks (grows)."),
]


@batch_app.command("run")
def batch_run_command(
    contract_ref: Annotated[
        str, typer.Option("--contract", help="The contract, as MODULE:NAME (contracts:Decision).")
    ],
    provider: Annotated[
        str,
        typer.Option(
            "--provider",
            help="anthropic, openai (Responses), openai_chat; or llamacpp, vllm, ollama "
            "(local servers, with --base-url).",
        ),
    ],
    input_path: Annotated[
        Path, typer.Option("--input", help="JSONL: id, prompt/source/messages, options.")
    ],
    out: Annotated[Path, typer.Option("--out", help="JSONL results, one line per item.")],
    state: Annotated[
        Path | None, typer.Option("--state", help="State file (default: OUT.job.db).")
    ] = None,
    model: Annotated[str | None, typer.Option("--model")] = None,
    base_urls: Annotated[
        list[str] | None,
        typer.Option("--base-url", help="A local server; repeat for several."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Local: in flight per server.")
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option("--max-requests", min=1, help="Hosted: requests per batch.")
    ] = None,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="Invalid-output retries per item.")
    ] = 2,
    resubmits: Annotated[
        int, typer.Option("--resubmits", min=0, help="Resubmits of errored/expired items.")
    ] = 3,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1)] = 4096,
    poll_interval: PollOption = 10.0,
    as_json: JsonOption = False,
) -> None:
    """Start a job (or continue the same one, if its state file exists) and run it to the end.

    Exit code 0: every item done and valid; 1: done, some items failed (listed); 2: the job
    could not run; 130: interrupted (run `sdk batch resume` to go on).
    """
    from sdk.batch import BatchJob, JobSettings
    from sdk.batch._setup import BackendSpec, build_backend

    out_ = Output()
    state_path = state if state is not None else out.with_name(out.name + ".job.db")
    with errors_exit(out_), _batch_errors(out_):
        contract = contract_named(contract_ref)
        spec = BackendSpec(
            provider,
            model=model,
            base_urls=list(base_urls or []),
            concurrency=concurrency,
            max_requests=max_requests,
            retries=retries,
        )
        job = BatchJob.create(
            state_path,
            contract=contract,
            backend=build_backend(spec),
            input=input_path,
            out=out,
            settings=JobSettings(retries=retries, resubmits=resubmits, max_tokens=max_tokens),
            poll_interval=poll_interval,
        )
        job.state.put("backend_spec", spec.to_json())
        out_.err.print(f"job state: {state_path}", style="dim")
    _run_batch(out_, job, as_json)


@batch_app.command("resume")
def batch_resume_command(
    state: StateOption, poll_interval: PollOption = 10.0, as_json: JsonOption = False
) -> None:
    """Go on with a job after a crash or an interruption: nothing lost, nothing sent twice."""
    out_ = Output()
    with errors_exit(out_), _batch_errors(out_):
        job = _open_job(state, poll_interval)
    _run_batch(out_, job, as_json)


@batch_app.command("status")
def batch_status_command(state: StateOption, as_json: JsonOption = False) -> None:
    """A job's counts by outcome, its tokens, and the items that failed (from the state file)."""
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
    """Cancel a job's open batches and send nothing more; `resume` then collects what finished
    and marks the rest cancelled."""
    out_ = Output()
    with errors_exit(out_), _batch_errors(out_):
        job = _open_job(state, 10.0)
        try:
            summary = job.cancel()
        finally:
            job.close()
    for line in summary.lines():
        out_.line(line)
    out_.line("cancel requested: run `sdk batch resume` to collect and close the job", "dim")


def _open_job(state: Path, poll_interval: float) -> Any:
    from sdk.batch import BatchError, BatchJob
    from sdk.batch._setup import build_backend, spec_from
    from sdk.batch._state import JobState

    if not state.is_file():
        raise BatchError(f"{state}: no such job state file")
    stored = JobState(state)
    try:
        contract_ref, spec = stored.get("contract"), stored.get("backend_spec")
    finally:
        stored.close()
    if spec is None:
        raise BatchError(f"{state} was not started by `sdk batch run`: resume it from Python")
    return BatchJob.open(
        state,
        contract=contract_named(contract_ref),
        backend=build_backend(spec_from(spec)),
        poll_interval=poll_interval,
    )


@contextmanager
def _batch_errors(out: Output) -> Iterator[None]:
    """A job's own errors (bad input, another job's state) -> a message and exit code 2."""
    from sdk.batch import BatchError

    try:
        yield
    except BatchError as error:
        out.error(" ".join(str(error).split()))
        raise typer.Exit(2) from error


def _run_batch(out: Output, job: Any, as_json: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from sdk.batch import BatchError
    from sdk.errors import ProviderError

    try:
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            "{task.fields[detail]}",
            TimeRemainingColumn(),
            console=out.err,
        ) as bar:
            task = bar.add_task("batch", total=None, detail="indexing")

            def progress(state: Any) -> None:
                detail = f"ok {state.ok:,}  failed {state.failed:,}  in flight {state.in_flight:,}"
                bar.update(task, completed=state.done, total=state.total, detail=detail)

            summary = job.run(progress=progress)
    except KeyboardInterrupt:
        out.error("interrupted; run `sdk batch resume --state ...` to go on")
        raise typer.Exit(130) from None
    except BatchError as error:  # bad input, another job's files
        out.error(" ".join(str(error).split()))
        raise typer.Exit(2) from error
    except ProviderError as error:
        out.error(f"the provider failed: {error}; run `sdk batch resume` to go on")
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
