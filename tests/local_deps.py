"""Local dependencies (llama-server, the embedded model, llama-cpp-python, Chromium): a test that
needs one skips without it, except in CI, where it fails, because CI must run every cross-check.

The project's own modules and the dev dependencies (always installed with `.[dev]`) are imported
plainly: a test never skips on them.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["import_local", "in_ci", "unavailable"]


def in_ci() -> bool:
    """Whether this run is CI's: `CI` set to anything but empty, `0` or `false`."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def unavailable(reason: str) -> NoReturn:
    """Skip the test for want of a local dependency; fail it in CI."""
    if in_ci():
        pytest.fail(f"CI must run the local tests, but {reason}", pytrace=False)
    pytest.skip(reason)


def import_local(name: str) -> ModuleType:
    """`pytest.importorskip` for a local dependency, failing in CI instead of skipping."""
    try:
        return importlib.import_module(name)
    except ImportError as missing:
        unavailable(f"{name} is not installed ({missing})")
