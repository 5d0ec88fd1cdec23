"""Tool calls on the embedded model: the mechanism itself, since no server does it for us.

`ToolPlan(request, offer)` turns a tool-call request into what the decoding loop runs, and reads
what it generates back into calls; no I/O, no model (the loop is `EmbeddedProvider`'s):

1. The tools are rendered into the prompt, in the generic `<tool_call>` JSON block format (the
   Hermes/Qwen style: `<tools>` with each function's JSON signature, then how to call), since
   the bundled model's chat template knows no tools. Earlier calls and tool results in the
   conversation are written as `<tool_call>` and `<tool_response>` blocks.
2. A lazy llguidance grammar: free text until the opening marker, then exactly
   `{"name": <one of the tools>, "arguments": <that tool's schema>}` and the closing marker
   (`call_head[lazy]: TEXT "<tool_call>"`, the pattern llguidance documents for tool calling;
   prose alone is `TEXT`, which cannot contain the marker). `tool_choice="required"` or a
   named tool: the grammar starts with the marker, so the first token opens the call (and a
   named tool fixes the name); `"none"`: only `TEXT`, the marker masked. Several calls only with
   `parallel_tool_calls=True`; after the last one the grammar is complete, so generation ends.
3. The text read back: prose before the first marker, each block's name and raw arguments text
   (streamed as `ToolCallDelta` fragments as they are generated). A block that is malformed
   (unconstrained runs) or unclosed is never passed off as prose: the completion then has no
   calls and the stop reason `tool_use`, which the client reports as `MissingToolCall`, the
   text kept; a block cut by `max_tokens` keeps `max_tokens` (`TruncatedOutput`).

The diagnostics are regrouped by what each token decided: `/decision` (the call-or-answer
token: the first one, or the marker's first when prose came before), `/prose`,
`/calls/<i>/name`, `/calls/<i>/arguments/<field>`, and `/calls/<i>` for the block's markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from sdk._tools import Tool
from sdk._tools import ToolCall
from sdk._tools import ToolOffer
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import TokenStep
from sdk.diagnostics import char_pointers
from sdk.diagnostics import regroup
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import FreeText
from sdk.providers._base import Message
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.schema.canonical import shared_schema
from sdk.stop_reason import StopReason

__all__ = ["CLOSE", "OPEN", "ToolPlan", "tool_grammar", "tools_prompt"]

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"arguments"\s*:\s*')
# What follows the arguments inside a block: the wrapper's `}` and the closing marker.
_CLOSING = re.compile(r"\s*\}\s*(" + re.escape(CLOSE) + ")")
_DECODER = json.JSONDecoder()

# llguidance JSON options inside the block (as for documents: compact, bounded whitespace).
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ?", "key_separator": ": ?"}


def tools_prompt(tools: Iterable[Tool]) -> str:
    """The system-turn text that offers the tools and says how to call one."""
    signatures = "\n".join(
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or f"Call {tool.name}.",
                    "parameters": shared_schema(tool.arguments),
                },
            },
            ensure_ascii=False,
        )
        for tool in tools
    )
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{signatures}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f"{OPEN}{CLOSE} XML tags:\n{OPEN}\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n'
        f"{CLOSE}"
    )


def _lark_string(text: str) -> str:
    return json.dumps(text)


def tool_grammar(offer: ToolOffer) -> str:
    """The lazy llguidance grammar (Lark syntax) for a tool-call request (module docstring)."""
    offered = offer.offered()
    lines = [
        "%llguidance {}",
        # Prose: anything that does not contain the opening marker.
        f"TEXT: /(?s:.*)/ & ~/(?s:.*){re.escape(OPEN)}(?s:.*)/",
    ]
    if not offered:  # "none": the marker is masked
        lines.insert(1, "start: TEXT")
        return "\n".join(lines)
    names = []
    for index, tool in enumerate(offered):
        schema = {**shared_schema(tool.arguments), "x-guidance": _JSON_OPTIONS}
        prefix = '{"name": "' + tool.name + '", "arguments": '
        lines.append(f"tool_{index}: {_lark_string(prefix)} args_{index} {_lark_string('}')}")
        lines.append(f"args_{index}: %json {json.dumps(schema, ensure_ascii=False)}")
        names.append(f"tool_{index}")
    lines.append(f"body: ({' | '.join(names)}) {_lark_string(chr(10) + CLOSE)}")
    opening = _lark_string(OPEN + "\n")
    more = f"({_lark_string(chr(10) + OPEN + chr(10))} body)*" if offer.parallel else ""
    if offer.choice == "auto":
        lines.append(f"call_head[lazy]: TEXT {_lark_string(OPEN)}")
        lines.insert(1, f'start: TEXT | call_head "\\n" body {more}'.rstrip())
    else:  # required, or a named tool: the first token opens the call
        lines.insert(1, f"start: {opening} body {more}".rstrip())
    return "\n".join(lines)


def _render_message(message: Message) -> Message:
    """A turn with tool calls or results written as text blocks (the model's own format)."""
    if not message.tool_calls and not message.tool_results:
        return message
    parts = [message.text] if message.content and message.tool_calls else []
    for call in message.tool_calls:
        arguments = call.text.strip() or "{}"
        parts.append(
            f'{OPEN}\n{{"name": {json.dumps(call.tool)}, "arguments": {arguments}}}\n{CLOSE}'
        )
    for result in message.tool_results:
        flag = "error: " if result.is_error else ""
        parts.append(f"<tool_response>\n{flag}{result.content}\n</tool_response>")
    if message.content and message.tool_results:
        parts.append(message.text)
    return Message(message.role, "\n".join(parts))


class ToolPlan:
    """One tool-call request as the decoding loop runs it (module docstring)."""

    def __init__(self, request: CompletionRequest, offer: ToolOffer) -> None:
        self.original = request
        system = "\n\n".join(part for part in (request.system, tools_prompt(offer.tools)) if part)
        # A free-text request to the loop, with the grammar passed beside it.
        self.request = CompletionRequest(
            FreeText(),
            messages=tuple(_render_message(m) for m in request.messages),
            max_tokens=request.max_tokens,
            system=system,
            options=request.options,
        )
        self.grammar = tool_grammar(offer)

    def read(self, items: Iterable[TextDelta | Completion]) -> Iterator[TextDelta | Completion]:
        """The loop's deltas and completion -> prose deltas, `ToolCallDelta`s, and the
        completion with its calls."""
        reader = _BlockReader()
        for item in items:
            if isinstance(item, Completion):
                yield from reader.feed("", final=True)
                yield reader.completion(item)
                return
            yield from reader.feed(item.text)


class _Block:
    def __init__(self, start: int) -> None:
        self.start = start  # where the block's content starts (after the opening marker)
        self.name: str | None = None
        self.args_start: int | None = None
        self.emitted = 0  # argument characters emitted so far
        self.end: int | None = None  # where the closing marker starts
        self.arguments = ""
        self.malformed = False


class _BlockReader:
    """Finds the blocks in the growing text, emitting prose and argument fragments."""

    def __init__(self) -> None:
        self.text = ""
        self.prose_end: int | None = None  # where the first block opens
        self.prose_emitted = 0
        self.blocks: list[_Block] = []
        self.scan = 0  # where to look for the next opening marker

    def feed(self, piece: str, *, final: bool = False) -> Iterator[TextDelta]:
        self.text += piece
        going = True
        while going:
            block = self.blocks[-1] if self.blocks and self.blocks[-1].end is None else None
            if block is None:
                going = yield from self._prose(final)
            else:
                going = yield from self._block(block, final)

    def _prose(self, final: bool) -> Generator[TextDelta, None, bool]:
        """The prose up to the next block's opening marker, and that block begun; False (read
        on when more text comes) where no marker is in the text yet: prose that could be the
        start of a marker is held back until the text says it is not."""
        found = self.text.find(OPEN, self.scan)
        if found < 0:
            if self.prose_end is None:
                safe = len(self.text) if final else max(0, len(self.text) - len(OPEN) + 1)
                if safe > self.prose_emitted:
                    yield TextDelta(self.text[self.prose_emitted : safe])
                    self.prose_emitted = safe
            return False
        if self.prose_end is None:
            self.prose_end = found
            if found > self.prose_emitted:
                yield TextDelta(self.text[self.prose_emitted : found])
                self.prose_emitted = found
        self.blocks.append(_Block(found + len(OPEN)))
        return True

    def _block(self, block: _Block, final: bool) -> Generator[TextDelta, None, bool]:
        """The open block's head (the tool's name, announced once), then its arguments; False
        where the text ends before the block does."""
        index = len(self.blocks) - 1
        if block.args_start is None:
            head = _HEAD.match(self.text, block.start)
            if head is None:
                close = self.text.find(CLOSE, block.start)
                if close >= 0:  # a block without a readable head: malformed
                    block.end = close
                    self.scan = close + len(CLOSE)
                    return True
                return False
            if head.end() >= len(self.text):
                return False  # whitespace may still come before the arguments' `{`
            block.name, block.args_start = head.group(1), head.end()
            yield ToolCallDelta("", index=index, id=f"call_{index}", name=block.name)
        return (yield from self._arguments(block, block.args_start, final))

    def _arguments(
        self, block: _Block, start: int, final: bool
    ) -> Generator[TextDelta, None, bool]:
        """The block's arguments as they come, and its end; False where the text ends first."""
        index = len(self.blocks) - 1
        # The arguments end where their JSON object closes (a `</tool_call>` inside one of
        # its strings is text), then the wrapper's `}` and the closing marker follow.
        args_end = self._object_end(start)
        limit = len(self.text) if args_end is None else args_end
        if limit - start > block.emitted:
            fragment = self.text[start + block.emitted : limit]
            block.emitted += len(fragment)
            yield ToolCallDelta(fragment, index=index, id=f"call_{index}", name=block.name)
        if args_end is not None:
            block.arguments = self.text[start:args_end]
            tail = _CLOSING.match(self.text, args_end)
            if tail is not None:
                block.end = tail.start(1)
                self.scan = tail.end()
                return True
            if _may_close(self.text[args_end:]) and not final:
                return False  # the closing is still being written
        elif not final:
            return False
        # Unconstrained output that does not follow the format: the block ends at the next
        # closing marker (or the end of the text), and is malformed.
        close = self.text.find(CLOSE, start)
        block.arguments = block.arguments or self.text[start:close]
        block.malformed = True
        if close < 0:
            return False
        block.end = close
        self.scan = close + len(CLOSE)
        return True

    def _object_end(self, start: int) -> int | None:
        """Where the JSON value starting at `start` ends, once it is complete."""
        if start >= len(self.text) or self.text[start] != "{":
            return None
        try:
            _, end = _DECODER.raw_decode(self.text, start)
        except ValueError:
            return None
        return int(end)

    def completion(self, done: Completion) -> Completion:
        """The loop's completion with the calls read from its text."""
        text = self.text if self.text else (done.text or "")
        diagnostics = self._diagnostics(done.diagnostics)
        if not self.blocks:
            return replace(done, text=text, diagnostics=diagnostics)
        calls: list[ToolCall] = []
        for index, block in enumerate(self.blocks):
            if (
                block.end is None
                or block.name is None
                or not _well_formed(text[block.start : block.end])
            ):
                calls = []
                break
            calls.append(ToolCall(f"call_{index}", block.name, block.arguments))
        if done.stop_reason is not StopReason.END_TURN:
            # Cut (max_tokens, context): the stop reason says it; the text is kept whole.
            return replace(done, text=text, diagnostics=diagnostics)
        prose = text[: self.prose_end] if calls else text
        return replace(
            done,
            text=prose.strip() if calls else prose,
            stop_reason=StopReason.TOOL_USE,  # malformed: no calls, a typed error downstream
            tool_calls=tuple(calls),
            diagnostics=diagnostics,
        )

    def _diagnostics(self, diagnostics: Any) -> ConstraintDiagnostics | None:
        if not isinstance(diagnostics, ConstraintDiagnostics):
            return None
        decision = self.prose_end if self.prose_end is not None else 0
        spans = []
        for index, block in enumerate(self.blocks):
            if block.args_start is None:
                continue
            args_end = block.args_start + len(block.arguments or self.text[block.args_start :])
            pointers = char_pointers(self.text[block.args_start : args_end])
            spans.append((index, block, args_end, pointers))

        def pointer(step: TokenStep) -> str:
            offset = step.offset
            if offset == decision:
                return "/decision"
            for index, block, args_end, pointers in spans:
                assert block.args_start is not None
                if block.start <= offset < block.args_start:
                    return f"/calls/{index}/name"
                if block.args_start <= offset < args_end:
                    return f"/calls/{index}/arguments{pointers[offset - block.args_start]}"
                if block.start - len(OPEN) <= offset < (block.end or len(self.text)) + len(CLOSE):
                    return f"/calls/{index}"
            return "/prose"

        return regroup(diagnostics, pointer)


def _may_close(tail: str) -> bool:
    """Whether `tail` is the start of the wrapper's `}` and the closing marker."""
    rest = tail.lstrip()
    if not rest:
        return True
    if rest[0] != "}":
        return False
    return CLOSE.startswith(rest[1:].lstrip())


def _well_formed(inner: str) -> bool:
    try:
        value = json.loads(inner)
    except ValueError:
        return False
    return (
        isinstance(value, dict)
        and set(value) == {"name", "arguments"}
        and isinstance(value["name"], str)
        and isinstance(value["arguments"], dict)
    )
