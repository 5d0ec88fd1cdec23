"""Top-level lists and unions: `generate(list[Item])`, `generate(A | B)`.

Providers' structured-output modes take an object at the top (and a contract is one), so a list
or a union travels in a generated *envelope* contract: `ItemList` with one field `items:
list[Item]`, or `AOrB` with one field `value: A | B`. The envelope is an ordinary contract on the
wire (its own name, version and fingerprint, its schema in every dialect), and the client unwraps
it: `Result.value` is the list, or the A or B.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import create_model

from sdk.contract import Contract
from sdk.contract import is_contract

__all__ = ["Envelope", "envelope_of"]


@dataclass(frozen=True)
class Envelope:
    """The generated contract for a list or union type, and how to unwrap its value."""

    contract: type[Contract]
    field: str
    """The one field holding the list (`items`) or the union's value (`value`)."""

    def unwrap(self, value: Contract) -> Any:
        """The list, or the union member, inside an envelope value."""
        return getattr(value, self.field)

    @property
    def is_list(self) -> bool:
        """Whether the envelope holds a list (its items can stream one by one)."""
        return self.field == "items"


def envelope_of(output: object) -> Envelope | None:
    """The envelope of `list[C]` (of a `Contract` subclass) or of a union of `Contract`
    subclasses (`A | B`, `Union[A, B]`); `None` for anything else."""
    try:
        # Remembered by its members in their order too: `A | B == B | A` (and they hash
        # alike), but the order is the schema's and decides which member a value both fit is.
        return _envelope(output, typing.get_args(output))
    except TypeError:  # unhashable: not a type we envelope
        return None


@cache
def _envelope(output: object, args: tuple[Any, ...]) -> Envelope | None:
    origin = typing.get_origin(output)
    if origin is list and len(args) == 1 and is_contract(args[0]):
        item: type[Contract] = args[0]
        return _make(f"{item.__name__}List", "items", list[item], item.schema_version)  # type: ignore[valid-type]
    if origin in (typing.Union, types.UnionType) and args and all(map(is_contract, args)):
        name = "Or".join(arg.__name__ for arg in args)
        version = max(arg.schema_version for arg in args)
        return _make(name, "value", output, version)
    return None


def _make(name: str, field: str, annotation: Any, version: int) -> Envelope:
    doc = (
        "A list of items, in the order they appear."
        if field == "items"
        else "Exactly one of the alternatives, whichever fits."
    )
    contract = create_model(  # type: ignore[call-overload]
        name,
        __base__=Contract,
        __doc__=doc,
        __module__=__name__,
        **{field: (annotation, ...)},
    )
    contract.schema_version = version
    return Envelope(typing.cast(type[Contract], contract), field)
