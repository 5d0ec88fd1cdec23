"""Snapshot files: one contract's canonical schema at one version, as committed bytes.

A snapshot is `NAME.vVERSION.json`: the canonical schema, indented for review, with the same key
order as `canonical_bytes` (every object's keys sorted, except `properties`, whose order is the
generation order). The fingerprint is never computed from the indented file: it is always
`sha256(canonical_bytes(schema))`, so reading a snapshot back gives the fingerprint of the contract
that wrote it, whatever the whitespace.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from sdk._files import read_regular
from sdk._values.pointer import pointer_of
from sdk._values.position import decoding_problem
from sdk._values.records import shorten
from sdk.schema.canonical import VERSION_KEY
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import canonical_bytes

__all__ = ["info_of", "load_snapshot", "snapshot_bytes", "snapshot_name"]


def snapshot_name(name: str, version: int) -> str:
    """The file name of a snapshot: `Decision.v2.json`."""
    return f"{name}.v{version}.json"


def snapshot_bytes(schema: dict[str, Any]) -> bytes:
    """Deterministic, reviewable bytes: canonical key order, two-space indent, final newline."""
    # Going through canonical_bytes reuses its ordering rule; json.loads keeps that order.
    ordered = json.loads(canonical_bytes(schema))
    return (json.dumps(ordered, indent=2, ensure_ascii=True) + "\n").encode()


def load_snapshot(path: Path) -> dict[str, Any]:
    """Read a snapshot (or any JSON Schema file) keeping its property order.

    A file that is not JSON, or not a JSON Schema (checked against the draft 2020-12
    metaschema: `"enum": 5` is not one), is a `ValueError` naming the file and the problem.
    """
    try:
        data = json.loads(read_regular(path))
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({decoding_problem(error)})") from error
    except RecursionError as error:
        raise ValueError(f"{path}: not valid JSON (nested too deeply)") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a schema must be a JSON object")
    try:
        problem = best_match(_METASCHEMA.iter_errors(data))
    except RecursionError as error:
        raise ValueError(f"{path}: not a JSON Schema: nested too deeply") from error
    if problem is not None:
        at = pointer_of(problem.absolute_path) or "/"
        raise ValueError(
            f"{path}: not a JSON Schema: {at}: {shorten(' '.join(problem.message.split()), 160)}"
        )
    return data


_METASCHEMA = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)


def info_of(schema: dict[str, Any]) -> SchemaInfo:
    """Name, version and fingerprint of a schema document (a snapshot read back, say).

    For a contract's canonical schema this equals `schema_info(contract)`.
    """
    name = schema.get("title")
    version = schema.get(VERSION_KEY)
    return SchemaInfo(
        name=name if isinstance(name, str) else "",
        version=version if isinstance(version, int) else 0,
        fingerprint=hashlib.sha256(canonical_bytes(schema)).hexdigest(),
    )
