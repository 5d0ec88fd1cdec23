"""Loose `.py` files of one folder share its lock (`schemas/schema.lock.json`): locking one
pins its own contracts and leaves the others' entries, one after the other or all at once.

Concurrent locks are real processes (`tests/schema_lock_process.py`): each imports its file,
says it is ready, and waits for one go before it locks, so the lock files' reads and writes
meet; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk.workflow.versioning import LOCK_FILE
from sdk.workflow.versioning import lock

REPO = Path(__file__).resolve().parent.parent
HELPER = Path(__file__).with_name("schema_lock_process.py")
NAMES = ["Alpha", "Beta", "Gamma", "Delta"]


def _contract(name: str) -> str:
    return textwrap.dedent(f'''
        from pydantic import Field

        from sdk import Contract


        class {name}(Contract):
            """A {name.lower()}."""

            value: str | None = Field(description="The value, or null when not stated.")
    ''')


def _loose_folder(folder: Path) -> list[Path]:
    """A plain folder (no `__init__.py`) with one loose module per name."""
    folder.mkdir(parents=True)
    files = []
    for name in NAMES:
        path = folder / f"{name.lower()}_contract.py"
        path.write_text(_contract(name), encoding="utf-8")
        files.append(path)
    return files


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR")}
    env.update(NO_COLOR="1", COLUMNS="200", PYTHONPATH=str(REPO))
    return env


def _sdk(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args], cwd=cwd, env=_env(), capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def _locked(folder: Path) -> set[str]:
    data = json.loads((folder / "schemas" / LOCK_FILE).read_text())
    return {entry["name"] for entry in data["contracts"]}


def test_loose_files_of_one_folder_locked_one_after_the_other_keep_each_other(
    tmp_path: Path,
) -> None:
    # Before: each `lock` of a loose file dropped the entries of every other file of the folder
    # ("dropped Alpha v1: no longer defined"), and `check` of one called the others missing.
    folder = tmp_path / "models"
    files = _loose_folder(folder)
    for path in files:
        done = _sdk(tmp_path, "schema", "lock", str(path))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "dropped" not in done.stdout.replace("0 dropped", "")
    assert _locked(folder) == set(NAMES)
    for path in files:
        checked = _sdk(tmp_path, "schema", "check", str(path))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    whole = _sdk(tmp_path, "schema", "check", "models")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    # The folder is the lock's whole: locking it drops what no file defines any more.
    files[0].unlink()
    missing = _sdk(tmp_path, "schema", "check", "models")
    assert missing.returncode == 1 and "contract-missing: Alpha is locked" in missing.stdout
    dropped = _sdk(tmp_path, "schema", "lock", "models")
    assert "dropped Alpha v1: no longer defined" in dropped.stdout
    assert _locked(folder) == set(NAMES[1:])


ROUNDS = 4


def test_loose_files_of_one_folder_locked_at_once_lose_no_entry(tmp_path: Path) -> None:
    # Each round: one process per loose file, all released at once, each locking its file into
    # the folder's one lock file. Without a lock on the read-modify-write, the last writer's
    # lock file lacked the entries the others had just written.
    for round_ in range(ROUNDS):
        folder = tmp_path / f"round{round_}"
        files = _loose_folder(folder)
        go = folder / "go"
        processes = [
            subprocess.Popen(
                [sys.executable, str(HELPER), str(path), str(go)],
                cwd=tmp_path,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for path in files
        ]
        try:
            ready = [path.with_suffix(".ready") for path in files]
            deadline = time.monotonic() + 60
            while not all(r.exists() for r in ready):
                assert time.monotonic() < deadline, "the lock processes never got ready"
                assert all(p.poll() is None for p in processes), [
                    p.communicate() for p in processes if p.poll() is not None
                ]
                time.sleep(0.01)
            go.touch()
            outputs = [p.communicate(timeout=60) for p in processes]
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        assert [p.returncode for p in processes] == [0] * len(files), outputs
        assert _locked(folder) == set(NAMES), f"round {round_}: {outputs}"
        checked = _sdk(tmp_path, "schema", "check", folder.name)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_lock_held_too_long_is_a_clear_error_and_nothing_is_written(tmp_path: Path) -> None:
    from sdk._files import held_lock

    folder = tmp_path / "models"
    files = _loose_folder(folder)
    lock(str(files[0]))
    before = (folder / "schemas" / LOCK_FILE).read_bytes()
    with held_lock(folder / "schemas"), pytest.raises(TimeoutError) as raised:
        lock(str(files[1]), wait=0.2)
    message = str(raised.value)
    assert "models/schemas" in message and "another `sdk schema lock`" in message
    assert "0.2 s" in message
    assert (folder / "schemas" / LOCK_FILE).read_bytes() == before
    assert not (folder / "schemas" / "Beta.v1.json").exists()
    # Once it is given back, the same lock goes through.
    lock(str(files[1]), wait=0.2)
    assert _locked(folder) == {"Alpha", "Beta"}


def test_a_folder_target_skips_main_and_names_a_script_that_exits_when_imported(
    tmp_path: Path,
) -> None:
    # A folder target imports each module in it. Before: a script in it that exits when
    # imported (no `if __name__ == "__main__":` guard) ended the command with the script's
    # exit code and no word (here 0: `check` "passed", `lock` wrote nothing), and the folder's
    # `__main__.py` ran.
    folder = tmp_path / "models"
    _loose_folder(folder)
    marker = tmp_path / "main-ran"
    (folder / "__main__.py").write_text(
        f"from pathlib import Path\n\nPath({str(marker)!r}).touch()\n", encoding="utf-8"
    )
    (folder / "make_report.py").write_text(
        "import sys\n\nprint('report written')\nsys.exit(0)\n", encoding="utf-8"
    )
    for command in ("lock", "check"):
        done = _sdk(tmp_path, "schema", command, "models")
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: models/make_report.py:4: cannot import models.make_report")
        assert "exits when imported (SystemExit: 0)" in line
        assert 'if __name__ == "__main__":' in line
    assert not (folder / "schemas").exists()
    (folder / "make_report.py").unlink()
    locked = _sdk(tmp_path, "schema", "lock", "models")
    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert _locked(folder) == set(NAMES)
    assert not marker.exists()  # `python -m models` runs __main__.py; importing never does


def test_a_contract_removed_from_a_loose_file_is_noticed_when_that_file_is_checked(
    tmp_path: Path,
) -> None:
    # The lock records the file that defines each name (`sources`). Before, a check of one
    # loose file compared its own contracts only: a contract deleted from it passed (a
    # pre-commit hook gives the changed files), and a lock of it said nothing.
    folder = tmp_path / "models"
    files = _loose_folder(folder)
    assert _sdk(tmp_path, "schema", "lock", "models").returncode == 0  # locked by the folder
    sources = json.loads((folder / "schemas" / LOCK_FILE).read_text())["sources"]
    assert sources == {name: f"../{name.lower()}_contract.py" for name in NAMES}
    # Beta moves to gamma's file, Alpha is deleted.
    files[2].write_text(_contract("Gamma") + _contract("Beta").split("\n\n\n", 1)[1])
    files[1].write_text("# nothing here any more\n")
    files[0].write_text("# nothing here any more\n")
    checked = _sdk(tmp_path, "schema", "check", str(files[0]))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "contract-missing: Alpha is locked (v1) as defined in" in checked.stdout
    assert "sdk schema lock models" in checked.stdout
    # The lock of the file keeps the entry (it may have moved), and says so.
    locked = _sdk(tmp_path, "schema", "lock", str(files[0]))
    assert locked.returncode == 0 and "kept Alpha (v1): locked as defined in" in locked.stdout
    assert _locked(folder) == set(NAMES)
    # Beta is Gamma's file's now: once that file is locked, Beta's old file has nothing missing.
    assert _sdk(tmp_path, "schema", "check", str(files[1])).returncode == 1
    assert _sdk(tmp_path, "schema", "lock", str(files[2])).returncode == 0
    moved = _sdk(tmp_path, "schema", "check", str(files[1]))
    assert moved.returncode == 0, moved.stdout + moved.stderr
    # The folder's lock drops what no file defines.
    dropped = _sdk(tmp_path, "schema", "lock", "models")
    assert "dropped Alpha v1: no longer defined" in dropped.stdout
    assert _locked(folder) == set(NAMES[1:])
    assert _sdk(tmp_path, "schema", "check", str(files[0])).returncode == 0


def test_a_lock_written_before_sources_is_read_and_given_them(tmp_path: Path) -> None:
    # A lock file without `sources` (an older SDK's): read as before, every check passes, and
    # the next lock records the sources without re-pinning anything.
    folder = tmp_path / "models"
    files = _loose_folder(folder)
    assert _sdk(tmp_path, "schema", "lock", "models").returncode == 0
    path = folder / "schemas" / LOCK_FILE
    data = json.loads(path.read_text())
    del data["sources"]
    path.write_text(json.dumps(data, indent=2) + "\n")
    for target in [*map(str, files), "models"]:
        checked = _sdk(tmp_path, "schema", "check", target)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    again = _sdk(tmp_path, "schema", "lock", str(files[0]))
    assert again.returncode == 0 and "0 locked, 0 re-pinned, 0 dropped, 1 unchanged" in again.stdout
    assert json.loads(path.read_text())["sources"] == {"Alpha": "../alpha_contract.py"}


def test_a_package_module_checked_alone_notices_a_contract_or_grammar_removed_from_it(
    tmp_path: Path,
) -> None:
    # A package's modules share the package's lock: a module checked alone (a pre-commit hook
    # giving `shop/billing.py`) notices what the lock records as its own and it no longer
    # defines; a grammar re-exported by the package's `__init__` is its defining module's.
    shop = tmp_path / "shop"
    shop.mkdir()
    grammar = "from sdk.grammar import Grammar\n\nCODE = Grammar('Code', lark='start: \"x\"\\n')\n"
    (shop / "billing.py").write_text(_contract("Invoice") + "\n" + grammar)
    (shop / "__init__.py").write_text("from shop.billing import CODE\n")
    (shop / "shipping.py").write_text(_contract("Parcel"))
    assert _sdk(tmp_path, "schema", "lock", "shop").returncode == 0
    sources = json.loads((shop / "schemas" / LOCK_FILE).read_text())["sources"]
    assert sources == {"Code": "../billing.py", "Invoice": "../billing.py",
                       "Parcel": "../shipping.py"}  # fmt: skip
    (shop / "billing.py").write_text("# moved out\n")
    (shop / "__init__.py").write_text("")
    checked = _sdk(tmp_path, "schema", "check", str(shop / "billing.py"))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "contract-missing: Code is locked (v1) as defined in" in checked.stdout
    assert "contract-missing: Invoice is locked (v1) as defined in" in checked.stdout
    assert "sdk schema lock shop" in checked.stdout
    other = _sdk(tmp_path, "schema", "check", str(shop / "shipping.py"))
    assert other.returncode == 0, other.stdout + other.stderr


def test_a_grammar_imported_by_another_module_is_its_making_modules(tmp_path: Path) -> None:
    # A grammar made in `shop/sql.py` and imported by `shop/billing.py` (which uses it) is
    # `sql.py`'s: dropping that import from `billing.py` removes nothing from the lock. Before,
    # the lock recorded the first module that binds it (`billing.py`, walked first), so the
    # check of `billing.py` failed (contract-missing: Query) with `sql.py` still making it,
    # and a lock of `billing.py` alone made it `billing.py`'s too.
    shop = tmp_path / "shop"
    shop.mkdir()
    grammar = (
        "from sdk.grammar import Grammar\n\nQUERY = Grammar('Query', lark='start: \"x\"\\n')\n"
    )
    (shop / "__init__.py").write_text("")
    (shop / "sql.py").write_text(grammar)
    # (a function's own QUERY is no module-level name of billing.py)
    uses = "from shop.sql import QUERY\n\n\ndef run():\n    QUERY = None\n    return QUERY\n"
    uses += _contract("Invoice")
    (shop / "billing.py").write_text(uses)
    assert _sdk(tmp_path, "schema", "lock", "shop").returncode == 0
    path = shop / "schemas" / LOCK_FILE
    assert json.loads(path.read_text())["sources"]["Query"] == "../sql.py"
    assert _sdk(tmp_path, "schema", "lock", str(shop / "billing.py")).returncode == 0
    assert json.loads(path.read_text())["sources"]["Query"] == "../sql.py"
    (shop / "billing.py").write_text(_contract("Invoice"))  # (no longer uses the grammar)
    checked = _sdk(tmp_path, "schema", "check", str(shop / "billing.py"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@contextlib.contextmanager
def _billing_importing_a_grammar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tag: str
) -> Iterator[Path]:
    """`shop_TAG/billing.py` (contract `InvoiceTAG`), which imports grammar `QueryTAG` from
    `grammars_TAG.py`, a module outside the package, importable in this process while inside;
    then their modules are forgotten. The billing file."""
    (tmp_path / f"grammars_{tag}.py").write_text(
        f"from sdk.grammar import Grammar\n\nQUERY = Grammar('Query{tag.upper()}', "
        "lark='start: \"x\"\\n')\n"
    )
    shop = tmp_path / f"shop_{tag}"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    billing = shop / "billing.py"
    billing.write_text(f"from grammars_{tag} import QUERY\n" + _contract(f"Invoice{tag.upper()}"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield billing
    finally:
        for name in [n for n in sys.modules if n.startswith((f"shop_{tag}", f"grammars_{tag}"))]:
            del sys.modules[name]


class _NoNamespace(types.ModuleType):
    """A module object without a `__dict__`, as an extension's may be."""

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        raise AttributeError("__dict__")


def test_a_grammar_made_outside_the_target_is_looked_for_past_a_blocked_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `sys.modules` may hold `None` (an import blocked on purpose): the look for the module
    # that makes a grammar imported from outside the target passes over it. (Before the fix:
    # TypeError: vars() argument must have __dict__ attribute.)
    monkeypatch.setitem(sys.modules, "blocked_r18", None)  # type: ignore[arg-type]
    # ... and a module object with no namespace (cffi's compiled `Lib` is one, left in
    # `sys.modules` by an earlier test of the suite: AttributeError '__dict__' before).
    monkeypatch.setitem(sys.modules, "no_namespace_r18", _NoNamespace("no_namespace_r18"))
    with _billing_importing_a_grammar(tmp_path, monkeypatch, "r18") as billing:
        outcome = lock(str(billing))
        sources = json.loads(outcome.path.read_text())["sources"]
        assert sources == {"InvoiceR18": "../billing.py", "QueryR18": "../../grammars_r18.py"}


def test_a_module_that_imports_a_grammar_with_a_fallback_is_not_its_maker(tmp_path: Path) -> None:
    # `try: from shop.sql import QUERY` / `except ImportError: QUERY = None` assigns QUERY at
    # module level, but the grammar the module holds is the one it imported: `sql.py` makes it.
    # Before the fix sources[Query] was '../billing.py', so dropping the import from
    # `billing.py` failed its check (contract-missing: Query) with `sql.py` still making it.
    shop = tmp_path / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "sql.py").write_text(
        "from sdk.grammar import Grammar\n\nQUERY = Grammar('Query', lark='start: \"x\"\\n')\n"
    )
    uses = "try:\n    from shop.sql import QUERY\nexcept ImportError:\n    QUERY = None\n"
    (shop / "billing.py").write_text(uses + _contract("Invoice"))
    assert _sdk(tmp_path, "schema", "lock", "shop").returncode == 0
    path = shop / "schemas" / LOCK_FILE
    assert json.loads(path.read_text())["sources"]["Query"] == "../sql.py"
    (shop / "billing.py").write_text(_contract("Invoice"))
    checked = _sdk(tmp_path, "schema", "check", str(shop / "billing.py"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_look_for_a_grammars_maker_loads_no_lazily_imported_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module registered by `importlib.util.LazyLoader` runs on its first attribute read: the
    # look through `sys.modules` for the module that makes a grammar must not read one (it ran
    # the module, and its failure stopped the lock: RuntimeError: lazy_r19 ran, before the fix).
    import importlib.util

    (tmp_path / "lazy_r19.py").write_text("raise RuntimeError('lazy_r19 ran')\n")
    with _billing_importing_a_grammar(tmp_path, monkeypatch, "r19") as billing:
        spec = importlib.util.find_spec("lazy_r19")
        assert spec is not None and spec.loader is not None
        spec.loader = importlib.util.LazyLoader(spec.loader)
        lazy = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "lazy_r19", lazy)
        spec.loader.exec_module(lazy)
        outcome = lock(str(billing))
        sources = json.loads(outcome.path.read_text())["sources"]
        assert sources == {"InvoiceR19": "../billing.py", "QueryR19": "../../grammars_r19.py"}


def test_a_module_making_many_grammars_is_read_once_per_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The module that makes each grammar is found from its source: one lock reads a file once,
    # not once per grammar it makes (before the fix: 40 parses of grammars.py for 40 grammars,
    # so a lock's time grew with grammars times file size).
    import ast

    shop = tmp_path / "shop_many_r19"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    made = "".join(f"G{i} = Grammar('ManyR19{i}', lark='start: \"x\"\\n')\n" for i in range(40))
    (shop / "grammars.py").write_text("from sdk.grammar import Grammar\n\n" + made)
    (shop / "billing.py").write_text("from shop_many_r19.grammars import G0\n" + _contract("B19"))
    monkeypatch.syspath_prepend(str(tmp_path))
    parsed: list[str] = []
    real = ast.parse

    def counted(source: object, filename: str = "<unknown>", *args: object, **kw: object) -> object:
        parsed.append(str(filename))
        return real(source, filename, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(ast, "parse", counted)
    try:
        outcome = lock(str(shop))
        sources = json.loads(outcome.path.read_text())["sources"]
        assert sources["ManyR1939"] == "../grammars.py"
        assert sources["ManyR190"] == "../grammars.py"
        assert parsed.count(str(shop / "grammars.py")) == 1, parsed
    finally:
        for name in [n for n in sys.modules if n.startswith("shop_many_r19")]:
            del sys.modules[name]
