"""Writing files so that a reader never sees half of one.

Every file the SDK writes (schema snapshots, the lock file) goes through `write_atomic`: the bytes
go to a temporary file in the same folder, which is flushed, fsynced and renamed over the target.
A write cut short (a full disk, a file-size limit, a killed process) leaves the previous file as
it was; two writers at once each replace the file whole, so it is always one of theirs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from sdk import _fork

__all__ = ["file_digest", "private_folder", "sync_folder", "write_atomic"]


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


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace `path` with `data` (text is written as UTF-8) all at once: a temporary file in
    the same folder, flushed, fsynced and renamed over it; the folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            # mkstemp makes the file private (0600): give it the target's mode, or the usual one.
            os.fchmod(file.fileno(), _mode_of(path))
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


_digests: dict[str, tuple[tuple[int, int, int], str]] = {}
_digesting = _fork.lock()


def file_digest(path: str | os.PathLike[str]) -> str:
    """The sha256 hex of a file's bytes, read once per file and remembered by its path, size,
    inode and modification time (a model file of hundreds of MB is read once per process, not
    once per call; a file replaced or changed since is read again)."""
    real = os.path.realpath(path)
    found = os.stat(real)
    identity = (found.st_size, found.st_mtime_ns, found.st_ino)
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
