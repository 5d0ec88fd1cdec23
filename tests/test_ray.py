"""Structured output on Ray Data (issue 31, item 2), on a local cluster (`ray.init(num_cpus=2)`,
one per module, shut down at its end).

`StructuredMap` in `map_batches` actors and the `--engine ray` runner, against the simulated
fleet (bench/fleet.py: OpenAI-compatible replicas in their own processes), the real llama.cpp
server the tests start, and the embedded model: a 1,000-row job, a bad row, an actor killed
mid-job, a resume, a retry, and the same output lines as the local runner for the same input.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ray.data import ActorPoolStrategy  # noqa: E402

from bench.fleet import fleet  # noqa: E402
from bench.fleet import stats  # noqa: E402
from contracts import Decision  # noqa: E402
from sdk.batch import BatchJob  # noqa: E402
from sdk.batch import LocalBackend  # noqa: E402
from sdk.batch._ray import RayBackend  # noqa: E402
from sdk.batch._setup import local_clients  # noqa: E402
from sdk.client import AsyncStructuredClient  # noqa: E402
from sdk.ray import COLUMNS  # noqa: E402
from sdk.ray import StructuredMap  # noqa: E402
from sdk.ray import line_of  # noqa: E402
from tests.batch_support import by_id  # noqa: E402
from tests.batch_support import read_output  # noqa: E402
from tests.test_batch_integrity import sdk_run  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[str]:
    """A local Ray cluster of 2 CPUs for the module: its address (the CLI joins it)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


def vllm_clients(urls: tuple[str, ...], in_flight: int = 8) -> list[AsyncStructuredClient]:
    """An actor's clients: one per replica (module level: a partial of it pickles)."""
    from sdk.providers import VLLMProvider

    return [
        AsyncStructuredClient(VLLMProvider(url, model="bench-model"), max_concurrency=in_flight)
        for url in urls
    ]


def _rows(count: int) -> list[dict[str, Any]]:
    return [
        {"id": number, "prompt": "Approve this refund?", "source": f"Refund {number}: 12 EUR."}
        for number in range(count)
    ]


def _mapped(rows: list[dict[str, Any]], factory: Any, **options: Any) -> list[dict[str, Any]]:
    mapped = ray.data.from_items(rows, override_num_blocks=8).map_batches(
        StructuredMap,
        fn_constructor_kwargs={"contract": Decision, "client": factory, **options},
        batch_size=64,
        compute=ActorPoolStrategy(size=2),
    )
    return list(mapped.take_all())


def test_a_thousand_rows_with_bad_ones_all_come_out_with_the_batch_line_s_fields() -> None:
    rows = _rows(1000)
    rows[17] = {"id": 17, "prompt": None, "source": None}  # nothing to ask
    rows[503] = {"id": 503, "prompt": "x", "source": "y", "options": '{"system": "twice"}'}
    rows[999] = {"id": 999, "prompt": "caf\udcff", "source": None}  # not encodable
    with fleet(replicas=2, latency=0.01, slots=8) as running:
        out = _mapped(rows, functools.partial(vllm_clients, running.urls))
        asked = sum(stats(url)["completions"] for url in running.urls)
    by_row = {row["id"]: row for row in out}
    assert len(out) == 1000 and set(by_row) == set(range(1000))  # each row once, none dropped
    assert asked == 997  # the three bad rows were never sent
    failed = {key: row["error_type"] for key, row in by_row.items() if row["outcome"] != "ok"}
    assert failed == {17: "BatchInputError", 503: "TypeError", 999: "BatchInputError"}
    assert "system" in by_row[503]["error_message"]
    good = by_row[0]
    assert json.loads(good["value"])["answer"] == "approve"
    assert good["contract"] == "Decision" and good["contract_version"] == 1
    assert len(good["fingerprint"]) == 64 and good["stop_reason"] == "end_turn"
    assert good["attempts"] == 1 and good["output_tokens"] == 31 and good["notes"] == "[]"
    assert set(good) == {"id", *(name for name, _ in COLUMNS)}
    line = line_of(good)
    assert line["value"]["answer"] == "approve" and line["schema"]["name"] == "Decision"


def test_the_output_schema_is_the_same_for_every_block_whatever_its_rows_held() -> None:
    # A block of failures only and a block of successes have one Arrow schema (typed nulls).
    rows = [{"id": f"ok-{n}", "prompt": "Approve?", "source": "Refund: 12 EUR."} for n in range(3)]
    rows += [{"id": f"bad-{n}", "prompt": None, "source": None} for n in range(3)]
    with fleet(replicas=1, latency=0.0, slots=4) as running:
        mapper = StructuredMap(Decision, functools.partial(vllm_clients, running.urls))
        good = mapper(_table(rows[:3]))
        bad = mapper(_table(rows[3:]))
    assert good.schema == bad.schema
    assert str(good.schema.field("value").type) == "string"
    assert bad.column("value").to_pylist() == [None, None, None]
    assert str(good.schema.field("attempts").type) == "int64"


def _table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    return pa.Table.from_pylist(rows)


def test_a_prompt_template_over_columns_and_a_missing_column_fails_its_row_alone() -> None:
    rows = [{"id": 1, "vendor": "Northwind", "document": "Invoice: $4,180.00."}, {"id": 2}]
    with fleet(replicas=1, latency=0.0, slots=4) as running:
        mapper = StructuredMap(
            Decision, functools.partial(vllm_clients, running.urls), prompt="Approve {vendor}?"
        )
        out = mapper(_table(rows)).to_pylist()
    assert out[0]["outcome"] == "ok"
    assert out[1]["outcome"] == "failed" and out[1]["error_type"] == "BatchInputError"
    assert "vendor" in out[1]["error_message"]


# --- the engine: `sdk batch run --engine ray` ---


def _items(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as file:
        for number in range(count):
            record = {"id": number if number % 2 else f"doc-{number}", "prompt": "Approve?",
                      "source": f"Refund {number}: 12 EUR, bought nine days ago."}  # fmt: skip
            file.write(json.dumps(record) + "\n")
        file.write('{"id": "bad", "prompt": "x", "options": {"system": "twice"}}\n')


def _ray_backend(urls: tuple[str, ...], factory: Any = None, **options: Any) -> RayBackend:
    spec = {"provider": "vllm", "model": "bench-model", "base_urls": list(urls), "retries": 2,
            "concurrency": 4}  # fmt: skip
    return RayBackend(
        local_clients(spec),
        factory or functools.partial(local_clients, spec),
        actors=2,
        in_flight=4,
        batch_size=50,
        **options,
    )


def _comparable(records: dict[Any, dict[str, Any]]) -> dict[Any, tuple[Any, ...]]:
    return {
        key: (r["outcome"], r.get("value"), (r.get("error") or {}).get("type"), r["schema"])
        for key, r in records.items()
    }


def test_the_engine_writes_the_local_runner_s_lines_for_the_same_input(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    _items(items, 1000)
    with fleet(replicas=2, latency=0.005, slots=4) as running:
        local = BatchJob.create(
            tmp_path / "local.db", contract=Decision,
            backend=LocalBackend(local_clients({"provider": "vllm", "model": "bench-model",
                                                "base_urls": list(running.urls)})),
            input=items, out=tmp_path / "local.jsonl",
        )  # fmt: skip
        with local:
            local_summary = local.run()
        engine = BatchJob.create(
            tmp_path / "ray.db", contract=Decision, backend=_ray_backend(running.urls),
            input=items, out=tmp_path / "ray.jsonl",
        )  # fmt: skip
        with engine:
            summary = engine.run()
    assert (summary.ok, summary.failed) == (local_summary.ok, local_summary.failed) == (1000, 1)
    on_ray = by_id(read_output(tmp_path / "ray.jsonl"))  # each id once
    assert _comparable(on_ray) == _comparable(by_id(read_output(tmp_path / "local.jsonl")))
    assert on_ray[1]["id"] == 1 and on_ray["doc-0"]["id"] == "doc-0"  # ids keep their type


def test_a_job_with_a_prompt_template_renders_each_line_in_the_actors(tmp_path: Path) -> None:
    from tests.test_batch_prompt import Approval
    from tests.test_batch_prompt import said
    from tests.test_batch_prompt import write_variables

    items = tmp_path / "items.jsonl"
    write_variables(items, 40)
    with fleet(replicas=2, latency=0.005, slots=4) as running:
        local = BatchJob.create(
            tmp_path / "local.db", contract=Decision, prompt=Approval,
            backend=LocalBackend(local_clients({"provider": "vllm", "model": "bench-model",
                                                "base_urls": list(running.urls)})),
            input=items, out=tmp_path / "local.jsonl",
        )  # fmt: skip
        with local:
            local_summary = local.run()
        engine = BatchJob.create(
            tmp_path / "ray.db", contract=Decision, prompt=Approval,
            backend=_ray_backend(running.urls), input=items, out=tmp_path / "ray.jsonl",
        )  # fmt: skip
        with engine:
            summary = engine.run()
    assert (summary.ok, summary.failed) == (local_summary.ok, local_summary.failed) == (40, 0)
    on_ray = by_id(read_output(tmp_path / "ray.jsonl"))
    assert {line["prompt"]["fingerprint"] for line in on_ray.values()} == {
        said(Approval)["fingerprint"]
    }
    assert _comparable(on_ray) == _comparable(by_id(read_output(tmp_path / "local.jsonl")))


@ray.remote
class Registry:
    """Where each actor of the test's pool leaves its handle (so the test can `ray.kill` it)."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def add(self, handle: Any) -> None:
        self.handles.append(handle)

    def all(self) -> list[Any]:
        return self.handles


def registered_clients(spec: dict[str, Any]) -> list[AsyncStructuredClient]:
    """An actor's clients, after leaving the actor's handle with the test's registry."""
    registry = ray.get_actor("sdk-test-registry")
    ray.get(registry.add.remote(ray.get_runtime_context().current_actor))
    return local_clients(spec)


def test_an_actor_killed_mid_job_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    _items(items, 600)
    registry = Registry.options(name="sdk-test-registry").remote()  # type: ignore[attr-defined]
    killed: list[Any] = []

    def kill_one(progress: Any) -> None:
        if not killed and progress.phase == "running" and progress.done >= 100:
            handle = ray.get(registry.all.remote())[0]
            ray.kill(handle, no_restart=False)  # Ray restarts it and runs its batch again
            killed.append(handle)

    with fleet(replicas=2, latency=0.02, slots=4) as running:
        spec = {"provider": "vllm", "model": "bench-model", "base_urls": list(running.urls),
                "retries": 2, "concurrency": 2}  # fmt: skip
        backend = _ray_backend(running.urls, functools.partial(registered_clients, spec))
        job = BatchJob.create(
            tmp_path / "job.db", contract=Decision, backend=backend, input=items,
            out=tmp_path / "out.jsonl",
        )  # fmt: skip
        with job:
            summary = job.run(progress=kill_one, progress_every=0)
        asked = sum(stats(url)["completions"] for url in running.urls)
    assert killed, "no actor was killed"
    assert summary.ok == 600 and summary.failed == 1
    records = by_id(read_output(tmp_path / "out.jsonl"))  # nothing written twice
    assert len(records) == 601
    assert asked >= 600  # the killed actor's batch was asked again: nothing lost


def test_an_interrupted_engine_job_resumes_without_redoing_what_it_committed(
    tmp_path: Path,
) -> None:
    items = tmp_path / "items.jsonl"
    _items(items, 400)

    def interrupt(progress: Any) -> None:
        if progress.phase == "running" and progress.done >= 100:
            raise KeyboardInterrupt

    with fleet(replicas=2, latency=0.01, slots=4) as running:
        job = BatchJob.create(
            tmp_path / "job.db", contract=Decision, backend=_ray_backend(running.urls),
            input=items, out=tmp_path / "out.jsonl",
        )  # fmt: skip
        with job, pytest.raises(KeyboardInterrupt):
            job.run(progress=interrupt, progress_every=0)
        kept = len(read_output(tmp_path / "out.jsonl"))
        assert 100 <= kept < 401
        before = sum(stats(url)["completions"] for url in running.urls)
        again = BatchJob.open(tmp_path / "job.db", contract=Decision,
                              backend=_ray_backend(running.urls))  # fmt: skip
        with again:
            summary = again.run()
        after = sum(stats(url)["completions"] for url in running.urls)
    assert summary.ok == 400 and summary.failed == 1
    assert after - before == 401 - kept - 1  # only what was left (the bad item is never sent)
    assert len(by_id(read_output(tmp_path / "out.jsonl"))) == 401


def test_cli_engine_ray_joins_a_cluster_runs_and_retries(tmp_path: Path, cluster: str) -> None:
    items, out = tmp_path / "items.jsonl", tmp_path / "out.jsonl"
    with items.open("w", encoding="utf-8") as file:
        for number in range(40):
            long = " [long]" if number % 10 == 3 else ""
            file.write(json.dumps({"id": number, "prompt": "Approve?",
                                   "source": f"Refund {number}.{long}"}) + "\n")  # fmt: skip
    with fleet(replicas=1, latency=0.0, slots=4) as running:
        from bench.fleet import replica

        with replica(0.0, "--truncate-below", "500") as url:
            run = sdk_run(
                "batch", "run", "--contract", "contracts:Decision", "--provider", "vllm",
                "--model", "bench-model", "--base-url", url, "--max-tokens", "300",
                "--engine", "ray", "--ray-address", cluster, "--input", str(items),
                "--out", str(out), "--json", timeout=300,
            )  # fmt: skip
            assert run.returncode == 1, run.stderr  # four long items cut off
            assert json.loads(run.stdout)["failed"] == 4
            retried = sdk_run(
                "batch", "retry", "--state", f"{out}.job.db", "--max-tokens", "800", "--json",
                timeout=300,
            )  # fmt: skip
            assert retried.returncode == 0, retried.stderr
        del running
    records = by_id(read_output(out))
    assert len(records) == 40 and {r["outcome"] for r in records.values()} == {"ok"}
    assert {n for n in range(40) if records[n]["attempts"] == 2} == {3, 13, 23, 33}


@pytest.mark.parametrize("change", ["edit", "cancel"])
def test_a_ray_job_whose_server_holds_its_answers_stops_within_seconds(
    tmp_path: Path, cluster: str, change: str
) -> None:
    # The server holds every completion (its gate closed): no batch comes back from the actors.
    # The driver still looks at the input and the cancel flag every tick, as the local runner
    # does; on main it looked only when a batch came back, so an edited input or a cancel was
    # not seen while the server held (the run waited for as long as the server did).
    from tests.batch_support import gate
    from tests.test_batch_input import EDITED
    from tests.test_batch_input import _edit_line
    from tests.test_batch_integrity import counted
    from tests.test_batch_integrity import local_job
    from tests.test_batch_integrity import one_line
    from tests.test_batch_integrity import wait_for

    extra = ("--engine", "ray", "--ray-address", cluster, "--actors", "1", "--concurrency", "2")
    with local_job(tmp_path, 200, 0.01, *extra, closed=True) as (runner, url, files):
        try:
            wait_for(lambda: counted(files.state, "total") == 200, "the job to index", 120)
            from tests.batch_support import completions

            wait_for(lambda: completions(url) >= 2, "the actors' first calls", 180)
            if change == "edit":
                _edit_line(files.items, EDITED, keep_mtime=False)
            else:
                assert sdk_run("batch", "cancel", "--state", str(files.state)).returncode == 0
            _, errors = runner.communicate(timeout=60)  # on main: still waiting for a batch
        finally:
            gate(url, open=True)
        if change == "edit":
            assert runner.returncode == 2, errors
            assert f"{files.items}:{EDITED}: changed since indexing" in one_line(errors)
        else:
            assert runner.returncode == 1, errors
            assert counted(files.state, "cancelled") == 200


# --- real models: the llama.cpp server the tests start, and the embedded model ---


def llamacpp_clients(url: str) -> AsyncStructuredClient:
    from sdk.providers import LlamaCppProvider

    return AsyncStructuredClient(LlamaCppProvider(url), max_concurrency=2, retries=1)


@pytest.mark.local
def test_structured_map_on_the_real_llama_server(llama_server: str) -> None:
    rows = [*_rows(12), {"id": 12, "prompt": None, "source": None}]
    out = _mapped(rows, functools.partial(llamacpp_clients, llama_server), max_tokens=200)
    by_row = {row["id"]: row for row in out}
    assert set(by_row) == set(range(13))
    assert by_row[12]["outcome"] == "failed"
    for number in range(12):
        row = by_row[number]
        # the small model answers or fails typed; either way a whole row, never an exception
        assert row["outcome"] in ("ok", "failed") and row["provider"] == "llamacpp"
        if row["outcome"] == "ok":
            assert json.loads(row["value"])["answer"] in ("approve", "reject", "escalate")
        else:
            assert row["error_type"] and row["error"]


def embedded_clients() -> AsyncStructuredClient:
    from sdk.providers.embedded import EmbeddedProvider

    return AsyncStructuredClient(EmbeddedProvider(n_threads=1), max_concurrency=1, retries=0)


@pytest.mark.local
@pytest.mark.usefixtures("embedded_model")
def test_structured_map_with_the_embedded_model_loaded_once_per_actor() -> None:
    rows = _rows(6)
    out = _mapped(rows, embedded_clients, max_tokens=120)
    assert sorted(row["id"] for row in out) == list(range(6))
    for row in out:
        assert row["provider"] == "embedded" and row["outcome"] in ("ok", "failed")
        if row["outcome"] == "ok":
            assert row["stop_reason"] == "end_turn"
            assert json.loads(row["value"])["answer"] in ("approve", "reject", "escalate")


@pytest.mark.local
def test_the_engine_and_the_local_runner_agree_on_the_real_llama_server(
    llama_server: str, tmp_path: Path
) -> None:
    # Greedy decoding, one call at a time on each side: the same items get the same answers.
    items = tmp_path / "items.jsonl"
    with items.open("w", encoding="utf-8") as file:
        for number in range(5):
            record = {"id": number, "prompt": "Approve this refund?", "max_tokens": 200,
                      "source": f"Refund {number}: {10 * number + 12} EUR, unused.",
                      "options": {"temperature": 0}}  # fmt: skip
            file.write(json.dumps(record) + "\n")
        file.write('{"id": "bad", "prompt": "x", "options": {"system": "twice"}}\n')
    spec = {"provider": "llamacpp", "model": None, "base_urls": [llama_server], "retries": 1,
            "concurrency": 1}  # fmt: skip
    local = BatchJob.create(
        tmp_path / "local.db", contract=Decision, backend=LocalBackend(local_clients(spec)),
        input=items, out=tmp_path / "local.jsonl",
    )  # fmt: skip
    with local:
        local.run()
    backend = RayBackend(local_clients(spec), functools.partial(local_clients, spec), actors=1,
                         in_flight=1, batch_size=2)  # fmt: skip
    engine = BatchJob.create(
        tmp_path / "ray.db", contract=Decision, backend=backend, input=items,
        out=tmp_path / "ray.jsonl",
    )  # fmt: skip
    with engine:
        engine.run()
    on_ray = by_id(read_output(tmp_path / "ray.jsonl"))
    assert len(on_ray) == 6 and on_ray["bad"]["outcome"] == "failed"
    assert _comparable(on_ray) == _comparable(by_id(read_output(tmp_path / "local.jsonl")))
