"""Entries a `SQLiteCache` read from its file, held in memory while no process writes the file.

A hit on an entry read before is served from memory, judged again as every hit is, without a
statement to SQLite or decoding the entry again: the kernel tells of every write to the file and
to its write-ahead log (`sdk._changes`), and the entries held are dropped at the first one, by
whichever process (a `put`, a `clear`, an expired entry deleted, this store's own counts). So a
held entry is served only while the file holds exactly it: a lookup then finds what reading the
file would find.

A commit is told of before it is visible: SQLite writes it to the log (the kernel's notice queued
then), syncs the log (`synchronous=FULL`, SQLite's default for any other program writing the
file, takes milliseconds), and only then marks it in the log's index (`-shm`, shared memory: no
notice). A read in between finds the file as it was before the commit, after its notice was
taken: held, it would be served after the commit returned. A writer holds the log's write lock
(a byte of the index) from before it writes to after the commit is visible, so a lookup that
reads the file holds what it read only if no connection of any process (this one's too) held
that lock after the lookup took the notices (`settled`: the kernel's test of a lock through an
open file description, which sees every process's locks and takes none).

Held per store, shared by its threads, at most `MAX_ENTRIES` entries and `MAX_TEXT` characters
of stored text (the oldest go first). Where changes cannot be told (not Linux, the user's inotify
limits reached, a store opened read-only), nothing is held: every lookup reads the file.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from sdk import _changes
from sdk import _fork
from sdk.cache._entry import Entry

__all__ = ["MAX_ENTRIES", "MAX_TEXT", "Generation", "Held", "HeldEntries"]

MAX_ENTRIES = 1024
"""The most entries a store holds in memory."""
MAX_TEXT = 4 * 1024 * 1024
"""The most characters of stored text (the entries' JSON) a store holds in memory."""
_RETRY_SPACING = 1.0
"""Seconds before watching is tried again after it could not be (a file missing for a moment)."""
_WAL_WRITE_LOCK = 120
"""The byte of a write-ahead log's index (the `-shm` file) a writer holds locked from before it
writes a commit to the log until the commit is visible (SQLite's WAL format: WAL_WRITE_LOCK)."""
_FLOCK = struct.Struct("hhqqi")
"""`struct flock`: the lock's type, whence, start, length, and the process holding it."""


@dataclass(frozen=True, slots=True)
class Held:
    """An entry read from the file, with what the lookup that read it saw beside it."""

    entry: Entry
    expires: float | int | None
    """When it expires (`time.time()` seconds; `None`: never), checked at every hit."""
    clears: int | None
    """The file's count of clears when it was read (what its hits are counted against)."""
    size: int
    """Characters of its stored text (what `MAX_TEXT` bounds)."""


class Generation:
    """The entries held since the watch's `changes` were `changes`: dropped whole (a new
    generation) at the next change."""

    __slots__ = ("changes", "entries", "size", "watch")

    def __init__(self, watch: _changes.Watch | None, changes: int) -> None:
        self.watch = watch
        self.changes = changes
        self.entries: dict[str, Held] = {}
        self.size = 0


class HeldEntries:
    """The entries a store holds for its file at `path` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = _fork.lock()
        self._watch: _changes.Watch | None = None
        self._generation = Generation(None, -1)
        self._retry_at = 0.0
        self._index: str | None = None  # (the write-ahead log's index, named when watched)
        self._file: FileIdentity | None = None
        """The device and inode of the file first watched: a store's connections stay on the
        file they opened, so once the path names another file (deleted and made again,
        replaced by a rename, or a symbolic link on the way to it re-pointed: the links are
        watched too) nothing is held until the store is closed."""

    def current(self, reads: FileIdentity | None) -> Generation | None:
        """The generation held now, after taking the notices of changes queued, for a caller
        whose connection reads the file `reads` (`file_identity`, taken as it opened): `None`
        where changes cannot be told, or where that is not the file watched (a connection
        opened before a link on the way was re-pointed, or a folder on the way replaced, reads
        another file than the path names now). Call it before reading the file, and `keep` what
        the read found in it (a change made meanwhile drops it at the next `current`)."""
        watch = self._watch
        if watch is None or watch.lost:
            watch = self._watched()
            if watch is None:
                return None
        if reads is None or reads != self._file:
            return None
        if not _changes.drain():
            return None  # (changes not known now: read, and nothing held from it)
        generation = self._generation
        if generation.watch is not watch or generation.changes != watch.changes:
            generation = self._generation = Generation(watch, watch.changes)
        return generation

    def settled(self, generation: Generation | None) -> Generation | None:
        """`generation` if what a read of the file finds from now may be held in it, `None`
        if not: a write is being committed (its notice may be taken already, but not what it
        wrote: see the module docstring). Call it after `current`, before reading the file."""
        index = self._index
        if generation is None or index is None or _committing(index):
            return None
        return generation

    def keep(self, generation: Generation, key: str, held: Held) -> None:
        """Hold `held`, read from the file after `generation` was current, under `key`."""
        if held.size > MAX_TEXT:
            return
        with self._lock:
            entries = generation.entries
            previous = entries.pop(key, None)
            if previous is not None:
                generation.size -= previous.size
            entries[key] = held
            generation.size += held.size
            while len(entries) > MAX_ENTRIES or generation.size > MAX_TEXT:
                oldest = next(iter(entries))
                generation.size -= entries.pop(oldest).size

    def release(self) -> None:
        """Hold nothing and stop watching (watched again at the next lookup)."""
        with self._lock:
            watch, self._watch = self._watch, None
            self._generation = Generation(None, -1)
            self._file = None
            self._retry_at = 0.0
        if watch is not None:
            _changes.unwatch(watch)

    def forget(self) -> None:
        """In a forked child, as it starts: nothing held (the parent's watch is lost with the
        parent's notices; a new one is made at the next lookup)."""
        self._watch = None
        self._generation = Generation(None, -1)
        self._retry_at = 0.0
        self._file = None

    def _watched(self) -> _changes.Watch | None:
        """A new watch over the file and its write-ahead log (the names SQLite gives them: the
        file's path with its links resolved), or `None` (tried again after `_RETRY_SPACING`)."""
        now = time.monotonic()
        if now < self._retry_at:
            return None
        with self._lock:
            previous, self._watch = self._watch, None
            if previous is not None:
                _changes.unwatch(previous)
            real = os.path.realpath(self._path)
            try:
                found = file_identity(real)
                links = _links_to(str(self._path))
            except OSError:
                found = None
            if found is None:
                self._retry_at = now + _RETRY_SPACING
                return None
            if self._file not in (None, found):
                # (another file at the path: held no more, see `_file`; not asked again at
                # each lookup, until `release`)
                self._retry_at = math.inf
                return None
            self._file = found
            # (the links on the way to it too: one re-pointed names another file, which the
            # connections opened since read, and `_file` is asked again)
            made = _changes.watch([real, f"{real}-wal"], links)
            self._index = f"{real}-shm"
            if made is None:
                self._retry_at = now + _RETRY_SPACING
            self._watch = made
            return made


FileIdentity = tuple[int, int]
"""A file's device and inode."""


def file_identity(path: str | os.PathLike[str]) -> FileIdentity | None:
    """The device and inode of the file `path` names now (its links followed), `None` if it
    cannot be told."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


_MOST_LINKS = 40
"""The most symbolic links followed on the way to a file (Linux's own bound)."""


def _links_to(path: str) -> list[str]:
    """The symbolic links that resolving the absolute `path` goes through, in order (as
    `os.path.realpath` follows them: a link's target read relative to its folder, `..` after
    the links before it); `OSError` if one cannot be read."""
    links: list[str] = []
    current = os.sep
    rest = path.split(os.sep)[::-1]  # (the names still to follow, the next last)
    while rest:
        name = rest.pop()
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        if len(links) < _MOST_LINKS and os.path.islink(candidate):
            links.append(candidate)
            target = os.readlink(candidate)
            if os.path.isabs(target):
                current = os.sep
            rest.extend(target.split(os.sep)[::-1])
        else:
            current = candidate
    return links


_indexes_lock = _fork.lock()
_indexes: dict[str, tuple[int, int, int]] = {}
"""The write-ahead logs' indexes asked about, by path: a descriptor kept open, with the file's
device and inode. Closing any descriptor of a file drops every lock this process holds on it
(POSIX locks: SQLite's own, on the same index): so one is kept open per index file for the life
of the process, closed only once the file is deleted (SQLite deletes it with the log when the
last connection of any process closes: no lock on it matters then)."""


def _forget_indexes() -> None:
    """In a forked child, as it starts: the parent's descriptors closed and forgotten. The
    child holds no lock yet (a fork copies none), so closing drops none; kept, their numbers
    would name other files once the child closed every descriptor (as a daemon does): asked
    of locks, or closed as deleted, under their new owner."""
    for fd, _device, _inode in _indexes.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _indexes.clear()


_fork.in_child(_forget_indexes)


def _committing(index: str) -> bool:
    """Whether a connection of any process (this one's too) holds the write lock in the
    write-ahead log's index at `index` now, or that cannot be told (no index: the file is not in
    WAL mode now, or is missing)."""
    import fcntl  # (Linux only: where changes are told)

    asked = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, _WAL_WRITE_LOCK, 1, 0).ljust(64, b"\0")
    with _indexes_lock:  # (no descriptor is closed while it is asked through)
        try:
            told = fcntl.fcntl(_opened(index), fcntl.F_OFD_GETLK, asked)
        except (OSError, AttributeError):  # (AttributeError: no `F_OFD_GETLK` in this Python)
            return True
    return bool(_FLOCK.unpack_from(told)[0] != fcntl.F_UNLCK)


def _opened(index: str) -> int:
    """A descriptor of the file now at `index` (under `_indexes_lock`; see `_indexes`)."""
    found = os.stat(index)
    kept = _indexes.get(index)
    if kept is not None and kept[1:] == (found.st_dev, found.st_ino):
        return kept[0]
    for path, (other, _device, _inode) in list(_indexes.items()):  # (a new one: those deleted
        if os.fstat(other).st_nlink == 0:  # since are closed, the process's use bounded by
            del _indexes[path]  # the index files that exist)
            os.close(other)
    fd = os.open(index, os.O_RDONLY | os.O_CLOEXEC)
    opened = os.fstat(fd)  # (the file opened, whatever was at the path when stat was asked)
    _indexes[index] = (fd, opened.st_dev, opened.st_ino)  # (one still named elsewhere, moved
    return fd  # there: left open)
