"""`sdk schema lock` / `check` cover grammar contracts: a changed grammar is a reviewed change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contracts import SELECT_QUERY
from sdk.cli import app
from sdk.workflow.versioning import (
    LOCK_FILE,
    CheckCode,
    Lock,
    LockConflict,
    check,
    discover_grammars,
    lock,
)
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
