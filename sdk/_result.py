"""What a call returns: `Result` (a document or a grammar's sentence) or `ToolCalls`, the
`Attempt`s it took, and token `Usage`."""

from __future__ import annotations

from dataclasses import MISSING
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from decimal import Decimal
from typing import Any
from typing import Generic
from typing import TypeVar

from sdk._message import Message
from sdk._tools import ToolCall
from sdk._values.records import Note
from sdk._values.records import PromptInfo
from sdk._values.records import Usage
from sdk.confidence import Confidence
from sdk.diagnostics import ConstraintDiagnostics
from sdk.errors import Attempt
from sdk.schema.canonical import SchemaInfo
from sdk.schema.dialects import Removal
from sdk.stop_reason import StopReason

__all__ = ["Attempt", "Result", "ToolCalls", "Usage", "result_of"]

T = TypeVar("T")


@dataclass(frozen=True)
class Result(Generic[T]):
    """A value that passed every check, and everything it was decided on: a contract's value,
    or the text of a grammar's sentence (`Result[str]`)."""

    value: T
    stop_reason: StopReason
    text: str
    notes: list[Note]
    usage: Usage
    attempts: list[Attempt]
    schema: SchemaInfo
    provider: str
    model: str | None
    raw_stop_reason: str | None = None
    request_id: str | None = None
    removed: list[Removal] = field(default_factory=list)
    """What the provider's wire dialect removed from the schema (still enforced by the parser)."""
    diagnostics: ConstraintDiagnostics | None = None
    """Constraint diagnostics, where the provider can give them (local models)."""
    reasoning: str | None = None
    """`reasoning="two_phase"`: the model's working, from the unconstrained first call."""
    cost: Decimal | None = None
    """What the call's attempts cost in US dollars, from the `genai-prices` table (the `cost`
    extra); `None` when the package is absent or a model that answered is not in its table."""
    cached: bool = False
    """Whether the value came from the response cache (`cache=`): no request was sent, so
    `usage` and `attempts` are empty; the stored answer was judged again by today's parser."""
    cached_usage: Usage | None = None
    """A cached result: what the stored answer cost when it was made."""
    prompt: PromptInfo | None = None
    """The prompt template the call was asked with (`prompt=MyPrompt(...)`): name, version,
    fingerprint; `None` for a plain prompt or messages."""
    confidence: Confidence | None = None
    """Per value, by JSON pointer (`result.confidence["/lines/0/total"]`), a probability in
    [0, 1] computed from the probabilities of the tokens the value was decoded from
    (`sdk.confidence`: what it means, masked and unmasked); calibrated where a calibration was
    given. `None` where the route reports no token probabilities (a hosted API that was not
    asked for them, or has none), and for a grammar's sentence, which has no values."""


def result_of(values: dict[str, Any]) -> Result[Any]:
    """`Result(**values)`, made without the frozen dataclass's `__init__` (one
    `object.__setattr__` per field, 21 of them: ~2 us of every call, a cache hit's too): the
    same instance, defaults filled as `__init__` fills them, a missing or unknown field a
    `TypeError` as there. `Result` has no `__post_init__`: nothing is skipped."""
    given = _RESULT_DEFAULTS | values  # (a new dict: the instance's own, below)
    for name, factory in _RESULT_FACTORIES:
        if name not in given:
            given[name] = factory()
    # By name: one misspelt and one missing have the length. (The same test as comparing the
    # key sets, without making a set of `given`'s keys: `given` holds every field and no other
    # exactly when it has as many names and each is a field.)
    if len(given) != len(_RESULT_FIELDS) or not _RESULT_FIELDS.issuperset(given):
        missing = sorted(_RESULT_FIELDS - given.keys())
        unknown = sorted(given.keys() - _RESULT_FIELDS)
        raise TypeError(f"Result() missing fields {missing}, unknown fields {unknown}")
    made: Result[Any] = object.__new__(Result)
    object.__setattr__(made, "__dict__", given)  # (made here, used by no one else: not copied)
    return made


# `result_of` skips `__init__`, so it would skip a `__post_init__` check too: there must be none.
assert not hasattr(Result, "__post_init__"), "result_of would skip Result.__post_init__"
_RESULT_FIELDS = frozenset(f.name for f in fields(Result))
_RESULT_DEFAULTS = {f.name: f.default for f in fields(Result) if f.default is not MISSING}
_RESULT_FACTORIES = tuple(
    (f.name, f.default_factory) for f in fields(Result) if f.default_factory is not MISSING
)


@dataclass(frozen=True)
class ToolCalls:
    """What `call_tools` returns: the calls (each one's arguments passed every check), any
    prose the model wrote, and everything it was decided on."""

    calls: list[ToolCall]
    text: str
    stop_reason: StopReason
    usage: Usage
    attempts: list[Attempt]
    provider: str
    model: str | None
    raw_stop_reason: str | None = None
    request_id: str | None = None
    notes: list[Note] = field(default_factory=list)
    removed: dict[str, list[Removal]] = field(default_factory=dict)
    """Per tool name: what the provider's dialect removed from its arguments' schema (still
    enforced by the parser)."""
    cached: bool = False
    """Whether the calls came from the response cache (see `Result.cached`)."""
    cached_usage: Usage | None = None
    """Cached calls: what the stored answer cost when it was made."""
    prompt: PromptInfo | None = None
    """The prompt template the call was asked with (see `Result.prompt`)."""

    def message(self) -> Message:
        """The assistant turn that made these calls, to put in the conversation before the
        tool results (`Message("user", "", tool_results=...)`)."""
        return Message("assistant", self.text, tool_calls=tuple(self.calls))
