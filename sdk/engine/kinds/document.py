"""Documents: a contract's JSON value, or a top-level list or union through its envelope.

One parse serves the final value and every streamed list item: both go through `parse` with the
same source, context, casing policy and absent-null rule of the provider's dialect, so an item
the stream shows is one the `Result` holds.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any

from sdk._result import Result
from sdk._result import result_of
from sdk._values.pointer import lookup
from sdk._values.pointer import replace_at
from sdk._values.records import Note
from sdk.confidence import Confidence
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
from sdk.errors import LowConfidence
from sdk.errors import StructuredOutputError
from sdk.parsing import Parsed
from sdk.parsing import parse
from sdk.parsing.incremental import Partial
from sdk.parsing.incremental import PartialReader
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import JsonDocument
from sdk.providers._base import Message
from sdk.providers._base import TextDelta
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import schema_info
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.providers._provider import Provider

__all__ = ["CONFIDENCE_NOTE", "LOW_CONFIDENCE", "Document"]

LOW_CONFIDENCE = "low_confidence"
"""`Note.kind` of a value `min_confidence` turned into `null` (`received`: the value)."""
CONFIDENCE_NOTE = "confidence"
"""`Note.kind` of a `min_confidence` that could not be applied (`received`: the floor)."""

def _with_null(value: Any, pointer: str) -> Any:
    """A copy of the JSON `value` with `null` at `pointer`, a value it holds (`LookupError`
    where the pointer names nothing). A copy, unlike guided abstention's `_abstained`: the
    floor first asks, pointer by pointer, whether the contract can hold a null there
    (`_nullable`), and the value asked about must stay as it was."""
    if pointer == "":
        return None
    copied = json.loads(json.dumps(value))
    replace_at(copied, pointer, None)
    return copied


def _at(value: Any, pointer: str) -> Any:
    return lookup(value, pointer)[1]


def _held(value: Any, pointer: str) -> bool:
    """Whether the JSON `value` holds something other than `null` at `pointer`."""
    return _at(value, pointer) is not None


@dataclass(frozen=True, slots=True)
class Document:
    """A contract's value; `envelope` set for a top-level list or union (unwrapped in the
    result)."""

    contract: type[Contract]
    envelope: Envelope | None
    parsing: Parsing

    @property
    def name(self) -> str:
        return self.contract.__name__

    @property
    def schema(self) -> SchemaInfo:
        return schema_info(self.contract)

    def vet(self, provider: Provider) -> None:
        """Every provider carries JSON documents."""

    def request(self, ask: Ask) -> CompletionRequest:
        return ask.request(JsonDocument(self.contract))

    answer_request = request  # (one phase: its request is the answer's)

    def judge(self, completion: Completion, provider: Provider) -> Accepted[Any]:
        return self.accept(self.parse(self.contract, completion, provider), completion, provider)

    def accept(
        self,
        parsed: Parsed[Any],
        completion: Completion,
        provider: Provider,
        *,
        text: str | None = None,
    ) -> Accepted[Any]:
        """`parsed` (a reply of `completion`) as accepted, `min_confidence` applied. `text`: what
        the model wrote, where `parsed` was read from a rewritten document (guided abstention's
        nulls): the confidence is read from the text the tokens spell (default `parsed.text`)."""
        written = parsed.text if text is None else text
        accepted = Accepted(
            parsed.value, written, parsed.stop_reason, parsed.raw_stop_reason, parsed.notes
        )
        if self.parsing.min_confidence is None:
            return accepted
        return self._floored(accepted, completion, provider, self.parsing.min_confidence)

    def confidence(self, text: str, completion: Completion) -> Confidence | None:
        """The confidence of the document `text` of `completion` (calibrated where the call
        gave a calibration), by pointer into this contract's JSON."""
        confidence = confidence_of(text, completion.tokens)
        calibration = self.parsing.confidence_calibration
        if confidence is None or calibration is None:
            return confidence
        return calibration.apply(confidence)

    def _floored(
        self, accepted: Accepted[Any], completion: Completion, provider: Provider, floor: float
    ) -> Accepted[Any]:
        """`min_confidence`: a value under the floor abstains (`null`, a `low_confidence`
        note) where the contract can hold `null` there, and fails the call (`LowConfidence`)
        where it cannot. On a route with no token probabilities, a note says it was not
        applied."""
        confidence = self.confidence(accepted.text, completion)
        if confidence is None:
            why = provider.unreported_probabilities
            said = Note("", floor, f"not applied: {why}", kind=CONFIDENCE_NOTE)
            return replace(accepted, notes=[*accepted.notes, said])
        value = accepted.value.model_dump(mode="json")
        low = {
            pointer: probability
            for pointer, probability in confidence.items()
            if probability < floor
            and confidence.details[pointer].kind != "null"
            and _held(value, pointer)  # not nulled already (an anchor's abstention)
        }
        if not low:
            return accepted
        stuck = [pointer for pointer in low if not self._nullable(value, pointer, provider)]
        if stuck:
            shown = ", ".join(f"{p} ({low[p]:.3f})" for p in stuck)
            raise LowConfidence(
                f"{self.name}: confidence under min_confidence {floor:g} where the contract "
                f"cannot hold null: {shown}",
                confidence={p: low[p] for p in stuck},
                value=accepted.value,
                text=completion.text,
                stop_reason=completion.stop_reason,
                raw_stop_reason=completion.raw_stop_reason,
            )
        notes = [Note(p, _at(value, p), None, kind=LOW_CONFIDENCE) for p in low]
        for pointer in low:
            value = _with_null(value, pointer)
        again = Completion(json.dumps(value, ensure_ascii=False), StopReason.END_TURN, None)
        parsed = self.parse(self.contract, again, provider)
        return Accepted(parsed.value, accepted.text, accepted.stop_reason,
                        accepted.raw_stop_reason, [*accepted.notes, *notes])  # fmt: skip

    def _nullable(self, value: Any, pointer: str, provider: Provider) -> bool:
        """Whether the contract holds `value` with `null` at `pointer`."""
        text = json.dumps(_with_null(value, pointer), ensure_ascii=False)
        try:
            self.parse(self.contract, Completion(text, StopReason.END_TURN, None), provider)
        except StructuredOutputError:
            return False
        return True

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

    def feedback(
        self, error: InvalidOutput, completion: Completion, provider: Provider
    ) -> tuple[Message, ...]:
        # A route that holds the reply to no schema is told the contract's type again.
        typed = not provider.holds_schema
        return feedback_turns(self.contract, error, self.parsing.whole_reply, typed)

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
        confidence = self.confidence(accepted.text, completion)
        if confidence is not None:
            # A null put in by an abstention was not decoded: it has no confidence of its own.
            confidence = confidence.without(
                n.pointer for n in accepted.notes if n.kind in (LOW_CONFIDENCE, "abstained")
            )
            if self.envelope is not None:
                confidence = confidence.rebased(f"/{self.envelope.field}")
        return result_of(
            {
                "value": value,
                "schema": self.schema,
                "removed": list(wire.removed) if wire is not None else [],
                "diagnostics": completion.diagnostics,
                "confidence": confidence,
                "reasoning": ending.reasoning,
                "cost": ending.cost,
                **ending.fields(accepted),
            }
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
            shown.append(_stamped(item, partial.attempt))
        return shown


def _stamped(item: Contract, attempt: int) -> Contract:
    """A streamed list item that says which attempt it belongs to, as the document's snapshot
    it came from does (`item.attempt`, 1 first; after a retry the list starts again).

    The number goes in the instance's `__dict__` beside the fields, where Pydantic keeps a
    `cached_property` too: it is no field (not in `model_dump`, the JSON or the repr, and
    equality compares fields alone), so the item equals the `Result`'s. A contract with a field
    named `attempt` keeps its field: its items do not carry the stream's number.
    """
    if "attempt" not in type(item).model_fields:
        item.__dict__["attempt"] = attempt
    return item
