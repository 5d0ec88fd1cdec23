"""The package's lazy face (issue 34 item 5) under threads: names are loaded on first use, and
threads that first use them at once each get their name, never an import deadlock error."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.import_race import ROOT
from tests.import_race import race


def test_a_package_and_its_submodule_first_used_from_two_threads_both_load() -> None:
    # `sdk.parse` executes `sdk.parsing`'s `__init__`, which imports `sdk.parsing.incremental`;
    # `sdk.PartialReader` imports `incremental` first and then waits for its parent. Python's
    # import locks detect the cycle and raise `_DeadlockError` in one thread: on main
    # `sdk.parse` raised it ("holder _DeadlockError: deadlock detected by
    # _ModuleLock('sdk.parsing.incremental')"), a private RuntimeError out of a public name.
    completed = race(
        holder="import sdk; assert callable(sdk.parse)",
        asker="import sdk; assert sdk.PartialReader.__name__ == 'PartialReader'",
        hold="sdk.parsing",
        until="sdk.parsing",
        source_reader=True,
    )
    assert completed.stdout.splitlines() == ["holder ok", "asker ok"], completed.stderr


def test_every_public_name_first_used_by_many_threads_at_once_loads() -> None:
    # Every name of the face, each first used by its own thread behind one barrier, in a
    # fresh process: each thread gets the object its module defines.
    code = """
import importlib, sys, threading
import sdk
module_of = {name: module for module, names in sdk._PUBLIC.items() for name in names}
names = sorted(sdk.__all__)
barrier = threading.Barrier(len(names))
failed = []
def use(name):
    try:
        barrier.wait(timeout=30)
        value = getattr(sdk, name)
        if name in module_of:  # (not `__version__`, kept on the face itself)
            assert value is getattr(importlib.import_module(module_of[name]), name)
    except BaseException as error:
        failed.append(f"{name}: {type(error).__name__}: {error}")
threads = [threading.Thread(target=use, args=(n,), daemon=True) for n in names]
[t.start() for t in threads]
[t.join(timeout=60) for t in threads]
print(len(names), sum(t.is_alive() for t in threads), failed)
"""
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False,
    )  # fmt: skip
    count, alive, failed = completed.stdout.split(" ", 2)
    assert (int(count) > 50, alive, failed.strip()) == (True, "0", "[]"), completed.stderr


def test_every_lazy_package_lists_its_public_names() -> None:
    # `dir()` (a REPL's completion, `help()`) lists a package's names loaded on first use too:
    # on main `dir(sdk.cache)` had no `SQLiteCache` or `RedisCache`, `dir(sdk.schema)` no
    # `widen` (names DESIGN.md gives), as `sdk` and `sdk.providers` already did.
    code = """
import importlib, pkgutil
import sdk
missing = {}
for info in pkgutil.walk_packages(sdk.__path__, "sdk."):
    if not info.ispkg or any(part.startswith("_") for part in info.name.split(".")):
        continue
    module = importlib.import_module(info.name)
    if "__getattr__" in vars(module):
        absent = sorted(set(module.__all__) - set(dir(module)))
        if absent:
            missing[info.name] = absent
print(missing)
"""
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.stdout.strip() == "{}", done.stdout + done.stderr
