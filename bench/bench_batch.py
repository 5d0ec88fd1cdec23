"""Batch jobs on the local path: throughput and peak memory of `sdk.batch` over a large input.

    .venv/bin/python bench/bench_batch.py                   # every section, print only
    .venv/bin/python bench/bench_batch.py --items 30000 --small 5000
    .venv/bin/python bench/bench_batch.py --sections scale,identity
    .venv/bin/python bench/run.py --only batch --write      # row 9 into bench/RESULTS.md

Against bench/fanout_server.py (its own process, answering at once: a fast local server, so
the figures measure the client side), in this one run:

- bare fan-out: `--fanout` calls through bare httpx + `json.loads`, 64 in flight (row 3's
  baseline), and the same calls through `AsyncStructuredClient.generate` alone (no job);
- the job: `BatchJob` with a `LocalBackend` (the same client, 64 in flight) over an input of
  `--items` items, then of `--small` items: items/s, and the peak RSS of the process that ran it.

Each measurement runs in its own process, so each peak RSS is that run's alone: if the job held
its items in memory, the large run's peak would grow with its size; it stays flat instead
(items are read from SQLite a page at a time, output lines are committed a chunk at a time).

Section `scale` (row 15, `batch-scale`): indexing an input of `--huge` items (1,000,000) against
one of `--items`: seconds, items/s, the peak RSS of each (flat: the input is read as a stream),
the state file's bytes per item; and a resume after a SIGKILL while the large input was half
indexed (the prefix verified, then the rest indexed: seconds, and whether the index came out
whole).

Section `identity` (row 16, `batch-identity`): what the runner's lock and the per-item identity
check (each line hashed when indexed and when read back) cost: the `--items` local job run by
this tree and by `--baseline` (a commit before them, default `BEFORE_THE_LOCK`, checked out with
`git archive` into a temporary folder), alternated `--rounds` times in the same run, each first
in turn; items/s and client CPU per item, this tree / the baseline (goal: items/s within 5%),
the medians of the rounds' ratios; the same job with an in-process `TestProvider` (no HTTP: the
CPU is the job machinery's alone); and the hash's own cost per item.

Row 9 of `make bench` (`batch_row`) runs the `throughput` section, rows 15 and 16 the others
(the identity row at `IDENTITY_ITEMS` items, `IDENTITY_ROUNDS` rounds); this script prints any of
them with the sizes given on its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

IN_FLIGHT = 64
ITEMS, SMALL, FANOUT = 100_000, 10_000, 20_000
PROMPT = "<|im_start|>user\nApprove the refund?<|im_end|>\n<|im_start|>assistant\n"


def write_input(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as file:
        for number in range(count):
            record = {
                "id": f"doc-{number}",
                "prompt": "Approve this refund?",
                "source": f"Refund request {number}: 12 EUR, bought nine days ago, unused.",
            }
            file.write(json.dumps(record) + "\n")


# --- the children: each measurement in its own process ---


def child_bare(url: str, count: int) -> dict[str, Any]:
    import httpx

    async def run() -> int:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for number in range(count):
            queue.put_nowait(number)
        ok = 0
        limits = httpx.Limits(max_connections=IN_FLIGHT)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

            async def worker() -> None:
                nonlocal ok
                while not queue.empty():
                    queue.get_nowait()
                    response = await client.post("/completion", json={"prompt": PROMPT})
                    response.raise_for_status()
                    json.loads(json.loads(response.content)["content"])
                    ok += 1

            await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        return ok

    started = time.perf_counter()
    ok = asyncio.run(run())
    return _figures(count, ok, time.perf_counter() - started)


def child_generate(url: str, count: int) -> dict[str, Any]:
    from contracts import Decision
    from sdk import AsyncStructuredClient
    from sdk.providers import LlamaCppProvider

    async def run() -> int:
        provider = LlamaCppProvider(url, prompt_template=lambda request: PROMPT)
        ok = 0
        queue: asyncio.Queue[int] = asyncio.Queue()
        for number in range(count):
            queue.put_nowait(number)
        async with AsyncStructuredClient(provider, max_concurrency=IN_FLIGHT) as client:

            async def worker() -> None:
                nonlocal ok
                while not queue.empty():
                    queue.get_nowait()
                    await client.generate(Decision, prompt="Approve the refund?")
                    ok += 1

            await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        return ok

    started = time.perf_counter()
    ok = asyncio.run(run())
    return _figures(count, ok, time.perf_counter() - started)


def child_index(count: int, folder: Path) -> dict[str, Any]:
    """Index an input of `count` items (written first, not timed) into a new state file."""
    from contracts import Decision
    from sdk.batch._index import index_input
    from sdk.batch._state import JobState

    items = folder / f"items-{count}.jsonl"
    if not items.exists():
        write_input(items, count)
    state_path = folder / f"index-{count}.db"
    state = JobState.create(state_path, {"job": "bench"})
    started = time.perf_counter()
    index_input(state, items, Decision)
    seconds = time.perf_counter() - started
    indexed = state.item_count()
    state.close()
    figures = _figures(count, indexed, seconds)
    figures["state_bytes"] = sum(
        path.stat().st_size for path in folder.glob(f"index-{count}.db*") if path.is_file()
    )
    return figures


def child_resume_index(count: int, folder: Path) -> dict[str, Any]:
    """Resume indexing the state file a killed `child_index` left (its prefix verified)."""
    from contracts import Decision
    from sdk.batch._index import index_input
    from sdk.batch._state import JobState

    items = folder / f"items-{count}.jsonl"
    state = JobState(folder / f"index-{count}.db")
    before = state.item_count()
    started = time.perf_counter()
    index_input(state, items, Decision)
    seconds = time.perf_counter() - started
    rows = state.in_order(-1, 1)
    last = state.in_order(state.item_count() - 2, 5)
    whole = (
        state.item_count() == count
        and rows[0].offset == 0
        and last[-1].offset + last[-1].length == items.stat().st_size
    )
    figures = _figures(count, state.item_count(), seconds)
    figures.update(before=before, whole=whole)
    state.close()
    return figures


def child_machinery(count: int, folder: Path) -> dict[str, Any]:
    """The job's own machinery per item, without HTTP: a local job whose client's provider is
    `TestProvider` (in process, answering at once), so the client CPU is the SDK's alone."""
    from contracts import Decision
    from sdk import AsyncStructuredClient
    from sdk.batch import BatchJob
    from sdk.batch import LocalBackend
    from sdk.providers import TestProvider

    items = folder / f"items-{count}.jsonl"
    if not items.exists():
        write_input(items, count)
    document = json.dumps({"reasoning": "ok", "answer": "approve", "confidence": "high"})
    provider = TestProvider([document], repeat=True)
    backend = LocalBackend(AsyncStructuredClient(provider, max_concurrency=IN_FLIGHT))
    started, cpu = time.perf_counter(), time.process_time()
    with BatchJob.create(
        folder / f"machinery-{count}.db",
        contract=Decision,
        backend=backend,
        input=items,
        out=folder / f"machinery-{count}.jsonl",
    ) as job:
        summary = job.run()
    figures = _figures(count, summary.ok, time.perf_counter() - started)
    figures["cpu_per_item_us"] = (time.process_time() - cpu) / count * 1e6
    return figures


def child_hash(count: int, folder: Path) -> dict[str, Any]:
    """The identity check's own work per item: hashing a line (as `InputReader.read` does)."""
    from sdk.batch._items import line_hash

    items = folder / f"items-{count}.jsonl"
    if not items.exists():
        write_input(items, count)
    lines = items.read_bytes().splitlines(keepends=True)
    started = time.perf_counter()
    for line in lines:
        line_hash(line)
    seconds = time.perf_counter() - started
    return {"count": len(lines), "per_item_us": seconds / len(lines) * 1e6}


def child_job(url: str, count: int, folder: Path) -> dict[str, Any]:
    from contracts import Decision
    from sdk import AsyncStructuredClient
    from sdk.batch import BatchJob
    from sdk.batch import LocalBackend
    from sdk.providers import LlamaCppProvider

    items = folder / f"items-{count}.jsonl"
    write_input(items, count)
    provider = LlamaCppProvider(url, prompt_template=lambda request: PROMPT)
    backend = LocalBackend(AsyncStructuredClient(provider, max_concurrency=IN_FLIGHT))
    out = folder / f"out-{count}.jsonl"
    started = time.perf_counter()
    with BatchJob.create(
        folder / f"job-{count}.db", contract=Decision, backend=backend, input=items, out=out
    ) as job:
        summary = job.run()
    seconds = time.perf_counter() - started
    with out.open("rb") as file:
        lines = sum(1 for _ in file)
    figures = _figures(count, summary.ok, seconds)
    figures["lines"] = lines
    return figures


def _figures(count: int, ok: int, seconds: float) -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "count": count,
        "ok": ok,
        "seconds": seconds,
        "per_second": count / seconds,
        "cpu": usage.ru_utime + usage.ru_stime,
        "max_rss_mb": _peak_rss_mb(usage),
    }


def _peak_rss_mb(usage: resource.struct_rusage) -> float:
    """This process's own peak RSS: `VmHWM`, the high-water mark of its memory since exec.
    (Linux carries the parent's RSS at fork into a child's `ru_maxrss`: run from `make bench`,
    whose process holds the embedded model, every child would report at least that.)"""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return usage.ru_maxrss / 1024  # Linux: kilobytes


def _child_command(kind: str, url: str, count: int, folder: Path, tree: Path | None) -> list[str]:
    command = [sys.executable, __file__, "--child", kind, url, str(count), str(folder)]
    return [*command, "--tree", str(tree)] if tree is not None else command


def _run_child(
    kind: str, url: str, count: int, folder: Path, tree: Path | None = None
) -> dict[str, Any]:
    command = _child_command(kind, url, count, folder, tree)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} child failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _killed_while_indexing(count: int, folder: Path) -> int:
    """Start indexing `count` items in a child, SIGKILL it once about half are in: how many."""
    import signal
    import sqlite3

    state = folder / f"index-{count}.db"
    child = subprocess.Popen(_child_command("index", "-", count, folder, None))
    indexed = 0
    try:
        while child.poll() is None and indexed < count // 2:
            time.sleep(0.05)
            if state.exists():
                # The last seq, not count(*): a scan of the growing file would map its pages into
                # this process, and every child started after would report this one's peak RSS
                # (Linux carries it across fork and exec).
                try:
                    with sqlite3.connect(f"{state.as_uri()}?mode=ro", uri=True) as db:
                        indexed = db.execute("SELECT max(seq) FROM items").fetchone()[0] or 0
                except sqlite3.Error:
                    pass
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
    return int(indexed)


# --- the parent ---


SECTIONS = ("throughput", "scale", "identity")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--small", type=int, default=SMALL)
    parser.add_argument("--fanout", type=int, default=FANOUT)
    parser.add_argument("--huge", type=int, default=HUGE)
    parser.add_argument(
        "--baseline",
        default=BEFORE_THE_LOCK,
        help="the commit `identity` compares (before the lock)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="`identity`: alternated rounds")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return
    sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; sections: {', '.join(SECTIONS)}")
    lines: list[Line] = []
    with tempfile.TemporaryDirectory() as folder:
        if {"throughput", "identity"} & set(sections):
            with _fanout_server() as url:
                if "throughput" in sections:
                    sizes = (args.items, args.small, args.fanout)
                    lines += table(_throughput(url, Path(folder), *sizes))
                if "identity" in sections:
                    lines += identity_rows(_identity(args, url, Path(folder)))
        if "scale" in sections:
            lines += scale_rows(_scale(args, Path(folder)))
    for line in lines:
        print(f"| {line.measure} | {line.figure} | {line.detail} | {line.goal} | {line.met} |")


@contextlib.contextmanager
def _fanout_server() -> Iterator[str]:
    """bench/fanout_server.py in its own process, answering at once: its URL."""
    server = subprocess.Popen(
        [sys.executable, str(BENCH / "fanout_server.py"), "--delay", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield f"http://127.0.0.1:{server.stdout.readline().strip()}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _child(args: argparse.Namespace) -> dict[str, Any]:
    kind, url, count, folder = args.child
    if args.tree:  # another checkout's sdk (the baseline), before anything imports this one's
        sys.path.insert(0, args.tree)
    if kind == "job":
        return child_job(url, int(count), Path(folder))
    if kind in ("bare", "generate"):
        run = {"bare": child_bare, "generate": child_generate}
        return run[kind](url, int(count))
    local = {
        "index": child_index,
        "resume-index": child_resume_index,
        "hash": child_hash,
        "machinery": child_machinery,
    }
    return local[kind](int(count), Path(folder))


def measure(items: int, small: int, fanout: int) -> dict[str, dict[str, Any]]:
    """Every throughput measurement, each in its own process, against one fast local server."""
    with _fanout_server() as url, tempfile.TemporaryDirectory() as folder:
        return _throughput(url, Path(folder), items, small, fanout)


def _throughput(
    url: str, folder: Path, items: int, small: int, fanout: int
) -> dict[str, dict[str, Any]]:
    figures = {}
    # The bare fan-out runs first and last: the machine's load drifts over a run this long, and
    # the job is compared with the mean of the two.
    for name, kind, count in (
        ("bare", "bare", fanout),
        ("generate", "generate", fanout),
        ("job", "job", items),
        ("small", "job", small),
        ("bare_after", "bare", fanout),
    ):
        print(f"bench_batch: {name} ({count:,}) ...", file=sys.stderr, flush=True)
        figures[name] = _run_child(kind, url, count, folder)
    return figures


def _scale(args: argparse.Namespace, folder: Path) -> dict[str, dict[str, Any]]:
    figures: dict[str, dict[str, Any]] = {}
    for name, count in (("index_huge", args.huge), ("index_items", args.items)):
        print(f"bench_batch: index ({count:,}) ...", file=sys.stderr, flush=True)
        figures[name] = _run_child("index", "-", count, folder)
    huge = folder / "kill"
    huge.mkdir()
    os.link(folder / f"items-{args.huge}.jsonl", huge / f"items-{args.huge}.jsonl")
    print(f"bench_batch: index ({args.huge:,}), killed halfway ...", file=sys.stderr, flush=True)
    killed_at = _killed_while_indexing(args.huge, huge)
    figures["resume"] = _run_child("resume-index", "-", args.huge, huge)
    figures["resume"]["killed_at"] = killed_at
    return figures


def _identity(args: argparse.Namespace, url: str, folder: Path) -> dict[str, Any]:
    baseline = folder / "baseline"
    baseline.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", args.baseline, "sdk", "contracts"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(baseline)], input=archive.stdout, check=True)
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "baseline": []}
    machinery: dict[str, list[dict[str, Any]]] = {"ours": [], "baseline": []}
    trees: list[tuple[str, Path | None]] = [("baseline", baseline), ("ours", None)]
    for round_ in range(args.rounds):
        # Alternated, and in turn first (ABBA...): the load drifts, and a run can slow the one
        # after it (its writes still going to disk); each starts with the disk synced.
        for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
            print(f"bench_batch: job {name} ({args.items:,}) ...", file=sys.stderr, flush=True)
            place = folder / f"{name}-{round_}"
            place.mkdir()
            os.sync()
            runs[name].append(_run_child("job", url, args.items, place, tree))
            os.sync()
            machinery[name].append(_run_child("machinery", "-", args.items, place, tree))
    hashing = _run_child("hash", "-", args.items, folder)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    label = args.baseline if args.baseline == commit else f"{args.baseline} ({commit})"
    return {"runs": runs, "machinery": machinery, "hash": hashing, "baseline": label}


@row("batch", number="9", title="batch job, local path",
     measures=f"a `BatchJob` of {ITEMS:,} items on the local path (`LocalBackend`) against a bare "
              "httpx fan-out to the same fast local server; its peak memory against a job of "
              f"{SMALL:,}",
     unit="ratio of items/s (wall), of client CPU per item, of peak RSS", long=True)  # fmt: skip
def batch_row(settings: Settings) -> Measured:
    sizes = (2_000, 500, 1_000) if settings.quick else (ITEMS, SMALL, FANOUT)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())  # 1, 5, 15 minutes
    figures = measure(*sizes)
    job, small = figures["job"], figures["small"]
    first, after = figures["bare"], figures["bare_after"]
    notes = f"""\
- Wall-clock items/s and client CPU per item (user + system time of the process that ran it);
  the server (its own process) answers at once. Each run is its own process, so each peak RSS is
  that run's alone. On a shared machine the throughput of runs minutes apart moves with the load
  (load average {load} when the row started; the bare runs before and after the job gave
  {first['per_second']:,.0f} and {after['per_second']:,.0f} items/s): read the first figure as
  "the job keeps up with a bare fan-out", not as a precise ratio. The memory figure is the one
  that matters: {small['max_rss_mb']:.0f} MB at {small['count']:,} items,
  {job['max_rss_mb']:.0f} MB at {job['count']:,}.
"""
    values = {
        "items": job["count"],
        "small_items": small["count"],
        "rss_mb": round(job["max_rss_mb"]),
        "small_rss_mb": round(small["max_rss_mb"]),
    }
    return Measured(table(figures), notes=notes, values=values)


# The commit before the lock and the identity check (main just before issue 21 was merged): what
# the identity row compares this tree with. `--baseline` chooses another from the command line.
BEFORE_THE_LOCK = "0987f58^1"
IDENTITY_ITEMS = 20_000  # 100,000 per run takes half an hour for the alternated rounds
IDENTITY_ROUNDS = 2
HUGE = 1_000_000


@row("batch-scale", number="15", title="batch input at scale",
     measures=f"indexing a {HUGE:,}-item input (items/s, peak memory against {ITEMS:,}, state "
              "bytes per item) and a resume after a SIGKILL while indexing",
     unit="items/s; ratio of peak RSS; bytes; seconds", long=True)  # fmt: skip
def batch_scale_row(settings: Settings) -> Measured:
    huge, items = (20_000, 2_000) if settings.quick else (HUGE, ITEMS)
    with tempfile.TemporaryDirectory() as folder:
        figures = _scale(argparse.Namespace(huge=huge, items=items), Path(folder))
    return Measured(scale_rows(figures))


@row("batch-identity", number="16", title="the lock's and identity check's cost",
     measures=f"a `BatchJob` of {IDENTITY_ITEMS:,} items on the local path, this tree against "
              f"the commit before the lock and the identity check, {IDENTITY_ROUNDS} alternated "
              "rounds; the job machinery alone; the line hash",
     unit="ratio of items/s (wall), of CPU per item; us per item", long=True)  # fmt: skip
def batch_identity_row(settings: Settings) -> Measured:
    items, rounds = (1_000, 1) if settings.quick else (IDENTITY_ITEMS, IDENTITY_ROUNDS)
    args = argparse.Namespace(items=items, rounds=rounds, baseline=BEFORE_THE_LOCK)
    with _fanout_server() as url, tempfile.TemporaryDirectory() as folder:
        figures = _identity(args, url, Path(folder))
    return Measured(identity_rows(figures))


def table(figures: dict[str, dict[str, Any]]) -> list[Line]:
    first, after = figures["bare"], figures["bare_after"]
    bare = {
        key: (first[key] + after[key]) / 2
        for key in ("count", "seconds", "per_second", "cpu", "max_rss_mb")
    }
    generate, job, small = (figures[k] for k in ("generate", "job", "small"))
    ratio = job["per_second"] / bare["per_second"]
    over_generate = job["per_second"] / generate["per_second"]
    exact = "yes" if job["lines"] == job["count"] == job["ok"] else "NO"

    def cpu(run: dict[str, Any]) -> float:
        return float(run["cpu"]) / run["count"] * 1000  # ms of client CPU per item

    return [
        Line(f"batch job, local path: {job['count']:,} items (LocalBackend, {IN_FLIGHT} in "
             f"flight) / bare fan-out (httpx + json.loads, {IN_FLIGHT} in flight), items/s",
             f"{ratio:.2f}x",
             f"{job['per_second']:,.0f} vs {bare['per_second']:,.0f} items/s (bare: mean of a run "
             f"before the job, {first['per_second']:,.0f}, and one after, "
             f"{after['per_second']:,.0f}; {job['seconds']:.0f} s for the job); {job['ok']:,} "
             f"ok, {job['lines']:,} output lines, each item once: {exact}",
             key="batch"),
        Line("  ... client CPU per item, job / bare fan-out", f"{cpu(job) / cpu(bare):.2f}x",
             f"{cpu(job):.2f} ms vs {cpu(bare):.2f} ms (before {cpu(first):.2f}, after "
             f"{cpu(after):.2f}; generate alone: {cpu(generate):.2f} ms)", key="batch-cpu"),
        Line("  ... items/s over the same calls through AsyncStructuredClient.generate alone",
             f"{over_generate:.2f}x", f"{generate['per_second']:,.0f} items/s"),
        Line(f"  peak RSS of the job's process: {job['count']:,} items / {small['count']:,} "
             "items", f"{job['max_rss_mb'] / small['max_rss_mb']:.2f}x",
             f"{job['max_rss_mb']:.0f} MB vs {small['max_rss_mb']:.0f} MB "
             f"({job['count'] // small['count']}x the items); bare fan-out "
             f"{bare['max_rss_mb']:.0f} MB, generate alone {generate['max_rss_mb']:.0f} MB",
             "bounded", "yes" if job["max_rss_mb"] < 1.5 * small["max_rss_mb"] else "NO",
             key="batch-rss"),
    ]  # fmt: skip



def scale_rows(figures: dict[str, dict[str, Any]]) -> list[Line]:
    huge, items, resume = figures["index_huge"], figures["index_items"], figures["resume"]
    ratio = huge["max_rss_mb"] / items["max_rss_mb"]
    return [
        Line(f"indexing {huge['count']:,} items (a JSONL input read as a stream; each "
             "line parsed, hashed and stored)", f"{huge['per_second']:,.0f} items/s",
             f"{huge['seconds']:.1f} s; {items['count']:,} items: {items['seconds']:.1f} s, "
             f"{items['per_second']:,.0f} items/s"),
        Line(f"  peak RSS indexing {huge['count']:,} items / {items['count']:,} items",
             f"{ratio:.2f}x",
             f"{huge['max_rss_mb']:.0f} MB vs {items['max_rss_mb']:.0f} MB "
             f"({huge['count'] // items['count']}x the items)",
             "bounded", "yes" if ratio < 1.5 else "NO"),
        Line(f"  state file per item ({huge['count']:,} items indexed)",
             f"{huge['state_bytes'] / huge['count']:.0f} bytes",
             f"{huge['state_bytes'] / 1e6:,.0f} MB (id, offset, length, hash, state, indexes)"),
        Line(f"  resume after a SIGKILL while indexing {huge['count']:,} items",
             f"{resume['seconds']:.1f} s",
             f"killed with {resume['killed_at']:,} indexed ({resume['before']:,} committed); "
             "the indexed prefix verified, the rest indexed; index whole: "
             f"{'yes' if resume['whole'] else 'NO'} (fresh indexing: {huge['seconds']:.1f} s)"),
    ]  # fmt: skip


def identity_rows(figures: dict[str, Any]) -> list[Line]:
    runs = figures["runs"]
    pairs = list(zip(runs["ours"], runs["baseline"], strict=True))
    speed = statistics.median(ours["per_second"] / base["per_second"] for ours, base in pairs)

    def cpu(run: dict[str, Any]) -> float:
        return float(run["cpu"]) / run["count"] * 1000  # ms of client CPU per item

    work = statistics.median(cpu(ours) / cpu(base) for ours, base in pairs)
    each = ", ".join(f"{o['per_second']:,.0f} vs {b['per_second']:,.0f}" for o, b in pairs)
    alone = list(zip(figures["machinery"]["ours"], figures["machinery"]["baseline"], strict=True))
    machine = statistics.median(o["cpu_per_item_us"] / b["cpu_per_item_us"] for o, b in alone)
    each_machine = ", ".join(
        f"{o['cpu_per_item_us']:.0f} vs {b['cpu_per_item_us']:.0f}" for o, b in alone
    )
    each_cpu = ", ".join(f"{cpu(o):.2f} vs {cpu(b):.2f}" for o, b in pairs)
    exact = all(run["lines"] == run["count"] == run["ok"] for run in runs["ours"])
    count = runs["ours"][0]["count"]
    return [
        Line(f"batch job with the lock and the identity check / "
             f"{figures['baseline']} (before them), local path, {count:,} items, items/s",
             f"{speed:.2f}x",
             f"median of {len(pairs)} rounds, each tree first in turn (rounds: {each} items/s); "
             f"each item once: {'yes' if exact else 'NO'}",
             ">= 0.95x", "yes" if speed >= 0.95 else "NO"),
        Line("  ... client CPU per item", f"{work:.2f}x",
             f"median of the rounds (ms per item: {each_cpu})"),
        Line("  ... the job's machinery alone (TestProvider in process, no HTTP), "
             "CPU per item", f"{machine:.2f}x",
             f"median of the rounds (us per item: {each_machine})"),
        Line("  the line hash itself, per item",
             f"{figures['hash']['per_item_us']:.2f} us",
             "at indexing and at each read back; the lease is checked once per commit (a chunk "
             "of items), not per item"),
    ]  # fmt: skip


if __name__ == "__main__":
    main()
