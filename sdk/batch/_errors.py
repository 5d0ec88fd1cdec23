"""The batch package's errors (a leaf: every other batch module imports them from here)."""

from __future__ import annotations

__all__ = [
    "BatchError",
    "BatchInputError",
    "InputChanged",
    "JobMismatch",
    "JobRunning",
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


class JobRunning(BatchError):
    """Another process runs the job now (names its pid, host and since when)."""


class StateFileError(BatchError):
    """The state file cannot be used: damaged, another application's, or unreadable."""
