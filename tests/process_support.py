"""Helpers for tests that run children: a child's next output line, with a bound (`readline()`
on a pipe waits for as long as the child stays alive and silent, so a test waiting for a line
waits here instead), and a child that Ctrl-C reaches however the test run was started."""

from __future__ import annotations

import queue
import signal
import threading
from typing import IO
from typing import AnyStr

__all__ = ["LINE_TIMEOUT", "interruptible", "read_line"]

LINE_TIMEOUT = 120.0


def interruptible() -> None:
    """A `preexec_fn` for a child the test will give Ctrl-C (SIGINT): a shell without job control
    starts background commands (`make test &`, `nohup`) with SIGINT ignored, and an ignored
    signal stays ignored across exec, so the child would never see it. Default it, so the
    child's Python installs its KeyboardInterrupt handler as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
