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
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any
from typing import Protocol
from typing import TypeVar
from typing import cast

__all__ = ["after_fork", "condition", "in_child", "lock", "rlock"]

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


def _in_child() -> None:
    """In a forked child, as it starts (one thread, nothing else running yet)."""
    for made in list(_locks):
        made._at_fork_reinit()
    for module_reset in list(_module_resets):
        module_reset()
    for held, reset in list(_resets.values()):
        owner = held()
        if owner is not None:
            reset(owner)


os.register_at_fork(after_in_child=_in_child)
