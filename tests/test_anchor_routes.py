"""An `Anchor` holds on every route (issue 32 item 4): the parser refuses a `Verbatim` value
outside its anchor's regions on every provider configuration and way of calling (the promise
matrix's setups: the hosted providers through their official clients, the local engines over
HTTP, `TestProvider`, a fallback), and the retry feeds the reason back; `abstention="guided"`
turns such a value into `null` with a note naming the anchor; and a real llama-server, given
the grounded GBNF, writes only spans of the anchor's regions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated
from typing import Any

import httpx
import pytest
from pydantic import Field
from pydantic import create_model
from pydantic import model_validator

from sdk import CheckFailed
from sdk import Contract
from sdk import SourceQuote
from sdk import StructuredClient
from sdk import Verbatim
from sdk.engine.kinds.guided import ANCHOR_SIGNAL
from sdk.engine.kinds.guided import SIGNAL_NOTE
from sdk.providers import LlamaCppProvider
from sdk.providers import TestProvider
from sdk.providers._grounding import GROUNDING_NOTE
from sdk.schema.gbnf import contract_gbnf
from sdk.schema.grounding import ANCHOR_KEY
from sdk.schema.grounding import Anchor
from sdk.schema.grounding import anchored
from sdk.stop_reason import StopReason
from tests.promise_wire import SETUPS
from tests.promise_wire import Say
from tests.promise_wire import Setup
from tests.test_promise_matrix import CALLS
from tests.test_promise_matrix import Kind
from tests.test_promise_matrix import _requests
from tests.test_promise_matrix import _run
from tests.test_promise_matrix import _watch

SOURCE = "Your parcel from Lumen Books is on its way with UPS.\nHello Ana Vogt,\nsee you soon.\n"


class Delivery(Contract):
    carrier: Annotated[Verbatim | None, Anchor(not_after=("from",))] = Field(
        description="The delivery company, or null."
    )
    recipient: Annotated[Verbatim | None, Anchor(after=("Hello", "Dear"))] = Field(
        description="Who the parcel is for, or null."
    )


GOOD = {"carrier": "UPS", "recipient": "Ana Vogt"}
# Both spans of the source, both of the wrong party: the shop's name, the carrier's name.
WRONG_PARTY = {"carrier": "Lumen Books", "recipient": "UPS"}
DELIVERY = Kind("contract", Delivery, Say(json.dumps(GOOD)), Say(json.dumps(WRONG_PARTY)))
REFUSED = "is not where its anchor allows"


class Quoted(Contract):
    """The same anchors on `SourceQuote`s: the parser holds a quote to its anchor as it holds a
    `Verbatim` (same error, same pointer)."""

    carrier: Annotated[SourceQuote | None, Anchor(not_after=("from",))] = Field(
        description="The words naming the delivery company, or null."
    )
    recipient: Annotated[SourceQuote | None, Anchor(after=("Hello", "Dear"))] = Field(
        description="The words naming who the parcel is for, or null."
    )


QUOTED = Kind("contract", Quoted, Say(json.dumps(GOOD)), Say(json.dumps(WRONG_PARTY)))

ROUTES = [
    pytest.param(setup, call, kind, id=f"{setup.name}-{call}-{kind.output.__name__}")
    for setup in SETUPS
    for call in CALLS
    for kind in (DELIVERY, QUOTED)
]


@pytest.mark.parametrize(("setup", "call", "kind"), ROUTES)
def test_every_route_refuses_another_partys_value_and_retries_with_the_reason(
    setup: Setup, call: str, kind: Kind
) -> None:
    watched = _watch(setup, kind, [kind.bad, kind.good], call)
    result = _run(watched, kind, call, retries=1, source=SOURCE)
    assert result.value == kind.output.model_validate(GOOD)
    # (The fallback's primary is down: its failed attempts come first.)
    [first] = [a.error for a in result.attempts if isinstance(a.error, CheckFailed)]
    assert [(v.pointer, v.keyword) for v in first.violations] == [
        ("/carrier", ANCHOR_KEY),
        ("/recipient", ANCHOR_KEY),
    ]
    assert "follows 'from'" in first.violations[0].message
    assert "on no line after its labels ('Hello', 'Dear')" in first.violations[1].message
    assert first.text == kind.bad.text and first.stop_reason is StopReason.END_TURN
    requests = [str(request) for request in watched.server.requests]
    assert len(requests) == _requests(watched) >= 2
    assert REFUSED in requests[-1]  # the reason, fed back to the model
    assert not any(REFUSED in request for request in requests[:-1])


@pytest.mark.parametrize(("setup", "call", "kind"), ROUTES)
def test_every_route_under_guided_abstention_nulls_another_partys_value_with_a_note(
    setup: Setup, call: str, kind: Kind
) -> None:
    watched = _watch(setup, kind, [kind.bad], call)
    result = _run(watched, kind, call, retries=0, source=SOURCE, abstention="guided")
    assert result.value == kind.output(carrier=None, recipient=None)
    assert result.text == kind.bad.text  # what the model wrote
    assert not [a for a in result.attempts if isinstance(a.error, CheckFailed)]  # no retry
    decided = {n.pointer: n.written for n in result.notes if n.kind == SIGNAL_NOTE and n.pointer}
    assert set(decided) == {"/carrier", "/recipient"}
    assert all(str(written).startswith(ANCHOR_SIGNAL) for written in decided.values())
    assert "follows 'from'" in str(decided["/carrier"])
    abstained = [(n.pointer, n.received) for n in result.notes if n.kind == "abstained"]
    assert abstained == [("/carrier", "Lumen Books"), ("/recipient", "UPS")]


def test_guided_abstention_keeps_a_right_value_and_retries_what_an_anchor_cannot_explain() -> None:
    stated = json.dumps(GOOD)
    kept = StructuredClient(TestProvider([stated])).generate(
        Delivery, prompt="x", source=SOURCE, abstention="guided"
    )
    assert kept.value == Delivery.model_validate(GOOD)
    assert not [n for n in kept.notes if n.kind == "abstained"]
    # Another complaint beside the anchor's (a value that is no span at all): not an abstention,
    # the call retries with every reason.
    invented = json.dumps({"carrier": "Lumen Books", "recipient": "Zed Zimmer"})
    provider = TestProvider([invented, stated])
    result = StructuredClient(provider).generate(
        Delivery, prompt="x", source=SOURCE, abstention="guided"
    )
    assert result.value == Delivery.model_validate(GOOD)
    first = result.attempts[0].error
    assert isinstance(first, CheckFailed)
    assert {v.keyword for v in first.violations} == {ANCHOR_KEY, "x-verbatim"}


class Addressed(Contract):
    recipient: Annotated[Verbatim, Anchor(after=("Hello",))]


def test_guided_abstention_cannot_null_a_field_that_may_not_be_null() -> None:
    class Both(Contract):
        carrier: Verbatim | None = None
        recipient: Annotated[Verbatim, Anchor(after=("Hello",))]

    provider = TestProvider([json.dumps({"carrier": None, "recipient": "UPS"})])
    with pytest.raises(CheckFailed) as failed:
        StructuredClient(provider, retries=0).generate(
            Both, prompt="x", source=SOURCE, abstention="guided"
        )
    assert [v.keyword for v in failed.value.violations] == [ANCHOR_KEY]
    assert failed.value.text == json.dumps({"carrier": None, "recipient": "UPS"})


# --- guided abstention below the top level: null where the contract allows, else a retry ---


NESTED_SOURCE = "Shipped from Lumen Books with UPS.\nHello Ana Vogt,\nItem: Atlas\nItem: Globe\n"


class Parties(Contract):
    carrier: Annotated[Verbatim | None, Anchor(not_after=("from",))] = None
    recipient: Annotated[Verbatim | None, Anchor(after=("Hello",))] = None


class Shipment(Contract):
    """No top-level field may be null: guided abstention has somewhere to abstain all the
    same (the anchored values below)."""

    parties: Parties
    items: list[Annotated[Verbatim | None, Anchor(after=("Item:",))]]


def test_guided_abstention_nulls_an_anchored_value_in_a_nested_object_or_a_list_item() -> None:
    wrote = {"parties": {"carrier": "Lumen Books", "recipient": "Ana Vogt"},
             "items": ["Atlas", "UPS", "Globe"]}  # fmt: skip
    provider = TestProvider([json.dumps(wrote)])
    result = StructuredClient(provider, retries=0).generate(
        Shipment, prompt="x", source=NESTED_SOURCE, abstention="guided"
    )
    assert result.value == Shipment(
        parties=Parties(carrier=None, recipient="Ana Vogt"), items=["Atlas", None, "Globe"]
    )
    assert result.text == json.dumps(wrote) and len(result.attempts) == 1
    decided = {n.pointer: str(n.written) for n in result.notes if n.kind == SIGNAL_NOTE}
    assert decided["/parties/carrier"].startswith(ANCHOR_SIGNAL)
    assert "follows 'from'" in decided["/parties/carrier"]
    assert "on no line after its labels ('Item:')" in decided["/items/1"]
    abstained = [(n.pointer, n.received) for n in result.notes if n.kind == "abstained"]
    assert abstained == [("/parties/carrier", "Lumen Books"), ("/items/1", "UPS")]


# The two spellings of an anchored value that may be null: the anchor on the union (`x-anchor`
# beside `anyOf`), or on its non-null branch (`x-anchor` inside `anyOf`). Guided abstention
# treats them alike at every depth; each contract below has no other value that may be null.
SPELLINGS = {
    "anchor-on-union": (
        Annotated[Verbatim | None, Anchor(after=("Hello",))],
        Annotated[Verbatim | None, Anchor(after=("Item:",))],
    ),
    "anchor-on-branch": (
        Annotated[Verbatim, Anchor(after=("Hello",))] | None,
        Annotated[Verbatim, Anchor(after=("Item:",))] | None,
    ),
}
SHAPES = {
    # shape: what the model wrote, the value then, the pointer its anchor nulls
    "top-level": ({"recipient": "UPS"}, {"recipient": None}, "/recipient"),
    "sub-model": ({"parties": {"recipient": "UPS"}}, {"parties": {"recipient": None}},
                  "/parties/recipient"),
    "list-item": ({"items": ["Atlas", "UPS"]}, {"items": ["Atlas", None]}, "/items/1"),
}  # fmt: skip


def _only_anchored_nullable(shape: str, spelling: str) -> type[Contract]:
    recipient, item = SPELLINGS[spelling]
    fields: dict[str, Any] = {
        "top-level": {"recipient": (recipient, None)},
        "sub-model": {"parties": (create_model("To", __base__=Contract,
                                               recipient=(recipient, None)), ...)},
        "list-item": {"items": (list[item], ...)},  # type: ignore[valid-type]
    }[shape]  # fmt: skip
    name = "Only" + shape.title().replace("-", "")
    made: type[Contract] = create_model(name, __base__=Contract, **fields)
    return made


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_guided_abstention_nulls_an_anchored_value_either_spelling_at_any_depth(
    shape: str, spelling: str
) -> None:
    contract = _only_anchored_nullable(shape, spelling)
    wrote, value, pointer = SHAPES[shape]
    provider = TestProvider([json.dumps(wrote)])
    result = StructuredClient(provider, retries=0).generate(
        contract, prompt="x", source=NESTED_SOURCE, abstention="guided"
    )
    assert result.value == contract.model_validate(value)
    assert result.text == json.dumps(wrote) and len(result.attempts) == 1
    decided = {n.pointer: str(n.written) for n in result.notes if n.kind == SIGNAL_NOTE}
    assert set(decided) == {"", pointer}
    assert decided[pointer].startswith(ANCHOR_SIGNAL)
    labels = "'Item:'" if shape == "list-item" else "'Hello'"
    assert f"on no line after its labels ({labels})" in decided[pointer]
    abstained = [(n.pointer, n.received) for n in result.notes if n.kind == "abstained"]
    assert abstained == [(pointer, "UPS")]


class Named(Contract):
    name: Verbatim | None = None
    count: int | None = None


class Counted(Contract):
    count: int | None = None


class AnchoredParty(Contract):
    """The anchor on the sub-model (`$ref` beside `x-anchor`): the parser holds every copy
    below it to the anchor, and no field of this contract is nullable at the top level."""

    recipient: Annotated[Named, Anchor(after=("Hello",))]


class AnchoredCount(Contract):
    """The same, but nothing copied below the anchor: the anchor checks nothing there."""

    recipient: Annotated[Counted, Anchor(after=("Hello",))]


def test_guided_abstention_nulls_a_copy_below_an_anchored_sub_model() -> None:
    wrote = {"recipient": {"name": "UPS", "count": 2}}
    provider = TestProvider([json.dumps(wrote)])
    result = StructuredClient(provider, retries=0).generate(
        AnchoredParty, prompt="x", source=NESTED_SOURCE, abstention="guided"
    )
    assert result.value == AnchoredParty(recipient=Named(name=None, count=2))
    decided = {n.pointer: str(n.written) for n in result.notes if n.kind == SIGNAL_NOTE}
    assert set(decided) == {"", "/recipient/name"}
    assert "on no line after its labels ('Hello')" in decided["/recipient/name"]
    abstained = [(n.pointer, n.received) for n in result.notes if n.kind == "abstained"]
    assert abstained == [("/recipient/name", "UPS")]
    # Below the anchor, only what is copied counts: a nullable number is nowhere to abstain.
    with pytest.raises(ValueError, match="needs a field that may be null"):
        StructuredClient(TestProvider([])).generate(
            AnchoredCount, prompt="x", source=NESTED_SOURCE, abstention="guided"
        )


class Firm(Contract):
    recipient: Annotated[Verbatim, Anchor(after=("Hello",))]


class FirmShipment(Contract):
    note: Verbatim | None = None
    parties: Firm
    items: list[Annotated[Verbatim, Anchor(after=("Item:",))]]


@pytest.mark.parametrize(
    ("wrote", "pointer"),
    [
        ({"parties": {"recipient": "UPS"}, "items": ["Atlas"]}, "/parties/recipient"),
        ({"parties": {"recipient": "Ana Vogt"}, "items": ["Atlas", "UPS"]}, "/items/1"),
    ],
    ids=["nested-field", "list-item"],
)
def test_guided_abstention_retries_a_nested_anchored_value_that_may_not_be_null(
    wrote: dict[str, Any], pointer: str
) -> None:
    good = {"parties": {"recipient": "Ana Vogt"}, "items": ["Atlas"]}
    provider = TestProvider([json.dumps(wrote), json.dumps(good)])
    result = StructuredClient(provider, retries=1).generate(
        FirmShipment, prompt="x", source=NESTED_SOURCE, abstention="guided"
    )
    assert result.value == FirmShipment.model_validate(good)
    first = result.attempts[0].error
    assert isinstance(first, CheckFailed) and first.text == json.dumps(wrote)
    assert [(v.pointer, v.keyword) for v in first.violations] == [(pointer, ANCHOR_KEY)]
    assert not [n for n in result.notes if n.kind == "abstained"]


class Dispatch(Contract):
    carrier: Annotated[Verbatim | None, Anchor(not_after=("from",))] = Field(description="c")
    tracking: Verbatim | None = Field(description="t")

    @model_validator(mode="after")
    def tracking_needs_a_carrier(self) -> Dispatch:
        if self.tracking and not self.carrier:
            raise ValueError("tracking needs a carrier")
        return self


def test_guided_abstention_a_validator_refuses_keeps_the_models_text_and_the_anchors_reason() -> (
    None
):
    # Nulling the carrier makes the contract's own validator fail on the SDK's rewrite: the
    # error is the anchor's, on what the model wrote, and the retry is told the anchor's reason.
    wrote = json.dumps({"carrier": "Lumen Books", "tracking": "1Z999"})
    good = json.dumps({"carrier": "UPS", "tracking": "1Z999"})
    provider = TestProvider([wrote, good])
    result = StructuredClient(provider, retries=1).generate(
        Dispatch,
        prompt="x",
        source="Sent from Lumen Books with UPS, tracking 1Z999.",
        abstention="guided",
    )
    assert result.value == Dispatch(carrier="UPS", tracking="1Z999")
    first = result.attempts[0].error
    assert isinstance(first, CheckFailed) and first.text == wrote
    assert [(v.pointer, v.keyword) for v in first.violations] == [("/carrier", ANCHOR_KEY)]
    assert "follows 'from'" in first.violations[0].message
    retry = json.dumps([m.content for m in provider.requests[1].messages], default=str)
    assert "follows 'from'" in retry and "tracking needs a carrier" not in retry


# --- llama.cpp: the grounded GBNF offers the anchor's regions only ---


NOTICE = "Your parcel from Lumen Books is on its way with UPS.\nHello Ana Vogt,\nHello Bo Li\n"


def test_the_llamacpp_grammar_offers_only_spans_of_the_anchors_regions() -> None:
    from tests.grammar_support import grammar_accepts
    from tests.grammar_support import grammar_accepts_prefix

    provider = LlamaCppProvider("http://127.0.0.1:9")  # never contacted: the grammar only
    grammar = provider.grammar_for(Delivery, source=NOTICE)
    assert "anchored-verbatim" in grammar

    def doc(carrier: str | None, recipient: str | None) -> str:
        return json.dumps({"carrier": carrier, "recipient": recipient})

    for recipient in ("Ana Vogt", "Ana", "Vogt,", "Bo Li", None):
        assert grammar_accepts(grammar, doc("UPS", recipient)), recipient
    # Not from another line, not across two regions, not cut inside a word.
    for recipient in ("UPS", "Lumen Books", "Ana Vogt,\nHello Bo", "An", "Hello Ana"):
        assert not grammar_accepts(grammar, doc("UPS", recipient)), recipient
    assert not grammar_accepts_prefix(grammar, '{"carrier": "UPS", "recipient": "U')
    # Unanchored, the same field takes any span.
    assert grammar_accepts(grammar, doc("Lumen Books", None))


def test_the_llamacpp_grammar_of_a_document_without_the_label_leaves_null_alone() -> None:
    from tests.grammar_support import grammar_accepts
    from tests.grammar_support import grammar_accepts_prefix

    source = "Your parcel from Lumen Books is on its way with UPS."
    grammar = LlamaCppProvider("http://127.0.0.1:9").grammar_for(Delivery, source=source)
    assert grammar_accepts(grammar, '{"carrier": "UPS", "recipient": null}')
    assert not grammar_accepts_prefix(grammar, '{"carrier": "UPS", "recipient": "')


def test_a_required_anchored_field_without_its_label_goes_plain_with_a_note() -> None:
    """No label: no span can fill a field that cannot be null, so no grounded grammar exists;
    the plain one goes with a "grounding" note, and the parser refuses what the model writes
    (the call fails typed, naming the anchor, where retries cannot help)."""
    from sdk.providers import CompletionRequest
    from sdk.providers import JsonDocument
    from sdk.providers._grounding import grounding_plan
    from sdk.schema.grounding import grounded_gbnf

    source = "Your parcel from Lumen Books is on its way with UPS."
    asked = CompletionRequest(JsonDocument(Addressed), (), 1, source=source)
    plan = grounding_plan(asked, grounded_gbnf, engine="llamacpp")
    assert plan.grammar is None
    [note] = plan.notes
    assert note.kind == GROUNDING_NOTE and note.pointer == "/properties/recipient"
    assert "labels ('Hello') and a word after it" in str(note.written) + str(note.received)
    provider = LlamaCppProvider("http://127.0.0.1:9")
    assert provider.grammar_for(Addressed, source=source) == contract_gbnf(Addressed)
    # With the label, the grounded grammar goes.
    assert provider.grammar_for(Addressed, source=NOTICE) != contract_gbnf(Addressed)


def test_llama_cpp_reads_the_anchored_grammar_as_the_sdk_does() -> None:
    pytest.importorskip("llama_cpp", reason="llama.cpp's grammar engine is the local extra")
    from tests.grammar_support import llama_accepts

    grammar = LlamaCppProvider("http://127.0.0.1:9").grammar_for(Delivery, source=NOTICE)
    assert llama_accepts(grammar, json.dumps({"carrier": "UPS", "recipient": "Bo Li"}))
    assert not llama_accepts(grammar, json.dumps({"carrier": "UPS", "recipient": "UPS"}))
    # A sub-model shared by two anchors: each confined by its own (two rules).
    from tests.test_anchors import Letter

    source = "From: Ana Vogt\nTo: Bo Li\nSeen by Cy Ng\n"
    shared = LlamaCppProvider("http://127.0.0.1:9").grammar_for(Letter, source=source)

    def letter(sender: str, recipient: str) -> str:
        return json.dumps({"sender": {"name": sender}, "recipient": {"name": recipient},
                           "witness": {"name": "Cy Ng"}})  # fmt: skip

    assert llama_accepts(shared, letter("Ana Vogt", "Bo Li"))
    assert not llama_accepts(shared, letter("Ana Vogt", "Ana Vogt"))
    assert not llama_accepts(shared, letter("Bo Li", "Bo Li"))


def _recording(bodies: list[dict[str, Any]]) -> httpx.Client:
    def record(request: httpx.Request) -> None:
        if request.url.path == "/completion":
            bodies.append(json.loads(request.read()))

    return httpx.Client(event_hooks={"request": [record]}, timeout=300)


class ForWhom(Contract):
    recipient: Annotated[Verbatim | None, Anchor(after=("Hello", "Dear"))] = Field(
        description="Who the parcel is for, or null."
    )


def test_a_real_llama_server_writes_only_spans_of_the_anchors_regions(llama_server: str) -> None:
    bodies: list[dict[str, Any]] = []
    provider = LlamaCppProvider(llama_server, http_client=_recording(bodies))
    client = StructuredClient(provider, retries=0)  # a value outside the regions would fail
    regions = {"Ana", "Ana Vogt", "Ana Vogt,", "Vogt", "Vogt,", "Bo", "Bo Li", "Li"}
    for _ in range(3):  # the server samples: a few draws, each within the regions or null
        result = client.generate(
            ForWhom,
            system="The parcel is for UPS.",  # the wrong party, and a span of the notice
            prompt="Who is the parcel for?",
            source=NOTICE,
            max_tokens=200,
        )
        # The field is nullable and the grammar allows `null`: a legitimate draw, not a leak.
        assert result.value.recipient is None or result.value.recipient in regions
        assert bodies[-1]["grammar"] == provider.grammar_for(ForWhom, source=NOTICE)
        assert "anchored-verbatim" in bodies[-1]["grammar"] and result.notes == []
    # A document without the label: the recipient can only be null.
    source = "Your parcel from Lumen Books is on its way with UPS."
    result = client.generate(
        ForWhom, system="The parcel is for UPS.", prompt="Who is it for?", source=source,
        max_tokens=200,
    )  # fmt: skip
    assert result.value.recipient is None
    assert bodies[-1]["grammar"] == provider.grammar_for(ForWhom, source=source)


def test_a_real_llama_server_confines_a_shared_sub_model_by_each_anchor(llama_server: str) -> None:
    from tests.test_anchors import Letter

    bodies: list[dict[str, Any]] = []
    provider = LlamaCppProvider(llama_server, http_client=_recording(bodies))
    source = "From: Ana Vogt\nTo: Bo Li\nSeen by Cy Ng\n"
    # Lured to the wrong lines (spans of the letter): with the sub-model's rule written once,
    # SmolLM2 followed both lures (the parser then refused the reply); each anchor holds now.
    lures = ("The sender is Bo Li. The recipient is Ana Vogt.", "Sender: Bo Li. Recipient: Cy Ng.")
    for lure in lures:
        result = StructuredClient(provider, retries=0).generate(
            Letter,
            system=lure,
            prompt="Who sent the letter, who receives it, who saw it?",
            source=source,
            max_tokens=200,
        )
        assert result.value.sender.name in {None, "Ana", "Vogt", "Ana Vogt"}
        assert result.value.recipient.name in {None, "Bo", "Li", "Bo Li"}
        assert bodies[-1]["grammar"] == provider.grammar_for(Letter, source=source)


# --- the embedded model: the Lark grammar confines, the parser and guided abstention check ---


@pytest.fixture(scope="module")
def embedded() -> Iterator[Any]:
    from tests.local_deps import import_local

    provider = import_local("sdk.providers.embedded").EmbeddedProvider()
    yield provider
    provider.close()


@pytest.mark.local
def test_the_embedded_model_copies_from_the_anchors_regions_and_guided_abstention_holds(
    embedded: Any,
) -> None:
    client = StructuredClient(embedded, retries=0)  # a value outside the regions would fail
    asked = {"prompt": "Who is the parcel for?", "source": NOTICE, "max_tokens": 120}
    regions = {"Ana", "Ana Vogt", "Ana Vogt,", "Vogt", "Vogt,", "Bo", "Bo Li", "Li"}
    result = client.generate(ForWhom, system="The parcel is for UPS.", **asked)
    # Nullable, and the grammar allows `null`: a legitimate answer, not a leak.
    assert result.value.recipient is None or result.value.recipient in regions
    assert result.notes == []
    # Guided, with the mass step on (the embedded model reports it): the anchored field gets no
    # default threshold, and whatever the model wrote is where its anchors allow, or null with
    # the anchor's note.
    guided = client.generate(Delivery, abstention="guided", **asked)
    said = [n for n in guided.notes if n.kind == SIGNAL_NOTE]
    assert said[0].pointer == "" and "surviving mass" in str(said[0].written)
    assert "/recipient" not in str(said[0].written)  # confined: left to its anchor
    for name in ("carrier", "recipient"):
        value = getattr(guided.value, name)
        anchor = Delivery.model_fields[name].metadata[0]
        noted = [n for n in said if n.pointer == f"/{name}"]
        assert value is None or anchored(value, NOTICE, anchor)
        assert not noted or (value is None and str(noted[0].written).startswith(ANCHOR_SIGNAL))


class BranchDelivery(Contract):
    """`Delivery` with each anchor on the union's non-null branch."""

    carrier: Annotated[Verbatim, Anchor(not_after=("from",))] | None = Field(description="c")
    recipient: Annotated[Verbatim, Anchor(after=("Hello", "Dear"))] | None = Field(description="r")


@pytest.mark.parametrize("contract", [Delivery, BranchDelivery], ids=["on-union", "on-branch"])
def test_default_thresholds_leave_a_confined_field_to_its_anchor(
    contract: type[Contract],
) -> None:
    from sdk.abstention import Thresholds
    from sdk.schema.canonical import shared_schema

    assert set(Thresholds.standard(shared_schema(contract)).fields) == {"/carrier"}


def test_guided_abstention_by_anchor_keeps_min_confidence_reading_what_the_model_wrote() -> None:
    """The anchor's nulls are parsed from a rewritten document, but the confidence is read from
    the text the tokens spell: `min_confidence` still applies to the other fields, and a field
    the anchor nulled gets no second abstention."""
    import math

    from sdk.confidence import TokenLogprob
    from sdk.providers import Completion

    text = json.dumps({"carrier": "Lumen Books", "recipient": "Ana Vogt"})
    carrier, recipient = text.index("Lumen"), text.index("Ana")
    cuts = [0, carrier, carrier + len("Lumen Books"), recipient, recipient + len("Ana Vogt")]
    chances = [1.0, 0.2, 1.0, 0.3, 1.0]  # both values under the floor
    tokens = tuple(
        TokenLogprob(text[low:high], low, math.log(chance), None)
        for low, high, chance in zip(cuts, [*cuts[1:], len(text)], chances, strict=True)
    )
    reply = Completion(text, StopReason.END_TURN, "stop", tokens=tokens)
    result = StructuredClient(TestProvider([reply])).generate(
        Delivery, prompt="x", source=SOURCE, abstention="guided", min_confidence=0.5
    )
    assert result.value == Delivery(carrier=None, recipient=None)
    by_kind = {(n.kind, n.pointer) for n in result.notes}
    assert ("abstained", "/carrier") in by_kind and (SIGNAL_NOTE, "/carrier") in by_kind
    assert ("low_confidence", "/recipient") in by_kind  # the floor, read from the model's text
    assert ("low_confidence", "/carrier") not in by_kind  # already null by its anchor
    assert not [n for n in result.notes if n.kind == "confidence"]  # no "not applied" note
