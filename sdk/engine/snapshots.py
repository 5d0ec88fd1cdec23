"""What a client's stream shows of one attempt: `Partial` snapshots, completed list items, the
growing text of a grammar's sentence, or nothing (the working of two-phase reasoning)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sdk.errors import InvalidOutput
from sdk.parsing.incremental import Partial, PartialReader
from sdk.providers._base import TextDelta

if TYPE_CHECKING:
    from sdk.contract import Contract
    from sdk.engine.envelope import Envelope
    from sdk.grammar import Grammar

__all__ = ["Snapshots", "StreamView", "Streamed"]


class Streamed(Protocol):
    """What `Snapshots` reads of the call it shows (`sdk.engine.call.Call` has it)."""

    @property
    def working(self) -> bool:
        """Whether the attempt is the working of two-phase reasoning."""
        ...

    grammar: Grammar | None
    contract: type[Contract] | None
    envelope: Envelope | None
    attempts: list[Any]

    def validated_item(self, item: Any) -> Any:
        """A streamed list item checked as its own document, or `None`."""
        ...


class StreamView(Protocol):
    """What a client's stream shows of one attempt: deltas in, things to yield out."""

    def feed(self, delta: TextDelta) -> list[Any]:
        """Read a delta; what it shows (snapshots, items)."""
        ...

    def finish(self) -> list[Any]:
        """What the end of the stream shows, before the call's result."""
        ...


class Snapshots:
    """What a stream shows of one attempt's growing output, chunk by chunk.

    - a contract: `Partial` snapshots (never validated), going quiet instead of raising when
      the text is not JSON: a refusal streams prose and a cut document ends early, and the stop
      reason, which arrives last, decides what that means;
    - a top-level `list[Item]`: each item, validated, as soon as it is complete (in linear
      time: the reader keeps its state between chunks);
    - a grammar: the text so far;
    - the working of two-phase reasoning: nothing.
    """

    def __init__(self, call: Streamed) -> None:
        self._call = call
        self._reader: PartialReader[Any] | None = None
        self._text: list[str] | None = None
        self._next_item = 0
        if call.working:
            return
        if call.grammar is not None:
            self._text = []
        elif call.contract is not None:
            self._reader = PartialReader(call.contract, attempt=len(call.attempts) + 1)

    def feed(self, delta: TextDelta) -> list[Any]:
        """Read a chunk; what it shows (none, one snapshot, or several completed items)."""
        text = delta.text
        if self._text is not None:
            self._text.append(text)
            return ["".join(self._text)]
        if self._reader is None:
            return []
        try:
            partial = self._reader.feed(text)
        except InvalidOutput:
            self._reader = None
            return []
        if partial is None:
            return []
        envelope = self._call.envelope
        if envelope is None:
            return [partial]
        if not envelope.is_list:
            return []  # a union's value is shown once it is whole: in the Result
        return self._items(partial, envelope.field)

    def finish(self) -> list[Any]:
        """What the end of the stream shows (nothing more: the `Result` follows)."""
        return []

    def _items(self, partial: Partial[Any], field: str) -> list[Any]:
        shown = []
        while partial.is_complete(f"/{field}/{self._next_item}"):
            item = self._call.validated_item(partial.get(f"/{field}/{self._next_item}"))
            self._next_item += 1
            if item is not None:
                shown.append(item)
        return shown
