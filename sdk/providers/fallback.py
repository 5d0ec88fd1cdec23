"""`FallbackProvider`: several providers in order; a call moves on when one cannot answer.

    provider = FallbackProvider([
        AnthropicProvider(anthropic.Anthropic(), model="claude-sonnet-4-6"),
        OpenAIResponsesProvider(openai.OpenAI(), model="gpt-5.1-mini"),
    ])
    result = StructuredClient(provider).generate(Decision, prompt="...")
    result.provider                            # "anthropic", or "openai_responses" if it fell back
    [a.provider for a in result.attempts]      # which provider each attempt went to

Through a client, each provider gets the client's whole transport-retry budget (`backoff`): a
call moves on to the next provider once one's retries are spent (an outage, a rate limit that
outlasts them, or an error no retry fixes, such as a 401), and, with `on_refusal=True`, after a
refusal too. Invalid output is not a reason to move on: it is retried with feedback on the same
provider, as usual. Each provider sends the schema in its own dialect, and `Result.provider`,
`Result.model` and every `Attempt.provider` say which one answered.

Called directly (`provider.complete(request)`, outside a client), it tries each provider once in
turn and raises the last `ProviderError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

from sdk.errors import ProviderError
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import TextDelta
from sdk.providers._provider import Provider

__all__ = ["FallbackProvider"]


class FallbackProvider(Provider):
    """Providers in order of preference; a client call falls back from one to the next."""

    def __init__(self, providers: Sequence[Provider], *, on_refusal: bool = False) -> None:
        providers = tuple(providers)
        if not providers:
            raise ValueError("FallbackProvider needs at least one provider")
        for provider in providers:
            if not isinstance(provider, Provider):
                raise TypeError(f"not a provider: {provider!r}")
            if isinstance(provider, FallbackProvider):
                raise TypeError("a FallbackProvider cannot contain another: list them all")
        self.providers = providers
        self.fallback_on_refusal = on_refusal
        # Named after the primary, whose wire a request built by hand goes in; a client call
        # goes to each provider in its own.
        self.codec = providers[0].codec

    def __repr__(self) -> str:
        inner = ", ".join(repr(provider) for provider in self.providers)
        return f"FallbackProvider([{inner}], on_refusal={self.fallback_on_refusal})"

    def candidates(self) -> tuple[Provider, ...]:
        return self.providers

    def cache_scope(self) -> dict[str, Any]:
        return {"fallback": [provider.cache_scope() for provider in self.providers]}

    @property
    def supports_tools(self) -> bool:
        # Tool calls fall back too: offered only when every provider in the list takes them.
        return all(provider.supports_tools for provider in self.providers)

    @property
    def supports_grammar(self) -> bool:
        return all(provider.supports_grammar for provider in self.providers)

    @property
    def supports_native_reasoning(self) -> bool:
        return all(provider.supports_native_reasoning for provider in self.providers)

    @property
    def model(self) -> str | None:
        return self.providers[0].model

    def secrets(self) -> Iterable[str]:
        return [secret for provider in self.providers for secret in provider.secrets()]

    def close(self) -> None:
        for provider in self.providers:
            provider.close()

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()

    # --- called directly: each provider once, in turn ---

    def complete(self, request: CompletionRequest, *, deadline: float | None = None) -> Completion:
        error: ProviderError | None = None
        for provider in self.providers:
            try:
                return provider.complete(request, deadline=deadline)
            except ProviderError as exc:
                error = exc
        assert error is not None
        raise error

    async def acomplete(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> Completion:
        error: ProviderError | None = None
        for provider in self.providers:
            try:
                return await provider.acomplete(request, deadline=deadline)
            except ProviderError as exc:
                error = exc
        assert error is not None
        raise error

    def stream(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> Iterator[TextDelta | Completion]:
        # A stream cannot move on once it has yielded: only the primary streams directly.
        return self.providers[0].stream(request, deadline=deadline)

    def astream(
        self, request: CompletionRequest, *, deadline: float | None = None
    ) -> AsyncIterator[TextDelta | Completion]:
        return self.providers[0].astream(request, deadline=deadline)
