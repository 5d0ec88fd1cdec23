"""A response cache: a call asked again gets the answer it got before, checked again.

    from sdk.cache import SQLiteCache
    client = StructuredClient(provider, cache=SQLiteCache("answers.db", ttl=7 * 86400))
    result = client.generate(Invoice, source=text)      # asks the provider
    again = client.generate(Invoice, source=text)       # from the cache: again.cached is True

The key is what determines the answer: the provider family, its model and settings, the wire
request the codec builds (the schema in the provider's dialect, the messages, the options,
`extra_body`), and the fingerprint of what is asked for, so a changed contract, model or option
never hits an old entry. Only valid answers are stored (never a refusal, a truncation, an invalid
output or a provider error), and a hit is judged again by today's parser and contract, so a check
tightened since still applies: a stored answer that fails it is dropped and the provider asked.
A hit spends no tokens: `Result.usage` is zero and `Result.cached_usage` is what the stored answer
cost when it was made.

Stores: `SQLiteCache(path)` (one file, WAL, safe for several processes at once, readable by its
owner only), `RedisCache(url)` (a Redis server a cluster shares; extra `redis`), `MemoryCache()`
(this process only, for tests), or anything that implements the `Cache` protocol. `cache=True`
is a `SQLiteCache` at `default_path()`.
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_names
from sdk._lazy import listed
from sdk.cache._best_effort import BestEffortCache
from sdk.cache._entry import Cache
from sdk.cache._entry import CacheStats
from sdk.cache._entry import Entry
from sdk.cache._entry import default_path
from sdk.cache._entry import not_served
from sdk.cache._errors import CacheClosed
from sdk.cache._errors import CacheError
from sdk.cache._errors import CacheFileError
from sdk.cache._errors import CacheGivenUp
from sdk.cache._errors import CacheServerError
from sdk.cache._errors import DamagedEntry
from sdk.cache._errors import NotStorable
from sdk.cache._errors import failed_in
from sdk.cache._key import LastKey
from sdk.cache._key import cache_key
from sdk.cache._key import rendered_key
from sdk.cache._key import settings_digest
from sdk.cache._memory import MemoryCache

if TYPE_CHECKING:
    from sdk.cache._redis import RedisCache
    from sdk.cache._sqlite import SQLiteCache

# The SQLite and Redis stores (`sqlite3`, `redis`) load on first use: a client without a cache
# pays nothing.
__getattr__ = lazy_names(
    __name__, {"SQLiteCache": "sdk.cache._sqlite", "RedisCache": "sdk.cache._redis"}
)
__dir__ = listed(globals())

__all__ = [
    "BestEffortCache",
    "Cache",
    "CacheClosed",
    "CacheError",
    "CacheFileError",
    "CacheGivenUp",
    "CacheServerError",
    "CacheStats",
    "DamagedEntry",
    "Entry",
    "LastKey",
    "MemoryCache",
    "NotStorable",
    "RedisCache",
    "SQLiteCache",
    "cache_key",
    "default_path",
    "failed_in",
    "not_served",
    "rendered_key",
    "settings_digest",
]
