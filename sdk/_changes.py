"""Changes to files, as the kernel tells them (Linux's inotify): what lets a process keep in
memory what it read from a shared file, and know at the cost of one system call that no process
wrote the file since.

`watch(paths)` asks the kernel to tell of every change to the files at `paths` (a write, a
truncation, new times or permissions, a link made or removed, the file moved or deleted) and
returns a `Watch`: its `changes` count grows with every notice for any of its files (and at once
should the kernel's queue of notices overflow). `drain()` takes the notices queued so far: a
reader calls it, then compares `changes` with what it saw when it read.

Why that is exact: the kernel queues a write's notice inside the `write` call, before the call
returns, so before the writer's commit can be seen by anyone (SQLite makes a commit visible after
writing it); a reader that drains after a commit was made sees its notice. Not the converse: a
notice taken does not mean its commit is visible yet (SQLite syncs the log between the two), so
what a reader reads just after may be what the file held before it (`sdk.cache._held` holds no
read made while a write is being committed). Notices come from the
kernel of this machine, for writes made by its processes: a file on a network file system written
from another machine is not told of (SQLite's write-ahead log does not work across machines
either: every process sharing a cache file is on one machine).

One inotify instance per process (the kernel limits them per user), made when first asked for,
and again in a forked child (a child drains its own notices: two processes reading one queue
would each take the other's); every watch made before the fork is then lost (`Watch.lost`), and
its holder watches again. Where inotify is missing (not Linux) or refused (no instance or watch
left under the user's limits, no descriptor left in the process), `watch` returns `None`: the
holder reads the file each time, and asks again later (an instance refused is asked for again).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import logging
import os
import select
import struct
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from sdk import _fork

__all__ = ["LOCK_WAIT", "Watch", "drain", "unwatch", "watch"]

logger = logging.getLogger("sdk.changes")

# <sys/inotify.h>
_IN_MODIFY = 0x002  # written, truncated
_IN_ATTRIB = 0x004  # times, permissions, links
_IN_MOVE_SELF = 0x800
_IN_DELETE_SELF = 0x400
_IN_IGNORED = 0x8000  # the watch is gone (the file deleted, or the watch removed)
_IN_Q_OVERFLOW = 0x4000  # notices were lost: every watch is told
_IN_DONT_FOLLOW = 0x02000000  # (asked with a watch: the symbolic link itself, not its file)
_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_MOVE_SELF | _IN_DELETE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then `len` bytes of name)
_READ_SIZE = 64 * 1024
LOCK_WAIT = 1.0
"""The longest a lookup or a new watch waits for the notices' lock (held for microseconds,
but for what the cyclic collector runs inside it): past it the holder reads the file."""


class Watch:
    """The files of one holder: `changes` grows with every notice for any of them."""

    __slots__ = ("__weakref__", "_epoch", "_wds", "changes", "lost")

    def __init__(self, epoch: int, wds: tuple[int, ...]) -> None:
        self.changes = 0
        """How many notices were told for these files (a holder compares it with what it saw)."""
        self.lost = False
        """The watch no longer tells of every change (a file deleted, the process forked): the
        holder watches again."""
        self._epoch = epoch
        self._wds = wds


class _Notices:
    """The process's inotify instance, and who watches what (one, below)."""

    def __init__(self) -> None:
        self._lock = _fork.lock()
        self._fd: int | None = None
        self._made: tuple[int, int] | None = None  # (the instance's device and inode: `_take_all`)
        self._failed = False  # (inotify missing: not asked again in this process)
        self._epoch = 0
        self._watchers: dict[int, weakref.WeakSet[Watch]] = {}
        self._polls = threading.local()
        self._libc: Any = None
        self._unwatched: collections.deque[Watch] = collections.deque()
        """Watches given up and not yet released: `unwatch` never waits for the lock (a
        finalizer calls it as the cyclic collector frees a store, in whichever thread allocates,
        at times one inside this lock), so whoever holds it releases them (`_let_go`)."""

    def watch(self, paths: Sequence[str], links: Sequence[str] = ()) -> Watch | None:
        if not self._lock.acquire(timeout=LOCK_WAIT):
            return None  # (the holder reads the file meanwhile, and watches again later)
        try:
            fd = self._instance()
            if fd is None:
                return None
            wds: list[int] = []
            asked = [(path, _MASK) for path in paths]
            asked += [(link, _MASK | _IN_DONT_FOLLOW) for link in links]
            for path, mask in asked:
                wd = int(self._libc.inotify_add_watch(fd, os.fsencode(path), mask))
                if wd < 0:
                    code = ctypes.get_errno()
                    if code == errno.ENOSPC:  # (the user's limit of watches)
                        logger.debug("no inotify watch left for %s: read each time", path)
                    self._release(wds)
                    return None
                wds.append(wd)
            made = Watch(self._epoch, tuple(wds))
            for wd in wds:
                self._watchers.setdefault(wd, weakref.WeakSet()).add(made)
            return made
        finally:
            self._let_go()

    def unwatch(self, made: Watch) -> None:
        made.lost = True
        made.changes += 1
        self._unwatched.append(made)
        if self._lock.acquire(blocking=False):  # (else its holder releases it: `_unwatched`)
            self._let_go()

    def _let_go(self) -> None:
        """Release the watches given up, then the lock (held); again should one be given up
        as it is released and the lock be free."""
        while True:
            try:
                while self._unwatched:
                    made = self._unwatched.popleft()
                    if made._epoch == self._epoch:
                        for wd in made._wds:
                            watchers = self._watchers.get(wd)
                            if watchers is not None:
                                watchers.discard(made)
                        self._release(made._wds)
                    made._wds = ()
            finally:  # (released whatever happens, as `with` would)
                self._lock.release()
            if not self._unwatched or not self._lock.acquire(blocking=False):
                return

    def drain(self) -> bool:
        fd = self._fd
        if fd is None:  # (no instance: no watch to tell; a fork's are lost, and told so)
            return True
        polled: tuple[int, select.poll] | None = getattr(self._polls, "poll", None)
        if polled is None or polled[0] != self._epoch:  # (one per thread: a poll object
            poller = select.poll()  # refuses two threads polling it at once)
            poller.register(fd, select.POLLIN)
            polled = self._polls.poll = (self._epoch, poller)
        if not polled[1].poll(0):
            if self._lock.locked():  # another thread took the notices and is telling them:
                # wait until it has (a change it took was made before now)
                if not self._lock.acquire(timeout=LOCK_WAIT):
                    return False
                self._let_go()
            return True
        if not self._lock.acquire(timeout=LOCK_WAIT):
            return False
        try:
            self._read_all()
        finally:
            self._let_go()
        return True

    def _read_all(self) -> None:
        """Take every notice queued, telling each to its watches (under the lock). Notices
        read but not told (an exception between: Ctrl-C) would be lost: every watch is told
        then, as when the kernel's queue overflows."""
        try:
            self._take_all()
        except BaseException:
            self._tell_every()
            raise

    def _tell_every(self) -> None:
        for every in self._watchers.values():
            for told in every:
                told.changes += 1

    def _take_all(self) -> None:
        fd = self._fd
        if fd is None:
            return
        # Read only from the instance made: a number other code closed and gave to a pipe or a
        # file would have its bytes taken, and a blocking pipe read to its end would block.
        try:
            found = os.fstat(fd)
        except OSError:  # (closed under the SDK: `os.closerange`, a double close)
            self._lost_instance()
            return
        if (found.st_dev, found.st_ino) != self._made:
            self._lost_instance()
            return
        while True:
            try:
                data = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError:  # (closed under the SDK: `os.closerange`, a double close)
                self._lost_instance()
                return
            if not data:  # (an inotify descriptor never reads empty: its number names a file
                self._lost_instance()  # opened since it was closed, read to its end)
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + size
                if mask & _IN_Q_OVERFLOW:
                    self._tell_every()
                    continue
                watchers = self._watchers.get(wd)
                if watchers is None:
                    continue
                for told in watchers:
                    told.changes += 1
                    if mask & (_IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ATTRIB):
                        told.lost = True
                if mask & _IN_IGNORED:
                    del self._watchers[wd]

    def _instance(self) -> int | None:
        if self._fd is not None or self._failed:
            return self._fd
        if not sys.platform.startswith("linux"):
            self._failed = True
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        except (OSError, AttributeError):  # (a C library without inotify)
            self._failed = True
            return None
        if fd < 0:
            code = ctypes.get_errno()
            # Out of descriptors or instances for now (the process's `ulimit -n`, the user's
            # `max_user_instances`, memory): asked again at the holders' next try of a watch.
            self._failed = code not in (errno.EMFILE, errno.ENFILE, errno.ENOMEM)
            why = os.strerror(code)
            logger.debug("no inotify instance (%s): shared files read each time", why)
            return None
        made = os.fstat(fd)
        self._libc, self._fd, self._made = libc, fd, (made.st_dev, made.st_ino)
        return fd

    def _release(self, wds: Sequence[int]) -> None:
        """Remove the watches `wds` no one watches any more (under the lock)."""
        for wd in wds:
            if not self._watchers.get(wd):
                self._watchers.pop(wd, None)
                if self._fd is not None:
                    self._libc.inotify_rm_watch(self._fd, wd)  # (gone already: an error, ignored)

    def _lost_instance(self) -> None:
        """The instance's descriptor was closed by other code in this process (under the lock):
        its notices are lost, so every watch is (its holder watches again, through a new
        instance); the number is not closed here, as another file may have it now."""
        logger.warning(
            "the inotify descriptor %s was closed by other code: watching again", self._fd
        )
        self._fd = None
        self._forget_watches()

    def _forget_watches(self) -> None:
        for watchers in self._watchers.values():
            for told in watchers:
                told.lost = True
                told.changes += 1
        self._watchers = {}
        self._unwatched = collections.deque()
        self._epoch += 1
        self._polls = threading.local()

    def _restart(self) -> None:
        """In a forked child, as it starts: the parent's instance is closed here (its queue is
        the parent's), every watch lost; a new instance is made when one is asked for."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._forget_watches()


_notices = _Notices()
_fork.in_child(_notices._restart)


def watch(paths: Sequence[str], links: Sequence[str] = ()) -> Watch | None:
    """A watch over the files at `paths` (each must exist; see the module docstring), and over
    the symbolic links `links` themselves (one re-pointed, or removed, is a change), or `None`
    where changes cannot be told."""
    return _notices.watch(paths, links)


def unwatch(made: Watch) -> None:
    """Stop telling `made` of changes (its watches removed where no one else holds them, now or,
    if another thread holds the module's lock, as it lets go of it): never waits, so a
    finalizer may call it in any thread, at any point."""
    _notices.unwatch(made)


def drain() -> bool:
    """Take the notices queued so far, adding each to the `changes` of the watches it is for
    (one system call when there are none); `False` when that could not be done within
    `LOCK_WAIT` (another thread held the notices' lock: a finalizer run inside it by the
    cyclic collector may write a cache's counts), and nothing is known of the changes."""
    return _notices.drain()
