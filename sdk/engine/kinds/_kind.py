"""What every output kind implements, and the small values it hands the attempts machine.

An output kind is what a call asks for and how a reply is judged: a document (a contract, a
list, a union), a grammar's sentence, tool calls, or a wrapper around one of them (two-phase
reasoning). It knows nothing of retries, budgets, deadlines or fallback (the attempts machine's)
and does no I/O. Every method that reads a reply reads the stop reason first.

A kind is an immutable description: judging a reply changes nothing in it, so one kind serves
any number of calls, and the response cache replays a stored answer through it as it is. What
changes during a call is the attempts machine's: a multi-phase kind answers a reply with the
kind of the next phase (`NextPhase.next`), which the machine holds from then on.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Generic
from typing import Literal
from typing import Protocol
from typing import TypeVar

from sdk._values.records import Note
from sdk._values.records import Usage
from sdk.calibration import Calibration
from sdk.engine.conversation import FEEDBACK_WHOLE_REPLY
from sdk.errors import Attempt
from sdk.errors import InvalidOutput
from sdk.parsing.parser import EnumCase
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._base import Output
from sdk.providers._base import TextDelta
from sdk.providers._profile import Sampling
from sdk.schema.canonical import SchemaInfo
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from decimal import Decimal

    from sdk.providers._provider import Provider

__all__ = [
    "Abstention",
    "Accepted",
    "Ask",
    "Ending",
    "NextPhase",
    "OutputKind",
    "Parsing",
    "Reasoning",
    "Shared",
    "StreamView",
    "stop_fields",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

Reasoning = Literal["two_phase", "native"]
"""How the model reasons before the constrained output: `"two_phase"` is a first, unconstrained
call in which it works the problem through in prose, then the constrained call that transcribes
that working into the contract; `"native"` is the provider's own thinking channel before the
output (Anthropic extended thinking, OpenAI reasoning with a summary)."""

Abstention = Literal["none", "guided"]
"""Whether a call abstains where the document is silent (`"guided"`) or not (`"none"`)."""


@dataclass(frozen=True, slots=True)
class Shared:
    """The request fields every kind sends as they are (the kind adds its own constraint): the
    call spec's transport projection."""

    max_tokens: int
    system: str | None
    options: Sampling
    """The sampling options set (`temperature`, ...), for the provider's codec to place."""
    extra_body: dict[str, Any]
    source: str | None
    reasoning: Reasoning | None
    """`"native"` asks for the provider's own thinking channel."""
    accept_weakened_schema: bool = False
    """Send a schema the target would weaken (`CompletionRequest.accept_weakened`)."""

    def request(self, messages: tuple[Message, ...], output: Output) -> CompletionRequest:
        """A request for `messages`, asking for `output`."""
        return CompletionRequest(
            output=output,
            messages=messages,
            max_tokens=self.max_tokens,
            system=self.system,
            options=self.options,
            extra_body=self.extra_body,
            source=self.source,
            reasoning=self.reasoning == "native",
            accept_weakened=self.accept_weakened_schema,
        )


@dataclass(frozen=True, slots=True)
class Ask:
    """What the next request is made of: the conversation, the last retry's feedback (which
    replaces the one before), the fields every kind sends, and the provider it goes to."""

    turns: tuple[Message, ...]
    feedback: tuple[Message, ...]
    shared: Shared
    provider: Provider

    def request(self, output: Output) -> CompletionRequest:
        """The conversation and its feedback, asking for `output`."""
        return self.shared.request(self.turns + self.feedback, output)


@dataclass(frozen=True, slots=True)
class Parsing:
    """How the defensive parser reads this call's replies (what a kind needs besides the reply:
    the same for the final value and for every streamed item)."""

    source: str | None
    context: dict[str, Any] | None
    enum_case: EnumCase
    min_confidence: float | None = None
    """A value whose confidence is under it abstains (`null`, with a note) where the contract
    lets it, and fails the call (`LowConfidence`) where it does not
    (`sdk.engine.kinds.document`)."""
    confidence_calibration: Calibration | None = None
    """Maps each value's confidence to the probability of being right (`sdk.calibration`)."""
    whole_reply: int = FEEDBACK_WHOLE_REPLY
    """The longest invalid reply (in characters) a retry sends back whole; past it, the feedback
    quotes an excerpt around each problem instead (`feedback_message`)."""

    def fields(self) -> dict[str, Any]:
        """The parser's keyword arguments these settle (`parse`, `parse_grammar`)."""
        return {"source": self.source, "context": self.context}


@dataclass(frozen=True, slots=True)
class Accepted(Generic[T]):
    """A reply that passed every check: the value and what it was decided on."""

    value: T
    text: str
    stop_reason: StopReason
    raw_stop_reason: str | None
    notes: list[Note] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NextPhase:
    """A reply that moved a multi-phase kind on (two-phase reasoning's working): the next
    request, of the `next` kind, goes out at once, spending no retry."""

    next: OutputKind[Any]


@dataclass(frozen=True, slots=True)
class Ending:
    """What the attempts machine knows when the call is done, for the kind's result."""

    attempts: list[Attempt]
    usage: Usage
    provider: Provider
    completion: Completion
    reasoning: str | None
    cost: Decimal | None
    cached_usage: Usage | None = None
    """Set when the answer came from the response cache: what it cost when it was made."""
    notes: tuple[Note, ...] = ()
    """What the call itself met on the way (a damaged cache entry replaced, an answer the
    cache could not store): they lead `Result.notes`."""

    def fields(self, accepted: Accepted[Any]) -> dict[str, Any]:
        """What every result says of how it was decided (`Result` and `ToolCalls` alike)."""
        completion = self.completion
        return {
            "stop_reason": accepted.stop_reason,
            "raw_stop_reason": accepted.raw_stop_reason,
            "text": accepted.text,
            # what the call met first, then what the provider did, then the parser
            "notes": [*self.notes, *completion.notes, *accepted.notes],
            "usage": self.usage,
            "attempts": self.attempts,
            "provider": self.provider.name,
            "model": completion.model or self.provider.model,
            "request_id": completion.request_id,
            "cached": self.cached_usage is not None,
            "cached_usage": self.cached_usage,
        }


def stop_fields(
    completion: Completion, clean_stops: frozenset[StopReason] | set[StopReason]
) -> dict[str, Any]:
    """What the parser decides the stop reason on (step 1, before the text): the keyword
    arguments `parse`, `parse_grammar` and `check_stop` share."""
    return {
        "stop_reason": completion.stop_reason,
        "raw_stop_reason": completion.raw_stop_reason,
        "clean_stops": clean_stops,
        "refusal": completion.refusal,
        "refusal_category": completion.refusal_category,
    }


class StreamView(Protocol):
    """What a stream shows of one attempt: deltas in, things to yield out."""

    def feed(self, delta: TextDelta) -> list[Any]:
        """Read a delta; what it shows (snapshots, items)."""
        ...

    def finish(self) -> list[Any]:
        """What the end of the stream shows, before the call's result."""
        ...


class Quiet:
    """A view that shows nothing (the working of two-phase reasoning)."""

    def feed(self, delta: TextDelta) -> list[Any]:
        return []

    def finish(self) -> list[Any]:
        return []


class OutputKind(Protocol[T_co]):
    """One kind of output (see the module docstring). `T_co` is what the call returns."""

    @property
    def name(self) -> str:
        """What is asked for, in messages and logs: a contract's or grammar's name, `tool
        call`."""
        ...

    @property
    def schema(self) -> SchemaInfo:
        """Name, version and fingerprint of what is asked for."""
        ...

    def vet(self, provider: Provider) -> None:
        """Refuse, before anything is sent, what `provider` cannot carry
        (`UnsupportedRequest`)."""
        ...

    def request(self, ask: Ask) -> CompletionRequest:
        """The next request: what `ask` holds, with this kind's output."""
        ...

    def answer_request(self, ask: Ask) -> CompletionRequest:
        """The request whose reply is the answer: what the response cache keys a call by.
        `request(ask)` for a kind of one phase; a kind that asks for something else first
        (two-phase reasoning's working, which names no contract, grammar or tools) gives the
        request of its answering phase, so that two calls asking for different outputs never
        share a key."""
        ...

    def judge(self, completion: Completion, provider: Provider) -> Accepted[Any] | NextPhase:
        """Read a reply, stop reason first: accepted, a phase moved on, or a typed error
        raised (`StructuredOutputError`, with the text and stop reason on it)."""
        ...

    def feedback(
        self, error: InvalidOutput, completion: Completion, provider: Provider
    ) -> tuple[Message, ...]:
        """The turns that tell the model what was wrong with its last reply, `completion`,
        which failed with `error` (bounded)."""
        ...

    def view(self, attempt: int, provider: Provider) -> StreamView:
        """A fresh reader of what a stream shows of attempt `attempt` (1 first)."""
        ...

    def result(self, accepted: Accepted[Any], ending: Ending) -> T_co:
        """What the call returns."""
        ...
