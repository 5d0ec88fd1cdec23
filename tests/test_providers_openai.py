"""The OpenAI adapters (Responses and Chat Completions): pure request building and reply reading,
then through the real `openai` client on a mock transport (strict response validation)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from pydantic import Field

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import ContentFiltered
from sdk import Contract
from sdk import Partial
from sdk import ProviderError
from sdk import RefusedOutput
from sdk import Result
from sdk import SchemaViolation
from sdk import StopReason
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk import UnexpectedStop
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import Message
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers.openai import build_chat_request
from sdk.providers.openai import build_responses_request
from sdk.providers.openai import read_chat_response
from sdk.providers.openai import read_responses_response
from sdk.schema import OPENAI_STRICT
from sdk.schema import to_wire
from tests.wire_support import BOUNDED
from tests.wire_support import DECISION
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import OPENAI_REQUEST_ID
from tests.wire_support import SSE
from tests.wire_support import Bounded
from tests.wire_support import Sleeps
from tests.wire_support import Wire
from tests.wire_support import chat_reply
from tests.wire_support import error_reply
from tests.wire_support import fixture
from tests.wire_support import fixture_json
from tests.wire_support import openai_async_client
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

MODEL = "gpt-5.1-mini"


def _request(contract: Any = Decision) -> CompletionRequest:
    return CompletionRequest(
        JsonDocument(contract),
        messages=(Message("user", "Invoice INV-7781 for $4,180.00 against PO-2291. Approve?"),),
        max_tokens=1024,
        system="You review purchase approvals.",
    )


def _responses(wire: Wire, **options: Any) -> StructuredClient:
    options.setdefault("sleep", Sleeps())
    return StructuredClient(OpenAIResponsesProvider(openai_client(wire), model=MODEL), **options)


def _chat(wire: Wire, **options: Any) -> StructuredClient:
    options.setdefault("sleep", Sleeps())
    return StructuredClient(OpenAIChatProvider(openai_client(wire), model=MODEL), **options)


class Note(Contract):
    """An optional field that does not admit null: strict mode sends it nullable."""

    text: str
    tag: str = Field(default="none")


# --- Responses: pure ---


def test_responses_request_is_strict_json_schema_named_after_the_contract_version() -> None:
    kwargs = build_responses_request(_request(), model=MODEL)
    assert kwargs["text"] == {
        "format": {
            "type": "json_schema",
            "name": "Decision_v1",
            "schema": to_wire(Decision, OPENAI_STRICT).schema,
            "strict": True,
        }
    }
    assert kwargs["instructions"] == "You review purchase approvals."
    assert kwargs["input"] == [
        {"role": "user", "content": "Invoice INV-7781 for $4,180.00 against PO-2291. Approve?"}
    ]
    assert (kwargs["model"], kwargs["max_output_tokens"]) == (MODEL, 1024)


@pytest.mark.parametrize(
    ("name", "raw", "normalized"),
    [
        ("openai_responses_completed.json", "completed", StopReason.END_TURN),
        ("openai_responses_incomplete.json", "incomplete:max_output_tokens", StopReason.MAX_TOKENS),
        ("openai_responses_content_filter.json", "incomplete:content_filter",
         StopReason.CONTENT_FILTER),
        ("openai_responses_refusal.json", "refusal", StopReason.REFUSAL),
    ],
)  # fmt: skip
def test_every_responses_outcome_is_normalized(name: str, raw: str, normalized: StopReason) -> None:
    completion = read_responses_response(
        openai.types.responses.Response.model_validate(fixture_json(name))
    )
    assert (completion.stop_reason, completion.raw_stop_reason) == (normalized, raw)
    assert completion.model == MODEL


def test_responses_refusal_has_no_text_and_keeps_what_was_said() -> None:
    response = openai.types.responses.Response.model_validate(
        fixture_json("openai_responses_refusal.json")
    )
    completion = read_responses_response(response)
    assert completion.text is None
    assert completion.refusal == "I'm sorry, but I can't help with that request."


# --- Responses: through the client ---


def test_responses_success() -> None:
    wire = Wire(responses_reply())
    result = _responses(wire).generate(Decision, prompt="Approve?", system="Review it.")
    assert result.value == Decision.model_validate(DECISION)
    assert (result.provider, result.model, result.request_id) == (
        "openai_responses",
        MODEL,
        OPENAI_REQUEST_ID,
    )
    assert (result.usage.input_tokens, result.usage.output_tokens) == (121, 183)
    body = wire.body
    assert str(wire.requests[0].url) == "http://openai.test/v1/responses"
    assert body["text"]["format"]["strict"] is True
    assert body["text"]["format"]["name"] == "Decision_v1"
    assert list(body["text"]["format"]["schema"]["properties"]) == [
        "reasoning",
        "answer",
        "confidence",
    ]
    assert body["instructions"] == "Review it."


def test_responses_refusal_is_refused_output_with_the_refusal() -> None:
    with pytest.raises(RefusedOutput) as info:
        _responses(Wire(responses_reply("openai_responses_refusal.json"))).generate(
            Decision, prompt="x"
        )
    assert info.value.refusal == "I'm sorry, but I can't help with that request."
    assert info.value.text is None  # there was no output text at all
    assert info.value.raw_stop_reason == "refusal"


def test_responses_incomplete_is_truncation_even_though_status_is_not_failed() -> None:
    wire = Wire(responses_reply("openai_responses_incomplete.json"))
    with pytest.raises(TruncatedOutput) as info:
        _responses(wire).generate(Decision, prompt="Approve?")
    assert info.value.raw_stop_reason == "incomplete:max_output_tokens"
    assert len(wire.requests) == 1


def test_responses_content_filter_is_content_filtered() -> None:
    with pytest.raises(ContentFiltered) as info:
        _responses(Wire(responses_reply("openai_responses_content_filter.json"))).generate(
            Decision, prompt="x"
        )
    assert info.value.stop_reason is StopReason.CONTENT_FILTER


def test_responses_value_breaking_only_a_stripped_constraint_is_a_schema_violation() -> None:
    wire = Wire(responses_reply(text=json.dumps({**BOUNDED, "code": "abcd"})))
    with pytest.raises(SchemaViolation) as info:
        _responses(wire, retries=0).generate(Bounded, prompt="Code.")
    assert [v.pointer for v in info.value.violations] == ["/code"]
    assert "maxLength" not in wire.body["text"]["format"]["schema"]["properties"]["code"]


def test_null_for_an_optional_field_means_absent_in_strict_mode() -> None:
    wire = Wire(responses_reply(text='{"text": "hello", "tag": null}'))
    result = _responses(wire).generate(Note, prompt="Note it.")
    assert result.value == Note(text="hello")
    schema = wire.body["text"]["format"]["schema"]
    assert schema["required"] == ["text", "tag"]
    assert {"type": "null"} in schema["properties"]["tag"]["anyOf"]


def test_a_transiently_failed_response_is_retried() -> None:
    failed = fixture_json("openai_responses_completed.json")
    failed.update(
        status="failed", error={"code": "server_error", "message": "The server had an error."}
    )
    wire = Wire(
        httpx2.Response(200, content=json.dumps(failed).encode(), headers=OPENAI_HEADERS),
        responses_reply(),
    )
    result = _responses(wire).generate(Decision, prompt="Approve?")
    assert "server_error" in str(result.attempts[0].error)
    assert len(wire.requests) == 2


def test_a_policy_failure_is_an_unexpected_stop_not_a_retry() -> None:
    failed = fixture_json("openai_responses_completed.json")
    failed.update(status="failed", error={"code": "bio_policy", "message": "Blocked."})
    wire = Wire(httpx2.Response(200, content=json.dumps(failed).encode(), headers=OPENAI_HEADERS))
    with pytest.raises(UnexpectedStop) as info:
        _responses(wire).generate(Decision, prompt="x")
    assert info.value.raw_stop_reason == "failed:bio_policy"
    assert len(wire.requests) == 1


def test_openai_429_waits_retry_after_ms() -> None:
    sleeps = Sleeps()
    wire = Wire(
        error_reply("openai_error_429.json", 429, retry_after="1", retry_after_ms="324"),
        responses_reply(),
    )
    result = _responses(wire, sleep=sleeps).generate(Decision, prompt="Approve?")
    assert sleeps.waits == [0.324]
    error = result.attempts[0].error
    assert isinstance(error, ProviderError) and error.status_code == 429
    assert "Rate limit reached for gpt-5.1-mini" in str(error)


def test_openai_bad_request_is_not_retried() -> None:
    wire = Wire(error_reply("openai_error_400.json", 400))
    with pytest.raises(ProviderError) as info:
        _responses(wire).generate(Decision, prompt="x")
    assert info.value.status_code == 400 and info.value.request_id == OPENAI_REQUEST_ID
    assert len(wire.requests) == 1


def test_responses_stream_success_incomplete_and_refusal() -> None:
    items = list(
        _responses(Wire(responses_reply("openai_responses_stream_success.sse"))).stream(
            Decision, prompt="Approve?"
        )
    )
    assert isinstance(items[-1], Result) and items[-1].value == Decision.model_validate(DECISION)
    assert items[-1].request_id == OPENAI_REQUEST_ID
    assert all(isinstance(item, Partial) for item in items[:-1]) and len(items) > 3
    with pytest.raises(TruncatedOutput):
        list(
            _responses(Wire(responses_reply("openai_responses_stream_incomplete.sse"))).stream(
                Decision, prompt="x"
            )
        )
    with pytest.raises(RefusedOutput) as info:
        list(
            _responses(Wire(responses_reply("openai_responses_stream_refusal.sse"))).stream(
                Decision, prompt="x"
            )
        )
    assert info.value.refusal == "I'm sorry, but I can't help with that request."


def test_responses_stream_error_event_is_a_retried_provider_error() -> None:
    event = {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error.",
        "param": None,
        "sequence_number": 7,
    }
    error = f"event: error\ndata: {json.dumps(event)}\n\n"
    wire = Wire(
        httpx2.Response(200, content=error.encode(), headers={**OPENAI_HEADERS, **SSE}),
        responses_reply("openai_responses_stream_success.sse"),
    )
    items = list(_responses(wire).stream(Decision, prompt="Approve?"))
    assert isinstance(items[-1], Result)
    assert "server_error" in str(items[-1].attempts[0].error)


async def test_responses_async() -> None:
    provider = OpenAIResponsesProvider(
        openai_async_client(
            Wire(responses_reply(), responses_reply("openai_responses_stream_success.sse"))
        ),
        model=MODEL,
    )
    client = AsyncStructuredClient(provider)
    result = await client.generate(Decision, prompt="Approve?")
    assert result.value == Decision.model_validate(DECISION)
    items = [item async for item in client.stream(Decision, prompt="Approve?")]
    assert isinstance(items[-1], Result) and items[-1].value == result.value


# --- Chat Completions ---


def test_chat_request_is_strict_response_format_with_the_system_prompt_first() -> None:
    kwargs = build_chat_request(_request(), model=MODEL)
    assert kwargs["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Decision_v1", "schema": to_wire(Decision, OPENAI_STRICT).schema, "strict": True
        },
    }  # fmt: skip
    assert [m["role"] for m in kwargs["messages"]] == ["system", "user"]
    assert kwargs["max_completion_tokens"] == 1024


@pytest.mark.parametrize(
    ("finish", "normalized"),
    [
        ("stop", StopReason.END_TURN),
        ("length", StopReason.MAX_TOKENS),
        ("tool_calls", StopReason.TOOL_USE),
        ("function_call", StopReason.TOOL_USE),
        ("content_filter", StopReason.CONTENT_FILTER),
    ],
)
def test_every_chat_finish_reason_is_normalized(finish: str, normalized: StopReason) -> None:
    body = fixture_json("openai_chat_stop.json")
    body["choices"][0]["finish_reason"] = finish
    completion = read_chat_response(openai.types.chat.ChatCompletion.model_validate(body))
    assert (completion.stop_reason, completion.raw_stop_reason) == (normalized, finish)


def test_chat_refusal_field_decides_over_finish_reason_stop() -> None:
    body = fixture_json("openai_chat_refusal.json")
    completion = read_chat_response(openai.types.chat.ChatCompletion.model_validate(body))
    assert (completion.stop_reason, completion.raw_stop_reason) == (StopReason.REFUSAL, "refusal")
    assert completion.refusal == "I'm sorry, I can't assist with that request."


def test_chat_success_and_outcomes() -> None:
    wire = Wire(chat_reply())
    result = _chat(wire).generate(Decision, prompt="Approve?", system="Review it.")
    assert result.value == Decision.model_validate(DECISION)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (131, 183)
    assert wire.body["response_format"]["json_schema"]["strict"] is True
    assert wire.body["messages"][0] == {"role": "system", "content": "Review it."}
    with pytest.raises(RefusedOutput):
        _chat(Wire(chat_reply("openai_chat_refusal.json"))).generate(Decision, prompt="x")
    with pytest.raises(TruncatedOutput):
        _chat(Wire(chat_reply("openai_chat_length.json"))).generate(Decision, prompt="x")
    with pytest.raises(ContentFiltered):
        _chat(Wire(chat_reply("openai_chat_content_filter.json"))).generate(Decision, prompt="x")
    with pytest.raises(UnexpectedStop) as info:
        _chat(Wire(chat_reply(finish_reason="tool_calls"))).generate(Decision, prompt="x")
    assert info.value.stop_reason is StopReason.TOOL_USE


def test_chat_value_breaking_only_a_stripped_constraint_is_a_schema_violation() -> None:
    wire = Wire(chat_reply(text=json.dumps({**BOUNDED, "code": "toolong"})))
    with pytest.raises(SchemaViolation) as info:
        _chat(wire, retries=0).generate(Bounded, prompt="Code.")
    assert [v.pointer for v in info.value.violations] == ["/code"]


def test_chat_stream_success_length_and_refusal() -> None:
    wire = Wire(chat_reply("openai_chat_stream_success.sse"))
    items = list(_chat(wire).stream(Decision, prompt="Approve?"))
    assert isinstance(items[-1], Result) and items[-1].value == Decision.model_validate(DECISION)
    assert (items[-1].usage.input_tokens, items[-1].usage.output_tokens) == (
        131,
        183,
    )  # usage chunk
    assert wire.body["stream_options"] == {"include_usage": True}
    with pytest.raises(TruncatedOutput):
        list(_chat(Wire(chat_reply("openai_chat_stream_length.sse"))).stream(Decision, prompt="x"))
    with pytest.raises(RefusedOutput) as info:
        list(_chat(Wire(chat_reply("openai_chat_stream_refusal.sse"))).stream(Decision, prompt="x"))
    assert info.value.refusal


def test_chat_500_then_success() -> None:
    wire = Wire(error_reply("openai_error_500.json", 500), chat_reply())
    result = _chat(wire).generate(Decision, prompt="Approve?")
    assert [
        a.error.status_code if isinstance(a.error, ProviderError) else None for a in result.attempts
    ] == [500, None]


async def test_chat_async() -> None:
    provider = OpenAIChatProvider(
        openai_async_client(Wire(chat_reply(), chat_reply("openai_chat_stream_success.sse"))),
        model=MODEL,
    )
    client = AsyncStructuredClient(provider)
    assert (await client.generate(Decision, prompt="Approve?")).value == Decision.model_validate(
        DECISION
    )
    items = [item async for item in client.stream(Decision, prompt="Approve?")]
    assert isinstance(items[-1], Result)


def test_stream_fixture_is_what_the_chat_reader_sees() -> None:
    # Guard the fixture itself: the joined deltas are the document.
    text = fixture("openai_chat_stream_success.sse").decode()
    pieces = [
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    ]
    assert json.loads("".join(pieces)) == DECISION


class _Ticket(Contract):
    summary: str
    assignee: str = "unassigned"  # optional: strict mode sends it required and nullable


def test_a_null_for_an_absent_optional_field_keeps_the_raw_reply_as_text() -> None:
    raw = '{"summary": "Printer on fire",   "assignee": null}'
    wire = Wire(responses_reply(text=raw))
    result = _responses(wire).generate(_Ticket, prompt="File it.")
    sent = wire.body["text"]["format"]["schema"]
    assert sent["required"] == ["summary", "assignee"]  # what strict mode demands
    assert result.value.assignee == "unassigned"  # null meant absent: the default applies
    assert result.text == raw  # the reply as received, spacing and null included
    assert result.attempts[0].text == raw
    assert [(n.pointer, n.kind) for n in result.notes] == [("/assignee", "absent_null")]


# --- usage: cached and reasoning tokens kept apart ---


def test_responses_usage_keeps_cached_and_reasoning_tokens() -> None:
    body = fixture_json("openai_responses_completed.json")
    body["usage"]["input_tokens_details"]["cached_tokens"] = 64
    usage = read_responses_response(openai.types.responses.Response.model_validate(body)).usage
    assert (usage.input_tokens, usage.output_tokens) == (121, 183)  # as OpenAI counts them
    assert usage.cache_read_tokens == 64
    assert usage.reasoning_tokens == body["usage"]["output_tokens_details"]["reasoning_tokens"]
    assert usage.cache_write_tokens == 0


def test_chat_usage_keeps_cached_and_reasoning_tokens_whole_and_streamed() -> None:
    body = fixture_json("openai_chat_stop.json")
    body["usage"]["prompt_tokens_details"]["cached_tokens"] = 96
    completion = openai.types.chat.ChatCompletion.model_validate(body)
    usage = read_chat_response(completion).usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.reasoning_tokens) == (131, 96, 128)
    wire = Wire(chat_reply("openai_chat_stream_success.sse"))
    client = StructuredClient(OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini"))
    result = list(client.stream(Decision, prompt="Approve?"))[-1]
    assert result.usage.reasoning_tokens == 128 and result.usage.output_tokens == 183


@pytest.mark.parametrize("count", ["prompt_tokens", "completion_tokens"])
def test_a_null_usage_count_is_none_as_every_other_reader_reads_it(count: str) -> None:
    # On main: an OpenAI-compatible server's `"prompt_tokens": null` (the official client is
    # not strict) failed a valid answer as a ProviderError, where the Anthropic, Gemini and
    # local readers read a null count as 0.
    body = fixture_json("openai_chat_stop.json")
    body["usage"][count] = None
    wire = Wire(lambda request: httpx2.Response(200, content=json.dumps(body).encode(),
                                                headers=OPENAI_HEADERS))  # fmt: skip
    result = _chat(wire, retries=0).generate(Decision, prompt="Approve?")
    assert result.value.answer == "approve"
    assert (result.usage.input_tokens, result.usage.output_tokens) == {
        "prompt_tokens": (0, 183),
        "completion_tokens": (131, 0),
    }[count]
