"""Loose `.py` files of one folder share its lock (`schemas/schema.lock.json`): locking one
pins its own contracts and leaves the others' entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sdk.workflow.versioning import LOCK_FILE

REPO = Path(__file__).resolve().parent.parent
NAMES = ["Alpha", "Beta", "Gamma", "Delta"]


def _contract(name: str) -> str:
    return textwrap.dedent(f'''
        from pydantic import Field

        from sdk import Contract


        class {name}(Contract):
            """A {name.lower()}."""

            value: str | None = Field(description="The value, or null when not stated.")
    ''')


def _loose_folder(folder: Path) -> list[Path]:
    """A plain folder (no `__init__.py`) with one loose module per name."""
    folder.mkdir(parents=True)
    files = []
    for name in NAMES:
        path = folder / f"{name.lower()}_contract.py"
        path.write_text(_contract(name), encoding="utf-8")
        files.append(path)
    return files


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR")}
    env.update(NO_COLOR="1", COLUMNS="200", PYTHONPATH=str(REPO))
    return env


def _sdk(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args], cwd=cwd, env=_env(), capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def _locked(folder: Path) -> set[str]:
    data = json.loads((folder / "schemas" / LOCK_FILE).read_text())
    return {entry["name"] for entry in data["contracts"]}


def test_loose_files_of_one_folder_locked_one_after_the_other_keep_each_other(
    tmp_path: Path,
) -> None:
    # Before: each `lock` of a loose file dropped the entries of every other file of the folder
    # ("dropped Alpha v1: no longer defined"), and `check` of one called the others missing.
    folder = tmp_path / "models"
    files = _loose_folder(folder)
    for path in files:
        done = _sdk(tmp_path, "schema", "lock", str(path))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "dropped" not in done.stdout.replace("0 dropped", "")
    assert _locked(folder) == set(NAMES)
    for path in files:
        checked = _sdk(tmp_path, "schema", "check", str(path))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    whole = _sdk(tmp_path, "schema", "check", "models")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    # The folder is the lock's whole: locking it drops what no file defines any more.
    files[0].unlink()
    missing = _sdk(tmp_path, "schema", "check", "models")
    assert missing.returncode == 1 and "contract-missing: Alpha is locked" in missing.stdout
    dropped = _sdk(tmp_path, "schema", "lock", "models")
    assert "dropped Alpha v1: no longer defined" in dropped.stdout
    assert _locked(folder) == set(NAMES[1:])
