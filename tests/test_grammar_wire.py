"""Provider-shaped grammar pieces, checked against the real `openai` client and its types.

The custom tool and `tool_choice` go through `client.responses.create` on a mock transport
(the SDK serializes exactly what the codec will send); the reply is a realistic Responses body
with a `custom_tool_call` item, validated strictly by the client, whose `input` is the text.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx2
import pytest
from openai.types.responses import CustomTool
from openai.types.responses import Response

from contracts.sql import SELECT_QUERY
from sdk import Grammar
from sdk import GrammarViolation
from sdk.grammar import parse_grammar
from sdk.grammar import to_gbnf
from sdk.grammar.wire import CUSTOM_TOOL_CALL
from sdk.grammar.wire import custom_tool_choice
from sdk.grammar.wire import custom_tool_name
from sdk.grammar.wire import llamacpp_grammar
from sdk.grammar.wire import openai_custom_tool
from sdk.grammar.wire import read_custom_tool_input
from sdk.grammar.wire import vllm_structured_outputs
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import Wire
from tests.wire_support import fixture_json
from tests.wire_support import openai_client

FIXTURE = "openai_responses_custom_tool_call.json"


def _reply(body: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, json=body, headers=OPENAI_HEADERS)


def test_the_custom_tool_is_what_the_openai_sdk_sends_and_reads() -> None:
    tool = openai_custom_tool(SELECT_QUERY)
    assert tool == {
        "type": "custom",
        "name": "SelectQuery_v2",
        "format": {"type": "grammar", "syntax": "lark", "definition": SELECT_QUERY.lark},
        "description": SELECT_QUERY.description,
    }
    assert CustomTool.model_validate(tool).format.syntax == "lark"  # type: ignore[union-attr]

    wire = Wire(_reply(fixture_json(FIXTURE)))
    client = openai_client(wire)
    name = custom_tool_name(SELECT_QUERY)
    response = client.responses.create(
        model="gpt-5.1-mini",
        input="Which customers are in the US?",
        tools=[tool],  # type: ignore[list-item]
        tool_choice=custom_tool_choice(name),  # type: ignore[arg-type]
    )
    sent = wire.body
    assert sent["tools"] == [tool]
    assert sent["tool_choice"] == {"type": "custom", "name": "SelectQuery_v2"}

    text = read_custom_tool_input(response.output, name)
    assert text == fixture_json(FIXTURE)["output"][1]["input"]
    parsed = parse_grammar(SELECT_QUERY, text, stop_reason=response.status or "")
    assert parsed.value.startswith('SELECT "name", "country" FROM "customers"')


def test_the_reader_takes_wire_dicts_too_and_names_nothing_it_did_not_find() -> None:
    body = fixture_json(FIXTURE)
    name = custom_tool_name(SELECT_QUERY)
    assert read_custom_tool_input(body["output"], name) == body["output"][1]["input"]
    assert read_custom_tool_input(body["output"], "OtherTool_v1") is None
    message_only = [
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "I cannot write that query."}],
        }
    ]
    assert read_custom_tool_input(message_only, name) is None
    broken = copy.deepcopy(body["output"])
    broken[1]["input"] = {"sql": "SELECT 1"}
    with pytest.raises(TypeError, match="non-string input"):
        read_custom_tool_input(broken, name)


def test_a_custom_tool_input_outside_the_grammar_is_a_violation() -> None:
    body = fixture_json(FIXTURE)
    body["output"][1]["input"] = 'DROP TABLE "orders";'
    response = Response.model_validate(body)
    text = read_custom_tool_input(response.output, custom_tool_name(SELECT_QUERY))
    assert text is not None and response.output[1].type == CUSTOM_TOOL_CALL
    with pytest.raises(GrammarViolation) as raised:
        parse_grammar(SELECT_QUERY, text, stop_reason="completed")
    assert raised.value.position == 0


def test_tool_names_are_safe_for_the_api() -> None:
    grammar = Grammar("Select_Query", lark='start: "a"\n', version=12)
    assert custom_tool_name(grammar) == "Select_Query_v12"
    assert openai_custom_tool(grammar, name="sql", description="d")["name"] == "sql"
    assert "description" not in openai_custom_tool(grammar)


def test_local_server_fields() -> None:
    assert llamacpp_grammar(SELECT_QUERY) == {"grammar": to_gbnf(SELECT_QUERY)}
    gbnf_grammar = Grammar("G", gbnf='root ::= "a"\n')
    assert llamacpp_grammar(gbnf_grammar) == {"grammar": 'root ::= "a"\n'}
    assert vllm_structured_outputs(SELECT_QUERY) == {
        "structured_outputs": {"grammar": to_gbnf(SELECT_QUERY)}
    }
    lark = vllm_structured_outputs(SELECT_QUERY, syntax="lark")
    assert lark == {"structured_outputs": {"grammar": SELECT_QUERY.lark}}

