"""The local runner against a simulated fleet (issue 31, item 4): several OpenAI-compatible
replicas (bench/fanout_server.py, each in its own process, with a latency and a slot limit).

The runner keeps every slot of every replica busy, sends each item once, and a Ctrl-C loses no
finished result: every completion a replica answered before the interrupt is in the output.
Speed itself is measured in bench/ (rows 20-23), never here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx

from bench.fleet import fleet
from bench.fleet import stats
from tests.batch_support import by_id
from tests.batch_support import gate
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.test_batch_integrity import sdk_process
from tests.test_batch_integrity import sdk_run
from tests.test_batch_integrity import stop
from tests.test_batch_integrity import wait_for


def _fleet_run(urls: tuple[str, ...], items: Path, out: Path, state: Path, slots: int) -> list[str]:
    urls_given = [part for url in urls for part in ("--base-url", url)]
    return [
        "batch", "run", "--contract", "contracts:Decision", "--provider", "vllm",
        "--model", "bench-model", *urls_given, "--concurrency", str(slots),
        "--input", str(items), "--out", str(out), "--state", str(state),
    ]  # fmt: skip


def test_a_replica_serves_at_most_its_slots_and_queues_the_rest() -> None:
    with fleet(replicas=1, latency=0.05, slots=3) as running:
        url = running.urls[0]
        # The gate holds the burst until all ten are there: ten requests sent 50 ms apart (a
        # loaded machine) would otherwise never have found the three slots full.
        gate(url, open=False)

        async def burst() -> list[int]:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                posts = [
                    asyncio.create_task(client.post("/v1/chat/completions", json={"max_tokens": 9}))
                    for _ in range(10)
                ]
                for _ in range(3000):  # bounded: a minute
                    if stats(url)["completions"] == 10:
                        break
                    await asyncio.sleep(0.02)
                gate(url, open=True)
                replies = await asyncio.gather(*posts)
            return [reply.status_code for reply in replies]

        assert asyncio.run(burst()) == [200] * 10
        counts = stats(url)
    assert running.ideal == 60.0 and running.in_flight == 3
    assert counts["completions"] == counts["answered"] == 10
    # All ten were waiting when the gate opened: three went into service, the rest queued.
    assert counts["peak_in_service"] == 3 and counts["peak_waiting"] == 10


def test_a_gate_opened_for_n_completions_closes_itself_after_them() -> None:
    # What tests hold a job with (`gate(url, open=True, count=N)`): exactly N answered, the
    # rest held until the gate opens again, however fast the caller sends them.
    with fleet(replicas=1, latency=0.01, slots=4) as running:
        url = running.urls[0]
        gate(url, open=True, count=3)

        async def burst() -> tuple[int, dict[str, int], list[int]]:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                posts = [
                    asyncio.create_task(client.post("/v1/chat/completions", json={"max_tokens": 9}))
                    for _ in range(8)
                ]
                for _ in range(3000):  # bounded: a minute
                    held = stats(url)
                    if held["completions"] == 8 and held["answered"] >= 3:
                        break
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.2)  # (time for a fourth, were one let through)
                held = stats(url)
                finished = sum(post.done() for post in posts)
                gate(url, open=True)
                replies = await asyncio.gather(*posts)
            return finished, held, [reply.status_code for reply in replies]

        finished, held, codes = asyncio.run(burst())
    assert held["completions"] == 8 and held["answered"] == 3 and finished == 3, held
    assert codes == [200] * 8


def test_the_local_runner_fills_every_slot_of_every_replica_and_sends_each_item_once(
    tmp_path: Path,
) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 120)
    # A latency of half a second: the runner has that long to put four calls in a replica's
    # slots at once, which a loaded machine does too (at 50 ms, a runner slowed below 80 calls
    # a second per replica never filled them).
    with fleet(replicas=3, latency=0.5, slots=4) as running:
        run = sdk_run(*_fleet_run(running.urls, items, out, state, 4), timeout=300)
        assert run.returncode == 0, run.stderr
        counts = [stats(url) for url in running.urls]
    assert sum(c["completions"] for c in counts) == 120  # each item asked once
    assert all(c["completions"] >= 36 for c in counts)  # round robin over the replicas
    # Every slot was busy at some moment, and the runner never asked a replica for more at once
    # than `--concurrency`: nothing waited in a replica's queue.
    assert [c["peak_in_service"] for c in counts] == [4, 4, 4]
    assert [c["peak_waiting"] for c in counts] == [0, 0, 0]
    records = by_id(read_output(out))
    assert len(records) == 120 and {r["outcome"] for r in records.values()} == {"ok"}


def _cpu_ticks(pid: int) -> int:
    """A process's user and system CPU ticks so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def _runnable(pid: int) -> bool:
    """Whether a thread of the process is running or waiting for a CPU (state R, Linux /proc):
    on a loaded machine a process can use no CPU for a second because it gets none."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            state = stat.read_text().rpartition(")")[2].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended
        if state == "R":
            return True
    return False


def _idle(pid: int, quiet: float = 1.0, timeout: float = 120.0) -> None:
    """Wait until the process has used no CPU for `quiet` seconds and had no thread waiting for
    one (it sleeps on held calls: not merely starved, with answers still unread)."""
    end = time.monotonic() + timeout
    last, since = _cpu_ticks(pid), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.1)
        now = _cpu_ticks(pid)
        if now != last or _runnable(pid):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise AssertionError(f"process {pid} never went idle")


def test_ctrl_c_at_fleet_speed_loses_no_finished_result(tmp_path: Path) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 3000)
    with fleet(replicas=3, latency=0.01, slots=8) as running:
        runner = sdk_process(*_fleet_run(running.urls, items, out, state, 8))
        try:
            answered = lambda: sum(stats(url)["answered"] for url in running.urls)  # noqa: E731
            wait_for(lambda: answered() >= 300, "the first few hundred answers")
            for url in running.urls:  # the calls in flight now hang: the runner goes quiet
                gate(url, open=False)
            _idle(runner.pid)
            given = answered()
            runner.send_signal(signal.SIGINT)
            _, errors = runner.communicate(timeout=60)
            assert runner.returncode == 130, errors
        finally:
            stop(runner)
    records = by_id(read_output(out))
    # Every completion a replica answered had its result committed: none lost to the interrupt.
    assert len(records) == given
    assert {r["outcome"] for r in records.values()} == {"ok"}
    assert os.stat(out).st_mode & 0o777 == 0o600
