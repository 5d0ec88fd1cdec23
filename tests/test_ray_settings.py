"""Ray's settings checked where they are set, and its rows' faults typed as the SDK's (probe12b
D2, D6, D7; issue 30 item 5).

- `StructuredMap`, `ProcessorHooks` and `RayBackend` refuse a bad setting when they are made,
  with a `TypeError` or `ValueError` naming it (their declarations, `sdk._values.declared`), not
  a bare Python error at the first batch (`in_flight="4"`) or at every batch (`contract=5`).
- `--ray-address` is checked in the form `ray.init` takes before the job is made (`notaurl:::`
  and `""` were Ray's traceback, exit 1, after the state file held the address); a job that holds
  such an address says how to go on, and `resume --ray-address` runs it on a cluster.
- A row that is not a usable item fails as `BatchInputError` naming the row and the column, and
  an engine's count that is not one as `ProviderError`: not `TypeError`, `RecursionError`,
  `KeyError` or `ValueError`.

No Ray cluster here but in the one test that resumes a job on one (`--ray-address local`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any
from typing import get_type_hints

import pytest

pytest.importorskip("ray")

from bench.fanout_server import DOCUMENT
from bench.fleet import fleet
from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import StructuredClient
from sdk._values.declared import conforms
from sdk.batch import BatchJob
from sdk.batch import JobSettings
from sdk.batch._ray import RayBackend
from sdk.batch._ray import RayLayout
from sdk.batch._setup import BackendSpec
from sdk.batch._setup import build_backend
from sdk.batch._state import JobState
from sdk.contract import Contract
from sdk.providers import TestProvider
from sdk.ray import ProcessorHooks
from sdk.ray import StructuredMap
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.test_batch_integrity import sdk_run


def _client() -> AsyncStructuredClient:
    return AsyncStructuredClient(TestProvider([DOCUMENT], repeat=True))


# --- D6: StructuredMap's settings, checked where they are set ---

BAD_MAPS: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("in_flight", {"in_flight": "4"}, TypeError),
    ("in_flight", {"in_flight": 1.5}, TypeError),
    ("in_flight", {"in_flight": 0}, ValueError),
    ("timeout", {"timeout": None}, TypeError),
    ("timeout", {"timeout": 0}, ValueError),
    ("timeout", {"timeout": math.inf}, ValueError),
    ("timeout", {"timeout": 1e300}, ValueError),
    ("contract", {"contract": 5}, TypeError),
    ("contract", {"contract": dict}, TypeError),
    ("client", {"client": 5}, TypeError),
    ("client()", {"client": lambda: StructuredClient(TestProvider([]))}, TypeError),
    ("client()", {"client": lambda: None}, TypeError),
    ("client()", {"client": lambda: "abc"}, TypeError),
    ("id_column", {"id_column": 5}, TypeError),
    ("max_tokens", {"max_tokens": 0}, ValueError),
    ("max_tokens", {"max_tokens": "9"}, TypeError),
    ("prompt", {"prompt": 5}, TypeError),
]


@pytest.mark.parametrize(("name", "given", "error"), BAD_MAPS)
def test_structured_map_refuses_a_bad_setting_naming_it(
    name: str, given: dict[str, Any], error: type[Exception]
) -> None:
    settings: dict[str, Any] = {"contract": Decision, "client": _client, **given}
    with pytest.raises(error, match=rf"^StructuredMap\(\): {re.escape(name)} must be"):
        StructuredMap(**settings)


@pytest.mark.parametrize("template", ["Approve {0}?", "Approve {}?", "Approve } this"])
def test_a_str_format_template_no_row_could_fill_is_refused_when_made(template: str) -> None:
    with pytest.raises(ValueError, match="prompt="):
        StructuredMap(Decision, _client, prompt=template)


def test_a_contract_class_setting_takes_contracts_only() -> None:
    assert conforms(Decision, type[Contract]) and conforms(Decision, type[Contract] | str)
    assert not conforms(dict, type[Contract])
    assert not conforms(Decision.model_validate_json(DOCUMENT), type[Contract])


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"contract": 5}, "contract"),
        ({"model": 5}, "model"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"id_column": None}, "id_column"),
        ({"retries": -1}, "retries"),  # (these two were said to be `JobSettings()`'s)
        ({"enum_case": "x"}, "enum_case"),
    ],
)
def test_processor_hooks_refuse_a_bad_setting_naming_it(given: dict[str, Any], match: str) -> None:
    settings: dict[str, Any] = {"contract": Decision, "model": "m", **given}
    with pytest.raises((TypeError, ValueError), match=rf"^ProcessorHooks\(\): {match} must be"):
        ProcessorHooks(**settings)


@pytest.mark.parametrize(
    ("given", "error", "match"),
    [
        ({"actors": "2"}, TypeError, "actors"),
        ({"in_flight": 0}, ValueError, "in_flight"),
        ({"address": "notaurl:::"}, ValueError, "address"),
        ({"address": ""}, ValueError, "address"),
    ],
)
def test_ray_backend_refuses_a_bad_layout_naming_it(
    given: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=rf"^RayBackend\(\): {match} must be"):
        RayBackend([_client()], list, **given)


def test_a_job_s_actors_are_ray_backend_s_one_declaration_default_and_minimum() -> None:
    """`--actors` (`BackendSpec.actors`) is `RayLayout.actors`, declared once (issue 30's
    leftover: its minimum and default were written in both): the same declaration, `None`
    taken as the same default pool by both, and 0 refused by both as at least 1."""
    job = get_type_hints(BackendSpec, include_extras=True)["actors"]
    assert job == get_type_hints(RayLayout, include_extras=True)["actors"]
    spec = BackendSpec("vllm", "m", ["http://127.0.0.1:9"], engine="ray")
    built = build_backend(spec)
    assert isinstance(built, RayBackend)
    assert built.actors == RayBackend([_client()], list, actors=None).actors
    assert built.actors == RayBackend([_client()], list).actors
    for made in (
        lambda: BackendSpec("vllm", "m", ["http://127.0.0.1:9"], engine="ray", actors=0),
        lambda: RayBackend([_client()], list, actors=0),
    ):
        with pytest.raises(ValueError, match=r"actors must be at least 1, not 0$"):
            made()


# --- D2: the cluster's address, in a form Ray takes ---


@pytest.mark.parametrize(
    "address",
    ["auto", "local", "head:6379", "ray://head:10001", "[::1]:6379", "anyscale://my-cluster"],
)
def test_every_address_form_ray_init_takes_is_a_job_s(address: str) -> None:
    spec = BackendSpec("vllm", "m", ["http://127.0.0.1:9"], engine="ray", ray_address=address)
    assert spec.ray_address == address


@pytest.mark.parametrize(
    "address",
    ["notaurl:::", "", "head", "head:0", "head:65536", "::1:6379", "http://head:1", "https://h"],
)
def test_an_address_ray_init_would_refuse_is_refused_in_the_spec(address: str) -> None:
    with pytest.raises(ValueError, match=r"ray_address must be auto, local, HOST:PORT"):
        BackendSpec("vllm", "m", ["http://127.0.0.1:9"], engine="ray", ray_address=address)


def test_a_bad_ray_address_variable_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "notaurl:::")
    with pytest.raises(ValueError, match="RAY_ADDRESS must be auto, local, HOST:PORT"):
        RayBackend([_client()], list)


@pytest.mark.parametrize("address", ["notaurl:::", ""])
def test_batch_run_with_a_malformed_ray_address_exits_2_without_making_the_job(
    tmp_path: Path, address: str
) -> None:
    items, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_items(items, 1)
    done = sdk_run(
        "batch", "run", "--contract", "contracts:Decision", "--provider", "vllm", "--model", "m",
        "--base-url", "http://127.0.0.1:9", "--input", str(items), "--out", str(out),
        "--engine", "ray", "--ray-address", address,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: --ray-address must be auto")
    assert not Path(f"{out}.job.db").exists()


def _job_holding(tmp_path: Path, url: str, address: str) -> Path:
    """A `--engine ray` job whose state file holds `address` (as a version that did not check it
    made it), never run."""
    items, out, state = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 6)
    spec = BackendSpec("vllm", "bench-model", [url])
    stored = {**spec.to_json(), "engine": "ray", "ray_address": address}
    job = BatchJob.create(
        state, contract=Decision, backend=build_backend(spec), input=items, out=out,
        settings=JobSettings(), extra_meta={"backend_spec": stored},
    )  # fmt: skip
    job.close()
    return state


def _stored_address(state: Path) -> Any:
    store = JobState(state, readonly=True)
    try:
        return store.get("backend_spec")["ray_address"]
    finally:
        store.close()


def test_a_job_holding_an_unusable_address_says_how_to_go_on_and_resumes_on_a_cluster(
    tmp_path: Path,
) -> None:
    with fleet(replicas=1, latency=0.0, slots=4) as running:
        state = _job_holding(tmp_path, running.urls[0], "notaurl:::")
        stuck = sdk_run("batch", "resume", "--state", str(state))
        assert stuck.returncode == 2, stuck.stderr[-2000:]
        assert "Traceback" not in stuck.stderr
        said = stuck.stderr.strip().splitlines()[-1]
        assert "'notaurl:::'" in said and "--ray-address" in said and "resume" in said
        status = sdk_run("batch", "status", "--state", str(state))
        assert status.returncode == 0, status.stderr[-2000:]
        done = sdk_run(
            "batch", "resume", "--state", str(state), "--ray-address", "local", "--json",
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["ok"] == 6
    assert len(read_output(tmp_path / "out.jsonl")) == 6
    assert _stored_address(state) == "local"  # recorded: the next resume uses it


def test_resume_refuses_a_malformed_ray_address_naming_the_flag(tmp_path: Path) -> None:
    state = _job_holding(tmp_path, "http://127.0.0.1:9", "127.0.0.1:1")
    done = sdk_run("batch", "resume", "--state", str(state), "--ray-address", "notaurl:::")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: --ray-address must be auto")
    assert _stored_address(state) == "127.0.0.1:1"


def test_a_job_holding_an_unusable_address_is_still_cancelled(tmp_path: Path) -> None:
    state = _job_holding(tmp_path, "http://127.0.0.1:9", "")
    done = sdk_run("batch", "cancel", "--state", str(state))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cancel requested" in done.stdout


# --- D7: a row's fault, typed as the SDK's ---


def test_rows_that_are_not_usable_items_fail_as_batch_input_errors_naming_the_column() -> None:
    import numpy as np

    mapper = StructuredMap(Decision, _client, prompt=None)
    rows = mapper({"id": np.array([1]), "prompt": np.array([b"Approve?"])}).to_pylist()
    rows += mapper({"id": [2], "messages": ["[" * 100_000]}).to_pylist()
    rows += StructuredMap(Decision, _client, prompt="Approve {vendor}?")({"id": [3]}).to_pylist()
    assert [row["error_type"] for row in rows] == ["BatchInputError"] * 3
    assert "`prompt`" in rows[0]["error_message"] and "bytes" in rows[0]["error_message"]
    assert "`messages` is nested too deeply" in rows[1]["error_message"]
    assert "'vendor'" in rows[2]["error_message"]
    assert [row["attempts"] for row in rows] == [0, 0, 0]


def test_the_hooks_type_an_engine_count_that_is_none_and_a_row_they_did_not_prepare() -> None:
    hooks = ProcessorHooks(Decision, model="m")
    prepared = hooks.vllm_preprocess({"id": 1, "prompt": "Approve?"})
    row = {**prepared, "generated_text": DOCUMENT, "num_generated_tokens": "many"}
    many = hooks.settle_row(hooks.vllm_postprocess(row))
    assert many["error_type"] == "ProviderError" and "num_generated_tokens" in many["error_message"]
    null = {**prepared, "generated_text": DOCUMENT, "num_generated_tokens": math.nan}
    assert hooks.settle_row(hooks.vllm_postprocess(null))["outcome"] == "ok"  # NaN: a null count
    unprepared = hooks.settle_row(hooks.vllm_postprocess({"id": 2, "generated_text": DOCUMENT}))
    assert unprepared["error_type"] == "BatchInputError"
    assert "did not go through the hooks' preprocess" in unprepared["error_message"]
    raw = hooks.vllm_preprocess({"id": 3, "prompt": b"Approve?"})
    assert raw["__inference_error__"].startswith("BatchInputError: row 3: `prompt`")
    assert hooks.settle_row(raw)["error_type"] == "BatchInputError"
