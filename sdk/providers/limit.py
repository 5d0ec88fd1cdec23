"""`ConcurrencyLimit`: a provider whose async requests take turns, at most N in flight at once.

    provider = ConcurrencyLimit(LlamaCppProvider(...), max_concurrency=16)

`AsyncStructuredClient(max_concurrency=64)` wraps its provider in one, so a burst of a thousand
calls neither opens a thousand connections nor trips rate limits. The limit is a wrapper, like
`FallbackProvider`: the wire, the model and the secrets are the wrapped provider's, and a
fallback list's providers share one limit. One semaphore per event loop (an asyncio primitive
belongs to the loop that uses it), so the same provider can be used from several loops in turn;
cancelling a request frees its place at once. Sync calls are not limited (a sync caller makes
one request at a time).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeAlias
from weakref import WeakKeyDictionary

from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import TextDelta
from sdk.providers._provider import Provider

__all__ = ["ConcurrencyLimit"]

if TYPE_CHECKING:
    import asyncio

_Limits: TypeAlias = "WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]"


class ConcurrencyLimit(Provider):
    """`provider`, with at most `max_concurrency` async requests in flight at once."""

    def __init__(
        self, provider: Provider, max_concurrency: int, *, _limits: _Limits | None = None
    ) -> None:
        # `_limits`: the semaphores by event loop, shared with another wrapper of the same limit
        # (a fallback list's providers; a client's limit around whichever provider it holds).
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.inner = provider
        self.max_concurrency = max_concurrency
        self.codec = provider.codec
        self.fallback_on_refusal = provider.fallback_on_refusal
        self._limits: _Limits = _limits if _limits is not None else WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"ConcurrencyLimit({self.inner!r}, max_concurrency={self.max_concurrency})"

    def limit(self) -> asyncio.Semaphore:
        """The semaphore of the running event loop."""
        import asyncio  # loaded by the first async call: a sync program never needs it

        loop = asyncio.get_running_loop()
        limit = self._limits.get(loop)
        if limit is None:
            limit = self._limits[loop] = asyncio.Semaphore(self.max_concurrency)
        return limit

    def candidates(self) -> tuple[Provider, ...]:
        inner = self.inner.candidates()
        if inner == (self.inner,):
            return (self,)
        # A fallback list: each of its providers behind this one limit.
        return tuple(ConcurrencyLimit(p, self.max_concurrency, _limits=self._limits) for p in inner)

    # --- the wrapped provider's ---

    @property
    def supports_tools(self) -> bool:
        return self.inner.supports_tools

    @property
    def supports_grammar(self) -> bool:
        return self.inner.supports_grammar

    @property
    def supports_native_reasoning(self) -> bool:
        return self.inner.supports_native_reasoning

    @property
    def model(self) -> str | None:
        return self.inner.model

    def wire_schema(self, contract: Any) -> Any:
        return self.inner.wire_schema(contract)

    def tool_schema(self, contract: Any) -> Any:
        return self.inner.tool_schema(contract)

    def cache_scope(self) -> dict[str, Any]:
        return self.inner.cache_scope()

    def secrets(self) -> Iterable[str]:
        return self.inner.secrets()

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()

    # --- the calls: sync ones as they are, async ones in turn ---

    def complete(self, request: CompletionRequest, *, deadline: float | None = None) -> Completion:
        return self.inner.complete(request, deadline=deadline)

    def stream(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> Iterator[TextDelta | Completion]:
        return self.inner.stream(request, deadline=deadline)

    async def acomplete(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> Completion:
        async with self.limit():
            return await self.inner.acomplete(request, deadline=deadline)

    async def astream(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> AsyncIterator[TextDelta | Completion]:
        # The place is held until the stream is read to its end or closed.
        async with self.limit():
            items = self.inner.astream(request, deadline=deadline)
            async with contextlib.aclosing(items):  # type: ignore[type-var]
                async for item in items:
                    yield item
