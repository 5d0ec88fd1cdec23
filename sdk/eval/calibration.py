"""Calibrating on a labelled run: the mass-aware arm's thresholds (`sdk eval --calibrate FILE`)
and the confidence calibration (`sdk eval --calibrate-confidence FILE`).

The run's `mass_aware` outcomes, produced without thresholds, carry each nullable field's
value-start mass (`Outcome.signals`) beside its label; `sdk.abstention.calibrate` picks per
field the threshold with the highest abstention recall at no more than 5% false abstention.
Outcomes without a valid value are left out: there was no decision to calibrate.

The confidence calibration (`sdk.calibration`) is fitted on every returned value with a
confidence of every arm the run ran (`sdk.eval.metrics.confidence_samples`): a curve per JSON
type from the value's confidence as decoded to whether it was right. Fit it on a calibration
split and give it to a run on another (`--confidence-calibration`), or to a client
(`confidence_calibration=`), so that the figures stay out of sample.
"""

from __future__ import annotations

from typing import Any

from sdk.abstention import DEFAULT_MAX_FALSE_ABSTENTION
from sdk.abstention import Sample
from sdk.abstention import Thresholds
from sdk.abstention import calibrate
from sdk.calibration import Calibration
from sdk.calibration import Grouping
from sdk.calibration import Method
from sdk.calibration import fit
from sdk.eval.metrics import Outcome
from sdk.eval.metrics import confidence_samples
from sdk.eval.runner import EvalRun

__all__ = ["calibrate_confidence_run", "calibrate_run", "calibration_samples"]


def _models(run: EvalRun, outcomes: list[Outcome]) -> dict[str, Any]:
    """What a fit records of the models it was fitted on (`sdk._fitted.mismatch` reads it):
    `models`, those that made the outcomes it used (behind a `FallbackProvider` the fallback's
    too; the run's own model where an outcome does not say), and `model`, what a record has
    always held: the one when there is one; among several, the run's own where it is one of
    them, else the first (never empty: an SDK that reads `model` alone then refuses the record
    for the others' models, where no `model` would fit any)."""
    configured = run.config.get("model")
    named = {outcome.model or configured for outcome in outcomes} - {None}
    models = sorted(name for name in named if isinstance(name, str))
    one = configured if configured in models else next(iter(models), None)
    return {"model": one, "models": models}


def _signalled(run: EvalRun, arm: str) -> list[Outcome]:
    """The outcomes of `arm` thresholds are calibrated on: valid, with their signals."""
    return [o for o in run.outcomes_of(arm) if o.valid and o.signals is not None]


def calibration_samples(run: EvalRun, arm: str = "mass_aware") -> list[Sample]:
    """One sample per labelled field of each valid outcome of `arm`."""
    samples = []
    for outcome in _signalled(run, arm):
        assert outcome.signals is not None
        for name, scored in outcome.fields.items():
            pointer = f"/{name}"
            samples.append(
                Sample(
                    pointer,
                    outcome.signals.get(pointer),
                    scored.abstained,
                    scored.should_abstain,
                )
            )
    return samples


def calibrate_run(
    run: EvalRun,
    *,
    arm: str = "mass_aware",
    max_false_abstention: float = DEFAULT_MAX_FALSE_ABSTENTION,
) -> Thresholds:
    """Thresholds calibrated on the run's `arm` outcomes (`ValueError` if it has none with
    signals: run it with `calibrating=True`, no thresholds)."""
    samples = calibration_samples(run, arm)
    if not samples:
        raise ValueError(f"the run has no {arm} outcomes with signals to calibrate on")
    if run.config.get("thresholds"):
        raise ValueError("the run applied thresholds already: calibrate on a run without them")
    items = len({outcome.item for outcome in run.outcomes_of(arm)})
    calibration = {
        "contract": run.config.get("contract"),
        "provider": run.config.get("provider"),
        **_models(run, _signalled(run, arm)),
        "dataset": run.config.get("dataset"),
        "items": items,
        "options": run.config.get("options"),
    }
    return calibrate(samples, max_false_abstention=max_false_abstention, calibration=calibration)


def calibrate_confidence_run(
    run: EvalRun, *, method: Method = "platt", by: Grouping = "type"
) -> Calibration:
    """The confidence calibration fitted on the run's returned values (module docstring;
    `ValueError` when none has a confidence: the route reports no token probabilities)."""
    sampled = [  # (an outcome's arm, the outcome, its samples: those with any)
        (arm, outcome, found)
        for arm in run.arms
        for outcome in run.outcomes_of(arm)
        if (found := confidence_samples([outcome]))
    ]
    arms = list(dict.fromkeys(arm for arm, _, _ in sampled))
    samples = [sample for _, _, found in sampled for sample in found]
    if not samples:
        raise ValueError(
            "the run has no values with a confidence to calibrate on (the route reports no "
            "token probabilities, or no arm returned a value)"
        )
    fitted = {
        "contract": run.config.get("contract"),
        "provider": run.config.get("provider"),
        **_models(run, [outcome for _, outcome, _ in sampled]),
        "dataset": run.config.get("dataset"),
        "arms": arms,
        "items": len(run.items),
    }
    return fit(samples, method=method, by=by, fitted=fitted)
