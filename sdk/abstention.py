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

from sdk._files import read_regular_text
from sdk._files import write_atomic
from sdk._fitted import RecordError
from sdk._fitted import checked_record
from sdk._fitted import fitted_models
from sdk._fitted import line_of
from sdk._fitted import mismatch
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import char_pointers
from sdk.schema.grounding import VERBATIM_KEY
from sdk.schema.grounding import branch_anchors

__all__ = [
    "DEFAULT_MAX_FALSE_ABSTENTION",
    "DEFAULT_THRESHOLD",
    "THRESHOLDS_FORMAT",
    "FieldThreshold",
    "Sample",
    "Thresholds",
    "ThresholdsFileError",
    "ThresholdsMismatch",
    "abstain",
    "calibrate",
    "value_start_masses",
]

DEFAULT_MAX_FALSE_ABSTENTION = 0.05
"""The share of stated values a calibrated threshold may abstain on (issue 23: 5%)."""
THRESHOLDS_FORMAT = "sdk-abstention/1"
"""The `format` a thresholds file declares (`Thresholds.load` refuses any other)."""
DEFAULT_THRESHOLD = 0.3
"""The value-start mass under which `abstention="guided"` abstains on a nullable copied value
when no calibrated thresholds are given (`Thresholds.standard`): measured on both embedded
models against calibrated thresholds (docs/guides/confidence.md, eval-results/)."""


class ThresholdsFileError(ValueError):
    """A thresholds file that cannot be read: names the file and, where it can, the line."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        problem: str,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        where = str(path) if line is None else f"{path}, line {line}"
        where += f", column {column}" if line is not None and column is not None else ""
        super().__init__(f"{where}: {problem}")
        self.path = os.fspath(path)
        self.line = line
        self.column = column
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.problem, self.line, self.column))


class ThresholdsMismatch(ValueError):
    """Thresholds calibrated for another contract than the call's (names both)."""


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
    """One field's threshold and what it did on the calibration data (set by hand: only the
    threshold, `FieldThreshold(0.2)`)."""

    threshold: float
    """Abstain where the value-start mass is below it (0: never on the mass)."""
    recall: float | None = None
    """Abstention recall on the calibration data, with the threshold applied."""
    false_abstention: float | None = None
    """False abstention on the calibration data, with the threshold applied."""
    stated: int = 0
    absent: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.threshold, (int, float)) or isinstance(self.threshold, bool):
            raise TypeError(f"a threshold is a number, not {self.threshold!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"a threshold is within [0, 1], not {self.threshold!r}")

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
    """What they were calibrated on: contract, model, dataset, items (empty: set by hand)."""
    default: float = 0.0
    """The threshold of a field not in `fields` (0: never abstain on the mass)."""

    def of(self, pointer: str) -> float:
        """The threshold of the field at `pointer` (`default` for a field not listed)."""
        known = self.fields.get(pointer)
        return known.threshold if known is not None else self.default

    @classmethod
    def fixed(cls, thresholds: Mapping[str, float] | float) -> Thresholds:
        """Thresholds set by hand: one for every nullable copied field (`0.25`), or one per
        field pointer (`{"/carrier": 0.25}`; the fields not named never abstain on the mass)."""
        if isinstance(thresholds, Mapping):
            fields = {str(p): _by_hand(str(p), t) for p, t in thresholds.items()}
            return cls(fields, calibration={"set": "by hand"})
        return cls({}, calibration={"set": "by hand"}, default=FieldThreshold(thresholds).threshold)

    @classmethod
    def standard(cls, schema: Mapping[str, Any]) -> Thresholds:
        """What `abstention="guided"` uses without thresholds given: `DEFAULT_THRESHOLD` for
        every top-level `Verbatim | None` field of `schema` (a canonical schema) without a
        `pattern` or an anchor's `after` labels, nothing for the others. A field with a pattern
        is left to the grammar: where no span of the source has its form, `null` is all it can
        write, and where one has, the mass at its first character says little (the pattern, not
        the model, chose the span). A field an anchor confines is left to its anchor."""
        fields = {
            f"/{name}": FieldThreshold(DEFAULT_THRESHOLD)
            for name, node in dict(schema.get("properties") or {}).items()
            if _free_copy(node)
        }
        return cls(fields, calibration={"set": "default"})

    def describe(self) -> str:
        """Where the thresholds come from, in a few words (for a result's note)."""
        made = self.calibration.get("set")
        if made == "default":
            named = ", ".join(self.fields) or "no field"
            return f"the default threshold {DEFAULT_THRESHOLD:g} on {named} (not calibrated)"
        if made == "by hand":
            return "thresholds set by hand"
        model = ", ".join(fitted_models(self.calibration)) or "a model"
        dataset = self.calibration.get("dataset") or "labelled data"
        return f"thresholds calibrated on {dataset} for {model}"

    def check_contract(self, name: str, fingerprint: str, model: str | None = None) -> None:
        """`ThresholdsMismatch` when they were calibrated for another contract than the one
        named: by its schema fingerprint, which `sdk eval --calibrate` always records; a file
        naming its contract without one was written by hand, and its name decides. Thresholds
        naming no contract (set by hand, `fixed`) fit any (`sdk._fitted`). Also when they name
        another `model` than the call's, where both are known: a value's surviving mass, which
        they threshold, is the model's."""
        found = mismatch(self.calibration, name, fingerprint, model)
        if found is None:
            return
        calibrated, call = found
        raise ThresholdsMismatch(
            f"these abstention thresholds were calibrated for {calibrated}, not for {call}: "
            f"calibrate them on {name} (sdk eval --calibrate)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": THRESHOLDS_FORMAT,
            "signal": "surviving mass at the token writing a grounded value's first character",
            "max_false_abstention": self.max_false_abstention,
            "default": self.default,
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
        """Read a thresholds file (`ThresholdsFileError`, a `ValueError`, naming the file, the
        line where it can, and what is wrong: unreadable, not JSON, not a thresholds file, a
        setting or an entry of the wrong shape)."""
        try:
            text = read_regular_text(path)  # (a named pipe is refused, never waited on)
        except (OSError, ValueError) as error:
            raise ThresholdsFileError(path, f"not a readable thresholds file ({error})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            problem = f"not JSON ({error.msg})"
            raise ThresholdsFileError(path, problem, error.lineno, error.colno) from None
        except RecursionError:
            raise ThresholdsFileError(path, "not a thresholds file (nested too deeply)") from None
        if not isinstance(data, dict) or data.get("format") != THRESHOLDS_FORMAT:
            problem = f"not an abstention thresholds file ({THRESHOLDS_FORMAT})"
            raise ThresholdsFileError(path, problem)
        return _thresholds(path, text, data)


def _by_hand(pointer: str, threshold: object) -> FieldThreshold:
    """One field's threshold set by hand (its error names the field)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"the threshold of {pointer} is a number in [0, 1], not {threshold!r}")
    try:
        return FieldThreshold(float(threshold))
    except ValueError as error:
        raise ValueError(f"the threshold of {pointer}: {error}") from None


def _thresholds(path: str | os.PathLike[str], text: str, data: dict[str, Any]) -> Thresholds:
    """The settings and entries of a parsed thresholds file (`ThresholdsFileError` at the line
    of what is wrong)."""
    entries = data.get("fields") or {}
    if not isinstance(entries, dict):
        problem = "`fields` must be an object of field pointers"
        raise ThresholdsFileError(path, problem, line_of(text, "fields"))
    try:  # (what they were calibrated for: checked as a confidence calibration's `fitted` is)
        calibration = checked_record(data.get("calibration"), "calibration")
    except RecordError as error:
        line = line_of(text, error.key, "calibration")
        raise ThresholdsFileError(path, str(error), line) from None
    settings = {"max_false_abstention": DEFAULT_MAX_FALSE_ABSTENTION, "default": 0.0}
    for name in settings:
        value = data.get(name, settings[name])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            problem = f"`{name}` must be within [0, 1]"
            raise ThresholdsFileError(path, problem, line_of(text, name))
        settings[name] = float(value)
    fields = {str(key): _entry(path, text, str(key), item) for key, item in entries.items()}
    return Thresholds(fields, settings["max_false_abstention"], calibration, settings["default"])


def _entry(path: str | os.PathLike[str], text: str, pointer: str, item: Any) -> FieldThreshold:
    """One field's entry of a thresholds file (`ThresholdsFileError` at its line): a threshold
    in [0, 1], and what it did on the calibration data where it was calibrated."""
    line = line_of(text, pointer)
    not_entry = f"field {pointer!r} is not a threshold entry"
    if not isinstance(item, dict):
        raise ThresholdsFileError(path, f"{not_entry} (an object with a threshold)", line)
    try:
        threshold = item["threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise TypeError(f"its threshold is {threshold!r}, not a number")
        if math.isnan(threshold) or not 0.0 <= threshold <= 1.0:
            raise ValueError(f"its threshold {threshold!r} is not within [0, 1]")
        return FieldThreshold(
            float(threshold),
            _optional(item.get("recall"), float),
            _optional(item.get("false_abstention"), float),
            int(item.get("stated", 0)),
            int(item.get("absent", 0)),
        )
    except KeyError:
        problem = f"{not_entry}: it has no threshold"
    except (TypeError, ValueError, OverflowError) as error:  # int() of an infinite count
        problem = f"{not_entry}: {error}"
    raise ThresholdsFileError(path, problem, line)


def _free_copy(node: Any) -> bool:
    """A `Verbatim | None` schema node whose string branch has no pattern, and that no `after`
    anchor confines (on the union or on the branch: `branch_anchors`): a confined field abstains
    by its anchor (no label, no span), and its mass is read against fewer allowed tokens than a
    threshold assumes (the eval's `anchored` arm measured wrong abstentions on right values with
    the mass kept there)."""
    branches = node.get("anyOf") if isinstance(node, Mapping) else None
    if not isinstance(branches, list):
        return False
    nullable = any(isinstance(b, Mapping) and b.get("type") == "null" for b in branches)
    copies = [(b, anchor) for b, anchor in branch_anchors(node) if b.get(VERBATIM_KEY) is True]
    confined = any(anchor is not None and anchor.after for _, anchor in copies)
    return nullable and bool(copies) and not confined and all("pattern" not in b for b, _ in copies)


def _optional(value: Any, kind: Any) -> Any:
    return None if value is None else kind(value)


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
    fields = {pointer: _best(group, max_false_abstention) for pointer, group in by_field.items()}
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
