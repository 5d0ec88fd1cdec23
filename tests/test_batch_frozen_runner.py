"""A runner stopped past its lease with its lock file deleted, and a `resume` meanwhile
(probe13b D7). The second runner took the stale lease, met the output still locked by the
first, blamed "another job (another state file over the same output)", and dropped the lease
as it left, so the first runner, continued, stopped too ("another process took the job over"):
both exit 2. Here the second runner names the stopped one and gives the job back to it.

The stopped runner is a live process holding the output's `flock`, its lease in the state file
not renewed for two minutes (what a SIGSTOP of that long leaves), with no lock file.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contracts import Decision
from sdk.batch import BatchJob
from sdk.batch import JobRunning
from sdk.batch import job_summary
from sdk.batch._lock import lock_path
from sdk.batch._state import JobState
from tests.batch_support import by_id
from tests.batch_support import fanout
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.process_support import read_line
from tests.test_batch_retry import _backend

HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_resume_past_a_stopped_runner_s_lease_leaves_the_job_to_it(tmp_path: Path) -> None:
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 20)
    stopped = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert stopped.stdout is not None and read_line(stopped.stdout) == "held\n"
        now = time.time()
        lease = {"token": "f" * 16, "pid": stopped.pid, "host": socket.gethostname(),
                 "since": now - 300, "renewed": now - 120, "in_flight": 0}  # fmt: skip
        with fanout(0.0) as url:
            job = BatchJob.create(
                state, contract=Decision, backend=_backend(url), input=items, out=out
            )
            store = JobState(state)
            store.put("runner", lease)
            store.close()
            lock_path(state).unlink(missing_ok=True)  # deleted under the stopped runner
            with pytest.raises(JobRunning) as refused:  # on main: BatchError, "another job"
                job.run()
            message = str(refused.value)
            assert f"pid {stopped.pid} on {socket.gethostname()}" in message, message
            assert f"kill -CONT {stopped.pid}" in message and "another job" not in message
            store = JobState(state, readonly=True)
            assert store.get("runner") == lease  # given back (on main: deleted)
            # ...before anything was changed: the input is not indexed by this run (the
            # review of the first fix found it indexed, and any output swap settled, first)
            assert not store.get("indexed") and job_summary(state).total == 0
            store.close()
            assert out.read_bytes() == b""  # nothing written meanwhile

            stopped.kill()  # the stopped runner ended: its lease is taken over, as before
            stopped.wait(timeout=30)
            summary = job.run()
            job.close()
    finally:
        if stopped.poll() is None:
            stopped.kill()
            stopped.wait(timeout=30)
    assert summary.ok == 20
    assert len(by_id(read_output(out))) == 20
