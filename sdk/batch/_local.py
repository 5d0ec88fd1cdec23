"""The local backend: a job's items as live calls through `AsyncStructuredClient`, bounded.

For self-hosted servers (llama.cpp, vLLM, Ollama: one `base_url` or several) and the embedded
model, there is no batch API to hand the job to; the job runs each item through a client's
`generate`, the live path with its own retries and feedback, with at most `concurrency` items in
flight. The state, output protocol and resume semantics are the hosted backends': an item is
done once its line is committed, so after a crash the items that were in flight simply run
again.

Memory stays bounded whatever the job's size: items are read from the state file a page at a
time into a queue of `2 * concurrency`. Finished lines are committed every `flush_every` items
or every `flush_seconds`, whichever comes first (so a finished result is durable within
`flush_seconds`, 2 s by default, or sooner at a fleet's speed), and once more when the run stops
(an interrupt included, even one in the middle of a commit): a stop loses at most the calls in
flight, never a finished result. Every `tick` the run also checks whether
the job was cancelled (from any process): then nothing more is taken from the queue, the calls
in flight are cancelled, and what finished is committed.

Every failure of one item is that item's outcome (`run_item` keeps any exception of the call, a
`TypeError` for options the call rejects included); only a failure of the job itself (its input
changed, its lease lost) stops the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import KW_ONLY
from dataclasses import dataclass
from dataclasses import field

from sdk._values.declared import Count
from sdk._values.declared import OptionalCount
from sdk._values.declared import check
from sdk._values.seconds import INTERVAL
from sdk.batch._errors import BatchError
from sdk.batch._errors import BatchInputError
from sdk.batch._items import InputItem
from sdk.batch._state import ItemRow
from sdk.client import AsyncStructuredClient
from sdk.contract import Contract
from sdk.providers._base import Message
from sdk.providers._provider import Provider

__all__ = ["MOST_IN_FLIGHT", "LocalBackend", "LocalRun", "Outcome", "run_item"]

MOST_IN_FLIGHT = 10_000
"""The most items a job keeps in flight per server (`--concurrency`, `BackendSpec.concurrency`).
Each one in flight is a worker task, with a queue of twice as many items ahead of them: at
10,000 that is a few tens of MB and a start in well under a second; at 10^6 the job spent its
memory making workers and never started (probe12c D2). No server answers more at once."""


Outcome = tuple[ItemRow, object]
"""An item's row and what its call gave: a `Result`, or the exception it raised."""


class LocalBackend:
    """Items through one or several `AsyncStructuredClient`s (one per server), round robin.

    `concurrency`: items in flight at once over all clients (default: the sum of the clients'
    `max_concurrency`). `flush_every` and `flush_seconds`: finished items are committed (their
    output lines written, the state file updated) every `flush_every` items or every
    `flush_seconds`, whichever comes first. Each item is one live `generate` call, so invalid
    output is retried by the client's own `retries` (with the same feedback), not by the job's
    follow-ups: the job's `JobSettings.retries` and `enum_case` must be the clients' (a job
    refuses a backend whose clients differ).
    """

    name = "local"

    def __init__(
        self,
        clients: AsyncStructuredClient | Sequence[AsyncStructuredClient],
        *,
        concurrency: int | None = None,
        flush_every: int = 256,
        flush_seconds: float = 2.0,
    ) -> None:
        if isinstance(clients, AsyncStructuredClient):
            clients = [clients]
        elif isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence):
            raise TypeError(
                "LocalBackend(): clients must be an AsyncStructuredClient or a list of them, "
                f"not {type(clients).__name__}"
            )
        self.clients = list(clients)
        if not self.clients:
            raise ValueError("LocalBackend needs at least one AsyncStructuredClient")
        for client in self.clients:
            if not isinstance(client, AsyncStructuredClient):
                raise TypeError(
                    "LocalBackend(): clients must be AsyncStructuredClients, not "
                    f"{type(client).__name__}"
                )
        # Each setting checked where it is given, naming it (on main `concurrency=3.5` was a
        # bare TypeError from the job's run, and `flush_every=nan` or `flush_seconds=inf`
        # were taken: nothing finished was committed until the run stopped).
        check("concurrency", concurrency, OptionalCount, "LocalBackend()")
        check("flush_every", flush_every, Count, "LocalBackend()")
        check("flush_seconds", flush_seconds, INTERVAL, "LocalBackend()")
        names = {client.provider.name for client in self.clients}
        if len(names) > 1:
            raise ValueError(f"the clients of one job must be one provider family, not {names}")
        if concurrency is None:
            wanted = sum(client.max_concurrency or 64 for client in self.clients)
            concurrency = min(wanted, MOST_IN_FLIGHT * len(self.clients))
        most = MOST_IN_FLIGHT * len(self.clients)
        if concurrency > most:
            # Bounded here, where the workers are made, not only in the CLI's and BackendSpec's
            # declaration: LocalBackend(concurrency=10**6) made a million workers too.
            raise ValueError(
                f"concurrency must be at most {most:,} ({MOST_IN_FLIGHT:,} per client), "
                f"not {concurrency:,}"
            )
        self.concurrency = concurrency
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self.in_flight = 0
        """Items running now (for the progress report)."""

    @property
    def provider(self) -> Provider:
        """The first client's provider (all are one family)."""
        return self.clients[0].provider


@dataclass
class LocalRun:
    """One pass over the pending items (`run`): `read` reads an item back, `commit` commits
    finished ones, `stop()` says the job was cancelled, `tick()` is called every `tick` seconds
    (progress, the lease). `run` returns whether the pass was stopped by a cancel."""

    backend: LocalBackend
    contract: type[Contract]
    read: Callable[[ItemRow], InputItem]
    commit: Callable[[list[Outcome]], None]
    _: KW_ONLY
    stop: Callable[[], bool]
    tick: Callable[[], None]
    report: Callable[[], None] = lambda: None
    """Called after each commit that went through (progress): what it raises is not the
    commit's failure, so its items are never given back and committed twice."""
    max_tokens: int | None = None
    tick_seconds: float = 0.5
    done: list[Outcome] = field(default_factory=list, init=False)
    flushed: float = field(default_factory=time.monotonic, init=False)

    def __post_init__(self) -> None:
        # Never tick less often than the backend commits: a commit waits for the next tick.
        self.tick_seconds = min(self.tick_seconds, self.backend.flush_seconds)

    def flush(self) -> None:
        """Commit what finished (synchronous: nothing else runs meanwhile). A commit cut short
        (Ctrl-C in the middle of it) gives its items back, so the stop's own flush commits
        them: no finished result is lost to an interrupt."""
        self.flushed = time.monotonic()
        if self.done:
            chunk, self.done = self.done, []
            try:
                self.commit(chunk)
            except BaseException:
                self.done = chunk + self.done
                raise
            self.report()

    async def run(self, pages: Iterator[list[ItemRow]]) -> bool:
        work = asyncio.create_task(self._work(pages))
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=self.tick_seconds)
                if work.done():
                    break
                if self.stop():
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await work
                    self.flush()
                    return True
                if time.monotonic() - self.flushed >= self.backend.flush_seconds:
                    self.flush()
                self.tick()
            work.result()  # a failure of the job itself: raised here
        except BaseException:
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work
            with contextlib.suppress(BatchError):  # a lost lease: nothing may be written
                self.flush()
            raise
        self.flush()
        return False

    async def _work(self, pages: Iterator[list[ItemRow]]) -> None:
        """Feed the pending items to `concurrency` workers. A failure of the job itself (a
        changed input line, found by a worker) ends every other task at once: no worker takes
        another item, and the feeder never waits on a queue nobody empties."""
        queue: asyncio.Queue[ItemRow | None] = asyncio.Queue(maxsize=2 * self.backend.concurrency)
        clients = self.backend.clients
        tasks = {
            asyncio.create_task(self._worker(queue, clients[index % len(clients)]))
            for index in range(self.backend.concurrency)
        }
        tasks.add(asyncio.create_task(_feed(queue, pages, self.backend.concurrency)))
        try:
            while tasks:
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    task.result()  # the first failure: raised, and the rest cancelled below
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _worker(
        self, queue: asyncio.Queue[ItemRow | None], client: AsyncStructuredClient
    ) -> None:
        while True:
            row = await queue.get()
            if row is None:
                return
            item = self.read(row)  # `InputChanged` stops the job: raised, never contained
            self.backend.in_flight += 1
            try:
                outcome = await run_item(client, self.contract, item, row, self.max_tokens)
            finally:
                self.backend.in_flight -= 1
            self.done.append((row, outcome))
            if len(self.done) >= self.backend.flush_every:
                self.flush()


async def _feed(
    queue: asyncio.Queue[ItemRow | None], pages: Iterator[list[ItemRow]], workers: int
) -> None:
    """Every pending row into the queue, then one end mark per worker."""
    for page in pages:
        for row in page:
            await queue.put(row)
    for _ in range(workers):
        await queue.put(None)


async def run_item(
    client: AsyncStructuredClient,
    contract: type[Contract],
    item: InputItem,
    row: ItemRow,
    max_tokens: int | None,
) -> object:
    """One item as one live `generate` call (with the row's pending feedback): its `Result`, or
    the exception the call raised (never raised here: the item's failure is its outcome); an
    item that cannot be run (`unusable`) is not sent, its outcome a `BatchInputError`."""
    if item.unusable is not None:
        return BatchInputError(item.unusable)
    feedback = tuple(
        Message("assistant" if role == "assistant" else "user", content)
        for role, content in row.feedback
    )
    try:
        options = item.call_options(feedback)
        if max_tokens is not None:
            options.setdefault("max_tokens", max_tokens)
        return await client.generate(contract, **options)
    except Exception as error:  # the item's own failure: it fails, the job goes on
        return error
