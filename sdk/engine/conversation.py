"""The conversation a call sends: the first messages from a prompt or messages, and the retry
feedback that tells the model what was wrong with its last reply (bounded, whatever the reply).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from typing import Final

from sdk._values.blank import blank
from sdk._values.content import Part
from sdk._values.content import Text
from sdk._values.content import parts_of
from sdk._values.sendable import check_text
from sdk.contract import Contract
from sdk.errors import InvalidOutput
from sdk.errors import Violation
from sdk.grammar import Grammar
from sdk.providers._base import Message
from sdk.providers._control_tokens import ControlTokens
from sdk.schema.compact import compact_schema

__all__ = [
    "CONTROL_TOKEN_SHOWN",
    "FEEDBACK_WHOLE_REPLY",
    "MessageLike",
    "PromptLike",
    "check_text",
    "conversation",
    "feedback_lines",
    "feedback_message",
    "feedback_turns",
    "without_control_tokens",
]

MessageLike = Message | Mapping[str, Any]
"""A conversation turn: a `Message`, or a mapping with `role` and `content` (a string, or a
list of strings and parts: `sdk.Image`, `sdk.PDF`)."""

PromptLike = str | Sequence[str | Part]
"""A prompt: text, or text and parts (`["What is the total?", PDF.from_path(p)]`)."""

# Retry feedback lists at most this many violations (each bounded by `Violation.shown`): the
# feedback is bounded whatever the document or its errors look like.
_FEEDBACK_VIOLATIONS = 20

CONTROL_TOKEN_SHOWN: Final = "[control token]"
"""What feedback says in place of a control-token string the model wrote."""
# The strings the local codecs refuse by default (`control_tokens="reject"`): the common
# template families and the `<|name|>` convention.
_CONTROL_TOKENS = ControlTokens.families()

FEEDBACK_WHOLE_REPLY: Final = 4_000
"""A reply up to this many characters is sent back whole (as the assistant's turn) with the
retry feedback; a longer one is not, and the feedback quotes a bounded excerpt of it around each
problem instead: resending a 31 KB reply made the retry request 2.6 times the first."""

# Excerpts of a long reply: at most this many (one per distinct pointer), each at most this many
# characters, split before and after where the problem starts.
_FEEDBACK_EXCERPTS = 8
_EXCERPT_CHARS = 240
_EXCERPT_BEFORE = 80


def conversation(
    output: type[Contract] | Grammar,
    prompt: PromptLike | None,
    messages: Sequence[MessageLike] | None,
    source: str | None,
) -> tuple[Message, ...]:
    """The call's first messages: `messages` as given, or the prompt with the source document.
    Refused before anything is sent: wrong-shaped messages (`TypeError`), an empty prompt or
    conversation, and text no provider can carry (a lone surrogate) (`ValueError`)."""
    if source is not None:
        check_text(source, "source")
    if messages is not None:
        if prompt is not None:
            raise ValueError("pass either prompt or messages, not both")
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise TypeError(
                "messages must be a list of Message or {'role': ..., 'content': ...} mappings, "
                f"not {type(messages).__name__}"
            )
        if not messages:
            raise ValueError("messages is empty")
        turns = tuple(_message(message) for message in messages)
        for index, turn in enumerate(turns):
            for part in turn.parts:
                if isinstance(part, Text):
                    check_text(part.text, f"messages[{index}]")
        return turns
    if prompt is None and source is None:
        raise ValueError("pass a prompt, messages, or a source document")
    if prompt is not None and source is None and _blank(prompt):
        raise ValueError("prompt is empty: say what the model should do (or pass a source)")
    pieces: Sequence[str | Part] = [prompt] if isinstance(prompt, str) else (prompt or ())
    for piece in pieces:
        if isinstance(piece, (str, Text)):
            check_text(piece if isinstance(piece, str) else piece.text, "prompt")
    name = output.name if isinstance(output, Grammar) else output.__name__
    if prompt is None or isinstance(prompt, str):
        text = prompt if prompt is not None else f"Fill in a {name} from this document."
        if source is not None:  # (made in one string: the document is copied once, not twice)
            text = f"{text}\n\n<document>\n{source}\n</document>"
        return (Message("user", text),)
    document = f"<document>\n{source}\n</document>" if source is not None else None
    parts = parts_of(prompt)
    assert not isinstance(parts, str)
    return (Message("user", (*parts, *([Text(document)] if document else []))),)


def _blank(prompt: PromptLike) -> bool:
    """Whether a prompt says nothing: blank text (`sdk._values.blank`: white space, or
    zero-width and other invisible characters), or no parts but blank text."""
    if isinstance(prompt, str):
        return blank(prompt)
    return all(isinstance(part, str) and blank(part) for part in prompt)


def _message(message: MessageLike) -> Message:
    if isinstance(message, Message):
        return message
    if not isinstance(message, Mapping):
        raise TypeError(
            "a message is a Message or a {'role': ..., 'content': ...} mapping, not "
            f"{type(message).__name__}"
        )
    role, content = message.get("role"), message.get("content")
    if role in ("user", "assistant") and content is not None:
        try:
            parts = parts_of(content)
        except TypeError as error:
            raise ValueError(str(error)) from None
        if role == "user":
            return Message("user", parts)
        if not isinstance(parts, str) and not all(isinstance(p, Text) for p in parts):
            raise ValueError("an assistant message holds text only")
        return Message("assistant", parts)
    raise ValueError(
        "a message needs role 'user' or 'assistant' and content (a string, or a list of "
        "strings and parts) (pass the system prompt as system=...)"
    )


def feedback_message(
    output: type[Contract] | Grammar | None,
    error: InvalidOutput,
    *,
    whole_reply: int = FEEDBACK_WHOLE_REPLY,
    typed: bool = False,
) -> str:
    """What the model is told after an invalid reply: each violation with its JSON pointer.

    Bounded: at most 20 violations, each pointer and message cut with an ellipsis
    (`Violation.shown`). A reply up to `whole_reply` characters is sent back once, as the
    assistant's turn, and not repeated here; a longer one is not sent back (it would cost more
    than the source it came from; a one-line stand-in keeps its turn), so this message quotes
    an excerpt of it around each problem instead: at most 8 excerpts of 240 characters.

    `typed`: the route holds the reply to no schema (a prompt-only route), so the message also
    gives the contract as a short type definition (`sdk.schema.compact`), what the model has
    to write; where a schema or grammar holds it, the problems alone are said.
    """
    if isinstance(output, Grammar):
        lines = [f"That reply is not a valid {output.name} sentence. Problems:"]
        closing = "Reply with the whole corrected text, and nothing else."
    else:
        name = output.__name__ if output is not None else "document"
        lines = [f"That reply is not a valid {name}. Problems (JSON pointer: problem):"]
        closing = "Reply with the whole corrected JSON document, and nothing else."
    lines.extend(feedback_lines(error))
    text = error.text or ""
    if len(text) > whole_reply:
        excerpts = _excerpts(text, error)
        said = f"The reply ({len(text):,} characters) is not repeated here"
        lines.append(f"{said}; where the problems are:" if excerpts else f"{said}.")
        lines.extend(f"- {where}: {excerpt}" for where, excerpt in excerpts)
    if typed and isinstance(output, type):
        lines.extend(type_definition(output, f"The {output.__name__} to write"))
    lines.append(closing)
    return "\n".join(lines)


def type_definition(contract: type[Contract], what: str) -> list[str]:
    """The lines that give `contract` as a short type definition (`sdk.schema.compact`) in a
    retry's feedback on a route that holds the reply to no schema (`Provider.holds_schema`):
    a document's, or a tool call's arguments."""
    return [f"{what}, as a type definition:", compact_schema(contract)]


def feedback_lines(error: InvalidOutput) -> list[str]:
    """What was wrong, a line a violation (`- /pointer: problem`), at most 20, each bounded."""
    violations = error.violations or [Violation("", error.message.splitlines()[0])]
    lines = [f"- {violation.shown()}" for violation in violations[:_FEEDBACK_VIOLATIONS]]
    if len(violations) > _FEEDBACK_VIOLATIONS:
        lines.append(f"- ... and {len(violations) - _FEEDBACK_VIOLATIONS} more")
    return lines


def feedback_turns(
    output: type[Contract] | Grammar | None,
    error: InvalidOutput,
    whole_reply: int = FEEDBACK_WHOLE_REPLY,
    typed: bool = False,
) -> tuple[Message, ...]:
    """The turns a retry adds: the invalid reply (or a stand-in for a long one) as the
    assistant's, then `feedback_message` as the user's."""
    text = error.text or ""
    said: tuple[Message, ...] = ()
    if text:
        # A long reply is not resent, but its turn stays (a stand-in line): chat templates that
        # require user and assistant turns to alternate reject two user turns in a row.
        shown = text if len(text) <= whole_reply else f"({len(text):,} characters, not repeated)"
        said = (Message("assistant", shown),)
    message = feedback_message(output, error, whole_reply=whole_reply, typed=typed)
    return (*said, Message("user", message))


def _excerpts(text: str, error: InvalidOutput) -> list[tuple[str, str]]:
    """(where, excerpt) for each distinct problem location in a long reply, in order, bounded.

    A violation's pointer is found with `char_pointers` (the first character of the value it
    names, or of its first member); invalid JSON is quoted where parsing stopped.
    """
    from sdk.diagnostics import char_pointers

    starts: dict[str, int] = {}
    position = getattr(error, "position", None)
    if isinstance(position, int):
        starts[f"character {position:,}"] = position
    # The root's "excerpt" would be the document's start: it says nothing about where.
    located = (v.pointer for v in error.violations if v.pointer)
    pointers = list(dict.fromkeys(located))[:_FEEDBACK_EXCERPTS]
    if pointers:
        begin = _json_start(text)
        owners = char_pointers(text[begin:])
        first: dict[str, int] = {}
        for index, owner in enumerate(owners):
            first.setdefault(owner, begin + index)
        for pointer in pointers:
            found = first.get(pointer)
            if found is None:  # a member's character, when the value itself starts elsewhere
                found = next((i for o, i in first.items() if o.startswith(pointer + "/")), None)
            if found is not None:
                starts[Violation(pointer, "").shown().removesuffix(": ")] = found
    out = []
    for where, start in list(starts.items())[:_FEEDBACK_EXCERPTS]:
        low = max(0, start - _EXCERPT_BEFORE)
        high = min(len(text), low + _EXCERPT_CHARS)
        excerpt = " ".join(text[low:high].split())
        out.append((where, f"{'...' if low else ''}{excerpt}{'...' if high < len(text) else ''}"))
    return out


def _json_start(text: str) -> int:
    """Where the JSON document starts in a reply (prose before it is the model's habit)."""
    starts = [index for index in (text.find("{"), text.find("[")) if index >= 0]
    return min(starts) if starts else 0


def without_control_tokens(turns: tuple[Message, ...]) -> tuple[Message, ...]:
    """Retry feedback with every control-token string in it written `[control token]`.

    Feedback repeats what the model wrote: its reply, a value a violation quotes, a call's
    arguments, its prose. A local server that parses control tokens in content (llama.cpp's
    OpenAI route, vLLM, Ollama) would read `<|im_end|>` there as the real token, so the codec
    refuses the request (`ControlTokenInContent`) and the SDK's own retry would end the call.
    The model's text is the SDK's to rewrite when it speaks back (a user's never is); the error
    keeps the raw text, so nothing is lost.
    """
    return tuple(_message_without_control_tokens(turn) for turn in turns)


def _message_without_control_tokens(turn: Message) -> Message:
    content = turn.content
    if isinstance(content, str):
        content = _shown(content)
    else:
        content = tuple(Text(_shown(p.text)) if isinstance(p, Text) else p for p in content)
    calls = tuple(replace(call, text=_shown(call.text)) for call in turn.tool_calls)
    results = tuple(replace(r, content=_shown(r.content)) for r in turn.tool_results)
    return replace(turn, content=content, tool_calls=calls, tool_results=results)


def _shown(text: str) -> str:
    """`text` with each control-token string replaced, left to right (no control-token string
    can start or end inside the stand-in, so none forms across it)."""
    pieces: list[str] = []
    found = _CONTROL_TOKENS.find(text)
    while found is not None:
        pieces += (text[: found.position], CONTROL_TOKEN_SHOWN)
        text = text[found.position + len(found.token) :]
        found = _CONTROL_TOKENS.find(text)
    return "".join(pieces) + text
