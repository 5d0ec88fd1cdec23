"""One runner per job: an operating-system lock held for the whole run, and a lease in the state
file that names the holder and fences every write of the output.

`RunnerLock(state)`, used as a context manager around a run:

1. `flock` (exclusive, non-blocking) on `<state file>.lock`, a file beside the state file that is
   never deleted. The kernel releases it when the holder exits or dies, SIGKILL included, so a
   successor never waits for a timeout. A second `run` or `resume` gets `JobRunning`, naming the
   holder (pid, host, since when) from the lease.
2. The lease (`meta.runner`): a random token with the holder's pid, host, start and last renewal.
   Taking the lock writes it; every commit of output lines checks it in the same transaction
   (`fence`) before anything is appended, and renews it. The flock is the guarantee on a local
   file system; the lease covers what a flock cannot see: a lock file deleted or replaced under
   a running job, or a state file on a network file system whose locks do not reach the other
   host. A lease held by a process that is gone (same host, no such pid) or not renewed for
   `LEASE_SECONDS` is taken over; a holder whose lease was taken over is stopped by `fence` at
   its next commit, before it writes a byte (`JobRunning`).

What this does not do: fence writes made by hand, or by a process that ignores the lock (an old
version of the SDK); and with a lease but no working flock (a network file system), two runners
that start within the same instant could both see no lease: the second is stopped at its first
commit, after at most one batch of requests sent twice.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sqlite3
import stat
import time
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk._files import NOT_PERMITTED
from sdk._files import process_alive
from sdk._files import try_lock as _try_lock
from sdk._files import unlock as _unlock
from sdk._sqlite import unwritable_because
from sdk.batch._errors import BatchError
from sdk.batch._errors import JobRunning
from sdk.batch._output import refuse_dangling_link
from sdk.batch._state import JobState

__all__ = [
    "LEASE_SECONDS",
    "Holder",
    "RunnerLock",
    "lock_path",
    "refuse_unusable_lock",
    "running_holder",
]

LEASE_SECONDS = 60.0
"""A lease not renewed for this long is taken over (its holder renews it every few seconds)."""

_RENEW_EVERY = 5.0

_PROBE_WAIT = 0.25
"""How long a runner tries the lock before a live lease refuses it: `status` holds the lock
(shared) for an instant, a runner for its whole run (`RunnerLock._lock_or_holder`)."""

_LEASE_WAIT = 0.5
"""How much longer a runner tries the lock while no live lease names its holder: a runner
writes its lease just after taking the lock, and `status` probes (shared, an instant each)
from several processes may hold it by turns for a while (`RunnerLock._lock_or_holder`)."""

_TRY_EVERY = 0.005
"""How often a runner tries the lock while it waits (`RunnerLock._lock_or_holder`)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who runs a job: the lease as stored (`meta.runner`)."""

    token: str
    """The lease's fencing token: a holder that finds another token has lost the job."""
    pid: int
    """The holder's process id."""
    host: str
    """The machine it runs on."""
    since: float
    """When it took the job (seconds since the epoch)."""
    renewed: float
    """When it last renewed the lease."""
    in_flight: int = 0
    """Items running in the holder at its last renewal (the local backend's calls)."""

    def describe(self) -> str:
        """`pid 4242 on host-1 since 2025-05-01 10:42:07`."""
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on {self.host} since {started}"

    @staticmethod
    def stored(value: Any) -> Holder | None:
        """The lease in `meta.runner`, or `None` (none, or unreadable)."""
        if not isinstance(value, dict):
            return None
        try:
            return Holder(**value)
        except TypeError:
            return None


_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
"""Refuse a symbolic link at the lock's path (where the system has the flag)."""

_NO_WAIT = getattr(os, "O_NONBLOCK", 0)
"""Open a named pipe at the lock's path without waiting for its other end (then refused)."""


def lock_path(state: str | Path) -> Path:
    """The lock file of the job whose state file is `state`."""
    path = Path(state)
    return path.with_name(path.name + ".lock")


class RunnerLock:
    """The run's lock and lease (module docstring): `acquire`, `fence` in each commit, `renew`
    while waiting, `release` (or use it as a context manager)."""

    def __init__(self, state: JobState) -> None:
        self.state = state
        self.path = lock_path(state.path)
        self.token = secrets.token_hex(8)
        self.holder: Holder | None = None
        self.replaced: Holder | None = None
        """The lease this runner took over (abandoned: its holder gone or not renewing)."""
        self._fd: int | None = None
        self._renewed = 0.0

    def __enter__(self) -> RunnerLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock and the lease, or raise `JobRunning` naming who has them."""
        # What is at the lock's path is checked before it is opened (`refuse_unusable_lock`:
        # a link, dangling or not, a folder, a named pipe, another user's file), and what was
        # opened is checked again (one put there in between).
        refuse_unusable_lock(self.state.path)
        try:
            # (O_NONBLOCK: a named pipe put there in between is not waited on; it is refused)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _NO_FOLLOW | _NO_WAIT, 0o600)
        except OSError as error:
            refuse_unusable_lock(self.state.path)  # (a link or a folder put there in between)
            if error.errno in NOT_PERMITTED:
                raise BatchError(unwritable(self.state.path, self.path, error)) from None
            raise
        try:
            _refuse_found(self.path, os.fstat(fd), self.state.path)
            locked, holder = self._lock_or_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        if not locked:
            os.close(fd)
            raise JobRunning(self._running_message(holder))
        self._fd = fd
        try:
            self._take_lease()
        except BaseException:
            self._unlock()
            raise

    def _lock_or_holder(self, fd: int) -> tuple[bool, Holder | None]:
        """The exclusive lock on `fd`, tried every few milliseconds: `(True, None)` once taken;
        `(False, holder)` when a live lease names the process holding it after `_PROBE_WAIT`
        seconds (a runner holds the lock for its whole run); `(False, None)` (\"starting\")
        when none does after `_LEASE_WAIT` seconds more. Until then the holder may be `status`
        probes (each holds the lock, shared, for an instant, and several by turns may hold it
        for a while), or a runner about to write its lease, or one whose lease is still that of
        a process that is gone (killed -9, say): a refusal never names a process that is gone."""
        began = time.monotonic()
        while not _try_lock(fd, exclusive=True):
            waited = time.monotonic() - began
            if waited >= _PROBE_WAIT:
                current = self._stored()
                if current is not None and not _gone(current):
                    return False, current
                if waited >= _PROBE_WAIT + _LEASE_WAIT:
                    return False, None
            time.sleep(_TRY_EVERY)
        return True, None

    def _take_lease(self) -> None:
        now = time.time()
        mine = Holder(self.token, os.getpid(), socket.gethostname(), now, now)
        with self.state.transaction() as db:
            current = self._stored()
            if current is not None and not _abandoned(current, now):
                raise JobRunning(self._running_message(current))
            self.state.put("runner", asdict(mine), db)
        self.holder, self.replaced = mine, current
        self._renewed = now

    def fence(self, db: sqlite3.Connection, in_flight: int | None = None) -> None:
        """Inside a commit's transaction: `JobRunning` if the lease is no longer this runner's
        (nothing of the commit is written then); else renew it."""
        if self.holder is None:
            raise JobRunning("this process does not hold the job's lock")
        current = self._stored()
        if current is None or current.token != self.token:
            raise JobRunning(
                "another process took the job over"
                + (f" ({current.describe()})" if current is not None else "")
                + "; this one stopped before writing"
            )
        self._write(db, in_flight)

    def renew(self, in_flight: int | None = None, *, force: bool = False) -> None:
        """Renew the lease (its own transaction) if it is a few seconds old, or `force`."""
        if self.holder is None or (not force and time.time() - self._renewed < _RENEW_EVERY):
            return
        with self.state.transaction() as db:
            self.fence(db, in_flight)

    def _write(self, db: sqlite3.Connection, in_flight: int | None) -> None:
        assert self.holder is not None
        now = time.time()
        count = self.holder.in_flight if in_flight is None else in_flight
        self.holder = Holder(**{**asdict(self.holder), "renewed": now, "in_flight": count})
        self.state.put("runner", asdict(self.holder), db)
        self._renewed = now

    def give_back(self) -> None:
        """Put back the lease this runner took over (`replaced`), before it wrote anything: its
        holder, if it goes on, finds its own lease at its next commit. This runner holds the
        lease no more (`release` then only unlocks)."""
        if self.holder is None or self.replaced is None:
            return
        with self.state.transaction() as db:
            current = self._stored()
            if current is not None and current.token == self.token:
                self.state.put("runner", asdict(self.replaced), db)
        self.holder = None

    def stopped_holder(self) -> Holder | None:
        """The holder of the lease this runner took over if it is alive on this host (its lease
        not renewed for `LEASE_SECONDS`: a process stopped or frozen, not gone)."""
        replaced = self.replaced
        if replaced is None or replaced.host != socket.gethostname() or replaced.pid == os.getpid():
            return None
        return replaced if process_alive(replaced.pid) else None

    def release(self) -> None:
        """Give the lease back (if still ours) and the lock."""
        if self._fd is None:
            return
        try:
            if self.holder is not None:
                with contextlib.suppress(sqlite3.Error), self.state.transaction() as db:
                    current = self._stored()
                    if current is not None and current.token == self.token:
                        db.execute("DELETE FROM meta WHERE key = 'runner'")
        finally:
            self.holder = None
            self._unlock()

    def _unlock(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                _unlock(self._fd)
            os.close(self._fd)
            self._fd = None

    def _stored(self) -> Holder | None:
        return Holder.stored(self.state.get("runner"))

    def _running_message(self, holder: Holder | None) -> str:
        who = holder.describe() if holder is not None else "another process (starting)"
        return (
            f"the job in {self.state.path} is running: {who}; wait for it to end, or stop it "
            f"with `sdk batch cancel --state {self.state.path}`"
        )


def running_holder(state: JobState) -> Holder | None:
    """The process running the job now, or `None`: its lock file is locked (probed without
    creating or changing anything) and the lease names it, or, with or without a lock file
    here, the lease is one a runner would not take over (not `_abandoned`: renewed within
    `LEASE_SECONDS`, and on this host its process alive). For `status` and `cancel`."""
    try:
        # (O_NONBLOCK: a named pipe put at the lock's path would wait for a writer for ever)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | _NO_FOLLOW
        fd = os.open(lock_path(state.path), flags)
    except OSError:
        # Never run with a lock here, or its lock file deleted under a runner (whose lease,
        # below, still names it: on another host, or on this one); or a link there, which a
        # runner refuses.
        held = False
    else:
        try:
            # (a lock file of another user than the state file's, this process's or root's is
            # not the job's: a runner refuses it, so whoever holds it does not run the job; root
            # may run a user's job, making the lock file its own; nor is a folder or a named
            # pipe, which a runner refuses too)
            found = os.fstat(fd)
            owners = (_owner(state.path), os.geteuid(), 0)
            ours = stat.S_ISREG(found.st_mode) and found.st_uid in owners
            held = ours and not _try_lock(fd, exclusive=False)
            if not held:
                with contextlib.suppress(OSError):
                    _unlock(fd)
        finally:
            os.close(fd)
    holder = Holder.stored(state.get("runner"))
    if held:
        if holder is not None and not _gone(holder):
            return holder
        # A lease of a process that is gone (killed -9, say): the runner holding the lock now
        # writes its own just after taking it; until then it is one unnamed (as for a refused
        # runner, `RunnerLock._lock_or_holder`), never the process that is gone.
        return Holder("", 0, "?", time.time(), time.time())
    if holder is not None and not _abandoned(holder, time.time()):
        return holder  # a lease without the lock: a runner on a host our lock does not reach
    return None


def refuse_unusable_lock(state: Path) -> None:
    """`BatchError` if what is at the lock file's path of the job in `state` is not one it may
    lock (`_refuse_found`): a symbolic link (dangling or not), a folder, a named pipe or another
    file that is not a regular one, or another user's file. Nothing is made or changed: said by
    `RunnerLock.acquire` before it opens the lock file, and by `BatchJob.create` before a new
    job's state file is made (which a refusal after it would leave behind)."""
    path = lock_path(state)
    # A link planted at the lock's path whose target does not exist would have the job create
    # an empty file wherever it points (or fail with a bare `[Errno 2]`); so would one in the
    # folders above it.
    refuse_dangling_link(path)
    try:
        found = os.lstat(path)
    except OSError:
        return  # (none yet: the run makes it)
    _refuse_found(path, found, state)


_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


def _refuse_found(path: Path, found: os.stat_result, state: Path) -> None:
    """`BatchError` if what is at `path` (`found`, its `lstat` or the `fstat` of what was
    opened there) is not the lock file of the job in `state`: a link, a file that is not a
    regular one, or another user's file. The one place of these checks."""
    if stat.S_ISLNK(found.st_mode):
        # (one to a file that exists: the job would lock, and hold open for writing, a file
        # that is not its own)
        raise BatchError(
            f"{path} is a symbolic link to {os.readlink(path)}: a job's lock file is its own, "
            "and a job does not lock a file through a link; remove the link"
        )
    if not stat.S_ISREG(found.st_mode):
        # (a named pipe would be opened and locked as if a file: a job that cannot run
        # anywhere else locked by whoever holds it; a folder failed with a bare `[Errno 21]`)
        kind = _KINDS.get(stat.S_IFMT(found.st_mode), "a special file")
        raise BatchError(
            f"{path} is {kind}, not a file: a job locks only a file of its own, so it does "
            "not run on this; remove it, or give another --state"
        )
    owner = found.st_uid
    if owner not in (os.geteuid(), _owner(state)):
        # Another user's file (planted in a shared folder): whoever holds it would hold the job
        # for ever, and be taken for a runner of the job. (The state file's owner's is the
        # job's: root resuming a user's job takes their lock file.)
        raise BatchError(
            f"{path} is a lock file of another user (uid {owner}): a job locks only a file of "
            "its own, so it does not run on theirs; remove it, or give another --state"
        )


def unwritable(state: Path, path: Path, error: OSError) -> str:
    """The refusal of a job whose lock file `path` this process cannot make or open for writing
    (its folder, or the file, cannot be written by it)."""
    why = unwritable_because(path) or (  # (what `os.access` allows, the open refused)
        "the file cannot be written by this process (another user's, or read-only)"
    )
    return (
        f"{path} cannot be made or opened ({error.strerror or error}): {why}, so the job in "
        f"{state} cannot be run from here; `sdk batch status --state {state}` (in Python, "
        "`sdk.batch.job_summary()`) reads it"
    )


def _abandoned(holder: Holder, now: float) -> bool:
    """Whether a lease may be taken over: its holder is gone (same host, no such process) or it
    was not renewed for `LEASE_SECONDS`."""
    return now - holder.renewed >= LEASE_SECONDS or _gone(holder)


def _owner(path: Path) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def _gone(holder: Holder) -> bool:
    """Whether the lease's holder is known to be gone: on this host, and no such process."""
    return holder.host == socket.gethostname() and not process_alive(holder.pid)
