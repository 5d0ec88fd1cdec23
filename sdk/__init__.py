"""structured-sdk: typed structured output from LLMs, honest about what a grammar can promise.

Declare a `Contract`, ask a provider for it through `StructuredClient`, and get back a `Result`
you can trust to the degree machines can check, or a typed error that says what went wrong.
"""

from sdk._content import PDF, Image, Text
from sdk._result import Attempt, Result, ToolCalls, Usage
from sdk._tools import PartialToolCall, Tool, ToolCall, ToolChoice, ToolResult
from sdk.client import (
    AsyncStructuredClient,
    Backoff,
    CallOptions,
    ClientOptions,
    MaxTokensRamp,
    StructuredClient,
)
from sdk.contract import Contract, SourceQuote, Verbatim, WireEnum, WireNameError
from sdk.diagnostics import ConstraintDiagnostics, FieldDiagnostics, TokenStep
from sdk.engine.kinds import TextSnapshot
from sdk.errors import (
    CheckFailed,
    ContentFiltered,
    ContractViolation,
    ControlTokenInContent,
    GrammarStuck,
    GrammarViolation,
    InvalidJSON,
    InvalidOutput,
    MissingToolCall,
    ProviderError,
    ProviderRetriesExhausted,
    RefusedOutput,
    RetriesExhausted,
    SchemaViolation,
    SourceMissing,
    StructuredOutputError,
    TruncatedOutput,
    UnexpectedStop,
    UnfinishedOutput,
    UnknownTool,
    UnsupportedRequest,
    Violation,
)
from sdk.grammar import Grammar, parse_grammar
from sdk.parsing import Note, Parsed, parse
from sdk.parsing.incremental import Partial, PartialReader
from sdk.providers._base import Message
from sdk.schema import SchemaInfo
from sdk.stop_reason import StopReason

__version__ = "0.1.0"

__all__ = [
    "PDF",
    "AsyncStructuredClient",
    "Attempt",
    "Backoff",
    "CallOptions",
    "CheckFailed",
    "ClientOptions",
    "ConstraintDiagnostics",
    "ContentFiltered",
    "Contract",
    "ContractViolation",
    "ControlTokenInContent",
    "FieldDiagnostics",
    "Grammar",
    "GrammarStuck",
    "GrammarViolation",
    "Image",
    "InvalidJSON",
    "InvalidOutput",
    "MaxTokensRamp",
    "Message",
    "MissingToolCall",
    "Note",
    "Parsed",
    "Partial",
    "PartialReader",
    "PartialToolCall",
    "ProviderError",
    "ProviderRetriesExhausted",
    "RefusedOutput",
    "Result",
    "RetriesExhausted",
    "SchemaInfo",
    "SchemaViolation",
    "SourceMissing",
    "SourceQuote",
    "StopReason",
    "StructuredClient",
    "StructuredOutputError",
    "Text",
    "TextSnapshot",
    "TokenStep",
    "Tool",
    "ToolCall",
    "ToolCalls",
    "ToolChoice",
    "ToolResult",
    "TruncatedOutput",
    "UnexpectedStop",
    "UnfinishedOutput",
    "UnknownTool",
    "UnsupportedRequest",
    "Usage",
    "Verbatim",
    "Violation",
    "WireEnum",
    "WireNameError",
    "__version__",
    "parse",
    "parse_grammar",
]
