"""The flat columns of a structured row: a `sdk batch` output line, as typed Arrow columns.

A batch output line is nested JSON (`schema: {name, version, fingerprint}`, `usage: {...}`,
`error: {...}`); a Ray dataset wants flat columns of one type each, so that every block has the
same Arrow schema whatever its rows held (a block of failures only has no `value`, but its
column is still a string column, of nulls). `row_of` flattens a line's record, `line_of` puts it
back: the two carry the same fields, so a row written out by `line_of` is the line `sdk batch`
writes for the same item. A line that names its prompt template (`"prompt": {name, version,
fingerprint}`, a job or a map with an `sdk.Prompt`) has `PROMPT_COLUMNS` too; one without has
none of them, so a map without a template keeps the schema `COLUMNS` alone. `decided_row` is a
decided item's row, from its output line as the decision wrote it: what `StructuredMap` and
`ProcessorHooks` both give.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

import pyarrow as pa

if TYPE_CHECKING:
    from sdk.prompt import Prompt

__all__ = ["COLUMNS", "PROMPT_COLUMNS", "decided_row", "line_of", "row_of", "schema_for"]

COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("outcome", pa.string()),
    ("value", pa.string()),
    ("error_type", pa.string()),
    ("error_message", pa.string()),
    ("error", pa.string()),
    ("stop_reason", pa.string()),
    ("raw_stop_reason", pa.string()),
    ("attempts", pa.int64()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("notes", pa.string()),
    ("contract", pa.string()),
    ("contract_version", pa.int64()),
    ("fingerprint", pa.string()),
    ("provider", pa.string()),
    ("model", pa.string()),
    ("request_id", pa.string()),
)
"""Every column a structured row has besides its id, with its type: `outcome` (`ok`, `failed`),
`value` (the value as JSON text), `error_type` and `error_message`, `error` (the whole error
record as JSON text: violations, raw text, stop reason), the stop reason and the provider's raw
one, `attempts`, the tokens, `notes` (a JSON list), the contract's name, version and
fingerprint, and who answered."""


PROMPT_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("prompt_name", pa.string()),
    ("prompt_version", pa.int64()),
    ("prompt_fingerprint", pa.string()),
)
"""The columns of rows rendered with a prompt template (`sdk.Prompt`): which one produced the
row, as a batch line's `prompt` says it. Only a map given a template has them (every row of it,
failed ones included)."""


def schema_for(id_type: pa.DataType, *, prompt: bool = False) -> pa.Schema:
    """The rows' schema: `id` of the input's id type, then `COLUMNS` (and `PROMPT_COLUMNS` for
    rows rendered with a prompt template)."""
    return pa.schema([("id", id_type), *COLUMNS, *(PROMPT_COLUMNS if prompt else ())])


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def row_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """A batch output line's record -> the row's columns (without `id`)."""
    schema = record.get("schema") or {}
    usage = record.get("usage") or {}
    error = record.get("error")
    ok = record.get("outcome") == "ok"
    columns = {
        "outcome": record.get("outcome"),
        "value": _json(record.get("value")) if ok else None,
        "error_type": error.get("type") if error else None,
        "error_message": error.get("message") if error else None,
        "error": _json(error),
        "stop_reason": record.get("stop_reason") if ok else (error or {}).get("stop_reason"),
        "raw_stop_reason": (
            record.get("raw_stop_reason") if ok else (error or {}).get("raw_stop_reason")
        ),
        "attempts": int(record.get("attempts") or 0),
        "input_tokens": int(usage.get("input_tokens") or 0),
        "output_tokens": int(usage.get("output_tokens") or 0),
        "notes": _json(record.get("notes") or []),
        "contract": schema.get("name"),
        "contract_version": schema.get("version"),
        "fingerprint": schema.get("fingerprint"),
        "provider": record.get("provider"),
        "model": record.get("model"),
        "request_id": record.get("request_id"),
    }
    prompt = record.get("prompt")
    if prompt is not None:
        columns["prompt_name"] = prompt.get("name")
        columns["prompt_version"] = prompt.get("version")
        columns["prompt_fingerprint"] = prompt.get("fingerprint")
    return columns


def decided_row(
    row_id: Any, line: bytes | None, prompt: type[Prompt] | None = None
) -> dict[str, Any]:
    """An item's row from its decision's output `line`: `id`, then the line's columns
    (`row_of`), and with the prompt template that rendered the item, `PROMPT_COLUMNS` naming it
    as a job's line names it (`sdk.batch._outcome.prompted`). The line is parsed once and never
    encoded again: the columns do not depend on its key order. An item not decided yet (no
    line: a job's item left for its next pass) has `id` and a null outcome."""
    if line is None:
        return {"id": row_id, "outcome": None}
    record = json.loads(line)
    if prompt is not None:
        record["prompt"] = prompt.info().to_json()
    return {"id": row_id, **row_of(record)}


def line_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row -> the record of the `sdk batch` output line for the same item (`batch`: `None`;
    `prompt` after `schema` when the row names its prompt template, as a job's line does)."""
    said: dict[str, Any] = {
        "schema": {
            "name": row["contract"],
            "version": row["contract_version"],
            "fingerprint": row["fingerprint"],
        },
    }
    if row.get("prompt_name") is not None:
        said["prompt"] = {
            "name": row["prompt_name"],
            "version": row["prompt_version"],
            "fingerprint": row["prompt_fingerprint"],
        }
    said.update(provider=row["provider"], model=row["model"])
    usage = {"input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"]}
    if row["outcome"] == "ok":
        return {
            "id": row["id"],
            "outcome": "ok",
            "value": json.loads(row["value"]),
            **said,
            "stop_reason": row["stop_reason"],
            "raw_stop_reason": row["raw_stop_reason"],
            "notes": json.loads(row["notes"] or "[]"),
            "attempts": row["attempts"],
            "usage": usage,
            "request_id": row["request_id"],
            "batch": None,
        }
    return {
        "id": row["id"],
        "outcome": row["outcome"],
        "error": json.loads(row["error"]) if row["error"] else None,
        **said,
        "attempts": row["attempts"],
        "usage": usage,
        "batch": None,
    }
