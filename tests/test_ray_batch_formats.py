"""`StructuredMap` on each batch format Ray hands it (no cluster: the class called as Ray calls
it, against the local test server, real HTTP).

Ray's default batch format is numpy (a dict of arrays), and an integer column with one null
arrives there, and in pandas, as floats with NaN. A row without an id is that row's failure:
the other rows keep their integer ids and are asked, and `__call__` never raises (an exception
there fails the whole Ray job).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from pydantic import BaseModel

pa = pytest.importorskip("pyarrow")

from contracts import Decision  # noqa: E402
from sdk import Prompt  # noqa: E402
from sdk.batch._setup import local_clients  # noqa: E402
from sdk.ray import ProcessorHooks  # noqa: E402
from sdk.ray import StructuredMap  # noqa: E402
from tests.local_support import LocalServer  # noqa: E402


def _table() -> Any:
    return pa.table(
        {
            "id": pa.array([1, None, 3], pa.int64()),
            "prompt": ["Approve?"] * 3,
            "source": ["Refund 1: 12 EUR.", "Refund 2: 3 EUR.", "Refund 3: 9 EUR."],
        }
    )


def _numpy(table: Any) -> dict[str, Any]:
    """The batch Ray's default format gives (`Table.to_numpy`, as Ray converts a block)."""
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


@pytest.mark.parametrize("form", ["arrow", "numpy", "pandas"])
def test_a_row_without_an_id_fails_alone_in_every_batch_format(
    server: LocalServer, form: str
) -> None:
    table = _table()
    batch = {"arrow": table, "numpy": _numpy(table), "pandas": table.to_pandas()}[form]
    factory = functools.partial(
        local_clients,
        {"provider": "vllm", "model": "bench-model", "base_urls": [server.url], "retries": 0},
    )
    mapper = StructuredMap(Decision, factory, in_flight=2, timeout=120)
    out = mapper(batch)
    assert out.schema.field("id").type == pa.int64()
    rows = out.to_pylist()
    assert [row["id"] for row in rows] == [1, None, 3]
    assert [row["outcome"] for row in rows] == ["ok", "failed", "ok"]
    assert rows[1]["error_type"] == "BatchInputError" and rows[1]["attempts"] == 0
    assert len(server.bodies("/v1/chat/completions")) == 2  # the row without an id never sent


def test_ids_of_mixed_kinds_in_a_pandas_batch_come_out_as_text_and_never_fail_the_batch(
    server: LocalServer,
) -> None:
    pandas = pytest.importorskip("pandas")
    batch = pandas.DataFrame(
        {"id": [1, "a-2", 2.5], "prompt": ["Approve?"] * 3, "source": ["Refund: 12 EUR."] * 3}
    )
    factory = functools.partial(
        local_clients,
        {"provider": "vllm", "model": "bench-model", "base_urls": [server.url], "retries": 0},
    )
    out = StructuredMap(Decision, factory, in_flight=2, timeout=120)(batch)
    assert out.schema.field("id").type == pa.string()
    rows = out.to_pylist()
    assert [row["id"] for row in rows] == ["1", "a-2", "2.5"]
    assert [row["outcome"] for row in rows] == ["ok", "ok", "failed"]
    assert rows[2]["error_type"] == "BatchInputError"


@pytest.mark.parametrize("form", ["arrow", "numpy", "pandas"])
def test_a_null_max_tokens_is_the_default_and_leaves_the_other_rows_their_own(
    server: LocalServer, form: str
) -> None:
    table = _table().set_column(0, "id", pa.array([1, 2, 3], pa.int64()))
    table = table.append_column("max_tokens", pa.array([100, None, 200], pa.int64()))
    batch = {"arrow": table, "numpy": _numpy(table), "pandas": table.to_pandas()}[form]
    factory = functools.partial(
        local_clients,
        {"provider": "vllm", "model": "bench-model", "base_urls": [server.url], "retries": 0},
    )
    out = StructuredMap(Decision, factory, in_flight=1, timeout=120, max_tokens=300)(batch)
    assert out.column("outcome").to_pylist() == ["ok", "ok", "ok"]
    sent = sorted(body["max_tokens"] for body in server.bodies("/v1/chat/completions"))
    assert sent == [100, 200, 300]


def test_the_hooks_settle_a_block_of_float_ids_without_failing_it(server: LocalServer) -> None:
    # A CSV's id column with a gap is read as floats: each row fails alone (an id is a string
    # or an integer), and the block still comes out.
    hooks = ProcessorHooks(Decision, model="bench-model", retries=0)
    rows = [{"id": 1.5, "prompt": "Approve?", "source": "Refund: 12 EUR."},
            {"id": None, "prompt": "Approve?", "source": "Refund: 3 EUR."}]  # fmt: skip
    out = []
    for row in rows:
        prepared = hooks.http_preprocess(dict(row))
        assert prepared["__inference_error__"]  # never sent
        out.append({**row, **prepared})
    names = list(dict.fromkeys(name for row in out for name in row))
    settled = hooks.settle(pa.Table.from_pylist([{n: row.get(n) for n in names} for row in out]))
    assert settled.column("id").to_pylist() == ["1.5", None]
    assert settled.column("outcome").to_pylist() == ["failed", "failed"]
    assert settled.column("error_type").to_pylist() == ["BatchInputError"] * 2
    assert server.bodies("/v1/chat/completions") == []


@pytest.mark.parametrize("form", ["arrow", "numpy", "pandas"])
def test_lines_setting_different_options_each_keep_their_own(
    server: LocalServer, form: str
) -> None:
    # `ray.data.read_json` makes an `options` struct column of every line's keys: a row gets
    # the keys it lacks as null. On main both rows failed ("seed must be a whole number, not
    # None", "temperature must be a number, not None"); `sdk batch` asks both. Ray's numpy and
    # pandas batches hold the struct's `seed` as 3.0: that row failed there ("seed must be a
    # whole number, not 3.0"), while a whole `temperature` stays a float, as `sdk batch` sends it.
    table = pa.Table.from_pylist(
        [
            {
                "id": "a",
                "prompt": "Approve?",
                "source": "Refund: 12 EUR.",
                "options": {"temperature": 0.5},
            },
            {"id": "b", "prompt": "Approve?", "source": "Refund: 3 EUR.", "options": {"seed": 3}},
            {
                "id": "c",
                "prompt": "Approve?",
                "source": "Refund: 5 EUR.",
                "options": {"temperature": 1.0, "seed": 7},
            },
        ]
    )
    assert table.column("options").to_pylist()[0] == {"temperature": 0.5, "seed": None}
    batch = {"arrow": table, "numpy": _numpy(table), "pandas": table.to_pandas()}[form]
    factory = functools.partial(
        local_clients,
        {"provider": "vllm", "model": "bench-model", "base_urls": [server.url], "retries": 0},
    )
    out = StructuredMap(Decision, factory, in_flight=1, timeout=120)(batch)
    assert out.column("outcome").to_pylist() == ["ok", "ok", "ok"]
    sent = [
        (body.get("temperature"), body.get("seed"))
        for body in server.bodies("/v1/chat/completions")
    ]
    assert sorted(sent, key=repr) == sorted([(0.5, None), (None, 3), (1.0, 7)], key=repr)
    assert {type(seed) for _, seed in sent} == {type(None), int}
    assert {type(temperature) for temperature, _ in sent} == {type(None), float}


def test_integer_ids_past_int64_come_out_as_text(server: LocalServer) -> None:
    # A pandas object column of Python ints, one past int64: on main the table was int64 and
    # Arrow's overflow raised out of `__call__`.
    pandas = pytest.importorskip("pandas")
    batch = pandas.DataFrame(
        {"id": [1, 2**70], "prompt": ["Approve?"] * 2, "source": ["Refund: 12 EUR."] * 2},
        dtype=object,
    )
    factory = functools.partial(
        local_clients,
        {"provider": "vllm", "model": "bench-model", "base_urls": [server.url], "retries": 0},
    )
    out = StructuredMap(Decision, factory, in_flight=2, timeout=120)(batch)
    assert out.schema.field("id").type == pa.string()
    assert out.column("id").to_pylist() == ["1", str(2**70)]
    assert out.column("outcome").to_pylist()[0] == "ok"


def test_an_options_struct_member_that_is_nan_is_an_option_not_set() -> None:
    # A numpy or pandas batch writes a numeric member's null as NaN: on main the row kept
    # `temperature: nan` and failed ("temperature must be ... not nan").
    from sdk.batch._map import row_item

    row = {"id": 1, "prompt": "Approve?", "source": "Refund: 12 EUR.",
           "options": {"temperature": float("nan"), "seed": 3.0, "top_p": 1.0}}  # fmt: skip
    item, record = row_item(Decision, row, "id", None)
    assert record["options"] == {"seed": 3, "top_p": 1.0}
    assert type(record["options"]["seed"]) is int
    assert type(record["options"]["top_p"]) is float
    assert item.options == {"seed": 3, "top_p": 1.0}


class _Numbered(Prompt):
    version = 1
    template = "Approve refund {{ number }} of {{ count }}? {{ note }}"

    class Inputs(BaseModel):
        number: int
        count: int | None = None
        note: str = ""


@pytest.mark.parametrize("form", ["arrow", "numpy", "pandas"])
@pytest.mark.parametrize("given", ["columns", "struct"])
def test_a_whole_number_variable_held_as_a_float_is_the_integer_it_was(
    server: LocalServer, form: str, given: str
) -> None:
    # An integer column (or struct member) with a null: numpy and pandas batches hold it as
    # floats. On main those rows failed ("number: Input should be a valid integer").
    rows = [{"number": 1, "count": 2}, {"number": 2, "count": None}, {"number": None, "count": 3}]
    columns = {"id": pa.array(["a", "b", "c"]), "source": ["Refund: 12 EUR."] * 3}
    if given == "columns":
        columns |= {name: pa.array([r[name] for r in rows], pa.int64()) for name in rows[0]}
    else:
        columns["variables"] = pa.array(rows)
    table = pa.table(columns)
    batch = {"arrow": table, "numpy": _numpy(table), "pandas": table.to_pandas()}[form]
    factory = functools.partial(
        local_clients,
        {"provider": "vllm", "model": "bench-model", "base_urls": [server.url], "retries": 0},
    )
    out = StructuredMap(Decision, factory, in_flight=1, timeout=120, prompt=_Numbered)(batch)
    assert out.column("outcome").to_pylist() == ["ok", "ok", "failed"]
    assert "number" in out.column("error_message").to_pylist()[2]  # its null: not given
    sent = sorted(body["messages"][-1]["content"] for body in server.bodies("/v1/chat/completions"))
    rendered = [_Numbered.render(number=1, count=2).text, _Numbered.render(number=2).text]
    assert [text.split("\n")[0] for text in sent] == rendered  # (the source after it)
