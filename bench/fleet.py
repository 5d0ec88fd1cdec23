"""A simulated fleet: several OpenAI-compatible replicas (bench/fanout_server.py), each in its own
process, each with a latency and a number of sequence slots.

    with fleet(replicas=4, latency=0.05, slots=16) as running:
        running.urls      # one base URL per replica
        running.ideal     # items/s the fleet can give at most: replicas * slots / latency

A replica answers every completion (llama.cpp's `/completion` or vLLM's `/v1/chat/completions`)
with a valid `Decision`, `latency` seconds after a slot took it; with every slot busy, requests
wait in arrival order. Each replica is a raw asyncio server in a process of its own, so the
fleet costs the client's process nothing and a replica's own CPU stays far below its latency:
what limits a client against it is the client, or the fleet's slots. The bench (rows 20-23) and
the tests (the local runner and the Ray engine at a fleet's speed) start it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["RunningFleet", "fleet", "replica", "stats"]

SERVER = Path(__file__).resolve().parent / "fanout_server.py"


@contextlib.contextmanager
def replica(latency: float, *options: str) -> Iterator[str]:
    """One bench/fanout_server.py in its own process (`options`: `--slots N`, `--closed`,
    `--truncate-below N`): its base URL. Stopped with SIGTERM on the way out."""
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--delay", str(latency), *options],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


@dataclass(frozen=True)
class RunningFleet:
    """A fleet that is up: its replicas' URLs and what it can give at most."""

    urls: tuple[str, ...]
    latency: float
    slots: int

    @property
    def ideal(self) -> float:
        """Items/s with every slot always busy: replicas * slots / latency."""
        return len(self.urls) * self.slots / self.latency

    @property
    def in_flight(self) -> int:
        """Requests the fleet serves at once: every replica's slots."""
        return len(self.urls) * self.slots


@contextlib.contextmanager
def fleet(replicas: int, latency: float, slots: int) -> Iterator[RunningFleet]:
    """`replicas` replicas of `slots` slots answering after `latency` seconds each."""
    with contextlib.ExitStack() as stack:
        urls = tuple(
            stack.enter_context(replica(latency, "--slots", str(slots))) for _ in range(replicas)
        )
        yield RunningFleet(urls, latency, slots)


def stats(url: str) -> dict[str, int]:
    """A replica's counts: completions received, the most in service and waiting at once."""
    response = httpx.get(f"{url}/stats", timeout=10)
    response.raise_for_status()
    return {key: int(value) for key, value in response.json().items()}
