"""structured-sdk: typed structured output from LLMs, honest about what a grammar can promise.

Declare a `Contract`, ask a provider for it through `StructuredClient`, and get back a `Result`
you can trust to the degree machines can check, or a typed error that says what went wrong.
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_names
from sdk._lazy import listed

if TYPE_CHECKING:
    from sdk._result import Attempt
    from sdk._result import Result
    from sdk._result import ToolCalls
    from sdk._result import Usage
    from sdk._tools import PartialToolCall
    from sdk._tools import Tool
    from sdk._tools import ToolCall
    from sdk._tools import ToolChoice
    from sdk._tools import ToolResult
    from sdk._values.content import PDF
    from sdk._values.content import Image
    from sdk._values.content import Text
    from sdk.client import AsyncStructuredClient
    from sdk.client import Backoff
    from sdk.client import CallOptions
    from sdk.client import ClientOptions
    from sdk.client import MaxTokensRamp
    from sdk.client import StructuredClient
    from sdk.contract import Contract
    from sdk.contract import SourceQuote
    from sdk.contract import Verbatim
    from sdk.contract import WireEnum
    from sdk.contract import WireNameError
    from sdk.diagnostics import ConstraintDiagnostics
    from sdk.diagnostics import FieldDiagnostics
    from sdk.diagnostics import TokenStep
    from sdk.engine.kinds import TextSnapshot
    from sdk.errors import CheckFailed
    from sdk.errors import ContentFiltered
    from sdk.errors import ContractViolation
    from sdk.errors import ControlTokenInContent
    from sdk.errors import GrammarStuck
    from sdk.errors import GrammarViolation
    from sdk.errors import InvalidJSON
    from sdk.errors import InvalidOutput
    from sdk.errors import LowConfidence
    from sdk.errors import MissingToolCall
    from sdk.errors import ProviderError
    from sdk.errors import ProviderRetriesExhausted
    from sdk.errors import RefusedOutput
    from sdk.errors import RetriesExhausted
    from sdk.errors import RunawayOutput
    from sdk.errors import SchemaViolation
    from sdk.errors import SourceMissing
    from sdk.errors import StructuredOutputError
    from sdk.errors import TruncatedOutput
    from sdk.errors import UnexpectedStop
    from sdk.errors import UnfinishedOutput
    from sdk.errors import UnknownTool
    from sdk.errors import UnsupportedRequest
    from sdk.errors import Violation
    from sdk.grammar import Grammar
    from sdk.grammar._recognize import parse_grammar
    from sdk.parsing import Note
    from sdk.parsing import Parsed
    from sdk.parsing import parse
    from sdk.parsing.incremental import Partial
    from sdk.parsing.incremental import PartialReader
    from sdk.parsing.runaway import RunawayBound
    from sdk.prompt import Prompt
    from sdk.prompt import PromptInfo
    from sdk.prompt import RenderedPrompt
    from sdk.providers._base import Message
    from sdk.schema import SchemaInfo
    from sdk.stop_reason import StopReason

# Every public name by the module that defines it, loaded on first use (PEP 562): `import sdk`
# costs next to nothing, and a program pays for what it touches (the client and the engine for
# `StructuredClient`, the parser for `parse`, the grammar recognizer and lark for
# `parse_grammar`). The names above are the same, for type checkers.
_PUBLIC = {
    "sdk._values.content": (
        "PDF",
        "Image",
        "Text",
    ),
    "sdk._result": (
        "Attempt",
        "Result",
        "ToolCalls",
        "Usage",
    ),
    "sdk._tools": (
        "PartialToolCall",
        "Tool",
        "ToolCall",
        "ToolChoice",
        "ToolResult",
    ),
    "sdk.client": (
        "AsyncStructuredClient",
        "Backoff",
        "CallOptions",
        "ClientOptions",
        "MaxTokensRamp",
        "StructuredClient",
    ),
    "sdk.contract": (
        "Contract",
        "SourceQuote",
        "Verbatim",
        "WireEnum",
        "WireNameError",
    ),
    "sdk.diagnostics": (
        "ConstraintDiagnostics",
        "FieldDiagnostics",
        "TokenStep",
    ),
    "sdk.engine.kinds": ("TextSnapshot",),
    "sdk.errors": (
        "CheckFailed",
        "ContentFiltered",
        "ContractViolation",
        "ControlTokenInContent",
        "GrammarStuck",
        "GrammarViolation",
        "InvalidJSON",
        "InvalidOutput",
        "LowConfidence",
        "MissingToolCall",
        "ProviderError",
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
    ),
    "sdk.grammar": ("Grammar",),
    "sdk.parsing": (
        "Note",
        "Parsed",
        "parse",
    ),
    "sdk.parsing.incremental": (
        "Partial",
        "PartialReader",
    ),
    "sdk.parsing.runaway": ("RunawayBound",),
    "sdk.prompt": (
        "Prompt",
        "PromptInfo",
        "RenderedPrompt",
    ),
    "sdk.providers._base": ("Message",),
    "sdk.schema": ("SchemaInfo",),
    "sdk.stop_reason": ("StopReason",),
    "sdk.grammar._recognize": ("parse_grammar",),
}

__getattr__ = lazy_names(__name__, {n: module for module, names in _PUBLIC.items() for n in names})

__dir__ = listed(globals())


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
    "LowConfidence",
    "MaxTokensRamp",
    "Message",
    "MissingToolCall",
    "Note",
    "Parsed",
    "Partial",
    "PartialReader",
    "PartialToolCall",
    "Prompt",
    "PromptInfo",
    "ProviderError",
    "ProviderRetriesExhausted",
    "RefusedOutput",
    "RenderedPrompt",
    "Result",
    "RetriesExhausted",
    "RunawayBound",
    "RunawayOutput",
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
