"""`sdk eval`: the paired evaluation of a contract's arms on a dataset (`sdk.eval`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sdk.cli._app import Output, app, contract_named, errors_exit
from sdk.eval.arms import ARMS as EVAL_ARMS

__all__ = ["EvalProgress", "eval_command"]


class EvalProgress:
    """The eval's progress bar (a rich `Progress`): it starts where a resumed run is (the
    outcomes kept from before), and its elapsed time, rate and time left count this run's
    outcomes only."""

    def __init__(self, bar: Any, title: str) -> None:
        self.bar = bar
        self.task = bar.add_task(title, total=None)

    def __call__(self, done: int, total: int, outcome: Any) -> None:
        if outcome is None:  # the start: what earlier runs did is where the bar begins
            self.bar.reset(self.task, total=total, completed=done, description="starting")
            return
        label = f"{outcome.arm} {outcome.item}"
        self.bar.update(self.task, completed=done, total=total, description=label)

@app.command("eval")
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
) -> None:
    """Paired evaluation: the same items through each arm (constrained, unconstrained, widened,
    answer-first, two-phase), scored on accuracy and abstention, with paired statistics."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from sdk.client import StructuredClient
    from sdk.errors import ProviderError
    from sdk.eval import (
        EvalItem,
        ResumeMismatch,
        html_report,
        load_dataset,
        print_tables,
        run_eval,
    )
    from sdk.eval.report import ACCURACY_FILE, REPORT_FILE, accuracy_svg
    from sdk.eval.runner import RESULTS_FILE

    out = Output()
    with errors_exit(out):
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
            TimeRemainingColumn(),
            console=out.err,
        ) as bar:
            progress = EvalProgress(bar, f"eval {contract.__name__}")
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
    print_tables(out.out, run)
    out.line(f"results: {folder / RESULTS_FILE}")
    out.line(f"report:  {folder / REPORT_FILE}")


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
