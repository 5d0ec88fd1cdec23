"""Writing files so that a reader never sees half of one.

Every file the SDK writes (schema snapshots, the lock file) goes through `write_atomic`: the bytes
go to a temporary file in the same folder, which is flushed, fsynced and renamed over the target.
A write cut short (a full disk, a file-size limit, a killed process) leaves the previous file as
it was; two writers at once each replace the file whole, so it is always one of theirs.

A read-modify-write of a shared file (the lock file that loose modules of one folder share) is
serialized across processes by `held_lock`, on the operating system's lock (`try_lock`), the
one a batch job's runner lock takes too.

A file someone names to be read (a dataset, a schema, a lock, a grammar, a case file) is read
through `open_regular` / `read_regular`, which read only a regular file: a named pipe would
block the read until something writes to it, forever, and a device may never end.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from sdk import _fork

__all__ = [
    "NOT_PERMITTED",
    "NotARegularFile",
    "adopt_empty",
    "file_digest",
    "held_lock",
    "open_regular",
    "private_folder",
    "process_alive",
    "read_regular",
    "sync_folder",
    "try_lock",
    "unlock",
    "write_atomic",
]

NOT_PERMITTED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
"""The `errno`s of a file or folder this process may not write (its mode, its owner, or a
read-only file system): a refusal says why (`sdk._sqlite.unwritable_because`)."""


class NotARegularFile(OSError):
    """A file named to be read is a named pipe, a device or a socket (`open_regular`)."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for reading in binary, when it is a regular file. It is opened without
    waiting (`O_NONBLOCK`: opening a named pipe otherwise blocks until a writer comes; a regular
    file ignores it) and checked on the open file, before any read: a folder is an
    `IsADirectoryError`, anything else but a regular file a `NotARegularFile`, each an `OSError`
    naming `path` (the CLI's exit 2). A missing file is `FileNotFoundError`, as from `open`."""
    shown = os.fsdecode(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise IsADirectoryError(f"{shown} is a folder, not a file") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"{shown}: no such file") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{shown} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise NotARegularFile(
                f"{shown} is not a regular file (a named pipe, a device or a socket): give a file"
            )
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The whole content of the regular file `path` (`open_regular` says what is refused)."""
    with open_regular(path) as file:
        return file.read()


def read_regular_text(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of the regular file `path`: `read_regular`'s refusals, and a `ValueError`
    naming the file and the byte where it is not UTF-8."""
    data = read_regular(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        shown = os.fsdecode(path)
        raise ValueError(f"{shown}: not UTF-8 ({error.reason} at byte {error.start:,})") from None


def newlines_before(path: str | os.PathLike[str], offset: int) -> int:
    """How many newlines the first `offset` bytes of the file `path` hold (a line number less
    one: on the way to an error only), read in blocks."""
    count, left = 0, offset
    with open_regular(path) as file:
        while left > 0:
            block = file.read(min(left, 1 << 20))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count


def private_folder(folder: Path) -> None:
    """Make `folder` and any missing folder above it, each the owner's only (0700): files that
    hold prompts and answers live there (`mkdir(parents=True)` would make the parents with the
    default mode). A folder already there is left as it is."""
    missing = [folder, *folder.parents]
    missing = missing[: next((i for i, p in enumerate(missing) if p.is_dir()), len(missing))]
    for each in reversed(missing):
        try:
            each.mkdir(mode=0o700)
        except FileExistsError:
            if not each.is_dir():  # (a file in the way; a folder: another process made it)
                raise


def adopt_empty(file: int | Path) -> str | None:
    """Make the empty file `file` (a path, or a descriptor open on it), found where the SDK
    would make one (`touch`ed beforehand), the owner's only (0600), as a file the SDK makes is:
    it will hold answers. Else why it cannot be adopted: another user's file stays readable by
    them whatever its mode (and they may change it back), so it is refused, never filled. (No
    descriptor is opened on a path: closing one drops this process's POSIX locks on the file,
    SQLite's among them.)"""
    found = os.stat(file)
    if found.st_uid != os.geteuid():
        return (
            f"an empty file of another user (uid {found.st_uid}): the answers it would hold "
            "stay theirs to read, so it is not adopted; remove it, or give another path"
        )
    os.chmod(file, 0o600)
    return None


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, private: bool = False) -> None:
    """Replace `path` with `data` (text is written as UTF-8) all at once: a temporary file in
    the same folder, flushed, fsynced and renamed over it; the folder is created if missing.

    `private=True` (a file that holds prompts, documents or outputs): the file is the owner's
    only (0600) whatever it was before, and missing folders are made owner-only
    (`private_folder`)."""
    path = Path(path)
    if private:
        private_folder(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            # mkstemp makes the file private (0600): give it the target's mode, or the usual one.
            os.fchmod(file.fileno(), 0o600 if private else _mode_of(path))
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    sync_folder(path.parent)


def _mode_of(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o644


def process_alive(pid: int) -> bool:
    """Whether a process `pid` runs on this host (POSIX: signal 0; one of another user's is
    alive too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sync_folder(folder: Path) -> None:
    """Make a folder's entries durable (a file created or renamed in it).

    A rename or a new file is durable only once the folder's entry is on disk (POSIX; not on
    Windows, where this does nothing)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_digests: dict[str, tuple[tuple[int, int, int, int], str]] = {}
_digesting = _fork.lock()


def file_digest(path: str | os.PathLike[str]) -> str:
    """The sha256 hex of a file's bytes, read once per file and remembered by its path, size,
    inode, modification time and change time (a model file of hundreds of MB is read once per
    process, not once per call; a file replaced or changed since is read again)."""
    real = os.path.realpath(path)
    found = os.stat(real)
    # The change time too: a file rewritten in place at the same size can have its modification
    # time put back (`os.utime`, `cp -p`, `rsync -t`), its change time cannot (on Linux and
    # macOS the kernel sets it at every write, and at that `utime` itself; Windows gives the
    # creation time there, which tells nothing more), as `sdk.batch`'s `input_stat` reads it.
    identity = (found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino)
    known = _digests.get(real)
    if known is not None and known[0] == identity:
        return known[1]
    with _digesting:  # one reader at a time: two calls on a new file do not both read it
        known = _digests.get(real)
        if known is not None and known[0] == identity:
            return known[1]
        with open(real, "rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
        _digests[real] = (identity, digest)
    return digest


# The operating system's lock on an open file: `flock` (POSIX), or on Windows `msvcrt.locking`
# of its first byte (exclusive only: a probe takes it and gives it back). Released by the
# kernel when the holder exits or dies, SIGKILL included.
if sys.platform == "win32":
    import msvcrt

    def try_lock(fd: int, *, exclusive: bool) -> bool:
        """Take the lock on `fd` without waiting; False when another holds it."""
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def unlock(fd: int) -> None:
        """Give back the lock `try_lock` took."""
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def try_lock(fd: int, *, exclusive: bool) -> bool:
        """Take the lock on `fd` without waiting; False when another holds it."""
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock(fd: int) -> None:
        """Give back the lock `try_lock` took."""
        fcntl.flock(fd, fcntl.LOCK_UN)


_POLL_SECONDS = 0.01


@contextlib.contextmanager
def held_lock(folder: Path, *, wait: float = 30.0, busy: str = "") -> Iterator[None]:
    """Hold the exclusive operating-system lock on `folder` (which must exist) for the block,
    waiting for it at most `wait` seconds; then a `TimeoutError` saying `busy` (what holds
    it, what to do), or that the folder is locked.

    The lock is the folder's own (no lock file is left beside what it guards) and advisory: it
    serializes the processes that take it. Where the operating system cannot lock a folder
    (Windows, a network file system without locks) the block runs unlocked.
    """
    fd = _locked_folder(folder, wait, busy)
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                unlock(fd)
            os.close(fd)


def _locked_folder(folder: Path, wait: float, busy: str) -> int | None:
    """An open descriptor of `folder`, locked; None where folders cannot be locked."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a folder cannot be opened (Windows): unlocked
        return None
    deadline = time.monotonic() + wait
    try:
        while not try_lock(fd, exclusive=True):
            if time.monotonic() >= deadline:
                raise TimeoutError(busy or f"{folder} is locked by another process")
            time.sleep(_POLL_SECONDS)
    except TimeoutError:
        os.close(fd)
        raise
    except OSError:  # no locks on this file system: unlocked
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd
