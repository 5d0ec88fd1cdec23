"""Runaway output stopped early: a streamed reply whose tail repeats a piece (or is whitespace)
past the bound is cancelled, ends its attempt in `RunawayOutput` (text and tokens kept), and is
retried with feedback; the watch itself reads text only."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from sdk import AsyncStructuredClient
from sdk import Contract
from sdk import RetriesExhausted
from sdk import RunawayBound
from sdk import RunawayOutput
from sdk import StructuredClient
from sdk.parsing.runaway import RunawayWatch
from sdk.providers._base import Completion
from sdk.providers.test import TestProvider
from sdk.stop_reason import StopReason
from tests.promise_wire import SETUPS
from tests.promise_wire import Say
from tests.promise_wire import Setup


class Order(Contract):
    """What the customer bought."""

    customer: str
    products: list[str]


RUNAWAY = '{"customer": "Dmitri", "products": [' + '"Dmitri Smith3", ' * 400
VALID = '{"customer": "Dmitri", "products": ["Dmitri Smith3"]}'


def _cut(text: str) -> Completion:
    """What a provider sends at the end of a reply cut by max_tokens."""
    return Completion(text, StopReason.MAX_TOKENS, "length")


class CountingProvider(TestProvider):
    """A scripted provider that counts the pieces a stream handed out before it was closed."""

    __test__ = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.pieces = 0
        self.closed = 0

    def _stream(self, request):  # type: ignore[no-untyped-def]
        try:
            for item in super()._stream(request):
                self.pieces += 1
                yield item
        except GeneratorExit:
            self.closed += 1
            raise


def test_a_repeating_list_is_stopped_and_retried_with_feedback() -> None:
    provider = CountingProvider([_cut(RUNAWAY), VALID], chunk_size=8)
    stream = StructuredClient(provider).stream(Order, prompt="What did Dmitri buy?")
    result = list(stream)[-1]
    assert result.value.products == ["Dmitri Smith3"]
    first = result.attempts[0]
    assert isinstance(first.error, RunawayOutput)
    error = first.error
    assert error.text is not None and RUNAWAY.startswith(error.text)
    assert len(error.text) < len(RUNAWAY) / 10  # stopped early, not at max_tokens
    assert error.tokens == first.usage.output_tokens > 0
    assert error.piece.count("Dmitri Smith3") == 1
    assert provider.closed == 1  # the request was cancelled, not read to its end
    feedback = provider.requests[1].messages[-1].text
    assert "/products" in feedback and "ran away" in feedback


def test_whitespace_until_max_tokens_is_stopped() -> None:
    blanks = '{"customer": "Ann", ' + " \n" * 2000
    provider = CountingProvider([_cut(blanks)], chunk_size=4)
    client = StructuredClient(provider, retries=0)
    with pytest.raises(RunawayOutput) as raised:
        list(client.stream(Order, prompt="x"))
    assert "whitespace characters in a row" in str(raised.value)
    assert raised.value.usage.output_tokens == raised.value.tokens
    assert provider.pieces < 40  # of 1,005 pieces the reply had


def test_retries_spent_on_runaways_end_in_retries_exhausted() -> None:
    provider = TestProvider([_cut(RUNAWAY)], repeat=True, chunk_size=16)
    client = StructuredClient(provider, retries=1)
    seen: list[Any] = []
    with pytest.raises(RetriesExhausted) as raised:
        seen.extend(client.stream(Order, prompt="x"))
    assert [type(a.error) for a in raised.value.attempts] == [RunawayOutput, RunawayOutput]
    # The call's error keeps what the last attempt had shown, as that attempt's error does.
    last = raised.value.attempts[-1].error
    assert last is not None and last.partial is not None and last.partial is seen[-1]
    assert raised.value.partial is last.partial and raised.value.partial.attempt == 2


def test_the_bound_is_the_caller_s() -> None:
    provider = TestProvider([_cut(RUNAWAY)], chunk_size=16)
    client = StructuredClient(provider, retries=0)
    with pytest.raises(Exception) as raised:
        list(client.stream(Order, prompt="x", runaway=None))
    assert not isinstance(raised.value, RunawayOutput)  # read to the end: a truncation
    with pytest.raises(TypeError, match=r"runaway must be an sdk\.RunawayBound or None"):
        list(client.stream(Order, prompt="x", runaway=5))  # type: ignore[typeddict-item]
    tight = TestProvider([_cut(RUNAWAY)], chunk_size=16)
    with pytest.raises(RunawayOutput) as stopped:
        list(StructuredClient(tight, retries=0).stream(
            Order, prompt="x", runaway=RunawayBound(repetition=60)))  # fmt: skip
    assert stopped.value.start + 60 <= len(stopped.value.text or "") < 140


async def test_the_async_stream_stops_a_runaway_too() -> None:
    provider = TestProvider([_cut(RUNAWAY), VALID], chunk_size=8)
    client = AsyncStructuredClient(provider)
    items = [item async for item in client.stream(Order, prompt="x")]
    assert isinstance(items[-1].attempts[0].error, RunawayOutput)
    assert items[-1].value.products == ["Dmitri Smith3"]
    await asyncio.sleep(0)


@pytest.mark.parametrize(
    "text",
    [
        '{"lines": [{"sku": "A-1", "qty": 1}, {"sku": "A-2", "qty": 1}, {"sku": "A-3", "qty": 2}]}',
        "0." + "0" * 30 + "1",
        '{"note": "' + "ha" * 50 + '"}',
        '{\n  "a": 1,\n  "b": [\n    1,\n    2\n  ]\n}',
    ],
)
def test_ordinary_text_is_not_a_runaway(text: str) -> None:
    watch = RunawayWatch(RunawayBound())
    assert all(watch.feed(text[i : i + 3]) is None for i in range(0, len(text), 3))


def test_a_bound_below_eight_characters_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number >= 8"):
        RunawayBound(whitespace=2)


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("longest_piece", "4", "longest_piece is a whole number from 1 to 4096"),
        ("longest_piece", None, "longest_piece is a whole number from 1 to 4096"),
        ("longest_piece", True, "longest_piece is a whole number from 1 to 4096"),
        ("longest_piece", 0, "longest_piece is a whole number from 1 to 4096"),
        ("longest_piece", 2_000_000, "longest_piece is a whole number from 1 to 4096"),
        ("min_repeats", 2.5, "min_repeats is a whole number >= 2"),
        ("min_repeats", None, "min_repeats is a whole number >= 2"),
        ("min_repeats", 1, "min_repeats is a whole number >= 2"),
    ],
)
def test_a_wrong_piece_setting_is_refused_naming_it(setting: str, value: object, said: str) -> None:
    """Each setting is checked where it is set: a wrongly typed one was a bare `TypeError`
    (`'<' not supported between 'str' and 'int'`) or accepted (`True`, `2.5`), and a huge
    `longest_piece` made every streamed attempt build millions of spans before its first piece."""
    with pytest.raises(ValueError, match=f"RunawayBound.{said}"):
        RunawayBound(**{setting: value})  # type: ignore[arg-type]


def _runaway_by_definition(text: str, bound: RunawayBound) -> tuple[str, int, int, str] | None:
    """What the watch must say once `text` is all it read, read from the whole text: the first
    piece size (1 up) whose repeats cover the bound at the end, traced back to the run's start."""
    run = len(text) - len(text.rstrip())
    if bound.whitespace is not None and run >= bound.whitespace and run > 0:
        return text[-run], run, len(text) - run, "whitespace"
    if bound.repetition is None:
        return None
    for size in range(1, bound.longest_piece + 1):
        span = size * max(bound.min_repeats, -(-bound.repetition // size))
        if span <= len(text) and text[-span:] == text[-size:] * (span // size):
            start = len(text) - span
            while start > 0 and text[start - 1] == text[start - 1 + size]:
                start -= 1
            piece = text[start : start + size]
            return piece, len(text) - start, start, "repetition" if piece.strip() else "whitespace"
    return None


@settings(max_examples=400, deadline=None)
@given(
    head=st.text(alphabet='ab "{},:\n', max_size=80),
    piece=st.text(alphabet='ab "{},:', min_size=1, max_size=70),
    repeats=st.integers(0, 40),
    cuts=st.lists(st.integers(1, 300), min_size=1, max_size=30),
    bound=st.builds(
        RunawayBound,
        whitespace=st.sampled_from([None, 8, 64]),
        repetition=st.sampled_from([None, 8, 30, 240]),
        longest_piece=st.sampled_from([1, 5, 64]),
        min_repeats=st.sampled_from([2, 4, 7]),
    ),
)
def test_the_watch_sees_what_the_whole_text_shows(
    head: str, piece: str, repeats: int, cuts: list[int], bound: RunawayBound
) -> None:
    """The watch reads only a tail and skips the per-size check when no repeat can end it:
    after every piece, however the text is cut, it says what the whole text's check says."""
    text = head + piece * repeats + head[:3]
    watch = RunawayWatch(bound)
    read, turn = 0, 0
    while read < len(text):
        delta = text[read : read + cuts[turn % len(cuts)]]
        read, turn = read + len(delta), turn + 1
        seen = watch.feed(delta)
        said = None if seen is None else (seen.piece, seen.length, seen.start, seen.kind)
        assert said == _runaway_by_definition(text[:read], bound)
        assert watch.text == text[:read]
        if seen is not None:
            break


# What the stream says a reply cost before it ends: Anthropic's `message_start` (the fixture's
# 412 input tokens), each Gemini chunk (212 prompt tokens, 128 of them cached); the other wires
# say it only at the end, which a stopped reply never reaches.
_SAID_BEFORE_THE_END = {
    "anthropic": {"input_tokens": 412},
    "gemini": {"input_tokens": 212, "cache_read_tokens": 128, "reasoning_tokens": 132},
}


@pytest.mark.parametrize("setup", SETUPS, ids=lambda setup: setup.name)
def test_a_stopped_reply_is_charged_for_what_its_stream_said_it_cost(setup: Setup) -> None:
    # On main every attempt stopped for runaway output held its output tokens alone: the input
    # tokens Anthropic and Gemini had said were missing from the usage and the cost.
    provider, _ = setup.build([Say(RUNAWAY, stop="max_tokens")], sync=True)
    client = StructuredClient(provider, retries=0)
    with pytest.raises(RunawayOutput) as raised:
        list(client.stream(Order, prompt="What did Dmitri buy?"))
    error = raised.value
    attempt = error.attempts[-1]  # (a fallback's first provider is down: its 503s before it)
    answering = "anthropic" if setup.name == "fallback" else setup.name
    said = _SAID_BEFORE_THE_END.get(answering, {})
    assert {name: getattr(attempt.usage, name) for name in said} == said
    if not said:
        assert attempt.usage.input_tokens == 0
    assert attempt.usage.output_tokens == error.tokens > 0
    assert error.usage == attempt.usage  # the call's whole cost (a 503 costs nothing)
