"""What a response cache hit costs, and whether a hit waits for another process's write (issue 30).

    .venv/bin/python bench/bench_cache_state.py      # prints every figure it measures

Row 18 (`cache-hit`): a hit against a bare `sdk.parse` of the same reply (goal <= 1.5x): the hit
computes the request's key, reads the entry, and judges the stored reply again (stop reason,
schema, contract, checks), as `sdk.parse` does. CPU time per call, the least of alternated
batches; a 4.4 KB `InvoiceExtraction` with its source; `MemoryCache`, `SQLiteCache` (whose hits
on an entry it read before come from memory while no process writes the file:
`sdk.cache._held`), and a hit that reads the SQLite file (the first hit after any write to the
file; every hit of a store opened `readonly=True`, measured here, or where the kernel cannot tell
of changes); the miss path beside them (a new key each call: key, lookup, the scripted provider,
parse, store). Beside them too, what the hit's key (`sdk.cache.cache_key` of the hit's request,
which a call made again has kept, `sdk.cache.LastKey`, and a call unlike the last computes,
but for the part its calls share)
and the SQLite lookups (`SQLiteCache.get` of its key, held and read from the file) each cost alone
and what each adds to a bare parse that follows it: a read of the file adds to the parse several
times what it costs alone (its code displaces the parser's from the processor's caches). Last,
the same hits where the call carries a large document (a source of 100 KB and 1 MB, one of 1 MB
in German and Chinese, a 5 MB PDF beside the prompt): the key covers the document and the call
checks its text, so what a hit costs beyond the parse would grow with it (a document's digest is
remembered for the last few documents: `sdk.cache._key`).

Row 19 (`cache-busy`): a hit's wall time (median of many) while another process holds the cache
file's write lock (an uncommitted write) for a short and a long time, over the same hits on an
idle file: a hit only reads, so its latency must not grow with the write.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

from bench.payloads import Payload  # noqa: E402
from bench.payloads import invoice  # noqa: E402
from bench.payloads import with_long_source  # noqa: E402
from contracts import InvoiceExtraction  # noqa: E402
from sdk import PDF  # noqa: E402
from sdk import StructuredClient  # noqa: E402
from sdk import parse  # noqa: E402
from sdk.cache import Cache  # noqa: E402
from sdk.cache import LastKey  # noqa: E402
from sdk.cache import MemoryCache  # noqa: E402
from sdk.cache import SQLiteCache  # noqa: E402
from sdk.cache import cache_key  # noqa: E402
from sdk.providers import TestProvider  # noqa: E402

SIZE = 4_400
LONG_SOURCES = (100_000, 1_000_000)
PDF_SIZE = 5_000_000
HOLDS = (0.5, 3.0)
ROTATING = 32  # (more than the documents whose digests the key keeps: `sdk.cache._key`)


def _cpu(run: Callable[[], object], repeat: int) -> float:
    started = time.process_time()
    for _ in range(repeat):
        run()
    return (time.process_time() - started) / repeat


def _alternated(
    arms: dict[str, Callable[[], object]], repeat: int, rounds: int
) -> dict[str, float]:
    """CPU seconds per call of each arm: the least of `rounds` batches, arms alternated."""
    best = dict.fromkeys(arms, float("inf"))
    for _ in range(rounds):
        for name, run in arms.items():
            best[name] = min(best[name], _cpu(run, repeat))
    return best


def hit_lines(repeat: int, rounds: int) -> list[Line]:
    payload = invoice(SIZE)
    text, source = payload.text, payload.source
    folder = tempfile.mkdtemp()
    stores: dict[str, Cache] = {
        "MemoryCache": MemoryCache(),
        "SQLiteCache": SQLiteCache(f"{folder}/hit.db"),
        "SQLiteCache, read from the file": SQLiteCache(f"{folder}/hit.db", readonly=True),
    }
    arms: dict[str, Callable[[], object]] = {
        "bare": lambda: parse(InvoiceExtraction, text, stop_reason="end_turn", source=source)
    }
    for name, store in stores.items():
        client = StructuredClient(TestProvider([text], repeat=True), cache=store)
        if not getattr(store, "readonly", False):  # (the read-only store reads the other's)
            client.generate(InvoiceExtraction, prompt="Extract.", source=source)
        assert client.generate(InvoiceExtraction, prompt="Extract.", source=source).cached
        arms[name] = functools.partial(
            client.generate, InvoiceExtraction, prompt="Extract.", source=source
        )
    arguments = _key_arguments(text, source)
    key = cache_key(*arguments)
    arms["key"] = functools.partial(cache_key, *arguments)
    arms["key, then bare"] = lambda: (cache_key(*arguments), arms["bare"]())
    lookups = {"held": stores["SQLiteCache"], "read from the file": stores[
        "SQLiteCache, read from the file"]}  # fmt: skip
    for how, store in lookups.items():
        arms[f"lookup {how}"] = functools.partial(store.get, key)
        arms[f"lookup {how}, then bare"] = functools.partial(
            lambda get: (get(key), arms["bare"]()), store.get
        )
    numbers = itertools.count()
    miss_client = StructuredClient(TestProvider([text], repeat=True),
                                   cache=SQLiteCache(f"{folder}/miss.db"))  # fmt: skip
    arms["miss"] = lambda: miss_client.generate(
        InvoiceExtraction, prompt=f"Extract {next(numbers)}.", source=source
    )
    best = _alternated(arms, repeat, rounds)
    bare = best["bare"]
    lines = [
        _hit_line(f"({len(text) / 1000:.1f} KB), {name}", best[name], bare, rounds, repeat,
                  f"cache-hit-{name.replace(', ', '-').replace(' ', '-')}")
        for name in stores
    ]  # fmt: skip
    lines.append(Line(
        "cache miss (key, lookup, scripted provider, parse, store) / bare sdk.parse, SQLiteCache",
        f"{best['miss'] / bare:.2f}x",
        f"{best['miss'] * 1e6:,.0f} us vs {bare * 1e6:,.0f} us CPU per call",
        key="cache-miss-SQLiteCache",
    ))  # fmt: skip
    added = best["key, then bare"] - bare
    lines.append(Line(
        "cache key then bare sdk.parse / bare sdk.parse: what the hit's key adds in place",
        f"{best['key, then bare'] / bare:.2f}x",
        f"the key adds {added * 1e6:,.1f} us to the parse that follows it; alone it takes "
        f"{best['key'] * 1e6:,.1f} us CPU",
        key="cache-key-in-place",
    ))  # fmt: skip
    for how in lookups:
        added = best[f"lookup {how}, then bare"] - bare
        lines.append(Line(
            f"SQLite lookup ({how}) then bare sdk.parse / bare sdk.parse: what the hit's lookup "
            "adds in place",
            f"{best[f'lookup {how}, then bare'] / bare:.2f}x",
            f"the lookup adds {added * 1e6:,.1f} us to the parse that follows it; alone it "
            f"takes {best[f'lookup {how}'] * 1e6:,.1f} us CPU",
            key=f"cache-lookup-in-place-SQLiteCache-{how.replace(' ', '-')}",
        ))  # fmt: skip
    return lines


def large_document_lines(repeat: int, rounds: int) -> list[Line]:
    """A hit against a bare parse where the call carries a large document (the same 4.4 KB
    reply): its source grown to 100 KB and 1 MB (the parse reads it too: its quotes are looked
    for in it), 1 MB in German and Chinese, or a 5 MB PDF beside the prompt. The hit's key
    covers the document, and a call checks its text."""
    payload = invoice(SIZE)
    pdf = PDF(data=b"%PDF-1.7\n" + bytes(range(256)) * (PDF_SIZE // 256))
    cases = [
        (f"over a {_shown(size)} source", f"{_shown(size)}-source",
         with_long_source(payload, size), "Extract.")
        for size in LONG_SOURCES
    ]  # fmt: skip
    size = LONG_SOURCES[-1]
    cases.append((f"over a {_shown(size)} source in German and Chinese",
                  f"{_shown(size)}-source-de-zh", with_long_source(payload, size, "de+zh"),
                  "Extract."))  # fmt: skip
    cases.append((f"with a {_shown(PDF_SIZE)} PDF", f"{_shown(PDF_SIZE)}-pdf", payload,
                  ["Extract.", pdf]))  # fmt: skip
    lines = []
    for shown, tag, case, prompt in cases:
        text, source = case.text, case.source
        sqlite = SQLiteCache(f"{tempfile.mkdtemp()}/hit.db")
        stores: dict[str, Cache] = {"MemoryCache": MemoryCache(), "SQLiteCache": sqlite}
        arms: dict[str, Callable[[], object]] = {
            "bare": functools.partial(
                parse, InvoiceExtraction, text, stop_reason="end_turn", source=source
            )
        }
        for name, store in stores.items():
            client = StructuredClient(TestProvider([text], repeat=True), cache=store)
            call = functools.partial(
                client.generate, InvoiceExtraction, prompt=prompt, source=source
            )
            call()
            assert call().cached
            arms[name] = call
        best = _alternated(arms, repeat, rounds)
        lines.extend(
            _hit_line(f"({len(text) / 1000:.1f} KB) {shown}, {name}", best[name], best["bare"],
                      rounds, repeat, f"cache-hit-{tag.replace(' ', '')}-{name}")
            for name in stores
        )  # fmt: skip
        sqlite.close()
    return lines


def rotating_lines(repeat: int, rounds: int) -> list[Line]:
    """Hits where each call differs from the one before (a run over many documents made again):
    `ROTATING` invoices of about 4.4 KB, each with its own source, called in turn, against bare
    parses of the same replies in the same turn. Of what a client keeps of its last call
    (`sdk.engine.options.LastCall`) only the part of the key the calls share serves them
    (`sdk.cache.LastKey`: each call's prompt and source are hashed); the digests of the last
    documents (`sdk.cache._key`) serve none (more documents than it keeps, and each too short
    to be remembered)."""
    payloads = [invoice(SIZE + number) for number in range(ROTATING)]
    bare = functools.partial(parse, InvoiceExtraction, stop_reason="end_turn")
    arms: dict[str, Callable[[], object]] = {
        "bare": _in_turn(payloads, lambda payload: bare(payload.text, source=payload.source))
    }
    sqlite = SQLiteCache(f"{tempfile.mkdtemp()}/hit.db")
    stores: dict[str, Cache] = {"MemoryCache": MemoryCache(), "SQLiteCache": sqlite}
    for name, store in stores.items():
        client = StructuredClient(TestProvider([p.text for p in payloads]), cache=store)
        call = functools.partial(client.generate, InvoiceExtraction, prompt="Extract.")
        for payload in payloads:
            call(source=payload.source)
        assert all(call(source=payload.source).cached for payload in payloads)
        arms[name] = _in_turn(payloads, lambda payload, call=call: call(source=payload.source))
    best = _alternated(arms, repeat, rounds)
    lines = [
        _hit_line(f"(4.4 KB), {ROTATING} invoices in turn (each call unlike the last), {name}",
                  best[name], best["bare"], rounds, repeat, f"cache-hit-rotating-{name}")
        for name in stores
    ]  # fmt: skip
    sqlite.close()
    return lines


def _in_turn(payloads: list[Payload], run: Callable[[Payload], object]) -> Callable[[], object]:
    """`run` of the next payload at each call, in turn."""
    order = itertools.cycle(payloads)
    return lambda: run(next(order))


def _hit_line(what: str, hit: float, bare: float, rounds: int, repeat: int, key: str) -> Line:
    """The line of a hit's CPU seconds `hit` against the bare parse's `bare` (goal 1.5x)."""
    ratio = hit / bare
    return Line(
        f"cache hit / bare sdk.parse, InvoiceExtraction {what}",
        f"{ratio:.2f}x",
        f"{hit * 1e6:,.0f} us vs {bare * 1e6:,.0f} us CPU per call (least of {rounds} "
        f"alternated batches of {repeat})",
        goal="<= 1.5x", met="yes" if ratio <= 1.5 else "NO", key=key,
    )  # fmt: skip


def _shown(size: int) -> str:
    return f"{size / 1e6:g} MB" if size >= 1_000_000 else f"{size / 1e3:g} KB"


def _key_arguments(text: str, source: str) -> tuple[Any, ...]:
    """What the hits measured compute their cache key from (the provider's scope, the request,
    its wire schema), caught from one call: `sdk.cache.cache_key(*them)` is the hit's key,
    which does not depend on the store."""
    caught: list[tuple[Any, ...]] = []
    kept = LastKey.key

    def catching(self: LastKey, *arguments: Any) -> str:
        caught.append(arguments)
        return kept(self, *arguments)

    client = StructuredClient(TestProvider([text], repeat=True), cache=MemoryCache())
    with mock.patch.object(LastKey, "key", catching):  # (what the engine asks for a key)
        client.generate(InvoiceExtraction, prompt="Extract.", source=source)
    assert kept(LastKey(), *caught[-1]) == cache_key(*caught[-1])
    return caught[-1]


def _hit_latencies(client: StructuredClient, source: str, seconds: float) -> list[float]:
    """Wall seconds of each hit made during `seconds`."""
    found = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        assert client.generate(InvoiceExtraction, prompt="Extract.", source=source).cached
        found.append(time.perf_counter() - started)
    return found


def busy_lines(scale: float) -> list[Line]:
    payload = invoice(SIZE)
    path = Path(tempfile.mkdtemp()) / "busy.db"
    store = SQLiteCache(path, timeout=1.0)  # a hit that waited for the writer would fail
    client = StructuredClient(TestProvider([payload.text], repeat=True), cache=store)
    client.generate(InvoiceExtraction, prompt="Extract.", source=payload.source)
    idle = _hit_latencies(client, payload.source, 1.0 * scale)
    lines = []
    for hold in HOLDS:
        holder = subprocess.Popen(
            [sys.executable, "-m", "tests.shared_file_process", "hold", str(path)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "held"
            busy = _hit_latencies(client, payload.source, hold * scale)
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "released"
            holder.wait(timeout=60)
        finally:
            holder.kill()
        ratio = statistics.median(busy) / statistics.median(idle)
        lines.append(Line(
            f"cache hit while another process holds the write lock for {hold * scale:g} s / "
            "on an idle file, SQLiteCache",
            f"{ratio:.2f}x",
            f"median {statistics.median(busy) * 1e6:,.0f} us vs "
            f"{statistics.median(idle) * 1e6:,.0f} us wall ({len(busy):,} and {len(idle):,} "
            "hits); longest hit while held "
            f"{max(busy) * 1e3:,.1f} ms; busy timeout 1 s",
            goal="<= 1.5x, flat in the write's length",
            met="yes" if ratio <= 1.5 else "NO",
            key=f"cache-busy-{hold:g}s",
        ))  # fmt: skip
    store.close()
    return lines


@row("cache-hit", number="18", title="a cache hit against a bare parse",
     measures="a response cache hit (MemoryCache, SQLiteCache held in memory and read from the "
              "file) on a 4.4 KB invoice against a bare `sdk.parse` of the same reply; the miss "
              "path, the key and the lookups beside it; hits on 32 invoices in turn; the hits "
              "again over a 100 KB and a 1 MB source document (and 1 MB in German and Chinese) "
              "and with a 5 MB PDF",
     unit="ratio of CPU times (least of alternated batches)")  # fmt: skip
def cache_hit_row(settings: Settings) -> Measured:
    repeat, rounds = (20, 3) if settings.quick else (200, 9)
    return Measured([
        *hit_lines(repeat, rounds),
        *rotating_lines(repeat, rounds),
        *large_document_lines(repeat // 4, rounds),
    ])  # fmt: skip


@row("cache-busy", number="19", title="a cache hit while another process writes",
     measures="a SQLiteCache hit's wall time while another process holds the file's write lock "
              "for a short and a long time, against hits on an idle file",
     unit="ratio of median wall times")  # fmt: skip
def cache_busy_row(settings: Settings) -> Measured:
    return Measured(busy_lines(0.2 if settings.quick else 1.0))


def main() -> None:
    quick = Settings(quick="--quick" in sys.argv)
    for line in [*cache_hit_row(quick).lines, *cache_busy_row(quick).lines]:
        print(f"{line.measure}: {line.figure} ({line.detail})")


if __name__ == "__main__":
    main()
