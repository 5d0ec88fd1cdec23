"""The grammar errors: a leaf below the grammar and its converters."""

from __future__ import annotations

__all__ = ["InvalidGrammar", "UnconvertibleGrammar"]


class InvalidGrammar(ValueError):
    """The grammar text is not a grammar (a syntax error, an undefined rule, no start rule)."""


class UnconvertibleGrammar(InvalidGrammar):
    """A conversion cannot express a construct of the grammar; `.construct` names it."""

    def __init__(self, message: str, *, construct: str) -> None:
        super().__init__(message)
        self.construct = construct
