"""A pool of embedded engines: calls/s of `EmbeddedProvider(engines=2)` against one engine, under
`asyncio.gather`, with each process's peak memory.

    .venv/bin/python bench/bench_pool.py          # prints the figures
    (and row 30 of `make bench`)

Each arm runs in a process of its own (so its peak resident memory is its own): it loads the
provider, warms it up (the contract's grammar compiled, one call made), then sends `CALLS`
Decision calls at once through one `AsyncStructuredClient` (`asyncio.gather`, greedy, the same
prompts in both arms) and times them on the wall clock. One engine runs them one after another;
two run two at a time, each engine on its own `n_threads` threads (the default: half the CPUs).
The arms alternate in mirrored order (1, 2, then 2, 1) so a drift of the shared machine weighs
on both; the figure is calls/s of the pool over calls/s of one engine, over all rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402

CALLS = 8
MAX_TOKENS = 120
PROMPTS = tuple(
    f"Expense request: a taxi receipt of USD {amount}. Policy: taxis under USD 50 are fine. Decide."
    for amount in (12, 35, 48, 60, 75, 90, 20, 140, 15, 55, 8, 300)
)
ORDERS = ((1, 2), (2, 1))
"""The arms (engines) of each round, mirrored every other round."""


@dataclass(frozen=True)
class Arm:
    """One process's run: its engines, calls, wall seconds, peak memory."""

    engines: int
    calls: int
    seconds: float
    peak_mb: float
    threads: int
    model: str

    @property
    def rate(self) -> float:
        return self.calls / self.seconds


def worker(engines: int, calls: int) -> Arm:
    """In this process: load, warm up, then `calls` Decision calls at once."""
    from contracts import Decision
    from sdk import AsyncStructuredClient
    from sdk import StructuredOutputError
    from sdk.providers.embedded import EmbeddedProvider

    provider = EmbeddedProvider(engines=engines)
    prompts = [PROMPTS[index % len(PROMPTS)] for index in range(calls)]

    async def run() -> float:
        # A call that ends in a typed error (cut at MAX_TOKENS, invalid) still generated: it
        # counts as a call either way, so errors are returned, not raised.
        async with AsyncStructuredClient(provider, retries=0) as client:
            with contextlib.suppress(StructuredOutputError):  # warm-up: grammar, prompt
                await client.generate(Decision, prompt=PROMPTS[0], max_tokens=8)
            started = time.perf_counter()
            await asyncio.gather(
                *(client.generate(Decision, prompt=p, max_tokens=MAX_TOKENS) for p in prompts),
                return_exceptions=True,
            )
            return time.perf_counter() - started

    seconds = asyncio.run(run())
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    return Arm(engines, calls, seconds, peak_kb / 1024, provider.n_threads, provider.model)


def _arm_in_a_process(engines: int, calls: int) -> Arm:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", str(engines), str(calls)],
        capture_output=True, text=True, check=True, timeout=3600, cwd=ROOT,
    )  # fmt: skip
    return Arm(**json.loads(done.stdout.splitlines()[-1]))


def measure(rounds: int, calls: int) -> dict[int, list[Arm]]:
    """`rounds` rounds of both arms, in mirrored order; each arm's runs by its engines."""
    arms: dict[int, list[Arm]] = {1: [], 2: []}
    for index in range(rounds):
        for engines in ORDERS[index % len(ORDERS)]:
            arms[engines].append(_arm_in_a_process(engines, calls))
    return arms


def _rate(runs: list[Arm]) -> float:
    return sum(arm.calls for arm in runs) / sum(arm.seconds for arm in runs)


@row("embedded-pool", number="30", title="embedded engine pool",
     measures="calls/s of `EmbeddedProvider(engines=2)` over one engine under asyncio.gather "
              "(same Decision calls, greedy), with each process's peak memory",
     unit="ratio of calls/s (wall time, arms in mirrored order, a process each)",
     long=True)  # fmt: skip
def pool_row(settings: Settings) -> Measured:
    rounds, calls = (1, 4) if settings.quick else (2, CALLS)
    arms = measure(rounds, calls)
    one, two = _rate(arms[1]), _rate(arms[2])
    memory = {engines: max(arm.peak_mb for arm in runs) for engines, runs in arms.items()}
    first = arms[1][0]
    lines = [
        Line(
            f"embedded: 2 engines / 1, calls/s under asyncio.gather ({first.model}, "
            f"{first.threads} thread(s) per engine)",
            f"{two / one:.2f}x",
            f"{two:.2f} vs {one:.2f} calls/s; {calls} calls of up to {MAX_TOKENS} tokens at once, "
            f"{rounds} round(s) per arm",
            key="embedded-pool",
        ),
        Line(
            "  peak memory: 2 engines / 1 (resident, per process)",
            f"{memory[2] / memory[1]:.2f}x",
            f"{memory[2]:.0f} MB vs {memory[1]:.0f} MB: "
            f"{memory[2] - memory[1]:.0f} MB for the second engine",
        ),
    ]
    notes = f"""\
- One engine (one llama.cpp context) runs one generation at a time: {calls} calls sent together
  ran one after another, {one:.2f} calls/s. Two engines ran two at a time, {two:.2f} calls/s, each
  on its own {first.threads} thread(s); the second engine cost {memory[2] - memory[1]:.0f} MB of
  resident memory (its context and buffers; the weights are memory-mapped and counted once per
  process in the page cache).
- The machine is shared: a pool gains only what idle cores allow, which this figure measures as
  it was when the row ran (the load is in the record).
"""
    return Measured(lines, notes=notes, values={"one": one, "two": two, "memory": memory})


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        arm = worker(int(sys.argv[2]), int(sys.argv[3]))
        print(json.dumps(arm.__dict__))
        return
    arms = measure(2, CALLS)
    for engines, runs in arms.items():
        peak = max(arm.peak_mb for arm in runs)
        print(f"{engines} engine(s): {_rate(runs):.2f} calls/s, peak {peak:.0f} MB")


if __name__ == "__main__":
    main()
