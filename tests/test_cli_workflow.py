"""examples/schema_workflow.md, run as written: edit, check fails, bump, diff, lock, check passes.

The commands and their output are read from the document, so the walk-through cannot drift from
what the `sdk` command does; the edits are applied here and must appear in the document verbatim.
It runs the installed `sdk` console script in a copy of `contracts/`, as a user would.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.schema_support import REPO
from tests.schema_support import copy_contracts

DOC = (REPO / "examples" / "schema_workflow.md").read_text()

POLICY_FIELD = (
    "    policy: str | None = "
    'Field(description="The policy clause the decision rests on, or null.")'
)
MIGRATION = """
    @classmethod
    def migrate_from(cls, version: int, data: dict[str, Any]) -> dict[str, Any]:
        if version == 1:  # v2 added `policy`; v1 values did not record one
            return {**data, "policy": None}
        return super().migrate_from(version, data)"""
CONFIDENCE_FIELD = '    confidence: Confidence = Field(description="How certain the decision is.")'
DOCSTRING = '    """A decision on a request, reasoning first."""\n'


def _add_policy_field(source: str) -> str:
    return source.replace(CONFIDENCE_FIELD, f"{CONFIDENCE_FIELD}\n{POLICY_FIELD}")


def _bump_version(source: str) -> str:
    source = source.replace(DOCSTRING, f"{DOCSTRING}\n    schema_version = 2\n")
    source = source.replace(POLICY_FIELD, f"{POLICY_FIELD}\n{MIGRATION}")
    return source.replace("from typing import ClassVar", "from typing import Any, ClassVar")


# The walk-through: an edit, or a command with its exit code.
STEPS: list[tuple[str, object]] = [
    ("edit", _add_policy_field),
    ("run", ("sdk schema check contracts", 1)),
    ("edit", _bump_version),
    ("run", ("sdk schema check contracts", 1)),
    ("run", ("sdk schema diff --against-lock contracts Decision", 0)),
    ("run", ("sdk schema lock contracts", 0)),
    ("run", ("sdk schema check contracts", 0)),
]


def _documented_commands() -> list[tuple[str, list[str]]]:
    """Each `$ command` of the document's console blocks, with the output lines shown under it."""
    commands: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", DOC, flags=re.DOTALL):
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            else:
                commands[-1][1].append(line)
    return commands


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("sdk")
    argv = [str(script), *shlex.split(command)[1:]]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_the_document_shows_the_edits_this_test_makes() -> None:
    assert POLICY_FIELD in DOC
    assert MIGRATION.lstrip("\n") in DOC
    assert "    schema_version = 2\n" in DOC


def test_the_workflow_runs_as_documented(tmp_path: Path) -> None:
    contracts = copy_contracts(tmp_path)
    decision = contracts / "decision.py"
    v1_snapshot = (contracts / "schemas" / "Decision.v1.json").read_bytes()
    documented = iter(_documented_commands())
    ran = []
    for kind, step in STEPS:
        if kind == "edit":
            assert callable(step)
            edited = step(decision.read_text())
            assert edited != decision.read_text()
            decision.write_text(edited)
            continue
        assert isinstance(step, tuple)
        command, exit_code = step
        shown_command, shown_output = next(documented)
        assert command == shown_command
        result = _run(command, tmp_path)
        assert result.returncode == exit_code, result.stdout + result.stderr
        assert "\x1b[" not in result.stdout  # plain text when not on a terminal
        assert result.stdout.splitlines() == shown_output, result.stdout
        ran.append(command)
    assert next(documented, None) is None  # every documented command was run
    assert len(ran) == 5

    # v2 is locked beside v1, whose snapshot is untouched: it describes the stored values.
    folder = contracts / "schemas"
    assert (folder / "Decision.v1.json").read_bytes() == v1_snapshot
    assert (folder / "Decision.v2.json").exists()
    lock = json.loads((folder / "schema.lock.json").read_text())
    versions = [e["version"] for e in lock["contracts"] if e["name"] == "Decision"]
    assert versions == [1, 2]

    # Reading a v1 value, as the document shows it.
    (reading,) = re.findall(r"```python\n(from contracts.*?)```", DOC, flags=re.DOTALL)
    result = subprocess.run(
        [sys.executable, "-c", reading], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert result.stdout == "approve None\n"
