"""Output kinds: what a call asks for and how a reply is judged (see `_kind.OutputKind`).

`Document` (a contract, a top-level list or union), `GrammarOutput` (a grammar's sentence),
`Tools` (tool calls), and `TwoPhase`, which wraps any of them. A new kind implements the
protocol; the clients and the attempts machine need no change.
"""

from sdk.engine.kinds._kind import Accepted
from sdk.engine.kinds._kind import Ask
from sdk.engine.kinds._kind import Ending
from sdk.engine.kinds._kind import NextPhase
from sdk.engine.kinds._kind import OutputKind
from sdk.engine.kinds._kind import Parsing
from sdk.engine.kinds._kind import Shared
from sdk.engine.kinds._kind import StreamView
from sdk.engine.kinds.document import Document
from sdk.engine.kinds.grammar import GrammarOutput
from sdk.engine.kinds.grammar import TextSnapshot
from sdk.engine.kinds.tools import ToolCallReader
from sdk.engine.kinds.tools import Tools
from sdk.engine.kinds.tools import check_tools
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
