"""The call spec: every client setting and call option declared once, resolved into one frozen,
typed value (`CallSpec`) with the part each layer reads.

The public surface is two TypedDicts: `CallOptions`, what `generate`, `stream`, `call_tools` and
`stream_tools` take on both clients (`**options: Unpack[CallOptions]`), and `ClientOptions`, those
plus the client's own settings, what the constructors and `with_options` take. Each entry is the
option's one declaration: its type, and as `Annotated` metadata its range
(`sdk._values.declared`) and its `Option` (default, where it goes, how a given value is kept).
The sampling options (`SamplingOptions`: `temperature`, `stop`, ...) go to the provider as
they are.

Adding an option is adding its entry; `CallSpec` then checks it wherever it is set (a constructor,
`with_options`, a call: `TypeError` for a wrong type, `ValueError` for a value out of range, both
naming it, before anything is sent) and puts it in the projection it names, as a field of that
name:

- `"inputs"` -> `Inputs` (the conversation's parts),
- `"transport"` -> `Shared` (what every request carries),
- `"parsing"` -> `Parsing` (how replies are judged),
- `"attempts"` -> `RetrySettings` (retries, budgets, deadlines),
- `"output"` -> `OutputOptions` (wrappers of the output kind: reasoning, abstention),
- `"call"` -> a field of `CallSpec` itself (hooks, clock, cache).

An option left out means "the client's default"; `None` where a type allows it means "off" (so
`deadline=None` turns off, for one call, a deadline the client sets). A name that is not an option
is a `TypeError` with the closest name when there is one; a sampling option the provider does not
take is refused by the provider's codec, the same way.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import MISSING
from dataclasses import Field
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from dataclasses import replace
from typing import Annotated
from typing import Any
from typing import Final
from typing import Literal
from typing import TypeVar
from typing import get_args
from typing import get_type_hints

from sdk._values.declared import AtLeast
from sdk._values.declared import Between
from sdk._values.declared import Positive
from sdk._values.declared import Visible
from sdk._values.declared import bounds_of
from sdk._values.declared import check
from sdk._values.declared import did_you_mean
from sdk._values.declared import union_members
from sdk._values.declared import whole_numbers_only
from sdk._values.kept import Kept
from sdk._values.seconds import LONGEST_WAIT
from sdk.abstention import Thresholds
from sdk.cache import Cache
from sdk.cache import LastKey
from sdk.calibration import Calibration
from sdk.engine.conversation import MessageLike
from sdk.engine.conversation import PromptLike
from sdk.engine.kinds._kind import Abstention
from sdk.engine.kinds._kind import Parsing
from sdk.engine.kinds._kind import Reasoning
from sdk.engine.kinds._kind import Shared
from sdk.engine.retry import DEFAULT_BACKOFF
from sdk.engine.retry import Backoff
from sdk.engine.retry import MaxTokensRamp
from sdk.engine.retry import RetrySettings
from sdk.hooks import Hooks
from sdk.parsing.parser import EnumCase
from sdk.parsing.runaway import DEFAULT_RUNAWAY
from sdk.parsing.runaway import RunawayBound
from sdk.prompt import Prompt
from sdk.providers._base import Message
from sdk.providers._profile import SAMPLING_OPTIONS
from sdk.providers._profile import Sampling
from sdk.providers._profile import SamplingOptions
from sdk.providers._profile import check_json_body
from sdk.providers._profile import merge_extra

__all__ = [
    "CALL_TOOLS",
    "GENERATE",
    "SAMPLING_OPTIONS",
    "STREAM",
    "STREAM_TOOLS",
    "Abstention",
    "CallOptions",
    "CallSpec",
    "ClientOptions",
    "Inputs",
    "LastCall",
    "Method",
    "Option",
    "OutputOptions",
    "Reasoning",
    "cache_of",
    "declarations",
    "whole_number_options",
]

Layer = Literal["inputs", "transport", "parsing", "attempts", "output", "call"]
"""Where an option goes (the module docstring)."""


@dataclass(frozen=True, slots=True, init=False)
class Option:
    """How one option is resolved: the projections it goes to (`Layer`), its default, how a
    given value is kept (`convert`, after the check) and merged over the client's (`merge`: the
    call's fields over the client's, for `extra_body`), how messages describe its type
    (`expects`, when the annotation says it badly), and whether its `convert` reads a file a
    text value names (`reads_file`: read again at every call, never kept by `LastCall`)."""

    goes: tuple[Layer, ...]
    default: object
    convert: Callable[[Any], Any] | None
    merge: Callable[[Any, Any], Any] | None
    expects: str | None
    reads_file: bool

    def __init__(
        self,
        *goes: Layer,
        default: object = None,
        convert: Callable[[Any], Any] | None = None,
        merge: Callable[[Any, Any], Any] | None = None,
        expects: str | None = None,
        reads_file: bool = False,
    ) -> None:
        for name, value in (("goes", goes), ("default", default), ("convert", convert),
                            ("merge", merge), ("expects", expects),
                            ("reads_file", reads_file)):  # fmt: skip
            object.__setattr__(self, name, value)


def _load_thresholds(
    value: Thresholds | str | os.PathLike[str] | Mapping[str, float] | float,
) -> Thresholds:
    """A thresholds file is read when it is set (its errors name the file and line); a number,
    or a number per field pointer, is a threshold set by hand (`Thresholds.fixed`)."""
    if isinstance(value, Thresholds):
        return value
    if isinstance(value, (Mapping, int, float)):
        try:
            return Thresholds.fixed(value)
        except (TypeError, ValueError) as error:  # (a file's errors name the file and line)
            raise type(error)(f"abstention_thresholds: {error}") from None
    return Thresholds.load(value)


def _load_calibration(value: Calibration | str | os.PathLike[str]) -> Calibration:
    """A calibration file is read when it is set (its errors name the file)."""
    return value if isinstance(value, Calibration) else Calibration.load(value)


def cache_of(option: Cache | bool | None) -> Cache | None:
    """The store a `cache=` option names: `True` is the default `SQLiteCache` (opened once per
    process), `None` and `False` none."""
    if option is True:
        return _default_cache()
    if option is None or option is False:
        return None
    for method in ("get", "put"):
        if inspect.iscoroutinefunction(getattr(option, method, None)):
            raise TypeError(
                f"cache= takes a store whose get and put return their result (the SDK calls "
                f"them from any thread, the async client's calls too): "
                f"{type(option).__name__}.{method} is async"
            )
    return option


@functools.cache
def _default_cache() -> Cache:
    from sdk.cache import SQLiteCache  # sqlite3: loaded when a cache is asked for

    return SQLiteCache()


def _none_if_empty(text: str) -> str | None:
    """`""` as `None`: both mean no system prompt, and send the same request."""
    return text or None


def _merged_extra(current: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    return merge_extra(dict(current), given)


def _own_copy(given: Mapping[str, Any]) -> dict[str, Any]:
    """`extra_body` as the spec's own, once JSON can carry it (`check_json_body`): the
    caller's mappings and lists copied all the way down, so that changing them later changes
    no client made with them."""
    check_json_body(given)
    return copy.deepcopy(dict(given))


def _own_list(given: Any) -> Any:
    """`messages`, or a `prompt` of text and parts, as the spec's own (a list, as given: the
    mappings and lists in it copied all the way down, `_unshared`); a text or a `Prompt` as it
    is."""
    if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Sequence):
        return given  # (a wrong shape is the conversation's to refuse, with its own message)
    return [_unshared(item) for item in given]


def _unshared(value: Any) -> Any:
    """`value` with every mapping (as a dict), list and tuple in it copied, all the way down;
    anything else as it is: a text, a frozen `Message` or part, which nothing can change (a
    deep copy of a long conversation's `Message` turns, made on every call, cost most of a
    millisecond)."""
    if isinstance(value, Mapping):
        return {key: _unshared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unshared(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_unshared(item) for item in value)
    return value


class CallOptions(SamplingOptions, total=False):
    """What one call may set (see the module docstring: left out is the client's default); the
    sampling options (`temperature`, `stop`, ...) are `SamplingOptions`'."""

    prompt: Annotated[
        PromptLike | Prompt | None,
        Option(
            "inputs", convert=_own_list, expects="text, a list of text and parts, or an sdk.Prompt"
        ),
    ]
    """The user's request: text, text and parts (`["Total?", PDF.from_path(p)]`), or a prompt
    template with its variables (`MyPrompt(ticket=...)`: rendered for the call's output, its
    system prompt the call's, its name, version and fingerprint on the result)."""
    messages: Annotated[
        Sequence[MessageLike] | None,
        Option(
            "inputs",
            convert=_own_list,
            expects="a list of Message or {'role': ..., 'content': ...} mappings",
        ),
    ]
    """Whole conversation turns instead of a prompt."""
    system: Annotated[
        str | None, Visible(empty_ok=True), Option("inputs", "transport", convert=_none_if_empty)
    ]
    """The system prompt: text a reader sees (white space or invisible characters alone say
    nothing, as for a prompt), or `""` or `None` for none (one request, one cache key)."""
    source: Annotated[str | None, Option("inputs", "transport", "parsing")]
    """The source document: added to the prompt, and the one text every `SourceQuote` is
    checked against (a `context` key of the same name is refused)."""
    context: Annotated[Mapping[str, Any] | None, Option("parsing", convert=dict)]
    """Extra values the contract's validators receive (beside the source)."""
    max_tokens: Annotated[int, AtLeast(1), Option("transport", default=4096)]
    """The output limit of each request."""
    deadline: Annotated[
        float | None,
        Positive(),
        Between(0, LONGEST_WAIT),
        Option("attempts", expects="a number of seconds or None"),
    ]
    """Seconds the whole call may take, retries and waits included, at most a week
    (`LONGEST_WAIT`: a longer wait overflows the platform's clock; `None`: no deadline)."""
    attempt_deadline: Annotated[
        float | None,
        Positive(),
        Between(0, LONGEST_WAIT),
        Option("attempts", expects="a number of seconds or None"),
    ]
    """Seconds one request may take, at most a week (`None`: no limit)."""
    reasoning: Annotated[Reasoning | None, Option("output", "transport")]
    """Reason before the output: `"two_phase"` or `"native"` (`None`: no)."""
    abstention: Annotated[Abstention, Option("output", default="none")]
    """`"guided"`: where the document is silent, a field that may be null says so
    (`sdk.engine.kinds.guided`: what each engine can do for it); `"none"` (the default)."""
    abstention_thresholds: Annotated[
        Thresholds | str | os.PathLike[str] | Mapping[str, float] | float | None,
        Option(
            "output",
            convert=_load_thresholds,
            reads_file=True,
            expects="a Thresholds, a file's path, a number, a number per field or None",
        ),
    ]
    """Guided abstention on an engine that reports token probabilities (the embedded model):
    the thresholds `sdk eval --calibrate` wrote (a `Thresholds` or its file, read when set;
    refused at the call when calibrated for another contract: by its fingerprint, or by its name
    in a file that records none), or set by hand (`0.25` for every
    nullable copied field, `{"/carrier": 0.25}` per field); `None`: the default
    (`sdk.abstention.Thresholds.standard`)."""
    min_confidence: Annotated[float | None, Between(0, 1), Option("parsing")]
    """A value whose confidence (`Result.confidence`: calibrated when a calibration is given)
    is under it abstains, `null` with a `low_confidence` note, where the contract can hold
    `null` there, and fails the call with `LowConfidence` where it cannot (`None`: no floor).
    On a route that reports no token probabilities a note says it was not applied."""
    confidence_calibration: Annotated[
        Calibration | str | os.PathLike[str] | None,
        Option(
            "parsing",
            convert=_load_calibration,
            expects="a Calibration, a file's path or None",
            reads_file=True,
        ),
    ]
    """Maps each value's confidence to the probability of being right (`sdk.calibration`: the
    file `sdk eval --calibrate-confidence` writes, read when set; refused at the call when
    fitted for another contract or another model, `CalibrationMismatch`)."""
    cache: Annotated[
        Cache | bool | None,
        Option("call", convert=cache_of, expects="an sdk.cache store, True, False or None"),
    ]
    """A response cache (`sdk.cache`): `True` is a `SQLiteCache` at its default path, `None` or
    `False` none (the default)."""
    runaway: Annotated[
        RunawayBound | None,
        Option("call", default=DEFAULT_RUNAWAY, expects="an sdk.RunawayBound or None"),
    ]
    """Streaming: stop a reply whose tail is a run of whitespace or one piece repeated past
    this bound (`RunawayOutput`, retried with feedback); `None` never stops one. Default:
    `sdk.RunawayBound()` (64 whitespace characters, or a piece repeated over 240)."""
    accept_weakened_schema: Annotated[bool, Option("transport", default=False)]
    """Send a schema the provider would weaken with no check able to restore the promise (a
    map field where every object is closed: only `{}` could be generated); refused with
    `UnsupportedRequest` otherwise (`sdk.schema.preflight`)."""
    extra_body: Annotated[
        Mapping[str, Any],
        Option(
            "transport", default={}, convert=_own_copy, merge=_merged_extra, expects="a mapping"
        ),
    ]
    """Raw request fields for what the SDK has no option for, merged into the provider's request;
    the fields the SDK owns (schema, grammar, tools, model, messages, stream, ...) are refused."""


class ClientOptions(CallOptions, total=False):
    """A client's settings, and defaults for every call's options (`CallOptions`): what the
    constructors and `with_options` take."""

    retries: Annotated[int, AtLeast(0), Option("attempts", default=2)]
    """Invalid-output retries (with feedback) per call."""
    enum_case: Annotated[EnumCase, Option("parsing", default="normalize")]
    """The parser's casing policy: `"normalize"` or `"reject"`."""
    truncation: Annotated[MaxTokensRamp | None, Option("attempts")]
    """Opt-in retries of truncated output with a larger `max_tokens`."""
    refusal_retries: Annotated[int, AtLeast(0), Option("attempts", default=0)]
    """Retries after a refusal (default none)."""
    backoff: Annotated[Backoff, Option("attempts", default=DEFAULT_BACKOFF)]
    """Transport retries: exponential backoff with full jitter, honouring `retry-after`."""
    token_budget: Annotated[int | None, AtLeast(1), Option("attempts")]
    """No retry starts that would take the tokens spent past it."""
    hooks: Annotated[
        Sequence[Hooks], Option("call", default=(), convert=tuple, expects="a list of Hooks")
    ]
    """Told of every call, attempt, reply, error and result (`sdk.hooks.Hooks`)."""
    clock: Annotated[Callable[[], float], Option("call", default=time.monotonic)]
    """What deadlines are read from (`time.monotonic`; tests pass their own)."""


@dataclass(frozen=True, slots=True)
class Declared:
    """One option's declaration, read from the TypedDicts: its annotation and its `Option`
    (`None`: a sampling option, sent to the provider as it is)."""

    name: str
    annotation: Any
    option: Option | None
    per_call: bool
    """Whether a call may set it (a `CallOptions` entry), not only a client."""


@functools.cache
def declarations() -> dict[str, Declared]:
    """Every option's declaration, by name (read once from `ClientOptions`)."""
    hints = get_type_hints(ClientOptions, include_extras=True)
    per_call = frozenset(get_type_hints(CallOptions))
    out = {}
    for name, annotation in hints.items():
        found = [m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, Option)]
        if not found and name not in SAMPLING_OPTIONS:
            raise TypeError(f"option {name!r} has no Option(...) in its declaration")
        out[name] = Declared(name, annotation, found[0] if found else None, name in per_call)
    return out


@dataclass(frozen=True, slots=True)
class Method:
    """What a call is made through: its name (for messages), whether it streams, and its own
    keyword arguments beside the options (a misspelling of one gets "did you mean")."""

    name: str
    streaming: bool
    keywords: frozenset[str] = frozenset()


_TOOL_KEYWORDS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
GENERATE: Final = Method("generate()", streaming=False)
STREAM: Final = Method("stream()", streaming=True)
CALL_TOOLS: Final = Method("call_tools()", streaming=False, keywords=_TOOL_KEYWORDS)
STREAM_TOOLS: Final = Method("stream_tools()", streaming=True, keywords=_TOOL_KEYWORDS)


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the call's first messages are made of."""

    prompt: PromptLike | Prompt | None
    messages: Sequence[MessageLike] | None
    system: str | None
    source: str | None


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """What wraps the output kind: reasoning first, abstention where the document is silent."""

    reasoning: Reasoning | None
    abstention: Abstention
    abstention_thresholds: Thresholds | None


@dataclass(frozen=True, slots=True)
class CallSpec:
    """A call's options, resolved and checked (immutable: `updated` makes a new one), with the
    projection each layer reads. A client keeps one as its defaults; each call is that one
    updated with the call's options (`for_call`)."""

    method: Method
    inputs: Inputs
    transport: Shared
    parsing: Parsing
    attempts: RetrySettings
    output: OutputOptions
    hooks: tuple[Hooks, ...]
    clock: Callable[[], float]
    cache: Cache | None
    runaway: RunawayBound | None
    # What this spec resolved last: not a setting, never compared, and never given: every spec
    # made, copied or replaced (`dataclasses.replace`, `_replaced`) starts with its own, so
    # nothing one spec kept answers for another (a call's spec asks its cache keys of its
    # client's spec's `LastKey`, which answers by the request's own objects: `LastCall.keyed`).
    last_call: LastCall = field(
        default_factory=lambda: LastCall(), init=False, compare=False, repr=False
    )

    @classmethod
    def defaults(cls) -> CallSpec:
        """Every option at its declared default."""
        return _DEFAULTS

    def updated(
        self,
        options: Mapping[str, object],
        where: str,
        keywords: frozenset[str] = frozenset(),
        taken: frozenset[str] = frozenset(),
    ) -> CallSpec:
        """This spec with `options` (client settings and call defaults) set, each checked;
        `keywords`: the caller's own, for "did you mean"; `taken`: the options the provider
        takes beyond the SDK's (`Provider.own_options`), sent as sampling options."""
        return self._with(options, where, keywords, lambda: taken, per_call=False)

    def for_call(
        self,
        options: Mapping[str, object],
        method: Method,
        taken: Callable[[], frozenset[str]] = frozenset,
    ) -> CallSpec:
        """The spec of one call through `method`: these defaults with the call's options;
        `taken` gives the provider's own options (`Provider.own_options`), asked only for a
        name that is not one of the SDK's (a call's options rarely are)."""
        if not options:
            if self.method == method:
                return self
            return self.last_call.keyed(_replaced(self, {"method": method}))
        kept = _as_kept(options) if options.keys() <= _keepable() else None
        spec = self.last_call.spec(method, kept) if kept is not None else None
        if spec is None:
            spec = self.last_call.keyed(
                self._with(
                    options, method.name, method.keywords, taken, per_call=True, method=method
                )
            )
            if kept is not None:
                self.last_call.keep_spec(method, kept, spec)
        return spec

    def value(self, name: str) -> Any:
        """The value of option `name` in this spec (a sampling option not set: absent)."""
        declared = declarations()[name]
        if declared.option is None:
            return self.transport.options.value(name)
        layer = declared.option.goes[0]
        return getattr(self if layer == "call" else getattr(self, layer), name)

    def _with(
        self,
        options: Mapping[str, object],
        where: str,
        keywords: frozenset[str],
        taken: Callable[[], frozenset[str]],
        per_call: bool,
        method: Method | None = None,
    ) -> CallSpec:
        """This spec with `options` checked and set: only the projections they go to are made
        again (a call gives a prompt and a source; the rest of the spec is the client's)."""
        if not options:
            return self
        known = declarations()
        layers: dict[Layer, dict[str, Any]] = {}
        sampling: dict[str, Any] = {}
        for name, value in options.items():
            declared = known.get(name)
            if declared is None and name in taken():
                sampling[name] = value  # the provider's own: it vets the value (`vet_options`)
                continue
            if declared is None or (per_call and not declared.per_call):
                raise _unknown(name, where, keywords | taken(), per_call)
            option = declared.option
            if type(value) is not str or not _takes_any_text(name):
                check(name, value, declared.annotation, where, option.expects if option else None)
            if option is None:
                sampling[name] = value
                continue
            if option.convert is not None and value is not None:
                value = option.convert(value)
            if option.merge is not None:
                value = option.merge(self.value(name), value)
            for layer in option.goes:
                layers.setdefault(layer, {})[name] = value
        changes: dict[str, Any] = layers.pop("call", {})
        for layer, given_fields in layers.items():
            changes[layer] = _replaced(getattr(self, layer), given_fields)
        if sampling:
            transport = changes.get("transport", self.transport)
            given = transport.options.updated(sampling)
            changes["transport"] = _replaced(transport, {"options": given})
        # (by identity first: the methods are module constants, and `!=` runs the dataclass's
        # `__eq__`, a Python call, on every call)
        if method is not None and method is not self.method and method != self.method:
            changes["method"] = method
        return _replaced(self, changes)


class LastCall:
    """The last call a client's spec resolved (`CallSpec.for_call`) and the first messages made
    for it (`sdk.engine.setup`), kept where the call's options are kept as given (`_as_kept`:
    text, `None`, and lists of text, images and PDFs that cannot change, so equal options
    resolve to the same spec and messages again), each of them one `_keepable` names, and the
    cache key of the last request its calls asked for (`sdk.cache.LastKey`, which every call's
    spec made from this one asks: `keyed`). A program that makes one call over and over (a
    cache hit among them) resolves it once; a call that differs from the last resolves its own
    and keeps it instead, and has the part of its key the calls share kept (another document:
    its messages and source alone are hashed). Each is replaced whole, so a thread reads one
    call's or another's, never a mix."""

    __slots__ = ("_spec", "_turns", "key")

    def __init__(self) -> None:
        self._spec: tuple[Method, dict[str, object], CallSpec] | None = None
        self._turns: tuple[object, tuple[Message, ...]] | None = None
        self.key = LastKey()
        """The response cache's key of the last request a call of this spec asked for."""

    # A spec pickled or deep-copied starts with nothing kept: what is kept holds the last
    # call's documents and contract (a class defined in a function cannot be pickled). (A
    # shallow copy shares it, as it shares every field: what is kept holds for an equal spec.)
    def __reduce__(self) -> tuple[type[LastCall], tuple[()]]:
        return LastCall, ()

    def __deepcopy__(self, memo: dict[int, object]) -> LastCall:
        return LastCall()

    def spec(self, method: Method, kept: dict[str, object]) -> CallSpec | None:
        """The spec resolved through `method` for options kept as `kept` (`_as_kept`'s), if
        they were the last call's."""
        last = self._spec
        if last is not None and last[0] is method and last[1] == kept:
            return last[2]
        return None

    def keep_spec(self, method: Method, kept: dict[str, object], spec: CallSpec) -> None:
        """Keep `spec`, resolved through `method` for options kept as `kept` (`_as_kept`'s)."""
        self._spec = (method, kept, spec)

    def keyed(self, made: CallSpec) -> CallSpec:
        """`made` (a call's spec, made from this one's: its `LastCall` its own) asking its keys
        of this spec's `key`: a call unlike the last asks for a request whose common part
        (scope, contract, settings) is the last call's, and has that part of its key kept
        (`sdk.cache.LastKey`); every call of a client's spec asks of one."""
        made.last_call.key = self.key
        return made

    def turns(self, output: object) -> tuple[Message, ...] | None:
        """The first messages made for `output` (a contract or grammar) from this spec."""
        made = self._turns
        return made[1] if made is not None and made[0] is output else None

    def keep_turns(self, output: object, inputs: Inputs, turns: tuple[Message, ...]) -> None:
        """Keep `turns`, made for `output` from `inputs`, where these are kept as given (text
        and unchanging parts, within the bounds: `sdk._values.kept`)."""
        if inputs.messages is not None:
            return
        kept = Kept()
        if kept.add(inputs.prompt) and kept.add(inputs.source) and kept.fits:
            self._turns = (output, turns)


@functools.cache
def _keepable() -> frozenset[str]:
    """The options a call `LastCall` keeps may set: the SDK's own (a provider's is vetted by
    the provider at each call) but those whose text names a file (`Option.reads_file`: a
    thresholds or calibration file fitted again is read again)."""
    return frozenset(
        name
        for name, declared in declarations().items()
        if declared.option is not None and not declared.option.reads_file
    )


def _as_kept(options: Mapping[str, object]) -> dict[str, object] | None:
    """`options` as `LastCall` keeps and compares them, where each is kept as given and they
    are within the bounds (`sdk._values.kept.Kept`: text, `None`, lists of text and parts that
    cannot change): each as given, a list as a tuple (the caller's list may change in place);
    `None` where one is not."""
    counted = Kept()
    kept: dict[str, object] = {}
    for name, value in options.items():
        if not counted.add(value):
            return None
        kept[name] = tuple(value) if type(value) is list else value
    return kept if counted.fits else None


_Frozen = TypeVar("_Frozen")


_Setters = tuple[tuple[str, Callable[[Any, Any], None], Callable[[], Any] | None], ...] | None
_SETTERS: dict[type[Any], _Setters] = {}


def _slot_setters(cls: type[Any]) -> _Setters:
    """A frozen slots dataclass's fields, the setter of each (its slot's descriptor) and, for a
    field `__init__` is not given (`init=False`), its default factory, which makes it anew for
    each copy as `__init__` does; made once a class. `None` for a class whose `__post_init__`
    checks its fields, or with a field `__init__` sets from no factory (made through `__init__`
    then, so the check runs)."""
    made = fields(cls)
    if hasattr(cls, "__post_init__") or any(
        not f.init and f.default_factory is MISSING for f in made
    ):
        return None
    return tuple((f.name, getattr(cls, f.name).__set__, _fresh(f)) for f in made)


def _fresh(made: Field[Any]) -> Callable[[], Any] | None:
    """The factory of a field `__init__` is not given (checked to have one), else `None`."""
    if made.init:
        return None
    factory = made.default_factory
    assert factory is not MISSING
    return factory


def _replaced(obj: _Frozen, changes: Mapping[str, Any]) -> _Frozen:
    """`dataclasses.replace(obj, **changes)` for the spec's frozen projections, each field
    copied through its slot (a call's options are set on four projections: `replace` walked
    each one's fields and went through `__init__`'s `object.__setattr__` per field, most of
    what resolving a call's options cost). Every value was checked when it was set (`check`);
    a class with a `__post_init__` check is made through `__init__`, so that check runs."""
    cls: type[Any] = type(obj)
    try:
        setters = _SETTERS[cls]
    except KeyError:
        setters = _SETTERS[cls] = _slot_setters(cls)
    if setters is None:
        return replace(obj, **changes)  # type: ignore[type-var]
    new: _Frozen = object.__new__(cls)
    for name, set_slot, fresh in setters:
        if fresh is not None:
            set_slot(new, fresh())
        else:
            set_slot(new, changes[name] if name in changes else getattr(obj, name))
    return new


@functools.cache
def _takes_any_text(name: str) -> bool:
    """Whether option `name` takes every `str` as it is (`str` is a member of its type, with no
    range): a call's prompt and source are then checked by their type alone (the walk of the
    declared type costs more than the rest of a call's setup)."""
    annotation = declarations()[name].annotation
    return str in union_members(annotation) and not bounds_of(annotation)


@functools.cache
def whole_number_options() -> frozenset[str]:
    """The options whose values are whole numbers alone (`int` is a member of the type, `float`
    is not: `seed`, `max_tokens`, `retries`), for readers of tables that hold integers as
    floats."""
    return frozenset(
        name for name, declared in declarations().items() if whole_numbers_only(declared.annotation)
    )


def _unknown(name: str, where: str, keywords: frozenset[str], per_call: bool) -> TypeError:
    """The error of a name that is not an option here (a setting given to a call, a typo)."""
    declared = declarations().get(name)
    if per_call and declared is not None and not declared.per_call:
        return TypeError(
            f"{where} got an unexpected option {name!r}: it is a client setting, given when "
            f"the client is made or to client.with_options({name}=...)"
        )
    names = frozenset(n for n, d in declarations().items() if d.per_call or not per_call)
    hint = did_you_mean(name, names | keywords)
    return TypeError(
        f"{where} got an unexpected option {name!r}"
        + (hint or "; raw request fields go in extra_body={...}")
    )


def _built(values: Mapping[str, Any], method: Method) -> CallSpec:
    """A spec from every option's value: each goes to the projections its `Option` names."""
    layers: dict[Layer, dict[str, Any]] = {layer: {} for layer in get_args(Layer)}
    sampling: dict[str, Any] = {}
    for name, value in values.items():
        declared = declarations().get(name)  # absent: a provider's own option
        option = declared.option if declared is not None else None
        if option is None:
            sampling[name] = value
            continue
        for layer in option.goes:
            layers[layer][name] = value
    return CallSpec(
        method=method,
        inputs=Inputs(**layers["inputs"]),
        transport=Shared(**layers["transport"], options=Sampling.of(sampling)),
        parsing=Parsing(**layers["parsing"]),
        attempts=RetrySettings(**layers["attempts"]),
        output=OutputOptions(**layers["output"]),
        **layers["call"],
    )


def _defaults() -> CallSpec:
    values = {name: d.option.default for name, d in declarations().items() if d.option}
    return _built(values, GENERATE)


_DEFAULTS: Final = _defaults()
