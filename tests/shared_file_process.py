"""The SDK's shared files (the response cache, a job's state) from processes of their own, for the
tests that need several at the same moment.

    python -m tests.shared_file_process open-cache PREFIX GATE THREADS ROUNDS
    python -m tests.shared_file_process create-job PREFIX GATE THREADS ROUNDS
    python -m tests.shared_file_process hold PATH
    python -m tests.shared_file_process redis URL GATE THREADS ROUNDS

`open-cache` and `create-job` run ROUNDS rounds; in round R, THREADS threads wait behind a
barrier, say they are ready (a file `ready-PID` in the folder GATE/R), wait for the file
GATE/R/go, then all at once open the cache at PREFIX-R.db (and store and read an answer), or
create the job state there (one wins, the others find it made) and open it. They print one JSON
line: every failure, as "Type: message".
`redis` does what `open-cache` does with a `RedisCache` at URL (round R under the prefix
`round-R:`), answering through a client.
`hold` opens PATH with plain `sqlite3`, takes the write lock (`BEGIN IMMEDIATE`, a row written),
prints "held", and keeps it until a line comes on stdin; then it rolls back and prints
"released". Every wait has a bound (`WAIT` seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import AbstractContextManager
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WAIT = 120.0


@contextmanager
def held_by_another_thread(enter: Callable[[], AbstractContextManager[Any]]) -> Iterator[None]:
    """The body runs while another thread is inside `enter()` (a lock, the fork gate); that
    thread leaves when the body ends, and is joined within `WAIT`."""
    holding, release = threading.Event(), threading.Event()

    def holds() -> None:
        with enter():
            holding.set()
            release.wait(WAIT)

    thread = threading.Thread(target=holds)
    thread.start()
    try:
        assert holding.wait(WAIT)
        yield
    finally:
        release.set()
        thread.join(WAIT)
        assert not thread.is_alive()


def wait_for(check: Callable[[], bool], what: str) -> None:
    """Poll `check` until it holds, at most `WAIT` seconds."""
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT:g} s for {what}")
        time.sleep(0.002)


def together(threads: int, gate: Path | None, work: Callable[[int], None]) -> list[str]:
    """Run `work(n)` in `threads` threads released at the same moment (behind a barrier, and
    behind the gate file when other processes take part); every failure as one line."""
    barrier = threading.Barrier(threads, timeout=WAIT)
    failures: list[str] = []

    def run(number: int) -> None:
        try:
            barrier.wait()
            work(number)
        except Exception as error:  # every failure is the test's to count
            failures.append(f"{type(error).__name__}: {error}")

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    if gate is not None:
        (gate / f"ready-{os.getpid()}").touch()
        wait_for((gate / "go").exists, "the go file")
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT)
    return failures


def open_cache(path: Path, number: int) -> None:
    from sdk.cache import Entry
    from sdk.cache import SQLiteCache
    from sdk.providers import TestProvider

    cache = SQLiteCache(path)
    key = f"{os.getpid()}-{number}"
    cache.put(key, Entry((TestProvider.refusal(key),)))
    found = cache.get(key)
    if found is None or found.completions[0].refusal != key:
        raise AssertionError(f"stored {key}, read {found!r}")


def open_redis(url: str, prefix: str, number: int) -> None:
    """A store made at once with the others, an answer stored through a client and read back
    (a hit), and another process's entry seen."""
    import json as json_

    from contracts import Decision
    from sdk import StructuredClient
    from sdk.cache import RedisCache
    from sdk.providers import TestProvider

    store = RedisCache(url, prefix=prefix)
    answer = {"reasoning": "ok", "answer": "approve", "confidence": "high"}
    client = StructuredClient(TestProvider([json_.dumps(answer)], repeat=True), cache=store)
    prompt = f"Approve {os.getpid()}-{number}?"
    first, again = (client.generate(Decision, prompt=prompt) for _ in range(2))
    shared = client.generate(Decision, prompt=f"Approve shared {number}?")
    if first.cached or not again.cached or shared.value.answer != "approve":
        raise AssertionError(f"{prompt}: cached {first.cached}, {again.cached}")
    store.close()


def create_job(path: Path, number: int) -> None:
    from sdk.batch._state import JobState

    with contextlib.suppress(FileExistsError):  # another one won: the file must be whole now
        JobState.create(path, {"job": f"{os.getpid()}-{number}"}).close()
    state = JobState(path)
    try:
        if not state.get("job"):
            raise AssertionError("a job state without its job")
    finally:
        state.close()


def hold(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None, timeout=WAIT)
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('held', 1)")
    print("held", flush=True)
    sys.stdin.readline()
    db.execute("ROLLBACK")
    db.close()
    print("released", flush=True)


def main() -> None:
    mode, path = sys.argv[1], Path(sys.argv[2])
    if mode == "hold":
        hold(path)
        return
    gate, threads, rounds = Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    url = sys.argv[2]
    work = open_cache if mode == "open-cache" else create_job
    failures: list[str] = []
    for round_ in range(rounds):
        if mode == "redis":
            prefix = f"round-{round_}:"
            failures += together(threads, gate / str(round_),
                                 lambda n, p=prefix: open_redis(url, p, n))  # fmt: skip
            continue
        target = Path(f"{path}-{round_}.db")
        failures += together(threads, gate / str(round_), lambda n, t=target: work(t, n))
    print(json.dumps(failures))


if __name__ == "__main__":
    main()
