"""Rows 20-23: the local runner and the Ray path against a simulated fleet, in one run.

    .venv/bin/python bench/bench_fleet.py                     # print the four rows
    .venv/bin/python bench/run.py --only 20,21,22,23 --write  # record them (measured once)

The fleet (bench/fleet.py): `REPLICAS` OpenAI-compatible replicas in their own processes, each
with `SLOTS` sequence slots answering `LATENCY` seconds after a slot took a request: its ideal
is replicas * slots / latency items/s. Against it, each arm in its own process (so that its CPU
and peak memory are its own), `ITEMS` items each, with as many requests in flight as the fleet
has slots:

- `bare`: httpx + `json.loads`, one `AsyncClient` per replica, the baseline (run first and last:
  the machine is shared, the arms are compared with the mean of the two);
- `local`: a `BatchJob` on the local runner (`LocalBackend`, one client per replica);
- `ray-job`: the same job on the Ray engine (`RayBackend`: `ACTORS` actors of
  `slots * replicas / ACTORS` calls each) on a local cluster of `ACTORS` CPUs started first;
- `ray-map`: `StructuredMap` over a Ray dataset of the items (no job file), each actor reporting
  its process's CPU time since it was made and its peak RSS with every batch.

Row 20: the local runner against bare httpx and against the ideal. Row 21: the Ray paths
against the ideal and the local runner. Row 22: client CPU per item inside an actor (the actor
process's CPU, Ray's own threads included) against the local runner's process. Row 23: peak
memory per actor against the local runner's process; its values feed the "Scale out" guide's
model of a large fleet (bench/readme_figures.py renders it from bench/results.json).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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

from bench_batch import _figures  # noqa: E402
from bench_batch import _peak_rss_mb  # noqa: E402
from bench_batch import write_input  # noqa: E402
from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

REPLICAS, SLOTS, LATENCY = 4, 8, 0.2
ACTORS = 2
ITEMS, QUICK_ITEMS = 3000, 300
MODEL = "bench-model"


def _spec(urls: list[str]) -> dict[str, Any]:
    return {"provider": "vllm", "model": MODEL, "base_urls": urls, "concurrency": SLOTS}


def child_bare(urls: list[str], count: int) -> dict[str, Any]:
    import httpx

    body = {"model": MODEL, "messages": [{"role": "user", "content": "Approve?"}],
            "max_tokens": 4096}  # fmt: skip

    async def run() -> int:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for number in range(count):
            queue.put_nowait(number)
        ok = 0
        limits = httpx.Limits(max_connections=SLOTS, max_keepalive_connections=SLOTS)
        clients = [httpx.AsyncClient(base_url=url, limits=limits, timeout=60) for url in urls]

        async def worker(client: httpx.AsyncClient) -> None:
            nonlocal ok
            while not queue.empty():
                queue.get_nowait()
                response = await client.post("/v1/chat/completions", json=body)
                response.raise_for_status()
                json.loads(json.loads(response.content)["choices"][0]["message"]["content"])
                ok += 1

        try:
            await asyncio.gather(*(worker(c) for c in clients for _ in range(SLOTS)))
        finally:
            for client in clients:
                await client.aclose()
        return ok

    started = time.perf_counter()
    ok = asyncio.run(run())
    return _figures(count, ok, time.perf_counter() - started)


def child_local(urls: list[str], count: int, folder: Path) -> dict[str, Any]:
    from contracts import Decision
    from sdk.batch import BatchJob
    from sdk.batch import LocalBackend
    from sdk.batch._setup import local_clients

    items = folder / "items-local.jsonl"
    write_input(items, count)
    backend = LocalBackend(local_clients(_spec(urls)))
    started = time.perf_counter()
    with BatchJob.create(folder / "local.db", contract=Decision, backend=backend, input=items,
                         out=folder / "local.jsonl") as job:  # fmt: skip
        summary = job.run()
    return _figures(count, summary.ok, time.perf_counter() - started)


def _ray_init() -> None:
    import logging

    import ray

    ray.init(num_cpus=ACTORS, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)  # fmt: skip
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = False


def child_ray_job(urls: list[str], count: int, folder: Path) -> dict[str, Any]:
    from contracts import Decision
    from sdk.batch import BatchJob
    from sdk.batch._ray import RayBackend
    from sdk.batch._setup import local_clients

    items = folder / "items-ray.jsonl"
    write_input(items, count)
    _ray_init()
    spec = _spec(urls)
    backend = RayBackend(local_clients(spec), functools.partial(local_clients, spec),
                         actors=ACTORS, in_flight=REPLICAS * SLOTS // ACTORS,
                         batch_size=64)  # fmt: skip
    started = time.perf_counter()
    with BatchJob.create(folder / "ray.db", contract=Decision, backend=backend, input=items,
                         out=folder / "ray.jsonl") as job:  # fmt: skip
        summary = job.run()
    return _figures(count, summary.ok, time.perf_counter() - started)


def child_ray_map(urls: list[str], count: int) -> dict[str, Any]:
    import pyarrow as pa
    import ray
    from ray.data import ActorPoolStrategy

    from contracts import Decision
    from sdk.batch._setup import local_clients
    from sdk.ray import StructuredMap

    class MeasuredMap(StructuredMap):
        """`StructuredMap`, each batch also saying its actor's process, the CPU that process
        used since the actor was made (its clients included), and its peak RSS."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.cpu_made = time.process_time()

        def __call__(self, batch: Any) -> pa.Table:
            table = super().__call__(batch)
            rows = table.num_rows
            table = table.append_column("_pid", pa.array([os.getpid()] * rows, pa.int64()))
            cpu = time.process_time() - self.cpu_made
            table = table.append_column("_cpu", pa.array([cpu] * rows, pa.float64()))
            rss = _peak_rss_mb(resource.getrusage(resource.RUSAGE_SELF))
            return table.append_column("_rss", pa.array([rss] * rows, pa.float64()))

    _ray_init()
    rows = [{"id": f"doc-{n}", "prompt": "Approve this refund?",
             "source": f"Refund request {n}: 12 EUR, bought nine days ago, unused."}
            for n in range(count)]  # fmt: skip
    dataset = ray.data.from_items(rows, override_num_blocks=max(1, count // 64)).materialize()
    started = time.perf_counter()
    made = {
        "contract": Decision,
        "client": functools.partial(local_clients, _spec(urls)),
        "in_flight": REPLICAS * SLOTS // ACTORS,
    }
    mapped = dataset.map_batches(
        MeasuredMap,
        fn_constructor_kwargs=made,
        batch_size=64,
        batch_format="pyarrow",
        compute=ActorPoolStrategy(size=ACTORS),
        max_concurrency=4,
    )
    out = mapped.select_columns(["outcome", "_pid", "_cpu", "_rss"]).take_all()
    seconds = time.perf_counter() - started
    actors: dict[int, dict[str, float]] = {}
    for record in out:
        seen = actors.setdefault(record["_pid"], {"cpu": 0.0, "rss": 0.0})
        seen["cpu"] = max(seen["cpu"], record["_cpu"])
        seen["rss"] = max(seen["rss"], record["_rss"])
    ok = sum(1 for record in out if record["outcome"] == "ok")
    figures = _figures(count, ok, seconds)
    figures["actors"] = len(actors)
    figures["actor_cpu"] = sum(seen["cpu"] for seen in actors.values())
    figures["actor_rss_mb"] = max(seen["rss"] for seen in actors.values())
    return figures


def _run_child(kind: str, urls: list[str], count: int, folder: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, ",".join(urls), str(count),
               str(folder)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} child failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _child(kind: str, urls: list[str], count: int, folder: Path) -> dict[str, Any]:
    if kind == "bare":
        return child_bare(urls, count)
    if kind == "local":
        return child_local(urls, count, folder)
    if kind == "ray-job":
        return child_ray_job(urls, count, folder)
    return child_ray_map(urls, count)


_MEASURED: dict[bool, dict[str, Any]] = {}


def measure(quick: bool) -> dict[str, Any]:
    """Every arm, once per process: the four rows of one run share it."""
    if quick not in _MEASURED:
        from fleet import fleet

        count = QUICK_ITEMS if quick else ITEMS
        figures: dict[str, Any] = {"load": os.getloadavg()[0]}
        with fleet(REPLICAS, LATENCY, SLOTS) as running, tempfile.TemporaryDirectory() as tmp:
            urls = list(running.urls)
            figures["ideal"] = running.ideal
            for name, kind in (("bare", "bare"), ("local", "local"), ("ray_job", "ray-job"),
                               ("ray_map", "ray-map"), ("bare_after", "bare")):  # fmt: skip
                print(f"bench_fleet: {name} ({count:,}) ...", file=sys.stderr, flush=True)
                figures[name] = _run_child(kind, urls, count, Path(tmp))
        _MEASURED[quick] = figures
    return _MEASURED[quick]


def _bare(figures: dict[str, Any]) -> dict[str, float]:
    first, after = figures["bare"], figures["bare_after"]
    return {key: (first[key] + after[key]) / 2 for key in ("per_second", "cpu", "count")}


def _ms(run: dict[str, Any], cpu: str = "cpu") -> float:
    return float(run[cpu]) / float(run["count"]) * 1000


_FLEET = f"{REPLICAS} replicas x {SLOTS} slots, {LATENCY * 1000:.0f} ms each"


@row("fleet-local", number="20", title="local runner at a fleet's speed",
     measures=f"a `BatchJob` on the local runner against a simulated fleet ({_FLEET}): items/s "
              "against bare httpx at the same concurrency and against the fleet's ideal "
              "(slots / latency)",
     unit="ratio of items/s (wall)", long=True)  # fmt: skip
def fleet_local_row(settings: Settings) -> Measured:
    figures = measure(settings.quick)
    local, bare, ideal = figures["local"], _bare(figures), figures["ideal"]
    over_bare = local["per_second"] / bare["per_second"]
    over_ideal = local["per_second"] / ideal
    return Measured([
        Line(f"local runner / bare httpx, {REPLICAS * SLOTS} in flight, {local['count']:,} items",
             f"{over_bare:.2f}x",
             f"{local['per_second']:,.0f} vs {bare['per_second']:,.0f} items/s (bare: mean of a "
             f"run before, {figures['bare']['per_second']:,.0f}, and after, "
             f"{figures['bare_after']['per_second']:,.0f}); load {figures['load']:.1f}",
             ">= 0.9x", "yes" if over_bare >= 0.9 else "NO", key="fleet-local"),
        Line("  ... local runner / the fleet's ideal", f"{over_ideal:.2f}x",
             f"ideal {ideal:,.0f} items/s ({_FLEET})", ">= 0.8x",
             "yes" if over_ideal >= 0.8 else "NO", key="fleet-local-ideal"),
    ])  # fmt: skip


@row("fleet-ray", number="21", title="Ray path at a fleet's speed",
     measures=f"`sdk batch --engine ray` and `StructuredMap` on a local cluster of {ACTORS} CPUs "
              f"({ACTORS} actors) against the same fleet: items/s against its ideal and against "
              "the local runner",
     unit="ratio of items/s (wall)", long=True)  # fmt: skip
def fleet_ray_row(settings: Settings) -> Measured:
    figures = measure(settings.quick)
    job, mapped, local, ideal = (figures[k] for k in ("ray_job", "ray_map", "local", "ideal"))
    return Measured([
        Line(f"Ray engine job ({ACTORS} actors x {REPLICAS * SLOTS // ACTORS} in flight) / the "
             "fleet's ideal", f"{job['per_second'] / ideal:.2f}x",
             f"{job['per_second']:,.0f} vs {ideal:,.0f} items/s ({job['seconds']:.1f} s for "
             f"{job['count']:,} items, actors' start included)", key="fleet-ray"),
        Line("  ... Ray engine job / local runner",
             f"{job['per_second'] / local['per_second']:.2f}x",
             f"{local['per_second']:,.0f} items/s on the local runner"),
        Line("  StructuredMap over a dataset / the fleet's ideal",
             f"{mapped['per_second'] / ideal:.2f}x",
             f"{mapped['per_second']:,.0f} items/s, {mapped['ok']:,} ok of {mapped['count']:,}",
             key="fleet-ray-map"),
    ])  # fmt: skip


@row("ray-actor-cpu", number="22", title="client CPU per item in a Ray actor",
     measures="the CPU an actor's process spends per item (`StructuredMap`: the call, parsing, "
              "checks, Ray's own threads) against the local runner's process per item",
     unit="ms of CPU per item, and their ratio", long=True)  # fmt: skip
def ray_cpu_row(settings: Settings) -> Measured:
    figures = measure(settings.quick)
    mapped, local, bare = figures["ray_map"], figures["local"], _bare(figures)
    actor = _ms(mapped, "actor_cpu")
    return Measured(
        [Line("client CPU per item: in a Ray actor / the local runner's process",
              f"{actor / _ms(local):.2f}x",
              f"{actor:.2f} ms vs {_ms(local):.2f} ms ({mapped['actors']} actors; bare httpx "
              f"{_ms(bare):.2f} ms)", key="ray-actor-cpu")],
        values={"actor_cpu_ms": round(actor, 3), "local_cpu_ms": round(_ms(local), 3)},
    )  # fmt: skip


@row("ray-actor-memory", number="23", title="peak memory per Ray actor",
     measures="the peak RSS of a `StructuredMap` actor's process against the local runner's "
              "process (the same items, the same fleet)",
     unit="MB, and their ratio", long=True)  # fmt: skip
def ray_memory_row(settings: Settings) -> Measured:
    figures = measure(settings.quick)
    mapped, local, job = figures["ray_map"], figures["local"], figures["ray_job"]
    values = {
        "actor_rss_mb": round(mapped["actor_rss_mb"]),
        "local_rss_mb": round(local["max_rss_mb"]),
        "actor_cpu_ms": round(_ms(mapped, "actor_cpu"), 3),
        "actor_in_flight": REPLICAS * SLOTS // ACTORS,
        "ray_ideal_ratio": job["per_second"] / figures["ideal"],
        "map_ideal_ratio": mapped["per_second"] / figures["ideal"],
        "local_ideal_ratio": local["per_second"] / figures["ideal"],
        "items": mapped["count"],
    }
    return Measured(
        [Line("peak RSS: a Ray actor's process / the local runner's process",
              f"{mapped['actor_rss_mb'] / local['max_rss_mb']:.2f}x",
              f"{mapped['actor_rss_mb']:.0f} MB vs {local['max_rss_mb']:.0f} MB "
              f"({mapped['count']:,} items)", key="ray-actor-memory")],
        values=values,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--child", nargs=4, metavar=("KIND", "URLS", "COUNT", "FOLDER"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.child:
        kind, urls, count, folder = args.child
        print(json.dumps(_child(kind, urls.split(","), int(count), Path(folder))))
        return
    settings = Settings(quick=args.quick)
    for function in (fleet_local_row, fleet_ray_row, ray_cpu_row, ray_memory_row):
        for line in function(settings).lines:
            print(f"{line.measure}: {line.figure}  ({line.detail})")


if __name__ == "__main__":
    main()
