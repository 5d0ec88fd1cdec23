"""`TestProvider`: scripted replies, no network. For your own tests, examples and benchmarks.

Each call takes the next reply from the script:

    provider = TestProvider([
        '{"reasoning": "...", "answer": "maybe", "confidence": "high"}',   # invalid: retried
        Decision(reasoning="...", answer="approve", confidence="high"),    # valid
    ])
    result = StructuredClient(provider).generate(Decision, prompt="...")
    assert len(provider.requests) == 2

A reply is a string (the document text, clean end), a dict or a `Contract` (serialized to JSON),
a `Completion` (as given: any stop reason, usage, refusal), a `ToolCall` or a list of them (the
calls of a `call_tools` reply, stop reason `tool_use`; streamed as argument fragments), an
exception (raised, e.g. a `ProviderError` to exercise retries), or a callable taking the
`CompletionRequest` and returning any of these. With `repeat=True` the last reply answers every
call after the script runs out.

Scripting the failures a real provider gives (each helper returns a reply to put in the script):

    TestProvider([TestProvider.refusal("I can't help with that.", category="cyber")])
    TestProvider([TestProvider.truncation(decision)])        # cut at half: `TruncatedOutput`
    TestProvider([TestProvider.provider_error(503), decision])   # retried, then valid

Options: like a real provider, it refuses an option it does not take, with a `TypeError`
naming it before anything is "sent", so a misspelled `temprature=0` fails your test instead of
being ignored. It takes every sampling option (`ACCEPTED_OPTIONS`; the script sees them in
`request.options`) and any `extra_body` (in `request.extra_body`); `options=` accepts more
names, which a client then takes as call options too (`client.generate(..., tenant_tier="gold")`,
as a client default or through `with_options`), the way a real provider takes its own.

It exercises the client exactly as a real provider would (the parser, retries, usage), but it is
not a provider adapter: the adapters themselves are tested against real SDK clients and servers.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import TypeAlias

from sdk import _fork
from sdk._result import Usage
from sdk._tools import ToolCall
from sdk._values.profile import Profile
from sdk._values.profile import register
from sdk.contract import Contract
from sdk.errors import ProviderError
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.providers._inprocess import AsyncInProcessTransport
from sdk.providers._inprocess import InProcessCodec
from sdk.providers._inprocess import InProcessTransport
from sdk.providers._profile import SAMPLING_OPTIONS
from sdk.providers._profile import WireProfile
from sdk.providers._provider import Provider
from sdk.schema.dialects import Dialect
from sdk.stop_reason import StopReason

__all__ = ["ACCEPTED_OPTIONS", "TEST", "Reply", "TestProvider"]

# A script's replies carry their stop reasons in the SDK's vocabulary (or any provider's raw
# words: every built-in table reads them); its dialect is chosen per instance.
TEST = register(
    Profile(
        name="test",
        display_name="test provider",
        carries={
            "documents": "scripted replies",
            "grammars": "scripted replies",
            "tools": "scripted calls",
            "native_reasoning": "a scripted Completion's reasoning",
        },
        provider="sdk.providers.test:TestProvider",
    )
)
"""The scripted provider's family (`sdk.providers.profile`)."""

Reply: TypeAlias = (
    "str | dict[str, Any] | Contract | Completion | ToolCall | list[ToolCall] | BaseException"
    " | Callable[[CompletionRequest], str | dict[str, Any] | Contract | Completion | ToolCall"
    " | list[ToolCall] | BaseException]"
)

ACCEPTED_OPTIONS = SAMPLING_OPTIONS
"""The sampling options `TestProvider` takes by default (`options=` adds more, which a client
takes as call options): every option of `SamplingOptions`, `constrained` included (the local
providers' grammar switch, which the eval's unconstrained arm passes; the script sees it in
`request.options`)."""

# The fields a real provider's request owns (the schema, grammar and tools, the model, the
# messages, streaming, the limit): `extra_body` may not set them here either.
_OWNED = frozenset(
    {"model", "messages", "stream", "max_tokens", "tools", "tool_choice", "grammar",
     "response_format", "json_schema"}
)  # fmt: skip

# Rough token estimate for scripted usage: about four characters a token.
_CHARS_PER_TOKEN = 4


class TestProvider(Provider):
    """A provider that answers from a script of replies (see the module docstring)."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        model: str = "test-model",
        repeat: bool = False,
        chunk_size: int = 16,
        dialect: Dialect | None = None,
        options: Iterable[str] = (),
    ) -> None:
        self.accepted_options = ACCEPTED_OPTIONS | frozenset(options)
        """The call options this provider takes; any other is a `TypeError` at build time."""
        self._replies: list[Reply] = list(replies)
        self._model = model
        self._repeat = repeat
        self._chunk_size = max(1, chunk_size)
        self._lock = _fork.lock()
        self._next = 0
        self.codec = InProcessCodec(
            WireProfile(
                TEST,
                dialect,
                grammar=True,
                tools=True,
                native_reasoning=True,  # a scripted `Completion` carries its `reasoning`
                options={name: name for name in sorted(self.accepted_options)},
                owned=_OWNED,
            )
        )
        self.requests: list[CompletionRequest] = []
        """Every request received, in order: assert on them in your tests."""

    def __repr__(self) -> str:
        return f"TestProvider({len(self._replies)} replies, {len(self.requests)} used)"

    @property
    def model(self) -> str:
        return self._model

    # --- scripted failures ---

    @staticmethod
    def refusal(
        text: str = "I can't help with that request.", *, category: str | None = None
    ) -> Completion:
        """A refusal reply (stop reason `refusal`, with `category` if given): `RefusedOutput`."""
        return Completion(
            text=text,
            stop_reason=StopReason.REFUSAL,
            raw_stop_reason="refusal",
            usage=Usage(_tokens(1), _tokens(len(text))),
            refusal=text,
            refusal_category=category,
        )

    @staticmethod
    def truncation(
        document: str | dict[str, Any] | Contract, *, keep: int | None = None
    ) -> Completion:
        """A reply cut by the token limit (stop reason `max_tokens`): the first `keep`
        characters of `document` (default: half of it). `TruncatedOutput`."""
        text = _document_text(document)
        cut = text[: len(text) // 2 if keep is None else keep]
        return Completion(
            text=cut,
            stop_reason=StopReason.MAX_TOKENS,
            raw_stop_reason="max_tokens",
            usage=Usage(_tokens(1), _tokens(len(cut))),
        )

    @staticmethod
    def provider_error(
        status_code: int | None = 503,
        message: str = "service unavailable",
        *,
        retry_after: float | None = None,
    ) -> ProviderError:
        """A transport or API failure (`None`: a connection failure, no status). Retried by the
        client when transient (no status, 408, 429, 5xx), like a real one."""
        shown = f"HTTP {status_code}, " if status_code is not None else ""
        return ProviderError(
            f"test: {shown}{message}",
            status_code=status_code,
            retry_after=retry_after,
            provider="test",
        )

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._replies.extend(replies)

    def _reply(self, request: CompletionRequest) -> Completion:
        with self._lock:
            self.requests.append(request)
            if self._next < len(self._replies):
                reply = self._replies[self._next]
                self._next += 1
            elif self._repeat and self._replies:
                reply = self._replies[-1]
            else:
                raise RuntimeError(
                    f"TestProvider has no reply left for call {len(self.requests)} "
                    f"(script of {len(self._replies)}); add more or pass repeat=True"
                )
        if callable(reply) and not isinstance(reply, (Contract, BaseException)):
            reply = reply(request)
        return self._completion(request, reply)

    def _completion(self, request: CompletionRequest, reply: Any) -> Completion:
        if isinstance(reply, BaseException):
            # A copy, so that a repeated error is a new one each time: each attempt keeps its
            # own, and notes added to the last do not appear on the earlier ones.
            raise copy.copy(reply)
        if isinstance(reply, Completion):
            return reply
        prompt = sum(len(m.text) for m in request.messages) + len(request.system or "")
        if isinstance(reply, ToolCall):
            reply = [reply]
        if isinstance(reply, list) and all(isinstance(call, ToolCall) for call in reply):
            calls = tuple(reply)
            return Completion(
                text="",
                stop_reason=StopReason.TOOL_USE,
                raw_stop_reason="tool_use",
                usage=Usage(_tokens(prompt), _tokens(sum(len(c.text) for c in calls))),
                model=self._model,
                request_id=f"test-{len(self.requests)}",
                tool_calls=calls,
            )
        text = _document_text(reply)
        return Completion(
            text=text,
            stop_reason=StopReason.END_TURN,
            raw_stop_reason="end_turn",
            usage=Usage(_tokens(prompt), _tokens(len(text))),
            model=self._model,
            request_id=f"test-{len(self.requests)}",
        )

    # --- the transports: the script, through the drivers like any provider ---

    def transport(self) -> InProcessTransport:
        return InProcessTransport(self._reply, self._stream)

    def atransport(self) -> AsyncInProcessTransport:
        return AsyncInProcessTransport(self._areply, self._astream)

    async def _areply(self, request: CompletionRequest) -> Completion:
        return self._reply(request)

    def _stream(self, request: CompletionRequest) -> Iterator[TextDelta | Completion]:
        completion = self._reply(request)
        yield from self._chunks(completion)
        yield completion

    async def _astream(self, request: CompletionRequest) -> AsyncIterator[TextDelta | Completion]:
        for item in self._stream(request):
            yield item

    def _chunks(self, completion: Completion) -> Iterator[TextDelta]:
        text = completion.text or ""
        for start in range(0, len(text), self._chunk_size):
            yield TextDelta(text[start : start + self._chunk_size])
        for index, call in enumerate(completion.tool_calls):
            yield ToolCallDelta("", index=index, id=call.id, name=call.tool)
            for start in range(0, len(call.text), self._chunk_size):
                piece = call.text[start : start + self._chunk_size]
                yield ToolCallDelta(piece, index=index, id=call.id, name=call.tool)


def _document_text(reply: Any) -> str:
    if isinstance(reply, Contract):
        return reply.model_dump_json()
    if isinstance(reply, dict):
        return json.dumps(reply, ensure_ascii=False)
    if isinstance(reply, str):
        return reply
    raise TypeError(f"TestProvider cannot reply with {type(reply).__name__}")


def _tokens(chars: int) -> int:
    return max(1, -(-chars // _CHARS_PER_TOKEN))
