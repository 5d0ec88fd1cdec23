"""`sdk.diagnostics`: which field each token was written for, and the per-field summary.

Pure: no model. The steps here are built by hand the way `EmbeddedProvider` records them (the
generation-time tests are in tests/test_embedded.py).
"""

from __future__ import annotations

import json

import pytest

from sdk import ConstraintDiagnostics
from sdk import FieldDiagnostics
from sdk import TokenStep
from sdk.diagnostics import char_pointers
from sdk.diagnostics import diagnose


def _owners(text: str) -> dict[str, str]:
    """Each pointer with the characters it owns, concatenated (easier to read than a list)."""
    found: dict[str, str] = {}
    for char, pointer in zip(text, char_pointers(text), strict=True):
        found[pointer] = found.get(pointer, "") + char
    return found


def test_keys_values_and_punctuation_belong_where_documented() -> None:
    text = '{"a": "x,y", "b": [1, {"c": null}], "d": [], "e~/f": true}'
    assert _owners(text) == {
        "": "{, , , }",
        "/a": '"a": "x,y"',
        "/b": '"b": [, ]',
        "/b/0": "1",
        "/b/1": "{}",
        "/b/1/c": '"c": null',
        "/d": '"d": []',
        "/e~0~1f": '"e~/f": true',
    }


def test_escapes_and_nesting() -> None:
    text = '{"q": "say \\"hi\\"", "n": [[1, 2], [3]]}'
    owners = _owners(text)
    assert owners["/q"] == '"q": "say \\"hi\\""'
    assert owners["/n/0/1"] == "2" and owners["/n/1/0"] == "3"
    deep = "[" * 3000 + "]" * 3000  # deeper than Python's recursion limit
    assert char_pointers(deep)[2999] == "/0" * 2999


def test_prefixes_and_prose() -> None:
    # A cut document: the open string belongs to its field; a cut key to its object.
    assert _owners('{"a": "unfinis') == {"": "{", "/a": '"a": "unfinis'}
    assert _owners('{"a": 1, "bc') == {"": '{, "bc', "/a": '"a": 1'}
    # Not JSON from some character on: the rest counts for the document.
    assert _owners("Sure! Here") == {"": "Sure! Here"}
    assert _owners('{"a": 1} and more') == {"": "{} and more", "/a": '"a": 1'}


def _step(offset: int, mass: float, allowed: int, token: int = 5) -> TokenStep:
    return TokenStep(token=token, text="", offset=offset, mass=mass, allowed=allowed)


def test_diagnose_summarizes_per_field_and_flags_low_mass() -> None:
    text = '{"answer": "yes", "why": "ok"}'
    why = text.index('"why"')
    steps = [
        _step(0, 0.5, 1),  # {"
        _step(2, 0.9, 1),  # answer":
        _step(text.index(' "yes'), 0.002, 3),  # the grammar allowed only unlikely tokens
        _step(text.index('",'), 0.8, 2),
        _step(why, 0.95, 1),
        _step(why + 7, 0.99, 40_000),
        _step(len(text) - 1, 0.7, 1),  # the closing brace
        _step(len(text), 0.6, 1),  # EOS: past the text, counts for the document
    ]
    diagnostics = diagnose(text, steps, threshold=0.01)
    assert [f.pointer for f in diagnostics.fields] == ["", "/answer", "/why"]
    root, answer, why_field = diagnostics.fields
    assert root == FieldDiagnostics("", 3, 0.5, pytest.approx(0.6), 3, False)
    assert answer.tokens == 3 and answer.forced == 1 and answer.min_mass == 0.002
    assert answer.mean_mass == pytest.approx((0.9 + 0.002 + 0.8) / 3)
    assert answer.flagged and not why_field.flagged
    assert diagnostics.flagged == [answer]
    assert diagnostics.field("/answer") is answer and diagnostics.field("/") is root
    assert diagnostics.field("/nope") is None
    assert diagnostics.tokens == 8 and diagnostics.forced == 5
    assert diagnostics.min_mass == 0.002
    assert [s.pointer for s in diagnostics.steps] == ["", "/answer", "/answer", "/answer",
                                                     "/why", "/why", "", ""]  # fmt: skip
    table = diagnostics.summary()
    assert table == str(diagnostics)
    lines = table.splitlines()
    assert lines[0].startswith("constraint diagnostics: 8 tokens, 5 forced by the grammar")
    assert "1 field(s) under 0.01" in lines[0] and "min 2.0e-03" not in lines[0]
    assert lines[2].split() == ["/", "3", "3", "0.500", "0.600"]
    assert lines[3].split()[:5] == ["/answer", "3", "1", "0.002", "0.567"]
    assert lines[3].endswith("<- the grammar overrode the model here")
    assert "overrode" not in lines[4]
    # The threshold decides the flags.
    stricter = diagnose(text, steps, threshold=0.7)
    assert [f.pointer for f in stricter.flagged] == ["", "/answer"]


def test_tiny_masses_are_shown_by_magnitude() -> None:
    diagnostics = diagnose('{"a": 1}', [_step(5, 3.2e-7, 2)])
    assert "3.2e-07" in diagnostics.summary()


def test_non_json_text_and_no_steps() -> None:
    steps = [_step(0, 0.3, 2), _step(1, 0.4, 2)]
    diagnostics = diagnose('{"a": 1}', steps, json_text=False)
    assert [f.pointer for f in diagnostics.fields] == [""]
    empty = diagnose("", [])
    assert isinstance(empty, ConstraintDiagnostics)
    assert empty.fields == () and empty.min_mass == 1.0 and empty.mean_mass == 1.0
    with pytest.raises(ValueError):
        diagnose("", [], threshold=1.5)


def test_every_character_of_a_real_document_has_a_field() -> None:
    document = {
        "vendor": "Acme",
        "line_items": [{"description": "x", "quantity": 1, "amount": 2.5}],
        "total": None,
    }
    text = json.dumps(document)
    pointers = set(char_pointers(text))
    assert pointers == {
        "", "/vendor", "/line_items", "/line_items/0", "/line_items/0/description",
        "/line_items/0/quantity", "/line_items/0/amount", "/total",
    }  # fmt: skip
