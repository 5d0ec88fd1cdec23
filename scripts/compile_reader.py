"""Compile the streaming reader (`sdk/parsing/incremental.py`) with mypyc, in place.

    .venv/bin/python scripts/compile_reader.py           # compile (about 2 minutes)
    .venv/bin/python scripts/compile_reader.py --remove  # back to the source alone

`make` runs it for a development install (mypyc comes with mypy, a dev dependency; it needs a C
compiler, as llama.cpp's build does). The compiled module lands beside its source with the
sha256 of the source it was built from (`sdk.parsing._reader_build`), so an edited source is never
shadowed by an older build: the source runs until this script runs again. mypyc builds with
setuptools, which would read this project's pyproject.toml (built by hatchling), so it runs in a
scratch folder that links to the package.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "sdk" / "parsing" / "incremental.py"


def _reader_build() -> object:
    """`sdk.parsing._reader_build` alone: importing `sdk.parsing` would load the reader (and warn
    about the very build this script is about to replace)."""
    path = SOURCE.with_name("_reader_build.py")
    spec = importlib.util.spec_from_file_location("_reader_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_build: Any = _reader_build()
BUILT_FROM: str = _build.BUILT_FROM
source_digest = _build.source_digest


def built() -> list[Path]:
    """The compiled reader's files beside its source (the module, mypyc's runtime, the record)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    folder = SOURCE.parent
    return [
        path
        for path in folder.iterdir()
        if path.name == BUILT_FROM
        or (path.name.startswith("incremental") and path.name.endswith(suffixes))
    ]


def remove() -> None:
    for path in built():
        path.unlink()


def compile_reader() -> None:
    remove()  # (a failed build leaves the source alone in place)
    digest = source_digest(SOURCE)
    with tempfile.TemporaryDirectory(prefix="sdk-mypyc-") as scratch:
        os.symlink(ROOT / "sdk", Path(scratch) / "sdk")
        subprocess.run(
            [sys.executable, "-m", "mypyc", "sdk/parsing/incremental.py"],
            cwd=scratch,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if source_digest(SOURCE) != digest:  # edited while compiling: the build is of neither
        remove()
        raise SystemExit(f"{SOURCE} changed while it was compiled: run this again")
    (SOURCE.parent / BUILT_FROM).write_text(digest + "\n", encoding="ascii")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remove", action="store_true", help="remove the compiled reader")
    if parser.parse_args().remove:
        remove()
        return
    compile_reader()
    names = ", ".join(sorted(path.name for path in built()))
    print(f"compiled reader: {names}")


if __name__ == "__main__":
    main()
