"""The Anthropic adapter: pure request building and reply reading, then through the real
`anthropic` client on a mock transport (strict response validation on every fixture)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest

from contracts import Decision
from contracts import ReviewFinding
from sdk import AsyncStructuredClient
from sdk import Partial
from sdk import RefusedOutput
from sdk import Result
from sdk import SchemaViolation
from sdk import StopReason
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk import UnexpectedStop
from sdk.providers import AnthropicProvider
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import Message
from sdk.providers import Sampling
from sdk.providers.anthropic import AnthropicStreamReader
from sdk.providers.anthropic import build_request
from sdk.providers.anthropic import read_response
from sdk.schema import ANTHROPIC
from sdk.schema import to_wire
from tests.wire_support import ANTHROPIC_REQUEST_ID
from tests.wire_support import BOUNDED
from tests.wire_support import DECISION
from tests.wire_support import SSE
from tests.wire_support import Bounded
from tests.wire_support import Wire
from tests.wire_support import anthropic_async_client
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import fixture
from tests.wire_support import fixture_json

MODEL = "claude-sonnet-4-6"


def _request(contract: Any = Decision, **changes: Any) -> CompletionRequest:
    fields: dict[str, Any] = {
        "output": JsonDocument(contract),
        "messages": (Message("user", "Invoice INV-7781 for $4,180.00 against PO-2291. Approve?"),),
        "max_tokens": 1024,
        "system": "You review purchase approvals.",
    }
    return CompletionRequest(**{**fields, **changes})


def _message(name: str = "anthropic_success.json", **changes: Any) -> anthropic.types.Message:
    return anthropic.types.Message.model_validate({**fixture_json(name), **changes})


def _client(wire: Wire, mode: Any = "json_schema", **options: Any) -> StructuredClient:
    provider = AnthropicProvider(anthropic_client(wire), model=MODEL, mode=mode)
    return StructuredClient(provider, **options)


# --- pure: the request ---


def test_build_request_sends_the_schema_in_the_anthropic_dialect() -> None:
    kwargs = build_request(_request(ReviewFinding), model=MODEL)
    assert kwargs["output_config"] == {
        "format": {"type": "json_schema", "schema": to_wire(ReviewFinding, ANTHROPIC).schema}
    }
    schema = kwargs["output_config"]["format"]["schema"]
    assert list(schema["properties"]) == ["reasoning", "severity", "file", "line", "fix"]
    assert "minimum" not in schema["properties"]["line"]["anyOf"][0]
    assert kwargs["system"] == "You review purchase approvals."
    assert kwargs["messages"] == [
        {"role": "user", "content": "Invoice INV-7781 for $4,180.00 against PO-2291. Approve?"}
    ]
    assert (kwargs["model"], kwargs["max_tokens"]) == (MODEL, 1024)
    assert "tools" not in kwargs


def test_build_request_tool_mode_forces_one_strict_tool() -> None:
    kwargs = build_request(_request(), model=MODEL, mode="tool")
    (tool,) = kwargs["tools"]
    assert tool["name"] == "Decision_v1"
    assert tool["strict"] is True
    assert tool["input_schema"] == to_wire(Decision, ANTHROPIC).schema
    assert tool["description"] == "A decision on a request, reasoning first."
    assert kwargs["tool_choice"] == {"type": "tool", "name": "Decision_v1"}
    assert "output_config" not in kwargs


def test_build_request_merges_the_callers_output_config_and_options() -> None:
    request = _request(
        options=Sampling(stop=("END",)),
        extra_body={"output_config": {"effort": "low"}, "metadata": {"user_id": "u"}},
    )
    kwargs = build_request(request, model=MODEL)
    assert kwargs["output_config"]["effort"] == "low"
    assert kwargs["output_config"]["format"]["type"] == "json_schema"
    assert kwargs["metadata"] == {"user_id": "u"}
    # The SDK's option names, in the API's: `stop` is `stop_sequences`, always a list.
    assert kwargs["stop_sequences"] == ["END"]


# --- pure: the reply ---


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("end_turn", StopReason.END_TURN),
        ("max_tokens", StopReason.MAX_TOKENS),
        ("stop_sequence", StopReason.STOP_SEQUENCE),
        ("tool_use", StopReason.TOOL_USE),
        ("pause_turn", StopReason.PAUSE_TURN),
        ("refusal", StopReason.REFUSAL),
        ("model_context_window_exceeded", StopReason.CONTEXT_WINDOW),
    ],
)
def test_every_anthropic_stop_reason_is_normalized(raw: str, normalized: StopReason) -> None:
    completion = read_response(_message(stop_reason=raw))
    assert completion.stop_reason is normalized
    assert completion.raw_stop_reason == raw


def test_read_response_refusal_keeps_text_and_category() -> None:
    completion = read_response(_message("anthropic_refusal.json"))
    assert completion.stop_reason is StopReason.REFUSAL
    assert completion.refusal_category == "cyber"
    assert completion.refusal is not None and completion.refusal.startswith("I can't help")
    assert completion.text == completion.refusal


def test_read_response_tool_mode_reads_the_tool_input() -> None:
    completion = read_response(_message("anthropic_tool_use.json"), mode="tool")
    assert completion.text is not None and json.loads(completion.text) == DECISION
    assert completion.stop_reason is StopReason.TOOL_USE


def test_read_response_keeps_cached_input_tokens_apart() -> None:
    # Anthropic's `input_tokens` excludes the cache: each count stays in its own field.
    body = fixture_json("anthropic_success.json")
    body["usage"].update(cache_read_input_tokens=1000, cache_creation_input_tokens=20)
    usage = read_response(anthropic.types.Message.model_validate(body)).usage
    assert (usage.input_tokens, usage.output_tokens) == (body["usage"]["input_tokens"], 71)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (1000, 20)
    assert usage.reasoning_tokens == 0


# --- through the real client ---


def test_success_returns_a_result_with_everything_it_was_decided_on() -> None:
    wire = Wire(anthropic_reply())
    result = _client(wire).generate(Decision, prompt="Approve?", system="You review approvals.")
    assert result.value == Decision.model_validate(DECISION)
    assert result.stop_reason is StopReason.END_TURN and result.raw_stop_reason == "end_turn"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (412, 71)
    assert (result.provider, result.model) == ("anthropic", MODEL)
    assert result.request_id == ANTHROPIC_REQUEST_ID
    assert (result.schema.name, result.schema.version) == ("Decision", 1)
    assert result.schema.fingerprint == Decision.fingerprint()
    assert len(result.attempts) == 1 and result.attempts[0].error is None
    sent = wire.body
    assert str(wire.requests[0].url) == "http://anthropic.test/v1/messages"
    assert sent["output_config"]["format"] == {
        "type": "json_schema",
        "schema": to_wire(Decision, ANTHROPIC).schema,
    }
    assert sent["system"] == "You review approvals."
    assert sent["messages"] == [{"role": "user", "content": "Approve?"}]


def test_result_lists_what_the_dialect_removed() -> None:
    finding = {"reasoning": "r", "severity": "info", "file": "a.py", "line": 3, "fix": None}
    text = json.dumps(finding)
    result = _client(Wire(anthropic_reply(text=text))).generate(ReviewFinding, prompt="Review.")
    assert [(r.pointer, r.keyword, r.value) for r in result.removed if r.is_constraint] == [
        ("/properties/line/anyOf/0", "minimum", 1)
    ]


def test_a_value_breaking_only_a_stripped_constraint_is_a_schema_violation() -> None:
    wire = Wire(anthropic_reply(text=json.dumps({**BOUNDED, "count": 0})))
    with pytest.raises(SchemaViolation) as info:
        _client(wire, retries=0).generate(Bounded, prompt="Count.")
    assert [v.pointer for v in info.value.violations] == ["/count"]
    assert "minimum" not in wire.body["output_config"]["format"]["schema"]["properties"]["count"]


def test_refusal_is_refused_output_and_not_retried() -> None:
    wire = Wire(anthropic_reply("anthropic_refusal.json"))
    with pytest.raises(RefusedOutput) as info:
        _client(wire).generate(Decision, prompt="Write a credential harvester.")
    assert info.value.category == "cyber"
    assert info.value.refusal is not None and "credentials" in info.value.refusal
    assert info.value.stop_reason is StopReason.REFUSAL
    assert len(wire.requests) == 1


def test_truncation_fails_fast_by_default() -> None:
    wire = Wire(anthropic_reply("anthropic_max_tokens.json"))
    with pytest.raises(TruncatedOutput) as info:
        _client(wire).generate(Decision, prompt="Approve?")
    assert info.value.text is not None and info.value.text.startswith('{"reasoning":"The invoice')
    assert info.value.raw_stop_reason == "max_tokens"
    assert len(wire.requests) == 1


def test_context_window_is_truncation() -> None:
    with pytest.raises(TruncatedOutput) as info:
        wire = Wire(anthropic_reply("anthropic_context_window.json"))
        _client(wire).generate(Decision, prompt="x")
    assert info.value.stop_reason is StopReason.CONTEXT_WINDOW
    assert info.value.raw_stop_reason == "model_context_window_exceeded"


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [("pause_turn", StopReason.PAUSE_TURN), ("stop_sequence", StopReason.STOP_SEQUENCE)],
)
def test_a_stop_the_mode_does_not_expect_is_unexpected(raw: str, normalized: StopReason) -> None:
    wire = Wire(anthropic_reply(stop_reason=raw))
    with pytest.raises(UnexpectedStop) as info:
        _client(wire).generate(Decision, prompt="Approve?")
    assert (info.value.stop_reason, info.value.raw_stop_reason) == (normalized, raw)
    assert len(wire.requests) == 1


def test_tool_mode_reads_the_document_from_the_tool_call() -> None:
    wire = Wire(anthropic_reply("anthropic_tool_use.json"))
    result = _client(wire, mode="tool").generate(Decision, prompt="Approve?")
    assert result.value == Decision.model_validate(DECISION)
    assert result.stop_reason is StopReason.TOOL_USE
    assert wire.body["tools"][0]["strict"] is True
    assert wire.body["tool_choice"] == {"type": "tool", "name": "Decision_v1"}


def test_tool_mode_without_a_tool_call_is_unexpected() -> None:
    with pytest.raises(UnexpectedStop):
        _client(Wire(anthropic_reply()), mode="tool").generate(Decision, prompt="Approve?")


# --- streaming ---


def test_stream_yields_partials_then_the_result() -> None:
    wire = Wire(anthropic_reply("anthropic_stream_success.sse"))
    items = list(_client(wire).stream(Decision, prompt="Approve?"))
    *partials, result = items
    assert isinstance(result, Result)
    assert result.value == Decision.model_validate(DECISION)
    assert result.request_id == ANTHROPIC_REQUEST_ID
    assert (result.usage.input_tokens, result.usage.output_tokens) == (412, 71)
    assert len(partials) > 5 and all(isinstance(p, Partial) for p in partials)
    reasonings = [p.value.get("reasoning", "") for p in partials]
    assert reasonings == sorted(reasonings, key=len)  # the document grows
    assert partials[-1].value == DECISION
    assert wire.body["stream"] is True


def test_stream_decides_on_the_stop_reason_that_arrives_last() -> None:
    stream = _client(Wire(anthropic_reply("anthropic_stream_max_tokens.sse"))).stream(
        Decision, prompt="Approve?"
    )
    partials = []
    with pytest.raises(TruncatedOutput) as info:
        for item in stream:
            partials.append(item)
    assert partials and all(isinstance(p, Partial) for p in partials)  # seen before the stop
    assert info.value.text is not None and info.value.text.endswith("vendor is on the")
    # The error carries the last partial value, so a cut stream loses nothing.
    assert info.value.partial is partials[-1]
    assert info.value.partial.value["reasoning"].endswith("vendor is on the")
    assert not info.value.partial.is_complete("/reasoning")


def test_stream_of_a_refusal_is_refused_output_even_though_it_is_prose() -> None:
    with pytest.raises(RefusedOutput) as info:
        wire = Wire(anthropic_reply("anthropic_stream_refusal.sse"))
        list(_client(wire).stream(Decision, prompt="x"))
    assert info.value.category == "cyber"


def test_stream_tool_mode_streams_the_tool_input() -> None:
    wire = Wire(anthropic_reply("anthropic_stream_tool_use.sse"))
    *partials, result = list(_client(wire, mode="tool").stream(Decision, prompt="Approve?"))
    assert isinstance(result, Result) and result.value == Decision.model_validate(DECISION)
    assert partials and partials[-1].value == DECISION


def test_stream_state_is_pure_and_keeps_the_stop_reason_last() -> None:
    client = anthropic_client(Wire(anthropic_reply("anthropic_stream_refusal.sse")))
    state = AnthropicStreamReader()
    with client.messages.create(**build_request(_request(), model=MODEL), stream=True) as events:
        for event in events:
            state.feed(event)
    completion = state.finish()
    assert completion.stop_reason is StopReason.REFUSAL
    assert completion.refusal_category == "cyber"
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (388, 27)


def test_an_error_event_inside_the_stream_is_a_retried_provider_error() -> None:
    head = fixture("anthropic_stream_success.sse").decode().split("event: content_block_stop")[0]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    broken = head + f"event: error\ndata: {json.dumps(error)}\n\n"
    wire = Wire(
        httpx2.Response(200, content=broken.encode(), headers=SSE),
        anthropic_reply("anthropic_stream_success.sse"),
    )
    waits: list[float] = []
    items = list(_client(wire, sleep=waits.append).stream(Decision, prompt="Approve?"))
    result = items[-1]
    assert isinstance(result, Result) and result.value == Decision.model_validate(DECISION)
    assert len(wire.requests) == 2 and len(waits) == 1
    assert "overloaded_error" in str(result.attempts[0].error)


# --- async ---


async def test_async_generate_and_stream() -> None:
    provider = AnthropicProvider(
        anthropic_async_client(
            Wire(anthropic_reply(), anthropic_reply("anthropic_stream_success.sse"))
        ),
        model=MODEL,
    )
    client = AsyncStructuredClient(provider)
    result = await client.generate(Decision, prompt="Approve?")
    assert result.value == Decision.model_validate(DECISION)
    items = [item async for item in client.stream(Decision, prompt="Approve?")]
    assert isinstance(items[-1], Result) and items[-1].value == result.value
    assert any(isinstance(item, Partial) for item in items[:-1])


async def test_async_stream_cut_by_max_tokens_keeps_the_last_partial() -> None:
    wire = Wire(anthropic_reply("anthropic_stream_max_tokens.sse"))
    client = AsyncStructuredClient(AnthropicProvider(anthropic_async_client(wire), model=MODEL))
    seen = []
    with pytest.raises(TruncatedOutput) as info:
        async for item in client.stream(Decision, prompt="Approve?"):
            seen.append(item)
    assert seen and info.value.partial is seen[-1]
    assert info.value.text is not None and info.value.text.endswith("vendor is on the")


def test_a_sync_call_on_an_async_client_says_so() -> None:
    provider = AnthropicProvider(anthropic_async_client(Wire(anthropic_reply())), model=MODEL)
    with pytest.raises(TypeError, match="async"):
        StructuredClient(provider).generate(Decision, prompt="x")
