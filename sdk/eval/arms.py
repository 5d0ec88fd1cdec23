"""The arms of the paired evaluation: one way each of asking the same model for the same contract.

1. `constrained`: the production contract, grammar-constrained (the provider's structured mode);
2. `unconstrained`: no grammar; the defensive parser, and the client's retry with feedback;
3. `widened`: constrained, with `sdk.schema.widen(contract)`: every field may be `null`, every
   enum has an escape member;
4. `answer_first`: constrained, with `sdk.schema.answer_first(contract)`: the reasoning field
   moved after the answer, to measure what field order is worth;
5. `two_phase`: `generate(..., reasoning="two_phase")`: an unconstrained call works the problem
   through in prose, a constrained call transcribes it.

Every arm goes through the same `StructuredClient` (same retries, same `max_tokens`, same sampling
options): only what the arm is about differs. An arm that this contract, provider or client
cannot run raises `ArmUnavailable` with the reason, and the report lists it as not run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sdk.client import StructuredClient
from sdk.contract import Contract
from sdk.contract.derived import answer_first, reasoning_field, widen
from sdk.errors import ProviderError, StructuredOutputError
from sdk.eval.dataset import EvalItem
from sdk.eval.metrics import Outcome, score
from sdk.schema.canonical import schema_info

__all__ = [
    "ARMS",
    "ARM_TITLES",
    "UNCONSTRAINED_OPTIONS",
    "ArmUnavailable",
    "PreparedArm",
    "prepare_arm",
    "run_arm",
]

ARMS: Final = ("constrained", "unconstrained", "widened", "answer_first", "two_phase")
"""Every arm, in report order."""

ARM_TITLES: Final[Mapping[str, str]] = {
    "constrained": "constrained, production contract",
    "unconstrained": "unconstrained + parser + retry",
    "widened": "constrained, widened contract",
    "answer_first": "constrained, reasoning after the answer",
    "two_phase": "two-phase: prose, then constrained transcription",
}

UNCONSTRAINED_OPTIONS: Final[Mapping[str, Mapping[str, Any]]] = {
    "embedded": {"constrained": False},
    "test": {"constrained": False},
}
"""Per provider name, the call options that turn its grammar off. Only providers listed here can
run the `unconstrained` arm; the scripted `TestProvider` receives the option in
`request.options`, so a script can answer each arm differently."""

# Array indices in a diagnostics pointer: `/line_items/3/amount` is summarized with its siblings.
_INDEX = re.compile(r"/[0-9]+(?=/|$)")


class ArmUnavailable(Exception):
    """An arm that cannot run with this contract, provider or client (the message says why)."""


@dataclass(frozen=True)
class PreparedArm:
    """An arm ready to run: the contract it generates and what it adds to every call."""

    name: str
    contract: type[Contract]
    options: Mapping[str, Any] = field(default_factory=dict)
    """Provider options of the arm (`constrained=False`), added to the run's sampling options."""
    reasoning: str | None = None
    """`generate(..., reasoning=...)`, for the two-phase arm."""


def prepare_arm(name: str, contract: type[Contract], client: StructuredClient) -> PreparedArm:
    """The arm `name` for `contract` through `client`, or `ArmUnavailable` saying why not."""
    if name == "constrained":
        return PreparedArm(name, contract)
    if name == "unconstrained":
        options = UNCONSTRAINED_OPTIONS.get(client.provider.name)
        if options is None:
            raise ArmUnavailable(
                f"provider {client.provider.name!r} has no unconstrained mode the eval can turn "
                f"on (known: {', '.join(sorted(UNCONSTRAINED_OPTIONS))})"
            )
        return PreparedArm(name, contract, options)
    if name == "widened":
        return PreparedArm(name, widen(contract))
    if name == "answer_first":
        if reasoning_field(contract) is None:
            raise ArmUnavailable(f"{contract.__name__} has no reasoning field to move")
        try:
            return PreparedArm(name, answer_first(contract))
        except ValueError as error:
            raise ArmUnavailable(str(error)) from None
    if name == "two_phase":
        return PreparedArm(name, contract, reasoning="two_phase")
    raise ValueError(f"unknown arm {name!r}; arms: {', '.join(ARMS)}")


def run_arm(
    arm: PreparedArm,
    client: StructuredClient,
    item: EvalItem,
    *,
    escapes: Mapping[str, frozenset[str]],
    max_tokens: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run one item through one arm and score it. A `ProviderError` (the provider, not the
    model, failed) is raised, so that the run stops and can resume; every other failure is the
    arm's outcome."""
    kwargs: dict[str, Any] = {**(options or {}), **arm.options}
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if arm.reasoning is not None:
        kwargs["reasoning"] = arm.reasoning
    info = schema_info(arm.contract)
    schema = {"name": info.name, "version": info.version, "fingerprint": info.fingerprint}
    started = time.perf_counter()
    try:
        result = client.generate(
            arm.contract,
            prompt=item.prompt,
            source=item.document,
            **kwargs,
        )
    except ProviderError:
        raise
    except StructuredOutputError as error:
        latency = time.perf_counter() - started
        attempts = list(getattr(error, "attempts", None) or [])
        usage = getattr(error, "usage", None)
        input_tokens = sum(a.usage.input_tokens for a in attempts)
        output_tokens = sum(a.usage.output_tokens for a in attempts)
        if usage is not None and not attempts:
            input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
        last = attempts[-1].diagnostics if attempts else getattr(error, "diagnostics", None)
        return Outcome(
            item=item.id,
            arm=arm.name,
            valid=False,
            fields=score(item.expected, None, escapes),
            text=error.text,
            error=type(error).__name__,
            error_message=_describe(error, attempts),
            attempts=max(1, len(attempts)),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency=latency,
            schema=schema,
            mass=_mass(last),
            digest=item.digest,
        )
    latency = time.perf_counter() - started
    value = result.value.model_dump(mode="json")
    reasoning = getattr(result, "reasoning", None)
    return Outcome(
        item=item.id,
        arm=arm.name,
        valid=True,
        fields=score(item.expected, value, escapes),
        value=value,
        text=result.text,
        attempts=len(result.attempts),
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        latency=latency,
        schema={
            "name": result.schema.name,
            "version": result.schema.version,
            "fingerprint": result.schema.fingerprint,
        },
        mass=_mass(result.diagnostics),
        reasoning=reasoning if isinstance(reasoning, str) else None,
        digest=item.digest,
    )


def _describe(error: StructuredOutputError, attempts: list[Any]) -> str:
    """The error's message, and the last attempt's own error in full when it differs (a
    `RetriesExhausted` headline names the last error's kind, not its violations)."""
    message = str(error)
    last = attempts[-1].error if attempts else None
    if last is not None and last is not error:
        message += f"\nlast attempt: {type(last).__name__}: {last}"
    return message


def _mass(diagnostics: Any) -> dict[str, float] | None:
    """Lowest surviving mass per field, array indices folded (`/line_items/*/amount`)."""
    fields = getattr(diagnostics, "fields", None)
    if not fields:
        return None
    lowest: dict[str, float] = {}
    for item in fields:
        pointer = _INDEX.sub("/*", item.pointer) or "/"
        lowest[pointer] = min(lowest.get(pointer, 1.0), float(item.min_mass))
    return lowest
