"""Two threads of a fresh process made to meet inside Python's imports in one chosen order.

An import race happens when one thread holds a module's import lock (it is executing the module)
while another holds a lock the first will need. Left to the scheduler, the order that shows it
comes now and then; here the thread named `"holder"` is paused once it holds the import lock of
module `hold` (just before the module is made: a finder on `sys.meta_path` gives it a
loader that waits) until the thread named `"asker"` waits inside an import of module `until`
(read from its stack); then both run on. Every wait is bounded (20 s for all of them); the
child prints what each thread ended with, or `hung` for a thread still running then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PROGRAM = """
import importlib.machinery, importlib.util, os, sys, threading, time

HOLD, UNTIL, BOUND, SOURCE_READER = {hold!r}, {until!r}, 20.0, {source_reader!r}


def waiting_in_import(thread, name):
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load" and frame.f_locals.get("name") == name:
            return True
        frame = frame.f_back
    return False


class Pause:
    # Finds HOLD for the holder with a loader that waits before executing it (a finder itself
    # runs under Python's global import lock, which every import takes).

    def find_spec(self, name, path=None, target=None):
        if name != HOLD or threading.current_thread().name != "holder" or held.is_set():
            return None  # the holder pauses once
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        spec.loader = Paused(spec.loader)
        return spec


class Paused:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        # Before the module is in sys.modules: another thread importing it, or a submodule of
        # it, waits for its import lock (once it is there, a submodule's import does not).
        held.set()
        end = time.monotonic() + BOUND
        while time.monotonic() < end and not waiting_in_import(asker, UNTIL):
            time.sleep(0.005)
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)


class SourceReader:
    # The streaming reader from its source, as an install from a wheel runs it (a compiled
    # build is loaded by hand, outside the import locks).
    def find_spec(self, name, path=None, target=None):
        if name != "sdk.parsing.incremental" or not path:
            return None
        source = os.path.join(list(path)[0], "incremental.py")
        return importlib.util.spec_from_file_location(name, source)


held = threading.Event()
sys.meta_path.insert(0, Pause())
if SOURCE_READER:
    sys.meta_path.insert(0, SourceReader())
ended = {{}}


def run(name, work):
    try:
        work()
        ended[name] = "ok"
    except BaseException as error:
        ended[name] = f"{{type(error).__name__}}: {{error}}"


def holder_work():
{holder}


def asker_work():
    held.wait(BOUND)
{asker}


holder = threading.Thread(target=run, args=("holder", holder_work), name="holder", daemon=True)
asker = threading.Thread(target=run, args=("asker", asker_work), name="asker", daemon=True)
holder.start()
asker.start()
end = time.monotonic() + BOUND
for thread in (holder, asker):
    thread.join(max(0.0, end - time.monotonic()))
print("holder", ended.get("holder", "hung"))
print("asker", ended.get("asker", "hung"))
sys.stdout.flush()
os._exit(0)
"""


def race(
    *,
    holder: str,
    asker: str,
    hold: str,
    until: str,
    pythonpath: str = "",
    source_reader: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `holder` (code) in a thread paused once it holds module `hold`'s import lock, and
    `asker` (code) in another, until the asker waits in an import of `until`; in a fresh
    process (`pythonpath` before the repository; `source_reader`: the streaming reader from
    its source even where a compiled build is current)."""
    program = _PROGRAM.format(
        hold=hold,
        until=until,
        source_reader=source_reader,
        holder=textwrap.indent(textwrap.dedent(holder).strip(), "    "),
        asker=textwrap.indent(textwrap.dedent(asker).strip(), "    "),
    )
    path = os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": path}, cwd=ROOT, check=False,
    )  # fmt: skip
