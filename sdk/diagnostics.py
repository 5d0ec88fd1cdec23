"""Constraint diagnostics: where the grammar, not the model, decided what was written.

Grammar-constrained decoding masks every token the grammar forbids and renormalizes over what is
left. When the model's own favourites were allowed, that changes little. When they were all
masked, the few survivors (which the model found unlikely) are inflated to 100% and the model is
pushed down a path it would not have taken: the output still parses, but that part of it is the
grammar's choice, not the model's. The total probability the grammar left allowed at a step, the
*surviving mass*, measures this: 1.0 means the grammar changed nothing, 0.001 means the model gave
every allowed token together a 0.1% chance.

Only a local model can report it (a hosted API never shows the unmasked distribution).
`EmbeddedProvider` records, for every generated token, the surviving mass under the model's
unconstrained distribution at temperature 1 and whether the token was *forced* (the grammar
allowed exactly one token). `ConstraintDiagnostics` summarizes the steps per field, by the JSON
pointer of the field each token was written for, and flags every field whose lowest surviving
mass is under a threshold: there, the grammar overrode the model.

    result = client.generate(InvoiceExtraction, source=invoice_text)
    print(result.diagnostics)                  # a table, one row per field
    for field in result.diagnostics.flagged:   # the fields to distrust first
        print(field.pointer, field.min_mass)

Which field a token belongs to: the field whose key or value holds the token's first character.
A key's characters and the `:` after it count for the field the key names (the grammar forces
keys, so that is where forced tokens show up), the brackets of an object or array count for the
object or array itself, and commas between members count for the enclosing container (`""`, the
document, at the top level). The end-of-sequence token counts for the document.

This module is pure: no I/O, no numpy; the provider does the measuring.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

from sdk._values.pointer import escape_pointer

__all__ = [
    "DEFAULT_LOW_MASS_THRESHOLD",
    "ConstraintDiagnostics",
    "FieldDiagnostics",
    "TokenStep",
    "char_pointers",
    "diagnose",
    "regroup",
    "value_spans",
]

DEFAULT_LOW_MASS_THRESHOLD = 0.01
"""A field is flagged when, at one of its tokens, every allowed token together had less than a 1%
chance under the model's own distribution: the grammar, not the model, chose what came next."""

# What a JSON scalar token (number, true, false, null) may consist of.
_SCALAR_CHARS = frozenset("0123456789+-.eEtrufalsn")
_WHITESPACE = frozenset(" \t\r\n")


@dataclass(frozen=True, slots=True)
class TokenStep:
    """One generated token and what the grammar allowed when it was chosen."""

    token: int
    """The token id in the model's vocabulary."""
    text: str
    """The token's text ('' for the end-of-sequence token, or for a token that ends inside a
    multi-byte character: its bytes show up with the next token)."""
    offset: int
    """Where the token's text starts in the generated text (in characters)."""
    mass: float
    """Surviving probability mass: the model's unconstrained probability (temperature 1) of all
    the tokens the grammar allowed at this step together, in [0, 1]."""
    allowed: int
    """How many tokens the grammar allowed at this step."""
    pointer: str = ""
    """JSON pointer of the field the token was written for (`""`: the document itself)."""

    @property
    def forced(self) -> bool:
        """Whether the grammar allowed exactly this one token: the model had no say."""
        return self.allowed == 1


@dataclass(frozen=True, slots=True)
class FieldDiagnostics:
    """The tokens written for one field, summarized."""

    pointer: str
    """JSON pointer of the field (`""`: the document's own punctuation, and its end)."""
    tokens: int
    """How many generated tokens belong to the field."""
    min_mass: float
    """The lowest surviving mass at any of its tokens."""
    mean_mass: float
    """The mean surviving mass over its tokens."""
    forced: int
    """How many of its tokens the grammar forced (exactly one token allowed)."""
    flagged: bool
    """Whether `min_mass` is under the threshold: the grammar overrode the model here."""

    @property
    def name(self) -> str:
        """The pointer as shown in tables: `/` for the document itself."""
        return self.pointer or "/"


@dataclass(frozen=True)
class ConstraintDiagnostics:
    """Per-token and per-field surviving mass of one constrained generation (module docstring).

    `fields` lists every field that received tokens, in the order they were first written;
    `flagged` the ones whose lowest surviving mass is under `threshold`; `steps` every token.
    `str()` (or `summary()`) is a readable table. Immutable all the way down (`fields` and
    `steps` are tuples, whatever sequence they were given as): a result's diagnostics may be
    the very object a response cache holds and gives every later hit (guided abstention reads
    its steps again), so nothing one caller does to them can change another's result.
    """

    fields: tuple[FieldDiagnostics, ...]
    steps: tuple[TokenStep, ...] = field(repr=False)
    threshold: float = DEFAULT_LOW_MASS_THRESHOLD

    def __post_init__(self) -> None:
        # (given as lists by older code, or by hand: kept as tuples, so they cannot change)
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def flagged(self) -> list[FieldDiagnostics]:
        """The fields where the grammar overrode the model (lowest mass under the threshold)."""
        return [item for item in self.fields if item.flagged]

    @property
    def tokens(self) -> int:
        """How many tokens were generated (the end-of-sequence token included, when sampled)."""
        return len(self.steps)

    @property
    def forced(self) -> int:
        """How many tokens the grammar forced."""
        return sum(step.forced for step in self.steps)

    @property
    def min_mass(self) -> float:
        """The lowest surviving mass at any step (1.0 when nothing was generated)."""
        return min((step.mass for step in self.steps), default=1.0)

    @property
    def mean_mass(self) -> float:
        """The mean surviving mass over all steps (1.0 when nothing was generated)."""
        if not self.steps:
            return 1.0
        return sum(step.mass for step in self.steps) / len(self.steps)

    def field(self, pointer: str) -> FieldDiagnostics | None:
        """The summary of the field at `pointer` (`""` or `"/"`: the document), if it has one."""
        pointer = "" if pointer == "/" else pointer
        return next((item for item in self.fields if item.pointer == pointer), None)

    def summary(self) -> str:
        """A table: one row per field, the flagged ones marked."""
        lines = [
            f"constraint diagnostics: {self.tokens} tokens, {self.forced} forced by the grammar, "
            f"surviving mass min {_mass(self.min_mass)} mean {self.mean_mass:.3f}; "
            f"{len(self.flagged)} field(s) under {self.threshold:g}",
        ]
        width = max([len("field"), *(len(item.name) for item in self.fields)])
        lines.append(
            f"  {'field':<{width}}  {'tokens':>6}  {'forced':>6}  {'min mass':>9}  {'mean mass':>9}"
        )
        for item in self.fields:
            mark = "  <- the grammar overrode the model here" if item.flagged else ""
            lines.append(
                f"  {item.name:<{width}}  {item.tokens:>6}  {item.forced:>6}  "
                f"{_mass(item.min_mass):>9}  {item.mean_mass:>9.3f}{mark}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def diagnose(
    text: str,
    steps: Iterable[TokenStep],
    *,
    threshold: float = DEFAULT_LOW_MASS_THRESHOLD,
    json_text: bool = True,
) -> ConstraintDiagnostics:
    """Attribute each step to the field its first character belongs to, and summarize per field.

    `text` is the generated text the steps' offsets refer to. With `json_text=False` (a custom,
    non-JSON grammar) every step counts for the document itself.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be within [0, 1], not {threshold!r}")
    pointers = char_pointers(text) if json_text else []
    placed: list[TokenStep] = []
    groups: dict[str, list[TokenStep]] = {}  # dicts keep insertion order: first written first
    for step in steps:
        pointer = pointers[step.offset] if step.offset < len(pointers) else ""
        placed_step = TokenStep(
            step.token, step.text, step.offset, step.mass, step.allowed, pointer
        )
        placed.append(placed_step)
        groups.setdefault(pointer, []).append(placed_step)
    fields = [_summarize(pointer, group, threshold) for pointer, group in groups.items()]
    return ConstraintDiagnostics(fields=tuple(fields), steps=tuple(placed), threshold=threshold)


def regroup(
    diagnostics: ConstraintDiagnostics, pointer: Callable[[TokenStep], str]
) -> ConstraintDiagnostics:
    """The same steps attributed by `pointer` instead (a tool call's text is not one JSON
    document: its decision, prose, name and arguments are told apart by the caller)."""
    groups: dict[str, list[TokenStep]] = {}
    placed = []
    for step in diagnostics.steps:
        moved = replace(step, pointer=pointer(step))
        placed.append(moved)
        groups.setdefault(moved.pointer, []).append(moved)
    fields = [_summarize(name, group, diagnostics.threshold) for name, group in groups.items()]
    return ConstraintDiagnostics(
        fields=tuple(fields), steps=tuple(placed), threshold=diagnostics.threshold
    )


def _summarize(pointer: str, steps: Sequence[TokenStep], threshold: float) -> FieldDiagnostics:
    masses = [step.mass for step in steps]
    lowest = min(masses)
    return FieldDiagnostics(
        pointer=pointer,
        tokens=len(steps),
        min_mass=lowest,
        mean_mass=sum(masses) / len(masses),
        forced=sum(step.forced for step in steps),
        flagged=lowest < threshold,
    )


def _mass(value: float) -> str:
    # Small masses are the interesting ones: show their magnitude, not "0.000".
    return f"{value:.3f}" if value >= 0.001 else f"{value:.1e}"


# --- Which field each character belongs to ---

# Scanner states.
_VALUE = 0  # a value may start here (document start, after ':', after ',' in an array)
_KEY = 1  # inside an object, where a key (or '}') may start
_COLON = 2  # after a key
_AFTER = 3  # after a value inside a container: ',' or the closing bracket


def char_pointers(text: str) -> list[str]:
    """The JSON pointer each character of `text` belongs to (see the module docstring).

    Works on a complete document and on a prefix of one (a cut generation); from the first
    character that cannot continue JSON on (unconstrained output), everything counts for `""`.
    Iterative, so nesting depth is not limited by Python's recursion limit.
    """
    return _PointerScan(text).run()


def value_spans(text: str) -> list[tuple[str, int, int]]:
    """Every scalar value of the JSON `text` (string, number, `true`, `false`, `null`): its JSON
    pointer and where it is written, `(pointer, start, end)` in characters, quotes included, in
    the order written. A prefix of a document gives the values it holds (the last one may be
    cut); from where the text stops being JSON on, nothing."""
    scan = _PointerScan(text)
    scan.run()
    return scan.spans


class _PointerScan:
    """The scanner behind `char_pointers`: one method per state, each reading from `i` and
    returning where to go on (`-1`: the text stops being JSON there)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.owner: list[str] = [""] * len(text)
        # Open containers, innermost last: (is_object, pointer, members started so far).
        self.stack: list[tuple[bool, str, int]] = []
        self.state = _VALUE
        self.member = ""  # the pointer the next value takes
        self.here = ""  # what punctuation and whitespace at this point count for
        self.spans: list[tuple[str, int, int]] = []  # scalar values: (pointer, start, end)

    def run(self) -> list[str]:
        text, i = self.text, 0
        steps = {_VALUE: self._value, _KEY: self._key, _COLON: self._colon, _AFTER: self._after}
        while 0 <= i < len(text):
            if text[i] in _WHITESPACE:
                self.owner[i] = self.here
                i += 1
            else:
                i = steps[self.state](i)
        return self.owner

    def _close(self, i: int, pointer: str) -> int:
        """The innermost container closes at `i`."""
        self.owner[i] = pointer
        self.stack.pop()
        self.state, self.here = _after(self.stack)
        return i + 1

    def _value(self, i: int) -> int:
        text, char = self.text, self.text[i]
        if self.stack and not self.stack[-1][0]:
            # An array element: its pointer is the array's and its index.
            is_object, pointer, count = self.stack[-1]
            if char == "]" and count == 0:  # an empty array closes
                return self._close(i, pointer)
            self.member = f"{pointer}/{count}"
            self.stack[-1] = (is_object, pointer, count + 1)
        if char in "{[":
            self.owner[i] = self.here = self.member
            self.stack.append((char == "{", self.member, 0))
            self.state = _KEY if char == "{" else _VALUE
            return i + 1
        if char == '"':
            end, _ = _string_end(text, i)
        elif char in _SCALAR_CHARS:
            end = i
            while end < len(text) and text[end] in _SCALAR_CHARS:
                end += 1
        else:
            return -1  # not JSON from here on
        self.owner[i:end] = [self.member] * (end - i)
        self.spans.append((self.member, i, end))
        self.state, self.here = _after(self.stack)
        return end

    def _key(self, i: int) -> int:
        text, n = self.text, len(self.text)
        is_object, pointer, count = self.stack[-1]
        if text[i] == "}":
            return self._close(i, pointer)
        if text[i] != '"':
            return -1
        end, closed = _string_end(text, i)
        if not closed:
            self.owner[i:n] = [pointer] * (n - i)  # a key cut off: its name is not known yet
            return -1
        self.member = f"{pointer}/{escape_pointer(_key(text[i:end]))}"
        self.stack[-1] = (is_object, pointer, count + 1)
        self.owner[i:end] = [self.member] * (end - i)
        self.here = self.member  # the colon and the whitespace around it count for the member
        self.state = _COLON
        return end

    def _colon(self, i: int) -> int:
        if self.text[i] != ":":
            return -1
        self.owner[i] = self.here
        self.state = _VALUE
        return i + 1

    def _after(self, i: int) -> int:
        """A comma or the closing bracket of the innermost container."""
        if not self.stack:
            return -1  # something after a complete document
        is_object, pointer, _ = self.stack[-1]
        char = self.text[i]
        if char == ",":
            self.owner[i] = self.here = pointer
            self.state = _KEY if is_object else _VALUE
            return i + 1
        if char == ("}" if is_object else "]"):
            return self._close(i, pointer)
        return -1


def _after(stack: list[tuple[bool, str, int]]) -> tuple[int, str]:
    """The state after a value closed: inside its container, or at the document's end."""
    return _AFTER, stack[-1][1] if stack else ""


def _string_end(text: str, start: int) -> tuple[int, bool]:
    """The index after the closing quote of the string opening at `start`, and whether it is
    closed at all (a cut string ends with the text)."""
    i, n = start + 1, len(text)
    while i < n:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == '"':
            return i + 1, True
        i += 1
    return n, False


def _key(quoted: str) -> str:
    try:
        name = json.loads(quoted)
    except ValueError:
        return quoted[1:-1]  # a malformed escape: the raw name is still the best label
    return name if isinstance(name, str) else quoted[1:-1]
