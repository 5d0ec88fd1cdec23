"""A decided item's row (`sdk._rows.decided_row`): the one reading of an output line
into typed columns that `StructuredMap` and `ProcessorHooks` share (review4 note 7).

Each line is parsed once; a row rendered with a prompt template gets `PROMPT_COLUMNS` naming it,
exactly as the line a job with that template writes (`prompted`) reads. Both paths run here
without a Ray cluster, against the local test server (tests/local_support.py: real HTTP): the
map's rows are live calls, the hooks' rows are Ray's HTTP stage done by hand (each payload
posted, the reply body handed to the postprocess).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

pa = pytest.importorskip("pyarrow")

from bench.fanout_server import INVALID  # noqa: E402
from contracts import Decision  # noqa: E402
from sdk import Prompt  # noqa: E402
from sdk._rows import PROMPT_COLUMNS  # noqa: E402
from sdk._rows import decided_row  # noqa: E402
from sdk._rows import row_of  # noqa: E402
from sdk.batch import BatchJob  # noqa: E402
from sdk.batch import LocalBackend  # noqa: E402
from sdk.batch._outcome import prompted  # noqa: E402
from sdk.batch._setup import local_clients  # noqa: E402
from sdk.ray import REASK  # noqa: E402
from sdk.ray import ProcessorHooks  # noqa: E402
from sdk.ray import StructuredMap  # noqa: E402
from tests.local_support import LocalServer  # noqa: E402
from tests.local_support import Reply  # noqa: E402

PROMPT_NAMES = [name for name, _ in PROMPT_COLUMNS]


class Triage(Prompt):
    version = 2
    system = "You triage refund tickets for {{ product }}."
    template = "Approve this refund? Ticket {{ number }}: {{ ticket }}"

    class Inputs(BaseModel):
        product: str
        number: int
        ticket: str


def _spec(url: str) -> dict[str, Any]:
    # No re-ask: an invalid reply is the row's outcome in both paths (the hooks' re-ask is a
    # second pass, the map's is the client's own).
    return {"provider": "vllm", "model": "bench-model", "base_urls": [url], "retries": 0}


def _said() -> dict[str, Any]:
    return dict(zip(PROMPT_NAMES, Triage.info().to_json().values(), strict=True))


# --- the helper, on the lines a real job writes ---


def _job_lines(server: LocalServer, tmp_path: Path, ids: list[Any]) -> list[bytes]:
    """The output lines of a local `sdk batch` job (no template) over `ids`: the first reply
    invalid, so one line is a failure."""
    server.reset(Reply(text=INVALID), Reply())
    path = tmp_path / "items.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": i, "prompt": "Approve?", "source": f"Refund {i}: 12 EUR."}) + "\n"
            for i in ids
        ),
        encoding="utf-8",
    )
    job = BatchJob.create(
        tmp_path / "job.db", contract=Decision, input=path, out=tmp_path / "out.jsonl",
        backend=LocalBackend(local_clients(_spec(server.url))),
    )  # fmt: skip
    with job:
        job.run()
    return (tmp_path / "out.jsonl").read_bytes().splitlines(keepends=True)


def test_a_decided_row_reads_the_line_as_the_job_with_the_template_writes_it(
    server: LocalServer, tmp_path: Path
) -> None:
    ids: list[Any] = [7, "r-1", 0, "é/7"]  # a JSON number and a JSON string each
    lines = _job_lines(server, tmp_path, ids)
    outcomes = sorted(json.loads(line)["outcome"] for line in lines)
    assert outcomes == ["failed", "ok", "ok", "ok"]
    assert sorted(map(str, (json.loads(line)["id"] for line in lines))) == sorted(map(str, ids))
    for line in lines:
        row_id = json.loads(line)["id"]
        named = decided_row(row_id, line, Triage)
        plain = decided_row(row_id, line)
        # What the row said before: the line a job with the template writes, read back.
        assert named == {"id": row_id, **row_of(json.loads(prompted(line, Triage)))}
        assert plain == {"id": row_id, **row_of(json.loads(line))}
        assert type(named["id"]) is type(row_id)
        # The template adds its three columns and changes nothing else.
        assert {k: v for k, v in named.items() if k not in PROMPT_NAMES} == plain
        assert {name: named[name] for name in PROMPT_NAMES} == _said()
        assert not set(PROMPT_NAMES) & plain.keys()
    # An item not decided yet (a job's item left for its next pass): a null outcome alone.
    assert decided_row("r-1", None, Triage) == decided_row("r-1", None) == {
        "id": "r-1", "outcome": None
    }  # fmt: skip


# --- both paths, the same replies ---


def _rows(ids: list[Any], prompt: type[Prompt] | None) -> list[dict[str, Any]]:
    """Three rows: the first sent gets the invalid reply, the second fails before any call
    (variables missing one / nothing to ask), the third is answered."""
    first, bad, last = ids
    if prompt is None:
        return [
            {"id": first, "prompt": "Approve?", "source": "Refund 1: 12 EUR.", "variables": None},
            {"id": bad, "prompt": None, "source": None, "variables": None},
            {"id": last, "prompt": "Approve?", "source": "Refund 3: 12 EUR.", "variables": None},
        ]
    said = {"product": "Acme", "ticket": "12 EUR, unused."}
    return [
        {"id": first, "prompt": None, "source": None,
         "variables": json.dumps({**said, "number": 1})},
        {"id": bad, "prompt": None, "source": None, "variables": json.dumps({"product": "Acme"})},
        {"id": last, "prompt": None, "source": None,
         "variables": json.dumps({**said, "number": 3})},
    ]  # fmt: skip


def _hooked(server: LocalServer, hooks: ProcessorHooks, rows: list[dict[str, Any]]) -> pa.Table:
    """The rows through the hooks as Ray's HTTP processor runs them, one at a time in order."""
    out = []
    with httpx.Client(timeout=30) as http:
        for row in rows:
            prepared = hooks.http_preprocess(dict(row))
            if prepared["__inference_error__"]:  # Ray passes a failed row by every stage
                out.append({**row, **prepared})
                continue
            reply = http.post(f"{server.url}/v1/chat/completions", json=prepared["payload"])
            out.append(hooks.http_postprocess({**row, **prepared, "http_response": reply.json()}))
    names = list(dict.fromkeys(name for row in out for name in row))
    return hooks.settle(pa.Table.from_pylist([{n: row.get(n) for n in names} for row in out]))


@pytest.mark.parametrize("ids", [[1, 2, 3], ["a-1", "a-2", "0"]], ids=["numbers", "strings"])
@pytest.mark.parametrize("prompt", [None, Triage], ids=["no-template", "template"])
def test_structured_map_and_the_processor_hooks_give_the_same_rows(
    server: LocalServer, ids: list[Any], prompt: type[Prompt] | None
) -> None:
    rows = _rows(ids, prompt)
    script = (Reply(text=INVALID), Reply())
    server.reset(*script)
    factory = functools.partial(local_clients, _spec(server.url))
    mapper = StructuredMap(Decision, factory, in_flight=1, timeout=120, prompt=prompt)
    mapped = mapper(pa.Table.from_pylist(rows))
    server.reset(*script)
    hooks = ProcessorHooks(Decision, model="bench-model", retries=0, prompt=prompt)
    hooked = _hooked(server, hooks, rows)
    assert len(server.bodies("/v1/chat/completions")) == 2  # the bad row was never sent
    assert hooked.column(REASK).null_count == len(rows)  # no re-ask left
    assert hooked.drop_columns([REASK]).schema == mapped.schema
    by_map, by_hooks = mapped.to_pylist(), hooked.drop_columns([REASK]).to_pylist()
    assert by_hooks == by_map
    assert [row["id"] for row in by_map] == ids
    assert [row["outcome"] for row in by_map] == ["failed", "failed", "ok"]
    assert by_map[0]["error_type"] == "SchemaViolation" and by_map[0]["attempts"] == 1
    assert by_map[1]["error_type"] == "BatchInputError" and by_map[1]["attempts"] == 0
    for row in by_map:  # every row names the template, the failed ones too; none without
        if prompt is None:
            assert not set(PROMPT_NAMES) & row.keys()
        else:
            assert {name: row[name] for name in PROMPT_NAMES} == _said()
