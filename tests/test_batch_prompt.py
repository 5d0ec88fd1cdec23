"""Batch jobs with a prompt template (`BatchJob.create(..., prompt=...)`, `sdk batch run
--prompt`): input lines carry the template's variables, each is rendered for the job's contract
(a bad variable is refused when the input is indexed), and every output line names the prompt
(name, version, fingerprint)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from contracts import Decision
from sdk import Prompt
from sdk import StructuredClient
from sdk.batch import BatchInputError
from sdk.batch import BatchJob
from sdk.batch import JobMismatch
from sdk.batch import JobSettings
from sdk.batch import LocalBackend
from sdk.providers import AnthropicProvider
from tests.batch_support import INVALID_JSON
from tests.batch_support import VALID
from tests.batch_support import AnthropicBatchAPI
from tests.batch_support import Script
from tests.batch_support import anthropic_backend
from tests.batch_support import by_id
from tests.batch_support import fanout
from tests.batch_support import job_for
from tests.batch_support import local_clients
from tests.batch_support import read_output
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply


class Approval(Prompt):
    version = 1
    system = "You approve purchases under {{ limit }} dollars."
    template = """
        Approve this purchase?

        Invoice {{ number }}: {{ amount }} for {{ po }}.
        """

    class Inputs(BaseModel):
        limit: int
        number: int
        amount: str
        po: str


class ApprovalV2(Prompt):
    name = "Approval"
    version = 2
    system = Approval.system
    template = Approval.template + "\nAnswer briefly."
    Inputs = Approval.Inputs


def write_variables(path: Path, count: int, **extra: Any) -> None:
    with open(path, "w", encoding="utf-8") as file:
        for number in range(count):
            variables = {"limit": 5000, "number": number, "amount": "$4,180.00",
                         "po": f"PO-{2000 + number}"}  # fmt: skip
            file.write(json.dumps({"id": f"doc-{number}", "variables": variables, **extra}) + "\n")


def said(prompt: type[Prompt]) -> dict[str, Any]:
    info = prompt.info()
    return {"name": info.name, "version": info.version, "fingerprint": info.fingerprint}


def test_a_hosted_job_renders_each_line_s_variables_and_every_line_names_the_prompt(
    tmp_path: Path,
) -> None:
    path = tmp_path / "items.jsonl"
    write_variables(path, 6)
    script = Script({2: [INVALID_JSON]})  # item 2 fails: its line names the prompt too
    api = AnthropicBatchAPI(script)
    job = job_for(tmp_path, path, anthropic_backend(api), prompt=Approval,
                  settings=JobSettings(retries=0))  # fmt: skip
    summary = job.run()
    assert summary.ok == 5 and summary.failed == 1

    sent = script.bodies[3][0]
    assert sent["system"] == "You approve purchases under 5000 dollars."
    assert sent["messages"][0]["content"] == (
        "Approve this purchase?\n\nInvoice 3: $4,180.00 for PO-2003."
    )
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert {json.dumps(r["prompt"]) for r in records.values()} == {json.dumps(said(Approval))}
    assert records["doc-2"]["outcome"] == "failed"
    assert list(records["doc-3"])[:5] == ["id", "outcome", "value", "schema", "prompt"]


def test_a_hosted_job_sends_a_long_template_s_literal_start_as_a_live_call_does(
    tmp_path: Path,
) -> None:
    """A template's literal start is the cached prefix of a live call on Anthropic (its own
    text block with a `cache_control` breakpoint); a batch line with variables is rendered by
    the job, and its request is the live call's too: the start was not marked there, so every
    item of a batch wrote the whole turn to the cache and none read the shared start."""

    class Review(Prompt):
        template = "Refunds are allowed within 30 days of purchase. " * 220 + "\n\n{{ ticket }}"

        class Inputs(BaseModel):
            ticket: str

    bodies: list[dict[str, Any]] = []

    def answer(custom_id: str, body: dict[str, Any], attempt: int) -> str:
        bodies.append(body)
        return VALID

    path = tmp_path / "items.jsonl"
    tickets = ["Order 1009 is late.", "Order 77 arrived broken."]
    path.write_text("".join(json.dumps({"id": f"t{n}", "variables": {"ticket": ticket}}) + "\n"
                            for n, ticket in enumerate(tickets)))  # fmt: skip
    job = job_for(tmp_path, path, anthropic_backend(AnthropicBatchAPI(answer)), prompt=Review)
    assert job.run().ok == 2
    for ticket in tickets:
        wire = Wire(anthropic_reply(text=VALID))
        provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
        StructuredClient(provider).generate(Decision, prompt=Review(ticket=ticket))
        live = json.loads(json.dumps(wire.body))
        [sent] = [b for b in bodies if b["messages"][0]["content"][-1]["text"] == ticket]
        assert sent == live
        assert sent["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert bodies[0]["messages"][0]["content"][0] == bodies[1]["messages"][0]["content"][0]


def test_a_local_job_renders_the_prompt_for_each_call(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_variables(path, 12)
    counter: Counter[str] = Counter()
    backend = LocalBackend(local_clients(counter, {}), flush_every=5)
    summary = job_for(tmp_path, path, backend, prompt=Approval).run()
    assert summary.ok == 12
    assert counter["a"] + counter["b"] == 12  # the server found "Invoice N:" in each prompt
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert all(record["prompt"] == said(Approval) for record in records.values())


def test_a_job_without_a_prompt_writes_its_lines_as_before(tmp_path: Path) -> None:
    from tests.batch_support import write_items

    path = tmp_path / "items.jsonl"
    write_items(path, 3)
    counter: Counter[str] = Counter()
    job_for(tmp_path, path, LocalBackend(local_clients(counter, {}))).run()
    assert all("prompt" not in r for r in read_output(tmp_path / "out.jsonl"))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"variables": {"limit": "5000", "number": 1, "amount": "$1", "po": "PO-1"}},
         "limit"),  # strict: a number is never a string
        ({"variables": {"limit": 1, "number": 1, "amount": "$1"}}, "po"),
        ({"variables": {"limit": 1, "number": 1, "amount": "$1", "po": "x", "vendor": "y"}},
         "vendor"),
        ({"variables": ["not", "an", "object"]}, "JSON object"),
        ({"prompt": "Approve this purchase?"}, "give its `variables`"),
        ({"variables": {"limit": 1, "number": 1, "amount": "$1", "po": "x"}, "system": "Hi"},
         "may not also set"),
    ],
)  # fmt: skip
def test_a_bad_line_of_a_prompt_s_job_is_refused_when_indexed_naming_the_line(
    tmp_path: Path, line: dict[str, Any], message: str
) -> None:
    path = tmp_path / "items.jsonl"
    write_variables(path, 2)
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps({"id": "bad", **line}) + "\n")
    api = AnthropicBatchAPI(Script())
    job = job_for(tmp_path, path, anthropic_backend(api), prompt=Approval)
    with pytest.raises(BatchInputError, match=message) as caught:
        job.run()
    assert f"{path}:3" in str(caught.value) and "id bad" in str(caught.value)
    assert api.batches == {}  # nothing was sent


def test_variables_need_a_job_with_a_prompt(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_variables(path, 1)
    job = job_for(tmp_path, path, anthropic_backend(AnthropicBatchAPI(Script())))
    with pytest.raises(BatchInputError, match="--prompt"):
        job.run()


def test_a_job_refuses_another_prompt_unless_updated(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_variables(path, 2)
    api = AnthropicBatchAPI(Script())
    job_for(tmp_path, path, anthropic_backend(api), prompt=Approval).close()
    with pytest.raises(JobMismatch, match="prompt"):
        job_for(tmp_path, path, anthropic_backend(api), prompt=ApprovalV2)
    with pytest.raises(JobMismatch, match="Approval v1"):
        BatchJob.open(tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api))
    with pytest.raises(JobMismatch, match="Approval v1"):
        BatchJob.open(tmp_path / "job.db", contract=Decision, backend=anthropic_backend(api),
                      prompt=ApprovalV2)  # fmt: skip
    updated = job_for(tmp_path, path, anthropic_backend(api), prompt=ApprovalV2, update=True)
    assert updated.run().ok == 2
    records = read_output(tmp_path / "out.jsonl")
    assert all(record["prompt"]["version"] == 2 for record in records)


def test_the_cli_runs_and_resumes_a_prompt_s_job(tmp_path: Path) -> None:
    with fanout(0.005) as fanout_server:
        _cli_run_and_resume(tmp_path, fanout_server)


def _cli_run_and_resume(tmp_path: Path, fanout_server: str) -> None:
    from typer.testing import CliRunner

    from sdk.cli import app

    path = tmp_path / "items.jsonl"
    write_variables(path, 4)
    out = tmp_path / "out.jsonl"
    args = ["batch", "run", "--contract", "contracts:Decision", "--provider", "llamacpp",
            "--base-url", fanout_server, "--input", str(path), "--out", str(out),
            "--prompt", "tests.test_batch_prompt:Approval"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    records = read_output(out)
    assert len(records) == 4 and all(r["prompt"] == said(Approval) for r in records)
    resumed = CliRunner().invoke(app, ["batch", "resume", "--state", f"{out}.job.db"])
    assert resumed.exit_code == 0, resumed.output  # the prompt is rebuilt from the state file
    bad = CliRunner().invoke(app, [*args[:-1], "tests.test_batch_prompt:said"])
    assert bad.exit_code == 2 and "not a prompt template" in bad.output
