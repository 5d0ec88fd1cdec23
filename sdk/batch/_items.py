"""The input file: one JSON object a line, read as a stream and re-read one line at a time.

An item line holds an `id` (string or integer, unique in the file), and `prompt`, `source` or
`messages` (as `generate` takes them), optionally `system`, `max_tokens` and `options` (keyword
arguments for the provider call, `temperature` say). The file is never loaded whole: indexing
reads it line by line and the job keeps each item's byte offset, so a 1 GB input costs its
index (an id and two integers a line, in SQLite) and one line at a time in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sdk.batch._errors import BatchInputError
from sdk.contract import Contract
from sdk.engine.conversation import conversation
from sdk.providers._base import Message

__all__ = ["IndexEntry", "InputItem", "InputReader", "file_identity", "parse_item", "read_index"]

MAX_LINE = 64 * 1024 * 1024
"""Longest input line read (64 MB): a longer one is an error, not an out-of-memory."""

_KEYS = frozenset({"id", "prompt", "source", "messages", "system", "max_tokens", "options"})


@dataclass(frozen=True)
class InputItem:
    """One item of the input: its id and what to ask for it."""

    id: str
    messages: tuple[Message, ...]
    source: str | None = None
    system: str | None = None
    max_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


def parse_item(contract: type[Contract], line: bytes, where: str) -> InputItem:
    """An input line -> `InputItem`; `BatchInputError` (naming `where`) when it is not one."""
    try:
        data = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BatchInputError(f"{where}: not a JSON object ({error})") from None
    except RecursionError:
        raise BatchInputError(f"{where}: nested too deeply to read") from None
    if not isinstance(data, dict):
        raise BatchInputError(f"{where}: not a JSON object but {type(data).__name__}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise BatchInputError(f"{where}: unknown keys {unknown} (allowed: {sorted(_KEYS)})")
    raw_id = data.get("id")
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        raise BatchInputError(f"{where}: `id` must be a non-empty string or an integer")
    item_id = str(raw_id)
    for key in ("prompt", "source", "system"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise BatchInputError(f"{where} (id {item_id}): `{key}` must be a string")
    max_tokens = data.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise BatchInputError(f"{where} (id {item_id}): `max_tokens` must be a positive integer")
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise BatchInputError(f"{where} (id {item_id}): `options` must be an object")
    messages = data.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise BatchInputError(f"{where} (id {item_id}): `messages` must be a list")
    try:
        turns = conversation(contract, data.get("prompt"), messages, data.get("source"))
    except (ValueError, AttributeError) as error:
        raise BatchInputError(f"{where} (id {item_id}): {error}") from None
    return InputItem(
        id=item_id,
        messages=turns,
        source=data.get("source"),
        system=data.get("system"),
        max_tokens=max_tokens,
        options=options,
    )


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where an item's line is: its id, byte offset and length."""

    id: str
    offset: int
    length: int


def read_index(
    path: Path, contract: type[Contract], start: int = 0, first_line: int = 1
) -> Iterator[IndexEntry]:
    """Each item line of `path` from byte `start`, validated, as (id, offset, length); blank
    lines are skipped. A line past `MAX_LINE` or a last line without its newline that does not
    parse raises `BatchInputError`."""
    with open(path, "rb") as file:
        file.seek(start)
        offset, number = start, first_line - 1
        while True:
            line = file.readline(MAX_LINE + 1)
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                raise BatchInputError(f"{path}:{number}: line longer than {MAX_LINE} bytes")
            if line.strip():
                item = parse_item(contract, line, f"{path}:{number}")
                yield IndexEntry(item.id, offset, len(line))
            offset += len(line)


class InputReader:
    """Reads items back by offset (the index says where), one line at a time."""

    def __init__(self, path: Path, contract: type[Contract]) -> None:
        self.path = path
        self.contract = contract
        self._file: BinaryIO | None = None

    def read(self, offset: int, length: int) -> InputItem:
        """The item whose line starts at `offset`."""
        if self._file is None:
            self._file = open(self.path, "rb")  # noqa: SIM115 (closed by close())
        self._file.seek(offset)
        line = self._file.read(length)
        return parse_item(self.contract, line, f"{self.path} at byte {offset}")

    def read_many(self, places: Sequence[tuple[int, int]]) -> list[InputItem]:
        """Items at these (offset, length) places, in that order."""
        return [self.read(offset, length) for offset, length in places]

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def file_identity(path: Path) -> str:
    """The input's size and a hash of its first and last megabyte: an input that changed under
    a job (its offsets would point elsewhere) is refused, a copy of it is not."""
    size = os.stat(path).st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as file:
        digest.update(file.read(_SAMPLE))
        file.seek(max(0, size - _SAMPLE))
        digest.update(file.read(_SAMPLE))
    return f"{size}:{digest.hexdigest()[:32]}"


_SAMPLE = 1024 * 1024
