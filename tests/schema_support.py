"""Helpers for the schema versioning, diff, lint and CLI tests: throwaway contracts and packages."""

from __future__ import annotations

import importlib
import shutil
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

from pydantic import create_model

from sdk import Contract

REPO = Path(__file__).resolve().parent.parent


def contract(
    name: str = "Thing", *, version: int = 1, doc: str | None = None, **fields: Any
) -> type[Contract]:
    """A contract built from `name=(type, Field(...))` pairs, in the order given."""
    model: type[Contract] = create_model(name, __base__=Contract, __doc__=doc, **fields)
    model.schema_version = version
    return model


def make_package(root: Path, files: dict[str, str]) -> str:
    """Write a uniquely named package of `files` (name -> source) under `root`; import it.

    A fresh name per call: a test can write "the same" package twice (before and after an
    edit) and import both, because Python caches modules by name.
    """
    name = f"pkg_{uuid.uuid4().hex[:10]}"
    folder = root / name
    folder.mkdir(parents=True)
    for file, source in {"__init__.py": "", **files}.items():
        (folder / file).write_text(textwrap.dedent(source))
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    importlib.import_module(name)
    return name


def copy_contracts(destination: Path) -> Path:
    """A copy of the repository's `contracts/` package (code, lock and snapshots)."""
    target = destination / "contracts"
    shutil.copytree(REPO / "contracts", target, ignore=shutil.ignore_patterns("__pycache__"))
    return target
