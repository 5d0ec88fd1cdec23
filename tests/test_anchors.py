"""Anchors (issue 32 item 4): a `Verbatim` field confined to the regions its labels open, and a
value refused where it follows another party's label. Grammar acceptance is llguidance's, over a
byte-level vocabulary (no model); the anchored eval arm runs on a scripted provider.
"""

from __future__ import annotations

from typing import Annotated
from typing import Any

import pytest
from pydantic import Field

from sdk import Contract
from sdk import Verbatim
from sdk.schema.grounding import Anchor
from sdk.schema.grounding import anchor_regions
from sdk.schema.grounding import anchored
from sdk.schema.grounding import grounded_lark
from tests.grammar_support import lark_accepts
from tests.grammar_support import lark_accepts_prefix

NOTICE = (
    "Subject: Your parcel from Fabrikam Home is on its way\n\n"
    "Hello Jonah Whitaker,\n\nyour parcel is on its way with UPS.\nOrder: FH-5079207\n"
)


class Anchored(Contract):
    carrier: Annotated[Verbatim | None, Anchor(not_after=("from",))] = Field(
        description="The delivery company."
    )
    recipient: Annotated[Verbatim | None, Anchor(after=("Hello", "Dear", "addressed to"))] = Field(
        description="Who the parcel is for."
    )
    order: Annotated[Verbatim | None, Anchor(after=("Order:",))] = Field(
        pattern=r"^[A-Z]{2}-[0-9]{7}$", description="The order number."
    )


SCHEMA = Anchored.json_schema()


def _doc(carrier: str | None, recipient: str | None, order: str | None) -> str:
    def text(value: str | None) -> str:
        return "null" if value is None else f'"{value}"'

    return f'{{"carrier": {text(carrier)}, "recipient": {text(recipient)}, "order": {text(order)}}}'


def test_the_anchor_is_written_into_the_schema_beside_the_field() -> None:
    recipient = SCHEMA["properties"]["recipient"]
    assert recipient["x-anchor"] == {"after": ["Hello", "Dear", "addressed to"], "not_after": []}
    with pytest.raises(ValueError, match="non-empty"):
        Anchor(after=(" ",))


def test_regions_are_the_rest_of_each_line_a_label_opens_matched_as_whole_words() -> None:
    regions = anchor_regions(NOTICE, Anchor(after=("hello",)))  # case-insensitive
    assert [NOTICE[low:high] for low, high in regions] == ["Jonah Whitaker,"]
    # "Order" inside "Orders" is not the label; a two-word label spans any whitespace.
    assert anchor_regions("Orders: 1\nOrder 2", Anchor(after=("Order",))) == [(16, 17)]
    assert anchor_regions("addressed\n to Ana Vogt", Anchor(after=("addressed to",))) == [(14, 22)]
    assert anchor_regions("no label here", Anchor(after=("Dear",))) == []
    assert anchor_regions("text", Anchor(not_after=("from",))) == [(0, 4)]


def test_the_check_refuses_a_value_outside_its_regions_or_after_another_partys_label() -> None:
    sender = Anchor(not_after=("from",))
    assert not anchored("Fabrikam Home", NOTICE, sender)
    assert not anchored("Fabrikam", NOTICE, sender)
    assert anchored("UPS", NOTICE, sender)
    assert anchored("Home", NOTICE, sender)  # not right after the label
    greeting = Anchor(after=("Hello",))
    assert anchored("Jonah Whitaker", NOTICE, greeting)
    assert not anchored("UPS", NOTICE, greeting)
    assert not anchored("Jonah Whit", NOTICE, greeting)  # a whole span, as ever
    # One occurrence where the anchor allows it is enough.
    assert anchored("Kestrel", "from Kestrel\nwith Kestrel", sender)


def test_the_grammar_offers_only_spans_of_the_regions_an_anchor_opens() -> None:
    grammar = grounded_lark(SCHEMA, NOTICE)
    assert lark_accepts(grammar, _doc("Fabrikam Home", "Jonah Whitaker", "FH-5079207"))
    assert lark_accepts(grammar, _doc("UPS", "Jonah", None))
    # The recipient only from the greeting's line, the order only after its label.
    assert not lark_accepts_prefix(grammar, '{"carrier": null, "recipient": "UPS')
    assert not lark_accepts_prefix(grammar, '{"carrier": null, "recipient": "Fabrikam')
    assert not lark_accepts(grammar, _doc(None, "Jonah Whitaker", "FH-5079208"))


def test_a_region_without_a_word_is_no_region() -> None:
    # "Hello,": the greeting names nobody. The recipient can only be null (before the fix the
    # region "," was offered, a dead end for a `Verbatim`, which holds a word).
    source = "Hello,\n\nyour parcel from Lumen Books is on its way with UPS."
    grammar = grounded_lark(SCHEMA, source, prefer_values=True)
    assert lark_accepts(grammar, _doc("UPS", None, None))
    assert not lark_accepts_prefix(grammar, '{"carrier": "UPS", "recipient": "')


def test_where_no_label_occurs_an_anchored_field_can_only_be_null() -> None:
    source = "Your parcel from Lumen Books (order LB-0895041) arrives today."
    grammar = grounded_lark(SCHEMA, source, prefer_values=True)
    assert lark_accepts(grammar, _doc("Lumen Books", None, None))
    assert not lark_accepts_prefix(grammar, '{"carrier": "Lumen Books", "recipient": "')

    # Unanchored, the same field takes any span (prefer_values: null is not even offered).
    class Plain(Contract):
        recipient: Verbatim | None = None

    plain = grounded_lark(Plain.json_schema(), source, prefer_values=True)
    assert lark_accepts(plain, '{"recipient": "Lumen Books"}')
    assert not lark_accepts(plain, '{"recipient": null}')


# --- the anchored eval arm, through the real client on a scripted provider ---


class Parcel(Contract):
    carrier: Verbatim | None = Field(description="The delivery company.")
    recipient: Verbatim | None = Field(description="Who the parcel is for.")


PARCEL_NOTICES = {
    "a": "Your parcel from Lumen Books is on its way with UPS.\nHello Ana Vogt,",
    "b": "Your parcel from Fabrikam Home arrives today.",
}
PARCEL_LABELS = {
    "a": {"carrier": "UPS", "recipient": "Ana Vogt"},
    "b": {"carrier": None, "recipient": None},
}
PARCEL_ANCHORS = {
    "carrier": Anchor(not_after=("from",)),
    "recipient": Anchor(after=("Hello",), not_after=("from",)),
}


def _wrong_party(request: Any) -> Any:
    """A model that copies the shop's name wherever it can (a span of the source either way),
    under a grounded grammar: a field whose contract confines it to its `after` labels' lines
    gets a span of those lines, or `null` where none is in the notice."""
    item = next(i for i, text in PARCEL_NOTICES.items() if text in request.messages[-1].text)
    shop = "Lumen Books" if item == "a" else "Fabrikam Home"
    confined = request.output.contract.json_schema()["properties"]["recipient"].get("x-anchor")
    recipient = "Ana Vogt" if item == "a" else None if confined else shop
    return {"carrier": shop, "recipient": recipient}


def test_the_anchored_arm_abstains_on_another_partys_value_and_sends_its_anchors() -> None:
    import json

    from sdk import StructuredClient
    from sdk.abstention import Sample
    from sdk.abstention import calibrate
    from sdk.eval import ArmUnavailable
    from sdk.eval import parse_dataset
    from sdk.eval import prepare_arm
    from sdk.eval import run_eval
    from sdk.providers import TestProvider

    provider = TestProvider([_wrong_party] * 10)
    client = StructuredClient(provider, retries=0)
    rows = [
        json.dumps({"id": i, "document": PARCEL_NOTICES[i], "expected": PARCEL_LABELS[i]})
        for i in PARCEL_NOTICES
    ]
    items = parse_dataset(rows, Parcel)
    thresholds = calibrate([Sample("/carrier", 0.5, False, True)])
    with pytest.raises(ArmUnavailable, match="--anchors"):
        prepare_arm("anchored", Parcel, client, thresholds=thresholds)
    run = run_eval(
        items,
        Parcel,
        client,
        arms=["mass_aware", "anchored"],
        thresholds=thresholds,
        anchors=PARCEL_ANCHORS,
    )
    mass = {o.item: o.value for o in run.outcomes_of("mass_aware")}
    held = {o.item: o.value for o in run.outcomes_of("anchored")}
    assert mass["b"] == {"carrier": "Fabrikam Home", "recipient": "Fabrikam Home"}
    assert held["b"] == {"carrier": None, "recipient": None}  # the shop's name, refused
    assert held["a"] == {"carrier": None, "recipient": "Ana Vogt"}
    recall = {arm: run.metrics[arm].abstention_recall for arm in ("mass_aware", "anchored")}
    assert {arm: r.estimate for arm, r in recall.items() if r is not None} == {
        "mass_aware": 0.0,
        "anchored": 1.0,
    }
    # The anchored arm's calls carry the `after` labels in their contract's schema (the grammar's
    # input, and the parser's); `not_after` is the arm's to check, after decoding: in the
    # contract the parser would refuse the shop's name and retry where the arm abstains.
    # Each item goes through mass_aware, then anchored.
    asked = [r.output.contract.json_schema() for r in provider.requests]  # type: ignore[union-attr]
    anchor = Anchor(after=PARCEL_ANCHORS["recipient"].after).to_json()
    assert [s["properties"]["recipient"].get("x-anchor") for s in asked] == [None, anchor] * 2
    assert run.config["anchors"]["carrier"] == {"after": [], "not_after": ["from"]}


def test_anchors_load_from_a_file_and_refuse_what_is_not_one(tmp_path: Any) -> None:
    from sdk.schema.grounding import load_anchors

    path = tmp_path / "anchors.json"
    path.write_text('{"recipient": {"after": ["Dear"]}, "carrier": {"not_after": ["from"]}}')
    assert load_anchors(path) == {
        "recipient": Anchor(after=("Dear",)),
        "carrier": Anchor(not_after=("from",)),
    }
    path.write_text('{"recipient": {"before": ["Dear"]}}')
    with pytest.raises(ValueError, match="recipient"):
        load_anchors(path)
    path.write_text('{"recipient": {"after": "Dear"}}')
    with pytest.raises(ValueError, match="lists"):
        load_anchors(path)


# --- the parser: every route's check after decoding ---


def _parse(contract: type[Contract], value: dict[str, Any], source: str | None) -> Any:
    import json

    from sdk.parsing import parse

    return parse(contract, json.dumps(value), stop_reason="end_turn", source=source).value


def test_the_parser_refuses_a_value_outside_its_anchor_naming_the_field_and_keeping_the_text() -> (
    None
):
    import json

    from sdk import CheckFailed
    from sdk import SourceMissing
    from sdk.parsing import parse
    from sdk.schema.grounding import ANCHOR_KEY
    from sdk.stop_reason import StopReason

    right = {"carrier": "UPS", "recipient": "Jonah Whitaker", "order": "FH-5079207"}
    assert _parse(Anchored, right, NOTICE) == Anchored.model_validate(right)
    assert _parse(Anchored, dict.fromkeys(right), NOTICE) == Anchored.model_validate(
        dict.fromkeys(right)
    )
    wrong = {"carrier": "Fabrikam Home", "recipient": "UPS", "order": "FH-5079207"}
    text = json.dumps(wrong)
    with pytest.raises(CheckFailed) as refused:
        parse(Anchored, text, stop_reason="end_turn", source=NOTICE)
    error = refused.value
    assert [(v.pointer, v.keyword) for v in error.violations] == [
        ("/carrier", ANCHOR_KEY),
        ("/recipient", ANCHOR_KEY),
    ]
    assert error.violations[0].message == (
        "value in field 'carrier' is not where its anchor allows: 'Fabrikam Home': it follows "
        "'from' (another party's value)"
    )
    assert "'UPS': it is on no line after its labels ('Hello', 'Dear', 'addressed to')" in (
        error.violations[1].message
    )
    assert error.text == text and error.stop_reason is StopReason.END_TURN
    # A value that is no whole span is the whole-span check's (one violation, not two).
    with pytest.raises(CheckFailed) as cut:
        _parse(Anchored, {**right, "recipient": "Jonah Whit"}, NOTICE)
    assert [(v.pointer, v.keyword) for v in cut.value.violations] == [("/recipient", "x-verbatim")]
    # Without a source nothing can be checked, anchors included: as for any Verbatim.
    with pytest.raises(SourceMissing):
        _parse(Anchored, right, None)


def test_an_anchor_on_a_list_of_copies_checks_each_item_at_its_pointer() -> None:
    from sdk import CheckFailed

    class Guests(Contract):
        names: list[Annotated[Verbatim, Anchor(after=("Guest:",))]]

    source = "Host: Ana Vogt\nGuest: Bo Li\nGuest: Cy Ng\n"
    assert _parse(Guests, {"names": ["Bo Li", "Cy"]}, source).names == ["Bo Li", "Cy"]
    with pytest.raises(CheckFailed) as refused:
        _parse(Guests, {"names": ["Bo Li", "Ana Vogt", "Cy Ng"]}, source)
    assert [v.pointer for v in refused.value.violations] == ["/names/1"]


# --- hostile input: the same answers from the check and from both grammars ---


def _whole_spans(source: str, most: int = 4) -> list[str]:
    """Every run of up to `most` chunks of `source` that a `Verbatim` may be."""
    from sdk.schema.grounding import source_chunks
    from sdk.schema.grounding import whole_span

    chunks = source_chunks(source)
    runs = {"".join(chunks[i : i + n]) for i in range(len(chunks)) for n in range(1, most + 1)}
    return sorted(run for run in runs if whole_span(run, source))


HOSTILE = {
    # label, source, the values the anchor allows among the source's whole spans
    "label many times": (
        ("Hello",),
        "Hello Ana\nHello Ana\nhello  Bo\nHelloX Cy\nSay Hello\n",
        {"Ana", "Bo"},
    ),
    "label at the end": (("Hello",), "Your parcel is on its way with UPS. Hello", set()),
    "regex metacharacters": (
        ("Ref.(a+)*:",),
        "Ref.(a+)*: X-1\nRefx(aa)*: Y-2\nref.(A+)*:Z-3\n",
        {"X-1", "Z-3"},
    ),
    "a label that is punctuation": (("[to]",), "a [to] Bo Li\n[to]\n", {"Bo", "Li", "Bo Li"}),
    "CJK": (
        ("收件人\uff1a",),  # a full-width colon closes the label
        "寄件人\uff1a顺丰速运\n收件人\uff1a王小明\n",
        {"王", "小", "明", "王小", "小明", "王小明"},
    ),
    "CJK label inside a run": (("致",), "致王小明\n", {"王", "小", "明", "王小", "小明", "王小明"}),
    "empty source": (("Hello",), "", set()),
    "lines broken as str.splitlines breaks them": (
        ("Hello",),
        "Hello Ana\rUPS Hello Bo\r\nLumen\u2028Hello Cy\u2029Kestrel\x85Hello Di\vIdo",
        {"Ana", "Bo", "Cy", "Di"},
    ),
}


@pytest.mark.parametrize("on", ["union", "branch"])
@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_labels_give_the_same_answer_from_the_check_and_both_grammars(
    case: str, on: str
) -> None:
    import json

    from sdk.schema.grounding import grounded_gbnf
    from tests.grammar_support import grammar_accepts

    labels, source, allowed = HOSTILE[case]

    class OnUnion(Contract):
        recipient: Annotated[Verbatim | None, Anchor(after=labels)]

    class OnBranch(Contract):  # `x-anchor` on the string branch of the union, not on the union
        recipient: Annotated[Verbatim, Anchor(after=labels)] | None

    schema = (OnUnion if on == "union" else OnBranch).json_schema()
    lark, gbnf = grounded_lark(schema, source), grounded_gbnf(schema, source)
    candidates = _whole_spans(source)
    checked = {value for value in candidates if anchored(value, source, Anchor(after=labels))}
    assert checked == allowed
    for value in candidates:
        doc = json.dumps({"recipient": value}, ensure_ascii=False)
        assert lark_accepts(lark, doc) == (value in allowed), (value, "lark")
        assert grammar_accepts(gbnf, doc) == (value in allowed), (value, "gbnf")
    assert lark_accepts(lark, '{"recipient": null}')
    assert grammar_accepts(gbnf, '{"recipient": null}')


def test_a_huge_source_with_a_label_on_every_line_is_checked_in_one_pass() -> None:
    from sdk.schema.grounding import anchor_problem
    from sdk.schema.grounding import grounded_gbnf

    # 40,000 lines, each a label and a value: an occurrence-by-occurrence scan of what comes
    # before each one (as the first version did) reads the source 40,000 times.
    source = "from Kestrel Express\nHello Ana\n" * 20_000 + "Kestrel Express\n"
    sender = Anchor(not_after=("from",))
    assert anchored("Kestrel Express", source, sender)  # the last line: no label before it
    assert not anchored("Kestrel Express", source[: -len("Kestrel Express\n")], sender)
    greeting = Anchor(after=("Hello",))
    assert len(anchor_regions(source, greeting)) == 20_000
    assert anchored("Ana", source, greeting) and not anchored("Kestrel", source, greeting)
    assert anchor_problem("Kestrel", source, greeting) == (
        "it is on no line after its labels ('Hello')"
    )

    class ForWhom(Contract):
        recipient: Annotated[Verbatim | None, Anchor(after=("Hello",))]

    grammar = grounded_gbnf(ForWhom.json_schema(), source)
    assert grammar.count('"Ana"') == 1  # one region text, however often the label occurs
    assert "Kestrel" not in grammar  # the only copied field's spans: the greetings' lines


def test_an_anchor_takes_tuples_of_labels_only() -> None:
    with pytest.raises(TypeError, match="tuple of labels"):
        Anchor(after="Dear")  # type: ignore[arg-type]
    assert Anchor(after=["Dear"]).after == ("Dear",)  # type: ignore[arg-type]


def test_a_quote_under_an_anchor_is_held_to_it_as_a_verbatim_is() -> None:
    """A `SourceQuote` may be any span of the source (not only whole words): under an anchor,
    one occurrence where the anchor allows passes, and one the anchor refuses is the same
    violation as a `Verbatim`'s, at the same pointer."""
    from sdk import CheckFailed
    from sdk import SourceQuote

    class Evidence(Contract):
        recipient: Annotated[SourceQuote, Anchor(after=("Hello",), not_after=("from",))]

    source = "A parcel from Lumen Books.\nHello Ana Vogt, from UPS\n"
    for allowed in ("Ana Vogt", "Ana Vo", "na Vogt, from UPS", ""):
        assert _parse(Evidence, {"recipient": allowed}, source).recipient == allowed
    refused = {
        "Lumen Books": "it is on no line after its labels ('Hello')",
        "Lumen Bo": "it is on no line after its labels ('Hello')",  # cut: still a quote
        "UPS": "it follows 'from' (another party's value)",
    }
    for value, reason in refused.items():
        with pytest.raises(CheckFailed) as failed:
            _parse(Evidence, {"recipient": value}, source)
        [violation] = failed.value.violations
        assert (violation.pointer, violation.keyword) == ("/recipient", "x-anchor")
        assert violation.message == (
            f"value in field 'recipient' is not where its anchor allows: {value!r}: {reason}"
        )
    # Nowhere in the source: the quote's own violation, not the anchor's.
    with pytest.raises(CheckFailed) as invented:
        _parse(Evidence, {"recipient": "Zed"}, source)
    assert [v.keyword for v in invented.value.violations] == ["x-source-quote"]


class Party(Contract):
    name: Verbatim | None


class Letter(Contract):
    """One sub-model (a `$ref` in the schema) under two anchors, and once under none."""

    sender: Annotated[Party, Anchor(after=("From:",))]
    recipient: Annotated[Party, Anchor(after=("To:",))]
    witness: Party


def test_a_shared_sub_model_under_two_anchors_is_confined_by_each_in_both_grammars() -> None:
    """Each grammar wrote a `$ref`'s rule once, under the first anchor that reached it (Lark),
    or under none (GBNF: its rules are written after the anchor's walk): now each anchor has
    its own rule, and the check and both grammars answer alike."""
    import itertools
    import json

    from sdk import CheckFailed
    from sdk.schema.canonical import shared_schema
    from sdk.schema.grounding import grounded_gbnf
    from tests.grammar_support import grammar_accepts

    source = "From: Ana Vogt\nTo: Bo Li\nSeen by Cy Ng\n"
    schema = shared_schema(Letter)
    assert schema["properties"]["sender"]["$ref"] == schema["properties"]["recipient"]["$ref"]
    lark, gbnf = grounded_lark(schema, source), grounded_gbnf(schema, source)
    names = ("Ana Vogt", "Bo Li", "Cy Ng", None)
    for sender, recipient, witness in itertools.product(names, names, ("Cy Ng", "Ana")):
        value = {"sender": {"name": sender}, "recipient": {"name": recipient},
                 "witness": {"name": witness}}  # fmt: skip
        allowed = sender in ("Ana Vogt", None) and recipient in ("Bo Li", None)
        doc = json.dumps(value)
        assert lark_accepts(lark, doc) == allowed, (value, "lark")
        assert grammar_accepts(gbnf, doc) == allowed, (value, "gbnf")
        try:
            _parse(Letter, value, source)
        except CheckFailed as error:
            assert not allowed and {v.keyword for v in error.violations} == {"x-anchor"}
        else:
            assert allowed, (value, "the check")
    # A document without the recipient's label: the recipient's name can only be null there,
    # the sender's and the witness's are still spans.
    without = "From: Ana Vogt\nSeen by Cy Ng\n"
    lark, gbnf = grounded_lark(schema, without), grounded_gbnf(schema, without)
    for recipient, allowed in (("Ana Vogt", False), (None, True)):
        doc = json.dumps({"sender": {"name": "Ana Vogt"}, "recipient": {"name": recipient},
                          "witness": {"name": "Cy Ng"}})  # fmt: skip
        assert lark_accepts(lark, doc) == allowed and grammar_accepts(gbnf, doc) == allowed


_HOSTILE_CHECK = """
from sdk.schema.grounding import Anchor, anchor_problem
n = 500_000
value = " ".join(["a"] * (n // 2))
anchor = Anchor(after=("Dear",))
print(anchor_problem(value, "Zed\\n" + "a " * n, anchor))
print(anchor_problem(value, "Dear Ana\\n" + "a " * n, anchor))
"""


def test_a_value_recurring_all_over_a_hostile_document_is_checked_without_rescanning_it() -> None:
    # A periodic value the model wrote (250,000 words of "a") in a 1 MB document of "a a a ...":
    # it occurs at every other character. Scanning each occurrence (half a million compares of
    # 500 KB each) takes many minutes; with no region, or with the regions searched only, the
    # answer is known at once. The check runs in a child process with a bounded wait.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _HOSTILE_CHECK], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "no line of the source has one of its labels ('Dear') and text after it",
        "it is on no line after its labels ('Dear')",
    ]


_OVERLAPPING_CHECK = """
from sdk.schema.grounding import Anchor, anchor_problem
# A value that overlaps itself (it recurs 7 characters on) in a 2 MB document of its line,
# every occurrence right after the `not_after` label, so each one must be looked at.
source = "from a " * 300_000
value = "a from " * 30_000 + "a"
anchor = Anchor(not_after=("from",))
print(anchor_problem(value, source, anchor))
print(anchor_problem(value, source, anchor, whole=False))  # a SourceQuote's: anywhere
print(anchor_problem(value, "to " + source, Anchor(after=("to",), not_after=("from",))))
"""


def test_a_value_overlapping_itself_after_its_not_after_label_is_checked_in_linear_time() -> None:
    # Each occurrence was found by restarting `str.find` one character on, comparing the whole
    # 210 KB value again at each of 270,000 places (half the size took 105 s; now about 2 s for
    # the three checks). The check runs in a child process with a bounded wait.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _OVERLAPPING_CHECK], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["it follows 'from' (another party's value)"] * 3


def test_a_hand_written_anchor_with_a_string_of_labels_is_refused_not_spelled_out() -> None:
    from sdk.schema.grounding import anchor_of

    with pytest.raises(TypeError, match=r"x-anchor .*tuple of labels, not 'Dear'"):
        anchor_of({"type": "string", "x-anchor": {"after": "Dear"}})
    with pytest.raises(TypeError, match="not_after"):
        anchor_of({"type": "string", "x-anchor": {"not_after": "from"}})
    assert anchor_of({"x-anchor": {"after": ["Dear"]}}) == Anchor(after=("Dear",))
