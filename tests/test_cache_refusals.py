"""What no store takes, every store refuses the same way, through its own `get` and `put`.

- A key, or an entry's text (its answer, model, request id), holding a lone surrogate: text
  UTF-8 cannot encode, so a file or a server cannot keep it. It was a raw `UnicodeEncodeError`
  from `SQLiteCache` and `RedisCache`, and taken by `MemoryCache`; now `NotStorable` (a
  `ValueError`, not a `CacheError`: the store itself is fine) from all three, the store
  unchanged and still used.
- An entry a read would call damaged: longer than `MAX_ENTRY_CHARS`, or holding a count past a
  64-bit integer. It was stored, then `DamagedEntry` at every read in another process (asked
  again, stored again, each time); now `NotStorable` at `put`.
- Through a client, such an answer is returned with a `cache_not_stored` note.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import Decision
from sdk import StructuredClient
from sdk import Usage
from sdk.cache import BestEffortCache
from sdk.cache import DamagedEntry
from sdk.cache import Entry
from sdk.cache import MemoryCache
from sdk.cache import NotStorable
from sdk.cache import RedisCache
from sdk.cache import SQLiteCache
from sdk.cache._entry import MAX_ENTRY_CHARS
from sdk.providers import TestProvider
from sdk.providers._base import Completion
from sdk.stop_reason import StopReason
from tests.redis_support import redis_server

ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})
LONE = "split \ud83d here"

_prefixes = iter(range(1_000_000))

STORES: dict[str, Callable[[Path, str], Any]] = {
    "memory": lambda folder, url: MemoryCache(),
    "sqlite": lambda folder, url: SQLiteCache(folder / "c.db"),
    "redis": lambda folder, url: RedisCache(url, prefix=f"refusals{next(_prefixes)}:"),
}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=list(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    made = STORES[request.param](tmp_path, url)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def _entry(**fields: Any) -> Entry:
    reply = {"text": ANSWER, "stop_reason": StopReason.END_TURN, "raw_stop_reason": "end_turn"}
    return Entry((Completion(**{**reply, **fields}),))


def _still_used(store: Any) -> None:
    """The store refused one thing, and is unchanged and used as before."""
    assert store.stats().entries == 0
    store.put("fine", _entry())
    found = store.get("fine")
    assert found is not None and found.completions[0].text == ANSWER


def test_a_key_holding_a_lone_surrogate_is_refused_by_every_method(store: Any) -> None:
    for use in (lambda: store.put("\ud800", _entry()), lambda: store.get("k\udfff"),
                lambda: store.discard("\ud800"), lambda: store.refuse("\ud800")):  # fmt: skip
        with pytest.raises(NotStorable, match="cache key holds text UTF-8 cannot encode"):
            use()
    _still_used(store)


@pytest.mark.parametrize("field", ["text", "model", "request_id", "reasoning"])
def test_an_entry_holding_a_lone_surrogate_is_refused(store: Any, field: str) -> None:
    with pytest.raises(NotStorable, match="entry holds text UTF-8 cannot encode") as raised:
        store.put("k", _entry(**{field: LONE}))
    str(raised.value).encode("utf-8")  # the message itself holds no such text
    assert not isinstance(raised.value, UnicodeEncodeError)
    _still_used(store)


def test_an_entry_a_read_would_call_damaged_is_refused(store: Any) -> None:
    """A count past a 64-bit integer: a read in another process (no replies remembered there)
    would find it damaged at every lookup."""
    entry = _entry(usage=Usage(2**64, 1))
    with pytest.raises(DamagedEntry, match="not a count"):
        Entry.decode(entry.encode())  # what such a read does
    with pytest.raises(NotStorable, match=r"would not read back: .*not a count"):
        store.put("k", entry)
    _still_used(store)


@pytest.fixture(scope="module")
def too_long() -> str:
    """A valid entry's stored form one answer of `MAX_ENTRY_CHARS` characters long (made once:
    a quarter of a gigabyte)."""
    return _entry(text="x" * MAX_ENTRY_CHARS).encode()


def test_an_entry_longer_than_a_read_takes_is_refused(store: Any, too_long: str) -> None:
    assert len(too_long) > MAX_ENTRY_CHARS
    with pytest.raises(DamagedEntry, match="too long"):
        Entry.decode(too_long)  # what every read of it would say
    with pytest.raises(NotStorable, match=f"longer than a store reads back \\({MAX_ENTRY_CHARS:,}"):
        store.put("k", Entry.stored(too_long))
    _still_used(store)


def test_a_client_returns_an_answer_no_store_takes_with_a_note_and_keeps_its_store(
    store: Any,
) -> None:
    reply = Completion(ANSWER, StopReason.END_TURN, "end_turn", reasoning=LONE)
    provider = TestProvider([reply, ANSWER])
    best = BestEffortCache(lambda: store)  # (a batch job's: it is not given up for this)
    client = StructuredClient(provider, cache=best)
    result = client.generate(Decision, prompt="Approve?", reasoning="native")
    assert result.value.answer == "approve" and not result.cached
    assert [note.kind for note in result.notes] == ["cache_not_stored"]
    assert "UTF-8 cannot encode" in str(result.notes[0].received)
    assert best.given_up is None and store.stats().entries == 0
    asked = [client.generate(Decision, prompt="Approve?").cached for _ in (1, 2)]
    assert asked == [False, True]  # the store still takes and serves the next answer
