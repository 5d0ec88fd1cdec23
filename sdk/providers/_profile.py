"""A codec's wire profile: the facts of a provider family's wire in one mode, stored once.

The family's own profile (`sdk._values.profile.Profile`: its names, stop reasons, dialect, what
it can carry) is where this starts; a mode may send the schema in another dialect or none, end
a document with another stop reason, carry less. With the sampling options its API takes and
where each goes in the request, and the request fields the SDK writes itself, one place vets
every request
before it is built: a sampling option the API does not take is a `TypeError` naming the provider
(with the closest name it does take), and raw `extra_body` fields that would overwrite what the
SDK owns (the schema, the grammar, the tools, the model, the messages, streaming, the limits)
are a `ValueError` naming the field.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from dataclasses import replace
from typing import Annotated
from typing import Any
from typing import Final
from typing import Literal
from typing import TypedDict
from typing import cast
from typing import get_type_hints

from sdk._values.declared import AtLeast
from sdk._values.declared import Between
from sdk._values.declared import NoEmptyText
from sdk._values.declared import Sendable
from sdk._values.declared import did_you_mean
from sdk._values.dialect import Dialect
from sdk._values.profile import Profile
from sdk._values.profile import StopReason
from sdk._values.sendable import check_text
from sdk.parsing._limits import MAX_DEPTH

__all__ = [
    "NO_SAMPLING",
    "SAMPLING_OPTIONS",
    "SDK_RAW_FIELD",
    "Sampling",
    "SamplingOptions",
    "WireProfile",
    "apply_options",
    "check_json_body",
    "finished",
    "merge_extra",
    "sdk_fields",
    "sent_body",
]


class SamplingOptions(TypedDict, total=False):
    """The sampling options a call may set (part of `sdk.engine.options.CallOptions`); each
    provider takes those its API has, and its codec refuses the others."""

    # Ranges every API shares (a value outside one is refused before anything is sent, not by
    # the provider's HTTP 400); past them, each API's own limits are its own.
    temperature: Annotated[float, AtLeast(0)]
    top_p: Annotated[float, Between(0.0, 1.0)]
    top_k: int
    seed: int
    stop: Annotated[str | Sequence[str], NoEmptyText(), Sendable()]
    presence_penalty: float
    frequency_penalty: float
    repeat_penalty: float
    constrained: bool
    """Local engines: `False` decodes without the grammar (the eval's unconstrained arm)."""
    grounding: bool | Literal["values"]
    """Local grammar engines: whether `Verbatim` and `SourceQuote` values are constrained to
    spans of the source while decoding (`"values"`: every nullable copied value written where a
    span can fill it); `False` leaves them to the check after parsing."""


SAMPLING_OPTIONS: Final = frozenset(get_type_hints(SamplingOptions))
"""Every sampling option's name."""


@dataclass(frozen=True, slots=True, repr=False)
class Sampling:
    """The sampling options of one request, resolved (`CompletionRequest.options`): a field
    the call set has its value, one it left out is `None` (the provider's own default). `stop`
    is always a tuple. `own` holds, by name, the options a provider declares beyond these (its
    profile's names: `TestProvider(options=[...])`, the embedded engine's `fast_forward`), which
    that provider reads and vets itself.

    Codecs read the typed fields (`request.options.grounding`); `items()` gives the options set,
    by name, for a codec's `finished` to write where its profile says."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    constrained: bool | None = None
    grounding: bool | Literal["values"] | None = None
    own: tuple[tuple[str, object], ...] = ()
    """A provider's own options, `(name, value)` sorted by name."""

    @classmethod
    def of(cls, options: Mapping[str, object]) -> Sampling:
        """The options named in `options` (the SDK's sampling options and a provider's own),
        each already checked against its declaration (`sdk.engine.options`)."""
        return NO_SAMPLING.updated(options) if options else NO_SAMPLING

    def updated(self, options: Mapping[str, object]) -> Sampling:
        """These options with `options` set over them."""
        typed: dict[str, Any] = {}
        own = dict(self.own)
        for name, value in options.items():
            if name not in SAMPLING_OPTIONS:
                own[name] = value
            elif name == "stop" and value is not None:
                typed[name] = (
                    (value,) if isinstance(value, str) else tuple(cast(Iterable[str], value))
                )
            else:
                typed[name] = value
        return replace(self, **typed, own=tuple(sorted(own.items())))

    def items(self) -> list[tuple[str, object]]:
        """The options set, `(name, value)`: the SDK's in their declared order, then the
        provider's own."""
        if self is NO_SAMPLING:
            return []
        named = [(name, getattr(self, name)) for name in _SAMPLING_FIELDS]
        return [(name, value) for name, value in named if value is not None] + list(self.own)

    def value(self, name: str) -> object:
        """The value of option `name` (`None`: not set)."""
        if name in SAMPLING_OPTIONS:
            return getattr(self, name)
        return dict(self.own).get(name)

    def __bool__(self) -> bool:
        return self is not NO_SAMPLING and bool(self.items())

    def __repr__(self) -> str:
        return f"Sampling({', '.join(f'{name}={value!r}' for name, value in self.items())})"


_SAMPLING_FIELDS: Final = tuple(f.name for f in fields(Sampling) if f.name != "own")
if frozenset(_SAMPLING_FIELDS) != SAMPLING_OPTIONS:  # one declaration, two forms: kept in step
    raise TypeError("Sampling's fields are not SamplingOptions' names")
NO_SAMPLING: Final = Sampling()
"""No sampling option set."""

SDK_RAW_FIELD: Final = "extra_body"
"""Where the official SDKs' client methods take request fields they do not know."""


@dataclass(frozen=True)
class WireProfile:
    """What one provider family's wire carries, in one mode (see the module docstring)."""

    family: Profile
    """The provider family's profile: its name (`Result.provider`), stop reasons, what it can
    carry."""
    dialect: Dialect | None
    """The schema dialect in this mode (usually `family.dialect`; `None`: the canonical schema,
    or no schema on the wire)."""
    clean_stops: frozenset[StopReason] = frozenset({StopReason.END_TURN})
    """The stop reasons that end a finished document in this mode."""
    grammar: bool = False
    """Whether the wire carries a grammar (`generate(Grammar(...))`); only where the family
    can (`family.carries`)."""
    tools: bool = False
    """Whether the wire carries tool calls (`call_tools`)."""
    native_reasoning: bool = False
    """Whether the wire asks for the provider's own thinking channel (`reasoning="native"`)."""
    options: Mapping[str, str] = field(default_factory=dict)
    """The sampling options the API takes (`CallOptions` names), each with where it goes in the
    request body as a dotted path (`"temperature"`, `"config.stop_sequences"`); `""` for one the
    codec reads itself (`grounding`), which is not sent as it is."""
    owned: frozenset[str] = frozenset()
    """The request fields the SDK writes (dotted paths); `extra_body` may not touch them."""
    raw_body: bool = True
    """Whether the request has a body `extra_body` can add to (not for in-process engines)."""
    fields: Mapping[str, frozenset[str] | None] | None = None
    """An SDK client's method: the keyword arguments it takes (each with the keys it takes
    inside, `None` for any), merged into the call as they are; `None` for an HTTP body, where
    every `extra_body` field merges into the body."""
    target: str | None = None
    """The preflight target this wire decodes with (`sdk.schema.preflight.TARGETS`): what it
    enforces, strips and cannot promise; `None` for a wire with no schema of its own."""
    raw_field: str = SDK_RAW_FIELD
    """Where an SDK method takes fields it does not know (the SDKs' own `extra_body`, sent as
    JSON): an `extra_body` field that is not one of `fields` goes there."""

    def __post_init__(self) -> None:
        carried = {"grammars": self.grammar, "tools": self.tools,
                   "native_reasoning": self.native_reasoning}  # fmt: skip
        can = self.family.carries
        beyond = sorted(kind for kind, on in carried.items() if on and kind not in can)
        if beyond:
            raise ValueError(
                f"{self.family.name}'s profile says it cannot carry {', '.join(beyond)}"
            )

    @property
    def name(self) -> str:
        """The provider family's name, as in `Result.provider`."""
        return self.family.name

    def vet(self, options: Sampling, extra_body: Mapping[str, Any]) -> None:
        """Refuse, before anything is built, an option this API does not take (`TypeError`)
        and an `extra_body` field the SDK owns (`ValueError`)."""
        for name, _ in options.items():
            if name not in self.options:
                takes = ", ".join(sorted(self.options)) or "none"
                raise TypeError(
                    f"{self.name} does not take the option {name!r}"
                    f"{did_you_mean(name, frozenset(self.options))}; it takes: {takes}"
                )
        if extra_body and not self.raw_body:
            raise ValueError(f"{self.name} has no request body: extra_body is not taken")
        # (a `dict`, as a call's `extra_body` always is, known without the ABC's instance check)
        if type(extra_body) is not dict and not isinstance(extra_body, Mapping):
            raise TypeError(f"extra_body must be a mapping, not {type(extra_body).__name__}")
        if not extra_body:
            return  # nothing below can refuse an empty body (most calls send none)
        written = {path: name for name, path in self.options.items()}
        for key, inner in (self.fields or {}).items():
            value = extra_body.get(key)
            if inner is not None and isinstance(value, Mapping):
                for name in value:
                    if name not in inner:
                        raise ValueError(
                            f"extra_body[{key!r}] has {name!r}, which {self.name} does not take "
                            f"there{did_you_mean(name, inner)}"
                        )
        touched, parents = self._sdk_paths
        for path in _leaf_paths(extra_body):
            # (looked up, not compared with each field: most paths touch none, and `with_options`
            # may set a client's `extra_body` per request; the loop below names the one touched)
            if (
                path not in touched
                and path not in parents
                and ("." not in path or all(path[:i] not in touched for i in _dots(path)))
            ):
                continue
            for owned in (*self.owned, *written):
                if path == owned or path.startswith(owned + ".") or owned.startswith(path + "."):
                    hint = f": pass {written[owned]}=..." if owned in written else ""
                    raise ValueError(
                        f"extra_body may not set {path!r}: {self.name}'s request field "
                        f"{owned!r} is the SDK's{hint}"
                    )

    @functools.cached_property
    def _sdk_paths(self) -> tuple[frozenset[str], frozenset[str]]:
        """The fields `extra_body` may not touch (`owned`, and where each option goes), and each
        one's dotted parents: a path touches one when it is one, one's parent, or under one."""
        touched = frozenset((*self.owned, *self.options.values()))
        parents = frozenset(path[:i] for path in touched for i in _dots(path))
        return touched, parents


def _dots(path: str) -> list[int]:
    """Where `path`'s dots are (each ends a parent of the path)."""
    return [i for i, char in enumerate(path) if char == "."]


def sdk_fields(method: Any) -> dict[str, frozenset[str] | None]:
    """The keyword arguments an SDK client's method takes (its own `extra_*` and `timeout`
    aside), for `WireProfile.fields`."""
    import inspect

    skip = {"self", "extra_headers", "extra_query", "extra_body", "timeout"}
    return {name: None for name in inspect.signature(method).parameters if name not in skip}


def finished(
    body: dict[str, Any],
    options: Sampling,
    extra_body: Mapping[str, Any],
    profile: WireProfile,
) -> dict[str, Any]:
    """A built request body with its sampling options put where the API wants them and its
    `extra_body` merged in, last (both vetted before: `WireProfile.vet`). Through an SDK client,
    the fields its method does not take go in its raw passthrough (`profile.raw_field`)."""
    apply_options(body, options, profile)
    if profile.fields is None:
        return merge_extra(body, extra_body)
    raw = {key: value for key, value in extra_body.items() if key not in profile.fields}
    merge_extra(body, {k: v for k, v in extra_body.items() if k in profile.fields})
    if raw:
        _put(body, profile.raw_field, merge_extra(dict(_get(body, profile.raw_field)), raw))
    return body


def sent_body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body the official SDKs' clients send for `kwargs`, a request `finished` built
    for their method: the fields the method does not take, held in its `extra_body`
    (`SDK_RAW_FIELD`), merged in at the top as the client merges them. For a request carried
    without a client (a batch line, whose `params` or `body` is the request's own)."""
    raw = kwargs.get(SDK_RAW_FIELD)
    body = {key: value for key, value in kwargs.items() if key != SDK_RAW_FIELD}
    return merge_extra(body, raw) if raw else body


def apply_options(body: dict[str, Any], options: Sampling, profile: WireProfile) -> None:
    """Write each sampling option set where the profile says it goes (`stop` as a list)."""
    for name, value in options.items():
        path = profile.options.get(name)
        if not path:
            continue  # read by the codec itself (or by an in-process engine)
        _put(body, path, list(cast(tuple[str, ...], value)) if name == "stop" else value)


def check_json_body(body: Mapping[str, Any], name: str = "extra_body") -> None:
    """Refuse, where it is set, a request body (`extra_body`) that JSON cannot carry, naming
    where in it: a value that is not null, true/false, a number, text, a list (or tuple) or a
    mapping with text keys (`TypeError`: a `Decimal`, a set, bytes, an `int` key, which the
    wire would write as text beside a text key of the same spelling), or a number that is not
    finite, or text with a lone surrogate (`ValueError`: `NaN` is not JSON, and a surrogate has
    no UTF-8 form). Without it each failed at every call, as an unusable reply. Walked without
    recursion, and refused nested deeper than `MAX_DEPTH` (128)
    lists and mappings (`ValueError`): the copy the call keeps, the cache key and the wire's
    JSON encoder all recurse, so a deeper one was a bare `RecursionError` from the call."""
    stack: list[tuple[str, Any, int]] = [(name, body, 1)]  # (the body itself: level 1)
    while stack:
        where, value, depth = stack.pop()
        kind = type(value)
        if isinstance(value, str):
            check_text(value, where)
            continue
        if value is None or kind in (bool, int):
            continue
        if kind is float or isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"{where} is {value!r}, a number JSON cannot carry")
        elif depth > MAX_DEPTH and isinstance(value, (Mapping, list, tuple)):
            shown = where if len(where) <= 80 else where[:80] + "..."
            raise ValueError(
                f"{shown} nests lists and mappings deeper than {MAX_DEPTH} levels, "
                "more than a request body may hold"
            )
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(f"{where} has the key {key!r}: a JSON object's keys are text")
                check_text(key, f"{where} has a key that")
                stack.append((f"{where}[{key!r}]", item, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{where}[{index}]", item, depth + 1) for index, item in enumerate(value))
        elif not isinstance(value, int):  # (an `IntEnum`: as JSON's; a `str` subclass: above)
            raise TypeError(
                f"{where} is a {kind.__name__}, which JSON cannot carry: give null, true or "
                "false, a number, text, a list or a mapping"
            )


def merge_extra(body: dict[str, Any], extra_body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with `extra_body` merged in (nested mappings merged key by key), last; a nested
    mapping is copied in, so that `body` never shares one with `extra_body` (a request body is
    built from the call spec's, which is changed by no request)."""
    for key, value in extra_body.items():
        current = body.get(key)
        if isinstance(value, Mapping):
            body[key] = merge_extra(dict(current) if isinstance(current, dict) else {}, value)
        else:
            body[key] = value
    return body


def _put(body: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = body
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _get(body: dict[str, Any], path: str) -> Mapping[str, Any]:
    node: Any = body
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, Mapping) else {}


def _leaf_paths(mapping: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths `mapping` writes: a nested mapping's keys, any other value's own key."""
    paths = []
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            paths.extend(_leaf_paths(value, path + "."))
        else:
            paths.append(path)
    return paths
