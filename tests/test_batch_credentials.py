"""A local server's credentials (`--base-url https://user:password@host/...`) are never kept in a
batch job's files (issue 30 item 7): the state file holds `***@` in their place, and `run`,
`resume` and `retry` take them again from `--base-url` (the job's own servers only), refusing
to send anything without them.

The server is bench/fanout_server.py in its own process with `--basic USER:PASSWORD`: it
answers 401 to any request without that Basic `Authorization` header and counts them
(`refused`), so an item answered `ok` proves the credentials reached it.
"""

from __future__ import annotations

import base64
import json
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from sdk.batch._setup import BackendSpec
from sdk.batch._setup import spec_from
from sdk.cli import app
from tests.batch_support import by_id
from tests.batch_support import completions
from tests.batch_support import fanout
from tests.batch_support import gate
from tests.batch_support import read_output
from tests.batch_support import write_items
from tests.test_batch_integrity import one_line
from tests.test_batch_integrity import sdk_process
from tests.test_batch_integrity import stop
from tests.test_batch_integrity import wait_for

USER, PASSWORD = "batch-user", "s3cr3t-Pa55word"
SECRETS = (PASSWORD.encode(), base64.b64encode(f"{USER}:{PASSWORD}".encode()))


def refused(url: str) -> int:
    """How many requests the server refused for want of the Basic header."""
    return int(httpx.get(f"{url}/stats", timeout=10).json()["refused"])


def with_credentials(url: str, password: str = PASSWORD) -> str:
    return url.replace("http://", f"http://{USER}:{password}@", 1)


def assert_kept_nowhere(folder: Path, *texts: str) -> None:
    """Neither the password nor the Basic header's value in any of the job's files (the state
    file, its write-ahead log and lock, the output), nor in `texts` (what a command printed)."""
    for path in folder.iterdir():
        if path.is_file() and path.name != "items.jsonl":
            data = path.read_bytes()
            assert not any(secret in data for secret in SECRETS), path.name
    for text in texts:
        assert not any(secret.decode() in text for secret in SECRETS), text


def run_args(url: str, folder: Path, *extra: str) -> list[str]:
    return [
        "batch", "run", "--contract", "contracts:Decision", "--provider", "llamacpp",
        "--base-url", url, "--input", str(folder / "items.jsonl"), "--out",
        str(folder / "out.jsonl"), "--state", str(folder / "job.db"), *extra,
    ]  # fmt: skip


@pytest.fixture
def basic_server() -> Iterator[str]:
    with fanout(0.0, "--closed", "--basic", f"{USER}:{PASSWORD}") as url:
        yield url


def test_a_job_keeps_no_credentials_and_resume_takes_them_again(
    tmp_path: Path, basic_server: str
) -> None:
    url = basic_server
    write_items(tmp_path / "items.jsonl", 6)
    # The server holds the completions (its gate is closed): the run is interrupted with
    # items left to resume, whatever the machine's load.
    runner = sdk_process(*run_args(with_credentials(url), tmp_path, "--concurrency", "1"))
    try:
        wait_for(lambda: completions(url) >= 1, "the first completion")
        runner.send_signal(signal.SIGINT)
        _, errors = runner.communicate(timeout=60)
    finally:
        stop(runner)
    assert runner.returncode == 130, errors
    state = tmp_path / "job.db"
    with closing(sqlite3.connect(state)) as db:
        stored = db.execute("SELECT value FROM meta WHERE key = 'backend_spec'").fetchone()[0]
    assert json.loads(stored)["base_urls"] == [url.replace("http://", "http://***@")]
    cli = CliRunner()
    status = cli.invoke(app, ["batch", "status", "--state", str(state), "--json"])
    assert status.exit_code == 0 and json.loads(status.stdout)["pending"] >= 5
    assert_kept_nowhere(tmp_path, errors, status.output)

    sent = completions(url)
    bare = cli.invoke(app, ["batch", "resume", "--state", str(state)])
    assert bare.exit_code == 2, bare.output
    line = one_line(bare.stderr)
    assert url in line and "give --base-url again" in line and "***" not in line
    other = with_credentials("http://127.0.0.1:9")
    elsewhere = cli.invoke(app, ["batch", "resume", "--state", str(state), "--base-url", other])
    assert elsewhere.exit_code == 2, elsewhere.output
    assert "http://127.0.0.1:9 is not a server of the job" in one_line(elsewhere.stderr)
    assert completions(url) == sent and refused(url) == 0  # nothing was sent

    gate(url, open=True)
    again = ["batch", "resume", "--state", str(state), "--base-url", with_credentials(url)]
    resumed = cli.invoke(app, again)
    assert resumed.exit_code == 0, resumed.output
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert len(records) == 6 and {r["outcome"] for r in records.values()} == {"ok"}
    assert refused(url) == 0  # every request carried the Basic header
    assert_kept_nowhere(tmp_path, resumed.output)


def test_retry_takes_the_credentials_again_and_refuses_to_run_without_them(
    tmp_path: Path, basic_server: str
) -> None:
    url = basic_server
    gate(url, open=True)
    write_items(tmp_path / "items.jsonl", 4)
    cli = CliRunner()
    wrong = cli.invoke(app, run_args(with_credentials(url, "not-it"), tmp_path))
    assert wrong.exit_code == 1, wrong.output  # every item refused by the server: failed
    assert refused(url) == 4 and completions(url) == 0
    state = str(tmp_path / "job.db")
    bare = cli.invoke(app, ["batch", "retry", "--state", state])
    assert bare.exit_code == 2 and "give --base-url again" in one_line(bare.stderr)
    assert refused(url) == 4  # nothing sent
    retried = cli.invoke(app, ["batch", "retry", "--state", state, "--base-url",
                               with_credentials(url), "--max-tokens", "512"])  # fmt: skip
    assert retried.exit_code == 0, retried.output
    records = by_id(read_output(tmp_path / "out.jsonl"))
    assert {r["outcome"] for r in records.values()} == {"ok"} and len(records) == 4
    assert refused(url) == 4 and completions(url) == 4
    # `run` again over the job's state file: its --base-url, as ever, says where it runs.
    rerun = cli.invoke(app, run_args(with_credentials(url), tmp_path))
    assert rerun.exit_code == 0, rerun.output
    assert_kept_nowhere(tmp_path, wrong.output, retried.output, rerun.output)


def test_an_older_state_file_with_credentials_still_runs_and_loses_them(
    tmp_path: Path, basic_server: str
) -> None:
    url = basic_server
    gate(url, open=True)
    write_items(tmp_path / "items.jsonl", 3)
    cli = CliRunner()
    failed = cli.invoke(app, run_args(with_credentials(url, "not-it"), tmp_path))
    assert failed.exit_code == 1, failed.output
    # What an older version kept: the spec as given (asdict), its credentials in the URL, and
    # a change of servers recorded with them.
    spec = asdict(BackendSpec("llamacpp", base_urls=[with_credentials(url)]))
    change = {"at": 1.0, "changed": {"backend_spec": [spec, spec]}}
    with closing(sqlite3.connect(tmp_path / "job.db")) as db, db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'backend_spec'", (json.dumps(spec),))
        db.execute("INSERT INTO meta VALUES ('changes', ?)", (json.dumps([change]),))
    assert PASSWORD.encode() in (tmp_path / "job.db").read_bytes() + b"".join(
        path.read_bytes() for path in tmp_path.glob("job.db-wal")
    )
    retried = cli.invoke(app, ["batch", "retry", "--state", str(tmp_path / "job.db")])
    assert retried.exit_code == 0, retried.output  # read as before: no --base-url needed
    assert "removed the servers' credentials" in retried.stderr
    assert completions(url) == 3 and refused(url) == 3
    assert_kept_nowhere(tmp_path, retried.output)
    bare = cli.invoke(app, ["batch", "resume", "--state", str(tmp_path / "job.db")])
    assert bare.exit_code == 2 and "give --base-url again" in one_line(bare.stderr)


def test_the_stored_url_keeps_its_path_and_query_and_duplicates_share_credentials() -> None:
    given = "https://me:pa%2Fss@gateway.example:8443/v1/llm/?api-version=2024-10-21&route=a"
    spec = BackendSpec("vllm", model="m", base_urls=[given, given, "http://10.0.0.2:8000/v1"])
    kept = spec.to_json()["base_urls"]
    assert kept == [
        "https://***@gateway.example:8443/v1/llm/?api-version=2024-10-21&route=a",
        "https://***@gateway.example:8443/v1/llm/?api-version=2024-10-21&route=a",
        "http://10.0.0.2:8000/v1",  # no credentials: as given
    ]
    assert "pa%2Fss" not in json.dumps(spec.to_json())
    again = spec_from(spec.to_json(), base_urls=[given])  # once, for both clients
    assert again.base_urls == [given, given, "http://10.0.0.2:8000/v1"]
    with pytest.raises(ValueError, match=r"gateway\.example:8443/v1/llm") as info:
        spec_from(spec.to_json())
    assert "***" not in str(info.value) and "pa%2Fss" not in str(info.value)
    # `cancel` sends nothing to a local server: it needs no credentials.
    quiet = spec_from(spec.to_json(), sending=False)
    assert (
        quiet.base_urls[0] == "https://gateway.example:8443/v1/llm?api-version=2024-10-21&route=a"
    )


def test_a_vllm_server_given_again_with_or_without_its_v1_is_the_same_server() -> None:
    # vLLMProvider adds `/v1` itself when the URL lacks it: `http://h:8000` and
    # `http://h:8000/v1` are one server, whichever was stored and whichever is given again.
    root, v1 = "http://me:pw@h.test:8000", "http://me:pw@h.test:8000/v1"
    for stored, given in [(v1, root), (root, v1 + "/")]:
        spec = BackendSpec("vllm", model="m", base_urls=[stored])
        again = spec_from(spec.to_json(), base_urls=[given])
        assert again.base_urls == [given]
    # Another provider's path is the server's own: `/v1` there names another route.
    spec = BackendSpec("llamacpp", base_urls=["http://me:pw@h.test:8080/v1"])
    with pytest.raises(ValueError, match="is not a server of the job"):
        spec_from(spec.to_json(), base_urls=["http://me:pw@h.test:8080"])


def test_a_server_given_again_written_another_way_is_the_same_server() -> None:
    # The scheme's and host's case, and the scheme's own port written or not: one server, as
    # the response cache's key has it (`server_of`); another port or scheme is another.
    spec = BackendSpec("llamacpp", base_urls=["http://me:pw@gw.test/llm"])
    for given in ("http://me:pw@GW.Test:80/llm", "HTTP://me:pw@gw.test/llm/"):
        assert spec_from(spec.to_json(), base_urls=[given]).base_urls == [given]
    for other in ("http://me:pw@gw.test:8080/llm", "https://me:pw@gw.test/llm"):
        with pytest.raises(ValueError, match="is not a server of the job"):
            spec_from(spec.to_json(), base_urls=[other])


def test_a_credential_in_the_query_is_withheld_like_one_in_the_userinfo() -> None:
    # A gateway that takes its key in the query (`?key=`, a signed URL's `sig=`): the state file
    # keeps the query's routing parameters as written and withholds the credentials' values.
    given = "https://gateway.example/v1?api-version=2024-10-21&key=S3CRET-K3Y&sig=S1GNATURE"
    spec = BackendSpec("vllm", model="m", base_urls=[given])
    stored = json.dumps(spec.to_json())
    assert "S3CRET-K3Y" not in stored and "S1GNATURE" not in stored
    assert spec.to_json()["base_urls"] == [
        "https://gateway.example/v1?api-version=2024-10-21&key=***&sig=***"
    ]
    with pytest.raises(ValueError, match="does not keep the credentials") as info:
        spec_from(spec.to_json())
    assert "S3CRET" not in str(info.value) and "api-version=2024-10-21" in str(info.value)
    assert spec_from(spec.to_json(), base_urls=[given]).base_urls == [given]
    # The routing parameters name the server: another API version is another server, and the
    # refusal does not echo the key it was given.
    other = given.replace("2024-10-21", "2025-01-01")
    with pytest.raises(ValueError, match="is not a server of the job") as info:
        spec_from(spec.to_json(), base_urls=[other])
    assert "S3CRET" not in str(info.value)
    # A parameter whose name only ends like one (`monkey=`) is the URL's own.
    plain = "http://10.0.0.2:8000/v1?monkey=1&keys=2"
    assert BackendSpec("vllm", model="m", base_urls=[plain]).to_json()["base_urls"] == [plain]
