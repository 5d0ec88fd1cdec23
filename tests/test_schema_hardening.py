"""The schema workflow against broken files, broken packages, cut writes and concurrent runs, and
what the wheel installs (issue 10)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import uuid
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sdk.cli import app
from sdk.workflow.versioning import LOCK_FILE
from sdk.workflow.versioning import Lock
from sdk.workflow.versioning import lock
from tests.process_support import read_line
from tests.schema_support import REPO
from tests.schema_support import make_package

runner = CliRunner()

MODELS = '''
from pydantic import Field
from sdk import Contract


class Ticket(Contract):
    """A support ticket, triaged."""

    title: str = Field(description="The ticket's title.")
    urgent: bool = Field(description="Whether it must be handled today.")
'''


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def _locked_package(tmp_path: Path) -> tuple[str, Path]:
    name = make_package(tmp_path / "src", {"models.py": MODELS})
    folder = tmp_path / "schemas"
    assert _invoke("schema", "lock", name, "--dir", str(folder))[0] == 0
    return name, folder


def _one_error_line(stderr: str, *fragments: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# --- lock files of the wrong shape ---

ENTRY = {"name": "Ticket", "version": 1, "fingerprint": "0" * 64, "snapshot": "Ticket.v1.json"}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"lock_format": 1, "contracts": [{"name": "Decision"}]}', "/contracts/0"),
        ('{"lock_format": 1, "contracts": null}', "/contracts"),
        ('{"lock_format": 1, "contracts": [' + json.dumps(ENTRY).replace(": 1,", ": 1e400,") + "]}",
         "/contracts/0/version"),
        ('{"lock_format": 1, "contracts": [' + json.dumps({**ENTRY, "version": 0}) + "]}",
         "/contracts/0/version"),
        ('{"lock_format": 1, "contracts": ['
         + json.dumps({**ENTRY, "snapshot": "../../outside.json"}) + "]}",
         "/contracts/0/snapshot"),
        ('{"lock_format": 1, "contracts": [' + json.dumps(ENTRY) + ", " + json.dumps(ENTRY) + "]}",
         "listed twice"),
        ('{"lock_format": 2, "contracts": []}', "/lock_format"),
        ("[]", "not a schema lock file"),
        ("{not json", "not JSON"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["check", "lock", "diff"])
def test_a_lock_file_of_the_wrong_shape_exits_2_with_one_line(
    tmp_path: Path, content: str, says: str, command: str
) -> None:
    name, folder = _locked_package(tmp_path)
    (folder / LOCK_FILE).write_text(content)
    args = ["--against-lock", name] if command == "diff" else [name]
    code, _, err = _invoke("schema", command, *args, "--dir", str(folder))
    assert code == 2
    _one_error_line(err, LOCK_FILE, says)
    assert (folder / LOCK_FILE).read_text() == content  # nothing rewritten


# --- snapshots edited into nonsense ---


def test_a_snapshot_edited_into_nonsense_is_named_by_every_command(tmp_path: Path) -> None:
    name, folder = _locked_package(tmp_path)
    snapshot = folder / "Ticket.v1.json"
    schema = json.loads(snapshot.read_text())
    schema["properties"]["urgent"]["enum"] = 5
    edited = json.dumps(schema)
    snapshot.write_text(edited)

    code, _, err = _invoke("schema", "diff", str(snapshot), str(snapshot))
    assert code == 2
    _one_error_line(err, "Ticket.v1.json", "not a JSON Schema", "/properties/urgent/enum")

    code, _, err = _invoke("schema", "diff", "--against-lock", name, "--dir", str(folder))
    assert code == 2
    _one_error_line(err, "Ticket.v1.json", "not a JSON Schema")

    # `check` runs and reports it as a finding (exit 1: a problem found, not a failure to run).
    code, out, _ = _invoke("schema", "check", name, "--dir", str(folder))
    assert code == 1
    assert "snapshot-mismatch" in out and "not a JSON Schema" in out

    # `lock` refuses to overwrite the record (next test); the file stays as it is.
    code, _, err = _invoke("schema", "lock", name, "--dir", str(folder))
    assert code == 1
    assert "Ticket.v1.json" in err
    assert snapshot.read_text() == edited


# --- lock and hand-edited snapshots ---


def test_lock_refuses_to_overwrite_a_hand_edited_locked_snapshot(tmp_path: Path) -> None:
    name, folder = _locked_package(tmp_path)
    snapshot = folder / "Ticket.v1.json"
    original = snapshot.read_bytes()
    edited = original.replace(b"The ticket's title.", b"Edited by hand.")
    snapshot.write_bytes(edited)

    code, out, err = _invoke("schema", "lock", name, "--dir", str(folder))
    assert code == 1
    assert "Ticket v1" in err and "Ticket.v1.json" in err and "--force" in err
    assert "unchanged" not in out
    assert snapshot.read_bytes() == edited

    code, out, _ = _invoke("schema", "lock", name, "--dir", str(folder), "--force")
    assert code == 0
    assert "rewrote the edited snapshot of Ticket v1" in out
    assert snapshot.read_bytes() == original
    assert _invoke("schema", "check", name, "--dir", str(folder))[0] == 0


def test_lock_writes_a_missing_locked_snapshot_again(tmp_path: Path) -> None:
    name, folder = _locked_package(tmp_path)
    snapshot = folder / "Ticket.v1.json"
    original = snapshot.read_bytes()
    snapshot.unlink()
    outcome = lock(name, directory=folder)
    assert snapshot.read_bytes() == original
    assert [e.name for e in outcome.unchanged] == ["Ticket"]


# --- contracts packages that fail to import ---


@pytest.mark.parametrize(
    ("source", "kind", "line"),
    [
        ("class Broken(:\n    pass\n", "SyntaxError", 1),
        ("x = 1\nundefined_name.attribute\n", "NameError", 2),
        ("x = 1\n\n\nraise RuntimeError('configuration missing')\n", "RuntimeError", 4),
        ("import a_module_that_does_not_exist_anywhere\n", "ModuleNotFoundError", 1),
    ],
)
@pytest.mark.parametrize("command", ["check", "lock", "lint", "export"])
def test_a_package_that_fails_to_import_exits_2_naming_file_and_line(
    tmp_path: Path, source: str, kind: str, line: int, command: str
) -> None:
    name = make_package(tmp_path / "src", {"models.py": MODELS, "broken.py": source})
    options = ["--out" if command == "export" else "--dir", str(tmp_path / "out")]
    code, _, err = _invoke("schema", command, name, *([] if command == "lint" else options))
    assert code == 2
    _one_error_line(err, f"broken.py:{line}", f"cannot import {name}.broken", kind)


def test_an_import_error_in_a_subpackage_is_not_skipped_silently(tmp_path: Path) -> None:
    name = make_package(tmp_path / "src", {"models.py": MODELS})
    sub = tmp_path / "src" / name / "sub"
    sub.mkdir()
    (sub / "__init__.py").write_text("import not_installed_x\n")
    importlib.invalidate_caches()
    code, _, err = _invoke("schema", "lock", name, "--dir", str(tmp_path / "out"))
    assert code == 2
    _one_error_line(err, "sub", "not_installed_x")
    assert not (tmp_path / "out" / LOCK_FILE).exists()


# --- atomic writes ---


def _run_lock(
    cwd: Path, package: str, folder: Path, *, file_size_limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    limit = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # a write past the limit: EFBIG
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({file_size_limit}, {file_size_limit}))\n"
        if file_size_limit is not None
        else ""
    )
    script = limit + textwrap.dedent(
        f"""
        import sys
        from sdk.cli import main
        sys.argv = ["sdk", "schema", "lock", {package!r}, "--dir", {str(folder)!r}]
        main()
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(cwd / "src")]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_a_write_cut_short_by_a_file_size_limit_leaves_the_previous_files(tmp_path: Path) -> None:
    name, folder = _locked_package(tmp_path)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    # The next version's snapshot and lock are larger than the limit: each write is cut.
    bumped = MODELS.replace(
        '"""A support ticket, triaged."""',
        '"""A support ticket, triaged."""\n\n    schema_version = 2\n    '
        + 'notes: str = Field(description="'
        + "Everything the agent wrote down. " * 60
        + '")',
    )
    (tmp_path / "src" / name / "models.py").write_text(textwrap.dedent(bumped))
    limit = max(len(data) for data in before.values()) + 16
    result = _run_lock(tmp_path, name, folder, file_size_limit=limit)
    assert result.returncode == 2, result.stderr
    _one_error_line(result.stderr, "File too large")
    after = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert after == before  # no half-written file, no temporary file left behind

    # Without the limit the same lock goes through, and everything it wrote is whole.
    result = _run_lock(tmp_path, name, folder)
    assert result.returncode == 0, result.stderr
    assert [(e.name, e.version) for e in Lock.read(folder / LOCK_FILE).entries] == [
        ("Ticket", 1),
        ("Ticket", 2),
    ]
    assert all(json.loads(path.read_bytes()) for path in folder.iterdir())


ORDER_MODELS = '''
from pydantic import Field
from sdk import Contract


class Order(Contract):
    """A customer order, as the warehouse needs it."""

    reference: str = Field(description="The order's reference.")
    items: list[str] = Field(description="What was ordered, one entry per article.")
    express: bool = Field(description="Whether it ships today.")
'''


def _expected_lock(tmp_path: Path, name: str) -> dict[str, bytes]:
    """What locking `name` alone writes: every file, by name."""
    folder = tmp_path / f"alone-{name}"
    lock(name, directory=folder)
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def _read_while(runs: list[subprocess.Popen[bytes]], path: Path) -> list[bytes]:
    """Every distinct content of `path` seen while any of `runs` is still going."""
    seen: list[bytes] = []
    while any(run.poll() is None for run in runs):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        if not seen or seen[-1] != data:
            seen.append(data)
    return seen


def test_two_locks_of_different_contracts_at_once_leave_whole_files(tmp_path: Path) -> None:
    """Two processes lock different packages into one folder, at once, three times over: the
    lock file anyone reads, at any moment, is one of the two whole, and so is every snapshot."""
    names = [make_package(tmp_path / "src", {"models.py": models})
             for models in (MODELS, ORDER_MODELS)]  # fmt: skip
    expected = [_expected_lock(tmp_path, name) for name in names]
    locks = {files[LOCK_FILE] for files in expected}
    assert len(locks) == 2  # different content: a torn or mixed file cannot pass for either
    folder = tmp_path / "schemas"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "src")])}
    for _ in range(3):
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "sdk.cli", "schema", "lock", name, "--dir", str(folder)],
                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            for name in names
        ]  # fmt: skip
        seen = _read_while(runs, folder / LOCK_FILE)
        for run in runs:
            _, err = run.communicate(timeout=120)
            assert run.returncode == 0, err
        assert all(data in locks for data in seen), "a reader saw a lock file neither wrote"
        assert (folder / LOCK_FILE).read_bytes() in locks
        snapshots = {name: data for files in expected for name, data in files.items()
                     if name != LOCK_FILE}  # fmt: skip
        assert {path.name for path in folder.iterdir()} == {LOCK_FILE, *snapshots}
        for name, data in snapshots.items():
            assert (folder / name).read_bytes() == data
    # Whichever won, the lock is consistent with its package and its snapshots.
    winner = next(n for n, files in zip(names, expected, strict=True)
                  if files[LOCK_FILE] == (folder / LOCK_FILE).read_bytes())  # fmt: skip
    assert _invoke("schema", "check", winner, "--dir", str(folder))[0] == 0


WRITER = """
import sys
from sdk._files import write_atomic

path, letter, size, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = (letter * size).encode()
print("ready", flush=True)
sys.stdin.readline()
for _ in range(count):
    write_atomic(path, data)
"""


def test_two_writers_of_different_content_never_leave_a_torn_file(tmp_path: Path) -> None:
    """`write_atomic` from two processes at once, each writing its own content over and over,
    while this one reads: every read is one writer's content, whole. (A plain `write_bytes` in
    their place lets the reader see an empty or half-written file.)"""
    target = tmp_path / "shared.json"
    sizes = {"a": 300_000, "b": 200_000}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target), letter, str(size), "200"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for letter, size in sizes.items()
    ]  # fmt: skip
    for run in runs:  # both ready before either writes
        assert run.stdout is not None and read_line(run.stdout) == b"ready\n"
    for run in runs:
        assert run.stdin is not None
        run.stdin.write(b"go\n")
        run.stdin.flush()
    seen = _read_while(runs, target)
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    wholes = {(letter * size).encode() for letter, size in sizes.items()}
    torn = [len(data) for data in seen if data not in wholes]
    assert not torn, f"a reader saw {len(torn)} torn file(s), sizes {torn[:5]}"
    assert target.read_bytes() in wholes
    assert [path.name for path in tmp_path.iterdir()] == [target.name]  # no temporary file left


# --- packaging ---


def test_the_wheel_installs_sdk_and_no_top_level_contracts_package(tmp_path: Path) -> None:
    # A copy, so that the build leaves nothing in the working tree.
    source = tmp_path / f"src-{uuid.uuid4().hex[:6]}"
    needed = ("sdk", "contracts", "README.md", "pyproject.toml", "LICENSE", "CHANGELOG.md")
    source.mkdir()
    for item in needed:
        path = REPO / item
        if path.is_dir():
            subprocess.run(["cp", "-r", str(path), str(source / item)], check=True)
        elif path.exists():
            (source / item).write_bytes(path.read_bytes())
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"sdk", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert "sdk/__init__.py" in names and "sdk/workflow/versioning.py" in names
    assert not any(name.startswith("contracts/") for name in names)
