"""Names a package re-exports from modules it loads only on first use (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `names[name]` (a module) on first use
    and returns its `name`; any other name is an `AttributeError`, as usual."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
