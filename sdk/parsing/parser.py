"""The defensive parser: text and a stop reason in, a trusted value or a typed error out.

The steps run in a fixed order and each raises its own error:

1. stop reason (before any JSON parsing: a cut document can still parse);
2. JSON;
3. enum casing policy, on the raw JSON;
4. the canonical schema (where constraints that a provider dialect stripped are enforced);
5. the typed contract (Pydantic, strict);
6. semantic checks: source quotes, then the contract's own cross-field validators.

No I/O: every transport reuses it, and it is tested without servers.
"""

from __future__ import annotations

import json
import re
import sys
import typing
import unicodedata
from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Generic
from typing import Literal
from typing import TypedDict
from typing import TypeVar
from typing import Unpack

import pydantic
import pydantic_core

from sdk._values.blank import blank
from sdk._values.declared import check
from sdk._values.declared import check_keywords
from sdk._values.pointer import escape_pointer
from sdk._values.pointer import pointer_of
from sdk._values.position import TextPosition
from sdk._values.records import Note
from sdk._values.records import shorten
from sdk.contract import SOURCE_QUOTE_KEY
from sdk.contract import VERBATIM_KEY
from sdk.contract import Contract
from sdk.contract import require_contract
from sdk.errors import CheckFailed
from sdk.errors import ContentFiltered
from sdk.errors import ContractViolation
from sdk.errors import InvalidJSON
from sdk.errors import RefusedOutput
from sdk.errors import SchemaViolation
from sdk.errors import SourceMissing
from sdk.errors import TruncatedOutput
from sdk.errors import UnexpectedStop
from sdk.errors import Violation
from sdk.errors import summarize
from sdk.parsing._compiled import CompiledContract
from sdk.parsing._compiled import compile_contract
from sdk.parsing._limits import MAX_DEPTH
from sdk.parsing._limits import NumberOutOfRange
from sdk.parsing._limits import depth_position
from sdk.parsing._limits import fault_position
from sdk.parsing._limits import finite_float
from sdk.parsing._limits import lone_surrogate
from sdk.parsing._limits import too_deep
from sdk.parsing._limits import too_long
from sdk.schema.grounding import ANCHOR_KEY
from sdk.schema.grounding import Anchor
from sdk.schema.grounding import anchor_of
from sdk.schema.grounding import anchor_problem
from sdk.schema.grounding import cluster_occurrences
from sdk.schema.grounding import grounded_kind
from sdk.schema.grounding import whole_span
from sdk.stop_reason import StopReason

__all__ = [
    "DEFAULT_CLEAN_STOPS",
    "EnumCase",
    "Note",
    "ParseDetails",
    "Parsed",
    "StopDetails",
    "check_stop",
    "decide_stop",
    "decoded",
    "parse",
    "resolve_stop_reason",
    "validators_context",
]

C = TypeVar("C", bound=Contract)
V = TypeVar("V")  # what a Parsed holds: a contract value, or a grammar's text
EnumCase = Literal["normalize", "reject"]

DEFAULT_CLEAN_STOPS: frozenset[StopReason] = frozenset({StopReason.END_TURN})
_TRUNCATION = frozenset({StopReason.MAX_TOKENS, StopReason.CONTEXT_WINDOW})

# Pydantic's own error types are contract errors; the two generic ones are what a user-written
# validator raises (ValueError, AssertionError), and so are semantic checks. Error types from a
# user's PydanticCustomError are checks too.
_CONTRACT_ERROR_TYPES = frozenset(typing.get_args(pydantic_core.core_schema.ErrorType)) - {
    "value_error",
    "assertion_error",
} | {"wire_enum", "wire_enum_type"}


@dataclass(frozen=True)
class Parsed(Generic[V]):
    """A value that passed every step, with what it was decided on."""

    value: V
    stop_reason: StopReason
    text: str
    notes: list[Note] = field(default_factory=list)
    raw_stop_reason: str | None = None


class StopDetails(TypedDict, total=False):
    """What a reply said beside its stop reason, which step 1 decides on with it: keywords of
    `parse`, `sdk.grammar.parse_grammar` and `check_stop`, each optional."""

    raw_stop_reason: str | None
    """The provider's own value (default: `stop_reason` as given)."""
    clean_stops: Collection[StopReason]
    """The stop reasons this call accepts as a finished output (default `end_turn` only,
    unless the mode expects a stop sequence or a tool call)."""
    refusal: str | None
    """What the provider reported as a refusal beside the text (OpenAI's `refusal`)."""
    refusal_category: str | None
    """Its category, where the provider gave one (Anthropic's `stop_details`)."""


class ParseDetails(StopDetails, total=False):
    """`StopDetails`, how the provider's wire dialect wrote the document, and what the
    contract's validators receive beside the source."""

    absent_nulls: bool
    """The dialect made every property required and wrote `null` for an absent optional one
    (OpenAI strict, llama.cpp, Ollama): such a `null` is dropped from the value, with a note,
    where the contract's schema does not admit `null` there (default False)."""
    context: Mapping[str, Any] | None
    """Reaches the contract's validators through Pydantic's validation context, merged with
    the source (`{"source": source, **context}`)."""


def parse(
    contract: type[C],
    text: str | bytes,
    *,
    stop_reason: StopReason | str,
    source: str | None = None,
    enum_case: EnumCase = "normalize",
    **details: Unpack[ParseDetails],
) -> Parsed[C]:
    """Decide whether `text` is a trustworthy `contract` value; raise a typed error if not.

    `stop_reason` is a `StopReason` or any provider's raw value (kept as `raw_stop_reason`).
    `details` are what the reply said beside it (`StopDetails`: `raw_stop_reason`,
    `clean_stops`, `refusal`, `refusal_category`), `absent_nulls` and `context`
    (`ParseDetails`: `context` reaches the contract's validators through Pydantic's
    validation context, as `{"source": source, **context}`); `text` stays as received.
    """
    check_keywords(details, ParseDetails, "parse()")
    require_contract(contract, "parse()")
    if enum_case not in ("normalize", "reject"):
        raise ValueError(f"enum_case must be 'normalize' or 'reject', not {enum_case!r}")
    if not isinstance(text, str | bytes):
        raise TypeError(f"text must be str or bytes, not {type(text).__name__}")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"source must be str or None, not {type(source).__name__}")
    text, undecodable = decoded(text)

    # 1. Stop reason first: truncation and refusal are never success, even when the text parses.
    state = _stop_step(text, stop_reason, details)
    if undecodable is not None:
        where = TextPosition.undecodable(undecodable)
        raise _invalid(state, f"not UTF-8 ({undecodable.reason})", where) from undecodable
    compiled = compile_contract(contract)

    # 2. JSON, and its depth: walked now unless the schema itself bounds the depth of what it
    # accepts, in which case only a document it rejects is walked (before anything recursive).
    data = _load_json(state)
    if not compiled.valid_is_shallow:
        _check_depth(state, data)
    absent_nulls = details.get("absent_nulls", False)
    notes: list[Note] = _drop_absent_nulls(compiled, data) if absent_nulls else []

    # 3 and 4. The schema, with the casing policy.
    notes += _check_schema(state, compiled, data, contract.__name__, enum_case)

    # 5. Contract, then 6. semantic checks (one Pydantic pass; its errors are split by origin).
    document = text if not notes else json.dumps(data)
    reading = _Reading(contract, compiled, data, state)
    checked_with = validators_context(source, details.get("context"))
    value = _validate_contract(reading, document, checked_with)
    return Parsed(
        value=value,
        stop_reason=state.stop_reason,
        text=text,
        notes=notes,
        raw_stop_reason=state.raw_stop_reason,
    )


def decoded(text: str | bytes) -> tuple[str, UnicodeDecodeError | None]:
    """The text as a string, and the decoding error of bytes that are not UTF-8 (the text then
    holds replacement characters, so the error it raises can still show what came)."""
    if isinstance(text, str):
        return text, None
    try:
        return text.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return exc.object.decode("utf-8", "replace"), exc


def _check_schema(
    state: _State, compiled: CompiledContract, data: Any, name: str, enum_case: EnumCase
) -> list[Note]:
    """`SchemaViolation` unless `data` is valid, or made valid by the casing policy (its notes,
    `data` rewritten in place). The policy only matters for an instance the schema rejects: a
    case variant is never a valid enum value, so a valid instance skips the walk entirely."""
    if compiled.is_valid(data):
        return []
    if compiled.valid_is_shallow:
        _check_depth(state, data)
    normalized = _normalize_enum_case(compiled, data) if enum_case == "normalize" else []
    if not normalized or not compiled.is_valid(data):
        unencodable = _surrogate_in(state)  # (the text's own fault first, as JSON's are)
        if unencodable is not None:
            raise unencodable
        violations = compiled.violations(data)
        raise SchemaViolation(
            summarize(f"output does not match the {name} schema", violations),
            violations=violations,
            **state.error_fields(),
        )
    return normalized


def validators_context(source: str | None, context: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the contract's validators receive: `context` with the source beside it. The source
    is the one text quotes are checked against, so `context` may not hold a `source` of its own
    (`ValueError`): it would replace the real one and let a forged quote pass."""
    if context is not None and "source" in context:
        raise ValueError(
            "context may not hold 'source': pass the source document as source=..., the one "
            "text every SourceQuote is checked against"
        )
    return {**(context or {}), "source": source}


def resolve_stop_reason(
    stop_reason: StopReason | str, raw_stop_reason: str | None = None
) -> tuple[StopReason, str | None]:
    """The normalized stop reason and the raw value to keep beside it; a `stop_reason` of
    another type is a `TypeError` naming it."""
    if isinstance(stop_reason, StopReason):
        return stop_reason, raw_stop_reason if raw_stop_reason is not None else stop_reason.value
    if type(stop_reason) is not str and stop_reason is not None:  # (the usual cases: no check)
        # (`None`, an unknown stop, is read as before: `OTHER`, never a clean end)
        check("stop_reason", stop_reason, StopReason | str | None)
    return StopReason.from_raw(
        stop_reason
    ), raw_stop_reason if raw_stop_reason is not None else stop_reason


def check_stop(
    text: str, *, stop_reason: StopReason | str, **details: Unpack[StopDetails]
) -> tuple[StopReason, str | None]:
    """Step 1 alone, for any output: raise if the stop reason is not a clean end.

    Returns the normalized stop reason and the raw value kept beside it. The grammar parser
    (`sdk.grammar.parse_grammar`) runs it before recognizing the text, as `parse` does before
    reading JSON.
    """
    check_keywords(details, StopDetails, "check_stop()")
    return decide_stop(text, stop_reason, details)


def decide_stop(
    text: str, stop_reason: StopReason | str, details: StopDetails
) -> tuple[StopReason, str | None]:
    """`check_stop` for a caller that has checked `details` itself against `StopDetails`
    (`parse_grammar`, whose misspelt keyword is refused in its own name): the keywords are
    checked once."""
    state = _stop_step(text, stop_reason, details)
    return state.stop_reason, state.raw_stop_reason


def _stop_step(text: str, stop_reason: StopReason | str, details: StopDetails) -> _State:
    """Step 1: the text with its resolved stop reason, if that reason is a clean end."""
    stop, raw = resolve_stop_reason(stop_reason, details.get("raw_stop_reason"))
    state = _State(text, stop, raw)
    _check_stop(
        state,
        details.get("clean_stops", DEFAULT_CLEAN_STOPS),
        details.get("refusal"),
        details.get("refusal_category"),
    )
    return state


@dataclass(frozen=True, slots=True)
class _State:
    text: str
    stop_reason: StopReason
    raw_stop_reason: str | None

    def error_fields(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "stop_reason": self.stop_reason,
            "raw_stop_reason": self.raw_stop_reason,
        }


def _check_stop(
    state: _State,
    clean_stops: Collection[StopReason],
    refusal: str | None,
    refusal_category: str | None,
) -> None:
    stop = state.stop_reason
    raw = f" (raw: {state.raw_stop_reason})" if state.raw_stop_reason != stop.value else ""
    if stop in _TRUNCATION:
        raise TruncatedOutput(
            f"output was cut off by {stop.value}{raw} after {len(state.text)} characters; "
            "a cut document is not a value even if it parses",
            **state.error_fields(),
        )
    if stop is StopReason.REFUSAL:
        said = refusal if refusal is not None else state.text
        category = f" [{refusal_category}]" if refusal_category else ""
        raise RefusedOutput(
            f"the model refused{category}: {said[:200]!r}",
            refusal=said,
            category=refusal_category,
            **state.error_fields(),
        )
    if stop is StopReason.CONTENT_FILTER:
        raise ContentFiltered(
            f"the provider's content filter stopped the output{raw}",
            refusal=refusal,
            category=refusal_category or "content_filter",
            **state.error_fields(),
        )
    if stop not in clean_stops:
        accepted = ", ".join(sorted(s.value for s in clean_stops))
        raise UnexpectedStop(
            f"generation stopped with {stop.value}{raw}; this call accepts only {accepted}",
            **state.error_fields(),
        )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class RepeatedKey(ValueError):
    """An object of a JSON document gives one key twice (`unique_keys`)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for every JSON document the SDK reads that someone wrote (a reply, a
    batch input line): json.loads keeps the last of repeated keys; a document that says two
    things is rejected (`RepeatedKey`, naming the key)."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(f"duplicate key {shorten(repr(key), 80)}")
            seen.add(key)
    return document


# One decoder for every call: `json.loads(text, parse_constant=...)` would build a new decoder
# and scanner each time, about a fifth of the cost of parsing a small document. Sharing it is
# what `json.loads` itself does for its default decoder.
_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=finite_float, object_pairs_hook=unique_keys
)
# An integer longer than Python reads from text: read again where it is found, to name it.
_LONG_INT = re.compile(rf"-?[0-9]{{{sys.get_int_max_str_digits() + 1},}}")
_BOM = "\ufeff"


def _load_json(state: _State) -> Any:
    text = state.text
    try:
        if text.startswith(_BOM):  # exactly as json.loads rejects it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        data = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise _invalid(state, exc.msg, TextPosition.of_json_error(exc)) from exc
    except RecursionError as exc:
        raise _invalid(state, f"nested deeper than {MAX_DEPTH} levels", _deep_at(text)) from exc
    except ValueError as exc:
        # A hook refused a value (`NaN`, a repeated key, a number out of range) without knowing
        # where it is: found again, reading the text a second time on this error path only.
        where = TextPosition.of(text, fault_position(text))
        problem = str(exc)
        found = _LONG_INT.match(text, where.index)
        if found is not None and "integer string conversion" in problem:  # Python's own limit
            problem = str(NumberOutOfRange(found.group(), too_long(found.group())))
        raise _invalid(state, problem, where) from exc
    lone = lone_surrogate(text)
    if lone >= 0:
        escape = text[lone : lone + 6]
        problem = f"escape {escape} is a lone surrogate (half of a pair): UTF-8 text cannot hold it"
        raise _invalid(state, problem, TextPosition.of(text, lone))
    return data


def _check_depth(state: _State, data: Any) -> None:
    """`InvalidJSON` if `data` nests deeper than `MAX_DEPTH`."""
    text = state.text
    # Counting brackets is a bound on the depth: most documents skip the walk.
    if text.count("[") + text.count("{") > MAX_DEPTH and too_deep(data):
        raise _invalid(state, f"nested deeper than {MAX_DEPTH} levels", _deep_at(text))


def _deep_at(text: str) -> TextPosition:
    return TextPosition.of(text, depth_position(text, MAX_DEPTH))


def _invalid(state: _State, problem: str, where: TextPosition) -> InvalidJSON:
    """`InvalidJSON` for `problem` at `where` (in characters: `sdk._values.position`)."""
    return InvalidJSON(
        f"output is not JSON: {problem} at {where}",
        position=where.index,
        line=where.line,
        column=where.column,
        violations=[Violation("", f"{problem} at {where.by_index()}", "json")],
        **state.error_fields(),
    )


def _drop_absent_nulls(compiled: CompiledContract, data: Any) -> list[Note]:
    """Drop a `null` the wire form wrote for an absent optional property, in place; note each."""
    notes: list[Note] = []
    for hit in compiled.optionals.walk(data):
        value = hit.value
        if not isinstance(value, dict):
            continue
        for name in compiled.non_nullable_optionals.get(id(hit.schema), ()):
            if name in value and value[name] is None:
                del value[name]
                notes.append(
                    Note(f"{hit.pointer}/{escape_pointer(name)}", None, "(absent)", "absent_null")
                )
    return notes


def _normalize_enum_case(compiled: CompiledContract, data: Any) -> list[Note]:
    """Rewrite a case variant of exactly one wire name to that name, in place; note each."""
    notes: list[Note] = []
    for hit in compiled.enums.walk(data):
        received = hit.value
        if type(received) is not str:
            continue
        # The walker yields only the nodes `_compiled._wire_names` found names in, checked once per
        # contract when it was compiled: read them here, do not check them again per value.
        schema = hit.schema
        names = schema["enum"] if "enum" in schema else (schema["const"],)
        if received in names:
            continue
        folded = received.casefold()
        matches = [name for name in names if name.casefold() == folded]
        if len(matches) != 1 or hit.container is None or hit.key is None:
            continue  # not a case variant of one wire name: the schema step rejects it
        hit.container[hit.key] = matches[0]  # type: ignore[index]
        notes.append(Note(hit.pointer, received, matches[0]))
    return notes


@dataclass(frozen=True, slots=True)
class _Reading:
    """A document past the schema step (5 and 6 read it): what it is checked against, its
    JSON, and the text and stop reason every error keeps."""

    contract: type[Contract]
    compiled: CompiledContract
    data: Any
    state: _State


def _validate_contract(reading: _Reading, document: str, context: dict[str, Any]) -> Any:
    """Steps 5 and 6: the contract's value, once Pydantic (with the contract's own checks) and
    the values only the source can verify accept it."""
    try:
        value = reading.contract.model_validate_json(document, strict=True, context=context)
    except pydantic.ValidationError as exc:
        not_text = any(e["type"] == "string_unicode" and not e["loc"] for e in exc.errors())
        unencodable = _surrogate_in(reading.state) if not_text else None
        raise unencodable or _validation_failure(reading, exc, context.get("source")) from exc
    except Exception as exc:
        # A contract's own validator raised something Pydantic does not wrap (a KeyError, a
        # TypeError): still a failed check on this value, never an untyped escape.
        failure = Violation("", f"{type(exc).__name__} in a validator: {exc}", "exception")
        raise CheckFailed(
            summarize(f"{reading.contract.__name__} failed its checks", [failure]),
            violations=[failure],
            **reading.state.error_fields(),
        ) from exc
    if reading.compiled.quotes.any_wanted:
        _check_grounded(reading, context.get("source"))
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_in(state: _State) -> InvalidJSON | None:
    """`InvalidJSON` at the first surrogate character in the text itself, not an escape (a
    caller's own `str`, or a reply whose envelope's JSON escaped half a pair: the SDKs decode
    it so), or `None`. `json` decodes it; Pydantic refuses the whole document for it. Looked
    for on the schema's and the contract's error paths only: a valid document costs no more."""
    found = _SURROGATE.search(state.text)
    if found is None:
        return None
    problem = f"character U+{ord(found.group()):04X} is a surrogate: UTF-8 text cannot hold it"
    return _invalid(state, problem, TextPosition.of(state.text, found.start()))


def _validation_failure(
    reading: _Reading, exc: pydantic.ValidationError, source: str | None
) -> ContractViolation | CheckFailed:
    """Pydantic's errors split by origin: `ContractViolation` if any is the contract's own
    (a field's type, a missing field), else `CheckFailed` for the user's validators."""
    contract_errors: list[Violation] = []
    check_errors: list[Violation] = []
    for error in exc.errors(include_url=False, include_input=False):
        violation = Violation(
            _pydantic_pointer(error["loc"], reading.data), error["msg"], error["type"]
        )
        (contract_errors if error["type"] in _CONTRACT_ERROR_TYPES else check_errors).append(
            violation
        )
    name = reading.contract.__name__
    if contract_errors:
        return ContractViolation(
            summarize(f"output violates the {name} contract", contract_errors),
            violations=contract_errors + check_errors,
            **reading.state.error_fields(),
        )
    # Only user validators failed: the fields are right, a semantic check is not. Quotes are
    # checked too, so that the error lists every failed check at once.
    quote_errors = _quote_violations(reading, source) if source is not None else []
    violations = quote_errors + check_errors
    return CheckFailed(
        summarize(f"{name} failed its checks", violations),
        violations=violations,
        **reading.state.error_fields(),
    )


def _check_grounded(reading: _Reading, source: str | None) -> None:
    """Step 6's source check: every `SourceQuote` and `Verbatim` value is in the source
    (`CheckFailed`), or `SourceMissing` if a value needs the source and none was given."""
    name = reading.contract.__name__
    if source is None:
        marked = _marked(reading.compiled, reading.data)
        if not marked:
            return  # nothing to verify: every quote empty ("no evidence") or null
        pointers = ", ".join(pointer for pointer, _ in marked)
        raise SourceMissing(
            f"{name} has values checked against the source (SourceQuote, "
            f"Verbatim: {pointers}) but no source was given to verify them; pass source=...",
            violations=[
                Violation(pointer, "cannot verify against the source: no source given", key)
                for pointer, key in marked
            ],
            **reading.state.error_fields(),
        )
    violations = _quote_violations(reading, source)
    if violations:
        raise CheckFailed(
            summarize(f"{name} has values that are not in the source", violations),
            violations=violations,
            **reading.state.error_fields(),
        )


def _marked(compiled: CompiledContract, data: Any) -> list[tuple[str, str]]:
    """Pointer and annotation of each string in `data` that only the source can verify: every
    `Verbatim` string and every non-empty `SourceQuote` (an empty quote means "no evidence"
    and a null value "not stated": neither needs the source)."""
    marked = []
    for hit in compiled.quotes.walk(data):
        kind = grounded_kind(hit.schema) or ""
        if isinstance(hit.value, str) and (hit.value or kind == VERBATIM_KEY):
            marked.append((hit.pointer, kind))
    return marked


def _quote_violations(reading: _Reading, source: str) -> list[Violation]:
    """`SourceQuote`s that are not spans of the source (empty passes: "no evidence"; one of
    white space alone fails, `blank`), and `Verbatim` values that are not (empty fails, unless
    the source is empty too); and both, where they are in the source but not where their
    `Anchor` allows (`x-anchor`: violation type `ANCHOR_KEY`). A quote is compared with the
    source in Unicode NFC, both (`_nfc`): `"café"` quotes `"cafe\\u0301"`, as a reader sees it;
    and it starts and ends on edges of the source's user-perceived characters (grapheme
    clusters, `cluster_occurrences`): `"x"` is no quote of `"x\\u0301"`, which NFC cannot
    compose, nor a lone emoji of a sequence joined by U+200D.
    The message quotes the value as written; no offset into the source is reported."""
    violations = []
    anchors = _anchors_by_pointer(reading)
    normal: str | None = None  # the source in NFC, once a quote needs it
    for hit in reading.compiled.quotes.walk(reading.data):
        value = hit.value
        if not isinstance(value, str):
            continue
        shown = shorten(value, 120)
        named = _field_name(hit.pointer, hit.key)
        if grounded_kind(hit.schema) == VERBATIM_KEY:
            if whole_span(value, source):
                anchor = _anchor_at(anchors, hit.pointer)
                problem = anchor_problem(value, source, anchor) if anchor else None
                if problem is not None:
                    violations.append(_off_anchor(hit.pointer, named, shown, problem))
                continue
            if not value:
                problem = (
                    f"value in field {named} is empty: a Verbatim value is copied from the "
                    "source (or null, where the field may be null, when the source does not say)"
                )
            elif value in source:
                problem = (
                    f"value in field {named} is not a whole span of the source: {shown!r} "
                    "starts or ends inside a word or a number, or holds no word (copy whole "
                    "words)"
                )
            else:
                problem = f"value in field {named} is not copied exactly from the source: {shown!r}"
            violations.append(Violation(hit.pointer, problem, VERBATIM_KEY))
        elif value:
            quote = _nfc(value)
            normal = _nfc(source) if normal is None else normal
            # A quote a reader sees nothing of is in almost every source and proves nothing:
            # it fails as one not found does (`""`, "no evidence", is not asked here).
            if blank(quote):
                problem = (
                    f"quote in field {named} is only white space or invisible characters: "
                    f"{shown!r} (it is in almost any source, so it proves nothing: quote the "
                    'text itself, or "" for no evidence)'
                )
            elif quote not in normal:
                problem = f"quote in field {named} is not in the source: {shown!r}"
            elif next(cluster_occurrences(quote, normal), None) is None:
                problem = (
                    f"quote in field {named} is not in the source as a reader sees it: "
                    f"{shown!r} starts or ends inside one of its characters (a letter without "
                    "its accent, part of an emoji sequence: quote whole characters)"
                )
            else:
                # A quote is any span of the source (not only whole chunks): under an anchor,
                # one occurrence where the anchor allows is enough, as for a `Verbatim`. Read
                # in NFC too (labels included), so that a quote found only in that form is
                # still held to its anchor, never let through by it.
                anchor = _anchor_at(anchors, hit.pointer)
                if anchor is not None:
                    off = anchor_problem(quote, normal, _nfc_anchor(anchor), whole=False)
                    if off is not None:
                        violations.append(_off_anchor(hit.pointer, named, shown, off))
                continue
            violations.append(Violation(hit.pointer, problem, SOURCE_QUOTE_KEY))
    return violations


def _nfc(text: str) -> str:
    """`text` in Unicode NFC (composed: `"e\\u0301"` is `"é"`), the one form a quote and its
    source are compared in. Text already in NFC (most text) is returned as it is, at the cost
    of a quick check."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def _nfc_anchor(anchor: Anchor) -> Anchor:
    """`anchor` with its labels in NFC, as the quote and the source it is read against."""
    return Anchor(
        tuple(_nfc(label) for label in anchor.after),
        tuple(_nfc(label) for label in anchor.not_after),
    )


def _field_name(pointer: str, key: str | int | None) -> str:
    """How a grounded value's message names its field: the member's name (`'carrier'`), or for
    a list item its pointer (`'/carriers/1'`), as the thresholds file names fields: an index
    alone says nothing about where the value is."""
    return repr(key) if isinstance(key, str) else repr(pointer)


def _off_anchor(pointer: str, named: str, shown: str, problem: str) -> Violation:
    """The violation of a grounded value that is in the source, but not where its anchor
    allows: the same for a `Verbatim` and a `SourceQuote` (`named` as `_field_name` names it)."""
    return Violation(
        pointer,
        f"value in field {named} is not where its anchor allows: {shown!r}: {problem}",
        ANCHOR_KEY,
    )


def _anchors_by_pointer(reading: _Reading) -> dict[str, Anchor]:
    """The anchors in the document, by the pointer of the value they annotate (a `Verbatim |
    None` field carries its anchor on the union, a list of copies on its items: both at the
    value's own pointer or above it). Walked in document order, so an anchor below another at
    the same pointer replaces it: the innermost decides, as in the grammars."""
    walker = reading.compiled.anchors
    if walker is None:
        return {}
    found = {}
    for hit in walker.walk(reading.data):
        anchor = anchor_of(hit.schema)
        if anchor is not None:
            found[hit.pointer] = anchor
    return found


def _anchor_at(anchors: Mapping[str, Anchor], pointer: str) -> Anchor | None:
    """The anchor of the value at `pointer`: the one at it or at its nearest ancestor."""
    while anchors:
        anchor = anchors.get(pointer)
        if anchor is not None or not pointer:
            return anchor
        pointer = pointer.rsplit("/", 1)[0]
    return None


def _pydantic_pointer(loc: Iterable[str | int], data: Any) -> str:
    """A JSON pointer from a Pydantic error location, skipping union-branch tags."""
    parts: list[str | int] = []
    node = data
    location = list(loc)
    for position, part in enumerate(location):
        if (
            isinstance(node, dict)
            and isinstance(part, str)
            and (part in node or position == len(location) - 1)
        ):
            parts.append(part)
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(part)
            node = node[part]
    return pointer_of(parts)
