"""`sdk schema lock` / `check` cover grammar contracts: a changed grammar is a reviewed change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contracts import SELECT_QUERY
from sdk import Grammar
from sdk.cli import app
from sdk.workflow.grammar_diff import diff_grammars
from sdk.workflow.versioning import LOCK_FILE
from sdk.workflow.versioning import CheckCode
from sdk.workflow.versioning import CheckFinding
from sdk.workflow.versioning import Lock
from sdk.workflow.versioning import LockConflict
from sdk.workflow.versioning import check
from sdk.workflow.versioning import discover_grammars
from sdk.workflow.versioning import lock
from tests.schema_support import copy_contracts
from tests.schema_support import make_package

runner = CliRunner()

GRAMMARS_V1 = """
from sdk import Grammar

COMMANDS = Grammar("Commands", lark='start: "go " DIR\\nDIR: "north" | "south"\\n')
ALIAS = COMMANDS  # found once
_PRIVATE = Grammar("Private", lark='start: "x"\\n')
NAIVE = Grammar("Naive", gbnf='root ::= [a-z]+\\n')
"""
GRAMMARS_EDITED = GRAMMARS_V1.replace('"north" | "south"', '"north" | "south" | "east"')
GRAMMARS_BUMPED = GRAMMARS_EDITED.replace("\\n')\nALIAS", "\\n', version=2)\nALIAS")


def _package(root: Path, source: str) -> str:
    return make_package(root, {"grammars.py": source})


def test_the_reference_grammar_is_discovered_and_locked() -> None:
    assert discover_grammars("contracts") == [SELECT_QUERY]
    assert check("contracts") == []


def test_discover_finds_public_grammars_once(tmp_path: Path) -> None:
    package = _package(tmp_path, GRAMMARS_V1)
    assert [g.name for g in discover_grammars(package)] == ["Commands", "Naive"]


def test_lock_writes_the_grammar_text_as_its_snapshot(tmp_path: Path) -> None:
    package = _package(tmp_path, GRAMMARS_V1)
    directory = tmp_path / "schemas"
    outcome = lock(package, directory=directory)
    assert sorted(e.name for e in outcome.added) == ["Commands", "Naive"]
    lark_snapshot = directory / "Commands.v1.lark"
    assert lark_snapshot.read_text() == 'start: "go " DIR\nDIR: "north" | "south"\n'
    assert (directory / "Naive.v1.gbnf").read_text() == "root ::= [a-z]+\n"
    entries = {e.name: e for e in Lock.read(directory / LOCK_FILE).entries}
    grammar = discover_grammars(package)[0]
    assert entries["Commands"].fingerprint == grammar.fingerprint()
    assert entries["Commands"].snapshot == "Commands.v1.lark"
    assert check(package, directory=directory) == []
    assert lock(package, directory=directory).added == []  # idempotent


def test_a_changed_grammar_without_a_bump_fails_check_with_the_diff(tmp_path: Path) -> None:
    directory = tmp_path / "schemas"
    lock(_package(tmp_path, GRAMMARS_V1), directory=directory)
    edited = _package(tmp_path, GRAMMARS_EDITED)
    findings = check(edited, directory=directory)
    assert [(f.code, f.contract) for f in findings] == [
        (CheckCode.CHANGED_WITHOUT_BUMP, "Commands")
    ]
    message = findings[0].message
    assert "version=2" in message
    assert '-DIR: "north" | "south"' in message and '+DIR: "north" | "south" | "east"' in message
    with pytest.raises(LockConflict):
        lock(edited, directory=directory)


def test_a_bumped_grammar_is_locked_beside_its_history(tmp_path: Path) -> None:
    directory = tmp_path / "schemas"
    lock(_package(tmp_path, GRAMMARS_V1), directory=directory)
    bumped = _package(tmp_path, GRAMMARS_BUMPED)
    findings = check(bumped, directory=directory)
    assert [(f.code, f.contract) for f in findings] == [(CheckCode.NOT_LOCKED, "Commands")]
    assert "+DIR" in findings[0].message
    lock(bumped, directory=directory)
    assert check(bumped, directory=directory) == []
    versions = [e.version for e in Lock.read(directory / LOCK_FILE).versions("Commands")]
    assert versions == [1, 2]
    assert (directory / "Commands.v1.lark").exists() and (directory / "Commands.v2.lark").exists()


def test_a_grammar_snapshot_edited_by_hand_is_reported(tmp_path: Path) -> None:
    package = _package(tmp_path, GRAMMARS_V1)
    directory = tmp_path / "schemas"
    lock(package, directory=directory)
    snapshot = directory / "Commands.v1.lark"
    snapshot.write_text(snapshot.read_text() + "// a comment\n")
    findings = check(package, directory=directory)
    assert [(f.code, f.contract) for f in findings] == [(CheckCode.SNAPSHOT_MISMATCH, "Commands")]
    snapshot.unlink()
    assert "missing" in check(package, directory=directory)[0].message


def test_a_removed_grammar_is_reported(tmp_path: Path) -> None:
    directory = tmp_path / "schemas"
    lock(_package(tmp_path, GRAMMARS_V1), directory=directory)
    fewer = _package(tmp_path, GRAMMARS_V1.replace("NAIVE = ", "_NAIVE = "))
    findings = check(fewer, directory=directory)
    assert [(f.code, f.contract) for f in findings] == [(CheckCode.CONTRACT_MISSING, "Naive")]


def test_a_grammar_and_a_contract_cannot_share_a_name(tmp_path: Path) -> None:
    source = (
        GRAMMARS_V1
        + '''
from sdk import Contract


class Commands(Contract):
    """Clashes with the grammar."""

    text: str
'''
    )
    package = _package(tmp_path, source)
    with pytest.raises(ValueError, match="share the name Commands"):
        lock(package, directory=tmp_path / "schemas")


def test_the_cli_check_fails_on_an_unbumped_grammar(tmp_path: Path) -> None:
    directory = tmp_path / "schemas"
    lock(_package(tmp_path, GRAMMARS_V1), directory=directory)
    edited = _package(tmp_path, GRAMMARS_EDITED)
    result = runner.invoke(app, ["schema", "check", edited, "--dir", str(directory), "--json"])
    assert result.exit_code == 1
    findings = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["contract"]) for f in findings] == [("changed-without-bump", "Commands")]


# --- grammars compared by their languages ------------------------------------------------------

GRAMMARS_NARROWED = GRAMMARS_V1.replace('"north" | "south"', '"north"').replace(
    "\\n')\nALIAS", "\\n', version=2)\nALIAS"
)
GRAMMARS_RENAMED = GRAMMARS_V1.replace("DIR", "HEADING").replace(
    "\\n')\nALIAS", "\\n', version=2)\nALIAS"
)


def _changes(finding: CheckFinding) -> list[tuple[str, bool]]:
    assert finding.diff is not None
    return [(c.kind.value, c.breaking) for c in finding.diff.changes]


def test_check_compares_grammars_by_their_languages(tmp_path: Path) -> None:
    directory = tmp_path / "schemas"
    lock(_package(tmp_path, GRAMMARS_V1), directory=directory)
    widened = check(_package(tmp_path, GRAMMARS_EDITED), directory=directory)
    assert _changes(widened[0]) == [("grammar-widened", False)]
    assert "'go east' is new" in widened[0].diff.changes[0].detail  # type: ignore[union-attr]
    narrowed = check(_package(tmp_path, GRAMMARS_NARROWED), directory=directory)
    assert _changes(narrowed[0]) == [("grammar-narrowed", True)]
    assert "'go south' is no longer a sentence" in narrowed[0].diff.changes[0].detail  # type: ignore[union-attr]
    renamed = check(_package(tmp_path, GRAMMARS_RENAMED), directory=directory)
    assert _changes(renamed[0]) == [("grammar-rewritten", False)]


def test_diff_grammars_decides_a_removed_alternative_by_its_sentences() -> None:
    old = Grammar("G", lark='start: "a" | "b" | WORD\nWORD: /[a-z]/\n')
    covered = Grammar("G", lark='start: "a" | WORD\nWORD: /[a-z]/\n', version=2)
    # "b" is gone as an alternative, but WORD still takes it: not a narrowing.
    assert [c.kind.value for c in diff_grammars(old, covered).changes] == ["grammar-rewritten"]
    gone = Grammar("G", lark='start: "a" | WORD\nWORD: /[c-z]/\n', version=2)
    assert "grammar-narrowed" in {c.kind.value for c in diff_grammars(old, gone).changes}


def test_diff_against_the_lock_sees_a_column_removed_from_select_query(tmp_path: Path) -> None:
    root = copy_contracts(tmp_path).parent
    source = root / "contracts" / "sql.py"
    text = source.read_text()
    assert '            "status": "text",\n' in text
    source.write_text(text.replace('            "status": "text",\n', "", 1))
    result = subprocess.run(
        [str(Path(sys.executable).with_name("sdk")), "schema", "diff", "--against-lock",
         "contracts", "SelectQuery", "--fail-on-breaking"],
        cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "identical" not in result.stdout
    assert "grammar-narrowed" in result.stdout and '"status"' in result.stdout
