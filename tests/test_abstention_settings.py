"""Guided abstention before anyone calibrates (issue 32): the default thresholds, thresholds set
by hand, a file calibrated for another contract refused, a malformed file refused naming the
file and the line (issue 30), and the note on every result saying which signal decided."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from contracts import ShipmentNotice
from sdk import Contract
from sdk import StructuredClient
from sdk import Verbatim
from sdk.abstention import DEFAULT_THRESHOLD
from sdk.abstention import FieldThreshold
from sdk.abstention import Thresholds
from sdk.abstention import ThresholdsFileError
from sdk.abstention import ThresholdsMismatch
from sdk.engine.kinds.guided import NO_SIGNAL
from sdk.providers import TestProvider
from sdk.schema.canonical import schema_info
from sdk.schema.canonical import shared_schema

STATED = {"carrier": "DHL Express", "tracking_number": None, "order_number": "FH-5079207",
          "recipient": "Jonah Whitaker"}  # fmt: skip
SOURCE = "DHL Express brings order FH-5079207 to Jonah Whitaker."


def test_the_default_abstains_on_free_copies_and_leaves_patterned_ids_to_the_grammar() -> None:
    standard = Thresholds.standard(shared_schema(ShipmentNotice))
    assert {p: t.threshold for p, t in standard.fields.items()} == {
        "/carrier": DEFAULT_THRESHOLD,
        "/recipient": DEFAULT_THRESHOLD,
    }
    assert standard.of("/order_number") == 0.0  # its pattern decides, in the grammar
    assert "default threshold" in standard.describe()


def test_a_threshold_set_by_hand_is_one_number() -> None:
    everywhere = Thresholds.fixed(0.25)
    assert everywhere.of("/carrier") == 0.25 == everywhere.of("/anything")
    named = Thresholds.fixed({"/carrier": 0.4})
    assert named.of("/carrier") == 0.4 and named.of("/recipient") == 0.0
    assert FieldThreshold(0.2).recall is None  # no statistics to invent
    assert named.describe() == "thresholds set by hand"
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        Thresholds.fixed({"/carrier": 1.5})
    with pytest.raises(TypeError, match="a number"):
        FieldThreshold("high")  # type: ignore[arg-type]


def test_thresholds_calibrated_for_another_contract_are_refused_naming_both() -> None:
    class Booking(Contract):
        guest: Verbatim | None

    info = schema_info(ShipmentNotice)
    calibrated = Thresholds(
        {"/carrier": FieldThreshold(0.3, 0.8, 0.05, 20, 10)},
        calibration={"contract": {"name": info.name, "fingerprint": info.fingerprint}},
    )
    provider = TestProvider([json.dumps({"guest": None})])
    client = StructuredClient(provider)
    with pytest.raises(ThresholdsMismatch) as refused:
        client.generate(Booking, prompt="x", source="y", abstention="guided",
                        abstention_thresholds=calibrated)  # fmt: skip
    message = str(refused.value)
    assert "ShipmentNotice" in message and info.fingerprint[:12] in message
    assert "Booking" in message and schema_info(Booking).fingerprint[:12] in message
    assert provider.requests == []  # refused before anything was sent
    # The contract they were calibrated for takes them.
    calibrated.check_contract(info.name, info.fingerprint)


def test_thresholds_calibrated_on_another_model_are_refused_naming_both() -> None:
    # A grounded value's surviving mass is the model's: thresholds calibrated on one model say
    # nothing of another's (`sdk eval --calibrate` records the model, as a confidence
    # calibration does, and the same check refuses both).
    info = schema_info(ShipmentNotice)
    fitted = {"contract": {"name": info.name, "fingerprint": info.fingerprint}, "model": "gemma3"}
    calibrated = Thresholds({"/carrier": FieldThreshold(0.3, 0.8, 0.05, 20, 10)},
                            calibration=fitted)  # fmt: skip
    provider = TestProvider(["{}"], model="smollm2")  # (never asked)
    client = StructuredClient(provider)
    with pytest.raises(ThresholdsMismatch) as refused:
        client.generate(ShipmentNotice, prompt="x", source="y", abstention="guided",
                        abstention_thresholds=calibrated)  # fmt: skip
    message = str(refused.value)
    assert "model gemma3" in message and "model smollm2" in message
    assert provider.requests == []  # refused before anything was sent
    calibrated.check_contract(info.name, info.fingerprint, "gemma3")  # its own model takes them
    calibrated.check_contract(info.name, info.fingerprint, None)  # a model not known: not compared


@pytest.mark.parametrize("named", [{"name": "ShipmentNotice"}, "ShipmentNotice"])
def test_a_hand_written_file_naming_another_contract_without_a_fingerprint_is_refused(
    tmp_path: Path, named: object
) -> None:
    """`sdk eval --calibrate` always records the contract's fingerprint: a file naming its
    contract without one was written by hand, and the name it gives decides (on main it fit
    any contract, and ShipmentNotice's thresholds were applied to Booking's fields)."""

    class Booking(Contract):
        guest: Verbatim | None

    path = _file(tmp_path, json.dumps({**GOOD, "calibration": {"contract": named}}))
    provider = TestProvider([json.dumps({"guest": None})])
    with pytest.raises(ThresholdsMismatch) as refused:
        StructuredClient(provider).generate(Booking, prompt="x", source="y", abstention="guided",
                                            abstention_thresholds=path)  # fmt: skip
    message = str(refused.value)
    assert "ShipmentNotice (no fingerprint recorded)" in message
    assert f"not for Booking (fingerprint {schema_info(Booking).fingerprint[:12]})" in message
    assert provider.requests == []  # refused before anything was sent
    # The contract it names takes it; a file naming none (set by hand) fits any contract.
    info = schema_info(ShipmentNotice)
    Thresholds.load(path).check_contract(info.name, info.fingerprint)
    anywhere = _file(tmp_path, json.dumps({**GOOD, "calibration": {}, "fields": {}}))
    taken = StructuredClient(TestProvider([json.dumps({"guest": None})])).generate(
        Booking, prompt="x", source="y", abstention="guided", abstention_thresholds=anywhere
    )
    assert taken.value.guest is None


def test_every_guided_result_says_which_signal_decided() -> None:
    provider = TestProvider([json.dumps(STATED)])
    result = StructuredClient(provider).generate(
        ShipmentNotice, prompt="Fill it in.", source=SOURCE, abstention="guided"
    )
    said = [note for note in result.notes if note.kind == "abstention"]
    # The scripted provider reports no token probabilities: the instruction and grounding alone.
    assert [(n.pointer, n.written) for n in said] == [("", NO_SIGNAL)]
    plain = StructuredClient(TestProvider([json.dumps(STATED)])).generate(
        ShipmentNotice, prompt="Fill it in.", source=SOURCE
    )
    assert not [note for note in plain.notes if note.kind == "abstention"]


# --- the thresholds file: refused naming the file and the line ---


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "thresholds.json"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = {
    "format": "sdk-abstention/1",
    "max_false_abstention": 0.05,
    "calibration": {},
    "fields": {
        "/carrier": {"threshold": 0.3, "recall": 0.8, "false_abstention": 0.0, "stated": 9,
                     "absent": 3},
        "/recipient": {"threshold": 0.2},
    },
}  # fmt: skip


def test_a_good_file_loads_and_a_hand_written_entry_needs_only_its_threshold(
    tmp_path: Path,
) -> None:
    loaded = Thresholds.load(_file(tmp_path, json.dumps(GOOD, indent=1)))
    assert loaded.of("/carrier") == 0.3 and loaded.of("/recipient") == 0.2
    assert loaded.fields["/recipient"].recall is None
    saved = loaded.save(tmp_path / "again.json")
    assert Thresholds.load(saved) == loaded


@pytest.mark.parametrize(
    ("change", "problem", "line"),
    [
        ({"threshold": "0.3"}, "not a number", 7),
        ({"threshold": None}, "not a number", 7),
        ({"threshold": 2}, "not within", 7),
        ({"threshold": float("nan")}, "not within", 7),
        ({"recall": 0.8}, "has no threshold", 7),
        ({"threshold": 0.3, "stated": "many"}, "many", 7),
        # on main: a bare OverflowError (int() of infinity), no file, no line
        ({"threshold": 0.3, "stated": float("inf")}, "infinity", 7),
        ({"threshold": 0.3, "absent": float("-inf")}, "infinity", 7),
        ("high", "not a threshold entry", 6),
    ],
)
def test_a_malformed_entry_names_the_file_the_line_and_the_field(
    tmp_path: Path, change: object, problem: str, line: int
) -> None:
    data = json.loads(json.dumps(GOOD))
    data["fields"]["/recipient"] = change
    text = json.dumps(data, indent=1, allow_nan=True)
    path = _file(tmp_path, text)
    expected = text.splitlines().index(next(s for s in text.splitlines() if '"/recipient"' in s))
    with pytest.raises(ThresholdsFileError) as refused:
        Thresholds.load(path)
    error = refused.value
    assert isinstance(error, ValueError)  # what a caller catching ValueError expects
    assert error.path == str(path) and error.line == expected + 1
    assert str(error).startswith(f"{path}, line {expected + 1}: ") and problem in str(error)
    assert "/recipient" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error)


@pytest.mark.parametrize(
    ("text", "problem", "line"),
    [
        ('{"format": "sdk-abstention/1",\n "fields": {\n  "/a": {"threshold": 0.1,}\n}}',
         "not JSON", 3),
        ("[1, 2]", "not an abstention thresholds file", None),
        ('{"format": "sdk-abstention/1", "fields": [1]}', "`fields` must be an object", 1),
        ('{"format": "sdk-abstention/1", "fields": {}, "max_false_abstention": "x"}',
         "`max_false_abstention` must be within [0, 1]", 1),
        ('{"format": "sdk-abstention/1",\n "fields": {},\n "default": 3}',
         "`default` must be within [0, 1]", 3),
    ],
)  # fmt: skip
def test_a_malformed_file_names_itself(
    tmp_path: Path, text: str, problem: str, line: int | None
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ThresholdsFileError) as refused:
        Thresholds.load(path)
    assert refused.value.line == line and problem in str(refused.value)
    assert str(path) in str(refused.value)


def test_a_missing_or_undecodable_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(ThresholdsFileError, match="not a readable thresholds file"):
        Thresholds.load(tmp_path / "nowhere.json")
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"format": "\xe9"}')
    with pytest.raises(ThresholdsFileError, match=r"latin1\.json"):
        Thresholds.load(bad)


def test_a_malformed_file_given_to_a_call_is_refused_before_sending(tmp_path: Path) -> None:
    path = _file(tmp_path, '{"format": "sdk-abstention/1", "fields": {"/carrier": 7}}')
    provider = TestProvider([json.dumps(STATED)])
    client = StructuredClient(provider)
    with pytest.raises(ThresholdsFileError, match=r"thresholds\.json, line 1: field '/carrier'"):
        client.generate(ShipmentNotice, prompt="x", source=SOURCE, abstention="guided",
                        abstention_thresholds=path)  # fmt: skip
    assert provider.requests == []


def test_a_threshold_by_hand_for_a_field_that_cannot_abstain_is_refused_before_sending() -> None:
    """A hand-set threshold naming a pointer guided abstention never reads (a typo, a field
    that cannot be null) is a `ValueError` naming it and the fields that can abstain, before
    anything is sent (on main it was accepted and silently changed nothing: the result came
    back with every field filled)."""
    for pointer in ("/carier", "/order_number/0", "carrier"):
        provider = TestProvider([json.dumps(STATED)])
        client = StructuredClient(provider)
        with pytest.raises(ValueError) as refused:
            client.generate(ShipmentNotice, prompt="x", source=SOURCE, abstention="guided",
                            abstention_thresholds={pointer: 0.4})  # fmt: skip
        message = str(refused.value)
        assert repr(pointer) in message and "/carrier" in message and "/recipient" in message
        assert provider.requests == []
    # The fields that can abstain take one.
    provider = TestProvider([json.dumps(STATED)])
    result = StructuredClient(provider).generate(
        ShipmentNotice, prompt="x", source=SOURCE, abstention="guided",
        abstention_thresholds={"/carrier": 0.4, "/recipient": 0.1},
    )  # fmt: skip
    assert result.value.carrier == "DHL Express"


@pytest.mark.parametrize("named", [{"name": "ShipmentNotice"}, "ShipmentNotice"])
def test_a_hand_written_file_naming_its_contract_is_checked_for_its_fields(
    tmp_path: Path, named: object
) -> None:
    """A file that names its contract without a fingerprint was written by hand (`sdk eval
    --calibrate` records the fingerprint): its field pointers are checked as thresholds set by
    hand are, so a misspelt one is refused before anything is sent (on main it passed as
    calibrated, and `/carier`'s threshold silently changed nothing)."""
    misspelt = {**GOOD, "calibration": {"contract": named},
                "fields": {"/carier": {"threshold": 0.9}}}  # fmt: skip
    path = _file(tmp_path, json.dumps(misspelt))
    provider = TestProvider([json.dumps(STATED)])
    with pytest.raises(ValueError) as refused:
        StructuredClient(provider).generate(
            ShipmentNotice, prompt="x", source=SOURCE, abstention="guided",
            abstention_thresholds=path,
        )  # fmt: skip
    message = str(refused.value)
    assert "'/carier'" in message and "/carrier" in message and "/recipient" in message
    assert provider.requests == []
    # Spelt right, it is taken; a file the SDK wrote (its fingerprint recorded) is its own.
    right = {**misspelt, "fields": {"/carrier": {"threshold": 0.9}}}
    result = StructuredClient(TestProvider([json.dumps(STATED)])).generate(
        ShipmentNotice, prompt="x", source=SOURCE, abstention="guided",
        abstention_thresholds=_file(tmp_path, json.dumps(right)),
    )  # fmt: skip
    assert result.value.recipient == "Jonah Whitaker"


@pytest.mark.parametrize("threshold", ["high", None, [0.2]])
def test_a_threshold_by_hand_that_is_not_a_number_says_so(threshold: object) -> None:
    """On main: `could not convert string to float: 'high'` / a bare `float()` TypeError,
    naming neither the field nor what a threshold is."""
    with pytest.raises((TypeError, ValueError), match=r"/carrier.*a number") as refused:
        Thresholds.fixed({"/carrier": threshold})  # type: ignore[dict-item]
    assert repr(threshold) in str(refused.value)


@pytest.mark.parametrize("threshold", [-1, 1.5, float("nan"), {"/carrier": 2}, {"/carrier": "x"}])
def test_a_bad_threshold_by_hand_names_the_setting_where_it_is_set(threshold: object) -> None:
    """Issue 30 item 5: a setting is checked where it is set, and the error names it. On main
    the message was the threshold's alone ("a threshold is within [0, 1], not -1"), naming no
    setting, on the client, in `with_options` and on a call."""
    client = StructuredClient(TestProvider([json.dumps(STATED)]))
    for set_it in (
        lambda: StructuredClient(TestProvider([]), abstention_thresholds=threshold),
        lambda: client.with_options(abstention_thresholds=threshold),
        lambda: client.generate(ShipmentNotice, prompt="x", source=SOURCE, abstention="guided",
                                abstention_thresholds=threshold),
    ):  # fmt: skip
        with pytest.raises((TypeError, ValueError), match="abstention_thresholds"):
            set_it()
