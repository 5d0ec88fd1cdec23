"""Sealed values (issue 34.4): errors are built complete by their constructors, kinds are
immutable descriptions, and the per-call state lives in the attempts machine.

Every error class of `sdk.errors` refuses an assignment after construction, `evolve` builds the
changed copy through the constructor (notes and cause kept), and a pickled error comes back with
every field (what Ray and multiprocessing carry). A kind judged by one call is unchanged, so one
kind serves any number of calls, and a two-phase answer replays from the cache as it is.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from contracts import Decision
from sdk import StructuredClient
from sdk import errors as sdk_errors
from sdk._values.records import Usage
from sdk._values.records import Violation
from sdk.cache import MemoryCache
from sdk.engine.kinds import Document
from sdk.engine.kinds import TwoPhase
from sdk.engine.kinds._kind import NextPhase
from sdk.engine.kinds._kind import Parsing
from sdk.errors import Attempt
from sdk.errors import InvalidJSON
from sdk.errors import ProviderError
from sdk.errors import ProviderRetriesExhausted
from sdk.errors import StructuredOutputError
from sdk.providers import Completion
from sdk.providers import TestProvider
from sdk.stop_reason import StopReason

GOOD = '{"reasoning": "fine", "answer": "approve", "confidence": "high"}'

# Values for each constructor keyword an error class may take (every field set, none default).
_VALUES: dict[str, Any] = {
    "text": "the raw text",
    "stop_reason": StopReason.END_TURN,
    "raw_stop_reason": "end_turn",
    "partial": {"a": 1},
    "usage": Usage(3, 4),
    "refusal": "no",
    "category": "cyber",
    "violations": [Violation("/x", "missing", "required")],
    "position": 7,
    "line": 2,
    "column": 3,
    "tool": "lookup",
    "call_id": "call_1",
    "supported": ["json_schema documents"],
    "token": "<|im_end|>",
    "where": "prompt",
    "diagnostics": None,
    "status_code": 503,
    "request_id": "req_1",
    "retry_after": 1.5,
    "provider": "openai_chat",
    "body": "{}",
    "transient": True,
    "confidence": {"/amount": 0.125},
    "value": {"amount": 3},
    "tokens": 37,
    "piece": "Dmitri Smith3, ",
    "start": 12,
}


def _error_classes() -> list[type[StructuredOutputError]]:
    return [
        cls
        for _, cls in inspect.getmembers(sdk_errors, inspect.isclass)
        if issubclass(cls, StructuredOutputError)
    ]


def _built(cls: type[StructuredOutputError]) -> StructuredOutputError:
    attempt = Attempt(1, "t", StopReason.END_TURN, "end_turn", Usage(1, 2), None)
    fields = {name: _VALUES[name] for name in sdk_errors._fields_of(cls) if name in _VALUES}
    if "attempts" in sdk_errors._fields_of(cls):
        fields["attempts"] = [attempt]
    if cls is ProviderRetriesExhausted:
        return cls("gave up", **fields)
    return cls("what went wrong", **fields)


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_is_sealed_once_built(cls: type[StructuredOutputError]) -> None:
    error = _built(cls)
    for name in sdk_errors._fields_of(cls):
        with pytest.raises(AttributeError, match="sealed"):
            setattr(error, name, getattr(error, name))
    # Python's own fields stay writable: a raise sets the traceback, `raise ... from` the cause.
    error.__cause__ = ValueError("cause")
    error.add_note("a note")


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_no_field_of_a_sealed_error_can_be_deleted(cls: type[StructuredOutputError]) -> None:
    # On main `del error.text` went through: the raw text was gone (`error.text` an
    # AttributeError) and `evolve`, `fields()` and pickling failed on the hole.
    error = _built(cls)
    for name in (*sdk_errors._fields_of(cls), "message"):
        with pytest.raises(AttributeError, match="sealed"):
            delattr(error, name)
    assert list(error.fields()) == list(sdk_errors._fields_of(cls))  # every field still there


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_pickles_with_every_field_and_its_notes(
    cls: type[StructuredOutputError],
) -> None:
    error = _built(cls)
    error.add_note("kept")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls and copy.message == error.message and str(copy) == str(error)
    assert copy.fields() == error.fields()
    assert copy.__notes__ == ["kept"]
    with pytest.raises(AttributeError):
        copy.text = "changed"


def test_evolve_builds_a_changed_copy_keeping_notes_and_cause() -> None:
    error = InvalidJSON("bad", text="{", position=1, line=1, column=2)
    error.add_note("first try")
    error.__cause__ = ValueError("why")
    changed = error.evolve(text="[", partial={"x": 1})
    assert (changed.text, changed.partial, changed.position) == ("[", {"x": 1}, 1)
    assert error.text == "{" and error.partial is None  # the original is untouched
    assert changed.__notes__ == ["first try"] and isinstance(changed.__cause__, ValueError)


def test_retries_exhausted_takes_the_last_transport_errors_fields() -> None:
    last = ProviderError("down", status_code=503, request_id="r", provider="anthropic",
                         transient=True)  # fmt: skip
    final = ProviderRetriesExhausted("gave up", attempts=[], last=last)
    assert (final.status_code, final.request_id, final.provider, final.transient) == (
        503, "r", "anthropic", True
    )  # fmt: skip


def test_kinds_are_frozen_and_a_phase_moves_on_to_a_new_kind() -> None:
    parsing = Parsing(source=None, context=None, enum_case="normalize")
    document = Document(Decision, None, parsing)
    with pytest.raises(dataclasses.FrozenInstanceError):
        document.parsing = parsing  # type: ignore[misc]
    two_phase = TwoPhase(document)
    provider = TestProvider(["working it out"])
    working = Completion("working it out", StopReason.END_TURN, "end_turn")
    moved = two_phase.judge(working, provider)
    assert isinstance(moved, NextPhase)
    assert two_phase.working is None  # judged, and unchanged
    assert isinstance(moved.next, TwoPhase) and moved.next.working == "working it out"


def test_one_client_many_calls_and_a_two_phase_answer_replayed_from_the_cache() -> None:
    cache = MemoryCache()
    provider = TestProvider(["working 1", GOOD, "working 2", GOOD])
    client = StructuredClient(provider, reasoning="two_phase", cache=cache)
    first = client.generate(Decision, prompt="Approve?")
    again = client.generate(Decision, prompt="Approve?")
    assert again.cached and again.value == first.value
    assert len(provider.requests) == 2  # the replay sent nothing
