"""`GeminiProvider` through the real `google-genai` client on an `httpx2.MockTransport`: the
request it sends, every kind of reply (document, cut, filtered, blocked prompt, API errors),
streaming with thought parts, async, and the client's own retries kept off."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Backoff
from sdk import ContentFiltered
from sdk import Grammar
from sdk import ProviderError
from sdk import RefusedOutput
from sdk import SchemaViolation
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk import UnexpectedStop
from sdk.errors import UnsupportedRequest
from sdk.providers import GeminiProvider
from sdk.schema.dialects import GEMINI
from sdk.schema.dialects import to_wire
from tests.wire_support import BOUNDED
from tests.wire_support import DECISION
from tests.wire_support import GEMINI_HEADERS
from tests.wire_support import GEMINI_KEY
from tests.wire_support import Bounded
from tests.wire_support import Sleeps
from tests.wire_support import Wire
from tests.wire_support import fixture
from tests.wire_support import fixture_json
from tests.wire_support import gemini_client
from tests.wire_support import gemini_reply

MODEL = "gemini-2.5-flash"
NO_WAIT = Backoff(retries=2, initial=0.0, maximum=0.0)


def _provider(wire: Wire, **options: Any) -> GeminiProvider:
    return GeminiProvider(gemini_client(wire, **options), model=MODEL)


def _client(wire: Wire, **options: Any) -> StructuredClient:
    return StructuredClient(_provider(wire), backoff=NO_WAIT, sleep=Sleeps(), **options)


def _with_candidate(**changes: Any) -> httpx2.Response:
    body = fixture_json("gemini_success.json")
    body["candidates"][0].update(changes)
    return httpx2.Response(200, content=json.dumps(body).encode(), headers=GEMINI_HEADERS)


def test_the_request_sends_the_schema_in_the_gemini_dialect_with_retries_off() -> None:
    wire = Wire(gemini_reply())
    result = _client(wire).generate(
        Decision, system="You review refunds.", prompt="Approve?", max_tokens=300, temperature=0
    )
    request = wire.requests[0]
    assert request.url.path == f"/v1/models/{MODEL}:generateContent"
    assert request.headers["x-goog-api-key"] == GEMINI_KEY
    body = wire.body
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Approve?"}]}]
    assert body["systemInstruction"]["parts"] == [{"text": "You review refunds."}]
    config = body["generationConfig"]
    assert config["maxOutputTokens"] == 300
    assert config["temperature"] == 0
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == to_wire(Decision, GEMINI).schema
    assert "responseSchema" not in config
    assert result.value.answer == DECISION["answer"]
    assert result.provider == "gemini" and result.model == MODEL
    assert result.request_id == fixture_json("gemini_success.json")["responseId"]


def test_usage_keeps_cached_and_thinking_tokens_apart() -> None:
    meta = fixture_json("gemini_success.json")["usageMetadata"]
    result = _client(Wire(gemini_reply())).generate(Decision, prompt="Approve?")
    usage = result.usage
    assert usage.input_tokens == meta["promptTokenCount"]
    assert usage.output_tokens == meta["candidatesTokenCount"]
    assert usage.cache_read_tokens == meta["cachedContentTokenCount"]
    assert usage.reasoning_tokens == meta["thoughtsTokenCount"]
    assert result.attempts[0].provider == "gemini"


def test_the_dialect_strips_what_gemini_does_not_take_and_the_parser_still_checks_it() -> None:
    wire = to_wire(Bounded, GEMINI)
    removed = {(r.pointer, r.keyword) for r in wire.removed}
    assert ("/properties/code", "maxLength") in removed
    assert ("/properties/step", "multipleOf") in removed
    assert "minimum" in json.dumps(wire.schema)  # numeric bounds are kept
    # A reply breaking a stripped constraint is caught and retried with feedback.
    bad = {**BOUNDED, "code": "toolong"}
    requests = Wire(gemini_reply(text=json.dumps(bad)), gemini_reply(text=json.dumps(BOUNDED)))
    result = _client(requests, retries=1).generate(Bounded, prompt="Code.")
    assert isinstance(result.attempts[0].error, SchemaViolation)
    assert result.value.code == "abc"
    assert ("/properties/code", "maxLength") in {(r.pointer, r.keyword) for r in result.removed}
    second = requests.bodies()[1]["contents"]
    assert [turn["role"] for turn in second] == ["user", "model", "user"]
    assert "/code" in second[2]["parts"][0]["text"]


def test_a_blocked_prompt_is_a_refusal_with_its_category_and_is_not_retried() -> None:
    wire = Wire(gemini_reply("gemini_prompt_blocked.json"))
    with pytest.raises(RefusedOutput) as info:
        _client(wire).generate(Decision, prompt="...")
    error = info.value
    assert not isinstance(error, ContentFiltered)
    assert error.category == "HARM_CATEGORY_DANGEROUS_CONTENT"
    assert error.raw_stop_reason == "blocked:SAFETY"
    assert error.text is None
    assert len(wire.requests) == 1 == len(error.attempts)


def test_a_safety_stop_is_content_filtered_with_the_blocked_category() -> None:
    with pytest.raises(ContentFiltered) as info:
        _client(Wire(gemini_reply("gemini_safety.json"))).generate(Decision, prompt="...")
    assert info.value.category == "HARM_CATEGORY_HARASSMENT"
    assert info.value.raw_stop_reason == "SAFETY"


@pytest.mark.filterwarnings("ignore:A_REASON_FROM_2027 is not a valid FinishReason")
@pytest.mark.parametrize(
    ("finish", "error"),
    [("RECITATION", ContentFiltered), ("BLOCKLIST", ContentFiltered),
     ("PROHIBITED_CONTENT", ContentFiltered), ("SPII", ContentFiltered),
     ("MALFORMED_FUNCTION_CALL", UnexpectedStop), ("LANGUAGE", UnexpectedStop),
     ("A_REASON_FROM_2027", UnexpectedStop)],
)  # fmt: skip
def test_every_finish_reason_but_stop_is_a_typed_error_keeping_the_raw_value(
    finish: str, error: type[Exception]
) -> None:
    # The document itself is valid: only the finish reason says it must not be trusted.
    with pytest.raises(error) as info:
        _client(Wire(_with_candidate(finishReason=finish))).generate(Decision, prompt="x")
    assert info.value.raw_stop_reason == finish  # type: ignore[attr-defined]
    assert info.value.text == json.dumps(DECISION)  # type: ignore[attr-defined]


def test_max_tokens_is_truncation_even_though_the_prefix_is_kept() -> None:
    body = fixture_json("gemini_max_tokens.json")
    with pytest.raises(TruncatedOutput) as info:
        _client(Wire(gemini_reply("gemini_max_tokens.json"))).generate(Decision, prompt="x")
    assert info.value.text == body["candidates"][0]["content"]["parts"][0]["text"]
    assert info.value.raw_stop_reason == "MAX_TOKENS"


def test_a_rate_limit_is_retried_with_gemini_s_retry_delay_one_request_per_attempt() -> None:
    # The user's client asks google-genai for five attempts of its own: each request here
    # overrides that with one, so the SDK's backoff is the only retry loop.
    limited = httpx2.Response(429, content=fixture("gemini_error_429.json"), headers=GEMINI_HEADERS)
    wire = Wire(limited, gemini_reply())
    sleeps = Sleeps()
    provider = _provider(wire, retry_options={"attempts": 5, "initial_delay": 0.0})
    result = StructuredClient(provider, backoff=NO_WAIT, sleep=sleeps).generate(
        Decision, prompt="x"
    )
    assert len(wire.requests) == 2 == len(result.attempts)
    first = result.attempts[0].error
    assert isinstance(first, ProviderError)
    assert first.status_code == 429 and first.provider == "gemini"
    assert first.retry_after == 7.0 and sleeps.waits == [7.0]


def test_a_persistent_429_costs_one_request_per_attempt() -> None:
    limited = httpx2.Response(429, content=fixture("gemini_error_429.json"), headers=GEMINI_HEADERS)
    wire = Wire(limited)
    provider = _provider(wire, retry_options={"attempts": 5, "initial_delay": 0.0})
    backoff = Backoff(retries=2, initial=0.0, maximum=0.0, max_retry_after=60)
    with pytest.raises(ProviderError) as info:
        StructuredClient(provider, backoff=backoff, sleep=Sleeps()).generate(Decision, prompt="x")
    assert len(wire.requests) == 3 == len(info.value.attempts)


def test_a_bad_request_is_not_retried_and_keeps_the_api_message() -> None:
    bad = httpx2.Response(400, content=fixture("gemini_error_400.json"), headers=GEMINI_HEADERS)
    wire = Wire(bad)
    with pytest.raises(ProviderError) as info:
        _client(wire).generate(Decision, prompt="x")
    assert len(wire.requests) == 1
    assert info.value.status_code == 400
    assert "INVALID_ARGUMENT" in str(info.value) and "const" in str(info.value)
    assert GEMINI_KEY not in repr(info.value.attempts) + str(info.value)


def test_streaming_skips_thought_parts_and_ends_on_the_finish_reason() -> None:
    wire = Wire(gemini_reply("gemini_stream_success.sse"))
    items = list(_client(wire).stream(Decision, prompt="Approve?"))
    assert wire.requests[0].url.path == f"/v1/models/{MODEL}:streamGenerateContent"
    assert wire.requests[0].url.params["alt"] == "sse"
    result = items[-1]
    assert result.text == json.dumps(DECISION)  # no thought summary in the document
    assert len(items) > 2  # snapshots before the result
    assert result.usage.reasoning_tokens == 132 and result.usage.cache_read_tokens == 128


def test_a_stream_cut_before_its_finish_reason_is_a_transient_provider_error() -> None:
    events = [e + b"\r\n\r\n" for e in fixture("gemini_stream_success.sse").split(b"\r\n\r\n")]
    cut = httpx2.Response(
        200, content=b"".join(events[:3]), headers={"content-type": "text/event-stream"}
    )
    wire = Wire(cut, gemini_reply("gemini_stream_success.sse"))
    items = list(_client(wire).stream(Decision, prompt="Approve?"))
    result = items[-1]
    assert len(wire.requests) == 2 == len(result.attempts)
    assert isinstance(result.attempts[0].error, ProviderError)
    assert "stream ended" in str(result.attempts[0].error)


def test_async_generate_and_stream_use_the_client_s_aio_side() -> None:
    requests: list[httpx2.Request] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(request)
        if "stream" in request.url.path:
            return gemini_reply("gemini_stream_success.sse")
        return gemini_reply()

    provider = GeminiProvider(gemini_client(async_handler=handler), model=MODEL)

    async def main() -> tuple[Any, list[Any]]:
        client = AsyncStructuredClient(provider)
        whole = await client.generate(Decision, prompt="x")
        streamed = [item async for item in client.stream(Decision, prompt="x")]
        return whole, streamed

    whole, streamed = asyncio.run(main())
    assert whole.value.answer == streamed[-1].value.answer == "approve"
    assert [r.url.path.split(":")[-1] for r in requests] == [
        "generateContent",
        "streamGenerateContent",
    ]


def test_a_grammar_is_unsupported_before_anything_is_sent() -> None:
    wire = Wire(gemini_reply())
    grammar = Grammar(name="Yes", version=1, lark='start: "yes"')
    with pytest.raises(UnsupportedRequest) as info:
        _client(wire).generate(grammar, prompt="x")
    assert wire.requests == []
    assert "json_schema documents" in info.value.supported


def test_two_phase_reasoning_sends_free_text_then_the_schema() -> None:
    working = _with_candidate(content={"parts": [{"text": "The totals match."}], "role": "model"})
    wire = Wire(working, gemini_reply())
    result = _client(wire).generate(Decision, prompt="x", reasoning="two_phase")
    first, second = wire.bodies()
    assert "responseJsonSchema" not in first["generationConfig"]
    assert "responseMimeType" not in first["generationConfig"]
    assert second["generationConfig"]["responseJsonSchema"] == to_wire(Decision, GEMINI).schema
    assert result.reasoning == "The totals match."


def test_an_unknown_option_is_a_type_error_naming_it_before_sending() -> None:
    wire = Wire(gemini_reply())
    with pytest.raises(TypeError, match="temprature"):
        _client(wire).generate(Decision, prompt="x", temprature=0)
    with pytest.raises(TypeError, match="response_json_schema"):
        _client(wire).generate(Decision, prompt="x", response_json_schema={})
    assert wire.requests == []


def test_the_attempt_deadline_goes_to_the_request_as_its_timeout() -> None:
    wire = Wire(gemini_reply())
    _client(wire, attempt_deadline=30).generate(Decision, prompt="x")
    assert 25 <= int(wire.requests[0].headers["x-server-timeout"]) <= 30


def test_a_client_of_another_kind_is_refused() -> None:
    with pytest.raises(TypeError, match=r"google\.genai\.Client"):
        GeminiProvider(object(), model=MODEL)  # type: ignore[arg-type]


# The client's own `http_options.extra_body`: google-genai merges it into every request's REST
# body, over what the SDK wrote. Each of these would replace the prompt, the system prompt, the
# schema or its mime type, or add tools.
CLIENT_OWNED = [
    ("contents", {"contents": [{"role": "user", "parts": [{"text": "injected"}]}]}),
    ("systemInstruction.parts", {"systemInstruction": {"parts": [{"text": "obey"}]}}),
    ("system_instruction.parts", {"system_instruction": {"parts": [{"text": "obey"}]}}),
    ("generationConfig.responseMimeType",
     {"generationConfig": {"responseMimeType": "text/plain"}}),
    ("generationConfig.responseSchema.type",
     {"generationConfig": {"responseSchema": {"type": "OBJECT"}}}),
    ("generation_config.temperature", {"generation_config": {"temperature": 1.5}}),
    ("tools", {"tools": []}),
    ("toolConfig.functionCallingConfig", {"toolConfig": {"functionCallingConfig": {}}}),
    ("model", {"model": "gemini-2.5-pro"}),
]  # fmt: skip


def _options_client(wire: Wire, extra_body: dict[str, Any]) -> Any:
    """A `google.genai.Client` made on an `HttpOptions` the test keeps (and may change later)."""
    from google import genai

    options = genai.types.HttpOptions(
        base_url="http://gemini.test", extra_body=extra_body,
        httpx_client=httpx2.Client(transport=httpx2.MockTransport(wire)),
        httpx_async_client=httpx2.AsyncClient(transport=httpx2.MockTransport(wire)),
    )  # fmt: skip
    return genai.Client(api_key=GEMINI_KEY, http_options=options), options


@pytest.mark.parametrize(("path", "extra"), CLIENT_OWNED, ids=[p for p, _ in CLIENT_OWNED])
def test_an_owned_field_in_the_client_s_own_extra_body_is_refused_naming_it(
    path: str, extra: dict[str, Any]
) -> None:
    wire = Wire(gemini_reply())
    named = f"extra_body may not set '{path}'.*http_options.extra_body"
    with pytest.raises(ValueError, match=named):
        GeminiProvider(gemini_client(wire, extra_body=extra), model=MODEL)
    # Put there after the provider was made (the caller's `HttpOptions` is the client's): every
    # call, sync or async, whole or streamed, and the cache key refuse it before sending.
    client, options = _options_client(wire, {"cachedContent": "cachedContents/c-1"})
    provider = GeminiProvider(client, model=MODEL)
    options.extra_body.update(extra)
    with pytest.raises(ValueError, match=named):
        StructuredClient(provider).generate(Decision, prompt="Approve?")
    with pytest.raises(ValueError, match=named):
        list(StructuredClient(provider).stream(Decision, prompt="Approve?"))
    with pytest.raises(ValueError, match=named):
        asyncio.run(AsyncStructuredClient(provider).generate(Decision, prompt="Approve?"))
    with pytest.raises(ValueError, match=named):
        provider.cache_scope()
    assert wire.requests == []


def test_a_field_the_sdk_does_not_own_in_the_client_s_extra_body_reaches_the_wire() -> None:
    wire = Wire(gemini_reply())
    extra = {
        "cachedContent": "cachedContents/c-1",
        "labels": {"team": "refunds"},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "OFF"}],
    }
    provider = GeminiProvider(gemini_client(wire, extra_body=extra), model=MODEL)
    result = StructuredClient(provider).generate(Decision, prompt="Approve?")
    assert result.value.answer == DECISION["answer"]
    sent = wire.body
    assert {key: sent[key] for key in extra} == extra
    # beside what the SDK wrote, which stays
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "Approve?"}]}]
    assert sent["generationConfig"]["responseMimeType"] == "application/json"
    assert sent["generationConfig"]["responseJsonSchema"] == to_wire(Decision, GEMINI).schema
    assert provider.cache_scope()["client_extra_body"] == extra
