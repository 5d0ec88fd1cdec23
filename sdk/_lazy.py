"""Names a package re-exports from modules it loads only on first use (PEP 562)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `names[name]` (a module) on first use
    and returns its `name`. Any other name that is a submodule of `package` is imported and
    returned, as it was when the package imported its submodules eagerly (`import sdk` then
    `sdk.providers.AnthropicProvider`); anything else is an `AttributeError`, as usual."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is not None:
            return getattr(importlib.import_module(module), name)
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
