"""The offline schema workflow: snapshots, the lock file, diffs and the linter.

What a team runs at review time (`sdk schema lock|check|diff|lint`), never on a call's path:
`import sdk` does not load it. `versioning` discovers contracts and grammars, writes snapshots
and the lock file, and checks the code against them; `diff` classifies each change for
producers and consumers; `lint` finds schema shapes that make models confabulate or exceed a
provider's limits; `snapshot` is the byte format of a committed schema.
"""

from sdk.workflow.diff import Change, ChangeKind, Impact, SchemaDiff, diff_schemas
from sdk.workflow.lint import Finding, LintCode, LintReport, lint, lint_all, lint_schema
from sdk.workflow.snapshot import load_snapshot, snapshot_bytes, snapshot_name
from sdk.workflow.versioning import (
    LOCK_FILE,
    CheckCode,
    CheckFinding,
    Lock,
    LockConflict,
    LockEntry,
    check,
    discover,
    discover_grammars,
    export,
    lock,
)

__all__ = [
    "LOCK_FILE",
    "Change",
    "ChangeKind",
    "CheckCode",
    "CheckFinding",
    "Finding",
    "Impact",
    "LintCode",
    "LintReport",
    "Lock",
    "LockConflict",
    "LockEntry",
    "SchemaDiff",
    "check",
    "diff_schemas",
    "discover",
    "discover_grammars",
    "export",
    "lint",
    "lint_all",
    "lint_schema",
    "load_snapshot",
    "lock",
    "snapshot_bytes",
    "snapshot_name",
]
