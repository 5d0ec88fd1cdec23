"""structured-sdk: typed structured output from LLMs, honest about what a grammar can promise.

Declare a `Contract`, ask a provider for it through `StructuredClient`, and get back a `Result`
you can trust to the degree machines can check, or a typed error that says what went wrong.
"""

from sdk.contract import Contract, SourceQuote, WireEnum
from sdk.errors import (
    CheckFailed,
    ContentFiltered,
    ContractViolation,
    GrammarStuck,
    InvalidJSON,
    InvalidOutput,
    ProviderError,
    RefusedOutput,
    RetriesExhausted,
    SchemaViolation,
    SourceMissing,
    StructuredOutputError,
    TruncatedOutput,
    UnexpectedStop,
    UnfinishedOutput,
    Violation,
)
from sdk.parsing import Note, Parsed, parse
from sdk.schema import SchemaInfo
from sdk.stop_reason import StopReason

__version__ = "0.1.0"

__all__ = [
    "CheckFailed",
    "ContentFiltered",
    "Contract",
    "ContractViolation",
    "GrammarStuck",
    "InvalidJSON",
    "InvalidOutput",
    "Note",
    "Parsed",
    "ProviderError",
    "RefusedOutput",
    "RetriesExhausted",
    "SchemaInfo",
    "SchemaViolation",
    "SourceMissing",
    "SourceQuote",
    "StopReason",
    "StructuredOutputError",
    "TruncatedOutput",
    "UnexpectedStop",
    "UnfinishedOutput",
    "Violation",
    "WireEnum",
    "__version__",
    "parse",
]
