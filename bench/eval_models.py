"""The evals by model and arm (issue 32): tables from the committed results.

    .venv/bin/python bench/eval_models.py             # print
    .venv/bin/python bench/eval_models.py --write     # eval-results/MODELS.md

Reads each model's `results.json` (the commands that made them are in MODELS.md): the notices,
then the decisions and the invoices (no copied values: accuracy and validity). Per model and
arm: exact copies of stated values, abstention recall, false abstention, validity, item
accuracy, each with its 95% Wilson interval; the calibration error of the values' confidence
(ECE, as decoded and after the calibration fitted on the calibration split, with a bootstrap
interval); the paired accuracy difference against the constrained arm (bootstrap interval,
McNemar's exact p); and, per model, how far the best arm is from the goals (exact copies >= 90%,
abstention recall >= 80% at false abstention <= 5%). No figure is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sdk._files import write_atomic  # noqa: E402
from sdk.eval import load_results  # noqa: E402
from sdk.eval.report import interval_text  # noqa: E402
from sdk.eval.report import verdict  # noqa: E402
from sdk.eval.stats import Interval  # noqa: E402

OUT = ROOT / "eval-results" / "MODELS.md"
RUNS = {
    "SmolLM2-135M (smollm2-135m)": ROOT / "eval-results" / "smollm2-135m" / "notices",
    "Gemma 3 270M (gemma3-270m)": ROOT / "eval-results" / "gemma3-270m" / "notices",
}
CALIBRATION_SPLIT = "notices-calibration"  # beside each run's folder
DATASET_RUNS = {
    "Decisions": {
        "SmolLM2-135M (smollm2-135m)": ROOT / "eval-results" / "decisions",
        "Gemma 3 270M (gemma3-270m)": ROOT / "eval-results" / "gemma3-270m" / "decisions",
    },
    "Invoices": {
        "SmolLM2-135M (smollm2-135m)": ROOT / "eval-results" / "invoices",
        "Gemma 3 270M (gemma3-270m)": ROOT / "eval-results" / "gemma3-270m" / "invoices",
    },
}
DATASET_COMMANDS = """\
    make eval-models    # which runs, per model M in smollm2-135m, gemma3-270m:
    ARMS=constrained,unconstrained,widened,answer_first,two_phase
    sdk eval examples/data/eval/decisions.jsonl --contract contracts:Decision --model M \\
        --arms $ARMS --limit 44 --max-tokens 200 --out FOLDER/decisions
    sdk eval examples/data/eval/invoices.jsonl --contract contracts:InvoiceExtraction --model M \\
        --arms $ARMS --limit 64 --max-tokens 300 --out FOLDER/invoices
"""
COMMANDS = """\
    make eval-confidence EVAL_CONFIDENCE_LIMIT=N    # N: the items each model's table is on
    # which runs, per model M in smollm2-135m, gemma3-270m:
    ARMS=constrained,grounded,evidence_gated,presence_first,mass_aware,anchored,guided,min_confidence
    sdk eval examples/data/eval/notices-calibration.jsonl --contract contracts:ShipmentNotice \\
        --model M --arms mass_aware --max-tokens 200 --out eval-results/M/notices-calibration \\
        --calibrate eval-results/M/notices/thresholds.json \\
        --calibrate-confidence eval-results/M/notices/confidence.json
    sdk eval examples/data/eval/notices.jsonl --contract contracts:ShipmentNotice --model M \\
        --arms $ARMS --max-tokens 200 --limit N --out eval-results/M/notices \\
        --thresholds eval-results/M/notices/thresholds.json \\
        --confidence-calibration eval-results/M/notices/confidence.json \\
        --anchors examples/data/eval/notices-anchors.json
    .venv/bin/python bench/eval_models.py --write
"""
GOALS = "exact copies >= 90%, abstention recall >= 80% at false abstention <= 5%"


def _ece(raw: Interval | None, calibrated: Interval | None) -> str:
    if raw is None:
        return "-"
    shown = f"{raw.estimate:.2f} [{raw.low:.2f}, {raw.high:.2f}]"
    if calibrated is not None:
        shown += f" → {calibrated.estimate:.2f} [{calibrated.low:.2f}, {calibrated.high:.2f}]"
    return shown


def tables() -> str:
    lines = [
        "# Notices eval by model and arm (issue 32)",
        "",
        "Written by `bench/eval_models.py --write` from the results below; every item's output is",
        "in each folder's `report.html`. Held split of `examples/data/eval/notices.jsonl`, greedy,",
        "thresholds and confidence calibration fitted on `notices-calibration.jsonl` (out of",
        "sample). Commands:",
        "",
        COMMANDS,
        f"Goals: {GOALS}, on at least one model.",
        "",
    ]
    for model, folder in RUNS.items():
        lines += _section(model, folder, folder.parent / CALIBRATION_SPLIT)
    lines += [
        "# Decisions and invoices",
        "",
        "`Decision` on `examples/data/eval/decisions.jsonl` and `InvoiceExtraction` on",
        "`examples/data/eval/invoices.jsonl` (each section says how many items), every arm that",
        "runs on them (neither has copied values: the grounded arms do not apply; an arm that",
        "cannot run is named in the folder's `report.html`); per model M (FOLDER: `eval-results`",
        "for SmolLM2, `eval-results/M` otherwise):",
        "",
        DATASET_COMMANDS,
    ]
    for dataset, runs in DATASET_RUNS.items():
        for model, folder in runs.items():
            lines += _section(f"{dataset}: {model}", folder, None)
    return "\n".join(lines) + "\n"


def _section(model: str, folder: Path, calibration_split: Path | None) -> list[str]:
    """One model's run: the arms table, the pairs against constrained, the gaps and signals."""
    lines: list[str] = []
    path = folder / "results.json"
    if not path.is_file():
        return [f"## {model}", "", f"Not run: no `{path.relative_to(ROOT)}`.", ""]
    if True:
        run = load_results(path)
        state = "complete" if run.complete else "INCOMPLETE"
        lines += [
            f"## {model}",
            "",
            f"`{path.relative_to(ROOT)}`: {len(run.items)} items ({state})"
            + (
                f"; min_confidence floor {run.config.get('min_confidence')}."
                if calibration_split is not None
                else "."
            ),
            "",
        ]
        if calibration_split is None:  # no copied values: what is right, what is valid
            lines += [
                "| arm | items | values right | valid | item accuracy | ECE (decoded) |",
                "| --- | ---: | ---: | ---: | ---: | ---: |",
            ]
            for arm, m in run.metrics.items():
                shares = (m.stated_accuracy, m.validity, m.accuracy)
                lines.append(
                    f"| {arm} | {m.items} | {' | '.join(interval_text(v) for v in shares)} "
                    f"| {_ece(m.calibration_error, None)} |"
                )
        else:
            lines += [
                "| arm | items | exact copies | abstention recall | false abstention | valid "
                "| item accuracy | ECE (decoded → by type) | ECE by field |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            ]
            by_field = _by_field(calibration_split)
            for arm, m in run.metrics.items():
                shares = (m.stated_accuracy, m.abstention_recall, m.false_abstention, m.validity,
                          m.accuracy)  # fmt: skip
                lines.append(
                    f"| {arm} | {m.items} | {' | '.join(interval_text(v) for v in shares)} "
                    f"| {_ece(m.calibration_error, m.calibrated_error)} "
                    f"| {_field_ece(run, arm, by_field)} |"
                )
        against = [pair for pair in run.pairs if pair.a == "constrained"]
        if against:
            lines += [
                "",
                "| against constrained | items | accuracy B - A (95% CI) | McNemar p | reading |",
                "| --- | ---: | ---: | ---: | --- |",
            ]
            for pair in against:
                d = pair.result.difference
                lines.append(
                    f"| {pair.b} | {pair.result.items} | {d.estimate:+.0%} [{d.low:+.0%}, "
                    f"{d.high:+.0%}] | {pair.result.mcnemar.p_value:.3g} | {verdict(pair)} |"
                )
        anchored = [p for p in run.pairs if (p.a, p.b) == ("mass_aware", "anchored")]
        if anchored:
            lines += [
                "",
                "| against mass_aware | items | accuracy B - A (95% CI) | McNemar p | reading |",
                "| --- | ---: | ---: | ---: | --- |",
            ]
            for pair in anchored:
                d = pair.result.difference
                lines.append(
                    f"| {pair.b} | {pair.result.items} | {d.estimate:+.0%} [{d.low:+.0%}, "
                    f"{d.high:+.0%}] | {pair.result.mcnemar.p_value:.3g} | {verdict(pair)} |"
                )
        if calibration_split is None:  # not a grounded contract: no copies, no goals
            return [*lines, ""]
        lines += ["", *_gap(run), "", *_signals(run), ""]
    return lines


SIGNALS = {
    "confidence (masked)": lambda c, mass: c[0],
    "kept by the grammar": lambda c, mass: c[1],
    "first-token mass": lambda c, mass: mass,
}


def _signals(run) -> list[str]:  # type: ignore[no-untyped-def]
    """Per field, how well each signal tells a right returned value from a wrong one (AUC: 0.5
    is chance, 1 separates them), over the arm that writes every value a span can fill."""
    arm = "min_confidence" if "min_confidence" in run.metrics else "mass_aware"
    outcomes = [o for o in run.outcomes_of("mass_aware") if o.valid and o.confidence]
    if not outcomes:
        return []
    names = list(dict.fromkeys(name for o in outcomes for name in o.fields))
    lines = [
        f"Signals on the `mass_aware` arm's values before abstention (every value a span can "
        f"fill written): AUC at telling a right value from a wrong one (right/wrong counts); "
        f"the `{arm}` arm abstains on the first, `mass_aware` on the last.",
        "",
        "| field | right / wrong | " + " | ".join(SIGNALS) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in SIGNALS) + " |",
    ]
    for name in names:
        cells = []
        counts = ""
        for read in SIGNALS.values():
            right, wrong = [], []
            for o in outcomes:
                # Before abstention: the value as decoded (the reply's text), right when it
                # equals the label.
                written = _decoded(o.text).get(name)
                decoded = o.confidence.get(f"/{name}")
                mass = (o.signals or {}).get(f"/{name}")
                if written is None or decoded is None:
                    continue
                value = read(decoded, mass)
                if value is None:
                    continue
                (right if written == o.fields[name].expected else wrong).append(value)
            counts = f"{len(right)} / {len(wrong)}"
            cells.append(_auc(right, wrong))
        lines.append(f"| {name} | {counts} | " + " | ".join(cells) + " |")
    return lines


def _decoded(text: str | None) -> dict[str, object]:
    try:
        value = json.loads(text or "")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _auc(right: list[float], wrong: list[float]) -> str:
    if not right or not wrong:
        return "-"
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return f"{wins / (len(right) * len(wrong)):.2f}"


def _by_field(folder: Path):  # type: ignore[no-untyped-def]
    """A calibration by field fitted on the calibration split's run (`None`: no such run)."""
    from sdk.eval.calibration import calibrate_confidence_run

    if not (folder / "results.json").is_file():
        return None
    return calibrate_confidence_run(load_results(folder, resamples=100), by="field")


def _field_ece(run, arm: str, calibration) -> str:  # type: ignore[no-untyped-def]
    """The arm's ECE after the calibration by field (fitted on the other split)."""
    from sdk.calibration import ece_interval
    from sdk.eval.metrics import confidence_samples

    samples = confidence_samples(run.outcomes_of(arm))
    if calibration is None or not samples:
        return "-"
    mapped = [calibration.probability(s.kind, s.confidence, s.field) for s in samples]
    estimate, low, high = ece_interval(mapped, [s.correct for s in samples])
    return f"{estimate:.2f} [{low:.2f}, {high:.2f}]"


def _gap(run) -> list[str]:  # type: ignore[no-untyped-def]
    """How far each abstaining arm is from the goals."""
    out = []
    for arm, m in run.metrics.items():
        if m.stated_accuracy is None or m.abstention_recall is None or m.false_abstention is None:
            continue
        exact, recall, false = (
            m.stated_accuracy.estimate,
            m.abstention_recall.estimate,
            m.false_abstention.estimate,
        )
        met = exact >= 0.9 and recall >= 0.8 and false <= 0.05
        misses = []
        if exact < 0.9:
            misses.append(f"exact copies {0.9 - exact:.1%} short")
        if recall < 0.8:
            misses.append(f"abstention recall {0.8 - recall:.1%} short")
        if false > 0.05:
            misses.append(f"false abstention {false - 0.05:.1%} over")
        out.append(f"- {arm}: " + ("goals met" if met else "; ".join(misses)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    what.add_argument(
        "--check", action="store_true", help=f"exit 1 unless {OUT.relative_to(ROOT)} is current"
    )
    arguments = parser.parse_args()
    text = tables()
    if arguments.write:
        write_atomic(OUT, text)
        print(f"wrote {OUT.relative_to(ROOT)}")
    elif arguments.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            sys.exit(
                f"{OUT.relative_to(ROOT)} is not what the committed results render to: "
                "bench/eval_models.py --write"
            )
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
