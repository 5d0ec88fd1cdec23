"""Per-value confidence (`Result.confidence`, `sdk.confidence`): worked by hand on a scripted
model with fixed logits (`tests/scripted_engine.py`: the real decoding loop and llguidance, only
the forward pass scripted), then on the real embedded model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from sdk import StructuredClient
from sdk.confidence import Confidence
from sdk.confidence import TokenLogprob
from sdk.confidence import value_confidence
from sdk.contract import Contract

pytest.importorskip("llguidance")
pytest.importorskip("numpy")

from sdk.providers import EmbeddedProvider
from tests.scripted_engine import ScriptedEngine
from tests.scripted_engine import softmax_share

VOCABULARY = [
    '{"',
    "color",
    "word",
    '":"',
    '":',
    '"',
    '"}',
    "}",
    ":",
    "red",
    "gre",
    "en",
    "r",
    "e",
    "d",
    "g",
    "n",
    "x",
    "null",
]


class Paint(Contract):
    color: Literal["red", "green", "greed"]


class Word(Contract):
    word: str = Field(max_length=3)


def _client(engine: ScriptedEngine, folder: Path) -> tuple[StructuredClient, Path]:
    context = engine.installed(folder)
    path = context.__enter__()
    return StructuredClient(EmbeddedProvider(path, n_threads=1), retries=0), path


@pytest.fixture
def scripted(tmp_path: Path):
    engines: list[ScriptedEngine] = []

    def make(script) -> StructuredClient:
        engine = ScriptedEngine(VOCABULARY, script)
        engines.append(engine)
        client, _ = _client(engine, tmp_path / str(len(engines)))
        return client

    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    yield make


def _share(logits, chosen, among):
    return softmax_share(logits, chosen, among, vocabulary=[*VOCABULARY, "<eos>"])


AFTER_KEY = {'":"': 1.0, '":': 0.5, '"': -1.0, "x": 3.0}  # "x": the model's favourite, forbidden


def test_masked_and_unmasked_probability_of_a_one_token_value(scripted) -> None:
    value_start = {"red": 2.0, "gre": 1.0, "x": 4.0}
    closing = {'"}': 3.0, '"': 1.0, "e": 2.5}

    def script(text: str) -> dict[str, float]:
        return {
            "": {'{"': 5.0},
            '{"': {"color": 5.0},
            '{"color': AFTER_KEY,
            '{"color":"': value_start,
            '{"color":"red': closing,
        }.get(text, {})

    client = scripted(script)
    result = client.generate(Paint, prompt="colour?", max_tokens=20)
    assert result.value.color == "red" and result.text == '{"color":"red"}'
    # By hand: each token of the value (the quote that opens it, "red", the quote that closes
    # it) among the tokens the grammar allowed at its step, and the share those held.
    # The closing token is forced: llguidance keeps to the vocabulary's own split, in which a
    # quote before `}` is written `"}` (so its probability under the mask is 1).
    assert [s.allowed for s in result.diagnostics.steps] == [1, 1, 3, 4, 1]
    quote, quote_kept = _share(AFTER_KEY, '":"', ['":"', '":', '"'])
    red, red_kept = _share(value_start, "red", ["red", "gre", "r", "g"])
    end, end_kept = 1.0, _share(closing, '"}', ['"}'])[1]
    details = result.confidence.details["/color"]
    assert details.tokens == 3
    assert details.probability == pytest.approx(quote * red * end, rel=1e-5)
    assert details.kept == pytest.approx(quote_kept * red_kept * end_kept, rel=1e-5)
    assert details.lowest_kept == pytest.approx(min(quote_kept, red_kept, end_kept), rel=1e-5)
    assert details.unmasked == pytest.approx(details.probability * details.kept)
    assert result.confidence["/color"] == pytest.approx(details.probability)
    assert result.confidence.route == "masked" and not result.confidence.calibrated
    # The two answer different questions: the decoder was fairly sure of "red" among what it
    # could write, while the model gave most of its probability to the forbidden "x".
    assert details.probability > 0.4 > 0.02 > details.kept


def test_a_multi_token_value_multiplies_its_tokens(scripted) -> None:
    value_start = {"gre": 3.0, "red": 1.0, "g": 0.0}
    inside = {"en": 2.0, "e": 1.0}
    closing = {'"}': 4.0}

    def script(text: str) -> dict[str, float]:
        return {
            "": {'{"': 5.0},
            '{"': {"color": 5.0},
            '{"color': AFTER_KEY,
            '{"color":"': value_start,
            '{"color":"gre': inside,
            '{"color":"green': closing,
        }.get(text, {})

    result = scripted(script).generate(Paint, prompt="colour?", max_tokens=20)
    assert result.value.color == "green"
    quote, _ = _share(AFTER_KEY, '":"', ['":"', '":', '"'])
    first, _ = _share(value_start, "gre", ["red", "gre", "r", "g"])
    # After "gre" the grammar allows only what completes "green": "en" or "e".
    second, _ = _share(inside, "en", ["en", "e"])
    end = 1.0  # forced, as above
    details = result.confidence.details["/color"]
    assert details.tokens == 4
    assert details.probability == pytest.approx(quote * first * second * end, rel=1e-5)


def test_a_value_cut_by_the_grammar_is_certain_among_what_was_allowed_and_kept_little(
    scripted,
) -> None:
    # The model wants to go on writing ("x" after "red"); maxLength 3 leaves only the quote.
    wants_more = {"x": 6.0, '"}': 0.0}

    def script(text: str) -> dict[str, float]:
        return {
            "": {'{"': 5.0},
            '{"': {"word": 5.0},
            '{"word': AFTER_KEY,
            '{"word":"': {"red": 3.0},
            '{"word":"red': wants_more,
        }.get(text, {})

    result = scripted(script).generate(Word, prompt="a word", max_tokens=20)
    assert result.value.word == "red"
    _, cut_kept = _share(wants_more, '"}', ['"}'])
    details = result.confidence.details["/word"]
    steps = [s for s in result.diagnostics.steps if s.offset == len('{"word":"red')]
    assert steps and steps[0].forced and steps[0].mass == pytest.approx(cut_kept, rel=1e-5)
    # Among what was allowed, the value was written with certainty after its first token...
    first, _ = _share({"red": 3.0}, "red", [t for t in VOCABULARY if t not in ('{"', "color",
                      "word", '":"', '":', '"', '"}', "}", ":", "null")])  # fmt: skip
    assert details.probability == pytest.approx(
        _share(AFTER_KEY, '":"', ['":"', '":', '"'])[0] * first, rel=1e-4
    )
    # ...while the model wanted to go on: the grammar removed nearly all of its probability.
    assert details.removed is not None and details.removed > 0.99
    assert details.lowest_kept == pytest.approx(cut_kept, rel=1e-5)


def test_unconstrained_decoding_keeps_everything(scripted) -> None:
    def script(text: str) -> dict[str, float]:
        return {
            "": {'{"': 5.0},
            '{"': {"color": 5.0},
            '{"color': {'":"': 5.0},
            '{"color":"': {"red": 6.0},
            '{"color":"red': {'"}': 6.0},
            '{"color":"red"}': {"<eos>": 9.0},
        }.get(text, {})

    result = scripted(script).generate(Paint, prompt="colour?", max_tokens=20, constrained=False)
    details = result.confidence.details["/color"]
    assert details.kept == 1.0 and details.removed == 0.0
    # Over the whole vocabulary now: each token's plain softmax share.
    expected = math.prod(
        _share(logits, chosen, [*VOCABULARY, "<eos>"])[0]
        for logits, chosen in (({'":"': 5.0}, '":"'), ({"red": 6.0}, "red"), ({'"}': 6.0}, '"}'))
    )
    assert details.probability == pytest.approx(expected, rel=1e-5)


# --- the pure part: which tokens a value is made of ---


def _tokens(*pieces: tuple[str, float]) -> list[TokenLogprob]:
    out, offset = [], 0
    for text, probability in pieces:
        out.append(TokenLogprob(text, offset, math.log(probability), None))
        offset += len(text)
    return out


def test_a_number_counts_the_token_that_ended_it() -> None:
    text = '{"a": 42, "b": "x"}'
    tokens = _tokens(('{"a": ', 1.0), ("4", 0.5), ("2", 0.5), (', "', 0.8), ('b": "', 1.0),
                     ("x", 0.9), ('"}', 1.0))  # fmt: skip
    values = value_confidence(text, tokens)
    # 42: "4", "2", and ', "' which said the number was over (it also opens "b"'s key).
    assert values["/a"].probability == pytest.approx(0.5 * 0.5 * 0.8)
    assert values["/a"].tokens == 3
    # "x": the token holding its opening quote, "x", the closing quote.
    assert values["/b"].probability == pytest.approx(1.0 * 0.9 * 1.0)
    assert values["/b"].kept is None and values["/b"].unmasked is None


def test_nested_values_by_pointer_and_an_offset_into_the_reply() -> None:
    text = '{"lines": [{"total": 3}], "ok": true}'
    fence = "```json\n"
    three, true = text.index("3"), text.index("true")
    pieces = _tokens((text[:three], 1.0), ("3", 0.25), (text[three + 1 : true], 1.0),
                     ("true", 0.5), ("}", 1.0))  # fmt: skip
    tokens = [TokenLogprob(fence, 0, 0.0, 1.0)] + [
        TokenLogprob(t.text, t.offset + len(fence), t.logprob, 0.5) for t in pieces
    ]
    values = value_confidence(text, tokens, offset=len(fence))
    assert set(values) == {"/lines/0/total", "/ok"}
    # The number's end came with "}], " (probability 1 here).
    assert values["/lines/0/total"].probability == pytest.approx(0.25)
    assert values["/ok"].probability == pytest.approx(0.5)
    assert values["/ok"].kept == pytest.approx(0.5)


def test_confidence_is_a_mapping_that_can_be_rebased_and_calibrated() -> None:
    text = '{"items": [{"n": 1}, {"n": 2}]}'
    one, two = text.index("1"), text.index("2")
    tokens = _tokens((text[:one], 1.0), ("1", 0.5), (text[one + 1 : two], 1.0), ("2", 0.25),
                     (text[two + 1 :], 1.0))  # fmt: skip
    confidence = Confidence(value_confidence(text, tokens), route="reported")
    assert dict(confidence) == pytest.approx({"/items/0/n": 0.5, "/items/1/n": 0.25})
    listed = confidence.rebased("/items")
    assert dict(listed) == pytest.approx({"/0/n": 0.5, "/1/n": 0.25})
    assert listed.details["/1/n"].pointer == "/1/n"
    assert listed.lowest() == ("/1/n", pytest.approx(0.25))
    calibrated = listed.with_calibrated({"/0/n": 0.9, "/1/n": 0.7})
    assert calibrated.calibrated and calibrated["/0/n"] == 0.9
    assert calibrated.details["/0/n"].probability == pytest.approx(0.5)  # raw kept
    assert dict(calibrated.without(["/0/n"])) == {"/1/n": 0.7}


def test_a_calibration_that_misses_a_value_is_refused_naming_it() -> None:
    """On main: a bare `KeyError: '/1/n'` from inside the constructor."""
    text = '[{"n": 1}, {"n": 2}]'
    confidence = Confidence(value_confidence(text, _tokens((text, 0.5))), route="reported")
    with pytest.raises(ValueError, match=r"no calibrated probability for '/1/n'"):
        confidence.with_calibrated({"/0/n": 0.9})


def test_no_tokens_no_confidence() -> None:
    assert value_confidence('{"a": 1}', []) == {}
    assert value_confidence("Sorry, no JSON", _tokens(("Sorry, no JSON", 0.5))) == {}


# --- min_confidence: a floor under which a value abstains, or the call fails ---


class Shade(Contract):
    color: Literal["red", "green", "greed"] | None


def _unsure(text: str) -> dict[str, float]:
    """A model that hesitates between "red" and "gre..." for the colour."""
    return {
        "": {'{"': 5.0},
        '{"': {"color": 5.0},
        '{"color': AFTER_KEY,
        '{"color":"': {"red": 1.0, "gre": 0.9},
        '{"color":"red': {'"}': 5.0},
    }.get(text, {})


def test_a_nullable_value_under_the_floor_abstains_with_a_note(scripted) -> None:
    client = scripted(_unsure)
    sure = client.generate(Shade, prompt="colour?", max_tokens=20)
    assert sure.value.color == "red" and sure.confidence["/color"] < 0.5
    floored = client.generate(Shade, prompt="colour?", max_tokens=20, min_confidence=0.5)
    assert floored.value.color is None
    notes = [n for n in floored.notes if n.kind == "low_confidence"]
    assert [(n.pointer, n.received) for n in notes] == [("/color", "red")]
    assert "/color" not in floored.confidence  # the null was not decoded: no confidence
    assert floored.text == sure.text  # what the model wrote stays on the result
    kept = client.generate(Shade, prompt="colour?", max_tokens=20, min_confidence=0.3)
    assert kept.value.color == "red"


def test_a_value_under_the_floor_that_cannot_be_null_fails_the_call_once(scripted) -> None:
    from sdk.errors import LowConfidence

    client = scripted(_unsure)
    with pytest.raises(LowConfidence) as failed:
        client.generate(Paint, prompt="colour?", max_tokens=20, min_confidence=0.5)
    error = failed.value
    assert list(error.confidence) == ["/color"] and error.confidence["/color"] < 0.5
    assert error.value.color == "red" and error.text == '{"color":"red"}'
    assert len(error.attempts) == 1  # not retried: the same request is as unsure


def test_the_floor_s_null_goes_where_the_pointer_names_a_value_and_nowhere_else() -> None:
    # The floor's copy with a null (`_with_null`) reads a pointer as `lookup` does: `/a/01`
    # names nothing (it nulled `a[1]`), and the value asked about is left as it was.
    from sdk.engine.kinds.document import _with_null

    value = {"a": ["x", "y"], "b": {"c": 1}}
    assert _with_null(value, "/a/1") == {"a": ["x", None], "b": {"c": 1}}
    assert _with_null(value, "/b/c") == {"a": ["x", "y"], "b": {"c": None}}
    assert _with_null(value, "") is None  # the whole value
    for nothing in ("/a/01", "/a/2", "/b/d", "/a/1/x"):
        with pytest.raises(LookupError):
            _with_null(value, nothing)
    assert value == {"a": ["x", "y"], "b": {"c": 1}}


def test_min_confidence_on_a_route_without_probabilities_says_it_was_not_applied() -> None:
    from sdk.providers import TestProvider

    result = StructuredClient(TestProvider(['{"color": "red"}'])).generate(
        Shade, prompt="colour?", min_confidence=0.9
    )
    assert result.value.color == "red" and result.confidence is None
    assert [(n.kind, n.written) for n in result.notes] == [
        ("confidence", "not applied: this route reports no token probabilities")
    ]


@pytest.mark.parametrize("floor", [-0.1, 1.5, "high"])
def test_min_confidence_is_checked_when_set(floor: object) -> None:
    from sdk.providers import TestProvider

    provider = TestProvider(['{"color": "red"}'])
    with pytest.raises((TypeError, ValueError), match="min_confidence"):
        StructuredClient(provider).generate(Shade, prompt="x", min_confidence=floor)
    assert provider.requests == []


# --- calibration ---


def test_a_calibration_maps_confidence_and_min_confidence_uses_it(scripted, tmp_path) -> None:
    from sdk.calibration import Calibration
    from sdk.calibration import Curve

    # Strings the decoder is unsure of (about 0.3) turn out right 90% of the time here.
    curve = Curve("isotonic", (0.0, 0.1, 0.2, 0.9), 40)
    path = Calibration({"string": curve}, {"dataset": "hand-made"}).save(tmp_path / "c.json")
    client = scripted(_unsure)
    raw = client.generate(Shade, prompt="colour?", max_tokens=20)
    calibrated = client.generate(Shade, prompt="colour?", max_tokens=20,
                                 confidence_calibration=path)  # fmt: skip
    assert 0.2 <= raw.confidence["/color"] < 0.5
    assert calibrated.confidence.calibrated and calibrated.confidence["/color"] == 0.9
    assert calibrated.confidence.details["/color"].probability == raw.confidence["/color"]
    kept = client.generate(Shade, prompt="colour?", max_tokens=20, min_confidence=0.5,
                           confidence_calibration=path)  # fmt: skip
    assert kept.value.color == "red"  # 0.9 calibrated: over the floor
