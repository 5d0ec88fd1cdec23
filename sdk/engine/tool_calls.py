"""The retry engine for tool calls: `Call`'s state machine with tools as the output kind.

A reply is decided the way a document is: the stop reason first (a cut or refused reply is
`TruncatedOutput` / `RefusedOutput`, whatever calls it holds), then each call: its tool must
have been offered (`UnknownTool`), and its arguments go through the defensive parser against the
tool's contract (JSON, schema, contract, checks with the source). A reply that must call and
did not is `MissingToolCall`. Invalid calls are retried with feedback the way the protocol
allows: the calls go back as the assistant's turn, and each gets a tool result marked as an
error saying what was wrong (a call that was valid gets a result saying it was not run).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sdk._records import Note, Usage, shorten
from sdk._tools import PartialToolCall, Tool, ToolCall, ToolChoice, ToolResult
from sdk.contract import Contract
from sdk.engine.call import Call, MessageLike, RetrySettings, conversation
from sdk.errors import (
    Attempt,
    InvalidOutput,
    MissingToolCall,
    StructuredOutputError,
    UnknownTool,
    Violation,
)
from sdk.parsing import Parsed, parse
from sdk.parsing.incremental import PartialReader
from sdk.parsing.parser import EnumCase, check_stop
from sdk.providers._base import Completion, CompletionRequest, Message, TextDelta, ToolCallDelta
from sdk.providers._provider import Provider
from sdk.schema.dialects import Removal
from sdk.stop_reason import StopReason

__all__ = ["ToolCallReader", "ToolCalls", "ToolsCall", "check_tools", "tool_conversation"]

logger = logging.getLogger("sdk.client")

_NOT_RUN = (
    "Not run: another call in this turn was invalid. Make every call you need again, corrected."
)


def check_tools(
    tools: Sequence[Tool], tool_choice: ToolChoice | str
) -> tuple[tuple[Tool, ...], ToolChoice]:
    """The tools as a tuple, checked (at least one, each a `Tool`, names unique), and the
    choice: `"auto"`, `"required"`, `"none"`, or one of the tools (given as itself or by name)."""
    checked = tuple(tools)
    if not checked:
        raise ValueError("call_tools() needs at least one tool")
    for tool in checked:
        if not isinstance(tool, Tool):
            raise TypeError(f"tools must be sdk.Tool instances (Tool(C)), not {tool!r}")
    names = [tool.name for tool in checked]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
    if tool_choice in ("auto", "required", "none"):
        return checked, tool_choice
    if isinstance(tool_choice, str):
        named = next((tool for tool in checked if tool.name == tool_choice), None)
        if named is None:
            raise ValueError(
                f"tool_choice must be 'auto', 'required', 'none', a Tool or a tool's name "
                f"({', '.join(names)}), not {shorten(tool_choice, 80)!r}"
            )
        return checked, named
    if not isinstance(tool_choice, Tool):
        raise ValueError(
            f"tool_choice must be 'auto', 'required', 'none' or a Tool, not {tool_choice!r}"
        )
    if tool_choice not in checked:
        raise ValueError(f"tool_choice {tool_choice.name!r} is not one of the tools")
    return checked, tool_choice


def tool_conversation(
    prompt: str | None, messages: Sequence[MessageLike] | None, source: str | None
) -> tuple[Message, ...]:
    """The call's first messages: as for `generate` (the source added to the prompt)."""
    if messages is None and prompt is None:
        if source is None:
            raise ValueError("pass a prompt, messages, or a source document")
        prompt = "Use the tools as this document requires."
    # `conversation` names its output only when there is no prompt, excluded above.
    return conversation(Contract, prompt, messages, source)


@dataclass(frozen=True)
class ToolCalls:
    """What `call_tools` returns: the calls (each one's arguments passed every check), any
    prose the model wrote, and everything it was decided on."""

    calls: list[ToolCall]
    text: str
    stop_reason: StopReason
    usage: Usage
    attempts: list[Attempt]
    provider: str
    model: str | None
    raw_stop_reason: str | None = None
    request_id: str | None = None
    notes: list[Note] = field(default_factory=list)
    removed: dict[str, list[Removal]] = field(default_factory=dict)
    """Per tool name: what the provider's dialect removed from its arguments' schema (still
    enforced by the parser)."""

    def message(self) -> Message:
        """The assistant turn that made these calls, to put in the conversation before the
        tool results (`Message("user", "", tool_results=...)`)."""
        return Message("assistant", self.text, tool_calls=tuple(self.calls))


class ToolsCall(Call[Any]):
    """One `call_tools` call across its attempts (see the module docstring)."""

    def __init__(
        self,
        tools: tuple[Tool, ...],
        tool_choice: ToolChoice,
        parallel_tool_calls: bool | None,
        messages: tuple[Message, ...],
        *,
        provider: Provider,
        settings: RetrySettings,
        enum_case: EnumCase,
        system: str | None,
        source: str | None,
        max_tokens: int,
        options: dict[str, Any],
        context: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            tools[0].arguments,
            messages,
            provider=provider,
            settings=settings,
            enum_case=enum_case,
            system=system,
            source=source,
            max_tokens=max_tokens,
            options=options,
            context=context,
        )
        self.contract = None
        self.wire = None
        self.name = "tool call"
        self.tools = tools
        self.tool_choice: ToolChoice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self._by_name = {tool.name: tool for tool in tools}
        self._calls: tuple[ToolCall, ...] = ()
        self._call_errors: dict[int, InvalidOutput] = {}
        self._prose = ""

    def request(self) -> CompletionRequest:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise self._final(self._deadline_error())
        self.partial = None
        logger.debug(
            "attempt %d: %d tool(s), tool_choice=%s -> %s (model %s), max_tokens=%d",
            len(self.attempts) + 1,
            len(self.tools),
            self.tool_choice.name if isinstance(self.tool_choice, Tool) else self.tool_choice,
            self.provider.name,
            self.provider.model,
            self.max_tokens,
        )
        return CompletionRequest(
            contract=None,
            messages=self.messages + self._feedback,
            max_tokens=self.max_tokens,
            system=self.system,
            options=self.options,
            tools=self.tools,
            tool_choice=self.tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
        )

    def snapshots(self) -> ToolCallReader:
        """A fresh reader of the next attempt's streamed calls (`PartialToolCall`s)."""
        self.partial = None
        return ToolCallReader(self.tools)

    def on_reply(self, completion: Completion) -> ToolCalls | None:  # type: ignore[override]
        if completion.text is None and completion.tool_calls:
            # Calls and no prose (a null `content`): the calls are the output, and an error
            # about them keeps their text.
            completion = replace(completion, text="")
        settled = self._settle(completion)
        if settled is None:
            return None
        calls, parsed = settled
        return ToolCalls(
            calls=list(calls),
            text=parsed.text,
            stop_reason=parsed.stop_reason,
            usage=self.usage,
            attempts=list(self.attempts),
            provider=self.provider.name,
            model=completion.model or self.provider.model,
            raw_stop_reason=parsed.raw_stop_reason,
            request_id=completion.request_id,
            notes=parsed.notes,
            removed=self._removed(),
        )

    def _removed(self) -> dict[str, list[Any]]:
        removed: dict[str, list[Any]] = {}
        for tool in self.tools:
            wire = self.provider.tool_schema(tool.arguments)
            if wire is not None and wire.removed:
                removed[tool.name] = list(wire.removed)
        return removed

    def _parse(self, completion: Completion) -> tuple[Any, Parsed[Any]]:
        prose = completion.text or ""
        self._prose = prose
        self._calls = _with_ids(completion.tool_calls)
        self._call_errors = {}
        stop, raw = check_stop(
            prose,
            stop_reason=completion.stop_reason,
            raw_stop_reason=completion.raw_stop_reason,
            clean_stops=self.provider.clean_stops | {StopReason.END_TURN, StopReason.TOOL_USE},
            refusal=completion.refusal,
            refusal_category=completion.refusal_category,
        )
        offered = {tool.name for tool in self._offered()}
        if not self._calls and stop is StopReason.TOOL_USE:
            # The server stopped for a call its parser could not extract: a malformed block.
            raise MissingToolCall(
                "the reply stopped for a tool call but carries none (a malformed call block?)",
                text=prose,
                stop_reason=stop,
                raw_stop_reason=raw,
                violations=[Violation("", "the tool call block could not be read")],
            )
        if not self._calls and offered and _call_in_text(prose, offered):
            # A call written as text: a server whose tool-call parser does not match the model
            # (vLLM's `--tool-call-parser`, llama.cpp's template) returns it as prose.
            raise MissingToolCall(
                "the reply has a tool call written as text, not as a call (the server's "
                "tool-call parser did not read it)",
                text=prose,
                stop_reason=stop,
                raw_stop_reason=raw,
                violations=[Violation("", "a tool call came as text: call the tool properly")],
            )
        if not self._calls and self.tool_choice != "auto" and self.tool_choice != "none":
            wanted = self.tool_choice.name if isinstance(self.tool_choice, Tool) else "a tool"
            raise MissingToolCall(
                f"tool_choice required a call to {wanted}; the reply made none",
                text=prose,
                stop_reason=stop,
                raw_stop_reason=raw,
                violations=[Violation("", f"no call to {wanted}")],
            )
        values: list[ToolCall] = []
        notes: list[Note] = []
        first: InvalidOutput | None = None
        for index, call in enumerate(self._calls):
            try:
                parsed = self._arguments(call, offered)
            except InvalidOutput as error:
                error.add_note(f"tool call {call.id} ({call.tool})")
                error.stop_reason, error.raw_stop_reason = stop, raw
                self._call_errors[index] = error
                first = first or error
                continue
            values.append(ToolCall(call.id, call.tool, call.text, parsed.value))
            notes.extend(parsed.notes)
        if first is not None:
            raise first
        return tuple(values), Parsed(tuple(values), stop, prose, notes, raw)

    def _offered(self) -> tuple[Tool, ...]:
        choice = self.tool_choice
        if choice == "none":
            return ()
        return (choice,) if isinstance(choice, Tool) else self.tools

    def _arguments(self, call: ToolCall, offered: set[str]) -> Parsed[Any]:
        tool = self._by_name.get(call.tool)
        if tool is None or call.tool not in offered:
            why = "was not offered" if tool is None else "may not be called now"
            names = ", ".join(sorted(offered)) or "none (tool_choice='none')"
            raise UnknownTool(
                f"tool call {shorten(call.id, 80)} names {shorten(call.tool, 80)!r}, which {why}; "
                f"callable tools: {names}",
                tool=call.tool,
                call_id=call.id,
                text=call.text,
                stop_reason=StopReason.TOOL_USE,
                violations=[
                    Violation("", f"unknown tool {shorten(call.tool, 80)!r}; use one of: {names}")
                ],
            )
        wire = self.provider.tool_schema(tool.arguments)
        return parse(
            tool.arguments,
            call.text,
            stop_reason=StopReason.END_TURN,
            source=self.source,
            enum_case=self.enum_case,
            absent_nulls=wire is not None and bool(wire.nullable),
            context=self.context,
        )

    def _feedback_for(self, error: InvalidOutput) -> tuple[Message, ...]:
        """The calls as the assistant's turn, and a result for each: the error of an invalid
        one (marked as an error), "not run" for a valid one. No calls: prose and a request."""
        if not self._calls:
            said = (Message("assistant", self._prose),) if self._prose else ()
            return (*said, Message("user", _feedback_text(error, "Call a tool, as required.")))
        results = []
        for index, call in enumerate(self._calls):
            failed = self._call_errors.get(index)
            content = (
                _feedback_text(failed, "Call again with corrected arguments.")
                if failed is not None
                else _NOT_RUN
            )
            results.append(ToolResult(call.id, content, is_error=True, tool=call.tool))
        return (
            Message("assistant", self._prose, tool_calls=self._calls),
            Message("user", "", tool_results=tuple(results)),
        )


_CALL_MARKERS = ("<tool_call>", "<|tool_call|>", "<function=", "[TOOL_CALLS]")


def _call_in_text(text: str, names: set[str]) -> bool:
    """Whether prose holds a tool call: a known call marker, or a JSON call of an offered tool
    (`{"name": "get_weather", "arguments": ...}`)."""
    if any(marker in text for marker in _CALL_MARKERS):
        return True
    alternatives = "|".join(re.escape(name) for name in sorted(names))
    pattern = rf'\{{\s*"name"\s*:\s*"(?:{alternatives})"\s*,\s*"(?:arguments|parameters)"\s*:'
    return re.search(pattern, text) is not None


def _feedback_text(error: InvalidOutput, closing: str) -> str:
    violations = error.violations or [Violation("", error.message.splitlines()[0])]
    lines = [f"Invalid ({type(error).__name__}). Problems (JSON pointer: problem):"]
    lines.extend(f"- {violation.shown()}" for violation in violations[:20])
    if len(violations) > 20:
        lines.append(f"- ... and {len(violations) - 20} more")
    lines.append(closing)
    return "\n".join(lines)


def _with_ids(calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    """Every call with an id (a provider that gives none, Ollama, gets `call_<n>`)."""
    return tuple(
        call if call.id else ToolCall(f"call_{index}", call.tool, call.text)
        for index, call in enumerate(calls)
    )


class ToolCallReader:
    """Streamed tool-call fragments -> `PartialToolCall` snapshots, per call (by index).

    Each call's arguments are read by its own `PartialReader` (the tool's contract); a call is
    `done` when the next one starts or the stream ends. Prose deltas give no snapshot.
    A reader that cannot follow the arguments (not JSON) goes quiet for that call: the final
    reply, parsed in full, decides.
    """

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._calls: dict[int, _Streamed] = {}
        self._current: int | None = None

    def feed(self, delta: TextDelta) -> list[PartialToolCall]:
        if not isinstance(delta, ToolCallDelta):
            return []
        out: list[PartialToolCall] = []
        if delta.index not in self._calls:
            if self._current is not None:
                out.extend(self._close(self._current))
            self._calls[delta.index] = _Streamed()
            self._current = delta.index
        streamed = self._calls[delta.index]
        streamed.id = delta.id or streamed.id
        if delta.name and streamed.tool is None:
            streamed.tool = delta.name
            tool = self._tools.get(delta.name)
            if tool is not None:
                streamed.reader = PartialReader(tool.arguments)
        if delta.text:
            streamed.parts.append(delta.text)
            streamed.snapshot = streamed.read(delta.text)
        out.append(self._snapshot(delta.index, done=False))
        return out

    def finish(self) -> list[PartialToolCall]:
        """The `done` snapshots of the calls still open when the stream ended."""
        return [snapshot for index in list(self._calls) for snapshot in self._close(index)]

    def _close(self, index: int) -> list[PartialToolCall]:
        streamed = self._calls[index]
        if streamed.done:
            return []
        streamed.done = True
        return [self._snapshot(index, done=True)]

    def _snapshot(self, index: int, *, done: bool) -> PartialToolCall:
        streamed = self._calls[index]
        return PartialToolCall(
            index, streamed.id, streamed.tool, "".join(streamed.parts), streamed.snapshot, done
        )


class _Streamed:
    def __init__(self) -> None:
        self.id: str | None = None
        self.tool: str | None = None
        self.parts: list[str] = []
        self.reader: PartialReader[Any] | None = None
        self.snapshot: Any = None
        self.done = False

    def read(self, text: str) -> Any:
        if self.reader is None:
            return self.snapshot
        try:
            snapshot = self.reader.feed(text)
        except StructuredOutputError:
            self.reader = None
            return self.snapshot
        return snapshot if snapshot is not None else self.snapshot
