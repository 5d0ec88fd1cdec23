"""An optional extra that is not installed is named, with the command that installs it.

DESIGN.md names `sdk.ray` (the `ray` extra), `sdk batch run --engine ray` and
`sdk.cache.RedisCache` (the `redis` extra); `sdk.wire` makes a hosted family's request on its
vendor's client (the `openai`, `anthropic` or `gemini` extra). Without the extra, each says
which to install (as `EmbeddedProvider` does for `local` and `gemma`), and the CLI exits 2 with
one line, before a job's files are made. Each case runs in a fresh interpreter in which the
package cannot be imported (`sys.modules[name] = None`, what Python does for a package that is
not there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.batch_support import write_items
from tests.test_batch_integrity import local_run

ROOT = Path(__file__).resolve().parents[1]


def _without(packages: tuple[str, ...], code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`code` run in a fresh interpreter where `packages` cannot be imported."""
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in packages)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", f"import sys\n{blocked}{code}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        check=False,
    )


def test_sdk_ray_without_the_ray_extra_names_it(tmp_path: Path) -> None:
    done = _without(("pyarrow", "ray"), "import sdk.ray", tmp_path)
    assert done.returncode == 1
    assert "ImportError: sdk.ray needs the ray extra: pip install 'structured-sdk[ray]'" in (
        done.stderr
    )


def test_batch_engine_ray_without_the_ray_extra_exits_2_before_making_the_job(
    tmp_path: Path,
) -> None:
    items, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_items(items, 1)
    argv = ["sdk", *local_run("http://127.0.0.1:9", items, out, "--engine", "ray")]
    code = f"from sdk.cli import main\nsys.argv = {argv!r}\nmain()"
    done = _without(("ray",), code, ROOT)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "pip install 'structured-sdk[ray]'" in done.stderr
    assert not out.exists() and not Path(f"{out}.job.db").exists()


def test_redis_cache_without_the_redis_extra_names_it(tmp_path: Path) -> None:
    code = "from sdk.cache import RedisCache\nRedisCache('redis://localhost:6379/0')"
    done = _without(("redis",), code, tmp_path)
    assert done.returncode == 1
    assert (
        "ImportError: RedisCache needs the redis package: pip install 'structured-sdk[redis]'"
        in done.stderr
    )


@pytest.mark.parametrize(
    ("family", "blocked", "extra", "package"),
    [
        ("openai_responses", "openai", "openai", "openai"),
        ("openai_chat", "httpx2", "openai", "httpx2"),
        ("anthropic", "anthropic", "anthropic", "anthropic"),
        ("gemini", "google.genai", "gemini", "google-genai"),
    ],
)
def test_sdk_wire_without_a_family_s_extra_names_it(
    tmp_path: Path, family: str, blocked: str, extra: str, package: str
) -> None:
    # On main: a bare "ModuleNotFoundError: import of openai halted" (no extra named).
    code = (
        "from contracts import Decision\nfrom sdk.wire import Item, build_request\n"
        f"try:\n    build_request({family!r}, Decision, Item(prompt='Approve?'), "
        "settings={'model': 'm'})\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error.name, error, sep='\\n')\n"
    )
    done = _without((blocked,), code, tmp_path)
    assert done.returncode == 0, done.stderr
    kind, name, message = done.stdout.splitlines()[:3]
    assert (kind, name) == ("ModuleNotFoundError", blocked)  # (what it was: caught as before)
    assert message.startswith(
        f"sdk.wire for {family} needs the {extra} extra: pip install 'structured-sdk[{extra}]' ("
    ), message
    # ... and that extra is the project's, and installs the package missing.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "structured-sdk"
    requirements = project["optional-dependencies"][extra]
    assert any(r.split(">")[0].split("[")[0] == package for r in requirements), requirements
