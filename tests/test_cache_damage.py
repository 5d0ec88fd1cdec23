"""Damage is a miss or one typed error, never a traceback, and never another answer.

- Any character of a stored entry changed (a byte damaged in the store: one valid answer could
  become another) is `DamagedEntry`, by the entry's checksum.
- The entry decoder, fuzzed with hypothesis (each text sealed with its right checksum, so the
  decoder's own checks are what is tested): any text a store could hand back (a valid entry with
  one field replaced by a value of another type, deep nesting, huge counts and texts, cut-off
  entries, random text) decodes or is `DamagedEntry`, nothing else; through a client such an
  entry is a miss, the provider asked, the entry replaced and a note saying so.
- A damaged cache file: `sdk cache stats` and `sdk cache clear` exit 2 with one line naming it.
- A batch job over a damaged cache runs its items without the cache, and says so once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from contracts import Decision
from sdk import Note
from sdk import StructuredClient
from sdk import ToolCall
from sdk import Usage
from sdk.cache import DamagedEntry
from sdk.cache import Entry
from sdk.cache import MemoryCache
from sdk.cache import SQLiteCache
from sdk.cache._entry import FORMAT
from sdk.cache._entry import MAX_ENTRY_CHARS
from sdk.cache._entry import _checksum
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import FieldDiagnostics
from sdk.diagnostics import TokenStep
from sdk.providers import TestProvider
from sdk.providers._base import Completion
from sdk.stop_reason import StopReason
from tests.batch_support import completions
from tests.batch_support import fanout
from tests.batch_support import write_items

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ANSWER = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})

_REPLY = Completion(
    text=ANSWER,
    stop_reason=StopReason.END_TURN,
    raw_stop_reason="end_turn",
    usage=Usage(120, 30),
    model="m",
    request_id="req_1",
    tool_calls=(ToolCall("call_1", "GetWeather", '{"city": "Paris"}'),),
    notes=(Note("/answer", "Approve", "approve", "enum_case"),),
    diagnostics=ConstraintDiagnostics(
        fields=[FieldDiagnostics("/answer", 2, 0.4, 0.7, 0, False)],
        steps=[TokenStep(7, "ap", 0, 0.5, 3, "/answer")],
        threshold=0.1,
    ),
)
VALID = Entry((_REPLY, _REPLY)).encode()
_FIRST, _HEADER, _TEXTS = VALID.split("\n", 2)


def _sealed(body: str) -> str:
    """An entry of `body` (its header, a newline and its texts) with its checksum right."""
    return f"sdk-cache-entry/{FORMAT} {_checksum(body)}\n{body}"


assert _sealed(f"{_HEADER}\n{_TEXTS}") == VALID


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value (the value itself, its items, their items...)."""
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*at, index))
    return found


HEADER = json.loads(_HEADER)
PLACES = _paths(HEADER)[1:]

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def _replaced(place: tuple[Any, ...], value: Any) -> str:
    """The valid entry with one value of its header replaced."""
    header = json.loads(_HEADER)
    target = header
    for step in place[:-1]:
        target = target[step]
    target[place[-1]] = value
    return _sealed(f"{json.dumps(header, allow_nan=True)}\n{_TEXTS}")


def _decodes_or_is_damaged(text: str) -> None:
    try:
        completions = Entry.decode(text).completions
    except DamagedEntry:
        return
    assert all(isinstance(reply, Completion) for reply in completions)


@settings(max_examples=400, deadline=None)
@given(place=st.sampled_from(PLACES), value=_json)
def test_a_header_field_of_another_type_decodes_or_is_damaged(place: Any, value: Any) -> None:
    _decodes_or_is_damaged(_replaced(place, value))


@settings(max_examples=300, deadline=None)
@given(
    at=st.integers(min_value=0, max_value=len(VALID) - 1),
    by=st.characters(codec="utf-8") | st.sampled_from("0123456789abcdef"),
)
def test_any_character_of_an_entry_changed_is_damaged(at: int, by: str) -> None:
    """One character of a stored entry changed, in its header, its texts or its checksum: a
    store's damaged byte must never turn the answer into another valid one (a letter of the
    reasoning, a digit of an amount: served as the answer before the checksum)."""
    if VALID[at] == by:
        return
    with pytest.raises(DamagedEntry):
        Entry.decode(VALID[:at] + by + VALID[at + 1 :])


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(VALID)), extra=st.text(max_size=30))
def test_a_cut_or_lengthened_entry_is_damaged(cut: int, extra: str) -> None:
    """Cut short, or continued otherwise: damaged (its checksum). Sealed again, cut short or
    with text after its end: damaged; cut and continued otherwise, what the header then says
    may still be an entry (a number's digits changed), or damaged."""
    text = VALID[:cut] + extra
    if text == VALID:
        return
    with pytest.raises(DamagedEntry):
        Entry.decode(text)
    body = text.partition("\n")[2]
    if cut <= len(_FIRST):
        return
    if not extra or cut == len(VALID):
        with pytest.raises(DamagedEntry):
            Entry.decode(_sealed(body))
    else:
        _decodes_or_is_damaged(_sealed(body))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_random_text_is_damaged(text: str) -> None:
    with pytest.raises(DamagedEntry):
        Entry.decode(text)
    with pytest.raises(DamagedEntry):
        Entry.decode(_sealed(text))


@pytest.mark.parametrize(
    "header",
    [
        "[" * 200_000 + "]" * 200_000,  # deeper than the JSON parser's recursion
        '{"replies": ' + "[" * 100_000 + "]" * 100_000 + ', "texts": []}',
        '{"replies": [{"stop_reason": "end_turn", "usage": {"input_tokens": '
        + "9" * 5000
        + '}}], "texts": []}',  # an integer of 5,000 digits (past Python's limit for int())
        '{"replies": [{"stop_reason": "end_turn", "text": 0}], "texts": [99999999999999999]}',
        '{"replies": [{"stop_reason": "end_turn", "usage": {"input_tokens": 1e400}}], "texts": []}',
        '{"replies": [{"stop_reason": "end_turn", "text": true}], "texts": [0]}',
    ],
    ids=["deep list", "deep replies", "huge digits", "huge text length", "infinity", "bool index"],
)
def test_deep_and_huge_headers_are_damaged(header: str) -> None:
    with pytest.raises(DamagedEntry):
        Entry.decode(_sealed(f"{header}\n"))


def test_an_entry_past_the_largest_is_damaged_without_being_read() -> None:
    class Huge(str):
        def __len__(self) -> int:
            return MAX_ENTRY_CHARS + 1

    with pytest.raises(DamagedEntry, match="too long"):
        Entry.decode(Huge(VALID))
    not_text = Entry.stored(7)  # type: ignore[arg-type]
    with pytest.raises(DamagedEntry, match="not text"):
        _ = not_text.completions


def test_the_valid_entry_round_trips() -> None:
    assert Entry.decode(VALID).completions == (_REPLY, _REPLY)


# --- through a client: a miss, replaced, a note ---


_STORED = st.one_of(
    st.tuples(st.sampled_from(PLACES), _json).map(lambda pair: _replaced(*pair)),
    st.text(max_size=200),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(stored=_STORED)
def test_a_damaged_entry_through_a_client_is_a_miss_replaced(
    tmp_path_factory: pytest.TempPathFactory, stored: str
) -> None:
    path = tmp_path_factory.mktemp("entry") / "c.db"
    store = SQLiteCache(path)
    provider = TestProvider([ANSWER], repeat=True)
    client = StructuredClient(provider, cache=store)
    client.generate(Decision, prompt="Approve?")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET value = ?", (stored,))
    again = client.generate(Decision, prompt="Approve?")
    assert again.value.answer == "approve"
    if not again.cached:  # damaged (or a valid entry the call refuses now): asked and replaced
        assert len(provider.requests) == 2
        assert client.generate(Decision, prompt="Approve?").cached
    store.close()


@pytest.mark.parametrize("reopened", [False, True], ids=["the same store", "another process"])
def test_a_letter_of_a_stored_answer_changed_in_the_file_is_never_served(
    tmp_path: Path, reopened: bool
) -> None:
    """One byte of the stored answer changed in the file to another letter: the entry is still
    UTF-8 and as long as its header says, and the answer still valid (SQLite keeps no checksum
    of a value). It was served as the cached answer, with the changed reasoning; the entry's
    checksum makes it a damaged entry: a miss, the provider asked, replaced, a note saying so."""
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    provider = TestProvider([ANSWER], repeat=True)
    client = StructuredClient(provider, cache=store)
    client.generate(Decision, prompt="Approve?")
    if reopened:
        store.close()
        data = path.read_bytes()
        path.write_bytes(data.replace(b"Within policy.", b"Within polica."))
        store = SQLiteCache(path)
        client = StructuredClient(provider, cache=store)
    else:  # (another connection's write, seen by this store's next read)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE entries SET value = replace(value, 'policy.', 'polica.')")
    again = client.generate(Decision, prompt="Approve?")
    assert again.value.reasoning == "Within policy."
    assert not again.cached and len(provider.requests) == 2
    assert [note.kind for note in again.notes] == ["cache_damaged"]
    assert "checksum" in again.notes[0].received
    assert client.generate(Decision, prompt="Approve?").cached
    store.close()


def test_an_entry_whose_bytes_in_the_file_are_not_utf8_is_a_miss_replaced(tmp_path: Path) -> None:
    # Real damage: one byte of the stored answer overwritten in the file (SQLite keeps no
    # checksum of a value, so the page stays sound). It was a `CacheFileError` calling the whole
    # file damaged on every call asking it (and it quoted the stored answer).
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    provider = TestProvider([ANSWER], repeat=True)
    client = StructuredClient(provider, cache=store)
    client.generate(Decision, prompt="Approve?")
    store.close()
    data = bytearray(path.read_bytes())
    data[data.index(b"Within policy.")] = 0xFF
    path.write_bytes(bytes(data))

    store = SQLiteCache(path)
    client = StructuredClient(provider, cache=store)
    again = client.generate(Decision, prompt="Approve?")
    assert not again.cached and len(provider.requests) == 2
    assert [note.kind for note in again.notes] == ["cache_damaged"]
    assert "UTF-8" in str(again.notes[0].received)
    assert client.generate(Decision, prompt="Approve?").cached  # replaced
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize(
    "expires", ["'soon'", "x'00ff'", "CAST(x'ff61' AS TEXT)"]
)  # (text, not UTF-8)
def test_an_entry_whose_expiry_is_not_a_number_is_a_miss_replaced(
    tmp_path: Path, expires: str
) -> None:
    # The expiry's stored type changed (a damaged record header gives text or bytes where a
    # number was): it was a raw `TypeError` comparing it with the clock, on every call.
    path = tmp_path / "c.db"
    store = SQLiteCache(path)
    provider = TestProvider([ANSWER], repeat=True)
    client = StructuredClient(provider, cache=store)
    client.generate(Decision, prompt="Approve?")
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE entries SET expires = {expires}")
    again = client.generate(Decision, prompt="Approve?")
    assert not again.cached and len(provider.requests) == 2
    assert [note.kind for note in again.notes] == ["cache_damaged"]
    assert client.generate(Decision, prompt="Approve?").cached  # replaced
    store.close()


def test_a_damaged_entry_s_note_says_the_provider_was_asked() -> None:
    cache = MemoryCache()
    client = StructuredClient(TestProvider([ANSWER], repeat=True), cache=cache)
    client.generate(Decision, prompt="a")
    (key,) = list(cache._entries)
    damaged = Entry.stored(_replaced(("replies", 0, "usage"), "many"))
    cache._entries[key] = (damaged, None)  # (damage happens in a store: its `put` refuses it)
    result = client.generate(Decision, prompt="a")
    assert not result.cached
    (note,) = result.notes
    assert (note.kind, note.written) == ("cache_damaged", "asked the provider")
    assert "usage" in str(note.received)


# --- a damaged file: one line, exit 2 ---


def _damaged_cache(folder: Path, how: str) -> Path:
    path = folder / "c.db"
    store = SQLiteCache(path)
    client = StructuredClient(TestProvider([ANSWER], repeat=True), cache=store)
    for n in range(40):
        client.generate(Decision, prompt=f"Approve invoice {n}? " + "context " * 200)
    store.close()
    data = bytearray(path.read_bytes())
    if how == "header":
        data[:16] = b"not a database!!"
    else:  # every page after the first: the tables' pages unreadable
        data[4096:] = b"\xa5" * (len(data) - 4096)
    path.write_bytes(bytes(data))
    return path


def _sdk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("how", ["header", "pages"])
def test_sdk_cache_on_a_damaged_file_exits_2_with_one_line(tmp_path: Path, how: str) -> None:
    path = _damaged_cache(tmp_path, how)
    before = path.read_bytes()
    for command in (["stats"], ["stats", "--json"], ["clear"]):
        shown = _sdk("cache", *command, "--path", str(path))
        assert shown.returncode == 2, shown
        lines = shown.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in shown.stderr, shown.stderr
        assert str(path) in lines[0] and "structured-sdk cache" in lines[0]
    assert path.read_bytes() == before  # left as it is


def test_sdk_cache_on_an_empty_file_refuses_it_and_leaves_it_empty(tmp_path: Path) -> None:
    # An empty file (`touch c.db`) is no cache: `stats` refused it, but `clear` adopted it (on
    # main it exited 0, "dropped 0 entries", and left a 20 kB owner-only cache in its place).
    # A client given it at its cache path adopts it (test_shared_files); a command does not.
    path = tmp_path / "c.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    for command in (["stats"], ["stats", "--json"], ["clear"]):
        shown = _sdk("cache", *command, "--path", str(path))
        assert shown.returncode == 2, shown
        lines = shown.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), shown.stderr
        assert f"{path} holds no structured-sdk cache" in lines[0], lines[0]
        assert shown.stdout == ""
        assert path.stat().st_size == 0 and path.stat().st_mode & 0o777 == 0o644
        assert sorted(tmp_path.iterdir()) == [path]  # no -wal, -shm or temporary beside it


def test_a_client_over_a_damaged_file_gets_the_typed_error_naming_it(tmp_path: Path) -> None:
    from sdk.cache import CacheFileError

    path = _damaged_cache(tmp_path, "pages")
    provider = TestProvider([ANSWER], repeat=True)
    with pytest.raises(CacheFileError, match="damaged") as caught:
        StructuredClient(provider, cache=SQLiteCache(path)).generate(Decision, prompt="a")
    assert str(path) in str(caught.value) and provider.requests == []


# --- a batch job over a damaged cache ---


def test_a_batch_job_over_a_damaged_cache_runs_without_it_and_says_so_once(
    tmp_path: Path,
) -> None:
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    write_items(items, 12)
    with fanout(0.0) as url:
        cache = _damaged_cache(tmp_path, "pages")  # its first page whole: it opens
        args = ["batch", "run", "--contract", "contracts:Decision", "--provider", "llamacpp",
                "--base-url", url, "--input", str(items), "--out", str(out),
                "--cache-path", str(cache)]  # fmt: skip
        ran = _sdk(*args)
        asked = completions(url)
    said = [line for line in ran.stderr.splitlines() if "without the response cache" in line]
    assert ran.returncode == 0, ran.stderr
    assert len(said) == 1 and str(cache) in said[0], ran.stderr
    assert "Traceback" not in ran.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(f"doc-{n}" for n in range(12))
    assert all(line["outcome"] == "ok" for line in lines) and asked == 12
    # ... and one item's line says so too (where the job runs apart from its command, a Ray
    # actor, the warning reached only the actor's log: the lines said nothing).
    noted = [note for line in lines for note in line["notes"] if "response cache" in note]
    assert len(noted) == 1 and str(cache) in noted[0], noted


def test_a_store_that_cannot_be_opened_is_given_up_once(tmp_path: Path) -> None:
    """What a job resumed over a cache damaged since it began does: the items run, one line."""
    from sdk.cache import BestEffortCache

    path = _damaged_cache(tmp_path, "header")
    said: list[str] = []
    store = BestEffortCache(lambda: SQLiteCache(path), say=said.append)
    provider = TestProvider([ANSWER], repeat=True)
    client = StructuredClient(provider, cache=store)
    results = [client.generate(Decision, prompt="Approve?") for _ in range(3)]
    assert [r.cached for r in results] == [False] * 3 and len(provider.requests) == 3
    assert len(said) == 1 and str(path) in said[0] and store.given_up is not None
    # The first answer not stored says why, once (a job's output line carries it).
    notes = [[n.received for n in r.notes if n.kind == "cache_not_stored"] for r in results]
    assert [len(n) for n in notes] == [1, 0, 0] and str(path) in notes[0][0]
