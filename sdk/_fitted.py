"""What a calibration was fitted for, against what a call is: the one check behind the abstention
thresholds (`sdk.abstention.Thresholds.check_contract`) and the confidence calibration
(`sdk.calibration.Calibration.check_fitted`), which `sdk eval` records alike (`contract`: its
name, version and fingerprint; `provider`; `model`, and `models`: every model whose answers it
was fitted on).

A record written by the SDK always holds the contract's fingerprint, and the fingerprint decides
(a contract whose schema or name changed since is another contract). A record naming a contract
without a fingerprint was written by hand: its name decides. A record naming
no contract (and no model) fits anything: thresholds or curves set by hand. So a record read
from a file is checked first (`checked_record`, for both files alike): a damaged one read as
naming nothing would fit any contract and model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["RecordError", "checked_record", "fingerprinted", "fitted_models", "line_of", "mismatch"]


class RecordError(ValueError):
    """A fitted record of the wrong shape; `key` is the record's own key it is at (a file's
    loader finds its line)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key


def checked_record(recorded: object, label: str) -> dict[str, Any]:
    """A fitted record read from a file (`label`: its key there, `"fitted"`, `"calibration"`),
    as `mismatch` reads it: none (`null`, or the key left out) is `{}`; anything but an object,
    or a `contract`, `model`, `models` or `provider` of another shape than the SDK writes or a
    person would (see the module docstring), is a `RecordError` naming the key."""
    if recorded is None:
        return {}
    if not isinstance(recorded, dict):
        raise RecordError(
            label,
            f"`{label}` must be an object (what it was fitted for), not {_shown(recorded)}",
        )
    contract = recorded.get("contract")
    if isinstance(contract, dict):
        for key in ("name", "fingerprint"):
            if contract.get(key) is not None and _text(contract.get(key)) is None:
                raise RecordError(key, _must(f"{label}.contract.{key}", contract.get(key)))
        version = contract.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            problem = f"`{label}.contract.version` must be a whole number, not {_shown(version)}"
            raise RecordError("version", problem)
        if _text(contract.get("name")) is None and _text(contract.get("fingerprint")) is None:
            problem = f"`{label}.contract` names no contract (a name or a fingerprint)"
            raise RecordError("contract", problem)
    elif contract is not None and _text(contract) is None:
        problem = f"`{label}.contract` must be a contract's name or an object naming it"
        raise RecordError("contract", f"{problem}, not {_shown(contract)}")
    for key in ("model", "provider"):
        if recorded.get(key) is not None and _text(recorded.get(key)) is None:
            raise RecordError(key, _must(f"{label}.{key}", recorded.get(key)))
    models = recorded.get("models")
    if (
        models is not None
        and _text(models) is None
        and not (isinstance(models, list) and all(_text(item) is not None for item in models))
    ):
        problem = f"`{label}.models` must be a model's name or a list of them"
        raise RecordError("models", f"{problem}, not {_shown(models)}")
    return recorded


def line_of(text: str, key: str, within: str | None = None) -> int | None:
    """The line of the first `"key":` in a file's `text` (1-based), if it is there; with
    `within`, the first after `"within":` (a curve's kind, which `fitted` may name before)."""
    start = 0
    if within is not None:
        start = max(_found(text, within, 0), 0)
    found = _found(text, key, start)
    return text.count("\n", 0, found) + 1 if found >= 0 else None


def _found(text: str, key: str, start: int) -> int:
    found = text.find(json.dumps(key, ensure_ascii=False) + ":", start)
    return found if found >= 0 else text.find(json.dumps(key) + ":", start)


def _must(key: str, value: object) -> str:
    return f"`{key}` must be a non-empty string, not {_shown(value)}"


def _shown(value: object) -> str:
    shown = json.dumps(value, ensure_ascii=False, default=repr)
    return shown if len(shown) <= 60 else f"{shown[:57]}..."


def mismatch(
    recorded: Mapping[str, Any], name: str, fingerprint: str, model: str | None = None
) -> tuple[str, str] | None:
    """`(what it was fitted for, what the call is)`, in words, when `recorded` names another
    contract than the call's `name` (by its fingerprint where it records one, else by its name)
    or, where both are known, another model than `model`; `None` when it fits."""
    fitted: list[str] = []
    call: list[str] = []
    contract = recorded.get("contract")
    if isinstance(contract, str):  # written by hand: `"contract": "Invoice"`
        contract = {"name": contract}
    if isinstance(contract, Mapping):
        named, printed = _text(contract.get("name")), _text(contract.get("fingerprint"))
        if printed is not None and printed != fingerprint:
            fitted.append(f"{named or 'a contract'} (fingerprint {printed[:12]})")
            call.append(f"{name} (fingerprint {fingerprint[:12]})")
        elif printed is None and named is not None and named != name:
            fitted.append(f"{named} (no fingerprint recorded)")
            call.append(f"{name} (fingerprint {fingerprint[:12]})")
    models = fitted_models(recorded)
    if model and models and model not in models:
        fitted.append(f"model{'s' if len(models) > 1 else ''} {', '.join(models)}")
        call.append(f"model {model}")
    return (" and ".join(fitted), " and ".join(call)) if fitted else None


def fitted_models(recorded: Mapping[str, Any]) -> list[str]:
    """The models a record was fitted on: its `models` (what `sdk eval` writes: behind a
    `FallbackProvider`, every model that answered) where it has them, else its `model`
    (a record written before `models`, or by hand); none: unknown. A record written by hand
    may name one model as `models` (`"models": "gpt-4o"`), as it may name its contract."""
    listed = recorded.get("models")
    if isinstance(listed, str):
        listed = [listed]
    if isinstance(listed, list):
        known = [name for item in listed if (name := _text(item)) is not None]
        if known:
            return known
    one = _text(recorded.get("model"))
    return [one] if one is not None else []


def fingerprinted(recorded: Mapping[str, Any]) -> bool:
    """Whether `recorded` names its contract by fingerprint: written by the SDK, fitted on that
    very contract (a call takes it only when the fingerprint is its own: `mismatch`)."""
    contract = recorded.get("contract")
    return isinstance(contract, Mapping) and _text(contract.get("fingerprint")) is not None


def _text(value: object) -> str | None:
    """A recorded name, fingerprint or model: a non-empty string, else unknown."""
    return value if isinstance(value, str) and value else None
