"""Everything the parser needs per contract, built once and cached.

Two validators for one schema: `jsonschema-rs` (Rust) answers "valid?" fast on the hot path,
and the `jsonschema` package, the reference implementation, lists every error with its pointer
only when an instance is invalid. Tests hold them to the same verdict.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from weakref import WeakKeyDictionary

from sdk import _fork
from sdk._values.pointer import escape_pointer
from sdk._values.pointer import pointer_of
from sdk.errors import Violation
from sdk.parsing._limits import MAX_DEPTH
from sdk.parsing._limits import schema_depth
from sdk.schema._shape import shape_of
from sdk.schema._walk import SchemaWalker
from sdk.schema.canonical import shared_schema
from sdk.schema.grounding import ANCHOR_KEY
from sdk.schema.grounding import grounded_kind

if TYPE_CHECKING:
    import jsonschema
    from jsonschema.exceptions import ValidationError

    from sdk.contract import Contract

__all__ = ["CompiledContract", "compile_contract", "pointer_of"]

# Longest message kept from the reference validator before switching to a short form: its
# messages embed the offending instance, which must not grow retry feedback with document size.
_MAX_MESSAGE = 160


@dataclass(frozen=True, eq=False)
class CompiledContract:
    """A contract's canonical schema with its validators and walkers, compiled once."""

    fast: Any  # jsonschema_rs validator: no type stubs
    reference: jsonschema.Draft202012Validator
    enums: SchemaWalker
    quotes: SchemaWalker
    """Strings checked against the source: `SourceQuote` and `Verbatim`."""
    anchors: SchemaWalker | None
    """Nodes with an `Anchor` (`x-anchor`), whose `Verbatim` strings are checked against its
    regions; `None` for a contract with no grounded string."""
    optionals: SchemaWalker
    """Objects with optional properties that reject `null` (see `absent_nulls` in `parse`)."""
    non_nullable_optionals: dict[int, tuple[str, ...]]
    """Those properties' names, per object node (by `id`): computed once per contract."""
    depth_bound: int | None = None
    """The deepest nesting a valid instance can have (`None`: unbounded, see `schema_depth`)."""

    @property
    def valid_is_shallow(self) -> bool:
        """Whether every instance the schema accepts is within `MAX_DEPTH`."""
        return self.depth_bound is not None and self.depth_bound <= MAX_DEPTH

    def is_valid(self, instance: Any) -> bool:
        """The fast verdict."""
        return bool(self.fast.is_valid(instance))

    def violations(self, instance: Any) -> list[Violation]:
        """Every schema error, each with a JSON pointer.

        From the reference validator; where it finds nothing that the fast one rejects (Python's
        `re` lets `$` match before a final newline, ECMA regexes as JSON Schema specifies do
        not), from the fast validator, so that the verdict is always the fast one's.
        """
        found: list[Violation] = []
        try:
            errors = sorted(self.reference.iter_errors(instance), key=_document_order)
            for error in errors:
                found.extend(_violations_of(error))
        except RecursionError:
            # The parser bounds nesting (`MAX_DEPTH`) before this step; a caller that does not
            # still gets the (iterative) fast validator's list, never the RecursionError.
            found = []
        if not found:
            for fast_error in self.fast.iter_errors(instance):
                keyword = fast_error.schema_path[-1] if fast_error.schema_path else None
                found.append(
                    Violation(
                        pointer_of(fast_error.instance_path), _shorten(fast_error.message), keyword
                    )
                )
        return found


def _document_order(error: Any) -> list[tuple[int, int, str]]:
    """An error's place in the document: list items by their index as a number (`/items/2`
    before `/items/10`), object members by name."""
    return [(0, part, "") if isinstance(part, int) else (1, 0, str(part)) for part in error.path]


_cache: WeakKeyDictionary[type[Contract], CompiledContract] = WeakKeyDictionary()
_lock = _fork.lock()


def compile_contract(contract: type[Contract]) -> CompiledContract:
    """The compiled form of `contract`, from the cache after the first call."""
    compiled = _cache.get(contract)
    if compiled is None:
        with _lock:
            compiled = _cache.get(contract)
            if compiled is None:
                compiled = _compile(contract)
                _cache[contract] = compiled
    return compiled


def _compile(contract: type[Contract]) -> CompiledContract:
    # The cached canonical dict is shared read-only with the validators and walkers.
    schema = shared_schema(contract)
    optional: dict[int, tuple[str, ...]] = {}

    def has_non_nullable_optionals(node: dict[str, Any]) -> bool:
        names = tuple(_non_nullable_optionals(schema, node))
        if names:
            optional[id(node)] = names
        return bool(names)

    # The validators load with the first contract compiled, not with `import sdk`.
    import jsonschema_rs

    quotes = SchemaWalker(schema, _is_grounded)
    return CompiledContract(
        fast=jsonschema_rs.validator_for(schema),
        reference=_reference_validator()(schema),
        enums=SchemaWalker(schema, _is_string_enum),
        quotes=quotes,
        anchors=SchemaWalker(schema, _is_anchored) if quotes.any_wanted else None,
        optionals=SchemaWalker(schema, has_non_nullable_optionals),
        non_nullable_optionals=optional,
        depth_bound=schema_depth(schema),
    )


def _reference_validator() -> type[jsonschema.Draft202012Validator]:
    """The reference validator, its `pattern` keyword read the way Pydantic and the fast
    validator read it.

    Both of those use Rust's `regex` engine, which knows `\\p{L}` and other Unicode classes
    that Python's `re` refuses; the stock keyword would raise a bare `re.error` out of the
    schema step for a pattern the contract was allowed to declare. A pattern `re` cannot
    compile is read by the `regex` module (Unicode properties, like the Rust engine); one that
    neither compiles is left to the fast validator, whose errors `violations` then adds.
    """
    global _REFERENCE
    if _REFERENCE is None:
        import jsonschema
        from jsonschema.exceptions import ValidationError as SchemaError

        def pattern(
            validator: Any, wanted: Any, instance: Any, schema: Any
        ) -> Iterator[SchemaError]:
            if not validator.is_type(instance, "string") or not isinstance(wanted, str):
                return
            compiled = _pattern(wanted)
            if compiled is not None and compiled.search(instance) is None:
                yield SchemaError(f"{instance!r} does not match {wanted!r}")

        _REFERENCE = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
            jsonschema.Draft202012Validator, {"pattern": pattern}
        )
    return _REFERENCE


_REFERENCE: type[jsonschema.Draft202012Validator] | None = None


@functools.lru_cache(maxsize=1024)
def _pattern(pattern: str) -> Any:
    """`pattern` compiled by `re`, else by `regex`, else `None` (the fast validator decides)."""
    try:
        return re.compile(pattern)
    except re.error:
        pass
    import regex

    try:
        return regex.compile(pattern)
    except (regex.error, ValueError, OverflowError):
        return None


def _non_nullable_optionals(root: dict[str, Any], node: dict[str, Any]) -> Iterator[str]:
    required = set(node.get("required", ()))
    for name, child in node.get("properties", {}).items():
        if name not in required and isinstance(child, dict) and not shape_of(root, child).nullable:
            yield name


def _is_grounded(node: dict[str, Any]) -> bool:
    return grounded_kind(node) is not None


def _is_anchored(node: dict[str, Any]) -> bool:
    return isinstance(node.get(ANCHOR_KEY), dict)


def _is_string_enum(node: dict[str, Any]) -> bool:
    return bool(_wire_names(node))


def _wire_names(node: dict[str, Any]) -> list[str]:
    """The string values a node allows: its `enum`, or its `const` (a one-value `Literal`, as a
    discriminator's value is written), so the casing policy treats both alike."""
    values = node.get("enum")
    if isinstance(values, list):
        return values if values and all(isinstance(v, str) for v in values) else []
    const = node.get("const")
    return [const] if isinstance(const, str) else []


def _violations_of(error: ValidationError) -> Iterator[Violation]:
    base = pointer_of(error.absolute_path)
    keyword = str(error.validator)
    instance = error.instance
    if keyword == "required" and isinstance(instance, dict):
        required: list[str] = list(error.validator_value)  # type: ignore[arg-type]
        for name in required:
            if name not in instance and f"'{name}'" in error.message:
                yield Violation(
                    f"{base}/{escape_pointer(name)}", "required property is missing", keyword
                )
        return
    if keyword == "additionalProperties" and isinstance(instance, dict):
        schema: dict[str, Any] = error.schema  # type: ignore[assignment]
        known = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        for name in instance:
            if name not in known and not any(re.search(p, name) for p in patterns):
                yield Violation(
                    f"{base}/{escape_pointer(name)}",
                    "unknown property (not in the contract)",
                    keyword,
                )
        return
    if keyword in ("anyOf", "oneOf") and error.context:
        yield from _union_violations(error)
        return
    yield Violation(base, _message(error), keyword)


def _union_violations(error: ValidationError) -> Iterator[Violation]:
    """The errors of the one branch the value was meant for, each at its own pointer.

    With a `discriminator` (a Pydantic discriminated union), the branch its value names; a
    value naming none is reported at the discriminator itself. Otherwise the branch whose type
    the value has, with the fewest errors: for a nullable string, "'Euro' is too long" helps
    the model; "'Euro' is not of type 'null'" does not, and neither do another object
    branch's "unexpected property" errors for every field of the intended one.
    """
    branches: dict[int, list[ValidationError]] = {}
    for inner in error.context or ():
        index = inner.relative_schema_path[0] if inner.relative_schema_path else None
        if isinstance(index, int):
            branches.setdefault(index, []).append(inner)
    schema: Any = error.schema
    chosen = _discriminated_branch(error, schema)
    if chosen is not None and not isinstance(chosen, int):
        yield chosen
        return
    if chosen is None or chosen not in branches:
        scored: list[tuple[int, int, int, list[Violation]]] = []
        for index, errors in branches.items():
            # A branch of another type ("not of type 'null'" at the value itself) goes last.
            wrong_type = all(e.validator == "type" and not e.relative_path for e in errors)
            found = [v for e in errors for v in _violations_of(e)]
            scored.append((int(wrong_type), len(found), index, found))
        if not scored:
            return
        yield from min(scored, key=lambda entry: entry[:3])[3]
        return
    for inner in branches[chosen]:
        yield from _violations_of(inner)


def _discriminated_branch(error: ValidationError, schema: Any) -> int | Violation | None:
    """The index of the branch the discriminator names, a violation at the discriminator if it
    names none, or `None` where there is no discriminator to go by."""
    discriminator = schema.get("discriminator") if isinstance(schema, dict) else None
    instance = error.instance
    if not isinstance(discriminator, dict) or not isinstance(instance, dict):
        return None
    name = discriminator.get("propertyName")
    mapping = discriminator.get("mapping")
    options = schema.get(str(error.validator))
    if not isinstance(name, str) or not isinstance(mapping, dict) or not isinstance(options, list):
        return None
    value = instance.get(name)
    target = mapping.get(value) if isinstance(value, str) else None
    if target is None:
        expected = ", ".join(repr(key) for key in mapping)
        return Violation(
            f"{pointer_of(error.absolute_path)}/{escape_pointer(name)}",
            f"{value!r} is not one of the {name} values ({expected})"
            if name in instance
            else f"required property is missing (one of {expected})",
            "discriminator",
        )
    for index, option in enumerate(options):
        if isinstance(option, dict) and option.get("$ref") == target:
            return index
    return None


def _message(error: ValidationError) -> str:
    if len(error.message) <= _MAX_MESSAGE:
        return error.message
    shown = repr(error.instance)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return _shorten(f"{shown} violates {error.validator}: {error.validator_value!r}")


def _shorten(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 3] + "..."
