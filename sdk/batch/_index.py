"""Indexing a job's input, resumably, and saying where the input changed under a job.

`index_input` reads the input as a stream (`sdk.batch._items.read_index`) and adds its items to
the state file a chunk at a time; with each chunk it records how far it got (`meta.index_progress`:
the byte offset, the line number and a SHA-256 digest of every byte up to there). An interrupted
indexing resumes only if the bytes it already read are unchanged (the digest of the file's prefix
is the recorded one); otherwise, or when a line read back later does not hash as indexed,
`input_changed` names the first changed line.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sdk._files import newlines_before
from sdk._files import open_regular
from sdk.batch._errors import BatchInputError
from sdk.batch._errors import InputChanged
from sdk.batch._items import IndexEntry
from sdk.batch._items import file_identity
from sdk.batch._items import first_change
from sdk.batch._items import prefix_digest
from sdk.batch._items import read_index
from sdk.batch._state import ItemRow
from sdk.batch._state import JobState
from sdk.contract import Contract
from sdk.prompt import Prompt

__all__ = ["index_input", "input_changed", "input_stat"]

_CHUNK = 5000
"""Items per indexing transaction."""

_PAGE = 5000

_SETTLE = 1.0
"""Seconds an input must stay unchanged before a last line that has no newline and does not
parse is read as it is (and refused): until then it may be a line still being written."""

_HELD_POLL = 0.05


def index_input(
    state: JobState,
    path: Path,
    contract: type[Contract],
    on_chunk: Callable[[int], None] = lambda indexed: None,
    prompt: type[Prompt] | None = None,
) -> None:
    """Index `path` into `state` (or resume indexing it); check an indexed input is unchanged
    (its size and first and last megabyte: a change elsewhere is caught when its line is read).
    `on_chunk(items indexed so far)` after each chunk; `prompt`: the job's template, which
    renders each line's `variables`."""
    if state.get("indexed"):
        if file_identity(path) != state.get("input_identity"):
            problem = input_changed(state, path)
            if problem is not None:
                raise problem
            # Every indexed line is as it was (blank lines changed): the new identity holds.
            state.put("input_identity", file_identity(path))
        return
    progress = state.get("index_progress") or {"end": 0, "lines": 0, "digest": _EMPTY}
    digest = prefix_digest(path, int(progress["end"]))
    if digest.hexdigest() != progress["digest"]:
        raise input_changed(state, path) or InputChanged(
            f"{path}: the first {progress['end']:,} bytes changed while the job indexed them"
        )
    start, first = int(progress["end"]), int(progress["lines"]) + 1
    chunk: list[IndexEntry] = []
    indexed = state.item_count()
    held: tuple[str, float] | None = None  # (the input's identity, since when) while held
    while True:
        began = start
        # A last line with no newline yet that does not parse is held (left for the next
        # read) while the input changes: a writer may be putting it in, in more than one
        # write. Once the input stayed as it is for `_SETTLE` seconds, it is read as it is.
        hold = held is None or time.monotonic() - held[1] < _SETTLE
        entries = read_index(path, contract, start, first, digest, prompt, hold_last=hold)
        while True:
            try:
                entry = next(entries)
            except StopIteration as ended:
                start, last = ended.value
                break
            chunk.append(entry)
            if len(chunk) >= _CHUNK:
                _add(state, path, chunk, digest)
                indexed += len(chunk)
                chunk = []
                on_chunk(indexed)
        # The identity is taken here, of the bytes just read: lines appended after the end was
        # read would otherwise be in it and not in the index (never run, never noticed). Read
        # them too; a line appended after this is found by the running job's look at the input
        # (taken before indexing) and by `resume` (the identity no longer matches).
        identity = file_identity(path)
        size = int(identity.partition(":")[0])
        if size == start:
            break
        if size < start:
            raise input_changed(state, path) or InputChanged(
                f"{path}: cut short while the job indexed it"
            )
        first = last + 1
        if start == began:  # nothing read: the last line is held
            if held is None or held[0] != identity:
                held = (identity, time.monotonic())
            time.sleep(_HELD_POLL)
        else:
            held = None
    _add(state, path, chunk, digest, identity=identity)


def _add(
    state: JobState, path: Path, chunk: list[IndexEntry], digest: Any, identity: str | None = None
) -> None:
    """One chunk of items and how far indexing got, in one transaction (the last chunk, given
    the input's `identity`, also marks the input indexed)."""
    try:
        with state.transaction() as db:
            state.add_items(((e.id, e.offset, e.length, e.hash, e.id_number) for e in chunk), db)
            if chunk:
                last = chunk[-1]
                mark = {"end": last.offset + last.length, "lines": last.line}
                state.put("index_progress", {**mark, "digest": digest.hexdigest()}, db)
            if identity is not None:
                state.put("indexed", True, db)
                state.put("input_identity", identity, db)
    except sqlite3.IntegrityError:
        raise _duplicate(state, path, chunk) from None


def _duplicate(state: JobState, path: Path, chunk: list[IndexEntry]) -> BatchInputError:
    """The error for the first id of `chunk` that an earlier item has (as text: `7` and `"7"`
    are one id), naming both lines and, when they differ, both spellings."""
    seen: dict[str, tuple[int, str]] = {}
    for entry in chunk:
        earlier = seen.get(entry.id)
        if earlier is None:
            rows = state.items_with_id(entry.id)
            if rows:
                row = rows[0]
                earlier = (
                    _line_at(path, row.offset),
                    _spelled(path, row.offset, row.length, row.id, row.id_number),
                )
        again = _spelled(path, entry.offset, entry.length, entry.id, entry.id_number)
        if earlier is not None:
            line, first = earlier
            same = "" if first == again else " (the same id as text: ids are unique as text)"
            return BatchInputError(
                f"{path}:{entry.line}: item id {again} appears more than once: line {line} "
                f"has {first}{same}"
            )
        seen[entry.id] = (entry.line, again)
    return BatchInputError(f"{path}: an item id appears more than once")


def _spelled(path: Path, offset: int, length: int, item_id: str, number: bool) -> str:
    """An id as its input line (`length` bytes at `offset`) wrote it: `7`, `-0` or `"7"` (on
    the way to an error only; as stored if the line cannot be read back)."""
    if number:
        try:
            with open_regular(path) as file:
                file.seek(offset)
                line = file.read(length)
            raw = json.loads(line, parse_int=_Written).get("id")
        except (OSError, ValueError, RecursionError, AttributeError):
            raw = None
        if isinstance(raw, _Written):
            return str(raw)
        return item_id
    return json.dumps(item_id, ensure_ascii=False)


class _Written(str):
    """An integer as the input wrote it (`-0`, `007` is not JSON)."""


def _line_at(path: Path, offset: int) -> int:
    """The line number of the line starting at byte `offset` (on the way to an error only)."""
    return newlines_before(path, offset) + 1


def input_changed(state: JobState, path: Path) -> InputChanged | None:
    """The error naming the first line of `path` that differs from the job's index (a scan of
    the whole index and file: only on the way to stopping), or `None` if none does."""
    try:
        where = first_change(path, _all_items(state), complete=bool(state.get("indexed")))
    except OSError as error:
        where = f"{path}: the input cannot be read ({error.strerror or error})"
    if where is None:
        return None
    return InputChanged(
        f"{where}. The job's answers are for the input as it was indexed: put it back, or "
        "start a new job (another state file) for the changed input"
    )


def input_stat(path: Path) -> tuple[int, ...]:
    """What `os.stat` says of the input (file, size, modification and change times): a running
    job looks at it every tick, and scans for a changed line only when it moved. The change
    time is what tells an edit whose size and modification time were put back (`touch -r`, a
    tool that keeps times: on Linux and macOS no one can set it back; Windows gives the creation
    time there, which an edit does not move); a `chmod` moves it too, and costs one scan
    that finds nothing. `()` when the file is gone."""
    try:
        stat = os.stat(path)
    except OSError:
        return ()
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _all_items(state: JobState) -> Iterator[ItemRow]:
    after = -1
    while True:
        rows = state.in_order(after, _PAGE)
        if not rows:
            return
        yield from rows
        after = rows[-1].seq


_EMPTY = hashlib.sha256().hexdigest()
