"""A contract whose check a team tightens while its schema (and so the cache key) stays: what a
stored answer that today's checks refuse is tested with."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from pydantic import field_validator

from sdk import Contract


class Verdict(Contract):
    """A verdict whose allowed answers a team may tighten (the schema, and so the key, stays)."""

    answer: str
    strict: ClassVar[bool] = False

    @field_validator("answer")
    @classmethod
    def _allowed(cls, value: str) -> str:
        if cls.strict and value != "approve":
            raise ValueError("only 'approve' is allowed now")
        return value


@contextmanager
def tightened(strict: bool = True) -> Iterator[None]:
    """`Verdict` allows 'approve' alone inside the block (`strict`), as before after it, whatever
    the block raises."""
    Verdict.strict = strict
    try:
        yield
    finally:
        Verdict.strict = False
