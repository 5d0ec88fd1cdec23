"""Grammars: a sentence of a `Grammar`'s language; the value is the text.

A reply without text is not the empty sentence: on OpenAI Responses the sentence is the input of
a forced custom tool call, and a reply that makes no such call (and neither refuses nor says
anything) has no text at all. That is `MissingToolCall`, retried with feedback saying so, even
for a grammar whose language holds `""`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import NoReturn

from sdk._result import Result
from sdk.engine.conversation import feedback_turns
from sdk.engine.kinds._kind import Accepted
from sdk.engine.kinds._kind import Ask
from sdk.engine.kinds._kind import Ending
from sdk.engine.kinds._kind import Parsing
from sdk.engine.kinds._kind import StreamView
from sdk.engine.kinds._kind import stop_fields
from sdk.errors import InvalidOutput
from sdk.errors import MissingToolCall
from sdk.errors import Violation
from sdk.grammar import Grammar
from sdk.parsing.parser import check_stop
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import GrammarSentence
from sdk.providers._base import Message
from sdk.providers._base import TextDelta
from sdk.providers._base import unsupported
from sdk.schema.canonical import SchemaInfo

if TYPE_CHECKING:
    from sdk.providers._provider import Provider

__all__ = ["GrammarOutput", "TextSnapshot"]


class TextSnapshot(str):
    """The text of a grammar's sentence so far, as a stream shows it: a `str`, which also says
    which attempt of the call it belongs to (`.attempt`, 1 first; after a retry the text starts
    again from empty)."""

    __slots__ = ("attempt",)
    attempt: int

    def __new__(cls, text: str, attempt: int) -> TextSnapshot:
        snapshot = super().__new__(cls, text)
        snapshot.attempt = attempt
        return snapshot


@dataclass(frozen=True, slots=True)
class GrammarOutput:
    """A sentence of `grammar`, recognized on the client whatever the provider enforced."""

    grammar: Grammar
    parsing: Parsing

    @property
    def name(self) -> str:
        return self.grammar.name

    @property
    def schema(self) -> SchemaInfo:
        return self.grammar.info()

    def vet(self, provider: Provider) -> None:
        if not provider.supports_grammar:
            raise unsupported(provider.name, "a grammar", ["json_schema documents"])

    def request(self, ask: Ask) -> CompletionRequest:
        return ask.request(GrammarSentence(self.grammar))

    answer_request = request  # (one phase: its request is the answer's)

    def judge(self, completion: Completion, provider: Provider) -> Accepted[str]:
        if completion.text is None:
            self._no_sentence(completion, provider)
        from sdk.grammar._recognize import parse_grammar  # the recognizer: on first use

        parsed = parse_grammar(
            self.grammar,
            completion.text,
            **stop_fields(completion, provider.clean_stops),
            **self.parsing.fields(),
        )
        return Accepted(
            parsed.value, parsed.text, parsed.stop_reason, parsed.raw_stop_reason, parsed.notes
        )

    def _no_sentence(self, completion: Completion, provider: Provider) -> NoReturn:
        """Raise for a reply without text: its stop reason first (a cut or refused reply is
        that), else `MissingToolCall` (module docstring), its text `None`."""
        stop, raw = check_stop("", **stop_fields(completion, provider.clean_stops))
        said = "the call was not made: call the tool, the whole sentence its input"
        raise MissingToolCall(
            f"the reply holds no {self.name} sentence: the call that carries it was not made",
            violations=[Violation("", said)],
            text=None,
            stop_reason=stop,
            raw_stop_reason=raw,
        )

    def feedback(
        self, error: InvalidOutput, completion: Completion, provider: Provider
    ) -> tuple[Message, ...]:
        return feedback_turns(self.grammar, error, self.parsing.whole_reply)

    def view(self, attempt: int, provider: Provider) -> StreamView:
        return _TextView(attempt)

    def result(self, accepted: Accepted[Any], ending: Ending) -> Result[str]:
        return Result(
            value=accepted.value,
            schema=self.schema,
            diagnostics=ending.completion.diagnostics,
            reasoning=ending.reasoning,
            cost=ending.cost,
            **ending.fields(accepted),
        )


class _TextView:
    """The text so far, after every delta."""

    def __init__(self, attempt: int) -> None:
        self._attempt = attempt
        self._parts: list[str] = []

    def feed(self, delta: TextDelta) -> list[Any]:
        self._parts.append(delta.text)
        return [TextSnapshot("".join(self._parts), self._attempt)]

    def finish(self) -> list[Any]:
        return []
