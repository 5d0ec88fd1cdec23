"""Two-phase reasoning, around any output kind: first an unconstrained request in which the model
works the problem through in prose (no schema, grammar or tools sent), then the wrapped kind's
request with that working in the conversation. The working's reply is judged like any output,
stop reason first: a cut or refused working fails the way a cut or refused document does.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any
from typing import Generic
from typing import TypeVar

from sdk.engine.kinds._kind import Accepted
from sdk.engine.kinds._kind import Ask
from sdk.engine.kinds._kind import Ending
from sdk.engine.kinds._kind import NextPhase
from sdk.engine.kinds._kind import OutputKind
from sdk.engine.kinds._kind import Quiet
from sdk.engine.kinds._kind import StreamView
from sdk.engine.kinds._kind import stop_fields
from sdk.errors import InvalidOutput
from sdk.parsing.parser import check_stop
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import FreeText
from sdk.providers._base import Message
from sdk.schema.canonical import SchemaInfo
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.providers._provider import Provider

__all__ = ["TwoPhase"]

T = TypeVar("T")

# The working is asked for in prose (no document yet), then transcribed.
WORK_IT_THROUGH = (
    "Before answering, work the problem through step by step in plain prose: what the question "
    "asks, the facts that matter, any comparison or calculation. Do not write the final answer "
    "in JSON or any other format yet."
)
TRANSCRIBE = (
    "Now give the final answer, following your working above exactly, as the requested output "
    "and nothing else."
)


@dataclass(frozen=True, slots=True)
class TwoPhase(Generic[T]):
    """`inner` after an unconstrained working phase (see the module docstring): the working
    phase's kind, and (`working` given) the transcribing phase's."""

    inner: OutputKind[T]
    working: str | None = None
    """The working, once the first phase has answered."""

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def schema(self) -> SchemaInfo:
        return self.inner.schema

    @property
    def in_working_phase(self) -> bool:
        """Whether the next request is the working (free text)."""
        return self.working is None

    def vet(self, provider: Provider) -> None:
        self.inner.vet(provider)

    def request(self, ask: Ask) -> CompletionRequest:
        if self.working is None:
            # Free text: no constraint, no feedback (a retry of the working sends it again).
            return ask.shared.request((*ask.turns, Message("user", WORK_IT_THROUGH)), FreeText())
        worked = (
            *ask.turns,
            Message("user", WORK_IT_THROUGH),
            Message("assistant", self.working),
            Message("user", TRANSCRIBE),
        )
        return self.inner.request(replace(ask, turns=worked))

    def answer_request(self, ask: Ask) -> CompletionRequest:
        """The transcribing request (with no working yet: an empty one), which names what is
        asked for and holds every field the working's request holds."""
        return (
            self.request(ask)
            if self.working is not None
            else replace(self, working="").request(ask)
        )

    def judge(self, completion: Completion, provider: Provider) -> Accepted[Any] | NextPhase:
        if self.working is not None:
            return self.inner.judge(completion, provider)
        text = completion.text if completion.text is not None else ""
        check_stop(text, **stop_fields(completion, {StopReason.END_TURN}))
        return NextPhase(TwoPhase(self.inner, working=text))

    def feedback(
        self, error: InvalidOutput, completion: Completion, provider: Provider
    ) -> tuple[Message, ...]:
        return self.inner.feedback(error, completion, provider)

    def view(self, attempt: int, provider: Provider) -> StreamView:
        return Quiet() if self.working is None else self.inner.view(attempt, provider)

    def result(self, accepted: Accepted[Any], ending: Ending) -> T:
        return self.inner.result(accepted, replace(ending, reasoning=self.working))
