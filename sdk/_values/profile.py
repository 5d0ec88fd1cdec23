"""Provider profiles: everything the SDK knows about a provider family, one value each.

A `Profile` holds a family's names (the canonical one, a display name, the aliases a user
types), its stop reasons and what each means, its schema dialect, what its wire can carry and
how, its prices and where its provider class lives. Each family's module registers its profile
once (`PROFILE = register(Profile(...))`), and every table the SDK keeps per provider is a
lookup in these values: `StopReason.from_raw` reads the stop table, `sdk.schema.dialects` the
dialect, the cost the pricing, the telemetry the GenAI name, the CLI's `--provider` the names.

`profile(name)` finds a profile by name or alias. It knows no module: a family's profile is in
its provider module (`sdk.providers.<family>`, which imports its vendor's SDK only when a
provider is made), and the first lookup of a name it has not seen imports the SDK's own
provider modules by name (so the core, which looks profiles up, imports no provider module),
then the modules other packages declare under the `structured_sdk.providers` entry point group.
A module imported before (registered by hand) is found too.

`StopReason` lives here, beside the tables that map into it, because `from_raw` looks profiles
up (`sdk.stop_reason` is its public home).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Set
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from enum import Enum
from types import MappingProxyType
from types import ModuleType
from typing import Annotated
from typing import Any
from typing import Final
from typing import Literal
from typing import get_args

from sdk import _fork
from sdk._lazy import imported
from sdk._values.declared import NOT_BLANK
from sdk._values.declared import Matches
from sdk._values.declared import check
from sdk._values.declared import check_fields
from sdk._values.dialect import Dialect

__all__ = [
    "ENTRY_POINT_GROUP",
    "Carried",
    "Pricing",
    "Profile",
    "StopReason",
    "builtin_profiles",
    "builtin_provider",
    "profile",
    "profiles",
    "register",
]

ENTRY_POINT_GROUP: Final = "structured_sdk.providers"
"""The entry point group a package declares its providers in: each entry point names a
`Profile` (`"my_provider:PROFILE"`) or a module that registers its profiles when imported."""

_PROVIDERS: Final = "sdk.providers"
"""The package of the SDK's own provider modules, one per family."""


class StopReason(str, Enum):
    """Why generation ended, in one vocabulary for all providers."""

    END_TURN = "end_turn"
    """The model finished the document on its own (the only clean end in JSON mode)."""
    MAX_TOKENS = "max_tokens"
    """The output token limit cut the document: what is there is a prefix."""
    CONTEXT_WINDOW = "context_window"
    """The context window filled up: also a cut document."""
    REFUSAL = "refusal"
    """The model declined; the text need not match the schema."""
    CONTENT_FILTER = "content_filter"
    """The provider's filter stopped the output."""
    STOP_SEQUENCE = "stop_sequence"
    """A caller-given stop sequence ended the output."""
    TOOL_USE = "tool_use"
    """The model called a tool (the document is the tool input in tool mode)."""
    PAUSE_TURN = "pause_turn"
    """The provider paused a long turn; the caller has to continue it."""
    OTHER = "other"
    """Anything not known to this SDK: never treated as a clean end."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_raw(cls, raw: str | None, provider: str | None = None) -> StopReason:
        """Normalize a provider's raw stop value; unknown values become `OTHER`.

        `provider` is a provider family's name or an alias of one (an unknown name is a
        `ValueError` listing the valid ones) and picks that family's table (its profile's
        `stop_reasons`). A family that reports stops in this vocabulary (embedded, test), or no
        provider, looks the value up in every built-in table, which is unambiguous because no
        two built-in families use one word for different things (a test walks them). A `raw`
        of another type than `str` or `None` is a `TypeError` naming it.
        """
        # (A list or a dict would otherwise fail as a table's bare "unhashable type".)
        check("raw", raw, str | None, "StopReason.from_raw()")
        if provider is not None:
            return profile(provider).stop_reason(raw)
        if raw is None:
            return cls.OTHER
        if raw in _VOCABULARY:  # the SDK's own words mean themselves in every table
            return _VOCABULARY[raw]
        return _any_table().get(raw, cls.OTHER)


Carried = Literal["documents", "grammars", "tools", "native_reasoning"]
"""What a wire can carry: JSON documents (contracts, lists, unions), grammars
(`generate(Grammar(...))`), tool calls (`call_tools`), the provider's own thinking channel
(`reasoning="native"`)."""


_CARRIED: Final = get_args(Carried)


@dataclass(frozen=True, slots=True)
class Pricing:
    """How a family's usage is priced from the maintained `genai-prices` table."""

    provider_id: Annotated[str, NOT_BLANK]
    """The family's provider id in `genai-prices` (`"openai"` for both OpenAI APIs)."""
    input_excludes_cache: bool = False
    """The API's input count leaves out cached tokens (Anthropic), which the table counts."""
    output_excludes_reasoning: bool = False
    """The API's output count leaves out the thinking tokens (Gemini), which are billed."""

    def __post_init__(self) -> None:
        check_fields(self)  # data a package writes by hand, read by the cost of every call


_CLASS_REFERENCE: Final = Matches(
    r"([A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*)?",
    "'module:Class' (or empty: no provider class)",
    "nowhere",
)
"""Where a provider class lives: `"sdk.providers.openai:OpenAIProvider"`."""


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Everything the SDK knows about one provider family (see the module docstring)."""

    name: str
    """The canonical name: `Result.provider`, `ProviderError.provider`, the CLI's `--provider`
    (lowercase letters, digits and `_`)."""
    display_name: Annotated[str, NOT_BLANK]
    """How people write it: `"OpenAI Responses"`, `"llama.cpp"`."""
    aliases: frozenset[str] = frozenset()
    """Other names a user types for it (`"llama.cpp"`, `"claude"`); case, `-` and `_` aside."""
    stop_reasons: Mapping[str, StopReason] | None = None
    """Every raw stop value the API reports and what it means; `None` for a family that reports
    stop reasons in the SDK's own vocabulary (an in-process engine)."""
    dialect: Dialect | None = None
    """The JSON Schema subset its structured-output API accepts (`None`: the canonical schema
    as it is, or no schema on the wire)."""
    carries: Mapping[Carried, str] = field(
        default_factory=lambda: MappingProxyType({"documents": "a JSON document"})
    )
    """What its wire can carry, each with how (`{"tools": "strict function calls"}`); a mode of
    its codec may carry less (`sdk.providers._profile.WireProfile`)."""
    pricing: Pricing | None = None
    """How its usage is priced; `None`: no price (a local engine)."""
    telemetry_name: Annotated[str | None, NOT_BLANK] = None
    """Its `gen_ai.provider.name` in the OpenTelemetry GenAI conventions, where they name it."""
    provider: Annotated[str, _CLASS_REFERENCE] = ""
    """Where its provider class lives, `"module:Class"` (loaded by `provider_class()`)."""

    def __post_init__(self) -> None:
        if (
            not isinstance(self.name, str)
            or not self.name
            or _key(self.name) != self.name
            or not self.name.isidentifier()
        ):
            raise ValueError(
                f"a profile's name is lowercase letters, digits and '_': not {self.name!r}"
            )
        # A profile is data a package may write by hand: a wrong shape is refused here, naming
        # the field, not read wrong later (a string of aliases as its letters, each a name the
        # registry then finds it by; a stop value mapped to a bare word, which `stop_reason()`
        # returns as it is; a misspelt kind, never carried; a dialect, a price or a provider
        # class given by name, which the request build, the cost of each answer or `sdk
        # providers` would fail on). Each field is checked against its declaration
        # (`sdk._values.declared`), after the checks that say more than its type would.
        where = f"profile {self.name!r}"
        if isinstance(self.aliases, (Set, list, tuple)) and all(  # (a dict's keys too)
            isinstance(alias, str) for alias in self.aliases
        ):
            object.__setattr__(self, "aliases", frozenset(self.aliases))
        if isinstance(self.stop_reasons, Mapping):
            for raw, meaning in self.stop_reasons.items():
                if not isinstance(raw, str) or not isinstance(meaning, StopReason):
                    raise TypeError(
                        f"{where}: stop_reasons maps each raw stop value (a str) to a StopReason, "
                        f"not {raw!r} to {meaning!r}"
                    )
        if isinstance(self.carries, Mapping):
            unknown = sorted(str(kind) for kind in self.carries if kind not in _CARRIED)
            if unknown:
                raise ValueError(
                    f"{where}: carries names what a wire can carry ({', '.join(_CARRIED)}), "
                    f"not {', '.join(map(repr, unknown))}"
                )
            for kind, how in self.carries.items():
                if not isinstance(how, str) or not how.strip():
                    raise (ValueError if isinstance(how, str) else TypeError)(
                        f"{where}: carries maps each kind to how its wire carries it (text), "
                        f"not {kind!r} to {how!r}"
                    )
        check_fields(self, where)
        for alias in self.aliases:
            if not any(char.isalnum() for char in _key(alias)):
                # ("-" would be found by "-" and "_", "" by nothing a user types on purpose)
                raise ValueError(
                    f"{where}: an alias is a name a user types, with a letter or digit in it, "
                    f"not {alias!r}"
                )
        object.__setattr__(self, "aliases", frozenset(_key(alias) for alias in self.aliases))
        if self.stop_reasons is not None:
            object.__setattr__(self, "stop_reasons", MappingProxyType(dict(self.stop_reasons)))
        object.__setattr__(self, "carries", MappingProxyType(dict(self.carries)))

    @property
    def names(self) -> frozenset[str]:
        """Every name it is found by: its own and its aliases."""
        return self.aliases | {self.name}

    def __hash__(self) -> int:
        return hash(self.name)

    def stop_reason(self, raw: str | None) -> StopReason:
        """What the raw stop value means from this family (`OTHER` when unknown): its table's
        entry, or with no table of its own, any built-in family's (`StopReason.from_raw`)."""
        if raw is None:
            return StopReason.OTHER
        if self.stop_reasons is None:
            return StopReason.from_raw(raw)
        return self.stop_reasons.get(raw, StopReason.OTHER)

    def __reduce__(self) -> tuple[Any, ...]:
        # Its tables are read-only views, which do not pickle or deep-copy: it is rebuilt by
        # its constructor from plain ones (the registered profile itself, where it is equal).
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        given["carries"] = dict(self.carries)
        if self.stop_reasons is not None:
            given["stop_reasons"] = dict(self.stop_reasons)
        return (_rebuilt, (given,))

    def provider_class(self) -> Any:
        """The provider class (`provider`), imported now; `LookupError` if it names none."""
        module, _, attribute = self.provider.partition(":")
        if not module or not attribute:
            raise LookupError(f"profile {self.name!r} names no provider class")
        return getattr(imported(module), attribute)


def _rebuilt(given: dict[str, Any]) -> Profile:
    """An unpickled (or deep-copied) profile: the registered one when equal, else a new one."""
    made = Profile(**given)
    with _lock:
        registered = _profiles.get(made.name)
    return registered if registered == made else made


# --- the registry ------------------------------------------------------------------------------

_lock = _fork.rlock()
"""Guards the tables below; never held while a module is imported (see `_loads`)."""
_profiles: dict[str, Profile] = {}
"""Every registered profile by canonical name."""
_names: dict[str, str] = {}
"""Every name and alias (as `_key` gives it) -> canonical name."""
_builtin: tuple[Profile, ...] | None = None
_entry_points_loaded = False
_entry_points_failed: str | None = None
"""Why the declared modules failed to load, once they were loaded: said again at each lookup
that needs them, without importing a broken module again (its top-level code run per lookup,
and a call through a provider made by hand looks its name up on every attempt)."""
_this_thread = threading.local()
"""What this thread is loading (`"builtin"`, `"entry points"`): a provider module that looks
names up while it is imported is answered with what is registered so far."""


def _forked() -> None:
    """In a forked child: its one thread loads nothing (a fork from inside a provider module's
    import aside, which the child's own lookups then load again)."""
    global _this_thread
    _this_thread = threading.local()


_fork.in_child(_forked)


@contextmanager
def _loads(what: str) -> Iterator[bool]:
    """Marks this thread as loading `what`; yields `False` when it already is (a lookup made by
    a module being imported for it: the caller answers with what is registered so far).

    The modules are imported without the registry's lock: a module registers its profile while
    it is imported (under its import lock, which Python takes first), so a thread importing
    modules under the registry's lock and one importing a provider module directly would each
    wait for the other's lock forever. Python's import locks let one thread execute a module
    and make the others wait for it; `register` is idempotent, so two threads loading at once
    register each profile once."""
    loading: set[str] = _this_thread.__dict__.setdefault("loading", set())
    if what in loading:
        yield False
        return
    loading.add(what)
    try:
        yield True
    finally:
        loading.discard(what)


def register(new: Profile) -> Profile:
    """Add `new` to the registry and return it (a module's `PROFILE = register(Profile(...))`).

    Registering the same value again is a no-op; a different profile under a name or alias
    already taken is a `ValueError` naming both.
    """
    with _lock:
        current = _profiles.get(new.name)
        if current == new:
            return current
        for name in sorted(new.names):
            owner = _names.get(name)
            if owner is not None:
                raise ValueError(
                    f"cannot register provider {new.name!r}: the name {name!r} is "
                    f"{owner!r}'s (profiles: {', '.join(sorted(_profiles))})"
                )
        _profiles[new.name] = new
        _names.update(dict.fromkeys(new.names, new.name))
        return new


def profile(name: str) -> Profile:
    """The profile `name` means (a canonical name or an alias; case, `-` and `_` aside);
    `ValueError` naming the valid names when it means none."""
    found = _profiles.get(name)
    if found is not None:
        return found
    if not isinstance(name, str):
        raise TypeError(f"a provider's name is text (a family's name or alias), not {name!r}")
    key = _key(name)
    canonical = _names.get(key)
    if canonical is None:
        builtin_profiles()
        canonical = _names.get(key)
    if canonical is None:
        _load_entry_points()
        canonical = _names.get(key)
    if canonical is None:
        every = profiles()
        aliases = sorted(alias for each in every for alias in each.aliases)
        raise ValueError(
            f"unknown provider {name!r}: valid names are "
            f"{', '.join(each.name for each in every)} (aliases: {', '.join(aliases)})"
        )
    return _profiles[canonical]


def builtin_profiles() -> tuple[Profile, ...]:
    """The SDK's own families' profiles, by name: its provider modules, imported once."""
    global _builtin
    if _builtin is not None:
        return _builtin
    with _loads("builtin") as first:
        if not first:
            # Asked again while a provider module loads: what is registered so far.
            with _lock:
                return tuple(_profiles[name] for name in sorted(_profiles))
        import pkgutil

        package = imported(_PROVIDERS)
        modules = {
            imported(f"{_PROVIDERS}.{module.name}").__name__
            for module in pkgutil.iter_modules(package.__path__)
            if not module.name.startswith("_")
        }
    with _lock:
        if _builtin is None:
            _builtin = tuple(
                _profiles[name]
                for name in sorted(_profiles)
                if _profiles[name].provider.partition(":")[0] in modules
            )
        return _builtin


def builtin_provider(class_name: str) -> Any:
    """The SDK's own provider class `class_name`, or `None` if no built-in family's profile names
    it. The provider modules are imported one at a time, in order, until one registers a profile
    naming it: `from sdk.providers import AnthropicProvider` loads that family's module alone."""
    import pkgutil

    def named() -> Profile | None:
        # Only the SDK's own: a package's profile may name a class of the same name elsewhere.
        with _lock:
            registered = list(_profiles.values())
        ours = (p for p in registered if p.provider.partition(":")[0].startswith(_PROVIDERS + "."))
        return next((p for p in ours if p.provider.endswith(f":{class_name}")), None)

    found = named()
    if found is None and _builtin is None:
        package = imported(_PROVIDERS)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                imported(f"{_PROVIDERS}.{module.name}")
                found = named()
                if found is not None:
                    break
    return None if found is None else found.provider_class()


def profiles() -> tuple[Profile, ...]:
    """Every profile known: the built-in families, those of the modules the installed packages
    declare (`ENTRY_POINT_GROUP`), and those registered by hand, by name."""
    builtin_profiles()
    _load_entry_points()
    with _lock:
        return tuple(_profiles[name] for name in sorted(_profiles))


def _load_entry_points() -> None:
    global _entry_points_loaded, _entry_points_failed
    if _entry_points_loaded:
        if _entry_points_failed is not None:  # each lookup says so again
            raise ImportError(_entry_points_failed)
        return
    with _loads("entry points") as first:
        if not first:
            return  # a module being loaded looks names up: what is registered so far
        from importlib.metadata import entry_points

        failed = []
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = entry.load()
                if isinstance(loaded, Profile):
                    register(loaded)
                elif not isinstance(loaded, ModuleType):
                    raise TypeError(
                        f"names a {type(loaded).__name__}, not a Profile or a module that "
                        "registers one"
                    )
            except Exception as error:  # a broken package (a profile of the wrong shape): named
                package = getattr(entry.dist, "name", None)
                declared = f"{entry.name} ({entry.value})"
                declared += f" of the package {package}" if package else ""
                failed.append(f"{declared}: {type(error).__name__}: {error}")
    if failed:
        _entry_points_failed = (
            f"provider modules declared under {ENTRY_POINT_GROUP!r} failed to load: "
            + "; ".join(failed)
        )
    _entry_points_loaded = True
    if _entry_points_failed is not None:
        raise ImportError(_entry_points_failed)


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


_VOCABULARY: Final = {s.value: s for s in StopReason if s is not StopReason.OTHER}
_any: dict[str, StopReason] | None = None


def _any_table() -> dict[str, StopReason]:
    """Every built-in family's raw stop values, and the vocabulary's own words, in one table."""
    global _any
    if _any is not None:
        return _any
    table = dict(_VOCABULARY)
    for each in builtin_profiles():
        table.update(each.stop_reasons or {})
    _any = table
    return table
