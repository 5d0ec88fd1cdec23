"""A setting declared once, checked where it is set.

A setting's declaration is its annotation: the type (`int | None`, `Literal["a", "b"]`,
`Sequence[Hooks]`, ...) and, as `Annotated` metadata, its range (`AtLeast(1)`, `Positive()`,
`Between(0, 1)`). `check` reads both and refuses a value naming the setting: a value of the
wrong type is a `TypeError`, one of the right type outside its range (or not one of a
`Literal`'s values, or a number that is not finite) a `ValueError`. Client settings, call
options, job settings and retry policies are all checked through it, when they are made, so
nothing reaches a provider (or fails after a request was sent) with a value it cannot use.

A leaf: it imports nothing of the SDK.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import math
import re
import types
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated
from typing import Any
from typing import Literal
from typing import Protocol
from typing import Union
from typing import get_args
from typing import get_origin
from typing import get_type_hints

from sdk._values.blank import blank
from sdk._values.sendable import lone_surrogate

__all__ = [
    "NOT_BLANK",
    "AtLeast",
    "Between",
    "Bound",
    "Count",
    "Matches",
    "NoEmptyText",
    "OptionalCount",
    "Positive",
    "Sendable",
    "Visible",
    "bounds_of",
    "check",
    "check_fields",
    "check_given",
    "check_keywords",
    "conforms",
    "describe",
    "did_you_mean",
    "keywords_of",
    "union_members",
    "whole_numbers_only",
    "wrong_values",
]


class Bound(Protocol):
    """A range a value of the right type must be within."""

    @property
    def text(self) -> str:
        """What the range asks for, as a message says it (`"at least 1"`)."""
        ...

    def holds(self, value: Any) -> bool:
        """Whether `value` (of the right type) is within the range."""
        ...

    @property
    def outside(self) -> object:
        """A value of the right type outside the range (tests refuse it)."""
        ...


@dataclass(frozen=True, slots=True)
class AtLeast:
    """At least `low` (a count, a limit)."""

    low: int | float

    @property
    def text(self) -> str:
        return f"at least {self.low:g}"

    def holds(self, value: Any) -> bool:
        return bool(value >= self.low)

    @property
    def outside(self) -> object:
        return self.low - 1


@dataclass(frozen=True, slots=True)
class Positive:
    """More than 0 (seconds, a factor)."""

    @property
    def text(self) -> str:
        return "a positive number"

    def holds(self, value: Any) -> bool:
        return bool(value > 0)

    @property
    def outside(self) -> object:
        return 0


@dataclass(frozen=True, slots=True)
class Between:
    """From `low` to `high`, both included."""

    low: float
    high: float

    @property
    def text(self) -> str:
        return f"between {self.low:g} and {self.high:g}"

    def holds(self, value: Any) -> bool:
        return bool(self.low <= value <= self.high)

    @property
    def outside(self) -> object:
        return self.high + 1


@dataclass(frozen=True, slots=True)
class NoEmptyText:
    """Text that is not empty, or a sequence of such texts (a stop sequence: `""` stops
    nowhere, and an API refuses it)."""

    @property
    def text(self) -> str:
        return "text that is not empty, or a list of such texts"

    def holds(self, value: Any) -> bool:
        texts = [value] if isinstance(value, str) else list(value)
        return all(text != "" for text in texts)

    @property
    def outside(self) -> object:
        return ""


@dataclass(frozen=True, slots=True)
class Sendable:
    """Text a request can carry (no lone surrogate: `sdk._values.sendable`), or a sequence of
    such texts (a stop sequence is sent as it is)."""

    @property
    def text(self) -> str:
        return "text a request can carry (no lone surrogate), or a list of such texts"

    def holds(self, value: Any) -> bool:
        texts = [value] if isinstance(value, str) else list(value)
        return all(lone_surrogate(text) is None for text in texts)

    @property
    def outside(self) -> object:
        return "end\ud800"


@dataclass(frozen=True, slots=True)
class Matches:
    """Text of a given form, the whole of it matching `pattern` (a `module:Class` reference,
    text that is not blank); `says` is how a message says the form, `example` is text not of
    it (tests refuse it)."""

    pattern: str
    says: str
    example: str

    @property
    def text(self) -> str:
        return self.says

    def holds(self, value: Any) -> bool:
        return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None

    @property
    def outside(self) -> object:
        return self.example


Count = Annotated[int, AtLeast(1)]
"""A whole number of at least 1: a count, a size, a limit."""

OptionalCount = Annotated[int | None, AtLeast(1)]
"""A `Count`, or `None` (the setting's default, or no limit, as the setting says)."""


@dataclass(frozen=True, slots=True)
class Visible:
    """Text a reader sees something of: not only white space and invisible characters
    (`sdk._values.blank`, the rule of prompts and source quotes); `empty_ok`: `""` too, where
    it says "none" (a system prompt)."""

    empty_ok: bool = False

    @property
    def text(self) -> str:
        return 'text that is not blank ("" for none)' if self.empty_ok else "text that is not blank"

    def holds(self, value: Any) -> bool:
        return isinstance(value, str) and ((self.empty_ok and value == "") or not blank(value))

    @property
    def outside(self) -> object:
        return " \u200b"


NOT_BLANK = Visible()
"""Text with something in it a reader sees (a name, a system prompt)."""


def check(
    name: str, value: object, annotation: Any, where: str = "", expects: str | None = None
) -> None:
    """Refuse `value` for the setting `name` declared as `annotation` (see the module
    docstring); `where` says who took it (`"StructuredClient()"`), `expects` overrides how the
    type is described."""
    if not conforms(value, annotation):
        if isinstance(value, type) and not _takes_classes(annotation):
            # `cache=MemoryCache`: the class where an instance goes
            raise TypeError(
                f"{where + ': ' if where else ''}{name}={value.__name__} is the class, not a "
                f"value ({name} must be {expects or describe(annotation)}): instantiate it, "
                f"{name}={value.__name__}()"
            )
        error = ValueError if _literal_miss(value, annotation) else TypeError
        raise error(
            f"{_said(name, where)} must be {expects or describe(annotation)}, not {_shown(value)}"
        )
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{_said(name, where)} must be a finite number, not {value!r}")
    for bound in bounds_of(annotation):
        if not bound.holds(value):
            raise ValueError(f"{_said(name, where)} must be {bound.text}, not {_shown(value)}")


def _takes_classes(annotation: Any) -> bool:
    """Whether a setting declared as `annotation` takes a class (`type[Contract]`): then a
    class of another kind is a wrong class, not a class where an instance goes."""
    return any(leaf is type or get_origin(leaf) is type for leaf in _flat(annotation))


def _said(name: str, where: str) -> str:
    return f"{where}: {name}" if where else name


def check_fields(instance: Any, where: str | None = None) -> None:
    """Check every field of a dataclass instance against its annotation (from its
    `__post_init__`: a value is refused when the record is made)."""
    hints = _hints(type(instance))
    said = where or f"{type(instance).__name__}()"
    for item in dataclasses.fields(instance):
        check(item.name, getattr(instance, item.name), hints[item.name], said)


def check_keywords(given: Mapping[str, object], declared: Any, where: str) -> None:
    """Refuse a keyword that `declared` (a `TypedDict` unpacked into `**keywords`) does not
    name, as Python refuses one a signature does not name: a `TypedDict` is read by type
    checkers only, so without this a misspelt keyword (`refusl=`) would be dropped silently.
    `where` names the callable (`"parse()"`)."""
    names = keywords_of(declared)
    for name in given:
        if name not in names:
            raise TypeError(
                f"{where} got an unexpected keyword argument {name!r}{did_you_mean(name, names)}"
            )


def check_given(
    given: Mapping[str, object],
    declared: Any,
    where: str,
    expects: Mapping[str, str] | None = None,
) -> None:
    """Refuse what `**keywords` declared by `declared` (a `TypedDict`) were given: a keyword it
    does not name (`check_keywords`), and a value its annotation refuses (`check`, naming the
    keyword; `expects` says what some of them take, where the type says it less well)."""
    check_keywords(given, declared, where)
    hints = _hints(declared)
    for name, value in given.items():
        check(name, value, hints[name], where, (expects or {}).get(name))


def keywords_of(declared: Any) -> frozenset[str]:
    """Every key a `TypedDict` declares, required, optional and inherited alike."""
    names = _KEYWORDS.get(declared)
    if names is None:
        names = _KEYWORDS[declared] = frozenset(
            declared.__required_keys__ | declared.__optional_keys__
        )
    return names


def did_you_mean(name: str, names: Sequence[str] | frozenset[str]) -> str:
    """` (did you mean 'x'?)` for the closest of `names`, or nothing."""
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


_KEYWORDS: dict[Any, frozenset[str]] = {}


def bounds_of(annotation: Any) -> tuple[Bound, ...]:
    """The ranges an annotation declares (`Annotated` metadata)."""
    try:
        return _BOUNDS[annotation]
    except KeyError:
        found = _BOUNDS[annotation] = _bounds(annotation)
        return found
    except TypeError:  # (unhashable metadata: read anew)
        return _bounds(annotation)


_BOUNDS: dict[Any, tuple[Bound, ...]] = {}


def _bounds(annotation: Any) -> tuple[Bound, ...]:
    if get_origin(annotation) is Annotated:
        return tuple(meta for meta in annotation.__metadata__ if hasattr(meta, "holds"))
    return ()


def wrong_values(annotation: Any) -> list[object]:
    """Values a setting declared as `annotation` must refuse: one of a type no setting takes,
    and one outside each of its ranges (for the tests that walk every declaration)."""
    values: list[object] = [_Stranger()]
    values.extend(bound.outside for bound in bounds_of(annotation))
    literals = [arg for arg in _flat(annotation) if get_origin(arg) is Literal]
    if literals:
        values.append("not-one-of-them")
    return values


class _Stranger:
    """A value of a type no setting takes."""

    def __repr__(self) -> str:
        return "<stranger>"


def conforms(value: object, annotation: Any) -> bool:
    """Whether `value` is of the type `annotation` declares (ranges aside)."""
    return _checker(annotation)(value)


_Checker = Callable[[object], bool]
_CHECKERS: dict[Any, _Checker] = {}
"""Each annotation's check, made once: a call checks its options against the same few
declarations every time, and walking a declared type (`get_origin`, `get_args`, a union's
members) cost more than the values' own `isinstance` tests."""


def _checker(annotation: Any) -> _Checker:
    try:
        return _CHECKERS[annotation]
    except KeyError:
        made = _CHECKERS[annotation] = _made(annotation)
        return made
    except TypeError:  # (an annotation that cannot be a key, unhashable metadata: made anew)
        return _made(annotation)


def _made(annotation: Any) -> _Checker:
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any:
        return lambda value: True
    if annotation is None or annotation is type(None):
        return lambda value: value is None
    if origin is Annotated:
        return _checker(args[0])
    if origin is Literal:
        return lambda value: any(type(value) is type(arg) and value == arg for arg in args)
    if origin in (Union, types.UnionType):
        # Members that are plain classes are one `isinstance` test (a call's prompt given as
        # parts checks each part against four), the others each their own check.
        classes = tuple(arg for arg in args if _plain_class(arg))
        members = tuple(_checker(arg) for arg in args if not _plain_class(arg))
        if not members:
            return lambda value: isinstance(value, classes)
        return lambda value: isinstance(value, classes) or any(m(value) for m in members)
    if origin is not None:
        return _generic(origin, args)
    return _class(annotation)


def _generic(origin: Any, args: tuple[Any, ...]) -> _Checker:
    if origin is collections.abc.Callable:
        return callable
    if origin is type and args and isinstance(args[0], type):  # a class of that kind
        kind = args[0]
        return lambda value: isinstance(value, type) and issubclass(value, kind)
    if origin in (collections.abc.Mapping, dict):
        key, item = (_checker(arg) for arg in (args if args else (Any, Any)))
        return lambda value: isinstance(value, collections.abc.Mapping) and all(
            key(k) and item(v) for k, v in value.items()
        )
    if origin in (collections.abc.Set, frozenset, set):
        member = _checker(args[0] if args else Any)
        return lambda value: isinstance(value, origin) and all(member(m) for m in value)
    if origin in (collections.abc.Sequence, list, tuple):
        each = _checker(args[0] if args else Any)
        return lambda value: (
            not isinstance(value, (str, bytes))
            and isinstance(value, collections.abc.Sequence)
            and all(each(member) for member in value)
        )
    return lambda value: isinstance(value, origin)  # os.PathLike[str], ...


def _plain_class(annotation: Any) -> bool:
    """Whether `annotation` is a class whose check is `isinstance` alone (`_class`)."""
    return (
        isinstance(annotation, type)
        and annotation is not Any  # (a class since Python 3.11, which `isinstance` refuses)
        and annotation not in (float, int)
        and not getattr(annotation, "_is_protocol", False)
        and get_origin(annotation) is None
    )


def _class(annotation: Any) -> _Checker:
    if annotation is float:
        return lambda value: isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return lambda value: isinstance(value, int) and not isinstance(value, bool)
    if getattr(annotation, "_is_protocol", False):
        # A store, a hook: an object with the protocol's methods (not the class itself).
        members = _members(annotation)
        return lambda value: not isinstance(value, type) and all(
            callable(getattr(value, member, None)) for member in members
        )
    return lambda value: isinstance(value, annotation)


def _members(protocol: type) -> list[str]:
    return [
        name
        for base in protocol.__mro__
        if getattr(base, "_is_protocol", False) and base is not Protocol
        for name in vars(base)
        if not name.startswith("_")
    ]


def describe(annotation: Any) -> str:
    """How a message says what a setting takes (`"a whole number or None"`)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return describe(args[0])
    if origin in (Union, types.UnionType, Literal):
        flat = _flat_args(annotation)
        parts = [repr(arg) if origin is Literal else describe(arg) for arg in flat]
        return " or ".join(dict.fromkeys(parts))
    if annotation is None or annotation is type(None):
        return "None"
    if origin in (collections.abc.Sequence, list, tuple):
        return f"a list of {_plural(args[0] if args else Any)}"
    if origin in (collections.abc.Set, frozenset, set):
        return f"a set of {_plural(args[0] if args else Any)}"
    if origin in (collections.abc.Mapping, dict):
        return "a mapping"
    if origin is collections.abc.Callable:
        return "a function"
    if origin is type and args and isinstance(args[0], type):
        return f"a {args[0].__name__} class"
    if origin is not None:
        return f"a {getattr(origin, '__name__', origin)}"
    return _NAMES.get(annotation, f"a {getattr(annotation, '__name__', annotation)}")


_NAMES: dict[Any, str] = {
    int: "a whole number",
    float: "a number",
    str: "a string",
    bool: "True or False",
    Any: "anything",
}
_PLURALS: dict[Any, str] = {int: "whole numbers", float: "numbers", str: "strings"}


def _plural(annotation: Any) -> str:
    return _PLURALS.get(annotation, f"{getattr(annotation, '__name__', 'value')} values")


def _flat_args(annotation: Any) -> list[Any]:
    """A union's members, and a literal's values, with nested unions and literals flattened."""
    origin = get_origin(annotation)
    if origin is Literal:
        return list(get_args(annotation))
    out: list[Any] = []
    for arg in get_args(annotation):
        nested = get_origin(arg) in (Union, types.UnionType, Literal)
        out.extend(_flat_args(arg) if nested and get_origin(arg) is not Literal else [arg])
    return out


def _flat(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Annotated:
        return _flat(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [leaf for arg in get_args(annotation) for leaf in _flat(arg)]
    return [annotation]


def _literal_miss(value: object, annotation: Any) -> bool:
    """Whether `value` is of the type of one of the annotation's literal values: then it is a
    value outside a set of choices (a `ValueError`), not a value of the wrong type."""
    leaves = [leaf for leaf in _flat(annotation) if get_origin(leaf) is Literal]
    literals = [arg for leaf in leaves for arg in get_args(leaf)]
    return any(type(value) is type(arg) for arg in literals)


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:77]}..."


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls, include_extras=True)
    return hints


def union_members(annotation: Any) -> tuple[Any, ...]:
    """A union's members (nested unions flattened; `Annotated` metadata dropped)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return union_members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return tuple(member for arg in get_args(annotation) for member in union_members(arg))
    return (annotation,)


def whole_numbers_only(annotation: Any) -> bool:
    """Whether a value of type `annotation` that is a number is a whole number alone (`int` is a
    member, `float` is not): where a table holds integers as floats (a numeric column with a
    null, in numpy and pandas), a whole float there is the integer it was."""
    members = union_members(annotation)
    return int in members and float not in members
