"""Mass-aware abstention: the model's own hesitation at a copied value's first token, and the
thresholds, calibrated on labelled data, below which a nullable field abstains.

Under a grounded grammar (`Verbatim`, `sdk.schema.grounding`) a value can only be copied from
the source. Where the source states the value, the model's favourite first tokens are the
value's own and most of its probability survives the mask; where it does not, the model wanted
to write something else (a name it would have invented) and little survives. That *surviving
mass* at the token that writes a value's first character is in the constraint diagnostics
(`sdk.diagnostics`, local models only) and is the signal here:

    signals = value_start_masses(result.diagnostics, result.text)   # {"/carrier": 0.07, ...}
    value, abstained = abstain(value, signals, thresholds)           # nulls where too low

The model's own probability of `null` at the field's first token would be the obvious signal,
but the diagnostics cannot isolate it there: that step's mass counts `null` and the opening
quote together, and the quote stays allowed whatever the model meant to write after it. (Greedy
decoding of the bundled model does not pick `null` there either.) One token later, inside the
string, is where a wish to invent shows.

`calibrate` picks, per field, the threshold with the highest abstention recall whose false
abstention (abstaining where the document does state the value) stays at or under a bound
(5% by default), on labelled outcomes; `Thresholds.save`/`Thresholds.load` keep them in a JSON
file (`sdk eval --calibrate FILE`, `--thresholds FILE`) that a client loads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from sdk._files import write_atomic
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import char_pointers

__all__ = [
    "DEFAULT_MAX_FALSE_ABSTENTION",
    "THRESHOLDS_FORMAT",
    "FieldThreshold",
    "Sample",
    "Thresholds",
    "abstain",
    "calibrate",
    "value_start_masses",
]

DEFAULT_MAX_FALSE_ABSTENTION = 0.05
"""The share of stated values a calibrated threshold may abstain on (issue 23: 5%)."""
THRESHOLDS_FORMAT = "sdk-abstention/1"


def value_start_masses(diagnostics: ConstraintDiagnostics | None, text: str) -> dict[str, float]:
    """Per field whose value in `text` is a non-empty string: the surviving mass at the step
    that wrote the value's first character (after the opening quote), by JSON pointer.

    A token that writes the quote and the first character together counts for both. Fields
    that are `null`, numbers or empty strings have no entry; so has a field whose steps the
    diagnostics do not cover (no diagnostics: an empty result).
    """
    if diagnostics is None or not text:
        return {}
    owners = char_pointers(text)
    starts: dict[str, int] = {}
    after_colon: set[str] = set()
    for index, pointer in enumerate(owners):
        if not pointer or pointer in starts:
            continue
        char = text[index]
        if pointer in after_colon:
            if char == '"' and index + 1 < len(text) and text[index + 1] != '"':
                starts[pointer] = index + 1
            elif not char.isspace():
                starts[pointer] = -1  # a value that is not a non-empty string
        elif char == ":":
            after_colon.add(pointer)
    masses: dict[str, float] = {}
    for pointer, start in starts.items():
        if start < 0:
            continue
        for step in diagnostics.steps:
            if step.offset <= start < step.offset + max(len(step.text), 1):
                masses[pointer] = step.mass
                break
    return masses


@dataclass(frozen=True, slots=True)
class Sample:
    """One labelled field of one calibration output."""

    field: str
    """The field's JSON pointer (`/carrier`)."""
    signal: float | None
    """Its value-start mass; `None` where the output had no string there (it abstained, or
    wrote something else)."""
    abstained: bool
    """Whether the output abstained there already (`null` or an escape member)."""
    should_abstain: bool
    """Whether the label says the document does not state the value."""


@dataclass(frozen=True, slots=True)
class FieldThreshold:
    """One field's threshold and what it did on the calibration data."""

    threshold: float
    """Abstain where the value-start mass is below it (0: never on the mass)."""
    recall: float
    """Abstention recall on the calibration data, with the threshold applied."""
    false_abstention: float
    """False abstention on the calibration data, with the threshold applied."""
    stated: int
    absent: int

    def to_json(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "recall": self.recall,
            "false_abstention": self.false_abstention,
            "stated": self.stated,
            "absent": self.absent,
        }


@dataclass(frozen=True)
class Thresholds:
    """Calibrated thresholds per field pointer, and where they were calibrated."""

    fields: Mapping[str, FieldThreshold]
    max_false_abstention: float = DEFAULT_MAX_FALSE_ABSTENTION
    calibration: Mapping[str, Any] = field(default_factory=dict)
    """What they were calibrated on: contract, model, dataset, items."""

    def of(self, pointer: str) -> float:
        """The threshold of the field at `pointer` (0, never abstain, for an unknown field)."""
        known = self.fields.get(pointer)
        return known.threshold if known is not None else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": THRESHOLDS_FORMAT,
            "signal": "surviving mass at the token writing a grounded value's first character",
            "max_false_abstention": self.max_false_abstention,
            "calibration": dict(self.calibration),
            "fields": {pointer: item.to_json() for pointer, item in self.fields.items()},
        }

    def save(self, path: str | Path) -> Path:
        """Write them as JSON, atomically."""
        target = Path(path)
        write_atomic(target, json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n")
        return target

    @classmethod
    def load(cls, path: str | Path) -> Thresholds:
        """Read a thresholds file (`ValueError` naming what is wrong with it)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a readable thresholds file ({error})") from None
        if not isinstance(data, dict) or data.get("format") != THRESHOLDS_FORMAT:
            raise ValueError(f"{path}: not an abstention thresholds file ({THRESHOLDS_FORMAT})")
        fields: dict[str, FieldThreshold] = {}
        for pointer, item in dict(data.get("fields") or {}).items():
            try:
                threshold = float(item["threshold"])
                entry = FieldThreshold(
                    threshold,
                    float(item["recall"]),
                    float(item["false_abstention"]),
                    int(item["stated"]),
                    int(item["absent"]),
                )
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{path}: field {pointer!r} is not a threshold entry") from None
            if not 0.0 <= threshold <= 1.0 or math.isnan(threshold):
                raise ValueError(f"{path}: threshold of {pointer!r} is not within [0, 1]")
            fields[str(pointer)] = entry
        return cls(
            fields,
            float(data.get("max_false_abstention", DEFAULT_MAX_FALSE_ABSTENTION)),
            dict(data.get("calibration") or {}),
        )


def calibrate(
    samples: Iterable[Sample],
    *,
    max_false_abstention: float = DEFAULT_MAX_FALSE_ABSTENTION,
    calibration: Mapping[str, Any] | None = None,
) -> Thresholds:
    """Per field, the threshold with the highest abstention recall whose false abstention is
    at most `max_false_abstention` (ties: the lowest threshold, the fewest abstentions).

    Recall and false abstention count every labelled sample of the field, including those the
    output abstained on by itself: the threshold adds abstentions, it never removes any.
    """
    if not 0.0 <= max_false_abstention <= 1.0:
        raise ValueError(f"max_false_abstention must be within [0, 1], not {max_false_abstention}")
    by_field: dict[str, list[Sample]] = {}
    for sample in samples:
        by_field.setdefault(sample.field, []).append(sample)
    fields = {
        pointer: _best(group, max_false_abstention) for pointer, group in by_field.items()
    }
    return Thresholds(fields, max_false_abstention, dict(calibration or {}))


def _best(samples: list[Sample], bound: float) -> FieldThreshold:
    stated = [s for s in samples if not s.should_abstain]
    absent = [s for s in samples if s.should_abstain]

    def rates(threshold: float) -> tuple[float, float]:
        def abstains(sample: Sample) -> bool:
            signal = sample.signal
            return sample.abstained or (signal is not None and signal < threshold)

        recall = sum(map(abstains, absent)) / len(absent) if absent else 0.0
        false = sum(map(abstains, stated)) / len(stated) if stated else 0.0
        return recall, false

    # Abstaining below `t` changes only at a signal: try 0 and just above each signal.
    signals = sorted({s.signal for s in samples if s.signal is not None})
    candidates = [0.0] + [math.nextafter(signal, math.inf) for signal in signals]
    best = (0.0, *rates(0.0))
    for threshold in candidates:
        recall, false = rates(min(threshold, 1.0))
        if false <= bound and recall > best[1]:
            best = (min(threshold, 1.0), recall, false)
    return FieldThreshold(best[0], best[1], best[2], len(stated), len(absent))


def abstain(
    value: Mapping[str, Any], signals: Mapping[str, float], thresholds: Thresholds
) -> tuple[dict[str, Any], list[str]]:
    """`value` (top-level fields, JSON form) with `null` where a field's value-start mass is
    under its threshold; and the pointers of the fields that abstained so."""
    out = dict(value)
    abstained = []
    for pointer, signal in signals.items():
        name = pointer[1:]
        if "/" in name or name not in out or not isinstance(out[name], str):
            continue
        if signal < thresholds.of(pointer):
            out[name] = None
            abstained.append(pointer)
    return out, abstained
