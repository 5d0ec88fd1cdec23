"""Guided abstention (`abstention="guided"`), around a document: where the source is silent, a
field that may be `null` (or has an escape member) says so instead of inventing a value.

What it does depends on what the engine can do, and it never claims more:

- every provider: the request says, beside the system prompt, to write `null` (or the escape
  member) for what the document does not state and to copy stated values exactly; `Verbatim` and
  `SourceQuote` values are checked after parsing, as always;
- engines that ground while decoding (the embedded model, llama.cpp, vLLM): copied values can
  only be spans of the source, and every nullable value a span can fill is written
  (`grounding="values"`), so an id whose pattern no span matches can only be `null`;
- engines that also report the mass the grammar removed (the embedded model): a nullable field
  whose value began with too little of the model's own probability abstains (mass-aware,
  `sdk.abstention`), under the thresholds given (`abstention_thresholds=`: calibrated by `sdk
  eval --calibrate`, or set by hand) or, without any, `sdk.abstention.DEFAULT_THRESHOLD`; the
  value that results is judged again, whole, by the parser.

A copied value under an `Anchor` (`sdk.schema.grounding`) that the parser refuses only because it
is not where its anchor allows abstains too, on every route, at any depth (a nested object's
field, a list's item) where the contract lets it be `null` (the value judged again whole); a
value that may not be null, and a reply with any other fault, are retried as usual.

Every result says which signal decided: a note of kind `"abstention"` at the document (`""`)
whose `written` names the signal and where the thresholds came from (calibrated, by hand, the
default), or that the route reports no probabilities and the instruction and grounding alone
decided. Each field that abstained on the signal has its own note (kind `"abstained"`); one the
contract refuses to see null (a check across fields) keeps its value, with a `KEPT_NOTE`; a field
its anchor nulled also has a note of kind `"abstention"` at its pointer (`ANCHOR_SIGNAL` and the
parser's reason).

The choice, measured (`eval-results/notices/README.md`): mass-aware was the only mechanism that
raised item accuracy over the plain constrained arm (p = 0.031) with false abstention within
5%; evidence-gated decoding lost validity and presence-first abstained almost everywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any

from sdk._fitted import fingerprinted
from sdk._values.pointer import lookup
from sdk._values.pointer import replace_at
from sdk._values.pointer import resolve_ref
from sdk._values.records import Note
from sdk.abstention import Thresholds
from sdk.abstention import abstain
from sdk.abstention import value_start_masses
from sdk.contract.derived import escape_members
from sdk.contract.derived import nullable_fields
from sdk.engine.kinds._kind import Accepted
from sdk.engine.kinds._kind import Ask
from sdk.engine.kinds._kind import Ending
from sdk.engine.kinds._kind import StreamView
from sdk.engine.kinds.document import Document
from sdk.errors import CheckFailed
from sdk.errors import InvalidOutput
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import shared_schema
from sdk.schema.canonical import subschemas
from sdk.schema.grounding import ANCHOR_KEY
from sdk.schema.grounding import anchor_of
from sdk.schema.grounding import branch_anchors
from sdk.schema.grounding import grounded_kind
from sdk.stop_reason import StopReason

if TYPE_CHECKING:
    from sdk.providers._provider import Provider

__all__ = [
    "ABSTAIN",
    "ANCHOR_SIGNAL",
    "KEPT_NOTE",
    "MASS_SIGNAL",
    "NO_SIGNAL",
    "SIGNAL_NOTE",
    "Guided",
]

SIGNAL_NOTE = "abstention"
"""`Note.kind` of the note on every guided result saying which signal decided."""
KEPT_NOTE = "abstention_refused"
"""`Note.kind` of the note on a value the mass would have nulled, kept because the contract
refuses the document with that null (a check across fields): the value is as the model wrote
it, and the `SIGNAL_NOTE` note gives the contract's reason."""
MASS_SIGNAL = "surviving mass at each nullable copied value's first token"
ANCHOR_SIGNAL = "its anchor (x-anchor)"
NO_SIGNAL = (
    "the instruction and grounding alone: this route reports no token probabilities, so no "
    "value was judged on the model's hesitation"
)

ABSTAIN = (
    "Where the document does not state a field's value, write null for it (or its 'unknown' "
    "option) instead of guessing. Copy every stated value exactly as the document writes it."
)


@dataclass(frozen=True, slots=True)
class Guided:
    """`inner` with guided abstention (see the module docstring)."""

    inner: Document
    thresholds: Thresholds | None

    def __post_init__(self) -> None:
        """Refuse thresholds written by hand (set in code, or a file naming its contract
        without the fingerprint `sdk eval --calibrate` records: not calibrated on it, whose
        pointers are its fields) that name a field guided abstention never reads: a threshold
        there would change nothing, silently (`ValueError`, before anything is sent)."""
        if self.thresholds is None or fingerprinted(self.thresholds.calibration):
            return
        nullable = [f"/{name}" for name in nullable_fields(self.inner.contract)]
        unread = [pointer for pointer in self.thresholds.fields if pointer not in nullable]
        if unread:
            raise ValueError(
                f"abstention thresholds for {', '.join(map(repr, unread))}: not a field of "
                f"{self.inner.contract.__name__} that may be null; a threshold applies to "
                f"{', '.join(nullable)}"
            )

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def schema(self) -> SchemaInfo:
        return self.inner.schema

    def vet(self, provider: Provider) -> None:
        self.inner.vet(provider)

    @classmethod
    def check(cls, document: Document) -> None:
        """Refuse a contract with nowhere to abstain (`ValueError`, before anything is sent)."""
        contract = document.contract
        if (
            not nullable_fields(contract)
            and not any(escape_members(contract).values())
            and not _anchored_nullable(shared_schema(contract))
        ):
            raise ValueError(
                f'abstention="guided" needs a field that may be null, an enum with an escape '
                "member, or an anchored value (at any depth) that may be null; "
                f"{contract.__name__} has none (sdk.schema.widen makes one that has)"
            )

    def request(self, ask: Ask) -> CompletionRequest:
        shared = ask.shared
        system = f"{shared.system}\n\n{ABSTAIN}" if shared.system else ABSTAIN
        options = shared.options
        if options.grounding is None and "grounding" in ask.provider.codec.profile.options:
            options = replace(options, grounding="values")
        return self.inner.request(replace(ask, shared=replace(shared, system=system,
                                                               options=options)))  # fmt: skip

    answer_request = request  # (one phase: its request is the answer's)

    def judge(self, completion: Completion, provider: Provider) -> Accepted[Any]:
        accepted, anchored = self._anchored(completion, provider)
        if completion.diagnostics is None:
            said = Note("", "guided", NO_SIGNAL, kind=SIGNAL_NOTE)
            return replace(accepted, notes=[*accepted.notes, said, *anchored])
        thresholds = self.thresholds or Thresholds.standard(shared_schema(self.inner.contract))
        said = Note("", "guided", f"{MASS_SIGNAL}, under {thresholds.describe()}", SIGNAL_NOTE)
        masses = value_start_masses(completion.diagnostics, accepted.text)
        nullable = {f"/{name}" for name in nullable_fields(self.inner.contract)}
        signals = {pointer: mass for pointer, mass in masses.items() if pointer in nullable}
        value = accepted.value.model_dump(mode="json")
        abstained_value, abstained = abstain(value, signals, thresholds)
        if not abstained:
            return replace(accepted, notes=[*accepted.notes, said, *anchored])
        # The value with its abstentions goes through the parser again, whole.
        text = json.dumps(abstained_value, ensure_ascii=False)
        again = Completion(text, StopReason.END_TURN, accepted.raw_stop_reason)
        try:
            parsed = self.inner.parse(self.inner.contract, again, provider)
        except InvalidOutput as refused:
            # The model's document was valid; the contract refuses it with these nulls (a check
            # across fields): the values stay as written, and a note says why nothing abstained
            # (an error here would carry a document the model never wrote).
            kept = [Note(pointer, value[pointer[1:]], value[pointer[1:]], kind=KEPT_NOTE)
                    for pointer in abstained]  # fmt: skip
            said = Note("", "guided", f"{said.written}; not abstained: {refused}", SIGNAL_NOTE)
            return replace(accepted, notes=[*accepted.notes, said, *anchored, *kept])
        notes = [Note(pointer, value[pointer[1:]], None, kind="abstained") for pointer in abstained]
        return Accepted(parsed.value, accepted.text, accepted.stop_reason,
                        accepted.raw_stop_reason,
                        [*accepted.notes, said, *anchored, *notes])  # fmt: skip

    def _anchored(
        self, completion: Completion, provider: Provider
    ) -> tuple[Accepted[Any], list[Note]]:
        """The parser's verdict on the reply; where its only complaint is that values are
        outside their anchors' regions (`x-anchor` violations), at any depth, those values
        abstain where the contract lets them be `null` (the document judged again whole: a
        value that may not be null keeps the original error, and the reply is retried), with
        per value a note that its anchor decided (kind `"abstention"`, at the value's pointer)
        and one that it abstained. The accepted text stays what the model wrote (its
        confidence and masses are read from it)."""
        try:
            return self.inner.judge(completion, provider), []
        except CheckFailed as error:
            off = error.violations
            if not off or any(v.keyword != ANCHOR_KEY for v in off):
                raise
            try:
                data = json.loads(error.text or "")
            except ValueError:
                raise error from None
            held = {v.pointer: _abstained(data, v.pointer) for v in off}
            if any(value is None for value in held.values()):
                raise  # not a value of the document as written (the parser repaired it)
            again = replace(completion, text=json.dumps(data, ensure_ascii=False))
            try:
                parsed = self.inner.parse(self.inner.contract, again, provider)
            except InvalidOutput:
                # The contract does not let one of those values be null (a required field, an
                # item of a list of copies): the reply is retried with the anchor's reasons.
                raise error from None
            accepted = self.inner.accept(parsed, completion, provider, text=error.text)
        notes = []
        for violation in off:
            notes.append(Note(violation.pointer, "guided", f"{ANCHOR_SIGNAL}: {violation.message}",
                              SIGNAL_NOTE))  # fmt: skip
            notes.append(Note(violation.pointer, held[violation.pointer], None, kind="abstained"))
        return accepted, notes

    def feedback(
        self, error: InvalidOutput, completion: Completion, provider: Provider
    ) -> tuple[Message, ...]:
        return self.inner.feedback(error, completion, provider)

    def view(self, attempt: int, provider: Provider) -> StreamView:
        return self.inner.view(attempt, provider)

    def result(self, accepted: Accepted[Any], ending: Ending) -> Any:
        return self.inner.result(accepted, ending)


def _abstained(data: Any, pointer: str) -> str | None:
    """The anchored string at `pointer` in the reply's `data` made `null`, in place; the string
    it held, or `None` (`data` unchanged) where the pointer names no string there (`lookup`'s
    reading: `/items/01` names nothing). In place and strings only, unlike the confidence
    floor's `_with_null`: every violation's value abstains in the one document judged again,
    and a pointer that names no string is a violation of a document the parser repaired, not
    of the reply as written (the caller then keeps the error)."""
    named, held = lookup(data, pointer) if pointer else (False, None)
    if not named or not isinstance(held, str):
        return None
    replace_at(data, pointer, None)
    return held


def _anchored_nullable(root: dict[str, Any]) -> bool:
    """Whether a schema holds, at any depth, an anchored value that may be `null`: a union
    with a `null` branch whose other branch has an anchor, on the union or on the branch
    (`branch_anchors`: the parser reads either at the value's pointer), or is a copied string
    below an anchored node (`Annotated[Party, Anchor(...)]`: the parser holds every copy under
    it to that anchor). Walked from the root through `$ref`s, each node once per state."""
    pending: list[tuple[dict[str, Any], bool]] = [(root, False)]
    seen: set[tuple[int, bool]] = set()
    while pending:
        node, under = pending.pop()
        if (id(node), under) in seen:
            continue
        seen.add((id(node), under))
        under = under or anchor_of(node) is not None
        branches = node.get("anyOf")
        if isinstance(branches, list) and any(
            isinstance(b, dict) and b.get("type") == "null" for b in branches
        ):
            for branch, anchor in branch_anchors(node):
                if anchor is not None or (under and grounded_kind(branch) is not None):
                    return True
        pending += [(child, under) for suffix, child in subschemas(node)
                    if not suffix.startswith("/$defs/")]  # fmt: skip
        ref = node.get("$ref")
        if isinstance(ref, str):
            pending.append((resolve_ref(root, ref)[1], under))
    return False
