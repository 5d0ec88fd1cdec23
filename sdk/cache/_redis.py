"""`RedisCache`: the response cache a cluster shares, on a Redis server.

The same key as every store (`cache_key`: the provider and where it runs, the model, the request,
the contract's fingerprint) and the same damage rules as `SQLiteCache`:

- whatever is stored under an entry's key is decoded strictly when read: text that is not an
  entry, bytes that are not UTF-8, a value of another Redis type (a list, a hash) under the key
  are a damaged entry, which a call takes as a miss: the provider is asked, the entry replaced
  (`SET` replaces a value of any type), and a note says so;
- a server that does not answer within `timeout` (a round trip's whole reply, not each read),
  refuses the connection or the password, or holds something else under the cache's prefix is
  one `CacheServerError` naming the server (its URL without credentials), never a raw `redis`
  error.

Layout under `prefix` (default `sdk-cache:`): `PREFIX e:KEY` holds an entry (a string, with the
store's time-to-live as Redis's own expiry), `PREFIX counters` a hash of hits, misses and
refused entries, and `PREFIX format` names what the prefix holds (checked when a store is made:
a prefix another application uses is refused, and nothing of it changed). A lookup is one round
trip (a script reads the entry and counts the hit or miss; a found entry the call does not serve
is moved from the hits to the misses by `refuse`). The counts live on the server, none in a
process, so a `clear` starts them afresh for every process. Entries expire in Redis itself, so
`stats().expired` stays 0. Keys of one store go to one server (not Redis Cluster's slots). The
two scripts are registered once per connection (`_Connection`); a server that forgot them
(`SCRIPT FLUSH`, a restart) is given them again at their next call (redis-py's `Script` loads
itself on `NOSCRIPT`).

A store pickles as its URL and settings (for Ray actors and worker processes): each process opens
its own connections.

`close()` closes the store's connections once the calls under way in other threads have
finished (it waits for them at most `timeout`: one still running then is cut short,
`CacheClosed`, never an error of a connection torn down under it); a call made while it closes
waits for it, and a later call opens new connections.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from contextlib import suppress
from typing import TYPE_CHECKING
from typing import Any
from typing import NamedTuple
from typing import cast
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

from sdk import _fork
from sdk._threads import CacheThreads
from sdk.cache._entry import CacheStats
from sdk.cache._entry import Entry
from sdk.cache._entry import check_settings
from sdk.cache._entry import checked_key
from sdk.cache._entry import stored_form
from sdk.cache._errors import CacheClosed
from sdk.cache._errors import CacheServerError

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script
    from redis.retry import Retry

__all__ = ["RedisCache"]

FORMAT_MARK = "structured-sdk cache/1"
"""What `PREFIX format` holds: the entries' layout under the prefix."""

# Counting never fails a lookup: a count that is not a whole number (a damaged value, a hand
# edit: `stats()` reads it as 0) is counted afresh from 0; counters that are not a hash go
# uncounted.
_COUNT = """
local function count(name, n)
  local done = redis.pcall('HINCRBY', KEYS[2], name, n)
  if type(done) == 'table' and done.err then
    redis.pcall('HSET', KEYS[2], name, math.max(n, 0))
  end
end
"""
# One round trip per lookup: the entry (or its Redis type, when it is not a string) and the
# hit or miss counted.
_LOOKUP = (
    _COUNT
    + """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  count('misses', 1)
  return false
end
count('hits', 1)
if kind ~= 'string' then
  return {kind}
end
return redis.call('GET', KEYS[1])
"""
)
# A lookup whose entry the call did not serve: the entry dropped and the lookup moved from the
# hits to the misses, in one round trip (not below zero: a `clear` since started the counts afresh).
_REFUSAL = (
    _COUNT
    + """
redis.call('DEL', KEYS[1])
local hits = redis.pcall('HGET', KEYS[2], 'hits')
if type(hits) == 'string' and string.match(hits, '^%d+$') and tonumber(hits) > 0 then
  count('hits', -1)
  count('misses', 1)
  count('refused', 1)
end
return 1
"""
)
# A prefix not yet marked is marked in one script, atomic with the look for the caches it
# would clash with: one whose entries it lies among (KEYS[2...], the marks of the prefixes it
# begins with before an `e:`) and one among its own entries (a mark matching ARGV[2], looked for
# through the server's keys). Two such stores made at once, of any number of processes: the
# second script run sees the first's mark, and a store that finds its prefix marked was admitted
# by this script (no mark is given back, none admits a store it does not hold for).
_MARKING = """
local function marked(key)
  return redis.call('TYPE', key)['ok'] == 'string' and redis.call('GET', key) == ARGV[1]
end
for index = 2, #KEYS do
  if marked(KEYS[index]) then
    return {'enclosing', KEYS[index]}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'found'}
end
if redis.call('DBSIZE') <= tonumber(ARGV[3]) then
  local cursor = '0'
  repeat
    local page = redis.call('SCAN', cursor, 'MATCH', ARGV[2], 'COUNT', 1000)
    cursor = page[1]
    for _, key in ipairs(page[2]) do
      if key ~= KEYS[1] and marked(key) then
        return {'among', key}
      end
    end
  until cursor == '0'
end
redis.call('SET', KEYS[1], ARGV[1])
return {'marked'}
"""
_MARKING_SCANS = 100_000
"""The keys in the server's database up to which `_MARKING` looks through them for a cache
among the prefix's entries (about a tenth of a second of the server's time, which a script
holds): past that, the look before it (`_foreign_key`) is the only one, and two such stores made
at the same moment may both be made."""
_SCAN_COUNT = 1000
_COUNTS = frozenset({"hits", "misses", "refused"})
"""The fields of `PREFIX counters` (`_COUNT`'s names)."""
_NEEDS_REDIS = "RedisCache needs the redis package: pip install 'structured-sdk[redis]'"


class _Closed:
    """Whether the store closed its client (`_drop_connection`): a command on it that fails
    then is not sent again on a new connection (redis-py's one retry reconnected a lookup
    `close` had cut short and served it after `close` returned)."""

    def __init__(self) -> None:
        self.closed = False


class _Connection(NamedTuple):
    """A store's client and its scripts, made together: one value, so a thread sees a whole one
    or none (`close` drops it at once). A forked child uses its parent's: redis-py opens a
    child's own connections at its first command (its pool checks the process id), and a
    script is its text and its SHA1, the same in every process."""

    client: redis.Redis
    lookup: Script
    refusal: Script
    closed: _Closed


class RedisCache:
    """A cache on the Redis server at `url` (`redis://[:password@]host:port/db`, `rediss://`
    for TLS, `unix://`): `ttl` seconds per entry (`None`: no expiry; default a week), `prefix`
    before every key, `timeout` seconds for connecting and for each command. Made, it checks the
    server answers and that `prefix` is the cache's (`CacheServerError` if not)."""

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        ttl: float | None = 7 * 24 * 3600.0,
        prefix: str = "sdk-cache:",
        timeout: float = 5.0,
    ) -> None:
        check_settings("RedisCache", ttl=ttl, timeout=timeout)
        if not isinstance(url, str):
            raise TypeError(f"RedisCache(): url must be a Redis URL (a str), not {url!r:.80}")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix must be a non-empty string, not {prefix!r}")
        self.url = url
        self.server = _without_credentials(url)
        self.ttl = ttl
        self.prefix = prefix
        self.timeout = timeout
        self._counters = f"{prefix}counters"
        self._lock = _fork.lock()
        self._connection: _Connection | None = None
        self._calls = _fork.condition()  # guards `_closing` and `_running`
        self._closing = False  # a `close` is waiting for the calls under way, or closing
        self._closes = 0  # `close`s begun: a call that saw another begin was cut short by it
        self._running = 0  # calls under way (`close` waits for them)
        _fork.after_fork(self, RedisCache._forget_calls)
        self.threads = CacheThreads()
        """The threads the async client asks the store from (`sdk._threads`): its own, so that
        a server that does not answer holds up the calls on it alone."""
        self._check_format()

    def __repr__(self) -> str:
        return f"RedisCache({self.server!r}, prefix={self.prefix!r}, ttl={self.ttl})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopened, (self.url, self.ttl, self.prefix, self.timeout))

    # --- the protocol ---

    def get(self, key: str) -> Entry | None:
        checked_key(key)
        with self._errors("reading an entry"):
            try:
                found = self._connected().lookup(keys=[self._entry_key(key), self._counters])
            except UnicodeDecodeError:  # (`decode_responses` in the URL: redis-py's decoding)
                return Entry.stored("<bytes that are not UTF-8 under the entry's key>")
        if found is None:
            return None
        if isinstance(found, list):  # another Redis type under the key: damaged, replaced
            return Entry.stored(f"<a Redis {_text(found[0])} under the entry's key>")
        if isinstance(found, str):  # (`decode_responses` in the URL: decoded by redis-py)
            return Entry.stored(found, key)
        try:
            return Entry.stored(found.decode("utf-8"), key)
        except UnicodeDecodeError:  # damaged, replaced
            return Entry.stored("<bytes that are not UTF-8 under the entry's key>")

    def put(self, key: str, entry: Entry) -> None:
        # (`NotStorable`: refused as every store refuses it, a lone surrogate among them)
        value = stored_form(key, entry).encode("utf-8")
        # (Redis's PX: whole milliseconds, at least 1; `ttl` admits any positive seconds)
        expiry = max(1, math.ceil(self.ttl * 1000)) if self.ttl is not None else None
        with self._errors("storing an entry"):
            self._redis().set(self._entry_key(key), value, px=expiry)

    def discard(self, key: str) -> None:
        checked_key(key)
        with self._errors("dropping an entry"):
            self._redis().delete(self._entry_key(key))

    def refuse(self, key: str) -> None:
        """The entry `get` handed back for `key` was not served: dropped, its lookup a miss."""
        checked_key(key)
        with self._errors("dropping an entry"):
            self._connected().refusal(keys=[self._entry_key(key), self._counters])

    def stats(self) -> CacheStats:
        entries = size = 0
        with self._errors("counting entries"):
            client = self._redis()
            for keys in self._entry_keys():
                pipe = client.pipeline(transaction=False)
                for name in keys:
                    pipe.strlen(name)
                # (another Redis type under an entry's key is a damaged entry, as for `get`:
                # counted, its size unknown, not the whole count failed)
                lengths = pipe.execute(raise_on_error=False)
                entries += len(keys)
                size += sum(length for length in lengths if isinstance(length, int))
            pipe = client.pipeline(transaction=False)
            pipe.hgetall(self._counters)
            (counters,) = pipe.execute(raise_on_error=False)
        if not isinstance(counters, dict):  # (counters that are not a hash go uncounted)
            counters = {}
        counts = {_text(name): _count(value) for name, value in counters.items()}
        return CacheStats(
            entries,
            size,
            counts.get("hits", 0),
            counts.get("misses", 0),
            refused=counts.get("refused", 0),
        )

    def clear(self) -> int:
        dropped = 0
        with self._errors("dropping every entry"):
            client = self._redis()
            for keys in self._entry_keys():
                dropped += int(client.unlink(*keys))
            client.delete(self._counters)
        return dropped

    def close(self) -> None:
        """Close this store's connections once the calls under way in other threads finished
        (at most `timeout`: one still running then is cut short, `CacheClosed`); a call made
        meanwhile waits for the close, and a later call opens new connections."""
        with self._calls:
            if not self._calls.wait_for(lambda: not self._closing, timeout=self.timeout):
                return  # (another close is still under way: it closes the connections)
            self._closing = True
            self._calls.wait_for(lambda: self._running == 0, timeout=self.timeout)
            self._closes += 1  # (now: every call still under way is cut short by this one)
        try:
            self._drop_connection()
        finally:
            with self._calls:
                self._closing = False
                self._calls.notify_all()

    def _drop_connection(self) -> None:
        """Close the connections (a call, unless the store is closed, opens new ones)."""
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.closed.closed = True  # (before: a call failing from it is not retried)
            connection.client.close()

    def _forget_calls(self) -> None:
        """In a forked child, as it starts: no call under way, no close (the parent's threads
        are not there)."""
        self._running = 0
        self._closing = False

    # --- the server ---

    def _redis(self) -> redis.Redis:
        return self._connected().client

    def _connected(self) -> _Connection:
        connection = self._connection
        if connection is None:
            with self._lock:
                if self._connection is None:
                    closed = _Closed()
                    client = _connect(self.url, self.timeout, closed)
                    # (a script registered is its SHA1, made here: nothing is sent until its
                    # first call, which loads it on the server if the server does not know it)
                    self._connection = _Connection(
                        client,
                        client.register_script(_LOOKUP),
                        client.register_script(_REFUSAL),
                        closed,
                    )
                connection = self._connection
        return connection

    def _entry_key(self, key: str) -> str:
        return f"{self.prefix}e:{key}"

    def _entry_keys(self) -> Iterator[list[bytes]]:
        """The entries' keys, a few hundred at a time."""
        batch: list[bytes] = []
        pattern = f"{_glob_escaped(self.prefix)}e:*"
        for name in self._redis().scan_iter(match=pattern, count=_SCAN_COUNT):
            batch.append(name)
            if len(batch) >= _SCAN_COUNT:
                yield batch
                batch = []
        if batch:
            yield batch

    def _check_format(self) -> None:
        """The prefix is the cache's: marked now if new, refused if it holds anything else (a
        mark of another kind, or keys outside the cache's layout under a prefix not marked, or
        named as in it but not what the cache writes: another application's, left as they are
        and no mark written among them), or if it lies among another cache's entries
        (`_enclosing`)."""
        mark = f"{self.prefix}format"
        foreign: str | None = None
        found: bytes | str | None = None
        with self._errors("checking what the prefix holds"):
            client = self._redis()
            enclosing = self._enclosing()
            kind = _text(client.type(mark))
            if enclosing is None and kind == "none":
                foreign = self._foreign_key()
                if foreign is None:
                    enclosing, foreign = self._marked_now(mark)
                    kind = _text(client.type(mark))
            found = client.get(mark) if kind == "string" else None
        if enclosing is not None:
            raise CacheServerError(
                f"{self.server}: the prefix {self.prefix!r} lies among the entries of the cache "
                f"at prefix {enclosing!r}, whose stats and clear would count and drop this "
                "one's keys (left as they are; choose another prefix: a cache nests under "
                f"another's as {enclosing + 'team-a:'!r}, not under its 'e:')"
            )
        if foreign is not None:
            raise CacheServerError(
                f"{self.server}: the prefix {self.prefix!r} holds keys that are not a "
                f"structured-sdk cache's ({foreign!r:.80}, ...): another application's, or "
                "another cache's among its entries' keys (left as they are; choose another "
                "prefix)"
            )
        if found is None or _text(found) != FORMAT_MARK:
            shown = f"{_text(found)!r:.60}" if found is not None else f"a Redis {kind}"
            raise CacheServerError(
                f"{self.server}: {mark!r} holds {shown}, not {FORMAT_MARK!r}: the prefix "
                f"{self.prefix!r} is not a structured-sdk cache's (left as it is; choose another "
                "prefix)"
            )

    def _marked_now(self, mark: str) -> tuple[str | None, str | None]:
        """Mark the prefix (`mark`) unless, at that moment, a cache whose entries it lies among
        (`_enclosing`) or one among its own entries (a nested mark under `e:`) is marked: the
        look and the mark are one script (`_MARKING`), so of two such stores made at once
        (threads, processes) the second sees the first and is refused, and every store of the
        first's prefix is made. (Looking again once marked and giving the mark back on a clash
        let a store of the same prefix that found the mark before it was given back be made:
        both prefixes were.) The enclosing prefix, or the clashing mark among the entries."""
        outers = self._outer_prefixes()
        outcome = self._redis().eval(
            _MARKING,
            1 + len(outers),
            mark,
            *(f"{outer}format" for outer in outers),
            FORMAT_MARK,
            f"{_glob_escaped(self.prefix)}e:*format",
            _MARKING_SCANS,
        )
        kind = _text(outcome[0])
        if kind == "enclosing":
            return _text(outcome[1]).removesuffix("format"), None
        if kind == "among":
            return None, _text(outcome[1])
        return None, None

    def _outer_prefixes(self) -> list[str]:
        """The prefixes of the caches whose entries' keys this one's would be among, if marked:
        this prefix up to each of its `e:`."""
        outers = []
        start = self.prefix.find("e:")
        while start >= 0:
            if start:
                outers.append(self.prefix[:start])
            start = self.prefix.find("e:", start + 1)
        return outers

    def _enclosing(self) -> str | None:
        """The prefix of a cache whose entries' keys (`PREFIX e:...`) this one's would be among
        (this prefix begins with it and `e:`), if one is marked there: its `stats` and `clear`
        would count and drop this one's keys as its own entries."""
        for outer in self._outer_prefixes():
            if self._marked(f"{outer}format"):
                return outer
        return None

    def _marked(self, mark: str) -> bool:
        """Whether `mark` is a cache's format mark (a string of `FORMAT_MARK`; another
        application's key of another Redis type there is not one, and no error)."""
        client = self._redis()
        return (
            _text(client.type(mark)) == "string" and _text(client.get(mark) or b"") == FORMAT_MARK
        )

    def _foreign_key(self) -> str | None:
        """A key under the prefix outside the cache's layout (`format`, `counters`, `e:...`)
        and outside another cache's nested under it (`sdk-cache:team-a:`, marked), if any:
        looked for once, when a store finds the prefix not yet marked. A cache nested among
        the entries' keys (`PREFIX e:...`) is foreign: counted and dropped as entries. So is a
        key named as in the layout that the cache cannot have written (`_unlike_the_cache`): a
        `counters` that is not a hash of the cache's counts, an entry's key that is not a
        string (another application's `PREFIX counters` and `PREFIX e:mails` were adopted, and
        `clear` dropped them)."""
        client = self._redis()
        entries = f"{self.prefix}e:"
        nested = self._nested()
        mark = f"{self.prefix}format"
        named: list[bytes | str] = []  # keys named as in the layout, their types to be looked at
        for name in client.scan_iter(match=f"{_glob_escaped(self.prefix)}*", count=_SCAN_COUNT):
            text = _text(name)
            if text == mark or (nested and text.startswith(nested)):
                continue
            if text == self._counters or text.startswith(entries):
                named.append(name)
                if len(named) >= _SCAN_COUNT:
                    unlike = self._unlike_the_cache(named)
                    if unlike is not None:
                        return unlike
                    named = []
                continue
            # (a cache nested here may have been made since its marks were looked for: looked
            # for again before a key is called another application's)
            nested = self._nested()
            if not text.startswith(nested):
                return text
        among = [inner for inner in nested if inner.startswith(entries)]
        if among:
            return f"{among[0]}format"
        return self._unlike_the_cache(named) if named else None

    def _unlike_the_cache(self, names: list[bytes | str]) -> str | None:
        """The first of `names` (keys named as in the layout: `counters`, `e:...`) the cache
        cannot have written, if any: an entry's key holding another Redis type than a string
        (`put` writes strings; a damaged entry of another type is taken for another
        application's key here, before the prefix is marked), `counters` holding another type
        than a hash, or a hash with fields other than the cache's counts."""
        client = self._redis()
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.type(name)
        for name, kind in zip(names, map(_text, pipe.execute()), strict=True):
            text = _text(name)
            if kind == "none":  # (gone since: expired, dropped)
                continue
            if text != self._counters:
                if kind != "string":
                    return text
                continue
            if kind != "hash" or client.hlen(name) > len(_COUNTS):
                return text
            if not {_text(field) for field in client.hkeys(name)} <= _COUNTS:
                return text
        return None

    def _nested(self) -> tuple[str, ...]:
        """The prefixes of the caches nested under this one's (their marks)."""
        client = self._redis()
        marks = client.scan_iter(match=f"{_glob_escaped(self.prefix)}*format", count=_SCAN_COUNT)
        return tuple(
            text.removesuffix("format")
            for text in map(_text, marks)
            if text != f"{self.prefix}format" and self._marked(text)
        )

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """One call on the server, after any `close` under way (waited for at most `timeout`):
        `CacheClosed` if a `close` cut it short (whatever redis-py raises from a connection
        closed under it), and any error of the server or the connection as
        `CacheServerError`, naming the server without its credentials. Counted while it runs,
        for `close` to wait for."""
        try:
            import redis
        except ImportError as error:  # (reached first: a store checks its prefix when made)
            raise ImportError(_NEEDS_REDIS) from error

        with self._calls:
            if not self._calls.wait_for(lambda: not self._closing, timeout=self.timeout):
                raise CacheClosed(
                    f"{self._named()} was still closing after {self.timeout:g} s ({doing})"
                )
            self._running += 1
            began = self._closes
        try:
            yield
        except Exception as error:
            if self._closes != began:  # (torn down under the call: any error, from redis-py)
                raise CacheClosed(f"{self._named()} was closed while {doing}") from error
            if isinstance(error, UnicodeDecodeError):  # (`decode_responses` in the URL)
                raise CacheServerError(
                    f"the cache server {self.server} failed {doing}: it holds a key or value "
                    "that is not UTF-8 text, which a connection made with `decode_responses` "
                    f"cannot read ({error.reason}; leave it out of the URL)"
                ) from error
            if not isinstance(error, redis.RedisError):
                raise
            detail = " ".join(str(error).replace(self.url, self.server).split())
            raise CacheServerError(
                f"the cache server {self.server} failed {doing}: {type(error).__name__}: {detail}"
            ) from error
        finally:
            with self._calls:
                self._running -= 1
                if not self._running:
                    self._calls.notify_all()

    def _named(self) -> str:
        return f"this RedisCache of {self.server} (prefix {self.prefix!r})"


def _reopened(url: str, ttl: float | None, prefix: str, timeout: float) -> RedisCache:
    return RedisCache(url, ttl=ttl, prefix=prefix, timeout=timeout)


def _connect(url: str, timeout: float, closed: _Closed) -> redis.Redis:
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError as error:
        raise ImportError(_NEEDS_REDIS) from error
    # A dropped connection (a pooled one the server closed) is made again once, no more; a
    # server that does not answer in `timeout` is not asked again (redis-py retries timeouts
    # too by default: a call waited twice its `timeout`, a new connection four times). A client
    # the store closed is not made again (`_Closed`). Each round trip ends at its deadline
    # (`_RoundTrip`), not only each read.
    scheme = urlsplit(url).scheme
    base: type[redis.Connection] | type[redis.UnixDomainSocketConnection] = (
        redis.UnixDomainSocketConnection
        if scheme == "unix"
        else redis.SSLConnection
        if scheme == "rediss"
        else redis.Connection
    )
    return redis.Redis.from_url(
        url,
        connection_class=_bounded(base),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=_retry(Retry, closed)(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        health_check_interval=30,
    )


def _retry(base: type[Retry], closed: _Closed) -> type[Retry]:
    """redis-py's `Retry`, but a command failing on a client the store closed (`closed`) is
    not sent again: the connection torn down under it fails the call. (redis-py copies a
    client's `Retry` deeply: the flag is reached through the class made here, not copied.)"""

    class Retried(base):  # type: ignore[valid-type,misc]
        def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
            def failed(error: Exception, *more: Any) -> None:
                fail(error, *more)  # (redis-py's cleanup: the connection closed)
                if closed.closed:
                    raise error

            return super().call_with_retry(do, failed, *args, **kwargs)

    return Retried


_BOUNDED: dict[type, type] = {}


def _bounded(base: type) -> type:
    """redis-py's connection class `base` whose round trips end at their deadline
    (`_RoundTrip`), made once per class."""
    made = _BOUNDED.get(base)
    if made is None:
        made = _BOUNDED[base] = type(f"RoundTrip{base.__name__}", (_RoundTrip, base), {})
    return made


class _RoundTrip:
    """A connection (mixed into redis-py's) whose round trip, from the command sent to its
    whole reply read, waits at most its `socket_timeout`: redis-py bounds each read alone, so
    a server (or a proxy in front of it) that sent a byte now and then held a lookup as long
    as it went on (27 s for a 200-character entry with `timeout=1`, one byte every 0.9 s).
    A round trip past its deadline is redis-py's `TimeoutError`, and the connection is
    dropped, as for a read that timed out."""

    deadline: float | None = None
    socket_timeout: float | None

    def _connect(self) -> Any:
        return _DeadlineSocket(super()._connect(), self)  # type: ignore[misc]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        super().send_packed_command(command, check_health)  # type: ignore[misc]


class _DeadlineSocket:
    """A connection's socket whose reads wait no longer than its round trip's deadline
    (`_RoundTrip.deadline`); anything else is the socket's."""

    def __init__(self, sock: socket.socket, connection: _RoundTrip) -> None:
        self._socket = sock
        self._connection = connection
        self._timeout = sock.gettimeout()

    def settimeout(self, value: float | None) -> None:
        self._timeout = value
        self._socket.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def recv(self, *args: Any) -> bytes:
        return cast("bytes", self._read(self._socket.recv, *args))

    def recv_into(self, *args: Any) -> int:
        return cast("int", self._read(self._socket.recv_into, *args))

    def _read(self, read: Callable[..., object], *args: Any) -> object:
        """`read(*args)` waiting no longer than the round trip's deadline."""
        self._until_deadline()
        try:
            return read(*args)
        finally:
            self._restore()

    def _restore(self) -> None:
        # (a socket another thread closed meanwhile has no timeout to restore: the read's own
        # outcome is what the call reports)
        with suppress(OSError):
            self._socket.settimeout(self._timeout)

    def _until_deadline(self) -> None:
        deadline = self._connection.deadline
        if deadline is None or self._timeout == 0:  # (no command sent; a poll, not a wait)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        if self._timeout is None or left < self._timeout:
            self._socket.settimeout(left)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._socket, name)


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _glob_escaped(text: str) -> str:
    return "".join(f"\\{ch}" if ch in "*?[]\\" else ch for ch in text)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _count(value: object) -> int:
    try:
        return max(0, int(_text(value)))
    except ValueError:
        return 0
