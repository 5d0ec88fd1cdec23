"""Preflight per target: the docs' table is the code's, what each target strips is re-checked,
and a promise a target would weaken silently is refused before sending, on every target that
would weaken it (through the official clients on a mock transport)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from typer.testing import CliRunner

from contracts import Decision
from contracts import InvoiceExtraction
from sdk import Contract
from sdk import StructuredClient
from sdk import UnsupportedRequest
from sdk.cli import app
from sdk.providers import AnthropicProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.schema.preflight import TARGETS
from sdk.schema.preflight import preflight
from sdk.schema.preflight import preflight_table
from sdk.schema.preflight import target_named
from tests.schema_support import make_package
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import chat_reply
from tests.wire_support import openai_client
from tests.wire_support import responses_reply

ORDERS = """
from sdk import Contract


class Order(Contract):
    \"\"\"An order.\"\"\"

    products: list[str]
"""
DOCS = Path(__file__).resolve().parent.parent / "docs" / "guides" / "preflight.md"
runner = CliRunner()


class Inventory(Contract):
    """Stock per product."""

    counts: dict[str, int]


class Products(Contract):
    """What the customer bought."""

    products: list[str]
    note: str = Field(max_length=200)


def test_the_docs_table_is_generated_from_the_code() -> None:
    page = DOCS.read_text()
    block = re.search(
        r"<!-- preflight-table:start -->\n\n(.*?)\n<!-- preflight-table:end -->", page, re.S
    )
    assert block is not None
    assert block.group(1) == preflight_table(), "run: sdk schema targets --write " + str(DOCS)


def test_the_table_has_a_row_per_target_and_says_what_each_one_cannot_promise() -> None:
    table = preflight_table()
    for name in ("anthropic", "openai-responses", "openai-chat", "gemini", "llamacpp",
                 "vllm-xgrammar", "vllm-guidance", "ollama", "embedded"):  # fmt: skip
        assert f"| `{name}` |" in table
    assert "`allOf` ignored by xgrammar" in table
    assert table.count("only `{}` can be generated") == 3


def test_the_cli_prints_and_checks_the_table(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "targets"])
    assert result.exit_code == 0
    assert "| `vllm-guidance` |" in result.stdout
    stale = tmp_path / "page.md"
    stale.write_text("<!-- preflight-table:start -->\nold\n<!-- preflight-table:end -->\n")
    assert runner.invoke(app, ["schema", "targets", "--check", str(stale)]).exit_code == 1
    assert runner.invoke(app, ["schema", "targets", "--write", str(stale)]).exit_code == 0
    assert runner.invoke(app, ["schema", "targets", "--check", str(stale)]).exit_code == 0


@pytest.mark.parametrize("name", list(TARGETS))
def test_everything_a_target_strips_is_rechecked_after_parsing(name: str) -> None:
    report = preflight(InvoiceExtraction, name)
    assert [(i.pointer, i.keyword) for i in report.stripped] == [
        (i.pointer, i.keyword) for i in report.rechecked
    ]
    assert report.weakened == []
    assert any("max_tokens" in line for line in report.unpromised)


def test_a_target_s_removals_are_the_dialect_s() -> None:
    anthropic = preflight(InvoiceExtraction, "anthropic")
    assert {i.keyword for i in anthropic.stripped} == {"minimum", "pattern", "minLength",
                                                       "maxLength"}  # fmt: skip
    llamacpp = preflight(InvoiceExtraction, "llamacpp")
    assert llamacpp.stripped == []
    assert {"pattern", "minLength", "maxLength", "minimum"} <= {
        i.keyword for i in llamacpp.enforced
    }


def test_xgrammar_ignores_all_of_and_the_parser_rechecks_it() -> None:
    schema: dict[str, Any] = {
        "title": "Bounded",
        "type": "object",
        "properties": {"n": {"allOf": [{"type": "integer"}, {"minimum": 3}]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    xgrammar = preflight(schema, "vllm-xgrammar")
    assert [(i.pointer, i.keyword) for i in xgrammar.stripped] == [("/properties/n", "allOf")]
    assert "ignored by xgrammar" in xgrammar.stripped[0].why
    guidance = preflight(schema, "vllm-guidance")
    assert "allOf" in {i.keyword for i in guidance.enforced}


def test_the_gbnf_target_says_an_overlapping_one_of_is_exclusive_after_parsing_only() -> None:
    schema: dict[str, Any] = {
        "title": "Either",
        "type": "object",
        "properties": {  # JSONSchemaBench's case: open objects, so {"a": "x"} matches both
            "v": {"oneOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}},
            ]}
        },
        "required": ["v"],
        "additionalProperties": False,
    }  # fmt: skip
    report = preflight(schema, "llamacpp")
    assert report.refused_by_converter == []  # written, narrowed where the grammar can
    [item] = report.stripped
    assert (item.pointer, item.keyword) == ("/properties/v", "oneOf")
    assert "exclusivity is checked after parsing" in item.why
    disjoint = dict(schema, properties={"v": {"oneOf": [{"type": "integer"}, {"type": "string"}]}})
    assert preflight(disjoint, "llamacpp").stripped == []
    # Overlapping branches the converter cannot narrow: refused, said once, as the refusal.
    bounds = [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 9}]
    numbers = dict(schema, properties={"v": {"oneOf": bounds}})
    refused = preflight(numbers, "llamacpp")
    assert refused.stripped == []
    assert [(i.pointer, i.keyword) for i in refused.refused_by_converter] == [
        ("/properties/v/oneOf", "oneOf")
    ]
    assert "the SDK's grammar converter refuses" in "\n".join(refused.lines())


def test_targets_are_named_by_provider_too() -> None:
    assert target_named("openai").name == "openai-responses"
    assert target_named("llama.cpp").name == "llamacpp"
    assert target_named("vllm").name == "vllm-xgrammar"
    with pytest.raises(ValueError, match="targets: anthropic"):
        target_named("nowhere")


def test_the_linter_names_what_invites_a_runaway_on_a_local_target(tmp_path: Path) -> None:
    package = make_package(tmp_path, {"orders.py": ORDERS})
    result = runner.invoke(app, ["schema", "lint", package, "--target", "embedded"])
    assert result.exit_code == 1
    assert "Order on embedded" in result.stdout
    assert "unbounded: /properties/products: maxItems" in result.stdout
    assert "Order /properties/products: unbounded-output" in result.stdout
    assert "Field(max_length=N)" in result.stdout
    hosted = runner.invoke(app, ["schema", "lint", package, "--target", "anthropic"])
    assert "unbounded-output" not in hosted.stdout
    clean = runner.invoke(app, ["schema", "lint", "contracts", "--target", "embedded"])
    assert clean.exit_code == 0, clean.stdout  # the reference contracts say why, where needed


def test_the_linter_names_an_unbounded_string_on_a_local_target_too() -> None:
    """Issue 33 item 4: "an unbounded list or string on a local target, with the bound to
    add". A copied value (`Verbatim`) is bounded by the source where the target grounds it."""
    from sdk import Verbatim
    from sdk.workflow.lint import lint

    class Ticket(Contract):
        """A support ticket's summary."""

        summary: str
        tag: str = Field(max_length=40)
        customer: Verbatim

    def unbounded_at(target: str) -> list[str]:
        found = lint(Ticket, target=target).findings
        return [f.pointer for f in found if f.code.value == "unbounded-output"]

    for target in ("embedded", "llamacpp", "vllm-xgrammar"):
        [finding] = [f for f in lint(Ticket, target=target).findings
                     if f.pointer == "/properties/summary"]  # fmt: skip
        assert finding.code.value == "unbounded-output"
        assert "a string with no upper bound (maxLength)" in finding.message
        assert "Field(max_length=N)" in finding.fix
        assert "/properties/tag" not in unbounded_at(target)
    assert "/properties/customer" not in unbounded_at("embedded")  # grounded: the source's span
    assert "/properties/customer" in unbounded_at("ollama")  # not grounded while decoding
    assert unbounded_at("anthropic") == []  # hosted: not the caller's tokens to stop


def test_the_linter_names_an_unbounded_map_on_a_local_target() -> None:
    """A map (`dict[str, X]`) is a collection a small model can grow until `max_tokens`, like a
    list; `Field(max_length=N)` gives it `maxProperties`, which the SDK's grammar enforces."""
    from sdk.workflow.lint import lint

    class Stock(Contract):
        """Stock per product."""

        counts: dict[str, int]
        capped: dict[str, int] = Field(max_length=20)

    assert [(i.pointer, i.keyword) for i in preflight(Stock, "llamacpp").unbounded] == [
        ("/properties/counts", "maxProperties")
    ]
    found = {f.pointer: f for f in lint(Stock, target="llamacpp").findings
             if f.code.value == "unbounded-output"}  # fmt: skip
    assert "a map with no upper bound (maxProperties)" in found["/properties/counts"].message
    assert "Field(max_length=N)" in found["/properties/counts"].fix
    assert "/properties/capped" not in found
    from sdk.schema.canonical import canonical_schema
    from sdk.schema.gbnf import to_gbnf

    grammar = str(to_gbnf(canonical_schema(Stock)))
    assert "root-capped ::= " in grammar and "{0,19}" in grammar  # the bound the grammar keeps


def test_a_pattern_bounds_a_string_only_when_the_longest_match_is_bounded() -> None:
    """A pattern is a length bound where every branch is anchored at both ends and repeats
    nothing without end (`^[A-Z]{3}$`); `^[A-Z]+$`, or an unanchored `[A-Z]{3}` (JSON Schema
    patterns search: the grammar lets any text around it), leaves the string unbounded. On
    main every pattern counted as a bound."""

    class Codes(Contract):
        """Codes."""

        fixed: str = Field(pattern=r"^[A-Z]{3}$")
        either: str = Field(pattern=r"^(?:[A-Z]{3}|[0-9]{2,4})$")
        open_ended: str = Field(pattern=r"^[A-Z]+$")
        searching: str = Field(pattern=r"[A-Z]{3}")
        one_open_branch: str = Field(pattern=r"^(?:[A-Z]{3}|x*)$")
        capped: str = Field(pattern=r"^[A-Z]+$", max_length=8)

    unbounded = [i.pointer for i in preflight(Codes, "llamacpp").unbounded]
    assert unbounded == [
        "/properties/open_ended",
        "/properties/searching",
        "/properties/one_open_branch",
    ]


def test_the_preflight_shows_the_bounds_and_what_is_unbounded() -> None:
    report = preflight(Products, "vllm-xgrammar")
    assert [(i.pointer, i.keyword) for i in report.unbounded] == [
        ("/properties/products", "maxItems"),
        ("/properties/products/items", "maxLength"),
    ]
    assert "whitespace: none: the SDK sends `structured_outputs.disable_any_whitespace`" in (
        "\n".join(report.lines())
    )
    assert "at most 16 spaces" in "\n".join(preflight(Products, "llamacpp").lines())


# --- refusals: one per target that would weaken a promise -------------------------------------

_DECISION = '{"reasoning": "ok", "answer": "approve", "confidence": "high"}'
_INVENTORY = '{"counts": {}}'


def _anthropic(wire: Wire) -> Any:
    return AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")


def _responses(wire: Wire) -> Any:
    return OpenAIResponsesProvider(openai_client(wire), model="gpt-5")


def _chat(wire: Wire) -> Any:
    return OpenAIChatProvider(openai_client(wire), model="gpt-5")


_CLOSED = [
    ("anthropic", _anthropic, anthropic_reply),
    ("openai-responses", _responses, responses_reply),
    ("openai-chat", _chat, chat_reply),
]


@pytest.mark.parametrize(("target", "make", "reply"), _CLOSED, ids=[c[0] for c in _CLOSED])
def test_a_map_field_is_refused_before_sending_on_a_target_that_closes_objects(
    target: str, make: Any, reply: Any
) -> None:
    wire = Wire(reply(text=_INVENTORY))
    client = StructuredClient(make(wire))
    with pytest.raises(UnsupportedRequest) as raised:
        client.generate(Inventory, prompt="Count the stock.")
    assert wire.requests == []  # nothing was sent
    message = str(raised.value)
    assert f"{target} would silently weaken Inventory" in message
    assert "/properties/counts: additionalProperties" in message
    assert raised.value.supported == ["accept_weakened_schema=True"]
    # The same client sends a contract that loses nothing.
    wire.replies = [reply(text=_DECISION)]
    assert client.generate(Decision, prompt="Decide.").value.answer == "approve"
    # Accepted knowingly: sent, and answered.
    wire.replies = [reply(text=_INVENTORY)]
    accepted = client.generate(Inventory, prompt="Count.", accept_weakened_schema=True)
    assert accepted.value.counts == {} and len(wire.requests) == 2


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_the_linter_says_a_closed_map_is_refused_not_caught_by_the_parser(provider: str) -> None:
    """The lint's finding on a map field for a target that closes objects said the parser
    catches a breaking value ("fails in the parser and costs a retry") and advised suppressing
    it: false (only {} can be generated, and it passes every check) and the call is refused
    whatever the suppression. It now says what the preflight and the call do."""
    from sdk.workflow.lint import lint

    [finding] = [f for f in lint(Inventory, provider=provider).findings
                 if f.pointer == "/properties/counts/additionalProperties"]  # fmt: skip
    assert "closes every object" in finding.message
    assert "refused (UnsupportedRequest)" in finding.message
    assert "accept_weakened_schema=True" in finding.message
    assert "fails in the parser" not in finding.message
    assert "list of key/value items" in finding.fix
    kept = lint(Inventory, provider="vllm").findings
    assert not [f for f in kept if "additionalProperties" in f.pointer]


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_target_either_refuses_a_map_field_or_keeps_it(name: str) -> None:
    target = TARGETS[name]
    report = preflight(Inventory, target)
    if target.closed_objects:  # the three tested through their clients above
        assert [(i.pointer, i.keyword) for i in report.weakened] == [
            ("/properties/counts", "additionalProperties")
        ]
        assert name in {c[0] for c in _CLOSED}
        return
    assert report.weakened == []  # sent as it is: nothing to refuse
    assert report.refused_by_converter == []  # the SDK's grammar writes maps too
    if target.dialect is not None:  # the map's value schema is on the wire
        from sdk.schema.dialects import to_wire

        wire = to_wire(Inventory, target.dialect).schema
        counts = wire["properties"]["counts"]
        assert counts.get("additionalProperties") == {"type": "integer"}


def test_the_table_and_a_contracts_preflight_say_what_each_target_does_with_an_anchor() -> None:
    """`x-anchor`: its `after` regions are enforced while decoding where the target grounds
    copied values (the embedded model, llama.cpp's grammar, vLLM's grounded Lark); every
    anchor is checked after parsing, on every target."""
    from typing import Annotated

    from sdk import Contract
    from sdk import Verbatim
    from sdk.schema.grounding import Anchor

    table = preflight_table()
    assert "| anchors (`x-anchor`) |" in table.splitlines()[0]
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()[2:]}
    grounding = {"llamacpp", "vllm-xgrammar", "vllm-guidance", "embedded"}
    assert set(rows) == set(TARGETS)
    for name, row in rows.items():
        assert ("`after` labels enforced while decoding" in row) == (name in grounding), name
        assert ("| not enforced while decoding;" in row) == (name not in grounding), name
        assert "checked after parsing (a value outside its anchor is a `CheckFailed`" in row

    class Parcel(Contract):
        carrier: Annotated[Verbatim | None, Anchor(not_after=("from",))]
        recipient: Annotated[Verbatim | None, Anchor(after=("Dear",))]

    for name in TARGETS:
        report = preflight(Parcel, name)
        enforced = [i.pointer for i in report.enforced if i.keyword == "x-anchor"]
        rechecked = [i.pointer for i in report.rechecked if i.keyword == "x-anchor"]
        # `not_after` is never in a grammar: the carrier's anchor is checked after parsing only.
        assert enforced == (["/properties/recipient"] if name in grounding else []), name
        assert rechecked == ["/properties/carrier", "/properties/recipient"], name
    lines = preflight(Parcel, "embedded").lines()
    assert "x-anchor" in lines[1] and "/properties/recipient: x-anchor" in lines[3]


def test_a_provider_s_preflight_is_its_route_s() -> None:
    """Issue 33 item 2: "before a call, the SDK states for the chosen provider, route and
    engine...". The provider itself names its target (a llama.cpp provider's mode picks the
    route); a provider passed here was an `AttributeError` ('... has no attribute ignores')."""
    from sdk.providers import FallbackProvider
    from sdk.providers import LlamaCppProvider
    from sdk.providers.limit import ConcurrencyLimit
    from sdk.providers.test import TestProvider

    wire = Wire(anthropic_reply(text=_DECISION))
    url = "http://127.0.0.1:9"  # nothing is sent: a preflight is pure
    routes = {
        "anthropic": _anthropic(wire),
        "openai-responses": _responses(wire),
        "openai-chat": _chat(wire),
        "llamacpp": LlamaCppProvider(url, mode="grammar"),
        "llamacpp-json-schema": LlamaCppProvider(url, mode="json_schema"),
    }
    for name, provider in routes.items():
        report = preflight(Inventory, provider)
        assert report.target is TARGETS[name]
        assert report.lines() == preflight(Inventory, name).lines()
    limited = ConcurrencyLimit(routes["llamacpp-json-schema"], max_concurrency=2)
    assert preflight(Decision, limited).target.name == "llamacpp-json-schema"
    assert wire.requests == []
    both = FallbackProvider([routes["anthropic"], routes["llamacpp"]])
    with pytest.raises(ValueError, match="goes to 2 providers in turn"):
        preflight(Decision, both)
    with pytest.raises(ValueError, match="sends no schema to a target of the preflight table"):
        preflight(Decision, TestProvider([_DECISION]))
    with pytest.raises(TypeError, match="preflight takes a target"):
        preflight(Decision, 42)
