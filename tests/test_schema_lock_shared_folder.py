"""Loose `.py` files of one folder share its lock (`schemas/schema.lock.json`): locking one
pins its own contracts and leaves the others' entries, one after the other or all at once.

Concurrent locks are real processes (`tests/schema_lock_process.py`): each imports its file,
says it is ready, and waits for one go before it locks, so the lock files' reads and writes
meet; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sdk.workflow.versioning import LOCK_FILE
from sdk.workflow.versioning import lock

REPO = Path(__file__).resolve().parent.parent
HELPER = Path(__file__).with_name("schema_lock_process.py")
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


ROUNDS = 4


def test_loose_files_of_one_folder_locked_at_once_lose_no_entry(tmp_path: Path) -> None:
    # Each round: one process per loose file, all released at once, each locking its file into
    # the folder's one lock file. Without a lock on the read-modify-write, the last writer's
    # lock file lacked the entries the others had just written.
    for round_ in range(ROUNDS):
        folder = tmp_path / f"round{round_}"
        files = _loose_folder(folder)
        go = folder / "go"
        processes = [
            subprocess.Popen(
                [sys.executable, str(HELPER), str(path), str(go)],
                cwd=tmp_path,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for path in files
        ]
        try:
            ready = [path.with_suffix(".ready") for path in files]
            deadline = time.monotonic() + 60
            while not all(r.exists() for r in ready):
                assert time.monotonic() < deadline, "the lock processes never got ready"
                assert all(p.poll() is None for p in processes), [
                    p.communicate() for p in processes if p.poll() is not None
                ]
                time.sleep(0.01)
            go.touch()
            outputs = [p.communicate(timeout=60) for p in processes]
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        assert [p.returncode for p in processes] == [0] * len(files), outputs
        assert _locked(folder) == set(NAMES), f"round {round_}: {outputs}"
        checked = _sdk(tmp_path, "schema", "check", folder.name)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_lock_held_too_long_is_a_clear_error_and_nothing_is_written(tmp_path: Path) -> None:
    from sdk._files import held_lock

    folder = tmp_path / "models"
    files = _loose_folder(folder)
    lock(str(files[0]))
    before = (folder / "schemas" / LOCK_FILE).read_bytes()
    with held_lock(folder / "schemas"), pytest.raises(TimeoutError) as raised:
        lock(str(files[1]), wait=0.2)
    message = str(raised.value)
    assert "models/schemas" in message and "another `sdk schema lock`" in message
    assert "0.2 s" in message
    assert (folder / "schemas" / LOCK_FILE).read_bytes() == before
    assert not (folder / "schemas" / "Beta.v1.json").exists()
    # Once it is given back, the same lock goes through.
    lock(str(files[1]), wait=0.2)
    assert _locked(folder) == {"Alpha", "Beta"}


def test_a_folder_target_skips_main_and_names_a_script_that_exits_when_imported(
    tmp_path: Path,
) -> None:
    # A folder target imports each module in it. Before: a script in it that exits when
    # imported (no `if __name__ == "__main__":` guard) ended the command with the script's
    # exit code and no word (here 0: `check` "passed", `lock` wrote nothing), and the folder's
    # `__main__.py` ran.
    folder = tmp_path / "models"
    _loose_folder(folder)
    marker = tmp_path / "main-ran"
    (folder / "__main__.py").write_text(
        f"from pathlib import Path\n\nPath({str(marker)!r}).touch()\n", encoding="utf-8"
    )
    (folder / "make_report.py").write_text(
        "import sys\n\nprint('report written')\nsys.exit(0)\n", encoding="utf-8"
    )
    for command in ("lock", "check"):
        done = _sdk(tmp_path, "schema", command, "models")
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: models/make_report.py:4: cannot import models.make_report")
        assert "exits when imported (SystemExit: 0)" in line
        assert 'if __name__ == "__main__":' in line
    assert not (folder / "schemas").exists()
    (folder / "make_report.py").unlink()
    locked = _sdk(tmp_path, "schema", "lock", "models")
    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert _locked(folder) == set(NAMES)
    assert not marker.exists()  # `python -m models` runs __main__.py; importing never does
