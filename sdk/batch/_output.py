"""The output file: JSON lines appended per chunk, under a commit protocol a crash cannot corrupt.

Why not a temporary file and a rename per chunk: the output is one file that grows to millions
of lines, and replacing it whole for each chunk would copy it each time (quadratic). Instead:

1. a chunk's lines are appended with one `write`, then flushed and fsynced;
2. then, in one SQLite transaction, the items are marked done *and* the output's committed
   length (`meta.out_length`) is moved to the new end of the file;
3. on opening (every run and resume), the file is cut back to the committed length.

A crash during 1 leaves a torn tail past the committed length; a crash between 1 and 2 leaves
whole lines whose items are not marked done. Either way step 3 removes those bytes, and the
items, still not done, are collected again and appended once. Bytes up to the committed length
are never rewritten. A reader that opens the file while the job runs may see an uncommitted
tail; the file is final once the job has ended. Only the job's runner (the holder of its lock,
`sdk.batch._lock`) opens the file to write, and it appends only after checking its lease. A new
output file is its owner's only (0600): it holds the model's outputs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sdk._files import sync_folder
from sdk.batch._errors import JobMismatch

__all__ = ["OutputLog"]


class OutputLog:
    """The job's output file, cut back to its committed length when opened."""

    def __init__(self, path: Path, committed: int) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        exists = path.exists()
        if not exists and committed > 0:
            raise JobMismatch(f"{path} is missing but the job has written {committed} bytes to it")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        size = os.fstat(self._fd).st_size
        if size < committed:
            os.close(self._fd)
            raise JobMismatch(
                f"{path} is shorter ({size} bytes) than what the job committed to it "
                f"({committed} bytes): it is not this job's output"
            )
        if size > committed:
            os.ftruncate(self._fd, committed)  # an uncommitted tail from an interrupted run
            os.fsync(self._fd)
        if not exists:
            sync_folder(path.parent)
        self.length = committed

    def append(self, lines: Sequence[bytes]) -> int:
        """Append whole lines (each ending in a newline), durably; the new length. The caller
        commits that length with the items the lines are for."""
        if not lines:
            return self.length
        data = b"".join(lines)
        written = os.pwrite(self._fd, data, self.length)
        while written < len(data):  # a short write (a signal, a full pipe): write the rest
            written += os.pwrite(self._fd, data[written:], self.length + written)
        os.fsync(self._fd)
        self.length += len(data)
        return self.length

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)

