"""`_Batches` (sdk/batch/_ray.py): the driver's bounded wait for a Ray dataset's output batches,
and `close`, which ends the iterator it reads in a thread of its own.

Ray's iterator waits in a Python loop and shuts its executor down in a `finally` (the
scheduling thread joined for up to 2 s, then each operator shut down: the actors killed); the
iterator here does the same in small, so the test needs no cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from sdk.batch._ray import _Batches


class _Table:
    def to_pylist(self) -> list[dict[str, int]]:
        return [{"row": 1}]


def test_close_lets_the_iterator_finish_its_cleanup() -> None:
    # The actors' batches never come (the servers hold every answer): the reader thread waits
    # inside the iterator. `close` raises `_Stopped` there once; the iterator's `finally`, which
    # takes a while (Ray's executor shutdown joins its scheduling thread first), must then run
    # to its end: a second `_Stopped` landing in it skipped the operators' shutdown, and the
    # actors went on calling the servers.
    waiting, cleaned = threading.Event(), threading.Event()

    def held() -> Iterator[_Table]:
        try:
            waiting.set()
            while True:  # Ray's polling loop
                time.sleep(0.01)
            yield _Table()
        finally:
            deadline = time.monotonic() + 0.5  # the executor's join of its scheduling thread
            while time.monotonic() < deadline:
                time.sleep(0.01)
            cleaned.set()  # the operators' shutdown

    batches = _Batches(held())
    assert waiting.wait(10)
    assert batches.next(0.05) is None  # a bounded wait: nothing came
    batches.close()
    assert cleaned.is_set()
    assert not batches._thread.is_alive()
