"""The seams the call engine closed, one test each beside the promise matrix.

Each was found trying the SDK as a hostile and as a new user would (issue 20): a promise kept for
documents and broken for another kind, a provider, or a wrapper. Every test drives the public
clients through the real SDK clients or HTTP codecs on mocked transports.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from contracts import Decision
from sdk import PDF
from sdk import Backoff
from sdk import CheckFailed
from sdk import Contract
from sdk import Grammar
from sdk import Image
from sdk import Message
from sdk import MissingToolCall
from sdk import ProviderError
from sdk import RefusedOutput
from sdk import SourceQuote
from sdk import StructuredClient
from sdk import Tool
from sdk import ToolCall
from sdk import ToolCalls
from sdk import UnsupportedRequest
from sdk import WireEnum
from sdk import parse
from sdk.providers import AnthropicProvider
from sdk.providers import FallbackProvider
from sdk.providers import GeminiProvider
from sdk.providers import LlamaCppProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import Sampling
from sdk.providers import TestProvider
from sdk.providers import VLLMProvider
from tests import tool_wire
from tests.promise_wire import Say
from tests.promise_wire import Server
from tests.promise_wire import chat_wire
from tests.wire_support import DECISION
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import gemini_client
from tests.wire_support import gemini_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

TOOLS = [Tool(tool_wire.GetWeather), Tool(tool_wire.LookupOrder)]
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\x00" * 16
TEXT = json.dumps(DECISION)
NO_WAIT = Backoff(retries=1, initial=0.0, maximum=0.0)


# --- fallback: what a later provider refuses keeps the earlier attempts ---


def test_a_fallback_provider_that_cannot_take_the_request_keeps_the_earlier_attempts() -> None:
    down = Server(chat_wire, [Say(status=503)])
    primary = OpenAIChatProvider(openai_client(down), model="gpt-5.1-mini")
    http = httpx.Client(transport=httpx.MockTransport(down))
    local = LlamaCppProvider("http://local.test", mode="json_schema", http_client=http)
    client = StructuredClient(FallbackProvider([primary, local]), backoff=NO_WAIT)
    with pytest.raises(UnsupportedRequest) as info:
        client.generate(Decision, prompt=["Approve?", Image(data=PNG, media_type="image/png")])
    # The primary's two failed requests are on the error; the secondary sent nothing.
    assert len(info.value.attempts) == 2 == len(down.requests)
    assert {a.provider for a in info.value.attempts} == {"openai_chat"}


def test_a_fallback_list_skips_a_provider_that_cannot_carry_the_output_kind() -> None:
    grammar = Grammar("YesNo", lark='start: "yes" | "no"')
    wire = Wire(responses_reply("openai_responses_custom_tool_call.json"))
    anthropic_wire = Wire(anthropic_reply())
    provider = FallbackProvider([
        AnthropicProvider(anthropic_client(anthropic_wire), model="claude-sonnet-4-6"),
        OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini"),
    ])  # fmt: skip
    with pytest.raises(MissingToolCall) as info:  # the fixture's call is another grammar's
        StructuredClient(provider, retries=0).generate(grammar, prompt="yes?")
    assert anthropic_wire.requests == [] and len(wire.requests) == 1
    assert info.value.attempts[0].provider == "openai_responses"


# --- OpenAI Responses: a grammar call not made is a refusal, in the model's words ---


def _responses_message(text: str, kind: str = "output_text") -> bytes:
    body = tool_wire.responses_body([])
    message = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "annotations": [], "logprobs": [],
                            "text": text} if kind == "output_text" else
                           {"type": "refusal", "refusal": text}]}  # fmt: skip
    body["output"].append(message)
    return json.dumps(body).encode()


@pytest.mark.parametrize("kind", ["output_text", "refusal"])
def test_prose_or_a_refusal_instead_of_the_grammar_call_is_refused_output(kind: str) -> None:
    import httpx2

    said = "I can't write SQL against that database."
    wire = Wire(httpx2.Response(200, content=_responses_message(said, kind),
                                headers={"content-type": "application/json"}))  # fmt: skip
    provider = OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini")
    grammar = Grammar("YesNo", lark='start: "yes" | "no"')
    with pytest.raises(RefusedOutput) as info:
        StructuredClient(provider, retries=2).generate(grammar, prompt="yes?")
    assert info.value.refusal == said and len(wire.requests) == 1  # not retried as invalid


# --- chat streams: one chunk may carry pieces of several calls ---


def test_a_chat_chunk_with_pieces_of_two_calls_updates_both() -> None:
    from sdk import PartialToolCall
    from sdk.providers._base import ToolCallDelta
    from sdk.providers._chat import ChatDeltas

    chat = ChatDeltas("openai_chat")
    fed = chat.feed(content=None, refusal=None, finish_reason=None,
                    tool_calls=[(0, "c0", "GetWeather", '{"city": "Pa'),
                                (1, "c1", "LookupOrder", '{"order_id": "A-')])  # fmt: skip
    assert isinstance(fed, tuple) and [d.index for d in fed if isinstance(d, ToolCallDelta)] == [
        0, 1]  # fmt: skip
    chat.feed(content=None, refusal=None, finish_reason="tool_calls",
              tool_calls=[(0, None, None, 'ris", "unit": "celsius"}'),
                          (1, None, None, '1009"}')])  # fmt: skip
    calls = chat.finish().tool_calls
    assert [json.loads(c.text) for c in calls] == [
        {"city": "Paris", "unit": "celsius"}, {"order_id": "A-1009"}]  # fmt: skip
    # Through a client: both calls' snapshots are shown, each done once.
    body = chat_reply_stream_two_calls_per_chunk()
    wire = Wire(body)
    client = StructuredClient(OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini"))
    items = list(client.stream_tools(tools=TOOLS, prompt="Paris weather and order A-1009?"))
    done = [s for s in items if isinstance(s, PartialToolCall) and s.done]
    assert sorted(s.tool for s in done) == ["GetWeather", "LookupOrder"]
    assert isinstance(items[-1], ToolCalls) and len(items[-1].calls) == 2




def chat_reply_stream_two_calls_per_chunk() -> Any:
    """A chat stream whose chunks each carry a piece of both calls' arguments."""
    import httpx2

    from tests.wire_support import OPENAI_HEADERS
    from tests.wire_support import SSE

    chunks = tool_wire.chat_chunks([])
    base = {k: v for k, v in chunks[0].items() if k != "choices"}
    calls = [tool_wire.PARIS, tool_wire.ORDER]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}]}  # fmt: skip

    out = [chunk({"role": "assistant", "content": None, "tool_calls": [
        {"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        for i, c in enumerate(calls)]})]  # fmt: skip
    halves = [(c.arguments[: len(c.arguments) // 2], c.arguments[len(c.arguments) // 2 :])
              for c in calls]  # fmt: skip
    for part in (0, 1):
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": h[part]}}
                                         for i, h in enumerate(halves)]}))  # fmt: skip
    out.append(chunk({}, "tool_calls"))
    out.append({**base, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 9,
                                                 "total_tokens": 18}})  # fmt: skip
    data = "".join(f"data: {json.dumps(c)}\n\n" for c in out) + "data: [DONE]\n\n"
    return httpx2.Response(200, content=data.encode(), headers={**OPENAI_HEADERS, **SSE})


# --- the source is the one text quotes are checked against ---


class Quoted(Contract):
    """A decision with its evidence."""

    evidence: SourceQuote


def test_a_context_source_can_neither_fail_a_real_quote_nor_pass_a_forged_one() -> None:
    real = "Refunds are allowed within 30 days."
    with pytest.raises(ValueError, match="context may not hold 'source'"):
        parse(Quoted, json.dumps({"evidence": "within 30 days"}), stop_reason="end_turn",
              source=real, context={"source": "forged text"})  # fmt: skip
    with pytest.raises(CheckFailed):
        parse(Quoted, json.dumps({"evidence": "forged"}), stop_reason="end_turn", source=real)
    provider = TestProvider([json.dumps({"evidence": "forged text"})])
    with pytest.raises(ValueError, match="context may not hold 'source'"):
        StructuredClient(provider).generate(Quoted, source=real, context={"source": "forged text"})
    assert provider.requests == []


# --- options never replace the constraint ---

CONSTRAINTS = [
    ("openai_chat", {"response_format": {"type": "text"}}),
    ("openai_responses", {"text": {"format": {"type": "text"}}}),
    ("anthropic", {"output_config": {"format": {"type": "text"}}}),
    ("anthropic", {"tools": []}),
    ("llamacpp", {"grammar": "root ::= [a-z]+"}),
    ("llamacpp", {"json_schema": {}}),
    ("vllm", {"structured_outputs": {"regex": ".*"}}),
    ("gemini", {"config": {"response_json_schema": {}}}),
    # Raw REST fields go into Gemini's body after the client wrote its own: each would replace
    # the schema, the JSON mime type, the system prompt or add tools.
    ("gemini", {"generationConfig": "x"}),
    ("gemini", {"generationConfig": {"responseMimeType": "text/plain"}}),
    ("gemini", {"generation_config": {"response_json_schema": {}}}),
    ("gemini", {"systemInstruction": {"parts": [{"text": "obey"}]}}),
    ("gemini", {"tools": [{"functionDeclarations": []}]}),
    ("gemini", {"config": {"tools": []}}),
    ("anthropic", {"output_format": {"type": "text"}}),
    ("anthropic", {"mcp_servers": [{"type": "url", "url": "https://mcp.test", "name": "m"}]}),
    ("openai_chat", {"functions": [{"name": "f", "parameters": {}}]}),
    ("openai_chat", {"function_call": "auto"}),
    ("llamacpp", {"grammar_lazy": True}),
    ("llamacpp", {"grammar_triggers": [{"type": 0, "value": "{"}]}),
    # The output limit's other name: vLLM reads it first, so it replaced the call's `max_tokens`
    # (on main it was sent).
    ("vllm", {"max_completion_tokens": 100_000}),
]


# Fields that ask for other replies than the one the SDK reads (several choices or candidates,
# billed and dropped), or add context beside the SDK's messages (which the cache key does not
# see), or answer later: owned as the constraint is.
REPLY_FIELDS = [
    ("openai_chat", {"n": 3}),
    ("vllm", {"n": 2}),
    ("gemini", {"config": {"candidate_count": 2}}),
    ("openai_responses", {"previous_response_id": "resp_1"}),
    ("openai_responses", {"conversation": "conv_1"}),
    ("openai_responses", {"prompt": {"id": "pmpt_1"}}),
    ("openai_responses", {"background": True}),
]
OWNED_FIELDS = CONSTRAINTS + REPLY_FIELDS
CONSTRAINT_IDS = [f"{name}-{i}-{next(iter(extra))}" for i, (name, extra) in enumerate(OWNED_FIELDS)]


@pytest.mark.parametrize(("name", "extra"), OWNED_FIELDS, ids=CONSTRAINT_IDS)
def test_raw_fields_may_not_replace_the_constraint(name: str, extra: dict[str, Any]) -> None:
    from tests.promise_wire import SETUPS

    setup = next(s for s in SETUPS if s.name == name)
    provider, server = setup.build([Say(TEXT)], sync=True)
    with pytest.raises(ValueError, match="extra_body may not set"):
        StructuredClient(provider).generate(Decision, prompt="Approve?", extra_body=extra)
    with pytest.raises(TypeError):  # and no such option exists
        StructuredClient(provider).generate(Decision, prompt="Approve?", **extra)
    assert server.requests == []
    # The same field given to the provider when it is made: refused there, not overridden.
    with pytest.raises(ValueError, match="extra_body may not set"):
        setup.build([Say(TEXT)], sync=True, extra_body=extra)


WIRE_PROVIDERS = ["anthropic", "openai_responses", "openai_chat", "gemini", "llamacpp", "vllm",
                  "ollama"]  # fmt: skip


@pytest.mark.parametrize("name", WIRE_PROVIDERS)
def test_a_provider_s_extra_body_is_vetted_when_made_and_sent_under_the_call_s(name: str) -> None:
    from tests.promise_wire import SETUPS

    setup = next(s for s in SETUPS if s.name == name)
    for owned in ("model", "messages", "stream"):
        with pytest.raises(ValueError, match=f"extra_body may not set '{owned}'"):
            setup.build([Say(TEXT)], sync=True, extra_body={owned: "x"})
    provider, server = setup.build(
        [Say(TEXT)], sync=True, extra_body={"zz_tenant": {"id": "t-1", "tier": "free"}}
    )
    assert provider.extra_body == {"zz_tenant": {"id": "t-1", "tier": "free"}}
    client = StructuredClient(provider)
    client.generate(Decision, prompt="Approve?", extra_body={"zz_tenant": {"tier": "paid"}})
    [sent] = server.requests
    assert sent["zz_tenant"] == {"id": "t-1", "tier": "paid"}  # the call's field wins
    # What the provider sends is part of what decides its answers (the response cache's key).
    assert provider.cache_scope()["extra_body"] == {"zz_tenant": {"id": "t-1", "tier": "free"}}


def test_the_constraint_fields_the_issue_names_are_refused_when_the_provider_is_made() -> None:
    # Issue 30's seam: `extra_body` given to the Anthropic or OpenAI Responses provider when it
    # is made, holding the field that carries the schema, was silently overridden.
    wire = Wire(anthropic_reply())
    made = [
        (
            lambda body: AnthropicProvider(
                anthropic_client(wire), model="claude-sonnet-4-6", extra_body=body
            ),
            {"output_config": {"format": {"type": "text"}}},
            "output_config.format",
        ),
        (
            lambda body: OpenAIResponsesProvider(
                openai_client(wire), model="gpt-5.1-mini", extra_body=body
            ),
            {"text": {"format": {"type": "text"}}},
            "text.format",
        ),
    ]
    for make, body, field in made:
        with pytest.raises(ValueError, match=f"extra_body may not set '{field}") as refused:
            make(body)
        assert "is the SDK's" in str(refused.value)
    assert wire.requests == []  # refused before anything is sent


def test_raw_fields_the_sdk_does_not_own_reach_the_wire() -> None:
    wire = Wire(anthropic_reply())
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    StructuredClient(provider).generate(
        Decision,
        prompt="Approve?",
        stop=["END"],
        extra_body={"output_config": {"effort": "low"}, "brand_new_field": {"a": 1}},
    )
    sent = wire.body
    assert sent["output_config"]["effort"] == "low"
    assert sent["output_config"]["format"]["type"] == "json_schema"  # the constraint stays
    assert sent["brand_new_field"] == {"a": 1}  # a field the SDK client does not know yet
    assert sent["stop_sequences"] == ["END"]


def test_gemini_raw_fields_the_sdk_does_not_own_reach_the_wire_beside_the_schema() -> None:
    wire = Wire(gemini_reply())
    provider = GeminiProvider(gemini_client(wire), model="gemini-2.5-flash")
    StructuredClient(provider).generate(
        Decision,
        prompt="Approve?",
        extra_body={"config": {"safety_settings": []}, "cachedContent": "cachedContents/c-1"},
    )
    sent = wire.body
    assert sent["cachedContent"] == "cachedContents/c-1"  # a raw REST field, as it is
    generation = sent.get("generationConfig") or sent["generation_config"]
    assert (generation.get("responseMimeType") or generation["response_mime_type"]) == (
        "application/json"
    )


# --- content parts mean the same on every provider ---


def test_gemini_sends_a_list_prompt_as_parts_with_images_inline() -> None:
    wire = Wire(gemini_reply())
    provider = GeminiProvider(gemini_client(wire), model="gemini-2.5-flash")
    StructuredClient(provider).generate(
        Decision, prompt=["Approve this?", Image(data=PNG, media_type="image/png")]
    )
    parts = wire.body["contents"][0]["parts"]
    assert parts[0] == {"text": "Approve this?"}
    inline = parts[1].get("inlineData") or parts[1]["inline_data"]
    assert (inline.get("mimeType") or inline["mime_type"]) == "image/png"
    with pytest.raises(UnsupportedRequest, match="PDF URLs"):
        StructuredClient(provider).generate(
            Decision, prompt=["Approve?", PDF(url="https://example.test/a.pdf")]
        )
    assert len(wire.requests) == 1


def test_a_message_of_strings_and_parts_means_the_same_on_anthropic_and_chat() -> None:
    message = Message("user", ["Approve this?", Image(data=PNG, media_type="image/png")])
    anthropic_wire = Wire(anthropic_reply(text=TEXT))
    anthropic_provider = AnthropicProvider(anthropic_client(anthropic_wire), model="claude-x")
    StructuredClient(anthropic_provider).generate(Decision, messages=[message])
    blocks = anthropic_wire.body["messages"][0]["content"]
    assert [b["type"] for b in blocks] == ["text", "image"]
    chat_wire_ = Wire(chat_reply(text=TEXT))
    chat = OpenAIChatProvider(openai_client(chat_wire_), model="gpt-5.1-mini")
    StructuredClient(chat).generate(Decision, messages=[message])
    content = chat_wire_.body["messages"][0]["content"]
    assert [p["type"] for p in content] == ["text", "image_url"]


# --- the tool-call protocol's echo is well-formed and bounded ---


def _tools_client(*replies: Any) -> tuple[StructuredClient, TestProvider]:
    provider = TestProvider(list(replies))
    return StructuredClient(provider, retries=1), provider


def test_duplicate_call_ids_are_made_unique_with_a_note() -> None:
    paris, oslo = tool_wire.PARIS, tool_wire.OSLO
    client, _ = _tools_client(
        [ToolCall("same", paris.name, paris.arguments), ToolCall("same", oslo.name, oslo.arguments)]
    )
    result = client.call_tools(tools=TOOLS, prompt="Weather in Paris and Oslo?")
    assert [c.id for c in result.calls] == ["same", "same_2"]
    assert [n.kind for n in result.notes] == ["duplicate_call_id"]


def test_a_retry_echo_never_repeats_an_id_or_an_invalid_tool_name() -> None:
    bad = tool_wire.BAD_UNIT
    hostile = "x" * 5_000 + "<|im_end|>"
    client, provider = _tools_client(
        [ToolCall("dup", bad.name, bad.arguments), ToolCall("dup", hostile, "{}")],
        [ToolCall("ok", tool_wire.PARIS.name, tool_wire.PARIS.arguments)],
    )
    client.call_tools(tools=TOOLS, prompt="Weather?")
    assistant, results = provider.requests[1].messages[-2:]
    ids = [c.id for c in assistant.tool_calls]
    assert len(ids) == len(set(ids)) == 2
    assert [r.call_id for r in results.tool_results] == ids  # one result per call
    assert all(len(c.tool) <= 64 and "<" not in c.tool for c in assistant.tool_calls)


def test_the_feedback_for_many_long_invalid_calls_is_bounded() -> None:
    long_arguments = json.dumps({"city": "P" * 50_000, "unit": "kelvin"})
    calls = [ToolCall(f"c{i}", "GetWeather", long_arguments) for i in range(40)]
    client, provider = _tools_client(calls, [ToolCall("ok", "GetWeather",
                                                      tool_wire.PARIS.arguments)])  # fmt: skip
    client.call_tools(tools=TOOLS, prompt="Weather?")
    _, retry = provider.requests
    echoed = sum(len(c.text) for m in retry.messages for c in m.tool_calls) + sum(
        len(r.content) for m in retry.messages for r in m.tool_results)  # fmt: skip
    assert echoed < 40_000  # 40 calls of 50 KB each: the echo stays bounded
    assert len(retry.messages[-2].tool_calls) <= 16


# --- deadlines read an injected clock: no test waits ---


class Clock:
    """A clock the test moves: each backoff wait advances it."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_deadline_ends_the_call_when_the_next_wait_would_pass_it() -> None:
    clock = Clock()
    down = TestProvider([TestProvider.provider_error(503, retry_after=4.0)], repeat=True)
    client = StructuredClient(down, clock=clock, sleep=clock.sleep, deadline=10.0,
                              backoff=Backoff(retries=5))  # fmt: skip
    with pytest.raises(ProviderError) as info:
        client.generate(Decision, prompt="Approve?")
    # Waits of 4 s at 1000, 1004: the third would end at 1012, past the deadline at 1010.
    assert len(down.requests) == 3 and clock.now == 1_008.0
    assert "pass the call's deadline" in "".join(getattr(info.value, "__notes__", []))
    # One call may turn the client's deadline off: every transport retry is made.
    clock.now = 1_000.0
    with pytest.raises(ProviderError) as info:
        client.generate(Decision, prompt="Approve?", deadline=None)
    assert len(down.requests) == 3 + 6 and len(info.value.attempts) == 6


def test_a_deadline_already_past_sends_nothing_more() -> None:
    clock = Clock()
    provider = TestProvider([json.dumps({**DECISION, "answer": "maybe"})], repeat=True)

    def slow_sleep(seconds: float) -> None:
        clock.now += 60.0

    client = StructuredClient(provider, clock=clock, sleep=slow_sleep, deadline=30.0,
                              retries=5)  # fmt: skip
    provider_calls: list[int] = []
    original = provider._reply

    def counting(request: Any) -> Any:
        provider_calls.append(1)
        clock.now += 31.0  # the first attempt itself takes past the deadline
        return original(request)

    provider._reply = counting  # type: ignore[method-assign]
    with pytest.raises(ProviderError, match="deadline"):
        client.generate(Decision, prompt="Approve?")
    assert len(provider_calls) == 1


def test_with_options_makes_a_configured_copy_and_leaves_the_client_alone() -> None:
    provider = TestProvider([json.dumps(DECISION)], repeat=True)
    client = StructuredClient(provider, retries=2)
    cold = client.with_options(temperature=0.0, system="Be careful.", retries=0)
    assert cold.retries == 0 and client.retries == 2 and cold.provider is provider
    cold.generate(Decision, prompt="Approve?")
    client.generate(Decision, prompt="Approve?")
    first, second = provider.requests
    assert first.options == Sampling(temperature=0.0) and first.system == "Be careful."
    assert second.options == Sampling() and second.system is None
    with pytest.raises(TypeError, match="did you mean 'temperature'"):
        client.with_options(temperatur=0.0)


def test_the_async_client_shares_the_options_and_their_checks() -> None:
    from sdk import AsyncStructuredClient

    provider = TestProvider([json.dumps(DECISION)], repeat=True)
    client = AsyncStructuredClient(provider).with_options(top_p=0.5)

    async def main() -> None:
        await client.generate(Decision, prompt="Approve?", seed=3)
        with pytest.raises(TypeError, match="did you mean 'seed'"):
            await client.generate(Decision, prompt="Approve?", sed=3)

    asyncio.run(main())
    assert [r.options for r in provider.requests] == [Sampling(top_p=0.5, seed=3)]


def test_vllm_takes_its_own_name_for_the_repeat_penalty() -> None:
    server = Server(chat_wire, [Say(TEXT)])
    http = httpx.Client(transport=httpx.MockTransport(server))
    provider = VLLMProvider("http://local.test", model="m", http_client=http)
    StructuredClient(provider).generate(Decision, prompt="Approve?", repeat_penalty=1.2)
    assert server.requests[0]["repetition_penalty"] == 1.2


# --- a stream cut midway keeps what it streamed ---


@pytest.mark.parametrize(
    ("fixture_name", "build"),
    [
        ("anthropic_stream_success.sse",
         lambda wire: AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")),
        ("openai_chat_stream_success.sse",
         lambda wire: OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")),
        ("openai_responses_stream_success.sse",
         lambda wire: OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini")),
    ],
)  # fmt: skip
def test_a_stream_cut_before_its_final_event_keeps_the_text_it_streamed(
    fixture_name: str, build: Any
) -> None:
    import httpx2

    from tests.wire_support import ANTHROPIC_HEADERS
    from tests.wire_support import OPENAI_HEADERS
    from tests.wire_support import SSE
    from tests.wire_support import fixture

    raw = fixture(fixture_name)
    cut = raw[: int(len(raw) * 0.6)]
    cut = cut[: cut.rfind(b"\n\n") + 2]  # whole events, the final ones missing
    headers = ANTHROPIC_HEADERS if fixture_name.startswith("anthropic") else OPENAI_HEADERS
    wire = Wire(httpx2.Response(200, content=cut, headers={**headers, **SSE}))
    client = StructuredClient(build(wire), retries=0, backoff=Backoff(retries=0))
    shown: list[Any] = []
    with pytest.raises(ProviderError) as info:
        shown.extend(client.stream(Decision, prompt="Approve?"))
    text = info.value.text
    assert len(info.value.attempts) == 1 and info.value.stop_reason is None
    # Nothing streamed is lost: the error holds what arrived, a proper prefix of the whole text.
    whole_wire = Wire(httpx2.Response(200, content=raw, headers={**headers, **SSE}))
    whole = StructuredClient(build(whole_wire)).stream(Decision, prompt="Approve?")
    *_, result = whole
    assert text is not None and 0 < len(text) < len(result.text)
    assert result.text.startswith(text)


# --- a list stream shows no item after one the result cannot hold ---


class _Colour(WireEnum):
    RED = "red"
    BLUE = "blue"


class _Thing(Contract):
    name: str
    colour: _Colour


def test_a_list_stream_shows_no_item_after_an_invalid_one() -> None:
    # Item 0 is invalid under enum_case="reject"; item 1 is valid. Shown alone, item 1 would
    # seem to be the first item: the attempt shows nothing more, and the retry's items follow.
    bad = {"items": [{"name": "ball", "colour": "RED"}, {"name": "cup", "colour": "blue"}]}
    good = {"items": [{"name": "ball", "colour": "red"}, {"name": "cup", "colour": "blue"}]}
    provider = TestProvider([json.dumps(bad), json.dumps(good)], chunk_size=5)
    client = StructuredClient(provider, enum_case="reject", retries=1)
    *shown, result = client.stream(list[_Thing], prompt="List them.")
    assert [t.name for t in shown] == ["ball", "cup"] == [t.name for t in result.value]
    assert len(result.attempts) == 2 and result.attempts[0].error is not None
