"""`LlamaCppProvider` against a real llama-server running SmolLM2-135M (the `llama_server` fixture,
tests/conftest.py): every mode (native `json_schema`, native GBNF `grammar`, the OpenAI-compatible
route), sync and async, plain and streamed; token-limit and context-window cuts; a grammar the
server rejects; and the property order llama.cpp's own schema converter would change.

The model is tiny: what it writes is valid but silly. So these tests assert on form (the value
passed every check of the parser), stop reasons, usage and errors, never on what the model said.
Generations are kept short: `Triage` has only bounded fields (an enum, a boolean, a string of at
most 40 characters), so every grammar forces the document to end within a few dozen tokens, and
decoding is greedy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import Field

from contracts import Decision
from contracts import InvoiceExtraction
from contracts import ReviewFinding
from contracts import Sentiment
from sdk import AsyncStructuredClient
from sdk import Contract
from sdk import Partial
from sdk import ProviderError
from sdk import Result
from sdk import StopReason
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk import WireEnum
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import LlamaCppProvider
from sdk.providers import Message
from sdk.providers import Sampling
from sdk.providers.llamacpp import Mode
from sdk.providers.llamacpp import build_completion_request
from sdk.schema import LLAMACPP
from sdk.schema import to_wire
from sdk.schema.gbnf import contract_gbnf
from tests.grammar_support import grammar_accepts
from tests.llama_server import MODEL_FILE
from tests.llama_server import LlamaServer
from tests.llama_server import bundled_model
from tests.llama_server import server_binary
from tests.wire_support import Sleeps

pytestmark = pytest.mark.local

MODES: list[Mode] = ["json_schema", "grammar", "openai"]
CLEAN_STOP = {"json_schema": "eos", "grammar": "eos", "openai": "stop"}
LIMIT_STOP = {"json_schema": "limit", "grammar": "limit", "openai": "length"}

PROMPT = "The build server has been down since noon and releases are blocked. Triage it."
MAX_TOKENS = 128  # Triage ends within about 40 tokens; llama.cpp's own whitespace adds a few
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 7}


class Verdict(WireEnum):
    """The triage outcome."""

    FIX_NOW = "fix_now"
    LATER = "later"
    UNSURE = "unsure"


class Triage(Contract):
    """Every field bounded, so that any document the grammar allows ends quickly."""

    reasoning: str = Field(max_length=40)
    answer: Verdict
    urgent: bool


class Ordered(Contract):
    """An optional reasoning-like field declared before the required answer."""

    notes: str = Field(default="", max_length=30)
    answer: Verdict


def provider(url: str, mode: Mode, **options: Any) -> LlamaCppProvider:
    return LlamaCppProvider(url, mode=mode, **options)


def client(url: str, mode: Mode, **options: Any) -> StructuredClient:
    # retries=0: a grammar guarantees the form, so the first attempt must already be valid.
    return StructuredClient(provider(url, mode), retries=0, sleep=Sleeps(), **options)


def assert_valid_triage(result: Result[Triage], mode: Mode) -> None:
    assert isinstance(result.value, Triage)
    assert json.loads(result.text) == result.value.model_dump(mode="json")
    assert result.stop_reason is StopReason.END_TURN
    assert result.raw_stop_reason == CLEAN_STOP[mode]
    assert [attempt.error for attempt in result.attempts] == [None]
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.provider == "llamacpp"
    assert result.model is not None and Path(result.model).name == MODEL_FILE


# --- every mode, sync and async ---


@pytest.mark.parametrize("mode", MODES)
def test_generate_in_every_mode(llama_server: str, mode: Mode) -> None:
    with client(llama_server, mode) as structured:
        result = structured.generate(Triage, prompt=PROMPT, max_tokens=MAX_TOKENS, **GREEDY)
    assert_valid_triage(result, mode)


@pytest.mark.parametrize("mode", MODES)
async def test_agenerate_in_every_mode(llama_server: str, mode: Mode) -> None:
    async with AsyncStructuredClient(provider(llama_server, mode), retries=0) as structured:
        result = await structured.generate(
            Triage, prompt=PROMPT, system="You triage incidents.", max_tokens=MAX_TOKENS, **GREEDY
        )
    assert_valid_triage(result, mode)


def test_grammar_mode_output_is_inside_the_converters_grammar(llama_server: str) -> None:
    result = client(llama_server, "grammar").generate(
        Triage, prompt=PROMPT, max_tokens=MAX_TOKENS, **GREEDY
    )
    # An independent recognizer (llguidance) agrees the server applied our grammar.
    assert grammar_accepts(contract_gbnf(Triage), result.text), result.text


# --- streaming ---


def assert_streamed(items: list[Partial[Triage] | Result[Triage]], mode: Mode) -> None:
    *snapshots, final = items
    assert isinstance(final, Result)
    assert_valid_triage(final, mode)
    partials = [item for item in snapshots if isinstance(item, Partial)]
    assert partials and len(partials) == len(snapshots)
    lengths = [partial.text_length for partial in partials]
    assert lengths == sorted(lengths) and lengths[-1] <= len(final.text)
    assert not partials[0].done  # snapshots came while the document was still open
    assert partials[-1].done and partials[-1].value == json.loads(final.text)


@pytest.mark.parametrize("mode", MODES)
def test_stream_yields_snapshots_then_the_result(llama_server: str, mode: Mode) -> None:
    stream = client(llama_server, mode).stream(
        Triage, prompt=PROMPT, max_tokens=MAX_TOKENS, **GREEDY
    )
    assert_streamed(list(stream), mode)


@pytest.mark.parametrize("mode", MODES)
async def test_astream_yields_snapshots_then_the_result(llama_server: str, mode: Mode) -> None:
    async with AsyncStructuredClient(provider(llama_server, mode), retries=0) as structured:
        items = [
            item
            async for item in structured.stream(
                Triage, prompt=PROMPT, max_tokens=MAX_TOKENS, **GREEDY
            )
        ]
    assert_streamed(items, mode)


# --- cut documents ---


@pytest.mark.parametrize("mode", MODES)
def test_a_small_token_limit_ends_in_truncated_output(llama_server: str, mode: Mode) -> None:
    # No Decision fits in 8 tokens: the limit must cut it, and the parser must say so before
    # it looks at the JSON.
    with pytest.raises(TruncatedOutput) as info:
        client(llama_server, mode).generate(Decision, prompt=PROMPT, max_tokens=8, **GREEDY)
    error = info.value
    assert error.stop_reason is StopReason.MAX_TOKENS
    assert error.raw_stop_reason == LIMIT_STOP[mode]
    assert_cut_text(error.text, mode)


def assert_cut_text(text: str | None, mode: Mode) -> None:
    assert text is not None
    if mode != "openai":
        assert text.lstrip().startswith("{"), text
    # The OpenAI route's grammar lets the model open with a ```json fence (greedy SmolLM2
    # does), which the server strips from a finished reply and from stream deltas, but not
    # from a cut reply: there the text is the raw prefix, fence included.


@pytest.mark.parametrize("mode", MODES)
def test_a_streamed_cut_ends_in_truncated_output(llama_server: str, mode: Mode) -> None:
    seen: list[object] = []
    with pytest.raises(TruncatedOutput) as info:
        for item in client(llama_server, mode).stream(
            Decision, prompt=PROMPT, max_tokens=8, **GREEDY
        ):
            seen.append(item)
    assert all(isinstance(item, Partial) for item in seen)  # no Result, no JSON error first
    assert info.value.stop_reason is StopReason.MAX_TOKENS
    assert info.value.raw_stop_reason == LIMIT_STOP[mode]
    assert_cut_text(info.value.text, mode)
    # The last snapshot seen rides on the error (none if the cut came before any JSON).
    assert info.value.partial is (seen[-1] if seen else None)


@pytest.fixture(scope="module")
def small_context_server(
    llama_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A second server with a 256-token context, to fill it cheaply (`llama_server` first, so
    that a missing llama-server skips or fails here as everywhere)."""
    log = tmp_path_factory.mktemp("llama-server-small") / "llama-server.log"
    with LlamaServer(server_binary(), bundled_model(), log_path=log, context=256) as server:
        yield server.url


def test_a_full_context_window_is_context_window_not_max_tokens(small_context_server: str) -> None:
    url = small_context_server
    # A prompt of 250 tokens leaves at most 6 of the 256-token context: the context, not
    # max_tokens, ends the generation, and llama.cpp says `stop_type: limit` with `truncated:
    # true`. The shortest Decision takes 14 tokens (`{"`, `reason`, `ing`, `":"`, `","`, ...):
    # with 16 left, as before, a draw with an empty reasoning could end the document inside the
    # context, so the room left is well under it, and the decoding greedy besides.
    filler = " word" * 250  # one token each in SmolLM2's vocabulary
    assert len(httpx.post(f"{url}/tokenize", json={"content": filler}).json()["tokens"]) == 250
    full = LlamaCppProvider(url, prompt_template=lambda request: filler)
    with pytest.raises(TruncatedOutput) as info:
        StructuredClient(full, retries=0).generate(Decision, prompt="x", max_tokens=200, **GREEDY)
    assert info.value.stop_reason is StopReason.CONTEXT_WINDOW
    assert info.value.raw_stop_reason == "limit"


# --- errors ---

BROKEN_GRAMMAR = 'root ::= "{" [a-'


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_a_grammar_the_server_rejects_is_a_provider_error(llama_server: str, stream: bool) -> None:
    sleeps = Sleeps()
    structured = StructuredClient(
        provider(llama_server, "grammar", grammar=BROKEN_GRAMMAR), sleep=sleeps
    )
    with pytest.raises(ProviderError) as info:
        if stream:
            list(structured.stream(Triage, prompt=PROMPT, max_tokens=MAX_TOKENS))
        else:
            structured.generate(Triage, prompt=PROMPT, max_tokens=MAX_TOKENS)
    error = info.value
    assert error.status_code == 400
    assert str(error).startswith("llamacpp: server returned an error, HTTP 400")
    assert "failed to parse grammar" in str(error)
    assert sleeps.waits == []  # a bad request is not retried


async def test_an_async_rejected_grammar_is_a_provider_error(llama_server: str) -> None:
    rejected = provider(llama_server, "grammar", grammar=BROKEN_GRAMMAR)
    async with AsyncStructuredClient(rejected) as structured:
        with pytest.raises(ProviderError) as info:
            await structured.generate(Triage, prompt=PROMPT, max_tokens=MAX_TOKENS)
    assert info.value.status_code == 400 and "failed to parse grammar" in str(info.value)


# --- property order ---


def server_grammar(url: str, schema: dict[str, Any]) -> str:
    """The GBNF llama.cpp builds from a `json_schema` (reported in `generation_settings`)."""
    request = CompletionRequest(JsonDocument(Ordered), (Message("user", "x"),), 1)
    body = build_completion_request(request, "x", schema=schema)
    reply = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    grammar: str = reply.json()["generation_settings"]["grammar"]
    return grammar


def rule(grammar: str, name: str) -> str:
    """The right-hand side of one rule of a GBNF grammar."""
    match = re.search(rf"^{re.escape(name)} ::= (.*)$", grammar, re.MULTILINE)
    assert match is not None, grammar
    return match.group(1)


def test_llama_cpp_moves_required_first_and_our_dialect_keeps_the_declared_order(
    llama_server: str,
) -> None:
    # llama.cpp's own converter, given the canonical schema (notes optional): answer first.
    canonical = rule(server_grammar(llama_server, Ordered.json_schema()), "root")
    assert canonical.index("answer-kv") < canonical.index("notes-kv"), canonical
    # Our llama.cpp dialect (every property required, the optional one nullable): declared order.
    ours = rule(server_grammar(llama_server, to_wire(Ordered, LLAMACPP).schema), "root")
    assert ours.index("notes-kv") < ours.index("answer-kv"), ours


@pytest.mark.parametrize("mode", MODES)
def test_generated_documents_keep_the_declared_order(llama_server: str, mode: Mode) -> None:
    request = CompletionRequest(
        JsonDocument(Ordered),
        (Message("user", "Is it raining? Write a short note, then answer."),),
        MAX_TOKENS,
        options=Sampling.of(GREEDY),
    )
    completion = provider(llama_server, mode).complete(request)
    assert completion.stop_reason is StopReason.END_TURN, completion
    assert completion.text is not None
    keys = list(json.loads(completion.text))
    if mode == "grammar":
        # Our grammar: the optional field keeps its place and may be left out.
        assert keys in (["notes", "answer"], ["answer"]), completion.text
    else:
        # The dialect makes it required (null standing for "absent"): always there, first.
        assert keys == ["notes", "answer"], completion.text
    # And the client turns the wire form back into the contract (a null note is the default).
    result = StructuredClient(provider(llama_server, mode), retries=0).generate(
        Ordered,
        prompt="Is it raining? Write a short note, then answer.",
        max_tokens=MAX_TOKENS,
        **GREEDY,
    )
    assert isinstance(result.value, Ordered)


@pytest.mark.parametrize(
    "contract", [Decision, ReviewFinding, InvoiceExtraction, Sentiment], ids=lambda c: c.__name__
)
def test_the_server_converts_every_reference_contract_in_our_dialect(
    llama_server: str, contract: type[Contract]
) -> None:
    # A schema llama.cpp cannot convert is a 400; one it half-converts loses keywords silently.
    # Every property must reach the grammar, in declared order.
    grammar = server_grammar(llama_server, to_wire(contract, LLAMACPP).schema)
    root = rule(grammar, "root")
    names = list(contract.json_schema()["properties"])
    positions = [root.find(f"{name.replace('_', '-')}-kv") for name in names]
    assert -1 not in positions and positions == sorted(positions), root


class Ticket(Contract):
    """A pattern with the classes llama.cpp's converter drops silently."""

    code: str = Field(pattern=r"^\d{3}-\w+$")


def test_a_pattern_with_backslash_classes_survives_our_dialect(llama_server: str) -> None:
    # Given `\d` and `\w`, llama.cpp's converter keeps a plain string (status 200, no error).
    canonical = server_grammar(llama_server, Ticket.json_schema())
    assert rule(canonical, "code") == "string", canonical
    # The dialect writes them as explicit classes, which the converter turns into a pattern.
    ours = server_grammar(llama_server, to_wire(Ticket, LLAMACPP).schema)
    code = rule(ours, "code")  # '"\\"" (code-1{3,3} "-" [A-Za-z0-9_]+) "\\""', code-1 is [0-9]
    assert "{3,3}" in code and '"-"' in code and "[A-Za-z0-9_]+" in code, ours
