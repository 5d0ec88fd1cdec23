"""`sdk cache stats|clear`: the response cache's file (`sdk.cache.SQLiteCache`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sdk.cli._app import JsonOption, Output, app, errors_exit

if TYPE_CHECKING:
    from sdk.cache import SQLiteCache

__all__ = ["cache_app"]

cache_app = typer.Typer(
    help="Look into or empty the response cache (`cache=` on the clients).", no_args_is_help=True
)
app.add_typer(cache_app, name="cache")

PathOption = Annotated[
    Path | None,
    typer.Option("--path", help="The cache file (default: the one `cache=True` uses)."),
]


def _open(path: Path | None, out: Output) -> SQLiteCache | None:
    from sdk.cache import SQLiteCache, default_path

    target = path if path is not None else default_path()
    if not target.is_file():
        out.line(f"no cache file at {target}")
        return None
    return SQLiteCache(target)


@cache_app.command("stats")
def stats_command(path: PathOption = None, as_json: JsonOption = False) -> None:
    """How many entries the cache holds, its size, and its hits and misses."""
    out = Output()
    with errors_exit(out):
        cache = _open(path, out)
        if cache is None:
            return
        stats = cache.stats()
    if as_json:
        out.json({"entries": stats.entries, "bytes": stats.bytes, "hits": stats.hits,
                  "misses": stats.misses, "expired": stats.expired})  # fmt: skip
        return
    out.line(str(cache.path), "bold")
    for line in stats.lines():
        out.line(line)


@cache_app.command("clear")
def clear_command(path: PathOption = None) -> None:
    """Drop every entry (the file stays, empty)."""
    out = Output()
    with errors_exit(out):
        cache = _open(path, out)
        if cache is None:
            return
        dropped = cache.clear()
    out.line(f"dropped {dropped:,} entries")
