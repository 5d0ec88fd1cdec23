"""Keywords grouped as a `TypedDict` (`**details: Unpack[ParseDetails]`) are refused by name,
as a signature's own keywords are: a `TypedDict` is read by type checkers only, so without
`sdk._values.declared.check_keywords` a misspelt keyword (`refusl="..."`) would be dropped silently.

One row per callable that takes such a group: each refuses a misspelling with a `TypeError`
that names it and the keyword it was close to, before it does anything (no file is made, no
server started), and still takes the keyword spelt right.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sdk
from sdk import Contract
from sdk import ProviderError
from sdk import StructuredOutputError
from sdk import parse
from sdk._values.declared import check_keywords
from sdk.batch import BatchJob
from sdk.cli._llama_server import LlamaServer
from sdk.eval.arms import prepare_arm
from sdk.eval.runner import run_eval
from sdk.grammar import Grammar
from sdk.grammar import parse_grammar
from sdk.parsing import ParseDetails
from sdk.parsing import check_stop
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import VLLMProvider
from sdk.providers._errors import provider_error
from sdk.sql import run_query
from sdk.wire import follow_up
from sdk.wire import read_reply


class Answer(Contract):
    """A one-field contract."""

    answer: int


NOTHING: Any = None  # never reached: the keywords are refused first


def _ray(name: str) -> Callable[..., object]:
    """A callable of the Ray integration (skipped where Ray is not installed)."""
    pytest.importorskip("ray")
    from sdk.batch._ray import RayBackend
    from sdk.ray import ProcessorHooks
    from sdk.ray import StructuredMap

    return {"StructuredMap": StructuredMap, "ProcessorHooks": ProcessorHooks,
            "RayBackend": RayBackend}[name]  # fmt: skip


def _rows(tmp: Path) -> list[tuple[str, Callable[..., object], str, str]]:
    """(name, the call with the given keywords, a misspelling, what it is close to)."""
    grammar = Grammar("YesNo", lark='start: "yes" | "no"')
    state = tmp / "job.sqlite"
    return [
        ("parse", lambda **k: parse(Answer, '{"answer": 1}', stop_reason="end_turn", **k),
         "refusl", "refusal"),
        ("check_stop", lambda **k: check_stop("x", stop_reason="end_turn", **k),
         "clean_stop", "clean_stops"),
        ("parse_grammar", lambda **k: parse_grammar(grammar, "yes", stop_reason="end_turn", **k),
         "raw_stop_reasn", "raw_stop_reason"),
        ("run_query", lambda **k: run_query(tmp / "none.db", "SELECT 1", **k),
         "max_row", "max_rows"),
        ("LlamaServer", lambda **k: LlamaServer(tmp / "bin", tmp / "model", log_path=tmp / "log",
                                                **k), "thread", "threads"),
        ("StructuredOutputError", lambda **k: StructuredOutputError("m", **k),
         "stop_reasn", "stop_reason"),
        ("ProviderError", lambda **k: ProviderError("m", **k), "status", "status_code"),
        ("run_eval", lambda **k: run_eval([], Answer, NOTHING, **k), "arm", "arms"),
        ("prepare_arm", lambda **k: prepare_arm("guided", Answer, NOTHING, **k),
         "threshold", "thresholds"),
        ("BatchJob.create", lambda **k: BatchJob.create(state, contract=Answer, backend=NOTHING,
                                                        input=tmp / "in", out=tmp / "out", **k),
         "promt", "prompt"),
        ("read_reply", lambda **k: read_reply("anthropic", Answer, "hi", b"{}", **k),
         "finish_reasn", "finish_reason"),
        ("follow_up", lambda **k: follow_up("anthropic", Answer, "hi", b"{}", **k),
         "optons", "options"),
        ("VLLMProvider", lambda **k: VLLMProvider(model="m", **k), "timout", "timeout"),
        ("OllamaProvider", lambda **k: OllamaProvider(model="m", **k), "header", "headers"),
        ("LlamaCppProvider", lambda **k: LlamaCppProvider(**k), "control_token",
         "control_tokens"),
        ("BatchJob", lambda **k: BatchJob(NOTHING, contract=Answer, backend=NOTHING, **k),
         "poll_max_", "poll_max"),
        ("StructuredMap", lambda **k: _ray("StructuredMap")(Answer, NOTHING, **k),
         "id_colum", "id_column"),
        ("ProcessorHooks", lambda **k: _ray("ProcessorHooks")(Answer, model="m", **k),
         "promt", "prompt"),
        ("RayBackend", lambda **k: _ray("RayBackend")([], NOTHING, **k), "actor", "actors"),
        ("provider_error", lambda **k: provider_error("p", "w", **k), "status", "status_code"),
        ("BatchJob.open", lambda **k: BatchJob.open(state, contract=Answer, backend=NOTHING, **k),
         "poll_intervl", "poll_interval"),
    ]  # fmt: skip


NAMES = [row[0] for row in _rows(Path("."))]


@pytest.mark.parametrize("name", NAMES)
def test_a_misspelt_grouped_keyword_is_refused_by_name_before_anything_is_done(
    name: str, tmp_path: Path
) -> None:
    _, call, misspelt, meant = next(row for row in _rows(tmp_path) if row[0] == name)
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{misspelt}'") as refused:
        call(**{misspelt: 1})
    assert f"did you mean '{meant}'?" in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # nothing made: refused before any work


def test_a_grouped_keyword_spelt_right_is_taken() -> None:
    parsed = parse(Answer, '{"answer": 1}', stop_reason="end_turn", raw_stop_reason="STOP")
    assert (parsed.value.answer, parsed.raw_stop_reason) == (1, "STOP")
    error = ProviderError("m", status_code=429, stop_reason="end_turn")
    assert (error.status_code, str(error.stop_reason)) == (429, "end_turn")


def test_every_key_of_a_group_is_known_required_and_optional_alike() -> None:
    for key in typing.get_type_hints(ParseDetails):
        check_keywords({key: None}, ParseDetails, "parse()")  # inherited keys included
    with pytest.raises(TypeError, match=r"^parse\(\) got an unexpected keyword argument 'zzz'$"):
        check_keywords({"zzz": None}, ParseDetails, "parse()")


def test_every_grouped_keyword_site_in_the_package_checks_its_keywords() -> None:
    """A `def` that takes `**x: Unpack[SomeTypedDict]` calls `check_keywords` in its body, or
    passes `**x` whole to a callable that does, or `x` itself to its base's constructor that
    checks it (the servers' providers: `ServerProvider`; `_unchecked_grouped_keywords`); the
    call options' are checked by the call spec instead; a row above proves each public one
    refuses."""
    root = Path(sdk.__file__).parent
    missing, to_base = [], set()
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        missing += _unchecked_grouped_keywords(module, tree)
        to_base |= {owner for node, kwarg, owner in _grouped_keyword_defs_in(tree)
                    if any(_to_base(call, kwarg) is not None for call in _calls(node))}  # fmt: skip
    assert missing == []
    # The sites whose base's constructor was read (and found checking): the servers' providers.
    assert to_base == {"LlamaCppProvider", "OllamaProvider", "VLLMProvider"}


FAKE_PROVIDERS = """
from typing import TypedDict, Unpack

from sdk._values.declared import check_keywords


class Settings(TypedDict, total=False):
    timeout: float


class Checking:
    def __init__(self, url: str, settings: Settings) -> None:
        check_keywords(settings, Settings, "Checking()")


class Relaying(Checking):
    def __init__(self, url: str, settings: Settings) -> None:
        super().__init__(url, settings=settings)  # on, by keyword, to a base that checks


class Inheriting(Relaying):
    pass  # no __init__ of its own: the MRO goes on to Relaying's


class Trusting:
    def __init__(self, url: str, settings: Settings) -> None:
        self.settings = dict(settings)  # takes the mapping, checks nothing


class CheckingAnother:
    def __init__(self, settings: Settings, extra: Settings) -> None:
        check_keywords(extra, Settings, "CheckingAnother()")  # not the one it was given


class RelayingToTrusting(Trusting):
    def __init__(self, url: str, settings: Settings) -> None:
        super().__init__(url, settings)


class Good(Inheriting):
    def __init__(self, url: str, **settings: Unpack[Settings]) -> None:
        super().__init__(url, settings)


class Unchecked(Trusting):
    def __init__(self, url: str, **settings: Unpack[Settings]) -> None:
        super().__init__(url, settings)


class Swapped(CheckingAnother):
    def __init__(self, **settings: Unpack[Settings]) -> None:
        super().__init__(settings, {})


class Relayed(RelayingToTrusting):
    def __init__(self, url: str, **settings: Unpack[Settings]) -> None:
        super().__init__(url, settings)


class ToObject:
    def __init__(self, **settings: Unpack[Settings]) -> None:
        super().__init__(settings)
"""


def test_the_scan_reports_a_grouped_keyword_given_to_a_base_that_does_not_check_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule above, on a module made here: a `**settings` given to `super().__init__` is
    accepted only where the base's constructor (the next in the MRO, through a class without
    its own) checks that very parameter, or passes it on to one that does."""
    name = "fake_grouped_keyword_providers"
    (tmp_path / f"{name}.py").write_text(FAKE_PROVIDERS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    missing = _unchecked_grouped_keywords(name, ast.parse(FAKE_PROVIDERS))
    reported = {line.split(" ", 2)[1].split(".")[0]: line for line in missing}
    assert set(reported) == {"Unchecked", "Swapped", "Relayed", "ToObject"}, missing
    assert "Trusting.__init__ does not check 'settings'" in reported["Unchecked"]
    assert "CheckingAnother.__init__ does not check 'settings'" in reported["Swapped"]
    assert "Trusting.__init__ does not check 'settings'" in reported["Relayed"]
    assert "object.__init__" in reported["ToObject"]


def _unchecked_grouped_keywords(module: str, tree: ast.Module) -> list[str]:
    """Where in `tree` (the source of `module`) a `def` taking `**x: Unpack[...]` lets a
    misspelt keyword through: it neither calls `check_keywords` nor passes `**x` whole on, nor
    gives `x` to its base's constructor that checks it (the next `__init__` in the class's
    MRO, read from its source, calls `check_keywords` on the parameter `x` arrives in, or
    passes it on to its own base's by the same rule). `module` is imported only for a def that
    gives `x` to its base's constructor."""
    checked_elsewhere = {"CallOptions", "ClientOptions"}  # sdk.engine.options' own refusal
    missing = []
    for node, kwarg, owner in _grouped_keyword_defs_in(tree):
        assert node.args.kwarg is not None and isinstance(node.args.kwarg.annotation, ast.Subscript)
        if ast.unparse(node.args.kwarg.annotation.slice) in checked_elsewhere:
            continue
        where = f"{module}:{node.lineno} {owner + '.' if owner else ''}{node.name}"
        if _checks(node, kwarg) or any(_passes_whole(c, kwarg) for c in _calls(node)):
            continue
        given = [at for at in (_to_base(c, kwarg) for c in _calls(node)) if at is not None]
        if not given:
            missing.append(where)
            continue
        cls = getattr(importlib.import_module(module), owner or "", None)
        if not isinstance(cls, type):
            missing.append(f"{where}: gives {kwarg!r} to super().__init__ outside a class")
            continue
        problems = [_base_problem(cls, cls, at) for at in given]
        missing += [f"{where}: {problem}" for problem in problems if problem is not None]
    return missing


def _base_problem(concrete: type, below: type, at: int | str) -> str | None:
    """Why the `__init__` after `below` in `concrete`'s MRO (the one `super().__init__` in
    `below` reaches) does not check the mapping given to it at `at` (a position after `self`,
    or a keyword), if it does not: it calls `check_keywords` on that parameter, or gives it on
    to its own base's constructor that does."""
    mro = concrete.__mro__
    base = next(k for k in mro[mro.index(below) + 1 :] if "__init__" in vars(k))
    if base is object:
        return "super().__init__ is object.__init__, which checks no keywords"
    init = vars(base)["__init__"]
    try:
        source = textwrap.dedent(inspect.getsource(init))
    except (OSError, TypeError):
        return f"{base.__qualname__}.__init__ has no source to read"
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    args = node.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)][1:]  # after `self`
    if isinstance(at, int):
        param = positional[at] if at < len(positional) else None
    else:
        names = {a.arg for a in (*args.args, *args.kwonlyargs)}
        param = at if at in names else None
    if param is None:
        return f"{base.__qualname__}.__init__ takes the mapping in no named parameter"
    if _checks(node, param):
        return None
    further = [at for at in (_to_base(c, param) for c in _calls(node)) if at is not None]
    if not further:
        return f"{base.__qualname__}.__init__ does not check {param!r} (no check_keywords on it)"
    problems = [_base_problem(concrete, base, at) for at in further]
    return next((problem for problem in problems if problem is not None), None)


_CHECKERS = ("check_keywords", "check_given")
"""What checks a grouped keyword's names (`check_given` calls `check_keywords`)."""


def _calls(node: ast.AST) -> list[ast.Call]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Call)]


def _checks(node: ast.AST, name: str) -> bool:
    """Whether `node` calls `check_keywords` on the mapping `name` (its first argument), or
    `check_given`, which calls it and checks the values too."""
    for call in _calls(node):
        if ast.unparse(call.func) not in _CHECKERS:
            continue
        given = (
            call.args[0]
            if call.args
            else next((k.value for k in call.keywords if k.arg == "given"), None)
        )
        if isinstance(given, ast.Name) and given.id == name:
            return True
    return False


def _grouped_keyword_defs() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """(file name, def, its `**x` name) of every `def` in the package taking
    `**x: Unpack[...]`, overloads left out."""
    found = []
    for path in sorted(Path(sdk.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [(path.name, node, kwarg) for node, kwarg, _ in _grouped_keyword_defs_in(tree)]
    return found


def _grouped_keyword_defs_in(
    tree: ast.Module,
) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str, str | None]]:
    """(def, its `**x` name, the name of the class whose body holds it, if one does) of every
    `def` in `tree` taking `**x: Unpack[...]`, overloads left out."""
    owners = {
        id(item): node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for item in node.body
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        kwarg = node.args.kwarg
        if kwarg is None or kwarg.annotation is None:
            continue
        if not ast.unparse(kwarg.annotation).startswith("Unpack["):
            continue
        if any(ast.unparse(d) == "overload" for d in node.decorator_list):
            continue
        found.append((node, kwarg.arg, owners.get(id(node))))
    return found


def _passes_on(call: ast.Call, kwarg: str) -> bool:
    """Whether `call` is given the keywords `**kwarg` whole: as `**kwarg`, or as the mapping
    `kwarg` to the base class's constructor (`super().__init__(base_url, kwarg, ...)`)."""
    return _passes_whole(call, kwarg) or _to_base(call, kwarg) is not None


def _passes_whole(call: ast.Call, kwarg: str) -> bool:
    """Whether `call` is given `**kwarg`."""
    return any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg
               for k in call.keywords)  # fmt: skip


def _to_base(call: ast.Call, name: str) -> int | str | None:
    """Where `call`, if it is `super().__init__(...)`, is given the mapping `name`: its
    position after `self`, or its keyword."""
    if ast.unparse(call.func) != "super().__init__":
        return None
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            return None  # positions after a `*args` are not known from the source
        if isinstance(arg, ast.Name) and arg.id == name:
            return position
    for keyword in call.keywords:
        if isinstance(keyword.value, ast.Name) and keyword.value.id == name and keyword.arg:
            return keyword.arg
    return None


def _callee(call: ast.Call) -> str:
    """The name a call is made by (`check_stop` of `parser.check_stop(...)` too)."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else ast.unparse(func)


def test_a_grouped_keyword_is_checked_once_not_again_by_the_callable_it_is_passed_to() -> None:
    """A `def` that checks its `**x` (`check_keywords`) passes them on to nothing that checks
    them again: one check, naming the callable the user called (`parse_grammar()`, not the
    `check_stop()` it calls)."""
    defs = _grouped_keyword_defs()

    def checks(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
        return any(_callee(c) in _CHECKERS for c in calls)

    checking = {node.name for _, node, _ in defs if checks(node) and node.name != "__init__"}
    twice = []
    for file, node, kwarg in defs:
        if not checks(node):
            continue
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)):
            if _passes_on(call, kwarg) and _callee(call) in checking:
                twice.append(f"{file}:{node.lineno} {node.name} -> {_callee(call)}")
    assert twice == []


def test_parse_grammar_refuses_a_misspelt_keyword_in_its_own_name_and_takes_each_key() -> None:
    grammar = Grammar("YesNo", lark='start: "yes" | "no"')
    with pytest.raises(TypeError) as refused:
        parse_grammar(grammar, "yes", stop_reason="end_turn", refusl="no")  # type: ignore[call-arg]
    assert str(refused.value) == (
        "parse_grammar() got an unexpected keyword argument 'refusl' (did you mean 'refusal'?)"
    )
    parsed = parse_grammar(
        grammar,
        "yes",
        stop_reason="end_turn",
        raw_stop_reason="STOP",
        clean_stops={sdk.StopReason.END_TURN},
        refusal=None,
        refusal_category=None,
    )
    assert (parsed.value, parsed.raw_stop_reason) == ("yes", "STOP")
