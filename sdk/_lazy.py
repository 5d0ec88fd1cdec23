"""Names a package re-exports from modules it loads only on first use (PEP 562)."""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Callable
from collections.abc import Mapping
from types import ModuleType
from typing import Any
from typing import Final

__all__ = ["imported", "lazy_names", "listed"]

_DEADLOCK_RETRIES: Final = 64
"""How many import deadlocks one first use waits out (about 3 s of pauses in all); past them
the error is raised."""


def imported(module: str) -> ModuleType:
    """`importlib.import_module(module)`, waiting out an import deadlock.

    Loading on first use moves imports from `import sdk` (one thread, at start) into calls that
    threads make at once. Two threads importing a package and its submodule in opposite orders
    (one executes `sdk.parsing`'s `__init__`, which imports `sdk.parsing.incremental`; the other
    holds `incremental`'s import lock and waits for its parent) meet in Python's import locks,
    which detect it and raise `_DeadlockError` in one of them, leaving its module unimported.
    The other thread goes on and finishes; importing again then waits for it and succeeds."""
    for retry in range(_DEADLOCK_RETRIES):
        try:
            return importlib.import_module(module)
        except RuntimeError as error:
            if type(error).__name__ != "_DeadlockError":  # importlib._bootstrap's, private
                raise
        # Let the other thread take the lock this one gave up (a running thread would take it
        # back first, and meet the other again).
        time.sleep(min(0.001 * 2**retry, 0.05))
    return importlib.import_module(module)


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `names[name]` (a module) on first use
    and returns its `name`. Any other name that is a submodule of `package` is imported and
    returned, as it was when the package imported its submodules eagerly (`import sdk` then
    `sdk.providers.AnthropicProvider`); anything else is an `AttributeError`, as usual. Threads
    may ask at once (`imported`)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is not None:
            return getattr(imported(module), name)
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return imported(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def listed(namespace: Mapping[str, Any]) -> Callable[[], list[str]]:
    """A module `__dir__` for the module whose `globals()` is `namespace`: its names and those of
    its `__all__`, the ones loaded on first use included (so that `dir()`, a REPL's completion
    and `help()` find them)."""

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __dir__
