"""What a provider whose engine can ground (`EmbeddedProvider`, llama.cpp, vLLM) sends for a
request with `SourceQuote`/`Verbatim` strings: the grounded grammar, or the plain one and a note
saying the values are checked after parsing instead (`Completion.notes`, then `Result.notes`).

The builders are `sdk.schema.grounding`'s; this module only decides when to use them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk import _fork
from sdk._values.records import Note
from sdk.parsing import compile_contract
from sdk.providers._base import CompletionRequest
from sdk.providers._base import JsonDocument
from sdk.schema.canonical import shared_schema
from sdk.schema.grounding import GroundingUnsupported

__all__ = ["GROUNDING_NOTE", "GroundingPlan", "fallback_notes", "grounding_plan"]

GROUNDING_NOTE = "grounding"
"""`Note.kind` of a grounded request sent with the plain grammar (checked after parsing)."""

_CHECKED_AFTER = "checked after parsing"


@dataclass(frozen=True, slots=True)
class GroundingPlan:
    """The grounded grammar to send (`None`: the plain one), and the notes for the reply."""

    grammar: str | None = None
    notes: tuple[Note, ...] = ()


def grounding_plan(
    request: CompletionRequest,
    build: Callable[[dict[str, Any], str], str],
    *,
    engine: str,
    source_limit: int | None = None,
) -> GroundingPlan:
    """The plan for `request`: `build(schema, source)` when the request is a JSON document with
    grounded strings and a source; nothing for any other request (no note either: there is
    nothing to ground, or the parser reports the missing source).

    Above `source_limit` characters, or where the builder refuses the schema, the plain grammar
    goes with a note naming why (`Note.kind` `"grounding"`).
    """
    grounded = _grounded(request)
    if grounded is None:
        return GroundingPlan()
    notes = fallback_notes(request, engine=engine, source_limit=source_limit)
    if notes:
        return GroundingPlan(notes=notes)
    contract, schema = grounded
    assert request.source is not None  # `_grounded` checked it
    try:
        return GroundingPlan(grammar=_built(build, contract, schema, request.source))
    except GroundingUnsupported as refused:
        reason = f"{engine} cannot ground it: {refused.reason}"
        return GroundingPlan(notes=(Note(refused.pointer, reason, _CHECKED_AFTER, GROUNDING_NOTE),))


# The last grounded grammars built: a retry of the same call (same contract and source) reuses
# its grammar instead of building it again (a large source's GBNF takes a good part of a second).
_BUILT: OrderedDict[tuple[Any, type[Any], str], str] = OrderedDict()
_BUILT_SIZE = 8
_BUILT_LOCK = _fork.lock()


def _built(
    build: Callable[[dict[str, Any], str], str],
    contract: type[Any],
    schema: dict[str, Any],
    source: str,
) -> str:
    key = (build, contract, source)
    with _BUILT_LOCK:
        grammar = _BUILT.get(key)
        if grammar is not None:
            _BUILT.move_to_end(key)
            return grammar
    grammar = build(schema, source)
    with _BUILT_LOCK:
        _BUILT[key] = grammar
        while len(_BUILT) > _BUILT_SIZE:
            _BUILT.popitem(last=False)
    return grammar


def fallback_notes(
    request: CompletionRequest, *, engine: str, source_limit: int | None
) -> tuple[Note, ...]:
    """The note of a grounded request whose source is longer than `source_limit` (the plain
    grammar goes instead); none for any other request. Decided without building anything, so a
    codec can say it again when it reads the reply."""
    source = request.source
    if source_limit is None or source is None or len(source) <= source_limit:
        return ()
    if _grounded(request) is None:
        return ()
    reason = (
        f"source of {len(source):,} characters, above {engine}'s bound for a grounded "
        f"grammar ({source_limit:,})"
    )
    return (Note("", reason, _CHECKED_AFTER, GROUNDING_NOTE),)


def _grounded(request: CompletionRequest) -> tuple[type[Any], dict[str, Any]] | None:
    """The request's contract and schema, when it is a JSON request with a source and grounded
    strings."""
    output = request.output
    if not isinstance(output, JsonDocument) or request.source is None:
        return None
    if not compile_contract(output.contract).quotes.any_wanted:
        return None
    return output.contract, shared_schema(output.contract)
