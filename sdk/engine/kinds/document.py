"""Documents: a contract's JSON value, or a top-level list or union through its envelope.

One parse serves the final value and every streamed list item: both go through `parse` with the
same source, context, casing policy and absent-null rule of the provider's dialect, so an item
the stream shows is one the `Result` holds.
"""

from __future__ import annotations

import json
import typing
from typing import TYPE_CHECKING
from typing import Any

from sdk._result import Result
from sdk.confidence import confidence_of
from sdk.contract import Contract
from sdk.engine.conversation import feedback_turns
from sdk.engine.envelope import Envelope
from sdk.engine.kinds._kind import Accepted
from sdk.engine.kinds._kind import Ask
from sdk.engine.kinds._kind import Ending
from sdk.engine.kinds._kind import Parsing
from sdk.engine.kinds._kind import Quiet
from sdk.engine.kinds._kind import StreamView
from sdk.engine.kinds._kind import stop_fields
from sdk.errors import InvalidOutput
from sdk.errors import StructuredOutputError
from sdk.parsing import Parsed
from sdk.parsing import parse
from sdk.parsing.incremental import Partial
from sdk.parsing.incremental import PartialReader
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._base import TextDelta
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import schema_info
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.providers._provider import Provider

__all__ = ["Document"]


class Document:
    """A contract's value; `envelope` set for a top-level list or union (unwrapped in the
    result)."""

    def __init__(
        self, contract: type[Contract], envelope: Envelope | None, parsing: Parsing
    ) -> None:
        self.contract = contract
        self.envelope = envelope
        self.parsing = parsing
        self.name = contract.__name__

    @property
    def schema(self) -> SchemaInfo:
        return schema_info(self.contract)

    def vet(self, provider: Provider) -> None:
        """Every provider carries JSON documents."""

    def request(self, ask: Ask) -> CompletionRequest:
        return ask.request(contract=self.contract)

    def judge(self, completion: Completion, provider: Provider) -> Accepted[Any]:
        parsed = self.parse(self.contract, completion, provider)
        return Accepted(
            parsed.value, parsed.text, parsed.stop_reason, parsed.raw_stop_reason, parsed.notes
        )

    def parse(
        self, contract: type[Contract], completion: Completion, provider: Provider
    ) -> Parsed[Any]:
        """The defensive parser with this call's settings (the final value and streamed items
        alike)."""
        wire = provider.wire_schema(self.contract)
        return parse(
            contract,
            completion.text if completion.text is not None else "",
            enum_case=self.parsing.enum_case,
            absent_nulls=wire is not None and bool(wire.nullable),
            **stop_fields(completion, provider.clean_stops),
            **self.parsing.fields(),
        )

    def feedback(self, error: InvalidOutput) -> tuple[Message, ...]:
        return feedback_turns(self.contract, error, self.parsing.whole_reply)

    def view(self, attempt: int, provider: Provider) -> StreamView:
        if self.envelope is not None and not self.envelope.is_list:
            return Quiet()  # a union's value is shown once it is whole: in the Result
        return _DocumentView(self, attempt, provider)

    def result(self, accepted: Accepted[Any], ending: Ending) -> Result[Any]:
        value = accepted.value
        if self.envelope is not None:
            value = self.envelope.unwrap(value)
        wire = ending.provider.wire_schema(self.contract)
        completion = ending.completion
        confidence = confidence_of(accepted.text, completion.tokens)
        if confidence is not None and self.envelope is not None:
            confidence = confidence.rebased(f"/{self.envelope.field}")
        return Result(
            value=value,
            schema=self.schema,
            removed=list(wire.removed) if wire is not None else [],
            diagnostics=completion.diagnostics,
            confidence=confidence,
            reasoning=ending.reasoning,
            cost=ending.cost,
            **ending.fields(accepted),
        )

    def item(self, data: Any, provider: Provider) -> Any:
        """A streamed list item, checked exactly as the final list checks it; `None` if it
        fails (the whole list then fails at the end, with its pointers)."""
        assert self.envelope is not None
        annotation = self.contract.model_fields[self.envelope.field].annotation
        item_contract = typing.get_args(annotation)[0]
        reply = Completion(json.dumps(data), StopReason.END_TURN, StopReason.END_TURN.value)
        try:
            return self.parse(item_contract, reply, provider).value
        except StructuredOutputError:
            return None


class _DocumentView:
    """`Partial` snapshots of a contract's document (never validated), or each list item,
    validated, as soon as it is complete. A document that is not JSON (a refusal streams prose)
    makes the view go quiet: the stop reason, which arrives last, decides what it means. So does
    an item that fails validation: the result will not hold this attempt's list, and an item
    shown after it would seem to stand in its place."""

    def __init__(self, document: Document, attempt: int, provider: Provider) -> None:
        self._document = document
        self._provider = provider
        self._reader: PartialReader[Any] | None = PartialReader(document.contract, attempt=attempt)
        self._next_item = 0

    def feed(self, delta: TextDelta) -> list[Any]:
        if self._reader is None:
            return []
        try:
            partial = self._reader.feed(delta.text)
        except InvalidOutput:
            self._reader = None
            return []
        if partial is None:
            return []
        envelope = self._document.envelope
        return [partial] if envelope is None else self._items(partial, envelope.field)

    def finish(self) -> list[Any]:
        return []

    def _items(self, partial: Partial[Any], field: str) -> list[Any]:
        shown = []
        while partial.is_complete(f"/{field}/{self._next_item}"):
            data = partial.get(f"/{field}/{self._next_item}")
            self._next_item += 1
            item = self._document.item(data, self._provider)
            if item is None:
                self._reader = None
                break
            shown.append(item)
        return shown

