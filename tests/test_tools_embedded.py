"""Tool calls on `EmbeddedProvider` for real: the bundled SmolLM2-135M, the tools rendered into its
prompt, and a lazy llguidance grammar that switches on at `<tool_call>`.

What is asserted is what the mechanism guarantees, never what a 135M model chooses to say: a
forced call is always a valid call (its arguments pass every check), a named tool is the one
called, `none` never calls, prose stays free and unconstrained when no call is forced, a cut
block is a typed error with its text, and the diagnostics tell the decision apart.

The block reader (text -> calls, prose and fragments) is tested without the model below.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import llguidance
import pytest
from pydantic import Field

from sdk import Contract
from sdk import PartialToolCall
from sdk import StopReason
from sdk import StructuredClient
from sdk import Tool
from sdk import ToolCalls
from sdk import TruncatedOutput
from sdk import WireEnum
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._base import TextDelta
from sdk.providers._base import ToolCallDelta
from sdk.providers._base import ToolOffer
from sdk.providers.embedded._tools import ToolPlan
from sdk.providers.embedded._tools import tool_grammar


class Unit(WireEnum):
    """Temperature unit."""

    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class GetWeather(Contract):
    """Get the current weather in a city."""

    city: str = Field(max_length=24)
    unit: Unit


class LookupOrder(Contract):
    """Look up an order by its id."""

    order_id: str = Field(max_length=12)


WEATHER, ORDERS = Tool(GetWeather), Tool(LookupOrder)
TOOLS = [WEATHER, ORDERS]
PROMPTS = [
    "What is the weather in Paris, in celsius?",
    "Look up order A-1009.",
    "Tell me a joke.",
]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


@pytest.fixture(scope="module")
def client() -> Iterator[StructuredClient]:
    try:
        from sdk.providers.embedded import EmbeddedProvider

        provider = EmbeddedProvider()
    except ImportError as missing:
        if _in_ci():
            pytest.fail(f"CI must run the local tests, but {missing}", pytrace=False)
        pytest.skip(str(missing))
    yield StructuredClient(provider, retries=0, max_tokens=80)
    provider.close()


@pytest.mark.local
@pytest.mark.parametrize("prompt", PROMPTS)
def test_a_forced_call_is_always_a_valid_call(client: StructuredClient, prompt: str) -> None:
    result = client.call_tools(tools=TOOLS, tool_choice="required", prompt=prompt)
    assert result.stop_reason is StopReason.TOOL_USE
    assert len(result.calls) == 1  # one call: parallel calls were not asked for
    call = result.calls[0]
    assert isinstance(call.value, (GetWeather, LookupOrder))
    assert type(call.value).__name__ == call.tool
    assert type(call.value).model_validate_json(call.text) == call.value
    diagnostics = result.attempts[-1].diagnostics
    assert diagnostics is not None
    decision = diagnostics.field("/decision")
    assert decision is not None and decision.tokens == 1
    assert decision.min_mass < 1.0  # the grammar took the answer away: only the call was open
    assert any(f.pointer.startswith("/calls/0/arguments/") for f in diagnostics.fields)


@pytest.mark.local
def test_a_named_tool_is_the_one_called(client: StructuredClient) -> None:
    for prompt in PROMPTS[:2]:
        result = client.call_tools(tools=TOOLS, tool_choice=ORDERS, prompt=prompt)
        assert [call.tool for call in result.calls] == ["LookupOrder"]
        assert isinstance(result.calls[0].value, LookupOrder)


@pytest.mark.local
@pytest.mark.parametrize(
    "prompt", [*PROMPTS, "Reply with <tool_call> and the GetWeather call for Paris."]
)
def test_none_never_calls(client: StructuredClient, prompt: str) -> None:
    try:
        result = client.call_tools(tools=TOOLS, tool_choice="none", prompt=prompt)
    except TruncatedOutput as error:  # free prose may run to the limit; it is still no call
        assert error.text and "<tool_call>" not in error.text
        return
    assert result.calls == []
    assert "<tool_call>" not in result.text
    assert result.stop_reason is StopReason.END_TURN


@pytest.mark.local
def test_prose_stays_free_when_no_call_is_forced(client: StructuredClient) -> None:
    result = client.call_tools(tools=TOOLS, prompt="Tell me a joke.")
    assert result.calls == [] and result.text.strip()
    assert result.stop_reason is StopReason.END_TURN
    diagnostics = result.attempts[-1].diagnostics
    assert diagnostics is not None
    # Nothing was masked at the decision or in the prose: the model spoke freely.
    assert diagnostics.min_mass > 0.99


@pytest.mark.local
def test_a_block_cut_by_max_tokens_is_truncated_with_its_text(client: StructuredClient) -> None:
    with pytest.raises(TruncatedOutput) as info:
        client.call_tools(tools=TOOLS, tool_choice="required", prompt=PROMPTS[0], max_tokens=8)
    assert info.value.text is not None and info.value.text.startswith("<tool_call>")


@pytest.mark.local
def test_stream_gives_the_call_as_it_is_generated(client: StructuredClient) -> None:
    items = list(client.stream_tools(tools=TOOLS, tool_choice="required", prompt=PROMPTS[0]))
    result = items[-1]
    assert isinstance(result, ToolCalls)
    snapshots = [item for item in items if isinstance(item, PartialToolCall)]
    assert len(snapshots) > 2 and snapshots[-1].done
    assert snapshots[-1].text == result.calls[0].text
    assert snapshots[0].tool == result.calls[0].tool


@pytest.mark.local
def test_a_conversation_continues_with_the_result(client: StructuredClient) -> None:
    first = client.call_tools(tools=TOOLS, tool_choice=WEATHER, prompt=PROMPTS[0])
    call = first.calls[0]
    messages = [
        Message("user", PROMPTS[0]),
        first.message(),
        Message("user", "", tool_results=(call.result("18 C, clear sky"),)),
    ]
    try:
        second = client.call_tools(tools=TOOLS, tool_choice="none", messages=messages)
    except TruncatedOutput as error:
        assert error.text is not None
        return
    assert second.calls == []


# --- without the model: the grammar and the block reader ---


def _offer(choice: Any, parallel: bool | None = None) -> ToolOffer:
    return ToolOffer(tuple(TOOLS), choice, parallel)


def _request(choice: Any, parallel: bool | None = None) -> CompletionRequest:
    return CompletionRequest(_offer(choice, parallel), (Message("user", "x"),), 100)


def test_the_grammar_per_tool_choice() -> None:
    auto = tool_grammar(_offer("auto"))
    assert "call_head[lazy]: TEXT" in auto and "start: TEXT | call_head" in auto
    required = tool_grammar(_offer("required"))
    assert 'start: "<tool_call>\\n" body' in required and "TEXT |" not in required
    named = tool_grammar(_offer(ORDERS))
    assert "LookupOrder" in named and "GetWeather" not in named
    assert tool_grammar(_offer("none")).splitlines()[1] == "start: TEXT"
    assert "(" in tool_grammar(_offer("required", parallel=True)).splitlines()[1]


def test_the_grammars_compile_with_llguidance() -> None:
    for choice in ("auto", "required", "none", ORDERS):
        for parallel in (None, True):
            grammar = llguidance.LLMatcher.grammar_from_lark(tool_grammar(_offer(choice, parallel)))
            failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
            assert not failed, messages


def _read(text: str, stop: StopReason = StopReason.END_TURN) -> tuple[list[Any], Completion]:
    plan = ToolPlan(_request("auto", parallel=True), _offer("auto", parallel=True))
    pieces: list[TextDelta | Completion] = [
        TextDelta(text[i : i + 3]) for i in range(0, len(text), 3)
    ]
    pieces.append(Completion(text=text, stop_reason=stop, raw_stop_reason="eos"))
    out = list(plan.read(pieces))
    completion = out.pop()
    assert isinstance(completion, Completion)
    return out, completion


def test_the_reader_keeps_prose_and_parallel_calls_apart() -> None:
    text = (
        'Checking.<tool_call>\n{"name": "LookupOrder", "arguments": {"order_id": "</tool_call>"}}'
        '\n</tool_call>\n<tool_call>\n{"name": "GetWeather", "arguments": '
        '{"city": "Oslo", "unit": "celsius"}}\n</tool_call>'
    )
    deltas, completion = _read(text)
    assert completion.text == "Checking."
    assert completion.stop_reason is StopReason.TOOL_USE
    assert [(c.tool, c.text) for c in completion.tool_calls] == [
        ("LookupOrder", '{"order_id": "</tool_call>"}'),  # the marker inside a string is text
        ("GetWeather", '{"city": "Oslo", "unit": "celsius"}'),
    ]
    prose = "".join(d.text for d in deltas if not isinstance(d, ToolCallDelta))
    assert prose == "Checking."
    for index, call in enumerate(completion.tool_calls):
        fragments = [d for d in deltas if isinstance(d, ToolCallDelta) and d.index == index]
        assert "".join(d.text for d in fragments) == call.text
        assert len(fragments) > 2  # streamed, not in one piece


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "GetWeather", "arguments": {"city": "Oslo"} and more</tool_call>',
        '<tool_call>\n{"name": "GetWeather", "arguments": {"city": "Oslo", ',
        "<tool_call>\nnot json at all\n</tool_call>",
        'Sure <tool_call>{"name": "GetWeather"}</tool_call>',
    ],
)
def test_a_malformed_or_unclosed_block_is_never_prose(text: str) -> None:
    _, completion = _read(text)
    assert completion.tool_calls == ()
    assert completion.stop_reason is StopReason.TOOL_USE  # the client's MissingToolCall
    assert completion.text == text  # kept whole


def test_a_cut_block_keeps_its_stop_reason() -> None:
    _, completion = _read('<tool_call>\n{"name": "GetWeather", "argu', StopReason.MAX_TOKENS)
    assert completion.stop_reason is StopReason.MAX_TOKENS
    assert completion.tool_calls == ()
