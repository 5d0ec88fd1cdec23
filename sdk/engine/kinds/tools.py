"""Tool calls: the model's calls to the tools offered, each one's arguments parsed into its
tool's contract.

A reply is decided the way a document is: the stop reason first (a cut or refused reply is
`TruncatedOutput` / `RefusedOutput`, whatever calls it holds), then each call: its tool must
have been offered (`UnknownTool`), and its arguments go through the defensive parser against the
tool's contract (JSON, schema, contract, checks with the source). A reply that must call and did
not is `MissingToolCall`.

Invalid calls are retried with feedback the way the protocol allows: the calls go back as the
assistant's turn and each gets a tool result marked as an error saying what was wrong (a valid
call gets a result saying it was not run). That echo is bounded and always well-formed: ids are
unique (a provider that repeats one gets the later calls renamed, with a note; a stream's
snapshots say the renamed id too), a tool name no provider would accept goes back as
`invalid_tool_name`, long arguments go back as a stand-in, and at most `_ECHOED_CALLS` calls are
echoed. What the model invented goes back only in a safe form: an unknown tool's name is quoted
in the feedback only when it is a plain identifier, and no control-token string goes back at all
(`sdk.engine.conversation.without_control_tokens`, applied by the attempts machine to every
kind's feedback). The errors keep the raw text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from sdk._result import ToolCalls
from sdk._tools import PartialToolCall
from sdk._tools import Tool
from sdk._tools import ToolCall
from sdk._tools import ToolChoice
from sdk._tools import ToolOffer
from sdk._tools import ToolResult
from sdk._values.records import Note
from sdk._values.records import shorten
from sdk.contract import Contract
from sdk.engine.conversation import MessageLike
from sdk.engine.conversation import conversation
from sdk.engine.conversation import feedback_lines
from sdk.engine.conversation import type_definition
from sdk.engine.kinds._kind import Accepted
from sdk.engine.kinds._kind import Ask
from sdk.engine.kinds._kind import Ending
from sdk.engine.kinds._kind import Parsing
from sdk.engine.kinds._kind import StreamView
from sdk.engine.kinds._kind import stop_fields
from sdk.errors import InvalidOutput
from sdk.errors import MissingToolCall
from sdk.errors import StructuredOutputError
from sdk.errors import UnknownTool
from sdk.errors import Violation
from sdk.parsing import Parsed
from sdk.parsing import parse
from sdk.parsing.incremental import PartialReader
from sdk.parsing.parser import check_stop
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.providers._base import unsupported
from sdk.schema.canonical import SchemaInfo
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.providers._provider import Provider

__all__ = ["ToolCallReader", "Tools", "check_tools", "tool_conversation"]

_NOT_RUN = (
    "Not run: another call in this turn was invalid. Make every call you need again, corrected."
)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_NAME = "invalid_tool_name"
# A name feedback may quote: a plain identifier (dots too: `functions.get_weather` is a common
# slip); anything else could spell a control token or an instruction.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NOT_A_NAME = "a name that is not a valid tool name"
# The retry echo of a reply's calls: at most this many calls, each one's arguments sent back
# whole up to this many characters (a longer one goes back as `{}`, its result saying so).
_ECHOED_CALLS = 16
_ECHOED_ARGUMENTS = 2_000


def check_tools(
    tools: Sequence[Tool], tool_choice: ToolChoice | str, parallel_tool_calls: bool | None = None
) -> ToolOffer:
    """The offer a tool call makes, checked: at least one tool, each a `Tool`, names unique; the
    choice `"auto"`, `"required"`, `"none"`, or one of the tools (given as itself or by name);
    `parallel_tool_calls` `True`, `False` or `None` (`TypeError`/`ValueError` before sending)."""
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise TypeError(f"tools must be a list of sdk.Tool, not {type(tools).__name__}")
    checked = tuple(tools)
    if not checked:
        raise ValueError("call_tools() needs at least one tool")
    stray = next((tool for tool in checked if not isinstance(tool, Tool)), None)
    if stray is not None:
        raise TypeError(f"tools must be sdk.Tool instances (Tool(C)), not {stray!r}")
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise TypeError(
            f"parallel_tool_calls must be True, False or None, not {parallel_tool_calls!r}"
        )
    names = [tool.name for tool in checked]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
    return ToolOffer(checked, _choice(checked, tool_choice), parallel_tool_calls)


def _choice(tools: tuple[Tool, ...], tool_choice: ToolChoice | str) -> ToolChoice:
    if tool_choice in ("auto", "required", "none"):
        return tool_choice
    names = [tool.name for tool in tools]
    if isinstance(tool_choice, str):
        named = next((tool for tool in tools if tool.name == tool_choice), None)
        if named is None:
            raise ValueError(
                f"tool_choice must be 'auto', 'required', 'none', a Tool or a tool's name "
                f"({', '.join(names)}), not {shorten(tool_choice, 80)!r}"
            )
        return named
    if not isinstance(tool_choice, Tool):
        raise ValueError(
            f"tool_choice must be 'auto', 'required', 'none' or a Tool, not {tool_choice!r}"
        )
    if tool_choice not in tools:
        raise ValueError(f"tool_choice {tool_choice.name!r} is not one of the tools")
    return tool_choice


def tool_conversation(
    prompt: Any, messages: Sequence[MessageLike] | None, source: str | None
) -> tuple[Message, ...]:
    """The call's first messages: as for `generate` (the source added to the prompt)."""
    if messages is None and prompt is None:
        if source is None:
            raise ValueError("pass a prompt, messages, or a source document")
        prompt = "Use the tools as this document requires."
    # `conversation` names its output only when there is no prompt, excluded above.
    return conversation(Contract, prompt, messages, source)


@dataclass(frozen=True, slots=True)
class Tools:
    """Calls to the tools `offer` makes (see the module docstring)."""

    offer: ToolOffer
    parsing: Parsing

    @property
    def name(self) -> str:
        return "tool call"

    @property
    def tools(self) -> tuple[Tool, ...]:
        return self.offer.tools

    @property
    def tool_choice(self) -> ToolChoice:
        return self.offer.choice

    @property
    def schema(self) -> SchemaInfo:
        """The offered tools as one schema: their names, version 1, no fingerprint of its own."""
        names = ", ".join(tool.name for tool in self.tools)
        return SchemaInfo(f"tools: {names}", 1, "")

    def vet(self, provider: Provider) -> None:
        if not provider.supports_tools:
            raise unsupported(provider.name, "tool calls", ["json_schema documents"])

    def request(self, ask: Ask) -> CompletionRequest:
        return ask.request(self.offer)

    answer_request = request  # (one phase: its request is the answer's)

    def judge(self, completion: Completion, provider: Provider) -> Accepted[tuple[ToolCall, ...]]:
        prose = completion.text or ""
        calls, notes = _unique_ids(completion.tool_calls)
        clean = provider.clean_stops | {StopReason.END_TURN, StopReason.TOOL_USE}
        stop, raw = check_stop(prose, **stop_fields(completion, clean))
        offered = {tool.name for tool in self.offer.offered()}
        if not calls:
            self._no_call(prose, stop, raw, offered)
        checked = self._checked(calls, provider, stop, raw)
        if checked.errors:
            raise checked.errors[min(checked.errors)]
        return Accepted(checked.values, prose, stop, raw, [*notes, *checked.notes])

    def _checked(
        self, calls: tuple[ToolCall, ...], provider: Provider, stop: StopReason, raw: str | None
    ) -> _Checked:
        """Each call's arguments parsed, or what was wrong with them (by the call's index)."""
        offered = {tool.name for tool in self.offer.offered()}
        values: list[ToolCall] = []
        notes: list[Note] = []
        errors: dict[int, InvalidOutput] = {}
        for index, call in enumerate(calls):
            try:
                parsed = self._arguments(call, offered, provider)
            except InvalidOutput as error:
                error = error.evolve(stop_reason=stop, raw_stop_reason=raw)
                error.add_note(f"tool call {shorten(call.id, 80)} ({shorten(call.tool, 80)})")
                errors[index] = error
                continue
            values.append(ToolCall(call.id, call.tool, call.text, parsed.value))
            notes.extend(parsed.notes)
        return _Checked(tuple(values), notes, errors)

    def _no_call(self, prose: str, stop: StopReason, raw: str | None, offered: set[str]) -> None:
        """Raise when a reply without calls is not a finished answer."""
        fields: dict[str, Any] = {"text": prose, "stop_reason": stop, "raw_stop_reason": raw}
        if stop is StopReason.TOOL_USE:
            # The server stopped for a call its parser could not extract: a malformed block.
            raise MissingToolCall(
                "the reply stopped for a tool call but carries none (a malformed call block?)",
                violations=[Violation("", "the tool call block could not be read")],
                **fields,
            )
        if offered and _call_in_text(prose, offered):
            # A call written as text: a server whose tool-call parser does not match the model
            # (vLLM's `--tool-call-parser`, llama.cpp's template) returns it as prose.
            raise MissingToolCall(
                "the reply has a tool call written as text, not as a call (the server's "
                "tool-call parser did not read it)",
                violations=[Violation("", "a tool call came as text: call the tool properly")],
                **fields,
            )
        if self.tool_choice != "auto" and self.tool_choice != "none":
            wanted = self.tool_choice.name if isinstance(self.tool_choice, Tool) else "a tool"
            raise MissingToolCall(
                f"tool_choice required a call to {wanted}; the reply made none",
                violations=[Violation("", f"no call to {wanted}")],
                **fields,
            )

    def _arguments(self, call: ToolCall, offered: set[str], provider: Provider) -> Parsed[Any]:
        tool = next((tool for tool in self.offer.tools if tool.name == call.tool), None)
        if tool is None or call.tool not in offered:
            raise _unknown(
                call, offered, "was not offered" if tool is None else "may not be called now"
            )
        wire = provider.tool_schema(tool.arguments)
        return parse(
            tool.arguments,
            call.text,
            stop_reason=StopReason.END_TURN,
            enum_case=self.parsing.enum_case,
            absent_nulls=wire is not None and bool(wire.nullable),
            **self.parsing.fields(),
        )

    def feedback(
        self, error: InvalidOutput, completion: Completion, provider: Provider
    ) -> tuple[Message, ...]:
        """The calls as the assistant's turn, and a result for each: the error of an invalid
        one (marked as an error), "not run" for a valid one; bounded (module docstring). No
        calls: the prose and a request to call."""
        prose = completion.text or ""
        calls, _ = _unique_ids(completion.tool_calls)
        if not calls:
            said = (Message("assistant", prose),) if prose else ()
            return (*said, Message("user", _feedback_text(error, "Call a tool, as required.")))
        stop = error.stop_reason or StopReason.TOOL_USE
        errors = self._checked(calls, provider, stop, error.raw_stop_reason).errors
        # A route that holds the arguments to no schema is told each failed tool's type again.
        typed = {t.name: t.arguments for t in self.offer.tools} if not provider.holds_schema else {}
        echoed: list[ToolCall] = []
        results: list[ToolResult] = []
        for index, call in enumerate(calls[:_ECHOED_CALLS]):
            name = call.tool if _TOOL_NAME.match(call.tool) else _INVALID_NAME
            failed = errors.get(index)
            arguments_type = typed.get(call.tool)
            content = (
                _feedback_text(
                    failed,
                    "Call again with corrected arguments.",
                    type_definition(arguments_type, f"The {call.tool} arguments")
                    if arguments_type is not None
                    else [],
                )
                if failed is not None
                else _NOT_RUN
            )
            arguments = call.text
            if len(arguments) > _ECHOED_ARGUMENTS:
                arguments = "{}"
                content += f"\n(Your arguments, {len(call.text):,} characters, are not repeated.)"
            echoed.append(ToolCall(call.id, name, arguments))
            results.append(ToolResult(call.id, content, is_error=True, tool=name))
        dropped = len(calls) - len(echoed)
        text = prose
        if dropped:
            text = f"{text}\n({dropped} more calls, not repeated.)".strip()
        return (
            Message("assistant", text, tool_calls=tuple(echoed)),
            Message("user", "", tool_results=tuple(results)),
        )

    def view(self, attempt: int, provider: Provider) -> StreamView:
        return ToolCallReader(self.tools, attempt)

    def result(self, accepted: Accepted[Any], ending: Ending) -> ToolCalls:
        return ToolCalls(
            calls=list(accepted.value),
            removed=self._removed(ending.provider),
            **ending.fields(accepted),
        )

    def _removed(self, provider: Provider) -> dict[str, list[Any]]:
        removed: dict[str, list[Any]] = {}
        for tool in self.tools:
            wire = provider.tool_schema(tool.arguments)
            if wire is not None and wire.removed:
                removed[tool.name] = list(wire.removed)
        return removed


@dataclass(frozen=True, slots=True)
class _Checked:
    """A reply's calls, checked: the valid ones parsed, their notes, the others' errors."""

    values: tuple[ToolCall, ...]
    notes: list[Note]
    errors: dict[int, InvalidOutput]


def _unknown(call: ToolCall, offered: set[str], why: str) -> UnknownTool:
    """The error of a call to a tool that is not callable now: its message shows the name
    (bounded), its violation, which the retry's feedback repeats, only a plain one
    (`_PLAIN_NAME`); `.tool` keeps it whole."""
    names = ", ".join(sorted(offered)) or "none (tool_choice='none')"
    shown = shorten(call.tool, 80)
    message = f"tool call {shorten(call.id, 80)} names {shown!r}, which {why}; callable: {names}"
    said = repr(call.tool) if _PLAIN_NAME.fullmatch(call.tool) else _NOT_A_NAME
    problem = f"unknown tool: the call gives {said}, which {why}; use one of: {names}"
    violation = Violation("", problem)
    fields = {"text": call.text, "stop_reason": StopReason.TOOL_USE, "violations": [violation]}
    return UnknownTool(message, tool=call.tool, call_id=call.id, **fields)


_CALL_MARKERS = ("<tool_call>", "<|tool_call|>", "<function=", "[TOOL_CALLS]")


def _call_in_text(text: str, names: set[str]) -> bool:
    """Whether prose holds a tool call: a known call marker, or a JSON call of an offered tool
    (`{"name": "get_weather", "arguments": ...}`)."""
    if any(marker in text for marker in _CALL_MARKERS):
        return True
    alternatives = "|".join(re.escape(name) for name in sorted(names))
    pattern = rf'\{{\s*"name"\s*:\s*"(?:{alternatives})"\s*,\s*"(?:arguments|parameters)"\s*:'
    return re.search(pattern, text) is not None


def _feedback_text(error: InvalidOutput, closing: str, typed: Sequence[str] = ()) -> str:
    """A failed call's result: its problems, the arguments' type definition where the route
    holds them to no schema (`typed`), and what to do."""
    lines = [f"Invalid ({type(error).__name__}). Problems (JSON pointer: problem):"]
    lines.extend(feedback_lines(error))
    lines.extend(typed)
    lines.append(closing)
    return "\n".join(lines)


def _unique_ids(calls: Sequence[ToolCall]) -> tuple[tuple[ToolCall, ...], list[Note]]:
    """Every call with an id of its own (`_UniqueIds`), each renaming noted: two results for
    one id would be refused when the conversation goes back."""
    ids = _UniqueIds()
    out: list[ToolCall] = []
    notes: list[Note] = []
    for index, call in enumerate(calls):
        call_id = ids.give(call.id, index)
        if ids.repeated is not None:
            note = Note(f"/calls/{index}/id", ids.repeated, call_id, kind="duplicate_call_id")
            notes.append(note)
        out.append(call if call_id == call.id else ToolCall(call_id, call.tool, call.text))
    return tuple(out), notes


class _UniqueIds:
    """The ids a reply's calls get, in order: a call without one (Ollama) gets `call_<n>`
    (`n` its position), an id seen before a suffix (`toolu_1_2`). One rule for the final
    calls and the streamed snapshots, so a snapshot names a call as the result does."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self.repeated: str | None = None
        """The id the last call asked for, when it was taken already (and so renamed)."""

    def give(self, call_id: str | None, position: int) -> str:
        """The id of the call at `position` (0 first) that gave `call_id`."""
        asked = call_id or f"call_{position}"
        chosen, suffix = asked, 2
        while chosen in self._seen:
            chosen, suffix = f"{asked}_{suffix}", suffix + 1
        self._seen.add(chosen)
        self.repeated = asked if chosen != asked else None
        return chosen


class ToolCallReader:
    """Streamed tool-call fragments -> `PartialToolCall` snapshots, per call (by index), each
    stamped with its attempt.

    Each call's arguments are read by its own `PartialReader` (the tool's contract). A call is
    `done` exactly once, with its whole arguments, however the provider's chunks group the
    fragments: when its arguments are a whole JSON value and a later call has begun (nothing
    more of it can follow but whitespace), or else when the stream ends. A call that begins is
    no proof that the one before has ended: a Chat Completions chunk may announce two calls
    before the arguments of either. Prose deltas give no snapshot. A reader that cannot follow
    the arguments (not JSON, an unknown tool) goes quiet for that call, which is done at the
    end: the final reply, parsed in full, decides. A snapshot's id is the one the result gives
    the call (`_UniqueIds`: a repeated id renamed, a missing one `call_<n>`), not the
    provider's raw one.
    """

    def __init__(self, tools: Sequence[Tool], attempt: int = 1) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._attempt = attempt
        self._calls: dict[int, _Streamed] = {}

    def feed(self, delta: TextDelta) -> list[Any]:
        if not isinstance(delta, ToolCallDelta):
            return []
        out: list[PartialToolCall] = []
        new = delta.index not in self._calls
        if new:
            self._calls[delta.index] = _Streamed()
        streamed = self._calls[delta.index]
        if new or (delta.id and streamed.given is None):
            streamed.given = delta.id
            self._name_calls()
        if delta.name and streamed.tool is None:
            streamed.tool = delta.name
            tool = self._tools.get(delta.name)
            if tool is not None:
                streamed.reader = PartialReader(tool.arguments, attempt=self._attempt)
        if delta.text:
            streamed.parts.append(delta.text)
            streamed.snapshot = streamed.read(delta.text)
        if not streamed.done:
            out.append(self._snapshot(delta.index, done=False))
        for index in self._ended():
            out.extend(self._close(index))
        return out

    def _ended(self) -> list[int]:
        """The open calls whose arguments are whole, with a call begun after them."""
        begun = list(self._calls)[:-1]  # in the order they began: each has a later one
        return [
            index for index in begun if not self._calls[index].done and self._calls[index].whole()
        ]

    def _name_calls(self) -> None:
        """Give each call the id the result will (`_UniqueIds` over the calls in the order they
        came, as the final reply lists them), again whenever a call or its id arrives."""
        ids = _UniqueIds()
        for position, streamed in enumerate(self._calls.values()):
            streamed.id = ids.give(streamed.given, position)

    def finish(self) -> list[Any]:
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
            index,
            streamed.id,
            streamed.tool,
            "".join(streamed.parts),
            streamed.snapshot,
            done,
            attempt=self._attempt,
        )


class _Streamed:
    def __init__(self) -> None:
        self.given: str | None = None
        """The id the provider gave the call, if any."""
        self.id: str | None = None
        """The id shown: the one the result gives the call."""
        self.tool: str | None = None
        self.parts: list[str] = []
        self.reader: PartialReader[Any] | None = None
        self.snapshot: Any = None
        self.done = False

    def whole(self) -> bool:
        """Whether the arguments are a whole JSON value (read, not guessed)."""
        return self.reader is not None and self.snapshot is not None and self.snapshot.done

    def read(self, text: str) -> Any:
        if self.reader is None:
            return self.snapshot
        try:
            snapshot = self.reader.feed(text)
        except StructuredOutputError:
            self.reader = None
            return self.snapshot
        return snapshot if snapshot is not None else self.snapshot
