"""Entries a `SQLiteCache` read from its file, held in memory while no process writes the file.

A hit on an entry read before is served from memory, judged again as every hit is, without a
statement to SQLite or decoding the entry again: the kernel tells of every write to the file and
to its write-ahead log (`sdk._changes`), and the entries held are dropped at the first one, by
whichever process (a `put`, a `clear`, an expired entry deleted, this store's own counts). So a
held entry is served only while the file holds exactly it: a lookup then finds what reading the
file would find.

Held per store, shared by its threads, at most `MAX_ENTRIES` entries and `MAX_TEXT` characters
of stored text (the oldest go first). Where changes cannot be told (not Linux, the user's inotify
limits reached, a store opened read-only), nothing is held: every lookup reads the file.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from sdk import _changes
from sdk import _fork
from sdk.cache._entry import Entry

__all__ = ["MAX_ENTRIES", "MAX_TEXT", "Generation", "Held", "HeldEntries"]

MAX_ENTRIES = 4096
"""The most entries a store holds in memory."""
MAX_TEXT = 16 * 1024 * 1024
"""The most characters of stored text (the entries' JSON) a store holds in memory."""
_RETRY_SPACING = 1.0
"""Seconds before watching is tried again after it could not be (a file missing for a moment)."""


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

    def current(self) -> Generation | None:
        """The generation held now, after taking the notices of changes queued (`None` where
        changes cannot be told): call it before reading the file, and `keep` what the read
        found in it (a change made meanwhile drops it at the next `current`)."""
        watch = self._watch
        if watch is None or watch.lost:
            watch = self._watched()
            if watch is None:
                return None
        _changes.drain()
        generation = self._generation
        if generation.watch is not watch or generation.changes != watch.changes:
            generation = self._generation = Generation(watch, watch.changes)
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
        if watch is not None:
            _changes.unwatch(watch)

    def forget(self) -> None:
        """In a forked child, as it starts: nothing held (the parent's watch is lost with the
        parent's notices; a new one is made at the next lookup)."""
        self._watch = None
        self._generation = Generation(None, -1)
        self._retry_at = 0.0

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
            made = _changes.watch([real, f"{real}-wal"])
            if made is None:
                self._retry_at = now + _RETRY_SPACING
            self._watch = made
            return made
