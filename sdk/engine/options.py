"""The per-call options, declared once: `generate`, `stream`, `call_tools` and `stream_tools` on
both clients take exactly these (`**options: Unpack[CallOptions]`), and `with_options` takes them
as defaults for every call of the copy it returns.

An option left out means "the client's default"; `None` where a type allows it means "off" (so
`deadline=None` turns off, for one call, a deadline the client sets). A name that is not an
option is a `TypeError` before anything is sent, with the closest name when there is one; a
sampling option the provider does not take is refused by the provider's codec, the same way.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Final
from typing import Literal
from typing import get_type_hints

from sdk.abstention import Thresholds
from sdk.cache import Cache
from sdk.engine.conversation import MessageLike
from sdk.engine.conversation import PromptLike
from sdk.providers._profile import SAMPLING_OPTIONS
from sdk.providers._profile import SamplingOptions
from sdk.providers._profile import merge_extra

__all__ = [
    "SAMPLING_OPTIONS",
    "Abstention",
    "CallOptions",
    "Reasoning",
    "check_options",
    "check_values",
    "did_you_mean",
    "merged_defaults",
    "split_options",
]

Abstention = Literal["none", "guided"]
"""Whether a call abstains where the document is silent (`"guided"`) or not (`"none"`)."""

Reasoning = Literal["two_phase", "native"]
"""How the model reasons before the constrained output: `"two_phase"` is a first, unconstrained
call in which it works the problem through in prose, then the constrained call that transcribes
that working into the contract; `"native"` is the provider's own thinking channel before the
output (Anthropic extended thinking, OpenAI reasoning with a summary)."""


class CallOptions(SamplingOptions, total=False):
    """What one call may set (see the module docstring: left out is the client's default); the
    sampling options (`temperature`, `stop`, ...) are `SamplingOptions`'."""

    prompt: PromptLike | None
    """The user's request: text, or text and parts (`["Total?", PDF.from_path(p)]`)."""
    messages: Sequence[MessageLike] | None
    """Whole conversation turns instead of a prompt."""
    system: str | None
    """The system prompt."""
    source: str | None
    """The source document: added to the prompt, and the one text every `SourceQuote` is
    checked against (a `context` key of the same name is refused)."""
    context: Mapping[str, Any] | None
    """Extra values the contract's validators receive (beside the source)."""
    max_tokens: int
    """The output limit of each request."""
    deadline: float | None
    """Seconds the whole call may take, retries and waits included (`None`: no deadline)."""
    attempt_deadline: float | None
    """Seconds one request may take (`None`: no limit)."""
    reasoning: Reasoning | None
    """Reason before the output: `"two_phase"` or `"native"` (`None`: no)."""
    abstention: Abstention
    """`"guided"`: where the document is silent, a field that may be null says so
    (`sdk.engine.kinds.guided`: what each engine can do for it); `"none"` (the default)."""
    abstention_thresholds: Thresholds | str | os.PathLike[str] | Mapping[str, float] | float | None
    """Guided abstention on an engine that reports token probabilities (the embedded model):
    the thresholds `sdk eval --calibrate` wrote (a `Thresholds` or its file, refused when
    calibrated for another contract), or set by hand (`0.25` for every nullable copied field,
    `{"/carrier": 0.25}` per field); `None`: `sdk.abstention.DEFAULT_THRESHOLD`."""
    cache: Cache | bool | None
    """A response cache (`sdk.cache`): `True` is a `SQLiteCache` at its default path, `None` or
    `False` none (the default)."""
    extra_body: Mapping[str, Any]
    """Raw request fields for what the SDK has no option for, merged into the provider's request;
    the fields the SDK owns (schema, grammar, tools, model, messages, stream, ...) are refused."""


OPTIONS: Final = frozenset(get_type_hints(CallOptions, include_extras=False))
"""Every option's name."""


def did_you_mean(name: str, names: Sequence[str] | frozenset[str]) -> str:
    """` (did you mean 'x'?)` for the closest of `names`, or nothing."""
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_options(
    options: Mapping[str, Any], where: str, keywords: frozenset[str] = frozenset()
) -> None:
    """Refuse a name that is not a call option (`TypeError`, before anything is sent), with the
    closest option or keyword of the method (`keywords`: `tool_choice`, ...) when there is one,
    and a value of the wrong type for the options whose type is plain (numbers, text)."""
    for name in options:
        if name not in OPTIONS:
            hint = did_you_mean(name, OPTIONS | keywords)
            raise TypeError(
                f"{where} got an unexpected option {name!r}"
                + (hint or "; raw request fields go in extra_body={...}")
            )
    check_values(options, where)


def check_values(options: Mapping[str, Any], where: str) -> None:
    """Refuse a value of the wrong type for an option whose type is plain (`TypeError`)."""
    for name, value in options.items():
        check = _VALUE_CHECKS.get(name)
        if check is not None and not check[0](value):
            raise TypeError(f"{where}: {name} must be {check[1]}, not {value!r}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(value: Any) -> bool:
    return value is None or _number(value)  # positive: `RetrySettings` says so (a ValueError)


def _stop(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, Sequence) and all(isinstance(item, str) for item in value)


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


# The options whose values are plain, checked before anything is sent (a `deadline="10"` would
# fail deep in the attempts machine, a `temperature="hot"` at the provider, as a provider error).
_VALUE_CHECKS: Final[dict[str, tuple[Any, str]]] = {
    "temperature": (_number, "a number"),
    "top_p": (_number, "a number"),
    "top_k": (_whole, "a whole number"),
    "seed": (_whole, "a whole number"),
    "presence_penalty": (_number, "a number"),
    "frequency_penalty": (_number, "a number"),
    "repeat_penalty": (_number, "a number"),
    "stop": (_stop, "a string or a list of strings"),
    "constrained": (lambda value: isinstance(value, bool), "True or False"),
    "deadline": (_seconds, "a number of seconds or None"),
    "attempt_deadline": (_seconds, "a number of seconds or None"),
    "system": (_text, "a string or None"),
    "source": (_text, "a string or None"),
    "extra_body": (lambda value: isinstance(value, Mapping), "a mapping"),
}


def merged_defaults(defaults: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """A call's options over the client's defaults: the call's value wins, but for `extra_body`,
    whose fields are merged (the call's over the client's, nested mappings key by key)."""
    resolved = {**defaults, **options}
    if isinstance(defaults.get("extra_body"), Mapping) and "extra_body" in options:
        resolved["extra_body"] = merge_extra(dict(defaults["extra_body"]), options["extra_body"])
    return resolved


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SDK's own options, and the sampling options that go to the provider."""
    own = {k: v for k, v in options.items() if k not in SAMPLING_OPTIONS}
    sampling = {k: v for k, v in options.items() if k in SAMPLING_OPTIONS}
    return own, sampling
