"""`sdk eval`: the paired evaluation of a contract's arms on a dataset (`sdk.eval`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Annotated
from typing import Any
from typing import Unpack

import typer

from sdk.cli._app import CacheOption
from sdk.cli._app import CachePathOption
from sdk.cli._app import ContractOption
from sdk.cli._app import Output
from sdk.cli._app import PromptOption
from sdk.cli._app import app
from sdk.cli._app import cache_named
from sdk.cli._app import errors_exit
from sdk.cli._app import prompt_named
from sdk.cli._signals import stop_signals
from sdk.eval.arms import ARMS as EVAL_ARMS
from sdk.workflow.versioning import contract_named

if TYPE_CHECKING:
    from sdk.cache import CacheStats
    from sdk.cache import SQLiteCache
    from sdk.client import StructuredClient
    from sdk.contract import Contract
    from sdk.eval import EvalItem
    from sdk.eval import EvalRun
    from sdk.eval.arms import ArmOptions
    from sdk.eval.runner import EvalOptions

__all__ = ["EvalProgress", "eval_command"]

ALL_ARMS = ",".join(EVAL_ARMS)

DatasetArgument = Annotated[
    Path, typer.Argument(help="JSONL dataset: id, document, expected labels.")
]
ProviderOption = Annotated[
    str,
    typer.Option(
        "--provider", help="embedded[:MODEL.gguf], llamacpp[:URL], anthropic:MODEL or openai:MODEL."
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model: for embedded, smollm2-135m (default), gemma3-270m or a GGUF file.",
    ),
]
ArmsOption = Annotated[
    str, typer.Option("--arms", help="Comma-separated arms (default: all that can run).")
]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", help="Folder for results.json and report.html (resumed if there)."),
]
LimitOption = Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N items.")]
MaxTokensOption = Annotated[int, typer.Option("--max-tokens", min=1)]
RetriesOption = Annotated[
    int, typer.Option("--retries", min=0, help="Invalid-output retries, every arm.")
]
TemperatureOption = Annotated[float | None, typer.Option("--temperature", min=0.0)]
SeedOption = Annotated[int | None, typer.Option("--seed")]
FreshOption = Annotated[bool, typer.Option("--fresh", help="Discard earlier results in --out.")]
ThresholdsOption = Annotated[
    Path | None,
    typer.Option("--thresholds", help="The mass_aware arm's calibrated thresholds (JSON)."),
]
CalibrateOption = Annotated[
    Path | None,
    typer.Option(
        "--calibrate",
        help="Run mass_aware without thresholds and write the ones calibrated on this "
        "labelled data (highest recall at <= 5% false abstention) to this file.",
    ),
]
MinConfidenceOption = Annotated[
    float,
    typer.Option(
        "--min-confidence",
        min=0.0,
        max=1.0,
        help="The min_confidence arm's floor (calibrated when --confidence-calibration is given).",
    ),
]
ConfidenceCalibrationOption = Annotated[
    Path | None,
    typer.Option(
        "--confidence-calibration",
        help="A confidence calibration (JSON, from --calibrate-confidence on another split): the "
        "min_confidence arm uses it, and the report gives every arm's calibration error after it.",
    ),
]
CalibrateConfidenceOption = Annotated[
    Path | None,
    typer.Option(
        "--calibrate-confidence",
        help="Fit a confidence calibration (per JSON type) on this run's values and write it to "
        "this file.",
    ),
]
AnchorsOption = Annotated[
    Path | None,
    typer.Option(
        "--anchors",
        help='The anchored arm\'s anchors (JSON: {"field": {"after": [labels], "not_after": '
        "[labels]}}): where in the document each field's value may be copied from.",
    ),
]
CalibrationMethodOption = Annotated[
    str,
    typer.Option("--calibration-method", help="platt (default) or isotonic."),
]
CalibrateByOption = Annotated[
    str,
    typer.Option(
        "--calibrate-by", help="A curve per JSON type (type, the default) or per field (field)."
    ),
]


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


@app.command(
    "eval",
    short_help="Measure what the constraint costs: a contract's arms on a labelled dataset.",
)
def eval_command(
    dataset: DatasetArgument,
    contract_ref: ContractOption,
    provider_spec: ProviderOption = "embedded",
    model: ModelOption = None,
    arms: ArmsOption = ALL_ARMS,
    out_dir: OutOption = None,
    limit: LimitOption = None,
    max_tokens: MaxTokensOption = 400,
    retries: RetriesOption = 1,
    temperature: TemperatureOption = None,
    seed: SeedOption = None,
    fresh: FreshOption = False,
    thresholds_file: ThresholdsOption = None,
    calibrate_file: CalibrateOption = None,
    min_confidence: MinConfidenceOption = 0.5,
    confidence_calibration: ConfidenceCalibrationOption = None,
    calibrate_confidence: CalibrateConfidenceOption = None,
    calibration_method: CalibrationMethodOption = "platt",
    calibrate_by: CalibrateByOption = "type",
    anchors_file: AnchorsOption = None,
    cache: CacheOption = False,
    cache_path: CachePathOption = None,
    prompt_ref: PromptOption = None,
) -> None:
    """Paired evaluation: the same items through each arm (constrained, unconstrained, widened,
    answer-first, two-phase, and for copied values grounded, evidence-gated, presence-first,
    mass-aware, anchored, guided, min-confidence), scored on accuracy and abstention, with paired
    statistics and each arm's confidence calibration error."""
    from sdk.client import StructuredClient
    from sdk.eval import print_tables

    out = Output()
    fits = _Fits(calibrate_file, calibrate_confidence, calibration_method, calibrate_by)
    with errors_exit(out):
        fits.check(thresholds_file)
        contract = contract_named(contract_ref)
        items = _items(dataset, contract, prompt_ref, limit)
        folder = out_dir if out_dir is not None else Path("eval-results") / dataset.stem
        store = cache_named(cache, cache_path)
        before = store.stats() if store is not None else None
        provider = _eval_provider(provider_spec, model)
        client = StructuredClient(provider, retries=retries, cache=store)
        run = _run_with_progress(
            out,
            client,
            items,
            contract,
            folder,
            arms=[arm.strip() for arm in arms.split(",") if arm.strip()],
            max_tokens=max_tokens,
            options=_sampling(temperature, seed),
            fresh=fresh,
            dataset=str(dataset),
            **_arm_options(
                thresholds_file,
                calibrate_file,
                min_confidence,
                confidence_calibration,
                anchors_file,
            ),
        )
        fits.save(run, folder)
    print_tables(out.out, run)
    fits.say_written(out, folder)
    if store is not None and before is not None:
        out.line(_cache_line(store, before))


def _sampling(temperature: float | None, seed: int | None) -> dict[str, Any]:
    """The sampling options given on the command line (the others: the provider's own)."""
    sampling = {"temperature": temperature, "seed": seed}
    return {name: value for name, value in sampling.items() if value is not None}


def _items(
    dataset: Path, contract: type[Contract], prompt_ref: str | None, limit: int | None
) -> list[EvalItem]:
    """The dataset's first `limit` items, asked with the prompt template `prompt_ref` names."""
    from sdk.eval import load_dataset

    prompt = prompt_named(prompt_ref) if prompt_ref is not None else None
    return load_dataset(dataset, contract, prompt=prompt)[:limit]


def _arm_options(
    thresholds_file: Path | None,
    calibrate_file: Path | None,
    min_confidence: float,
    confidence_calibration: Path | None,
    anchors_file: Path | None,
) -> ArmOptions:
    """What the abstaining arms are tuned by, read from the files the options name."""
    from sdk.abstention import Thresholds
    from sdk.calibration import Calibration
    from sdk.schema.grounding import load_anchors

    thresholds = Thresholds.load(thresholds_file) if thresholds_file is not None else None
    calibration = (
        Calibration.load(confidence_calibration) if confidence_calibration is not None else None
    )
    return {
        "thresholds": thresholds,
        "calibrating": calibrate_file is not None,
        "min_confidence": min_confidence,
        "confidence_calibration": calibration,
        "anchors": load_anchors(anchors_file) if anchors_file is not None else None,
    }


@dataclass(frozen=True, slots=True)
class _Fits:
    """The calibrations a run is asked to fit from its outcomes, and where to write them."""

    thresholds: Path | None
    """The mass-aware arm's thresholds (`--calibrate FILE`)."""
    confidence: Path | None
    """The confidence calibration (`--calibrate-confidence FILE`)."""
    method: str
    """How the confidence calibration is fitted: platt or isotonic."""
    by: str
    """What it is fitted per: type or field."""

    def check(self, thresholds_file: Path | None) -> None:
        """The options that cannot go together, or take one of a few words, refused before a
        run."""
        if thresholds_file is not None and self.thresholds is not None:
            raise ValueError("--calibrate runs without thresholds: do not pass --thresholds too")
        if self.method not in ("platt", "isotonic"):
            raise ValueError(f"--calibration-method is platt or isotonic, not {self.method!r}")
        if self.by not in ("type", "field"):
            raise ValueError(f"--calibrate-by is type or field, not {self.by!r}")

    def save(self, run: EvalRun, folder: Path) -> None:
        """What a run writes besides its results: the report, the accuracy plot, and the
        thresholds and confidence calibration it was asked to fit."""
        from sdk._files import write_atomic
        from sdk.calibration import Grouping
        from sdk.calibration import Method
        from sdk.eval.calibration import calibrate_confidence_run
        from sdk.eval.calibration import calibrate_run
        from sdk.eval.report import ACCURACY_FILE
        from sdk.eval.report import REPORT_FILE
        from sdk.eval.report import accuracy_svg
        from sdk.eval.report import html_report
        from sdk.eval.runner import load_results

        # The report covers every arm in the folder's results, also those a narrower rerun
        # (`--arms`) kept from before.
        whole = load_results(folder)
        write_atomic(folder / REPORT_FILE, html_report(whole), private=True)
        if whole.metrics:
            write_atomic(folder / ACCURACY_FILE, accuracy_svg(whole), private=True)
        if self.thresholds is not None:
            calibrate_run(run).save(self.thresholds)
        if self.confidence is not None:
            method: Method = "isotonic" if self.method == "isotonic" else "platt"
            by: Grouping = "field" if self.by == "field" else "type"
            calibrate_confidence_run(run, method=method, by=by).save(self.confidence)

    def say_written(self, out: Output, folder: Path) -> None:
        """The files the run wrote, one line each."""
        from sdk.eval.report import REPORT_FILE
        from sdk.eval.runner import RESULTS_FILE

        out.line(f"results: {folder / RESULTS_FILE}")
        out.line(f"report:  {folder / REPORT_FILE}")
        if self.thresholds is not None:
            out.line(f"thresholds: {self.thresholds}")
        if self.confidence is not None:
            out.line(f"confidence calibration: {self.confidence}")


def _run_with_progress(
    console: Output,
    client: StructuredClient,
    items: list[EvalItem],
    contract: type[Contract],
    folder: Path,
    **settings: Unpack[EvalOptions],
) -> EvalRun:
    """`run_eval` behind a progress bar on stderr; the failures a user can act on (a changed
    dataset, a provider down, Ctrl-C) exit with one line saying how to go on."""
    from rich.progress import BarColumn
    from rich.progress import MofNCompleteColumn
    from rich.progress import Progress
    from rich.progress import TimeElapsedColumn
    from rich.progress import TimeRemainingColumn

    from sdk.errors import ProviderError
    from sdk.eval import ResultsBusy
    from sdk.eval import ResumeMismatch
    from sdk.eval import run_eval

    columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    shown = Progress("[progress.description]{task.description}", *columns, console=console.err)
    with shown as bar, stop_signals() as received:
        progress = EvalProgress(bar, f"eval {contract.__name__}")
        try:
            return run_eval(items, contract, client, out=folder, progress=progress, **settings)
        except (ResumeMismatch, ResultsBusy) as error:
            bar.remove_task(progress.task)  # nothing ran: no bar left behind the error
            starting_over = " (or pass --fresh)" if isinstance(error, ResumeMismatch) else ""
            console.error(f"{error}{starting_over}")
            raise typer.Exit(2) from error
        except ProviderError as error:
            console.error(f"the provider failed: {error}; run the same command again to resume")
            raise typer.Exit(1) from error
        except KeyboardInterrupt:
            # Ctrl-C, or SIGTERM/SIGHUP taken as it: 128 + the signal's number (130, 143, 129).
            why = f"stopped by {signal.Signals(received[0]).name}" if received else "interrupted"
            console.error(f"{why}; run the same command again to resume")
            raise typer.Exit(128 + (received[0] if received else signal.SIGINT)) from None
        finally:
            client.close()


def _cache_line(store: SQLiteCache, before: CacheStats) -> str:
    """How many of this run's calls the response cache answered."""
    after = store.stats()
    hits, misses = after.hits - before.hits, after.misses - before.misses
    return f"cache:   {hits:,} of {hits + misses:,} calls answered from {store.path}"


def _eval_provider(spec: str, model: str | None = None) -> Any:
    """The provider a `--provider` spec names (imported only when asked for); `--model`
    names the model where the spec does not."""
    kind, _, argument = spec.partition(":")
    if model is not None:
        if argument:
            raise ValueError(
                f"--model {model!r} and --provider {_shown_spec(spec)!r} both name a model"
            )
        argument = model
    if kind == "embedded":
        from sdk.providers.embedded import EmbeddedProvider

        return EmbeddedProvider(argument or None)
    if kind == "llamacpp":
        from sdk.providers.llamacpp import LlamaCppProvider

        return LlamaCppProvider(argument) if argument else LlamaCppProvider()
    if kind in ("anthropic", "openai") and argument:
        from sdk.providers._environment import environment_client

        if kind == "anthropic":
            from sdk.providers.anthropic import AnthropicProvider

            return AnthropicProvider(environment_client("anthropic"), model=argument)
        from sdk.providers.openai import OpenAIResponsesProvider

        return OpenAIResponsesProvider(environment_client("openai"), model=argument)
    raise ValueError(
        f"--provider takes embedded[:MODEL.gguf], llamacpp[:URL], anthropic:MODEL or "
        f"openai:MODEL, not {_shown_spec(spec)!r}"
    )


def _shown_spec(spec: str) -> str:
    """A `--provider` spec as a message may print it: a URL in it with its credentials withheld
    (`user:password@` and a credential in its query, as a batch job's state keeps them)."""
    from sdk.providers._endpoint import WITHHELD
    from sdk.providers._endpoint import withheld

    kind, colon, argument = spec.partition(":")
    try:
        return kind + colon + withheld(argument)
    except (TypeError, ValueError):  # not a URL (a model's name), or one that hides its host
        return kind + colon + WITHHELD if "@" in argument or "?" in argument else spec
