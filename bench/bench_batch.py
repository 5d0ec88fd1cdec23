"""Batch jobs on the local path: throughput and peak memory of `sdk.batch` over a large input.

    .venv/bin/python bench/bench_batch.py                   # 100,000 items, print only
    .venv/bin/python bench/bench_batch.py --items 30000 --small 5000
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
Row 9 of `make bench` (`batch_row`) runs the same measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Line, Measured, Settings, row  # noqa: E402

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


def child_job(url: str, count: int, folder: Path) -> dict[str, Any]:
    from contracts import Decision
    from sdk import AsyncStructuredClient
    from sdk.batch import BatchJob, LocalBackend
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


def _run_child(kind: str, url: str, count: int, folder: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, url, str(count), str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} child failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


# --- the parent ---


def measure(items: int, small: int, fanout: int) -> dict[str, dict[str, Any]]:
    """Every measurement, each in its own process, against one fast local server."""
    server = subprocess.Popen(
        [sys.executable, str(BENCH / "fanout_server.py"), "--delay", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        with tempfile.TemporaryDirectory() as folder:
            figures = {}
            # The bare fan-out runs first and last: the machine's load drifts over a run this
            # long, and the job is compared with the mean of the two.
            for name, kind, count in (
                ("bare", "bare", fanout),
                ("generate", "generate", fanout),
                ("job", "job", items),
                ("small", "job", small),
                ("bare_after", "bare", fanout),
            ):
                print(f"bench_batch: {name} ({count:,}) ...", file=sys.stderr, flush=True)
                figures[name] = _run_child(kind, url, count, Path(folder))
    finally:
        server.terminate()
        server.wait(timeout=10)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--small", type=int, default=SMALL)
    parser.add_argument("--fanout", type=int, default=FANOUT)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, url, count, folder = args.child
        run = {"bare": child_bare, "generate": child_generate}
        figures = (
            child_job(url, int(count), Path(folder))
            if kind == "job"
            else run[kind](url, int(count))
        )
        print(json.dumps(figures))
        return
    for line in table(measure(args.items, args.small, args.fanout)):
        print(f"| {line.measure} | {line.figure} | {line.detail} | {line.goal} | {line.met} |")


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


if __name__ == "__main__":
    main()
