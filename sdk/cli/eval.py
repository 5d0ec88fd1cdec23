"""`sdk eval`: the paired evaluation of a contract's arms on a dataset (`sdk.eval`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sdk.cli._app import Output, app, contract_named, errors_exit
from sdk.eval.arms import ARMS as EVAL_ARMS

__all__ = ["eval_command"]

@app.command(
    "eval",
    short_help="Measure what the constraint costs: a contract's arms on a labelled dataset.",
)
def eval_command(
    dataset: Annotated[Path, typer.Argument(help="JSONL dataset: id, document, expected labels.")],
    contract_ref: Annotated[
        str, typer.Option("--contract", help="The contract, as MODULE:NAME (contracts:Decision).")
    ],
    provider_spec: Annotated[
        str,
        typer.Option(
            "--provider",
            help="embedded[:MODEL.gguf], llamacpp[:URL], anthropic:MODEL or openai:MODEL.",
        ),
    ] = "embedded",
    arms: Annotated[
        str,
        typer.Option("--arms", help="Comma-separated arms (default: all that can run)."),
    ] = ",".join(EVAL_ARMS),
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for results.json and report.html (resumed if there)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N items.")
    ] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1)] = 400,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="Invalid-output retries, every arm.")
    ] = 1,
    temperature: Annotated[float | None, typer.Option("--temperature", min=0.0)] = None,
    seed: Annotated[int | None, typer.Option("--seed")] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Discard earlier results in --out.")
    ] = False,
    thresholds_file: Annotated[
        Path | None,
        typer.Option("--thresholds", help="The mass_aware arm's calibrated thresholds (JSON)."),
    ] = None,
    calibrate_file: Annotated[
        Path | None,
        typer.Option(
            "--calibrate",
            help="Run mass_aware without thresholds and write the ones calibrated on this "
            "labelled data (highest recall at <= 5% false abstention) to this file.",
        ),
    ] = None,
) -> None:
    """Paired evaluation: the same items through each arm (constrained, unconstrained, widened,
    answer-first, two-phase, and for copied values grounded, evidence-gated, presence-first,
    mass-aware), scored on accuracy and abstention, with paired statistics."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sdk.abstention import Thresholds
    from sdk.client import StructuredClient
    from sdk.errors import ProviderError
    from sdk.eval import (
        EvalItem,
        ResumeMismatch,
        html_report,
        load_dataset,
        run_eval,
        terminal_tables,
    )
    from sdk.eval.calibration import calibrate_run
    from sdk.eval.report import ACCURACY_FILE, REPORT_FILE, accuracy_svg
    from sdk.eval.runner import RESULTS_FILE

    out = Output()
    with errors_exit(out):
        if thresholds_file is not None and calibrate_file is not None:
            raise ValueError("--calibrate runs without thresholds: do not pass --thresholds too")
        thresholds = Thresholds.load(thresholds_file) if thresholds_file is not None else None
        contract = contract_named(contract_ref)
        items: list[EvalItem] = load_dataset(dataset, contract)[:limit]
        chosen = [arm.strip() for arm in arms.split(",") if arm.strip()]
        folder = out_dir if out_dir is not None else Path("eval-results") / dataset.stem
        options: dict[str, Any] = {}
        if temperature is not None:
            options["temperature"] = temperature
        if seed is not None:
            options["seed"] = seed
        client = StructuredClient(_eval_provider(provider_spec), retries=retries)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=out.err,
        ) as bar:
            task = bar.add_task(f"eval {contract.__name__}", total=None)

            def progress(done: int, total: int, outcome: Any) -> None:
                label = f"{outcome.arm} {outcome.item}" if outcome is not None else "starting"
                bar.update(task, completed=done, total=total, description=label)

            try:
                run = run_eval(
                    items,
                    contract,
                    client,
                    arms=chosen,
                    out=folder,
                    max_tokens=max_tokens,
                    options=options,
                    progress=progress,
                    fresh=fresh,
                    dataset=str(dataset),
                    thresholds=thresholds,
                    calibrating=calibrate_file is not None,
                )
            except ResumeMismatch as error:
                out.error(f"{error} (or pass --fresh)")
                raise typer.Exit(2) from error
            except ProviderError as error:
                out.error(f"the provider failed: {error}; run the same command again to resume")
                raise typer.Exit(1) from error
            except KeyboardInterrupt:
                out.error("interrupted; run the same command again to resume")
                raise typer.Exit(130) from None
            finally:
                client.close()
        from sdk._files import write_atomic

        write_atomic(folder / REPORT_FILE, html_report(run))
        if run.metrics:
            write_atomic(folder / ACCURACY_FILE, accuracy_svg(run))
        if calibrate_file is not None:
            calibrate_run(run).save(calibrate_file)
    for table in terminal_tables(run):
        out.out.print(table)
    out.line(f"results: {folder / RESULTS_FILE}")
    out.line(f"report:  {folder / REPORT_FILE}")
    if calibrate_file is not None:
        out.line(f"thresholds: {calibrate_file}")


def _eval_provider(spec: str) -> Any:
    """The provider a `--provider` spec names (imported only when asked for)."""
    kind, _, argument = spec.partition(":")
    if kind == "embedded":
        from sdk.providers.embedded import EmbeddedProvider

        return EmbeddedProvider(argument or None)
    if kind == "llamacpp":
        from sdk.providers.llamacpp import LlamaCppProvider

        return LlamaCppProvider(argument) if argument else LlamaCppProvider()
    if kind in ("anthropic", "openai") and argument:
        if kind == "anthropic":
            import anthropic

            from sdk.providers.anthropic import AnthropicProvider

            return AnthropicProvider(anthropic.Anthropic(), model=argument)
        import openai

        from sdk.providers.openai import OpenAIResponsesProvider

        return OpenAIResponsesProvider(openai.OpenAI(), model=argument)
    raise ValueError(
        f"--provider takes embedded[:MODEL.gguf], llamacpp[:URL], anthropic:MODEL or "
        f"openai:MODEL, not {spec!r}"
    )
