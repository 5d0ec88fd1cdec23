"""An eval with a prompt template: dataset items give the template's variables, every arm asks
with the rendered template, every outcome row names it, and a changed template reruns the items
on resume (their digest holds the template's fingerprint)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from sdk import Prompt
from sdk import StructuredClient
from sdk.eval import DatasetError
from sdk.eval import load_results
from sdk.eval import parse_dataset
from sdk.eval import run_eval
from sdk.providers import Completion
from sdk.providers import CompletionRequest
from sdk.providers import TestProvider
from sdk.stop_reason import StopReason
from tests.test_eval import Ticket


class TicketPrompt(Prompt):
    version = 1
    system = "You read {{ team }}'s tickets."
    template = "Fill in the {{ contract.name }} ({{ contract.fields | length }} fields)."

    class Inputs(BaseModel):
        team: str


class TicketPromptV2(Prompt):
    name = "TicketPrompt"
    version = 2
    system = "You read {{ team }}'s support tickets."
    template = TicketPrompt.template
    Inputs = TicketPrompt.Inputs


def dataset(**extra: object) -> list[str]:
    return [
        json.dumps(
            {
                "id": f"i{n}",
                "document": f"ticket i{n}",
                "variables": {"team": "billing"},
                "expected": {"colour": "red"},
                **extra,
            }
        )
        for n in (1, 2, 3)
    ]


def scripted() -> tuple[TestProvider, list[CompletionRequest]]:
    asked: list[CompletionRequest] = []

    def reply(request: CompletionRequest) -> Completion:
        asked.append(request)
        text = json.dumps({"reasoning": "r", "amount": None, "colour": "red"})
        return Completion(text, StopReason.END_TURN, "end_turn")

    return TestProvider([reply], repeat=True), asked


def test_every_arm_asks_with_the_template_and_every_row_names_it(tmp_path: Path) -> None:
    provider, asked = scripted()
    items = parse_dataset(dataset(), Ticket, prompt=TicketPrompt)
    run = run_eval(items, Ticket, StructuredClient(provider, retries=0),
                   arms=("constrained", "unconstrained"), out=tmp_path, resamples=200)  # fmt: skip
    assert len(asked) == 6
    for request in asked:
        assert request.system == "You read billing's tickets."
        assert request.messages[0].text.startswith("Fill in the Ticket (3 fields).\n\n<document>")
    info = TicketPrompt.info()
    named = {"name": "TicketPrompt", "version": 1, "fingerprint": info.fingerprint}
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert [row["prompt"] for row in saved["outcomes"]] == [named] * 6
    assert saved["config"]["prompt"] == named
    assert saved["items"][0]["template"] == {**named, "variables": {"team": "billing"}}
    assert run.metrics["constrained"].accuracy.estimate == 1.0
    assert load_results(tmp_path, resamples=200).outcomes["constrained", "i1"].prompt == named


def test_a_changed_template_reruns_the_items(tmp_path: Path) -> None:
    provider, asked = scripted()
    client = StructuredClient(provider, retries=0)
    items = parse_dataset(dataset(), Ticket, prompt=TicketPrompt)
    run_eval(items, Ticket, client, arms=("constrained",), out=tmp_path, resamples=200)
    run_eval(items, Ticket, client, arms=("constrained",), out=tmp_path, resamples=200)
    assert len(asked) == 3  # the same template: resumed, nothing asked again
    changed = parse_dataset(dataset(), Ticket, prompt=TicketPromptV2)
    run = run_eval(changed, Ticket, client, arms=("constrained",), out=tmp_path, resamples=200)
    assert len(asked) == 6
    assert asked[-1].system == "You read billing's support tickets."
    assert {o.prompt["version"] for o in run.outcomes.values() if o.prompt} == {2}


@pytest.mark.parametrize(
    ("extra", "prompt", "message"),
    [
        ({"variables": {"team": 7}}, TicketPrompt, "team"),
        ({"variables": {"team": "x", "queue": "y"}}, TicketPrompt, "queue"),
        ({"prompt": "Read it."}, TicketPrompt, "not a 'prompt'"),
        ({"variables": {"team": "x"}}, None, "'variables' are for a prompt template"),
    ],
)
def test_a_bad_item_of_a_template_s_dataset_fails_on_its_line(
    extra: dict[str, object], prompt: type[Prompt] | None, message: str
) -> None:
    lines = (
        dataset()
        if prompt is not None
        else [json.dumps({"id": "i0", "document": "d", "expected": {"colour": "red"}})] * 2
    )
    lines[1] = json.dumps({**json.loads(lines[1]), "id": "i9", **extra})
    with pytest.raises(DatasetError, match=message) as caught:
        parse_dataset(lines, Ticket, prompt=prompt)
    assert "<dataset>:2" in str(caught.value)


def test_an_item_whose_template_renders_empty_fails_on_its_line() -> None:
    """A template that renders to blank text for an item's variables is that item's
    `DatasetError`, naming its line, like any bad variable (it was a bare `ValueError`,
    "Note rendered to an empty prompt", naming no line)."""

    class Note(Prompt):
        template = "{{ note }}"

        class Inputs(BaseModel):
            note: str

    item = {"document": "d", "expected": {"colour": "red"}}
    lines = [
        json.dumps({"id": f"i{n}", "variables": {"note": note}, **item})
        for n, note in ((1, "Read the ticket."), (2, "   "))
    ]
    with pytest.raises(DatasetError, match="Note rendered to an empty prompt") as caught:
        parse_dataset(lines, Ticket, prompt=Note)
    assert "<dataset>:2" in str(caught.value)


def test_the_committed_compact_prompts_table_is_its_results_rendered() -> None:
    from bench.compact_prompts import OUT
    from bench.compact_prompts import TEMPLATES
    from bench.compact_prompts import table

    runs = {t.name: load_results(OUT / t.name) for t in TEMPLATES}
    for name, run in runs.items():  # every row names the template it was asked with
        assert {o.prompt["name"] for o in run.outcomes.values() if o.prompt} == {name}
    committed = (OUT / "README.md").read_text(encoding="utf-8")
    assert committed == table(runs), "run: nice .venv/bin/python bench/compact_prompts.py"
