"""Hostile input against the core: recursive contracts, deep documents, numbers JSON cannot
hold, huge keys, wrong arguments, and what errors carry (issue 10)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic import Field

from contracts import Decision
from sdk import Attempt
from sdk import CheckFailed
from sdk import Contract
from sdk import InvalidJSON
from sdk import PartialReader
from sdk import RetriesExhausted
from sdk import SchemaViolation
from sdk import SourceQuote
from sdk import StopReason
from sdk import StructuredOutputError
from sdk import Usage
from sdk import Violation
from sdk import WireEnum
from sdk import WireNameError
from sdk import parse
from sdk.contract import require_contract
from sdk.parsing import MAX_DEPTH
from sdk.parsing import compile_contract


class Stance(WireEnum):
    SUPPORT = "support"
    OPPOSE = "oppose"


class Claim(Contract):
    """A claim with its evidence and the replies to it: a recursive contract."""

    quote: SourceQuote
    stance: Stance
    weight: int = 1
    replies: list[Claim] = Field(default_factory=list)


SOURCE = "Cats sleep a lot. Dogs bark at night."
GOOD = {"quote": "Cats sleep a lot.", "stance": "support", "replies": []}

# A Claim nested `levels` deep is 2 * levels + 1 levels of JSON (an object in a list per level).
DEEPEST_CLAIM = (MAX_DEPTH - 1) // 2


def _nested(levels: int, leaf: dict[str, Any]) -> dict[str, Any]:
    value = leaf
    for _ in range(levels):
        value = {**GOOD, "replies": [value]}
    return value


def _nested_text(levels: int, leaf: str) -> str:
    head = '{"quote": "Cats sleep a lot.", "stance": "support", "replies": ['
    return head * levels + leaf + "]}" * levels


def _parse(text: str, **options: Any) -> Any:
    return parse(Claim, text, stop_reason=StopReason.END_TURN, source=SOURCE, **options)


# --- recursive contracts: every check at every depth ---


@pytest.mark.parametrize("levels", [1, 2, 50, DEEPEST_CLAIM])
def test_an_invented_quote_is_caught_at_any_depth(levels: int) -> None:
    leaf = {**GOOD, "quote": "Cats rule the world."}
    with pytest.raises(CheckFailed) as caught:
        _parse(json.dumps(_nested(levels, leaf)))
    (violation,) = caught.value.violations
    assert violation.pointer == "/replies/0" * levels + "/quote"
    assert "Cats rule the world." in violation.message


@pytest.mark.parametrize("levels", [1, 50, DEEPEST_CLAIM])
def test_an_enum_case_variant_is_normalized_at_any_depth(levels: int) -> None:
    parsed = _parse(json.dumps(_nested(levels, {**GOOD, "stance": "Oppose"})))
    node = parsed.value
    for _ in range(levels):
        node = node.replies[0]
    assert node.stance is Stance.OPPOSE
    assert [(n.pointer, n.received, n.written) for n in parsed.notes] == [
        ("/replies/0" * levels + "/stance", "Oppose", "oppose")
    ]


@pytest.mark.parametrize("levels", [1, 50])
def test_an_enum_case_variant_is_rejected_at_any_depth_when_asked(levels: int) -> None:
    with pytest.raises(SchemaViolation) as caught:
        _parse(json.dumps(_nested(levels, {**GOOD, "stance": "Oppose"})), enum_case="reject")
    assert [v.pointer for v in caught.value.violations] == ["/replies/0" * levels + "/stance"]


@pytest.mark.parametrize("levels", [1, 50])
def test_an_absent_null_is_dropped_at_any_depth(levels: int) -> None:
    text = json.dumps(_nested(levels, {**GOOD, "weight": None}))
    parsed = _parse(text, absent_nulls=True)
    node = parsed.value
    for _ in range(levels):
        node = node.replies[0]
    assert node.weight == 1
    assert [(n.pointer, n.kind) for n in parsed.notes] == [
        ("/replies/0" * levels + "/weight", "absent_null")
    ]
    assert parsed.text == text  # the text stays as received


# --- deep documents: a typed error, never a RecursionError ---


def test_a_document_at_the_nesting_limit_is_parsed() -> None:
    parsed = _parse(json.dumps(_nested(DEEPEST_CLAIM, GOOD)))
    assert len(parsed.text) > 0


@pytest.mark.parametrize("levels", [DEEPEST_CLAIM + 1, 300, 100_000])
def test_a_document_past_the_nesting_limit_is_invalid_json(levels: int) -> None:
    text = _nested_text(levels, json.dumps({**GOOD, "stance": 5}))
    with pytest.raises(InvalidJSON, match=f"nested deeper than {MAX_DEPTH} levels") as caught:
        _parse(text)
    assert caught.value.text == text
    # The position is the bracket that opens one level too many.
    assert text[caught.value.position] in "[{"
    assert (
        text[: caught.value.position].count("[") + text[: caught.value.position].count("{")
        == MAX_DEPTH
    )


def test_an_invalid_value_at_the_limit_is_a_schema_violation_with_its_pointer() -> None:
    with pytest.raises(SchemaViolation) as caught:
        _parse(json.dumps(_nested(DEEPEST_CLAIM, {**GOOD, "stance": 5})))
    assert {v.pointer for v in caught.value.violations} == {
        "/replies/0" * DEEPEST_CLAIM + "/stance"
    }


def test_violations_of_an_instance_deeper_than_python_recursion_are_listed() -> None:
    # The compiled contract used alone (without the parser's limit) still answers.
    compiled = compile_contract(Claim)
    instance = _nested(3_000, {**GOOD, "stance": 5})
    violations = compiled.violations(instance)
    assert violations
    assert violations[0].pointer.endswith("/stance")


def test_a_flat_document_deeper_than_the_limit_in_the_reader_and_parser_agree() -> None:
    text = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(InvalidJSON) as whole:
        parse(Decision, text, stop_reason="end_turn")
    reader = PartialReader(Decision)
    with pytest.raises(InvalidJSON) as streamed:
        reader.feed(text)
    assert whole.value.position == streamed.value.position == MAX_DEPTH


def test_a_deep_value_in_an_untyped_field_is_invalid_json() -> None:
    # The schema accepts any JSON there, so the depth is checked before the schema is.
    deep = "[" * 300 + "]" * 300
    with pytest.raises(InvalidJSON, match="nested deeper than"):
        parse(Measured, '{"ratio": 0.5, "anything": ' + deep + "}", stop_reason="end_turn")


def test_the_schema_bounds_the_depth_of_what_it_accepts() -> None:
    assert compile_contract(Decision).depth_bound == 1
    assert compile_contract(Claim).depth_bound is None  # recursive
    assert compile_contract(Measured).depth_bound is None  # an untyped field


# --- numbers JSON cannot hold ---


class Measured(Contract):
    ratio: float
    anything: Any = None


@pytest.mark.parametrize("number", ["1e999999", "-1e999", "1" + "0" * 400 + ".0"])
@pytest.mark.parametrize("field", ["ratio", "anything"])
def test_an_overflowing_number_is_invalid_json_that_says_so(number: str, field: str) -> None:
    values = {"ratio": "0.5", "anything": "null", field: number}
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"
    with pytest.raises(InvalidJSON, match="out of range: JSON has no infinity") as caught:
        parse(Measured, text, stop_reason="end_turn")
    assert caught.value.position == text.index(number)
    assert "null" not in str(caught.value)


def test_an_overflowing_number_in_the_stream_is_invalid_json() -> None:
    text = '{"ratio": 1e999999, "anything": null}'
    for size in (1, 5, len(text)):
        reader = PartialReader(Measured)
        with pytest.raises(InvalidJSON, match="JSON has no infinity") as caught:
            for index in range(0, len(text), size):
                reader.feed(text[index : index + size])
            reader.finish()
        assert caught.value.position == text.index("1e")


@pytest.mark.parametrize("size", [1, 7, 100_000])
@pytest.mark.parametrize("where", ["field", "bare"])
def test_an_integer_past_the_digit_limit_is_invalid_json_in_both_readers(
    size: int, where: str
) -> None:
    digits = "9" * 5_000
    text = '{"ratio": 0.5, "anything": ' + digits + "}" if where == "field" else digits
    reader = PartialReader(Measured)
    with pytest.raises(InvalidJSON, match="5000 digits") as streamed:
        for index in range(0, len(text), size):
            reader.feed(text[index : index + size])
        reader.finish()
    with pytest.raises(InvalidJSON, match="5000 digits") as whole:
        parse(Measured, text, stop_reason="end_turn")
    assert streamed.value.position == whole.value.position == text.index(digits)
    assert len(str(streamed.value)) < 300


def test_an_integer_past_the_digit_limit_from_client_stream_is_invalid_json() -> None:
    from sdk import RunawayOutput
    from sdk import StructuredClient
    from sdk.providers.test import TestProvider

    digits = "9" * 5_000
    document = '{"reasoning": "x", "answer": ' + digits + ', "confidence": "high"}'
    provider = TestProvider([document], chunk_size=7, repeat=True)
    client = StructuredClient(provider, retries=0)
    # The stream's runaway guard would stop the run of 9s first (below): off, the parser's own
    # digit limit decides.
    with pytest.raises(InvalidJSON, match="5000 digits") as caught:
        for _ in client.stream(Decision, prompt="Approve?", runaway=None):
            pass
    assert caught.value.text == document
    with pytest.raises(RunawayOutput) as stopped:
        for _ in client.stream(Decision, prompt="Approve?"):
            pass
    assert stopped.value.text is not None and len(stopped.value.text) < 400


# --- bounded messages ---


def test_a_huge_key_gives_a_bounded_message_and_keeps_everything_on_the_error() -> None:
    key = "k" * 1_000_000
    text = json.dumps({**GOOD, key: 1})
    with pytest.raises(SchemaViolation) as caught:
        _parse(text)
    error = caught.value
    assert len(str(error)) < 1_000
    assert error.text == text
    (violation,) = error.violations
    assert violation.pointer == "/" + key  # the record is whole; only its rendering is cut
    assert len(str(violation)) < 400
    assert str(violation).startswith("/kkk") and "...: unknown property" in str(violation)


def test_a_huge_repeated_key_gives_a_bounded_message() -> None:
    key = "k" * 1_000_000
    text = "{" + f'"{key}": 1, "{key}": 2' + "}"
    with pytest.raises(InvalidJSON) as caught:
        _parse(text)
    assert len(str(caught.value)) < 1_000
    assert caught.value.text == text


def test_violation_shown_cuts_pointer_and_message_with_an_ellipsis() -> None:
    violation = Violation("/" + "a" * 500, "b" * 500)
    shown = violation.shown(pointer_chars=20, message_chars=30)
    assert shown == "/" + "a" * 16 + "...: " + "b" * 27 + "..."


# --- what errors carry ---


def test_every_error_has_attempts_and_usage_even_from_parse_alone() -> None:
    with pytest.raises(StructuredOutputError) as caught:
        parse(Decision, "{}", stop_reason="max_tokens")
    assert caught.value.attempts == []
    assert caught.value.usage == Usage()


def test_an_error_given_attempts_sums_their_usage() -> None:
    attempts = [
        Attempt(1, "x", StopReason.REFUSAL, "refusal", Usage(10, 3)),
        Attempt(2, "y", StopReason.REFUSAL, "refusal", Usage(12, 4)),
    ]
    error = StructuredOutputError("refused", attempts=attempts)
    assert error.usage == Usage(22, 7)
    assert error.attempts == attempts


def test_retries_exhausted_names_the_last_errors_violations() -> None:
    violations = [
        Violation("/answer", "'maybe' is not one of ['approve', 'reject']", "enum"),
        Violation("/" + "k" * 10_000, "unknown property (not in the contract)"),
    ]
    last = SchemaViolation("output does not match the Decision schema", violations=violations)
    attempts = [Attempt(1, "{}", StopReason.END_TURN, "end_turn", Usage(5, 5), error=last)]
    error = RetriesExhausted(
        "Decision: 1 attempts, none valid; last: SchemaViolation", attempts=attempts
    )
    message = str(error)
    assert "/answer: 'maybe' is not one of" in message
    assert len(message) < 1_000
    assert error.last_error is last
    assert RetriesExhausted.last_error.__doc__ and "attempts[-1].error" in (
        RetriesExhausted.last_error.__doc__
    )


# --- wrong arguments fail at the call ---


class Other(Contract):
    name: str


class PlainModel(BaseModel):
    name: str


@pytest.mark.parametrize(
    ("argument", "says"),
    [
        (list[Claim], "top-level lists go through client.generate(list[Item])"),
        (Claim | Other, "top-level unions go through client.generate(A | B)"),
        (PlainModel, "plain pydantic BaseModel"),
        (Other(name="x"), "pass the class itself"),
        (dict, "not dict"),
    ],
)
def test_parse_rejects_what_is_not_a_contract_with_a_type_error(argument: Any, says: str) -> None:
    with pytest.raises(TypeError, match="parse\\(\\) takes a Contract subclass") as caught:
        parse(argument, "{}", stop_reason="end_turn")
    assert says in str(caught.value)


def test_require_contract_returns_the_contract_and_names_the_caller() -> None:
    assert require_contract(Claim, "generate()") is Claim
    with pytest.raises(TypeError, match="stream\\(\\) takes"):
        require_contract(list[Claim], "stream()")


# --- WireEnum ---


@pytest.mark.parametrize("value", [1, 2.5, True, None, ("a", "b")])
def test_a_wire_enum_with_a_non_string_value_fails_at_definition(value: Any) -> None:
    with pytest.raises(WireNameError, match="wire names must be strings"):

        class Bad(WireEnum):
            ONE = value


# --- the client's part ---


def _anthropic(*replies: Any) -> Any:
    from sdk import StructuredClient
    from sdk.providers import AnthropicProvider
    from tests.wire_support import Sleeps
    from tests.wire_support import Wire
    from tests.wire_support import anthropic_client

    wire = Wire(*replies)
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    return StructuredClient(provider, sleep=Sleeps())


@pytest.mark.parametrize("call", ["generate", "stream"])
def test_the_client_rejects_what_is_not_a_contract_at_the_call(call: str) -> None:
    from tests.wire_support import anthropic_reply

    client = _anthropic(anthropic_reply(text=json.dumps(GOOD)))
    for wrong in (PlainModel, list[int], dict, Claim | int):
        with pytest.raises(TypeError, match=f"{call}\\(\\) takes a Contract subclass"):
            result = getattr(client, call)(wrong, prompt="Claims?")
            list(result) if call == "stream" else None
    # A list or union the client does not envelope says what it takes (on main: only "go
    # through client.generate(list[Item])", which is what the caller did).
    for wrong, says in (
        (list[Claim | Other], "Item one Contract subclass"),
        (list[str], "Item one Contract subclass"),
        (Claim | None, "every member a Contract subclass"),
        (Claim | list[Other], "every member a Contract subclass"),
    ):
        with pytest.raises(TypeError, match=says):
            result = getattr(client, call)(wrong, prompt="Claims?")
            list(result) if call == "stream" else None


@pytest.mark.parametrize("fixture", ["anthropic_refusal.json", "anthropic_max_tokens.json"])
def test_refused_and_truncated_errors_from_a_call_carry_attempts_and_usage(fixture: str) -> None:
    from tests.wire_support import anthropic_reply

    client = _anthropic(anthropic_reply(fixture))
    with pytest.raises(StructuredOutputError) as caught:
        client.generate(Decision, prompt="Approve?")
    assert len(caught.value.attempts) == 1
    assert caught.value.usage.output_tokens > 0
    assert caught.value.usage == caught.value.attempts[0].usage


def test_retry_feedback_for_a_huge_key_is_bounded() -> None:
    from sdk.engine.conversation import feedback_message

    key = "k" * 1_000_000
    with pytest.raises(SchemaViolation) as caught:
        _parse(json.dumps({**GOOD, key: 1}))
    assert len(feedback_message(Claim, caught.value)) < 2_000
