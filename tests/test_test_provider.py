"""TestProvider, the scripted provider users put behind a client in their own tests."""

from __future__ import annotations

import json

import pytest

from contracts import Decision, DecisionAnswer
from sdk import (
    AsyncStructuredClient,
    Partial,
    ProviderError,
    RefusedOutput,
    Result,
    StopReason,
    StructuredClient,
    Usage,
)
from sdk.providers import Completion, CompletionRequest, TestProvider

VALID = {"reasoning": "Within policy.", "answer": "approve", "confidence": "high"}


def test_replies_in_every_form_are_played_in_order() -> None:
    def echo(request: CompletionRequest) -> str:
        return json.dumps({**VALID, "reasoning": request.messages[0].content})

    provider = TestProvider(
        [
            json.dumps(VALID),
            VALID,
            Decision.model_validate(VALID),
            echo,
            Completion(json.dumps(VALID), StopReason.END_TURN, "end_turn", Usage(5, 7)),
        ]
    )
    client = StructuredClient(provider)
    results = [client.generate(Decision, prompt=f"case {n}") for n in range(5)]
    assert [r.value.answer for r in results] == [DecisionAnswer.APPROVE] * 5
    assert results[3].value.reasoning == "case 3"
    assert results[4].usage == Usage(5, 7)
    assert [r.messages[0].content for r in provider.requests] == [f"case {n}" for n in range(5)]
    assert results[0].provider == "test" and results[0].model == "test-model"


def test_a_script_drives_retries_and_errors() -> None:
    provider = TestProvider(
        [
            ProviderError("down", status_code=503),
            json.dumps({**VALID, "answer": "maybe"}),
            VALID,
        ]
    )
    result = StructuredClient(provider, sleep=lambda _: None).generate(Decision, prompt="x")
    assert len(result.attempts) == 3 and len(provider.requests) == 3
    assert "/answer" in provider.requests[2].messages[-1].content


def test_a_scripted_refusal_is_a_refused_output() -> None:
    refusal = Completion(None, StopReason.REFUSAL, "refusal", refusal="No.")
    with pytest.raises(RefusedOutput) as info:
        StructuredClient(TestProvider([refusal])).generate(Decision, prompt="x")
    assert info.value.refusal == "No."


def test_running_out_of_replies_says_so_unless_the_last_repeats() -> None:
    # Like any provider fault, it reaches the caller as a ProviderError (not retried), with the
    # TestProvider's own message and its RuntimeError as the cause.
    client = StructuredClient(TestProvider([VALID]))
    client.generate(Decision, prompt="x")
    with pytest.raises(ProviderError, match="no reply left for call 2") as info:
        client.generate(Decision, prompt="x")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert len(info.value.attempts) == 1
    repeating = StructuredClient(TestProvider([VALID], repeat=True))
    answers = [repeating.generate(Decision, prompt="x").value.answer for _ in range(3)]
    assert answers == [DecisionAnswer.APPROVE] * 3


async def test_it_streams_and_serves_the_async_client() -> None:
    provider = TestProvider([VALID], repeat=True, chunk_size=5)
    items = list(StructuredClient(provider).stream(Decision, prompt="x"))
    assert isinstance(items[-1], Result)
    assert sum(isinstance(item, Partial) for item in items) > 5
    result = await AsyncStructuredClient(provider).generate(Decision, prompt="x")
    assert result.value.answer is DecisionAnswer.APPROVE
    streamed = [item async for item in AsyncStructuredClient(provider).stream(Decision, prompt="x")]
    assert isinstance(streamed[-1], Result)
