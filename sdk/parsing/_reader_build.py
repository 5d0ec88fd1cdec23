"""Which build of the streaming reader (`sdk.parsing.incremental`) this process runs.

A development install (`make`) compiles the reader with mypyc (`scripts/compile_reader.py`): the
same source as C, about 1.6 times as fast per chunk, which is what brings a stream of 16-character
chunks under 3 times one parse (bench row 29). The compiled module sits beside its source and
Python prefers it. mypyc builds into it more than the reader's own text (a `Final` constant it
imports, such as `MAX_DEPTH`, becomes a C constant), so the build records every file it was made
from: the reader and each `sdk` module it imports, directly or not (`BUILT_FROM`, beside it).

A compiled module that no longer matches those files (an edit, a `git pull` without `make`), or
that does not load (a file of the build missing), would run old code or fail `import sdk`: it is
passed over, with a `RuntimeWarning` saying how to build it again, and the source runs instead.
Everywhere else (an install from a wheel, no compiler) the source runs: both builds behave the
same (tests/test_compiled_reader.py compares them chunk by chunk).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "BUILT_FROM",
    "READER",
    "build_inputs",
    "compiled_reader_loaded",
    "record",
    "recorded_current",
    "use_current_reader",
]

READER = "sdk.parsing.incremental"
BUILT_FROM = "incremental.built-from"
"""The file beside the compiled reader that says what it was built from (`record`)."""

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # the folder holding `sdk`
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def compiled_reader_loaded() -> bool:
    """Whether this process runs the compiled reader (bench rows say which build they timed)."""
    origin = getattr(sys.modules.get(READER), "__file__", None) or ""
    return origin.endswith(_EXTENSIONS)


# --- what a build is made from ---


def build_inputs(root: Path = _PACKAGE_ROOT) -> list[Path]:
    """The reader's source and every `sdk` module it imports, directly or not (read from their
    import statements, so nothing runs)."""
    import ast

    def file_of(module: str) -> Path | None:
        base = root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    found: dict[str, Path] = {}
    waiting = [READER]
    while waiting:
        module = waiting.pop()
        path = file_of(module)
        if module in found or path is None:
            continue
        found[module] = path
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                named = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            else:
                continue
            waiting += [name for name in named if name.split(".")[0] == "sdk"]
    return sorted(found.values())


def record(root: Path = _PACKAGE_ROOT) -> dict[str, Any]:
    """What a build made now is made from: the interpreter's module suffix and the sha256 of each
    input, by its path under `root` (the build writes it as `BUILT_FROM`)."""
    return {
        "suffix": _EXTENSIONS[0],
        "inputs": {
            path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in build_inputs(root)
        },
    }


def recorded_current(folder: Path, root: Path = _PACKAGE_ROOT) -> bool:
    """Whether the build in `folder` (the reader's) was made from the files as they are now,
    for this interpreter. Only the recorded files are read, each hashed (an `import` that a
    newer source adds is in the source, whose hash then differs)."""
    try:
        recorded = json.loads((folder / BUILT_FROM).read_text(encoding="utf-8"))
        inputs = recorded["inputs"]
        if recorded["suffix"] != _EXTENSIONS[0] or not isinstance(inputs, dict):
            return False
        return all(
            hashlib.sha256((root / name).read_bytes()).hexdigest() == digest
            for name, digest in inputs.items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False  # no record, a damaged one, or an input gone: nothing says it is current


# --- at import ---


def use_current_reader() -> None:
    """Before the reader is first imported: load the compiled module when it is current and
    loads, else the source (with a `RuntimeWarning` when a compiled module was passed over)."""
    if READER in sys.modules:
        return
    spec = importlib.util.find_spec(READER)
    if spec is None or spec.origin is None or not spec.origin.endswith(_EXTENSIONS):
        return  # the source: Python's own import loads it
    origin = Path(spec.origin)
    source = origin.with_name("incremental.py")
    if not source.is_file():
        return  # a build without its source (installed so): nothing to compare it with
    if recorded_current(origin.parent):
        try:
            _install(_loaded(spec))
            return
        except ImportError as error:
            why = f"{origin.name} does not load ({error})"
    else:
        why = f"{origin.name} was built from other files than these"
    warnings.warn(
        f"{why}: running {source.name} instead (run `make` or `python "
        "scripts/compile_reader.py` to compile it again)",
        RuntimeWarning,
        stacklevel=2,
    )
    loader = importlib.machinery.SourceFileLoader(READER, str(source))
    fresh = importlib.util.spec_from_file_location(READER, source, loader=loader)
    assert fresh is not None
    _install(_loaded(fresh))


def _loaded(spec: importlib.machinery.ModuleSpec) -> ModuleType:
    """The module of `spec`, executed, in `sys.modules` (out of it again if it fails)."""
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[READER] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[READER]
        raise
    return module


def _install(module: ModuleType) -> None:
    """The reader as its package's attribute too, as an ordinary import leaves it."""
    package = sys.modules.get(READER.rpartition(".")[0])
    if package is not None:
        package.incremental = module  # type: ignore[attr-defined]
