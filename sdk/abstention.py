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
import os
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
    def load(cls, path: str | os.PathLike[str]) -> Thresholds:
        """Read a thresholds file: `ValueError` naming the file, the line and what is wrong
        (unreadable, not JSON, not a thresholds file, an entry of the wrong shape)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a readable thresholds file ({error})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            where = f"{path}, line {error.lineno}, column {error.colno}"
            raise ValueError(f"{where}: not JSON ({error.msg})") from None
        except RecursionError:
            raise ValueError(f"{path}: not a thresholds file (nested too deeply)") from None
        if not isinstance(data, dict) or data.get("format") != THRESHOLDS_FORMAT:
            raise ValueError(f"{path}: not an abstention thresholds file ({THRESHOLDS_FORMAT})")
        return _thresholds(data, _FileText(str(path), text))


@dataclass(frozen=True, slots=True)
class _FileText:
    """A file's name and text, to say where in it a key is."""

    name: str
    text: str

    def error(self, key: str, problem: str) -> ValueError:
        """`ValueError` naming the file and the line where `key` first appears."""
        found = self.text.find(json.dumps(key))
        line = self.text.count("\n", 0, found) + 1 if found >= 0 else 1
        return ValueError(f"{self.name}, line {line}: {problem}")


def _thresholds(data: dict[str, Any], file: _FileText) -> Thresholds:
    fields_data, calibration = data.get("fields") or {}, data.get("calibration") or {}
    if not isinstance(fields_data, dict):
        raise file.error("fields", "`fields` must be an object of field pointers")
    if not isinstance(calibration, dict):
        raise file.error("calibration", "`calibration` must be an object")
    ceiling = data.get("max_false_abstention", DEFAULT_MAX_FALSE_ABSTENTION)
    if not _fraction(ceiling):
        raise file.error("max_false_abstention", "`max_false_abstention` must be within [0, 1]")
    fields: dict[str, FieldThreshold] = {}
    for pointer, item in fields_data.items():
        fields[pointer] = _entry(pointer, item, file)
    return Thresholds(fields, float(ceiling), calibration)


def _entry(pointer: str, item: object, file: _FileText) -> FieldThreshold:
    """One field's entry: numbers in [0, 1] and two counts, or `ValueError` naming it."""
    names = ("threshold", "recall", "false_abstention")
    if not isinstance(item, dict) or not all(_fraction(item.get(name)) for name in names):
        raise file.error(pointer, f"field {pointer!r} is not a threshold entry (threshold, "
                                  "recall and false_abstention within [0, 1])")  # fmt: skip
    counts = [item.get("stated"), item.get("absent")]
    if not all(isinstance(count, int) and not isinstance(count, bool) for count in counts):
        raise file.error(pointer, f"field {pointer!r}: stated and absent must be whole numbers")
    threshold, recall, false_abstention = (float(item[name]) for name in names)
    return FieldThreshold(threshold, recall, false_abstention, item["stated"], item["absent"])


def _fraction(value: object) -> bool:
    """A number (not a bool) in [0, 1]."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0.0 <= value <= 1.0
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
