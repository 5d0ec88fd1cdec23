"""`build_request`, `read_reply` and `follow_up`: one call's steps without its connection.

Each function starts the call a client would (`sdk.engine.setup`: the call spec resolved and
checked, the output kind, every preflight before anything is built), on the provider family's
real provider and client talking to memory (`sdk.wire._memory`), and does one step of it:

- `build_request`: the request the call's next attempt sends, as the client sends it;
- `read_reply`: a reply to it (the JSON body, or the generated text with its finish reason)
  judged by the attempts machine, as the call's last attempt: the `Result`, or the typed error
  a live call raises (with its attempt and usage);
- `follow_up`: the messages a live call's re-ask sends after that reply (the conversation and
  the feedback on what was wrong), for the next `build_request`.

Retries are the caller's: it sends the follow-up's request and reads its reply in turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import TypedDict
from typing import Unpack
from typing import get_type_hints

from sdk._tools import Tool
from sdk._tools import ToolOffer
from sdk._values.declared import check
from sdk._values.declared import check_keywords
from sdk._values.declared import did_you_mean
from sdk._values.records import Usage
from sdk.engine.attempts import Attempts
from sdk.engine.attempts import Decision
from sdk.engine.attempts import Done
from sdk.engine.attempts import Fail
from sdk.engine.attempts import Retry
from sdk.engine.attempts import Send
from sdk.engine.kinds.tools import check_tools
from sdk.engine.options import CallSpec
from sdk.engine.options import Method
from sdk.engine.retry import Backoff
from sdk.engine.setup import start_call
from sdk.engine.setup import start_tools_call
from sdk.errors import ProviderError
from sdk.errors import UnsupportedRequest
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._drivers import built
from sdk.providers._provider import Provider
from sdk.stop_reason import StopReason
from sdk.wire._memory import exchanged
from sdk.wire._memory import memory_provider
from sdk.wire._values import Item
from sdk.wire._values import WireRequest

__all__ = ["build_request", "first_request", "follow_up", "read_reply", "started"]

_WHERE = "sdk.wire"
_NO_TRANSPORT_RETRIES = Backoff(retries=0)
_REFUSED_OPTIONS = {
    "reasoning": "two-phase and native reasoning take more than one request per answer",
    "cache": "the response cache belongs to a client",
}
_TOOL_OPTIONS = {
    "tools": "the tools",
    "tool_choice": "the choice=",
    "parallel_tool_calls": "the parallel=",
}
"""`call_tools`' keywords, which `sdk.wire` takes in its output, a `ToolOffer` (and where)."""


def build_request(
    provider: str,
    output: Any,
    item: Item | str | Mapping[str, Any],
    *,
    settings: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    stream: bool = False,
) -> WireRequest:
    """The request a client of `provider` (a family's name: `"anthropic"`, `"openai"`,
    `"vllm"`, ...; `settings`: its provider's constructor arguments, `model=` and the like, and
    `base_url=`) sends to ask for `output` (a contract, a list or union of contracts, a
    `Grammar`, or tools: a `ToolOffer`, whose `choice` and `parallel` are `call_tools`'
    `tool_choice` and `parallel_tool_calls`, or a list of `Tool`) about `item` (an `Item`, a
    prompt's text, or a mapping of `Item`'s fields), with the call `options` a client takes
    (`max_tokens`, `temperature`, `extra_body`, ...): every check a live call makes before
    sending is made (`TypeError`, `ValueError`, `UnsupportedRequest`,
    `ControlTokenInContent`). `stream`: the streamed form.
    """
    sending = memory_provider(provider, settings or {})
    request = _sent(_started(sending, output, item, options, retries=0, streaming=stream)).request
    exchange = built(sending, request, stream=stream)
    if exchange.then is not None:
        raise UnsupportedRequest(
            f"{sending.name} asks its server before this request ({exchange.route}): its chat "
            "template or special tokens (not learned for this conversation's shape), or the "
            "token ids of content holding a control token's text (kept as text). Pass "
            "learned= (a LlamaCppProvider's `learned`, after a call of this shape) in the "
            "settings, or build with mode='openai' and control_tokens='allow', or "
            "prompt_template= and control_tokens='allow'",
            supported=["llamacpp with learned=, or mode='openai' or prompt_template= with "
                       "control_tokens='allow'"],
        )  # fmt: skip
    with exchanged() as record:
        try:
            if stream:
                for _ in sending.stream(request):
                    pass
            else:
                sending.complete(request)
        except ProviderError:
            if not record.requests:
                raise
    assert record.requests
    return record.requests[-1]


class ReplyKeywords(TypedDict, total=False):
    """The keywords `read_reply` and `follow_up` take beside the reply."""

    finish_reason: str | None
    """With the generated text: its finish reason as the provider or engine spells it."""
    usage: Usage | None
    """With the generated text: the tokens it took."""
    settings: Mapping[str, Any] | None
    """The provider's constructor arguments (as for `build_request`)."""
    options: Mapping[str, Any] | None
    """The call options (as for `build_request`)."""


def read_reply(
    provider: str,
    output: Any,
    item: Item | str | Mapping[str, Any],
    reply: Mapping[str, Any] | bytes | str,
    **keywords: Unpack[ReplyKeywords],
) -> Any:
    """The decision a live call makes on `reply` to the request `build_request` built with the
    same arguments, as its last attempt: the `Result` (`ToolCalls` for tools), or the typed
    error raised (`TruncatedOutput`, `RefusedOutput`, `InvalidJSON`, `SchemaViolation`,
    `CheckFailed`, `ProviderError` for a body the client cannot read, ...), carrying the
    attempt and its usage. `reply`: the reply's JSON body (a mapping, or its bytes), or the
    generated text (a `str`) with its `finish_reason` as the provider or engine spells it
    (`"stop"`, `"length"`, `"end_turn"`, ...) and the tokens it took (`usage`, which a token
    budget and the result's cost read; a body says its own). `settings` and `options`: as for
    `build_request`."""
    check_keywords(keywords, ReplyKeywords, "read_reply()")
    _check_reply_values(keywords, "read_reply()")
    _, decision = _decided(provider, output, item, reply, keywords)
    if isinstance(decision, Fail):
        raise decision.error
    assert isinstance(decision, Done)  # no retry is left to take
    return decision.result


def follow_up(
    provider: str,
    output: Any,
    item: Item | str | Mapping[str, Any],
    reply: Mapping[str, Any] | bytes | str,
    **keywords: Unpack[ReplyKeywords],
) -> tuple[Message, ...]:
    """The messages a live call sends when it asks again after `reply` (the arguments as for
    `read_reply`): the item's conversation and the feedback on what was wrong with the reply,
    which replaces any earlier feedback. Pass them as `Item(messages=..., source=...,
    system=...)` to `build_request` for the re-ask. A reply a live call would not ask again
    after raises its error as `read_reply` does (a truncation, a refusal, a transport fault);
    a valid reply is a `ValueError` (there is nothing to ask again)."""
    check_keywords(keywords, ReplyKeywords, "follow_up()")
    _check_reply_values(keywords, "follow_up()")
    machine, decision = _decided(provider, output, item, reply, keywords, retries=1)
    if isinstance(decision, Fail):
        raise decision.error
    if isinstance(decision, Done):
        raise ValueError("the reply is valid: there is nothing to ask again")
    return _sent(machine).request.messages


def _check_reply_values(keywords: ReplyKeywords, where: str) -> None:
    """Refuse a `finish_reason` or `usage` of another type than `ReplyKeywords` declares (a
    row's plain mapping for `usage`), naming it: they are used as given (`settings` and
    `options` are checked where they are read)."""
    for name, value in keywords.items():
        if name in ("finish_reason", "usage"):
            check(name, value, _REPLY_TYPES[name], where)


_REPLY_TYPES = get_type_hints(ReplyKeywords)


# --- the call's steps ---


def _decided(
    provider: str,
    output: Any,
    item: Item | str | Mapping[str, Any],
    reply: Mapping[str, Any] | bytes | str,
    keywords: ReplyKeywords,
    retries: int = 0,
) -> tuple[Attempts, Decision]:
    """The call started on `provider`'s family, and its machine's decision on `reply`."""
    sending = memory_provider(provider, keywords.get("settings") or {})
    options = keywords.get("options")
    machine = _started(sending, output, item, options, retries=retries, streaming=False)
    finish_reason, usage = keywords.get("finish_reason"), keywords.get("usage")
    decision = _judged(machine, sending, reply, finish_reason, usage)
    if isinstance(decision, Fail) and isinstance(reply, str) and finish_reason is None:
        # Not success, as a live call's unknown stop is not; but the likely cause is ours.
        decision.error.add_note(
            "the text came without its finish_reason: pass the one the engine reported "
            '(finish_reason="stop", "length", ...)'
        )
    return machine, decision


def _started(
    provider: Provider,
    output: Any,
    item: Item | str | Mapping[str, Any],
    options: Mapping[str, Any] | None,
    *,
    retries: int,
    streaming: bool,
) -> Attempts:
    """The call a client would start (every check made), with `retries` invalid-output
    retries and no transport retries (the caller resends)."""
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(
            f"options must be a mapping of call options (max_tokens=, temperature=, ...), not "
            f"{type(options).__name__}"
        )
    given = dict(options or {})
    for name, why in _REFUSED_OPTIONS.items():
        if given.get(name) not in (None, False):
            raise ValueError(f"{_WHERE} does not take {name}=: {why}")
    for name, field in _TOOL_OPTIONS.items():
        if name in given:
            # (`call_tools`' keywords; as a raw field, `extra_body` refuses them: the SDK's)
            raise TypeError(
                f"{_WHERE} got an unexpected option {name!r}: the tools are offered by the "
                f"output, so give it as {field} of a ToolOffer: output=ToolOffer((Tool(A), "
                "Tool(B)), choice=Tool(A), parallel=False) (from sdk.providers import "
                "ToolOffer; a list of Tool is offered with choice='auto')"
            )
    inputs = _item(item).inputs()
    settings = {**given, "retries": retries, "backoff": _NO_TRANSPORT_RETRIES}
    spec = CallSpec.defaults().updated(settings, _WHERE)
    return started(spec, provider, output, inputs, Method(_WHERE, streaming=streaming))


def started(
    spec: CallSpec, provider: Provider, output: Any, options: Mapping[str, Any], method: Method
) -> Attempts:
    """The call a client would start through `method` for `output` (a contract, a list or
    union of contracts, a `Grammar`, or tools), with the call's `options` (its inputs among
    them) over `spec`: every check made before anything is built."""
    offer = _offer(output)
    if offer is not None:
        return start_tools_call(spec, provider, offer, options, method)
    return start_call(spec, provider, output, options, method)


def first_request(
    spec: CallSpec, provider: Provider, output: Any, options: Mapping[str, Any], method: Method
) -> CompletionRequest:
    """The request the first attempt of that call sends (`started`): how `build_request` and a
    batch job's items build theirs."""
    return _sent(started(spec, provider, output, options, method)).request


def _item(item: Item | str | Mapping[str, Any]) -> Item:
    """The item a call asks about: an `Item`, a prompt's text, or a mapping of `Item`'s
    fields (a row: `{"prompt": ..., "source": ...}`)."""
    if isinstance(item, Item):
        return item
    if isinstance(item, str):
        return Item(prompt=item)
    if isinstance(item, Mapping):
        unknown = sorted(set(item) - set(Item.__dataclass_fields__))
        if unknown:
            hint = did_you_mean(unknown[0], frozenset(Item.__dataclass_fields__))
            raise TypeError(f"an item has no field {unknown[0]!r}{hint}")
        return Item(**item)
    raise TypeError(
        f"item must be an sdk.wire.Item, a prompt's text or a mapping, not {type(item).__name__}"
    )


def _offer(output: Any) -> ToolOffer | None:
    """Tools asked for: a `ToolOffer`, or a list of `Tool` (offered under `"auto"`)."""
    if isinstance(output, ToolOffer):
        # Checked as `call_tools` checks its keywords (a choice given by the tool's name is
        # that tool, as there: sent as it is, a name is no `tool_choice` an API takes).
        return check_tools(output.tools, output.choice, output.parallel)
    if isinstance(output, Sequence) and output and all(isinstance(t, Tool) for t in output):
        return check_tools(output, "auto", None)
    return None


def _sent(machine: Attempts) -> Send:
    send = machine.send()
    if isinstance(send, Fail):  # a deadline of the options' passed
        raise send.error
    return send


def _judged(
    machine: Attempts,
    provider: Provider,
    reply: Mapping[str, Any] | bytes | str,
    finish_reason: str | None,
    usage: Usage | None,
) -> Decision:
    """The machine's decision on `reply` to the call's first request."""
    machine.start()
    with machine.abandoned_if_left():
        request = _sent(machine).request
        if isinstance(reply, str):
            # The family's word first; then any family's (llama.cpp's OpenAI route says "stop").
            stop = StopReason.from_raw(finish_reason, provider.name)
            if stop is StopReason.OTHER:
                stop = StopReason.from_raw(finish_reason)
            completion = Completion(reply, stop, finish_reason, usage or Usage())
        else:
            if isinstance(reply, Mapping):
                try:
                    body = json.dumps(reply, ensure_ascii=False).encode()
                except (TypeError, ValueError) as error:  # (a set, an object, a cycle)
                    raise TypeError(
                        f"the reply body must be a mapping of JSON values: {error}"
                    ) from error
            elif isinstance(reply, bytes):
                body = reply
            else:
                raise TypeError(
                    "reply must be the reply's JSON body (a mapping or bytes) or the generated "
                    f"text (a str), not {type(reply).__name__}"
                )
            if finish_reason is not None or usage is not None:
                raise ValueError(
                    "finish_reason and usage go with the generated text: a reply body says them"
                )
            try:
                with exchanged(body):
                    completion = provider.complete(request)
            except ProviderError as error:
                return machine.on_transport_error(error)
        decision = machine.on_reply(completion)
        assert not isinstance(decision, Retry) or decision.reason != "next phase"
        return decision
