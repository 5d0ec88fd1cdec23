"""Every shared promise holds for every output kind on every provider configuration.

The fault matrix (`test_fault_matrix.py`) proves the provider boundary: every fault comes back
typed. This matrix proves the call engine above it: each promise below, for each output kind
(a contract, a top-level list, a union, a grammar's sentence, tool calls, two-phase reasoning
around a contract), on each provider configuration (Anthropic, OpenAI Responses and Chat and
Gemini through their official clients, llama.cpp, vLLM and Ollama over HTTP, `TestProvider`, and
a `FallbackProvider` whose primary is down), through each way of calling (`generate`/
`call_tools`, `stream`/`stream_tools`, sync and async):

1. the lifecycle: hooks and OpenTelemetry spans for the call and every attempt, each attempt's
   span naming the provider and model it went to, every span ended, one terminal hook;
2. an error carries every attempt and their usage (`attempts` == requests made);
3. stop reason first: a cut or refused reply is `TruncatedOutput` / `RefusedOutput` even when
   its text is a valid value;
4. what a stream shows is what the result holds: snapshots say their attempt, list items are
   validated exactly as the result (the absent-null rule of strict dialects included);
5. options: a name that is not an option, and a sampling option the provider does not take, are
   a `TypeError` before anything is sent (with "did you mean"); `extra_body` may not touch what
   the SDK owns; `context` may not replace the source;
6. a request the provider refuses before sending, and a stream the caller abandons, still end
   the call's hooks and spans.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contracts import Decision
from contracts import Sentiment
from sdk import PDF
from sdk import AsyncStructuredClient
from sdk import Backoff
from sdk import Contract
from sdk import Grammar
from sdk import Partial
from sdk import PartialToolCall
from sdk import ProviderError
from sdk import RefusedOutput
from sdk import RetriesExhausted
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk import TextSnapshot
from sdk import Tool
from sdk import TruncatedOutput
from sdk import UnsupportedRequest
from sdk.hooks import CallInfo
from sdk.hooks import Hooks
from sdk.telemetry import OpenTelemetryHooks
from tests import tool_wire
from tests.promise_wire import SETUPS
from tests.promise_wire import Say
from tests.promise_wire import Setup
from tests.wire_support import DECISION

CALLS = ["generate", "stream", "agenerate", "astream"]
BAD_DECISION = {**DECISION, "answer": "maybe"}
YES_NO = Grammar("YesNo", lark='start: "yes" | "no"')
TOOLS = [Tool(tool_wire.GetWeather), Tool(tool_wire.LookupOrder)]
SENTIMENT = {"reasoning": "Praise with no complaint.", "sentiment": "positive", "score": 0.9}


@dataclass(frozen=True)
class Kind:
    """An output kind: what is asked for, and the replies that are good, bad and cut for it."""

    name: str
    output: Any
    good: Say
    bad: Say
    working: bool = False
    """Two-phase reasoning: a working reply comes first."""

    @property
    def tools(self) -> bool:
        return self.name == "tools"

    def supported(self, setup: Setup) -> bool:
        return (self.name != "grammar" or setup.grammar) and (not self.tools or setup.tools)

    def script(self, *replies: Say) -> list[Say]:
        return [Say("Let me work it out: 12 days is within 30."), *replies] if self.working else [
            *replies]  # fmt: skip


def _doc(value: Any) -> str:
    return json.dumps(value)


KINDS = [
    Kind("contract", Decision, Say(_doc(DECISION)), Say(_doc(BAD_DECISION))),
    Kind("list", list[Decision], Say(_doc({"items": [DECISION, DECISION, DECISION]})),
         Say(_doc({"items": [DECISION, BAD_DECISION]}))),
    Kind("union", Decision | Sentiment, Say(_doc({"value": SENTIMENT})),
         Say(_doc({"value": {**SENTIMENT, "sentiment": "meh"}}))),
    Kind("grammar", YES_NO, Say("yes"), Say("maybe")),
    Kind("tools", None, Say(calls=(tool_wire.PARIS, tool_wire.ORDER)),
         Say(calls=(tool_wire.BAD_UNIT,))),
    Kind("two_phase", Decision, Say(_doc(DECISION)), Say(_doc(BAD_DECISION)), working=True),
]  # fmt: skip

CASES = [
    pytest.param(setup, kind, call, id=f"{setup.name}-{kind.name}-{call}")
    for setup in SETUPS
    for kind in KINDS
    if kind.supported(setup)
    for call in CALLS
]


# --- watching a call ---


class Lifecycle(Hooks):
    """Records every hook, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.attempt_providers: list[tuple[str, str | None]] = []

    def on_call(self, call: CallInfo) -> None:
        self.events.append(("call",))

    def before_request(self, call: CallInfo, request: Any, attempt: int) -> None:
        self.events.append(("request", attempt))
        self.attempt_providers.append((call.provider, call.model))

    def after_attempt(self, call: CallInfo, attempt: int, error: Any) -> None:
        self.events.append(("attempt over", attempt))

    def on_result(self, call: CallInfo, result: Any) -> None:
        self.events.append(("result",))

    def on_failure(self, call: CallInfo, error: StructuredOutputError) -> None:
        self.events.append(("failure", type(error).__name__))

    def on_cancel(self, call: CallInfo, attempts: Any) -> None:
        self.events.append(("cancel",))

    def check(self, attempts: int, terminal: str) -> None:
        """One call, `attempts` attempts each opened and closed in turn, one terminal hook."""
        opened = [e[1] for e in self.events if e[0] == "request"]
        closed = [e[1] for e in self.events if e[0] == "attempt over"]
        assert self.events[0] == ("call",)
        assert opened == closed == list(range(1, attempts + 1)), self.events
        terminals = [e for e in self.events if e[0] in ("result", "failure", "cancel")]
        assert [e[0] for e in terminals] == [terminal] and self.events[-1] == terminals[0]


@dataclass
class Watched:
    provider: Any
    server: Any
    hooks: Lifecycle
    spans: InMemorySpanExporter
    shown: list[Any]

    def client(self, call: str, **options: Any) -> Any:
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(self.spans))
        hooks = [self.hooks, OpenTelemetryHooks(tracer.get_tracer("matrix"))]
        settings: dict[str, Any] = {"hooks": hooks, "backoff": Backoff(retries=1, initial=0.0,
                                                                      maximum=0.0)}  # fmt: skip
        settings.update(options)
        if call.startswith("a"):
            return AsyncStructuredClient(self.provider, **settings, sleep=_no_wait)
        return StructuredClient(self.provider, **settings, sleep=lambda _: None)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())


async def _no_wait(_: float) -> None:
    return None


def _watch(setup: Setup, kind: Kind, script: list[Say], call: str) -> Watched:
    provider, server = setup.build(script, sync=not call.startswith("a"),
                                   grammar=kind.name == "grammar")  # fmt: skip
    return Watched(provider, server, Lifecycle(), InMemorySpanExporter(), [])


def _run(watched: Watched, kind: Kind, call: str, **options: Any) -> Any:
    """Make the call; what it returns (a stream's last item), its shown items in `watched`."""
    client = watched.client(call, **{k: options.pop(k) for k in ("retries",) if k in options})
    arguments: dict[str, Any] = {"prompt": "Approve invoice INV-7781?", **options}
    if kind.working:
        arguments["reasoning"] = "two_phase"
    if kind.tools:
        method = {"generate": "call_tools", "stream": "stream_tools",
                  "agenerate": "call_tools", "astream": "stream_tools"}[call]  # fmt: skip
        arguments["tools"] = TOOLS
        invoke = getattr(client, method)
        target: tuple[Any, ...] = ()
    else:
        invoke = getattr(client, {"agenerate": "generate", "astream": "stream"}.get(call, call))
        target = (kind.output,)
    if call == "generate":
        return invoke(*target, **arguments)
    if call == "stream":
        items = list(invoke(*target, **arguments))
        watched.shown.extend(items[:-1])
        return items[-1]

    async def main() -> Any:
        if call == "agenerate":
            return await invoke(*target, **arguments)
        items = [item async for item in invoke(*target, **arguments)]
        watched.shown.extend(items[:-1])
        return items[-1]

    return asyncio.run(main())


def _requests(watched: Watched) -> int:
    return len(watched.server.requests)


# --- 1. the lifecycle of a call that succeeds after a retry ---


@pytest.mark.parametrize(("setup", "kind", "call"), CASES)
def test_every_attempt_is_watched_and_every_span_ends(setup: Setup, kind: Kind, call: str) -> None:
    watched = _watch(setup, kind, kind.script(kind.bad, kind.good), call)
    result = _run(watched, kind, call, retries=1)
    requests = _requests(watched)
    assert len(result.attempts) == requests  # every request made is an attempt on the result
    watched.hooks.check(requests, "result")
    spans = watched.finished()
    calls = [s for s in spans if s.name.startswith("structured_output")]
    attempts = [s for s in spans if not s.name.startswith("structured_output")]
    assert len(calls) == 1 and len(attempts) == requests  # every span opened was ended
    assert all(s.parent is not None and s.parent.span_id == calls[0].context.span_id
               for s in attempts)  # fmt: skip
    # Each attempt's span names the provider and model that attempt went to (a fallback's
    # secondary after the primary's failures), in the conventions' spelling.
    answered = [a.provider for a in result.attempts]
    expected = [{"openai_chat": "openai", "openai_responses": "openai", "gemini": "gcp.gemini"}
                .get(name, name) for name in answered]  # fmt: skip
    assert [s.attributes["gen_ai.provider.name"] for s in attempts] == expected
    assert [p for p, _ in watched.hooks.attempt_providers] == answered
    models = [s.attributes.get("gen_ai.request.model") for s in attempts]
    assert models == [m for _, m in watched.hooks.attempt_providers]
    # The call's span names the one that answered, as its response model does.
    assert calls[0].attributes["gen_ai.provider.name"] == expected[-1]  # type: ignore[index]
    assert calls[0].attributes.get("gen_ai.request.model") == models[-1]  # type: ignore[union-attr]


# --- 2. an error carries every attempt and their usage ---


@pytest.mark.parametrize(("setup", "kind", "call"), CASES)
def test_an_error_carries_every_attempt_and_their_usage(
    setup: Setup, kind: Kind, call: str
) -> None:
    watched = _watch(setup, kind, kind.script(kind.bad, kind.bad), call)
    with pytest.raises(RetriesExhausted) as info:
        _run(watched, kind, call, retries=1)
    error = info.value
    assert len(error.attempts) == _requests(watched)
    assert error.usage == sum((a.usage for a in error.attempts), type(error.usage)())
    assert error.attempts[-1].error is error.last_error and error.__cause__ is error.last_error
    watched.hooks.check(_requests(watched), "failure")
    assert len(watched.finished()) == _requests(watched) + 1


# --- 3. stop reason first ---


@pytest.mark.parametrize(("setup", "kind", "call"), CASES)
def test_a_cut_reply_is_truncated_output_even_when_it_is_valid(
    setup: Setup, kind: Kind, call: str
) -> None:
    cut = Say(kind.good.text, kind.good.calls, stop="max_tokens")
    watched = _watch(setup, kind, kind.script(cut), call)
    with pytest.raises(TruncatedOutput) as info:
        _run(watched, kind, call, retries=2)
    assert len(info.value.attempts) == _requests(watched)  # not retried by default
    if kind.good.text:
        assert info.value.text == kind.good.text  # the raw text stays on the error
    watched.hooks.check(_requests(watched), "failure")


REFUSAL_CASES = [case for case in CASES if case.values[0].refusals]  # type: ignore[union-attr]


@pytest.mark.parametrize(("setup", "kind", "call"), REFUSAL_CASES)
def test_a_refusal_is_refused_output_for_every_kind(setup: Setup, kind: Kind, call: str) -> None:
    said = "I can't help with approving that invoice."
    watched = _watch(setup, kind, kind.script(Say(said, stop="refusal")), call)
    with pytest.raises(RefusedOutput) as info:
        _run(watched, kind, call, retries=2)
    assert len(info.value.attempts) == _requests(watched)
    answered = [a for a in info.value.attempts if not isinstance(a.error, ProviderError)]
    assert len(answered) == (2 if kind.working else 1)  # a refusal is not retried by default
    if setup.name != "gemini":  # Gemini's filter says why, not what the model said
        assert said in (info.value.refusal or "")
    watched.hooks.check(_requests(watched), "failure")


# --- 4. what a stream shows is what the result holds ---

STREAMS = [case for case in CASES if case.values[2] in ("stream", "astream")]  # type: ignore[union-attr]


@pytest.mark.parametrize(("setup", "kind", "call"), STREAMS)
def test_a_stream_shows_what_the_result_holds_and_says_the_attempt(
    setup: Setup, kind: Kind, call: str
) -> None:
    watched = _watch(setup, kind, kind.script(kind.bad, kind.good), call)
    result = _run(watched, kind, call, retries=1)
    last = len(result.attempts)
    shown = watched.shown
    # Every snapshot names its attempt, whatever the kind shows (a document's `Partial`, a list's
    # items, a grammar's `TextSnapshot`, a tool call's `PartialToolCall`): the failed attempt's
    # first, then the retry's, which starts again.
    attempts = [s.attempt for s in shown]
    assert attempts == sorted(attempts) and set(attempts) <= set(range(1, last + 1))
    if kind.name != "union":  # a union's value is shown once whole, in the Result
        assert attempts[0] < attempts[-1] == last
    snapshots = [s for s in shown if isinstance(s, Partial | TextSnapshot | PartialToolCall)]
    if kind.name == "list":
        # Items are shown validated: the invalid attempt's bad item never, the valid attempt's
        # three exactly as the result holds them.
        items = [s for s in shown if isinstance(s, Decision)]
        assert items[-3:] == result.value and len(items) == 1 + 3
        assert [item.attempt for item in items] == [attempts[0], last, last, last]
    elif kind.name == "grammar" and snapshots:
        assert snapshots[-1] == result.value and snapshots[-1].attempt == last
    elif kind.name == "tools" and snapshots:
        final = [s for s in snapshots if s.attempt == last and s.done]
        assert [s.tool for s in final] == [c.tool for c in result.calls]


class Line(Contract):
    """An order line; the note may be left out."""

    sku: str
    note: str = ""


NULLABLE = ["openai_chat", "openai_responses", "llamacpp", "ollama", "test"]


@pytest.mark.parametrize("name", NULLABLE)
@pytest.mark.parametrize("call", ["stream", "astream"])
def test_streamed_items_follow_the_absent_null_rule_of_the_dialect(name: str, call: str) -> None:
    # Strict dialects make every property required and write `null` for an absent one; the
    # result drops such a null, and so must every streamed item.
    from sdk.schema.dialects import OPENAI_STRICT

    setup = next(s for s in SETUPS if s.name == name)
    lines = [{"sku": "A-1", "note": None}, {"sku": "B-2", "note": "fragile"},
             {"sku": "C-3", "note": None}]  # fmt: skip
    kind = Kind("list", list[Line], Say(_doc({"items": lines})), Say(""))
    provider, server = setup.build([kind.good], sync=call == "stream")
    if name == "test":
        provider.codec.profile = type(provider.codec.profile)(
            provider.codec.profile.family, OPENAI_STRICT, tools=True
        )  # a test double speaking a strict dialect
    watched = Watched(provider, server, Lifecycle(), InMemorySpanExporter(), [])
    result = _run(watched, kind, call)
    assert [line.sku for line in result.value] == ["A-1", "B-2", "C-3"]
    assert [s for s in watched.shown if isinstance(s, Line)] == result.value


# --- 5. options ---


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
@pytest.mark.parametrize("call", CALLS)
def test_a_misspelled_option_is_a_type_error_before_sending(setup: Setup, call: str) -> None:
    kind = KINDS[0]
    watched = _watch(setup, kind, [kind.good], call)
    with pytest.raises(TypeError, match=r"'temprature'.*did you mean 'temperature'"):
        _run(watched, kind, call, temprature=0)
    assert _requests(watched) == 0 and watched.hooks.events == []


# What each provider's API does not take, of the SDK's sampling options.
NOT_TAKEN = {"anthropic": "seed", "openai_responses": "stop", "openai_chat": "top_k",
             "gemini": "repeat_penalty", "fallback": "seed"}  # fmt: skip
# A value of the option's own type, so that what is refused is the option, not its value.
WELL_TYPED = {"anthropic": 1, "openai_responses": "END", "openai_chat": 1, "gemini": 1.1,
              "fallback": 1}  # fmt: skip


@pytest.mark.parametrize("setup", [s for s in SETUPS if s.name in NOT_TAKEN],
                         ids=lambda s: s.name)  # fmt: skip
def test_an_option_the_provider_does_not_take_is_refused_naming_it(setup: Setup) -> None:
    kind = KINDS[0]
    watched = _watch(setup, kind, [kind.good], "generate")
    with pytest.raises(TypeError, match=f"does not take the option '{NOT_TAKEN[setup.name]}'"):
        _run(watched, kind, "generate", **{NOT_TAKEN[setup.name]: WELL_TYPED[setup.name]})
    assert _requests(watched) == 0


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
@pytest.mark.parametrize("field", ["messages", "model", "stream"])
def test_extra_body_may_not_replace_what_the_sdk_owns(setup: Setup, field: str) -> None:
    kind = KINDS[0]
    watched = _watch(setup, kind, [kind.good], "generate")
    with pytest.raises(ValueError, match=f"extra_body may not set '{field}'"):
        _run(watched, kind, "generate", extra_body={field: "x"})
    assert _requests(watched) == 0


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
def test_context_may_not_replace_the_source(setup: Setup) -> None:
    kind = KINDS[0]
    watched = _watch(setup, kind, [kind.good], "generate")
    with pytest.raises(ValueError, match="context may not hold 'source'"):
        _run(watched, kind, "generate", source="the real document",
             context={"source": "a forged document"})  # fmt: skip
    assert _requests(watched) == 0


# --- 6. refused before sending, abandoned ---

# A content part the provider cannot read is refused when its request is built: after the call
# started, before anything is sent.
REFUSES_PDF = ["llamacpp", "ollama", "gemini"]


@pytest.mark.parametrize("name", REFUSES_PDF)
@pytest.mark.parametrize("call", CALLS)
def test_a_request_refused_before_sending_ends_the_call(name: str, call: str) -> None:
    setup = next(s for s in SETUPS if s.name == name)
    kind = KINDS[0]
    watched = _watch(setup, kind, [kind.good], call)
    document = PDF(url="https://example.com/invoice.pdf")
    with pytest.raises(UnsupportedRequest):
        _run(watched, kind, call, prompt=["Approve this invoice?", document])
    assert _requests(watched) == 0
    assert [e[0] for e in watched.hooks.events] == ["call", "request", "attempt over", "failure"]
    assert len(watched.finished()) == 2  # the call's span and the attempt's, both ended


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
@pytest.mark.parametrize("call", ["stream", "astream"])
def test_an_abandoned_stream_ends_its_call(setup: Setup, call: str) -> None:
    kind = KINDS[0]
    watched = _watch(setup, kind, [kind.good], call)
    client = watched.client(call)
    if call == "stream":
        stream = client.stream(Decision, prompt="Approve?")
        next(iter(stream))
        stream.close()
    else:

        async def main() -> None:
            stream = client.stream(Decision, prompt="Approve?")
            await anext(stream)
            await stream.aclose()

        asyncio.run(main())
    assert watched.hooks.events[-1] == ("cancel",)
    spans = watched.finished()  # the call's and every attempt's, the one in flight included
    assert len(spans) == 1 + _requests(watched)
    assert [s.attributes.get("sdk.cancelled") for s in spans if s.name.startswith("struct")] == [
        True]  # fmt: skip


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
def test_a_stream_never_iterated_starts_nothing(setup: Setup) -> None:
    kind = KINDS[0]
    watched = _watch(setup, kind, [kind.good], "stream")
    stream: Iterator[Any] = watched.client("stream").stream(Decision, prompt="Approve?")
    del stream
    assert watched.hooks.events == [] and _requests(watched) == 0
