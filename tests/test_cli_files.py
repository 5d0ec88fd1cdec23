"""Files a user names to the CLI are read only when they are regular files (probe12c D5).

A named pipe where a file is read blocked the command forever (until something wrote to it):
`schema diff`, `schema targets --check`, `grammar test` (a case file, a `.lark` grammar), `eval`
(the dataset) and `schema check` (a lock file that is a pipe). Each now refuses it at once, one
`error:` line naming the path, exit 2. Run as subprocesses with a timeout, so that a hang fails
the test rather than stopping the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")


def _sdk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "pipe"),
    [
        (["schema", "diff", "{pipe}", "o.json"], "pipe"),
        (["schema", "targets", "--check", "{pipe}"], "pipe"),
        (["grammar", "test", "contracts.sql:SELECT_QUERY", "--accept", "{pipe}"], "pipe"),
        (["grammar", "test", "{pipe}", "--accept", "cases.txt"], "pipe.lark"),
        (["eval", "{pipe}", "--contract", "contracts:Decision"], "pipe.jsonl"),
        (["schema", "check", "contracts", "--dir", "lock"], "lock/schema.lock.json"),
    ],
)
def test_a_named_pipe_where_a_file_is_read_is_refused_at_once(
    tmp_path: Path, args: list[str], pipe: str
) -> None:
    (tmp_path / "lock").mkdir()
    os.mkfifo(tmp_path / pipe)
    (tmp_path / "o.json").write_text("{}")
    (tmp_path / "cases.txt").write_text("x\n")
    os.symlink(REPO / "contracts", tmp_path / "contracts")
    done = _sdk(*(arg.format(pipe=pipe) for arg in args), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {pipe} is not a regular file (a named pipe, a device or a socket): "
                      "give a file"], done.stderr  # fmt: skip
    assert "Traceback" not in done.stderr


def test_the_reader_names_a_folder_and_a_missing_file(tmp_path: Path) -> None:
    from sdk._files import read_regular

    (tmp_path / "f.txt").write_bytes(b"\xffdata")
    assert read_regular(tmp_path / "f.txt") == b"\xffdata"
    folder = re.escape(str(tmp_path))
    with pytest.raises(IsADirectoryError, match=f"^{folder} is a folder, not a file$"):
        read_regular(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"nope\.txt: no such file$"):
        read_regular(tmp_path / "nope.txt")


def test_a_file_where_a_folder_is_asked_for_and_a_folder_as_the_cache_exit_2(
    tmp_path: Path,
) -> None:
    """probe12c D11: `schema check --dir FILE` exited 1 (a missing lock), and `cache stats
    --path FOLDER` said "no cache file" and exited 0; each is an option given a path that is
    not what it takes: exit 2, one line naming it."""
    (tmp_path / "t.txt").write_text("x")
    (tmp_path / "adir").mkdir()
    os.symlink(REPO / "contracts", tmp_path / "contracts")
    check = _sdk("schema", "check", "contracts", "--dir", "t.txt", cwd=tmp_path)
    assert check.returncode == 2, check.stderr
    assert [line for line in check.stderr.splitlines() if line.startswith("error:")] == [
        "error: t.txt is not a folder (the lock's folder is asked for)"
    ]
    for command in ("stats", "clear"):
        cache = _sdk("cache", command, "--path", "adir", cwd=tmp_path)
        assert cache.returncode == 2, (command, cache.stdout, cache.stderr)
        assert "error: adir is a folder, not a cache file" in cache.stderr
        assert (tmp_path / "adir").is_dir() and not list((tmp_path / "adir").iterdir())


@pytest.mark.parametrize("option", ["--thresholds", "--confidence-calibration", "--anchors"])
def test_a_named_pipe_given_to_an_eval_option_that_names_a_file_is_refused_at_once(
    tmp_path: Path, option: str
) -> None:
    # The thresholds, calibration and anchors files were read with `open()`: a named pipe there
    # blocked `sdk eval` (and a call given such a file) until something wrote to it.
    os.mkfifo(tmp_path / "pipe.json")
    line = {"id": "d-1", "document": "Refund 12 EUR.", "expected": {"answer": "approve"}}
    (tmp_path / "data.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    os.symlink(REPO / "contracts", tmp_path / "contracts")
    done = _sdk("eval", "data.jsonl", "--contract", "contracts:Decision", "--provider",
                "llamacpp:http://127.0.0.1:9", option, "pipe.json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "pipe.json" in errors[0], done.stderr
    assert "is not a regular file (a named pipe, a device or a socket)" in errors[0]
    assert "Traceback" not in done.stderr


def test_sdk_eval_on_an_output_folder_another_run_holds_exits_2_naming_it(tmp_path: Path) -> None:
    # Another run holds the folder (here, this test's process: the lock is the folder's own):
    # one line, exit 2, nothing asked of the provider (none listens at the address given).
    from sdk._files import held_lock

    line = {"id": "d-1", "document": "Refund 12 EUR.", "expected": {"answer": "approve"}}
    (tmp_path / "data.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    os.symlink(REPO / "contracts", tmp_path / "contracts")
    out = tmp_path / "out"
    out.mkdir()
    with held_lock(out, wait=0.0):
        done = _sdk("eval", "data.jsonl", "--contract", "contracts:Decision", "--provider",
                    "llamacpp:http://127.0.0.1:9", "--out", "out", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: out is in use by another sdk eval run (its results are written "
                      "whole at each outcome, so two runs would lose each other's): wait for "
                      "it, or use another output folder"], done.stderr  # fmt: skip
    assert not (out / "results.json").exists()
