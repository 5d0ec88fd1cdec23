"""TestProvider, the scripted provider users put behind a client in their own tests."""

from __future__ import annotations

import asyncio
import json

import pytest

from contracts import Decision
from contracts import DecisionAnswer
from sdk import AsyncStructuredClient
from sdk import Partial
from sdk import ProviderError
from sdk import RefusedOutput
from sdk import Result
from sdk import StopReason
from sdk import StructuredClient
from sdk import Usage
from sdk.providers import Completion
from sdk.providers import CompletionRequest
from sdk.providers import FallbackProvider
from sdk.providers import TestProvider

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


# --- scripted failures and option checking ---


def test_the_refusal_helper_scripts_a_refusal_with_its_category() -> None:
    provider = TestProvider([TestProvider.refusal("Not something I can do.", category="cyber")])
    with pytest.raises(RefusedOutput) as info:
        StructuredClient(provider).generate(Decision, prompt="x")
    assert info.value.refusal == "Not something I can do."
    assert info.value.category == "cyber"
    assert info.value.raw_stop_reason == "refusal"


def test_the_truncation_helper_cuts_the_document_and_the_parser_says_truncated() -> None:
    from sdk import TruncatedOutput

    provider = TestProvider([TestProvider.truncation(VALID, keep=20)])
    with pytest.raises(TruncatedOutput) as info:
        StructuredClient(provider).generate(Decision, prompt="x")
    assert info.value.text == json.dumps(VALID)[:20]
    assert info.value.stop_reason is StopReason.MAX_TOKENS
    default_cut = TestProvider.truncation(Decision.model_validate(VALID)).text
    assert default_cut is not None
    assert len(default_cut) == len(Decision.model_validate(VALID).model_dump_json()) // 2


def test_the_provider_error_helper_is_retried_when_transient_and_not_otherwise() -> None:
    from sdk import Backoff

    backoff = Backoff(retries=2, initial=0.0, maximum=0.0)
    transient = TestProvider([TestProvider.provider_error(503), VALID])
    result = StructuredClient(transient, backoff=backoff).generate(Decision, prompt="x")
    assert len(result.attempts) == 2
    first = result.attempts[0].error
    assert isinstance(first, ProviderError) and first.status_code == 503

    final = TestProvider([TestProvider.provider_error(401, "invalid x-api-key"), VALID])
    with pytest.raises(ProviderError) as info:
        StructuredClient(final, backoff=backoff).generate(Decision, prompt="x")
    assert info.value.status_code == 401 and len(final.requests) == 1


def test_a_misspelled_option_is_a_type_error_naming_it_before_any_reply() -> None:
    provider = TestProvider([VALID])
    with pytest.raises(TypeError, match=r"'temprature' \(did you mean 'temperature'\?\)"):
        StructuredClient(provider).generate(Decision, prompt="x", temprature=0)
    assert provider.requests == []  # refused when the request was built, nothing was "sent"
    result = StructuredClient(provider).generate(Decision, prompt="x", temperature=0, seed=3)
    assert dict(provider.requests[0].options.items()) == {"temperature": 0, "seed": 3}
    assert result.value.answer == DecisionAnswer.APPROVE


def test_options_your_real_provider_takes_can_be_accepted() -> None:
    provider = TestProvider([VALID])
    client = StructuredClient(provider)
    client.generate(Decision, prompt="x", extra_body={"output_config": {"effort": "low"}})
    assert provider.requests[0].extra_body["output_config"] == {"effort": "low"}
    with pytest.raises(TypeError, match="reasoning_effort"):
        StructuredClient(TestProvider([VALID])).generate(
            Decision, prompt="x", reasoning_effort="low"
        )


def test_options_given_to_the_test_provider_reach_it_through_the_client() -> None:
    # `options=` is documented to accept more names: they work through the client as the
    # provider's own, per call, as client defaults, with `with_options`, sync and async.
    provider = TestProvider([VALID], repeat=True, options=["reasoning_effort", "tenant_tier"])
    client = StructuredClient(provider, tenant_tier="gold")
    client.generate(Decision, prompt="x", reasoning_effort="low")
    client.with_options(reasoning_effort="high").generate(Decision, prompt="x", temperature=0)

    async def main() -> None:
        await AsyncStructuredClient(provider).generate(Decision, prompt="x", tenant_tier="free")

    asyncio.run(main())
    *_, last = StructuredClient(provider).stream(Decision, prompt="x", reasoning_effort="medium")
    assert isinstance(last, Result)
    assert [dict(request.options.items()) for request in provider.requests] == [
        {"tenant_tier": "gold", "reasoning_effort": "low"},
        {"tenant_tier": "gold", "reasoning_effort": "high", "temperature": 0},
        {"tenant_tier": "free"},
        {"reasoning_effort": "medium"},
    ]
    # Still refused: a name no provider of the call takes, and a misspelling of one it does.
    with pytest.raises(TypeError, match=r"'tenant_teir' \(did you mean 'tenant_tier'\?\)"):
        StructuredClient(provider).generate(Decision, prompt="x", tenant_teir="gold")
    with pytest.raises(TypeError, match="reasoning_effort"):
        StructuredClient(TestProvider([VALID])).generate(Decision, prompt="x", reasoning_effort=1)
    assert len(provider.requests) == 4


def test_a_provider_s_own_option_is_vetted_on_every_provider_a_call_may_go_to() -> None:
    own = TestProvider([VALID], options=["tenant_tier"])
    other = TestProvider([VALID])
    with pytest.raises(TypeError, match="does not take the option 'tenant_tier'"):
        StructuredClient(FallbackProvider([own, other])).generate(
            Decision, prompt="x", tenant_tier="gold"
        )
    assert own.requests == other.requests == []
