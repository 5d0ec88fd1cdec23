"""What a cache stores, in what form, and the protocol a store implements.

An entry's stored form is text: a first line naming the format and the CRC-32 of the rest, a
JSON header holding every field of the replies but their long texts, and the texts themselves,
one after the other, unescaped (the header says how long each is). So a hit reads a few hundred
bytes of JSON and slices the texts out, instead of parsing the whole reply again as a JSON
string.

Whatever a store hands back is decoded strictly: the checksum matching the content (a byte
changed in a store, by a damaged disk or page, could otherwise turn one valid answer into
another: a digit of an amount; it is no defence against someone who may write the store, who
could write any answer), every field of the type it must have, every count a whole number in
range, every number finite, the texts exactly as long as the header says, the whole no longer
than `MAX_ENTRY_CHARS`. Anything else (a field of the wrong type,
deeply nested JSON, a huge value, a cut-off entry) is `DamagedEntry`, which a call takes as a
miss: the provider is asked and the entry replaced.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields
from pathlib import Path
from typing import Annotated
from typing import Any
from typing import Protocol
from typing import cast

from sdk import _fork
from sdk._tools import ToolCall
from sdk._values.declared import Between
from sdk._values.declared import Count
from sdk._values.declared import Positive
from sdk._values.declared import check
from sdk._values.records import Note
from sdk._values.records import Usage
from sdk._values.seconds import INTERVAL
from sdk.cache._errors import CacheError
from sdk.cache._errors import DamagedEntry
from sdk.cache._errors import NotStorable
from sdk.cache._errors import failed_in
from sdk.confidence import TokenLogprob
from sdk.diagnostics import ConstraintDiagnostics
from sdk.diagnostics import FieldDiagnostics
from sdk.diagnostics import TokenStep
from sdk.providers._base import Completion
from sdk.stop_reason import StopReason

__all__ = [
    "FORMAT",
    "MAX_ENTRY_CHARS",
    "Cache",
    "CacheStats",
    "Entry",
    "check_settings",
    "checked_key",
    "default_path",
    "expired",
    "not_served",
    "stored_form",
]

FORMAT = 4
"""The entries' format: part of every key, so a new format never reads an old entry (3: the
texts stored apart from the header, unescaped; the endpoint and model file in the key; 4: a
checksum of the content, and the headers requests carry in the key)."""

MAX_ENTRY_CHARS = 256 * 1024 * 1024
"""The longest stored entry read back (characters): a longer one is damaged, not decoded (and
a store's `put` refuses it: `stored_form`)."""

_MAGIC = f"sdk-cache-entry/{FORMAT} "
"""How an entry's first line starts: the format, then its checksum (`_checksum`) and a newline."""
_FIRST_LINE = len(_MAGIC) + 9
_LARGEST = 2**63 - 1  # a count beyond SQLite's integers is not a count a reply could hold
_USAGE = frozenset(item.name for item in fields(Usage))
_REPLY = frozenset(item.name for item in fields(Completion))
_STOPS = {reason.value: reason for reason in StopReason}
_HEADER_KEYS = ({"replies", "texts"}, {"replies", "texts", "retried"})
# default=repr: a provider note's value that JSON cannot hold is kept as its text.
_HEADER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=repr)


class Entry:
    """A stored answer: the replies that made it (the working of two-phase reasoning, then the
    answer), to be judged again on a hit.

    `Entry(completions)` holds replies; `Entry.stored(text)` holds a store's text, decoded the
    first time `completions` is read (`DamagedEntry` there if it does not decode). `retried`:
    for an answer a call made after retries of its own (a reply refused, cut off or invalid,
    asked again), what decided them (the call's retry and parsing settings, by digest), so that
    only a call of the same settings is served it; `None` for a first attempt's answer."""

    __slots__ = ("_completions", "_encoded", "_key", "_retried", "_usage")

    def __init__(self, completions: Sequence[Completion], retried: str | None = None) -> None:
        if not completions:
            raise ValueError("an entry holds at least one reply")
        if retried is not None and not _is_digest(retried):
            raise ValueError(f"an entry's retried is a digest of hex digits, not {retried!r}")
        self._completions: tuple[Completion, ...] | None = tuple(completions)
        self._retried = retried
        self._encoded: str | None = None
        self._key: str | None = None
        self._usage: Usage | None = None

    @classmethod
    def stored(cls, encoded: str, key: str | None = None) -> Entry:
        """An entry as a store keeps it, decoded when first read: once per process for the same
        text (the replies of recently decoded or stored texts are remembered, by the cache key
        they were found or stored under, `key`, else by the text, and used only for this very
        text, compared whole)."""
        entry = cls.__new__(cls)
        entry._key = key
        entry._encoded = encoded
        recalled = _recall(encoded, key) if type(encoded) is str else None
        entry._completions, entry._usage, entry._retried = recalled or (None, None, None)
        return entry

    @classmethod
    def decode(cls, encoded: str) -> Entry:
        """An entry from its stored form, decoded now (`DamagedEntry` if it does not decode)."""
        return cls(*_decode(encoded))

    @property
    def completions(self) -> tuple[Completion, ...]:
        """The replies (`DamagedEntry` if a stored form does not decode)."""
        if self._completions is None:
            self._completions, self._retried = _decode(self._encoded)
            _remember(self._encoded, self._key, self._completions, self.usage, self._retried)
        return self._completions

    @property
    def retried(self) -> str | None:
        """What decided the retries the answer was made after (see the class), or `None`."""
        if self._completions is None:
            self.completions  # noqa: B018 (decoded: `DamagedEntry` if it does not)
        return self._retried

    @property
    def usage(self) -> Usage:
        """What the stored replies cost when they were made."""
        if self._usage is None:
            self._usage = sum((c.usage for c in self.completions), Usage())
        return self._usage

    def encode(self, key: str | None = None) -> str:
        """The stored form (see the module docstring); `key`: the cache key it is stored under
        (a hit on it then finds its replies without decoding them)."""
        if self._encoded is None:
            assert self._completions is not None
            self._encoded = _encode(self._completions, self._retried)
        if self._completions is not None:
            _remember(self._encoded, key, self._completions, self.usage, self._retried)
        return self._encoded

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Entry)
            and self.completions == other.completions
            and self.retried == other.retried
        )

    def __hash__(self) -> int:
        return hash(self.encode())

    def __repr__(self) -> str:
        if self._completions is None:
            return f"Entry(stored, {len(self._encoded or ''):,} characters)"
        return f"Entry({len(self._completions)} replies)"


@dataclass(frozen=True, slots=True)
class CacheStats:
    """What a store holds and how it has served: `hits` are lookups whose stored answer was
    served; `misses` every other lookup, among them the `expired` entries and the `refused` ones
    (found, but damaged or refused by today's checks: the provider was asked and the entry
    replaced)."""

    entries: int
    bytes: int
    hits: int
    misses: int
    expired: int = 0
    refused: int = 0

    def lines(self) -> list[str]:
        rate = self.hits / (self.hits + self.misses) if self.hits + self.misses else 0.0
        return [
            f"{self.entries:,} entries, {self.bytes:,} bytes",
            f"{self.hits:,} hits, {self.misses:,} misses (hit rate {rate:.0%}), "
            f"{self.expired:,} expired, {self.refused:,} refused",
        ]


class Cache(Protocol):
    """What a store implements (`get` and `put` are called from any thread).

    The SDK's stores refuse a key or an entry no store takes (text UTF-8 cannot encode, an
    entry a read would call damaged) with `NotStorable` (`checked_key`, `stored_form`); a call
    returns such an answer with a `cache_not_stored` note, as for a `CacheError` at `put`.

    A store may also have `refuse(key)`: the entry `get` just handed back for `key` was not
    served (damaged, or refused by today's checks), so drop it and count that lookup a miss, not
    a hit (`CacheStats.refused`). A call uses it when the store has it, else `discard`: a store
    without it still works, and counts such a lookup a hit.

    And `waits = False`, for a store whose calls never wait (no file lock, no server: as
    `MemoryCache`): the async client then asks it on its event loop. Any other store's `get`
    and `put` (and `refuse`) it calls from a thread of its own, so that a store that waits holds
    up its own call, never the loop and every call on it; but for `lookups_wait = False`, a
    store whose `get` never waits though its writes may (`SQLiteCache`): asked on the loop,
    where a thread's hand-over would cost a hit more than its lookup. The threads are the
    store's own where it has them (`threads`, an `sdk._threads.CacheThreads`: the SDK's stores
    do), else the process's (`sdk._threads`)."""

    def get(self, key: str) -> Entry | None:
        """The live entry for `key`, or `None` (missing or expired: a miss)."""
        ...

    def put(self, key: str, entry: Entry) -> None:
        """Store `entry` under `key` (replacing any), for the store's time-to-live."""
        ...

    def discard(self, key: str) -> None:
        """Drop `key` (a stored answer today's checks refuse, or a damaged one)."""
        ...

    def stats(self) -> CacheStats:
        """What the store holds and how it has served."""
        ...

    def clear(self) -> int:
        """Drop every entry; how many there were."""
        ...


def checked_key(key: str) -> str:
    """`key`, if a store can hold it: text UTF-8 can encode (a file or a server keeps UTF-8);
    `NotStorable` if not (a lone surrogate). Every store checks its keys so, `MemoryCache`
    too: a key one store takes, every store takes."""
    if isinstance(key, str) and not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as error:
            raise NotStorable(
                f"a cache key holds text UTF-8 cannot encode ({error.reason} at character "
                f"{error.start:,})"
            ) from None
    return key


def stored_form(key: str, entry: Entry) -> str:
    """The text a store keeps for `entry` under `key`, checked to read back as it was put:
    `NotStorable` for a key or an entry holding text UTF-8 cannot encode (a lone surrogate),
    an entry longer than `MAX_ENTRY_CHARS`, or one the strict decoding of a read would call
    damaged (a count past a 64-bit integer, a number that is not finite: another process
    would find it `DamagedEntry` at every read, ask again and store it again). Every store's
    `put` calls it, so every store refuses the same entries."""
    checked_key(key)
    text = entry.encode(key)
    if len(text) > MAX_ENTRY_CHARS:
        raise NotStorable(
            f"an entry of {len(text):,} characters is longer than a store reads back "
            f"({MAX_ENTRY_CHARS:,})"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise NotStorable(
                f"an entry holds text UTF-8 cannot encode ({error.reason} at character "
                f"{error.start:,} of its stored form)"
            ) from None
    try:
        _decode(text)  # (what a read in another process does: no remembered replies there)
    except DamagedEntry as error:
        raise NotStorable(f"an entry that would not read back: {error}") from None
    return text


def expired(expires: float | None, clock: Callable[[], float]) -> bool:
    """Whether an entry that `expires` at that time of `clock` (`None`: never) has expired: at
    that time and after it (the one rule every store judges by; `clock` asked only for an entry
    that expires)."""
    return expires is not None and expires <= clock()


def not_served(store: Cache, key: str) -> None:
    """The entry `store.get(key)` handed back was not served: the store's `refuse` when it has
    one (counted a miss), else `discard` (see `Cache`). A failure is a `CacheError`: a store of
    your own's other errors (its server's, a bug) chained to one naming the method used."""
    refuse = getattr(store, "refuse", None)
    method, drop = ("refuse", refuse) if refuse is not None else ("discard", store.discard)
    try:
        drop(key)
    except CacheError:
        raise
    except Exception as error:
        raise CacheError(failed_in(store, method, error)) from error


_LONGEST_TTL = 1e12  # (31,700 years: a whole number past a float's range overflowed a store)
_TTL = Annotated[float, Positive(), Between(0, _LONGEST_TTL)]


def check_settings(
    store: str,
    *,
    ttl: object = None,
    timeout: object = None,
    max_entries: object = None,
    clock: object = None,
) -> None:
    """Refuse a store's setting where the store is made, naming it: `ttl` a number of seconds up
    to `_LONGEST_TTL` or `None` (no expiry), `timeout` a number of seconds up to a day (every
    wait has a bound), `max_entries` a whole number of at least 1, `clock` a function giving a
    finite number of seconds (asked once here: a clock giving text or NaN failed, or never
    expired an entry, at the first call that stored) (each `None` here: not the store's)."""
    where = f"{store}()"
    if clock is not None:
        check("clock", clock, Callable[[], float], where, expects="a function returning seconds")
        now = cast(Callable[[], object], clock)()
        check("clock()", now, float, where, expects="a number of seconds (as time.time())")
    if ttl is not None:
        check("ttl", ttl, _TTL, where, expects="a number of seconds or None (no expiry)")
    if timeout is not None:
        check("timeout", timeout, INTERVAL, where, expects="a number of seconds")
    if max_entries is not None:
        check("max_entries", max_entries, Count, where)


def default_path() -> Path:
    """Where `cache=True` keeps its SQLite file: `$SDK_CACHE_DIR`, else the user's cache folder
    (`$XDG_CACHE_HOME/structured-sdk`, `~/.cache/structured-sdk`)."""
    folder = os.environ.get("SDK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "structured-sdk"
    )
    return Path(folder) / "responses.db"


# --- texts decoded lately ---

_RECENT_MAX = 256
_RECENT_LONGEST = 64 * 1024
_recent: dict[str, tuple[str, tuple[Completion, ...], Usage, str | None]] = {}
_recent_lock = _fork.lock()


def _remember(
    encoded: object,
    key: str | None,
    completions: tuple[Completion, ...],
    usage: Usage,
    retried: str | None,
) -> None:
    """Keep the replies of a stored text that decoded (or was just encoded), with the text, under
    the cache key it is stored under (else under the text itself): a hit on the same text (a
    store's fresh copy of it, compared whole: no hash of a long text) skips the decoding. Short
    texts only, and the last few hundred; replies are frozen records, shared as `MemoryCache`
    shares them."""
    if type(encoded) is not str or len(encoded) > _RECENT_LONGEST:
        return
    with _recent_lock:
        _recent[key if key is not None else encoded] = (encoded, completions, usage, retried)
        while len(_recent) > _RECENT_MAX:
            del _recent[next(iter(_recent))]


def _recall(
    encoded: str, key: str | None
) -> tuple[tuple[Completion, ...], Usage, str | None] | None:
    """The remembered replies of exactly this text (`_remember`), if any."""
    found = _recent.get(key if key is not None else encoded)
    if found is None or found[0] != encoded:
        return None
    return found[1], found[2], found[3]


# --- the stored form ---


def _encode(completions: tuple[Completion, ...], retried: str | None) -> str:
    texts: list[str] = []
    replies = [_reply_json(completion, texts) for completion in completions]
    fields: dict[str, Any] = {"replies": replies, "texts": [len(text) for text in texts]}
    if retried is not None:  # (a first attempt's answer: the header as it always was)
        fields["retried"] = retried
    header = _HEADER.encode(fields)
    body = header + "\n" + "".join(texts)
    return f"{_MAGIC}{_checksum(body)}\n{body}"


def _checksum(body: str) -> str:
    """The CRC-32 of an entry's content after its first line (as UTF-8, a lone surrogate as
    Python keeps it), in eight hex digits: it catches any byte changed in a store. Computed
    when an entry is stored and when a store's text is first decoded in a process (a text read
    again, equal to one decoded before, is not decoded again: `_recall`)."""
    return f"{zlib.crc32(body.encode('utf-8', 'surrogatepass')):08x}"


def _reply_json(completion: Completion, texts: list[str]) -> dict[str, Any]:
    def apart(text: str | None) -> int | None:
        if text is None:
            return None
        texts.append(text)
        return len(texts) - 1

    return {
        "text": apart(completion.text),
        "stop_reason": completion.stop_reason.value,
        "raw_stop_reason": completion.raw_stop_reason,
        "usage": {name: getattr(completion.usage, name) for name in sorted(_USAGE)},
        "model": completion.model,
        "request_id": completion.request_id,
        "refusal": completion.refusal,
        "refusal_category": completion.refusal_category,
        "reasoning": apart(completion.reasoning),
        "tool_calls": [[c.id, c.tool, c.text] for c in completion.tool_calls],
        "notes": [[n.pointer, n.received, n.written, n.kind] for n in completion.notes],
        "diagnostics": _diagnostics_json(completion.diagnostics),
        # Rows, not objects, as the steps are; a hit gives the call's `Result.confidence`.
        "tokens": None
        if completion.tokens is None
        else [[t.text, t.offset, t.logprob, t.mass] for t in completion.tokens],
    }


def _diagnostics_json(diagnostics: Any) -> dict[str, Any] | None:
    if not isinstance(diagnostics, ConstraintDiagnostics):
        return None
    return {
        "threshold": diagnostics.threshold,
        "fields": [
            [f.pointer, f.tokens, f.min_mass, f.mean_mass, f.forced, f.flagged]
            for f in diagnostics.fields
        ],
        # Steps as rows, not objects: a long reply has thousands of them.
        "steps": [
            [s.token, s.text, s.offset, s.mass, s.allowed, s.pointer] for s in diagnostics.steps
        ],
    }


def _is_digest(value: object) -> bool:
    """Whether `value` is what an entry's `retried` holds: hex digits, 16 to 64 of them."""
    return (
        type(value) is str
        and 16 <= len(value) <= 64
        and all(c in "0123456789abcdef" for c in value)
    )


def _decode(encoded: object) -> tuple[tuple[Completion, ...], str | None]:
    if isinstance(encoded, bytes):  # (a store's text that is not UTF-8, as it read it)
        try:
            encoded.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DamagedEntry(
                f"a stored entry's bytes are not UTF-8 ({error.reason} at byte {error.start:,})"
            ) from None
    if not isinstance(encoded, str):
        raise DamagedEntry(f"a stored entry is {type(encoded).__name__}, not text")
    if len(encoded) > MAX_ENTRY_CHARS:
        raise DamagedEntry(f"a stored entry of {len(encoded):,} characters is too long")
    if not encoded.startswith(_MAGIC):
        raise DamagedEntry("a stored entry of another format (or none)")
    if encoded[_FIRST_LINE - 1 : _FIRST_LINE] != "\n":
        raise DamagedEntry("a stored entry's first line is not its format and checksum")
    if encoded[len(_MAGIC) : _FIRST_LINE - 1] != _checksum(encoded[_FIRST_LINE:]):
        raise DamagedEntry("a stored entry does not match its checksum (damaged in the store)")
    end = encoded.find("\n", _FIRST_LINE)
    if end < 0:
        raise DamagedEntry("a stored entry cut short in its header")
    try:
        header = json.loads(encoded[_FIRST_LINE:end])
    except (ValueError, RecursionError) as error:
        raise DamagedEntry(f"a stored entry's header is not JSON ({error})") from None
    if not isinstance(header, dict) or header.keys() not in _HEADER_KEYS:
        raise DamagedEntry("a stored entry's header is not {replies, texts[, retried]}")
    retried = header.get("retried")
    if retried is not None and not _is_digest(retried):
        raise DamagedEntry("a stored entry's retried is not a digest")
    texts = _texts(encoded, end + 1, header["texts"])
    replies = header["replies"]
    if not isinstance(replies, list) or not replies:
        raise DamagedEntry("a stored entry holds no replies")
    return tuple(_reply_of(item, texts) for item in replies), retried


def _texts(encoded: str, start: int, lengths: Any) -> list[str]:
    """The texts after the header, as long as the header says, and nothing after them."""
    if not isinstance(lengths, list):
        raise DamagedEntry("a stored entry's text lengths are not a list")
    texts = []
    for length in lengths:
        size = _count(length, "a text length")
        texts.append(encoded[start : start + size])
        start += size
    if start != len(encoded):
        raise DamagedEntry("a stored entry's texts are not as long as its header says")
    return texts


def _reply_of(data: Any, texts: list[str]) -> Completion:
    if not isinstance(data, dict) or not data.keys() <= _REPLY:
        raise DamagedEntry("a stored reply is not an object of a reply's fields")
    stop_value = data.get("stop_reason")
    stop = _STOPS.get(stop_value) if isinstance(stop_value, str) else None
    if stop is None:
        raise DamagedEntry(f"a stored reply's stop reason is {stop_value!r:.40}")
    return Completion(
        text=_segment(data.get("text"), texts),
        stop_reason=stop,
        raw_stop_reason=_string(data.get("raw_stop_reason")),
        usage=_usage(data.get("usage")),
        model=_string(data.get("model")),
        request_id=_string(data.get("request_id")),
        refusal=_string(data.get("refusal")),
        refusal_category=_string(data.get("refusal_category")),
        reasoning=_segment(data.get("reasoning"), texts),
        tool_calls=tuple(ToolCall(*_strings(call, 3)) for call in _list(data.get("tool_calls"))),
        notes=tuple(_note(note) for note in _list(data.get("notes"))),
        diagnostics=_diagnostics_of(data.get("diagnostics")),
        tokens=_tokens_of(data.get("tokens")),
    )


def _usage(data: Any) -> Usage:
    if data is None:
        return Usage()
    if not isinstance(data, dict) or not data.keys() <= _USAGE:
        raise DamagedEntry("a stored reply's usage is not an object of token counts")
    return Usage(**{name: _count(value, name) for name, value in data.items()})


def _note(data: Any) -> Note:
    if not isinstance(data, list) or len(data) != 4:
        raise DamagedEntry("a stored note is not [pointer, received, written, kind]")
    pointer, received, written, kind = data
    return Note(_required(pointer), received, written, _required(kind))


def _diagnostics_of(data: Any) -> ConstraintDiagnostics | None:
    if data is None:
        return None
    if not isinstance(data, dict) or data.keys() != {"threshold", "fields", "steps"}:
        raise DamagedEntry("stored diagnostics are not {threshold, fields, steps}")
    rows = []
    for row in _list(data["fields"]):
        if not isinstance(row, list) or len(row) != 6 or not isinstance(row[5], bool):
            raise DamagedEntry("a stored field's diagnostics are not a row of six")
        pointer, tokens, low, mean, forced, flagged = row
        rows.append(FieldDiagnostics(_required(pointer), _count(tokens, "tokens"),
                                     _number(low), _number(mean), _count(forced, "forced"),
                                     flagged))  # fmt: skip
    steps = []
    for step in _list(data["steps"]):
        if not isinstance(step, list) or len(step) != 6:
            raise DamagedEntry("a stored token step is not a row of six")
        token, text, offset, mass, allowed, pointer = step
        steps.append(TokenStep(_count(token, "token"), _required(text), _count(offset, "offset"),
                               _number(mass), _count(allowed, "allowed"),
                               _required(pointer)))  # fmt: skip
    return ConstraintDiagnostics(
        fields=tuple(rows), steps=tuple(steps), threshold=_number(data["threshold"])
    )


def _tokens_of(data: Any) -> tuple[TokenLogprob, ...] | None:
    """The replies' token probabilities (`None`: the route reported none, or an entry stored
    before they were kept)."""
    if data is None:
        return None
    tokens = []
    for row in _list(data):
        if not isinstance(row, list) or len(row) != 4:
            raise DamagedEntry("a stored token probability is not a row of four")
        text, offset, logprob, mass = row
        tokens.append(TokenLogprob(_required(text), _count(offset, "offset"), _logprob(logprob),
                                   None if mass is None else _number(mass)))  # fmt: skip
    return tuple(tokens)


def _logprob(value: Any) -> float:
    """A log probability: a finite number at most 0, or minus infinity (a probability of 0)."""
    if type(value) not in (int, float) or not value <= 0:
        raise DamagedEntry(f"a stored log probability is {value!r:.40}")
    return float(value)


# --- strict values ---


def _segment(index: Any, texts: list[str]) -> str | None:
    if index is None:
        return None
    if type(index) is not int or not 0 <= index < len(texts):
        raise DamagedEntry(f"a stored reply names text {index!r}, not one of {len(texts)}")
    return texts[index]


def _string(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise DamagedEntry(f"a stored reply field is {type(value).__name__}, not a string")
    return value


def _required(value: Any) -> str:
    if not isinstance(value, str):
        raise DamagedEntry(f"a stored value is {type(value).__name__}, not a string")
    return value


def _strings(value: Any, count: int) -> list[str]:
    if not isinstance(value, list) or len(value) != count:
        raise DamagedEntry(f"a stored row is not {count} strings")
    return [_required(item) for item in value]


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DamagedEntry(f"a stored list is {type(value).__name__}")
    return value


def _count(value: Any, name: str) -> int:
    if type(value) is not int or not 0 <= value <= _LARGEST:
        raise DamagedEntry(f"a stored {name} is {value!r:.40}, not a count")
    return value


def _number(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise DamagedEntry(f"a stored number is {value!r:.40}")
    return float(value)
