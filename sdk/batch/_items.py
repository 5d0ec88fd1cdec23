"""The input file: one JSON object a line, read as a stream and re-read one line at a time.

An item line holds an `id` (a string or an integer, unique in the file as text: `7` and `"7"` are
one id, refused as a duplicate; each output line writes the id with the JSON type it had), and
`prompt`, `source` or `messages` (as `generate` takes them), optionally `system`, `max_tokens`
and `options` (keyword arguments for the provider call, `temperature` say). A job with a prompt
template (`sdk.Prompt`) takes `variables` (the template's, as a JSON object) instead of
`prompt`/`messages`/`system`: the line is rendered for the job's contract when it is read, so a
bad variable is refused when the input is indexed, before anything is sent. The file is never
loaded whole: indexing reads it line by line and the job keeps each item's byte offset, so a 1 GB
input costs its index (an id, two integers and a hash a line, in SQLite) and one line at a time
in memory.

Identity: each item's id and a hash of its line's bytes (`line_hash`) are recorded when it is
indexed, and `InputReader.read` checks both each time it reads the line back, so an answer is
never computed from (or filed under) a line other than the one indexed for that id. Indexing
itself keeps a running digest of the bytes it has read, so that an interrupted indexing resumes
only over an unchanged prefix (`prefix_digest`). `first_change` names the first line that differs
from the index, for the error that stops the job.

Every read opens the input with `sdk._files.open_regular`: a named pipe (or a device) put at its
path, by `resume` or while the job runs, is an `OSError` that stops the job, never an open that
waits for a writer for ever.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Generator
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path
from typing import Any
from typing import BinaryIO
from typing import Final

from pydantic import ValidationError

from sdk._files import open_regular
from sdk._values.declared import check
from sdk._values.position import decoding_problem
from sdk._values.records import PromptInfo
from sdk._values.sendable import check_text
from sdk.batch._errors import BatchInputError
from sdk.batch._errors import InputChanged
from sdk.batch._state import ItemRow
from sdk.contract import Contract
from sdk.engine.conversation import conversation
from sdk.engine.options import declarations
from sdk.parsing.parser import RepeatedKey
from sdk.parsing.parser import unique_keys
from sdk.prompt import Prompt
from sdk.prompt import TemplateError
from sdk.providers._base import Message

__all__ = [
    "IndexEntry",
    "InputItem",
    "InputReader",
    "file_identity",
    "first_change",
    "line_hash",
    "parse_item",
    "prefix_digest",
    "read_index",
]

MAX_LINE = 64 * 1024 * 1024
"""Longest input line read (64 MB): a longer one is an error, not an out-of-memory."""

_KEYS = frozenset(
    {"id", "prompt", "source", "messages", "system", "max_tokens", "options", "variables"}
)


@dataclass(frozen=True)
class InputItem:
    """One item of the input: its id and what to ask for it."""

    id: str
    messages: tuple[Message, ...]
    source: str | None = None
    system: str | None = None
    max_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    unusable: str | None = None
    """Why the item cannot be run although its line parsed (its id is not valid Unicode): the
    item fails with this, the job goes on."""
    prompt: PromptInfo | None = None
    """The prompt template the item's `variables` were rendered with."""
    id_number: bool = False
    """The id was a JSON integer (`7`, not `"7"`): its output line writes it as one."""

    def call_options(self, feedback: tuple[Message, ...] = ()) -> dict[str, Any]:
        """The keyword arguments of the item's call, as the local runner passes them to
        `generate` and a hosted request is built from them: its own options, its inputs (the
        conversation, then `feedback`) and its limit. `TypeError` (the item fails alone, as for
        an option a call refuses) for an option a line may not set (`_refused_option`)."""
        for name in self.options:
            problem = _refused_option(name)
            if problem is not None:
                raise TypeError(f"a batch item's options may not set {name!r}: {problem}")
        limit = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        turns = self.messages + feedback
        inputs = {"messages": turns, "system": self.system, "source": self.source}
        return {**self.options, **inputs, **limit}


# What a line's `options` may not set though a call's options may: what the job chooses, not a
# line of its data (an input file may come from anyone). A line's options turned on the default
# response cache for its item (`cache: true`: another file, written with its prompt and reply)
# or off, and lifted the bounds the job's clients put on each call (`deadline: 604800` held a
# worker for a week on a stalled server; `runaway: null` let a runaway reply run to its limit).
_JOB_OWNED: Final = {
    "cache": "the job's response cache is the job's own (--cache)",
    "deadline": "the job's clients bound each call's time",
    "attempt_deadline": "the job's clients bound each call's time",
    "runaway": "the job's clients' runaway guard bounds each call",
}


def _refused_option(name: str) -> str | None:
    """Why a line's `options` may not set `name`, or `None`."""
    if name in _KEYS:
        return f"it is a key of the line itself (give {name!r} there, once)"
    return _JOB_OWNED.get(name)


def line_hash(line: bytes) -> int:
    """An input line's identity: 64 bits of BLAKE2b over its bytes, as SQLite's signed integer."""
    return int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "big", signed=True)


def _storable(item_id: str) -> tuple[str, str | None]:
    """The id as the state file and the output can hold it, and why the item cannot run if the
    id had to be changed for that: a lone surrogate (`"\\ud800"` in the JSON) is not text
    UTF-8 can encode, so it is kept escaped and the item fails rather than answer under an
    id that is not the input's."""
    try:
        item_id.encode("utf-8")
    except UnicodeEncodeError:
        escaped = item_id.encode("utf-8", "backslashreplace").decode("utf-8")
        return escaped, (
            f"the item's id is not valid Unicode text (a lone surrogate); it is written as "
            f"{escaped!r}, and the item is not run"
        )
    return item_id, None


def _unsendable_text(data: dict[str, Any]) -> str | None:
    """Why an item's text cannot be sent (a lone surrogate, which UTF-8 cannot encode), or
    `None`: that item fails alone, as an unusable id does."""
    texts = [(key, data.get(key)) for key in ("prompt", "source", "system")]
    for index, message in enumerate(data.get("messages") or ()):
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            texts.append((f"messages[{index}]", message["content"]))
    for where, text in texts:
        if isinstance(text, str):
            try:
                check_text(text, where)
            except ValueError as error:
                return f"{error}; the item is not run"
    return None


_LINE = json.JSONDecoder(object_pairs_hook=unique_keys)
"""How an input line is read: as `json.loads` reads bytes, and a key given twice in one object
refused (`RepeatedKey`), as in a reply (which value would the line mean?)."""


def parse_item(
    contract: type[Contract], line: bytes, where: str, prompt: type[Prompt] | None = None
) -> InputItem:
    """An input line -> `InputItem`; `BatchInputError` (naming `where`) when it is not one.
    `prompt`: the job's template, which renders each line's `variables`."""
    try:
        data = _LINE.decode(line.decode(json.detect_encoding(line), "surrogatepass"))
    except RepeatedKey as error:  # a line that says two things, as a reply may not
        raise BatchInputError(f"{where}: {error} in one object (which value is meant?)") from None
    except ValueError as error:  # not UTF-8, not JSON, an integer past Python's digit limit
        raise BatchInputError(f"{where}: not a JSON object ({decoding_problem(error)})") from None
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
    item_id, unusable = _storable(str(raw_id))
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
    unusable = unusable or _unsendable_text(data)
    text, system = data.get("prompt"), data.get("system")
    static = 0
    try:
        if system is not None:  # (as a call's `system=` is checked: not blank)
            check("system", system, declarations()["system"].annotation)
        if prompt is not None or "variables" in data:
            text, system, static = _rendered(contract, prompt, data)
        turns = (
            conversation(contract, text, messages, data.get("source"))
            if unusable is None
            else ()  # not run: its failure is recorded, the job goes on
        )
        if static and turns:  # the template's literal start, as a live call marks it
            turns = (replace(turns[0], static_prefix=static), *turns[1:])
    except (ValueError, TypeError, AttributeError) as error:
        raise BatchInputError(f"{where} (id {item_id}): {error}") from None
    return InputItem(
        id=item_id,
        messages=turns,
        source=data.get("source"),
        system=system,
        max_tokens=max_tokens,
        options=options,
        unusable=unusable,
        prompt=prompt.info() if prompt is not None else None,
        id_number=isinstance(raw_id, int),
    )


def _rendered(
    contract: type[Contract], prompt: type[Prompt] | None, data: dict[str, Any]
) -> tuple[Any, str | None, int]:
    """A line's `variables` rendered with the job's prompt: the user turn (text, or text and
    parts), the system prompt, and the length of the turn's literal start
    (`Message.static_prefix`: what a provider's prompt cache holds). A line of a prompt's job
    carries variables and no prompt, messages or system of its own; a line with variables needs
    a job with a prompt."""
    if prompt is None:
        raise ValueError("`variables` are for a job with a prompt template (--prompt)")
    if "variables" not in data:
        raise ValueError(f"the job renders {prompt.name}: give its `variables`, not a prompt")
    clash = sorted(key for key in ("prompt", "messages", "system") if key in data)
    if clash:
        raise ValueError(f"`variables` render {prompt.name}: the line may not also set {clash}")
    try:
        rendered = prompt.from_json(data["variables"]).render(contract=contract)
    except (ValidationError, TemplateError) as error:
        raise ValueError(f"{prompt.name}: {' '.join(str(error).split())}") from None
    [message] = rendered.messages
    content = message.content if isinstance(message.content, str) else list(message.parts)
    return content, rendered.system, message.static_prefix


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where an item's line is: its id (and whether it was a JSON integer), byte offset, length
    and hash, and its line number."""

    id: str
    offset: int
    length: int
    hash: int
    line: int
    id_number: bool = False


def read_index(
    path: Path,
    contract: type[Contract],
    start: int = 0,
    first_line: int = 1,
    digest: Any = None,
    prompt: type[Prompt] | None = None,
    *,
    hold_last: bool = False,
) -> Generator[IndexEntry, None, tuple[int, int]]:
    """Each item line of `path` from byte `start` (line number `first_line`), validated, as an
    `IndexEntry`; blank lines are skipped. Every byte read also goes into `digest` (a `hashlib`
    object), so that when an entry is yielded it holds the bytes up to that entry's end. A line
    past `MAX_LINE` or a last line without its newline that does not parse raises
    `BatchInputError`; with `hold_last`, such a last line (one still being written, maybe) is
    left unread instead: the reading ends before it. Returns where the reading ended: the byte
    offset and the last line's number."""
    with open_regular(path) as file:
        file.seek(start)
        offset, number = start, first_line - 1
        while True:
            line = file.readline(MAX_LINE + 1)
            if not line:
                return offset, number
            number += 1
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                raise BatchInputError(f"{path}:{number}: line longer than {MAX_LINE} bytes")
            item = None
            if line.strip():
                try:
                    item = parse_item(contract, line, f"{path}:{number}", prompt)
                except BatchInputError:
                    if hold_last and not line.endswith(b"\n"):
                        return offset, number - 1
                    raise
            if digest is not None:
                digest.update(line)
            if item is not None:
                yield IndexEntry(
                    item.id, offset, len(line), line_hash(line), number, item.id_number
                )
            offset += len(line)


def prefix_digest(path: Path, end: int) -> Any:
    """A SHA-256 `hashlib` object over the first `end` bytes of `path` (fewer if it is shorter):
    what indexing had read when it stopped, to compare before it resumes."""
    digest = hashlib.sha256()
    left = end
    with open_regular(path) as file:
        while left > 0:
            block = file.read(min(left, 1 << 20))
            if not block:
                break
            digest.update(block)
            left -= len(block)
    return digest


class InputReader:
    """Reads items back by their index row, one line at a time, checking the line is the one
    indexed for that id (`InputChanged` if not)."""

    def __init__(
        self, path: Path, contract: type[Contract], prompt: type[Prompt] | None = None
    ) -> None:
        self.path = path
        self.contract = contract
        self.prompt = prompt
        self._file: BinaryIO | None = None

    def read(self, row: ItemRow) -> InputItem:
        """The item of `row`: its line, which must hash as indexed and hold the same id."""
        line = self.line(row)
        where = f"{self.path} at byte {row.offset}"
        item = parse_item(self.contract, line, where, self.prompt)
        if item.id != row.id:  # the same bytes parse the same: only a hash collision gets here
            raise InputChanged(f"{where}: item {item.id!r} where {row.id!r} was indexed")
        return item

    def line(self, row: ItemRow) -> bytes:
        """The line of `row`, checked to hash as indexed (`InputChanged` if not)."""
        if self._file is None:
            self._file = open_regular(self.path)
        self._file.seek(row.offset)
        line = self._file.read(row.length)
        if len(line) != row.length or line_hash(line) != row.hash:
            raise InputChanged(
                f"{self.path} at byte {row.offset}: the line of item {row.id!r} changed since "
                "indexing"
            )
        return line

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def first_change(path: Path, rows: Iterable[ItemRow], *, complete: bool) -> str | None:
    """Where `path` first differs from the index `rows` (every item, in input order): "PATH:LINE:
    what changed", or `None` if every indexed line is as it was. `complete`: the index covers
    the whole file, so a line after the last item is a change too."""
    with open_regular(path) as file:
        offset, number = 0, 0
        for row in rows:
            while offset < row.offset:  # the blank lines between two items
                line = file.readline(MAX_LINE + 1)
                number += 1
                if not line:
                    return f"{path}:{number}: the file ends before item {row.id!r}"
                offset += len(line)
                if line.strip():
                    return f"{path}:{number}: a line changed or added before item {row.id!r}"
            if offset != row.offset:
                return f"{path}:{number}: changed (item {row.id!r} no longer starts a line)"
            line = file.readline(MAX_LINE + 1)
            number += 1
            offset += len(line)
            if not _as_indexed(line, row):
                return f"{path}:{number}: changed since indexing (it was item {row.id!r})"
        if complete:
            for line in file:
                number += 1
                if line.strip():
                    return f"{path}:{number}: a line added after indexing"
    return None


def _as_indexed(line: bytes, row: ItemRow) -> bool:
    """Whether `line` (read with its line end) is the line indexed for `row`: the same bytes,
    or, for the file's last line indexed without a line end, those bytes with one added (an
    editor that ends the file with a newline on save changes no line)."""
    if len(line) == row.length:
        return line_hash(line) == row.hash
    return line[row.length :] in (b"\n", b"\r\n") and line_hash(line[: row.length]) == row.hash


def file_identity(path: Path) -> str:
    """The input's size and a hash of its first and last megabyte: the quick check on resuming
    (a change it misses is caught when the changed line is read back)."""
    size = os.stat(path).st_size
    digest = hashlib.sha256(str(size).encode())
    with open_regular(path) as file:
        digest.update(file.read(_SAMPLE))
        file.seek(max(0, size - _SAMPLE))
        digest.update(file.read(_SAMPLE))
    return f"{size}:{digest.hexdigest()[:32]}"


_SAMPLE = 1024 * 1024
