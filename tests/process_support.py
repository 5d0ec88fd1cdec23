"""A child process's next output line, with a bound: `readline()` on a pipe waits for as long
as the child stays alive and silent, so a test waiting for a child's line waits here instead."""

from __future__ import annotations

import queue
import threading
from typing import IO
from typing import AnyStr

__all__ = ["LINE_TIMEOUT", "read_line"]

LINE_TIMEOUT = 120.0


def read_line(stream: IO[AnyStr], timeout: float = LINE_TIMEOUT) -> AnyStr:
    """The next line of `stream` (empty at its end); `AssertionError` after `timeout` seconds.

    The line is read in a daemon thread: after a timeout the test fails, and the caller's
    clean-up kills the child, which ends the read."""
    lines: queue.Queue[AnyStr] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no line from the child process in {timeout:g} s") from None
