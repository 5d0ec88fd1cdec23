"""The contract types: `Contract`, `WireEnum`, `SourceQuote`, `Verbatim`, and what the parser
reads of them (see the package docstring for what they close)."""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Annotated
from typing import Any
from typing import ClassVar
from typing import Self
from typing import TypeGuard

from pydantic import BaseModel
from pydantic import ConfigDict
from pydantic import GetCoreSchemaHandler
from pydantic import GetJsonSchemaHandler
from pydantic import ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError
from pydantic_core import core_schema

from sdk.contract._rules import ContractDefinitionError
from sdk.contract._rules import check_contract_class
from sdk.schema.canonical import SchemaVersion
from sdk.schema.canonical import checked_version
from sdk.schema.grounding._spans import GROUNDED_KEYS
from sdk.schema.grounding._spans import SOURCE_QUOTE_KEY
from sdk.schema.grounding._spans import VERBATIM_KEY

__all__ = [
    "GROUNDED_KEYS",
    "SOURCE_QUOTE_KEY",
    "VERBATIM_KEY",
    "Contract",
    "ContractDefinitionError",
    "LintIgnore",
    "SourceQuote",
    "Verbatim",
    "WireEnum",
    "WireNameError",
    "is_contract",
    "require_contract",
]



class WireNameError(TypeError, ValueError):
    """A `WireEnum` member's value is not a valid wire name (raised when the class is defined)."""


class WireEnum(str, Enum):
    """A string enum whose values are the wire names: lowercase, matched exactly.

    Validation accepts a member of this enum, or a plain `str` equal to one of the values.
    Integers, booleans, member names (`"APPROVE"`), case variants (`"Approve"`) and
    comma-joined strings (`"approve, reject"`) are all rejected.
    """

    def __new__(cls, *values: object) -> Self:
        # Runs once per member while the class is defined. The `str` mixin would turn `X = 1`
        # into the wire name "1"; a non-str value is a mistake to report, not to convert.
        value = values[0] if len(values) == 1 else values
        if not isinstance(value, str):
            raise WireNameError(
                f"{cls.__name__} has a member with wire name {value!r} "
                f"({type(value).__name__}): wire names must be strings, written as they go "
                "over the wire"
            )
        member = str.__new__(cls, value)
        member._value_ = value
        return member

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, member in cls.__members__.items():
            value: object = member.value
            if not isinstance(value, str) or not value or value != value.lower():
                raise WireNameError(
                    f"{cls.__name__}.{name} has wire name {value!r}: wire names must be "
                    "non-empty lowercase strings, because providers and the parser compare "
                    "them exactly"
                )

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    @classmethod
    def wire_names(cls) -> list[str]:
        """The values, in declaration order: what the schema's `enum` lists."""
        return [str(member.value) for member in cls]

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        members: dict[str, WireEnum] = {str(m.value): m for m in cls}
        expected = ", ".join(repr(name) for name in members)

        def validate(value: Any) -> WireEnum:
            if isinstance(value, cls):
                return value
            # `type(...) is str`: a member of another enum, or any str subclass, is not a wire
            # name of this one even when its text matches.
            if type(value) is str:
                member = members.get(value)
                if member is not None:
                    return member
                raise PydanticCustomError(
                    "wire_enum",
                    # (pydantic fills `{name}` only, with `str`: the text is quoted here)
                    "{received} is not a wire name of {enum}; expected one of {expected}",
                    {"received": repr(value), "enum": cls.__name__, "expected": expected},
                )
            raise PydanticCustomError(
                "wire_enum_type",
                "{enum} takes a string wire name, not {kind}; expected one of {expected}",
                {"enum": cls.__name__, "kind": type(value).__name__, "expected": expected},
            )

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda member: member.value, return_schema=core_schema.str_schema()
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "enum": cls.wire_names()}


class _SourceMarker:
    """Metadata on `SourceQuote` and `Verbatim`: adds the schema annotation the parser (and a
    local engine's grammar) looks for."""

    __slots__ = ("key", "name")

    def __init__(self, key: str, name: str) -> None:
        self.key = key
        self.name = name

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema[self.key] = True
        return json_schema

    def __repr__(self) -> str:
        return self.name


SourceQuote = Annotated[str, _SourceMarker(SOURCE_QUOTE_KEY, "SourceQuote")]
"""Evidence: a string that must be a verbatim span of the source document (or empty: "no
evidence"). Compared with the source in Unicode NFC; white space or invisible characters alone
fail the check (they prove nothing)."""

Verbatim = Annotated[str, _SourceMarker(VERBATIM_KEY, "Verbatim")]
"""A value copied exactly from the source document: a tracking number, a name, an id.

The value must be a span of the source, character for character. Unlike `SourceQuote`, an
empty string is not a valid `Verbatim` value (it would say "copied" while copying nothing),
unless the source itself is empty; `Verbatim | None` is the way to say "copied, or not stated".
Constraints beside it (`Field(pattern=...)`, `max_length=...`) apply as to any string.

Where the engine can (`EmbeddedProvider`, a llama.cpp server in grammar mode, vLLM's guidance
backend), the value is constrained to the source's spans while decoding, so a copy cannot be
garbled and a value cannot be invented; everywhere else the parser checks it after parsing
(`CheckFailed` naming the field and the value), and the client retries with that feedback.
"""


LintIgnore = Mapping[str, Mapping[str, str]]
"""Type of `Contract.lint_ignore`: `{JSON pointer: {lint code: reason}}`."""


class Contract(BaseModel):
    """Base class of contracts: strict, closed, ordered, and versioned.

    Unknown fields are errors, explicit `null` on a non-nullable field is an error, nothing is
    coerced, and the declaration order of the fields is the property order of the schema (and so
    the order in which a model generates them).
    """

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        validate_default=True,
        use_attribute_docstrings=False,
        # `alias="wireName"` is the wire name both ways: a dumped value reads back.
        serialize_by_alias=True,
    )

    schema_version: ClassVar[SchemaVersion] = 1
    """Bump it when the schema changes; the lock file holds one fingerprint per version.

    A whole number from 1, checked when the class is defined (`"2"`, `True`, `2.0` and `0`
    are refused, naming the class)."""

    lint_ignore: ClassVar[LintIgnore] = {}
    """Deliberate exceptions to `sdk schema lint`, each with its reason.

    `{pointer: {code: reason}}`, the pointer into this contract's own schema (`""` for the
    whole contract, `/properties/score` for a field and everything below it). Not part of the
    schema, so editing it changes no fingerprint.
    """

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        _check_definition(cls)  # its version and its field names (none of the class's own)
        # Nothing may quietly undo the rules above (`ContractDefinitionError` says what to use).
        check_contract_class(cls, Contract)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The canonical JSON Schema (draft 2020-12): a fresh copy the caller may change."""
        # Imported on use: `sdk.schema`'s package init imports modules that build on this one.
        # `canonical` itself never imports `sdk.contract`, so the arrow points one way.
        from sdk.schema.canonical import canonical_schema

        return canonical_schema(cls)

    @classmethod
    def fingerprint(cls) -> str:
        """sha256 hex of the canonical schema's deterministic serialization."""
        from sdk.schema.canonical import fingerprint

        return fingerprint(cls)

    @classmethod
    def migrate_from(cls, version: int, data: dict[str, Any]) -> dict[str, Any]:
        """Turn a value stored under `version` into the shape of `version + 1`.

        Override it when you bump `schema_version`, with one branch per older version: each
        step is written once, when that version is replaced, and never touched again.
        `from_stored` runs the steps in order (1 -> 2 -> 3 ...) and then validates strictly.
        `data` is the caller's own copy: change it in place or build a new dict.

            @classmethod
            def migrate_from(cls, version, data):
                if version == 1:  # v2 renamed `answer` to `decision`
                    data["decision"] = data.pop("answer")
                    return data
                return super().migrate_from(version, data)

        The default knows no older versions: `from_stored` then reads the value unchanged,
        which is right for every change `sdk schema diff` calls compatible for stored values
        (an optional field added, an enum member added, a constraint loosened, ...), and
        says which step is missing when the value does not read.
        """
        raise NotImplementedError(
            f"{cls.__name__} has no migration from version {version} to {version + 1}; "
            "override migrate_from"
        )

    @classmethod
    def from_stored(cls, data: Mapping[str, Any] | str | bytes, *, version: int) -> Self:
        """Read a value stored under `schema_version == version` into this version.

        `data` is the stored JSON (text, or already decoded). It is migrated one version at a
        time with `migrate_from`, then validated as JSON with the full strictness of the
        contract, so a migration that forgets a field fails here, not later. A step with no
        migration (`migrate_from` raises `NotImplementedError`, as the default does) leaves the
        value as it is: a change the diff calls compatible for stored values needs none. If the
        value then does not read, the error is `NotImplementedError` naming the missing steps,
        with the validation error as its cause.
        """
        if version > cls.schema_version:
            raise ValueError(
                f"the value was stored under {cls.__name__} v{version}, newer than this "
                f"code's v{cls.schema_version}: upgrade the code that reads it"
            )
        if version < 1:
            raise ValueError(f"schema versions start at 1, not {version}")
        decoded: Any = json.loads(data) if isinstance(data, str | bytes) else copy.deepcopy(data)
        if not isinstance(decoded, dict):
            raise ValueError(f"a stored {cls.__name__} must be a JSON object")
        missing: list[str] = []
        for step in range(version, cls.schema_version):
            try:
                decoded = cls.migrate_from(step, decoded)
            except NotImplementedError:
                missing.append(f"{step} to {step + 1}")
        try:
            # Through JSON, so the value is read exactly as a stored document would be.
            return cls.model_validate_json(json.dumps(decoded))
        except ValidationError as error:
            if not missing:
                raise
            raise NotImplementedError(
                f"a value stored under {cls.__name__} v{version} does not read as "
                f"v{cls.schema_version} and there is no migration from version "
                f"{', '.join(missing)}: override migrate_from ({error.error_count()} "
                f"validation error(s); the first: {error.errors()[0]['msg']})"
            ) from error


RESERVED_NAMES = frozenset(
    name for name in vars(Contract) if not name.startswith("_") and not hasattr(BaseModel, name)
)
"""`Contract`'s own attributes (`schema_version`, `fingerprint`, ...), read off the class: a field
of one of these names would take the attribute as its default and turn optional, so it is
refused. (Pydantic refuses `BaseModel`'s own names, `model_dump` and the like, itself.)"""


def _check_definition(cls: type[Contract]) -> None:
    """Refuse, when a contract class is defined, a field named like a `Contract` attribute (a
    `ContractDefinitionError`, as `check_contract_class` raises) and a
    `schema_version` that is not a whole number from 1."""
    for name in cls.model_fields:
        if name in RESERVED_NAMES:
            hint = (
                " (to set the version, assign it without an annotation: schema_version = 2)"
                if name == "schema_version"
                else ""
            )
            raise ContractDefinitionError(
                f"{cls.__name__} has a field named {name!r}, the name of a Contract attribute: "
                "the field would take the attribute as its default and turn optional; rename "
                f"the field{hint}"
            )
    checked_version(cls)


def is_contract(obj: object) -> TypeGuard[type[Contract]]:
    """Whether `obj` is a `Contract` subclass (not `Contract` itself)."""
    return isinstance(obj, type) and issubclass(obj, Contract) and obj is not Contract


def require_contract(obj: object, where: str) -> type[Contract]:
    """`obj` if it is a `Contract` subclass; else a `TypeError` that says what `where` takes.

    Called at the top of every entry point that takes a contract (`parse`, `generate`,
    `stream`), so a wrong argument fails at the call, not deep inside with an `AttributeError`.
    """
    if is_contract(obj):
        return obj
    accepted = f"{where} takes a Contract subclass (class Answer(Contract): ...)"
    origin = typing.get_origin(obj)
    if origin in (list, tuple, set, frozenset) or obj in (list, tuple):
        problem = (
            f"not {_spelled(obj)}: top-level lists go through client.generate(list[Item]), "
            "Item one Contract subclass (an envelope contract on the wire); to parse one "
            "yourself, or for items of another type (list[A | B], list[str]), wrap it in a "
            "Contract field (items: list[Item])"
        )
    elif origin in (typing.Union, types.UnionType):
        problem = (
            f"not {_spelled(obj)}: top-level unions go through client.generate(A | B), every "
            "member a Contract subclass (an envelope contract on the wire); to parse one "
            "yourself, or for other members (None, a list), wrap it in a Contract field "
            "(answer: A | B)"
        )
    elif obj is Contract:
        problem = "not Contract itself: declare a subclass with your fields"
    elif isinstance(obj, type) and issubclass(obj, BaseModel):
        problem = (
            f"not {obj.__name__}, a plain pydantic BaseModel: derive it from sdk.Contract "
            "(strict, closed, versioned) instead"
        )
    elif isinstance(obj, Contract):
        problem = f"not an instance of {type(obj).__name__}: pass the class itself"
    else:
        problem = f"not {_spelled(obj)}"
    raise TypeError(f"{accepted}, {problem}")


def _spelled(obj: object) -> str:
    if isinstance(obj, type) and typing.get_origin(obj) is None:
        return f"{obj.__name__} (a {type(obj).__name__})"
    shown = repr(obj)
    return shown if len(shown) <= 80 else shown[:77] + "..."
