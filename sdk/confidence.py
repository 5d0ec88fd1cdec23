"""Per-value confidence: how probable each value of a result was, from the probabilities of the
tokens it was decoded from.

A route that reports token probabilities (the embedded model; llama.cpp's `n_probs`; vLLM's and
OpenAI Chat's `logprobs`) gives, for every generated token, the probability of the token that was
chosen (`TokenLogprob`). A value's confidence is the product of those probabilities over the
tokens that wrote it: the probability that, given everything before it, the decoder writes
exactly this value (its quotes included, and for a number the token that ended it, since "4"
followed by "2" is another number than "4" followed by ","):

    result.confidence["/lines/0/total"]                # 0.93
    result.confidence.details["/carrier"].removed      # 0.41: what the grammar took away

Two probabilities answer two questions, and a grammar-constrained route keeps both:

- `probability` (what `result.confidence[...]` gives, uncalibrated): among the tokens the grammar
  allowed, renormalized over them, as the constrained decoder sampled. How sure the decoder was
  of this value rather than another the contract admits.
- `kept` (and `removed = 1 - kept`): the share of the model's own probability that the grammar
  left allowed along the value's tokens. How much the model wanted to write something the grammar
  forbids: a value the grammar cut short, or a name the model would have invented where the
  source has none, keeps little. `unmasked = probability * kept` is the value's probability under
  the model's own distribution.

On the embedded model both are measured on the model's logits at temperature 1 (whatever the
sampling temperature), like the constraint diagnostics' surviving mass (`sdk.diagnostics`). A
route that reports probabilities without saying what its grammar removed (a server) gives
`kept = None`. A route that reports none gives no confidence at all: `Result.confidence` is
`None`, never an invented number.

These are the decoder's probabilities, not the probability of being right: a small model can be
sure of a wrong value. A calibration fitted on labelled data (`sdk.calibration`, `sdk eval
--calibrate-confidence`) maps them to that; `Confidence.calibrated` says whether it was applied.

Pure: no I/O, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace

from sdk.diagnostics import value_spans

__all__ = [
    "Confidence",
    "TokenLogprob",
    "ValueConfidence",
    "confidence_of",
    "value_confidence",
]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token and the probability of choosing it, as the route reports it."""

    text: str
    """The token's text (`""` for an end token, or for a token ending inside a character: its
    bytes show up with the next token)."""
    offset: int
    """Where the token's text starts in the generated text (in characters)."""
    logprob: float
    """Natural log of the chosen token's probability (under a grammar, among the allowed tokens
    where the route says so; 0.0 for a token the grammar forced)."""
    mass: float | None = None
    """The model's probability of every allowed token together at this step (the surviving mass,
    `sdk.diagnostics`); `None` where the route does not report it."""


@dataclass(frozen=True, slots=True)
class ValueConfidence:
    """One value's confidence, and what it was computed from."""

    pointer: str
    """The value's JSON pointer (`/lines/0/total`)."""
    probability: float
    """Product of its tokens' probabilities (among the allowed ones, where the route masks)."""
    kept: float | None
    """Product of the surviving mass at its tokens: the share of the model's own probability the
    grammar left allowed along the value (`None`: the route does not say)."""
    lowest_kept: float | None
    """The lowest surviving mass at one of its tokens."""
    tokens: int
    """How many generated tokens wrote it (a token shared with the next value counts for both)."""
    start: int
    """Where the value is written in the text (characters; quotes included)."""
    end: int
    kind: str = "string"
    """Its JSON type: `string`, `number`, `boolean` or `null` (calibrations fit one per type)."""

    @property
    def removed(self) -> float | None:
        """The share of the model's probability along the value that the grammar removed."""
        return None if self.kept is None else 1.0 - self.kept

    @property
    def unmasked(self) -> float | None:
        """The value's probability under the model's own, unconstrained distribution."""
        return None if self.kept is None else self.probability * self.kept


class Confidence(Mapping[str, float]):
    """`Result.confidence`: each value's JSON pointer to a probability in [0, 1] (module
    docstring). A calibrated one (`calibrated` true) maps to the probability that the value is
    right; `details` keeps what each number was computed from, uncalibrated."""

    __slots__ = ("_probabilities", "calibrated", "details", "route")

    def __init__(
        self,
        details: Mapping[str, ValueConfidence],
        *,
        route: str,
        calibrated: Mapping[str, float] | None = None,
    ) -> None:
        self.details: Mapping[str, ValueConfidence] = dict(details)
        """Per pointer, the value's raw probabilities and tokens."""
        self.route = route
        """What the probabilities are: `"masked"` (among the tokens a grammar allowed, with the
        surviving mass: the embedded model) or `"reported"` (as the route's API reports them)."""
        self.calibrated = calibrated is not None
        """Whether a calibration mapped the probabilities to the probability of being right."""
        source = (
            calibrated
            if calibrated is not None
            else {pointer: item.probability for pointer, item in self.details.items()}
        )
        missing = [pointer for pointer in self.details if pointer not in source]
        if missing:
            shown = ", ".join(map(repr, missing))
            raise ValueError(f"no calibrated probability for {shown} (a value of this result)")
        self._probabilities = {pointer: _unit(source[pointer]) for pointer in self.details}

    def __getitem__(self, pointer: str) -> float:
        return self._probabilities[pointer]

    def __iter__(self) -> Iterator[str]:
        return iter(self._probabilities)

    def __len__(self) -> int:
        return len(self._probabilities)

    def __repr__(self) -> str:
        shown = ", ".join(f"{p!r}: {v:.3f}" for p, v in self._probabilities.items())
        kind = "calibrated" if self.calibrated else self.route
        return f"Confidence({kind}, {{{shown}}})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Confidence):
            return (
                self._probabilities == other._probabilities
                and self.details == other.details
                and self.calibrated == other.calibrated
            )
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def lowest(self) -> tuple[str, float] | None:
        """The least confident value, `(pointer, probability)`; `None` when there is none."""
        if not self._probabilities:
            return None
        pointer = min(self._probabilities, key=self._probabilities.__getitem__)
        return pointer, self._probabilities[pointer]

    def with_calibrated(self, probabilities: Mapping[str, float]) -> Confidence:
        """The same values, mapped through a calibration (`sdk.calibration`)."""
        return Confidence(self.details, route=self.route, calibrated=probabilities)

    def without(self, pointers: Iterable[str]) -> Confidence:
        """Without the values at `pointers` (they were replaced: an abstention's `null` was not
        decoded, so it has no confidence of its own)."""
        gone = set(pointers)
        kept = {p: item for p, item in self.details.items() if p not in gone}
        calibrated = {p: self._probabilities[p] for p in kept} if self.calibrated else None
        return Confidence(kept, route=self.route, calibrated=calibrated)

    def rebased(self, prefix: str) -> Confidence:
        """The values under `prefix`, their pointers relative to it (an envelope's `/items`
        becomes the list itself: `/items/0/total` is `/0/total`)."""
        moved: dict[str, ValueConfidence] = {}
        calibrated: dict[str, float] = {}
        for pointer, item in self.details.items():
            if pointer == prefix or pointer.startswith(prefix + "/"):
                inner = pointer[len(prefix) :]
                moved[inner] = replace(item, pointer=inner)
                calibrated[inner] = self._probabilities[pointer]
        mapped = calibrated if self.calibrated else None
        return Confidence(moved, route=self.route, calibrated=mapped)


def confidence_of(text: str, tokens: Sequence[TokenLogprob] | None) -> Confidence | None:
    """The confidence of the document `text` (what the parser read) that the route generated
    with `tokens`; `None` where the route reported no token probabilities, or where its tokens
    do not spell the document (then no value can be told its tokens).

    The tokens' own text is what `text` is found in: a server may strip a Markdown fence from
    the reply's content while its token list still holds the fence's tokens."""
    if tokens is None:
        return None
    spelled = "".join(token.text for token in sorted(tokens, key=lambda t: t.offset))
    offset = spelled.find(text) if text else 0
    if offset < 0:
        return None
    details = value_confidence(text, tokens, offset=offset)
    masked = bool(tokens) and all(token.mass is not None for token in tokens)
    return Confidence(details, route="masked" if masked else "reported")


def value_confidence(
    text: str, tokens: Sequence[TokenLogprob], *, offset: int = 0
) -> dict[str, ValueConfidence]:
    """Every scalar value of the JSON document in `text` with its confidence (module docstring).

    `tokens` are the generated tokens, their offsets into the generated text; `text` starts at
    `offset` of it (a reply whose JSON follows a code fence, say). A token counts for a value
    when it writes one of the value's characters or, for a number, the character right after it
    (which ended it). A value no token wrote (the tokens do not cover it) has no entry.
    """
    spans = value_spans(text)
    values: dict[str, ValueConfidence] = {}
    if not spans or not tokens:
        return values
    ordered = sorted(tokens, key=lambda token: token.offset)
    starts = [token.offset - offset for token in ordered]
    for pointer, start, end in spans:
        stop = end + 1 if _is_number(text, start) else end
        chosen = _covering(ordered, starts, start, stop)
        if not chosen:
            continue
        values[pointer] = _combined(pointer, chosen, start, end, _kind(text[start]))
    return values


def _covering(
    tokens: Sequence[TokenLogprob], starts: Sequence[int], start: int, stop: int
) -> list[TokenLogprob]:
    """The tokens whose text overlaps `[start, stop)` (an empty token occupies the character
    it starts at)."""
    import bisect

    # A token starting before `start` may still reach into it: step back over those.
    index = bisect.bisect_left(starts, start)
    while index > 0 and starts[index - 1] + max(len(tokens[index - 1].text), 1) > start:
        index -= 1
    found = []
    while index < len(tokens) and starts[index] < stop:
        token = tokens[index]
        if starts[index] + max(len(token.text), 1) > start:
            found.append(token)
        index += 1
    return found


def _kind(first: str) -> str:
    return {'"': "string", "t": "boolean", "f": "boolean", "n": "null"}.get(first, "number")


def _combined(
    pointer: str, tokens: Sequence[TokenLogprob], start: int, end: int, kind: str
) -> ValueConfidence:
    logprob = sum(token.logprob for token in tokens)
    masses = [token.mass for token in tokens]
    known = [mass for mass in masses if mass is not None]
    kept = math.prod(known) if known and len(known) == len(masses) else None
    return ValueConfidence(
        pointer=pointer,
        probability=_unit(math.exp(min(logprob, 0.0))),
        kept=None if kept is None else _unit(kept),
        lowest_kept=min(known) if kept is not None else None,
        tokens=len(tokens),
        start=start,
        end=end,
        kind=kind,
    )


def _is_number(text: str, start: int) -> bool:
    return start < len(text) and (text[start].isdigit() or text[start] == "-")


def _unit(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return min(max(float(value), 0.0), 1.0)
