"""`sdk.ray.ProcessorHooks` around `ray.data.llm`'s processors (issue 31, item 2).

Ray's HTTP request processor runs for real on a local cluster (`ray.init(num_cpus=2)`) against a
replica of the simulated fleet (bench/fanout_server.py, vLLM's chat route). The vLLM engine
processor needs vLLM and a GPU, so its hooks are tested as functions, on rows shaped as Ray's
engine stage hands them over (`vLLMOutputData`'s fields, `__inference_error__`).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("aiohttp")  # what `ray.data.llm` imports

import pyarrow as pa  # noqa: E402
from ray.data.llm import HttpRequestProcessorConfig  # noqa: E402
from ray.data.llm import build_processor  # noqa: E402

from bench.fanout_server import DOCUMENT  # noqa: E402
from bench.fanout_server import INVALID  # noqa: E402
from bench.fleet import fleet  # noqa: E402
from bench.fleet import stats  # noqa: E402
from contracts import Decision  # noqa: E402
from sdk.ray import COLUMNS  # noqa: E402
from sdk.ray import REASK  # noqa: E402
from sdk.ray import ProcessorHooks  # noqa: E402
from sdk.ray import StructuredMap  # noqa: E402
from tests.test_ray import vllm_clients  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"id": n, "prompt": "Approve this refund?", "source": f"Refund {n}: 12 EUR, unused."}
        for n in range(40)
    ]
    rows[5] = {"id": 5, "prompt": None, "source": None}  # nothing to ask
    rows[7] = {"id": 7, "prompt": "x", "source": "y", "options": '{"system": "twice"}'}
    rows[9] = {"id": 9, "prompt": "[invalid] Approve?", "source": "Refund 9: 12 EUR."}
    return rows


def _http(hooks: ProcessorHooks, url: str) -> Any:
    config = HttpRequestProcessorConfig(
        url=f"{url}/v1/chat/completions", batch_size=8, concurrency=1, qps=1000
    )
    return build_processor(
        config, preprocess=hooks.http_preprocess, postprocess=hooks.http_postprocess
    )


def _same(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["outcome"], row["value"], row["error_type"], row["stop_reason"],
            row["attempts"], row["contract"], row["fingerprint"], row["provider"])  # fmt: skip


def test_the_http_processor_with_the_hooks_gives_structured_map_s_rows_after_a_second_pass() -> (
    None
):
    rows = _rows()
    with fleet(replicas=1, latency=0.0, slots=8) as running:
        url = running.urls[0]
        hooks = ProcessorHooks(Decision, model="bench-model", retries=1)
        processor = _http(hooks, url)
        first = hooks.finish(processor(ray.data.from_items(rows))).materialize()
        sent = stats(url)["completions"]
        again = hooks.second_pass(first, processor, token_budget=10**6)
        out = {row["id"]: row for row in again.dataset.take_all()}
        after = stats(url)["completions"]
        # the same rows through StructuredMap (live calls, the client's own re-ask)
        mapper = StructuredMap(
            Decision, functools.partial(vllm_clients, running.urls), max_tokens=4096
        )
        table = pa.Table.from_pylist([{"options": None, **row} for row in rows])  # every column
        live = {row["id"]: row for row in mapper(table).to_pylist()}
    before = {row["id"]: row for row in first.take_all()}
    assert sent == 38  # the two rows the preprocess could not build were never sent
    assert before[5]["error_type"] == "BatchInputError" and before[5]["attempts"] == 0
    assert before[7]["error_type"] == "TypeError" and "system" in before[7]["error_message"]
    assert before[9]["error_type"] == "SchemaViolation" and before[9][REASK] is not None
    assert "maybe" in json.loads(before[9]["error"])["text"]
    assert again.asked == 1 and again.skipped == 0 and after == sent + 1
    assert sorted(out) == list(range(40))  # each id once
    assert out[9]["outcome"] == "ok" and out[9]["attempts"] == 2
    assert out[9]["output_tokens"] == 62 and out[9][REASK] is None
    assert {key: _same(row) for key, row in out.items()} == {
        key: _same(row) for key, row in live.items()
    }


def test_a_second_pass_asks_only_what_the_token_budget_admits() -> None:
    rows = [{"id": f"r{n}", "prompt": "[invalid] Approve?", "source": "Refund."} for n in range(4)]
    with fleet(replicas=1, latency=0.0, slots=4) as running:
        hooks = ProcessorHooks(Decision, model="bench-model", retries=1)
        processor = _http(hooks, running.urls[0])
        first = hooks.finish(processor(ray.data.from_items(rows))).materialize()
        # 4 rows spent 173 tokens each: the budget admits the job's spending and two re-asks
        again = hooks.second_pass(first, processor, token_budget=6 * 173 + 10)
        out = {row["id"]: row for row in again.dataset.take_all()}
        asked = stats(running.urls[0])["completions"]
    assert (again.asked, again.skipped) == (2, 2) and asked == 6
    assert again.tokens == 6 * 173 <= 6 * 173 + 10
    assert {key: row["outcome"] for key, row in out.items()} == {
        "r0": "ok", "r1": "ok", "r2": "failed", "r3": "failed"
    }  # fmt: skip
    assert out["r2"][REASK] is not None  # still askable by a later pass with more budget


def test_an_engine_error_row_and_a_raise_come_out_as_failed_lines() -> None:
    # the server answers a 400 with an error body (Ray yields it as the row's response) and
    # a row's retries running out fails Ray's HTTP stage: both shown on the hooks' own rows
    hooks = ProcessorHooks(Decision, model="bench-model")
    prepared = hooks.http_preprocess({"id": 1, "prompt": "Approve?", "source": "Refund."})
    error_body = {"error": {"message": "max_tokens is too large", "code": 400}}
    failed = hooks.http_postprocess({"id": 1, **prepared, "http_response": error_body})
    assert failed["outcome"] == "failed" and failed["error_type"] == "ProviderError"
    assert "too large" in failed["error_message"] and failed["attempts"] == 1
    garbage = hooks.http_postprocess({"id": 1, **prepared, "http_response": {"choices": 3}})
    assert garbage["outcome"] == "failed" and garbage["error_type"] == "ProviderError"


# --- the vLLM engine processor's hooks, on rows as Ray's engine stage hands them over ---


def _engine_row(prepared: dict[str, Any], text: str, generated: int, **more: Any) -> dict[str, Any]:
    return {
        **prepared,
        "prompt": "<|im_start|>system ...",
        "prompt_token_ids": list(range(142)),
        "num_input_tokens": 142,
        "generated_tokens": list(range(generated)),
        "generated_text": text,
        "num_generated_tokens": generated,
        "request_id": "17",
        "batch_uuid": "5d1c0e",
        "time_taken_llm": 0.41,
        "params": "SamplingParams(n=1, ...)",
        "metrics": None,
        "embeddings": None,
        "__inference_error__": "",
        **more,
    }


def test_vllm_preprocess_sends_the_providers_body_as_messages_and_sampling_params() -> None:
    hooks = ProcessorHooks(Decision, model="Qwen/Qwen3-8B", max_tokens=300)
    row = {"id": "a-1", "prompt": "Approve this refund?", "source": "Refund: 12 EUR.",
           "system": "You review refunds.", "options": {"temperature": 0.2}}  # fmt: skip
    engine = hooks.vllm_preprocess(row)
    http = hooks.http_preprocess(row)
    body = http["payload"]
    assert engine["messages"] == body["messages"]
    assert engine["messages"][0] == {"role": "system", "content": "You review refunds."}
    assert "Refund: 12 EUR." in json.dumps(engine["messages"][1])
    params = engine["sampling_params"]
    assert params["max_tokens"] == 300 and params["temperature"] == 0.2
    schema = params["structured_outputs"]["json"]
    assert schema == body["structured_outputs"]["json"]
    assert schema["properties"]["answer"]["enum"] == ["approve", "reject", "escalate"]
    assert "model" not in params and body["model"] == "Qwen/Qwen3-8B"
    assert engine["__inference_error__"] == ""


def test_vllm_postprocess_judges_text_truncation_and_invalid_rows_and_settles_errors() -> None:
    hooks = ProcessorHooks(Decision, model="Qwen/Qwen3-8B", max_tokens=64, retries=1)
    rows = [{"id": n, "prompt": "Approve this refund?", "source": "Refund."} for n in range(4)]
    prepared = [hooks.vllm_preprocess(row) for row in rows]
    good = hooks.vllm_postprocess(_engine_row({**rows[0], **prepared[0]}, DOCUMENT, 31))
    cut = hooks.vllm_postprocess(_engine_row({**rows[1], **prepared[1]}, DOCUMENT[:90], 64))
    # a reply that reached its limit exactly but closed its document is still cut off (the
    # engine stage gives no finish reason); one that says `finish_reason` is believed
    told = hooks.vllm_postprocess(
        _engine_row({**rows[2], **prepared[2]}, DOCUMENT, 64, finish_reason="stop")
    )
    invalid = hooks.vllm_postprocess(_engine_row({**rows[3], **prepared[3]}, INVALID, 30))
    assert good["outcome"] == "ok" and json.loads(good["value"])["answer"] == "approve"
    assert (good["input_tokens"], good["output_tokens"], good["attempts"]) == (142, 31, 1)
    assert good["stop_reason"] == "end_turn" and good["request_id"] == "17"
    assert cut["outcome"] == "failed" and cut["error_type"] == "TruncatedOutput"
    assert cut["stop_reason"] == "max_tokens" and cut[REASK] is None  # never re-asked as is
    assert told["outcome"] == "ok"
    assert invalid["error_type"] == "SchemaViolation" and invalid[REASK] is not None
    follow_up = json.loads(invalid[REASK])
    assert follow_up["feedback"][0] == ["assistant", INVALID] and follow_up["retries_used"] == 1
    again = hooks.vllm_preprocess({"id": 3, REASK: invalid[REASK]})
    assert again["messages"][-2] == {"role": "assistant", "content": INVALID}
    assert "maybe" in again["messages"][-1]["content"]

    # what reaches `finish`: judged rows, a row the engine failed (it skipped the
    # postprocess, so Ray hands over its data as it was), a row the preprocess refused
    engine_failed = {**rows[0], "id": 10, **hooks.vllm_preprocess({**rows[0], "id": 10})}
    engine_failed.update(generated_text="", __inference_error__="EngineGenerateError: boom")
    refused = {"id": 11, "prompt": None, **hooks.vllm_preprocess({"id": 11, "prompt": None})}
    settled = hooks.settle(_block([good, cut, told, invalid, engine_failed, refused]))
    assert settled.schema == pa.schema([("id", pa.int64()), *COLUMNS, (REASK, pa.string())])
    out = {row["id"]: row for row in settled.to_pylist()}
    assert out[10]["outcome"] == "failed" and out[10]["error_type"] == "ProviderError"
    assert "boom" in out[10]["error_message"] and out[10]["attempts"] == 1
    assert out[11]["error_type"] == "BatchInputError" and out[11]["attempts"] == 0
    assert out[11]["contract"] == "Decision" and out[10]["fingerprint"] == good["fingerprint"]


def _block(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows as one Arrow block the way Ray's block builder makes it: every column any row has,
    null where a row lacks it."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    return pa.Table.from_pylist([{name: row.get(name) for name in names} for row in rows])


def test_the_hooks_pickle_and_never_raise_on_a_row_they_did_not_prepare() -> None:
    import pickle

    hooks = ProcessorHooks("contracts:Decision", model="m")
    _ = hooks.provider  # made, then left out of the pickle
    copy = pickle.loads(pickle.dumps(hooks))
    row = copy.vllm_postprocess({"id": 1, "generated_text": DOCUMENT})
    assert row["outcome"] == "failed" and row["error_type"] == "BatchInputError"
    assert copy.http_preprocess({"id": 2, "prompt": "caf\udcff"})["__inference_error__"]


@pytest.mark.parametrize("contract", ["contracts:Decision", "contracts:ShipmentNotice"])
def test_the_preprocess_builds_the_body_the_live_client_sends(server: Any, contract: str) -> None:
    # ShipmentNotice has source quotes: its body carries the grounded grammar of its source
    from sdk import StructuredClient
    from sdk.batch._map import contract_of
    from sdk.providers import VLLMProvider

    row = {"id": "n-1", "prompt": "Extract the notice.", "system": "Be exact.",
           "source": "Royal Mail brings order AB-12345 today, 2 parcels.",
           "options": {"temperature": 0.2}}  # fmt: skip
    client = StructuredClient(VLLMProvider(server.url, model="Qwen/Qwen3-8B"), retries=0)
    with contextlib.suppress(Exception):  # the stand-in's reply may not fit: the body counts
        client.generate(contract_of(contract), prompt=row["prompt"], system=row["system"],
                        source=row["source"], temperature=0.2, max_tokens=300)  # fmt: skip
    sent = server.bodies("/v1/chat/completions")[0]
    hooks = ProcessorHooks(contract, model="Qwen/Qwen3-8B", max_tokens=300)
    payload = hooks.http_preprocess(row)["payload"]
    assert payload == sent
    assert ("grammar" in payload["structured_outputs"]) == (contract.endswith("ShipmentNotice"))


def test_rows_named_by_another_id_column_are_judged_and_re_asked() -> None:
    # The state a row carries holds its input line, whose id is under `id` whatever the rows'
    # id column: the postprocess and a re-ask read it back by that key.
    hooks = ProcessorHooks(Decision, model="m", id_column="key", retries=1)
    row = {"key": "k-1", "prompt": "Approve this refund?", "source": "Refund."}
    first = hooks.vllm_postprocess(_engine_row({**row, **hooks.vllm_preprocess(row)}, INVALID, 30))
    assert first["id"] == "k-1" and first["error_type"] == "SchemaViolation"
    again = hooks.vllm_preprocess({"key": "k-1", REASK: first[REASK]})
    answered = hooks.vllm_postprocess(_engine_row({"key": "k-1", **again}, DOCUMENT, 31))
    assert answered["id"] == "k-1" and answered["outcome"] == "ok" and answered["attempts"] == 2
