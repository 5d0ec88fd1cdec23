"""Tool calls as values: `Tool` (arguments are a `Contract`), `ToolCall`, `ToolResult` and
`PartialToolCall` (a streamed snapshot); `ToolCalls`, the result, is in `sdk._result`.

The SDK returns calls; the application runs them and sends the results back in the next
messages (`ToolCalls.message()`, `ToolCall.result(...)`). It is not an agent loop.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Literal

from sdk.schema.canonical import schema_info
from sdk.schema.dialects import Dialect
from sdk.schema.dialects import WireSchema
from sdk.schema.dialects import to_wire

if TYPE_CHECKING:
    from sdk.contract import Contract
    from sdk.parsing.incremental import Partial

__all__ = [
    "PartialToolCall",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolOffer",
    "ToolResult",
    "arguments_object",
]

# What every provider accepts as a function name (OpenAI's pattern; Anthropic's is the same).
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


class Tool:
    """A tool the model may call; its arguments are a `Contract`.

    `Tool(GetWeather)` is named after the contract (`GetWeather`) and described by its
    docstring; pass `name=` / `description=` to say otherwise. The arguments' schema goes to
    each provider strict, in its dialect; what a dialect removes is reported
    (`ToolCalls.removed`) and still checked by the parser.
    """

    __slots__ = ("arguments", "description", "name")

    def __init__(
        self,
        arguments: type[Contract],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        from sdk.contract import require_contract

        require_contract(arguments, "Tool()")
        self.arguments = arguments
        chosen = name if name is not None else _NAME_CHARS.sub("_", schema_info(arguments).name)
        if not _TOOL_NAME.match(chosen):
            raise ValueError(
                f"tool name {chosen!r} is not 1 to 64 characters of letters, digits, _ and -"
            )
        self.name: str = chosen
        doc = arguments.__dict__.get("__doc__")
        self.description: str = (
            description
            if description is not None
            else (inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else "")
        )

    def __repr__(self) -> str:
        return f"Tool({self.arguments.__name__}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tool) and (
            self.arguments,
            self.name,
            self.description,
        ) == (other.arguments, other.name, other.description)

    def __hash__(self) -> int:
        return hash((self.arguments, self.name))

    def wire(self, dialect: Dialect) -> WireSchema:
        """The arguments' schema in a provider's dialect (cached per contract and dialect)."""
        return to_wire(self.arguments, dialect)

    def described(self, dialect: Dialect) -> str:
        """The description sent: the tool's, else the wire schema's (which carries the hints
        of removed constraints), else a generic line."""
        return (
            self.description
            or str(self.wire(dialect).schema.get("description") or "")
            or f"Call {self.name}."
        )


ToolChoice = Literal["auto", "required", "none"] | Tool
"""Whether the model may call (`"auto"`), must call (`"required"`, or this one `Tool`), or
must not call (`"none"`)."""


@dataclass(frozen=True, slots=True)
class ToolOffer:
    """The tools a request offers: which, whether the model must call (`choice`), and whether
    it may make several calls in one turn (`parallel`; `None`: the provider's default)."""

    tools: tuple[Tool, ...]
    choice: ToolChoice = "auto"
    parallel: bool | None = None
    kind: ClassVar[Literal["tools"]] = "tools"

    def offered(self) -> tuple[Tool, ...]:
        """The tools the model may call under `choice`: all of them, the one named, or none
        (`"none"`)."""
        if self.choice == "none":
            return ()
        return (self.choice,) if isinstance(self.choice, Tool) else self.tools


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made: its id, the tool's name, the raw arguments text, and (in a
    `ToolCalls` result) the arguments parsed into the tool's contract."""

    id: str
    tool: str
    text: str
    value: Any = None

    def result(self, content: str, *, is_error: bool = False) -> ToolResult:
        """What running this call gave, to send back in the next user message."""
        return ToolResult(self.id, content, is_error=is_error, tool=self.tool)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of running one tool call, sent back in a user message (`Message.tool_results`).

    `is_error` marks a failed run (Anthropic's `is_error`; said in the text elsewhere)."""

    call_id: str
    content: str
    is_error: bool = False
    tool: str | None = None
    """The tool's name (Ollama matches results by name, not id)."""


@dataclass(frozen=True, slots=True)
class PartialToolCall:
    """A snapshot of one tool call as it streams: `index` keeps parallel calls apart; `value`
    is the `Partial` of its arguments so far (never validated; `None` until the tool is known
    or when the arguments are not JSON); `done` once its arguments are complete; `attempt` says
    which attempt of the call it belongs to (1 first: after a retry the calls start again)."""

    index: int
    id: str | None
    tool: str | None
    text: str
    value: Partial[Any] | None
    done: bool = False
    attempt: int = 1


def arguments_object(text: str) -> dict[str, Any]:
    """A call's arguments as a JSON object, for protocols that send them as one (Anthropic's
    `input`, Ollama's `arguments`); `{}` when the text is not an object (an invalid call sent
    back with its error)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
