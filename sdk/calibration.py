"""Calibrating confidence: from the decoder's probability of a value to the probability that the
value is right, fitted on labelled data (`sdk eval --calibrate-confidence FILE`).

A value's confidence (`sdk.confidence`) is how sure the decoder was of it; a small model is often
sure of a wrong value, and a grammar makes that worse where it forces a value the model did not
want. On labelled outcomes (a value, its confidence, and whether it was right), a calibration
learns a monotone map per value type (`string`, `number`, `boolean`, `null`: they go wrong in
different ways), or per field (`by="field"`: a name and an id of the same type go wrong in
different ways too), with one over all types for a type or field too rare to fit on its own:

- `"platt"` (default): a logistic curve on the logit of the confidence (two numbers per type;
  steady on a few dozen samples);
- `"isotonic"`: a step function fitted by pool-adjacent-violators (no shape assumed; needs more
  samples).

`expected_calibration_error` (ECE, equal-width bins, with a bootstrap interval) and
`reliability` (the points of a reliability plot) say how far confidence is from accuracy, before
and after. A `Calibration` saved to a file is given to a client as `confidence_calibration=`
(a call option): `Result.confidence` then holds calibrated probabilities (`calibrated` true) and
`min_confidence` compares against them. A calibration fitted for another contract or model (its
`fitted` record, which `sdk eval` writes) is refused at the call with `CalibrationMismatch`;
one whose `fitted` names neither (made by hand) applies to any.

Pure: no I/O but `save`/`load`, no numpy.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any
from typing import Final
from typing import Literal

from sdk._files import read_regular_text
from sdk._files import write_atomic
from sdk._fitted import RecordError
from sdk._fitted import checked_record
from sdk._fitted import line_of
from sdk._fitted import mismatch
from sdk.confidence import Confidence

__all__ = [
    "CALIBRATION_FORMAT",
    "Calibration",
    "CalibrationFileError",
    "CalibrationMismatch",
    "Curve",
    "Grouping",
    "Method",
    "Sample",
    "ece_interval",
    "expected_calibration_error",
    "fit",
    "reliability",
]

CALIBRATION_FORMAT: Final = "sdk-confidence-calibration/1"
Method = Literal["platt", "isotonic"]
Grouping = Literal["type", "field"]
_ALL = "*"  # the curve over every type, for a type without its own
_INDEX = re.compile(r"/[0-9]+(?=/|$)")  # array indices: a field's curve covers every item
_MIN_SAMPLES = 12  # fewer samples of a type than this: it uses the curve over all types
_EPSILON = 1e-6


class CalibrationFileError(ValueError):
    """A calibration file that cannot be read: names the file and what is wrong."""


class CalibrationMismatch(ValueError):
    """A calibration fitted for another contract or model than the call's (names both)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One labelled value: its type, its confidence as decoded, and whether it was right."""

    kind: str
    confidence: float
    correct: bool
    field: str = ""
    """Its field's JSON pointer (`/carrier`; for a calibration by field: a list's items are one
    field, `/lines/0/total` fits the curve of `/lines/*/total`)."""


@dataclass(frozen=True, slots=True)
class Curve:
    """One type's map from confidence to the probability of being right."""

    method: Method
    parameters: tuple[float, ...]
    """Platt: `(slope, intercept)` on the logit; isotonic: the step points, `(x0, y0, x1, y1,
    ...)`, `x` ascending."""
    samples: int

    def __call__(self, confidence: float) -> float:
        if self.method == "platt":
            slope, intercept = self.parameters
            return _sigmoid(slope * _logit(confidence) + intercept)
        xs, ys = self.parameters[0::2], self.parameters[1::2]
        below = [y for x, y in zip(xs, ys, strict=True) if x <= confidence]
        return below[-1] if below else ys[0]


@dataclass(frozen=True)
class Calibration:
    """Curves per value type, and what they were fitted on."""

    curves: Mapping[str, Curve]
    fitted: Mapping[str, Any] = field(default_factory=dict)
    """Contract (name, version, fingerprint), provider, model, dataset, arms and sample counts
    of the fit: a call on another contract or model refuses it (`check_fitted`); one naming
    neither (made by hand) applies to any."""
    source: str | None = field(default=None, compare=False)
    """The file it was read from (`load`), for the errors that name it."""

    def __post_init__(self) -> None:
        if not self.curves:
            # (it would change no value, yet mark every result's confidence calibrated)
            raise ValueError("a Calibration has at least one curve: none maps no confidence")

    def probability(self, kind: str, confidence: float, field: str = "") -> float:
        """The calibrated probability of a value of `kind` (at `field`, a JSON pointer with
        array indices as `*`) decoded with `confidence`: the field's curve, else its type's,
        else the one over all."""
        curve = (
            (self.curves.get(field) if field else None)
            or self.curves.get(kind)
            or self.curves.get(_ALL)
        )
        return confidence if curve is None else min(max(curve(confidence), 0.0), 1.0)

    def apply(self, confidence: Confidence) -> Confidence:
        """`confidence` with each value's probability calibrated (`calibrated` true)."""
        mapped = {
            pointer: self.probability(item.kind, item.probability, _INDEX.sub("/*", pointer))
            for pointer, item in confidence.details.items()
        }
        return confidence.with_calibrated(mapped)

    def check_fitted(self, name: str, fingerprint: str, model: str | None) -> None:
        """`CalibrationMismatch` when `fitted` names another contract than the call's (`name`,
        by its schema fingerprint where `fitted` records one, else by its name) or another model
        than the call's `model` (where both are known): its curves are that model's and that
        contract's, and would map this call's confidence to a probability measured on other
        values. A calibration whose `fitted` names no contract and no model applies to any."""
        found = mismatch(self.fitted, name, fingerprint, model)
        if found is None:
            return
        fitted, call = found
        where = f" ({self.source})" if self.source else ""
        raise CalibrationMismatch(
            f"this confidence calibration{where} was fitted for {fitted}, not for {call}: fit "
            f"one for {name} on the model you call (sdk eval --calibrate-confidence)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CALIBRATION_FORMAT,
            "signal": "the value's probability among the allowed tokens (sdk.confidence)",
            "fitted": dict(self.fitted),
            "curves": {
                kind: {"method": c.method, "parameters": list(c.parameters), "samples": c.samples}
                for kind, c in self.curves.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "calibration") -> Calibration:
        """A calibration from its JSON form (`to_json`; `CalibrationFileError` naming
        `source` when it is not one)."""
        return _read(data, source, None)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write it as JSON, atomically."""
        target = Path(path)
        write_atomic(target, json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n")
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Calibration:
        """Read a calibration file (`CalibrationFileError` naming the file and the problem)."""
        try:
            text = read_regular_text(path)  # (a named pipe is refused, never waited on)
            data = json.loads(text)
        except (OSError, ValueError, RecursionError) as error:
            problem = f"{path}: not a readable calibration file ({error})"
            raise CalibrationFileError(problem) from None
        return replace(_read(data, str(path), text), source=str(path))


_KINDS: Final = ("string", "number", "boolean", "null")
"""The value types a curve may be for (`sdk.confidence.ValueConfidence.kind`)."""


def _read(data: object, source: str, text: str | None) -> Calibration:
    """A calibration from its JSON form read from `source` (its `text`, where it was a file:
    an error names the line of the key it is at)."""

    def refused(
        problem: str, key: str | None = None, within: str | None = None
    ) -> CalibrationFileError:
        line = line_of(text, key, within) if text is not None and key is not None else None
        where = source if line is None else f"{source}, line {line}"
        return CalibrationFileError(f"{where}: {problem}")

    if not isinstance(data, Mapping) or data.get("format") != CALIBRATION_FORMAT:
        raise refused(f"not a confidence calibration ({CALIBRATION_FORMAT})")
    entries = data.get("curves")
    if entries is not None and not isinstance(entries, Mapping):
        raise refused("`curves` must be an object of curves", "curves")
    if not entries:
        # It would change no value, yet mark every result's confidence calibrated.
        raise refused("it has no curves (a calibration maps each value type or field)", "curves")
    curves = {}
    for kind, item in entries.items():
        try:
            curves[str(kind)] = _curve(str(kind), item)
        except ValueError as error:
            problem = f"curve {kind!r} is not a calibration curve ({error})"
            raise refused(problem, str(kind), "curves") from None
    try:  # (checked as an abstention thresholds file's `calibration` is: `sdk._fitted`)
        fitted = checked_record(data.get("fitted"), "fitted")
    except RecordError as error:
        raise refused(str(error), error.key, "fitted") from None
    return Calibration(curves, fitted)


def _curve(kind: str, item: Any) -> Curve:
    """One curve of a file (`ValueError` saying what is wrong with it)."""
    if kind != _ALL and kind not in _KINDS and not kind.startswith("/"):
        raise ValueError(
            f"it is for no value type ({', '.join(_KINDS)}), no field (a JSON pointer: "
            f"/name) and not all ({_ALL!r}), so it would never apply"
        )
    if not isinstance(item, dict) or item.get("method") not in ("platt", "isotonic"):
        raise ValueError("its method is 'platt' or 'isotonic'")
    numbers = item.get("parameters")
    if not isinstance(numbers, list) or not all(
        isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n)
        for n in numbers
    ):
        raise ValueError("its parameters are not finite numbers")
    method = item["method"]
    if (method == "platt" and len(numbers) != 2) or (
        method == "isotonic" and (len(numbers) < 2 or len(numbers) % 2)
    ):
        raise ValueError("wrong number of parameters")
    if method == "isotonic":
        _check_steps(numbers[0::2], numbers[1::2])
    elif numbers[0] < 0:
        # A calibration learns a monotone map: a falling curve (slope -50 takes 0.9 to 0.0000
        # and 0.1 to 1.0000) turns the surest values into the least likely right.
        raise ValueError(f"its slope {numbers[0]!r} is negative: surer would be less likely right")
    samples = item.get("samples") or 0
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise ValueError("its samples are not a count")
    return Curve(method, tuple(float(n) for n in numbers), samples)


def _check_steps(xs: Sequence[float], ys: Sequence[float]) -> None:
    """An isotonic curve's steps as `_isotonic` writes them: `x` ascending confidences (`Curve`
    looks the step up in that order), `y` non-decreasing probabilities."""
    if any(b <= a for a, b in pairwise(xs)):
        raise ValueError("its step points are not ascending")
    if not all(0.0 <= x <= 1.0 for x in xs):
        raise ValueError("its step points are not confidences within [0, 1]")
    if any(b < a for a, b in pairwise(ys)):
        raise ValueError("its steps are not non-decreasing")
    if not all(0.0 <= y <= 1.0 for y in ys):
        raise ValueError("its steps are not within [0, 1]")


def fit(
    samples: Iterable[Sample],
    *,
    method: Method = "platt",
    by: Grouping = "type",
    fitted: Mapping[str, Any] | None = None,
) -> Calibration:
    """A calibration fitted on labelled samples: a curve per type (or per field, `by="field"`)
    with enough of them, and one over all (`ValueError` when there is nothing to fit, or a
    confidence outside [0, 1])."""
    pool = list(samples)
    if not pool:
        raise ValueError("no labelled values to calibrate on")
    outside = [s.confidence for s in pool if not 0.0 <= s.confidence <= 1.0]  # nan included
    if outside:
        raise ValueError(f"a confidence is a probability within [0, 1], not {outside[0]!r}")
    by_kind: dict[str, list[Sample]] = {_ALL: pool}
    for sample in pool:
        # a list's items are one field: `/lines/0/total` is `/lines/*/total`, as `apply` reads it
        group = _INDEX.sub("/*", sample.field) if by == "field" and sample.field else sample.kind
        by_kind.setdefault(group, []).append(sample)
    curves = {
        kind: _fit_curve(group, method)
        for kind, group in by_kind.items()
        if kind == _ALL or len(group) >= _MIN_SAMPLES
    }
    counts = {kind: len(group) for kind, group in by_kind.items()}
    return Calibration(
        curves, {**dict(fitted or {}), "method": method, "by": by, "samples": counts}
    )


def _fit_curve(samples: Sequence[Sample], method: Method) -> Curve:
    xs = [s.confidence for s in samples]
    ys = [1.0 if s.correct else 0.0 for s in samples]
    if method == "isotonic":
        return Curve("isotonic", _isotonic(xs, ys), len(samples))
    return Curve("platt", _platt(xs, ys), len(samples))


def _platt(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Logistic regression of the outcome on logit(confidence): Newton's method with a
    backtracking line search, on Platt's smoothed targets (so a perfectly separated sample does
    not diverge)."""
    positives = sum(ys)
    high = (positives + 1) / (positives + 2)
    low = 1 / (len(ys) - positives + 2)
    targets = [high if y else low for y in ys]
    features = [_logit(x) for x in xs]

    def loss(slope: float, intercept: float) -> float:
        total = 0.0
        for f, t in zip(features, targets, strict=True):
            z = slope * f + intercept
            # log(1 + e^z) - t z, written so that it never overflows
            total += (z if z > 0 else 0.0) + math.log1p(math.exp(-abs(z))) - t * z
        return total

    slope, intercept = 1.0, 0.0
    current = loss(slope, intercept)
    for _ in range(100):
        g0 = g1 = h00 = h01 = h11 = 0.0
        for f, t in zip(features, targets, strict=True):
            p = _sigmoid(slope * f + intercept)
            w = max(p * (1 - p), 1e-12)
            g0, g1 = g0 + (p - t) * f, g1 + (p - t)
            h00, h01, h11 = h00 + w * f * f, h01 + w * f, h11 + w
        det = h00 * h11 - h01 * h01
        if abs(det) < 1e-12:
            break
        d0, d1 = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
        step = 1.0
        while step > 1e-8 and loss(slope - step * d0, intercept - step * d1) > current:
            step /= 2
        slope, intercept = slope - step * d0, intercept - step * d1
        improved = current - loss(slope, intercept)
        current -= improved
        if abs(step * d0) + abs(step * d1) < 1e-10 or improved < 1e-12:
            break
    if slope < 0:
        # Surer values more often wrong: the closest curve that does not fall (the loss is
        # convex, so its minimum with the slope held at 0 or more is at 0) is flat, at the share
        # of values right. A falling one would rank the surest values least likely right.
        slope, intercept = 0.0, _logit(sum(targets) / len(targets))
    return slope, intercept


def _isotonic(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, ...]:
    """Pool-adjacent-violators: the non-decreasing step function closest to the outcomes
    (values decoded with the same confidence share one step)."""
    pooled: dict[float, list[float]] = {}
    for x, y in zip(xs, ys, strict=True):
        pooled.setdefault(x, [0.0, 0.0])
        pooled[x][0] += y
        pooled[x][1] += 1
    blocks: list[list[float]] = []  # [sum of y, count, lowest x]
    for x in sorted(pooled):
        blocks.append([pooled[x][0], pooled[x][1], x])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count, _ = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    points: list[float] = []
    for total, count, start in blocks:
        points.extend((start, total / count))
    return tuple(points)


def expected_calibration_error(
    confidences: Sequence[float], correct: Sequence[bool], *, bins: int = 10
) -> float:
    """ECE: over equal-width bins of confidence, the gap between mean confidence and accuracy,
    weighted by the share of values in the bin (0: calibrated; `ValueError` when empty or a
    confidence is outside [0, 1])."""
    if not confidences or len(confidences) != len(correct):
        raise ValueError("ECE needs as many outcomes as confidences, and at least one")
    total = len(confidences)
    return sum(
        count / total * abs(mean - accuracy)
        for mean, accuracy, count in reliability(confidences, correct, bins=bins)
    )


def ece_interval(
    confidences: Sequence[float],
    correct: Sequence[bool],
    *,
    bins: int = 10,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """ECE with a 95% bootstrap interval over the values: `(estimate, low, high)`."""
    estimate = expected_calibration_error(confidences, correct, bins=bins)
    rng = random.Random(seed)
    n = len(confidences)
    draws = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        draws.append(
            expected_calibration_error(
                [confidences[i] for i in picks], [correct[i] for i in picks], bins=bins
            )
        )
    draws.sort()
    high = draws[min(int(0.975 * resamples), resamples - 1)]
    return estimate, draws[int(0.025 * resamples)], high


def reliability(
    confidences: Sequence[float], correct: Sequence[bool], *, bins: int = 10
) -> list[tuple[float, float, int]]:
    """The reliability plot's points: per non-empty bin of confidence, `(mean confidence,
    accuracy, count)` (`ValueError` for a confidence outside [0, 1])."""
    groups: dict[int, list[int]] = {}
    for index, value in enumerate(confidences):
        if not 0.0 <= value <= 1.0:  # nan included
            raise ValueError(f"a confidence is a probability within [0, 1], not {value!r}")
        groups.setdefault(min(int(value * bins), bins - 1), []).append(index)
    points = []
    for _, members in sorted(groups.items()):
        mean = sum(confidences[i] for i in members) / len(members)
        accuracy = sum(1 for i in members if correct[i]) / len(members)
        points.append((mean, accuracy, len(members)))
    return points


def _logit(p: float) -> float:
    p = min(max(p, _EPSILON), 1 - _EPSILON)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1 / (1 + math.exp(-x))
    e = math.exp(x)
    return e / (1 + e)
