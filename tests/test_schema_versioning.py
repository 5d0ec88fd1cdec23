"""Discover, export, lock and check: the schemas under version control."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import Decision
from contracts import InvoiceExtraction
from sdk.schema.canonical import canonical_bytes
from sdk.workflow.diff import ChangeKind
from sdk.workflow.snapshot import info_of
from sdk.workflow.snapshot import load_snapshot
from sdk.workflow.snapshot import snapshot_bytes
from sdk.workflow.versioning import LOCK_FILE
from sdk.workflow.versioning import CheckCode
from sdk.workflow.versioning import Lock
from sdk.workflow.versioning import LockConflict
from sdk.workflow.versioning import check
from sdk.workflow.versioning import default_directory
from sdk.workflow.versioning import discover
from sdk.workflow.versioning import export
from sdk.workflow.versioning import lock
from tests.schema_support import REPO
from tests.schema_support import make_package

REFERENCE_NAMES = [
    "Decision", "Fix", "InvoiceExtraction", "LineItem", "ReviewFinding", "Sentiment",
    "ShipmentNotice",
]  # fmt: skip

VERDICT_V1 = '''
from pydantic import Field
from sdk import Contract


class Verdict(Contract):
    """A verdict."""

    reasoning: str = Field(description="Why.")
    answer: str = Field(description="The answer.")


class Note(Contract):
    """A note."""

    text: str = Field(description="The note.")
'''

# The same contracts, Verdict with a field added and no version bump.
VERDICT_EDITED = VERDICT_V1.replace(
    '    answer: str = Field(description="The answer.")',
    '    answer: str = Field(description="The answer.")\n'
    '    source: str | None = Field(description="Where it comes from, or null.")',
)
VERDICT_BUMPED = VERDICT_EDITED.replace(
    '    """A verdict."""', '    """A verdict."""\n\n    schema_version = 2'
)


# --- discovery -----------------------------------------------------------------------------


def test_discover_finds_every_contract_of_the_package_once_sorted() -> None:
    assert [c.__name__ for c in discover("contracts")] == REFERENCE_NAMES


def test_discover_accepts_a_path() -> None:
    assert [c.__name__ for c in discover("contracts/")] == REFERENCE_NAMES


def test_discover_skips_private_and_imported_contracts(tmp_path: Path) -> None:
    name = make_package(
        tmp_path,
        {
            "models.py": """
                from pydantic import Field
                from contracts import Decision  # imported: defined elsewhere
                from sdk import Contract

                class _Base(Contract):
                    pass

                class Mine(_Base):
                    text: str = Field(description="Text.")
            """
        },
    )
    assert [c.__name__ for c in discover(name)] == ["Mine"]


def test_two_contracts_with_one_name_are_an_error(tmp_path: Path) -> None:
    body = """
        from pydantic import Field
        from sdk import Contract

        class Twin(Contract):
            text: str = Field(description="Text.")
    """
    name = make_package(tmp_path, {"a.py": body, "b.py": body})
    with pytest.raises(ValueError, match="two contracts are named Twin"):
        discover(name)


# --- export --------------------------------------------------------------------------------


def test_export_writes_name_dot_version_files_with_the_fingerprint_of_the_contract(
    tmp_path: Path,
) -> None:
    paths = export(discover("contracts"), tmp_path)
    assert [p.name for p in paths] == [f"{n}.v1.json" for n in REFERENCE_NAMES]
    snapshot = load_snapshot(tmp_path / "InvoiceExtraction.v1.json")
    assert info_of(snapshot).fingerprint == InvoiceExtraction.fingerprint()
    # property order is generation order, kept in the file
    assert list(snapshot["properties"]) == list(InvoiceExtraction.model_fields)
    assert canonical_bytes(snapshot) == canonical_bytes(InvoiceExtraction.json_schema())


def test_export_is_byte_identical_twice(tmp_path: Path) -> None:
    first = [p.read_bytes() for p in export(discover("contracts"), tmp_path / "a")]
    second = [p.read_bytes() for p in export(discover("contracts"), tmp_path / "b")]
    assert first == second


@pytest.mark.parametrize("seed", ["0", "4242"])
def test_export_is_byte_identical_in_another_process_with_another_hash_seed(
    tmp_path: Path, seed: str
) -> None:
    here = {p.name: p.read_bytes() for p in export(discover("contracts"), tmp_path / "here")}
    code = (
        "import sys; from pathlib import Path;"
        "from sdk.workflow.versioning import discover, export;"
        "export(discover('contracts'), Path(sys.argv[1]))"
    )
    there = tmp_path / "there"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    subprocess.run([sys.executable, "-c", code, str(there)], check=True, cwd=REPO, env=env)
    assert {p.name: p.read_bytes() for p in there.iterdir()} == here


def test_snapshot_bytes_are_indented_canonical_order() -> None:
    data = snapshot_bytes(Decision.json_schema())
    assert data.endswith(b"}\n")
    assert json.loads(data) == Decision.json_schema()
    assert list(json.loads(data)) == sorted(Decision.json_schema())  # keys sorted
    assert list(json.loads(data)["properties"]) == ["reasoning", "answer", "confidence"]


# --- the committed lock of contracts/ ------------------------------------------------------


def test_the_committed_lock_matches_the_reference_contracts() -> None:
    assert check("contracts") == []
    folder = default_directory("contracts")
    assert folder == REPO / "contracts" / "schemas"
    entries = Lock.read(folder / LOCK_FILE).entries
    # SelectQuery, the SQL grammar, at v2 (joins and aggregates) beside the v1 it widened.
    locked = sorted([(n, 1) for n in REFERENCE_NAMES] + [("SelectQuery", 1), ("SelectQuery", 2)])
    assert [(e.name, e.version) for e in entries] == locked
    for contract in discover("contracts"):
        committed = (folder / f"{contract.__name__}.v1.json").read_bytes()
        assert committed == snapshot_bytes(contract.json_schema())


# --- lock and check ------------------------------------------------------------------------


def test_lock_then_check_passes_and_lock_is_idempotent(tmp_path: Path) -> None:
    name = make_package(tmp_path / "src", {"models.py": VERDICT_V1})
    folder = tmp_path / "schemas"
    outcome = lock(name, directory=folder)
    assert [(e.name, e.version) for e in outcome.added] == [("Note", 1), ("Verdict", 1)]
    assert check(name, directory=folder) == []
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    again = lock(name, directory=folder)
    assert again.added == [] and len(again.unchanged) == 2
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_check_names_the_contract_and_the_change_when_the_version_was_not_bumped(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_V1}), directory=folder)
    edited = make_package(tmp_path / "src", {"models.py": VERDICT_EDITED})
    (finding,) = check(edited, directory=folder)
    assert finding.code is CheckCode.CHANGED_WITHOUT_BUMP
    assert finding.contract == "Verdict"
    assert "Verdict v1 changed without a version bump" in finding.message
    assert "bump Verdict.schema_version to 2" in finding.message
    assert finding.diff is not None
    assert [(c.kind, c.pointer) for c in finding.diff.changes] == [
        (ChangeKind.FIELD_ADDED_REQUIRED, "/properties/source")
    ]


def test_lock_refuses_to_repin_a_locked_version_and_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_V1}), directory=folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    edited = make_package(tmp_path / "src", {"models.py": VERDICT_EDITED})
    with pytest.raises(LockConflict, match="Verdict v1 is locked with another fingerprint"):
        lock(edited, directory=folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    outcome = lock(edited, directory=folder, force=True)
    assert [(e.name, e.version) for e in outcome.replaced] == [("Verdict", 1)]
    assert check(edited, directory=folder) == []


def test_a_bumped_version_is_not_locked_until_lock_and_history_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_V1}), directory=folder)
    bumped = make_package(tmp_path / "src", {"models.py": VERDICT_BUMPED})
    (finding,) = check(bumped, directory=folder)
    assert finding.code is CheckCode.NOT_LOCKED
    assert "Verdict v2 is not locked (locked: v1)" in finding.message
    assert finding.diff is not None and finding.diff.changes
    lock(bumped, directory=folder)
    assert check(bumped, directory=folder) == []
    entries = Lock.read(folder / LOCK_FILE)
    assert [e.version for e in entries.versions("Verdict")] == [1, 2]
    assert (folder / "Verdict.v1.json").exists() and (folder / "Verdict.v2.json").exists()


def test_a_new_contract_is_not_locked(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_V1}), directory=folder)
    grown = make_package(
        tmp_path / "src",
        {"models.py": VERDICT_V1 + "\n\nclass Extra(Note):\n    '''More.'''\n"},
    )
    (finding,) = check(grown, directory=folder)
    assert finding.code is CheckCode.NOT_LOCKED
    assert finding.message.startswith("Extra v1 is a new contract, not locked yet")


def test_a_locked_contract_that_disappeared_is_reported_and_lock_drops_it(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_V1}), directory=folder)
    without_note = VERDICT_V1[: VERDICT_V1.index("class Note")]
    shrunk = make_package(tmp_path / "src", {"models.py": without_note})
    (finding,) = check(shrunk, directory=folder)
    assert finding.code is CheckCode.CONTRACT_MISSING
    assert finding.contract == "Note"
    assert "Note is locked (v1) but no longer defined" in finding.message
    outcome = lock(shrunk, directory=folder)
    assert [e.name for e in outcome.dropped] == ["Note"]
    assert check(shrunk, directory=folder) == []


def test_a_version_older_than_the_lock_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_BUMPED}), directory=folder)
    older = make_package(tmp_path / "src", {"models.py": VERDICT_V1})
    codes = {f.code for f in check(older, directory=folder)}
    assert codes == {CheckCode.VERSION_BEHIND_LOCK}
    with pytest.raises(LockConflict, match="Verdict is at v1 but v2 is locked"):
        lock(older, directory=folder)


def test_code_reverted_to_an_older_locked_version_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    original = make_package(tmp_path / "src", {"models.py": VERDICT_V1})
    lock(original, directory=folder)
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_BUMPED}), directory=folder)
    (finding,) = check(original, directory=folder)  # matches the v1 entry, but v2 exists
    assert finding.code is CheckCode.VERSION_BEHIND_LOCK
    assert finding.message == "Verdict is at v1 but the lock has v2: versions only go up"


def test_a_snapshot_edited_by_hand_or_missing_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    name = make_package(tmp_path / "src", {"models.py": VERDICT_V1})
    lock(name, directory=folder)
    snapshot = folder / "Verdict.v1.json"
    snapshot.write_text(snapshot.read_text().replace("Why.", "Why?"))
    (finding,) = check(name, directory=folder)
    assert finding.code is CheckCode.SNAPSHOT_MISMATCH
    assert "does not match the lock" in finding.message
    snapshot.unlink()
    (finding,) = check(name, directory=folder)
    assert "is missing" in finding.message


def test_check_without_a_lock_says_how_to_make_one(tmp_path: Path) -> None:
    name = make_package(tmp_path / "src", {"models.py": VERDICT_V1})
    (finding,) = check(name, directory=tmp_path / "nowhere")
    assert finding.code is CheckCode.NO_LOCK
    assert f"run `sdk schema lock {name}`" in finding.message


def test_lock_file_is_sorted_and_deterministic(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_V1}), directory=folder)
    data = json.loads((folder / LOCK_FILE).read_text())
    assert data["lock_format"] == 1
    assert [e["name"] for e in data["contracts"]] == ["Note", "Verdict"]
    assert set(data["contracts"][0]) == {"name", "version", "fingerprint", "snapshot"}
    assert (folder / LOCK_FILE).read_bytes() == Lock.read(folder / LOCK_FILE).to_bytes()


# --- lock and check judge every snapshot alike (issue 30 item 9) -------------------------------

SNAPSHOT_DAMAGE = {
    "edited": lambda path: path.write_text(path.read_text().replace("Why.", "Why?")),
    "missing": lambda path: path.unlink(),
    "not a schema": lambda path: path.write_bytes(b"\xff\xfe not JSON"),
}


def _locked_v1_and_v2(tmp_path: Path) -> tuple[str, Path]:
    """Verdict v1 locked, then the code bumped to v2 and locked beside it."""
    folder = tmp_path / "schemas"
    lock(make_package(tmp_path / "src", {"models.py": VERDICT_V1}), directory=folder)
    bumped = make_package(tmp_path / "src", {"models.py": VERDICT_BUMPED})
    lock(bumped, directory=folder)
    assert check(bumped, directory=folder) == []
    return bumped, folder


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("damage", sorted(SNAPSHOT_DAMAGE))
@pytest.mark.parametrize("force", [False, True])
def test_an_older_versions_damaged_snapshot_fails_lock_as_it_fails_check(
    tmp_path: Path, damage: str, force: bool
) -> None:
    # The code holds v2 now: nothing can write v1's snapshot again, so lock refuses (even forced)
    # instead of saying "nothing written" and leaving check to fail on it.
    bumped, folder = _locked_v1_and_v2(tmp_path)
    SNAPSHOT_DAMAGE[damage](folder / "Verdict.v1.json")
    (finding,) = check(bumped, directory=folder)
    assert finding.code is CheckCode.SNAPSHOT_MISMATCH
    assert finding.message.startswith("Verdict v1: snapshot ")
    before = _files(folder)
    with pytest.raises(LockConflict) as refused:
        lock(bumped, directory=folder, force=force)
    (problem,) = refused.value.problems
    assert problem.startswith("Verdict v1: snapshot ")
    assert "the code holds v2 now, so lock cannot write it again" in problem
    assert problem.endswith("restore it from version control")
    assert _files(folder) == before  # nothing written


@pytest.mark.parametrize("damage", sorted(SNAPSHOT_DAMAGE))
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("force", [False, True])
def test_a_lock_that_succeeds_leaves_check_nothing_to_find(
    tmp_path: Path, damage: str, version: int, force: bool
) -> None:
    # Whatever happened to a snapshot of either version, lock either refuses and writes nothing,
    # or leaves every snapshot as check wants it: the two never disagree.
    bumped, folder = _locked_v1_and_v2(tmp_path)
    SNAPSHOT_DAMAGE[damage](folder / f"Verdict.v{version}.json")
    assert [f.code for f in check(bumped, directory=folder)] == [CheckCode.SNAPSHOT_MISMATCH]
    before = _files(folder)
    try:
        lock(bumped, directory=folder, force=force)
    except LockConflict:
        assert _files(folder) == before
        # Refused: v1 can never be rewritten; v2's edits only without force.
        assert version == 1 or (damage != "missing" and not force)
    else:
        assert check(bumped, directory=folder) == []
        assert version == 2
