"""Output kinds through the clients: grammars, lists and unions; two-phase reasoning; context.

`client.generate(grammar, ...)` returns a `Result[str]`: stop reason first, then recognition on
the client (a miss is `GrammarViolation`, retried with feedback), then the grammar's checks. Each
provider sends the grammar in its own form or refuses the request before sending anything.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest
from pydantic import Field
from pydantic import ValidationInfo
from pydantic import field_validator

from contracts import Decision
from contracts.sql import SELECT_QUERY
from sdk import AsyncStructuredClient
from sdk import CheckFailed
from sdk import Contract
from sdk import Grammar
from sdk import GrammarViolation
from sdk import RetriesExhausted
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk.errors import UnsupportedRequest
from sdk.grammar import to_gbnf
from sdk.providers import AnthropicProvider
from sdk.providers import Completion
from sdk.providers import FreeText
from sdk.providers import GrammarSentence
from sdk.providers import JsonDocument
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import TestProvider
from sdk.providers import VLLMProvider
from sdk.stop_reason import StopReason
from tests.local_support import llamacpp_setup
from tests.wire_support import DECISION
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import fixture
from tests.wire_support import openai_client

GOOD = 'SELECT "name" FROM "customers" WHERE "country" = \'US\';'
DROP = 'DROP TABLE "customers";'


# --- the client, on a scripted provider ---


def test_generate_a_grammar_returns_the_recognized_text() -> None:
    provider = TestProvider([GOOD])
    result = StructuredClient(provider).generate(SELECT_QUERY, prompt="US customers?")
    assert result.value == GOOD
    assert result.schema.name == "SelectQuery"
    assert result.schema.fingerprint == SELECT_QUERY.fingerprint()
    assert provider.requests[0].output == GrammarSentence(SELECT_QUERY)


def test_a_sentence_outside_the_language_is_retried_with_feedback_then_exhausts() -> None:
    provider = TestProvider([DROP, GOOD])
    result = StructuredClient(provider, retries=1).generate(SELECT_QUERY, prompt="x")
    assert result.value == GOOD
    first_error = result.attempts[0].error
    assert isinstance(first_error, GrammarViolation)
    assert first_error.position == 0
    feedback = provider.requests[1].messages[-1].content
    assert "not a valid SelectQuery sentence" in feedback
    assert provider.requests[1].messages[-2].content == DROP  # the reply, as the assistant said it

    with pytest.raises(RetriesExhausted) as info:
        StructuredClient(TestProvider([DROP], repeat=True), retries=1).generate(
            SELECT_QUERY, prompt="x"
        )
    assert isinstance(info.value.last_error, GrammarViolation)
    assert len(info.value.attempts) == 2


def test_the_stop_reason_decides_before_recognition() -> None:
    cut = Completion(text=GOOD, stop_reason=StopReason.MAX_TOKENS, raw_stop_reason="max_tokens")
    with pytest.raises(TruncatedOutput) as info:
        StructuredClient(TestProvider([cut])).generate(SELECT_QUERY, prompt="x")
    assert info.value.text == GOOD  # it recognizes, and is still not success
    assert len(info.value.attempts) == 1


def _not_the_secret_table(text: str, context: Any) -> None:
    if text.endswith("secrets"):
        raise ValueError(f"reads the secrets table (asked by {context['who']})")


PICK = Grammar(
    "Pick", lark='start: "SELECT " NAME\nNAME: /[a-z]+/', checks=(_not_the_secret_table,)
)


def test_the_grammars_checks_run_after_recognition_with_the_context() -> None:
    client = StructuredClient(TestProvider(["SELECT secrets"], repeat=True), retries=0)
    with pytest.raises(CheckFailed, match="reads the secrets table") as info:
        client.generate(PICK, prompt="x", context={"who": "ops"})
    assert "asked by ops" in str(info.value)
    assert info.value.text == "SELECT secrets"
    ok = StructuredClient(TestProvider(["SELECT users"])).generate(PICK, prompt="x", context={})
    assert ok.value == "SELECT users"


def test_streaming_a_grammar_yields_the_growing_text_then_the_result() -> None:
    client = StructuredClient(TestProvider([GOOD], chunk_size=7))
    items = list(client.stream(SELECT_QUERY, prompt="x"))
    texts, result = items[:-1], items[-1]
    assert texts and all(isinstance(text, str) for text in texts)
    assert texts[-1] == GOOD and GOOD.startswith(str(texts[0]))
    assert result.value == GOOD  # type: ignore[union-attr]


def test_the_async_client_generates_a_grammar() -> None:
    async def main() -> str:
        client = AsyncStructuredClient(TestProvider([GOOD]))
        return (await client.generate(SELECT_QUERY, prompt="x")).value

    assert asyncio.run(main()) == GOOD


# --- providers: the grammar's wire form, or a typed refusal before sending ---


def test_openai_responses_sends_a_forced_custom_tool_and_reads_its_input() -> None:
    wire = Wire(httpx2.Response(200, content=fixture("openai_responses_custom_tool_call.json"),
                                headers=OPENAI_HEADERS))  # fmt: skip
    provider = OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini")
    result = StructuredClient(provider).generate(SELECT_QUERY, prompt="US customers by name?")
    body = wire.body
    assert body["tools"][0]["type"] == "custom"
    assert body["tools"][0]["name"] == "SelectQuery_v2"
    assert body["tools"][0]["format"] == {
        "type": "grammar",
        "syntax": "lark",
        "definition": SELECT_QUERY.lark,
    }
    assert body["tool_choice"] == {"type": "custom", "name": "SelectQuery_v2"}
    assert "text" not in body  # no JSON format beside the grammar
    assert result.value.startswith('SELECT "name", "country" FROM "customers"')
    assert result.provider == "openai_responses"


@pytest.mark.parametrize("kind", ["anthropic", "openai_chat", "ollama", "llamacpp_openai"])
def test_a_provider_without_a_grammar_surface_refuses_before_sending(kind: str) -> None:
    wire = Wire(httpx2.Response(500))
    seen: list[httpx.Request] = []
    local = httpx.Client(
        transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(500))
    )
    provider: Any = {
        "anthropic": lambda: AnthropicProvider(anthropic_client(wire), model="claude-4"),
        "openai_chat": lambda: OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini"),
        "ollama": lambda: OllamaProvider("http://o.test", model="m", http_client=local),
        "llamacpp_openai": lambda: LlamaCppProvider("http://l.test", mode="openai",
                                                    http_client=local),
    }[kind]()  # fmt: skip
    with pytest.raises(UnsupportedRequest) as info:
        StructuredClient(provider).generate(SELECT_QUERY, prompt="x")
    assert "grammar" in str(info.value)
    assert info.value.supported  # it names what it does support
    assert wire.requests == [] and seen == []


def _chat_body(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 9},
    }  # fmt: skip


def test_vllm_sends_the_grammar_in_structured_outputs() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=_chat_body(GOOD))

    client = httpx.Client(transport=httpx.MockTransport(handler))
    provider = VLLMProvider("http://v.test", model="m", http_client=client)
    result = StructuredClient(provider).generate(SELECT_QUERY, prompt="x")
    assert result.value == GOOD
    outputs = bodies[0]["structured_outputs"]
    assert set(outputs) == {"grammar"} and outputs["grammar"] == to_gbnf(SELECT_QUERY)


def test_llamacpp_native_sends_the_gbnf_of_the_grammar() -> None:
    bodies: dict[str, dict[str, Any]] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        bodies[request.url.path] = body
        setup = llamacpp_setup(request.url.path, body)  # the template and tokens it learns
        if setup is not None:
            return httpx.Response(200, json=setup)
        return httpx.Response(200, json={"content": GOOD, "stop": True, "stop_type": "eos"})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    provider = LlamaCppProvider("http://l.test", http_client=client)  # json_schema mode
    result = StructuredClient(provider).generate(SELECT_QUERY, prompt="x")
    assert result.value == GOOD
    assert bodies["/completion"]["grammar"] == to_gbnf(SELECT_QUERY)
    assert "json_schema" not in bodies["/completion"]


# --- two-phase reasoning ---

WORKING = "The claim is $4,180 and the limit is $5,000; 4,180 < 5,000, so it is within policy."


def test_two_phase_asks_for_free_working_then_the_contract_and_keeps_both() -> None:
    provider = TestProvider([WORKING, DECISION])
    result = StructuredClient(provider).generate(
        Decision, prompt="Approve INV-7781?", reasoning="two_phase"
    )
    first, second = provider.requests
    assert first.output == FreeText()  # free text: no schema sent
    assert second.output == JsonDocument(Decision)
    assert any(m.role == "assistant" and m.content == WORKING for m in second.messages)
    assert result.reasoning == WORKING
    assert result.value.answer == "approve"
    assert len(result.attempts) == 2
    assert result.usage == result.attempts[0].usage + result.attempts[1].usage


def test_two_phase_working_cut_by_the_limit_is_truncated_output() -> None:
    cut = Completion(text="The claim is", stop_reason=StopReason.MAX_TOKENS,
                     raw_stop_reason="max_tokens")  # fmt: skip
    with pytest.raises(TruncatedOutput) as info:
        StructuredClient(TestProvider([cut])).generate(
            Decision, prompt="x", reasoning="two_phase"
        )
    assert info.value.text == "The claim is"


def test_an_unknown_reasoning_mode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="reasoning"):
        StructuredClient(TestProvider([DECISION])).generate(
            Decision,
            prompt="x",
            reasoning="deep",  # type: ignore[call-overload]
        )


def test_two_phase_free_text_reaches_hosted_providers_without_a_schema() -> None:
    wire = Wire(
        httpx2.Response(200, content=json.dumps({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": WORKING}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 20, "output_tokens": 30}}).encode(),
            headers={"content-type": "application/json"}),
        httpx2.Response(200, content=json.dumps({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": json.dumps(DECISION)}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 60, "output_tokens": 40}}).encode(),
            headers={"content-type": "application/json"}),
    )  # fmt: skip
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    result = StructuredClient(provider).generate(Decision, prompt="x", reasoning="two_phase")
    first, second = wire.bodies()
    assert "output_config" not in first
    assert second["output_config"]["format"]["type"] == "json_schema"
    assert result.reasoning == WORKING
    assert result.usage.input_tokens == 80 and result.usage.output_tokens == 70


# --- validation context ---


class Limited(Contract):
    """An amount under a limit the caller knows."""

    amount: int

    @field_validator("amount")
    @classmethod
    def _under_limit(cls, value: int, info: ValidationInfo) -> int:
        context = info.context or {}
        if value > context.get("limit", 10**9):
            raise ValueError(f"{value} is over the limit {context['limit']}")
        assert "source" in context  # merged with the source
        return value


def test_the_callers_context_reaches_the_validators_merged_with_the_source() -> None:
    ok = StructuredClient(TestProvider([{"amount": 5}])).generate(
        Limited, prompt="x", context={"limit": 10}
    )
    assert ok.value.amount == 5
    with pytest.raises(RetriesExhausted) as info:
        StructuredClient(TestProvider([{"amount": 50}], repeat=True), retries=1).generate(
            Limited, prompt="x", source="doc", context={"limit": 10}
        )
    assert "over the limit 10" in str(info.value.last_error)


# --- top-level lists and unions ---


class Item(Contract):
    """One line of an order."""

    sku: str
    qty: int


class Refund(Contract):
    """A refund."""

    amount: int


def test_a_list_of_contracts_is_generated_in_an_envelope_and_unwrapped() -> None:
    provider = TestProvider([{"items": [{"sku": "A1", "qty": 2}, {"sku": "B2", "qty": 1}]}])
    result = StructuredClient(provider).generate(list[Item], prompt="Lines?")
    assert [item.sku for item in result.value] == ["A1", "B2"]
    assert all(isinstance(item, Item) for item in result.value)
    assert result.schema.name == "ItemList"
    output = provider.requests[0].output
    assert isinstance(output, JsonDocument) and output.contract.__name__ == "ItemList"
    assert list(output.schema["properties"]) == ["items"]


def test_a_union_of_contracts_is_unwrapped_to_the_member_that_fits() -> None:
    client = StructuredClient(TestProvider([{"value": {"amount": 30}}, {"value": DECISION}]))
    refund = client.generate(Refund | Decision, prompt="x")
    decision = client.generate(Refund | Decision, prompt="x")
    assert isinstance(refund.value, Refund) and refund.value.amount == 30
    assert isinstance(decision.value, Decision)
    assert refund.schema.name == "RefundOrDecision"


class _Credit(Contract):
    """A credit note (fits every value a `Refund` fits)."""

    amount: int


def test_each_order_of_a_union_gets_its_own_envelope_in_one_process() -> None:
    # `A | B == B | A`, and the envelope was remembered by the union: `B | A` asked after
    # `A | B` was sent `A | B`'s schema, and a value both fit was read as an `A`.
    provider = TestProvider([{"value": {"amount": 30}}], repeat=True)
    client = StructuredClient(provider)
    first = client.generate(Refund | _Credit, prompt="x")
    second = client.generate(_Credit | Refund, prompt="x")
    assert type(first.value) is Refund and type(second.value) is _Credit
    sent = [r.output for r in provider.requests]
    names = [output.contract.__name__ for output in sent if isinstance(output, JsonDocument)]
    assert names == ["RefundOr_Credit", "_CreditOrRefund"]
    assert client.generate(Refund | _Credit, prompt="x").schema.name == "RefundOr_Credit"


def test_streaming_a_list_yields_each_item_validated_as_it_completes() -> None:
    lines = {"items": [{"sku": f"S{i}", "qty": i} for i in range(1, 6)]}
    provider = TestProvider([lines], chunk_size=5)
    shown = list(StructuredClient(provider).stream(list[Item], prompt="x"))
    items, result = shown[:-1], shown[-1]
    assert [item.sku for item in items] == ["S1", "S2", "S3", "S4", "S5"]
    assert all(isinstance(item, Item) for item in items)
    assert [item.sku for item in result.value] == ["S1", "S2", "S3", "S4", "S5"]


def test_a_streamed_item_that_fails_its_contract_is_not_shown() -> None:
    lines = {"items": [{"sku": "ok", "qty": 1}, {"sku": "bad", "qty": "many"},
                       {"sku": "fine", "qty": 3}]}  # fmt: skip
    provider = TestProvider([lines, {"items": [{"sku": "ok", "qty": 1}]}], chunk_size=4)
    shown = list(StructuredClient(provider, retries=1).stream(list[Item], prompt="x"))
    skus = [item.sku for item in shown[:-1]]
    # The first attempt's items up to the invalid one (what is shown is a prefix of its list:
    # "fine" after "bad" would seem to stand in its place), then the retried attempt's.
    assert skus == ["ok", "ok"]
    assert [item.sku for item in shown[-1].value] == ["ok"]  # the retried attempt decided


def test_a_retried_list_stream_s_items_say_which_attempt_they_belong_to() -> None:
    bad = {"items": [{"sku": "ok", "qty": 1}, {"sku": "bad", "qty": "many"}]}
    good = {"items": [{"sku": "ok", "qty": 1}, {"sku": "fine", "qty": 3}]}
    provider = TestProvider([bad, good], chunk_size=4)
    *items, result = StructuredClient(provider, retries=1).stream(list[Item], prompt="x")
    assert [(item.sku, item.attempt) for item in items] == [("ok", 1), ("ok", 2), ("fine", 2)]
    # The number is no field: the item equals the result's, and dumps as the contract says.
    assert items[1:] == result.value and "attempt" not in items[1].model_dump()
    assert "attempt" not in items[1].model_dump_json() and "attempt" not in repr(items[1])


class Attempted(Contract):
    """A login attempt: a contract with a field of that name."""

    user: str
    attempt: int


def test_a_list_item_with_its_own_attempt_field_keeps_it() -> None:
    reply = {"items": [{"user": "kim", "attempt": 7}]}
    *items, result = StructuredClient(TestProvider([reply])).stream(list[Attempted], prompt="x")
    assert [item.attempt for item in items] == [7] and items == result.value


def test_a_retried_streams_snapshots_say_which_attempt_they_belong_to() -> None:
    provider = TestProvider(['{"reasoning": "first", "answer": "maybe"}', DECISION], chunk_size=8)
    shown = list(StructuredClient(provider, retries=1).stream(Decision, prompt="x"))
    snapshots, result = shown[:-1], shown[-1]
    attempts = [snapshot.attempt for snapshot in snapshots]
    assert attempts[0] == 1 and attempts[-1] == 2
    assert attempts == sorted(attempts)  # 1, 1, ..., then 2, 2, ...: the restart is visible
    first_of_second = attempts.index(2)
    assert len(snapshots[first_of_second].value.get("reasoning", "")) <= 8  # back to empty
    assert len(result.attempts) == 2


# --- llama.cpp's default: the SDK's own grammar, the server's json_schema only where refused ---


class Tagged(Contract):
    """Tags that must be unique: the GBNF converter cannot write uniqueItems exactly."""

    tags: list[str] = Field(json_schema_extra={"uniqueItems": True})


def _llamacpp(content: str) -> tuple[LlamaCppProvider, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        setup = llamacpp_setup(request.url.path, body)
        if setup is not None:
            return httpx.Response(200, json=setup)
        sent.append(body)
        return httpx.Response(200, json={"content": content, "stop": True, "stop_type": "eos"})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    return LlamaCppProvider("http://l.test", http_client=client), sent


def test_llamacpp_defaults_to_the_sdks_grammar_nothing_stripped() -> None:
    from sdk.schema.gbnf import contract_gbnf

    provider, sent = _llamacpp(json.dumps(DECISION))
    assert provider.mode == "auto"
    result = StructuredClient(provider).generate(Decision, prompt="x")
    assert sent[0]["grammar"] == contract_gbnf(Decision)
    assert "json_schema" not in sent[0]
    assert result.removed == []  # declared order kept, nothing stripped


def test_llamacpp_falls_back_to_json_schema_where_the_converter_refuses() -> None:
    from sdk.schema.gbnf import UnsupportedSchema
    from sdk.schema.gbnf import contract_gbnf

    with pytest.raises(UnsupportedSchema):
        contract_gbnf(Tagged)
    provider, sent = _llamacpp(json.dumps({"tags": ["a", "b"]}))
    result = StructuredClient(provider).generate(Tagged, prompt="x")
    assert "grammar" not in sent[0] and "json_schema" in sent[0]
    assert any(r.keyword == "uniqueItems" for r in result.removed)  # said, and still enforced
    duplicate, _ = _llamacpp(json.dumps({"tags": ["a", "a"]}))
    with pytest.raises(RetriesExhausted):
        StructuredClient(duplicate, retries=1).generate(Tagged, prompt="x")


# --- native reasoning: the provider's own thinking channel ---


def test_native_reasoning_on_anthropic_asks_for_thinking_and_keeps_it() -> None:
    body = {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": [
            {"type": "thinking", "thinking": WORKING, "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
            {"type": "text", "text": json.dumps(DECISION)},
        ],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 400},
    }  # fmt: skip
    wire = Wire(httpx2.Response(200, content=json.dumps(body).encode(),
                                headers={"content-type": "application/json"}))  # fmt: skip
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    result = StructuredClient(provider).generate(
        Decision, prompt="x", max_tokens=500, reasoning="native"
    )
    sent = wire.body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["max_tokens"] == 500 + 1024  # the output keeps its own limit
    assert sent["output_config"]["format"]["type"] == "json_schema"
    assert result.reasoning == WORKING
    assert result.value.answer == "approve"


def test_native_reasoning_on_openai_responses_keeps_the_summary() -> None:
    body = json.loads(fixture("openai_responses_completed.json"))
    body["output"].insert(0, {
        "id": "rs_1", "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Compared 4,180 with the 5,000 limit."}],
    })  # fmt: skip
    wire = Wire(httpx2.Response(200, content=json.dumps(body).encode(), headers=OPENAI_HEADERS))
    provider = OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini")
    result = StructuredClient(provider).generate(Decision, prompt="x", reasoning="native")
    assert wire.body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert result.reasoning == "Compared 4,180 with the 5,000 limit."


def test_a_provider_without_a_thinking_channel_refuses_native_reasoning_before_sending() -> None:
    sent: list[httpx.Request] = []
    client = httpx.Client(
        transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500))
    )
    provider = VLLMProvider("http://v.test", model="m", http_client=client)
    with pytest.raises(UnsupportedRequest, match="two_phase"):
        StructuredClient(provider).generate(Decision, prompt="x", reasoning="native")
    assert sent == []
