"""Why a SQLite cache hit costs more than a memory hit: a measurement, not a bench row (issue 30,
item 8; the closing note quotes what it prints).

    .venv/bin/python bench/hit_tier_probe.py        # about a minute; prints every figure

Row 18 (`bench_cache_state.py`) shows that the SQLite lookup takes a few microseconds of CPU
alone but adds two to three times as much to a bare parse that follows it. This script asks
which part of a lookup does that, and whether a tier in memory in front of SQLite would close the
gap: each arm is run in alternated batches (CPU time per call, the least of the batches), beside
a bare `sdk.parse` of the same 4.4 KB invoice:

- an SQLite statement before the parse: one that reads no table (`SELECT 1`), `PRAGMA
  data_version` (what a tier would ask to know whether another connection wrote), the entry's
  row id, and the entry's value (what a lookup reads), each on the cache file (WAL) and on an
  in-memory database;
- hits: `MemoryCache`, `SQLiteCache`, and `SQLiteCache` with a tier in memory in front of it,
  validated on each hit by `PRAGMA data_version` (exact: any other connection's commit changes
  it, this connection's own writes drop the tier), and the same tier not validated at all (not
  exact: only to show what the validation costs).
"""

from __future__ import annotations

import functools
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from bench.payloads import invoice  # noqa: E402
from contracts import InvoiceExtraction  # noqa: E402
from sdk import StructuredClient  # noqa: E402
from sdk import parse  # noqa: E402
from sdk.cache import Entry  # noqa: E402
from sdk.cache import MemoryCache  # noqa: E402
from sdk.cache import SQLiteCache  # noqa: E402
from sdk.providers import TestProvider  # noqa: E402

REPEAT, ROUNDS = 300, 11


class _Tiered(SQLiteCache):
    """A design not built: entries read from the file kept in memory, served again while
    `PRAGMA data_version` says no other connection committed (`validated=False`: never
    checked)."""

    def __init__(self, path: str, *, validated: bool) -> None:
        super().__init__(path)
        self._validated = validated
        self._tier: dict[str, Entry] = {}
        self._version: int | None = None

    def get(self, key: str) -> Entry | None:
        if self._validated:
            version = self._connection().execute("PRAGMA data_version").fetchone()[0]
            if version != self._version:
                self._tier, self._version = {}, version
        found = self._tier.get(key)
        if found is not None:
            self._tally.hit(self._tally.clears)
            return found
        entry = super().get(key)
        if entry is not None:
            self._tier[key] = entry
        return entry


def _cpu(run: Callable[[], object]) -> float:
    started = time.process_time()
    for _ in range(REPEAT):
        run()
    return (time.process_time() - started) / REPEAT


def main() -> None:
    payload = invoice(4_400)
    text, source = payload.text, payload.source
    folder = tempfile.mkdtemp()

    def bare() -> object:
        return parse(InvoiceExtraction, text, stop_reason="end_turn", source=source)

    arms: dict[str, Callable[[], object]] = {"bare sdk.parse": bare}
    stores: dict[str, Any] = {
        "MemoryCache": MemoryCache(),
        "SQLiteCache": SQLiteCache(f"{folder}/plain.db"),
        "SQLiteCache, tier validated by data_version": _Tiered(f"{folder}/v.db", validated=True),
        "SQLiteCache, tier never validated (not exact)": _Tiered(f"{folder}/n.db", validated=False),
    }
    for name, store in stores.items():
        client = StructuredClient(TestProvider([text], repeat=True), cache=store)
        client.generate(InvoiceExtraction, prompt="Extract.", source=source)
        assert client.generate(InvoiceExtraction, prompt="Extract.", source=source).cached
        arms[f"hit, {name}"] = functools.partial(
            client.generate, InvoiceExtraction, prompt="Extract.", source=source
        )
    for where, target in (("the cache file (WAL)", f"{folder}/plain.db"), ("memory", ":memory:")):
        db = sqlite3.connect(target, isolation_level=None)
        if target == ":memory:":
            db.execute("CREATE TABLE entries (key TEXT PRIMARY KEY, value TEXT)")
            db.execute("INSERT INTO entries VALUES ('k', ?)", (text,))
            key = "k"
        else:
            key = db.execute("SELECT key FROM entries").fetchone()[0]
        statements = {
            "SELECT 1": ("SELECT 1", ()),
            "PRAGMA data_version": ("PRAGMA data_version", ()),
            "the entry's rowid": ("SELECT rowid FROM entries WHERE key = ?", (key,)),
            "the entry's value": ("SELECT value FROM entries WHERE key = ?", (key,)),
        }
        for name, (sql, parameters) in statements.items():
            run = functools.partial(lambda d, s, p: d.execute(s, p).fetchone(), db, sql, parameters)
            arms[f"{name} on {where}, alone"] = run
            arms[f"{name} on {where}, then bare sdk.parse"] = functools.partial(
                lambda r: (r(), bare()), run
            )
    best = dict.fromkeys(arms, float("inf"))
    for _ in range(ROUNDS):
        for name, run in arms.items():
            best[name] = min(best[name], _cpu(run))
    base = best["bare sdk.parse"]
    print(f"CPU per call, least of {ROUNDS} alternated batches of {REPEAT}")
    for name, seconds in best.items():
        added = (
            f"  (adds {(seconds - base) * 1e6:5.1f} us)"
            if "then bare" in name or name.startswith("hit")
            else ""
        )
        print(f"{name:70s} {seconds * 1e6:7.1f} us  {seconds / base:5.2f}x{added}")


if __name__ == "__main__":
    main()
