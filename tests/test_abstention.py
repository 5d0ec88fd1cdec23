"""Abstention for copied values (issue 23): the value-start mass signal, threshold calibration
and its file, the derived contracts of the evidence-gated and presence-first arms, and the arms
themselves through the real client on a scripted provider."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from sdk import Contract
from sdk import StructuredClient
from sdk import Verbatim
from sdk.abstention import Sample
from sdk.abstention import Thresholds
from sdk.abstention import ThresholdsMismatch
from sdk.abstention import abstain
from sdk.abstention import calibrate
from sdk.abstention import value_start_masses
from sdk.contract.derived import evidence_gated
from sdk.contract.derived import null_only
from sdk.contract.derived import presence
from sdk.contract.derived import ungated
from sdk.diagnostics import TokenStep
from sdk.diagnostics import diagnose
from sdk.eval import ArmUnavailable
from sdk.eval import EvalRun
from sdk.eval import parse_dataset
from sdk.eval import prepare_arm
from sdk.eval import run_eval
from sdk.eval.calibration import calibrate_run
from sdk.eval.calibration import calibration_samples
from sdk.eval.metrics import FieldScore
from sdk.eval.metrics import Outcome
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import TestProvider
from sdk.schema.canonical import schema_info


class Parcel(Contract):
    """A notice's copied values; null where the notice does not say."""

    carrier: Verbatim | None = Field(description="The delivery company.")
    order: Verbatim | None = Field(pattern=r"^[A-Z]{2}-[0-9]{5}$", description="Order number.")
    pieces: int = Field(ge=1, description="How many parcels.")


DOCUMENTS = {
    "p1": "Royal Mail brings order AB-12345 today, 2 parcels.",
    "p2": "Your order AB-54321 ships tomorrow in 1 parcel.",
    "p3": "DHL Parcel has your 3 parcels.",
}
LABELS = {
    "p1": {"carrier": "Royal Mail", "order": "AB-12345"},
    "p2": {"carrier": None, "order": "AB-54321"},
    "p3": {"carrier": "DHL Parcel", "order": None},
}
DATASET = [
    json.dumps({"id": i, "document": DOCUMENTS[i], "expected": LABELS[i]}) for i in DOCUMENTS
]


# --- the signal ---


def _steps(text: str, cuts: list[int], masses: list[float]) -> list[TokenStep]:
    starts = [0, *cuts]
    ends = [*cuts, len(text)]
    return [
        TokenStep(i, text[a:b], a, mass, 10)
        for i, (a, b, mass) in enumerate(zip(starts, ends, masses, strict=True))
    ]


def test_value_start_mass_is_the_mass_at_the_values_first_character() -> None:
    text = '{"carrier": "Royal Mail", "order": null, "pieces": 2}'
    quote = text.index('"Royal')
    # One token per piece: ... `"` alone, then `Royal` (its mass is the signal), ...
    cuts = [quote, quote + 1, quote + 6, text.index(', "order'), text.index("null"), len(text) - 1]
    masses = [1.0, 0.9, 0.31, 0.8, 0.95, 0.7, 0.99]
    diagnostics = diagnose(text, _steps(text, cuts, masses))
    assert value_start_masses(diagnostics, text) == {"/carrier": 0.31}
    # A token holding the quote and the first character counts for both.
    merged = [quote, quote + 6, text.index(', "order'), len(text) - 1]
    diagnostics = diagnose(text, _steps(text, merged, [1.0, 0.42, 0.8, 0.9, 0.99]))
    assert value_start_masses(diagnostics, text) == {"/carrier": 0.42}
    assert value_start_masses(None, text) == {}
    empty = '{"carrier": "", "order": null, "pieces": 2}'
    assert value_start_masses(diagnose(empty, _steps(empty, [5], [1.0, 1.0])), empty) == {}


# --- calibration ---


def test_calibration_takes_the_highest_recall_within_the_false_abstention_bound() -> None:
    stated = [Sample("/carrier", s, False, False) for s in (0.5, 0.6, 0.7, 0.8, 0.9) * 4]
    absent = [Sample("/carrier", s, False, True) for s in (0.1, 0.2, 0.3, 0.55, 0.95)]
    thresholds = calibrate(stated + absent, max_false_abstention=0.05)
    [entry] = thresholds.fields.values()
    # Just above 0.3: three of five absent abstain, no stated one does; above 0.5 would cost
    # 4 of 20 stated (20%), over the bound.
    assert 0.3 < entry.threshold <= 0.5
    assert (entry.recall, entry.false_abstention) == (0.6, 0.0)
    assert (entry.stated, entry.absent) == (20, 5)
    generous = calibrate(stated + absent, max_false_abstention=0.25).fields["/carrier"]
    assert generous.recall == 0.8 and generous.false_abstention == 0.2


def test_calibration_counts_what_the_output_abstained_on_by_itself() -> None:
    samples = [
        Sample("/order", None, True, True),  # null already: recall without a threshold
        Sample("/order", None, True, False),  # a false abstention no threshold causes
        *[Sample("/order", 0.9, False, False) for _ in range(30)],
    ]
    entry = calibrate(samples).fields["/order"]
    assert entry.threshold == 0.0 and entry.recall == 1.0
    assert entry.false_abstention == pytest.approx(1 / 31)


def test_thresholds_round_trip_through_their_file_and_bad_files_are_refused(
    tmp_path: Path,
) -> None:
    thresholds = calibrate(
        [Sample("/carrier", 0.2, False, True), Sample("/carrier", 0.6, False, False)],
        calibration={"contract": {"name": "Parcel", "fingerprint": "abc"}},
    )
    path = thresholds.save(tmp_path / "deep" / "thresholds.json")
    loaded = Thresholds.load(path)
    assert loaded.fields == thresholds.fields
    assert loaded.of("/carrier") == thresholds.of("/carrier") and loaded.of("/other") == 0.0
    assert loaded.calibration["contract"]["name"] == "Parcel"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp left
    for bad in (
        "{",
        '{"format": "other"}',
        '{"format": "sdk-abstention/1", "fields": '
        '{"/a": {"threshold": 2, "recall": 0, "false_abstention": 0, "stated": 1, '
        '"absent": 1}}}',
    ):
        broken = tmp_path / "bad.json"
        broken.write_text(bad)
        with pytest.raises(ValueError, match=str(broken)):
            Thresholds.load(broken)
    with pytest.raises(ValueError):
        Thresholds.load(tmp_path / "missing.json")


def test_abstain_nulls_only_top_level_strings_under_their_threshold() -> None:
    thresholds = calibrate(
        [Sample("/carrier", 0.2, False, True)] + [Sample("/carrier", 0.6, False, False)] * 3
    )
    value = {"carrier": "DHL", "order": "AB-12345", "pieces": 2}
    kept, none = abstain(value, {"/carrier": 0.5, "/order": 0.01}, thresholds)
    assert kept == value and none == []
    nulled, which = abstain(value, {"/carrier": 0.1, "/pieces": 0.0}, thresholds)
    assert nulled == {**value, "carrier": None} and which == ["/carrier"]
    assert value["carrier"] == "DHL"  # the input is not changed


# --- derived contracts ---


def test_evidence_gated_writes_evidence_then_value_or_null() -> None:
    gated = evidence_gated(Parcel)
    assert gated is evidence_gated(Parcel)  # built once
    schema = gated.json_schema()
    [pair, null] = schema["properties"]["carrier"]["anyOf"]
    target = schema["$defs"][pair["$ref"].rsplit("/", 1)[-1]]
    assert list(target["properties"]) == ["evidence", "value"]
    assert target["properties"]["evidence"]["x-verbatim"] is True
    assert null == {"type": "null"} and schema["properties"]["pieces"]["type"] == "integer"
    value = gated.model_validate(
        {
            "carrier": {"evidence": "Royal Mail brings", "value": "Royal Mail"},
            "order": None,
            "pieces": 2,
        }
    ).model_dump(mode="json")
    assert ungated(value, Parcel) == {"carrier": "Royal Mail", "order": None, "pieces": 2}

    class Closed(Contract):
        name: Verbatim

    with pytest.raises(ValueError, match="no nullable field"):
        evidence_gated(Closed)


def test_presence_and_null_only() -> None:
    asked = presence(Parcel)
    assert list(asked.model_fields) == ["carrier", "order"]
    assert all(info.annotation is bool for info in asked.model_fields.values())
    nulled = null_only(Parcel, ["carrier"])
    assert nulled.json_schema()["properties"]["carrier"]["type"] == "null"
    assert nulled is null_only(Parcel, {"carrier"}) and null_only(Parcel, []) is Parcel
    with pytest.raises(ValueError, match="nope"):
        null_only(Parcel, ["nope"])


# --- the arms, through the client on a scripted provider ---


def _reply(request: CompletionRequest) -> Any:
    """What the scripted model answers: by the contract asked for, and the item's document."""
    item = next(i for i, d in DOCUMENTS.items() if d in request.messages[-1].text)
    assert isinstance(request.output, JsonDocument)
    contract = request.output.contract
    name = contract.__name__
    if name.endswith("Presence"):
        return {"carrier": item != "p2", "order": True}  # wrong about p3's order
    if name.endswith("EvidenceGated"):
        carrier = LABELS[item]["carrier"] or "Your"  # p2: copies the wrong thing
        return {
            "carrier": {"evidence": " ".join(DOCUMENTS[item].split()[:2]), "value": carrier},
            "order": None,
            "pieces": 1,
        }
    value: dict[str, Any] = {**LABELS[item], "pieces": 1}
    if "carrier" not in contract.model_fields or "Null" in name:
        for field in ("carrier", "order"):
            if contract.model_fields[field].annotation is type(None):
                value[field] = None
    return value


def _client() -> tuple[TestProvider, StructuredClient]:
    provider = TestProvider([_reply] * 50)
    return provider, StructuredClient(provider, retries=0)


def test_each_arm_sends_its_grounding_option() -> None:
    provider, client = _client()
    items = parse_dataset(DATASET, Parcel)[:1]
    thresholds = calibrate([Sample("/carrier", 0.5, False, True)])
    run_eval(
        items, Parcel, client, arms=["constrained", "grounded", "mass_aware"], thresholds=thresholds
    )
    sent = [request.options.grounding for request in provider.requests]
    assert sent == [False, True, "values"]


def test_evidence_gated_and_presence_first_are_scored_in_the_contracts_shape() -> None:
    provider, client = _client()
    items = parse_dataset(DATASET, Parcel)
    run = run_eval(items, Parcel, client, arms=["evidence_gated", "presence_first"])
    gated = {o.item: o.value for o in run.outcomes_of("evidence_gated")}
    assert gated["p1"] == {"carrier": "Royal Mail", "order": None, "pieces": 1}
    assert gated["p2"]["carrier"] == "Your"
    first = {o.item: o for o in run.outcomes_of("presence_first")}
    assert first["p2"].value["carrier"] is None  # the first pass said unstated: null forced
    assert first["p1"].value == {"carrier": "Royal Mail", "order": "AB-12345", "pieces": 1}
    assert first["p1"].attempts == 2  # two calls, both counted
    asked = [r.output.contract.__name__ for r in provider.requests if r.kind == "json"]  # type: ignore[union-attr]
    assert [name for name in asked if "Null" in name] == ["ParcelNullCarrier"]
    metrics = run.metrics["presence_first"]
    assert metrics.abstention_recall is not None and metrics.stated_accuracy is not None


def test_mass_aware_checks_its_thresholds_against_every_model_a_fallback_may_reach() -> None:
    """The arm applies its thresholds itself (not through the client's check): behind a
    `FallbackProvider` whose second provider runs another model than the one they were
    calibrated on, the arm is unavailable, as a call with them is refused (on main only the
    first provider's model was compared, and the second's masses met the first's thresholds)."""
    from sdk.providers import ConcurrencyLimit
    from sdk.providers import FallbackProvider

    info = schema_info(Parcel)
    fitted = {"contract": {"name": info.name, "fingerprint": info.fingerprint}, "model": "a"}
    thresholds = Thresholds({}, calibration=fitted)
    for wrap in (lambda p: p, lambda p: ConcurrencyLimit(p, 2)):
        both = [TestProvider([_reply] * 5, model="a"), TestProvider([_reply] * 5, model="b")]
        client = StructuredClient(wrap(FallbackProvider(both)), retries=0)
        with pytest.raises(ArmUnavailable, match="calibrated for model a, not for model b"):
            prepare_arm("mass_aware", Parcel, client, thresholds=thresholds)
        with pytest.raises(ArmUnavailable, match="calibrated for model a, not for model b"):
            prepare_arm("anchored", Parcel, client, thresholds=thresholds, anchors={"/x": "y"})
    same = [TestProvider([_reply] * 5, model="a"), TestProvider([_reply] * 5, model="a")]
    client = StructuredClient(FallbackProvider(same), retries=0)
    assert prepare_arm("mass_aware", Parcel, client, thresholds=thresholds).steps is not None


def test_mass_aware_needs_calibrated_thresholds_for_its_contract() -> None:
    _, client = _client()
    with pytest.raises(ArmUnavailable, match="--calibrate"):
        prepare_arm("mass_aware", Parcel, client)
    assert prepare_arm("mass_aware", Parcel, client, calibrating=True).steps is not None
    other = Thresholds({}, calibration={"contract": {"name": "X", "fingerprint": "0" * 64}})
    mismatch = r"calibrated for X \(fingerprint 000000000000\), not for Parcel"
    with pytest.raises(ArmUnavailable, match=mismatch):
        prepare_arm("mass_aware", Parcel, client, thresholds=other)
    # A hand-written file naming another contract, without a fingerprint: the client's check
    # (on main the arm took it, and applied X's thresholds to Parcel)
    by_name = Thresholds({}, calibration={"contract": {"name": "X"}})
    with pytest.raises(ArmUnavailable, match=r"calibrated for X \(no fingerprint recorded\)"):
        prepare_arm("mass_aware", Parcel, client, thresholds=by_name)
    own = Thresholds({}, calibration={"contract": {"name": "Parcel"}})
    assert prepare_arm("mass_aware", Parcel, client, thresholds=own).steps is not None

    class Plain(Contract):
        name: str | None

    for arm in ("grounded", "evidence_gated", "presence_first", "mass_aware"):
        with pytest.raises(ArmUnavailable, match="no Verbatim"):
            prepare_arm(arm, Plain, client, calibrating=True)


def test_calibrating_a_run_uses_the_mass_aware_signals_and_labels() -> None:
    items = parse_dataset(DATASET, Parcel)

    def outcome(item: str, carrier: str | None, signal: float) -> Outcome:
        label = LABELS[item]["carrier"]
        scored = FieldScore(label, carrier, carrier == label, carrier is None, label is None)
        return Outcome(item, "mass_aware", True, {"carrier": scored}, signals={"/carrier": signal})

    run = EvalRun({"arms": ["mass_aware"], "thresholds": None}, items)
    for made in (
        outcome("p1", "Royal Mail", 0.6),
        outcome("p2", "Your", 0.1),
        outcome("p3", "DHL Parcel", 0.5),
    ):
        run.outcomes["mass_aware", made.item] = made
    samples = calibration_samples(run)
    assert [(s.signal, s.should_abstain) for s in samples] == [
        (0.6, False),
        (0.1, True),
        (0.5, False),
    ]
    thresholds = calibrate_run(run)
    entry = thresholds.fields["/carrier"]
    assert 0.1 < entry.threshold <= 0.5 and entry.recall == 1.0
    run.config["thresholds"] = {"/carrier": 0.3}
    with pytest.raises(ValueError, match="applied thresholds"):
        calibrate_run(run)


def test_calibrated_thresholds_record_the_contract_s_fingerprint() -> None:
    """What `Thresholds.check_contract` rests on: `sdk eval --calibrate` writes the contract's
    name and fingerprint with the thresholds, so a file naming a contract without its
    fingerprint was not written by the SDK (its name decides)."""
    _, client = _client()
    items = parse_dataset(DATASET, Parcel)
    run = run_eval(items, Parcel, client, arms=["mass_aware"], calibrating=True)
    recorded = calibrate_run(run).calibration["contract"]
    info = schema_info(Parcel)
    assert (recorded["name"], recorded["fingerprint"]) == (info.name, info.fingerprint)


def test_the_cli_refuses_thresholds_and_calibration_together(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sdk.cli import app

    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join(DATASET))
    result = CliRunner().invoke(
        app,
        [
            "eval",
            str(dataset),
            "--contract",
            "tests.test_abstention:Parcel",
            "--thresholds",
            str(tmp_path / "t.json"),
            "--calibrate",
            str(tmp_path / "c.json"),
        ],
    )
    assert result.exit_code != 0
    assert "--calibrate" in result.output
    assert not os.path.exists(tmp_path / "c.json")


def test_thresholds_fitted_on_several_models_fit_each_and_no_other() -> None:
    """A record of `sdk eval --calibrate` through a `FallbackProvider` names every model that
    answered (`models`): a call on any of them takes it, one on another model does not, and
    the note says which models (on main `models` was not read, and `model` named the primary
    alone)."""
    info = schema_info(Parcel)
    contract = {"name": info.name, "fingerprint": info.fingerprint}
    both = Thresholds({}, calibration={"contract": contract, "model": None, "models": ["a", "b"]})
    for model in ("a", "b", None):
        both.check_contract(info.name, info.fingerprint, model)
    with pytest.raises(ThresholdsMismatch, match="calibrated for models a, b, not for model c"):
        both.check_contract(info.name, info.fingerprint, "c")
    assert both.describe() == "thresholds calibrated on labelled data for a, b"
    # A record written before `models` (or by hand) is read by its `model`, as before.
    older = Thresholds({}, calibration={"contract": contract, "model": "a"})
    older.check_contract(info.name, info.fingerprint, "a")
    with pytest.raises(ThresholdsMismatch, match="calibrated for model a, not for model b"):
        older.check_contract(info.name, info.fingerprint, "b")


def test_thresholds_whose_models_are_written_by_hand_as_one_name_fit_that_model_only() -> None:
    """A record written by hand may give `models` as one name (`"models": "a"`), as it may
    give `contract` as one: that model, not any (before the fix a string `models` was passed
    over, and a record without `model` applied to every model: a call on b took it)."""
    info = schema_info(Parcel)
    contract = {"name": info.name, "fingerprint": info.fingerprint}
    one = Thresholds({}, calibration={"contract": contract, "models": "a"})
    one.check_contract(info.name, info.fingerprint, "a")
    with pytest.raises(ThresholdsMismatch, match="calibrated for model a, not for model b"):
        one.check_contract(info.name, info.fingerprint, "b")
    assert one.describe() == "thresholds calibrated on labelled data for a"
