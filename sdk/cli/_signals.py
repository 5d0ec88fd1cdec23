"""SIGTERM and SIGHUP taken as Ctrl-C by the commands that run long and resume (`sdk batch run`,
`resume`, `retry`; `sdk eval`): each stops as an interrupt does, saying how to go on, and exits
with 128 + the signal's number."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["STOP_SIGNALS", "stop_signals"]


STOP_SIGNALS = ("SIGTERM", "SIGHUP")
"""The signals that stop a long command as Ctrl-C does (`stop_signals`): what a redeploy sends
(`docker stop`, `systemctl stop`, Kubernetes), and what a closed terminal or SSH session sends."""


@contextmanager
def stop_signals() -> Iterator[list[int]]:
    """While a long command runs (a batch job, an eval): SIGTERM and SIGHUP stop it as Ctrl-C
    does, by the same path (the handler of SIGINT is called: asyncio's cancels the run, which
    commits what it received; elsewhere a `KeyboardInterrupt`); the list yielded gets the
    signal's number (the command exits with 128 + it). A signal the process ignores (`nohup`
    ignores SIGHUP) stays ignored. A second one while the command stops ends the process at
    once (the signal's default action: what was not committed yet runs again on resume). The
    handlers before are put back when the command ends."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # (only the main thread takes signals)
        return
    numbers = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]

    def stopping(number: int, frame: FrameType | None) -> None:
        received.append(number)
        for each in numbers:  # the next one ends the process at once
            if signal.getsignal(each) is stopping:
                signal.signal(each, signal.SIG_DFL)
        interrupt = signal.getsignal(signal.SIGINT)
        if not callable(interrupt):  # Ctrl-C ignored (a background job): stopped all the same
            interrupt = signal.default_int_handler
        interrupt(signal.SIGINT, frame)

    before = {number: signal.getsignal(number) for number in numbers}
    taken = [number for number, handler in before.items() if handler is not signal.SIG_IGN]
    for number in taken:
        signal.signal(number, stopping)
    try:
        yield received
    finally:
        for number in taken:
            handler = before[number]  # (`None`: not set from Python; the default then)
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
