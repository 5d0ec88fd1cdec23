"""`Verbatim` on every provider: constrained while decoding where the engine allows it (the
embedded model, a real llama-server, vLLM's guidance grammar), checked after parsing and retried
with feedback everywhere else (through the real SDK clients on mocked transports, or the local
test server), and the fallback above llama.cpp's size bound with its note."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import Field

from sdk import CheckFailed
from sdk import Contract
from sdk import SourceQuote
from sdk import StructuredClient
from sdk import Verbatim
from sdk.providers import AnthropicProvider
from sdk.providers import CompletionRequest
from sdk.providers import GeminiProvider
from sdk.providers import JsonDocument
from sdk.providers import LlamaCppProvider
from sdk.providers import Message
from sdk.providers import OllamaProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import Sampling
from sdk.providers import VLLMProvider
from sdk.providers._grounding import GROUNDING_NOTE
from sdk.schema.gbnf import contract_gbnf
from tests.grammar_support import grammar_accepts
from tests.grammar_support import lark_accepts
from tests.local_support import LocalServer
from tests.local_support import Reply
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import gemini_client
from tests.wire_support import gemini_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

SOURCE = (
    "Your parcel was handed over to our delivery partner on 12 March.\n"
    "Reference ORD-55123. Questions? Call +44 20 7946 0550."
)
PROMPT = "Which carrier delivers the parcel, and what is the order number?"


class Shipment(Contract):
    carrier: Verbatim = Field(description="The company that delivers the parcel.")
    order_number: Verbatim | None = Field(
        pattern=r"^[A-Z]{2,4}-[0-9]{5,8}$", description="The shop's order number, or null."
    )
    tracking_number: Verbatim | None = Field(
        pattern=r"^[A-Z]{2}[0-9]{9}[A-Z]{2}$", description="The tracking number, or null."
    )


INVENTED = {"carrier": "UPS", "order_number": "ORD-55123", "tracking_number": None}
GARBLED = {"carrier": "delivery partner", "order_number": "ORD-55132", "tracking_number": None}
COPIED = {"carrier": "delivery partner", "order_number": "ORD-55123", "tracking_number": None}


def _text(value: dict[str, Any]) -> str:
    return json.dumps(value)


def _spans_of(value: Any) -> bool:
    return all(v is None or v in SOURCE for v in value.model_dump().values())


# --- checked after parsing, retried with feedback: the hosted providers ---


def _check_retry(requests: list[dict[str, Any]], result: Any) -> None:
    assert result.value == Shipment.model_validate(COPIED)
    assert len(result.attempts) == 2
    [first_error] = [a.error for a in result.attempts if a.error is not None]
    assert isinstance(first_error, CheckFailed)
    assert [v.pointer for v in first_error.violations] == ["/order_number"]
    assert "ORD-55132" in str(requests[1])  # the feedback names the field and the value
    assert "order_number" in str(requests[1])


def test_anthropic_checks_after_and_retries_with_feedback() -> None:
    wire = Wire(anthropic_reply(text=_text(GARBLED)), anthropic_reply(text=_text(COPIED)))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    result = StructuredClient(provider, retries=1).generate(Shipment, prompt=PROMPT, source=SOURCE)
    _check_retry(wire.bodies(), result)
    assert "grammar" not in json.dumps(wire.bodies()[0])  # no grounding on the wire


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_openai_checks_after_and_retries_with_feedback(api: str) -> None:
    if api == "responses":
        wire = Wire(responses_reply(text=_text(GARBLED)), responses_reply(text=_text(COPIED)))
        provider: Any = OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini")
    else:
        wire = Wire(chat_reply(text=_text(GARBLED)), chat_reply(text=_text(COPIED)))
        provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    result = StructuredClient(provider, retries=1).generate(Shipment, prompt=PROMPT, source=SOURCE)
    _check_retry(wire.bodies(), result)


def test_gemini_checks_after_and_retries_with_feedback() -> None:
    wire = Wire(gemini_reply(text=_text(GARBLED)), gemini_reply(text=_text(COPIED)))
    provider = GeminiProvider(gemini_client(wire), model="gemini-2.5-flash")
    result = StructuredClient(provider, retries=1).generate(Shipment, prompt=PROMPT, source=SOURCE)
    _check_retry(wire.bodies(), result)


@pytest.fixture(scope="module")
def local() -> Iterator[LocalServer]:
    server = LocalServer()
    server.start()
    yield server
    server.stop()


def test_ollama_checks_after_and_retries_with_feedback(local: LocalServer) -> None:
    local.reset(Reply(text=_text(GARBLED)), Reply(text=_text(COPIED)))
    provider = OllamaProvider(local.url, model="qwen3:8b")
    result = StructuredClient(provider, retries=1).generate(Shipment, prompt=PROMPT, source=SOURCE)
    _check_retry(local.bodies("/api/chat"), result)


# --- vLLM: the grounded Lark grammar on the wire, and the parser still checking ---


def test_vllm_sends_the_grounded_lark_that_admits_only_spans(local: LocalServer) -> None:
    local.reset(Reply(text=_text(GARBLED)), Reply(text=_text(COPIED)))
    provider = VLLMProvider(local.url, model="Qwen/Qwen3-8B")
    result = StructuredClient(provider, retries=1).generate(Shipment, prompt=PROMPT, source=SOURCE)
    first, _ = local.bodies("/v1/chat/completions")
    grammar = first["structured_outputs"]["grammar"]
    assert "json" not in first["structured_outputs"]
    # What vLLM's guidance backend (llguidance) makes of that Lark: spans only.
    assert lark_accepts(grammar, json.dumps(COPIED))
    assert not lark_accepts(grammar, json.dumps(INVENTED))
    assert not lark_accepts(grammar, json.dumps(GARBLED))
    # A server that did not constrain (another backend) is still caught by the parser.
    _check_retry(local.bodies("/v1/chat/completions"), result)
    assert result.notes == []


def test_vllm_without_grounding_sends_the_schema(local: LocalServer) -> None:
    local.reset(Reply(text=_text(COPIED)))
    provider = VLLMProvider(local.url, model="m", grounding=False)
    StructuredClient(provider).generate(Shipment, prompt=PROMPT, source=SOURCE)
    [body] = local.bodies("/v1/chat/completions")
    assert "json" in body["structured_outputs"]


def test_vllm_sends_the_schema_with_a_note_where_it_cannot_ground(local: LocalServer) -> None:
    class Labelled(Contract):
        labels: dict[str, Verbatim] = Field(max_length=1)

    local.reset(Reply(text='{"labels": {"a": "ORD-55123"}}'))
    provider = VLLMProvider(local.url, model="m")
    result = StructuredClient(provider).generate(Labelled, prompt=PROMPT, source=SOURCE)
    [body] = local.bodies("/v1/chat/completions")
    assert "json" in body["structured_outputs"]
    [note] = result.notes
    assert note.kind == GROUNDING_NOTE and note.pointer == "/properties/labels"
    assert note.written == "checked after parsing"


# --- the embedded model: constrained while decoding ---


@pytest.fixture(scope="module")
def embedded() -> Iterator[Any]:
    from tests.local_deps import unavailable as _unavailable

    try:
        from sdk.providers.embedded import EmbeddedProvider

        provider = EmbeddedProvider()
    except ImportError as missing:
        _unavailable(str(missing))
    yield provider
    provider.close()


@pytest.mark.local
def test_embedded_grammar_admits_no_invented_or_garbled_value(embedded: Any) -> None:
    plain_ok = embedded.grammar_accepts(Shipment, _text(INVENTED))
    assert plain_ok  # without the source, "UPS" is just a string
    for value, expected in [(COPIED, True), (INVENTED, False), (GARBLED, False)]:
        assert embedded.grammar_accepts(Shipment, _text(value), source=SOURCE) is expected
    # Where no span of the source looks like a tracking number, only null is left.
    tracked = {**COPIED, "tracking_number": "ORD-55123"}
    assert not embedded.grammar_accepts(Shipment, _text(tracked), source=SOURCE)


@pytest.mark.local
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_embedded_sampled_values_are_always_spans(embedded: Any, seed: int) -> None:
    # Sampling (temperature 1) explores what greedy decoding would not; every value copied.
    client = StructuredClient(embedded, retries=0)
    result = client.generate(
        Shipment,
        system="The carrier is UPS.",  # not in the source: a value the model would invent
        prompt=PROMPT,
        source=SOURCE,
        max_tokens=80,
        temperature=1.0,
        seed=seed,
    )
    assert _spans_of(result.value)
    assert result.value.carrier != "UPS"
    assert result.value.tracking_number is None
    assert result.notes == []


@pytest.mark.local
def test_embedded_without_grounding_leaves_the_check_to_the_parser(embedded: Any) -> None:
    assert embedded.grammar_for(Shipment, source=SOURCE) != embedded.grammar_for(Shipment)
    from sdk.providers.embedded import EmbeddedProvider

    plain = EmbeddedProvider(grounding=False)
    assert plain.grammar_for(Shipment, source=SOURCE) == plain.grammar_for(Shipment)
    assert plain.grammar_accepts(Shipment, _text(INVENTED), source=SOURCE)


@pytest.mark.local
def test_embedded_falls_back_with_a_note_where_it_cannot_ground(embedded: Any) -> None:
    class Labelled(Contract):
        labels: dict[str, Verbatim] = Field(max_length=0)  # only {}: the value always passes

    client = StructuredClient(embedded, retries=0)
    result = client.generate(Labelled, prompt=PROMPT, source=SOURCE, max_tokens=20)
    [note] = result.notes
    assert note.kind == GROUNDING_NOTE and "checked after parsing" in str(note)
    request = CompletionRequest(
        JsonDocument(Labelled), (Message("user", PROMPT),), 20, source=SOURCE
    )
    assert embedded.complete(request).notes == (note,)


@pytest.mark.local
def test_embedded_keeps_a_bounded_number_of_grounded_grammars(embedded: Any) -> None:
    for number in range(80):
        embedded.grammar_for(Shipment, source=f"{SOURCE} Parcel {number} of 80.")
    assert len(embedded._loaded()._grammars) <= 64


# --- a real llama-server: constrained while decoding, and the fallback above the bound ---


def test_llamacpp_grounded_gbnf_is_what_llama_cpp_admits() -> None:
    pytest.importorskip("llama_cpp", reason="llama.cpp's grammar engine is the local extra")
    from tests.grammar_support import llama_accepts

    provider = LlamaCppProvider("http://127.0.0.1:9")  # never contacted: the grammar only
    grammar = provider.grammar_for(Shipment, source=SOURCE)
    assert grammar != contract_gbnf(Shipment)
    assert llama_accepts(grammar, _text(COPIED))
    assert not llama_accepts(grammar, _text(INVENTED))
    assert not llama_accepts(grammar, _text(GARBLED))
    assert llama_accepts(contract_gbnf(Shipment), _text(INVENTED))


def test_llamacpp_modes_that_send_no_sdk_grammar_do_not_ground(local: LocalServer) -> None:
    local.reset(Reply(text=_text(COPIED)))
    provider = LlamaCppProvider(local.url, mode="json_schema")
    result = StructuredClient(provider).generate(Shipment, prompt=PROMPT, source=SOURCE)
    [body] = local.bodies("/completion")
    assert "json_schema" in body and "grammar" not in body
    assert result.notes == []


def _recording(bodies: list[dict[str, Any]]) -> httpx.Client:
    def record(request: httpx.Request) -> None:
        if request.url.path == "/completion":
            bodies.append(json.loads(request.read()))

    return httpx.Client(event_hooks={"request": [record]}, timeout=120)


# llama-server samples (temperature 0.8, a random seed): a budget that holds the longest document
# the grammar admits leaves no draw cut (a token is at least one character here: all of it is
# ASCII). Its longest whitespace run is a newline and 16 spaces, between every two JSON tokens.
_RUN = "\n" + " " * 16


def _longest(grammar: str, *tokens: str) -> int:
    """The tokens budget for the longest document the grammar admits: `tokens` with the longest
    whitespace run between every two, checked to be admitted, and end-of-sequence."""
    longest = _RUN.join(tokens)
    assert grammar_accepts(grammar, longest), longest
    return len(longest) + 1


def test_llamacpp_generates_only_spans_on_the_real_server(llama_server: str) -> None:
    bodies: list[dict[str, Any]] = []
    provider = LlamaCppProvider(llama_server, http_client=_recording(bodies))
    budget = _longest(provider.grammar_for(Shipment, source=SOURCE), "{", '"carrier"', ":",
                      json.dumps(SOURCE), ",", '"order_number"', ":", '"ORD-55123"', ",",
                      '"tracking_number"', ":", "null", "}")  # fmt: skip
    result = StructuredClient(provider, retries=0).generate(
        Shipment, system="The carrier is UPS.", prompt=PROMPT, source=SOURCE, max_tokens=budget
    )
    assert _spans_of(result.value) and result.value.carrier != "UPS"
    assert result.value.tracking_number is None
    assert bodies[-1]["grammar"] == provider.grammar_for(Shipment, source=SOURCE)
    assert result.notes == []


def test_llamacpp_above_the_bound_sends_the_plain_grammar_with_a_note(llama_server: str) -> None:
    class Quoted(Contract):
        evidence: SourceQuote = Field(max_length=0)  # only "": the value always passes

    bodies: list[dict[str, Any]] = []
    provider = LlamaCppProvider(llama_server, grounding_limit=50, http_client=_recording(bodies))
    client = StructuredClient(provider, retries=0)
    budget = _longest(contract_gbnf(Quoted), "{", '"evidence"', ":", '""', "}")
    result = client.generate(Quoted, prompt=PROMPT, source=SOURCE, max_tokens=budget)
    assert bodies[-1]["grammar"] == contract_gbnf(Quoted)
    [note] = result.notes
    assert note.kind == GROUNDING_NOTE
    assert f"source of {len(SOURCE)} characters" in str(note.received) and "(50)" in str(
        note.received
    )
    # Streamed, the note comes with the final result too.
    *_, final = client.stream(Quoted, prompt=PROMPT, source=SOURCE, max_tokens=budget)
    assert final.notes == [note]
    # Within the bound, the same call would be grounded.
    within = LlamaCppProvider(llama_server)
    assert within.grammar_for(Quoted, source=SOURCE) != contract_gbnf(Quoted)
    assert provider.grammar_for(Quoted, source=SOURCE) == contract_gbnf(Quoted)


def test_embedded_grounding_takes_true_false_or_values() -> None:
    pytest.importorskip("llama_cpp", reason="the local extra")
    from sdk.providers.embedded import EmbeddedProvider

    with pytest.raises(ValueError, match="grounding"):
        EmbeddedProvider(grounding="maybe")


@pytest.mark.local
def test_embedded_values_grounding_writes_every_value_a_span_can_fill(embedded: Any) -> None:
    class Optional(Contract):
        carrier: Verbatim | None = Field(description="The company that delivers the parcel.")
        tracking_number: Verbatim | None = Field(pattern=r"^[A-Z]{2}[0-9]{9}[A-Z]{2}$")

    message = Message("user", "Which carrier? Nothing is said about it.\n\n" + SOURCE)
    request = CompletionRequest(
        JsonDocument(Optional), (message,), 60, source=SOURCE, options=Sampling(grounding="values")
    )
    value = json.loads(embedded.complete(request).text)
    assert isinstance(value["carrier"], str) and value["carrier"] in SOURCE
    assert value["tracking_number"] is None  # no span of that form: null is all that is left
