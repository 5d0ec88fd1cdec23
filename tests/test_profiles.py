"""Provider profiles: every family's knowledge is one complete `Profile`, the registry finds it
by any name, the old per-provider tables are gone, and a provider written in one new module (the
"Add a provider" guide's) works end to end without a change anywhere else."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sdk.providers
from sdk._values.profile import builtin_profiles
from sdk.providers import Profile
from sdk.providers import profile
from sdk.providers import register
from sdk.schema import dialects as dialects_module
from sdk.stop_reason import StopReason
from tests.docs_support import DOCS
from tests.docs_support import blocks
from tests.import_race import race
from tests.promise_wire import SETUPS

SDK = Path(__file__).resolve().parent.parent / "sdk"
BUILTIN = builtin_profiles()
NAMES = [each.name for each in BUILTIN]
GUIDE = DOCS / "guides" / "add-provider.md"


def test_the_builtin_families_are_the_sdks_own() -> None:
    assert sorted(
        ["anthropic", "openai_responses", "openai_chat", "gemini", "llamacpp", "vllm", "ollama",
         "embedded", "test"]
    ) == NAMES  # fmt: skip


@pytest.mark.parametrize("family", BUILTIN, ids=NAMES)
def test_every_profile_is_complete(family: Profile) -> None:
    assert family.display_name.strip()
    assert "documents" in family.carries and all(how.strip() for how in family.carries.values())
    if family.stop_reasons is not None:
        # A clean end and a cut are always told apart; every value is one of the vocabulary.
        meanings = set(family.stop_reasons.values())
        assert {StopReason.END_TURN, StopReason.MAX_TOKENS} <= meanings
        assert all(isinstance(meaning, StopReason) for meaning in meanings)
        assert all(raw and raw == raw.strip() for raw in family.stop_reasons)
    # Its provider class is where it says, and that class's codec speaks for this family.
    cls = family.provider_class()
    assert getattr(sdk.providers, cls.__name__) is cls
    assert cls.__name__ in sdk.providers.__all__
    for name in family.names:
        assert profile(name) is family
        assert profile(f"  {name.upper().replace('_', '-')} ") is family


@pytest.mark.parametrize("setup", [s for s in SETUPS if s.name in NAMES], ids=lambda s: s.name)
def test_each_codec_carries_what_its_profile_says_and_no_more(setup: object) -> None:
    provider, _ = setup.build([], sync=True)  # type: ignore[attr-defined]
    wire = provider.codec.profile
    family = profile(provider.name)
    assert wire.family is family
    assert wire.dialect in (family.dialect, None)
    assert (wire.grammar, wire.tools) == (setup.grammar, setup.tools)  # type: ignore[attr-defined]
    said = {"grammars": wire.grammar, "tools": wire.tools,
            "native_reasoning": wire.native_reasoning}  # fmt: skip
    assert {kind for kind, on in said.items() if on} <= set(family.carries)


def test_every_family_but_the_embedded_model_is_in_the_promise_matrix() -> None:
    # The embedded model keeps the promises in its own tests (it runs a real model).
    assert {s.name for s in SETUPS} >= set(NAMES) - {"embedded"}


def test_no_raw_stop_word_means_two_things_across_the_builtin_families() -> None:
    meaning: dict[str, tuple[str, StopReason]] = {}
    for family in BUILTIN:
        for raw, stop in (family.stop_reasons or {}).items():
            first = meaning.setdefault(raw, (family.name, stop))
            assert first[1] is stop, f"{raw!r}: {first} and {(family.name, stop)}"
        for raw in family.stop_reasons or {}:
            assert StopReason.from_raw(raw) is family.stop_reasons[raw]  # type: ignore[index]


def test_the_dialect_constants_and_table_are_the_profiles_dialects() -> None:
    from sdk.schema.dialects import DIALECTS

    by_profile = {f.dialect.name: f.dialect for f in BUILTIN if f.dialect is not None}
    assert by_profile == DIALECTS
    for constant, family in dialects_module._CONSTANTS.items():
        assert getattr(dialects_module, constant) is profile(family).dialect
    with pytest.raises(AttributeError, match="NOT_A_DIALECT"):
        dialects_module.NOT_A_DIALECT  # noqa: B018


def test_the_priced_families_name_a_provider_genai_prices_knows() -> None:
    from genai_prices import data

    known = {provider.id for provider in data.providers}
    priced = [f for f in BUILTIN if f.pricing is not None]
    assert {f.name for f in priced} == {"anthropic", "openai_responses", "openai_chat", "gemini"}
    assert {f.pricing.provider_id for f in priced} <= known  # type: ignore[union-attr]


def _family_tables(path: Path) -> list[str]:
    """The dict literals of `path` keyed by two or more family names or aliases."""
    names = {name for family in BUILTIN for name in family.names}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if len(keys & names) >= 2:
                found.append(f"{path.relative_to(SDK.parent)}:{node.lineno}")
    return found


def test_no_module_keeps_a_table_keyed_by_provider_name_beside_the_profiles() -> None:
    tables = [table for path in sorted(SDK.rglob("*.py")) for table in _family_tables(path)]
    assert tables == []


def test_naming_a_family_or_reading_its_stop_reasons_needs_no_vendor_sdk() -> None:
    # A fresh process where `anthropic`, `openai` and `google-genai` cannot be imported: every
    # profile loads (each in its provider module), and so do the modules themselves.
    code = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("anthropic", "openai") or name.startswith("google.genai"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Refuse())
from sdk.providers import profiles
from sdk.stop_reason import StopReason
from sdk.schema.dialects import ANTHROPIC, GEMINI, OPENAI_STRICT
print(len(profiles()), StopReason.from_raw("STOP"), StopReason.from_raw("end_turn", "claude"))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("anthropic", "openai", "google")))
"""
    completed = _fresh(code)
    assert completed.stdout.splitlines() == ["9 end_turn end_turn", "[]"], completed.stderr


# --- the registry ---


def test_an_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown provider 'openia'.*openai_responses.*aliases"):
        profile("openia")


@pytest.mark.parametrize("name", [None, 7, b"openai"], ids=["none", "int", "bytes"])
def test_a_name_that_is_not_text_is_a_type_error_saying_so(name: object) -> None:
    # On main: a bare AttributeError ("'NoneType' object has no attribute 'strip'"), also out
    # of `StopReason.from_raw(raw, provider)`.
    with pytest.raises(TypeError, match="a provider's name is text"):
        profile(name)  # type: ignore[arg-type]
    if name is not None:  # from_raw's None is "no provider": every built-in table
        with pytest.raises(TypeError, match="a provider's name is text"):
            StopReason.from_raw("stop", name)  # type: ignore[arg-type]


@pytest.mark.parametrize("family", BUILTIN, ids=NAMES)
def test_a_profile_pickles_and_copies_as_the_value_it_is(family: Profile) -> None:
    # On main: "TypeError: cannot pickle 'mappingproxy' object" for pickle.dumps and
    # copy.deepcopy (a value sent to another process, or copied with what holds it).
    import copy
    import pickle

    assert pickle.loads(pickle.dumps(family)) is family  # the registered value itself
    assert copy.deepcopy(family) is family and copy.copy(family) is family
    mine = Profile(
        name="profiles_test_pickled",
        display_name="P",
        stop_reasons={"done": StopReason.END_TURN},
        carries={"tools": "calls"},
    )
    again = pickle.loads(pickle.dumps(mine))
    assert again == mine and again.stop_reason("done") is StopReason.END_TURN
    assert dict(again.carries) == {"tools": "calls"}


def test_registering_twice_is_a_no_op_and_a_taken_name_is_refused() -> None:
    mine = Profile(name="profiles_test_a", display_name="A", aliases=frozenset({"pta"}))
    assert register(mine) is mine
    assert register(Profile(name="profiles_test_a", display_name="A",
                            aliases=frozenset({"pta"}))) is mine  # fmt: skip
    with pytest.raises(ValueError, match=r"the name 'pta' is 'profiles_test_a'"):
        register(Profile(name="profiles_test_b", display_name="B", aliases=frozenset({"PTA"})))
    with pytest.raises(ValueError, match=r"the name 'claude' is 'anthropic'"):
        register(Profile(name="profiles_test_c", display_name="C", aliases=frozenset({"claude"})))
    with pytest.raises(ValueError, match="lowercase"):
        Profile(name="Has Space", display_name="x")
    assert profile("PTA") is mine


@pytest.mark.parametrize(
    ("fields", "error", "says"),
    [
        ({"dialect": "json_schema"}, TypeError, "dialect must be a Dialect or None, not 'json"),
        ({"pricing": "openai"}, TypeError, "pricing must be a Pricing or None, not 'openai'"),
        ({"telemetry_name": 5}, TypeError, "telemetry_name must be a string or None, not 5"),
        ({"carries": {"documents": 1}}, TypeError, "carries maps each kind .* not 'documents'"),
        ({"carries": ["documents"]}, TypeError, "carries must be a mapping"),
        ({"provider": "nowhere"}, ValueError, "provider must be 'module:Class'"),
        ({"provider": 5}, TypeError, "provider must be a string"),
        ({"stop_reasons": [("done", StopReason.END_TURN)]}, TypeError, "stop_reasons must be"),
        ({"aliases": None}, TypeError, "aliases must be a set of strings, not None"),
        ({"aliases": frozenset({"-"})}, ValueError, "an alias is a name .* not '-'"),
        ({"aliases": frozenset({" "})}, ValueError, "an alias is a name"),
        ({"aliases": "gw"}, TypeError, "aliases must be a set of strings"),
        ({"aliases": frozenset({"gw", 7})}, TypeError, "aliases must be a set of strings"),
        ({"stop_reasons": {"done": "end_turn"}}, TypeError, "not 'done' to 'end_turn'"),
        ({"stop_reasons": {None: StopReason.END_TURN}}, TypeError, "stop_reasons maps"),
        ({"carries": {"document": "json"}}, ValueError, "not 'document'"),
        ({"display_name": " "}, ValueError, "display_name"),
    ],
    ids=["dialect-text", "pricing-text", "telemetry-int", "carries-how-int", "carries-list",
         "provider-no-class", "provider-int", "stop-pairs", "aliases-none", "alias-dash",
         "alias-blank", "aliases-text", "alias-not-text", "stop-word", "stop-key",
         "carries-typo", "no-display"],
)
def test_every_field_of_a_profile_is_checked_where_it_is_made(
    fields: dict[str, object], error: type[Exception], says: str
) -> None:
    # Each was accepted once (`aliases=None` and `carries=[...]` raised Python's own errors,
    # naming no field): a string pricing then failed every paid answer in its cost, a string
    # dialect every request build, and either broke `sdk providers`; the alias "-" was the
    # provider "-" and "_" meant; "gw" became the aliases "g" and "w" (a one-letter name taken
    # from every later profile), `stop_reason("done")` returned the bare word, and a misspelt
    # kind was kept and never carried.
    given: dict[str, object] = {"name": "profiles_test_field", "display_name": "F", **fields}
    with pytest.raises(error, match=says) as raised:
        Profile(**given)  # type: ignore[arg-type]
    assert str(raised.value).startswith("profile 'profiles_test_field': ")


def test_a_pricing_of_the_wrong_shape_is_refused_naming_the_field() -> None:
    from sdk.providers import Pricing

    with pytest.raises(TypeError, match="provider_id must be a string, not 5"):
        Pricing(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="provider_id must be text that is not blank"):
        Pricing("")
    with pytest.raises(TypeError, match="input_excludes_cache must be True or False"):
        Pricing("openai", input_excludes_cache="yes")  # type: ignore[arg-type]


def test_a_family_without_a_table_reads_every_builtin_one() -> None:
    mine = register(Profile(name="profiles_test_vocab", display_name="V"))
    assert mine.stop_reason("length") is StopReason.MAX_TOKENS  # Chat Completions' word
    assert mine.stop_reason("max_tokens") is StopReason.MAX_TOKENS  # the vocabulary's own
    assert mine.stop_reason("whatever") is StopReason.OTHER
    assert mine.stop_reason(None) is StopReason.OTHER


def _fresh(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, **env}, check=False,
    )  # fmt: skip


def test_many_threads_asking_at_once_in_a_fresh_process_see_one_registry() -> None:
    # The first lookup loads the built-in families: threads racing into it behind a barrier
    # all get the very same profile objects, and nothing is registered twice.
    code = """
import threading
from sdk._values import profile as registry
barrier = threading.Barrier(16)
seen = []
def ask(name):
    barrier.wait(timeout=30)
    seen.append((registry.profile(name), registry.builtin_profiles()))
threads = [threading.Thread(target=ask, args=(n,)) for n in ["openai", "llama.cpp"] * 8]
[t.start() for t in threads]
[t.join(timeout=60) for t in threads]
assert len(seen) == 16, len(seen)
assert len({id(b) for _, b in seen}) == 1
assert {p.name for p, _ in seen} == {"openai_responses", "llamacpp"}
assert len({id(p) for p, _ in seen}) == 2
print("ok")
"""
    completed = _fresh(code)
    assert completed.stdout.strip() == "ok", completed.stderr


def test_a_provider_module_imported_while_another_thread_loads_the_registry_does_not_hang() -> None:
    # A thread imports a provider module (Python holds that module's import lock while the
    # module registers its profile) just as another thread's first lookup loads the provider
    # modules. The registry loaded them under its own lock, so each thread waited for the
    # other's lock for good: both threads hung on main.
    completed = race(
        holder="import sdk.providers.anthropic",
        asker="from sdk.providers import profiles; assert len(profiles()) == 9",
        hold="sdk.providers.anthropic",
        until="sdk.providers.anthropic",
    )
    assert completed.stdout.splitlines() == ["holder ok", "asker ok"], completed.stderr


def test_a_package_class_named_like_a_builtin_one_does_not_hide_it() -> None:
    # A package's profile may name its own class `AnthropicProvider` (a gateway's): registered
    # before the SDK's module loads, it made `sdk.providers.AnthropicProvider` an AttributeError
    # on main (the lookup stopped at the first profile naming a class of that name).
    code = """
from sdk.providers import Profile, register
register(Profile(name="gateway", display_name="G", provider="gateway:AnthropicProvider"))
from sdk.providers import AnthropicProvider
print(AnthropicProvider.__module__)
"""
    completed = _fresh(code)
    assert completed.stdout.splitlines() == ["sdk.providers.anthropic"], completed.stderr


def test_asking_the_providers_package_for_a_dunder_name_loads_no_provider_module() -> None:
    # `inspect.unwrap`, doctest and mocks ask a module for `__wrapped__` and the like; on main
    # each such question imported every provider module (34 of sdk.providers instead of 8).
    code = """
import sys
import sdk.providers
before = sorted(m for m in sys.modules if m.startswith("sdk.providers."))
print(hasattr(sdk.providers, "__wrapped__"), hasattr(sdk.providers, "__test__"))
print(sorted(m for m in sys.modules if m.startswith("sdk.providers.")) == before)
"""
    completed = _fresh(code)
    assert completed.stdout.splitlines() == ["False False", "True"], completed.stderr


# --- a provider of one new module, end to end ---


def _guide_module() -> str:
    """The module the "Add a provider" guide writes: its blocks titled `acme_gateway.py`."""
    parts = [block.code for block in blocks(GUIDE) if block.title == "acme_gateway.py"]
    assert len(parts) == 3
    return "\n\n".join(parts)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the guide's module and a distribution that declares it under the
    entry point group, as `pip install` of the user's own package would."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "acme_gateway.py").write_text(_guide_module())
    info = folder / "acme_gateway-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-gateway\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[structured_sdk.providers]\nacme = acme_gateway\n"
    )
    return folder


def test_the_new_provider_touches_no_other_file_of_the_sdk() -> None:
    mentions = [p for p in SDK.rglob("*.py") if "acme" in p.read_text().lower()]
    assert mentions == []


def test_a_new_module_is_found_by_name_in_a_fresh_process(installed: Path) -> None:
    # Nothing imports the module: naming the provider finds it through its entry point.
    code = """
from sdk.stop_reason import StopReason
from sdk.providers import profile
from sdk.schema.dialects import to_wire
from contracts import InvoiceExtraction
acme = profile("acme-gateway")
print(acme.name, acme.display_name)
print(StopReason.from_raw("length", "acme"), StopReason.from_raw("blocked", "ACME"))
print(sorted({r.keyword for r in to_wire(InvoiceExtraction, acme.dialect).removed}))
print(acme.provider_class().__module__)
"""
    completed = _fresh(code, PYTHONPATH=f"{installed}:{Path.cwd()}")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        "acme Acme gateway",
        "max_tokens content_filter",
        "['maxLength', 'minLength', 'pattern']",
        "acme_gateway",
    ]


def test_the_sdk_command_lists_it_and_lints_for_its_dialect(installed: Path) -> None:
    sdk_command = Path(sys.executable).parent / "sdk"
    env = {"PYTHONPATH": str(installed), "NO_COLOR": "1", "COLUMNS": "200"}
    listed = _fresh_command([str(sdk_command), "providers", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    acme = next(p for p in json.loads(listed.stdout) if p["name"] == "acme")
    assert acme["aliases"] == ["acme_gateway"] and acme["dialect"] == "acme"
    assert acme["stop_reasons"] == {"complete": "end_turn", "length": "max_tokens",
                                    "blocked": "content_filter"}  # fmt: skip
    linted = _fresh_command(
        [str(sdk_command), "schema", "lint", "contracts", "--provider", "acme-gateway",
         "--json"], env,
    )  # fmt: skip
    assert linted.returncode in (0, 1), linted.stderr  # 1: findings
    reports = {report["contract"]: report for report in json.loads(linted.stdout)}
    stripped = {
        item["pointer"]
        for item in [*reports["InvoiceExtraction"]["findings"],
                     *reports["InvoiceExtraction"]["suppressed"]]
        if item["code"] == "dialect-strips"
    }  # fmt: skip
    assert any(pointer.endswith("/maxLength") for pointer in stripped), reports


def _fresh_command(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, **env},
        cwd=Path(__file__).resolve().parent.parent, check=False,
    )  # fmt: skip


def test_a_broken_provider_package_is_named_not_hidden(tmp_path: Path) -> None:
    (tmp_path / "broken_provider.py").write_text("raise RuntimeError('no config file')\n")
    info = tmp_path / "broken_provider-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-provider\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[structured_sdk.providers]\nbroken = broken_provider\n")
    code = """
from sdk.providers import profile
print(profile("anthropic").name)  # a built-in name needs no entry point
try:
    profile("nobody")
except ImportError as error:
    print(type(error).__name__, error)
"""
    completed = _fresh(code, PYTHONPATH=str(tmp_path))
    lines = completed.stdout.splitlines()
    assert lines[0] == "anthropic", completed.stderr
    assert lines[1].startswith("ImportError") and "broken (broken_provider)" in lines[1]
    assert "no config file" in lines[1]


def test_a_package_declaring_a_wrong_profile_is_one_line_from_sdk_providers(
    tmp_path: Path,
) -> None:
    # On main `sdk providers` listed the profile's first line, then died with a traceback
    # (AttributeError: 'str' object has no attribute 'name') and exit code 1. The profile is
    # refused where the package makes it, and the command exits 2 with one line naming the
    # entry point, the package and the field (docs/reference/cli.md: a provider module an
    # installed package declares failed to load).
    (tmp_path / "acme_bad_mod.py").write_text(
        "from sdk.providers import Profile\n"
        "PROFILE = Profile(name='acmebad', display_name='Acme bad', pricing='openai')\n"
    )
    info = tmp_path / "acme_bad-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-bad\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[structured_sdk.providers]\nacme_bad = acme_bad_mod:PROFILE\n"
    )
    sdk_command = Path(sys.executable).parent / "sdk"
    root = str(Path(__file__).resolve().parent.parent)
    env = {"PYTHONPATH": os.pathsep.join([root, str(tmp_path)]), "NO_COLOR": "1",
           "COLUMNS": "400", "PYTHONWARNINGS": "ignore"}  # fmt: skip
    listed = _fresh_command([str(sdk_command), "providers"], env)
    assert listed.returncode == 2, listed.stderr
    assert "Traceback" not in listed.stderr
    lines = listed.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for named in ("acme_bad (acme_bad_mod:PROFILE) of the package acme-bad", "profile 'acmebad'",
                  "pricing must be a Pricing or None, not 'openai'"):  # fmt: skip
        assert named in lines[0]


def test_a_broken_provider_package_is_imported_once_and_named_at_every_lookup(
    tmp_path: Path,
) -> None:
    # Every lookup of a name no profile has loaded the declared modules again: the broken one
    # was imported (its top-level code run) once per lookup, and a call through a provider
    # made by hand looks its name up for its cost and its span on every attempt (~4 ms each
    # here, and whatever the module's code does). It is imported once; each lookup still says
    # why it failed.
    runs = tmp_path / "runs"
    (tmp_path / "broken_provider.py").write_text(
        f"with open({str(runs)!r}, 'a') as f:\n    f.write('x')\n"
        "raise RuntimeError('no config file')\n"
    )
    info = tmp_path / "broken_provider-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-provider\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[structured_sdk.providers]\nbroken = broken_provider\n")
    code = """
from sdk.providers import profile
for name in ("nobody", "nobody", "someone-else"):
    try:
        profile(name)
    except ImportError as error:
        print(type(error).__name__, "broken (broken_provider)" in str(error))
"""
    root = str(Path(__file__).resolve().parent.parent)
    completed = _fresh(code, PYTHONPATH=os.pathsep.join([root, str(tmp_path)]))
    assert completed.stdout.splitlines() == ["ImportError True"] * 3, completed.stderr
    assert runs.read_text() == "x"


def test_a_declared_module_imported_while_another_thread_loads_entry_points_does_not_hang(
    installed: Path,
) -> None:
    # The same meeting with a package's module: one thread imports it, another names its
    # provider and so loads the entry points (under the registry's lock on main: both hung).
    completed = race(
        holder="import acme_gateway",
        asker="from sdk.providers import profile; assert profile('acme').name == 'acme'",
        hold="acme_gateway",
        until="acme_gateway",
        pythonpath=str(installed),
    )
    assert completed.stdout.splitlines() == ["holder ok", "asker ok"], completed.stderr


def test_the_guides_provider_answers_through_a_client_in_this_process(installed: Path) -> None:
    import httpx

    sys.path.insert(0, str(installed))
    try:
        import acme_gateway
    finally:
        sys.path.remove(str(installed))
    from pydantic import Field

    from sdk import ContentFiltered
    from sdk import Contract
    from sdk import InvalidJSON
    from sdk import StructuredClient
    from sdk import TruncatedOutput

    class Note(Contract):
        title: str = Field(max_length=20)

    replies = iter([('{"title": "a"', "complete"), ('{"title": "done"}', "complete"),
                    ('{"title": "cu', "length"), ("", "blocked")])  # fmt: skip

    def gateway(request: httpx.Request) -> httpx.Response:
        text, stop = next(replies)
        usage = {"input_tokens": 10, "output_tokens": 5}
        body = {"id": "g", "model": "gpt-4.1-mini", "text": text, "stop": stop, "usage": usage}
        return httpx.Response(200, json=body)

    provider = acme_gateway.AcmeProvider(
        "https://gw.test", model="gpt-4.1-mini",
        http_client=httpx.Client(transport=httpx.MockTransport(gateway)),
    )  # fmt: skip
    client = StructuredClient(provider, retries=1)
    result = client.generate(Note, prompt="x")
    assert (result.provider, result.value.title) == ("acme", "done")
    assert isinstance(result.attempts[0].error, InvalidJSON)  # re-asked with feedback
    assert result.cost is not None and result.cost > 0  # two attempts at OpenAI's prices
    assert [r.keyword for r in result.removed] == ["maxLength"]
    with pytest.raises(TruncatedOutput) as cut:
        client.generate(Note, prompt="x")
    assert (cut.value.raw_stop_reason, cut.value.text) == ("length", '{"title": "cu')
    with pytest.raises(ContentFiltered):
        client.generate(Note, prompt="x")


def test_aliases_given_as_any_set_of_names_are_taken() -> None:
    # On main: a dict's keys (a Set, as a frozenset is) were refused as "not a set of strings";
    # before the field checks any iterable of names was taken.
    names = {"Acme-AI": "the vendor's own spelling", "acmeai": "typed without the dash"}
    made = Profile(name="acme_keys", display_name="Acme", aliases=names.keys())
    assert made.aliases == frozenset({"acme_ai", "acmeai"})
