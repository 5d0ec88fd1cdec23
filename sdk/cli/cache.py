"""`sdk cache stats|clear`: the response cache's file (`sdk.cache.SQLiteCache`).

`stats` opens the file read-only (it works on a file or in a folder that cannot be written, and
changes nothing); `clear` for writing, a file that is a cache already. A file that is not a cache
(an empty one too: neither makes one of it), is damaged, or stays busy past the timeout exits 2
with one line naming it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Annotated

import typer

from sdk.cli._app import JsonOption
from sdk.cli._app import Output
from sdk.cli._app import command_group
from sdk.cli._app import errors_exit

if TYPE_CHECKING:
    from sdk.cache import SQLiteCache

__all__ = ["cache_app"]

cache_app = command_group(
    "cache", "Look into or empty the response cache (`cache=` on the clients)."
)

PathOption = Annotated[
    Path | None,
    typer.Option("--path", help="The cache file (default: the one `cache=True` uses)."),
]


@contextmanager
def _opened(
    path: Path | None, *, readonly: bool, say_missing: bool = True
) -> Iterator[tuple[Output, SQLiteCache | None]]:
    """The output and the cache file (`None`, said unless `say_missing` is false, when there is
    none); any error of the file, opening it or reading it, exits 2 with one line."""
    from sdk.cache import SQLiteCache
    from sdk.cache import default_path
    from sdk.cache._sqlite import ExistingCache

    out = Output()
    target = path if path is not None else default_path()
    if target.exists() and not target.is_file():
        # (a folder, a named pipe, a device: not what --path takes, not "no cache")
        kind = "a folder" if target.is_dir() else "not a regular file"
        out.error(f"{target} is {kind}, not a cache file")
        raise typer.Exit(2)
    if not target.is_file():
        if say_missing:
            out.line(f"no cache file at {target}")
        yield out, None
        return
    with errors_exit(out):
        # (for writing, a file that is a cache already: an empty one is refused, not adopted)
        yield out, SQLiteCache(target, readonly=True) if readonly else ExistingCache(target)


@cache_app.command("stats")
def stats_command(path: PathOption = None, as_json: JsonOption = False) -> None:
    """How many entries the cache holds, its size, and its hits and misses (an entry found but
    refused, damaged or failing today's checks, is a miss; a store still open in another process
    adds its own with its next write)."""
    with _opened(path, readonly=True, say_missing=not as_json) as (out, cache):
        if cache is None:
            if as_json:  # no file: an empty cache, in the same shape a script reads
                from sdk.cache import CacheStats

                out.json(asdict(CacheStats(entries=0, bytes=0, hits=0, misses=0)))
            return
        stats = cache.stats()
        if as_json:
            out.json(asdict(stats))
            return
        out.line(str(cache.path), "bold")
        for line in stats.lines():
            out.line(line)


@cache_app.command("clear")
def clear_command(path: PathOption = None) -> None:
    """Drop every entry (the file stays, empty)."""
    with _opened(path, readonly=False) as (out, cache):
        if cache is not None:
            out.line(f"dropped {cache.clear():,} entries")
