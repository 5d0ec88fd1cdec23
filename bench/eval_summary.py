"""Row 13: the summary of the committed eval runs (`make eval` writes eval-results/*/results.json).

Nothing is measured here: the row reads each run's `results.json` back through the SDK's own
reader (`sdk.eval.load_results`, which recomputes the intervals and the paired tests) and
records its tables and the numbers the README quotes, with a digest of the files, so that
`bench/readme_figures.py --check` can tell when a new eval run has not been summarized yet.
"""

from __future__ import annotations

import collections
import hashlib
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

__all__ = ["EVAL_RESULTS", "digest", "eval_row", "summary"]

EVAL_RESULTS = ROOT / "eval-results"


def result_files(folder: Path = EVAL_RESULTS) -> list[Path]:
    return sorted(folder.glob("*/results.json"))


def digest(folder: Path = EVAL_RESULTS) -> str:
    """sha256 over every run's results.json (names and bytes): changes with any new run."""
    hashed = hashlib.sha256()
    for path in result_files(folder):
        hashed.update(path.relative_to(folder).as_posix().encode() + b"\0")
        hashed.update(path.read_bytes() + b"\0")
    return hashed.hexdigest()


def _dataset_size(dataset: str) -> int | None:
    path = ROOT / dataset
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as file:
        return sum(1 for line in file if line.strip())


def summary(path: Path) -> dict[str, Any]:
    """What one eval run says, as JSON-ready values (tables included, as Markdown)."""
    from sdk.diagnostics import DEFAULT_LOW_MASS_THRESHOLD
    from sdk.eval import load_results
    from sdk.eval import markdown_table
    from sdk.eval import verdict

    run = load_results(path)
    config = run.config
    arms: dict[str, dict[str, Any]] = {}
    for arm, metrics in run.metrics.items():
        outcomes = run.outcomes_of(arm)
        arms[arm] = {
            "items": metrics.items,
            "valid": sum(1 for outcome in outcomes if outcome.valid),
            "correct": sum(1 for outcome in outcomes if outcome.correct),
            "accuracy": metrics.accuracy.estimate,
            "errors": dict(
                collections.Counter(outcome.error for outcome in outcomes if outcome.error)
            ),
            "mass_flagged": {
                field: [summary.flagged, summary.items] for field, summary in metrics.mass.items()
            },
            "abstention_recall": _estimate(metrics.abstention_recall),
            "false_abstention": _estimate(metrics.false_abstention),
            "exact_copy": _estimate(metrics.stated_accuracy),
            "fields": _field_counts(outcomes),
        }
    pairs = [
        {
            "a": pair.a,
            "b": pair.b,
            "difference": pair.result.difference.estimate,
            "p_value": pair.result.mcnemar.p_value,
            "significant": bool(pair.result.significant),
            "reading": verdict(pair),
        }
        for pair in run.pairs
    ]
    labels = collections.Counter(
        str(value) for item in run.items for value in list(item.expected.values())[:1]
    )
    majority, count = labels.most_common(1)[0] if labels else ("", 0)
    dataset = str(config.get("dataset") or "")
    return {
        "folder": path.parent.relative_to(ROOT).as_posix(),
        "contract": str(config.get("contract", {}).get("name", "")),
        "dataset": dataset,
        "dataset_items": _dataset_size(dataset) if dataset else None,
        "items": len(run.items),
        "model": str(config.get("model", "")),
        "provider": str(config.get("provider", "")),
        "max_tokens": config.get("max_tokens"),
        "retries": config.get("retries"),
        "started": str(config.get("started", "")),
        "unavailable": dict(run.unavailable),
        "arms": arms,
        "pairs": pairs,
        "majority": {"label": majority, "share": count / len(run.items) if run.items else 0.0},
        "mass_threshold": DEFAULT_LOW_MASS_THRESHOLD,
        "latency_total": sum(outcome.latency for outcome in run.outcomes.values()),
        "table": markdown_table(run),
        "thresholds": config.get("thresholds"),
        "labels": sum(len(item.expected) for item in run.items),
        "null_labels": sum(
            1 for item in run.items for value in item.expected.values() if value is None
        ),
    }


def _estimate(interval: Any) -> dict[str, float] | None:
    if interval is None:
        return None
    return {"estimate": interval.estimate, "low": interval.low, "high": interval.high}


def _field_counts(outcomes: list[Any]) -> dict[str, dict[str, int]]:
    """Per field: where the document states it, how often the value was right (for a copied
    value, copied exactly) and how often the arm abstained; where it does not, how often the
    arm abstained."""
    counts: dict[str, dict[str, int]] = {}
    for outcome in outcomes:
        for name, score in outcome.fields.items():
            field = counts.setdefault(
                name, {"stated": 0, "right": 0, "false": 0, "absent": 0, "abstained": 0}
            )
            if score.should_abstain:
                field["absent"] += 1
                field["abstained"] += int(score.abstained)
            else:
                field["stated"] += 1
                field["right"] += int(score.correct)
                field["false"] += int(score.abstained)
    return counts


@row("eval", number="13", title="Eval summary",
     measures="the committed eval runs (eval-results/*/results.json, written by `make eval`), "
              "read back and summarized: nothing measured in this run",
     unit="accuracy per arm with 95% intervals; paired differences")  # fmt: skip
def eval_row(settings: Settings) -> Measured:
    runs = {path.parent.name: summary(path) for path in result_files()}
    if not runs:
        raise FileNotFoundError(f"no eval run in {EVAL_RESULTS} (make eval writes them)")
    parts = []
    for name, found in runs.items():
        size = found["dataset_items"]
        of = f" of {size}" if size is not None else ""
        skipped = "".join(
            f"\n- arm `{arm}` not run: {reason}" for arm, reason in found["unavailable"].items()
        )
        parts.append(
            f"### {name}: {found['contract']}\n\n"
            f"- `{found['folder']}/results.json`: {found['items']}{of} items of "
            f"`{found['dataset']}`, {found['provider']} provider, model {found['model']}, "
            f"max_tokens {found['max_tokens']}, retries {found['retries']}; started "
            f"{found['started']}.{skipped}\n\n{found['table']}\n"
        )
    return Measured([], section="\n".join(parts), values={"digest": digest(), "runs": runs})
