"""The exception hierarchy.

Every error keeps what it was decided on: the raw output (`.text`, `None` only where there was
none), the normalized and raw stop reason, and where it applies the list of violations with
their JSON pointers. Nothing is lost on the way to the caller.

Errors are sealed values: every field is set by the constructor, and assigning one afterwards
is an `AttributeError` (`evolve(**changes)` builds the changed copy, through the constructor).
They pickle with every field (`pickle`, and so Ray and multiprocessing, carry them whole).

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
    │   ├── UnknownTool             (a call to a tool that was not offered)
    │   ├── MissingToolCall         (no call where `tool_choice` required one)
    │   ├── RunawayOutput           (a streamed reply stopped: whitespace or repetition ran away)
    │   └── CheckFailed
    │       └── SourceMissing
    ├── UnsupportedRequest          the provider cannot take this request (before sending)
    ├── GrammarStuck                local constrained decoding reached a dead state
    ├── ControlTokenInContent       a message spells a chat-template control token (also ValueError)
    ├── ProviderError               transport or API failure, wrapping the cause
    └── RetriesExhausted            every attempt failed; holds them all
        └── ProviderRetriesExhausted    ... the last with a ProviderError (also a ProviderError)
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any
from typing import ClassVar
from typing import Self
from typing import TypedDict
from typing import Unpack
from typing import cast

from sdk._values.declared import check_keywords
from sdk._values.records import Usage
from sdk._values.records import Violation
from sdk._values.records import shorten
from sdk.diagnostics import ConstraintDiagnostics
from sdk.stop_reason import StopReason

__all__ = [
    "Attempt",
    "CheckFailed",
    "ContentFiltered",
    "ContractViolation",
    "ControlTokenInContent",
    "ErrorFields",
    "GrammarStuck",
    "GrammarViolation",
    "InvalidJSON",
    "InvalidOutput",
    "LowConfidence",
    "MissingToolCall",
    "ProviderError",
    "ProviderErrorFields",
    "ProviderRetriesExhausted",
    "RefusedOutput",
    "RetriesExhausted",
    "RunawayOutput",
    "SchemaViolation",
    "SourceMissing",
    "StructuredOutputError",
    "TruncatedOutput",
    "UnexpectedStop",
    "UnfinishedOutput",
    "UnknownTool",
    "UnsupportedRequest",
    "Violation",
]

# How many violations an error message lists before it says "and N more".
_MESSAGE_VIOLATIONS = 5
# Longest line an error message quotes (a headline, a violation); `.text` keeps everything.
_MESSAGE_LINE = 400


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
    diagnostics: ConstraintDiagnostics | None = None
    """Constraint diagnostics of this attempt's output, where the provider gives them."""
    provider: str | None = None
    """The provider family this attempt went to (with `FallbackProvider`, which one answered)."""
    model: str | None = None
    """The model that answered, where known."""


class _Sealing(type):
    """The errors' metaclass: an error is sealed once its constructor has returned."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        error = super().__call__(*args, **kwargs)
        object.__setattr__(error, "_sealed", True)
        return error


class ErrorFields(TypedDict, total=False):
    """What every error keeps: keywords of every error's constructor, each optional."""

    text: str | None
    """The raw output the error was decided on (None where there was none)."""
    stop_reason: StopReason | None
    raw_stop_reason: str | None
    """The provider's own stop value, beside the normalized one."""
    partial: Any
    """Streaming: the last partial value seen before the error, if any (a call out of retries:
    its last attempt's)."""
    attempts: Sequence[Attempt]
    """Every request the call made, this one last (none for `parse` alone)."""
    usage: Usage | None
    """Their tokens (default: summed over `attempts`)."""


class StructuredOutputError(Exception, metaclass=_Sealing):
    """Base class: the SDK could not produce a trustworthy value.

    Raised by a client call, an error also carries `.attempts` (every request the call made,
    this one last) and `.usage` (their tokens, summed), so that nothing spent goes unaccounted;
    raised by `parse` alone, `.attempts` is empty and `.usage` is zero.
    """

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "text", "stop_reason", "raw_stop_reason", "partial", "attempts", "usage"
    )  # fmt: skip
    """The constructor's keyword arguments this class adds, each kept as the attribute of
    that name (what `evolve` and pickling rebuild an error from)."""

    def __init__(self, message: str, **fields: Unpack[ErrorFields]) -> None:
        check_keywords(fields, ErrorFields, f"{type(self).__name__}()")
        super().__init__(message)
        self.message = message
        self.text = fields.get("text")
        self.stop_reason = fields.get("stop_reason")
        self.raw_stop_reason = fields.get("raw_stop_reason")
        self.partial = fields.get("partial")
        self.attempts: list[Attempt] = list(fields.get("attempts", ()))
        usage = fields.get("usage")
        self.usage: Usage = usage if usage is not None else _total(self.attempts)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, stop_reason={self.stop_reason!r})"

    def __setattr__(self, name: str, value: Any) -> None:
        # Python's own slots (`__cause__`, `__notes__`, `__traceback__`) stay writable.
        if getattr(self, "_sealed", False) and not name.startswith("__"):
            raise AttributeError(
                f"{type(self).__name__} is sealed: its fields are set by its constructor "
                f"(build a changed copy with .evolve({name}=...))"
            )
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        # Deleting a field would lose what the error was decided on (its raw text, ...).
        if getattr(self, "_sealed", False) and not name.startswith("__"):
            raise AttributeError(
                f"{type(self).__name__} is sealed: its fields are set by its constructor "
                f"and stay (build a changed copy with .evolve({name}=...))"
            )
        super().__delattr__(name)

    def fields(self) -> dict[str, Any]:
        """Every field the constructor set, by keyword (`message` aside)."""
        return {name: getattr(self, name) for name in _fields_of(type(self))}

    def evolve(self, **changes: Any) -> Self:
        """A copy with `changes` (any field, `message` too), built by the constructor; the
        notes and the cause go with it."""
        message = changes.pop("message", self.message)
        copy = type(self)(message, **{**self.fields(), **changes})
        copy.__cause__ = self.__cause__
        copy.__traceback__ = self.__traceback__
        copy.__suppress_context__ = self.__suppress_context__
        for note in getattr(self, "__notes__", ()):
            copy.add_note(note)
        return copy

    def __reduce__(self) -> tuple[Any, ...]:
        notes = getattr(self, "__notes__", None)
        state = {"__notes__": list(notes)} if notes else None
        return (_rebuilt, (type(self), self.message, self.fields()), state)


def _rebuilt(cls: type[StructuredOutputError], message: str, fields: dict[str, Any]) -> Any:
    """An unpickled error: built again by its constructor."""
    return cls(message, **fields)


@cache
def _fields_of(cls: type) -> tuple[str, ...]:
    """The fields of an error class: those each class of its MRO adds, base first."""
    names: dict[str, None] = {}
    for base in reversed(cls.__mro__):
        names.update(dict.fromkeys(base.__dict__.get("_FIELDS", ())))
    return tuple(names)


# --- The output did not end cleanly: decided from the stop reason, before any JSON parsing ---


class UnfinishedOutput(StructuredOutputError):
    """The output ended for a reason other than a clean finish."""


class TruncatedOutput(UnfinishedOutput):
    """A token limit or the context window cut the output: at best a prefix of the document."""


class RefusedOutput(UnfinishedOutput):
    """The model declined to answer; `.refusal` holds what it said, `.category` why if given."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("refusal", "category")

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

    _FIELDS: ClassVar[tuple[str, ...]] = ("violations",)

    def __init__(
        self, message: str, *, violations: Sequence[Violation] = (), **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.violations: list[Violation] = list(violations)


class _Located(InvalidOutput):
    """An invalid output that goes wrong at one place: `.position`, `.line`, `.column`."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("position", "line", "column")

    def __init__(
        self, message: str, *, position: int, line: int, column: int, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.position = position
        self.line = line
        self.column = column


class InvalidJSON(_Located):
    """The output is not JSON; `.position`, `.line` and `.column` say where parsing stopped."""


class SchemaViolation(InvalidOutput):
    """The JSON does not match the contract's canonical schema (every error, with pointers)."""


class ContractViolation(InvalidOutput):
    """The JSON matched the schema but the typed contract rejected it."""


class GrammarViolation(_Located):
    """The text is not in the grammar's language; `.position` is where it leaves it."""


class UnknownTool(InvalidOutput):
    """A tool call named a tool that was not offered (or any tool under `tool_choice="none"`)."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("tool", "call_id")

    def __init__(
        self, message: str, *, tool: str, call_id: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.tool = tool
        self.call_id = call_id


class MissingToolCall(InvalidOutput):
    """`tool_choice` required a call (any, or a named tool) and the reply made none."""


class RunawayOutput(InvalidOutput):
    """A streamed reply the SDK stopped for runaway whitespace or repetition; `.text` is what it
    had written, `.tokens` what it had spent (at least), `.piece` the repeated text."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("tokens", "piece", "start")

    def __init__(self, message: str, *, tokens: int, piece: str, start: int, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.tokens = tokens
        """Output tokens the reply had spent when it was stopped (at least one per piece)."""
        self.piece = piece
        """The text repeated (a whitespace character, or a list item and its comma)."""
        self.start = start
        """The character of `.text` where the run begins."""


class CheckFailed(InvalidOutput):
    """A semantic check failed: a quote or `Verbatim` value not in the source, or a cross-field
    check."""


class SourceMissing(CheckFailed, ValueError):
    """The contract has `SourceQuote`/`Verbatim` values but no source was given to check them."""


class LowConfidence(StructuredOutputError):
    """A value's confidence was under the call's `min_confidence` where the contract cannot
    hold `null` (a nullable one abstains instead); not retried: the same request would be as
    unsure. `.confidence` has the low values' probabilities by pointer, `.value` the parsed
    value, `.text` the reply."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("confidence", "value")

    def __init__(
        self, message: str, *, confidence: Mapping[str, float], value: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.confidence = dict(confidence)
        self.value = value


# --- The request itself: decided before anything is sent ---


class UnsupportedRequest(StructuredOutputError, ValueError):
    """The provider cannot take this request (a grammar, a reasoning mode); `.supported` says
    what it can."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("supported",)

    def __init__(self, message: str, *, supported: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.supported = list(supported)


class ControlTokenInContent(StructuredOutputError, ValueError):
    """A message spells a control token its server would parse: raised before anything is sent."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("token", "where", "position", "line", "column")

    def __init__(
        self,
        message: str,
        *,
        token: str,
        where: str,
        position: int,
        line: int = 1,
        column: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.token = token
        """The control-token string found, as it appears in the content."""
        self.where = where
        """Which content holds it: `"system"` or `"messages[i]"` (the i-th message)."""
        self.position = position
        """Its character offset in that content."""
        self.line = line
        """Its line in that content (1 first; `sdk._values.position` says what ends a line)."""
        self.column = column if column is not None else position + 1
        """Its column on that line, in characters (1 first)."""


# --- Generation, transport and retries ---


class GrammarStuck(StructuredOutputError):
    """Constrained decoding reached a state where the grammar allows no token."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("diagnostics",)

    def __init__(
        self, message: str, *, diagnostics: ConstraintDiagnostics | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        # `.text` is the output up to the dead end; `.diagnostics` (local providers) the
        # `ConstraintDiagnostics` of the tokens generated before it, each with its token id.
        self.diagnostics = diagnostics


class ProviderErrorFields(ErrorFields, total=False):
    """What a provider's failed call keeps beside `ErrorFields`: `ProviderError`'s keywords."""

    status_code: int | None
    request_id: str | None
    retry_after: float | None
    provider: str | None
    """The provider family (`Result.provider`'s name)."""
    body: str | None
    """The raw reply body, bounded and with secrets redacted, when the reply was there but
    unusable."""
    transient: bool | None
    """Whether another try can help; None leaves it to the status code (none, or 408, 429,
    5xx: yes)."""


class ProviderError(StructuredOutputError):
    """The provider call failed (transport or API error); `.__cause__` is the original."""

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "status_code", "request_id", "retry_after", "provider", "body", "transient"
    )  # fmt: skip

    def __init__(self, message: str, **fields: Unpack[ProviderErrorFields]) -> None:
        check_keywords(fields, ProviderErrorFields, f"{type(self).__name__}()")
        self.status_code = fields.pop("status_code", None)
        self.request_id = fields.pop("request_id", None)
        self.retry_after = fields.pop("retry_after", None)
        self.provider = fields.pop("provider", None)
        self.body = fields.pop("body", None)
        self.transient = fields.pop("transient", None)
        # What is left is the base's: the provider's own keys are popped above.
        super().__init__(message, **cast(ErrorFields, fields))


class RetriesExhausted(StructuredOutputError):
    """Every attempt failed; `.attempts` holds each one with its text, error and usage."""

    def __init__(self, message: str, *, attempts: Sequence[Attempt], **kwargs: Any) -> None:
        # The message names what was wrong with the last attempt, pointer by pointer (bounded),
        # so a log line says why the call failed, not only which error class ended it.
        last = attempts[-1].error if attempts else None
        violations: Sequence[Violation] = getattr(last, "violations", ())
        if violations and not any(str(v) in message for v in violations):
            message = summarize(message, violations)
        super().__init__(message, attempts=attempts, **kwargs)

    @property
    def last_error(self) -> StructuredOutputError | None:
        """The error of the final attempt (`None` only if no attempt was made).

        The same object as `attempts[-1].error`: its `.text`, `.violations`, stop reason and
        `.partial` are the last reply's; `RetriesExhausted`'s own `.text`, `.stop_reason` and
        `.partial` repeat them.
        """
        return self.attempts[-1].error if self.attempts else None


class ProviderRetriesExhausted(RetriesExhausted, ProviderError):
    """Transport or API errors outlasted the retries: catch it as either parent."""

    def __init__(
        self,
        message: str,
        *,
        attempts: Sequence[Attempt],
        last: ProviderError | None = None,
        **kwargs: Any,
    ) -> None:
        # The last error's transport fields (status, request id, ...), its text and its
        # partial value (what a stream cut midway had shown), unless given.
        own = (
            {}
            if last is None
            else {name: getattr(last, name) for name in (*ProviderError._FIELDS, "text", "partial")}
        )
        super().__init__(message, attempts=attempts, **{**own, **kwargs})


def summarize(headline: str, violations: Sequence[Violation]) -> str:
    """An error message: the headline and the first few violations, each line bounded."""
    lines = [shorten(line, _MESSAGE_LINE) for line in headline.splitlines() or [""]]
    lines.extend(f"  {violation}" for violation in violations[:_MESSAGE_VIOLATIONS])
    if len(violations) > _MESSAGE_VIOLATIONS:
        lines.append(f"  ... and {len(violations) - _MESSAGE_VIOLATIONS} more")
    return "\n".join(lines)


def _total(attempts: Sequence[Attempt]) -> Usage:
    total = Usage()
    for attempt in attempts:
        total = total + attempt.usage
    return total
