"""Contracts under version control: discover, export snapshots, lock, check.

The workflow this module serves (and `sdk schema ...` runs):

1. `lock(target)` writes one snapshot per contract (`NAME.vVERSION.json`) and a lock file listing
   name, version, fingerprint and snapshot of each. Entries of older versions stay, so the lock is
   the history of every schema that ever produced stored values.
2. `check(target)` compares the code with the lock and reports, per contract: changed without a
   version bump (naming each change), a locked contract that disappeared, a version not locked
   yet, a version older than the lock's, a snapshot that no longer matches its entry. For a
   grammar the changes are those of its language (`sdk.workflow.grammar_diff`).
3. After a deliberate change: bump `schema_version`, review `diff`, run `lock` again.

Prompt templates (`sdk.Prompt` subclasses) are locked there too: their snapshot is
`NAME.vVERSION.prompt.json` (the templates and the inputs' schema), their fingerprint
`Prompt.fingerprint()`, and a changed template needs a `version` bump; `check` shows the text
diff. Grammar contracts (`sdk.Grammar` instances at module level) are locked beside the
contracts, in the same lock file: their snapshot is the grammar text itself
(`NAME.vVERSION.lark` or `.gbnf`), their fingerprint `Grammar.fingerprint()`, and a changed
grammar needs a `version=` bump.

By default a package keeps its lock and snapshots in a `schemas/` folder beside its
`__init__.py` (`contracts/schemas/schema.lock.json`); every function takes `directory=` to put
them elsewhere.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import itertools
import json
import os
import pkgutil
import shlex
import sys
import traceback
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pydantic
from jsonschema.exceptions import best_match

from sdk._files import held_lock
from sdk._files import read_regular
from sdk._files import read_regular_text
from sdk._files import write_atomic
from sdk._values.pointer import pointer_of
from sdk._values.position import decoding_problem
from sdk._values.records import shorten
from sdk.contract import Contract
from sdk.grammar import Grammar
from sdk.grammar._grammar import GRAMMAR_SUFFIXES
from sdk.grammar._grammar import grammar_fingerprint
from sdk.prompt import Prompt
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import canonical_schema
from sdk.schema.canonical import schema_info
from sdk.workflow.diff import SchemaDiff
from sdk.workflow.diff import diff_schemas
from sdk.workflow.grammar_diff import diff_grammars
from sdk.workflow.prompt_diff import PROMPT_SUFFIX
from sdk.workflow.prompt_diff import diff_prompts
from sdk.workflow.prompt_diff import load_prompt_snapshot
from sdk.workflow.prompt_diff import prompt_snapshot_bytes
from sdk.workflow.prompt_diff import prompt_snapshot_name
from sdk.workflow.prompt_diff import snapshot_info
from sdk.workflow.snapshot import info_of
from sdk.workflow.snapshot import load_snapshot
from sdk.workflow.snapshot import snapshot_bytes
from sdk.workflow.snapshot import snapshot_name

__all__ = [
    "LOCK_FILE",
    "LOCK_WAIT_SECONDS",
    "SNAPSHOT_DIR",
    "CheckCode",
    "CheckFinding",
    "ContractImportError",
    "Lock",
    "LockConflict",
    "LockEntry",
    "LockOutcome",
    "SnapshotJudgment",
    "SnapshotState",
    "check",
    "contract_named",
    "default_directory",
    "discover",
    "discover_grammars",
    "discover_prompts",
    "display_path",
    "export",
    "import_target",
    "imported_apart",
    "judge_snapshot",
    "lock",
    "locked_grammar",
    "locked_prompt",
]

SNAPSHOT_DIR = "schemas"
LOCK_FILE = "schema.lock.json"
LOCK_WAIT_SECONDS = 30.0
"""How long `lock` waits for another run locking the same folder before it gives up."""
_LOCK_FORMAT = 1


# --- discovery -------------------------------------------------------------------------------


def import_target(target: str) -> ModuleType:
    """Import what a command names: a module or package by dotted name (`contracts`,
    `myapp.models`), or a package folder or `.py` file by its path, absolute or relative to the
    current directory (`contracts/`, `../app/contracts`, `/srv/app/models.py`, `.`).

    A dotted name is looked up with the current directory first on `sys.path`, as with
    `python -m`, so the copy of a package in the working tree wins over an installed one. A path
    is imported under its full dotted name: the folder above its top package (the first parent
    without an `__init__.py`) goes first on `sys.path`, so the package's own absolute imports
    work from anywhere; a script of no package whose name is no module name
    (`extract-invoices.py`) is loaded from its file. What cannot be imported is a
    `ContractImportError` saying what was tried and how to fix it.
    """
    if not target.strip():  # (`Path("")` is the current folder; `import_module("")` fails)
        raise ContractImportError(
            f"{target!r} names nothing: give a module or package (contracts, myapp.models), or "
            "a package folder or .py file (contracts/, ./models.py)"
        )
    root: Path | None = None
    script: Path | None = None
    if _is_path(target):
        root, name, script = _module_of_path(target)
        _put_first_on_path(root)
    else:
        name = target
        cwd = str(Path.cwd())
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
    top = name.partition(".")[0]
    fresh = top not in sys.modules
    module = _import(name, target) if script is None else _import_script(name, script)
    if root is not None:
        _check_location(module, root, target)
    if fresh:
        _TARGETS.add(top)
    return module


_TARGETS: set[str] = set()
"""The top-level names of the packages `import_target` was first to import: the ones
`imported_apart` may set aside (never one the process held before, such as the standard
library's or the CLI's own dependencies)."""


@contextmanager
def imported_apart(target: str) -> Iterator[ModuleType]:
    """`import_target(target)`, imported on its own: a package of the same top-level name that
    an earlier target imported is set aside meanwhile and put back after, with `sys.path` as it
    was, and the modules imported here are forgotten. So two versions of one package (a
    release's checkout and the working tree) are each read from where they were named, as
    `sdk schema diff OLD NEW` needs; use the module inside the block only.
    """
    name = _module_of_path(target)[1] if _is_path(target) else target
    top = name.partition(".")[0]

    def under(module_name: str) -> bool:
        # Never the SDK's own modules: a second copy of one would make its classes two.
        own = top == __name__.partition(".")[0]
        return not own and (module_name == top or module_name.startswith(top + "."))

    aside = {n: m for n, m in sys.modules.items() if under(n)} if top in _TARGETS else {}
    for module_name in aside:
        del sys.modules[module_name]
    before = set(sys.modules)
    path = list(sys.path)
    try:
        yield import_target(target)
    finally:
        sys.path[:] = path
        for module_name in [n for n in sys.modules if under(n) and n not in before]:
            del sys.modules[module_name]
        sys.modules.update(aside)
        importlib.invalidate_caches()


def _is_path(target: str) -> bool:
    """Whether a target names a file or folder rather than a dotted module name."""
    return "/" in target or os.sep in target or target.endswith(".py") or target in (".", "..", "~")


def _module_of_path(given: str) -> tuple[Path, str, Path | None]:
    """The `sys.path` folder and dotted name a package folder or `.py` file is imported by, and
    the file itself where it is loaded from its location: a script outside any package whose
    name is no module name (`extract-invoices.py`), which no `import` statement could name.

    The climb to the top package stops below a folder whose name is no module name (a
    checkout called `my-app` holding an `__init__.py`): nothing could import the package
    through it, so the package is the top.
    """
    path = Path(given).expanduser()
    if not path.exists():
        raise ContractImportError(
            f"cannot import {given}: there is no file or folder {path.absolute()}; give a "
            "package folder, a .py file, or a dotted module name",
            name=given,
        )
    path = path.resolve()
    if path.is_file() and path.name == "__init__.py":
        path = path.parent
    if path.is_file() and path.suffix != ".py":
        raise ContractImportError(
            f"cannot import {given}: {path} is not a Python file; give a package folder, a .py "
            "file, or a dotted module name",
            name=given,
        )
    parts = [path.stem if path.is_file() else path.name]
    root = path.parent
    while (root / "__init__.py").is_file() and root.parent != root and root.name.isidentifier():
        parts.insert(0, root.name)
        root = root.parent
    if path.is_file() and len(parts) == 1:  # a module of no package
        return root, path.stem, None if path.stem.isidentifier() else path
    bad = [part for part in parts if not part.isidentifier()]
    if bad and path.is_dir() and not (path / "__init__.py").is_file():
        raise ContractImportError(
            f"cannot import {given}: {path} is a folder but not a package, and {bad[0]!r} is no "
            "module name: give the package folder or .py file that holds the contracts",
            name=given,
        )
    if bad:
        raise ContractImportError(
            f"cannot import {given}: {bad[0]!r} (in {path}) is not a valid module name; rename "
            "it with letters, digits and _ only",
            name=given,
        )
    return root, ".".join(parts), None


def _import_script(name: str, file: Path) -> ModuleType:
    """A script whose file name is no module name, loaded from its file under that name (in
    `sys.modules` while it runs, as an import does, so its classes can find their module)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded  # `_check_location` tells whether it is this file
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        raise ContractImportError(f"cannot import {file}: no loader for it", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        del sys.modules[name]
        raise _import_failure(name, error) from error
    return module


def _put_first_on_path(folder: Path) -> None:
    entry = str(folder)
    if entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)
    importlib.invalidate_caches()


def _check_location(module: ModuleType, root: Path, target: str) -> None:
    """The module imported is the one at the path given, not one already imported by its name
    from elsewhere (the standard library's, an installed package's)."""
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), None)
    if where is None or Path(where).resolve().is_relative_to(root):
        return
    raise ContractImportError(
        f"cannot import {target} as {module.__name__}: a module of that name is already "
        f"imported from {where}; rename the package or the file",
        name=module.__name__,
    )


class ContractImportError(ImportError):
    """A contracts module could not be imported: one line says where it raised, or what was
    tried and how to fix it."""


def _import(name: str, target: str | None = None) -> ModuleType:
    """Import a module; anything it raises becomes a `ContractImportError` naming file and line,
    and a module that is not there one saying what was tried (`target`: what the user gave)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing and (name == missing or name.startswith(missing + ".")):
            raise _not_found(name, target or name, error) from error
        failure = _import_failure(name, error)
        if missing.partition(".")[0] in name.split(".")[1:]:
            # `some.dir.pkg` whose own code imports `pkg.models`: imported under the wrong name.
            failure = ContractImportError(
                f"{failure}; if {missing.partition('.')[0]} is this package's own name, give "
                f"the package by its path ({name.replace('.', '/')}) so it is imported by it",
                name=name,
            )
        raise failure from error
    except (Exception, SystemExit) as error:
        raise _import_failure(name, error) from error


def _not_found(name: str, target: str, error: ModuleNotFoundError) -> ContractImportError:
    """The target itself is not importable: where it was looked for, and how to name it."""
    folder = Path(name.replace(".", "/"))
    if "." in name and (folder.is_dir() or folder.with_suffix(".py").is_file()):
        hint = f"{folder} is a folder here, not a package: give it by its path"
    else:
        hint = (
            f"run the command from the folder that holds {name.partition('.')[0]}, or give "
            f"the package folder or .py file by its path (e.g. path/to/{folder})"
        )
    return ContractImportError(
        f"cannot import {target}: {error} (looked in the current folder, {Path.cwd()}, and "
        f"the installed packages); {hint}",
        name=name,
    )


_LIBRARIES = tuple(
    str(Path(module.__file__).resolve().parent) + os.sep
    for module in (sys.modules["sdk"], pydantic)
    if module.__file__
)
"""The folders of the SDK and of Pydantic: an import failure names a line outside them."""


def _library(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_LIBRARIES)


def _import_failure(name: str, error: BaseException) -> ContractImportError:
    if isinstance(error, ContractImportError):
        return error
    where = ""
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{display_path(Path(error.filename))}:{error.lineno}: "
        detail = error.msg
    else:
        frames = traceback.extract_tb(error.__traceback__)
        # The innermost frame that is not the import machinery: the line that raised; past the
        # SDK and Pydantic when the package's own line led there (a class the SDK refused when
        # it was defined names the class statement, not the SDK's check).
        mine = [f for f in frames if "importlib" not in f.filename]
        mine = [f for f in mine if not _library(f.filename)] or mine
        if mine:
            where = f"{display_path(Path(mine[-1].filename))}:{mine[-1].lineno}: "
        detail = str(error)
    detail = shorten(" ".join(detail.split()), 300)
    if isinstance(error, SystemExit):
        # A script without a main guard: it would have ended the command with its own exit
        # code and no word (0: a check that "passed").
        code = "" if error.code is None else f": {shorten(str(error.code), 100)}"
        return ContractImportError(
            f"{where}cannot import {name}: it exits when imported (SystemExit{code}), as a "
            'script without an `if __name__ == "__main__":` guard does; guard it, or give the '
            ".py files or the package that hold the contracts instead of its folder",
            name=name,
        )
    return ContractImportError(
        f"{where}cannot import {name}: {type(error).__name__}: {detail}", name=name
    )


def discover(target: str | ModuleType) -> list[type[Contract]]:
    """Every `Contract` subclass defined in a module, or in a package and all its submodules.

    Only classes defined there count (re-exports are found once, where they are defined) and
    names starting with `_` are skipped, so a private base class stays out of the lock.
    Sorted by name. Two contracts with the same name are an error: they would share snapshots.
    """
    module = import_target(target) if isinstance(target, str) else target
    modules = [module, *_submodules(module)]
    prefix = module.__name__
    found: dict[str, type[Contract]] = {}
    for mod in modules:
        for value in vars(mod).values():
            if not (isinstance(value, type) and issubclass(value, Contract)):
                continue
            if value is Contract or value.__name__.startswith("_"):
                continue
            if value.__module__ != prefix and not value.__module__.startswith(prefix + "."):
                continue
            other = found.get(value.__name__)
            if other is not None and other is not value:
                raise ValueError(
                    f"two contracts are named {value.__name__} ({other.__module__} and "
                    f"{value.__module__}): snapshots are named by contract, rename one"
                )
            found[value.__name__] = value
    return [found[name] for name in sorted(found)]


def discover_grammars(target: str | ModuleType) -> list[Grammar]:
    """Every `Grammar` bound to a public module-level name in a module or package, by name.

    A grammar re-exported under several names is found once; two different grammars with one
    name are an error, as for contracts.
    """
    module = import_target(target) if isinstance(target, str) else target
    found: dict[str, Grammar] = {}
    for mod in [module, *_submodules(module)]:
        for attribute, value in vars(mod).items():
            if not isinstance(value, Grammar) or attribute.startswith("_"):
                continue
            other = found.get(value.name)
            if other is not None and other is not value and other.info() != value.info():
                raise ValueError(
                    f"two grammars are named {value.name} (in {mod.__name__}): snapshots are "
                    "named by grammar, rename one"
                )
            found.setdefault(value.name, value)
    return [found[name] for name in sorted(found)]


def discover_prompts(target: str | ModuleType) -> list[type[Prompt]]:
    """Every `Prompt` subclass with a template defined in a module or package, by name (a
    base without a template, or a name starting with `_`, is left out)."""
    module = import_target(target) if isinstance(target, str) else target
    prefix = module.__name__
    found: dict[str, type[Prompt]] = {}
    for mod in [module, *_submodules(module)]:
        for value in vars(mod).values():
            if not (isinstance(value, type) and issubclass(value, Prompt)):
                continue
            if not hasattr(value, "_info") or value.__name__.startswith("_"):
                continue
            if value.__module__ != prefix and not value.__module__.startswith(prefix + "."):
                continue
            other = found.get(value.name)
            if other is not None and other is not value:
                raise ValueError(
                    f"two prompts are named {value.name} ({other.__module__} and "
                    f"{value.__module__}): snapshots are named by prompt, rename one"
                )
            found[value.name] = value
    return [found[name] for name in sorted(found)]


def grammar_snapshot_name(grammar: Grammar) -> str:
    """The snapshot file of a grammar: its text as written, `SelectQuery.v1.lark`."""
    return f"{grammar.name}.v{grammar.version}{GRAMMAR_SUFFIXES[grammar.syntax]}"


def _discover_all(
    target: str | ModuleType,
) -> tuple[list[type[Contract]], list[Grammar], list[type[Prompt]]]:
    contracts, grammars = discover(target), discover_grammars(target)
    prompts = discover_prompts(target)
    names = [c.__name__ for c in contracts] + [g.name for g in grammars] + [p.name for p in prompts]
    shared = sorted({name for name in names if names.count(name) > 1})
    if shared:
        raise ValueError(
            f"two of the contracts, grammars and prompts share the name {shared[0]}: they "
            "would share a lock entry, rename one"
        )
    return contracts, grammars, prompts


def _submodules(module: ModuleType) -> Iterator[ModuleType]:
    path = getattr(module, "__path__", None)
    if path is None:
        return

    def failed(name: str) -> None:
        # Called inside walk_packages' `except`: without this, a subpackage raising ImportError
        # would be skipped silently, and its contracts with it.
        raise _import_failure(name, sys.exc_info()[1] or ImportError(name))

    try:
        for info in pkgutil.walk_packages(path, prefix=module.__name__ + ".", onerror=failed):
            if info.name.rpartition(".")[2] == "__main__":
                continue  # the script `python -m PACKAGE` runs: importing a package never does
            yield _import(info.name)
    except ContractImportError:
        raise
    except (Exception, SystemExit) as error:  # walk_packages imports subpackages itself
        raise _import_failure(module.__name__, error) from error


def _in_package_lock(module: ModuleType, directory: Path | None) -> bool:
    """Whether a module is one module of a package, or one loose `.py` file of a folder
    (rather than the package or the folder), whose lock is the shared one: its default folder
    (`schemas/` beside it), given or not. Loose files of one folder share its `schemas/` as a
    package's modules share the package's, so locking one must leave the others' entries."""
    if hasattr(module, "__path__") or getattr(module, "__file__", None) is None:
        return False
    return directory is None or directory.resolve() == default_directory(module).resolve()


def default_directory(target: str | ModuleType) -> Path:
    """Where a target keeps its lock and snapshots: `schemas/` beside its code."""
    module = import_target(target) if isinstance(target, str) else target
    if module.__file__ is not None:
        return Path(module.__file__).parent / SNAPSHOT_DIR
    folders = list(getattr(module, "__path__", []))
    if len(folders) != 1:  # a namespace package over several folders, or none
        raise ValueError(f"{module.__name__} has no one folder to keep schemas beside: use --dir")
    return Path(folders[0]) / SNAPSHOT_DIR


def display_path(path: Path) -> str:
    """A path as a user would type it: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- snapshots -------------------------------------------------------------------------------


def export(contracts: Iterable[type[Contract]], out: Path) -> list[Path]:
    """Write each contract's canonical schema to `out/NAME.vVERSION.json`; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for contract in contracts:
        info = schema_info(contract)
        path = out / snapshot_name(info.name, info.version)
        _write_if_changed(path, snapshot_bytes(canonical_schema(contract)))
        paths.append(path)
    return paths


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Leave an identical file alone, so its modification time means something; else replace
    it atomically (a write cut short leaves the previous file intact). True if written."""
    if path.exists() and read_regular(path) == data:
        return False
    write_atomic(path, data)
    return True


# --- the lock file ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class LockEntry:
    """One contract at one version: what its schema was when it was locked."""

    name: str
    version: int
    fingerprint: str
    snapshot: str
    """File name of the snapshot, relative to the lock file's folder."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "fingerprint": self.fingerprint,
            "snapshot": self.snapshot,
        }


@dataclass
class Lock:
    """The lock file: every locked (name, version), older versions included."""

    entries: list[LockEntry] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    """Per locked name, the file that defines it, relative to the lock file's folder
    (`../billing.py`), as the last `lock` found it: how a lock or a check of that one file
    knows a contract was removed from it (a lock shared by a folder's loose files, or by a
    package's modules). A name missing here (a lock written before they were recorded) is
    noticed by a lock or check of the whole folder or package only."""

    @classmethod
    def read(cls, path: Path) -> Lock:
        """Read a lock file; a missing one is an empty lock.

        A file that is not a lock of this format (bad JSON, a wrong shape, a version that is
        not a positive integer, a snapshot outside the lock's folder, one version twice) is a
        `ValueError` naming the file and the first problem, never a crash later on.
        """
        if not path.exists():
            return cls()
        where = display_path(path)
        try:
            data = json.loads(read_regular(path))
        except ValueError as error:
            problem = decoding_problem(error)
            raise ValueError(f"{where}: not a schema lock file: not JSON ({problem})") from error
        except RecursionError as error:
            raise ValueError(f"{where}: not a schema lock file: nested too deeply") from error
        problem = best_match(_LOCK_VALIDATOR.iter_errors(data))
        if problem is not None:
            at = pointer_of(problem.absolute_path) or "/"
            message = shorten(problem.message, 160)
            raise ValueError(f"{where}: not a schema lock file of format 1: {at}: {message}")
        entries = [
            LockEntry(
                name=item["name"],
                version=int(item["version"]),
                fingerprint=item["fingerprint"],
                snapshot=item["snapshot"],
            )
            for item in data["contracts"]
        ]
        seen: set[tuple[str, int]] = set()
        for entry in entries:
            if (entry.name, entry.version) in seen:
                raise ValueError(f"{where}: {entry.name} v{entry.version} is listed twice")
            seen.add((entry.name, entry.version))
        return cls(sorted(entries), dict(data.get("sources", {})))

    def to_bytes(self) -> bytes:
        """Deterministic bytes: entries sorted by name, then version."""
        data: dict[str, Any] = {
            "lock_format": _LOCK_FORMAT,
            "contracts": [entry.to_json() for entry in sorted(self.entries)],
        }
        if self.sources:
            data["sources"] = dict(sorted(self.sources.items()))
        return (json.dumps(data, indent=2, ensure_ascii=True) + "\n").encode()

    def get(self, name: str, version: int) -> LockEntry | None:
        """The entry of one contract at one version."""
        return next((e for e in self.entries if e.name == name and e.version == version), None)

    def versions(self, name: str) -> list[LockEntry]:
        """Every locked version of a contract, oldest first."""
        return sorted(e for e in self.entries if e.name == name)

    def latest(self, name: str) -> LockEntry | None:
        """The highest locked version of a contract."""
        versions = self.versions(name)
        return versions[-1] if versions else None

    def names(self) -> list[str]:
        """The locked contract names."""
        return sorted({entry.name for entry in self.entries})


# What a lock file of format 1 is: checked before any entry is read.
_LOCK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["lock_format", "contracts"],
    "properties": {
        "lock_format": {"const": _LOCK_FORMAT},
        "contracts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "version", "fingerprint", "snapshot"],
                "properties": {
                    "name": {"type": "string", "pattern": r"^\w+$"},
                    "version": {"type": "integer", "minimum": 1, "maximum": 2**31},
                    "fingerprint": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    # A file name beside the lock: never a path that leaves its folder.
                    "snapshot": {
                        "type": "string",
                        "pattern": r"^\w[\w.-]*\.(json|lark|gbnf)$",
                    },
                },
            },
        },
        # Per name, the file that defines it (compared, never opened: any path of a file).
        "sources": {
            "type": "object",
            "propertyNames": {"pattern": r"^\w+$"},
            "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 4096},
        },
    },
}
_LOCK_VALIDATOR = jsonschema.Draft202012Validator(_LOCK_SCHEMA)


class LockConflict(Exception):
    """`lock` refused: it would overwrite what a locked version was."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class LockOutcome:
    """What `lock` did."""

    path: Path
    added: list[LockEntry]
    replaced: list[LockEntry]
    """Entries re-pinned with `force=True` (their old fingerprints are gone)."""
    dropped: list[LockEntry]
    """Entries of contracts that no longer exist."""
    unchanged: list[LockEntry]
    rewritten: list[LockEntry] = field(default_factory=list)
    """Entries whose hand-edited snapshot was written again from the code (`force=True`)."""
    history: list[LockEntry] = field(default_factory=list)
    """Older versions of current contracts, kept: stored values were written under them."""
    written: list[Path] = field(default_factory=list)
    """The files this run wrote (snapshots and the lock file); identical files are left alone."""
    missing: list[LockEntry] = field(default_factory=list)
    """A lock of one file of a shared lock (a loose file, a package's module): the entries the
    lock records as that file's whose contract it no longer defines. Kept, since such a lock
    drops nothing (the contract may have moved to another file); locking the folder or the
    package drops them, and `check` of the file reports them until then."""


def lock(
    target: str | ModuleType,
    *,
    directory: Path | None = None,
    force: bool = False,
    wait: float = LOCK_WAIT_SECONDS,
) -> LockOutcome:
    """Write the snapshots and the lock file for every contract of `target`.

    Refuses (`LockConflict`, nothing written) to re-pin a version that is already locked with
    another fingerprint, or to lock a version older than the newest locked one: that is the
    mistake `check` exists to catch, and re-pinning would erase the schema stored values were
    written under. It also refuses to overwrite a locked version's snapshot whose content no
    longer hashes to the lock's fingerprint (edited by hand): a locked snapshot is a record.
    `force=True` overrides these, for a version never released. An older version's snapshot
    that is edited or missing is refused even then: the code no longer holds that version, so
    nothing can write it again (restore it from version control). `lock` and `check` judge
    every snapshot alike (`judge_snapshot`): a lock that succeeds leaves nothing for `check`.
    Contracts that no longer exist are dropped from the lock (and reported). A target that is
    one module of a package, locked in the package's own folder (no `directory`, or that one),
    pins its contracts and drops nothing: that lock holds every module's contracts, so only
    locking the package drops what none of them defines; an entry the lock records as the
    module's (`Lock.sources`) that it no longer defines is kept and reported
    (`LockOutcome.missing`). Every file is written atomically.

    Runs on one folder are serialized across processes (the folder's operating-system lock,
    `sdk._files.held_lock`): two `sdk schema lock` runs at once on two loose files of one
    folder (two pre-commit hooks, `make -j`) each add their entries, none lost. A run waits
    `wait` seconds at most for another, then raises `TimeoutError` naming the folder.
    """
    module = import_target(target) if isinstance(target, str) else target
    part = _in_package_lock(module, directory)
    directory = directory or default_directory(module)
    contracts, grammars, prompts = _discover_all(module)
    directory.mkdir(parents=True, exist_ok=True)
    busy = (
        f"cannot lock {display_path(directory)}: another `sdk schema lock` of a module that "
        f"keeps its schemas there has held it for over {wait:g} s; wait for it to end, then "
        "run this again"
    )
    # One lock at a time per folder: loose files of one folder (or a package's modules) share
    # its lock file, and each run reads it, adds its entries and writes it whole.
    sources = _sources(module, directory, contracts, grammars, prompts)
    here = _source_of(module, directory) if part else None
    with held_lock(directory, wait=wait, busy=busy):
        return _lock_in(
            directory, contracts, grammars, prompts, sources, part=part, here=here, force=force
        )


def _lock_in(
    directory: Path,
    contracts: list[type[Contract]],
    grammars: list[Grammar],
    prompts: list[type[Prompt]],
    sources: Mapping[str, str],
    *,
    part: bool,
    here: str | None,
    force: bool,
) -> LockOutcome:
    """`lock`'s read, decision and writes, with the folder's lock held (`here`: a part lock's
    own file, as `Lock.sources` names it)."""
    lock_path = directory / LOCK_FILE
    current = Lock.read(lock_path)
    infos = [schema_info(contract) for contract in contracts]
    infos += [grammar.info() for grammar in grammars]
    infos += [_prompt_schema_info(prompt) for prompt in prompts]
    snapshots = {g.name: grammar_snapshot_name(g) for g in grammars}
    snapshots.update({p.name: prompt_snapshot_name(p) for p in prompts})

    problems, edited = _lock_problems(infos, current, directory)
    unfixable = _unwritable_snapshots(infos, current, directory)
    if unfixable or (problems and not force):
        raise LockConflict(unfixable + problems)

    pinned = _pin(infos, snapshots, sources, current, force=force, drop=not part)
    files = _snapshot_files(directory, list(zip(contracts, infos, strict=False)), grammars, prompts)
    files[lock_path] = pinned.kept.to_bytes()
    written = [path for path, data in files.items() if _write_if_changed(path, data)]
    names = {info.name for info in infos}
    current_versions = {(info.name, info.version) for info in infos}
    history = [
        e
        for e in pinned.kept.entries
        if e.name in names and (e.name, e.version) not in current_versions
    ]
    return LockOutcome(
        lock_path,
        pinned.added,
        pinned.replaced,
        [] if part else [e for e in current.entries if e.name not in names],
        [entry for entry in pinned.unchanged if entry not in edited],
        rewritten=edited,
        history=history,
        written=written,
        missing=_missing_from(current, here, names),
    )


@dataclass(frozen=True, slots=True)
class _Pinned:
    """The lock's entries once the code's versions are pinned, and what became of each."""

    kept: Lock
    """The new lock: every entry, and the files that define them."""
    added: list[LockEntry]
    replaced: list[LockEntry]
    unchanged: list[LockEntry]


def _pin(
    infos: Sequence[SchemaInfo],
    snapshots: Mapping[str, str],
    sources: Mapping[str, str],
    current: Lock,
    *,
    force: bool,
    drop: bool = True,
) -> _Pinned:
    """Pin each of `infos` (its snapshot named by `snapshots`, else by its name and version)
    in the lock `current`; entries of names the code no longer has are dropped (`drop`).
    Each name the code has records the file that defines it now (`sources`: a contract moved
    to another file is that file's); a name dropped, its file."""
    present = {info.name for info in infos}
    kept = [e for e in current.entries if e.name in present or not drop]
    added, replaced, unchanged = [], [], []
    for info in infos:
        snapshot = snapshots.get(info.name) or snapshot_name(info.name, info.version)
        entry = LockEntry(info.name, info.version, info.fingerprint, snapshot)
        previous = current.get(info.name, info.version)
        if previous is None:
            added.append(entry)
        elif previous == entry:
            unchanged.append(entry)
        else:
            replaced.append(entry)
        if force:  # drop any entry newer than the code, and the one being re-pinned
            kept = [e for e in kept if e.name != info.name or e.version < info.version]
        kept = [e for e in kept if (e.name, e.version) != (info.name, info.version)]
        kept.append(entry)
    names = {entry.name for entry in kept}
    files = {name: file for name, file in current.sources.items() if name in names}
    files.update({name: file for name, file in sources.items() if name in present})
    return _Pinned(Lock(sorted(kept), files), added, replaced, unchanged)


def _sources(
    module: ModuleType,
    directory: Path,
    contracts: Sequence[type[Contract]],
    grammars: Sequence[Grammar],
    prompts: Sequence[type[Prompt]],
) -> dict[str, str]:
    """The file that defines each contract, grammar and prompt, by its lock name, relative to
    the lock's folder (`Lock.sources`): a class's module's file; a grammar's, the module that
    makes it (`_making_module`)."""
    found: dict[str, str] = {}
    for contract in contracts:
        where = _source_of(sys.modules.get(contract.__module__), directory)
        if where is not None:
            found[schema_info(contract).name] = where
    for prompt in prompts:
        where = _source_of(sys.modules.get(prompt.__module__), directory)
        if where is not None:
            found[prompt.name] = where
    if grammars:
        modules = [module, *_submodules(module)]
        assigned: dict[str, frozenset[str]] = {}  # (each file read once a lock)
        for grammar in grammars:
            where = _source_of(_making_module(grammar, module, modules, assigned), directory)
            if where is not None:
                found[grammar.name] = where
    return found


def _making_module(
    grammar: Grammar,
    module: ModuleType,
    modules: Sequence[ModuleType],
    assigned: dict[str, frozenset[str]],
) -> ModuleType | None:
    """The module that makes `grammar` (a grammar, unlike a class, does not say): the first
    module of the target, else of those imported, whose own code assigns it to a name
    (`CODE = Grammar(...)`), not one that imports it from there (`from shop.sql import CODE`:
    a module that uses it, a package's `__init__` that re-exports it), which may be walked
    first, or be the one module locked. Where no source says, the first module of the target
    that binds it, its package's `__init__` last. `assigned` keeps each file's
    `_assigned_names` for the lock (a file making many grammars is read once)."""
    bindings = [m for m in modules if any(v is grammar for v in _namespace(m).values())]
    # The others are looked through only when no module of the target makes it (`sys.modules`
    # may hold `None`, an import blocked, or an object that is no module).
    others = (
        m
        for m in list(sys.modules.values())
        if isinstance(m, ModuleType) and all(m is not b for b in bindings)
    )
    for candidate in itertools.chain(bindings, others):
        names = {name for name, value in _namespace(candidate).items() if value is grammar}
        if not names:
            continue
        file = _namespace(candidate).get("__file__")
        if not isinstance(file, str):
            continue
        if file not in assigned:
            assigned[file] = _assigned_names(file)
        if names & assigned[file]:
            return candidate
    return next((m for m in bindings if m is not module), module if bindings else None)


def _namespace(module: ModuleType) -> dict[str, Any]:
    """A module's own namespace, read without its attribute hooks: a module registered by
    `importlib.util.LazyLoader` runs its code on its first attribute read (`vars()` too); a
    module object of an extension may have none (cffi's compiled `Lib` in `sys.modules`)."""
    try:
        namespace = object.__getattribute__(module, "__dict__")
    except AttributeError:
        return {}
    return namespace if isinstance(namespace, dict) else {}


def _assigned_names(file: object) -> frozenset[str]:
    """The module-level names a Python file's own statements assign (`NAME = ...`,
    `NAME: T = ...`, also under an `if` or a `try`; not in a function or a class), not those
    its imports bind, nor one an import binds as well (`try: from shop.sql import CODE`,
    `except ImportError: CODE = None`: what it holds was imported); none where it cannot be
    read or parsed."""
    if not isinstance(file, str) or not file.endswith(".py"):
        return frozenset()
    try:
        tree = ast.parse(Path(file).read_bytes(), filename=file)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    names: set[str] = set()
    imported: set[str] = set()
    nodes: list[ast.AST] = [tree]
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue  # (their names are their own)
        if isinstance(node, ast.Import | ast.ImportFrom):
            imported.update((a.asname or a.name).partition(".")[0] for a in node.names)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign | ast.NamedExpr):
            targets = [node.target]
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        nodes.extend(ast.iter_child_nodes(node))
    return frozenset(names - imported)


def _source_of(module: ModuleType | None, directory: Path) -> str | None:
    """A module's file relative to the lock's folder, with `/` (`None`: no file)."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return None
    try:
        return Path(os.path.relpath(Path(file).resolve(), directory.resolve())).as_posix()
    except ValueError:  # another drive (Windows): no relative path
        return Path(file).resolve().as_posix()


def _missing_from(current: Lock, here: str | None, present: set[str]) -> list[LockEntry]:
    """The entries of every name the lock records as defined in the file `here`
    (`Lock.sources`) that the file no longer defines (`here` is `None`: none)."""
    if here is None:
        return []
    gone = {
        name
        for name in current.names()
        if name not in present and current.sources.get(name) == here
    }
    return [entry for entry in current.entries if entry.name in gone]


def _snapshot_files(
    directory: Path,
    contracts: Sequence[tuple[type[Contract], SchemaInfo]],
    grammars: Sequence[Grammar],
    prompts: Sequence[type[Prompt]],
) -> dict[Path, bytes]:
    """Each snapshot's path in `directory` and its content: a contract's canonical schema, a
    grammar's definition, a prompt's template."""
    files: dict[Path, bytes] = {}
    for contract, info in contracts:
        files[directory / snapshot_name(info.name, info.version)] = snapshot_bytes(
            canonical_schema(contract)
        )
    for grammar in grammars:
        files[directory / grammar_snapshot_name(grammar)] = grammar.definition.encode("utf-8")
    for prompt in prompts:
        files[directory / prompt_snapshot_name(prompt)] = prompt_snapshot_bytes(prompt)
    return files


def _lock_problems(
    infos: Sequence[SchemaInfo], current: Lock, directory: Path
) -> tuple[list[str], list[LockEntry]]:
    """What `lock` refuses without `force` (a re-pin, a version older than the locked one, an
    edited snapshot), and the entries whose snapshot was edited."""
    problems = []
    for info in infos:
        entry = current.get(info.name, info.version)
        if entry is not None and entry.fingerprint != info.fingerprint:
            problems.append(
                f"{info.name} v{info.version} is locked with another fingerprint: bump "
                "schema_version instead of re-locking it (forcing re-pins it: only for a "
                "version never released)"
            )
        newest = current.latest(info.name)
        if newest is not None and newest.version > info.version:
            problems.append(f"{info.name} is at v{info.version} but v{newest.version} is locked")
    edited = [
        entry
        for info in infos
        if (entry := current.get(info.name, info.version)) is not None
        and entry.fingerprint == info.fingerprint
        and judge_snapshot(entry, directory).state is SnapshotState.EDITED
    ]
    for entry in edited:
        problems.append(
            f"{entry.name} v{entry.version}: snapshot {display_path(directory / entry.snapshot)} "
            f"was edited: it no longer hashes to the locked {entry.fingerprint[:12]}; restore it "
            "from version control, or pass --force to write it again from the code"
        )
    return problems, edited


def _unwritable_snapshots(infos: Sequence[SchemaInfo], current: Lock, directory: Path) -> list[str]:
    """What `lock` refuses even with `force`: an older locked version's snapshot that is edited
    or missing (the code holds only the newest version, so nothing can write the older one)."""
    newest = {info.name: info.version for info in infos}
    problems = []
    for entry in current.entries:
        if entry.version >= newest.get(entry.name, entry.version):
            continue  # the code's own version (written from it), a newer one, or a dropped one
        judged = judge_snapshot(entry, directory)
        if judged.state is not SnapshotState.MATCHES:
            problems.append(
                f"{entry.name} v{entry.version}: snapshot "
                f"{display_path(directory / entry.snapshot)} {judged.reason}; the code holds "
                f"v{newest[entry.name]} now, so lock cannot write it again: restore it from "
                "version control"
            )
    return problems


class SnapshotState(StrEnum):
    """What a locked version's snapshot is, for `lock` and `check` alike."""

    MATCHES = "matches"
    MISSING = "missing"
    EDITED = "edited"
    """There, but not what the lock's fingerprint says (changed, or unreadable)."""


@dataclass(frozen=True)
class SnapshotJudgment:
    """A snapshot's state, and why, in words for a message."""

    state: SnapshotState
    reason: str


def judge_snapshot(entry: LockEntry, directory: Path) -> SnapshotJudgment:
    """The one judgment of a locked snapshot: it must exist and hash to its entry's fingerprint
    (it is what diffs compare to and what stored values were written under)."""
    path = directory / entry.snapshot
    if not path.exists():
        return SnapshotJudgment(SnapshotState.MISSING, "is missing")
    try:
        fingerprint = _snapshot_fingerprint(entry, path)
    except (ValueError, OSError) as error:  # not a schema, not UTF-8, not a readable file
        return SnapshotJudgment(SnapshotState.EDITED, f"does not match the lock ({error})")
    if fingerprint != entry.fingerprint:
        said = f"it hashes to {fingerprint[:12]}, the lock says {entry.fingerprint[:12]}"
        return SnapshotJudgment(SnapshotState.EDITED, f"does not match the lock ({said})")
    return SnapshotJudgment(SnapshotState.MATCHES, "matches the lock")


# --- check -----------------------------------------------------------------------------------


class CheckCode(StrEnum):
    """What `check` can find wrong."""

    NO_LOCK = "no-lock"
    CHANGED_WITHOUT_BUMP = "changed-without-bump"
    CONTRACT_MISSING = "contract-missing"
    NOT_LOCKED = "not-locked"
    VERSION_BEHIND_LOCK = "version-behind-lock"
    SNAPSHOT_MISMATCH = "snapshot-mismatch"


@dataclass(frozen=True)
class CheckFinding:
    """One reason the code and the lock disagree, about one contract."""

    code: CheckCode
    contract: str
    message: str
    diff: SchemaDiff | None = None
    """The changes, where there is a snapshot to compare with."""

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code.value,
            "contract": self.contract,
            "message": self.message,
            "changes": [c.to_json() for c in self.diff.changes] if self.diff else [],
        }


def check(target: str | ModuleType, *, directory: Path | None = None) -> list[CheckFinding]:
    """Compare the contracts of `target` with its lock; an empty list means they agree.

    A target that is one module of a package (or one loose file of a folder), checked against
    the shared lock (no `directory`, or that folder), is compared for its own contracts, and
    for those the lock records as its own (`Lock.sources`) that it no longer defines: the
    other entries are its sibling modules' (checking the package reports one that no module
    defines any more, whatever the lock records).
    """
    module = import_target(target) if isinstance(target, str) else target
    if directory is not None and Path(directory).exists() and not Path(directory).is_dir():
        raise ValueError(f"{directory} is not a folder (the lock's folder is asked for)")
    part = _in_package_lock(module, directory)
    directory = directory or default_directory(module)
    lock_path = directory / LOCK_FILE
    # Quoted as a shell word: the commands the findings name run as shown (a path with spaces).
    label = shlex.quote(target) if isinstance(target, str) else target.__name__
    if not lock_path.exists():
        return [
            CheckFinding(
                CheckCode.NO_LOCK,
                "",
                f"no lock file at {display_path(lock_path)}: run `sdk schema lock {label}` "
                "and commit it",
            )
        ]
    current = Lock.read(lock_path)
    contracts, grammars, prompts = _discover_all(module)
    findings: list[CheckFinding] = []
    for contract in contracts:
        findings.extend(_check_contract(contract, current, directory, label))
    for grammar in grammars:
        findings.extend(_check_grammar(grammar, current, directory, label))
    for prompt in prompts:
        findings.extend(_check_prompt(prompt, current, directory, label))
    present = {contract.__name__ for contract in contracts} | {g.name for g in grammars}
    present |= {prompt.name for prompt in prompts}
    for name in current.names():
        if name not in present and not part:
            versions = ", ".join(f"v{e.version}" for e in current.versions(name))
            findings.append(
                CheckFinding(
                    CheckCode.CONTRACT_MISSING,
                    name,
                    f"{name} is locked ({versions}) but no longer defined in {label}: stored "
                    f"values of it cannot be read; if the removal is deliberate, run "
                    f"`sdk schema lock {label}`",
                )
            )
    here = _source_of(module, directory) if part else None
    missing = _missing_from(current, here, present)
    if missing:
        whole = shlex.quote(display_path(Path(str(module.__file__)).parent))
        for name in sorted({entry.name for entry in missing}):
            versions = ", ".join(f"v{e.version}" for e in current.versions(name))
            findings.append(
                CheckFinding(
                    CheckCode.CONTRACT_MISSING,
                    name,
                    f"{name} is locked ({versions}) as defined in {label}, which no longer "
                    "defines it: stored values of it cannot be read; if it moved, run `sdk "
                    "schema lock` on the file that defines it now; if the removal is "
                    f"deliberate, run `sdk schema lock {whole}` (the folder whose lock it is)",
                )
            )
    for entry in current.entries:
        if entry.name in present or not part or entry in missing:
            findings.extend(_check_snapshot(entry, directory))
    return findings


def _check_contract(
    contract: type[Contract], current: Lock, directory: Path, label: str
) -> Iterator[CheckFinding]:
    info = schema_info(contract)
    entry, newest, settled = _against_lock(info, current, "")
    if settled is not None:
        yield from settled
    elif entry is not None:
        yield CheckFinding(
            CheckCode.CHANGED_WITHOUT_BUMP,
            info.name,
            f"{info.name} v{info.version} changed without a version bump (fingerprint "
            f"{info.fingerprint[:12]}, locked {entry.fingerprint[:12]}): bump "
            f"{info.name}.schema_version to {_next_version(current, info)}, add a "
            f"migrate_from step if stored values need one, then run `sdk schema lock {label}`",
            _diff_with_snapshot(entry, contract, directory),
        )
    elif newest is not None:
        yield CheckFinding(
            CheckCode.NOT_LOCKED,
            info.name,
            f"{info.name} v{info.version} is not locked (locked: v{newest.version}): review "
            f"`sdk schema diff --against-lock {label}`, then run `sdk schema lock {label}`",
            _diff_with_snapshot(newest, contract, directory),
        )
    else:
        yield CheckFinding(
            CheckCode.NOT_LOCKED,
            info.name,
            f"{info.name} v{info.version} is a new contract, not locked yet: run "
            f"`sdk schema lock {label}`",
        )


def _against_lock(
    info: SchemaInfo, current: Lock, kind: str
) -> tuple[LockEntry | None, LockEntry | None, list[CheckFinding] | None]:
    """The lock's entry for this version, its newest entry of the name, and what the lock alone
    settles: the finding when the code is behind the lock (a version lower than one locked:
    versions only go up), no finding when this version is locked unchanged; `None` when the
    caller has more to say (a changed or an unlocked version)."""
    entry = current.get(info.name, info.version)
    newest = current.latest(info.name)
    if newest is not None and newest.version > info.version:
        behind = CheckFinding(
            CheckCode.VERSION_BEHIND_LOCK,
            info.name,
            f"{kind}{info.name} is at v{info.version} but the lock has v{newest.version}: "
            "versions only go up",
        )
        return entry, newest, [behind]
    if entry is not None and entry.fingerprint == info.fingerprint:
        return entry, newest, []
    return entry, newest, None


def _next_version(current: Lock, info: SchemaInfo) -> int:
    newest = current.latest(info.name)
    return max(info.version, newest.version if newest else 0) + 1


def _diff_with_snapshot(
    entry: LockEntry, contract: type[Contract], directory: Path
) -> SchemaDiff | None:
    path = directory / entry.snapshot
    try:
        snapshot = load_snapshot(path) if path.exists() else None
    except ValueError:
        return None  # reported as a snapshot mismatch by `_check_snapshot`
    return None if snapshot is None else diff_schemas(snapshot, canonical_schema(contract))


def _check_snapshot(entry: LockEntry, directory: Path) -> Iterator[CheckFinding]:
    """A snapshot must exist and hash to its entry's fingerprint (`judge_snapshot`)."""
    judged = judge_snapshot(entry, directory)
    if judged.state is SnapshotState.MATCHES:
        return
    advice = (
        "restore it from version control"
        if judged.state is SnapshotState.MISSING
        else "snapshots are written by `sdk schema lock`, never by hand"
    )
    yield CheckFinding(
        CheckCode.SNAPSHOT_MISMATCH,
        entry.name,
        f"{entry.name} v{entry.version}: snapshot {display_path(directory / entry.snapshot)} "
        f"{judged.reason}; {advice}",
    )


# --- grammars ----------------------------------------------------------------------------------

_SYNTAX_OF_SUFFIX = {suffix: syntax for syntax, suffix in GRAMMAR_SUFFIXES.items()}
_SHOWN_DIFF_LINES = 20


def _snapshot_fingerprint(entry: LockEntry, path: Path) -> str:
    """A snapshot's fingerprint: of the schema for a contract, of the text for a grammar, of
    the templates and inputs for a prompt."""
    if path.name.endswith(PROMPT_SUFFIX):
        return snapshot_info(load_prompt_snapshot(path)).fingerprint
    syntax = _SYNTAX_OF_SUFFIX.get(path.suffix)
    if syntax is None:
        return info_of(load_snapshot(path)).fingerprint
    text = read_regular_text(path)
    return grammar_fingerprint(entry.name, entry.version, syntax, text)


def _check_grammar(
    grammar: Grammar, current: Lock, directory: Path, label: str
) -> Iterator[CheckFinding]:
    info = grammar.info()
    entry, newest, settled = _against_lock(info, current, "grammar ")
    if settled is not None:
        yield from settled
    elif entry is not None:
        changes = _text_diff(directory / entry.snapshot, grammar)
        yield CheckFinding(
            CheckCode.CHANGED_WITHOUT_BUMP,
            info.name,
            f"grammar {info.name} v{info.version} changed without a version bump (fingerprint "
            f"{info.fingerprint[:12]}, locked {entry.fingerprint[:12]}): pass "
            f"version={_next_version(current, info)} to its Grammar, then run "
            f"`sdk schema lock {label}`{changes}",
            diff_grammars(locked_grammar(entry, directory), grammar),
        )
    else:
        locked = f" (locked: v{newest.version})" if newest is not None else " (a new grammar)"
        changes = _text_diff(directory / newest.snapshot, grammar) if newest else ""
        yield CheckFinding(
            CheckCode.NOT_LOCKED,
            info.name,
            f"grammar {info.name} v{info.version} is not locked{locked}: review it, then run "
            f"`sdk schema lock {label}`{changes}",
            diff_grammars(locked_grammar(newest, directory), grammar) if newest else None,
        )


def locked_grammar(entry: LockEntry, directory: Path) -> Grammar | None:
    """The grammar a lock entry's snapshot holds, or None when it is missing or unreadable
    (`check` reports that as a snapshot mismatch)."""
    path = directory / entry.snapshot
    syntax = _SYNTAX_OF_SUFFIX.get(path.suffix)
    if syntax is None or not path.exists():
        return None
    try:
        text = path.read_bytes().decode("utf-8")
        if syntax == "gbnf":
            return Grammar(entry.name, gbnf=text, version=entry.version)
        return Grammar(entry.name, lark=text, version=entry.version)
    except (UnicodeDecodeError, ValueError):
        return None


def _text_diff(snapshot: Path, grammar: Grammar) -> str:
    """The first lines of a unified diff from the snapshot to the grammar, for a message."""
    if not snapshot.exists():
        return ""
    old = snapshot.read_bytes().decode("utf-8", "replace").splitlines()
    lines = list(
        difflib.unified_diff(
            old, grammar.definition.splitlines(), "locked", "code", n=0, lineterm=""
        )
    )
    shown = lines[:_SHOWN_DIFF_LINES]
    if len(lines) > _SHOWN_DIFF_LINES:
        shown.append(f"... {len(lines) - _SHOWN_DIFF_LINES} more diff lines")
    return "".join("\n    " + line for line in shown)


def contract_named(reference: str) -> type[Contract]:
    """The contract `MODULE:NAME` names (a `ValueError` saying why not)."""
    module_name, _, name = reference.partition(":")
    if not module_name or not name:
        raise ValueError(f"--contract takes MODULE:NAME (contracts:Decision), not {reference!r}")
    value = getattr(import_target(module_name), name, None)
    if not (isinstance(value, type) and issubclass(value, Contract)):
        raise ValueError(f"{reference} is not a Contract")
    return value


# --- prompts -----------------------------------------------------------------------------------


def _prompt_schema_info(prompt: type[Prompt]) -> SchemaInfo:
    info = prompt.info()
    return SchemaInfo(name=info.name, version=info.version, fingerprint=info.fingerprint)


def locked_prompt(entry: LockEntry, directory: Path) -> dict[str, Any] | None:
    """The prompt snapshot a lock entry names, or None when it is missing or unreadable
    (`check` reports that as a snapshot mismatch)."""
    path = directory / entry.snapshot
    if not path.name.endswith(PROMPT_SUFFIX) or not path.exists():
        return None
    try:
        return load_prompt_snapshot(path)
    except ValueError:
        return None


def _check_prompt(
    prompt: type[Prompt], current: Lock, directory: Path, label: str
) -> Iterator[CheckFinding]:
    info = _prompt_schema_info(prompt)
    entry, newest, settled = _against_lock(info, current, "prompt ")
    if settled is not None:
        yield from settled
        return
    compared = entry or newest
    locked = locked_prompt(compared, directory) if compared is not None else None
    lines = diff_prompts(locked, prompt).lines if locked is not None else []
    shown = lines[:_SHOWN_DIFF_LINES]
    if len(lines) > _SHOWN_DIFF_LINES:
        shown.append(f"... {len(lines) - _SHOWN_DIFF_LINES} more diff lines")
    changes = "".join("\n    " + line for line in shown)
    if entry is not None:
        yield CheckFinding(
            CheckCode.CHANGED_WITHOUT_BUMP,
            info.name,
            f"prompt {info.name} v{info.version} changed without a version bump (fingerprint "
            f"{info.fingerprint[:12]}, locked {entry.fingerprint[:12]}): set version = "
            f"{_next_version(current, info)} in {prompt.__name__}, then run "
            f"`sdk schema lock {label}`{changes}",
        )
        return
    was = f" (locked: v{newest.version})" if newest is not None else " (a new prompt)"
    yield CheckFinding(
        CheckCode.NOT_LOCKED,
        info.name,
        f"prompt {info.name} v{info.version} is not locked{was}: review it, then run "
        f"`sdk schema lock {label}`{changes}",
    )
