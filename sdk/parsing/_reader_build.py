"""Which build of the streaming reader (`sdk.parsing.incremental`) this process runs.

A development install (`make`) compiles the reader with mypyc (`scripts/compile_reader.py`): the
same source as C, about 1.6 times as fast per chunk, which is what brings a stream of 16-character
chunks under 3 times one parse (bench row 29). The compiled module sits beside its source and
Python prefers it; it records the sha256 of the source it was built from (`BUILT_FROM`, beside
it). A compiled module whose source has changed since (an edit, a `git pull` without `make`) would
run the old code silently, so it is passed over, with a warning, and the source runs instead.
Everywhere else (an install from a wheel, no compiler) the source runs: both builds behave the
same (tests/test_compiled_reader.py compares them snapshot by snapshot).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import sys
import warnings
from pathlib import Path

__all__ = ["BUILT_FROM", "READER", "compiled", "source_digest", "use_current_reader"]

READER = "sdk.parsing.incremental"
BUILT_FROM = "incremental.built-from"
"""The file beside the compiled reader holding the sha256 of the source it was built from."""


def source_digest(source: Path) -> str:
    """The sha256 of the reader's source, as the build records it."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def compiled() -> bool:
    """Whether this process runs the compiled reader (bench rows say which build they timed)."""
    module = sys.modules.get(READER)
    origin = getattr(module, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def use_current_reader() -> None:
    """Before the reader is first imported: when the module Python would load is a compiled one
    built from another source than the one beside it, load the source instead (with a
    `RuntimeWarning` saying how to rebuild)."""
    if READER in sys.modules:
        return
    spec = importlib.util.find_spec(READER)
    if spec is None or spec.origin is None:
        return
    origin = Path(spec.origin)
    if not origin.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        return
    source = origin.with_name("incremental.py")
    recorded = origin.with_name(BUILT_FROM)
    try:
        current = recorded.read_text(encoding="ascii").strip() == source_digest(source)
    except OSError:
        current = False  # no record, or no source: nothing says the compiled module is current
    if current or not source.is_file():
        return
    warnings.warn(
        f"{origin.name} was compiled from another version of {source.name}: running the source "
        "(run `make` or `python scripts/compile_reader.py` to compile it again)",
        RuntimeWarning,
        stacklevel=2,
    )
    loader = importlib.machinery.SourceFileLoader(READER, str(source))
    fresh = importlib.util.spec_from_file_location(READER, source, loader=loader)
    assert fresh is not None
    module = importlib.util.module_from_spec(fresh)
    sys.modules[READER] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[READER]
        raise
