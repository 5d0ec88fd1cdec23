"""Scoring one output against its labels, and the metrics of an arm over a dataset.

A field is *correct* when its value, in the contract's JSON form, equals the label's JSON form
(both went through the contract's own validation, which is all the normalization a contract
does), or, for a label that says "abstain" (`null`, or an escape member such as `unknown`), when
the output abstains: `null` or an escape member. An item is correct when every labelled field
is. An output that is not valid (no value after the arm's retries) gets every field wrong and
abstains on none.

Abstention recall: over labelled fields whose label is "abstain", the share where the output
abstained. False abstention: over fields with a real label, the share where it abstained anyway.
Stated accuracy: over fields with a real label, the share exactly right (for values copied from
the document, exact-copy accuracy).

Calibration error: over the values an arm returned (not `null`) with a confidence
(`Outcome.confidence`, routes with token probabilities only), the expected calibration error
between the confidence and whether the value was right (`sdk.calibration`), with a bootstrap
interval; where the run has a confidence calibration, also after it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from sdk.calibration import Calibration
from sdk.calibration import Sample
from sdk.calibration import ece_interval
from sdk.diagnostics import DEFAULT_LOW_MASS_THRESHOLD
from sdk.eval.stats import Interval
from sdk.eval.stats import wilson_interval

__all__ = [
    "ArmMetrics",
    "FieldScore",
    "MassSummary",
    "Outcome",
    "arm_metrics",
    "confidence_samples",
    "score",
]


@dataclass(frozen=True, slots=True)
class FieldScore:
    """One labelled field of one output."""

    expected: Any
    predicted: Any
    correct: bool
    abstained: bool
    should_abstain: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "predicted": self.predicted,
            "correct": self.correct,
            "abstained": self.abstained,
            "should_abstain": self.should_abstain,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldScore:
        return cls(
            data["expected"],
            data["predicted"],
            _flag(data, "correct"),
            _flag(data, "abstained"),
            _flag(data, "should_abstain"),
        )


def _flag(data: Mapping[str, Any], key: str) -> bool:
    """`data[key]`, a JSON true or false (`"false"` is not false: `ValueError`, as a results file
    edited by hand may hold)."""
    value = data[key]
    if not isinstance(value, bool):
        raise ValueError(f"{key!r} is {value!r}, not true or false")
    return value


@dataclass(frozen=True)
class Outcome:
    """What one arm made of one item: the value or the error, its cost, and its score."""

    item: str
    arm: str
    valid: bool
    fields: Mapping[str, FieldScore]
    value: Any = None
    """The value's JSON form (`None` when there is none)."""
    text: str | None = None
    """The raw text of the last attempt."""
    error: str | None = None
    """The error's class name, when the arm got no valid value."""
    error_message: str | None = None
    attempts: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    latency: float = 0.0
    """Wall-clock seconds of the whole call, retries included."""
    schema: Mapping[str, Any] = field(default_factory=dict)
    """Name, version and fingerprint of the contract the arm generated."""
    mass: Mapping[str, float] | None = None
    """Lowest surviving mass per field pointer (constrained local arms only)."""
    reasoning: str | None = None
    """Two-phase working or native thinking, where the arm has it."""
    digest: str = ""
    """The item's digest when it ran (a changed item is redone on resume)."""
    signals: Mapping[str, float] | None = None
    """Mass-aware arm: the surviving mass at each nullable field's value start, by pointer
    (what `sdk eval --calibrate` calibrates thresholds on)."""
    prompt: Mapping[str, Any] | None = None
    """Name, version and fingerprint of the prompt template the arm asked with, if any."""
    confidence: Mapping[str, tuple[float, float | None]] | None = None
    """Per top-level field pointer, the value's confidence as decoded (`Result.confidence`
    uncalibrated, `sdk.confidence`): its probability among the allowed tokens and the share of
    the model's probability the grammar kept (`None`: not reported). `None` where the route
    gave no token probabilities."""
    model: str | None = None
    """The model that answered (behind a `FallbackProvider`, the one that did), as the call's
    check names it: the model given to the provider that answered, which its server may spell
    otherwise (`sdk.eval.arms._model_of`); `None` where neither says, or in a results file
    written before it was recorded."""

    @property
    def correct(self) -> bool:
        """Every labelled field correct."""
        return self.valid and all(score.correct for score in self.fields.values())

    @property
    def retries(self) -> int:
        return max(0, self.attempts - 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "item": self.item,
            "arm": self.arm,
            "valid": self.valid,
            "correct": self.correct,
            "fields": {name: score.to_json() for name, score in self.fields.items()},
            "value": self.value,
            "text": self.text,
            "error": self.error,
            "error_message": self.error_message,
            "attempts": self.attempts,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency": self.latency,
            "schema": dict(self.schema),
            "mass": dict(self.mass) if self.mass is not None else None,
            "reasoning": self.reasoning,
            "digest": self.digest,
            "signals": dict(self.signals) if self.signals is not None else None,
            "prompt": dict(self.prompt) if self.prompt is not None else None,
            "confidence": {k: list(v) for k, v in self.confidence.items()}
            if self.confidence is not None
            else None,
            "model": self.model,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        mass = data.get("mass")
        signals = data.get("signals")
        return cls(
            item=str(data["item"]),
            arm=str(data["arm"]),
            valid=_flag(data, "valid"),
            fields={k: FieldScore.from_json(v) for k, v in data["fields"].items()},
            value=data.get("value"),
            text=data.get("text"),
            error=data.get("error"),
            error_message=data.get("error_message"),
            attempts=int(data.get("attempts", 1)),
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            latency=float(data.get("latency", 0.0)),
            schema=dict(data.get("schema") or {}),
            mass={str(k): float(v) for k, v in mass.items()} if isinstance(mass, dict) else None,
            reasoning=data.get("reasoning"),
            digest=str(data.get("digest", "")),
            signals={str(k): float(v) for k, v in signals.items()}
            if isinstance(signals, dict)
            else None,
            prompt=dict(data["prompt"]) if isinstance(data.get("prompt"), dict) else None,
            confidence=_confidence_of(data.get("confidence")),
            model=data["model"] if isinstance(data.get("model"), str) else None,
        )


def _confidence_of(data: Any) -> dict[str, tuple[float, float | None]] | None:
    if not isinstance(data, dict):
        return None
    return {
        str(pointer): (float(pair[0]), None if pair[1] is None else float(pair[1]))
        for pointer, pair in data.items()
    }


def score(
    expected: Mapping[str, Any],
    value: Mapping[str, Any] | None,
    escapes: Mapping[str, frozenset[str]],
) -> dict[str, FieldScore]:
    """Score the labelled fields of one output (`value`: its JSON form, `None` if invalid).

    `escapes`: per field, the values that mean "abstain" (`escape_members` of the widened
    contract, the same for every arm, so that every arm is scored by one rule).
    """
    scores: dict[str, FieldScore] = {}
    for name, label in expected.items():
        escape = escapes.get(name, frozenset())
        should_abstain = label is None or (isinstance(label, str) and label in escape)
        if value is None:
            scores[name] = FieldScore(label, None, False, False, should_abstain)
            continue
        predicted = value.get(name)
        abstained = predicted is None or (isinstance(predicted, str) and predicted in escape)
        correct = abstained if should_abstain else (not abstained and predicted == label)
        scores[name] = FieldScore(label, predicted, correct, abstained, should_abstain)
    return scores


@dataclass(frozen=True, slots=True)
class MassSummary:
    """Lowest surviving mass of one field across the items of a constrained local arm."""

    items: int
    median: float
    """Median over items of the field's lowest surviving mass."""
    lowest: float
    flagged: int
    """Items where the field's lowest mass is under the threshold: the grammar overrode the
    model there."""

    def to_json(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "median": self.median,
            "lowest": self.lowest,
            "flagged": self.flagged,
        }


@dataclass(frozen=True)
class ArmMetrics:
    """One arm over the items it ran on."""

    arm: str
    items: int
    validity: Interval
    accuracy: Interval
    field_accuracy: Mapping[str, Interval]
    abstention_recall: Interval | None
    """`None` when no label says abstain."""
    false_abstention: Interval | None
    """`None` when no label has a value."""
    stated_accuracy: Interval | None
    """Over labelled fields whose label is a value (the document states it), the share the
    output got exactly right: for copied values, exact-copy accuracy. `None` when none is."""
    retries: int
    input_tokens: int
    output_tokens: int
    latency_p50: float
    latency_p95: float
    mass: Mapping[str, MassSummary]
    calibration_error: Interval | None = None
    """Expected calibration error of the returned values' confidence as decoded, with its 95%
    bootstrap interval (`None`: no value with a confidence)."""
    calibrated_error: Interval | None = None
    """The same after the run's confidence calibration (`None`: the run has none)."""
    confident_values: int = 0
    """How many returned values the calibration errors are over."""

    def to_json(self) -> dict[str, Any]:
        def interval(value: Interval | None) -> dict[str, float] | None:
            if value is None:
                return None
            return {"estimate": value.estimate, "low": value.low, "high": value.high}

        return {
            "arm": self.arm,
            "items": self.items,
            "validity": interval(self.validity),
            "accuracy": interval(self.accuracy),
            "field_accuracy": {k: interval(v) for k, v in self.field_accuracy.items()},
            "abstention_recall": interval(self.abstention_recall),
            "false_abstention": interval(self.false_abstention),
            "stated_accuracy": interval(self.stated_accuracy),
            "retries": self.retries,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency_p50": self.latency_p50,
            "latency_p95": self.latency_p95,
            "mass": {k: v.to_json() for k, v in self.mass.items()},
            "calibration_error": interval(self.calibration_error),
            "calibrated_error": interval(self.calibrated_error),
            "confident_values": self.confident_values,
        }


def arm_metrics(
    arm: str,
    outcomes: Sequence[Outcome],
    *,
    threshold: float = DEFAULT_LOW_MASS_THRESHOLD,
    calibration: Calibration | None = None,
) -> ArmMetrics:
    """The metrics of one arm's outcomes (module docstring); `calibration` maps confidence to
    the probability of being right for `calibrated_error`."""
    n = len(outcomes)
    names = list(dict.fromkeys(name for o in outcomes for name in o.fields))
    field_accuracy = {
        name: wilson_interval(
            sum(1 for o in outcomes if name in o.fields and o.fields[name].correct),
            sum(1 for o in outcomes if name in o.fields),
        )
        for name in names
    }
    absent = [s for o in outcomes for s in o.fields.values() if s.should_abstain]
    present = [s for o in outcomes for s in o.fields.values() if not s.should_abstain]
    latencies = sorted(o.latency for o in outcomes)
    return ArmMetrics(
        arm=arm,
        items=n,
        validity=wilson_interval(sum(o.valid for o in outcomes), n),
        accuracy=wilson_interval(sum(o.correct for o in outcomes), n),
        field_accuracy=field_accuracy,
        abstention_recall=wilson_interval(sum(s.abstained for s in absent), len(absent))
        if absent
        else None,
        false_abstention=wilson_interval(sum(s.abstained for s in present), len(present))
        if present
        else None,
        stated_accuracy=wilson_interval(sum(s.correct for s in present), len(present))
        if present
        else None,
        retries=sum(o.retries for o in outcomes),
        input_tokens=sum(o.input_tokens for o in outcomes),
        output_tokens=sum(o.output_tokens for o in outcomes),
        latency_p50=_quantile(latencies, 0.50),
        latency_p95=_quantile(latencies, 0.95),
        mass=_mass(outcomes, threshold),
        **_calibration_errors(outcomes, calibration),
    )


def confidence_samples(outcomes: Iterable[Outcome]) -> list[Sample]:
    """Per valid outcome, per labelled field it returned a value for (not `null`) with a
    confidence: the value's JSON type, its confidence as decoded, and whether it was right."""
    samples = []
    for outcome in outcomes:
        if not outcome.valid or outcome.confidence is None:
            continue
        for name, scored in outcome.fields.items():
            decoded = outcome.confidence.get(f"/{name}")
            if decoded is None or scored.predicted is None:
                continue
            kind = _json_type(scored.predicted)
            samples.append(Sample(kind, decoded[0], scored.correct, f"/{name}"))
    return samples


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "other"


def _calibration_errors(
    outcomes: Iterable[Outcome], calibration: Calibration | None
) -> dict[str, Any]:
    samples = confidence_samples(outcomes)
    if not samples:
        return {}
    correct = [s.correct for s in samples]
    raw = Interval(*ece_interval([s.confidence for s in samples], correct))
    errors: dict[str, Any] = {"calibration_error": raw, "confident_values": len(samples)}
    if calibration is not None:
        mapped = [calibration.probability(s.kind, s.confidence, s.field) for s in samples]
        errors["calibrated_error"] = Interval(*ece_interval(mapped, correct))
    return errors


def _quantile(values: Sequence[float], q: float) -> float:
    from sdk.eval.stats import percentile

    return percentile(values, q) if values else 0.0


def _mass(outcomes: Iterable[Outcome], threshold: float) -> dict[str, MassSummary]:
    per_field: dict[str, list[float]] = {}
    for outcome in outcomes:
        for pointer, value in (outcome.mass or {}).items():
            per_field.setdefault(pointer, []).append(value)
    return {
        pointer: MassSummary(
            items=len(values),
            median=statistics.median(values),
            lowest=min(values),
            flagged=sum(1 for v in values if v < threshold),
        )
        for pointer, values in per_field.items()
    }
