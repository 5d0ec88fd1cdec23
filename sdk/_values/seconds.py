"""Waits and time limits in seconds, declared once, below every module that sets one (the
engine's deadlines and backoff, the providers' timeouts, a batch's time limit)."""

from __future__ import annotations

from typing import Annotated

from sdk._values.declared import AtLeast
from sdk._values.declared import Between
from sdk._values.declared import Positive

__all__ = ["INTERVAL", "LONGEST_INTERVAL", "LONGEST_WAIT", "SECONDS", "WAIT"]

LONGEST_WAIT = 7 * 24 * 3600.0
"""The longest wait a setting may ask for, in seconds (a week, as a batch's time limit): a
socket's or a lock's timeout, or a sleep, past about 9.2e9 s overflows the platform's clock
(`OverflowError`), so a deadline or a backoff is bounded where it is set."""
WAIT = Annotated[float, AtLeast(0), Between(0, LONGEST_WAIT)]
"""A wait in seconds: from 0 to `LONGEST_WAIT`."""
SECONDS = Annotated[float, Positive(), Between(0, LONGEST_WAIT)]
"""A time limit in seconds: more than 0, at most `LONGEST_WAIT` (a socket's timeout, a
batch's)."""
LONGEST_INTERVAL = 24 * 3600.0
"""The longest wait between two steps of a loop the SDK runs (a day: a hosted batch API ends or
expires a batch within one): looking at a hosted batch again, committing a job's finished
items, waiting for another connection's write to a cache file."""
INTERVAL = Annotated[float, Positive(), Between(0, LONGEST_INTERVAL)]
"""An interval in seconds: more than 0, at most `LONGEST_INTERVAL`."""
