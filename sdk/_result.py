"""What a call returns: `Result`, the `Attempt`s it took, and token `Usage`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sdk.contract import Contract
from sdk.parsing.parser import Note
from sdk.schema.canonical import SchemaInfo
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.errors import StructuredOutputError

__all__ = ["Attempt", "Result", "Usage"]

C = TypeVar("C", bound=Contract)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens spent; `Result.usage` sums it over every attempt."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request and what came of it: the raw text, the stop reason, the error if any."""

    number: int
    text: str | None
    stop_reason: StopReason | None
    raw_stop_reason: str | None
    usage: Usage
    error: StructuredOutputError | None = None
    request_id: str | None = None
    max_tokens: int | None = None
    diagnostics: Any = None
    """Constraint diagnostics of this attempt's output, where the provider gives them."""


@dataclass(frozen=True)
class Result(Generic[C]):
    """A value that passed every check, and everything it was decided on."""

    value: C
    stop_reason: StopReason
    text: str
    notes: list[Note]
    usage: Usage
    attempts: list[Attempt]
    schema: SchemaInfo
    provider: str
    model: str | None
    raw_stop_reason: str | None = None
    request_id: str | None = None
    removed: list[Any] = field(default_factory=list)
    """What the provider's wire dialect removed from the schema (still enforced by the parser)."""
    diagnostics: Any = None
    """Constraint diagnostics, where the provider can give them (local models)."""
