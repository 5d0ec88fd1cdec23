"""`sdk batch run|resume|retry` stopped by SIGTERM (a redeploy: `docker stop`, `systemctl stop`,
Kubernetes) or SIGHUP (a closed terminal or SSH session) as by Ctrl-C: what was received is
committed, one line says how to go on, and the exit code is 128 + the signal's number (probe13b
D2: on main the signal's default action ended the run without its last commit, exit 143 or 129
with no line, and every answer received since the last commit was asked again on resume).

The runs are real `sdk` processes against `bench/fanout_server.py`; every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sdk.batch import job_summary
from tests.batch_support import by_id
from tests.batch_support import completions
from tests.batch_support import fanout
from tests.batch_support import gate
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.test_batch_integrity import REPO
from tests.test_batch_integrity import counted
from tests.test_batch_integrity import local_run
from tests.test_batch_integrity import one_line
from tests.test_batch_integrity import sdk_process
from tests.test_batch_integrity import sdk_run
from tests.test_batch_integrity import stop
from tests.test_batch_integrity import wait_for

ITEMS = 400


def _answered(url: str) -> int:
    return int(httpx.get(f"{url}/stats", timeout=10).json()["answered"])


def _held_with_answers_uncommitted(url: str, state: Path) -> int:
    """Close the server's gate at a moment when the job holds answers it has not committed yet
    (it commits every 2 s): the calls in service end, the rest are held. The number of answers
    the server gave, every one of them received by the job, some not committed."""
    for _ in range(20):
        wait_for(lambda: _answered(url) >= counted(state, "ok") + 10, "answers to commit")
        gate(url, open=False)
        time.sleep(0.3)  # the calls in service (0.05 s each) end and are received
        answered = _answered(url)
        if counted(state, "ok") < answered:
            return answered
        gate(url, open=True)  # the job committed them meanwhile: again
    raise AssertionError("the job committed every answer at once, 20 times over")


def _ignoring_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `sdk ... &` from a script starts it


@pytest.mark.parametrize("case", ["SIGTERM", "SIGHUP", "SIGTERM, Ctrl-C ignored"])
def test_sigterm_and_sighup_stop_a_job_as_ctrl_c_does(tmp_path: Path, case: str) -> None:
    name = case.split(",")[0]
    number = getattr(signal, name)
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, ITEMS)
    with fanout(0.05) as url:
        arguments = local_run(url, items, out, "--state", str(state), "--concurrency", "2")
        if case.endswith("ignored"):
            runner = subprocess.Popen(
                [sys.executable, "-m", "sdk.cli", *arguments], cwd=REPO, text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, preexec_fn=_ignoring_ctrl_c,
            )  # fmt: skip
        else:
            runner = sdk_process(*arguments)
        try:
            wait_for(lambda: counted(state, "ok") > 0, "the job's first commit", timeout=120)
            answered = _held_with_answers_uncommitted(url, state)
            runner.send_signal(number)
            try:
                _, errors = runner.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the job did not stop within 30 s of {name}") from None
        finally:
            stop(runner)
        assert runner.returncode == 128 + number, errors  # on main: -15 / -1, killed
        line = one_line(errors)
        assert line.startswith(f"error: stopped by {name}; "), line
        assert f"sdk batch resume --state {state}" in line, line
        summary = job_summary(state)
        # Every answer the server gave before the signal is committed: only the calls held at
        # the gate (in flight) are asked again.
        assert summary.ok == answered and summary.pending == ITEMS - answered
        assert len(read_output(out)) == answered
        asked = completions(url)
        gate(url, open=True)
        resumed = sdk_run("batch", "resume", "--state", str(state), timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        assert completions(url) - asked == ITEMS - answered  # nothing answered asked again
    records = by_id(read_output(out))  # each id once
    assert len(records) == ITEMS and {r["outcome"] for r in records.values()} == {"ok"}


def test_a_signal_the_shell_ignores_stays_ignored(tmp_path: Path) -> None:
    # `nohup sdk batch run ...` ignores SIGHUP so the job outlives its terminal: the run keeps
    # it ignored (SIGHUP is taken only while the job runs, and only when not ignored).
    items, out, state = tmp_path / "items.jsonl", tmp_path / "out.jsonl", tmp_path / "job.db"
    write_items(items, 60)
    script = (
        "import signal, sys\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        "from sdk.cli import app\n"
        "sys.argv = ['sdk', *sys.argv[1:]]\n"
        "app()\n"
    )
    with fanout(0.05) as url:
        runner = subprocess.Popen(
            [sys.executable, "-c", script,
             *local_run(url, items, out, "--state", str(state), "--concurrency", "2")],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        try:
            wait_for(lambda: counted(state, "ok") > 0, "the job's first commit", timeout=120)
            runner.send_signal(signal.SIGHUP)
            _, errors = runner.communicate(timeout=60)
        finally:
            stop(runner)
    assert runner.returncode == 0, errors
    assert len(by_id(read_output(out))) == 60


def test_a_second_signal_while_the_job_stops_ends_it_at_once() -> None:
    # The first SIGTERM stops the run as Ctrl-C does; a second one, while it stops, ends the
    # process at once (the signal's own default), as a supervisor's second signal means.
    script = (
        "import os, signal, sys, time\n"
        "from sdk.cli._signals import stop_signals\n"
        "with stop_signals() as received:\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(5)\n"
        "    except KeyboardInterrupt:\n"
        "        print('stopping', received, flush=True)\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(5)\n"
        "        print('not ended', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.stdout == f"stopping [{int(signal.SIGTERM)}]\n", done.stderr
    assert done.returncode == -signal.SIGTERM
