"""Retry feedback for a large invalid reply: the problems with an excerpt around each, not the
whole reply again (issue 16, part 3), through the real client and `TestProvider`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from contracts import Decision
from contracts import InvoiceExtraction
from sdk import InvalidJSON
from sdk import SchemaViolation
from sdk import StructuredClient
from sdk import Violation
from sdk.engine.conversation import FEEDBACK_WHOLE_REPLY
from sdk.engine.conversation import feedback_message
from sdk.grammar import Grammar
from sdk.providers import AnthropicProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import Provider
from sdk.providers.test import TestProvider
from sdk.schema.compact import compact_schema
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

ITEMS = 300
SOURCE = "\n".join(
    [f"Invoice INV-7 from Acme GmbH. {ITEMS} lines follow."]
    + [f"Line {i}: widget model {i}, 1 piece, 1.00 EUR" for i in range(ITEMS)]
    + [f"Total due: {ITEMS}.00 EUR"]
)


def _invoice(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "vendor": "Acme GmbH",
        "invoice_number": "INV-7",
        "issue_date": None,
        "currency": "EUR",
        "category": "goods",
        "line_items": [
            {"description": f"widget model {i}", "quantity": 1, "amount": 1.0} for i in range(ITEMS)
        ],
        "total": float(ITEMS),
        "evidence": f"Total due: {ITEMS}.00 EUR",
    }
    value.update(changes)
    return value


def _retry(first: str) -> tuple[TestProvider, Any]:
    provider = TestProvider([first, json.dumps(_invoice())])
    result = StructuredClient(provider, retries=1).generate(
        InvoiceExtraction, prompt="Extract.", source=SOURCE
    )
    return provider, result


def test_a_large_invalid_reply_is_not_resent_whole() -> None:
    value = _invoice(category="consulting")
    value["line_items"][250]["quantity"] = -3
    bad = json.dumps(value)
    assert len(bad) > FEEDBACK_WHOLE_REPLY and len(bad) > len(SOURCE)
    provider, result = _retry(bad)
    assert isinstance(result.value, InvoiceExtraction)
    first, retry = provider.requests
    # The conversation, a stand-in for the reply (roles still alternate), then the feedback.
    assert retry.messages[: len(first.messages)] == first.messages
    stand_in, feedback = retry.messages[len(first.messages) :]
    assert stand_in.role == "assistant" and len(stand_in.content) < 50
    assert feedback.role == "user" and bad not in feedback.content
    assert f"({len(bad):,} characters) is not repeated" in feedback.content
    # Each problem with its pointer, and an excerpt of the reply where it is.
    lines = feedback.content.splitlines()
    assert any(line.startswith("- /category: 'consulting' is not one of") for line in lines)
    excerpts = [line for line in lines if line.startswith("- /") and "..." in line]
    assert any('"category": "consulting"' in line for line in excerpts)
    assert any('"quantity": -3' in line and "widget model 250" in line for line in excerpts)
    assert len(feedback.content) < 2_000
    tokens = [attempt.usage.input_tokens for attempt in result.attempts]
    assert tokens[1] <= 1.2 * tokens[0]


def test_a_small_invalid_reply_is_resent_whole_as_the_assistants_turn() -> None:
    good_value = {"reasoning": "A $12 taxi is within policy.", "answer": "approve"}
    good_value["confidence"] = "high"
    bad = json.dumps({**good_value, "answer": "maybe"})
    assert len(bad) <= FEEDBACK_WHOLE_REPLY
    good = json.dumps(good_value)
    provider = TestProvider([bad, good])
    StructuredClient(provider, retries=1).generate(Decision, prompt="Approve?")
    retry = provider.requests[1].messages
    assert retry[-2].role == "assistant" and retry[-2].content == bad
    assert "not repeated" not in retry[-1].content and "/answer" in retry[-1].content


def test_a_large_reply_that_is_not_json_is_quoted_where_parsing_stopped() -> None:
    text = json.dumps(_invoice())
    broken = text[:3000] + "}}oops" + text[3000:]
    with pytest.raises(InvalidJSON) as caught:
        StructuredClient(TestProvider([broken]), retries=0).generate(
            InvoiceExtraction, prompt="Extract.", source=SOURCE
        )
    message = feedback_message(InvoiceExtraction, caught.value)
    position = caught.value.position
    assert f"- character {position:,}: ..." in message
    excerpt = next(line for line in message.splitlines() if line.startswith("- character"))
    assert "oops" in excerpt or "}}" in excerpt
    # One place only: the root pointer of the JSON error adds no excerpt of the start.
    assert sum(line.endswith("...") for line in message.splitlines()) == 1


def test_excerpts_are_bounded_in_number_and_size() -> None:
    value = _invoice()
    text = json.dumps(value)
    error = SchemaViolation(
        "bad",
        text=text,
        violations=[Violation(f"/line_items/{i}/quantity", "bad " * 100) for i in range(60)],
    )
    message = feedback_message(InvoiceExtraction, error)
    excerpts = [line for line in message.splitlines() if line.startswith("- /") and '"' in line]
    assert len(excerpts) == 8
    assert all(len(line) < 300 for line in excerpts)
    assert len(message) < 8_000  # 20 problems and 8 excerpts, each line bounded
    # The threshold is the caller's to move: a generous one sends nothing of the reply here.
    assert "not repeated" not in feedback_message(InvoiceExtraction, error, whole_reply=10**6)


# --- the contract's type definition, on a route that holds the reply to no schema ---

_GOOD_DECISION = {"reasoning": "A $12 taxi is within policy.", "answer": "approve"}


def _decision(**changes: Any) -> str:
    return json.dumps({**_GOOD_DECISION, "confidence": "high", **changes})


def test_a_prompt_only_route_s_retry_gives_the_contract_as_a_short_type_definition() -> None:
    """`TestProvider` holds a reply to no schema (its profile names no preflight target), as a
    prompt-only route does: the retry says the problems, then the contract as a type
    definition (issue 33 item 5), before the closing line."""
    provider = TestProvider([_decision(answer="maybe"), _decision()])
    assert not provider.holds_schema
    result = StructuredClient(provider, retries=1).generate(Decision, prompt="Approve?")
    assert result.value.answer == "approve"
    feedback = provider.requests[1].messages[-1].content
    assert isinstance(feedback, str)
    problems, definition = feedback.split("\nThe Decision to write, as a type definition:\n")
    assert "- /answer: 'maybe' is not one of" in problems
    assert definition == compact_schema(Decision) + "\n" + (
        "Reply with the whole corrected JSON document, and nothing else."
    )
    # The first request is the caller's conversation as it was: nothing added there.
    assert compact_schema(Decision) not in str(provider.requests[0].messages)


def _anthropic(wire: Wire) -> Provider:
    return AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")


def _responses(wire: Wire) -> Provider:
    return OpenAIResponsesProvider(openai_client(wire), model="gpt-5")


@pytest.mark.parametrize(
    ("make", "reply"), [(_anthropic, anthropic_reply), (_responses, responses_reply)]
)
def test_a_route_that_holds_the_schema_is_told_the_problems_alone(
    make: Callable[[Wire], Provider], reply: Callable[..., Any]
) -> None:
    """Through the real Anthropic and OpenAI clients: their wires hold the reply to the
    schema, so the retry says the problems without the type definition."""
    wire = Wire(reply(text=_decision(answer="maybe")), reply(text=_decision()))
    provider = make(wire)
    assert provider.holds_schema
    StructuredClient(provider, retries=1).generate(Decision, prompt="Approve?")
    retry = json.dumps(wire.bodies()[1])
    assert "/answer" in retry and "as a type definition" not in retry
    typed_line = compact_schema(Decision).splitlines()[-2]  # confidence: "low" | ...
    assert typed_line.startswith("  confidence:") and json.dumps(typed_line)[1:-1] not in retry


def test_a_grammar_s_retry_has_no_type_definition() -> None:
    """A grammar's sentence has no contract type to give: its feedback is as before."""
    grammar = Grammar("Pair", lark='start: KEY "=" VALUE\nKEY: /[a-z]+/\nVALUE: /[0-9]+/')
    error = SchemaViolation("bad", text="x", violations=[Violation("", "bad")])
    assert feedback_message(grammar, error, typed=True) == feedback_message(grammar, error)
