"""The batch package's errors (a leaf: every other batch module imports them from here)."""

from __future__ import annotations

__all__ = [
    "BatchError",
    "BatchInputError",
    "InputChanged",
    "JobMismatch",
    "JobRunning",
    "OutputChanged",
    "StateFileError",
]


class BatchError(Exception):
    """A batch job cannot go on: bad state, a backend that cannot run it, a job already ended."""


class BatchInputError(BatchError, ValueError):
    """A line of the input file is not a usable item (names the file, the line and why)."""


class JobMismatch(BatchError):
    """The state file is another job's: its contract, input, output or settings differ."""


class InputChanged(JobMismatch):
    """The input file changed since the job indexed it (names the first changed line)."""


class OutputChanged(JobMismatch):
    """The job's output file is not as the job left it: cut, replaced, deleted or written by
    another process while it ran, or holding lines past what it committed that it did not
    write (names the file, what happened and how to go on)."""


class JobRunning(BatchError):
    """Another process runs the job now (names its pid, host and since when)."""


class StateFileError(BatchError):
    """The state file cannot be used: damaged, another application's, or unreadable."""
