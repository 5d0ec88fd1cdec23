"""The engines one `EmbeddedProvider` generates with: one by default, more with `engines=N`.

One llama.cpp context holds one sequence's state and runs one generation at a time, so calls made
at once (threads, `asyncio.gather` over `acomplete`) take turns on it. A pool of N engines is N
loaded copies of the model, each with its own context: N generations at once, each on its own
CPU threads, for N times the context's memory (the weights are memory-mapped, so the file's pages
are shared). The first engine is the one every provider of the same model file and settings
shares; the others belong to this pool alone.

A call takes the first free engine. When none is free it waits, and the first call of the pool
that has to wait says so once, in a warning on the `sdk.providers.embedded` logger: a user who
expected the calls to run together can tell the queue from a hang.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sdk import _fork
from sdk.providers.embedded._engine import _Cancelled
from sdk.providers.embedded._engine import _Engine
from sdk.providers.embedded._engine import _engine

__all__ = ["EnginePool"]

logger = logging.getLogger("sdk.providers.embedded")

_RECHECK = 0.05
"""Seconds between looks at the shared engine, which another provider may free without telling
this pool (this pool's own releases wake a waiting call at once)."""


class EnginePool:
    """`size` engines of one model file and settings; `hold()` lends a free one."""

    def __init__(self, path: str, n_ctx: int, n_threads: int, size: int) -> None:
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"engines must be an int, not {size!r}")
        if size < 1:
            raise ValueError(f"engines must be at least 1, not {size}")
        # The first is shared through the engine registry; the others are this pool's own.
        self.engines: list[_Engine] = [_engine(path, n_ctx, n_threads)]
        self.engines += [_Engine(path, n_ctx, n_threads) for _ in range(size - 1)]
        self._released = _fork.condition()
        self._noted = False

    @property
    def first(self) -> _Engine:
        """The shared engine: for what needs the model but not its context (grammars, prompts)."""
        return self.engines[0]

    @contextmanager
    def hold(self, cancel: threading.Event | None = None) -> Iterator[_Engine]:
        """A free engine, held (its lock taken) until the block ends; waits for one if all are
        busy. A call cancelled while it waits (`cancel` set: its caller gave up) stops waiting
        with `_Cancelled` rather than take an engine it would only give back."""
        engine = self._take()
        if engine is None:
            self._note_wait()
            with self._released:
                while (engine := self._take()) is None:
                    if cancel is not None and cancel.is_set():
                        raise _Cancelled
                    self._released.wait(_RECHECK)
        try:
            yield engine
        finally:
            engine.lock.release()
            with self._released:
                self._released.notify()

    def _take(self) -> _Engine | None:
        for engine in self.engines:
            if engine.lock.acquire(blocking=False):
                return engine
        return None

    def _note_wait(self) -> None:
        with self._released:
            if self._noted:
                return
            self._noted = True
        size = len(self.engines)
        logger.warning(
            "embedded: a call waits for a free engine: each of this provider's %d engine(s) "
            "runs one generation at a time, so concurrent calls queue (said once). Where "
            "memory allows, EmbeddedProvider(engines=N) runs N at once, each with its own "
            "context and n_threads CPU threads.",
            size,
        )
