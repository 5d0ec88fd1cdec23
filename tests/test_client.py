"""StructuredClient's retry policies and bookkeeping, through the real Anthropic client on a mock
transport: what is retried, what each retry sends, what a failure hands back."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import pytest

from contracts import Decision
from contracts import InvoiceExtraction
from sdk import Backoff
from sdk import CheckFailed
from sdk import InvalidJSON
from sdk import MaxTokensRamp
from sdk import ProviderError
from sdk import ProviderRetriesExhausted
from sdk import RefusedOutput
from sdk import RetriesExhausted
from sdk import SchemaViolation
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk.engine.conversation import feedback_message
from sdk.providers import AnthropicProvider
from sdk.providers import Message
from tests.wire_support import ANTHROPIC_REQUEST_ID
from tests.wire_support import DECISION
from tests.wire_support import Sleeps
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import error_reply

VALID = json.dumps(DECISION)
SOURCE = (
    "ACME GMBH - INVOICE INV-1042\nIssued 2026-03-14\nConsulting 10 x 120.00 = 1200.00\n"
    "Travel 80.50\nTotal due: EUR 1,280.50\n"
)


def _invalid(reasoning: str = "Short.", answer: str = "maybe") -> str:
    return json.dumps({"reasoning": reasoning, "answer": answer, "confidence": "high"})


def _client(wire: Wire, **options: Any) -> StructuredClient:
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    options.setdefault("sleep", Sleeps())
    return StructuredClient(provider, **options)


# --- invalid output: retried with compact feedback ---


def test_invalid_then_valid_retry_carries_the_previous_output_and_the_violations() -> None:
    wire = Wire(anthropic_reply(text=_invalid()), anthropic_reply(text=VALID))
    result = _client(wire).generate(Decision, prompt="Approve?", system="Be careful.")
    assert result.value.answer.value == "approve"
    first, second = wire.bodies()
    assert first["messages"] == [{"role": "user", "content": "Approve?"}]
    original, previous, feedback = second["messages"]
    assert original == first["messages"][0]
    assert previous == {"role": "assistant", "content": _invalid()}
    assert feedback["role"] == "user"
    assert "/answer: 'maybe' is not one of ['approve', 'reject', 'escalate']" in feedback["content"]
    assert second["system"] == "Be careful." and second["output_config"] == first["output_config"]
    # Every attempt is kept, with its error.
    assert [type(a.error).__name__ if a.error else None for a in result.attempts] == [
        "SchemaViolation",
        None,
    ]
    assert result.attempts[0].text == _invalid()


def test_retry_feedback_does_not_grow_with_the_document() -> None:
    small_text = _invalid("Short.")
    feedback = {}
    for name, text in (("small", small_text), ("big", _invalid("Long reasoning. " * 2000))):
        wire = Wire(anthropic_reply(text=text), anthropic_reply(text=VALID))
        _client(wire).generate(Decision, prompt="Approve?")
        sent = wire.bodies()[1]["messages"]
        if name == "small":
            assert sent[1]["content"] == text  # the previous output, once, as the assistant's turn
        else:
            # A reply past the threshold is not resent at all: an excerpt shows where it is wrong.
            assert [message["role"] for message in sent] == ["user", "assistant", "user"]
            assert sent[1]["content"] == f"({len(text):,} characters, not repeated)"
        feedback[name] = sent[-1]["content"]
    assert feedback["big"].startswith(feedback["small"].rsplit("\n", 1)[0])
    assert len(feedback["small"]) < 300 and len(feedback["big"]) < 800


def test_each_retry_replaces_the_last_feedback_instead_of_piling_up_history() -> None:
    wire = Wire(
        anthropic_reply(text=_invalid("Same size A.")),
        anthropic_reply(text=_invalid("Same size B.")),
        anthropic_reply(text=VALID),
    )
    result = _client(wire, retries=2).generate(Decision, prompt="Approve?")
    assert len(result.attempts) == 3
    sizes = [len(request.content) for request in wire.requests]
    assert len(wire.bodies()[2]["messages"]) == 3  # original, last output, feedback
    assert sizes[2] == sizes[1]  # constant input per retry, not quadratic growth
    assert wire.bodies()[2]["messages"][1]["content"] == _invalid("Same size B.")


def test_invalid_json_feedback_says_where_the_json_broke() -> None:
    wire = Wire(anthropic_reply(text='{"reasoning": "x" "answer"'), anthropic_reply(text=VALID))
    _client(wire).generate(Decision, prompt="Approve?")
    feedback = wire.bodies()[1]["messages"][2]["content"]
    assert "Expecting ',' delimiter at char 18" in feedback


def test_retries_exhausted_holds_every_attempt_text_error_and_usage() -> None:
    wire = Wire(anthropic_reply(text=_invalid()))
    with pytest.raises(RetriesExhausted) as info:
        _client(wire, retries=2).generate(Decision, prompt="Approve?")
    error = info.value
    assert len(error.attempts) == 3 == len(wire.requests)
    assert all(isinstance(a.error, SchemaViolation) for a in error.attempts)
    assert all(a.text == _invalid() for a in error.attempts)
    assert [a.usage.output_tokens for a in error.attempts] == [71, 71, 71]
    assert isinstance(error.last_error, SchemaViolation)
    assert isinstance(error.__cause__, SchemaViolation)
    assert error.text == _invalid()
    assert "3 attempts" in str(error)


def test_retries_zero_raises_the_parser_error_itself() -> None:
    wire = Wire(anthropic_reply(text="not json"))
    with pytest.raises(InvalidJSON):
        _client(wire, retries=0).generate(Decision, prompt="Approve?")
    assert len(wire.requests) == 1


def test_failed_source_quote_is_retried_with_the_quote_named() -> None:
    bad = {**InvoiceExtraction.example(), "evidence": "Total: 9,999"}
    wire = Wire(
        anthropic_reply(text=json.dumps(bad)),
        anthropic_reply(text=json.dumps(InvoiceExtraction.example())),
    )
    result = _client(wire).generate(InvoiceExtraction, prompt="Extract.", source=SOURCE)
    assert result.value.vendor == "Acme GmbH"
    first, second = wire.bodies()
    assert SOURCE in first["messages"][0]["content"]  # the source goes into the prompt
    assert "/evidence" in second["messages"][2]["content"]
    assert "'Total: 9,999'" in second["messages"][2]["content"]
    assert isinstance(result.attempts[0].error, CheckFailed)


def test_feedback_message_is_bounded() -> None:
    from sdk import Violation

    error = SchemaViolation(
        "bad", violations=[Violation(f"/items/{i}/qty", "x" * 500) for i in range(50)]
    )
    message = feedback_message(Decision, error)
    assert message.count("\n- /items/") == 20
    assert "... and 30 more" in message
    assert max(len(line) for line in message.splitlines()) < 220


# --- truncation, refusal ---


def test_truncation_ramp_raises_max_tokens_by_the_factor_up_to_the_cap() -> None:
    wire = Wire(
        anthropic_reply("anthropic_max_tokens.json"),
        anthropic_reply("anthropic_max_tokens.json"),
        anthropic_reply(text=VALID),
    )
    client = _client(wire, truncation=MaxTokensRamp(factor=3, cap=2000, retries=5))
    result = client.generate(Decision, prompt="Approve?", max_tokens=500)
    assert [body["max_tokens"] for body in wire.bodies()] == [500, 1500, 2000]
    assert [a.max_tokens for a in result.attempts] == [500, 1500, 2000]
    assert wire.bodies()[1]["messages"] == wire.bodies()[0]["messages"]  # no feedback for a cut


def test_truncation_ramp_stops_at_the_cap() -> None:
    wire = Wire(anthropic_reply("anthropic_max_tokens.json"))
    client = _client(wire, truncation=MaxTokensRamp(factor=2, cap=1000, retries=5))
    with pytest.raises(RetriesExhausted) as info:
        client.generate(Decision, prompt="Approve?", max_tokens=400)
    assert [body["max_tokens"] for body in wire.bodies()] == [400, 800, 1000]
    assert isinstance(info.value.last_error, TruncatedOutput)


def test_a_refusal_after_a_retry_is_still_a_refused_output() -> None:
    wire = Wire(
        error_reply("anthropic_error_429.json", 429), anthropic_reply("anthropic_refusal.json")
    )
    with pytest.raises(RefusedOutput) as info:
        _client(wire).generate(Decision, prompt="Approve?")
    assert not isinstance(info.value, RetriesExhausted)
    assert info.value.__notes__ == ["attempt 2 of this call; before it: attempt 1: ProviderError"]


def test_refusal_is_retried_only_when_asked() -> None:
    wire = Wire(anthropic_reply("anthropic_refusal.json"), anthropic_reply(text=VALID))
    result = _client(wire, refusal_retries=1).generate(Decision, prompt="Approve?")
    assert isinstance(result.attempts[0].error, RefusedOutput)
    assert len(wire.requests) == 2


# --- budget and usage ---


def test_usage_is_summed_over_attempts() -> None:
    wire = Wire(anthropic_reply(text=_invalid()), anthropic_reply(text=VALID))
    result = _client(wire).generate(Decision, prompt="Approve?")
    assert (result.usage.input_tokens, result.usage.output_tokens) == (824, 142)
    assert result.usage.total_tokens == 966


def test_token_budget_stops_retrying_before_it_is_exceeded() -> None:
    wire = Wire(anthropic_reply(text=_invalid()), anthropic_reply(text=VALID))
    with pytest.raises(SchemaViolation) as info:
        _client(wire, token_budget=900).generate(Decision, prompt="Approve?")  # one costs 483
    assert len(wire.requests) == 1
    assert any("token budget of 900" in note for note in info.value.__notes__)


def test_token_budget_allows_retries_that_fit() -> None:
    wire = Wire(anthropic_reply(text=_invalid()), anthropic_reply(text=VALID))
    result = _client(wire, token_budget=1000).generate(Decision, prompt="Approve?")
    assert len(result.attempts) == 2


def test_token_budget_admits_a_retry_that_lands_exactly_on_it() -> None:
    # Two attempts cost 483 each: a budget of 966 admits the second (retries stop before the
    # spent tokens would *pass* the budget; reaching it is allowed), 965 does not.
    wire = Wire(anthropic_reply(text=_invalid()), anthropic_reply(text=VALID))
    result = _client(wire, token_budget=966).generate(Decision, prompt="Approve?")
    assert len(result.attempts) == 2
    assert result.usage.total_tokens == 966
    wire = Wire(anthropic_reply(text=_invalid()), anthropic_reply(text=VALID))
    with pytest.raises(SchemaViolation) as info:
        _client(wire, token_budget=965).generate(Decision, prompt="Approve?")
    assert len(wire.requests) == 1
    assert any("token budget of 965 (483 spent)" in note for note in info.value.__notes__)


# --- transport and API errors ---


def test_429_then_success_waits_what_retry_after_says() -> None:
    sleeps = Sleeps()
    wire = Wire(error_reply("anthropic_error_429.json", 429, retry_after="17"), anthropic_reply())
    result = _client(wire, sleep=sleeps).generate(Decision, prompt="Approve?")
    assert sleeps.waits == [17.0]
    assert result.value == Decision.model_validate(DECISION)
    failed = result.attempts[0]
    assert isinstance(failed.error, ProviderError)
    assert (failed.error.status_code, failed.error.retry_after) == (429, 17.0)
    assert failed.error.request_id == ANTHROPIC_REQUEST_ID
    assert failed.text is None and failed.usage.total_tokens == 0


def test_a_retry_after_beyond_the_limit_is_not_waited_for() -> None:
    wire = Wire(error_reply("anthropic_error_429.json", 429, retry_after="3600"))
    with pytest.raises(ProviderError) as info:
        _client(wire, backoff=Backoff(max_retry_after=60)).generate(Decision, prompt="x")
    assert info.value.retry_after == 3600
    assert len(wire.requests) == 1


def test_500_storm_ends_in_retries_exhausted_that_is_also_a_provider_error() -> None:
    sleeps = Sleeps()
    wire = Wire(error_reply("anthropic_error_500.json", 500))
    backoff = Backoff(retries=3, initial=0.5, maximum=4.0)
    with pytest.raises(ProviderRetriesExhausted) as info:
        _client(wire, backoff=backoff, sleep=sleeps).generate(Decision, prompt="Approve?")
    error = info.value
    assert isinstance(error, RetriesExhausted) and isinstance(error, ProviderError)
    assert error.status_code == 500 and error.request_id == ANTHROPIC_REQUEST_ID
    assert len(error.attempts) == 4 == len(wire.requests)
    assert all(isinstance(a.error, ProviderError) for a in error.attempts)
    assert len(sleeps.waits) == 3
    # Full jitter: each wait is random within the exponential bound.
    for number, wait in enumerate(sleeps.waits, start=1):
        assert 0 <= wait <= min(4.0, 0.5 * 2 ** (number - 1))


def test_overloaded_529_is_retried() -> None:
    wire = Wire(error_reply("anthropic_error_529.json", 529), anthropic_reply())
    result = _client(wire).generate(Decision, prompt="Approve?")
    assert [a.error.status_code if a.error else None for a in result.attempts] == [529, None]  # type: ignore[union-attr]


def test_bad_request_is_not_retried() -> None:
    wire = Wire(error_reply("anthropic_error_400.json", 400))
    with pytest.raises(ProviderError) as info:
        _client(wire).generate(Decision, prompt="Approve?")
    assert not isinstance(info.value, RetriesExhausted)
    assert info.value.status_code == 400
    assert "additionalProperties" in str(info.value)
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    "failure",
    [httpx2.ConnectError("[Errno 111] Connection refused"), httpx2.ReadTimeout("timed out")],
)
def test_connection_failures_are_retried(failure: Exception) -> None:
    wire = Wire(failure, anthropic_reply())
    result = _client(wire).generate(Decision, prompt="Approve?")
    error = result.attempts[0].error
    assert isinstance(error, ProviderError) and error.status_code is None
    assert isinstance(error.__cause__, Exception)
    assert len(wire.requests) == 2


# --- arguments and logging ---


def test_messages_are_sent_as_given() -> None:
    wire = Wire(anthropic_reply())
    conversation = [
        {"role": "user", "content": "Case 1?"},
        {"role": "assistant", "content": "Which policy applies?"},
        Message("user", "The refund policy."),
    ]
    _client(wire).generate(
        Decision, messages=conversation, extra_body={"metadata": {"user_id": "u-1"}}
    )
    assert [m["content"] for m in wire.body["messages"]] == [
        "Case 1?",
        "Which policy applies?",
        "The refund policy.",
    ]
    assert wire.body["metadata"] == {"user_id": "u-1"}


@pytest.mark.parametrize(
    "arguments",
    [{}, {"prompt": "x", "messages": [{"role": "user", "content": "y"}]}, {"messages": []},
     {"messages": [{"role": "system", "content": "s"}]}],
)  # fmt: skip
def test_bad_arguments_fail_before_any_request(arguments: dict[str, Any]) -> None:
    wire = Wire(anthropic_reply())
    with pytest.raises(ValueError):
        _client(wire).generate(Decision, **arguments)
    assert wire.requests == []


def test_debug_log_has_the_request_summary_and_each_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="sdk")
    wire = Wire(anthropic_reply(text=_invalid()), anthropic_reply(text=VALID))
    _client(wire).generate(Decision, prompt="Approve?")
    lines = [r.getMessage() for r in caplog.records if r.name == "sdk.client"]
    assert any("attempt 1: Decision v1 -> anthropic" in line for line in lines)
    failed = "attempt 1: end_turn, 412 in / 71 out tokens: SchemaViolation"
    assert any(failed in line for line in lines)
    assert any("attempt 2: end_turn, 412 in / 71 out tokens: valid" in line for line in lines)
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name.startswith("sdk"))


def test_nothing_is_logged_at_info_by_default(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sdk")
    _client(Wire(anthropic_reply())).generate(Decision, prompt="Approve?")
    assert [r for r in caplog.records if r.name.startswith("sdk")] == []
