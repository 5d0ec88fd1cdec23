"""Compile the streaming reader (`sdk/parsing/incremental.py`) with mypyc, in place.

    .venv/bin/python scripts/compile_reader.py             # compile (about 2 minutes)
    .venv/bin/python scripts/compile_reader.py --if-stale  # only if the build is not current
    .venv/bin/python scripts/compile_reader.py --remove    # back to the source alone

`make` runs it with `--if-stale` before the tests and the bench (mypyc comes with mypy, a dev
dependency; it needs a C compiler, as llama.cpp's build does, and the interpreter's headers). The
compiled module lands beside its source with a record of every file it was built from
(`sdk.parsing._reader_build`), so an edited source is never shadowed by an older build: the
source runs until this script runs again. Before checking out an older commit, `--remove` (the
build is not under version control, and a commit from before the record would load it).

mypyc builds with setuptools, which would read this project's pyproject.toml (built by
hatchling), so it runs in a scratch folder that links to the package.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "sdk" / "parsing" / "incremental.py"


def _reader_build() -> Any:
    """`sdk.parsing._reader_build` alone: importing `sdk.parsing` would load the reader (and warn
    about the very build this script is about to replace)."""
    path = SOURCE.with_name("_reader_build.py")
    spec = importlib.util.spec_from_file_location("_reader_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _reader_build()


def built() -> list[Path]:
    """The compiled reader's files beside its source (the module, mypyc's runtime, the record)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return [
        path
        for path in SOURCE.parent.iterdir()
        if path.name == BUILD.BUILT_FROM
        or (path.name.startswith("incremental") and path.name.endswith(suffixes))
    ]


def current() -> bool:
    """Whether the build beside the source is whole and made from the files as they are now."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    names = ("incremental", "incremental__mypyc")
    whole = all(SOURCE.with_name(f"{name}{suffix}").is_file() for name in names)
    return whole and bool(BUILD.recorded_current(SOURCE.parent))


def remove() -> None:
    for path in built():
        path.unlink()


def compile_reader() -> None:
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    if not headers.is_file():
        raise SystemExit(
            f"cannot compile the reader: no {headers} (install this Python's development "
            "headers, e.g. Debian's python3-dev); the source runs meanwhile"
        )
    remove()  # (a failed build leaves the source alone in place)
    before = BUILD.record(ROOT)
    with tempfile.TemporaryDirectory(prefix="sdk-mypyc-") as scratch:
        os.symlink(ROOT / "sdk", Path(scratch) / "sdk")
        run = subprocess.run(
            # The project's own mypy settings (strict, the pydantic plugin): the modules the
            # reader imports are checked as `make typecheck` checks them, wherever mypy finds them.
            [
                sys.executable,
                "-m",
                "mypyc",
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "sdk/parsing/incremental.py",
            ],
            cwd=scratch,
            capture_output=True,
            text=True,
        )
    if run.returncode != 0:
        remove()
        sys.stderr.write(run.stdout + run.stderr)
        raise SystemExit(f"mypyc failed (exit {run.returncode}): the source runs meanwhile")
    if BUILD.record(ROOT) != before:  # an input edited while compiling: a build of neither
        remove()
        raise SystemExit("the reader's files changed while it was compiled: run this again")
    (SOURCE.parent / BUILD.BUILT_FROM).write_text(json.dumps(before, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--remove", action="store_true", help="remove the compiled reader")
    what.add_argument("--if-stale", action="store_true", help="compile only if not current")
    arguments = parser.parse_args()
    if arguments.remove:
        remove()
        return
    if arguments.if_stale and current():
        print("compiled reader: current")
        return
    compile_reader()
    print(f"compiled reader: {', '.join(sorted(path.name for path in built()))}")


if __name__ == "__main__":
    main()
