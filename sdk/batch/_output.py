"""The output file: JSON lines appended per chunk, under a commit protocol a crash cannot corrupt.

Why not a temporary file and a rename per chunk: the output is one file that grows to millions
of lines, and replacing it whole for each chunk would copy it each time (quadratic). Instead:

1. a chunk's lines are appended with one `write`, then flushed and fsynced;
2. then, in one SQLite transaction, the items are marked done *and* the output's committed
   length (`meta.out_length`) is moved to the new end of the file;
3. on opening (every run and resume), the file is cut back to the committed length.

A crash during 1 leaves a torn tail past the committed length; a crash between 1 and 2 leaves
whole lines whose items are not marked done. Either way step 3 removes those bytes, and the
items, still not done, are collected again and appended once. Step 3 cuts only such a tail
(`foreign_tail` tells it from lines the job did not write, which are refused and kept), and
while the file is open the job checks before each append, and at each tick, that it is still
the file it holds, as it left it (`OutputLog.check`). Bytes up to the committed length
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
from typing import BinaryIO

from sdk._files import adopt_empty
from sdk._files import newlines_before
from sdk._files import private_folder
from sdk._files import sync_folder
from sdk.batch._errors import BatchError
from sdk.batch._errors import JobMismatch
from sdk.batch._errors import OutputChanged

__all__ = [
    "NOT_A_FILE",
    "OutputHeld",
    "OutputLog",
    "finish_swap",
    "foreign_tail",
    "output_held",
    "refuse_dangling_link",
    "without_lines",
]


NOT_A_FILE = (
    "not a regular file (a pipe, a device, a folder): a job's output is a file it appends to "
    "and cuts back to what it committed on resume; give a file's path"
)


class OutputHeld(BatchError):
    """The output is locked by another process (its `flock`): another job writes it, or this
    job's own runner, frozen past its lease (`BatchJob.run` tells the two apart)."""


def output_held(path: Path) -> bool:
    """Whether another process holds the output at `path` open to write it (its `flock`, as
    `OutputLog` takes it): asked before a run changes anything, where its own previous runner
    may be frozen with the file open. (A descriptor of the output, never of a SQLite file.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # (none there yet, or not to be opened: `OutputLog` says why)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: nothing to tell by
        return False
    finally:
        os.close(fd)  # (its lock, if taken, goes with it)
    return False


class OutputLog:
    """The job's output file, cut back to its committed length when opened.

    One job writes a file: the log holds an exclusive `flock` on it while open (another job
    over the same output, with a state file of its own, is refused: `BatchError`), and bytes
    past a committed length of 0 are cut only where the job has `claimed` the file before (an
    interrupted first chunk of its own): otherwise they are another job's lines
    (`JobMismatch`), never cut. Bytes past a committed length are cut only if they are the
    job's own uncommitted tail: whole lines `own` says are its (items it has not marked done)
    and at most a torn last line; anything else is refused (`OutputChanged`), never cut.

    While open, `check` (before every append, and at each of the running job's ticks) stops
    the job (`OutputChanged`) when the file is no longer as the job left it: another file at
    the path (moved, deleted, a copy saved over it), cut below the committed length (a log
    rotation's copytruncate, `: > out`), or longer than what the job wrote (another process
    appended): the job never writes into a file it does not hold whole. A deleted output's
    committed bytes are written back to the path from the file held open (`_written_back`).
    A write the file system refuses (disk full, a file size limit) is a `BatchError` naming
    the file.
    """

    def __init__(
        self,
        path: Path,
        committed: int,
        *,
        claimed: bool = True,
        own: Callable[[dict[str, Any]], bool] = lambda record: True,
    ) -> None:
        self.path = path
        refuse_dangling_link(path)
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
        if exists and committed == 0 and size == 0:
            # An empty file made beforehand (`touch`), adopted: it will hold every answer, so
            # it is the owner's only, as a file the job makes is (another user's: refused).
            refused = adopt_empty(self._fd)
            if refused is not None:
                os.close(self._fd)
                raise BatchError(f"{path} is {refused}")
        if size < committed:
            os.close(self._fd)
            raise JobMismatch(
                f"{path} is shorter ({size} bytes) than what the job committed to it "
                f"({committed} bytes): it is not this job's output"
            )
        if size > committed:
            try:
                foreign = foreign_tail(path, committed, own)
                if foreign is not None:
                    raise foreign
                os.ftruncate(self._fd, committed)  # the job's own tail from an interrupted run
                os.fsync(self._fd)
            except BaseException:
                os.close(self._fd)
                raise
        if not exists:
            sync_folder(path.parent)
        self.length = committed
        self._identity = (found.st_dev, found.st_ino)
        self._written = committed
        """Where the job's own bytes end: past `length` after an append whose commit failed."""

    def _check(self, path: Path, committed: int, claimed: bool) -> None:
        """Refuse a file another job writes now, or holds lines of that this job did not write."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputHeld(
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

    def check(self) -> None:
        """`OutputChanged` if the file is not as the job left it (see the class docstring): a
        `stat` of the path and of the open file, no read."""
        path, committed = self.path, self.length
        try:
            at_path = os.stat(path)
            held = os.fstat(self._fd)
        except FileNotFoundError:
            if self._written_back():
                raise OutputChanged(
                    f"{path} was deleted while the job ran: the job stopped without writing "
                    f"more, and wrote its {committed:,} committed bytes back to {path} from the "
                    "file it held open. `sdk batch resume` goes on"
                ) from None
            raise OutputChanged(
                f"{path} was deleted or moved away while the job ran: the job stopped without "
                f"writing more. Its {committed:,} committed bytes are in that file: put it back "
                "and `sdk batch resume` goes on (if it is lost, start a new job)"
            ) from None
        except OSError as error:
            raise BatchError(
                f"{path}: the output cannot be looked at ({error.strerror or error})"
            ) from None
        if (at_path.st_dev, at_path.st_ino) != self._identity:
            raise OutputChanged(
                f"{path} was replaced by another file while the job ran (moved, or a copy saved "
                "over it): the job stopped without writing to either. `sdk batch resume` goes "
                f"on over the file at the path if it starts with the job's {committed:,} "
                "committed bytes (put the job's own file back if not)"
            )
        if held.st_size < committed:
            raise OutputChanged(
                f"{path} was cut to {held.st_size:,} bytes while the job ran (a log rotation's "
                f"copytruncate, `: >`): the job had committed {committed:,} and stopped without "
                f"writing more. Put those bytes back (the rotated copy) and `sdk batch resume` "
                "goes on"
            )
        if held.st_size > max(self._written, committed):
            grown = held.st_size - max(self._written, committed)
            raise OutputChanged(
                f"{path} grew by {grown:,} bytes the job did not write while it ran (another "
                "process appended to it): the job stopped rather than write over them. Move "
                f"them out (keep the first {committed:,} bytes) and `sdk batch resume` goes on"
            )

    def _written_back(self) -> bool:
        """The output deleted (no name left on the file the job holds open: not moved away),
        its committed bytes written back to the path from the open file, as a new file made
        whole beside it and linked in only if the path is still free; whether they were. A
        file another process made at the path meanwhile is never replaced."""
        try:
            if os.fstat(self._fd).st_nlink != 0:
                return False  # moved away (its bytes are in it, wherever it is now)
            private_folder(self.path.parent)  # (a folder deleted with it: made again)
            fd, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        except OSError:
            return False
        try:
            copied = 0
            while copied < self.length:
                block = os.pread(self._fd, min(self.length - copied, 1 << 20), copied)
                if not block:
                    return False  # (shorter than committed: nothing whole to give back)
                copied += os.write(fd, block)
            os.fsync(fd)
            os.link(temporary, self.path)  # (fails if the path is taken: left as it is)
        except OSError:
            return False
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        sync_folder(self.path.parent)
        return True

    def append(self, lines: Sequence[bytes]) -> int:
        """Append whole lines (each ending in a newline), durably, after `check`ing the file;
        the new length. The caller commits that length with the items the lines are for. A
        write the file system refuses (disk full) is a `BatchError` naming the file: the
        caller's commit fails, and what was written is the job's own uncommitted tail."""
        if not lines:
            return self.length
        self.check()
        data = b"".join(lines)
        written = 0
        try:
            while written < len(data):  # a short write (a signal, a size limit): the rest
                written += os.pwrite(self._fd, data[written:], self.length + written)
            os.fsync(self._fd)
        except OSError as error:
            raise BatchError(
                f"{self.path}: the output cannot be written ({error.strerror or error}): the "
                "job stopped, every committed result kept; `sdk batch resume` goes on once it "
                "can be written"
            ) from None
        finally:
            self._written = max(self._written, self.length + written)
        self.length += len(data)
        return self.length

    def close(self) -> None:
        """Close the file, first cutting the job's own uncommitted tail (an append whose
        commit failed) if the file is still the one it holds, untouched by others."""
        with contextlib.suppress(OSError, BatchError):
            self.check()
            if os.fstat(self._fd).st_size > self.length:
                os.ftruncate(self._fd, self.length)
                os.fsync(self._fd)
        os.close(self._fd)


_OWN_START = b'{"id":'
"""How every line a job writes starts (`sdk.batch._outcome`: compact JSON, the id first)."""


def foreign_tail(
    path: Path, committed: int, own: Callable[[dict[str, Any]], bool]
) -> OutputChanged | None:
    """The error for bytes of `path` past `committed` that are not the job's own uncommitted
    tail, or `None` when they are: whole lines `own` says are the job's (a crash between an
    append and its commit), then at most a torn line (the start of one, or the zeros a file
    system shows for a write a crash cut short)."""
    with open(path, "rb") as file:
        file.seek(committed)
        number = 0
        while True:
            head = file.readline(len(_OWN_START))
            if not head:
                return None
            number += 1
            if head == _OWN_START:
                line = head + file.readline()
                why = _not_own(line, own)
                if why is None:
                    continue
                if not line.endswith(b"\n") and why == _NOT_JSON:
                    return None  # the last line, torn
            elif not head.endswith(b"\n") and _OWN_START.startswith(head):
                return None  # (shorter than a line's start: the end of the file) torn
            elif not head.strip(b"\0") and _zeros_to_end(file):
                return None
            else:
                why = "not one of the job's lines"
            break
    where = newlines_before(path, committed) + number
    return OutputChanged(
        f"{path}:{where}: past the {committed:,} bytes the job committed, a line it did not "
        f"write ({why}); a job never cuts lines it did not write. Move them out of the file "
        f"(keep its first {committed:,} bytes), then `sdk batch resume` goes on"
    )


_NOT_JSON = "not JSON"


def _not_own(line: bytes, own: Callable[[dict[str, Any]], bool]) -> str | None:
    """Why a whole line past the committed length is not the job's uncommitted line, or
    `None` if it is."""
    try:
        record = json.loads(line)
    except ValueError:
        return _NOT_JSON
    if not isinstance(record, dict):
        return "not a JSON object"
    if not own(record):
        named = json.dumps(record.get("id"), ensure_ascii=False)[:80]
        return f"item {named} is not one the job has still to write"
    return None


def _zeros_to_end(file: BinaryIO) -> bool:
    """Whether the rest of `file` is zero bytes only."""
    while block := file.read(1 << 20):
        if block.strip(b"\0"):
            return False
    return True


def refuse_dangling_link(path: Path) -> None:
    """`BatchError` if `path`, or the nearest part of it that exists, is a symbolic link whose
    target does not exist: following it would create files and folders wherever the link
    points (on a shared folder, wherever whoever planted it chose)."""
    for part in (path, *path.parents):
        if os.path.lexists(part):
            if part.is_symlink() and not part.exists():
                raise BatchError(
                    f"{path}: {part} is a symbolic link to {os.readlink(part)}, which does "
                    "not exist: a job does not create files or folders through a dangling "
                    "link; give a path that exists, or one without the link"
                )
            return


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
