"""Output kinds: what a call asks for and how a reply is judged (see `_kind.OutputKind`).

`Document` (a contract, a top-level list or union), `GrammarOutput` (a grammar's sentence),
`Tools` (tool calls), and `TwoPhase`, which wraps any of them. A new kind implements the
protocol; the clients and the attempts machine need no change.
"""

from sdk.engine.kinds._kind import (
    Accepted,
    Ask,
    Ending,
    NextPhase,
    OutputKind,
    Parsing,
    Shared,
    StreamView,
)
from sdk.engine.kinds.document import Document
from sdk.engine.kinds.grammar import GrammarOutput, TextSnapshot
from sdk.engine.kinds.tools import ToolCallReader, Tools, check_tools
from sdk.engine.kinds.two_phase import TwoPhase

__all__ = [
    "Accepted",
    "Ask",
    "Document",
    "Ending",
    "GrammarOutput",
    "NextPhase",
    "OutputKind",
    "Parsing",
    "Shared",
    "StreamView",
    "TextSnapshot",
    "ToolCallReader",
    "Tools",
    "TwoPhase",
    "check_tools",
]
