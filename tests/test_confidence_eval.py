"""Confidence in `sdk eval`: the `min_confidence` arm, the calibration fitted on a run and given
to another, each arm's expected calibration error with its interval, and the reliability plot in
the HTML report. On the scripted in-process engine (fixed logits), so every confidence is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest

from sdk.contract import Contract

pytest.importorskip("llguidance")
pytest.importorskip("numpy")

from sdk.calibration import Calibration
from sdk.calibration import Curve
from sdk.eval import html_report
from sdk.eval import load_results
from sdk.eval import markdown_table
from sdk.eval import parse_dataset
from sdk.eval import run_eval
from sdk.eval.arms import ArmUnavailable
from sdk.eval.arms import prepare_arm
from sdk.eval.calibration import calibrate_confidence_run
from sdk.eval.metrics import confidence_samples
from sdk.schema.canonical import schema_info
from tests.test_confidence import AFTER_KEY
from tests.test_confidence import Paint
from tests.test_confidence import scripted  # noqa: F401  (the fixture)


class Shade(Contract):
    color: Literal["red", "green", "greed"] | None


def _unsure(text: str) -> dict[str, float]:
    """The model hesitates between "red" and "gre..." (red about 0.3 among the allowed)."""
    return {
        "": {'{"': 5.0},
        '{"': {"color": 5.0},
        '{"color': AFTER_KEY,
        '{"color":"': {"red": 1.0, "gre": 0.9},
        '{"color":"red': {'"}': 5.0},
    }.get(text, {})


# Three items say red (the model is right), one says nothing (the model is wrong).
DATASET = [
    json.dumps({"id": f"s{i}", "document": "paint", "expected": {"color": colour}})
    for i, colour in enumerate(["red", "red", "red", None])
]


def _run(client, tmp_path: Path | None = None, **settings):
    items = parse_dataset(DATASET, Shade)
    return run_eval(items, Shade, client, out=tmp_path, max_tokens=20, resamples=500, **settings)


def test_the_min_confidence_arm_abstains_under_the_floor(scripted, tmp_path: Path) -> None:  # noqa: F811
    client = scripted(_unsure)
    run = _run(client, tmp_path, arms=["constrained", "min_confidence"], min_confidence=0.9)
    constrained, floored = run.metrics["constrained"], run.metrics["min_confidence"]
    # Constrained writes red everywhere: 3 of 4 right, never abstains.
    assert constrained.accuracy.estimate == 0.75 and constrained.abstention_recall.estimate == 0
    # Under a floor of 0.9 every red (about 0.52) abstains: right only where nothing is stated.
    assert floored.accuracy.estimate == 0.25
    assert floored.abstention_recall.estimate == 1 and floored.false_abstention.estimate == 1
    assert all(o.value == {"color": None} for o in run.outcomes_of("min_confidence"))
    # The abstained values have no confidence of their own: no value to calibrate.
    assert floored.calibration_error is None and floored.confident_values == 0
    # The raw confidence (about 0.3) against being right 3 times of 4: ECE is the gap.
    (red,) = {s.confidence for s in confidence_samples(run.outcomes_of("constrained"))}
    assert 0.2 < red < 0.5 and constrained.confident_values == 4
    assert constrained.calibration_error.estimate == pytest.approx(0.75 - red)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["min_confidence"] == 0.9
    assert saved["metrics"]["constrained"]["calibration_error"]["estimate"] == pytest.approx(
        constrained.calibration_error.estimate
    )
    kept = _run(client, arms=["min_confidence"], min_confidence=0.3)
    assert kept.metrics["min_confidence"].accuracy.estimate == 0.75


def test_a_calibration_fitted_on_one_run_is_given_to_another(scripted, tmp_path: Path) -> None:  # noqa: F811
    client = scripted(_unsure)
    first = _run(client, arms=["constrained"])
    samples = confidence_samples(first.outcomes_of("constrained"))
    assert [(s.kind, s.correct) for s in samples] == [("string", True)] * 3 + [("string", False)]
    calibration = calibrate_confidence_run(first, method="isotonic")
    assert calibration.probability("string", samples[0].confidence) == pytest.approx(0.75)
    assert calibration.fitted["arms"] == ["constrained"] and calibration.fitted["items"] == 4
    # What a call checks it against (`Calibration.check_fitted`): the contract and the model.
    info = schema_info(Shade)
    assert calibration.fitted["contract"]["fingerprint"] == info.fingerprint
    assert client.provider.model and calibration.fitted["model"] == client.provider.model
    # Calibrated, red is right 75% of the time: over a floor of 0.6 it stays; the raw 0.3
    # would have abstained.
    second = _run(
        client,
        tmp_path,
        arms=["constrained", "min_confidence"],
        min_confidence=0.6,
        confidence_calibration=calibration,
    )
    assert second.metrics["min_confidence"].accuracy.estimate == 0.75
    assert second.metrics["constrained"].calibrated_error.estimate == pytest.approx(0.0)
    assert second.metrics["constrained"].calibration_error.estimate > 0.2
    # The calibration travels with the results: a reload computes the same.
    again = load_results(tmp_path, resamples=500)
    assert again.confidence_calibration == calibration
    assert again.metrics["constrained"].calibrated_error == (
        second.metrics["constrained"].calibrated_error
    )
    report = html_report(again)
    assert "Confidence: reliability" in report and 'id="reliability-constrained"' in report
    assert report.count("<circle") >= 2  # raw and calibrated points
    assert "| ECE |" in markdown_table(again).splitlines()[0] + " |"


def test_a_run_without_probabilities_has_nothing_to_calibrate() -> None:
    from sdk import StructuredClient
    from sdk.providers import TestProvider

    client = StructuredClient(TestProvider(['{"color": "red"}'] * 4))
    run = _run(client, arms=["constrained"])
    assert run.metrics["constrained"].calibration_error is None
    assert "Confidence: reliability" not in html_report(run)
    with pytest.raises(ValueError, match="no values with a confidence"):
        calibrate_confidence_run(run)


@pytest.mark.parametrize("arms", [["min_confidence"], ["constrained"], ["widened", "guided"]])
def test_a_run_given_a_calibration_for_another_contract_stops_naming_it(arms: list[str]) -> None:
    """`sdk eval --confidence-calibration` fitted on another contract is refused before the
    run sends anything, whatever its arms: every arm's calibrated ECE reads its values through
    it (once, the min_confidence arm's first call refused it, and a run without that arm went
    on, its calibrated ECE read through curves fitted on other values)."""
    from sdk import StructuredClient
    from sdk.calibration import CalibrationMismatch
    from sdk.providers import TestProvider

    paint = schema_info(Paint)
    fitted = {"contract": {"name": paint.name, "fingerprint": paint.fingerprint}}
    other = Calibration({"string": Curve("platt", (1.0, 0.0), 10)}, fitted)
    provider = TestProvider(['{"color": "red"}'] * 8)
    with pytest.raises(CalibrationMismatch, match=r"fitted for Paint .*, not for Shade"):
        _run(StructuredClient(provider), arms=arms, confidence_calibration=other)
    assert provider.requests == []


def test_the_arm_needs_somewhere_to_abstain(scripted) -> None:  # noqa: F811
    client = scripted(_unsure)
    with pytest.raises(ArmUnavailable, match="no nullable field"):
        prepare_arm("min_confidence", Paint, client)
    curve = Calibration({"string": Curve("platt", (1.0, 0.0), 10)})
    arm = prepare_arm(
        "min_confidence", Shade, client, min_confidence=0.7, confidence_calibration=curve
    )
    assert arm.options == {
        "grounding": "values",
        "min_confidence": 0.7,
        "confidence_calibration": curve,
    }


def _answered_by(model: str, chance: float) -> object:
    """A reply of `model` saying red with `chance` for the value (the rest forced)."""
    import math

    from sdk.confidence import TokenLogprob
    from sdk.providers._base import Completion
    from sdk.stop_reason import StopReason

    text = '{"color":"red"}'
    tokens = (
        TokenLogprob('{"color":"', 0, 0.0, 1.0),
        TokenLogprob("red", 10, math.log(chance), 0.9),
        TokenLogprob('"}', 13, 0.0, 1.0),
    )
    return Completion(text, StopReason.END_TURN, "stop", model=model, tokens=tokens)


def test_a_calibration_fitted_through_a_fallback_names_the_models_that_answered(
    tmp_path: Path,
) -> None:
    """`sdk eval --calibrate-confidence` through a `FallbackProvider` records the models whose
    answers it was fitted on, not the primary's alone (on main: `model` was the primary's, so
    curves fitted on the fallback's answers were taken for the primary's model and refused for
    the fallback's own)."""
    from sdk import StructuredClient
    from sdk.calibration import CalibrationMismatch
    from sdk.errors import ProviderError
    from sdk.providers import FallbackProvider
    from sdk.providers import TestProvider

    down = ProviderError("the primary is down", transient=False)  # (not retried: falls back)
    # Every answer comes from the fallback: the fit is model b's.
    primary = TestProvider([down] * 4, model="a")
    fallback = TestProvider([_answered_by("b", 0.6)] * 4, model="b")
    run = _run(StructuredClient(FallbackProvider([primary, fallback]), retries=0),
               arms=["constrained"])  # fmt: skip
    assert len(primary.requests) == 4 and len(fallback.requests) == 4
    assert {o.model for o in run.outcomes_of("constrained")} == {"b"}
    fitted = calibrate_confidence_run(run)
    assert fitted.fitted["models"] == ["b"] and fitted.fitted["model"] == "b"
    info = schema_info(Shade)
    fitted.check_fitted(info.name, info.fingerprint, "b")
    with pytest.raises(CalibrationMismatch, match="model b, not for model a"):
        fitted.check_fitted(info.name, info.fingerprint, "a")
    # Half the answers from each: fitted for both, so a call that may reach either takes it.
    primary = TestProvider([down, _answered_by("a", 0.6)] * 2, model="a")
    fallback = TestProvider([_answered_by("b", 0.6)] * 2, model="b")
    run = _run(StructuredClient(FallbackProvider([primary, fallback]), retries=0), tmp_path,
               arms=["constrained"])  # fmt: skip
    mixed = calibrate_confidence_run(run)
    assert mixed.fitted["models"] == ["a", "b"]
    # (`model`, which an older SDK reads alone, names the run's own: never "any model")
    assert mixed.fitted["model"] == "a"
    for model in ("a", "b"):
        mixed.check_fitted(info.name, info.fingerprint, model)
    with pytest.raises(CalibrationMismatch, match="models a, b, not for model c"):
        mixed.check_fitted(info.name, info.fingerprint, "c")
    # The results file keeps who answered: a reload fits the same.
    reloaded = load_results(tmp_path)
    assert {o.model for o in reloaded.outcomes_of("constrained")} == {"a", "b"}
    assert calibrate_confidence_run(reloaded).fitted["models"] == ["a", "b"]
    # One written before outcomes kept their model: the run's own model, as before.
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    for outcome in data["outcomes"]:
        del outcome["model"]
    path.write_text(json.dumps(data))
    older = calibrate_confidence_run(load_results(tmp_path))
    assert older.fitted["models"] == ["a"] and older.fitted["model"] == "a"


def test_a_calibration_fitted_on_a_provider_whose_server_spells_its_model_otherwise_fits_it() -> (
    None
):
    """A server that answers under another spelling of the model asked for (OpenAI's dated
    snapshot for `gpt-4o`, a served alias): the fit is for the model the provider was given,
    the one a call's check compares (`reachable_models`), so the same provider takes it. (Before
    the fix: `models` was the reply's spelling, and the very provider it was fitted through was
    refused: "fitted for model gpt-4o-2024-08-06, not for model gpt-4o".)"""
    from sdk import StructuredClient
    from sdk.providers import TestProvider

    provider = TestProvider([_answered_by("gpt-4o-2024-08-06", 0.6)] * 4, model="gpt-4o")
    run = _run(StructuredClient(provider, retries=0), arms=["constrained"])
    fitted = calibrate_confidence_run(run)
    info = schema_info(Shade)
    fitted.check_fitted(info.name, info.fingerprint, "gpt-4o")
    assert fitted.fitted["models"] == ["gpt-4o"]


def test_a_calibration_fitted_through_a_fallback_of_one_family_fits_the_model_that_answered() -> (
    None
):
    """Two providers of one family (both `openai`, here both `test`) given `gpt-4o` and
    `gpt-4o-mini`, whose server answers as dated snapshots: the fit is for the model given to
    the one that answered, as a call's check names it. (Before the fix: the family named two
    models, so the reply's spelling was kept, and the fallback it was fitted through was
    refused: "fitted for model gpt-4o-mini-2024-07-18, not for model gpt-4o-mini".)"""
    from sdk import StructuredClient
    from sdk.errors import ProviderError
    from sdk.providers import FallbackProvider
    from sdk.providers import TestProvider

    down = ProviderError("the primary is down", transient=False)  # (not retried: falls back)
    primary = TestProvider([down, _answered_by("gpt-4o-2024-08-06", 0.6)] * 2, model="gpt-4o")
    answers = [_answered_by("gpt-4o-mini-2024-07-18", 0.6)] * 2
    fallback = TestProvider(answers, model="gpt-4o-mini")
    run = _run(StructuredClient(FallbackProvider([primary, fallback]), retries=0),
               arms=["constrained"])  # fmt: skip
    fitted = calibrate_confidence_run(run)
    assert fitted.fitted["models"] == ["gpt-4o", "gpt-4o-mini"]
    info = schema_info(Shade)
    for model in ("gpt-4o", "gpt-4o-mini"):
        fitted.check_fitted(info.name, info.fingerprint, model)
