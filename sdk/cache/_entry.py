"""What a cache stores, how its key is made, and the protocol a store implements."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Protocol
from typing import assert_never

from sdk._content import Text
from sdk._message import Message
from sdk._records import Note
from sdk._records import Usage
from sdk._tools import Tool
from sdk._tools import ToolCall
from sdk._tools import ToolOffer
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import FieldDiagnostics
from sdk.diagnostics import TokenStep
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import FreeText
from sdk.providers._base import GrammarSentence
from sdk.providers._base import JsonDocument
from sdk.providers._base import Output
from sdk.stop_reason import StopReason

__all__ = ["FORMAT", "Cache", "CacheStats", "Entry", "cache_key", "default_path"]

FORMAT = 2
"""The entries' format: part of every key, so a new format never reads an old entry (2: the
replies' constraint diagnostics and provider notes are kept, so a hit is judged on the same
signals as the call that made it, mass-aware abstention included)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored answer: the replies that made it (the working of two-phase reasoning, then the
    answer), to be judged again on a hit."""

    completions: tuple[Completion, ...]

    @property
    def usage(self) -> Usage:
        """What the stored replies cost when they were made."""
        return sum((c.usage for c in self.completions), Usage())

    def to_json(self) -> str:
        # default=repr: a provider note's value that JSON cannot hold is kept as its text.
        return json.dumps(
            [_completion_json(c) for c in self.completions], ensure_ascii=False, default=repr
        )

    @classmethod
    def from_json(cls, text: str) -> Entry:
        """An entry from its JSON (`ValueError` for anything else: a damaged entry is a miss)."""
        data = json.loads(text)
        if not isinstance(data, list) or not data:
            raise ValueError("a cache entry is a non-empty list of replies")
        return cls(tuple(_completion_of(item) for item in data))


@dataclass(frozen=True, slots=True)
class CacheStats:
    """What a store holds and how it has served."""

    entries: int
    bytes: int
    hits: int
    misses: int
    expired: int = 0

    def lines(self) -> list[str]:
        rate = self.hits / (self.hits + self.misses) if self.hits + self.misses else 0.0
        return [
            f"{self.entries:,} entries, {self.bytes:,} bytes",
            f"{self.hits:,} hits, {self.misses:,} misses (hit rate {rate:.0%}), "
            f"{self.expired:,} expired",
        ]


class Cache(Protocol):
    """What a store implements (`get` and `put` are called from any thread)."""

    def get(self, key: str) -> Entry | None:
        """The live entry for `key`, or `None` (missing or expired: a miss)."""
        ...

    def put(self, key: str, entry: Entry) -> None:
        """Store `entry` under `key` (replacing any), for the store's time-to-live."""
        ...

    def discard(self, key: str) -> None:
        """Drop `key` (a stored answer today's checks refuse)."""
        ...

    def stats(self) -> CacheStats:
        """What the store holds and how it has served."""
        ...

    def clear(self) -> int:
        """Drop every entry; how many there were."""
        ...


def default_path() -> Path:
    """Where `cache=True` keeps its SQLite file: `$SDK_CACHE_DIR`, else the user's cache folder
    (`$XDG_CACHE_HOME/structured-sdk`, `~/.cache/structured-sdk`)."""
    folder = os.environ.get("SDK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "structured-sdk"
    )
    return Path(folder) / "responses.db"


def cache_key(scope: Mapping[str, Any], request: CompletionRequest, wire: Any) -> str:
    """The key of a request: sha256 over the provider's scope (family, model, settings), the
    request's every field that reaches the provider, the schema as the wire carries it (`wire`),
    and the fingerprint of what is asked for."""
    asked = [
        FORMAT,
        _canonical(scope),
        [_message_json(m) for m in request.messages],
        request.system,
        request.max_tokens,
        _canonical(request.options),
        _canonical(request.extra_body),
        request.reasoning,
        request.source,
        *_output_json(request.output),
        _canonical(wire),
    ]
    blob = json.dumps(asked, ensure_ascii=False, separators=(",", ":"), default=repr)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _output_json(output: Output) -> list[Any]:
    """What is asked for: the contract's or grammar's fingerprint, or the tools offered (and
    how), in the five places the key has always kept them."""
    match output:
        case JsonDocument():
            return [output.info.fingerprint, None, [], _choice_json("auto"), None]
        case GrammarSentence(grammar):
            return [None, grammar.fingerprint(), [], _choice_json("auto"), None]
        case ToolOffer(tools, choice, parallel):
            return [None, None, [_tool_json(t) for t in tools], _choice_json(choice), parallel]
        case FreeText():
            return [None, None, [], _choice_json("auto"), None]
        case unknown:
            assert_never(unknown)


def _canonical(value: Any) -> str | None:
    """A mapping or other value as JSON with sorted keys (so their order never changes a key)."""
    if value is None or (isinstance(value, Mapping) and not value):
        return None
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)


# --- JSON forms ---


def _message_json(message: Message) -> list[Any]:
    if isinstance(message.content, str) and not message.tool_calls and not message.tool_results:
        return [message.role, message.content]
    parts: list[Any] = []
    for part in message.parts:
        if isinstance(part, Text):
            parts.append(part.text)
        else:  # an image or a PDF: its bytes (hashed) or its URL
            data = getattr(part, "data", None)
            digest = hashlib.sha256(data).hexdigest() if data is not None else None
            parts.append([type(part).__name__, digest, part.url])
    return [
        message.role,
        parts,
        [[c.id, c.tool, c.text] for c in message.tool_calls],
        [[r.call_id, r.content, r.is_error] for r in message.tool_results],
    ]


def _tool_json(tool: Tool) -> list[Any]:
    from sdk.schema.canonical import schema_info

    return [tool.name, tool.description, schema_info(tool.arguments).fingerprint]


def _choice_json(choice: Any) -> Any:
    return choice.name if isinstance(choice, Tool) else choice


def _completion_json(completion: Completion) -> dict[str, Any]:
    return {
        "text": completion.text,
        "stop_reason": completion.stop_reason.value,
        "raw_stop_reason": completion.raw_stop_reason,
        "usage": asdict(completion.usage),
        "model": completion.model,
        "request_id": completion.request_id,
        "refusal": completion.refusal,
        "refusal_category": completion.refusal_category,
        "reasoning": completion.reasoning,
        "tool_calls": [[c.id, c.tool, c.text] for c in completion.tool_calls],
        "notes": [[n.pointer, n.received, n.written, n.kind] for n in completion.notes],
        "diagnostics": _diagnostics_json(completion.diagnostics),
    }


def _completion_of(data: Any) -> Completion:
    if not isinstance(data, dict):
        raise ValueError("a stored reply is an object")
    usage = data.get("usage")
    calls = data.get("tool_calls") or []
    return Completion(
        text=_optional(data.get("text")),
        stop_reason=StopReason(data["stop_reason"]),
        raw_stop_reason=_optional(data.get("raw_stop_reason")),
        usage=Usage(**usage) if isinstance(usage, dict) else Usage(),
        model=_optional(data.get("model")),
        request_id=_optional(data.get("request_id")),
        refusal=_optional(data.get("refusal")),
        refusal_category=_optional(data.get("refusal_category")),
        reasoning=_optional(data.get("reasoning")),
        tool_calls=tuple(ToolCall(str(i), str(t), str(x)) for i, t, x in calls),
        notes=tuple(Note(str(p), r, w, str(k)) for p, r, w, k in data.get("notes") or []),
        diagnostics=_diagnostics_of(data.get("diagnostics")),
    )


def _diagnostics_json(diagnostics: Any) -> dict[str, Any] | None:
    if not isinstance(diagnostics, ConstraintDiagnostics):
        return None
    return {
        "threshold": diagnostics.threshold,
        "fields": [asdict(item) for item in diagnostics.fields],
        # Steps as rows, not objects: a long reply has thousands of them.
        "steps": [
            [s.token, s.text, s.offset, s.mass, s.allowed, s.pointer] for s in diagnostics.steps
        ],
    }


def _diagnostics_of(data: Any) -> ConstraintDiagnostics | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError("stored diagnostics are an object")
    return ConstraintDiagnostics(
        fields=[FieldDiagnostics(**item) for item in data["fields"]],
        steps=[
            TokenStep(int(t), str(x), int(o), float(m), int(a), str(p))
            for t, x, o, m, a, p in data["steps"]
        ],
        threshold=float(data["threshold"]),
    )


def _optional(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"a stored reply field is {type(value).__name__}, not a string")
    return value
