"""The batch package's errors (a leaf: every other batch module imports them from here)."""

from __future__ import annotations

__all__ = ["BatchError", "BatchInputError", "JobMismatch"]


class BatchError(Exception):
    """A batch job cannot go on: bad state, a backend that cannot run it, a job already ended."""


class BatchInputError(BatchError, ValueError):
    """A line of the input file is not a usable item (names the file, the line and why)."""


class JobMismatch(BatchError):
    """The state file is another job's: its contract, input or output differ from this one's."""
