"""From a client method's arguments to a started call: the options resolved against the client's
defaults, everything vetted before anything is sent, the output kind chosen, the attempts
machine built. All that the sync and async clients share (they differ by the `await` alone).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any
from typing import Literal
from typing import cast
from typing import get_type_hints

from sdk._tools import Tool
from sdk._tools import ToolChoice
from sdk.abstention import Thresholds
from sdk.cache import Cache
from sdk.cache import SQLiteCache
from sdk.contract import Contract
from sdk.contract import require_contract
from sdk.engine.attempts import Attempts
from sdk.engine.conversation import FEEDBACK_WHOLE_REPLY
from sdk.engine.conversation import check_text
from sdk.engine.conversation import conversation
from sdk.engine.envelope import envelope_of
from sdk.engine.kinds import Document
from sdk.engine.kinds import GrammarOutput
from sdk.engine.kinds import OutputKind
from sdk.engine.kinds import Parsing
from sdk.engine.kinds import Shared
from sdk.engine.kinds import TwoPhase
from sdk.engine.kinds.guided import Guided
from sdk.engine.kinds.tools import Tools
from sdk.engine.kinds.tools import check_tools
from sdk.engine.kinds.tools import tool_conversation
from sdk.engine.options import OPTIONS
from sdk.engine.options import CallOptions
from sdk.engine.options import check_options
from sdk.engine.options import check_values
from sdk.engine.options import did_you_mean
from sdk.engine.options import merged_defaults
from sdk.engine.options import split_options
from sdk.engine.retry import DEFAULT_BACKOFF
from sdk.engine.retry import Backoff
from sdk.engine.retry import MaxTokensRamp
from sdk.engine.retry import RetrySettings
from sdk.grammar import Grammar
from sdk.hooks import Hooks
from sdk.parsing.parser import EnumCase
from sdk.parsing.parser import validators_context
from sdk.providers._base import unsupported
from sdk.providers._provider import Provider

__all__ = ["ClientConfig", "ClientOptions", "start_call", "start_tools_call"]


class ClientOptions(CallOptions, total=False):
    """A client's settings, and defaults for every call's options (`CallOptions`): what the
    constructors and `with_options` take."""

    retries: int
    """Invalid-output retries (with feedback) per call."""
    enum_case: EnumCase
    """The parser's casing policy: `"normalize"` or `"reject"`."""
    truncation: MaxTokensRamp | None
    """Opt-in retries of truncated output with a larger `max_tokens`."""
    refusal_retries: int
    """Retries after a refusal (default none)."""
    backoff: Backoff
    """Transport retries: exponential backoff with full jitter, honouring `retry-after`."""
    token_budget: int | None
    """No retry starts that would take the tokens spent past it."""
    hooks: Sequence[Hooks]
    """Told of every call, attempt, reply, error and result (`sdk.hooks.Hooks`)."""
    clock: Callable[[], float]
    """What deadlines are read from (`time.monotonic`; tests pass their own)."""


_SETTINGS = frozenset(get_type_hints(ClientOptions)) - OPTIONS


@dataclass(frozen=True)
class ClientConfig:
    """A client's resolved settings and call defaults (immutable: `with_options` makes a new
    one)."""

    retries: int = 2
    enum_case: EnumCase = "normalize"
    truncation: MaxTokensRamp | None = None
    refusal_retries: int = 0
    backoff: Backoff = DEFAULT_BACKOFF
    token_budget: int | None = None
    hooks: tuple[Hooks, ...] = ()
    clock: Callable[[], float] = time.monotonic
    defaults: dict[str, Any] = field(default_factory=lambda: {"max_tokens": 4096})
    """Default call options (`max_tokens`, `deadline`, `temperature`, ...)."""

    @classmethod
    def of(
        cls, options: Mapping[str, Any], where: str, keywords: frozenset[str] = frozenset()
    ) -> ClientConfig:
        """A config from a constructor's keyword arguments (`keywords`: the constructor's own,
        beside the options, for "did you mean")."""
        return cls().updated(options, where, keywords)

    def updated(
        self, options: Mapping[str, Any], where: str, keywords: frozenset[str] = frozenset()
    ) -> ClientConfig:
        """This config with `options` (settings and call defaults) changed."""
        settings = {k: v for k, v in options.items() if k in _SETTINGS}
        calls = {k: v for k, v in options.items() if k not in _SETTINGS}
        for name in calls:
            if name not in OPTIONS:
                known = OPTIONS | _SETTINGS | keywords
                raise TypeError(
                    f"{where} got an unexpected option {name!r}{did_you_mean(name, known)}"
                )
        check_values(calls, where)
        if "hooks" in settings:
            settings["hooks"] = tuple(settings["hooks"])
        config = replace(self, **settings, defaults=merged_defaults(self.defaults, calls))
        config.validate()
        return config

    def validate(self) -> None:
        if self.enum_case not in ("normalize", "reject"):
            raise ValueError(f"enum_case must be 'normalize' or 'reject', not {self.enum_case!r}")
        max_tokens = self.defaults.get("max_tokens", 1)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.retry_settings(self.defaults)  # its own checks (counts, deadlines)

    def retry_settings(self, options: Mapping[str, Any]) -> RetrySettings:
        return RetrySettings(
            retries=self.retries,
            truncation=self.truncation,
            refusal_retries=self.refusal_retries,
            backoff=self.backoff,
            token_budget=self.token_budget,
            deadline=options.get("deadline"),
            attempt_deadline=options.get("attempt_deadline"),
            feedback_whole_reply=FEEDBACK_WHOLE_REPLY,
        )


def start_call(
    config: ClientConfig,
    provider: Provider,
    output: Any,
    options: Mapping[str, Any],
    where: Literal["generate()", "stream()"],
) -> Attempts:
    """A document or grammar call, vetted and started (`on_call` has run)."""
    resolved = _resolve(config, options, where)
    envelope = None if isinstance(output, Grammar) else envelope_of(output)
    if envelope is not None:
        output = envelope.contract
    elif not isinstance(output, Grammar):
        require_contract(output, where)
    turns = conversation(output, resolved.get("prompt"), resolved.get("messages"),
                         resolved.get("source"))  # fmt: skip
    parsing = _parsing(config, resolved)
    kind: OutputKind[Any] = (
        GrammarOutput(output, parsing)
        if isinstance(output, Grammar)
        else Document(cast(type[Contract], output), envelope, parsing)
    )
    if resolved.get("abstention", "none") != "none":
        kind = _guided(kind, resolved)
    return _machine(config, provider, kind, turns, resolved, where == "stream()")


def _guided(kind: OutputKind[Any], resolved: Mapping[str, Any]) -> Guided:
    """A document with guided abstention (`ValueError` for anything else)."""
    if not isinstance(kind, Document) or kind.envelope is not None:
        raise ValueError('abstention="guided" applies to a contract\'s document (not a list, '
                         "a union or a grammar)")  # fmt: skip
    Guided.check(kind)
    given: Any = resolved.get("abstention_thresholds")
    thresholds: Thresholds | None
    if isinstance(given, bool):
        raise TypeError(f"abstention_thresholds must be thresholds or a file, not {given!r}")
    if isinstance(given, (Mapping, int, float)):
        thresholds = Thresholds.fixed(given)  # set by hand
    elif given is not None and not isinstance(given, Thresholds):
        thresholds = Thresholds.load(given)
    else:
        thresholds = given
    if thresholds is not None:
        thresholds.check_contract(kind.schema.name, kind.schema.fingerprint)
    return Guided(kind, thresholds)


def start_tools_call(
    config: ClientConfig,
    provider: Provider,
    tools: Sequence[Tool],
    tool_choice: ToolChoice | str,
    parallel_tool_calls: bool | None,
    options: Mapping[str, Any],
    where: Literal["call_tools()", "stream_tools()"],
) -> Attempts:
    """A tool-call call, vetted and started."""
    resolved = _resolve(config, options, where)
    if resolved.get("abstention", "none") != "none":
        raise ValueError('abstention="guided" applies to a contract\'s document, not tool calls')
    checked, choice = check_tools(tools, tool_choice)
    turns = tool_conversation(resolved.get("prompt"), resolved.get("messages"),
                              resolved.get("source"))  # fmt: skip
    kind = Tools(checked, choice, parallel_tool_calls, _parsing(config, resolved))
    return _machine(config, provider, kind, turns, resolved, where == "stream_tools()")


# The keyword arguments of `call_tools`/`stream_tools` beside the options: a misspelling of one
# lands among the options, and its "did you mean" names it.
_TOOL_KEYWORDS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})


def _resolve(config: ClientConfig, options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The call's options over the client's defaults, checked (before anything is sent)."""
    check_options(options, where, _TOOL_KEYWORDS if "tools" in where else frozenset())
    resolved = merged_defaults(config.defaults, options)
    if resolved.get("system") is not None:
        check_text(resolved["system"], "system")
    context = resolved.get("context")
    if context is not None and not isinstance(context, Mapping):
        raise TypeError(f"context must be a mapping, not {type(context).__name__}")
    validators_context(resolved.get("source"), context)  # no `source` key in it (a bypass)
    if resolved.get("abstention", "none") not in ("none", "guided"):
        raise ValueError(
            f"abstention must be 'none' or 'guided', not {resolved.get('abstention')!r}"
        )
    reasoning = resolved.get("reasoning")
    if reasoning not in (None, "two_phase", "native"):
        raise ValueError(f"reasoning must be 'two_phase', 'native' or None, not {reasoning!r}")
    max_tokens = resolved.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a whole number of at least 1, not {max_tokens!r}")
    return resolved


def _parsing(config: ClientConfig, resolved: Mapping[str, Any]) -> Parsing:
    context = resolved.get("context")
    return Parsing(
        source=resolved.get("source"),
        context=dict(context) if context is not None else None,
        enum_case=config.enum_case,
        whole_reply=FEEDBACK_WHOLE_REPLY,
    )


def _machine(
    config: ClientConfig,
    provider: Provider,
    kind: OutputKind[Any],
    turns: Any,
    resolved: dict[str, Any],
    streaming: bool,
) -> Attempts:
    """Vet the options on every provider the call may go to, then start the attempts machine
    (which vets the output kind: a fallback list skips a provider that cannot carry it)."""
    own, sampling = split_options(resolved)
    cache_of(own.get("cache"))  # a wrong `cache=` fails before anything starts
    extra_body = dict(own.get("extra_body") or {})
    reasoning = own.get("reasoning")
    for candidate in provider.candidates():
        candidate.vet_options(sampling, extra_body)
    if reasoning == "native" and not provider.supports_native_reasoning:
        raise unsupported(
            provider.name, 'reasoning="native" (no thinking channel)', ['reasoning="two_phase"']
        )
    if reasoning == "two_phase":
        kind = TwoPhase(kind)
    shared = Shared(
        max_tokens=own["max_tokens"],
        system=own.get("system"),
        options=sampling,
        extra_body=extra_body,
        source=own.get("source"),
        reasoning=reasoning == "native",
    )
    return Attempts(
        kind,
        turns,
        shared,
        provider=provider,
        settings=config.retry_settings(own),
        hooks=config.hooks,
        streaming=streaming,
        clock=config.clock,
        cache=cache_of(own.get("cache")),
    )


def cache_of(option: Cache | bool | None) -> Cache | None:
    """The store a `cache=` option names: `True` is the default `SQLiteCache` (opened once per
    process), `None` and `False` none."""
    if option is True:
        return _default_cache()
    if option is None or option is False:
        return None
    if not all(hasattr(option, name) for name in ("get", "put", "discard")):
        raise TypeError(f"cache must be an sdk.cache store, True, False or None, not {option!r}")
    return option


@functools.cache
def _default_cache() -> Cache:
    return SQLiteCache()
