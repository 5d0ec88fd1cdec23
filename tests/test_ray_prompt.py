"""A prompt template (`sdk.Prompt`) on the Ray surface (issue 33: "used everywhere a prompt
goes"): `StructuredMap(..., prompt=Triage)` and `ProcessorHooks(..., prompt=Triage)` render each
row's `variables` (a `variables` column, an object or its JSON text, else the columns the
template's `Inputs` name) as a batch job with that template renders its lines, and every row says
which prompt produced it (`PROMPT_COLUMNS`), as a batch line does.

On a local Ray cluster (`ray.init(num_cpus=2)`, tests/test_ray.py's module fixture) against the
local test server (tests/local_support.py: real HTTP on 127.0.0.1, reached from the actors, every
request body recorded). Every wait is bounded: the Ray runs through `_within` (a thread joined
with a timeout), each actor batch through `StructuredMap(timeout=)`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

ray = pytest.importorskip("ray")
pytest.importorskip("aiohttp")  # what `ray.data.llm` imports

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from ray.data import ActorPoolStrategy  # noqa: E402
from ray.data.llm import HttpRequestProcessorConfig  # noqa: E402
from ray.data.llm import build_processor  # noqa: E402

from bench.fanout_server import INVALID  # noqa: E402
from contracts import Decision  # noqa: E402
from sdk import Prompt  # noqa: E402
from sdk._rows import schema_for  # noqa: E402
from sdk.batch import BatchInputError  # noqa: E402
from sdk.batch import BatchJob  # noqa: E402
from sdk.batch import LocalBackend  # noqa: E402
from sdk.batch._setup import local_clients  # noqa: E402
from sdk.ray import COLUMNS  # noqa: E402
from sdk.ray import PROMPT_COLUMNS  # noqa: E402
from sdk.ray import REASK  # noqa: E402
from sdk.ray import ProcessorHooks  # noqa: E402
from sdk.ray import StructuredMap  # noqa: E402
from sdk.ray import line_of  # noqa: E402
from tests.batch_support import by_id  # noqa: E402
from tests.batch_support import read_output  # noqa: E402
from tests.local_support import LocalServer  # noqa: E402
from tests.test_ray import cluster  # noqa: E402, F401  (the module's local Ray cluster)
from tests.test_ray import vllm_clients  # noqa: E402
from tests.test_ray_llamacpp import _within  # noqa: E402

SECONDS = 600
"""The bound on one Ray run (a map, a processor): minutes on the shared 2-core machine."""


class Triage(Prompt):
    version = 1
    system = "You triage refund tickets for {{ product }}."
    template = """
        Approve this refund?

        Ticket {{ number }}: {{ ticket }}
        """

    class Inputs(BaseModel):
        product: str
        number: int
        ticket: str


def _variables(number: int, **more: Any) -> dict[str, Any]:
    return {"product": "Acme", "number": number, "ticket": f"{number} EUR, unused.", **more}


GOOD_OBJECTS = {f"obj-{n}": _variables(n) for n in range(1, 4)}
"""Rows whose `variables` column holds an object (an Arrow struct column)."""
GOOD_COLUMNS = {f"col-{n}": _variables(n) for n in range(4, 7)}
"""Rows whose variables are their own `product`, `number` and `ticket` columns."""
GOOD_TEXT = {f"txt-{n}": _variables(n) for n in range(7, 9)}
"""Rows whose `variables` column holds the object's JSON text."""
BAD_TYPE = {"product": "Acme", "number": "9", "ticket": "9 EUR."}  # strict: never a string
MISSING = {"product": "Acme", "number": 10}  # no ticket
BAD_LINES = {"bad-type": {"variables": BAD_TYPE}, "missing": {"variables": MISSING},
             "beside": {"variables": _variables(11), "system": "Be brief."}}  # fmt: skip
"""The bad rows, as the batch lines they stand for: each fails alone."""


def _full(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row with every column any row has (null where it lacks one), as Ray's blocks
    hold them."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    return [{name: row.get(name) for name in names} for row in rows]


def _object_rows() -> list[dict[str, Any]]:
    return [{"id": key, "variables": v} for key, v in GOOD_OBJECTS.items()]


def _column_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"id": key, **v} for key, v in GOOD_COLUMNS.items()]
    rows.append({"id": "missing-column", **MISSING})  # its `ticket` column is null
    rows.append({"id": "nan-number", "product": "Acme", "number": None, "ticket": "x"})
    return _full(rows)


def _text_rows() -> list[dict[str, Any]]:
    lines = {**{key: {"variables": v} for key, v in GOOD_TEXT.items()}, **BAD_LINES}
    return _full([
        {"id": key, **line, "variables": json.dumps(line["variables"])}
        for key, line in lines.items()
    ])  # fmt: skip


def _mapped(
    server: LocalServer, rows: list[dict[str, Any]], batch_format: str = "default", **options: Any
) -> list[Any]:
    dataset = ray.data.from_items(rows, override_num_blocks=2).map_batches(
        StructuredMap,
        fn_constructor_kwargs={
            "contract": Decision,
            "client": functools.partial(vllm_clients, (server.url,)),
            "timeout": SECONDS,
            **options,
        },
        batch_size=4,
        batch_format=batch_format,
        compute=ActorPoolStrategy(size=1),
    )
    out: list[Any] = _within(SECONDS, dataset.take_all)
    return out


def _said() -> dict[str, Any]:
    info = Triage.info()
    return {"prompt_name": info.name, "prompt_version": info.version,
            "prompt_fingerprint": info.fingerprint}  # fmt: skip


def _line_error(tmp_path: Path, url: str, item_id: str, line: dict[str, Any]) -> str:
    """The message a `sdk batch` job with `Triage` refuses the line with (after its place)."""
    path = tmp_path / f"{item_id}.jsonl"
    path.write_text(json.dumps({"id": item_id, **line}) + "\n", encoding="utf-8")
    job = BatchJob.create(
        tmp_path / f"{item_id}.db", contract=Decision, prompt=Triage, input=path,
        out=tmp_path / f"{item_id}.out.jsonl", backend=LocalBackend(local_clients(_spec(url))),
    )  # fmt: skip
    with job, pytest.raises(BatchInputError) as refused:
        job.run()
    return _after_place(str(refused.value), item_id)


def _after_place(message: str, item_id: str) -> str:
    where = f"(id {item_id}): "
    assert where in message, message
    return message.split(where, 1)[1]


def _spec(url: str) -> dict[str, Any]:
    return {"provider": "vllm", "model": "bench-model", "base_urls": [url]}


def _batch_lines(tmp_path: Path, url: str, lines: dict[str, dict[str, Any]]) -> dict[Any, Any]:
    """The output lines of a local `sdk batch` job with `Triage` over `lines`."""
    path = tmp_path / "items.jsonl"
    with path.open("w", encoding="utf-8") as file:
        for key, line in lines.items():
            file.write(json.dumps({"id": key, **line}) + "\n")
    job = BatchJob.create(
        tmp_path / "job.db", contract=Decision, prompt=Triage, input=path,
        out=tmp_path / "out.jsonl", backend=LocalBackend(local_clients(_spec(url))),
    )  # fmt: skip
    with job:
        job.run()
    return by_id(read_output(tmp_path / "out.jsonl"))


def _comparable(record: dict[str, Any]) -> tuple[Any, ...]:
    """What tests/test_ray.py's parity test compares, and the prompt."""
    error = (record.get("error") or {}).get("type")
    return record["id"], record["outcome"], record.get("value"), error, record["schema"], \
        record.get("prompt")  # fmt: skip


def test_structured_map_renders_each_row_s_variables_and_its_rows_name_the_prompt(
    server: LocalServer, tmp_path: Path
) -> None:
    out = _mapped(server, _object_rows(), prompt=Triage)  # Ray's numpy batches
    out += _mapped(server, _text_rows(), prompt=Triage)
    # Ray's numpy batches (the default) hold an integer column with nulls as floats: the first
    # block (the `nan-number` row first) has `number` 4.0 and 5.0, each the integer it was (on
    # main those rows failed: "number: Input should be a valid integer"), NaN a variable not given.
    columns = _column_rows()
    out += _mapped(server, [columns[-1], *columns[:-1]], prompt=Triage)
    rows = {row["id"]: row for row in out}
    good = {**GOOD_OBJECTS, **GOOD_COLUMNS, **GOOD_TEXT}
    assert len(out) == len(rows) == len(good) + len(BAD_LINES) + 2  # each row once
    assert {key for key, row in rows.items() if row["outcome"] == "ok"} == set(good)
    for row in rows.values():  # every row names the prompt, the failed ones too
        assert {name: row[name] for name, _ in PROMPT_COLUMNS} == _said()

    # The requests: the template rendered with each row's variables, bad rows never sent.
    sent = server.bodies("/v1/chat/completions")
    assert len(sent) == len(good)
    by_text = {body["messages"][1]["content"]: body for body in sent}
    for variables in good.values():
        rendered = Triage.render(**variables)
        body = by_text[rendered.text]
        assert body["messages"][0] == {"role": "system", "content": rendered.system}
        assert rendered.system == "You triage refund tickets for Acme."

    # A bad variable fails its row alone, with the message a batch line gets.
    lines = {**BAD_LINES, "missing-column": {"variables": MISSING},
             "nan-number": {"variables": {"product": "Acme", "ticket": "x"}}}  # fmt: skip
    for key, line in lines.items():
        assert rows[key]["error_type"] == "BatchInputError"
        assert rows[key]["attempts"] == 0
        refused = _line_error(tmp_path, server.url, key, line)
        assert _after_place(rows[key]["error_message"], key) == refused
    assert "number" in rows["bad-type"]["error_message"]
    assert "ticket" in rows["missing"]["error_message"]
    assert "may not also set ['system']" in rows["beside"]["error_message"]

    # A row written out is the line a local `sdk batch` job with the prompt writes.
    batch = _batch_lines(tmp_path, server.url, {key: {"variables": v} for key, v in good.items()})
    assert {key: _comparable(line_of(rows[key])) for key in good} == {
        key: _comparable(line) for key, line in batch.items()
    }
    assert {key: line_of(rows[key]) for key in good} == batch  # the whole line, field by field


def test_the_prompt_columns_come_only_with_a_prompt_class_in_one_schema_for_every_block(
    server: LocalServer,
) -> None:
    factory = functools.partial(vllm_clients, (server.url,))
    with_prompt = StructuredMap(Decision, factory, prompt=Triage)
    ok = with_prompt(pa.Table.from_pylist([{"id": 1, "variables": _variables(1)}]))
    failed = with_prompt(pa.Table.from_pylist([{"id": 2, "variables": json.dumps(MISSING)}]))
    assert ok.schema == failed.schema == pa.schema([("id", pa.int64()), *COLUMNS, *PROMPT_COLUMNS])
    assert ok.schema == schema_for(pa.int64(), prompt=True)
    assert failed.to_pylist()[0]["outcome"] == "failed"
    # A numpy batch (Ray's default format) writes a null in a numeric column as NaN: missing.
    numpy_batch = {"id": np.array([5]), "product": np.array(["Acme"]),
                   "number": np.array([np.nan]), "ticket": np.array(["x"])}  # fmt: skip
    [nan_row] = with_prompt(numpy_batch).to_pylist()
    assert nan_row["error_type"] == "BatchInputError" and "Field required" in nan_row["error"]
    # Without a prompt template (a column, or a `str.format` template), the schema of today.
    asked = pa.Table.from_pylist([{"id": 3, "prompt": "Approve?"}])
    plain = StructuredMap(Decision, factory)(asked)
    formatted = StructuredMap(Decision, factory, prompt="Approve {vendor}?")(
        pa.Table.from_pylist([{"id": 4, "vendor": "Northwind"}])
    )
    assert plain.schema == formatted.schema == schema_for(pa.int64())
    assert schema_for(pa.int64()) == pa.schema([("id", pa.int64()), *COLUMNS])
    assert "prompt" not in line_of(plain.to_pylist()[0])
    assert server.bodies("/v1/chat/completions")[-1]["messages"][-1]["content"] == (
        "Approve Northwind?"
    )
    with pytest.raises(TypeError, match=r"sdk\.Prompt"):
        StructuredMap(Decision, factory, prompt=Decision)


# --- ProcessorHooks ---


def test_the_http_processor_with_hooks_renders_the_prompt_and_names_it(
    server: LocalServer, tmp_path: Path
) -> None:
    hooks = ProcessorHooks(Decision, model="bench-model", prompt=Triage)
    config = HttpRequestProcessorConfig(
        url=f"{server.url}/v1/chat/completions", batch_size=4, concurrency=1, qps=1000
    )
    processor = build_processor(
        config, preprocess=hooks.http_preprocess, postprocess=hooks.http_postprocess
    )
    rows = _full([
        *({"id": key, "variables": json.dumps(v)} for key, v in GOOD_TEXT.items()),
        *({"id": key, **v} for key, v in GOOD_COLUMNS.items()),
        {"id": "bad-type", "variables": json.dumps(BAD_TYPE)},
    ])  # fmt: skip
    finished = hooks.finish(processor(ray.data.from_items(rows)))
    out = {row["id"]: row for row in _within(SECONDS, finished.take_all)}
    good = {**GOOD_TEXT, **GOOD_COLUMNS}
    assert sorted(out) == sorted([*good, "bad-type"])
    assert {key for key, row in out.items() if row["outcome"] == "ok"} == set(good)
    for row in out.values():
        assert {name: row[name] for name, _ in PROMPT_COLUMNS} == _said()
    sent = server.bodies("/v1/chat/completions")
    assert len(sent) == len(good)  # the bad row never reached the processor's HTTP stage
    by_text = {body["messages"][1]["content"]: body for body in sent}
    for variables in good.values():
        rendered = Triage.render(**variables)
        assert by_text[rendered.text]["messages"][0]["content"] == rendered.system
    line = {"variables": BAD_TYPE}
    message = _after_place(out["bad-type"]["error_message"], "bad-type")
    assert message == _line_error(tmp_path, server.url, "bad-type", line)
    batch = _batch_lines(tmp_path, server.url, {key: {"variables": v} for key, v in good.items()})
    assert {key: _comparable(line_of(out[key])) for key in good} == {
        key: _comparable(line) for key, line in batch.items()
    }


def test_vllm_hooks_render_the_prompt_re_ask_with_it_and_settle_in_one_schema() -> None:
    hooks = ProcessorHooks(Decision, model="Qwen/Qwen3-8B", max_tokens=300, retries=1,
                           prompt=Triage)  # fmt: skip
    rendered = Triage.render(**_variables(1))
    engine = hooks.vllm_preprocess({"id": "v-1", "variables": _variables(1)})
    assert engine["messages"] == [
        {"role": "system", "content": rendered.system},
        {"role": "user", "content": rendered.text},
    ]
    from_columns = hooks.vllm_preprocess({"id": "v-1", **_variables(1)})
    assert from_columns["messages"] == engine["messages"]

    def replied(prepared: dict[str, Any], text: str) -> dict[str, Any]:
        return hooks.vllm_postprocess({"id": "v-1", **prepared, "generated_text": text,
                                       "num_generated_tokens": 30, "num_input_tokens": 100,
                                       "__inference_error__": ""})  # fmt: skip

    invalid = replied(engine, INVALID)
    assert invalid["error_type"] == "SchemaViolation" and invalid[REASK] is not None
    again = hooks.vllm_preprocess({"id": "v-1", REASK: invalid[REASK]})
    assert again["messages"][:2] == engine["messages"]  # the follow-up keeps the rendered turns
    assert again["messages"][2] == {"role": "assistant", "content": INVALID}
    from bench.fanout_server import DOCUMENT

    answered = replied(again, DOCUMENT)
    assert answered["outcome"] == "ok" and answered["attempts"] == 2
    refused = hooks.vllm_preprocess({"id": "v-2", "variables": json.dumps(MISSING)})
    settled = hooks.settle(pa.Table.from_pylist(_full([invalid, answered, refused])))
    named = [*COLUMNS, *PROMPT_COLUMNS]
    assert settled.schema == pa.schema([("id", pa.string()), *named, (REASK, pa.string())])
    for row in settled.to_pylist():
        assert {name: row[name] for name, _ in PROMPT_COLUMNS} == _said()
    assert settled.to_pylist()[2]["error_type"] == "BatchInputError"
    assert line_of(answered)["prompt"] == Triage.info().to_json()
    plain = ProcessorHooks(Decision, model="m")
    row = {"id": 1, "prompt": None}
    block = plain.settle(pa.Table.from_pylist([{**row, **plain.vllm_preprocess(row)}]))
    assert block.schema == pa.schema([("id", pa.int64()), *COLUMNS, (REASK, pa.string())])


def test_a_prompt_defined_in_a_notebook_reaches_the_actors_by_value(server: LocalServer) -> None:
    # A class Ray cannot import where its actors run (a notebook's, a script's `__main__`, one
    # defined in a function) is sent by value (cloudpickle): its templates compile there.
    class Note(Prompt):
        system = "You read notes from {{ team }}."
        template = "Approve this? {{ note }}"

        class Inputs(BaseModel):
            team: str
            note: str

    variables = {"team": "Billing", "note": "Refund 12 EUR."}
    [row] = _mapped(server, [{"id": "n-1", "variables": variables}], prompt=Note)
    assert row["outcome"] == "ok" and row["prompt_fingerprint"] == Note.info().fingerprint
    [body] = server.bodies("/v1/chat/completions")
    assert body["messages"] == [
        {"role": "system", "content": "You read notes from Billing."},
        {"role": "user", "content": "Approve this? Refund 12 EUR."},
    ]
