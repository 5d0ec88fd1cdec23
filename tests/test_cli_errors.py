"""No traceback, ever: what no command handles ends in one `error:` line and an exit code.

A model file that does not load, an output that cannot be written, a Ctrl-C while the CLI
loads or runs, an empty path, an unknown contract name: each is run as a user runs it (a
subprocess of the `sdk` script, or typer's runner) and must exit with the documented code and
one line on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sdk.cli import app
from tests.schema_support import REPO

SDK = Path(sys.executable).with_name("sdk")


def env() -> dict[str, str]:
    """This checkout first on `sys.path` (its code, not the venv's copy), plain output."""
    kept = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR")}
    return {**kept, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}


def errors(stderr: str) -> list[str]:
    """stderr's lines, less the environment's warnings (a compiled module's RuntimeWarning)."""
    assert "Traceback" not in stderr, stderr
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and "Warning" not in line and not line.startswith(" ")
    ]


def run(*args: str, stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [str(SDK), *args],
        env=env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


# --- D1: a model file that is there but does not load -------------------------------------------


@pytest.mark.parametrize("command", ["demo", "eval", "eval-provider", "batch"])
def test_a_model_file_that_does_not_load_is_a_bad_argument(command: str, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    fake = tmp_path / "fake.gguf"
    fake.write_text("hello\n")
    items = tmp_path / "in.jsonl"
    items.write_text(json.dumps({"id": "a", "prompt": "Approve this?"}) + "\n")
    dataset = str(REPO / "examples" / "data" / "eval" / "decisions.jsonl")
    contract = ["--contract", "contracts:Decision"]
    args = {
        "demo": ["demo", "--model", str(fake)],
        "eval": ["eval", dataset, *contract, "--model", str(fake), "--out", str(tmp_path / "e")],
        "eval-provider": [
            "eval", dataset, *contract, "--provider", f"embedded:{fake}",
            "--out", str(tmp_path / "e"),
        ],
        "batch": [
            "batch", "run", "--provider", "embedded", "--model", str(fake), *contract,
            "--input", str(items), "--out", str(tmp_path / "o.jsonl"),
        ],
    }[command]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert f"cannot load the model {fake}" in result.output
    assert not (tmp_path / "o.jsonl").exists()


# --- D3: stdout that cannot be written ----------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize(
    "args", [["providers"], ["--help"], ["schema", "targets"], ["cache", "stats"]]
)
def test_a_full_stdout_is_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    if args[0] == "cache":
        args = [*args, "--path", str(tmp_path / "none.db")]
    with open("/dev/full", "w") as full:
        result = run(*args, stdout=full)
    assert result.returncode == 2
    assert errors(result.stderr) == [
        "error: cannot write the output: [Errno 28] No space left on device"
    ]


# Help goes through typer's own console, whose broken pipe exited 1: `sdk --help | head -0`.
@pytest.mark.parametrize(
    "args",
    [
        ["providers"], ["providers", "--json"], ["schema", "targets"],
        ["--help"], ["batch", "run", "--help"], ["cache"],  # help; `cache` alone prints it too
    ],
)  # fmt: skip
def test_a_reader_that_went_away_is_silent(args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write is a broken pipe
    try:
        result = run(*args, stdout=write)
    finally:
        os.close(write)
    assert errors(result.stderr) == []
    assert result.returncode == 2


# --- a usage error: one line, exit 2 ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["batch", "run", "--nope"], "error: sdk batch run: No such option: --nope (Possible "
         "options: --input, --model); see 'sdk batch run --help'"),
        (["cache", "stats", "--path"], "error: sdk cache stats: Option '--path' requires an "
         "argument; see 'sdk cache stats --help'"),
        (["schema", "export"], "error: sdk schema export: Missing argument 'MODULE_OR_PACKAGE'; "
         "see 'sdk schema export --help'"),
        (["serve", "--port", "abc"], "error: sdk serve: Invalid value for '--port': Input should "
         "be a valid integer, unable to parse string as an integer; see 'sdk serve --help'"),
        (["batch", "status", "--json=yes"], "error: sdk batch status: Option '--json' does not "
         "take a value; see 'sdk batch status --help'"),
        (["providers", "extra"], "error: sdk providers: Got unexpected extra argument(s) (extra); "
         "see 'sdk providers --help'"),
        (["nosuch"], "error: sdk: No such command 'nosuch'; see 'sdk --help'"),
        (["--nope"], "error: sdk: No such option: --nope; see 'sdk --help'"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line_and_exit_2(args: list[str], line: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert errors(result.stderr) == [line]
    assert "Usage:" not in result.stderr and "─" not in result.stderr  # no usage, no panel


def test_help_is_still_typer_s() -> None:
    # `--help`, and a group given no command, print typer's help on stdout as before.
    shown = run("batch", "run", "--help")
    assert shown.returncode == 0
    assert shown.stdout.split()[:4] == ["Usage:", "sdk", "batch", "run"]
    assert "╭─ Options " in shown.stdout
    alone = run("batch")
    assert alone.returncode == 2
    assert alone.stdout.split()[:4] == ["Usage:", "sdk", "batch", "[OPTIONS]"]
    assert "╭─ Commands " in alone.stdout
    assert errors(alone.stderr) == []


# --- D4: Ctrl-C anywhere ------------------------------------------------------------------------

# Ctrl-C arrives as a KeyboardInterrupt wherever Python is: here, in the import of the module
# named, at a chosen point rather than after a guessed delay.
INTERRUPTED_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["sdk", *{args!r}]
from sdk.cli import main
main()
"""


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("sdk.cli.schema", ["schema", "lint", "contracts"]),  # while the CLI loads
        ("rich.markup", ["providers"]),  # earlier still
        ("sdk.cli._demo", ["demo"]),  # while a command runs (the demo loads its own code)
    ],
)
def test_an_interrupt_anywhere_is_one_line_and_130(module: str, args: list[str]) -> None:
    code = INTERRUPTED_IMPORT.format(module=module, args=args)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 130
    assert errors(result.stderr) == ["error: interrupted"]


# --- D6: an empty path --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["batch", "run", "--provider", "embedded", "--contract", "contracts:Decision",
          "--input", "in.jsonl", "--out", ""], "--out"),
        (["batch", "status", "--state", ""], "--state"),
        (["schema", "export", "contracts", "--out", ""], "--out"),
        (["cache", "stats", "--path", ""], "--path"),
        (["cache", "clear", "--path", ""], "--path"),
    ],
)  # fmt: skip
def test_an_empty_path_is_one_line_and_exit_2(
    args: list[str], option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("in.jsonl").write_text(json.dumps({"id": "a", "prompt": "Approve this?"}) + "\n")
    result = CliRunner().invoke(app, args, env={"NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {option} is an empty path: give a file or folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]  # nothing written


@pytest.mark.parametrize("blank", ["", " "])
@pytest.mark.parametrize(
    "args",
    [
        ["schema", "lock", "{}"],
        ["schema", "check", "{}"],
        ["schema", "export", "{}"],
        ["schema", "lint", "{}"],
        ["schema", "diff", "--against-lock", "{}"],
        ["schema", "diff", "{}", "contracts:Decision"],
        ["schema", "diff", "contracts:Decision", "{}"],
    ],
)
def test_an_empty_target_is_one_line_and_exit_2(
    args: list[str], blank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `sdk schema lock ''` named the SDK's own file and Python's "Empty module name"; `diff ''`
    # read `''` as the current folder.
    monkeypatch.chdir(REPO)
    given = [blank if arg == "{}" else arg for arg in args]
    result = CliRunner().invoke(app, given, env={"NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {blank!r} names nothing: give "), result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "sdk/" not in result.output


# --- D8: a NAME that is none of the package's ---------------------------------------------------


def test_diff_against_lock_refuses_a_name_the_package_has_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["schema", "lock", "contracts", "--dir", "schemas"]).exit_code == 0
    args = ["schema", "diff", "--against-lock", "contracts", "Decison", "--dir", "schemas"]
    for extra in ([], ["--fail-on-breaking"], ["--json"]):
        result = runner.invoke(app, [*args, *extra], env={"NO_COLOR": "1"})
        assert result.exit_code == 2
        line = result.output.strip()
        assert line.startswith("error: contracts has no contract, grammar or prompt named")
        assert "'Decison' (did you mean 'Decision'?)" in line
        assert "\n" not in line
    # A known name is still diffed.
    known = runner.invoke(app, [*args[:4], "Decision", "--dir", "schemas"])
    assert known.exit_code == 0
    assert "Decision" in known.output


# --- D7: sdk serve's bad arguments --------------------------------------------------------------


def _serve_files() -> None:
    from sdk.cli._llama_server import Unavailable
    from sdk.cli._llama_server import bundled_model
    from sdk.cli._llama_server import server_binary

    try:
        server_binary()
        bundled_model()
    except (Unavailable, ImportError) as missing:
        pytest.skip(f"no llama-server or bundled model: {missing}")


@pytest.mark.parametrize(
    ("threads", "log", "message"),
    [
        (None, "a-folder", "error: --log a-folder is a folder: give the log file's path"),
        ("abc", None, "error: $LLAMA_SERVER_THREADS is a number of threads, 1 or more, not 'abc'"),
        ("-3", None, "error: $LLAMA_SERVER_THREADS is a number of threads, 1 or more, not '-3'"),
    ],
)
def test_serve_refuses_a_bad_log_or_thread_count(
    threads: str | None, log: str | None, message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    _serve_files()
    monkeypatch.chdir(tmp_path)
    Path("a-folder").mkdir()
    environment = {"NO_COLOR": "1", "LLAMA_SERVER_THREADS": threads}
    args = ["serve", "--port", "0", *(["--log", log] if log else [])]
    result = CliRunner().invoke(app, args, env=environment)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert result.output.strip() == message


@pytest.mark.parametrize("threads", ["abc", "-3", "0"])
def test_the_server_refuses_a_thread_count_that_is_not_one(
    threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sdk.cli._llama_server import LlamaServer

    monkeypatch.setenv("LLAMA_SERVER_THREADS", threads)
    with pytest.raises(ValueError, match=r"LLAMA_SERVER_THREADS is a number of threads"):
        LlamaServer(Path("llama-server"), Path("m.gguf"), log_path=Path("l.log"))
    monkeypatch.setenv("LLAMA_SERVER_THREADS", "3")
    server = LlamaServer(Path("llama-server"), Path("m.gguf"), log_path=Path("l.log"))
    assert server.command(8080)[server.command(8080).index("-t") + 1] == "3"


# --- a provider spec's credentials ------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "extra", "said"),
    [
        ("llamacp:http://ops:PW-SECRET-9@127.0.0.1:9/?key=KEY-SECRET-8", [],
         "--provider takes embedded[:MODEL.gguf], llamacpp[:URL]"),
        ("llamacpp:http://ops:PW-SECRET-9@127.0.0.1:9/?key=KEY-SECRET-8", ["--model", "x"],
         "--model 'x' and --provider 'llamacpp:http://***@127.0.0.1:9/?key=***' both name"),
    ],
)  # fmt: skip
def test_sdk_eval_never_prints_a_provider_spec_s_credentials(
    spec: str, extra: list[str], said: str, tmp_path: Path
) -> None:
    # On main both errors echoed the spec whole: the URL's password and its ?key= on stderr.
    dataset = str(REPO / "examples" / "data" / "eval" / "decisions.jsonl")
    result = run("eval", dataset, "--contract", "contracts:Decision", "--provider", spec, *extra,
                 "--out", str(tmp_path / "e"))  # fmt: skip
    assert result.returncode == 2
    lines = errors(result.stderr)
    assert len(lines) == 1 and said in lines[0], lines
    for secret in ("PW-SECRET-9", "KEY-SECRET-8"):
        assert secret not in result.stderr + result.stdout
