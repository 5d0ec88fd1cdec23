"""Locks a forked child gets free, and what else a child starts afresh: the SDK's one fork handler.

A child made by `os.fork` (multiprocessing's "fork" start method, a worker pool) starts with a
copy of its parent's memory and only the thread that forked. A lock another thread of the parent
held at that moment is held in the child too, by a thread that does not exist there: the child's
first use of it would wait forever. So every lock the SDK makes comes from here (`lock`, `rlock`,
`condition`; tests/test_forks.py refuses any other): each is remembered weakly (it goes with its
owner) and, in a child, made free again as the child starts, before anything else runs there.

Free again in place (`_at_fork_reinit`, as CPython's own `threading`, `logging` and
`concurrent.futures` do it at a fork): the lock objects, and every name bound to them, stay what
they are, and using one costs what any lock costs.

What such a lock guarded may be half changed in the child (its holder stopped in the midst): the
SDK's locks guard memos (a miss in the child: computed again), a store's connection or entries
(opened again; an entry missing is a miss), or counts, which a child starts afresh anyway; a mark
that something is being done under the lock (a contract being widened, the provider modules being
loaded) is cleared in the child (`in_child`).

`after_fork(owner, reset)` and `in_child(reset)` name the rest a child starts afresh: `reset(owner)`
runs in a child as it starts, after every lock is free, while `owner` lives (a store's counts not
yet written are its parent's to write; its connections are its parent's); `reset()`, for a
module's state, in every child (what was being done under a lock when the parent forked: no one
is doing it in the child).

SQLite's own locks (its global mutexes: memory statistics, the list of file systems, the page
cache) cannot be freed so: a child forked while another thread was inside SQLite may inherit one
held, and its first SQLite use (`sqlite3.connect`) waits forever. So the SDK never forks while
one of its threads is inside SQLite: every SDK region that calls into SQLite is entered with
`with gate():` (tests/test_forks.py refuses an SQLite call outside one), and a fork first waits
until no other thread is inside one (new entries wait meanwhile, so the wait ends), at most
`GATE_BOUND` seconds; past it the fork goes on, and a warning names the risk. A thread that
forks from inside its own region does not wait for itself. SQLite used by other code (another
library, in another thread) is not the SDK's to hold back.
"""

from __future__ import annotations

import logging  # (first: its fork handler, registered at its import, runs after ours)
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any
from typing import Protocol
from typing import TypeVar
from typing import cast

__all__ = ["GATE_BOUND", "after_fork", "condition", "gate", "in_child", "inside", "lock", "rlock"]

logger = logging.getLogger("sdk.fork")

GATE_BOUND = 35.0
"""Seconds a fork waits for the SDK's threads to leave SQLite. The longest an SDK thread stays
inside SQLite by design is a wait for another connection's write, the busy timeout
(`sdk._sqlite.DEFAULT_TIMEOUT`, 30 s, for a cache and a job's state); a few seconds more let
such a wait end and its statement finish. A region that outlasts it (a larger timeout given to a
cache, a query the caller lets run longer, a thread stuck) does not hold the fork back forever."""

_T = TypeVar("_T")


class _Renewable(Protocol):
    def _at_fork_reinit(self) -> None: ...


_locks: weakref.WeakSet[_Renewable] = weakref.WeakSet()
_module_resets: list[Callable[[], None]] = []
_resets: dict[int, tuple[weakref.ref[Any], Callable[[Any], None]]] = {}
"""By the id of the weak reference to the owner (held here, so the id is no other's while the
entry is), which drops its entry when the owner goes."""


def lock() -> threading.Lock:
    """A `threading.Lock` that is free in a forked child."""
    made = threading.Lock()
    _locks.add(cast(_Renewable, made))
    return made


def rlock() -> threading.RLock:
    """A `threading.RLock` that is free (held by no one) in a forked child."""
    made = threading.RLock()
    _locks.add(cast(_Renewable, made))
    return made


def condition() -> threading.Condition:
    """A `threading.Condition` (over its own `RLock`) that is free, and waited on by no one, in
    a forked child."""
    made = threading.Condition()
    _locks.add(cast(_Renewable, made))
    return made


def after_fork(owner: _T, reset: Callable[[_T], None]) -> None:
    """Run `reset(owner)` in every child forked while `owner` lives (as the child starts, after
    every lock of this module is free; in the order given)."""
    held = weakref.ref(owner, _forget)
    _resets[id(held)] = (held, reset)


def in_child(reset: Callable[[], None]) -> None:
    """Run `reset()` in every child forked from now on (as the child starts, after every lock of
    this module is free, before the resets of `after_fork`; in the order given): a module's
    state."""
    _module_resets.append(reset)


def _forget(held: weakref.ref[Any]) -> None:
    _resets.pop(id(held), None)


# --- the fork gate: no fork while an SDK thread is inside SQLite ---
#
# Each thread has its own gate, a reentrant lock it holds while inside (entering costs a lock's
# acquire, no shared counter); a fork takes every thread's gate (waiting for those inside to
# leave; a thread whose gate is taken waits at its next entry), forks, and gives them back.

_gate_of = threading.local()
_gates: weakref.WeakSet[threading.RLock] = weakref.WeakSet()
"""Every thread's gate (going with its thread)."""
_registering = threading.Lock()
"""Held while a thread adds its gate, and by a fork from before it to after it (a thread's first
entry then waits for the fork, bounded by `GATE_BOUND`)."""
_taken: list[threading.RLock] = []
"""The gates the fork in progress holds."""
_forking = False
"""Whether a fork in progress holds `_registering` (and `_taken`)."""


def gate() -> threading.RLock:
    """The calling thread's fork gate: `with gate():` around every SDK region that calls into
    SQLite (reentrant; no fork happens while it is held, but by this thread)."""
    try:
        found: threading.RLock = _gate_of.gate
    except AttributeError:
        return _new_gate()
    return found


def _new_gate() -> threading.RLock:
    made = threading.RLock()
    with _registering:  # (held by a fork at most `GATE_BOUND` and the fork itself)
        _gates.add(made)
    _gate_of.gate = made
    return made


def inside() -> int:
    """How many threads other than the caller are inside a gated region now (for tests: the
    fork counts those it could not wait out itself)."""
    own = getattr(_gate_of, "gate", None)
    with _registering:  # (a set another thread adds to is not iterated)
        gates = list(_gates)
    count = 0
    for other in gates:
        if other is own or other in _taken:
            continue
        if other.acquire(blocking=False):
            other.release()
        else:
            count += 1
    return count


def _before_fork() -> None:
    """Wait (at most `GATE_BOUND` in all) until no other thread is inside a gated region, and
    keep every thread out until the fork is done."""
    global _forking
    deadline = time.monotonic() + GATE_BOUND
    if not _registering.acquire(timeout=GATE_BOUND):
        return  # (cannot happen: a thread holds it only to add its gate; the fork goes on)
    _forking = True
    left = 0
    for each in list(_gates):  # (the forking thread's own: reentrant, taken at once)
        if each.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            _taken.append(each)
        else:
            left += 1
    if left:
        logger.warning(
            "forking while %d thread(s) of this process stay inside an SDK SQLite call past "
            "%g s (sdk._fork.GATE_BOUND): the child may wait forever on its first SQLite use "
            "(SQLite's own locks can be copied held into it); fork before starting threads "
            "that use a cache or a job's state, or use the spawn or forkserver start method",
            left,
            GATE_BOUND,
        )


def _after_fork_in_parent() -> None:
    """The fork is done (or failed): every thread may enter again."""
    _open_gates()


def _open_gates() -> None:
    global _forking
    if not _forking:
        return  # (`_before_fork` took nothing)
    for each in _taken:
        each.release()
    _taken.clear()
    _forking = False
    _registering.release()


def _in_child() -> None:
    """In a forked child, as it starts (one thread, nothing else running yet)."""
    # The gates: those the fork took are this thread's to give back; any other was held by a
    # thread the child does not have (past the bound): free. Nobody is inside.
    own = getattr(_gate_of, "gate", None)  # (held by this thread only as it holds it)
    taken = {id(each) for each in _taken}
    for each in list(_gates):
        if each is not own and id(each) not in taken:
            each._at_fork_reinit()  # type: ignore[attr-defined]
    _open_gates()
    for made in list(_locks):
        made._at_fork_reinit()
    for module_reset in list(_module_resets):
        module_reset()
    for held, reset in list(_resets.values()):
        owner = held()
        if owner is not None:
            reset(owner)


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_in_child
)
