"""`StructuredClient` and `AsyncStructuredClient`: ask a provider for a contract, get a `Result`.

    client = StructuredClient(AnthropicProvider(anthropic.Anthropic(), model="claude-sonnet-4-6"))
    result = client.generate(Decision, prompt="Approve this refund?", source=ticket)
    result.value          # a Decision that passed every check
    result.usage          # tokens over every attempt

The two clients share everything but the call to the transport (the way httpx's `Client` and
`AsyncClient` share a base): `_BaseClient` holds the settings and starts each call's state
machine (`sdk.engine.call.Call`: the retry policies, the parsing, the attempts); each client's loops
only pass data between that machine and the provider's driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast, overload
from weakref import WeakKeyDictionary

from sdk._result import Result
from sdk._tools import PartialToolCall, Tool, ToolChoice
from sdk.contract import Contract, require_contract
from sdk.engine.call import (
    DEFAULT_BACKOFF,
    Backoff,
    Call,
    MaxTokensRamp,
    MessageLike,
    PromptLike,
    Reasoning,
    RetrySettings,
    conversation,
    feedback_message,
)
from sdk.engine.envelope import envelope_of
from sdk.engine.tool_calls import ToolCalls, ToolsCall, check_tools, tool_conversation
from sdk.errors import ProviderError
from sdk.grammar import Grammar
from sdk.hooks import Hooks
from sdk.parsing.incremental import Partial
from sdk.parsing.parser import EnumCase
from sdk.providers._base import Completion, unsupported
from sdk.providers._provider import Provider

__all__ = [
    "AsyncStructuredClient",
    "Backoff",
    "MaxTokensRamp",
    "StructuredClient",
    "feedback_message",
]

C = TypeVar("C", bound=Contract)


class _BaseClient:
    """Everything the two clients share: all but sending the request."""

    def __init__(
        self,
        provider: Provider,
        *,
        retries: int,
        enum_case: EnumCase,
        max_tokens: int,
        truncation: MaxTokensRamp | None,
        refusal_retries: int,
        backoff: Backoff,
        token_budget: int | None,
        deadline: float | None,
        attempt_deadline: float | None,
        hooks: Sequence[Hooks],
    ) -> None:
        if enum_case not in ("normalize", "reject"):
            raise ValueError(f"enum_case must be 'normalize' or 'reject', not {enum_case!r}")
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.provider = provider
        self.enum_case: EnumCase = enum_case
        self.max_tokens = max_tokens
        self.hooks: tuple[Hooks, ...] = tuple(hooks)
        self.settings = RetrySettings(
            retries=retries,
            truncation=truncation,
            refusal_retries=refusal_retries,
            backoff=backoff,
            token_budget=token_budget,
            deadline=deadline,
            attempt_deadline=attempt_deadline,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.provider!r}, retries={self.settings.retries})"

    @property
    def retries(self) -> int:
        """Invalid-output retries per call."""
        return self.settings.retries

    def _call(
        self,
        output: type[Contract] | Grammar,
        prompt: PromptLike | None,
        messages: Sequence[MessageLike] | None,
        system: str | None,
        source: str | None,
        max_tokens: int | None,
        deadline: float | None,
        context: Mapping[str, Any] | None,
        reasoning: Reasoning | None,
        options: dict[str, Any],
        where: str,
    ) -> Call[Any]:
        envelope = None if isinstance(output, Grammar) else envelope_of(output)
        if envelope is not None:
            output = envelope.contract
        elif not isinstance(output, Grammar):
            require_contract(output, where)
        settings = self.settings
        if deadline is not None:
            settings = RetrySettings(**{**_fields(settings), "deadline": deadline})
        return Call(
            output,
            conversation(output, prompt, messages, source),
            envelope,
            provider=self.provider,
            settings=settings,
            enum_case=self.enum_case,
            system=system,
            source=source,
            max_tokens=max_tokens if max_tokens is not None else self.max_tokens,
            options=options,
            context=context,
            reasoning=reasoning,
            hooks=self.hooks,
            streaming=where == "stream()",
        )

    def _tools_call(
        self,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str,
        parallel_tool_calls: bool | None,
        prompt: str | None,
        messages: Sequence[MessageLike] | None,
        system: str | None,
        source: str | None,
        max_tokens: int | None,
        deadline: float | None,
        context: Mapping[str, Any] | None,
        options: dict[str, Any],
    ) -> ToolsCall:
        checked, tool_choice = check_tools(tools, tool_choice)
        if not self.provider.supports_tools:
            raise unsupported(self.provider.name, "tool calls", ["json_schema documents"])
        settings = self.settings
        if deadline is not None:
            settings = RetrySettings(**{**_fields(settings), "deadline": deadline})
        return ToolsCall(
            checked,
            tool_choice,
            parallel_tool_calls,
            tool_conversation(prompt, messages, source),
            provider=self.provider,
            settings=settings,
            enum_case=self.enum_case,
            system=system,
            source=source,
            max_tokens=max_tokens if max_tokens is not None else self.max_tokens,
            options=options,
            context=context,
        )


def _fields(settings: RetrySettings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in RetrySettings.__slots__}


class StructuredClient(_BaseClient):
    """Generate contracts through a provider, synchronously.

    `retries`: invalid-output retries (with feedback). `enum_case`: the parser's casing policy.
    `max_tokens`: the default output limit. `truncation`: opt-in `MaxTokensRamp`.
    `refusal_retries`: retries after a refusal (default none). `backoff`: transport retries.
    `token_budget`: no retry starts that would take the tokens spent past it. `deadline`:
    seconds a whole call may take, retries and waits included; `attempt_deadline`: seconds one
    request may take (both raise `ProviderError` when passed, with the attempts kept).
    `hooks`: `sdk.hooks.Hooks` told of every call, attempt, reply, error and result (for
    telemetry: `sdk.telemetry.OpenTelemetryHooks`). `sleep`: how backoff waits (tests pass a
    recorder).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        retries: int = 2,
        enum_case: EnumCase = "normalize",
        max_tokens: int = 4096,
        truncation: MaxTokensRamp | None = None,
        refusal_retries: int = 0,
        backoff: Backoff = DEFAULT_BACKOFF,
        token_budget: int | None = None,
        deadline: float | None = None,
        attempt_deadline: float | None = None,
        hooks: Sequence[Hooks] = (),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(
            provider,
            retries=retries,
            enum_case=enum_case,
            max_tokens=max_tokens,
            truncation=truncation,
            refusal_retries=refusal_retries,
            backoff=backoff,
            token_budget=token_budget,
            deadline=deadline,
            attempt_deadline=attempt_deadline,
            hooks=hooks,
        )
        self._sleep = sleep

    def __enter__(self) -> StructuredClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what the provider opened itself (never a client you passed in)."""
        self.provider.close()

    @overload
    def generate(
        self,
        contract: type[C],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[C]: ...

    @overload
    def generate(
        self,
        contract: Grammar,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[str]: ...

    @overload
    def generate(
        self,
        contract: type[list[C]],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[list[C]]: ...

    @overload
    def generate(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[Any]: ...

    def generate(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[Any]:
        """A `contract` value from the provider, or a typed error.

        Pass a `prompt` (and optionally a `source` document, which is added to the prompt and
        checked against every `SourceQuote`), or whole `messages`. `deadline` overrides the
        client's for this call. `provider_options` go to the provider's call as they are
        (`temperature=0`, ...).
        """
        call = self._call(
            contract,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            reasoning,
            provider_options,
            "generate()",
        )
        return cast(Result[Any], self._run(call))

    @overload
    def stream(
        self,
        contract: type[C],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Iterator[Partial[C] | Result[C]]: ...

    @overload
    def stream(
        self,
        contract: Grammar,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Iterator[str | Result[str]]: ...

    @overload
    def stream(
        self,
        contract: type[list[C]],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Iterator[C | Result[list[C]]]: ...

    @overload
    def stream(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Iterator[Any]: ...

    def stream(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Iterator[Any]:
        """Like `generate`, streaming: `Partial` snapshots as the document arrives, then the
        `Result` (last). Snapshots are never validated; only the `Result` passed every check.
        After a retry, the snapshots start again from the new attempt's first character.
        """
        call = self._call(
            contract,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            reasoning,
            provider_options,
            "stream()",
        )
        yield from self._run_stream(call)

    def call_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        **provider_options: Any,
    ) -> ToolCalls:
        """Offer `tools` and return the calls the model made, each one's arguments parsed into
        its tool's contract and checked (with the `source`), or a typed error.

        `tool_choice`: `"auto"` (the model decides), `"required"` (at least one call), a `Tool`
        or its name (a call to that one), `"none"` (no call). `parallel_tool_calls`: allow
        several calls in one turn (`None`: the provider's default). An unknown tool or invalid
        arguments is retried with feedback (each call answered with a tool result marked as an
        error), up to the client's `retries`. The SDK does not run the tools: send their results
        back with `messages=[..., result.message(), Message("user", "", tool_results=...)]`.
        """
        call = self._tools_call(
            tools,
            tool_choice,
            parallel_tool_calls,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            provider_options,
        )
        return cast(ToolCalls, self._run(call))

    def stream_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        **provider_options: Any,
    ) -> Iterator[PartialToolCall | ToolCalls]:
        """Like `call_tools`, streaming: a `PartialToolCall` snapshot per argument fragment
        (parallel calls apart by `index`; `done` once a call's arguments are complete), then
        the `ToolCalls` (last). Snapshots are never validated. After a retry, the snapshots
        start again from the new attempt's first call.
        """
        call = self._tools_call(
            tools,
            tool_choice,
            parallel_tool_calls,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            provider_options,
        )
        yield from self._run_stream(call)

    # --- the two loops every call kind runs: they only pass data between the call and its
    # provider (the call's state machine decides, the provider's driver does the I/O) ---

    def _run(self, call: Call[Any]) -> Any:
        while True:
            request = call.request()
            try:
                completion = call.provider.complete(request, deadline=call.send_deadline())
            except ProviderError as error:
                self._sleep(call.on_transport_error(error))
                continue
            result = call.on_reply(completion)
            if result is not None:
                return result

    def _run_stream(self, call: Call[Any]) -> Iterator[Any]:
        while True:
            request = call.request()
            view = call.snapshots()
            completion: Completion | None = None
            items = call.provider.stream(request, deadline=call.send_deadline())
            try:
                with contextlib.closing(items):  # type: ignore[type-var]
                    for item in items:
                        if isinstance(item, Completion):
                            completion = item
                            break
                        for shown in view.feed(item):
                            call.partial = shown
                            yield shown
            except ProviderError as error:
                error.partial = error.partial if error.partial is not None else call.partial
                self._sleep(call.on_transport_error(error))
                continue
            assert completion is not None  # the driver ends every stream with one, or raises
            for shown in view.finish():
                call.partial = shown
                yield shown
            result = call.on_reply(completion)
            if result is not None:
                yield result
                return


class AsyncStructuredClient(_BaseClient):
    """Generate contracts through a provider, asynchronously; many calls at once.

    Takes the options of `StructuredClient`, plus `max_concurrency`: at most this many provider
    requests are in flight at once across all calls of this client (the rest wait their turn),
    so a burst of a thousand calls neither opens a thousand connections nor trips rate limits.
    Cancelling a call cancels its request and frees its place; nothing is left running. The
    client can be used from several event loops one after another (two `asyncio.run` calls).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        retries: int = 2,
        enum_case: EnumCase = "normalize",
        max_tokens: int = 4096,
        truncation: MaxTokensRamp | None = None,
        refusal_retries: int = 0,
        backoff: Backoff = DEFAULT_BACKOFF,
        token_budget: int | None = None,
        deadline: float | None = None,
        attempt_deadline: float | None = None,
        hooks: Sequence[Hooks] = (),
        max_concurrency: int | None = 64,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(
            provider,
            retries=retries,
            enum_case=enum_case,
            max_tokens=max_tokens,
            truncation=truncation,
            refusal_retries=refusal_retries,
            backoff=backoff,
            token_budget=token_budget,
            deadline=deadline,
            attempt_deadline=attempt_deadline,
            hooks=hooks,
        )
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1 (or None for no limit)")
        self.max_concurrency = max_concurrency
        self._sleep = sleep
        # One semaphore per event loop: an asyncio primitive belongs to the loop that uses it.
        self._limits: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            WeakKeyDictionary()
        )

    async def __aenter__(self) -> AsyncStructuredClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close what the provider opened itself (never a client you passed in)."""
        await self.provider.aclose()

    def limit(self) -> asyncio.Semaphore | None:
        """The semaphore bounding this client's requests in the running event loop."""
        if self.max_concurrency is None:
            return None
        loop = asyncio.get_running_loop()
        limit = self._limits.get(loop)
        if limit is None:
            limit = self._limits[loop] = asyncio.Semaphore(self.max_concurrency)
        return limit

    def _slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        limit = self.limit()
        return limit if limit is not None else contextlib.nullcontext()

    @overload
    async def generate(
        self,
        contract: type[C],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[C]: ...

    @overload
    async def generate(
        self,
        contract: Grammar,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[str]: ...

    @overload
    async def generate(
        self,
        contract: type[list[C]],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[list[C]]: ...

    @overload
    async def generate(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[Any]: ...

    async def generate(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> Result[Any]:
        """A `contract` value from the provider, or a typed error (see `StructuredClient`)."""
        call = self._call(
            contract,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            reasoning,
            provider_options,
            "generate()",
        )
        return cast(Result[Any], await self._run(call))

    @overload
    def stream(
        self,
        contract: type[C],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> AsyncIterator[Partial[C] | Result[C]]: ...

    @overload
    def stream(
        self,
        contract: Grammar,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> AsyncIterator[str | Result[str]]: ...

    @overload
    def stream(
        self,
        contract: type[list[C]],
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> AsyncIterator[C | Result[list[C]]]: ...

    @overload
    def stream(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> AsyncIterator[Any]: ...

    async def stream(
        self,
        contract: Any,
        *,
        prompt: PromptLike | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        reasoning: Reasoning | None = None,
        **provider_options: Any,
    ) -> AsyncIterator[Any]:
        """`Partial` snapshots as the document arrives, then the `Result` (see
        `StructuredClient.stream`)."""
        call = self._call(
            contract,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            reasoning,
            provider_options,
            "stream()",
        )
        async for shown in self._run_stream(call):
            yield shown

    async def call_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        **provider_options: Any,
    ) -> ToolCalls:
        """The calls the model made, parsed and checked (see `StructuredClient.call_tools`)."""
        call = self._tools_call(
            tools,
            tool_choice,
            parallel_tool_calls,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            provider_options,
        )
        return cast(ToolCalls, await self._run(call))

    async def stream_tools(
        self,
        *,
        tools: Sequence[Tool],
        tool_choice: ToolChoice | str = "auto",
        parallel_tool_calls: bool | None = None,
        prompt: str | None = None,
        messages: Sequence[MessageLike] | None = None,
        system: str | None = None,
        source: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
        context: Mapping[str, Any] | None = None,
        **provider_options: Any,
    ) -> AsyncIterator[PartialToolCall | ToolCalls]:
        """`PartialToolCall` snapshots, then the `ToolCalls` (see
        `StructuredClient.stream_tools`)."""
        call = self._tools_call(
            tools,
            tool_choice,
            parallel_tool_calls,
            prompt,
            messages,
            system,
            source,
            max_tokens,
            deadline,
            context,
            provider_options,
        )
        async for shown in self._run_stream(call):
            yield shown


    # --- the two loops (see `StructuredClient._run`), each request in a concurrency slot ---

    async def _run(self, call: Call[Any]) -> Any:
        while True:
            request = call.request()
            try:
                async with self._slot():
                    completion = await call.provider.acomplete(
                        request, deadline=call.send_deadline()
                    )
            except ProviderError as error:
                await self._sleep(call.on_transport_error(error))
                continue
            result = call.on_reply(completion)
            if result is not None:
                return result

    async def _run_stream(self, call: Call[Any]) -> AsyncIterator[Any]:
        while True:
            request = call.request()
            view = call.snapshots()
            completion: Completion | None = None
            try:
                async with self._slot():
                    items = call.provider.astream(request, deadline=call.send_deadline())
                    async with contextlib.aclosing(items):  # type: ignore[type-var]
                        async for item in items:
                            if isinstance(item, Completion):
                                completion = item
                                break
                            for shown in view.feed(item):
                                call.partial = shown
                                yield shown
            except ProviderError as error:
                error.partial = error.partial if error.partial is not None else call.partial
                await self._sleep(call.on_transport_error(error))
                continue
            assert completion is not None  # the driver ends every stream with one, or raises
            for shown in view.finish():
                call.partial = shown
                yield shown
            result = call.on_reply(completion)
            if result is not None:
                yield result
                return
