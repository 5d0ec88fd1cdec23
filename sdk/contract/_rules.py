"""The checks a `Contract` subclass passes when it is defined: nothing may quietly undo the
rules the base class sets (closed, strict, writing the wire names it reads).

Kept apart from `_base.py`, which calls `check_contract_class` giving itself as `base` (this
module imports nothing of the package: the arrow points one way), beside its own checks of a
subclass's `schema_version` and field names (those read the base class's own attributes).
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING
from typing import Any

from pydantic import AliasChoices
from pydantic import AliasPath
from pydantic import BaseModel

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

__all__ = ["ContractDefinitionError", "check_contract_class"]

# The settings `Contract.model_config` fixes, what each guarantees, and what to do instead.
_PINNED: dict[str, tuple[object, str]] = {
    "extra": (
        "forbid",
        "unknown fields are errors, never kept or silently dropped; declare the field "
        "(optional, with a default) instead",
    ),
    "strict": (
        True,
        "nothing is coerced ('1' is not 1); declare the type the model writes (a union such "
        "as int | str if both occur), or convert in a field_validator(mode='before')",
    ),
    "allow_inf_nan": (False, "JSON has no NaN or Infinity; use an Optional field for 'no value'"),
    "serialize_by_alias": (
        True,
        "a contract writes the wire names it reads, so a stored or dumped value reads back",
    ),
    "validate_by_alias": (
        True,
        "a contract reads the wire names it writes (the aliases), so a stored or dumped value "
        "reads back; to also read field names, set validate_by_name=True",
    ),
}


class ContractDefinitionError(TypeError):
    """A `Contract` subclass undoes one of the contract rules (raised when it is defined)."""


def check_contract_class(cls: type[BaseModel], base: type[BaseModel]) -> None:
    """Refuse a contract (`cls`, a subclass of `base`, the `Contract` class) whose config,
    fields or nested models undo the contract rules."""
    config = cls.model_config
    for setting, (wanted, why) in _PINNED.items():
        if setting in config and config[setting] != wanted:  # type: ignore[literal-required]
            raise ContractDefinitionError(
                f"{cls.__name__} sets model_config {setting}={config[setting]!r}; a Contract "  # type: ignore[literal-required]
                f"keeps {setting}={wanted!r} because {why}"
            )
    for name, info in cls.model_fields.items():
        _check_field(cls, name, info, base)


def _check_field(
    cls: type[BaseModel], name: str, info: FieldInfo, base: type[BaseModel]
) -> None:
    where = f"{cls.__name__}.{name}"
    for item in info.metadata:
        if getattr(item, "strict", None) is False:
            raise ContractDefinitionError(
                f"{where} is declared strict=False; a Contract coerces nothing: declare the "
                "type the model writes (a union such as int | str if both occur) instead"
            )
    validation = info.validation_alias
    if isinstance(validation, AliasChoices | AliasPath):
        raise ContractDefinitionError(
            f"{where} has validation_alias={validation!r}: a Contract reads one wire name per "
            "field and writes the same one; use alias='wireName' instead"
        )
    written = info.serialization_alias or name
    read = validation or info.alias or name
    if read != written:
        raise ContractDefinitionError(
            f"{where} reads the wire name {read!r} but writes {written!r}: a Contract writes "
            "exactly the wire names it reads; use alias='wireName' (one name for both) instead"
        )
    plain = _plain_model_in(info.annotation, base, set())
    if plain is not None:
        named = plain.__name__.partition("[")[0]  # `Page`, not `Page[Item]`
        raise ContractDefinitionError(
            f"{where} holds {named}, a plain pydantic BaseModel: it keeps pydantic's "
            "defaults (unknown fields dropped, values coerced) inside a strict contract; "
            f"derive {named} from sdk.Contract instead"
        )


def _plain_model_in(
    annotation: Any, base: type[BaseModel], seen: set[int]
) -> type[BaseModel] | None:
    """A `BaseModel` subclass that is not a `base` (a `Contract`), anywhere in `annotation`."""
    if id(annotation) in seen:
        return None
    seen.add(id(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not issubclass(annotation, base):
            return annotation
        return None
    for arg in typing.get_args(annotation):
        found = _plain_model_in(arg, base, seen)
        if found is not None:
            return found
    return None
