"""What a calibration was fitted for, against what a call is: the one check behind the abstention
thresholds (`sdk.abstention.Thresholds.check_contract`) and the confidence calibration
(`sdk.calibration.Calibration.check_fitted`), which `sdk eval` records alike (`contract`: its
name, version and fingerprint; `provider`; `model`, and `models`: every model whose answers it
was fitted on).

A record written by the SDK always holds the contract's fingerprint, and the fingerprint decides
(a contract whose schema or name changed since is another contract). A record naming a contract
without a fingerprint was written by hand: its name decides. A record naming
no contract (and no model) fits anything: thresholds or curves set by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["fingerprinted", "fitted_models", "mismatch"]


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
