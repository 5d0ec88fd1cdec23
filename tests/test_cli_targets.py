"""`sdk schema ...` takes a module name, a package folder or a `.py` file, from any folder.

Each command runs as a user runs it: the installed `sdk` script in a subprocess, from a working
directory that is not the package's parent, with paths absolute and relative. A target that
cannot be imported exits 2 with one line saying what was tried and how to fix it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A package whose own code imports itself by its name (as an application's package does):
# imported under any other dotted name (`deep.shop`), that import fails.
PACKAGE = {
    "__init__.py": "from shop.models import Order\n\n__all__ = ['Order']\n",
    "models.py": '''
        from pydantic import Field

        from sdk import Contract, Verbatim


        class Order(Contract):
            """An order read from a confirmation email."""

            number: Verbatim | None = Field(description="The order number, or null.")
            total: float | None = Field(description="The total, or null when not stated.")
    ''',
}
# A single-file module with a lint finding (nowhere to say "not stated").
MODULE = '''
    from pydantic import Field

    from sdk import Contract


    class Price(Contract):
        """A price."""

        amount: float = Field(description="The amount.")
'''


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (folder / name).write_text(textwrap.dedent(source), encoding="utf-8")
    return folder


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/src/deep/shop (the package), tmp/src/tools/price.py, and tmp/elsewhere (the cwd)."""
    _write(tmp_path / "src" / "deep" / "shop", PACKAGE)
    _write(tmp_path / "src" / "tools", {"price.py": MODULE})
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


REPO = Path(__file__).resolve().parent.parent


def _sdk(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("sdk")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR")}
    # The `sdk` under test is this tree's (as an editable install puts it on the path), not the
    # copy the script was installed from.
    env.update(NO_COLOR="1", COLUMNS="200", PYTHONPATH=str(REPO))
    return subprocess.run(
        [str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def test_a_package_by_absolute_and_relative_path_from_another_folder(tree: Path) -> None:
    shop = tree / "src" / "deep" / "shop"
    cwd = tree / "elsewhere"
    locked = _sdk(cwd, "schema", "lock", str(shop))
    assert locked.returncode == 0, locked.stderr
    assert "locked Order v1" in locked.stdout
    lock = json.loads((shop / "schemas" / "schema.lock.json").read_text())
    assert [entry["name"] for entry in lock["contracts"]] == ["Order"]

    relative = os.path.relpath(shop, cwd)
    assert relative.startswith("..")
    checked = _sdk(cwd, "schema", "check", relative)
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout == f"{relative}: 1 contracts and 0 grammars match the lock\n"

    for command in (["lint", str(shop)], ["diff", "--against-lock", relative]):
        done = _sdk(cwd, "schema", *command)
        assert done.returncode == 0, done.stdout + done.stderr
    exported = _sdk(cwd, "schema", "export", relative + "/", "--out", "out")
    assert exported.returncode == 0, exported.stderr
    assert (cwd / "out" / "Order.v1.json").is_file()


def test_the_package_folder_itself_and_a_dotted_name(tree: Path) -> None:
    shop = tree / "src" / "deep" / "shop"
    assert _sdk(tree / "src" / "deep", "schema", "lock", "shop").returncode == 0
    inside = _sdk(shop, "schema", "check", ".")
    assert (inside.returncode, inside.stdout) == (
        0,
        ".: 1 contracts and 0 grammars match the lock\n",
    )
    init = _sdk(tree, "schema", "check", "src/deep/shop/__init__.py")
    assert init.returncode == 0, init.stderr


def test_a_module_file_by_path(tree: Path) -> None:
    done = _sdk(tree / "elsewhere", "schema", "lint", "../src/tools/price.py")
    assert done.returncode == 1, done.stderr  # the module imported, and its finding is reported
    assert "Price /properties/amount: no-abstention" in done.stdout
    assert done.stdout.splitlines()[-1] == "1 finding(s) in 1 contracts, 0 suppressed"


def test_a_contract_by_path_in_diff(tree: Path) -> None:
    cwd = tree / "elsewhere"
    assert _sdk(cwd, "schema", "lock", "../src/deep/shop").returncode == 0
    snapshot = tree / "src" / "deep" / "shop" / "schemas" / "Order.v1.json"
    done = _sdk(cwd, "schema", "diff", str(snapshot), "../src/deep/shop:Order")
    assert done.returncode == 0, done.stderr
    assert "  identical" in done.stdout.splitlines()


def test_a_missing_path_says_where_it_looked(tree: Path) -> None:
    done = _sdk(tree / "elsewhere", "schema", "check", "some/dir/shop")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: cannot import some/dir/shop: there is no file or folder "
        f"{tree / 'elsewhere' / 'some/dir/shop'}; give a package folder, a .py file, or a "
        "dotted module name\n"
    )


def test_an_unknown_module_name_says_what_was_tried_and_how_to_fix_it(tree: Path) -> None:
    cwd = tree / "elsewhere"
    done = _sdk(cwd, "schema", "lint", "shop")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1  # one line
    assert "error: cannot import shop: No module named 'shop'" in done.stderr
    assert f"looked in the current folder, {cwd}, and the installed packages" in done.stderr
    assert "give the package folder or .py file by its path (e.g. path/to/shop)" in done.stderr


def test_a_package_imported_under_another_name_points_at_its_path(tree: Path) -> None:
    # From src/, `deep.shop` imports (a namespace package), but its own `from shop.models ...`
    # cannot: the message names the fix, the path.
    done = _sdk(tree / "src", "schema", "check", "deep.shop")
    assert done.returncode == 2
    assert "cannot import deep.shop: ModuleNotFoundError: No module named 'shop'" in done.stderr
    assert "give the package by its path (deep/shop)" in done.stderr
    assert _sdk(tree / "src", "schema", "lock", "deep/shop").returncode == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("my-contracts", "'my-contracts' (in {path}) is not a valid module name"),
        ("notes.txt", "{path} is not a Python file"),
        ("json", "a module of that name is already imported from"),
        # A project folder, no package (on main: "rename it", the wrong advice for a checkout).
        (
            "invoice-tool/",
            "{path} is a folder but not a package, and 'invoice-tool' is no module name: give "
            "the package folder or .py file that holds the contracts",
        ),
    ],
)
def test_a_path_that_cannot_be_a_module_says_why(tmp_path: Path, name: str, expected: str) -> None:
    path = tmp_path / name.rstrip("/")
    if name.endswith(".txt"):
        path.write_text("not Python\n")
    elif name.endswith("/"):
        _write(path, {"models.py": MODULE})
    else:
        _write(path, {"__init__.py": ""})
    done = _sdk(tmp_path, "schema", "check", f"./{name}")
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: cannot import ./{name}")
    assert expected.format(path=path) in done.stderr


BILLING = """
    from pydantic import Field

    from sdk import Contract


    class Invoice(Contract):
        \"\"\"An invoice.\"\"\"

        total: float | None = Field(description="The total, or null when not stated.")
"""


@pytest.mark.parametrize("module", ["../src/deep/shop/models.py", "shop.models"])
def test_a_module_of_a_package_locks_and_checks_its_own_contracts(tree: Path, module: str) -> None:
    # The package's lock (shop/schemas/) holds every module's contracts. Locking or checking
    # one module with it pins and compares that module's contracts and leaves the others:
    # on main, `lock shop/models.py` dropped Invoice (billing.py) from the package's lock,
    # and `check` called it missing and said to run that lock.
    shop = tree / "src" / "deep" / "shop"
    _write(shop, {"billing.py": BILLING})
    cwd = tree / "elsewhere" if module.endswith(".py") else tree / "src" / "deep"
    assert _sdk(cwd, "schema", "lock", str(shop)).returncode == 0
    lock_file = shop / "schemas" / "schema.lock.json"
    locked = lock_file.read_bytes()

    checked = _sdk(cwd, "schema", "check", module)
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout == f"{module}: 1 contracts and 0 grammars match the lock\n"
    again = _sdk(cwd, "schema", "lock", module)
    assert again.returncode == 0, again.stderr
    assert "dropped" not in again.stdout.replace("0 dropped", "")
    assert lock_file.read_bytes() == locked

    # A change in the module is pinned beside the other module's entry, which stays.
    models = shop / "models.py"
    models.write_text(
        models.read_text().replace(
            "    total: float",
            '    schema_version = 2\n\n    currency: str | None = Field(description="ISO code.")\n'
            "    total: float",
        )
    )
    bumped = _sdk(cwd, "schema", "lock", module)
    assert bumped.returncode == 0, bumped.stderr
    assert "locked Order v2" in bumped.stdout
    entries = {(e["name"], e["version"]) for e in json.loads(lock_file.read_text())["contracts"]}
    assert entries == {("Invoice", 1), ("Order", 1), ("Order", 2)}
    whole = _sdk(cwd, "schema", "check", str(shop) if module.endswith(".py") else "shop")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    # The package's folder named with --dir is the same lock: nothing dropped either (on the
    # previous commit it dropped Invoice v1).
    for command in ("lock", "check"):
        named = _sdk(cwd, "schema", command, module, "--dir", str(shop / "schemas"))
        assert named.returncode == 0, named.stdout + named.stderr
        assert "dropped" not in named.stdout.replace("0 dropped", "")
    assert {e["name"] for e in json.loads(lock_file.read_text())["contracts"]} == {
        "Invoice", "Order"
    }  # fmt: skip

    # Locking the package still drops what no module defines any more.
    (shop / "billing.py").unlink()
    dropped = _sdk(cwd, "schema", "lock", str(shop))
    assert "dropped Invoice v1: no longer defined" in dropped.stdout


def test_diff_reads_two_versions_of_one_package_each_from_where_it_was_named(
    tree: Path,
) -> None:
    # A release's checkout (release/shop) against the working tree's shop: one package name,
    # two versions. On main the second was the first again, read from sys.modules: "identical",
    # exit 0 under --fail-on-breaking; or, both by path, "rename the package" (exit 2).
    shop = tree / "src" / "deep" / "shop"
    _write(tree / "release" / "shop", PACKAGE)
    models = shop / "models.py"
    models.write_text(models.read_text().replace("total: float | None", "total: str | None"))
    cwd = tree / "src" / "deep"
    for old, new in [
        ("../../release/shop:Order", "shop:Order"),
        (str(tree / "release" / "shop"), "shop"),
        ("../../release/shop/models.py:Order", str(shop) + ":Order"),
    ]:
        old = old if old.endswith(":Order") else f"{old}:Order"
        new = new if new.endswith(":Order") else f"{new}:Order"
        done = _sdk(cwd, "schema", "diff", old, new, "--fail-on-breaking")
        assert (done.returncode, done.stderr) == (1, ""), (old, new, done.stdout)
        assert "  type-changed /properties/total: type number -> string" in done.stdout
        back = _sdk(cwd, "schema", "diff", new, old)
        assert back.returncode == 0, back.stderr
        assert "type string -> number" in back.stdout


def test_imported_apart_leaves_a_module_it_did_not_import_and_the_path_as_they_were() -> None:
    import json as stdlib_json

    from sdk.workflow.versioning import imported_apart

    path = list(sys.path)
    for _ in range(2):
        with imported_apart("json") as module:
            assert module is stdlib_json
    assert sys.modules["json"] is stdlib_json
    assert sys.path == path


def test_the_command_a_finding_names_runs_as_shown_for_a_path_with_spaces(tmp_path: Path) -> None:
    # On main: "run `sdk schema lock my app/shop`", which a shell splits into two arguments.
    shop = _write(tmp_path / "my app" / "shop", PACKAGE)
    checked = _sdk(tmp_path, "schema", "check", "my app/shop")
    assert checked.returncode == 1
    command = checked.stdout.split("run `", 1)[1].split("`", 1)[0]
    assert command == "sdk schema lock 'my app/shop'"
    # Run as shown, by the shell, with this environment's `sdk` first on PATH.
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    ran = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert (shop / "schemas" / "schema.lock.json").is_file()
    assert _sdk(tmp_path, "schema", "check", "my app/shop").returncode == 0


def test_a_script_whose_name_is_no_module_name_is_loaded_from_its_file(tree: Path) -> None:
    # `extract-invoices.py`: no import statement can name it, but its path can (on main: exit 2,
    # "'extract-invoices' ... is not a valid module name; rename it").
    scripts = _write(tree / "scripts", {"extract-invoices.py": MODULE})
    cwd = tree / "elsewhere"
    linted = _sdk(cwd, "schema", "lint", "../scripts/extract-invoices.py")
    assert linted.returncode == 1, linted.stderr  # imported: its finding is reported
    assert "Price /properties/amount: no-abstention" in linted.stdout
    assert _sdk(cwd, "schema", "lock", str(scripts / "extract-invoices.py")).returncode == 0
    assert (scripts / "schemas" / "Price.v1.json").is_file()
    checked = _sdk(cwd, "schema", "check", "../scripts/extract-invoices.py")
    assert (checked.returncode, checked.stderr) == (0, "")
    broken = _write(tree / "scripts", {"broken-one.py": "import no_such_module_here\n"})
    failed = _sdk(cwd, "schema", "lint", str(broken / "broken-one.py"))
    assert failed.returncode == 2
    assert "broken-one.py:1: cannot import broken-one: ModuleNotFoundError" in failed.stderr


def test_a_package_in_a_folder_that_is_no_module_name_is_the_top_package(tree: Path) -> None:
    # A checkout named `my-app` holding an `__init__.py`: nothing can import `shop` through it,
    # so `shop` is imported as the top package (on main: "'my-app' ... is not a valid module
    # name", exit 2).
    app = tree / "my-app"
    _write(app, {"__init__.py": ""})
    _write(app / "shop", PACKAGE)
    cwd = tree / "elsewhere"
    locked = _sdk(cwd, "schema", "lock", "../my-app/shop")
    assert locked.returncode == 0, locked.stderr
    assert "locked Order v1" in locked.stdout
    checked = _sdk(cwd, "schema", "check", str(app / "shop"))
    assert (checked.returncode, checked.stderr) == (0, "")


def test_diff_given_a_package_or_module_without_a_contract_says_how_to_name_one(
    tree: Path,
) -> None:
    # On main: "[Errno 21] Is a directory: '../src/deep/shop'", and for the module
    # "models.py: not valid JSON (Expecting value ...)".
    cwd = tree / "elsewhere"
    for given, kind in [
        ("../src/deep/shop", "a folder"),
        ("../src/deep/shop/models.py", "a module"),
    ]:
        done = _sdk(cwd, "schema", "diff", given, "../src/deep/shop:Order")
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            f"error: {given} is {kind}, not a schema: name one contract in it as MODULE:NAME "
            f"({given}:Order), or give a snapshot file (.json)\n"
        )


def test_imported_apart_never_forgets_a_module_of_the_sdk() -> None:
    # In a fresh interpreter: a module of the SDK imported inside the block stays imported (a
    # second copy of it would make its classes two).
    script = textwrap.dedent(
        """
        import sys
        from sdk.workflow.versioning import imported_apart

        assert "sdk.cli.providers" not in sys.modules
        with imported_apart("sdk.cli.providers") as module:
            pass
        assert sys.modules["sdk.cli.providers"] is module
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
