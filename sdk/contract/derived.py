"""Contracts derived from a contract, for measuring what its shape costs (`sdk eval`).

`widen(contract)`: the same contract with room to abstain everywhere.

The reference texts' first remedy for a grammar that manufactures answers: give the model
somewhere to put "I don't know". The widened contract is what an evaluation runs beside the
production one to measure what that room is worth (`sdk eval`, arm `widened`):

- every field may be absent: its type gains `None` and a field without a default gets `None` as
  its default, so a document may leave it out (strict provider modes, which want every field,
  get it from their dialect as required and nullable: there absence is an explicit `null`); a
  field that was not nullable says so in its description, because the model reads
  descriptions, not types;
- every enum gains an escape member, `unknown`, unless it has one already (`unknown`, `other`,
  `none`, ... as the linter counts them);
- nested contracts are widened the same way, at any depth (`list[LineItem]`, `Fix | None`).

The widened class is named `<Name>Widened` (its fingerprint is its own), keeps the original's
`schema_version`, docstring, field order, descriptions, bounds and `lint_ignore`, and is built
once per contract. The original's own checks (model and field validators) still apply wherever
they can: a widened value that fits the original contract (no new `null`, no escape member) is
validated by the original as well, so its cross-field checks run on it; a value that used the
widened room is checked for form only, since the original's checks were written for values that
have every field.

`answer_first(contract)`: the same contract with its reasoning field moved after the others, to
measure what generating the reasoning first is worth (the eval's `answer_first` arm).

For the abstention arms of the eval (issue 23), on a contract's nullable top-level fields:

- `evidence_gated(contract)`: each nullable field becomes `{"evidence": <Verbatim span>, "value":
  <the value>}` or `null`, so a value can only be written after the words of the document that
  state it ("no span, no value"); `ungated(value)` turns such a value back into the contract's
  shape;
- `presence(contract)`: the nullable fields as booleans, "does the document state it?";
- `null_only(contract, names)`: the contract with the named fields able to hold `null` only.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import MutableMapping
from enum import Enum
from typing import Annotated
from typing import Any
from typing import Literal
from typing import TypeVar
from typing import Union
from typing import cast
from weakref import WeakKeyDictionary

from pydantic import Field
from pydantic import ValidationError
from pydantic import ValidationInfo
from pydantic import create_model
from pydantic import model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sdk import _fork
from sdk.contract._base import Contract
from sdk.contract._base import Verbatim
from sdk.contract._base import WireEnum
from sdk.schema._shape import name_tokens
from sdk.schema._shape import object_fields
from sdk.schema._shape import shape_of
from sdk.schema._vocabulary import REASONING_WORDS
from sdk.schema._vocabulary import is_escape
from sdk.schema.canonical import shared_schema

__all__ = [
    "ESCAPE_MEMBER",
    "answer_first",
    "escape_members",
    "evidence_gated",
    "is_escape_member",
    "null_only",
    "nullable_fields",
    "presence",
    "reasoning_field",
    "ungated",
    "widen",
    "with_anchors",
]

ESCAPE_MEMBER = "unknown"
"""The wire name of the member `widen` adds to an enum that has no escape member."""

_ABSENT_NOTE = "Null when the source does not say."
# Error types of the original's own checks (a validator raising ValueError or AssertionError), as
# opposed to errors of shape (a null or an escape member the original does not allow).
_CHECK_ERRORS = frozenset({"value_error", "assertion_error"})

_widened: WeakKeyDictionary[type[Contract], type[Contract]] = WeakKeyDictionary()
_widening: set[type[Contract]] = set()  # contracts being widened now: a recursive one comes back
_reordered: WeakKeyDictionary[type[Contract], type[Contract]] = WeakKeyDictionary()
_escaped: WeakKeyDictionary[type[Enum], type[Enum]] = WeakKeyDictionary()
_gated: WeakKeyDictionary[type[Contract], type[Contract]] = WeakKeyDictionary()
_presence: WeakKeyDictionary[type[Contract], type[Contract]] = WeakKeyDictionary()
_nulled: dict[tuple[type[Contract], frozenset[str]], type[Contract]] = {}
_anchored: dict[tuple[type[Contract], tuple[tuple[str, str], ...]], type[Contract]] = {}
_lock = _fork.lock()
# Being widened in a forked child: nothing (the thread widening it at the fork is not there).
_fork.in_child(_widening.clear)

K = TypeVar("K")
T = TypeVar("T")

_EVIDENCE = (
    "The words of the document that state the value, copied exactly (for example the whole "
    "line it is on)."
)
_GATED = (
    ' Write {"evidence": <the words of the document that state it>, "value": <the value>}, or '
    "null if the document does not state it."
)


def widen(contract: type[Contract]) -> type[Contract]:
    """The widened contract (module docstring): every field nullable and optional (absent is
    `None`), every enum with an escape member, nested contracts widened; built once per
    contract and cached."""
    if not (isinstance(contract, type) and issubclass(contract, Contract)):
        raise TypeError(f"widen takes a Contract subclass, not {contract!r}")
    with _lock:
        return _widen(contract)


def _widen(contract: type[Contract]) -> type[Contract]:
    cached = _widened.get(contract)
    if cached is not None:
        return cached
    if contract in _widening:
        raise ValueError(
            f"widen does not support recursive contracts ({contract.__name__} contains itself)"
        )
    _widening.add(contract)
    try:
        fields: dict[str, Any] = {}
        for name, info in contract.model_fields.items():
            annotation = _widen_type(info.annotation)
            widened_info = copy.copy(info)
            if not _nullable(info.annotation):
                annotation = annotation | None
                widened_info.description = _with_note(info.description)
            widened_info.annotation = annotation
            if widened_info.is_required():
                widened_info.default = None  # may be absent
            fields[name] = (annotation, widened_info)
        widened = _derive(contract, f"{contract.__name__}Widened", fields)
    finally:
        _widening.discard(contract)
    _widened[contract] = widened
    return widened


def is_escape_member(value: object) -> bool:
    """Whether an enum value means "none of these" (`unknown`, `other`, `n/a`, ...), as the
    linter counts escape members."""
    return isinstance(value, str) and is_escape(value)


def escape_members(contract: type[Contract]) -> dict[str, frozenset[str]]:
    """Per top-level field, the enum values that mean "none of these" (empty for a field that
    is no enum or has none)."""
    root = shared_schema(contract)
    return {
        item.name: frozenset(
            m for m in shape_of(root, item.schema).enum or [] if is_escape_member(m)
        )
        for item in object_fields(root, "")
    }


def reasoning_field(contract: type[Contract]) -> str | None:
    """The name of the contract's reasoning field (the first string field named like reasoning,
    rationale, analysis, ...; as the linter reads names), or `None`."""
    for name, info in contract.model_fields.items():
        if set(name_tokens(name)) & REASONING_WORDS and _is_text(info.annotation):
            return name
    return None


def answer_first(contract: type[Contract]) -> type[Contract]:
    """The contract with its reasoning field moved to the end, named `<Name>AnswerFirst`.

    Everything else is kept (types, descriptions, bounds, the order of the other fields), and
    the original's checks run on every value, which always fits the original. A `ValueError` if
    the contract has no reasoning field (`reasoning_field`) or it is already last.
    """
    if not (isinstance(contract, type) and issubclass(contract, Contract)):
        raise TypeError(f"answer_first takes a Contract subclass, not {contract!r}")
    reasoning = reasoning_field(contract)
    if reasoning is None:
        raise ValueError(f"{contract.__name__} has no reasoning field to move after the answer")
    names = list(contract.model_fields)
    if names[-1] == reasoning:
        raise ValueError(f"{contract.__name__}.{reasoning} is already generated last")
    order = [name for name in names if name != reasoning] + [reasoning]
    fields: dict[str, Any] = {
        name: (contract.model_fields[name].annotation, copy.copy(contract.model_fields[name]))
        for name in order
    }
    return _once(
        _reordered, contract, lambda: _derive(contract, f"{contract.__name__}AnswerFirst", fields)
    )


def nullable_fields(contract: type[Contract]) -> list[str]:
    """The top-level fields that may hold `null`, in declaration order."""
    return [name for name, info in contract.model_fields.items() if _nullable(info.annotation)]


def evidence_gated(contract: type[Contract]) -> type[Contract]:
    """The contract with each nullable top-level field written as evidence then value, or
    `null` (module docstring), named `<Name>EvidenceGated`; a `ValueError` if it has none."""
    names = nullable_fields(_checked(contract, "evidence_gated"))
    if not names:
        raise ValueError(f"{contract.__name__} has no nullable field to gate on evidence")
    return _once(_gated, contract, lambda: _gate(contract, names))


def _gate(contract: type[Contract], names: list[str]) -> type[Contract]:
    fields: dict[str, Any] = {}
    for name, info in contract.model_fields.items():
        if name not in names:
            fields[name] = (info.annotation, copy.copy(info))
            continue
        value_info = copy.copy(info)
        value_info.annotation = _non_null(info.annotation)
        value_info.description = None
        value_info.default = PydanticUndefined
        evidence: Any = (Verbatim, Field(description=_EVIDENCE))
        pair = create_model(
            f"{contract.__name__}{_camel(name)}Evidence",
            __base__=Contract,
            __module__=contract.__module__,
            __doc__=f"The {name} of {contract.__name__}, after the words that state it.",
            evidence=evidence,
            value=(value_info.annotation, value_info),
        )
        gated_info = copy.copy(info)
        gated_info.annotation = pair | None
        gated_info.description = f"{(info.description or '').rstrip()}{_GATED}".strip()
        fields[name] = (pair | None, gated_info)
    return _derive(contract, f"{contract.__name__}EvidenceGated", fields)


def ungated(value: dict[str, Any], contract: type[Contract]) -> dict[str, Any]:
    """An `evidence_gated(contract)` value (JSON form) in `contract`'s own shape."""
    out = dict(value)
    for name in nullable_fields(contract):
        gated = out.get(name)
        out[name] = gated.get("value") if isinstance(gated, dict) else None
    return out


def presence(contract: type[Contract]) -> type[Contract]:
    """`<Name>Presence`: one boolean per nullable top-level field, "does the document state
    it?"; a `ValueError` if the contract has no nullable field."""
    names = nullable_fields(_checked(contract, "presence"))
    if not names:
        raise ValueError(f"{contract.__name__} has no nullable field to ask about")
    fields: dict[str, Any] = {}
    for name in names:
        said = (contract.model_fields[name].description or name).rstrip(".")
        question = f"true if the document states this, false if it does not: {said}."
        fields[name] = (bool, Field(description=question))
    return _once(
        _presence, contract, lambda: _derive(contract, f"{contract.__name__}Presence", fields)
    )


def null_only(contract: type[Contract], names: Iterable[str]) -> type[Contract]:
    """The contract with the named top-level fields able to hold `null` only (the second pass
    of presence-first: the fields the first pass found unstated)."""
    chosen = frozenset(names)
    unknown = chosen - set(_checked(contract, "null_only").model_fields)
    if unknown:
        raise ValueError(f"{contract.__name__} has no field(s) {', '.join(sorted(unknown))}")
    if not chosen:
        return contract
    fields: dict[str, Any] = {}
    for name, info in contract.model_fields.items():
        kept = copy.copy(info)
        if name in chosen:
            kept = FieldInfo(annotation=type(None), description=info.description)
        fields[name] = (kept.annotation, kept)
    suffix = "".join(_camel(name) for name in sorted(chosen))
    return _once(
        _nulled,
        (contract, chosen),
        lambda: _derive(contract, f"{contract.__name__}Null{suffix}", fields),
    )


def with_anchors(contract: type[Contract], anchors: Mapping[str, Any]) -> type[Contract]:
    """The contract with an `Anchor` (`sdk.schema.grounding`) on each named top-level field: the
    grounded grammar confines its spans to the anchor's regions and the parser refuses a value
    outside them (the `anchored` eval arm)."""
    unknown = set(anchors) - set(_checked(contract, "with_anchors").model_fields)
    if unknown:
        raise ValueError(f"{contract.__name__} has no field(s) {', '.join(sorted(unknown))}")
    if not anchors:
        return contract
    fields: dict[str, Any] = {}
    for name, info in contract.model_fields.items():
        kept = copy.copy(info)
        annotation: Any = kept.annotation
        if name in anchors:
            annotation = Annotated[annotation, anchors[name]]
        fields[name] = (annotation, kept)
    key = (contract, tuple(sorted((name, repr(anchor)) for name, anchor in anchors.items())))
    return _once(_anchored, key, lambda: _derive(contract, f"{contract.__name__}Anchored", fields))


def _once(cache: MutableMapping[K, T], key: K, build: Callable[[], T]) -> T:
    """`cache[key]`, built once under the lock: two threads asking for the same derived
    contract get the same class (a second class would be a different schema identity)."""
    with _lock:
        found = cache.get(key)
        if found is None:
            found = cache[key] = build()
        return found


def _checked(contract: type[Contract], where: str) -> type[Contract]:
    if not (isinstance(contract, type) and issubclass(contract, Contract)):
        raise TypeError(f"{where} takes a Contract subclass, not {contract!r}")
    return contract


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _non_null(annotation: Any) -> Any:
    """`T` of `T | None` (a union of the rest when there are several)."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007
    return annotation


def _derive(contract: type[Contract], name: str, fields: dict[str, Any]) -> type[Contract]:
    derived = cast(
        "type[Contract]",
        create_model(
            name,
            __base__=Contract,
            __module__=contract.__module__,
            __doc__=contract.__doc__,
            __validators__={"_original_checks": _original_checks(contract)},
            **fields,
        ),
    )
    derived.schema_version = contract.schema_version
    derived.lint_ignore = copy.deepcopy(dict(contract.lint_ignore))
    return derived


def _is_text(annotation: Any) -> bool:
    if annotation is str:
        return True
    if typing.get_origin(annotation) is Annotated:
        return _is_text(typing.get_args(annotation)[0])
    return False


def _original_checks(contract: type[Contract]) -> Any:
    """An after-validator running `contract`'s own checks on a value that fits `contract`."""

    def check(self: Contract, info: ValidationInfo) -> Contract:
        try:
            contract.model_validate_json(self.model_dump_json(), context=info.context)
        except ValidationError as error:
            errors = error.errors(include_url=False)
            if all(item["type"] in _CHECK_ERRORS for item in errors):
                raise ValueError("; ".join(_message(item) for item in errors)) from None
            # A shape error: the value used the widened room, where the checks do not apply.
        return self

    check.__name__ = "_original_checks"
    return model_validator(mode="after")(check)


def _message(item: Any) -> str:
    message = str(item["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    where = "/".join(str(part) for part in item.get("loc", ()))
    return f"{where}: {message}" if where else message


def _with_note(description: str | None) -> str:
    return f"{description.rstrip()} {_ABSENT_NOTE}" if description else _ABSENT_NOTE


def _nullable(annotation: Any) -> bool:
    if annotation is None or annotation is type(None):
        return True
    if typing.get_origin(annotation) is Annotated:
        return _nullable(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return any(_nullable(arg) for arg in typing.get_args(annotation))
    return False


def _widen_type(annotation: Any) -> Any:
    """The annotation with nested contracts widened and enums escaped, at any depth."""
    if isinstance(annotation, type):
        if issubclass(annotation, Contract):
            return _widen(annotation)
        if issubclass(annotation, Enum):
            return _escape(annotation)
        return annotation
    origin = typing.get_origin(annotation)
    if origin is None:
        return annotation
    arguments = typing.get_args(annotation)
    if origin is Annotated:
        return Annotated[(_widen_type(arguments[0]), *annotation.__metadata__)]
    if origin is Literal:
        if all(isinstance(value, str) for value in arguments) and not any(
            is_escape(value) for value in arguments
        ):
            return Literal[(*arguments, ESCAPE_MEMBER)]
        return annotation
    if origin in (Union, types.UnionType):
        widened = [_widen_type(argument) for argument in arguments]
        return Union[tuple(widened)]  # noqa: UP007 (built from a runtime tuple)
    if origin in (list, tuple, set, frozenset, dict):
        return origin[tuple(_widen_type(argument) for argument in arguments)]
    return annotation


def _escape(enum: type[Enum]) -> type[Enum]:
    """`enum`, or a copy of it with an `unknown` member when it has no escape member."""
    if any(is_escape(member.value) for member in enum):
        return enum
    if not issubclass(enum, WireEnum):
        raise TypeError(
            f"widen cannot add an escape member to {enum.__name__}: contracts use WireEnum"
        )
    cached = _escaped.get(enum)
    if cached is not None:
        return cached
    members = {member.name: member.value for member in enum}
    key = "UNKNOWN"
    while key in members:
        key = f"_{key}"
    members[key] = ESCAPE_MEMBER
    escaped: Any = WireEnum(f"{enum.__name__}Widened", members)
    escaped.__doc__ = f"{enum.__doc__ or enum.__name__} (widened: `{ESCAPE_MEMBER}` added)"
    escaped.__module__ = enum.__module__
    _escaped[enum] = escaped
    return cast("type[Enum]", escaped)
