"""The package's shape: import arrows point one way, and JSON pointers are handled in one place."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from sdk._values.pointer import escape_pointer
from sdk._values.pointer import lookup
from sdk._values.pointer import pointer_of
from sdk._values.pointer import replace_at
from sdk._values.pointer import resolve_ref
from sdk._values.pointer import split_pointer
from sdk.schema._shape import node_at

SDK = Path(__file__).resolve().parent.parent / "sdk"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SDK.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every `sdk` module `path` imports, at any level (inside functions and TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sdk"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("sdk"))
    return found


MODULES = {_module_name(path): path for path in SDK.rglob("*.py")}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}
GRAPH = {
    name: {dep for dep in _imports(path) if dep in MODULES and dep not in PACKAGES and dep != name}
    for name, path in MODULES.items()
    if name not in PACKAGES
}


def _reaches(start: str, goal: str) -> bool:
    pending, seen = [start], {start}
    while pending:
        for dep in GRAPH.get(pending.pop(), ()):
            if dep == goal:
                return True
            if dep not in seen:
                seen.add(dep)
                pending.append(dep)
    return False


def test_no_two_modules_import_each_other_even_lazily() -> None:
    # Package `__init__` re-exports are left out: they sit above everything by design.
    circles = sorted(
        f"{module} <-> {dep}"
        for module, deps in GRAPH.items()
        for dep in deps
        if module < dep and _reaches(dep, module)
    )
    assert circles == []


# Packages whose private modules are their own: any other package reaches them through the
# names its face exports (`__all__`), or shares what both use in a module below both (`sdk.ray`
# and `sdk.batch`: the row columns in `sdk._rows`). The batch's own command line is the batch's,
# and the cache's the cache's (`sdk cache clear` opens an `ExistingCache`).
_PRIVATE_TO = {
    "sdk.cache": ("sdk.cli.cache",),
    "sdk.batch": ("sdk.cli.batch",),
    "sdk.ray": (),
}


@pytest.mark.parametrize("package", list(_PRIVATE_TO))
def test_a_package_s_private_modules_are_its_own(package: str) -> None:
    reaching_in = sorted(
        f"{name} -> {dep}"
        for name, path in MODULES.items()
        if name != package and not name.startswith(f"{package}.")
        and name not in _PRIVATE_TO[package]
        for dep in _imports(path)
        if dep.startswith(f"{package}._")
    )  # fmt: skip
    assert reaching_in == []


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("sdk.errors", "sdk._result"),
        ("sdk.errors", "sdk.parsing.parser"),
        ("sdk.schema.canonical", "sdk.contract"),
        ("sdk.workflow._lint_rules", "sdk.workflow.lint"),
    ],
)
def test_the_records_live_below_their_users(low: str, high: str) -> None:
    assert not _reaches(low, high)


def test_pointer_helpers_are_written_once() -> None:
    # Unescaping a reference token is spelled in the leaf module only.
    spelled = sorted(
        name
        for name, path in MODULES.items()
        if '.replace("~1", "/")' in path.read_text() and name != "sdk._values.pointer"
    )
    assert spelled == []


@pytest.mark.parametrize("token", ["01", "-1", "+1", " 1", "1e0"])
def test_an_array_index_is_a_digit_string_without_leading_zero_everywhere(token: str) -> None:
    document = {"items": [{"a": 1}, {"a": 2}]}
    assert lookup(document, f"/items/{token}") == (False, None)
    with pytest.raises(ValueError):
        node_at(document, f"/items/{token}")
    assert lookup(document, "/items/1") == (True, {"a": 2})
    assert node_at(document, "/items/1") == {"a": 2}
    with pytest.raises(LookupError):  # writing through a pointer reads it the same way
        replace_at(document, f"/items/{token}", None)
    assert document == {"items": [{"a": 1}, {"a": 2}]}
    assert replace_at(document, "/items/1", None) == {"a": 2}
    assert document == {"items": [{"a": 1}, None]}


def test_writing_through_a_pointer_is_spelled_once() -> None:
    # A member or an item set by a pointer's last token: in the leaf module only (`replace_at`).
    spelled = sorted(
        name
        for name, path in MODULES.items()
        if re.search(r"\[int\(\w+\) if isinstance\(", path.read_text())
        and name != "sdk._values.pointer"
    )
    assert spelled == []


def test_replace_at_names_what_lookup_names_and_never_the_whole_document() -> None:
    document = {"a": {"b~/c": "x"}, "": [0]}
    assert replace_at(document, "/a/b~0~1c", "y") == "x" and document["a"] == {"b~/c": "y"}
    assert replace_at(document, "//0", 5) == 0 and document[""] == [5]
    for pointer in ("", "/a/missing/deeper", "/a/b~0~1c/0", "//1"):
        with pytest.raises(LookupError):
            replace_at(document, pointer, None)
    assert document == {"a": {"b~/c": "y"}, "": [5]}


def test_pointers_round_trip_through_escaping() -> None:
    path = ["a/b", "c~d", 3, ""]
    pointer = pointer_of(path)
    assert pointer == "/a~1b/c~0d/3/"
    assert split_pointer(pointer) == ["a/b", "c~d", "3", ""]
    assert escape_pointer("~1") == "~01"
    assert split_pointer("/~01") == ["~1"]


def test_resolve_ref_follows_any_local_reference_and_refuses_others() -> None:
    root = {"$defs": {"A B": {"type": "string"}}, "properties": {"x": {"type": "integer"}}}
    assert resolve_ref(root, "#/$defs/A%20B") == ("/$defs/A B", {"type": "string"})
    assert resolve_ref(root, "#/properties/x") == ("/properties/x", {"type": "integer"})
    assert resolve_ref(root, "#") == ("", root)
    for bad in ("other.json#/x", "#/$defs/Missing", "#/$defs/A B/type"):
        with pytest.raises(ValueError):
            resolve_ref(root, bad)


# What a program that makes calls does not need: the tooling, the other providers and the
# converters, the grammar machinery, the SQLite store, and the libraries only they use.
HEAVY = (
    "sdk.workflow", "sdk.batch", "sdk.eval", "sdk.cli", "sdk.cli._demo", "sdk.cli._llama_server",
    "sdk.sql", "sdk.providers.llamacpp", "sdk.providers._llamacpp_prompt", "sdk.providers.vllm",
    "sdk.providers.ollama", "sdk.providers.embedded", "sdk.providers.anthropic",
    "sdk.providers.openai", "sdk.providers.gemini", "sdk.providers._http", "sdk.schema.gbnf",
    "sdk.schema.grounding._gbnf", "sdk.schema.grounding._lark", "sdk.grammar._compiled",
    "sdk.grammar._recognize", "sdk.grammar._earley", "sdk.grammar._lark_to_gbnf",
    "sdk.grammar._gbnf_to_lark", "sdk.grammar.harness", "sdk.cache._sqlite", "sdk.cache._held",
    "sdk._changes", "jsonschema", "jsonschema_rs", "lark", "regex", "sqlite3", "tenacity",
    "asyncio", "anthropic", "openai", "google.genai", "ctypes",
)  # fmt: skip


def _loaded_after(code: str) -> list[str]:
    import subprocess
    import sys

    code += "; import sys; print(' '.join(sys.modules))"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()


def _heavy(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY))]


def test_import_sdk_loads_nothing_but_its_own_face() -> None:
    # Every public name loads on first use: `import sdk` costs next to nothing.
    loaded = _loaded_after("import sdk")
    assert sorted(m for m in loaded if m.startswith("sdk")) == ["sdk", "sdk._lazy"]


def test_submodules_are_reached_from_the_package_as_before() -> None:
    # `import sdk` then `sdk.providers.X`: the submodule loads on first use, as the eager
    # package made it an attribute before; a name that is neither is still an AttributeError.
    loaded = _loaded_after(
        "import sdk\n"
        "assert sdk.providers.ollama.OllamaProvider.__name__ == 'OllamaProvider'\n"
        "assert sdk.errors.InvalidJSON is sdk.InvalidJSON\n"
        "assert sdk.grammar.harness.check_cases is sdk.grammar.check_cases\n"
        "assert not hasattr(sdk, 'no_such_thing') and not hasattr(sdk.grammar, 'no_such_thing')"
    )
    assert "sdk.providers.ollama" in loaded
    assert "sdk.providers.anthropic" not in loaded  # naming one module loads that one only


def test_naming_a_provider_class_loads_its_family_s_module_alone() -> None:
    loaded = _loaded_after(
        "from sdk.providers import AnthropicProvider, OllamaProvider\n"
        "assert AnthropicProvider.__module__ == 'sdk.providers.anthropic'\n"
        "assert OllamaProvider.__module__ == 'sdk.providers.ollama'\n"
        "import sdk.providers\n"
        "assert not hasattr(sdk.providers, 'NoSuchProvider')"  # every module looked in
    )
    assert "sdk.providers.vllm" in loaded  # the failed lookup read every family
    named = _loaded_after("from sdk.providers import AnthropicProvider")
    families = ("openai", "gemini", "llamacpp", "vllm", "ollama", "embedded", "test")
    assert [f for f in families if f"sdk.providers.{f}" in named] == []


def test_a_program_that_makes_calls_loads_no_tooling_provider_or_grammar_machinery() -> None:
    # The offline schema workflow, batch jobs, the eval, the CLI, every provider module, the
    # GBNF and grammar converters, the SQLite store and the validators load on first use: a
    # service that builds a client and parses replies pays for none of them until it does.
    loaded = _loaded_after(
        "from sdk import StructuredClient, AsyncStructuredClient, Contract, Result, parse, "
        "StopReason, TruncatedOutput, Grammar, PartialReader; "
        "from sdk.providers import Provider, Codec, CompletionRequest, Profile"
    )
    assert _heavy(loaded) == []
    assert "sdk.engine.attempts" in loaded  # the engine itself is there


def test_the_package_face_is_lazy_and_complete() -> None:
    # `sdk/__init__` imports nothing at run time but its loader: every public name is in the
    # lazy table and in the `TYPE_CHECKING` block (for type checkers), the same names as
    # `__all__`, each defined where the table says.
    import importlib

    import sdk

    tree = ast.parse((SDK / "__init__.py").read_text())
    runtime = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert {n.module for n in runtime if isinstance(n, ast.ImportFrom)} == {"typing", "sdk._lazy"}
    checking = next(node for node in tree.body if isinstance(node, ast.If))
    typed = {
        (node.module, alias.name)
        for node in checking.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    table = {(module, name) for module, names in sdk._PUBLIC.items() for name in names}
    assert typed == table
    assert {name for _, name in table} == set(sdk.__all__) - {"__version__"}
    for module, name in sorted(table):
        assert getattr(sdk, name) is getattr(importlib.import_module(module), name)


def test_the_client_is_short_and_the_engine_holds_the_logic() -> None:
    assert len((SDK / "client.py").read_text().splitlines()) <= 450


# No function is over 80 lines (the streaming reader's loop was, until it became a step per
# state: bench row 29 measures it).
def _functions(path: Path) -> list[tuple[str, int]]:
    """Every function of `path` by qualified name (`Class.method`), with its length in lines."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                end = child.end_lineno or child.lineno
                found.append((f"{prefix}{child.name}", end - child.lineno + 1))
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), "")
    return found


def test_no_function_is_over_80_lines() -> None:
    long = {
        (path.relative_to(SDK.parent).as_posix(), name): lines
        for path in SDK.rglob("*.py")
        for name, lines in _functions(path)
        if lines > 80
    }
    assert long == {}


# --- The architecture numbers (bench/architecture.py; bench row 28 publishes them) ---


def _architecture() -> Any:
    bench = str(SDK.parent / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import architecture

    return architecture


def test_the_architecture_numbers_hold_no_circle_and_no_arrow_back_up() -> None:
    architecture = _architecture()
    numbers = architecture.measure()
    for what, count, _ in numbers:
        print(f"{count:>4}  {what}")  # shown with `pytest -s`
    counts = {what: count for what, count, _ in numbers}
    assert counts["import circles"] == 0
    assert counts["arrows back up (loops between the package's parts)"] == 0
    assert counts["modules of sdk loaded by `import sdk`"] == 2
    assert counts["modules at the package's root"] == len(
        [p for p in SDK.glob("*.py") if p.name != "__init__.py"]
    )


def test_the_architecture_counters_find_what_they_count(tmp_path: Path) -> None:
    # A package made for the purpose: one of each thing counted, and one of each near miss.
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    for folder in (package, package / "low", package / "high"):
        (folder / "__init__.py").write_text("")
    repeated = "".join(f"    total = total + {i} * weight\n" for i in range(6))
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    (package / "low" / "a.py").write_text(
        "from pkg.high import c\n\n"  # an arrow back up: high imports low too
        f"def first(total, weight):\n{repeated}    return total\n\n"
        f"def long():\n{body}    return x0\n\n"
        "def six(a, b, c, d, e, f):\n    return a\n\n"
        "class K:\n    def seven(self, a, b, c, d, e, f, *rest):\n        return a\n"
    )
    (package / "high" / "b.py").write_text(
        "from pkg.low import d\nfrom pkg.high import c\n\n"
        f"def second(total, weight):\n{repeated}    return total\n"
    )
    (package / "high" / "c.py").write_text("from pkg.high import b\n")  # a circle: b <-> c
    (package / "low" / "d.py").write_text("")
    five = "".join(repeated.splitlines(keepends=True)[:5])  # one line short of a duplicate
    (package / "root.py").write_text(f"def near(total, weight):\n{five}    return 1\n")
    shape = _architecture().shape_of(package)
    assert shape.duplicates == [("pkg.high.b", "pkg.low.a")]
    assert [name for name, _ in shape.long_functions] == ["pkg.low.a:long"]
    assert shape.many_parameters == [("pkg.low.a:K.seven", 7)]
    assert shape.root_modules == ["pkg.root"]
    assert shape.circles == [("pkg.high.b", "pkg.high.c")]
    assert shape.arrows_back_up == [("pkg.high", "pkg.low"), ("pkg.low", "pkg.high")]


def test_a_call_left_early_is_ended_in_one_place() -> None:
    # `Attempts.abandoned_if_left()` ends a call its caller left (sync and async, whole and
    # streamed loops alike): no loop calls `on_abandon` by hand.
    calling = sorted(
        name
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "on_abandon"
    )
    assert calling == ["sdk.engine.attempts"]
