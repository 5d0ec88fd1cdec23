"""The reader's shortcut for more text of an open string (issue 16, part 4): whatever takes it or
falls back to the full path, snapshots are the ones a single whole-text feed would give."""

from __future__ import annotations

import json

import pytest

from contracts import Decision
from sdk import InvalidJSON
from sdk import PartialReader

# Characters the shortcut must not take as plain: a quote, a backslash, control characters;
# and ones it may take only through its fallback (`str.isprintable` is False for them).
TRICKY = ['"', "\\", "\n", "\x1f", "\u00a0", "\u2028", "\u200b", "é", "😀"]


@pytest.mark.parametrize("char", TRICKY, ids=repr)
def test_open_string_chunks_give_the_same_snapshots_as_one_feed(char: str) -> None:
    reasoning = ("plain text " + char) * 20
    document = json.dumps({"reasoning": reasoning, "answer": "approve", "confidence": "high"})
    reader: PartialReader[Decision] = PartialReader(Decision)
    seen: list[str] = []
    for start in range(0, len(document), 5):
        partial = reader.feed(document[start : start + 5])
        if partial is not None and not partial.done:
            value = partial.value
            if isinstance(value, dict) and "reasoning" in value:
                seen.append(value["reasoning"])
    final = reader.finish()
    assert final.value == json.loads(document)
    # Every snapshot of the open string is a prefix of its decoded text, growing.
    assert seen and all(reasoning.startswith(text) for text in seen)
    assert [len(text) for text in seen] == sorted(len(text) for text in seen)
    assert reader.chars_scanned >= len(document) and reader.text == document


def test_a_control_character_in_an_open_string_is_still_an_error_after_the_shortcut() -> None:
    reader: PartialReader[Decision] = PartialReader(Decision)
    assert reader.feed('{"reasoning": "abc') is not None
    assert reader.feed("def") is not None  # the shortcut: more plain text
    with pytest.raises(InvalidJSON) as caught:
        reader.feed("gh\x01")
    assert caught.value.position == len('{"reasoning": "abcdefgh')
    with pytest.raises(InvalidJSON):
        reader.feed("more")  # the error stays, the shortcut does not bypass it


def test_every_shortcut_snapshot_is_new_and_keeps_its_own_prefix() -> None:
    reader: PartialReader[Decision] = PartialReader(Decision)
    reader.feed('{"reasoning": "')
    snapshots = [reader.feed(piece) for piece in ("one ", "two ", "three")]
    assert all(s is not None for s in snapshots)
    assert [s.value["reasoning"] for s in snapshots if s is not None] == [
        "one ", "one two ", "one two three"
    ]  # fmt: skip
    assert [s.text_length for s in snapshots if s is not None] == [19, 23, 28]
    assert reader.latest is snapshots[-1]
