"""Where in a text something went wrong: one rule for every error that points into text.

A leaf (no imports from the SDK): the parser's `InvalidJSON`, the grammar's `GrammarViolation`,
the grammar and regex readers' syntax errors and the readers of the SDK's own files all say
where with a `TextPosition`, so two errors about the same place never disagree.

- The position is in **characters** (Unicode code points of the decoded text), never bytes: for
  bytes that are not UTF-8 it is the character where the first undecodable byte stands (each
  bad sequence shows as one U+FFFD in the decoded text), and the byte offset is said beside it.
- **Lines** end at `\\n`, `\\r\\n` or a lone `\\r` (universal newlines, as editors show them);
  the `\\n` of a `\\r\\n` belongs to the line it ends. Line and column count from 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["TextPosition", "decoding_problem"]


@dataclass(frozen=True, slots=True)
class TextPosition:
    """A place in a text: `index` (characters before it), `line` and `column` (1 first)."""

    index: int
    line: int
    column: int
    byte: int | None = None
    """The byte offset, where the text arrived as bytes that are not UTF-8 (`None` otherwise)."""

    @classmethod
    def of(cls, text: str, index: int) -> TextPosition:
        """The position of `text[index]` (`index` clamped to the text; its end is a place)."""
        index = min(max(index, 0), len(text))
        breaks = text.count("\n", 0, index) + text.count("\r", 0, index)
        breaks -= text.count("\r\n", 0, index)
        end = index
        if 0 < index < len(text) and text[index - 1] == "\r" and text[index] == "\n":
            breaks -= 1  # the `\n` of a `\r\n`: on the line its `\r` ends
            end = index - 1
        start = max(text.rfind("\n", 0, end), text.rfind("\r", 0, end)) + 1
        return cls(index, breaks + 1, index - start + 1)

    @classmethod
    def undecodable(cls, error: UnicodeDecodeError) -> TextPosition:
        """Where the first byte `error` could not decode stands, in the text decoded with
        replacement characters (the bytes before it decode cleanly; `json` also reads UTF-16
        and UTF-32, hence the error's own encoding)."""
        data = bytes(error.object)
        valid = data[: error.start].decode(error.encoding, "replace")
        return cls(*_fields(cls.of(valid, len(valid))), byte=error.start)

    @classmethod
    def of_json_error(cls, error: json.JSONDecodeError) -> TextPosition:
        """Where `json` stopped (its own line and column count `\\n` alone)."""
        return cls.of(error.doc, error.pos)

    def __str__(self) -> str:
        """`line 2 column 7 (char 12)`: the place first (how a syntax error reads)."""
        return f"line {self.line} column {self.column} (char {self.index}{self._byte()})"

    def by_index(self, word: str = "char") -> str:
        """`char 12 (line 2, column 7)`: the index first (how a place in a value reads)."""
        return f"{word} {self.index} (line {self.line}, column {self.column}{self._byte()})"

    def _byte(self) -> str:
        return f", byte {self.byte}" if self.byte is not None else ""


def decoding_problem(error: ValueError) -> str:
    """What a JSON reader's error says, with where in characters: a `json.JSONDecodeError`
    (its message and place) or a `UnicodeDecodeError` (the file is not text); any other error
    as it is."""
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at {TextPosition.of_json_error(error)}"
    if isinstance(error, UnicodeDecodeError):
        return f"not {error.encoding} text ({error.reason}) at {TextPosition.undecodable(error)}"
    return str(error)


def _fields(position: TextPosition) -> tuple[int, int, int]:
    return position.index, position.line, position.column
