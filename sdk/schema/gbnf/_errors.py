"""The refusal: every keyword the converter cannot express, with its JSON pointer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UnsupportedKeyword:
    """One keyword the converter cannot express: where it is, which, and why."""

    pointer: str
    keyword: str
    reason: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.reason}"


class UnsupportedSchema(ValueError):
    """The schema uses keywords (or values) that no GBNF grammar from this converter expresses.

    `problems` lists every one of them, each with the JSON pointer of the keyword, so that a
    schema can be fixed in one pass; nothing is ever silently dropped.
    """

    def __init__(self, problems: Sequence[UnsupportedKeyword]) -> None:
        self.problems: tuple[UnsupportedKeyword, ...] = tuple(problems)
        listed = "\n".join(f"  {problem}" for problem in self.problems)
        super().__init__(f"schema cannot be expressed exactly as a GBNF grammar:\n{listed}")

    def __reduce__(self) -> tuple[type[UnsupportedSchema], tuple[tuple[UnsupportedKeyword, ...]]]:
        return type(self), (self.problems,)
