"""Confidence calibration (`sdk.calibration`): Platt and isotonic fits per value type, expected
calibration error with its interval, the reliability plot's points, and the file."""

from __future__ import annotations

import asyncio
import json
import pickle
import random
from pathlib import Path

import pytest

from sdk.calibration import Calibration
from sdk.calibration import CalibrationFileError
from sdk.calibration import Sample
from sdk.calibration import ece_interval
from sdk.calibration import expected_calibration_error
from sdk.calibration import fit
from sdk.calibration import reliability


def _overconfident(n: int, seed: int = 1) -> list[Sample]:
    """Strings decoded at 0.9 right half the time, at 0.3 right a tenth of the time."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        high = i % 2 == 0
        out.append(Sample("string", 0.9 if high else 0.3, rng.random() < (0.5 if high else 0.1)))
    return out


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_a_fit_brings_an_overconfident_model_to_its_accuracy(method: str) -> None:
    train, test = _overconfident(400, 1), _overconfident(400, 2)
    calibration = fit(train, method=method)  # type: ignore[arg-type]
    raw = expected_calibration_error([s.confidence for s in test], [s.correct for s in test])
    mapped = [calibration.probability("string", s.confidence) for s in test]
    after = expected_calibration_error(mapped, [s.correct for s in test])
    assert raw > 0.25 and after < 0.06
    assert calibration.probability("string", 0.9) == pytest.approx(0.5, abs=0.08)
    assert calibration.probability("string", 0.3) < calibration.probability("string", 0.9)


def test_a_rare_type_uses_the_curve_over_all_types() -> None:
    samples = [*_overconfident(100), Sample("number", 0.9, True), Sample("number", 0.2, False)]
    calibration = fit(samples)
    assert "number" not in calibration.curves and "*" in calibration.curves
    assert calibration.probability("number", 0.9) == calibration.curves["*"](0.9)
    assert calibration.fitted["samples"] == {"*": 102, "string": 100, "number": 2}


def test_ece_reliability_and_the_interval() -> None:
    confidences = [0.95] * 20 + [0.15] * 20
    correct = [True] * 19 + [False] + [False] * 17 + [True] * 3
    assert reliability(confidences, correct) == [
        (pytest.approx(0.15), pytest.approx(0.15), 20),
        (pytest.approx(0.95), 0.95, 20),
    ]
    assert expected_calibration_error(confidences, correct) == pytest.approx(0.0)
    estimate, low, high = ece_interval([0.9] * 30, [True] * 15 + [False] * 15, resamples=500)
    assert estimate == pytest.approx(0.4) and low < estimate < high
    with pytest.raises(ValueError):
        expected_calibration_error([], [])


def test_the_file_round_trips_and_a_bad_one_names_itself(tmp_path: Path) -> None:
    calibration = fit(_overconfident(60), fitted={"dataset": "x.jsonl"})
    path = calibration.save(tmp_path / "calibration.json")
    assert Calibration.load(path) == calibration
    data = json.loads(path.read_text())
    for broken, problem in [
        ("{", "not a readable calibration file"),
        ('{"format": "other"}', "not a confidence calibration"),
        (json.dumps({**data, "curves": {"string": {"method": "magic"}}}), "curve 'string'"),
        (json.dumps({**data, "curves": {"string": {"method": "platt", "parameters": [1]}}}),
         "wrong number of parameters"),
        (json.dumps({**data, "curves": {"string": {"method": "platt",
                                                   "parameters": [1, "x"]}}}), "finite"),
    ]:  # fmt: skip
        bad = tmp_path / "bad.json"
        bad.write_text(broken)
        with pytest.raises(CalibrationFileError) as refused:
            Calibration.load(bad)
        assert str(bad) in str(refused.value) and problem in str(refused.value)
        assert isinstance(refused.value, ValueError)
    assert pickle.loads(pickle.dumps(calibration)) == calibration


def test_nothing_to_fit_is_an_error() -> None:
    with pytest.raises(ValueError, match="no labelled values"):
        fit([])


def test_a_calibration_by_field_tells_fields_of_one_type_apart() -> None:
    # An id is right whatever its confidence; a name decoded as surely is right a tenth of the time.
    samples = [Sample("string", 0.6, True, "/id") for _ in range(40)]
    samples += [Sample("string", 0.6, i % 10 == 0, "/name") for i in range(40)]
    by_type, by_field = fit(samples, method="isotonic"), fit(samples, method="isotonic", by="field")
    assert by_type.probability("string", 0.6, "/name") == pytest.approx(0.55)
    assert by_field.probability("string", 0.6, "/name") == pytest.approx(0.1)
    assert by_field.probability("string", 0.6, "/id") == pytest.approx(1.0)
    # A field without its own curve (and array items, by their field) fall back to the type's.
    assert by_field.probability("string", 0.6, "/other") == by_field.curves["*"](0.6)
    assert by_field.fitted["by"] == "field" and set(by_field.curves) == {"*", "/id", "/name"}


def test_apply_uses_the_field_curve_for_every_item_of_a_list() -> None:
    from sdk.calibration import Curve
    from sdk.confidence import Confidence
    from sdk.confidence import ValueConfidence

    def value(pointer: str) -> ValueConfidence:
        return ValueConfidence(pointer, 0.5, None, None, 1, 0, 1, "number")

    decoded = Confidence({p: value(p) for p in ["/lines/0/total", "/lines/1/total", "/n"]},
                         route="reported")  # fmt: skip
    calibration = Calibration({"/lines/*/total": Curve("isotonic", (0.0, 0.9), 20)})
    mapped = calibration.apply(decoded)
    assert mapped.calibrated and dict(mapped) == {"/lines/0/total": 0.9, "/lines/1/total": 0.9,
                                                  "/n": 0.5}  # fmt: skip


def _platt(samples: object = 3) -> dict[str, object]:
    return {"method": "platt", "parameters": [1, 0], "samples": samples}


def _isotonic(*points: float) -> dict[str, object]:
    return {"method": "isotonic", "parameters": list(points), "samples": 3}


@pytest.mark.parametrize(
    ("curves", "problem"),
    [
        ([1, 2], "`curves` must be an object"),
        ("abc", "`curves` must be an object"),
        (5, "`curves` must be an object"),
        ({"string": _platt("x")}, "samples"),
        ({"string": _platt(1e400)}, "samples"),
        ({"string": _platt(-4)}, "samples"),
        ({"string": _isotonic(0.9, 0.1, 0.1, 0.9)}, "ascending"),
        ({"string": _isotonic(0.1, 0.2, 0.5, 0.1)}, "non-decreasing"),
        ({"string": _isotonic(0.1, 5.0)}, "within [0, 1]"),
    ],
)
def test_a_wrong_shaped_file_is_refused_naming_itself(
    tmp_path: Path, curves: object, problem: str
) -> None:
    """A file of the right format whose curves are of the wrong shape is a
    `CalibrationFileError` naming the file (on main: a bare TypeError, ValueError or
    OverflowError from `dict()`/`int()`; an isotonic curve out of order was accepted and
    gave 0.9 at every confidence)."""
    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps({"format": "sdk-confidence-calibration/1", "curves": curves}))
    with pytest.raises(CalibrationFileError) as refused:
        Calibration.load(bad)
    assert str(bad) in str(refused.value) and problem in str(refused.value)


@pytest.mark.parametrize("confidence", [-0.2, 1.5, float("nan")])
def test_ece_of_a_confidence_outside_0_1_is_refused(confidence: float) -> None:
    """On main: -0.2 gave an ECE of 1.2 (an error above its own bound), 1.5 was read as 1,
    nan was a bare `cannot convert float NaN to integer`."""
    for measure in (expected_calibration_error, reliability):
        with pytest.raises(ValueError, match=r"confidence .* within \[0, 1\]"):
            measure([0.5, confidence], [True, False])


def test_a_fit_by_field_pools_every_item_of_a_list_under_one_curve() -> None:
    """Samples of list items (`/lines/0/total`, `/lines/1/total`, ...) are one field, as
    `apply` reads it (`/lines/*/total`). On main the fit grouped them by index: no index had
    enough samples for a curve of its own, and every item fell back to the curve over all."""
    samples = [Sample("number", 0.6, True, f"/lines/{i % 8}/total") for i in range(40)]
    samples += [Sample("number", 0.6, i % 10 == 0, "/count") for i in range(40)]
    calibration = fit(samples, method="isotonic", by="field")
    assert set(calibration.curves) == {"*", "/lines/*/total", "/count"}
    assert calibration.fitted["samples"]["/lines/*/total"] == 40
    assert calibration.probability("number", 0.6, "/lines/*/total") == pytest.approx(1.0)


@pytest.mark.parametrize("confidence", [float("nan"), 1.5, -1.0])
def test_a_fit_on_a_confidence_outside_0_1_is_refused(confidence: float) -> None:
    """On main: nan fitted a curve of nan parameters (every probability nan, and a saved
    file that `Calibration.load` then refused); 1.5 and -1 were fitted as if at the edge."""
    samples = [Sample("string", 0.5, i % 2 == 0) for i in range(20)]
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        fit([*samples, Sample("string", confidence, True)])


# --- a calibration is for the contract and the model it was fitted on ---


def _fitted_for_notices(tmp_path: Path, **fitted: object) -> Path:
    """A calibration file as `sdk eval --calibrate-confidence` writes it for ShipmentNotice on
    the embedded gemma (`fitted` overrides its record)."""
    from contracts import ShipmentNotice
    from sdk.schema.canonical import schema_info

    info = schema_info(ShipmentNotice)
    record = {
        "contract": {"name": info.name, "version": info.version, "fingerprint": info.fingerprint},
        "provider": "embedded",
        "model": "gemma-3-270m-q4_k_m",
        "dataset": "notices-calibration.jsonl",
        "arms": ["mass_aware"],
        "items": 40,
    }
    calibration = fit(_overconfident(40), fitted={**record, **fitted})
    return calibration.save(tmp_path / "confidence.json")


NOTICE = json.dumps({"carrier": "DHL", "tracking_number": None, "order_number": None,
                     "recipient": None})  # fmt: skip


@pytest.mark.parametrize("where", ["call", "client"])
def test_a_calibration_fitted_for_another_contract_is_refused_before_sending(
    tmp_path: Path, where: str
) -> None:
    """On main the client calibrated any contract's values with it, silently."""
    from contracts import ShipmentNotice
    from sdk import Contract
    from sdk import StructuredClient
    from sdk.calibration import CalibrationMismatch
    from sdk.providers import TestProvider
    from sdk.schema.canonical import schema_info

    class Booking(Contract):
        guest: str

    path = _fitted_for_notices(tmp_path)
    provider = TestProvider(['{"guest": "Ann"}'], model="gemma-3-270m-q4_k_m")
    given = {"confidence_calibration": path}
    client = (
        StructuredClient(provider, **given) if where == "client" else StructuredClient(provider)
    )
    with pytest.raises(CalibrationMismatch) as refused:
        client.generate(Booking, prompt="x", **({} if where == "client" else given))  # type: ignore[arg-type]
    message = str(refused.value)
    notices, booking = schema_info(ShipmentNotice), schema_info(Booking)
    assert str(path) in message
    assert f"fitted for ShipmentNotice (fingerprint {notices.fingerprint[:12]})" in message
    assert f"not for Booking (fingerprint {booking.fingerprint[:12]})" in message
    assert isinstance(refused.value, ValueError) and provider.requests == []
    # The contract it was fitted for, on its model, takes it.
    taken = StructuredClient(TestProvider([NOTICE], model="gemma-3-270m-q4_k_m")).generate(
        ShipmentNotice, prompt="x", source="DHL brings it.", confidence_calibration=path
    )
    assert taken.value.carrier == "DHL"


def test_a_calibration_fitted_for_another_model_is_refused_naming_both(tmp_path: Path) -> None:
    """The async client too (on main: applied, gemma's curves mapping SmolLM2's confidence)."""
    from contracts import ShipmentNotice
    from sdk import AsyncStructuredClient
    from sdk.calibration import CalibrationMismatch
    from sdk.providers import TestProvider

    path = _fitted_for_notices(tmp_path)
    provider = TestProvider([NOTICE], model="SmolLM2-135M-Instruct.Q4_1")
    client = AsyncStructuredClient(provider)
    with pytest.raises(CalibrationMismatch) as refused:
        asyncio.run(client.generate(ShipmentNotice, prompt="x", confidence_calibration=path))
    message = str(refused.value)
    assert "fitted for model gemma-3-270m-q4_k_m, not for model SmolLM2-135M-Instruct.Q4_1" in (
        message
    )
    assert provider.requests == []


def test_behind_a_fallback_every_model_the_call_may_reach_is_checked(tmp_path: Path) -> None:
    """A `FallbackProvider` answers with any of its providers' models: a calibration fitted for
    the first one's is refused when a later one runs another model (on main only the first
    was compared, and the second's confidence went through gemma's curves). Thresholds
    calibrated on a model likewise."""
    from contracts import ShipmentNotice
    from sdk import StructuredClient
    from sdk.abstention import FieldThreshold
    from sdk.abstention import Thresholds
    from sdk.abstention import ThresholdsMismatch
    from sdk.calibration import CalibrationMismatch
    from sdk.providers import ConcurrencyLimit
    from sdk.providers import FallbackProvider
    from sdk.providers import TestProvider
    from sdk.schema.canonical import schema_info

    path = _fitted_for_notices(tmp_path)
    info = schema_info(ShipmentNotice)
    thresholds = Thresholds(
        {"/carrier": FieldThreshold(0.3)},
        calibration={"contract": {"name": info.name, "fingerprint": info.fingerprint},
                     "model": "gemma-3-270m-q4_k_m"},
    )  # fmt: skip
    for wrap in (lambda p: p, lambda p: ConcurrencyLimit(p, 2)):
        gemma = TestProvider([NOTICE], model="gemma-3-270m-q4_k_m")
        smol = TestProvider([NOTICE], model="SmolLM2-135M-Instruct.Q4_1")
        client = StructuredClient(wrap(FallbackProvider([gemma, smol])))
        with pytest.raises(CalibrationMismatch, match="not for model SmolLM2-135M-Instruct"):
            client.generate(ShipmentNotice, prompt="x", source="DHL brings it.",
                            confidence_calibration=path)  # fmt: skip
        with pytest.raises(ThresholdsMismatch, match="not for model SmolLM2-135M-Instruct"):
            client.generate(ShipmentNotice, prompt="x", source="DHL brings it.",
                            abstention="guided", abstention_thresholds=thresholds)  # fmt: skip
        assert gemma.requests == [] and smol.requests == []
    # Every model it may reach is the one fitted: taken.
    both = FallbackProvider([TestProvider([NOTICE], model="gemma-3-270m-q4_k_m"),
                             TestProvider([NOTICE], model="gemma-3-270m-q4_k_m")])  # fmt: skip
    taken = StructuredClient(both).generate(
        ShipmentNotice, prompt="x", source="DHL brings it.", confidence_calibration=path
    )
    assert taken.value.carrier == "DHL"


def test_a_fallback_list_nested_through_a_limit_has_every_model_checked(tmp_path: Path) -> None:
    """A `FallbackProvider` may list a `ConcurrencyLimit` over another list (only a list
    directly inside a list is refused): a call reaches each of the inner list's providers too,
    so each one's model is checked (on main the inner list's first model stood for it)."""
    from contracts import ShipmentNotice
    from sdk import StructuredClient
    from sdk.calibration import CalibrationMismatch
    from sdk.engine.setup import reachable_models
    from sdk.providers import ConcurrencyLimit
    from sdk.providers import FallbackProvider
    from sdk.providers import TestProvider

    path = _fitted_for_notices(tmp_path)
    gemma = TestProvider([NOTICE], model="gemma-3-270m-q4_k_m")
    smol = TestProvider([NOTICE], model="SmolLM2-135M-Instruct.Q4_1")
    last = TestProvider([NOTICE], model="gemma-3-270m-q4_k_m")
    provider = FallbackProvider([ConcurrencyLimit(FallbackProvider([gemma, smol]), 2), last])
    assert list(reachable_models(provider)) == [gemma.model, smol.model]
    with pytest.raises(CalibrationMismatch, match="not for model SmolLM2-135M-Instruct"):
        StructuredClient(provider).generate(ShipmentNotice, prompt="x", source="DHL brings it.",
                                            confidence_calibration=path)  # fmt: skip
    assert gemma.requests == [] and smol.requests == [] and last.requests == []


def test_what_fitted_does_not_record_is_not_checked(tmp_path: Path) -> None:
    """A calibration made by hand (no contract, no model in `fitted`) applies to anything; a
    `fitted` naming a contract without its fingerprint (written by hand) is checked by name; a
    model is compared only where both sides know it."""
    from contracts import ShipmentNotice
    from sdk import StructuredClient
    from sdk.calibration import CalibrationMismatch
    from sdk.calibration import Curve
    from sdk.providers import TestProvider
    from sdk.schema.canonical import schema_info

    info = schema_info(ShipmentNotice)
    for by_hand in (
        Calibration({"string": Curve("platt", (1.0, 0.0), 10)}),
        fit(_overconfident(40)),
    ):
        by_hand.check_fitted("Anything", "0" * 64, "any-model")
        result = StructuredClient(TestProvider([NOTICE])).generate(
            ShipmentNotice, prompt="x", source="DHL brings it.", confidence_calibration=by_hand
        )
        assert result.value.carrier == "DHL"
    named = Calibration.load(_fitted_for_notices(tmp_path, contract={"name": "ShipmentNotice"}))
    named.check_fitted(info.name, info.fingerprint, "gemma-3-270m-q4_k_m")
    with pytest.raises(CalibrationMismatch, match=r"ShipmentNotice \(no fingerprint recorded\)"):
        named.check_fitted("Booking", "0" * 64, "gemma-3-270m-q4_k_m")
    # ShipmentNotice changed since the fit: same name, another schema.
    with pytest.raises(CalibrationMismatch, match="fitted for ShipmentNotice"):
        Calibration.load(_fitted_for_notices(tmp_path)).check_fitted(info.name, "f" * 64, None)
    # A provider that does not know its model up front: only the contract is checked.
    Calibration.load(_fitted_for_notices(tmp_path)).check_fitted(info.name, info.fingerprint, None)
    no_model = Calibration.load(_fitted_for_notices(tmp_path, model=None))
    no_model.check_fitted(info.name, info.fingerprint, "any-model")


# --- what a file may hold (probe12b D5) ----------------------------------------------------------

_DAMAGED_RECORDS = [
    ("Invoice", "`{key}` must be an object"),
    (["Invoice"], "`{key}` must be an object"),
    ({"contract": {"name": 5, "fingerprint": 7}}, "`{key}.contract.name` must be a non-empty"),
    ({"contract": {"name": "Doc", "fingerprint": 7}}, "`{key}.contract.fingerprint` must be"),
    ({"contract": {"name": "Doc", "version": "2"}}, "`{key}.contract.version` must be a whole"),
    ({"contract": ["Invoice", "0" * 64]}, "`{key}.contract` must be a contract's name"),
    ({"contract": {}}, "`{key}.contract` names no contract"),
    ({"contract": ""}, "`{key}.contract` must be a contract's name"),
    ({"models": 5}, "`{key}.models` must be a model's name or a list of them, not 5"),
    ({"models": ["gpt-4o", 5]}, "`{key}.models` must be"),
    ({"model": 5}, "`{key}.model` must be a non-empty string, not 5"),
    ({"provider": ["openai"]}, "`{key}.provider` must be a non-empty string"),
]


@pytest.mark.parametrize(("record", "problem"), _DAMAGED_RECORDS)
def test_a_damaged_fitted_record_is_refused_in_both_kinds_of_file(
    tmp_path: Path, record: object, problem: str
) -> None:
    """A calibration's `fitted` and an abstention thresholds file's `calibration` record what
    they were fitted for, and go through one check. On main a calibration read each of these as
    made by hand (`"Invoice"` as `{}`, a name of 5 as no name), so it applied to any contract and
    model; a thresholds file refused a string but took the rest."""
    from sdk.abstention import Thresholds
    from sdk.abstention import ThresholdsFileError

    calibration = fit(_overconfident(40)).to_json()
    path = tmp_path / "confidence.json"
    path.write_text(json.dumps({**calibration, "fitted": record}, indent=1))
    with pytest.raises(CalibrationFileError) as refused:
        Calibration.load(path)
    assert str(refused.value).startswith(f"{path}, line ")
    assert problem.format(key="fitted") in str(refused.value)
    thresholds = tmp_path / "thresholds.json"
    fields = {"/a": {"threshold": 0.2}}
    written = {"format": "sdk-abstention/1", "calibration": record, "fields": fields}
    thresholds.write_text(json.dumps(written, indent=1))
    with pytest.raises(ThresholdsFileError) as also:
        Thresholds.load(thresholds)
    assert str(also.value).startswith(f"{thresholds}, line ")
    assert problem.format(key="calibration") in str(also.value)


@pytest.mark.parametrize(
    "record",
    [None, {}, {"contract": "Invoice"}, {"models": "gpt-4o", "model": None},
     {"contract": {"name": "Invoice"}, "models": [], "provider": None}],
)  # fmt: skip
def test_a_record_written_by_hand_is_still_read(tmp_path: Path, record: object) -> None:
    data = fit(_overconfident(40)).to_json()
    path = tmp_path / "confidence.json"
    path.write_text(json.dumps({**data, "fitted": record}))
    assert dict(Calibration.load(path).fitted) == (record or {})


def test_a_falling_platt_curve_is_refused_naming_the_file_the_curve_and_its_line(
    tmp_path: Path,
) -> None:
    # On main a slope of -50 was taken: 0.9 became 0.0000 and 0.1 became 1.0000.
    data = fit(_overconfident(40), fitted={"dataset": "x"}).to_json()
    assert "string" in data["fitted"]["samples"]  # the kind is named before its curve
    data["curves"]["string"]["parameters"] = [-50.0, 0.0]
    path = tmp_path / "confidence.json"
    text = json.dumps(data, indent=1)
    path.write_text(text)
    with pytest.raises(CalibrationFileError) as refused:
        Calibration.load(path)
    curve_line = text[: text.index('"string": {')].count("\n") + 1
    assert str(refused.value).startswith(f"{path}, line {curve_line}: curve 'string'")
    assert "slope -50.0 is negative" in str(refused.value)


def test_a_fit_on_values_wrong_where_surest_is_flat_not_falling(tmp_path: Path) -> None:
    # Platt's unconstrained fit here has a negative slope (surer values more often wrong): the
    # closest curve that does not fall is flat, at the share right, and its file loads.
    samples = [Sample("string", 0.9, i % 10 == 0) for i in range(40)]
    samples += [Sample("string", 0.2, i % 10 != 0) for i in range(40)]
    calibration = fit(samples)
    slope, _ = calibration.curves["string"].parameters
    assert slope == 0.0
    assert calibration.probability("string", 0.9) == pytest.approx(0.5, abs=0.02)
    assert calibration.probability("string", 0.2) == calibration.probability("string", 0.9)
    assert Calibration.load(calibration.save(tmp_path / "c.json")) == calibration


@pytest.mark.parametrize(
    ("curves", "problem"),
    [
        ({}, "it has no curves"),
        (None, "it has no curves"),
        ({"strnig": _platt()}, "curve 'strnig' is not a calibration curve (it is for no value"),
        ({"string": _isotonic(-0.5, 0.1, 0.5, 0.9)}, "step points are not confidences within"),
    ],
    ids=["empty", "null", "unknown-kind", "isotonic-x-outside"],
)
def test_a_file_whose_curves_would_map_nothing_is_refused(
    tmp_path: Path, curves: object, problem: str
) -> None:
    # On main each was taken and marked every result's confidence `calibrated`, unchanged
    # (the unknown kind is never looked up).
    path = tmp_path / "confidence.json"
    path.write_text(json.dumps({"format": "sdk-confidence-calibration/1", "curves": curves}))
    with pytest.raises(CalibrationFileError) as refused:
        Calibration.load(path)
    assert str(path) in str(refused.value) and problem in str(refused.value)


def test_a_calibration_without_curves_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="at least one curve"):
        Calibration({})
