"""Contracts derived from a contract, for measuring what its shape costs (`sdk eval`).

`widen(contract)`: the same contract with room to abstain everywhere.

The reference texts' first remedy for a grammar that manufactures answers: give the model
somewhere to put "I don't know". The widened contract is what an evaluation runs beside the
production one to measure what that room is worth (`sdk eval`, arm `widened`):

- every field may be absent: its type gains `None` (it stays required, as strict provider modes
  want, so absence is an explicit `null`); a field that was not nullable says so in its
  description, because the model reads descriptions, not types;
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
"""

from __future__ import annotations

import copy
import types
import typing
from enum import Enum
from threading import Lock
from typing import Annotated, Any, Literal, Union, cast
from weakref import WeakKeyDictionary

from pydantic import ValidationError, ValidationInfo, create_model, model_validator

from sdk.contract._base import Contract, WireEnum
from sdk.schema._shape import name_tokens, object_fields, shape_of
from sdk.schema._vocabulary import REASONING_WORDS, is_escape
from sdk.schema.canonical import shared_schema

__all__ = [
    "ESCAPE_MEMBER",
    "answer_first",
    "escape_members",
    "is_escape_member",
    "reasoning_field",
    "widen",
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
_lock = Lock()


def widen(contract: type[Contract]) -> type[Contract]:
    """The widened contract (module docstring): every field nullable, every enum with an escape
    member, nested contracts widened; built once per contract and cached."""
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
    with _lock:
        cached = _reordered.get(contract)
        if cached is not None:
            return cached
        order = [name for name in names if name != reasoning] + [reasoning]
        fields: dict[str, Any] = {
            name: (contract.model_fields[name].annotation, copy.copy(contract.model_fields[name]))
            for name in order
        }
        reordered = _derive(contract, f"{contract.__name__}AnswerFirst", fields)
        _reordered[contract] = reordered
        return reordered


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
