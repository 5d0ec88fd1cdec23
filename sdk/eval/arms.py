"""The arms of the paired evaluation: one way each of asking the same model for the same contract.

1. `constrained`: the production contract, grammar-constrained (the provider's structured mode);
2. `unconstrained`: no grammar; the defensive parser, and the client's retry with feedback;
3. `widened`: constrained, with `sdk.schema.widen(contract)`: every field may be `null`, every
   enum has an escape member;
4. `answer_first`: constrained, with `sdk.schema.answer_first(contract)`: the reasoning field
   moved after the answer, to measure what field order is worth;
5. `two_phase`: `generate(..., reasoning="two_phase")`: an unconstrained call works the problem
   through in prose, a constrained call transcribes it.

Issue 23's arms, for contracts with `Verbatim`/`SourceQuote` strings and fields that may be
`null`. The arms above run with decode-time grounding off where the provider can switch it per
call (`grounding=False`: the values are checked after parsing, as before grounding existed), so
that each arm below adds one mechanism to `constrained`:

6. `grounded`: the production contract, its grounded strings confined to spans of the source
   while decoding (`sdk.schema.grounding`);
7. `evidence_gated`: grounded, with `sdk.contract.derived.evidence_gated(contract)`: each
   nullable field is written as a `Verbatim` evidence span then its value, or `null`;
8. `presence_first`: grounded, two calls: `presence(contract)` says per nullable field whether
   the document states it, then `null_only(contract, unstated)` extracts with those fields
   forced to `null`;
9. `mass_aware`: grounded, every nullable value a span of the source can fill written (`null`
   only where none can: an id whose pattern no span matches), then a field abstains where the
   surviving mass at its value's first token is under a threshold calibrated on labelled data
   (`sdk.abstention`; `sdk eval --calibrate FILE` writes them, `--thresholds FILE` reads them).

Issue 32's arms, beside the client's `guided`:

10. `anchored`: `mass_aware` (same thresholds, but for the fields confined to regions, which
    abstain by their anchor), with each field an anchor names (`sdk eval
    --anchors FILE`: field -> `sdk.schema.grounding.Anchor`) confined to the regions its `after`
    labels open while decoding, and abstaining where its value follows a `not_after` label
    (another party's): what knowing whose value a span is adds to mass-aware abstention;
11. `min_confidence`: grounded like `mass_aware` (every value a span can fill written), with the
    client's `min_confidence=` option: a value whose confidence (`Result.confidence`, calibrated
    where the run has a confidence calibration, `sdk eval --confidence-calibration FILE`) is
    under the floor (`--min-confidence`, default 0.5: with a calibration, "more likely wrong
    than right") comes back `null` with a note, or fails the call where it cannot be `null`.

Every arm goes through the same `StructuredClient` (same retries, same `max_tokens`, same sampling
options): only what the arm is about differs. An arm that this contract, provider or client
cannot run raises `ArmUnavailable` with the reason, and the report lists it as not run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any
from typing import Final
from typing import TypedDict
from typing import Unpack

from sdk._values.declared import check_keywords
from sdk.abstention import Thresholds
from sdk.abstention import ThresholdsMismatch
from sdk.abstention import abstain
from sdk.abstention import value_start_masses
from sdk.calibration import Calibration
from sdk.client import StructuredClient
from sdk.contract import Contract
from sdk.contract.derived import answer_first
from sdk.contract.derived import escape_members
from sdk.contract.derived import evidence_gated
from sdk.contract.derived import null_only
from sdk.contract.derived import nullable_fields
from sdk.contract.derived import presence
from sdk.contract.derived import reasoning_field
from sdk.contract.derived import ungated
from sdk.contract.derived import widen
from sdk.contract.derived import with_anchors
from sdk.engine.setup import check_every_model
from sdk.errors import ProviderError
from sdk.errors import StructuredOutputError
from sdk.eval.dataset import EvalItem
from sdk.eval.metrics import Outcome
from sdk.eval.metrics import score
from sdk.parsing import compile_contract
from sdk.schema.canonical import schema_info
from sdk.schema.grounding import Anchor
from sdk.schema.grounding import anchored

__all__ = [
    "ARMS",
    "ARM_TITLES",
    "DEFAULT_MIN_CONFIDENCE",
    "GROUNDED_ARMS",
    "GROUNDING_PROVIDERS",
    "UNCONSTRAINED",
    "ArmOptions",
    "ArmUnavailable",
    "PreparedArm",
    "prepare_arm",
    "run_arm",
]

ARMS: Final = (
    "constrained",
    "unconstrained",
    "widened",
    "answer_first",
    "two_phase",
    "grounded",
    "evidence_gated",
    "presence_first",
    "mass_aware",
    "anchored",
    "guided",
    "min_confidence",
)
"""Every arm, in report order."""

DEFAULT_MIN_CONFIDENCE: Final = 0.5
"""The `min_confidence` arm's floor unless the run sets one."""

ARM_TITLES: Final[Mapping[str, str]] = {
    "constrained": "constrained, production contract",
    "unconstrained": "unconstrained + parser + retry",
    "widened": "constrained, widened contract",
    "answer_first": "constrained, reasoning after the answer",
    "two_phase": "two-phase: prose, then constrained transcription",
    "grounded": "constrained, copied values grounded while decoding",
    "evidence_gated": "grounded, an evidence span before each nullable value",
    "presence_first": "grounded, a stated-or-not pass, then unstated fields null",
    "mass_aware": "grounded, abstain where the value's first-token mass is low",
    "anchored": "mass-aware, each value confined to its labels' regions and not another party's",
    "guided": 'the client\'s abstention="guided" (mass-aware where the engine allows)',
    "min_confidence": "grounded, null where the value's confidence is under min_confidence",
}

GROUNDED_ARMS: Final = frozenset(
    {"grounded", "evidence_gated", "presence_first", "mass_aware", "anchored"}
)
"""The arms that decode with grounding on; the others turn it off where they can."""

GROUNDING_PROVIDERS: Final = frozenset({"embedded", "test"})
"""Providers that take `grounding=` per call (the others ground as they are configured)."""

UNCONSTRAINED: Final[Mapping[str, Any]] = {"constrained": False}
"""The call option that turns a provider's grammar off, for the `unconstrained` arm: only
providers whose wire takes it can run that arm (the embedded model; the scripted `TestProvider`
receives it in `request.options`, so a script can answer each arm differently)."""

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
    steps: Steps | None = None
    """How the arm calls the model when it is not one `generate` of `contract`: the
    evidence-gated, presence-first and mass-aware arms."""


@dataclass
class Generated:
    """What an arm's calls made of one item (summed over its calls)."""

    value: dict[str, Any]
    """The value in the production contract's JSON form (what is scored)."""
    result: Any
    """The last call's `Result`."""
    attempts: int
    input_tokens: int
    output_tokens: int
    signals: dict[str, float] | None = None


class StepFailed(Exception):
    """A later call of a multi-call arm failed: the error, and what the earlier calls cost."""

    def __init__(self, error: StructuredOutputError, earlier: Generated) -> None:
        super().__init__(str(error))
        self.error = error
        self.earlier = earlier


Steps = Callable[[StructuredClient, EvalItem, dict[str, Any]], Generated]


class ArmOptions(TypedDict, total=False):
    """What the abstaining arms are tuned by: keywords of `prepare_arm` and `run_eval`, each
    optional (the other arms read none of them)."""

    thresholds: Thresholds | None
    """The mass-aware and anchored arms' (`sdk.abstention`)."""
    calibrating: bool
    """Run the mass-aware arm without thresholds, to record the signals a calibration needs
    (default False)."""
    min_confidence: float
    """The `min_confidence` arm's floor (default `DEFAULT_MIN_CONFIDENCE`)."""
    confidence_calibration: Calibration | None
    """Maps the `min_confidence` arm's confidence to the probability of being right."""
    anchors: Mapping[str, Anchor] | None
    """The anchored arm's anchors, by field (`sdk.schema.grounding.Anchor`)."""


def prepare_arm(
    name: str, contract: type[Contract], client: StructuredClient, **options: Unpack[ArmOptions]
) -> PreparedArm:
    """The arm `name` for `contract` through `client`, or `ArmUnavailable` saying why not;
    `options` tune the abstaining arms (`ArmOptions`)."""
    check_keywords(options, ArmOptions, "prepare_arm()")
    thresholds = options.get("thresholds")
    calibrating = options.get("calibrating", False)
    min_confidence = options.get("min_confidence", DEFAULT_MIN_CONFIDENCE)
    confidence_calibration = options.get("confidence_calibration")
    anchors = options.get("anchors")
    grounding = _grounding_options(name, client)
    if name == "constrained":
        return PreparedArm(name, contract, grounding)
    if name == "unconstrained":
        if not set(UNCONSTRAINED) <= set(client.provider.codec.profile.options):
            raise ArmUnavailable(
                f"provider {client.provider.name!r} has no unconstrained mode the eval can turn "
                "on (the option constrained=False: the embedded model takes it)"
            )
        return PreparedArm(name, contract, {**grounding, **UNCONSTRAINED})
    if name == "widened":
        return PreparedArm(name, widen(contract), grounding)
    if name == "answer_first":
        if reasoning_field(contract) is None:
            raise ArmUnavailable(f"{contract.__name__} has no reasoning field to move")
        try:
            return PreparedArm(name, answer_first(contract), grounding)
        except ValueError as error:
            raise ArmUnavailable(str(error)) from None
    if name == "two_phase":
        return PreparedArm(name, contract, grounding, reasoning="two_phase")
    if name == "guided":
        # What `abstention="guided"` does, through the client (the engine picks what this
        # provider can do): the arm a user gets, beside the mechanisms measured one by one.
        if not nullable_fields(contract) and not any(escape_members(contract).values()):
            raise ArmUnavailable(f"{contract.__name__} has nowhere to abstain (no null, no escape)")
        guided: dict[str, Any] = {"abstention": "guided"}
        if thresholds is not None:
            guided["abstention_thresholds"] = thresholds
        return PreparedArm(name, contract, guided)
    if name == "min_confidence":
        if not nullable_fields(contract):
            raise ArmUnavailable(f"{contract.__name__} has no nullable field to abstain on")
        floor: dict[str, Any] = {"min_confidence": min_confidence}
        if confidence_calibration is not None:
            floor["confidence_calibration"] = confidence_calibration
        return PreparedArm(name, contract, {**grounding, **floor})
    if name == "anchored":
        if not anchors:
            raise ArmUnavailable("anchored needs anchors by field: pass --anchors FILE")
        mass = _prepare_grounded("mass_aware", contract, client, grounding, thresholds, False)
        return PreparedArm(
            name, contract, mass.options, steps=_anchored_steps(contract, anchors, thresholds)
        )
    if name in GROUNDED_ARMS:
        return _prepare_grounded(name, contract, client, grounding, thresholds, calibrating)
    raise ValueError(f"unknown arm {name!r}; arms: {', '.join(ARMS)}")


def _grounding_options(name: str, client: StructuredClient) -> dict[str, Any]:
    if client.provider.name not in GROUNDING_PROVIDERS:
        return {}
    if name in ("mass_aware", "anchored", "min_confidence"):
        # every value a span can fill written, then judged on its mass or its confidence
        return {"grounding": "values"}
    return {"grounding": name in GROUNDED_ARMS}


def _prepare_grounded(
    name: str,
    contract: type[Contract],
    client: StructuredClient,
    grounding: dict[str, Any],
    thresholds: Thresholds | None,
    calibrating: bool,
) -> PreparedArm:
    if not compile_contract(contract).quotes.any_wanted:
        raise ArmUnavailable(f"{contract.__name__} has no Verbatim or SourceQuote field")
    if not grounding and name in ("grounded", "mass_aware"):
        raise ArmUnavailable(
            f"provider {client.provider.name!r} cannot switch grounding per call (known: "
            f"{', '.join(sorted(GROUNDING_PROVIDERS))})"
        )
    if name == "grounded":
        return PreparedArm(name, contract, grounding)
    nullable = nullable_fields(contract)
    if not nullable:
        raise ArmUnavailable(f"{contract.__name__} has no nullable field to abstain on")
    if name == "evidence_gated":
        gated = evidence_gated(contract)
        return PreparedArm(name, gated, grounding, steps=_evidence_steps(contract, gated))
    if name == "presence_first":
        return PreparedArm(name, contract, grounding, steps=_presence_steps(contract))
    if thresholds is None and not calibrating:
        raise ArmUnavailable(
            "mass_aware needs thresholds calibrated on labelled data: run `sdk eval` on a "
            "calibration set with --calibrate FILE, then pass --thresholds FILE"
        )
    if thresholds is not None:
        info = schema_info(contract)
        try:  # the client's check (it applies them itself here, not through the client)
            check = thresholds.check_contract  # (a `FallbackProvider`'s every model)
            check_every_model(check, info.name, info.fingerprint, client.provider)
        except ThresholdsMismatch as error:
            raise ArmUnavailable(str(error)) from None
    return PreparedArm(name, contract, grounding, steps=_mass_steps(contract, thresholds))


def _evidence_steps(contract: type[Contract], gated: type[Contract]) -> Steps:
    def steps(client: StructuredClient, item: EvalItem, kwargs: dict[str, Any]) -> Generated:
        result = _call(client, gated, item, kwargs)
        value = ungated(result.value.model_dump(mode="json"), contract)
        return _generated(value, [result])

    return steps


def _presence_steps(contract: type[Contract]) -> Steps:
    asked = presence(contract)

    def steps(client: StructuredClient, item: EvalItem, kwargs: dict[str, Any]) -> Generated:
        first = _call(client, asked, item, kwargs)
        stated = first.value.model_dump(mode="json")
        unstated = [name for name, said in stated.items() if said is False]
        try:
            second = _call(client, null_only(contract, unstated), item, kwargs)
        except StructuredOutputError as error:
            raise StepFailed(error, _generated({}, [first])) from error
        return _generated(second.value.model_dump(mode="json"), [first, second])

    return steps


def _mass_steps(contract: type[Contract], thresholds: Thresholds | None) -> Steps:
    nullable = {f"/{name}" for name in nullable_fields(contract)}

    def steps(client: StructuredClient, item: EvalItem, kwargs: dict[str, Any]) -> Generated:
        result = _call(client, contract, item, kwargs)
        masses = value_start_masses(result.diagnostics, result.text)
        signals = {pointer: mass for pointer, mass in masses.items() if pointer in nullable}
        value = result.value.model_dump(mode="json")
        if thresholds is not None:
            value, _ = abstain(value, signals, thresholds)
        generated = _generated(value, [result])
        generated.signals = signals
        return generated

    return steps


def _anchored_steps(
    contract: type[Contract], anchors: Mapping[str, Anchor], thresholds: Thresholds | None
) -> Steps:
    # The call's contract carries the `after` labels (the grammar confines the spans, and the
    # parser checks them); `not_after` is checked here, after decoding, and abstains: sent in the
    # contract, the parser would refuse the value and retry instead.
    confining = {name: Anchor(after=a.after) for name, a in anchors.items() if a.after}
    held = with_anchors(contract, confining)
    if thresholds is not None:
        # A field confined to its labels' regions abstains by its anchor (no label, no span),
        # not by its first-token mass: fewer tokens are allowed there, so the mass is lower
        # than the unconfined grammar's the thresholds were calibrated on.
        confined = {f"/{name}" for name, anchor in anchors.items() if anchor.after}
        kept = {p: t for p, t in thresholds.fields.items() if p not in confined}
        thresholds = replace(thresholds, fields=kept)
    mass = _mass_steps(held, thresholds)

    def steps(client: StructuredClient, item: EvalItem, kwargs: dict[str, Any]) -> Generated:
        generated = mass(client, item, kwargs)
        for name, anchor in anchors.items():
            value = generated.value.get(name)
            if isinstance(value, str) and not anchored(value, item.document, anchor):
                generated.value[name] = None  # another party's value: abstain
        return generated

    return steps


def _call(
    client: StructuredClient, contract: type[Contract], item: EvalItem, kwargs: dict[str, Any]
) -> Any:
    return client.generate(contract, prompt=item.asks_with, source=item.document, **kwargs)


def _generated(value: dict[str, Any], results: list[Any]) -> Generated:
    return Generated(
        value=value,
        result=results[-1] if results else None,
        attempts=sum(len(result.attempts) for result in results),
        input_tokens=sum(result.usage.input_tokens for result in results),
        output_tokens=sum(result.usage.output_tokens for result in results),
    )


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
        if arm.steps is not None:
            generated = arm.steps(client, item, kwargs)
        else:
            result = _call(client, arm.contract, item, kwargs)
            generated = _generated(result.value.model_dump(mode="json"), [result])
    except ProviderError:
        raise
    except (StructuredOutputError, StepFailed) as failure:
        latency = time.perf_counter() - started
        return _failed(arm, client, item, failure, latency, schema, escapes)
    latency = time.perf_counter() - started
    last = generated.result
    reasoning = getattr(last, "reasoning", None)
    return Outcome(
        item=item.id,
        arm=arm.name,
        valid=True,
        fields=score(item.expected, generated.value, escapes),
        value=generated.value,
        text=last.text,
        attempts=generated.attempts,
        input_tokens=generated.input_tokens,
        output_tokens=generated.output_tokens,
        latency=latency,
        schema={
            "name": last.schema.name,
            "version": last.schema.version,
            "fingerprint": last.schema.fingerprint,
        },
        mass=_mass(last.diagnostics),
        reasoning=reasoning if isinstance(reasoning, str) else None,
        digest=item.digest,
        signals=generated.signals,
        confidence=_top_level_confidence(last),
        model=_model_of(client, last),
    )


def _model_of(client: StructuredClient, answered: Any) -> str | None:
    """The model that answered a result or attempt (a step's result may be any value), as a
    call's check names it (`sdk.engine.setup.reachable_models`): the model given to the
    provider that answered, which its server may spell otherwise in its reply (OpenAI's dated
    snapshot for `gpt-4o`, a served alias), so a fit recording the reply's spelling would be
    refused by the very provider it was fitted through. The reply's spelling where it names
    a provider's model, or where no one provider of the family that answered says its model
    (several of one family: the one whose model the reply's spelling extends, `gpt-4o-mini`
    for `gpt-4o-mini-2024-07-18` where `gpt-4o` is given too, the longest)."""
    said = getattr(answered, "model", None)
    said = said if isinstance(said, str) and said else None
    reached = client.provider.reached()
    if said is not None and any(provider.model == said for provider in reached):
        return said
    family = getattr(answered, "provider", None)
    given = {provider.model for provider in reached if provider.name == family}
    if len(given) == 1 and (model := given.pop()) is not None:
        return model
    extended = [m for m in given if m and said and _extends(said, m)]
    return max(extended, key=len) if extended else said


def _extends(said: str, model: str) -> bool:
    """Whether a reply's model spelling is `model` with a suffix (a dated snapshot, a tag)."""
    return said.startswith(model) and said[len(model) : len(model) + 1] in ("-", ":", "@")


def _top_level_confidence(result: Any) -> dict[str, tuple[float, float | None]] | None:
    """The uncalibrated confidence of each top-level value of the last call's result."""
    confidence = getattr(result, "confidence", None)
    if confidence is None:
        return None
    return {
        pointer: (item.probability, item.kept)
        for pointer, item in confidence.details.items()
        if pointer.count("/") == 1
    }


def _failed(
    arm: PreparedArm,
    client: StructuredClient,
    item: EvalItem,
    failure: StructuredOutputError | StepFailed,
    latency: float,
    schema: dict[str, Any],
    escapes: Mapping[str, frozenset[str]],
) -> Outcome:
    """The outcome of a call that failed: the error's, its tokens and attempts added to those
    of the steps before it (an arm of several calls)."""
    error = failure.error if isinstance(failure, StepFailed) else failure
    earlier = failure.earlier if isinstance(failure, StepFailed) else None
    attempts = list(getattr(error, "attempts", None) or [])
    usage = getattr(error, "usage", None)
    input_tokens = sum(a.usage.input_tokens for a in attempts)
    output_tokens = sum(a.usage.output_tokens for a in attempts)
    if usage is not None and not attempts:
        input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
    last = attempts[-1].diagnostics if attempts else getattr(error, "diagnostics", None)
    before = earlier or Generated({}, None, 0, 0, 0)
    return Outcome(
        item=item.id,
        arm=arm.name,
        valid=False,
        fields=score(item.expected, None, escapes),
        text=error.text,
        error=type(error).__name__,
        error_message=_describe(error, attempts),
        attempts=max(1, len(attempts)) + before.attempts,
        input_tokens=input_tokens + before.input_tokens,
        output_tokens=output_tokens + before.output_tokens,
        latency=latency,
        schema=schema,
        mass=_mass(last),
        digest=item.digest,
        model=_model_of(client, attempts[-1]) if attempts else None,
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
