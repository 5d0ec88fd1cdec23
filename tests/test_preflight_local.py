"""The preflight's local rows, held against the real engines: llama-server (the `llamacpp`
target: llama.cpp's GBNF sampler on the SDK's grammar) and the embedded model (llguidance).

What each row says is tested as the engine does it, not as the code describes it:

- enforced while decoding: a contract whose constraints a tiny model would never meet by
  chance comes back valid on the first attempt (no retry spent);
- the whitespace the SDK sends: with the model pushed hard towards whitespace (a logit bias on
  the space and newline tokens), no run of whitespace between tokens is longer than the row's
  bound (llama.cpp: a newline and at most 16 spaces; embedded: one space, no newline);
- the converter's refusals: a schema the row says the SDK's converter refuses never reaches the
  server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Annotated
from typing import Any

import httpx
import pytest
from pydantic import Field

from sdk import Contract
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk import WireEnum
from sdk.providers import LlamaCppProvider
from sdk.schema.gbnf import UnsupportedSchema
from sdk.schema.gbnf import contract_gbnf
from sdk.schema.gbnf import to_gbnf
from sdk.schema.preflight import preflight
from tests.grammar_support import grammar_accepts

pytestmark = pytest.mark.local


class Priority(WireEnum):
    """How urgent."""

    LOW = "low"
    URGENT = "urgent"


class Ticket(Contract):
    """A ticket, every field constrained so that a guess rarely fits."""

    code: str = Field(pattern=r"^TK-[0-9]{4}$")
    priority: Priority
    seats: int = Field(ge=3, le=7)
    summary: str = Field(min_length=5, max_length=40)
    tags: list[Annotated[str, Field(max_length=20)]] = Field(min_length=1, max_length=3)


def _longest_ticket() -> str:
    """The longest `Ticket` the llamacpp row's grammar admits: a newline and 16 spaces between
    every two JSON tokens, every string at its maximum length, each of its characters a
    surrogate pair written as two `\\u` escapes (twelve characters for one)."""
    pair = "\\ud83d\\ude00"
    summary, tag = f'"{pair * 40}"', f'"{pair * 20}"'
    tokens = ["{", '"code"', ":", '"TK-1234"', ",", '"priority"', ":", '"urgent"', ",",
              '"seats"', ":", "7", ",", '"summary"', ":", summary, ",", '"tags"', ":",
              "[", tag, ",", tag, ",", tag, "]", "}"]  # fmt: skip
    return ("\n" + " " * 16).join(tokens)


# The whitespace tests' draw (still sampled, at the server's temperature): the bound holds for any
# draw, but that the bias pushed some whitespace in at all is only overwhelmingly likely, so the
# draw is one that is known to.
SEED = 7

_BETWEEN_TOKENS = re.compile(r"(?<=[{\[,:])\s+|\s+(?=[}\],:])")


def _whitespace_runs(text: str) -> list[str]:
    """The runs of whitespace between JSON tokens (strings' contents left out, a string the
    reply was cut inside of included: its spaces are a value's, not the grammar's)."""
    outside = re.sub(r'"(?:[^"\\]|\\.)*(?:"|$)', '""', text)
    return _BETWEEN_TOKENS.findall(outside)


# --- llamacpp: the SDK's GBNF on llama.cpp's sampler ------------------------------------------


def test_the_llamacpp_row_s_constraints_hold_on_the_first_attempt(llama_server: str) -> None:
    report = preflight(Ticket, "llamacpp")
    assert {"pattern", "enum", "minimum", "maximum", "minLength", "maxLength", "minItems",
            "maxItems"} <= {item.keyword for item in report.enforced}  # fmt: skip
    assert report.stripped == [] and report.weakened == []
    # The server samples (temperature 0.8, a random seed), so the budget holds the longest
    # document the grammar admits, whatever is drawn: a token is at least one byte, outside
    # strings the grammar admits ASCII only, and a character in a string is at most four bytes
    # raw or twelve escaped, so no admitted document takes more tokens than this one has
    # characters (and one for end-of-sequence). A cut would be the budget's doing, not the
    # grammar's.
    longest = _longest_ticket()
    assert grammar_accepts(contract_gbnf(Ticket), longest)
    with StructuredClient(LlamaCppProvider(llama_server), retries=0) as client:
        result = client.generate(Ticket, prompt="File a ticket for the broken projector.",
                                 max_tokens=len(longest) + 1)  # fmt: skip
    assert len(result.attempts) == 1  # valid as decoded: nothing was left to a retry
    assert re.fullmatch(r"TK-[0-9]{4}", result.value.code)
    assert 3 <= result.value.seats <= 7


def _token_ids(url: str, *texts: str) -> list[int]:
    ids = []
    for text in texts:
        reply = httpx.post(f"{url}/tokenize", json={"content": text}, timeout=30)
        ids.extend(reply.json()["tokens"])
    return ids


def test_the_llamacpp_row_s_whitespace_bound_holds_against_a_model_pushed_to_whitespace(
    llama_server: str,
) -> None:
    report = preflight(Ticket, "llamacpp")
    assert "at most 16 spaces" in report.target.whitespace
    pushed = [[token, 15.0] for token in _token_ids(llama_server, " ", "\n", "  ", "\n\n")]
    provider = LlamaCppProvider(llama_server)
    with StructuredClient(provider, retries=0) as client:
        try:
            text = client.generate(Ticket, prompt="File a ticket.", max_tokens=300, seed=SEED,
                                   extra_body={"logit_bias": pushed}).text  # fmt: skip
        except TruncatedOutput as cut:  # the bias may keep it writing: the prefix is judged
            assert cut.text is not None
            text = cut.text
    runs = _whitespace_runs(text)
    assert runs, "the bias did not push any whitespace: the test proves nothing"
    assert max(len(run) for run in runs) <= 17  # a newline and at most 16 spaces
    assert all(run.count("\n") <= 1 for run in runs)


def test_the_llamacpp_json_schema_row_s_whitespace_bound_is_llama_cpp_s_own(
    llama_server: str,
) -> None:
    report = preflight(Ticket, "llamacpp-json-schema")
    assert "at most 20 spaces" in report.target.whitespace
    pushed = [[token, 15.0] for token in _token_ids(llama_server, " ", "\n", "  ", "\n\n")]
    provider = LlamaCppProvider(llama_server, mode="json_schema")
    with StructuredClient(provider, retries=0) as client:
        try:
            text = client.generate(Ticket, prompt="File a ticket.", max_tokens=300, seed=SEED,
                                   extra_body={"logit_bias": pushed}).text  # fmt: skip
        except TruncatedOutput as cut:
            assert cut.text is not None
            text = cut.text
    runs = _whitespace_runs(text)
    assert runs, "the bias did not push any whitespace: the test proves nothing"
    assert max(len(run) for run in runs) <= 22  # one or two newlines and at most 20 spaces
    assert all(run.count("\n") <= 2 for run in runs)


def test_what_the_llamacpp_row_says_the_converter_refuses_never_reaches_the_server(
    llama_server: str,
) -> None:
    schema: dict[str, Any] = {
        "title": "Odd",
        "type": "object",
        "properties": {"n": {"type": "integer", "not": {"const": 3}}},
        "required": ["n"],
        "additionalProperties": False,
    }
    report = preflight(schema, "llamacpp")
    refused = {(item.pointer, item.keyword) for item in report.refused_by_converter}
    with pytest.raises(UnsupportedSchema) as raised:
        to_gbnf(schema)
    assert refused == {(p.pointer, p.keyword) for p in raised.value.problems}
    assert refused  # the row's statement is about something


# --- embedded: the canonical schema compiled by llguidance in this process --------------------


@pytest.fixture(scope="module")
def embedded_provider(embedded_model: None) -> Iterator[Any]:
    from sdk.providers.embedded import EmbeddedProvider

    provider = EmbeddedProvider()
    yield provider
    provider.close()


def test_the_embedded_row_s_constraints_and_whitespace_hold(embedded_provider: Any) -> None:
    report = preflight(Ticket, "embedded")
    assert report.stripped == [] and report.weakened == []
    assert "at most one space" in report.target.whitespace
    with StructuredClient(embedded_provider, retries=0) as client:
        # As above: the budget holds the longest document (here the grammar admits one space
        # where llama.cpp's admits 17 characters, so it is shorter).
        result = client.generate(Ticket, prompt="File a ticket for the broken projector.",
                                 max_tokens=len(_longest_ticket()) + 1)  # fmt: skip
    assert len(result.attempts) == 1
    assert re.fullmatch(r"TK-[0-9]{4}", result.value.code)
    runs = _whitespace_runs(result.text)
    assert all(run == " " for run in runs), runs  # one space at most, never a newline
    json.loads(result.text)
