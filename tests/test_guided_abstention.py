"""`abstention="guided"`: what each engine does for it, and never more than it can.

On every provider the request asks for `null` where the document is silent and the parser checks
copied values; engines that ground add decode-time grounding (`grounding="values"`); the embedded
model with calibrated thresholds abstains on its own hesitation, and the abstained value passes
the parser again, whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import model_validator

from contracts import ShipmentNotice
from sdk import Contract
from sdk import StructuredClient
from sdk import Tool
from sdk.abstention import FieldThreshold
from sdk.abstention import Thresholds
from sdk.engine.kinds.guided import ABSTAIN
from sdk.engine.kinds.guided import KEPT_NOTE
from sdk.providers import AnthropicProvider
from sdk.providers import Sampling
from sdk.providers import TestProvider
from tests import tool_wire
from tests.local_deps import import_local
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply

ROOT = Path(__file__).resolve().parent.parent
NOTICES = ROOT / "examples" / "data" / "eval" / "notices.jsonl"
THRESHOLDS = ROOT / "eval-results" / "notices" / "thresholds.json"
STATED = {"carrier": "DHL Express", "tracking_number": "JJD000390012345678901",
          "order_number": "FH-5079207", "recipient": "Jonah Whitaker"}  # fmt: skip


class Plain(Contract):
    """Nothing here may be null, and there is no enum to escape into."""

    name: str
    total: int


def _notice(index: int) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(NOTICES.read_text().splitlines()[index])
    return line


def test_every_provider_is_asked_for_null_where_the_document_is_silent() -> None:
    wire = Wire(anthropic_reply(text=json.dumps(STATED)))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    source = "DHL Express JJD000390012345678901 for Jonah Whitaker, order FH-5079207."
    result = StructuredClient(provider).generate(
        ShipmentNotice, prompt="Fill it in.", source=source, abstention="guided", system="Be exact."
    )
    system = wire.body["system"]
    assert system == f"Be exact.\n\n{ABSTAIN}"  # no grounding option: a hosted API has none
    assert result.value.tracking_number == "JJD000390012345678901"


def test_guided_abstention_is_refused_where_there_is_nowhere_to_abstain() -> None:
    provider = TestProvider([])
    client = StructuredClient(provider)
    with pytest.raises(ValueError, match="needs a field that may be null"):
        client.generate(Plain, prompt="x", abstention="guided")
    with pytest.raises(ValueError, match="not a list"):
        client.generate(list[ShipmentNotice], prompt="x", abstention="guided")
    with pytest.raises(ValueError, match="not tool calls"):
        client.call_tools(tools=[Tool(tool_wire.GetWeather)], prompt="x", abstention="guided")
    with pytest.raises(ValueError, match="'none' or 'guided'"):
        client.generate(ShipmentNotice, prompt="x", abstention="sometimes")  # type: ignore[arg-type]
    assert provider.requests == []


def test_a_grounding_engine_grounds_every_value_a_span_can_fill() -> None:
    source = " / ".join(STATED.values())
    provider = TestProvider([json.dumps(STATED)])
    StructuredClient(provider).generate(
        ShipmentNotice, prompt="Fill it in.", source=source, abstention="guided"
    )
    assert provider.requests[0].options == Sampling(grounding="values")
    provider.add(json.dumps(STATED))
    StructuredClient(provider).generate(
        ShipmentNotice, prompt="Fill it in.", source=source, abstention="guided", grounding=False
    )
    assert provider.requests[1].options == Sampling(grounding=False)  # the caller's word wins


@pytest.fixture(scope="module")
def embedded() -> Iterator[Any]:
    module = import_local("sdk.providers.embedded")
    provider = module.EmbeddedProvider()
    yield provider
    provider.close()


@pytest.mark.local
def test_on_the_embedded_model_an_unstated_id_is_null_and_a_stated_one_copied(
    embedded: Any,
) -> None:
    item = _notice(0)  # states the order number and the recipient; no tracking number
    client = StructuredClient(embedded, retries=1)
    result = client.generate(ShipmentNotice, prompt=item["prompt"], source=item["document"],
                             max_tokens=200, abstention="guided",
                             abstention_thresholds=THRESHOLDS)  # fmt: skip
    value = result.value
    assert value.tracking_number is None  # no span of the notice has a tracking number's form
    assert value.order_number == item["expected"]["order_number"]
    for copied in (value.carrier, value.order_number, value.recipient):
        assert copied is None or copied in item["document"]  # grounded: spans only


@pytest.mark.local
def test_a_field_under_its_threshold_abstains_and_the_value_is_judged_again(
    embedded: Any,
) -> None:
    item = _notice(0)
    always = FieldThreshold(1.0, 1.0, 0.0, 1, 1)  # every written recipient is under 1.0
    thresholds = Thresholds({"/recipient": always})
    client = StructuredClient(embedded, retries=1)
    plain = client.generate(ShipmentNotice, prompt=item["prompt"], source=item["document"],
                            max_tokens=200, abstention="guided",
                            abstention_thresholds={})  # by hand: never on the mass  # fmt: skip
    guided = client.generate(ShipmentNotice, prompt=item["prompt"], source=item["document"],
                             max_tokens=200, abstention="guided",
                             abstention_thresholds=thresholds)  # fmt: skip
    assert plain.value.recipient is not None  # the model wrote one (no threshold: no mass step)
    said = [n for n in guided.notes if n.kind == "abstention"]
    assert len(said) == 1 and "surviving mass" in said[0].written
    assert guided.value.recipient is None
    assert [n.pointer for n in guided.notes if n.kind == "abstained"] == ["/recipient"]
    assert guided.value.order_number == plain.value.order_number  # the rest as decoded


class NoticeWithRecipient(ShipmentNotice):
    """A recipient may be null in the schema, but this contract's own check refuses a notice
    without one (a check the nulls of an abstention can break)."""

    @model_validator(mode="after")
    def _a_recipient(self) -> NoticeWithRecipient:
        if self.recipient is None:
            raise ValueError("a notice needs its recipient")
        return self


@pytest.mark.local
def test_an_abstention_the_contract_refuses_keeps_the_value_written_with_a_note(
    embedded: Any,
) -> None:
    item = _notice(0)
    always = FieldThreshold(1.0, 1.0, 0.0, 1, 1)  # every written recipient is under 1.0
    client = StructuredClient(embedded, retries=0)
    result = client.generate(NoticeWithRecipient, prompt=item["prompt"], source=item["document"],
                             max_tokens=200, abstention="guided",
                             abstention_thresholds=Thresholds({"/recipient": always}))  # fmt: skip
    # The model's document was valid: with the recipient nulled the contract refuses it, so the
    # value stays as written (no error carrying a document the model never wrote).
    assert result.value.recipient is not None
    assert json.loads(result.text)["recipient"] == result.value.recipient
    kept = [n for n in result.notes if n.kind == KEPT_NOTE]
    assert [(n.pointer, n.received) for n in kept] == [("/recipient", result.value.recipient)]
    said = [n for n in result.notes if n.kind == "abstention"]
    assert len(said) == 1 and "a notice needs its recipient" in said[0].written
    assert not [n for n in result.notes if n.kind == "abstained"]


def test_a_pointer_into_a_list_by_a_digit_that_is_not_a_number_names_nothing() -> None:
    # "²" is a digit to `str.isdigit` but no number to `int`: a pointer naming a list's item by
    # it names nothing (as `/items/x` does), not a raw ValueError.
    from sdk.engine.kinds.guided import _abstained

    data = {"items": ["a", "b"], "n": 3}
    assert _abstained(data, "/items/²") is None and data == {"items": ["a", "b"], "n": 3}
    assert _abstained(data, "/items/01") is None and data["items"] == ["a", "b"]  # as `lookup`
    assert _abstained(data, "/n") is None and data["n"] == 3  # only an anchored string abstains
    assert _abstained("a", "") is None  # the whole reply is in no container
    assert _abstained(data, "/items/1") == "b" and data == {"items": ["a", None], "n": 3}
