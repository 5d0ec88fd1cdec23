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
are never rewritten, but by a retry. A reader that opens the file while the job runs may see an
uncommitted tail; the file is final once the job has ended. Only the job's runner (the holder of
its lock, `sdk.batch._lock`) opens the file to write, and it appends only after checking its
lease. A new output file is its owner's only (0600): it holds the model's outputs.

A retry (`BatchJob.retry`) takes the lines of the items it runs again out of the file, so that
each item still has exactly one line once they are written again. The file is copied without
those lines into a temporary file beside it (`without_lines`, fsynced); then one transaction
puts the items back to pending, moves the committed length to the copy's and records the swap
(`meta.output_swap`); then the copy is renamed over the output and the record cleared. A crash
before the transaction leaves the job as it was (the copy is deleted when next seen); one after
it leaves the swap recorded, and `finish_swap` (run before the output is opened) completes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import stat
import tempfile
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sdk._files import private_folder
from sdk._files import sync_folder
from sdk.batch._errors import BatchError
from sdk.batch._errors import JobMismatch

__all__ = ["NOT_A_FILE", "OutputLog", "finish_swap", "without_lines"]


NOT_A_FILE = (
    "not a regular file (a pipe, a device, a folder): a job's output is a file it appends to "
    "and cuts back to what it committed on resume; give a file's path"
)


class OutputLog:
    """The job's output file, cut back to its committed length when opened.

    One job writes a file: the log holds an exclusive `flock` on it while open (another job
    over the same output, with a state file of its own, is refused: `BatchError`), and bytes
    past a committed length of 0 are cut only where the job has `claimed` the file before (an
    interrupted first chunk of its own): otherwise they are another job's lines
    (`JobMismatch`), never cut."""

    def __init__(self, path: Path, committed: int, *, claimed: bool = True) -> None:
        self.path = path
        exists = path.exists()
        if not exists and committed > 0:
            raise JobMismatch(f"{path} is missing but the job has written {committed} bytes to it")
        try:
            private_folder(path.parent)  # (it holds every answer, as the state file does)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise BatchError(
                f"{path}: the output cannot be opened to write ({error.strerror or error})"
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                raise BatchError(f"{path}: {NOT_A_FILE}")
            self._check(path, committed, claimed)
        except BaseException:
            os.close(self._fd)
            raise
        found = os.fstat(self._fd)
        size = found.st_size
        if exists and committed == 0 and found.st_uid == os.geteuid():
            # An empty file made beforehand (`touch`), adopted: it will hold every answer, so
            # it is the owner's only, as a file the job makes is.
            os.fchmod(self._fd, 0o600)
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

    def _check(self, path: Path, committed: int, claimed: bool) -> None:
        """Refuse a file another job writes now, or holds lines of that this job did not write."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BatchError(
                f"{path} is being written by another job (another state file over the same "
                "output): give each job its own output file"
            ) from None
        except OSError:  # a file system without locks (some network ones): the check below holds
            pass
        size = os.fstat(self._fd).st_size
        if committed == 0 and size > 0 and not claimed:
            raise JobMismatch(
                f"{path} holds {size:,} bytes this job did not write (another job's output?): "
                "give each job its own output file"
            )

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


def without_lines(
    path: Path, committed: int, dropped: Callable[[dict[str, Any]], bool]
) -> tuple[Path, int, int]:
    """A copy of the output's committed lines beside it, without those `dropped` says of (a
    line's record): the copy's path (owner-only, fsynced), its length and how many lines were
    left out. The output itself is not changed."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".retry", dir=path.parent)
    left_out = 0
    try:
        with os.fdopen(fd, "wb") as copy, open(path, "rb") as output:
            left, number = committed, 0
            while left > 0:
                line = output.readline(left)
                if not line:
                    break
                left, number = left - len(line), number + 1
                if dropped(_record(line, path, number)):
                    left_out += 1
                else:
                    copy.write(line)
            copy.flush()
            os.fsync(copy.fileno())
            length = copy.tell()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    sync_folder(path.parent)  # the copy's name survives a power cut before the state says "swap"
    return Path(name), length, left_out


def _record(line: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise JobMismatch(
            f"{path}:{number}: not an output line (a JSON object): not the job's output as "
            "committed"
        )
    return record


def finish_swap(path: Path, swap: dict[str, Any] | None) -> None:
    """Complete a recorded output swap (see the module docstring): rename the copy over the
    output if it is still there (a crash came between the commit and the rename)."""
    if swap:
        copy = Path(swap["copy"])
        if copy.exists():
            os.replace(copy, path)
            sync_folder(path.parent)
    for stray in path.parent.glob(f".{glob.escape(path.name)}.*.retry"):
        with contextlib.suppress(OSError):  # a copy a crash left before its swap was recorded
            stray.unlink()
