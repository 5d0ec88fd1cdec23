"""The response cache: a call asked again is answered from the cache, judged again, and a key
that differs in anything that decides the answer never hits.

Driven through the real `anthropic` and `openai` clients on mocked transports (the request that
reaches the wire is what the key covers) and `TestProvider`; the SQLite store with real files and
real processes.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import os
import pickle
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Annotated
from typing import Any

import pytest
from pydantic import Field
from typer.testing import CliRunner

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Contract
from sdk import Note
from sdk import ProviderError
from sdk import RefusedOutput
from sdk import StructuredClient
from sdk import Tool
from sdk import ToolCall
from sdk import TruncatedOutput
from sdk import Usage
from sdk.cache import CacheFileError
from sdk.cache import CacheStats
from sdk.cache import DamagedEntry
from sdk.cache import Entry
from sdk.cache import MemoryCache
from sdk.cache import RedisCache
from sdk.cache import SQLiteCache
from sdk.cli import app
from sdk.hooks import Hooks
from sdk.providers import AnthropicProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import TestProvider
from sdk.providers._base import Completion
from sdk.stop_reason import StopReason
from tests import tool_wire
from tests.cache_support import Verdict
from tests.cache_support import tightened
from tests.wire_support import DECISION
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import openai_client

TEXT = json.dumps(DECISION)
REPO = Path(__file__).resolve().parent.parent


def _anthropic(wire: Wire, model: str = "claude-sonnet-4-6") -> AnthropicProvider:
    return AnthropicProvider(anthropic_client(wire), model=model)


# --- a hit ---


def test_a_call_asked_again_is_answered_from_the_cache_at_no_cost() -> None:
    wire = Wire(anthropic_reply(text=TEXT))
    client = StructuredClient(_anthropic(wire), cache=MemoryCache())
    first = client.generate(Decision, prompt="Approve invoice INV-7781?", source="PO-2291")
    again = client.generate(Decision, prompt="Approve invoice INV-7781?", source="PO-2291")
    assert len(wire.requests) == 1
    assert again.value == first.value and again.cached and not first.cached
    assert again.usage == Usage() and again.attempts == []
    assert again.cached_usage == first.usage and first.usage.total_tokens > 0
    assert again.text == first.text and again.schema == first.schema


@pytest.mark.parametrize(
    "change",
    [
        {"prompt": "Approve invoice INV-7782?"},
        {"system": "Be strict."},
        {"stop": "END"},  # a sampling option the API takes
        {"max_tokens": 100},
        {"source": "another document"},
        {"extra_body": {"metadata": {"user_id": "u-2"}}},
    ],
    ids=["prompt", "system", "option", "max_tokens", "source", "extra_body"],
)
def test_anything_that_changes_the_request_misses(change: dict[str, Any]) -> None:
    wire = Wire(anthropic_reply(text=TEXT))
    client = StructuredClient(_anthropic(wire), cache=MemoryCache())
    asked: dict[str, Any] = {"prompt": "Approve invoice INV-7781?", "source": "PO-2291"}
    client.generate(Decision, **asked)
    client.generate(Decision, **{**asked, **change})
    assert len(wire.requests) == 2


def test_another_model_or_provider_misses() -> None:
    cache = MemoryCache()
    wire = Wire(anthropic_reply(text=TEXT))
    StructuredClient(_anthropic(wire), cache=cache).generate(Decision, prompt="Approve?")
    StructuredClient(_anthropic(wire, "claude-opus-4-7"), cache=cache).generate(
        Decision, prompt="Approve?"
    )
    chat = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(chat), model="gpt-5.1-mini")
    StructuredClient(provider, cache=cache).generate(Decision, prompt="Approve?")
    assert len(wire.requests) == 2 and len(chat.requests) == 1
    assert cache.stats().entries == 3


def test_a_changed_contract_misses_and_a_tightened_check_refuses_a_stored_answer() -> None:
    provider = TestProvider([json.dumps({"answer": "escalate"}), json.dumps({"answer": "approve"})])
    cache = MemoryCache()
    client = StructuredClient(provider, cache=cache)
    assert client.generate(Verdict, prompt="Verdict?").value.answer == "escalate"
    with tightened():  # the schema is the same: the key is the same, the check is not
        result = client.generate(Verdict, prompt="Verdict?")
    assert not result.cached and result.value.answer == "approve" and len(provider.requests) == 2

    class Widened(Contract):
        answer: str
        note: str = ""

    provider.add(json.dumps({"answer": "reject"}))
    assert client.generate(Widened, prompt="Verdict?").value.answer == "reject"
    assert len(provider.requests) == 3  # another fingerprint: another key


def test_an_answer_holding_text_utf8_cannot_encode_is_returned_not_stored(tmp_path: Path) -> None:
    # A lone surrogate (half of a pair a server's stream split in two) in the reply's reasoning:
    # the answer is valid, but SQLite takes only UTF-8. It was a raw `UnicodeEncodeError` out of
    # `generate` after the provider was paid, the answer lost.
    answer = json.dumps({"reasoning": "Paid.", "answer": "approve", "confidence": "high"})
    reply = Completion(answer, StopReason.END_TURN, "end_turn", reasoning="Split \ud83d here.")
    store = SQLiteCache(tmp_path / "c.db")
    provider = TestProvider([reply], repeat=True)
    client = StructuredClient(provider, cache=store)
    results = [client.generate(Decision, prompt="Approve?", reasoning="native") for _ in (1, 2)]
    assert [r.value.answer for r in results] == ["approve", "approve"]
    assert not any(r.cached for r in results) and len(provider.requests) == 2
    note = results[0].notes[-1]
    assert note.kind == "cache_not_stored" and "UTF-8" in str(note.received)
    str(note.received).encode("utf-8")  # the note itself holds no such text
    assert store.stats().entries == 0
    memory = MemoryCache()  # memory refuses it too: what one store takes, every store takes
    client = StructuredClient(provider, cache=memory)
    asked = [client.generate(Decision, prompt="A?", reasoning="native") for _ in (1, 2)]
    assert [r.cached for r in asked] == [False, False] and memory.stats().entries == 0
    assert [note.kind for note in asked[0].notes] == ["cache_not_stored"]
    store.close()


def test_only_valid_answers_are_stored() -> None:
    provider = TestProvider([
        TestProvider.refusal("No."),
        TestProvider.truncation(TEXT),
        json.dumps({**DECISION, "answer": "maybe"}),
        TEXT,
    ])  # fmt: skip
    cache = MemoryCache()
    client = StructuredClient(provider, cache=cache, retries=1)
    with pytest.raises(RefusedOutput):
        client.generate(Decision, prompt="Approve?")
    with pytest.raises(TruncatedOutput):
        client.generate(Decision, prompt="Approve?")
    assert cache.stats().entries == 0
    client.generate(Decision, prompt="Approve?")  # invalid, then valid on the retry
    assert cache.stats().entries == 1
    again = client.generate(Decision, prompt="Approve?")
    assert again.cached and len(provider.requests) == 4


def test_streams_tool_calls_two_phase_and_async_calls_hit_too() -> None:
    provider = TestProvider([
        "The total matches the order.", TEXT,
        [tool_wire_call()],
    ])  # fmt: skip
    cache = MemoryCache()
    client = StructuredClient(provider, cache=cache)
    first = client.generate(Decision, prompt="Approve?", reasoning="two_phase")
    items = list(client.stream(Decision, prompt="Approve?", reasoning="two_phase"))
    assert len(items) == 1 and items[0].cached  # nothing to stream: the result at once
    assert items[0].reasoning == first.reasoning == "The total matches the order."
    tools = [Tool(tool_wire.GetWeather)]
    client.call_tools(tools=tools, prompt="Weather?")

    async def main() -> Any:
        return await AsyncStructuredClient(provider, cache=cache).call_tools(
            tools=tools, prompt="Weather?"
        )

    calls = asyncio.run(main())
    assert calls.cached and calls.calls[0].value.city == "Paris"
    assert len(provider.requests) == 3


def tool_wire_call() -> ToolCall:
    return ToolCall("c1", "GetWeather", tool_wire.PARIS.arguments)


def test_entries_expire_after_their_time_to_live() -> None:
    now = [1_000.0]
    cache = MemoryCache(ttl=60.0, clock=lambda: now[0])
    provider = TestProvider([TEXT], repeat=True)
    client = StructuredClient(provider, cache=cache)
    client.generate(Decision, prompt="Approve?")
    now[0] += 59.0
    assert client.generate(Decision, prompt="Approve?").cached
    now[0] += 2.0
    assert not client.generate(Decision, prompt="Approve?").cached
    assert cache.stats().expired == 1


@pytest.mark.parametrize("how", ["MemoryCache", "SQLiteCache held", "SQLiteCache read"])
def test_an_entry_has_expired_at_its_expiry_time_in_every_store(tmp_path: Path, how: str) -> None:
    """One rule for every store and path (an entry held in memory, one read from the file): a
    hit a moment before the entry's expiry, a miss at it."""
    now = [1_000.0]
    clock = lambda: now[0]  # noqa: E731
    if how == "MemoryCache":
        store: Any = MemoryCache(ttl=60.0, clock=clock)
    else:
        store = SQLiteCache(tmp_path / "c.db", ttl=60.0, clock=clock)
    client = StructuredClient(TestProvider([TEXT], repeat=True), cache=store)
    client.generate(Decision, prompt="Approve?")
    if how == "SQLiteCache read":  # (read-only: it reads the file at every lookup)
        store = SQLiteCache(tmp_path / "c.db", ttl=60.0, clock=clock, readonly=True)
        client = StructuredClient(TestProvider([TEXT], repeat=True), cache=store)
    now[0] = 1_060.0 - 1e-9
    assert client.generate(Decision, prompt="Approve?").cached
    if how == "SQLiteCache held":
        assert client.generate(Decision, prompt="Approve?").cached  # (held from here on)
    now[0] = 1_060.0
    assert not client.generate(Decision, prompt="Approve?").cached
    assert store.stats().expired == 1


def test_a_cache_option_that_is_not_a_store_is_refused_before_sending() -> None:
    provider = TestProvider([TEXT])
    with pytest.raises(TypeError, match="cache must be"):
        StructuredClient(provider).generate(Decision, prompt="x", cache="answers.db")  # type: ignore[arg-type]
    assert provider.requests == []


class _TextStore:
    """A store of your own that keeps each entry's text and hands that text back (its `get`
    should wrap it: `Entry.stored(text)`)."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def get(self, key: str) -> Any:
        return self.texts.get(key)

    def put(self, key: str, entry: Entry) -> None:
        self.texts[key] = entry.encode()

    def discard(self, key: str) -> None:
        self.texts.pop(key, None)

    def stats(self) -> CacheStats:
        return CacheStats(len(self.texts), 0, 0, 0)

    def clear(self) -> int:
        count = len(self.texts)
        self.texts.clear()
        return count


class _AsyncStore(_TextStore):
    """A store with `async def get/put`, as one may write it for the async client."""

    async def get(self, key: str) -> Any:  # type: ignore[override]
        return self.texts.get(key)

    async def put(self, key: str, entry: Entry) -> None:  # type: ignore[override]
        self.texts[key] = entry.encode()


def test_a_store_of_your_own_that_gives_anything_but_an_entry_is_one_typed_error() -> None:
    """A store whose `get` gave its text, or a coroutine (an `async def get`, which `cache=`
    took), failed inside the call with a raw `AttributeError` ('str' object has no attribute
    'completions'); the async store is refused where it is given, the other at its first hit,
    naming the store and what `get` returns."""
    provider = TestProvider([TEXT], repeat=True)
    with pytest.raises(TypeError, match=r"_AsyncStore\.get is async"):
        StructuredClient(provider, cache=_AsyncStore())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"_AsyncStore\.get is async"):
        StructuredClient(provider).generate(Decision, prompt="x", cache=_AsyncStore())  # type: ignore[arg-type]
    assert provider.requests == []
    store = _TextStore()
    client = StructuredClient(provider, cache=store)
    assert not client.generate(Decision, prompt="Approve?").cached
    with pytest.raises(TypeError, match=r"_TextStore\.get\(\) returned str: .*Entry\.stored"):
        client.generate(Decision, prompt="Approve?")
    assert len(provider.requests) == 1


class _SlowStore(_TextStore):
    """A store whose lookup takes `spent` seconds of the call's clock (a busy file, a server
    slow to answer), which it moves on."""

    def __init__(self, clock: list[float], spent: float) -> None:
        super().__init__()
        self.clock, self.spent = clock, spent

    def get(self, key: str) -> Any:
        self.clock[0] += self.spent
        found = self.texts.get(key)
        return Entry.stored(found) if found is not None else None


def test_a_deadline_the_lookup_spent_says_so() -> None:
    """A call whose deadline passed while its store looked the key up (nothing sent) failed
    saying the provider's deadline passed, as a slow provider's does; it says where the time
    went, and the provider is asked nothing."""
    now = [0.0]
    provider = TestProvider([TEXT], repeat=True)
    client = StructuredClient(provider, cache=_SlowStore(now, 5.0), clock=lambda: now[0])
    with pytest.raises(ProviderError) as failed:
        client.generate(Decision, prompt="Approve?", deadline=2.0)
    message = str(failed.value)
    assert "deadline of 2s passed in the response cache's lookup" in message, message
    assert "before any request was sent" in message
    assert provider.requests == []

    # A deadline a reply spent (an invalid one, then no time left to retry) is told as before.
    def slow_reply(request: Any) -> str:
        now[0] += 5.0
        return "not JSON"

    replying = TestProvider([slow_reply])
    client = StructuredClient(replying, cache=_SlowStore(now, 0.0), clock=lambda: now[0])
    with pytest.raises(ProviderError) as failed:
        client.generate(Decision, prompt="Approve?", deadline=2.0)
    assert "deadline of 2s passed" in str(failed.value)
    assert "lookup" not in str(failed.value)
    assert len(replying.requests) == 1


class _GatedStore(MemoryCache):
    """A store whose calls wait (as a busy file or server does) until the test opens a gate,
    from a coroutine on the event loop; each call records whether the gate opened (`False`:
    it waited its bound out, so nothing on the loop could run meanwhile) and its thread."""

    waits = True

    def __init__(self, gated: str) -> None:
        super().__init__()
        self.gated = gated
        self.gate = threading.Event()
        self.opened: list[bool] = []
        self.threads: dict[str, int] = {}

    def _wait(self, method: str) -> None:
        self.threads[method] = threading.get_ident()
        if method == self.gated:
            self.opened.append(self.gate.wait(timeout=10))

    def get(self, key: str) -> Entry | None:
        self._wait("get")
        return super().get(key)

    def put(self, key: str, entry: Entry) -> None:
        self._wait("put")
        super().put(key, entry)


class _Told(Hooks):
    def __init__(self) -> None:
        self.told: list[tuple[str, int]] = []

    def on_call(self, call: Any) -> None:
        self.told.append(("on_call", threading.get_ident()))

    def on_result(self, call: Any, result: Any) -> None:
        self.told.append(("on_result", threading.get_ident()))

    def on_cancel(self, call: Any, attempts: Any) -> None:
        self.told.append(("on_cancel", threading.get_ident()))


@pytest.mark.parametrize("gated", ["get", "put"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_async_client_asks_a_store_that_waits_apart_from_its_event_loop(
    gated: str, stream: bool
) -> None:
    """The async client called the store on its event loop: a busy SQLite file or a slow
    Redis server held every call on the loop (a Ray batch's rows then all timed out, an
    answer made among them). A store that may wait is asked from a worker thread, its lookup
    and its store alike: here the gate that lets it go on is opened by a coroutine on the loop,
    which could not run while the store held the loop. The hooks are told on the loop."""
    store, hooks = _GatedStore(gated), _Told()
    provider = TestProvider([TEXT], repeat=True)
    client = AsyncStructuredClient(provider, cache=store, hooks=[hooks])

    async def call() -> Any:
        if not stream:
            return await client.generate(Decision, prompt="Approve?")
        return [item async for item in client.stream(Decision, prompt="Approve?")][-1]

    async def main() -> tuple[Any, int]:
        async def open_gate() -> None:
            await asyncio.sleep(0.05)
            store.gate.set()

        results = await asyncio.gather(call(), open_gate())
        return results[0], threading.get_ident()

    result, loop_thread = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert store.opened == [True]  # the loop ran while the store waited
    assert store.threads[gated] != loop_thread
    assert not result.cached and len(provider.requests) == 1
    assert [name for name, _ in hooks.told] == ["on_call", "on_result"]
    assert {thread for _, thread in hooks.told} == {loop_thread}
    again = asyncio.run(asyncio.wait_for(client.generate(Decision, prompt="Approve?"), 60))
    assert again.cached and again.value == result.value


def test_many_calls_on_a_store_that_waits_hold_up_neither_one_another_nor_the_loop_s_threads() -> (
    None
):
    """The store was asked through `asyncio.to_thread`, the event loop's default executor (6
    threads here, shared with its DNS lookups): 80 calls on a store that waited 1 s took 27 s
    for the last, and a `getaddrinfo` beside them 12.9 s. Here 24 calls wait in the store at
    once, and a job on the loop's default executor runs meanwhile: the gate that lets the
    store go on opens only once both happened."""
    inside = 24
    lock, entered, gate = threading.Lock(), threading.Event(), threading.Event()
    count = [0]
    opened: list[bool] = []

    class Waiting(MemoryCache):
        waits = True

        def get(self, key: str) -> Entry | None:
            with lock:
                count[0] += 1
                if count[0] == inside:
                    entered.set()
            opened.append(gate.wait(timeout=10))
            return super().get(key)

    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=Waiting())

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()

        async def open_gate() -> None:
            await loop.run_in_executor(None, lambda: None)  # (as a DNS lookup is run)
            for _ in range(1000):
                if entered.is_set():
                    break
                await asyncio.sleep(0.01)
            gate.set()

        calls = [client.generate(Decision, prompt=f"Approve {n}?") for n in range(inside)]
        return list(await asyncio.gather(*calls, open_gate()))

    results = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert entered.is_set() and opened == [True] * inside
    assert all(not result.cached for result in results[:inside])


def test_an_async_client_looks_up_a_sqlite_store_on_its_loop_and_stores_from_a_thread(
    tmp_path: Path,
) -> None:
    """A `SQLiteCache` lookup never waits for a writer (it reads without the write lock), and a
    thread's hand-over cost an async hit 2.95x a bare parse where it was 1.61x: it is asked on
    the event loop; its store, which may wait for the write lock, from a thread."""
    threads: dict[str, set[int]] = {"get": set(), "put": set()}

    class Watched(SQLiteCache):
        def get(self, key: str) -> Entry | None:
            threads["get"].add(threading.get_ident())
            return super().get(key)

        def put(self, key: str, entry: Entry) -> None:
            threads["put"].add(threading.get_ident())
            super().put(key, entry)

    store = Watched(tmp_path / "c.db")
    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=store)

    async def main() -> tuple[list[bool], int]:
        asked = [(await client.generate(Decision, prompt="Approve?")).cached for _ in range(2)]
        return asked, threading.get_ident()

    asked, loop_thread = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert asked == [False, True]
    assert threads["get"] == {loop_thread} and loop_thread not in threads["put"]
    store.close()


def test_a_store_that_never_waits_is_asked_on_the_event_loop_and_a_cancelled_lookup_ends() -> None:
    """`MemoryCache` says it never waits: asked on the loop (no thread's cost). A call left
    while a store that waits is asked (a task cancelled) has not begun: the lookup comes before
    the hooks hear of the call, so none is told of it (and none waits for its end)."""
    memory = MemoryCache()
    client = AsyncStructuredClient(TestProvider([TEXT], repeat=True), cache=memory)

    async def on_loop() -> bool:
        asked: list[int] = []
        real_get = memory.get
        memory.get = lambda key: asked.append(threading.get_ident()) or real_get(key)  # type: ignore[method-assign]
        await client.generate(Decision, prompt="Approve?")
        return asked == [threading.get_ident()]

    assert MemoryCache.waits is False and asyncio.run(asyncio.wait_for(on_loop(), 60))
    store, hooks = _GatedStore("get"), _Told()
    gated = AsyncStructuredClient(TestProvider([TEXT]), cache=store, hooks=[hooks])

    async def cancelled() -> None:
        task = asyncio.ensure_future(gated.generate(Decision, prompt="Approve?"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        store.gate.set()

    asyncio.run(asyncio.wait_for(cancelled(), timeout=60))
    assert hooks.told == []


def test_a_sqlite_store_pickles_as_its_file_and_a_memory_store_says_why_it_does_not(
    tmp_path: Path,
) -> None:
    """Given to a Ray `StructuredMap` (in its client factory) or a worker process, a store is
    pickled: a `SQLiteCache` failed deep in Ray's serializer ("cannot pickle '_thread._local'
    object", naming no SDK object). It pickles as its file and settings now, as a `RedisCache`
    does as its server: the other process opens its own store on the same file."""
    store = SQLiteCache(tmp_path / "c.db", ttl=60, timeout=2)
    client = StructuredClient(TestProvider([TEXT]), cache=store)
    assert not client.generate(Decision, prompt="Approve?").cached
    for protocol in (2, pickle.HIGHEST_PROTOCOL):  # (Ray's cloudpickle takes `__reduce__` too)
        again = pickle.loads(pickle.dumps(store, protocol))
        assert isinstance(again, SQLiteCache) and again is not store
        assert (again.path.absolute(), again.ttl, again.timeout, again.readonly) == (
            store.path.absolute(), 60, 2, False)  # fmt: skip
        provider = TestProvider([])
        assert StructuredClient(provider, cache=again).generate(Decision, prompt="Approve?").cached
        assert provider.requests == []
        again.close()
    reader = pickle.loads(pickle.dumps(SQLiteCache(tmp_path / "c.db", readonly=True)))
    assert reader.readonly and reader.stats().entries == 1
    with pytest.raises(TypeError, match="MemoryCache is this process's memory"):
        pickle.dumps(MemoryCache())
    # A copy is what it was: a `MemoryCache` another object over the same entries, a store
    # of a subclass of its class (`ExistingCache`, which refuses an empty file, among them).
    memory = MemoryCache()
    memory.put("k" * 64, Entry((TestProvider.refusal("x"),)))
    assert copy.copy(memory).get("k" * 64) is not None
    from sdk.cache._sqlite import ExistingCache

    existing = ExistingCache(tmp_path / "c.db")
    for made in (copy.copy(existing), pickle.loads(pickle.dumps(existing))):
        assert type(made) is ExistingCache
        made.close()
    existing.close()
    store.close()


_STORES: dict[str, Any] = {
    "SQLiteCache": lambda tmp, **given: SQLiteCache(tmp / "c.db", **given),
    "MemoryCache": lambda tmp, **given: MemoryCache(**given),
    # (refused before any connection: nothing listens there)
    "RedisCache": lambda tmp, **given: RedisCache("redis://127.0.0.1:1/0", **given),
}
_BAD_SETTINGS: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("SQLiteCache", {"ttl": "7"}, TypeError),
    ("SQLiteCache", {"ttl": True}, TypeError),
    ("SQLiteCache", {"ttl": math.inf}, ValueError),
    ("SQLiteCache", {"timeout": math.inf}, ValueError),  # every wait has a bound
    ("SQLiteCache", {"timeout": "30"}, TypeError),
    ("MemoryCache", {"ttl": "7"}, TypeError),
    ("MemoryCache", {"max_entries": 2.5}, TypeError),
    ("MemoryCache", {"max_entries": "3"}, TypeError),
    ("RedisCache", {"ttl": math.inf}, ValueError),  # was an OverflowError out of each call
    ("RedisCache", {"timeout": True}, TypeError),
    # A whole number past a float's range: each call raised OverflowError after the provider
    # was paid; a wait of 1e300 s has no bound in practice.
    ("SQLiteCache", {"ttl": 10**400}, ValueError),
    ("MemoryCache", {"ttl": 10**400}, ValueError),
    ("SQLiteCache", {"timeout": 1e300}, ValueError),
    # A clock that gives text failed at the first call that stored, after the provider was
    # paid; one that gives NaN stored entries that never expired.
    ("SQLiteCache", {"clock": 3}, TypeError),
    ("SQLiteCache", {"clock": lambda: "now"}, TypeError),
    ("SQLiteCache", {"clock": lambda: math.nan}, ValueError),
    ("MemoryCache", {"clock": lambda: math.nan}, ValueError),
    ("MemoryCache", {"clock": lambda: None}, TypeError),
]


@pytest.mark.parametrize(
    ("store", "given", "error"), _BAD_SETTINGS, ids=[f"{s}-{g}"[:60] for s, g, _ in _BAD_SETTINGS]
)
def test_a_store_s_settings_are_checked_when_it_is_made_naming_them(
    tmp_path: Path, store: str, given: dict[str, Any], error: type[Exception]
) -> None:
    (name,) = given
    with pytest.raises(error, match=f"{store}\\(\\): {name}(\\(\\))? must be"):
        _STORES[store](tmp_path, **given)


# --- the SQLite store ---


def test_the_sqlite_file_is_private_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "answers.db"
    provider = TestProvider([TEXT])
    StructuredClient(provider, cache=SQLiteCache(path)).generate(Decision, prompt="Approve?")
    assert path.stat().st_mode & 0o777 == 0o600
    again = StructuredClient(provider, cache=SQLiteCache(path)).generate(
        Decision, prompt="Approve?"
    )
    assert again.cached and len(provider.requests) == 1
    stats = SQLiteCache(path).stats()
    assert (stats.entries, stats.hits, stats.misses) == (1, 1, 1)


def test_cache_true_uses_the_default_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sdk.engine import options as setup

    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path))
    setup._default_cache.cache_clear()
    try:
        provider = TestProvider([TEXT])
        client = StructuredClient(provider, cache=True)
        client.generate(Decision, prompt="Approve?")
        assert client.generate(Decision, prompt="Approve?").cached
        assert (tmp_path / "responses.db").is_file()
    finally:
        setup._default_cache.cache_clear()


def test_a_foreign_or_damaged_file_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE entries (key TEXT, value TEXT)")
    db.execute("INSERT INTO entries VALUES ('a', 'b')")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    with pytest.raises(CacheFileError, match="not a structured-sdk cache"):
        SQLiteCache(foreign)
    assert foreign.read_bytes() == before
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(CacheFileError):
        SQLiteCache(damaged)


def test_a_damaged_entry_is_a_miss_and_goes(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "c.db")
    provider = TestProvider([TEXT], repeat=True)
    client = StructuredClient(provider, cache=cache)
    client.generate(Decision, prompt="a")
    db = sqlite3.connect(tmp_path / "c.db")
    db.execute("UPDATE entries SET value = '{not json'")
    db.commit()
    db.close()
    stored = cache.get(_keys(tmp_path / "c.db")[0])
    assert stored is not None
    with pytest.raises(DamagedEntry):  # what a store hands back is decoded when read
        _ = stored.completions
    asked = client.generate(Decision, prompt="a")  # a miss: the provider asked, a note says so
    assert not asked.cached and len(provider.requests) == 2
    assert [note.kind for note in asked.notes] == ["cache_damaged"]
    assert client.generate(Decision, prompt="a").cached  # and the entry replaced
    assert cache.stats().entries == 1


def _keys(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [key for (key,) in db.execute("SELECT key FROM entries")]
    finally:
        db.close()


_WORKER = textwrap.dedent(
    """
    import json, sys
    from contracts import Decision
    from sdk import StructuredClient
    from sdk.cache import SQLiteCache
    from sdk.providers import TestProvider

    path, start = sys.argv[1], int(sys.argv[2])
    cache = SQLiteCache(path)
    answer = {"reasoning": "ok", "answer": "approve", "confidence": "high"}
    provider = TestProvider([json.dumps(answer)], repeat=True)
    client = StructuredClient(provider, cache=cache)
    for n in range(start, start + 60):
        client.generate(Decision, prompt=f"Approve invoice {n % 90}?")
    print(len(provider.requests))
    """
)


def test_two_processes_share_one_cache_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(path), str(start)], cwd=REPO,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for start in (0, 30)
    ]  # fmt: skip
    outputs = [run.communicate(timeout=240) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err for _, err in outputs]
    asked = sum(int(out) for out, _ in outputs)
    # 90 distinct prompts over 120 calls: every one asked at most once per process, and the
    # file holds each answer once, whole (no torn or locked write failed a call).
    stats = SQLiteCache(path).stats()
    assert stats.entries == 90 and 90 <= asked <= 120
    assert stats.hits + stats.misses == 120 and stats.misses == asked


# --- the CLI ---


def test_sdk_cache_stats_and_clear(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    provider = TestProvider([TEXT], repeat=True)
    store = SQLiteCache(path)
    client = StructuredClient(provider, cache=store)
    client.generate(Decision, prompt="a")
    client.generate(Decision, prompt="a")
    store.close()  # a hit is counted in memory until the store's next write or its close
    runner = CliRunner()
    shown = runner.invoke(app, ["cache", "stats", "--path", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) | {"bytes": 0} == {"entries": 1, "bytes": 0, "hits": 1,
                                                       "misses": 1, "expired": 0,
                                                       "refused": 0}  # fmt: skip
    cleared = runner.invoke(app, ["cache", "clear", "--path", str(path)])
    assert cleared.exit_code == 0 and "dropped 1 entries" in cleared.output
    assert SQLiteCache(path).stats() == CacheStats(0, 0, 0, 0, 0, 0)
    missing = runner.invoke(app, ["cache", "stats", "--path", str(tmp_path / "none.db")])
    assert missing.exit_code == 0 and "no cache file" in missing.output
    as_json = runner.invoke(app, ["cache", "stats", "--path", str(tmp_path / "none.db"), "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output) == {
        "entries": 0, "bytes": 0, "hits": 0, "misses": 0, "expired": 0, "refused": 0}  # fmt: skip
    assert not (tmp_path / "none.db").exists()
    foreign = tmp_path / "app.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.commit()
    refused = runner.invoke(app, ["cache", "clear", "--path", str(foreign)])
    assert refused.exit_code == 2 and "not a structured-sdk cache" in refused.output


def test_a_hit_keeps_the_diagnostics_and_notes_its_checks_read() -> None:
    """Mass-aware abstention reads the constraint diagnostics: a hit that lost them would keep
    a value the call that made it abstained on."""
    from contracts import ShipmentNotice
    from sdk.abstention import FieldThreshold
    from sdk.abstention import Thresholds
    from sdk.diagnostics import TokenStep
    from sdk.diagnostics import diagnose
    from sdk.providers._base import Completion
    from sdk.stop_reason import StopReason

    line = json.loads((REPO / "examples/data/eval/notices.jsonl").read_text().splitlines()[0])
    text = json.dumps(line["expected"] | {"recipient": "Jonah Whitaker"})
    steps = [TokenStep(i, ch, i, 0.25, 3) for i, ch in enumerate(text)]
    grounding = Note("", "no grammar here", "checked after parsing", "grounding")
    reply = Completion(text, StopReason.END_TURN, "stop", diagnostics=diagnose(text, steps),
                       notes=(grounding,))  # fmt: skip
    provider = TestProvider([reply], repeat=True)
    client = StructuredClient(provider, cache=MemoryCache())
    thresholds = Thresholds({"/recipient": FieldThreshold(1.0, 1.0, 0.0, 1, 1)})
    ask = {"prompt": line["prompt"], "source": line["document"], "abstention": "guided",
           "abstention_thresholds": thresholds}  # fmt: skip
    first = client.generate(ShipmentNotice, **ask)
    hit = client.generate(ShipmentNotice, **ask)
    assert len(provider.requests) == 1 and hit.cached
    assert first.value.recipient is None  # abstained on its mass ...
    assert hit.value == first.value  # ... and so did the hit
    assert [n.kind for n in hit.notes] == [n.kind for n in first.notes]
    assert "grounding" in [n.kind for n in hit.notes]
    assert hit.diagnostics is not None and first.diagnostics is not None
    assert hit.diagnostics.steps == first.diagnostics.steps
    assert hit.diagnostics.fields == first.diagnostics.fields


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_what_a_caller_does_to_a_result_s_diagnostics_changes_no_later_hit(
    store: str, tmp_path: Path
) -> None:
    """A hit's diagnostics are the replies a store holds and gives every later hit (guided
    abstention reads their steps again): a caller that trimmed a result's lists (to free a
    long generation's steps, or sorted them for a table) changed every later hit's value,
    `cached=True`. They are tuples now: nothing a caller does reaches the stored reply."""
    from contracts import ShipmentNotice
    from sdk.abstention import FieldThreshold
    from sdk.abstention import Thresholds
    from sdk.diagnostics import TokenStep
    from sdk.diagnostics import diagnose
    from sdk.providers._base import Completion
    from sdk.stop_reason import StopReason

    line = json.loads((REPO / "examples/data/eval/notices.jsonl").read_text().splitlines()[0])
    text = json.dumps(line["expected"] | {"recipient": "Jonah Whitaker"})
    steps = [TokenStep(i, ch, i, 0.25, 3) for i, ch in enumerate(text)]
    reply = Completion(text, StopReason.END_TURN, "stop", diagnostics=diagnose(text, steps))
    cache = MemoryCache() if store == "memory" else SQLiteCache(tmp_path / "c.db")
    client = StructuredClient(TestProvider([reply], repeat=True), cache=cache)
    thresholds = Thresholds({"/recipient": FieldThreshold(1.0, 1.0, 0.0, 1, 1)})
    ask = {"prompt": line["prompt"], "source": line["document"], "abstention": "guided",
           "abstention_thresholds": thresholds}  # fmt: skip
    results = [client.generate(ShipmentNotice, **ask) for _ in range(2)]
    assert [r.cached for r in results] == [False, True]
    for result in results:
        diagnostics = result.diagnostics
        assert diagnostics is not None
        assert isinstance(diagnostics.steps, tuple) and isinstance(diagnostics.fields, tuple)
        with pytest.raises(AttributeError):
            diagnostics.steps.clear()  # type: ignore[attr-defined]
    again = client.generate(ShipmentNotice, **ask)
    assert again.cached and again.value.recipient is None  # abstained, as the first did
    assert again.diagnostics is not None and len(again.diagnostics.steps) == len(text)
    # Lists given by hand are kept as tuples: they cannot change afterwards either.
    given = [TokenStep(0, "{", 0, 0.5, 2)]
    made = type(diagnostics)(fields=[], steps=given)  # type: ignore[arg-type]
    given.clear()
    assert made.steps == (TokenStep(0, "{", 0, 0.5, 2),) and made.fields == ()


def test_a_fallback_list_s_hit_is_the_answer_of_the_provider_that_gave_it() -> None:
    """Each provider of a `FallbackProvider` keys its own answers. A hit was keyed and judged
    as the first provider's: an answer the second gave (the first down) was reported as the
    first's, with the first's dialect's removals, and one the first's dialect refuses (a
    strict dialect's `null` for an absent field) was refused at every hit and bought again."""
    from sdk.providers import FallbackProvider
    from sdk.schema.dialects import ANTHROPIC
    from sdk.schema.dialects import OPENAI_STRICT

    class Ticket(Contract):
        title: Annotated[str, Field(max_length=80)]
        priority: Annotated[int, Field(ge=1)] = 3  # (the first's dialect removes `minimum`)

    reply = json.dumps({"title": "printer on fire", "priority": None})
    cache = MemoryCache()

    def pair() -> tuple[TestProvider, TestProvider]:
        down = TestProvider([TestProvider.provider_error(400)], dialect=ANTHROPIC, model="a")
        return down, TestProvider([reply], dialect=OPENAI_STRICT, model="b")

    results = []
    for _ in range(3):
        first, second = pair()
        client = StructuredClient(FallbackProvider([first, second]), cache=cache)
        results.append(client.generate(Ticket, prompt="Triage"))
        assert len(first.requests) + len(second.requests) == (2 if not results[-1].cached else 0)
    live, *hits = results
    assert [r.cached for r in results] == [False, True, True]
    for hit in hits:
        assert hit.value == live.value and hit.model == live.model == "b"
        assert hit.provider == live.provider and hit.removed == live.removed
        assert [r.keyword for r in hit.removed] == ["maxLength"]  # the second's dialect's
        assert [n.kind for n in hit.notes] == [n.kind for n in live.notes] == ["absent_null"]
    assert cache.stats().refused == 0
    # The answer is the second provider's own: a client of it alone is served it.
    alone = TestProvider([reply], dialect=OPENAI_STRICT, model="b")
    assert StructuredClient(alone, cache=cache).generate(Ticket, prompt="Triage").cached
    assert alone.requests == []
    # ... and a list whose first provider answers keys that provider's answer as its own.
    up = TestProvider([json.dumps({"title": "printer on fire"})], dialect=ANTHROPIC, model="a")
    spare = TestProvider([reply], dialect=OPENAI_STRICT, model="c")
    fresh = StructuredClient(FallbackProvider([up, spare]), cache=cache)
    assert not fresh.generate(Ticket, prompt="Triage").cached
    again = TestProvider([], dialect=ANTHROPIC, model="a")
    served = StructuredClient(again, cache=cache).generate(Ticket, prompt="Triage")
    assert served.cached and served.model == "a" and again.requests == []


def test_a_two_phase_answer_two_providers_of_a_list_made_is_not_stored_as_either_s() -> None:
    """The first provider wrote the working, failed the answer; the second answered from that
    working. It was stored under the second's key, so a client of it alone was served the
    first's working as its own (`cached=True`). It is not stored, with a note saying why."""
    from sdk.providers import FallbackProvider

    cache = MemoryCache()
    first = TestProvider(["WORKING OF THE FIRST", TestProvider.provider_error(400)], model="a")
    second = TestProvider([TEXT], model="b")
    client = StructuredClient(FallbackProvider([first, second]), cache=cache)
    live = client.generate(Decision, prompt="Approve?", reasoning="two_phase")
    assert live.reasoning == "WORKING OF THE FIRST" and live.model == "b"
    assert [n.kind for n in live.notes] == ["cache_not_stored"]
    alone = TestProvider(["WORKING OF THE SECOND", TEXT], model="b")
    own = StructuredClient(alone, cache=cache).generate(
        Decision, prompt="Approve?", reasoning="two_phase"
    )
    assert not own.cached and own.reasoning == "WORKING OF THE SECOND"
    again = StructuredClient(TestProvider([], model="b"), cache=cache)
    served = again.generate(Decision, prompt="Approve?", reasoning="two_phase")
    assert served.cached and served.reasoning == "WORKING OF THE SECOND"


def test_an_entry_round_trips_every_field_of_a_reply() -> None:
    from dataclasses import fields

    from sdk.confidence import TokenLogprob
    from sdk.diagnostics import TokenStep
    from sdk.diagnostics import diagnose
    from sdk.providers._base import Completion
    from sdk.stop_reason import StopReason

    text = '{"a": "b"}'
    full = Completion(
        text,
        StopReason.TOOL_USE,
        "tool_use",
        Usage(input_tokens=3, output_tokens=4, cache_read_tokens=2),
        model="m",
        request_id="req_1",
        refusal=None,
        refusal_category=None,
        diagnostics=diagnose(text, [TokenStep(i, c, i, 0.5, 2) for i, c in enumerate(text)]),
        reasoning="because",
        tool_calls=(ToolCall("call_1", "lookup", '{"q": 1}'),),
        notes=(Note("/a", {"x": 1}, object(), "grounding"),),
        tokens=(
            TokenLogprob('{"a": "', 0, 0.0, 1.0),
            TokenLogprob("b", 7, -0.25, 0.5),
            TokenLogprob('"}', 8, float("-inf"), None),
        ),
    )
    back = Entry.decode(Entry((full,)).encode()).completions[0]
    # Every field is kept (a new Completion field fails here until the entry keeps it) ...
    for item in fields(Completion):
        if item.name != "notes":
            assert getattr(back, item.name) == getattr(full, item.name), item.name
    # ... and a note value JSON cannot hold is kept as its text.
    assert back.notes[0].received == {"x": 1} and back.notes[0].written.startswith("<object")


def test_sdk_eval_refuses_a_cache_path_that_is_not_a_cache(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("not a database, kept as it is")
    dataset = REPO / "examples" / "data" / "eval" / "decisions.jsonl"
    result = CliRunner().invoke(
        app, ["eval", str(dataset), "--contract", "contracts:Decision", "--cache-path", str(other)]
    )
    assert result.exit_code == 2
    assert "not a structured-sdk cache" in result.output and str(other) in result.output
    assert other.read_text() == "not a database, kept as it is"
