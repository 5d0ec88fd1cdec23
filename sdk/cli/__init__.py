"""The `sdk` command: `sdk schema export|lock|check|diff|lint ...`, `sdk grammar test`,
`sdk eval`, `sdk batch run|resume|retry|status|cancel`, `sdk cache stats|clear`, `sdk providers`,
`sdk demo` and `sdk serve`.

One module per command group (`schema`, `grammar`, `eval`, `batch`, `cache`, `providers`,
`demo`, `serve`),
each a thin layer that parses arguments and prints: every decision is made in the library.
Output is colored on a terminal and plain text otherwise (rich decides, and honours NO_COLOR);
`--json` prints data for other tools instead.

Exit codes: 0 all good; 1 the command found problems (a failed check, lint findings, a refused
lock, a breaking diff with `--fail-on-breaking`); 2 it could not run (bad arguments, a module
that does not import).

MODULE_OR_PACKAGE is a dotted name (`contracts`, `myapp.models`: the current directory goes
first on `sys.path`, as with `python -m`, so a working-tree package wins over an installed copy
of it), or a package folder or `.py` file by its path, absolute or relative, from any folder
(`../app/contracts`, `/srv/app/models.py`: imported under its full dotted name, the folder above
its top package first on `sys.path`). A target that does not import exits 2 with one line saying
what was tried and how to fix it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING
from typing import Any

from sdk._lazy import listed

if TYPE_CHECKING:
    import typer

    from sdk.cli._app import app

__all__ = ["app", "main"]


def _commands() -> typer.Typer:
    """The `sdk` app with every command group registered (each module registers on import)."""
    from sdk.cli import batch  # noqa: F401
    from sdk.cli import cache  # noqa: F401
    from sdk.cli import demo  # noqa: F401
    from sdk.cli import eval  # noqa: F401
    from sdk.cli import grammar  # noqa: F401
    from sdk.cli import providers  # noqa: F401
    from sdk.cli import schema  # noqa: F401
    from sdk.cli import serve  # noqa: F401
    from sdk.cli._app import app

    return app


def __getattr__(name: str) -> Any:
    # `app` is loaded when asked for, not when `sdk.cli` is imported: `main` loads it where a
    # Ctrl-C during the (long) imports is an interrupt like any other, not a traceback.
    if name == "app":
        return _commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__dir__ = listed(globals())  # (`dir(sdk.cli)` names `app` before it is loaded)


def main() -> None:
    """Entry point of the `sdk` console script."""
    try:
        app = _commands()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        raise SystemExit(130) from None
    app()
