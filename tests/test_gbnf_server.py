"""llama-server parses every grammar the converter emits, and generates within it.

Needs a running llama-server: the `llama_server` fixture (tests/conftest.py) yields its base URL.
Two independent engines meet here: llama.cpp's own grammar parser and sampler produce the text,
llguidance (`tests.grammar_support`) judges it.

llama.cpp's known silent failure is to generate unconstrained text with status 200 when it
cannot use a grammar; so besides the status, every test checks that what came back is inside
the grammar.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import Field

from contracts import Decision
from contracts import InvoiceExtraction
from contracts import ReviewFinding
from contracts import Sentiment
from sdk import Contract
from sdk import WireEnum
from sdk.schema.gbnf import Whitespace
from sdk.schema.gbnf import contract_gbnf
from sdk.schema.gbnf import to_gbnf
from tests.grammar_support import grammar_accepts
from tests.grammar_support import grammar_accepts_prefix

pytestmark = pytest.mark.local

REFERENCE: list[type[Contract]] = [Decision, ReviewFinding, InvoiceExtraction, Sentiment]


class Mood(WireEnum):
    """A small enum."""

    CALM = "calm"
    TENSE = "tense"


class Finite(Contract):
    """Every field bounded, so that a generation must end (in `eos`) within its token budget."""

    mood: Mood
    intensity: float = Field(ge=0, le=1)
    count: int = Field(ge=0, le=10)
    label: str = Field(max_length=12)
    day: str = Field(json_schema_extra={"format": "date"})
    ok: bool | None


# One schema per construct the converter writes, so that each reaches llama.cpp's parser.
KITCHEN_SINK: dict[str, Any] = {
    "type": "object",
    "properties": {
        "note": {"type": ["string", "null"]},
        "code": {"type": "string", "pattern": r"^[A-Z]{2}\d{2,4}(?:-\w+)?\s?$"},
        "free": {"type": "string", "pattern": r"[^\d\s]+x"},
        "any": {"type": "string", "pattern": r"^.{0,5}$"},
        "when": {"type": "string", "format": "date-time"},
        "time": {"type": "string", "format": "time"},
        "id": {"type": "string", "format": "uuid"},
        "big": {"type": "integer", "minimum": -1234, "exclusiveMaximum": 98765},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "neg": {"type": "number", "minimum": -3, "exclusiveMaximum": -1},
        "raw": {"type": "number"},
        "long": {"type": "string", "minLength": 1, "maxLength": 2500},
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "items": False,
            "minItems": 1,
        },
        "tags": {"type": "array", "items": {"const": "t"}, "maxItems": 3},
        "map": {"type": "object", "additionalProperties": {"type": "boolean"}, "maxProperties": 2},
        "tree": {"$ref": "#/$defs/Tree"},
        "mixed": {"enum": ['a"b', 1, None, [True]]},
        "whatever": {},
    },
    "required": ["code", "big"],
    "additionalProperties": False,
    "$defs": {
        "Tree": {
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}},
            "additionalProperties": False,
        }
    },
}

WHITESPACE: tuple[Whitespace, ...] = ("bounded", "compact")
GRAMMARS: dict[str, Callable[[], str]] = {
    **{
        f"{contract.__name__}-{ws}": functools.partial(contract_gbnf, contract, whitespace=ws)
        for contract in REFERENCE
        for ws in WHITESPACE
    },
    "Finite": functools.partial(contract_gbnf, Finite),
    "kitchen-sink": functools.partial(to_gbnf, KITCHEN_SINK),
    "kitchen-sink-compact": functools.partial(to_gbnf, KITCHEN_SINK, whitespace="compact"),
}


def complete(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST /completion; the status must be 200."""
    response = httpx.post(f"{base_url}/completion", json=body, timeout=180)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def prompt_for(what: str) -> str:
    return (
        "<|im_start|>system\nYou answer with one JSON document.<|im_end|>\n"
        f"<|im_start|>user\n{what}<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_llama_server_takes_every_grammar_and_applies_it(llama_server: str, name: str) -> None:
    grammar = GRAMMARS[name]()
    reply = complete(
        llama_server,
        {
            "prompt": prompt_for("Write a short greeting."),
            "grammar": grammar,
            "n_predict": 6,
            "seed": 1,
            "temperature": 1.0,
            "cache_prompt": False,
        },
    )
    # A grammar the server could not use would leave the text unconstrained: prose, not JSON.
    assert grammar_accepts_prefix(grammar, reply["content"]), reply["content"]


@pytest.mark.parametrize("contract", REFERENCE, ids=lambda c: c.__name__)
@pytest.mark.parametrize("whitespace", ["bounded", "compact"])
def test_generation_is_accepted_by_the_grammar(
    llama_server: str, contract: type[Contract], whitespace: Whitespace
) -> None:
    grammar = contract_gbnf(contract, whitespace=whitespace)
    reply = complete(
        llama_server,
        {
            "prompt": prompt_for(f"Fill in a {contract.__name__} for: 'Refund of 12 EUR, ok?'"),
            "grammar": grammar,
            "n_predict": 64,
            "seed": 7,
            "temperature": 0.7,
            "cache_prompt": False,
        },
    )
    text = reply["content"]
    if reply["stop_type"] == "limit":  # cut by n_predict: a prefix of a sentence
        assert grammar_accepts_prefix(grammar, text), text
    else:
        assert reply["stop_type"] == "eos", reply
        assert grammar_accepts(grammar, text), text
        jsonschema.validate(json.loads(text), contract.json_schema())


@pytest.mark.parametrize("seed", [1, 2])
def test_bounded_generation_ends_inside_the_grammar(llama_server: str, seed: int) -> None:
    grammar = contract_gbnf(Finite, whitespace="compact")
    reply = complete(
        llama_server,
        {
            "prompt": prompt_for("Describe the mood of a rainy Monday as JSON."),
            "grammar": grammar,
            "n_predict": 256,
            "seed": seed,
            "temperature": 1.0,
            "cache_prompt": False,
        },
    )
    text = reply["content"]
    # Every string and number is bounded, so the grammar completes well inside 256 tokens and
    # then allows only end-of-sequence.
    assert reply["stop_type"] == "eos", reply
    assert grammar_accepts(grammar, text), text
    value = Finite.model_validate_json(text)
    assert 0 <= value.intensity <= 1
    assert len(value.label) <= 12
