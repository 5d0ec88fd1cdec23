"""`Message`: one conversation turn, the shape every provider's codec translates from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sdk._tools import ToolCall
from sdk._tools import ToolResult
from sdk._values.content import Content
from sdk._values.content import Part
from sdk._values.content import Text
from sdk._values.content import content_text
from sdk._values.content import parts_of

__all__ = ["Message"]


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation turn: text, or parts (`sdk.Image`, `sdk.PDF`, text).

    An assistant turn may carry the tool calls it made (`tool_calls`), and a user turn the
    results of running them (`tool_results`, sent before its `content`, which may be empty).
    """

    role: Literal["user", "assistant"]
    content: Content
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    static_prefix: int = 0
    """How many leading characters of the turn's first text are the same on every call (the
    literal start of a prompt template): the part a provider's prompt cache should hold."""

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(
                f"a message's role is 'user' or 'assistant', not {self.role!r} (pass the system "
                "prompt as system=...)"
            )
        # One shape whatever was passed: a string, or a tuple of parts (a list of strings and
        # parts is read as parts, so `["Total?", image]` means what it says on every provider).
        # A field already in its shape (text, no tool calls: most turns) is left as it is.
        if type(self.content) is not str:
            object.__setattr__(self, "content", parts_of(self.content))
        if type(self.tool_calls) is not tuple:
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if type(self.tool_results) is not tuple:
            object.__setattr__(self, "tool_results", tuple(self.tool_results))

    @property
    def text(self) -> str:
        """The turn's text (its text parts joined; images and documents left out)."""
        return content_text(self.content)

    @property
    def parts(self) -> tuple[Part, ...]:
        """The turn's content as parts (plain text is one `Text` part)."""
        return (Text(self.content),) if isinstance(self.content, str) else self.content
