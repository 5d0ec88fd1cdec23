"""One `sdk schema lock` of a loose file, released by a shared go file (for
tests/test_schema_lock_shared_folder.py): import the target first, say it is ready
(`FILE.ready`), wait for the go file, then lock, so every process reads the lock file at once.

    python tests/schema_lock_process.py PATH/TO/module.py PATH/TO/go
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sdk.workflow.versioning import import_target
from sdk.workflow.versioning import lock

target, go = Path(sys.argv[1]), Path(sys.argv[2])
module = import_target(str(target))
target.with_suffix(".ready").touch()
deadline = time.monotonic() + 60
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("no go within 60 s")
    time.sleep(0.0005)
outcome = lock(module)
print(", ".join(f"{e.name} v{e.version}" for e in outcome.added))
