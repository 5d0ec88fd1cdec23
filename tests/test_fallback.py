"""`FallbackProvider`: a call moves on to the next provider when one's transport retries are
spent (or, if asked, after a refusal), and the result and every attempt say which answered.

The cross-provider cases run through the real `anthropic` and `openai` clients on mock
transports; the policy cases use `TestProvider` scripts."""

from __future__ import annotations

import asyncio
import json

import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Backoff
from sdk import ProviderError
from sdk import ProviderRetriesExhausted
from sdk import RefusedOutput
from sdk import SchemaViolation
from sdk import StopReason
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk import Usage
from sdk.providers import AnthropicProvider
from sdk.providers import FallbackProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import TestProvider
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import JsonDocument
from sdk.providers._base import Message
from sdk.schema.dialects import OPENAI_STRICT
from sdk.schema.dialects import to_wire
from tests.wire_support import DECISION
from tests.wire_support import Sleeps
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import error_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

NO_WAIT = Backoff(retries=2, initial=0.0, maximum=0.0)
VALID = json.dumps(DECISION)


def _client(provider: FallbackProvider, **options: object) -> StructuredClient:
    return StructuredClient(provider, backoff=NO_WAIT, sleep=Sleeps(), **options)  # type: ignore[arg-type]


def test_an_overloaded_primary_falls_back_to_the_secondary_after_its_retries() -> None:
    anthropic_wire = Wire(error_reply("anthropic_error_529.json", 529))
    openai_wire = Wire(responses_reply())
    provider = FallbackProvider([
        AnthropicProvider(anthropic_client(anthropic_wire), model="claude-sonnet-4-6"),
        OpenAIResponsesProvider(openai_client(openai_wire), model="gpt-5.1-mini"),
    ])  # fmt: skip
    result = _client(provider).generate(Decision, prompt="Approve?")
    assert len(anthropic_wire.requests) == NO_WAIT.retries + 1
    assert len(openai_wire.requests) == 1
    assert result.provider == "openai_responses"
    assert result.model == json.loads(openai_wire.requests[0].content)["model"]
    assert [a.provider for a in result.attempts] == ["anthropic"] * 3 + ["openai_responses"]
    assert all(isinstance(a.error, ProviderError) for a in result.attempts[:3])
    # The secondary got the schema in its own dialect, and the result reports its removals.
    sent = openai_wire.body["text"]["format"]["schema"]
    assert sent == to_wire(Decision, OPENAI_STRICT).schema
    assert result.removed == to_wire(Decision, OPENAI_STRICT).removed


def test_an_error_no_retry_fixes_falls_back_at_once() -> None:
    anthropic_wire = Wire(error_reply("anthropic_error_400.json", 401))
    openai_wire = Wire(responses_reply())
    provider = FallbackProvider([
        AnthropicProvider(anthropic_client(anthropic_wire), model="claude-sonnet-4-6"),
        OpenAIResponsesProvider(openai_client(openai_wire), model="gpt-5.1-mini"),
    ])  # fmt: skip
    result = _client(provider).generate(Decision, prompt="Approve?")
    assert len(anthropic_wire.requests) == 1
    assert result.provider == "openai_responses"
    assert result.attempts[0].error is not None and result.attempts[0].provider == "anthropic"


def test_when_every_provider_fails_the_error_holds_every_attempt_of_each() -> None:
    first = TestProvider([TestProvider.provider_error(503)], repeat=True, model="one")
    second = TestProvider([TestProvider.provider_error(None, "connection refused")], repeat=True)
    with pytest.raises(ProviderRetriesExhausted) as info:
        _client(FallbackProvider([first, second])).generate(Decision, prompt="x")
    attempts = info.value.attempts
    assert len(attempts) == 2 * (NO_WAIT.retries + 1)
    assert len(first.requests) == len(second.requests) == NO_WAIT.retries + 1
    assert [a.model for a in attempts] == ["one"] * 3 + ["test-model"] * 3
    assert len({id(a.error) for a in attempts}) == len(attempts)  # each attempt its own error
    assert "connection refused" in str(info.value)


def test_a_refusal_ends_the_call_unless_asked_to_fall_back() -> None:
    refusing = TestProvider([TestProvider.refusal(category="cyber")])
    answering = TestProvider([VALID])
    with pytest.raises(RefusedOutput) as info:
        _client(FallbackProvider([refusing, answering])).generate(Decision, prompt="x")
    assert info.value.category == "cyber"
    assert answering.requests == []

    refusing = TestProvider([TestProvider.refusal(category="cyber")], model="cautious")
    answering = TestProvider([VALID], model="willing")
    provider = FallbackProvider([refusing, answering], on_refusal=True)
    result = _client(provider).generate(Decision, prompt="x")
    assert result.model == "willing"
    assert isinstance(result.attempts[0].error, RefusedOutput)
    assert [a.model for a in result.attempts] == ["cautious", "willing"]


def test_hooks_are_told_the_provider_each_attempt_goes_to_after_a_fallback() -> None:
    # `CallInfo` is made when a hook is first told something (none without hooks): a fallback
    # moves it on to the next provider, so `before_request` and `on_result` name the one the
    # request went to and the one that answered, not the primary.
    from sdk.hooks import CallInfo
    from sdk.hooks import Hooks

    told: list[tuple[str, str, str | None]] = []

    class Watch(Hooks):
        def on_call(self, call: CallInfo) -> None:
            told.append(("call", call.provider, call.model))

        def before_request(self, call: CallInfo, request: CompletionRequest, n: int) -> None:
            told.append(("request", call.provider, call.model))

        def on_result(self, call: CallInfo, result: object) -> None:
            told.append(("result", call.provider, call.model))

    refusing = TestProvider([TestProvider.refusal(category="cyber")], model="cautious")
    anthropic_wire = Wire(error_reply("anthropic_error_400.json", 401))
    primary = AnthropicProvider(anthropic_client(anthropic_wire), model="claude-sonnet-4-6")
    provider = FallbackProvider([primary, refusing, TestProvider([VALID], model="willing")],
                                on_refusal=True)  # fmt: skip
    result = _client(provider, hooks=[Watch()]).generate(Decision, prompt="x")
    assert result.model == "willing"
    assert told == [
        ("call", "anthropic", "claude-sonnet-4-6"),
        ("request", "anthropic", "claude-sonnet-4-6"),
        ("request", "test", "cautious"),
        ("request", "test", "willing"),
        ("result", "test", "willing"),
    ]


def test_invalid_output_is_retried_on_the_same_provider_not_a_reason_to_fall_back() -> None:
    primary = TestProvider([VALID.replace('"high"', '"certain"'), VALID], model="primary")
    secondary = TestProvider([VALID], model="secondary")
    result = _client(FallbackProvider([primary, secondary])).generate(Decision, prompt="x")
    assert isinstance(result.attempts[0].error, SchemaViolation)
    assert result.model == "primary" and secondary.requests == []


def _reply(text: str, usage: Usage) -> Completion:
    """A clean reply that reports its own usage."""
    return Completion(text, StopReason.END_TURN, "end_turn", usage=usage)


def test_usage_and_attempts_are_summed_across_providers() -> None:
    # The first provider answers once (invalid output, retried there: its tokens are spent),
    # then fails until its transport retries are spent; the second answers.
    invalid = VALID.replace('"high"', '"certain"')
    first = TestProvider([_reply(invalid, Usage(120, 30)), TestProvider.provider_error(503)],
                         repeat=True, model="one")  # fmt: skip
    second = TestProvider([_reply(VALID, Usage(80, 20))], model="two")
    result = _client(FallbackProvider([first, second])).generate(Decision, prompt="x")
    assert len(first.requests) == 1 + NO_WAIT.retries + 1 and len(second.requests) == 1
    assert [a.model for a in result.attempts] == ["one"] * len(first.requests) + ["two"]
    assert [type(a.error) for a in result.attempts] == [
        SchemaViolation, *[ProviderError] * (NO_WAIT.retries + 1), type(None)
    ]
    assert [a.usage for a in result.attempts] == [
        Usage(120, 30), *[Usage()] * (NO_WAIT.retries + 1), Usage(80, 20)
    ]
    assert result.usage == Usage(200, 50)  # the first provider's tokens are not dropped


def test_a_truncation_ends_the_call_with_its_attempts_and_usage_no_fallback() -> None:
    cut = TestProvider.truncation(DECISION)
    first = TestProvider([cut], model="one")
    second = TestProvider([VALID], model="two")
    with pytest.raises(TruncatedOutput) as info:
        _client(FallbackProvider([first, second])).generate(Decision, prompt="x")
    # A truncation is not a transport failure: no fallback, and nothing is lost.
    assert len(first.requests) == 1 and second.requests == []
    assert [(a.model, type(a.error)) for a in info.value.attempts] == [("one", TruncatedOutput)]
    assert info.value.usage == cut.usage and cut.usage.output_tokens > 0
    assert info.value.text == cut.text and info.value.stop_reason is StopReason.MAX_TOKENS


def test_streaming_falls_back_and_the_snapshots_start_over() -> None:
    first = TestProvider([TestProvider.provider_error(503)], repeat=True)
    second = TestProvider([VALID], chunk_size=8)
    items = list(_client(FallbackProvider([first, second])).stream(Decision, prompt="x"))
    result = items[-1]
    assert result.value.answer == "approve"
    assert len(second.requests) == 1 and len(items) > 2


def test_async_calls_fall_back_too() -> None:
    first = TestProvider([TestProvider.provider_error(429)], repeat=True)
    second = TestProvider([VALID], model="backup")
    provider = FallbackProvider([first, second])

    async def main() -> str | None:
        client = AsyncStructuredClient(provider, backoff=NO_WAIT, sleep=Sleeps().asleep)
        return (await client.generate(Decision, prompt="x")).model

    assert asyncio.run(main()) == "backup"


def test_called_directly_it_tries_each_provider_once() -> None:
    first = TestProvider([TestProvider.provider_error(503)])
    second = TestProvider([VALID])
    request = CompletionRequest(JsonDocument(Decision), (Message("user", "x"),), max_tokens=100)
    completion = FallbackProvider([first, second]).complete(request)
    assert completion.text == VALID
    assert len(first.requests) == len(second.requests) == 1


def test_it_needs_providers_and_lists_them_flat() -> None:
    with pytest.raises(ValueError):
        FallbackProvider([])
    with pytest.raises(TypeError):
        FallbackProvider(["anthropic"])  # type: ignore[list-item]
    inner = FallbackProvider([TestProvider()])
    with pytest.raises(TypeError):
        FallbackProvider([inner])


def test_tool_calls_fall_back_too() -> None:
    from pydantic import Field

    from sdk import Contract
    from sdk import Tool
    from sdk import ToolCall

    class Weather(Contract):
        """Get the weather in a city."""

        city: str = Field(max_length=40)

    anthropic_wire = Wire(error_reply("anthropic_error_529.json", 529))
    primary = AnthropicProvider(anthropic_client(anthropic_wire), model="claude-sonnet-4-6")
    secondary = TestProvider([ToolCall(id="c1", tool="Weather", text='{"city": "Oslo"}')])
    provider = FallbackProvider([primary, secondary])
    assert provider.supports_tools
    calls = _client(provider).call_tools(tools=[Tool(Weather)], prompt="Weather in Oslo?")
    assert [call.value.city for call in calls.calls] == ["Oslo"]  # type: ignore[attr-defined]
    assert len(anthropic_wire.requests) == NO_WAIT.retries + 1
    assert [a.provider for a in calls.attempts][-1] == "test"


def test_a_list_behind_a_limit_inside_another_has_every_provider_vet_the_options() -> None:
    """`FallbackProvider([ConcurrencyLimit(FallbackProvider([a, b])), c])`: a call may reach
    `b` through the limit, so `b` vets the call's options too (on main only the inner list's
    primary did: an option `b` does not take was accepted, and `b` would have been sent it)."""
    from sdk.providers import ConcurrencyLimit

    document = json.dumps(DECISION)
    first = TestProvider([document], options=["tenant_tier"])
    second = TestProvider([document])  # (takes no `tenant_tier`)
    last = TestProvider([document], options=["tenant_tier"])
    nested = FallbackProvider([ConcurrencyLimit(FallbackProvider([first, second]), 2), last])
    assert [getattr(p, "inner", p) for p in nested.reached()] == [first, second, last]
    with pytest.raises(TypeError, match="tenant_tier"):
        StructuredClient(nested).generate(Decision, prompt="x", tenant_tier="gold")
    assert first.requests == second.requests == last.requests == []
    # Every provider it may reach takes it: sent to the first.
    second_takes = TestProvider([document], options=["tenant_tier"])
    taking = FallbackProvider([ConcurrencyLimit(FallbackProvider([first, second_takes]), 2),
                               last])  # fmt: skip
    assert StructuredClient(taking).generate(Decision, prompt="x", tenant_tier="gold").value
    assert len(first.requests) == 1 and second_takes.requests == last.requests == []
