"""The local backend: a job's items as live calls through `AsyncStructuredClient`, bounded.

For self-hosted servers (llama.cpp, vLLM, Ollama: one `base_url` or several), there is no batch
API to hand the job to; the job runs each item through a client's `generate`, the live path
with its own retries and feedback, with at most `concurrency` items in flight. The state,
output protocol and resume semantics are the hosted backends': an item is done once its line is
committed, so after a crash the items that were in flight simply run again.

Memory stays bounded whatever the job's size: items are read from the state file a page at a
time into a queue of `2 * concurrency`, and finished lines are committed every `flush_every`
items.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sdk.batch._items import InputItem
from sdk.batch._state import ItemRow
from sdk.client import AsyncStructuredClient
from sdk.contract import Contract
from sdk.errors import StructuredOutputError
from sdk.providers._base import Message
from sdk.providers._provider import Provider

__all__ = ["LocalBackend", "Outcome", "run_local"]

Outcome = tuple[ItemRow, object]
"""An item's row and what its call gave: a `Result`, or a `StructuredOutputError`."""


class LocalBackend:
    """Items through one or several `AsyncStructuredClient`s (one per server), round robin.

    `concurrency`: items in flight at once over all clients (default: the sum of the clients'
    `max_concurrency`). `flush_every`: finished items per committed chunk of output. Each item
    is one live `generate` call, so invalid output is retried by the client's own `retries`
    (with the same feedback), not by the job's follow-ups.
    """

    name = "local"

    def __init__(
        self,
        clients: AsyncStructuredClient | Sequence[AsyncStructuredClient],
        *,
        concurrency: int | None = None,
        flush_every: int = 256,
    ) -> None:
        self.clients = [clients] if isinstance(clients, AsyncStructuredClient) else list(clients)
        if not self.clients:
            raise ValueError("LocalBackend needs at least one AsyncStructuredClient")
        names = {client.provider.name for client in self.clients}
        if len(names) > 1:
            raise ValueError(f"the clients of one job must be one provider family, not {names}")
        if concurrency is None:
            concurrency = sum(client.max_concurrency or 64 for client in self.clients)
        if concurrency < 1 or flush_every < 1:
            raise ValueError("concurrency and flush_every must be at least 1")
        self.concurrency = concurrency
        self.flush_every = flush_every
        self.in_flight = 0
        """Items running now (for the progress report)."""

    @property
    def provider(self) -> Provider:
        """The first client's provider (all are one family)."""
        return self.clients[0].provider


async def run_local(
    backend: LocalBackend,
    contract: type[Contract],
    rows: Iterator[list[ItemRow]],
    read: Callable[[ItemRow], InputItem],
    commit: Callable[[list[Outcome]], None],
    stop: Callable[[], bool] = lambda: False,
    max_tokens: int | None = None,
) -> None:
    """Run every item `rows` yields (pages of pending rows); hand finished ones to `commit` in
    chunks of `flush_every`. `stop()` true ends the run early (after a commit)."""
    queue: asyncio.Queue[ItemRow | None] = asyncio.Queue(maxsize=2 * backend.concurrency)
    done: list[Outcome] = []
    lock = asyncio.Lock()

    async def flush() -> None:
        async with lock:
            if done:
                chunk = done[:]
                done.clear()
                commit(chunk)

    async def worker(index: int) -> None:
        client = backend.clients[index % len(backend.clients)]
        while True:
            row = await queue.get()
            if row is None:
                return
            backend.in_flight += 1
            try:
                outcome = await _one(client, contract, read(row), row, max_tokens)
            finally:
                backend.in_flight -= 1
            done.append((row, outcome))
            if len(done) >= backend.flush_every:
                await flush()

    workers = [asyncio.create_task(worker(index)) for index in range(backend.concurrency)]
    try:
        for page in rows:
            for row in page:
                await queue.put(row)
            if stop():
                break
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    await flush()


async def _one(
    client: AsyncStructuredClient,
    contract: type[Contract],
    item: InputItem,
    row: ItemRow,
    max_tokens: int | None,
) -> object:
    feedback = tuple(
        Message("assistant" if role == "assistant" else "user", content)
        for role, content in row.feedback
    )
    options: dict[str, Any] = dict(item.options)
    limit = item.max_tokens or max_tokens
    if limit is not None:
        options["max_tokens"] = limit
    try:
        return await client.generate(
            contract,
            messages=item.messages + feedback,
            system=item.system,
            source=item.source,
            **options,
        )
    except StructuredOutputError as error:
        return error
