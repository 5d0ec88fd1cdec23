"""A real `redis-server` (Debian's package) on a free port, for the tests of `RedisCache`.

`.ci/run` installs it; without it the tests are skipped on a developer's machine and fail in CI
(`CI` set), so nothing is skipped there. Every wait has a bound.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        message = "redis-server is not installed (apt-get install redis-server; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


PORT_TRIES = 3  # another process can take the free port between the probe and redis's bind


@contextlib.contextmanager
def redis_server(folder: Path, *extra: str) -> Iterator[str]:
    """A `redis-server` of its own (no persistence, loopback only), its URL while it runs."""
    for _ in range(PORT_TRIES):
        port = free_port()
        log = folder / f"redis-{port}.log"
        command = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(folder), "--logfile", str(log),
                   *extra]  # fmt: skip
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if _listening(server, port, log):
                break
        except BaseException:
            _stop(server)
            raise
    else:
        raise RuntimeError(f"redis-server could not bind a free port in {PORT_TRIES} tries")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop(server)


def _listening(server: subprocess.Popen[bytes], port: int, log: Path) -> bool:
    """Wait (bounded) until the server listens: True, or False when another process took its
    port first. The port answering is not enough (another process may hold it): the server
    must be alive after it does."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.poll() is not None:
            said = log.read_text() if log.exists() else ""
            if "Address already in use" in said:
                return False
            raise RuntimeError(f"redis-server exited {server.returncode}: {said}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            if "Ready to accept connections" in (log.read_text() if log.exists() else ""):
                return True
        if time.monotonic() > deadline:
            raise TimeoutError(f"redis-server did not listen within {START_TIMEOUT:g} s")
        time.sleep(0.02)


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=10)
