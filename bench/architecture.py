"""The package's shape in numbers, and what `import sdk` costs (bench row 28).

    .venv/bin/python bench/architecture.py            # the numbers, read from sdk/ as it is now
    .venv/bin/python bench/run.py --only import       # row 28: the import's cost and these numbers

Every number is read from the source (`ast`, nothing of it run) but the modules `import sdk`
loads, which a fresh interpreter reports:

- duplicate pairs: pairs of places in `sdk/` (two files, or two places in one) that share a run
  of `DUPLICATE_LINES` or more lines, the same to the letter once white space is folded (blank
  lines, comments, docstrings, imports, `__all__` and lone brackets are passed over; a run
  found in more than `COMMON_PLACES` places is boilerplate, not a duplicate);
- functions over `LONG_FUNCTION` lines (from `def` to the last line), and functions taking
  `MANY_PARAMETERS` or more parameters (`self` and `cls` not counted);
- root modules: the modules at the package's root (`sdk/*.py` but `__init__.py`);
- import circles: pairs of modules that reach each other through imports (inside functions and
  `TYPE_CHECKING` blocks too; a package's `__init__` re-exports are left out, as in
  tests/test_structure.py);
- arrows back up: imports between the package's parts (a sub-package or a root module each)
  that close a loop between parts: part A imports part B while B, through any parts, imports A
  (an import through a sub-package's face is an arrow to that sub-package; the package's own
  face, `sdk/__init__.py`, sits above everything and is left out).
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path[:0] = [p for p in (str(Path(__file__).resolve().parent),) if p not in sys.path]

from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402
from units import millis  # noqa: E402
from units import ratio  # noqa: E402
from units import verdict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SDK = ROOT / "sdk"

DUPLICATE_LINES = 6
COMMON_PLACES = 8
LONG_FUNCTION = 60
MANY_PARAMETERS = 7

__all__ = ["Shape", "loaded_by", "measure", "shape_of"]


@dataclass(frozen=True)
class Shape:
    """The numbers, each with the places it counts (to look at, not to print)."""

    duplicates: list[tuple[str, str]]
    long_functions: list[tuple[str, int]]
    many_parameters: list[tuple[str, int]]
    root_modules: list[str]
    circles: list[tuple[str, str]]
    arrows_back_up: list[tuple[str, str]]


# --- Reading the tree ---


def _modules(package: Path) -> dict[str, Path]:
    """Every module of `package` by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(tree: ast.AST, top: str) -> set[str]:
    """Every module of the package `top` a tree imports, at any depth."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == top:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == top)
    return found


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function by qualified name (`Class.method`, `outer.inner`)."""

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, Any]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child
                yield from visit(child, f"{prefix}{child.name}.")

    yield from visit(tree, "")


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    arguments = function.args
    named = [*arguments.posonlyargs, *arguments.args]
    if named and named[0].arg in ("self", "cls"):
        named = named[1:]
    starred = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return len(named) + len(arguments.kwonlyargs) + len(starred)


# --- Duplicates ---


def _significant_lines(tree: ast.AST, text: str) -> list[tuple[int, str]]:
    """(line number, folded text) of the lines a duplicate is made of."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skipped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))  # docstrings
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            skipped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        folded = " ".join(line.split())
        if number in skipped or not folded or folded.startswith("#"):
            continue
        if all(char in "()[]{},:" for char in folded):
            continue
        lines.append((number, folded))
    return lines


def _duplicate_pairs(files: dict[str, tuple[ast.AST, str]]) -> list[tuple[str, str]]:
    """Pairs of places sharing a run of `DUPLICATE_LINES` lines, one row per pair of files."""
    places: dict[bytes, list[tuple[str, int]]] = defaultdict(list)
    for name, (tree, text) in files.items():
        lines = _significant_lines(tree, text)
        for start in range(len(lines) - DUPLICATE_LINES + 1):
            window = "\n".join(folded for _, folded in lines[start : start + DUPLICATE_LINES])
            places[hashlib.blake2b(window.encode(), digest_size=16).digest()].append(
                (name, lines[start][0])
            )
    pairs: set[tuple[str, str]] = set()
    for found in places.values():
        if not 2 <= len(found) <= COMMON_PLACES:
            continue
        for index, (first, first_line) in enumerate(found):
            for second, second_line in found[index + 1 :]:
                if first != second or abs(first_line - second_line) >= DUPLICATE_LINES:
                    pairs.add((min(first, second), max(first, second)))
    return sorted(pairs)


# --- The import graph ---


def _graph(
    modules: dict[str, Path], trees: dict[str, ast.AST], top: str, *, packages: bool = False
) -> dict[str, set[str]]:
    """Who imports whom; with `packages`, the sub-packages' faces too (their re-exports and
    what is imported through them), else modules only (a face sits above its modules)."""
    left_out = {top} | {
        name for name, path in modules.items() if path.name == "__init__.py" and not packages
    }
    return {
        name: {m for m in _imported(trees[name], top) if m in modules and m not in left_out}
        - {name}
        for name in modules
        if name not in left_out
    }


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    pending, seen = [start], {start}
    while pending:
        for step in graph.get(pending.pop(), ()):
            if step == goal:
                return True
            if step not in seen:
                seen.add(step)
                pending.append(step)
    return False


def _loops(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every arrow a -> b of `graph` that closes a loop (b reaches a)."""
    return sorted((a, b) for a, steps in graph.items() for b in steps if _reaches(graph, b, a))


def _between_parts(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the package's parts: a module's part is its sub-package (the first
    two names of `a.b.c`), or itself at the root (`a.b`)."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    parts: dict[str, set[str]] = defaultdict(set)
    for module, steps in graph.items():
        parts[part(module)].update(part(step) for step in steps if part(step) != part(module))
    return dict(parts)


# --- The numbers ---


def shape_of(package: Path = SDK) -> Shape:
    """The numbers of `package` (the SDK's by default), read from its source."""
    modules = _modules(package)
    texts = {name: path.read_text(encoding="utf-8") for name, path in modules.items()}
    trees = {name: ast.parse(text) for name, text in texts.items()}
    functions = [
        (f"{name}:{qualified}", function)
        for name, tree in trees.items()
        for qualified, function in _functions(tree)
    ]
    lengths = [(n, (f.end_lineno or f.lineno) - f.lineno + 1) for n, f in functions]
    counts = [(n, _parameters(f)) for n, f in functions]
    graph = _graph(modules, trees, package.name)
    return Shape(
        duplicates=_duplicate_pairs({n: (trees[n], texts[n]) for n in modules}),
        long_functions=sorted((n, k) for n, k in lengths if k > LONG_FUNCTION),
        many_parameters=sorted((n, k) for n, k in counts if k >= MANY_PARAMETERS),
        root_modules=sorted(
            n for n, p in modules.items() if p.parent == package and p.name != "__init__.py"
        ),
        circles=[(a, b) for a, b in _loops(graph) if a < b],
        arrows_back_up=_loops(_between_parts(_graph(modules, trees, package.name, packages=True))),
    )


def loaded_by(code: str) -> list[str]:
    """The SDK's modules a fresh interpreter has loaded after running `code`."""
    report = "import sys; print(' '.join(m for m in sys.modules if m.split('.')[0] == 'sdk'))"
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"],
        capture_output=True, text=True, check=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    return sorted(done.stdout.split())


def measure() -> list[tuple[str, int, str]]:
    """(what, how many, which) for each number, in the order the bench prints them."""
    shape = shape_of()

    def named(items: Iterable[object]) -> str:
        return ", ".join(str(item) for item in items)

    loaded = loaded_by("import sdk")
    return [
        ("duplicate pairs in sdk/", len(shape.duplicates), named(shape.duplicates)),
        (f"functions over {LONG_FUNCTION} lines", len(shape.long_functions),
         named(shape.long_functions)),
        (f"functions taking {MANY_PARAMETERS} or more parameters", len(shape.many_parameters),
         named(shape.many_parameters)),
        ("modules at the package's root", len(shape.root_modules), named(shape.root_modules)),
        ("modules of sdk loaded by `import sdk`", len(loaded), named(loaded)),
        ("import circles", len(shape.circles), named(shape.circles)),
        ("arrows back up (loops between the package's parts)", len(shape.arrows_back_up),
         named(shape.arrows_back_up)),
    ]  # fmt: skip


# --- Row 28: the import ---

BASELINE_IMPORT = "import pydantic, httpx"
CALLING_PROGRAM = (
    "from sdk import StructuredClient, Contract, parse; from sdk.providers import AnthropicProvider"
)
IMPORT_RUNS = 5


def import_seconds(code: str) -> float:
    """CPU seconds a fresh interpreter spends running `code` (its imports), startup excluded."""
    timed = (
        "import time\n_started = time.process_time()\n"
        f"{code}\n"
        "print(time.process_time() - _started)"
    )
    done = subprocess.run(
        [sys.executable, "-c", timed],
        capture_output=True, text=True, check=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    return float(done.stdout.split()[-1])


def best_imports(codes: list[str], runs: int) -> list[float]:
    """The least CPU seconds of `runs` fresh processes for each of `codes`, the order of the
    processes alternated (ABC, CBA, ...) so that a drift of the machine weighs on all alike."""
    best = [float("inf")] * len(codes)
    for run in range(runs):
        order = range(len(codes)) if run % 2 == 0 else reversed(range(len(codes)))
        for index in order:
            best[index] = min(best[index], import_seconds(codes[index]))
    return best


@row("import", number="28", title="the import and the package's shape",
     measures="`import sdk` in a fresh interpreter over `import pydantic, httpx` (the "
              "libraries it is built on), and the package's shape in numbers read from its "
              "source (bench/architecture.py)",
     unit="ratio of CPU times (least of 5 fresh processes each, alternated); counts")  # fmt: skip
def import_row(settings: Settings) -> Measured:
    runs = 2 if settings.quick else IMPORT_RUNS
    ours, program, base = best_imports(["import sdk", CALLING_PROGRAM, BASELINE_IMPORT], runs)
    loaded = loaded_by("import sdk")
    lines = [
        Line("`import sdk` / `import pydantic, httpx`", ratio(ours, base),
             f"{millis(ours)} vs {millis(base)}; it loads {len(loaded)} modules of sdk "
             f"({', '.join(loaded)})", "<= 1.5x", verdict(ours / base, 1.5),
             key="import-sdk"),
        Line(f"  a calling program's imports (`{CALLING_PROGRAM}`) / `import pydantic, httpx`",
             ratio(program, base), f"{millis(program)} vs {millis(base)}; "
             f"{len(loaded_by(CALLING_PROGRAM))} modules of sdk"),
    ]  # fmt: skip
    goals = {"functions over": 5, "functions taking": 8, "import circles": 0, "arrows back": 0}
    for what, count, _ in measure():
        goal = next((g for prefix, g in goals.items() if what.startswith(prefix)), None)
        lines.append(
            Line(f"  {what}", f"{count}", "", "" if goal is None else f"<= {goal}",
                 "" if goal is None else verdict(count, goal))
        )  # fmt: skip
    return Measured(lines, notes=_import_notes())


def _import_notes() -> str:
    return f"""\
- The import is timed inside a fresh interpreter (CPU time from before the first line of the
  import to after the last), so the interpreter's own start is left out of both arms; each
  figure is the least of {IMPORT_RUNS} processes.
- `import sdk` loads the package's face and its loader: every public name is loaded on first
  use from the module that defines it. The second line is what a program that makes calls
  pays when it names the client, `Contract`, `parse` and a provider: the engine, the parser
  and their libraries, that provider's module (not its vendor SDK, loaded when a provider is
  made), and no other provider, tooling, grammar machinery or SQLite store.
- The counts are read from `sdk/` by `bench/architecture.py` (run it with `-v` for the places
  each one counts; its docstring defines them). Duplicate pairs count runs of
  {DUPLICATE_LINES} lines the same to the letter; arrows back up are imports that close a loop
  between the package's parts (a sub-package or a root module each).
"""


if __name__ == "__main__":
    verbose = "-v" in sys.argv[1:]
    for what, count, which in measure():
        print(f"{count:>4}  {what}")
        if verbose and which:
            print(f"      {which}")
