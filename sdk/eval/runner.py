"""Running a paired evaluation: every item through every arm, resumable, and its summary.

    from sdk import StructuredClient
    from sdk.eval import load_dataset, run_eval
    from sdk.providers import EmbeddedProvider
    from contracts import Decision

    items = load_dataset("examples/data/eval/decisions.jsonl", Decision)
    run = run_eval(items, Decision, StructuredClient(EmbeddedProvider(), retries=1), out="eval-out")
    run.metrics["constrained"].accuracy, run.pairs[0].difference

Items go one at a time through all arms (so an interrupted run still has paired data), and
`results.json` in `out` is rewritten atomically after each outcome. Run it again with the same
settings and it skips what is done: an outcome is reused when its item is unchanged (same
digest); a changed or new item, or a new arm, is run. Settings that change what an outcome means
(the contract's fingerprint, the provider and model, `max_tokens`, the sampling options, the
retries) must match, or `ResumeMismatch` says which one differs (start over with another `out`,
or `fresh=True`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import Unpack
from typing import cast

from sdk._files import held_lock
from sdk._files import private_folder
from sdk._files import read_regular_text
from sdk._files import write_atomic
from sdk._values.declared import check_keywords
from sdk._values.declared import keywords_of
from sdk.calibration import Calibration
from sdk.client import StructuredClient
from sdk.contract import Contract
from sdk.contract.derived import escape_members
from sdk.contract.derived import widen
from sdk.engine.setup import check_every_model
from sdk.eval.arms import ARMS
from sdk.eval.arms import DEFAULT_MIN_CONFIDENCE
from sdk.eval.arms import ArmOptions
from sdk.eval.arms import ArmUnavailable
from sdk.eval.arms import PreparedArm
from sdk.eval.arms import prepare_arm
from sdk.eval.arms import run_arm
from sdk.eval.dataset import EvalItem
from sdk.eval.metrics import ArmMetrics
from sdk.eval.metrics import Outcome
from sdk.eval.metrics import arm_metrics
from sdk.eval.stats import PairedDifference
from sdk.eval.stats import paired_bootstrap
from sdk.schema.canonical import schema_info

__all__ = [
    "RESULTS_FILE",
    "EvalOptions",
    "EvalRun",
    "Pair",
    "ResumeMismatch",
    "load_results",
    "run_eval",
    "summarize",
]

RESULTS_FILE = "results.json"
FORMAT = "sdk-eval/1"

Progress = Callable[[int, int, Outcome | None], None]
"""Called as `(done, total, outcome)`: once before the first call, then after each outcome."""


class ResumeMismatch(ValueError):
    """The results in `out` came from other settings, so they cannot be resumed."""


class ResultsBusy(ValueError):
    """Another run is writing the results in `out`: two runs there would each write the file
    whole from what they hold, and one would lose the other's outcomes."""


@dataclass(frozen=True, slots=True)
class Pair:
    """Two arms compared on the items both ran: accuracy of `b` minus accuracy of `a`."""

    a: str
    b: str
    result: PairedDifference

    def to_json(self) -> dict[str, Any]:
        difference = self.result.difference
        test = self.result.mcnemar
        return {
            "a": self.a,
            "b": self.b,
            "items": self.result.items,
            "difference": difference.estimate,
            "low": difference.low,
            "high": difference.high,
            "only_a": test.only_a,
            "only_b": test.only_b,
            "p_value": test.p_value,
        }


@dataclass
class EvalRun:
    """A run: its settings, its items, every outcome, and (when complete) the summary."""

    config: dict[str, Any]
    items: list[EvalItem]
    outcomes: dict[tuple[str, str], Outcome] = field(default_factory=dict)
    """By (arm, item id)."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """Arms that could not run, with the reason."""
    metrics: dict[str, ArmMetrics] = field(default_factory=dict)
    pairs: list[Pair] = field(default_factory=list)
    retained: list[dict[str, Any]] = field(default_factory=list)
    """Outcomes (JSON) found in `out` for arms or items outside this run: written back as they
    were, so a narrower rerun (`--arms`, `--limit`) loses nothing."""
    retained_items: list[dict[str, Any]] = field(default_factory=list)
    """The items (JSON) those outcomes are about, when not in this run."""

    @property
    def arms(self) -> list[str]:
        """The arms that ran, in report order."""
        requested = list(self.config.get("arms", ARMS))
        return [arm for arm in requested if arm not in self.unavailable]

    @property
    def confidence_calibration(self) -> Calibration | None:
        """The confidence calibration the run was given (kept in its config)."""
        data = self.config.get("confidence_calibration")
        return Calibration.from_json(data) if isinstance(data, dict) else None

    def outcomes_of(self, arm: str) -> list[Outcome]:
        """The arm's outcomes in dataset order."""
        return [self.outcomes[arm, i.id] for i in self.items if (arm, i.id) in self.outcomes]

    @property
    def complete(self) -> bool:
        return all((arm, item.id) in self.outcomes for arm in self.arms for item in self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "config": self.config,
            "complete": self.complete,
            "unavailable": self.unavailable,
            "metrics": {arm: m.to_json() for arm, m in self.metrics.items()},
            "pairs": [pair.to_json() for pair in self.pairs],
            "items": [item.to_json() for item in self.items] + self.retained_items,
            "outcomes": [
                self.outcomes[arm, item.id].to_json()
                for arm in self.arms
                for item in self.items
                if (arm, item.id) in self.outcomes
            ]
            + self.retained,
        }

    def save(self, out: str | Path) -> Path:
        """Write `results.json` in `out`, atomically."""
        path = Path(out) / RESULTS_FILE
        write_atomic(
            path, json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n", private=True
        )
        return path


class EvalOptions(ArmOptions, total=False):
    """How a run is made, beside its items, contract and client: keywords of `run_eval`, each
    optional (with `ArmOptions`, what the abstaining arms are tuned by)."""

    arms: Sequence[str]
    """The arms to run (default all, `ARMS`)."""
    max_tokens: int | None
    """The output limit of every call (the client's default when None)."""
    options: Mapping[str, Any] | None
    """The sampling options every arm's call gets (`temperature`, `seed`, ...)."""
    fresh: bool
    """Start over in `out` instead of resuming the run found there (default False)."""
    dataset: str
    """The dataset's name, for the report."""
    resamples: int
    """The paired bootstrap's resamples (default 10,000)."""
    seed: int
    """The paired bootstrap's seed (default 0)."""


def run_eval(
    items: Sequence[EvalItem],
    contract: type[Contract],
    client: StructuredClient,
    *,
    out: str | Path | None = None,
    progress: Progress | None = None,
    **settings: Unpack[EvalOptions],
) -> EvalRun:
    """Run every item through every arm (module docstring); the summarized `EvalRun`.

    With `out`, results are saved as they come and an earlier run there is resumed unless
    `fresh`; `progress` is told of each outcome. `settings` (`EvalOptions`): the arms, the
    calls' `max_tokens` and sampling `options`, and the abstaining arms' tuning: `thresholds`
    are the mass-aware arm's; `calibrating` runs that arm without any, recording the signals
    `sdk.eval.calibration` calibrates them on. `min_confidence` is the `min_confidence` arm's
    floor; `confidence_calibration` maps that arm's confidence (and, in the metrics, every
    arm's calibrated calibration error) to the probability of being right.
    """
    check_keywords(settings, EvalOptions, "run_eval()")
    _check_request(items, settings.get("arms", ARMS))
    calibration = settings.get("confidence_calibration")
    if calibration is not None:  # (every arm's calibrated ECE reads its values through it)
        info = schema_info(contract)
        check_every_model(calibration.check_fitted, info.name, info.fingerprint, client.provider)
    run = EvalRun(_config(items, contract, client, settings), list(items))
    with _writing(out):
        if out is not None and not settings.get("fresh", False):
            _resume(run, Path(out))
        # Each arm reads its own of the settings (`ArmOptions`) and passes over the others.
        prepared = _prepared_arms(run, contract, client, settings)
        recorder = _Recorder(run, out, progress)
        escapes = escape_members(widen(contract))
        max_tokens, options = settings.get("max_tokens"), settings.get("options")
        recorder.started(prepared)
        for item in run.items:
            for arm in prepared:
                if (arm.name, item.id) in run.outcomes:
                    continue
                outcome = run_arm(
                    arm, client, item, escapes=escapes, max_tokens=max_tokens, options=options
                )
                recorder.record(arm, item, outcome)
        summarize(run, resamples=settings.get("resamples", 10_000), seed=settings.get("seed", 0))
        if out is not None:
            run.save(out)
    return run


@contextlib.contextmanager
def _writing(out: str | Path | None) -> Iterator[None]:
    """Hold `out` (made if missing, owner-only; a file there, or a folder this process cannot
    write, refused before anything is asked) for one run: its folder's operating-system lock
    (`sdk._files.held_lock`), released when the run ends or its process dies; another run there
    is refused at once (`ResultsBusy`). Held, the copies of `results.json` a killed run left
    half-written are removed (no other writer of them can be at work)."""
    if out is None:
        yield
        return
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder (the results' folder is asked for)")
    private_folder(folder)
    if not os.access(folder, os.W_OK):  # (known before the first call is paid for)
        raise PermissionError(f"{folder}: the results cannot be written there (not writable)")
    busy = (
        f"{folder} is in use by another sdk eval run (its results are written whole at each "
        "outcome, so two runs would lose each other's): wait for it, or use another output "
        "folder"
    )
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(held_lock(folder, wait=0.0, busy=busy))
        except TimeoutError as error:  # (the lock's alone: the run's own errors pass as they are)
            raise ResultsBusy(str(error)) from None
        for left in folder.glob(f".{RESULTS_FILE}.*.tmp"):
            with contextlib.suppress(OSError):
                left.unlink()
        yield


def _check_request(items: Sequence[EvalItem], arms: Sequence[str]) -> None:
    """`ValueError` for an arm the eval does not have, or items whose ids repeat."""
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown or not arms:
        raise ValueError(f"unknown arm(s) {', '.join(unknown) or '(none given)'}; arms: {ARMS}")
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError("item ids must be unique: outcomes are keyed by them")


class _Recorder:
    """Keeps a run's outcomes, its results file (with `out`) and its progress callback up to
    date as outcomes come."""

    def __init__(self, run: EvalRun, out: str | Path | None, progress: Progress | None) -> None:
        self.run, self.out, self.progress = run, out, progress
        self.done = self.total = 0

    def started(self, arms: list[PreparedArm]) -> None:
        """Count what the run has to do and what a resumed run has done already."""
        outcomes = self.run.outcomes
        self.total = len(arms) * len(self.run.items)
        self.done = sum(1 for a in arms for item in self.run.items if (a.name, item.id) in outcomes)
        if self.progress is not None:
            self.progress(self.done, self.total, None)

    def record(self, arm: PreparedArm, item: EvalItem, outcome: Outcome) -> None:
        if item.template is not None:  # the row names the template it was asked with
            outcome = replace(outcome, prompt=item.template.info().to_json())
        self.run.outcomes[arm.name, item.id] = outcome
        self.done += 1
        if self.out is not None:
            self.run.save(self.out)
        if self.progress is not None:
            self.progress(self.done, self.total, outcome)


def _config(
    items: Sequence[EvalItem],
    contract: type[Contract],
    client: StructuredClient,
    settings: EvalOptions,
) -> dict[str, Any]:
    """What a run is made with (`EvalRun.config`, saved with its results)."""
    info = schema_info(contract)
    max_tokens, options = settings.get("max_tokens"), settings.get("options")
    thresholds = settings.get("thresholds")
    calibration = settings.get("confidence_calibration")
    anchors = settings.get("anchors")
    return {
        "dataset": settings.get("dataset", ""),
        "contract": {"name": info.name, "version": info.version, "fingerprint": info.fingerprint},
        "provider": client.provider.name,
        "model": client.provider.model,
        "arms": [arm for arm in ARMS if arm in settings.get("arms", ARMS)],
        "max_tokens": max_tokens if max_tokens is not None else client.max_tokens,
        # As JSON keeps them (a tuple is a list there), so a rerun compares by value.
        "options": _as_json(dict(options or {})),
        "retries": client.retries,
        "thresholds": {p: t.threshold for p, t in thresholds.fields.items()}
        if thresholds is not None
        else None,
        "min_confidence": settings.get("min_confidence", DEFAULT_MIN_CONFIDENCE),
        "confidence_calibration": calibration.to_json() if calibration is not None else None,
        "anchors": {name: anchor.to_json() for name, anchor in anchors.items()} or None
        if anchors
        else None,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        # The prompt template the items are asked with (each item names it: one per dataset).
        "prompt": next(
            (i.template.info().to_json() for i in items if i.template is not None), None
        ),
    }


def _prepared_arms(
    run: EvalRun, contract: type[Contract], client: StructuredClient, options: ArmOptions
) -> list[PreparedArm]:
    """The run's arms ready to run; one that cannot run here is noted in `run.unavailable`.
    `options` may be the run's whole `EvalOptions`: only the arms' own keys are passed on."""
    arm_keys = keywords_of(ArmOptions)
    own = cast(ArmOptions, {k: v for k, v in options.items() if k in arm_keys})
    prepared: list[PreparedArm] = []
    for name in run.config["arms"]:
        try:
            prepared.append(prepare_arm(name, contract, client, **own))
        except ArmUnavailable as reason:
            run.unavailable[name] = str(reason)
    return prepared


def summarize(run: EvalRun, *, resamples: int = 10_000, seed: int = 0) -> EvalRun:
    """Fill in the run's per-arm metrics and its pairwise comparisons (in place; returned)."""
    arms = [arm for arm in run.arms if run.outcomes_of(arm)]
    calibration = run.confidence_calibration
    run.metrics = {
        arm: arm_metrics(arm, run.outcomes_of(arm), calibration=calibration) for arm in arms
    }
    run.pairs = []
    for index, a in enumerate(arms):
        for b in arms[index + 1 :]:
            both = [
                item.id
                for item in run.items
                if (a, item.id) in run.outcomes and (b, item.id) in run.outcomes
            ]
            result = paired_bootstrap(
                [run.outcomes[a, i].correct for i in both],
                [run.outcomes[b, i].correct for i in both],
                resamples=resamples,
                seed=seed,
            )
            run.pairs.append(Pair(a, b, result))
    return run


def load_results(path: str | Path, *, resamples: int = 10_000, seed: int = 0) -> EvalRun:
    """A run read back from `results.json` (a file, or the folder holding it), summarized; a
    `ValueError` naming the file where it is not one (a file edited by hand)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    data = json.loads(read_regular_text(path))  # (a named pipe is refused, never waited on)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not an sdk eval results file ({FORMAT})")
    try:
        return _loaded(data, resamples=resamples, seed=seed)
    except _MISSHAPEN as error:
        raise ValueError(f"{path} is not an sdk eval results file ({_misshapen(error)})") from None


# What reading a results file of the wrong shape raises: a key missing, a value of another type.
_MISSHAPEN = (KeyError, TypeError, AttributeError, ValueError)


def _misshapen(error: Exception) -> str:
    """What is wrong in a results file, as `error` (one of `_MISSHAPEN`) says it, on one line."""
    if isinstance(error, KeyError):
        return f"an entry without {error.args[0]!r}"
    return " ".join(str(error).split())


def _loaded(data: dict[str, Any], *, resamples: int, seed: int) -> EvalRun:
    """The run a results file's `data` holds, summarized."""
    run = EvalRun(
        dict(data["config"]),
        [
            EvalItem(i["id"], i["document"], i["expected"], i["prompt"])
            for i in data.get("items", [])
        ],
        unavailable=dict(data.get("unavailable", {})),
    )
    for raw in data.get("outcomes", []):
        outcome = Outcome.from_json(raw)
        run.outcomes[outcome.arm, outcome.item] = outcome
    # Every arm with outcomes is summarized, also those kept from an earlier, wider run.
    present = {arm for arm, _ in run.outcomes} | set(run.config.get("arms", []))
    run.config["arms"] = [arm for arm in ARMS if arm in present]
    return summarize(run, resamples=resamples, seed=seed)


def _as_json(value: Any) -> Any:
    """`value` as it reads back from `results.json`."""
    return json.loads(json.dumps(value, default=str))


# Settings that change what an outcome means: a resumed run must have the same.
_RESUME_KEYS = (
    "contract", "provider", "model", "max_tokens", "options", "retries", "thresholds",
    "min_confidence", "confidence_calibration", "anchors",
)  # fmt: skip
# Settings newer than some results files: a file without them is resumed (its outcomes are of
# arms that do not read them).
_NEWER_KEYS = frozenset({"min_confidence", "confidence_calibration", "anchors"})


def _resume(run: EvalRun, out: Path) -> None:
    path = out / RESULTS_FILE
    if not path.is_file():
        return
    try:
        data = json.loads(read_regular_text(path))  # (a named pipe is refused, never waited on)
    except ValueError as error:
        raise ResumeMismatch(f"{path} is not readable JSON ({error}); pass fresh") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ResumeMismatch(f"{path} is not an sdk eval results file; pass fresh or another out")
    try:
        _resumed(run, path, data)
    except ResumeMismatch:
        raise
    except _MISSHAPEN as error:  # (a file edited by hand, or by another tool)
        raise ResumeMismatch(
            f"{path} is not an sdk eval results file ({_misshapen(error)}); pass fresh or "
            "another out"
        ) from None


def _resumed(run: EvalRun, path: Path, data: dict[str, Any]) -> None:
    """`run` resumed from the results file `path` holds (`data`): its settings compared, its
    outcomes of unchanged items taken."""
    before = data.get("config", {})
    if not isinstance(before, dict):
        raise TypeError(f"its config is {type(before).__name__}, not an object")
    for key in _RESUME_KEYS:
        if key in _NEWER_KEYS and key not in before:
            continue
        if _as_json(before.get(key)) != run.config[key]:
            raise ResumeMismatch(
                f"{path} was run with {key} = {before.get(key)!r}, this run has "
                f"{run.config[key]!r}: use another output folder, or start over (fresh)"
            )
    run.config["started"] = before.get("started", run.config["started"])
    digests = {item.id: item.digest for item in run.items}
    for raw in data.get("outcomes", []):
        outcome = Outcome.from_json(raw)
        if outcome.item not in digests:
            run.retained.append(raw)  # an item this run does not have (a smaller --limit)
        elif digests[outcome.item] != outcome.digest:
            continue  # the item changed since: its old outcomes no longer mean anything
        elif outcome.arm in run.config["arms"]:
            run.outcomes[outcome.arm, outcome.item] = outcome
        else:
            run.retained.append(raw)  # an arm this run does not ask for
    kept = {raw["item"] for raw in run.retained}
    run.retained_items = [
        item
        for item in data.get("items", [])
        if item.get("id") in kept and item["id"] not in digests
    ]
