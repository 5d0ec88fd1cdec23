"""The offline schema workflow: snapshots, the lock file, diffs and the linter.

What a team runs at review time (`sdk schema lock|check|diff|lint`), never on a call's path:
`import sdk` does not load it. `versioning` discovers contracts and grammars, writes snapshots
and the lock file, and checks the code against them; `diff` classifies each change for
producers and consumers; `lint` finds schema shapes that make models confabulate or exceed a
provider's limits; `snapshot` is the byte format of a committed schema.
"""

from sdk.workflow.diff import Change
from sdk.workflow.diff import ChangeKind
from sdk.workflow.diff import Impact
from sdk.workflow.diff import SchemaDiff
from sdk.workflow.diff import diff_schemas
from sdk.workflow.lint import Finding
from sdk.workflow.lint import LintCode
from sdk.workflow.lint import LintReport
from sdk.workflow.lint import lint
from sdk.workflow.lint import lint_all
from sdk.workflow.lint import lint_schema
from sdk.workflow.snapshot import load_snapshot
from sdk.workflow.snapshot import snapshot_bytes
from sdk.workflow.snapshot import snapshot_name
from sdk.workflow.versioning import LOCK_FILE
from sdk.workflow.versioning import CheckCode
from sdk.workflow.versioning import CheckFinding
from sdk.workflow.versioning import Lock
from sdk.workflow.versioning import LockConflict
from sdk.workflow.versioning import LockEntry
from sdk.workflow.versioning import check
from sdk.workflow.versioning import discover
from sdk.workflow.versioning import discover_grammars
from sdk.workflow.versioning import export
from sdk.workflow.versioning import lock

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
