"""The exception hierarchy.

Every error keeps what it was decided on: the raw output (`.text`, `None` only where there was
none), the normalized and raw stop reason, and where it applies the list of violations with
their JSON pointers. Nothing is lost on the way to the caller.

    StructuredOutputError
    ├── UnfinishedOutput            the output did not end cleanly (decided before any parsing)
    │   ├── TruncatedOutput
    │   ├── RefusedOutput
    │   │   └── ContentFiltered
    │   └── UnexpectedStop
    ├── InvalidOutput               the output ended but is not a valid value (retryable)
    │   ├── InvalidJSON
    │   ├── SchemaViolation
    │   ├── ContractViolation
    │   ├── GrammarViolation        (text outside a grammar's language)
    │   └── CheckFailed
    │       └── SourceMissing
    ├── GrammarStuck                local constrained decoding reached a dead state
    ├── ProviderError               transport or API failure, wrapping the cause
    └── RetriesExhausted            every attempt failed; holds them all
        └── ProviderRetriesExhausted    ... the last with a ProviderError (also a ProviderError)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk._result import Attempt

__all__ = [
    "CheckFailed",
    "ContentFiltered",
    "ContractViolation",
    "GrammarStuck",
    "GrammarViolation",
    "InvalidJSON",
    "InvalidOutput",
    "ProviderError",
    "ProviderRetriesExhausted",
    "RefusedOutput",
    "RetriesExhausted",
    "SchemaViolation",
    "SourceMissing",
    "StructuredOutputError",
    "TruncatedOutput",
    "UnexpectedStop",
    "UnfinishedOutput",
    "Violation",
]

# How many violations an error message lists before it says "and N more".
_MESSAGE_VIOLATIONS = 5


@dataclass(frozen=True, slots=True)
class Violation:
    """One thing wrong with a value: where (JSON pointer), what, and which rule said so."""

    pointer: str
    message: str
    keyword: str | None = None

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message}"


class StructuredOutputError(Exception):
    """Base class: the SDK could not produce a trustworthy value."""

    def __init__(
        self,
        message: str,
        *,
        text: str | None = None,
        stop_reason: StopReason | None = None,
        raw_stop_reason: str | None = None,
        partial: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.text = text
        self.stop_reason = stop_reason
        self.raw_stop_reason = raw_stop_reason
        # Streaming: the last partial value seen before the error, if any.
        self.partial = partial

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, stop_reason={self.stop_reason!r})"


# --- The output did not end cleanly: decided from the stop reason, before any JSON parsing ---


class UnfinishedOutput(StructuredOutputError):
    """The output ended for a reason other than a clean finish."""


class TruncatedOutput(UnfinishedOutput):
    """A token limit or the context window cut the output: at best a prefix of the document."""


class RefusedOutput(UnfinishedOutput):
    """The model declined to answer; `.refusal` holds what it said, `.category` why if given."""

    def __init__(
        self,
        message: str,
        *,
        refusal: str | None = None,
        category: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.refusal = refusal
        self.category = category


class ContentFiltered(RefusedOutput):
    """The provider's content filter stopped the output."""


class UnexpectedStop(UnfinishedOutput):
    """A stop reason this call does not accept as an end (pause, tool use, unknown values)."""


# --- The output ended, but is not a valid value: retryable with feedback ---


class InvalidOutput(StructuredOutputError):
    """The output finished but does not satisfy the contract; `.violations` says where."""

    def __init__(
        self, message: str, *, violations: Sequence[Violation] = (), **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.violations: list[Violation] = list(violations)


class InvalidJSON(InvalidOutput):
    """The output is not JSON; `.position`, `.line` and `.column` say where parsing stopped."""

    def __init__(
        self, message: str, *, position: int, line: int, column: int, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.position = position
        self.line = line
        self.column = column


class SchemaViolation(InvalidOutput):
    """The JSON does not match the contract's canonical schema (every error, with pointers)."""


class ContractViolation(InvalidOutput):
    """The JSON matched the schema but the typed contract rejected it."""


class GrammarViolation(InvalidOutput):
    """The text is not in the grammar's language; `.position` is where it leaves it."""

    def __init__(
        self, message: str, *, position: int, line: int, column: int, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.position = position
        self.line = line
        self.column = column


class CheckFailed(InvalidOutput):
    """A semantic check failed: a source quote not in the source, or a cross-field check."""


class SourceMissing(CheckFailed, ValueError):
    """The contract has source quotes but no source was given to verify them against."""


# --- Generation, transport and retries ---


class GrammarStuck(StructuredOutputError):
    """Constrained decoding reached a state where the grammar allows no token."""

    def __init__(self, message: str, *, diagnostics: Any = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        # `.text` is the output up to the dead end; `.diagnostics` (local providers) the
        # `ConstraintDiagnostics` of the tokens generated before it, each with its token id.
        self.diagnostics = diagnostics


class ProviderError(StructuredOutputError):
    """The provider call failed (transport or API error); `.__cause__` is the original."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.status_code = status_code
        self.request_id = request_id
        self.retry_after = retry_after


class RetriesExhausted(StructuredOutputError):
    """Every attempt failed; `.attempts` holds each one with its text, error and usage."""

    def __init__(self, message: str, *, attempts: Sequence[Attempt], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.attempts: list[Attempt] = list(attempts)

    @property
    def last_error(self) -> StructuredOutputError | None:
        """The error of the final attempt."""
        return self.attempts[-1].error if self.attempts else None


class ProviderRetriesExhausted(RetriesExhausted, ProviderError):
    """Transport or API errors outlasted the retries: catch it as either parent."""

    def __init__(self, message: str, *, attempts: Sequence[Attempt], last: ProviderError) -> None:
        RetriesExhausted.__init__(self, message, attempts=attempts)
        self.status_code = last.status_code
        self.request_id = last.request_id
        self.retry_after = last.retry_after


def summarize(headline: str, violations: Sequence[Violation]) -> str:
    """An error message: the headline and the first few violations."""
    lines = [headline]
    lines.extend(f"  {violation}" for violation in violations[:_MESSAGE_VIOLATIONS])
    if len(violations) > _MESSAGE_VIOLATIONS:
        lines.append(f"  ... and {len(violations) - _MESSAGE_VIOLATIONS} more")
    return "\n".join(lines)
