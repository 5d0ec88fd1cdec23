"""An answer a call made after retries of its own is served only to a call that would have asked
the same retries.

A call is keyed by its first request. Its answer was stored under that key whichever attempt
made it, so a call whose own settings could never give it was served it: a call without a
truncation ramp, `max_tokens=100`, was given the document a ramped call's second request made
with `max_tokens=200` (without a cache it raises `TruncatedOutput`: `max_tokens` no longer
bounded what it was given); a call with `retries=0` was given what a retry with feedback made
(without a cache, `SchemaViolation`). The entry now keeps a digest of what decided its retries
(`Entry.retried`: the call's retry settings and the settings its replies are judged by): a
call of other settings is not served it (the provider is asked, as without a cache); an answer
of a first attempt is served to any.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import json
import subprocess
import sys
import uuid
import zlib
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationInfo
from pydantic import field_validator

from contracts import Decision
from sdk import Contract
from sdk import MaxTokensRamp
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk import TruncatedOutput
from sdk.cache import DamagedEntry
from sdk.cache import Entry
from sdk.cache import MemoryCache
from sdk.cache import SQLiteCache
from sdk.cache import settings_digest
from sdk.providers import TestProvider
from sdk.providers._base import Completion
from sdk.providers.fallback import FallbackProvider
from sdk.stop_reason import StopReason

ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})
CUT = Completion('{"reasoning": "Wit', StopReason.MAX_TOKENS, "max_tokens")
INVALID = json.dumps({"reasoning": "Within policy.", "answer": "maybe", "confidence": "high"})


def _asked(provider: TestProvider, cache: object, **settings: object) -> tuple[bool, int]:
    """Whether the call was served from `cache`, and how many requests it sent."""
    client = StructuredClient(provider, cache=cache, **settings)  # type: ignore[arg-type]
    result = client.generate(Decision, prompt="Approve?", max_tokens=100)
    assert result.value.answer == "approve"
    return result.cached, len(provider.requests)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_an_answer_a_ramp_made_is_served_only_to_calls_of_that_ramp(
    store: str, tmp_path: object
) -> None:
    cache = MemoryCache() if store == "memory" else SQLiteCache(f"{tmp_path}/c.db")
    ramp = {"truncation": MaxTokensRamp(factor=2.0)}
    assert _asked(TestProvider([CUT, ANSWER]), cache, **ramp) == (False, 2)
    # The same settings (equal objects, made again): served, nothing sent.
    assert _asked(TestProvider([]), cache, truncation=MaxTokensRamp(factor=2.0)) == (True, 0)
    # No ramp: asked, as without a cache (its first request is cut off again); another ramp:
    # asked, and its own answer made.
    provider = TestProvider([CUT])
    with pytest.raises(TruncatedOutput):
        _asked(provider, cache)
    assert len(provider.requests) == 1
    assert _asked(TestProvider([CUT, ANSWER]), cache, truncation=MaxTokensRamp(factor=3.0)) == (
        False,
        2,
    )
    if isinstance(cache, SQLiteCache):
        cache.close()


def test_an_answer_a_feedback_retry_made_is_not_served_to_a_call_without_retries() -> None:
    cache = MemoryCache()
    assert _asked(TestProvider([INVALID, ANSWER]), cache, retries=2) == (False, 2)
    assert _asked(TestProvider([]), cache, retries=2) == (True, 0)
    provider = TestProvider([INVALID])
    with pytest.raises(StructuredOutputError):
        _asked(provider, cache, retries=0)
    assert len(provider.requests) == 1
    # What it asked for is stored now, a first attempt's answer: served whatever the settings.
    assert _asked(TestProvider([ANSWER]), cache, retries=0) == (False, 1)
    assert _asked(TestProvider([]), cache, retries=5, truncation=MaxTokensRamp()) == (True, 0)


def test_an_entry_keeps_what_decided_its_retries_through_its_stored_form() -> None:
    digest = settings_digest((2, 0, MaxTokensRamp(), None))
    assert digest == settings_digest((2, 0, MaxTokensRamp(), None)) != settings_digest((2,))
    entry = Entry([Completion(ANSWER, StopReason.END_TURN, "end_turn")], digest)
    text = entry.encode()
    assert Entry.decode(text).retried == digest and Entry.decode(text) == entry
    first = Entry([Completion(ANSWER, StopReason.END_TURN, "end_turn")])
    assert '"retried"' not in first.encode() and Entry.decode(first.encode()).retried is None
    assert Entry.decode(first.encode()) != entry
    with pytest.raises(ValueError, match="digest"):
        Entry([Completion(ANSWER, StopReason.END_TURN, "end_turn")], "not hex")
    # A stored text whose retried is not a digest (its checksum made again): damaged.
    for wrong in ('"retried":5', '"retried":"XYZ"', '"retried":"' + "a" * 65 + '"'):
        header, rest = text.split("\n", 2)[1:]
        body = header.replace(f'"retried":"{digest}"', wrong) + "\n" + rest
        damaged = f"{text[: text.index(' ') + 1]}{zlib.crc32(body.encode()):08x}\n{body}"
        with pytest.raises(DamagedEntry, match="retried"):
            Entry.decode(damaged)


def test_a_streamed_call_s_runaway_retry_is_not_served_to_generate() -> None:
    # The digest held the runaway bound, which a call that does not stream has too, but not
    # whether the call streams: what `stream()` made after stopping a runaway was served to
    # `generate()`, whose own first reply is cut off (`TruncatedOutput` without a cache).
    runaway = Completion('{"reasoning": "Within' + " " * 400, StopReason.MAX_TOKENS, "max_tokens")
    cache = MemoryCache()
    provider = TestProvider([runaway, ANSWER])
    streamed = list(StructuredClient(provider, cache=cache).stream(Decision, prompt="Approve?"))
    assert streamed[-1].value.answer == "approve" and len(provider.requests) == 2
    again = StructuredClient(TestProvider([]), cache=cache)  # (a streamed call: served)
    assert list(again.stream(Decision, prompt="Approve?"))[-1].cached
    cut = TestProvider([runaway])
    with pytest.raises(TruncatedOutput):
        StructuredClient(cut, cache=cache).generate(Decision, prompt="Approve?")
    assert len(cut.requests) == 1


def test_settings_are_named_by_their_content_in_every_process() -> None:
    # A calibration or per-field thresholds (the SDK's own records of plain data) were named by
    # a token of the process: an answer made after retries was never served in another.
    code = (
        "from sdk.cache import settings_digest\n"
        "from sdk.abstention import Thresholds\n"
        "from sdk.calibration import Calibration, Curve\n"
        "curves = {'string': Curve('platt', (1.0, 0.0), 10)}\n"
        "print(settings_digest((Thresholds.fixed(0.25), Calibration(curves), {'a': [1, (2,)]})))"
    )
    made = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       timeout=120).stdout.strip()
        for _ in range(2)
    ]  # fmt: skip
    assert made[0] == made[1] and len(made[0]) == 32


def _steered(request: object) -> str:
    """A provider whose answer its request steers: a first request (one message, at most 100
    tokens) is approved; one quoting an earlier reply (feedback), or with more room, is not."""
    messages, max_tokens = request.messages, request.max_tokens  # type: ignore[attr-defined]
    answer = "approve" if len(messages) == 1 and max_tokens <= 100 else "reject"
    return json.dumps({"reasoning": "Within policy.", "answer": answer, "confidence": "high"})


@pytest.mark.parametrize(
    ("first", "settings"),
    [
        pytest.param(INVALID, {"retries": 1}, id="feedback"),
        pytest.param(CUT, {"truncation": MaxTokensRamp(factor=2.0)}, id="ramp"),
    ],
)
def test_a_fallback_s_answer_to_another_provider_s_retry_is_not_stored(
    first: object, settings: dict[str, object]
) -> None:
    # A's reply failed and was retried; the retry failed with an error no retry fixes, and the
    # list moved on to B with A's retry (its feedback quoting A's reply, or the ramped
    # max_tokens). B's answer was stored under B's first request's key and served to a client
    # of B alone, which without a cache sends B that first request and is answered otherwise.
    cache = MemoryCache()
    a = TestProvider([first, TestProvider.provider_error(400, "bad request")], model="model-a")
    b = TestProvider([_steered], repeat=True, model="model-b")
    listed = StructuredClient(FallbackProvider([a, b]), cache=cache, **settings)  # type: ignore[arg-type]
    made = listed.generate(Decision, prompt="Approve?", max_tokens=100)
    assert made.value.answer == "reject" and made.model == "model-b"
    assert [note.kind for note in made.notes] == ["cache_not_stored"]
    assert "retry of another's reply" in str(made.notes[0].received)
    assert cache.stats().entries == 0
    alone = TestProvider([_steered], repeat=True, model="model-b")
    served = StructuredClient(alone, cache=cache, **settings).generate(  # type: ignore[arg-type]
        Decision, prompt="Approve?", max_tokens=100
    )
    assert (served.value.answer, served.cached, len(alone.requests)) == ("approve", False, 1)


def test_a_fallback_s_answer_to_its_own_first_request_is_stored() -> None:
    # A fails before any reply (its first request refused with a 400): B is sent its own first
    # request, and its answer is B's, served to a client of B alone.
    cache = MemoryCache()
    a = TestProvider([TestProvider.provider_error(400, "bad request")], model="model-a")
    b = TestProvider([_steered], repeat=True, model="model-b")
    made = StructuredClient(FallbackProvider([a, b]), cache=cache, retries=1).generate(
        Decision, prompt="Approve?", max_tokens=100
    )
    assert made.value.answer == "approve" and not made.notes
    alone = TestProvider([], model="model-b")
    served = StructuredClient(alone, cache=cache, retries=1).generate(
        Decision, prompt="Approve?", max_tokens=100
    )
    assert served.cached and served.value.answer == "approve" and not alone.requests


def test_a_fallback_s_first_answer_after_another_provider_s_retries_is_a_first_attempt_s() -> None:
    # A refused, was asked again (a refusal retry sends the same request) and failed with an
    # error no retry fixes; B was sent its own first request and answered it. Its answer was
    # kept as one made after retries (A's), so a client of B alone that does not retry
    # refusals was not served it, though it sends B that same first request.
    cache = MemoryCache()
    a = TestProvider(
        [TestProvider.refusal("no"), TestProvider.provider_error(400, "bad request")],
        model="model-a",
    )
    b = TestProvider([_steered], repeat=True, model="model-b")
    made = StructuredClient(FallbackProvider([a, b]), cache=cache, refusal_retries=1).generate(
        Decision, prompt="Approve?", max_tokens=100
    )
    assert made.value.answer == "approve" and len(b.requests) == 1 and not made.notes
    alone = TestProvider([], model="model-b")
    served = StructuredClient(alone, cache=cache, refusal_retries=0).generate(
        Decision, prompt="Approve?", max_tokens=100
    )
    assert served.cached and served.value.answer == "approve" and not alone.requests


class Pick(Contract):
    """An answer from the caller's allowed list (`context={"allowed": [...]}`)."""

    answer: str

    @field_validator("answer")
    @classmethod
    def _allowed(cls, answer: str, info: ValidationInfo) -> str:
        allowed = (info.context or {}).get("allowed")
        if allowed is not None and answer not in allowed:
            raise ValueError(f"answer must be one of {allowed}")
        return answer


def _pick(answer: str) -> str:
    return json.dumps({"answer": answer})


def test_a_context_changed_in_place_is_other_settings() -> None:
    # The spec copies a `context` one level: the validators read the caller's lists as they are
    # now. Its digest was remembered by the objects, so a list changed in place left it as it
    # was, and the answer a retry made under the old list was served: uncached, the same client
    # accepts its first reply now.
    allowed = ["reject"]
    cache = MemoryCache()
    client = StructuredClient(
        TestProvider([_pick("approve"), _pick("reject"), _pick("approve")]), cache=cache,
        context={"allowed": allowed}, retries=1,
    )  # fmt: skip
    made = client.generate(Pick, prompt="Decide?")
    assert (made.value.answer, made.cached) == ("reject", False)
    assert client.generate(Pick, prompt="Decide?").cached  # (the same list: served)
    allowed.append("approve")
    again = client.generate(Pick, prompt="Decide?")
    assert (again.value.answer, again.cached) == ("approve", False)


@pytest.mark.parametrize(
    ("value", "served"),
    [
        (Decimal("100.50"), True),
        (datetime.date(2026, 12, 7), True),
        (datetime.datetime(2026, 12, 7, 9, 30, tzinfo=datetime.UTC), True),
        (uuid.UUID(int=7), True),
        (frozenset({"a", 1}), True),
        (object(), False),
        (collections.deque(["a"]), False),
    ],
    ids=["decimal", "date", "datetime", "uuid", "frozenset", "object", "deque"],
)
def test_a_context_is_named_by_its_content_or_never_served(value: object, served: bool) -> None:
    # The spec makes its own copy of a `context` for each call, and a context holding anything
    # but plain data was named by that copy: never the same twice, so an answer made after
    # retries was dropped by the next call of the same settings, and asked for again. The
    # standard library's unchanging values are named by content now; a value that cannot be
    # named so (an object of the caller's, a deque it may change in place) is never served an
    # answer made after retries (asked again: a miss, never another's answer).
    cache = MemoryCache()
    context = {"allowed": ["reject"], "limit": value}
    for again in (False, True):
        provider = TestProvider([_pick("approve"), _pick("reject")])
        made = StructuredClient(provider, cache=cache, retries=1).generate(
            Pick, prompt="Decide?", context=context
        )
        assert (made.value.answer, made.cached) == ("reject", again and served)
        assert len(provider.requests) == (0 if again and served else 2)


@pytest.mark.parametrize(
    "held",
    [
        lambda: collections.deque(["reject"]),
        lambda: _Listed(["reject"]),
        lambda: collections.UserList(["reject"]),
    ],
    ids=["deque", "list-subclass", "UserList"],
)
def test_a_client_s_context_of_containers_it_cannot_name_is_never_served(held: Any) -> None:
    # A context the client holds, with a list the caller changes in place that the digest
    # cannot name by content (a deque, a subclass of list): it was named
    # by a token of its object, the same after the change, and the answer its old content
    # made after a retry was served; uncached, the same client accepts its first reply now.
    allowed = held()
    cache = MemoryCache()
    client = StructuredClient(
        TestProvider([_pick("approve"), _pick("reject"), _pick("approve")]), cache=cache,
        context={"allowed": allowed}, retries=1,
    )  # fmt: skip
    assert client.generate(Pick, prompt="Decide?").value.answer == "reject"
    allowed.append("approve")
    again = client.generate(Pick, prompt="Decide?")
    assert (again.value.answer, again.cached) == ("approve", False)


class _Listed(list[str]):
    """A list of the caller's own class."""


@dataclasses.dataclass(eq=False)
class _Rule:
    words: list[str]


class _Zone(datetime.tzinfo):
    """A time zone of the caller's: its `repr` is its address, not its offset."""

    def __init__(self, hours: int) -> None:
        self.hours = hours

    def utcoffset(self, when: datetime.datetime | None) -> datetime.timedelta:
        return datetime.timedelta(hours=self.hours)


class _Money(Decimal):
    """A subclass whose `repr` is a `Decimal`'s: what it adds is not shown."""

    def __new__(cls, amount: str, currency: str) -> _Money:
        made = super().__new__(cls, amount)
        made.currency = currency  # type: ignore[attr-defined]
        return made


def test_settings_are_named_by_what_they_hold() -> None:
    # The standard library's values that cannot change by their content, in any process; lists
    # and mappings by what they hold now; what cannot be named by content never twice alike.
    def digest(*settings: object) -> str:
        return settings_digest(settings)

    assert digest({"at": Decimal("1.5")}) == digest({"at": Decimal("1.5")})
    assert digest({"at": Decimal("1.5")}) != digest({"at": Decimal("1.50")})  # (a miss only)
    assert digest(datetime.date(2026, 1, 2)) != digest(datetime.date(2026, 1, 3))
    assert digest(Decimal("1")) != digest(1) != digest("1")
    assert digest({Decimal("1"): "a"}) == digest({Decimal("1"): "a"})  # (keys too)
    held = {"allowed": ["a"]}
    before = digest(held)
    held["allowed"].append("b")
    assert digest(held) != before
    assert digest(held) == digest({"allowed": ["a", "b"]})
    # A text spelling a mark's form is not a marked value; nor a set a list, nor a tuple a
    # record of the same fields.
    assert digest(("\x00named", "decimal.Decimal", "Decimal('1')")) != digest(Decimal("1"))
    assert digest({"a", "b"}) == digest(frozenset({"b", "a"})) != digest(["a", "b"])
    ramp = MaxTokensRamp(factor=2.0)
    fields = tuple(getattr(ramp, field.name) for field in dataclasses.fields(ramp))
    spelled = ("\x00record", f"{type(ramp).__module__}.{type(ramp).__qualname__}", fields)
    assert digest(ramp) != digest(spelled)
    # A set of records hashed by their identity, holding lists (their forms cannot be hashed:
    # it raised `TypeError` from the call): by content.
    assert digest({_Rule(["a"])}) == digest({_Rule(["a"])}) != digest({_Rule(["b"])})
    # Never named alike: objects of the caller's, a subclass whose `repr` hides what it adds, a
    # time in a zone whose `repr` is its address, a structure past the levels or the nodes
    # named.
    mine = object()
    shared = [["a"] * 4] * 4
    for unnamed in (
        mine,
        _Money("10", "EUR"),
        datetime.time(9, tzinfo=_Zone(1)),
        functools.reduce(lambda inner, _: [inner], range(40), ["a"]),
        functools.reduce(lambda inner, _: (inner, inner), range(40), ("a",)),
        [shared] * 5_000,
    ):
        assert digest(unnamed) != digest(unnamed)
    assert digest(datetime.time(9, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))) != (
        digest(datetime.time(9, tzinfo=datetime.timezone(datetime.timedelta(hours=5))))
    )


def test_the_sdk_s_records_are_named_once_an_object() -> None:
    # A calibration or thresholds hold mappings, yet are the SDK's frozen records: named once
    # an object (naming a fitted calibration again at each hit cost 0.9 ms), the same content
    # alike in every process (`test_settings_are_named_by_their_content_in_every_process`).
    from sdk.abstention import Thresholds
    from sdk.cache import _key

    thresholds = Thresholds.fixed({"/a": 0.25})
    first = settings_digest((thresholds, 2))
    assert _key._TEXTS[id(thresholds)][0] is thresholds
    assert (
        settings_digest((thresholds, 2))
        == first
        == settings_digest((Thresholds.fixed({"/a": 0.25}), 2))
    )
