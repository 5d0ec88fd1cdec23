"""`sdk.wire`, the transport-free core, agrees with live calls on every provider codec.

For every provider family with a wire (Anthropic, OpenAI Responses and Chat and Gemini through
their official clients on a mocked transport; llama.cpp, vLLM and Ollama over httpx) and every
output kind it carries (a contract, a list, a union, a grammar's sentence, tool calls):

- the body `build_request` gives is the body the live client sent (whole and streamed), and its
  path and headers are the ones the client used, none of them a secret;
- `read_reply` on the reply the live call got makes the live decision, for the promise matrix's
  replies (valid, invalid, cut by the token limit, refused, not JSON): the same value, or the
  same typed error with the same text, stop reason and one attempt;
- `follow_up` gives the messages of the re-ask, and the request built from them is the live
  call's second request, byte for byte;

and everything it takes and gives pickles, so a process pool (or a Ray worker) runs it.
"""

from __future__ import annotations

import json
import pickle
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from pydantic import BaseModel
from pydantic import ValidationError

from contracts import Decision
from sdk import Backoff
from sdk import ControlTokenInContent
from sdk import InvalidJSON
from sdk import Prompt
from sdk import ProviderError
from sdk import Result
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk import TruncatedOutput
from sdk import UnsupportedRequest
from sdk import Usage
from sdk.providers import LlamaCppProvider
from sdk.providers import Provider
from sdk.providers import ToolOffer
from sdk.providers._llamacpp_prompt import LEARN_VOCABULARY_LIMIT
from sdk.wire import Item
from sdk.wire import WireRequest
from sdk.wire import build_request
from sdk.wire import follow_up
from sdk.wire import read_reply
from tests import promise_wire
from tests.promise_wire import WIRES
from tests.promise_wire import Say
from tests.promise_wire import Server
from tests.test_promise_matrix import KINDS
from tests.test_promise_matrix import TOOLS
from tests.test_promise_matrix import Kind
from tests.wire_support import ANTHROPIC_KEY
from tests.wire_support import DECISION
from tests.wire_support import GEMINI_KEY
from tests.wire_support import OPENAI_KEY

PROMPT = "Approve invoice INV-7781?"
SOURCE = "Invoice INV-7781: $4,180.00, vendor Acme, PO-2291."


@dataclass(frozen=True)
class Family:
    """A provider family as the live tests make it, and the same as `sdk.wire` settings."""

    name: str
    settings: dict[str, Any]
    grammar: bool
    tools: bool

    def live(self, script: list[Say], grammar: bool = False) -> tuple[Provider, Server]:
        if self.name != "llamacpp":
            setup = next(s for s in promise_wire.SETUPS if s.name == self.name)
            provider, server = setup.build(script, sync=True, grammar=grammar)
            return provider, server
        # llama.cpp's OpenAI route with the content checked by the SDK alone: the request
        # needs no answer from the server first (its native route learns the chat template).
        server = Server(WIRES["llamacpp"], script)
        http = httpx.Client(transport=httpx.MockTransport(server))
        return LlamaCppProvider("http://local.test", http_client=http, **self.settings), server


FAMILIES = [
    Family("anthropic", {"model": "claude-sonnet-4-6"}, grammar=False, tools=True),
    Family("openai_responses", {"model": "gpt-5.1-mini"}, grammar=True, tools=True),
    Family("openai_chat", {"model": "gpt-5.1-mini"}, grammar=False, tools=True),
    Family("gemini", {"model": "gemini-2.5-flash"}, grammar=False, tools=False),
    Family("llamacpp", {"mode": "openai", "control_tokens": "allow"}, grammar=False, tools=True),
    Family("vllm", {"model": "m"}, grammar=True, tools=True),
    Family("ollama", {"model": "m"}, grammar=False, tools=True),
]
WIRE_KINDS = [kind for kind in KINDS if not kind.working]


def _supported(family: Family, kind: Kind) -> bool:
    return (kind.name != "grammar" or family.grammar) and (not kind.tools or family.tools)


CASES = [
    pytest.param(family, kind, id=f"{family.name}-{kind.name}")
    for family in FAMILIES
    for kind in WIRE_KINDS
    if _supported(family, kind)
]


def _output(kind: Kind) -> Any:
    return TOOLS if kind.tools else kind.output


def _live(family: Family, kind: Kind, script: list[Say], *, stream: bool = False,
          retries: int = 0, **options: Any) -> tuple[Any, Server]:  # fmt: skip
    """The live call's outcome (its result, or the error it raised) and the server it asked."""
    provider, server = family.live(script, grammar=kind.name == "grammar")
    client = StructuredClient(provider, retries=retries)
    arguments = {"prompt": PROMPT, **options}
    try:
        if kind.tools:
            method = client.stream_tools if stream else client.call_tools
            outcome: Any = method(tools=TOOLS, **arguments)
        else:
            method = client.stream if stream else client.generate
            outcome = method(kind.output, **arguments)
        if stream:
            outcome = list(outcome)[-1]
    except StructuredOutputError as error:
        outcome = error
    return outcome, server


def _wire(family: Family, kind: Kind, reply: Any, **options: Any) -> Any:
    """`read_reply`'s decision: the result, or the error it raised."""
    try:
        return read_reply(family.name, _output(kind), Item(prompt=PROMPT, **options), reply,
                          settings=family.settings)  # fmt: skip
    except StructuredOutputError as error:
        return error


def _reply_body(family: Family, kind: Kind, say: Say, request: WireRequest) -> bytes:
    """The reply the live server gives to `request` for `say` (what `read_reply` reads)."""
    tool = request.body.get("tools", [{}])[0].get("name") if kind.name == "grammar" else None
    wire = WIRES["openai_chat"] if request.path.endswith("/chat/completions") else (
        WIRES[family.name])  # fmt: skip
    return wire(say, False, tool)[1]


# --- the request ---


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("family", "kind"), CASES)
def test_the_built_body_is_what_the_client_sends(family: Family, kind: Kind, stream: bool) -> None:
    _, server = _live(family, kind, [kind.good], stream=stream, source=SOURCE, max_tokens=300)
    built = build_request(family.name, _output(kind), Item(prompt=PROMPT, source=SOURCE),
                          settings=family.settings, options={"max_tokens": 300},
                          stream=stream)  # fmt: skip
    assert len(server.requests) == 1
    assert built.body == server.requests[0]
    assert built.method == "POST"
    assert json.loads(built.content()) == built.body


TOOL_FAMILIES = [family for family in FAMILIES if family.tools]
TOOL_KIND = next(kind for kind in WIRE_KINDS if kind.tools)


@pytest.mark.parametrize("family", TOOL_FAMILIES, ids=lambda family: family.name)
def test_a_tool_choice_goes_in_the_tool_offer_the_refusal_names(family: Family) -> None:
    # On main: `options={"tool_choice": ...}` was refused with "raw request fields go in
    # extra_body={...}", and extra_body refuses `tool_choice` in turn (the SDK's field). The
    # refusal names the route that works, a `ToolOffer` as the output, and that route builds
    # the body a live `call_tools(tool_choice=..., parallel_tool_calls=...)` sends, with the
    # choice given as the tool or, as `call_tools` takes it, by its name.
    for name, value in (("tool_choice", TOOLS[0].name), ("parallel_tool_calls", False),
                        ("tools", TOOLS)):  # fmt: skip
        refused = rf"unexpected option '{name}'.*output=ToolOffer\("
        with pytest.raises(TypeError, match=refused) as info:
            build_request(family.name, TOOLS, PROMPT, settings=family.settings,
                          options={name: value})  # fmt: skip
        assert "extra_body" not in str(info.value)
    chosen = {"tool_choice": TOOLS[0], "parallel_tool_calls": False}
    _, server = _live(family, TOOL_KIND, [TOOL_KIND.good], **chosen)
    for choice in (TOOLS[0], TOOLS[0].name):
        offer = ToolOffer(tuple(TOOLS), choice=choice, parallel=False)  # type: ignore[arg-type]
        built = build_request(family.name, offer, PROMPT, settings=family.settings)
        assert built.body == server.requests[0]


class _Headers(Server):
    """A server that keeps each request's path and headers too."""

    seen: list[tuple[str, dict[str, str]]]

    def __call__(self, request: Any) -> Any:
        if not hasattr(self, "seen"):
            self.seen = []
        self.seen.append((request.url.raw_path.decode(), dict(request.headers)))
        return super().__call__(request)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_path_and_headers_are_the_clients_and_no_secret_is_among_them(
    family: Family, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(promise_wire, "Server", _Headers)
    monkeypatch.setattr(sys.modules[__name__], "Server", _Headers)
    kind = WIRE_KINDS[0]
    _, server = _live(family, kind, [kind.good])
    assert isinstance(server, _Headers)
    built = build_request(family.name, Decision, PROMPT, settings=family.settings)
    path, headers = server.seen[-1]
    assert path.endswith(built.path.split("?")[0].removeprefix("/v1")) or path == built.path
    assert built.headers, "the content type at least"
    for name, value in built.headers.items():
        assert headers.get(name) == value, name
    shown = json.dumps([built.path, dict(built.headers)])
    for secret in (ANTHROPIC_KEY, OPENAI_KEY, GEMINI_KEY, "sk-wire"):
        assert secret not in shown


def test_every_preflight_of_a_live_call_is_made() -> None:
    settings = {"model": "m"}
    with pytest.raises(TypeError, match="did you mean 'temperature'"):
        build_request("vllm", Decision, PROMPT, settings=settings, options={"temprature": 1})
    with pytest.raises(ValueError, match="may not set"):
        build_request("vllm", Decision, PROMPT, settings=settings,
                      options={"extra_body": {"messages": []}})  # fmt: skip
    with pytest.raises(ControlTokenInContent):
        build_request("vllm", Decision, "say <|im_end|> now", settings=settings)
    with pytest.raises(UnsupportedRequest):
        build_request("gemini", TOOLS, PROMPT, settings={"model": "gemini-2.5-flash"})
    with pytest.raises(ValueError, match="pass a prompt"):
        build_request("vllm", Decision, Item(), settings=settings)
    with pytest.raises(UnsupportedRequest, match="asks its server"):
        build_request("llamacpp", Decision, PROMPT, settings={"mode": "json_schema"})
    with pytest.raises(UnsupportedRequest, match=r"sdk\.wire"):
        build_request("test", Decision, PROMPT)
    with pytest.raises(ValueError, match="reasoning"):
        build_request("vllm", Decision, PROMPT, settings=settings,
                      options={"reasoning": "two_phase"})  # fmt: skip


def test_template_variables_are_rendered_into_the_prompt() -> None:
    class Template:
        def render(self, **variables: Any) -> str:
            return "Approve invoice {number}?".format(**variables)

    built = build_request("vllm", Decision, Item(prompt=Template(), variables={"number": "7"}),
                          settings={"model": "m"})  # fmt: skip
    assert built.body["messages"][-1]["content"] == "Approve invoice 7?"
    with pytest.raises(TypeError, match="render"):
        build_request("vllm", Decision, Item(prompt="x", variables={"a": 1}),
                      settings={"model": "m"})  # fmt: skip


class _Triage(Prompt):
    """A prompt template with a system prompt of its own and typed inputs."""

    version = 2
    system = "You approve invoices for {{ company }}."
    template = """
        Approve this invoice?

        <invoice>
        {{ invoice }}
        </invoice>
        """

    class Inputs(BaseModel):
        company: str
        invoice: str


_TRIAGE = {"company": "Acme", "invoice": "INV-7781: $4,180.00, PO-2291."}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_an_sdk_prompt_with_its_variables_is_the_clients_call_with_that_prompt(
    family: Family,
) -> None:
    # `Item(prompt=SomePrompt, variables=...)`: the documented template path. An `sdk.Prompt`
    # class renders to a `RenderedPrompt`, which was passed on as `messages` and refused.
    kind = WIRE_KINDS[0]
    _, server = _live(family, kind, [kind.good], prompt=_Triage(**_TRIAGE))
    from_class = build_request(family.name, Decision, Item(prompt=_Triage, variables=_TRIAGE),
                               settings=family.settings)  # fmt: skip
    from_instance = build_request(family.name, Decision, Item(prompt=_Triage(**_TRIAGE)),
                                  settings=family.settings)  # fmt: skip
    assert from_class.body == from_instance.body == server.requests[0]
    assert "You approve invoices for Acme." in json.dumps(from_class.body)
    reply = _reply_body(family, kind, kind.good, from_class)
    result = read_reply(family.name, Decision, Item(prompt=_Triage, variables=_TRIAGE), reply,
                        settings=family.settings)  # fmt: skip
    assert isinstance(result, Result) and result.prompt == _Triage.info()


def test_variables_given_with_a_prompt_that_holds_its_inputs_are_refused() -> None:
    with pytest.raises(TypeError, match=r"holds its inputs already"):
        build_request("vllm", Decision, Item(prompt=_Triage(**_TRIAGE), variables=_TRIAGE),
                      settings={"model": "m"})  # fmt: skip
    with pytest.raises(ValidationError):  # the template's own inputs check
        build_request("vllm", Decision, Item(prompt=_Triage, variables={"company": "Acme"}),
                      settings={"model": "m"})  # fmt: skip


# --- the reply ---


def _replies(kind: Kind, family: Family) -> list[Say]:
    replies = [kind.good, kind.bad, Say(kind.good.text, kind.good.calls, stop="max_tokens")]
    if family.name in ("anthropic", "openai_responses", "openai_chat", "gemini", "vllm"):
        replies.append(Say("I can't help with that.", stop="refusal"))
    if not kind.tools and kind.name != "grammar":
        replies.append(Say('{"reasoning": "cut here'))  # not JSON
    return replies


def _same_decision(live: Any, wire: Any) -> None:
    assert type(wire) is type(live), (live, wire)
    if isinstance(live, StructuredOutputError):
        assert (wire.text, wire.stop_reason, wire.raw_stop_reason) == (
            live.text, live.stop_reason, live.raw_stop_reason)  # fmt: skip
        assert str(wire) == str(live)
        assert len(wire.attempts) == len(live.attempts) == 1
        assert wire.usage == live.usage
    else:
        assert getattr(wire, "value", None) == getattr(live, "value", None)
        assert getattr(wire, "calls", None) == getattr(live, "calls", None)
        assert (wire.stop_reason, wire.raw_stop_reason, wire.usage, wire.provider) == (
            live.stop_reason, live.raw_stop_reason, live.usage, live.provider)  # fmt: skip


@pytest.mark.parametrize(("family", "kind"), CASES)
def test_reading_a_reply_makes_the_live_decision(family: Family, kind: Kind) -> None:
    request = build_request(family.name, _output(kind), PROMPT, settings=family.settings)
    for say in _replies(kind, family):
        live, _ = _live(family, kind, [say])
        _same_decision(live, _wire(family, kind, _reply_body(family, kind, say, request)))


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.name in ("vllm", "llamacpp")],
                         ids=lambda family: family.name)  # fmt: skip
def test_text_with_its_finish_reason_makes_the_live_decision(family: Family) -> None:
    text = json.dumps(DECISION)
    settings = family.settings
    result = read_reply(family.name, Decision, PROMPT, text, finish_reason="stop",
                        settings=settings)  # fmt: skip
    assert isinstance(result, Result) and result.value.answer.value == "approve"
    with pytest.raises(TruncatedOutput) as cut:
        read_reply(family.name, Decision, PROMPT, text, finish_reason="length", settings=settings)
    assert cut.value.text == text and cut.value.raw_stop_reason == "length"
    with pytest.raises(InvalidJSON) as broken:
        read_reply(family.name, Decision, PROMPT, text[:-9], finish_reason="stop",
                   settings=settings)  # fmt: skip
    assert broken.value.text == text[:-9] and len(broken.value.attempts) == 1


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.name in ("vllm", "llamacpp")],
                         ids=lambda family: family.name)  # fmt: skip
def test_text_without_its_finish_reason_is_not_success_and_says_what_to_pass(
    family: Family,
) -> None:
    """Stop reason first: text with no finish reason is not a finished reply (the error the
    live call gives an unknown stop), and the error says which argument was missing (on main
    it said only that generation stopped with "other")."""
    text = json.dumps(DECISION)
    for read in (read_reply, follow_up):
        with pytest.raises(StructuredOutputError) as unknown:
            read(family.name, Decision, PROMPT, text, settings=family.settings)
        assert unknown.value.text == text
        notes = getattr(unknown.value, "__notes__", [])
        assert any("finish_reason" in note for note in notes), notes


@pytest.mark.parametrize(("family", "kind"), CASES)
def test_the_follow_up_request_is_the_live_re_ask(family: Family, kind: Kind) -> None:
    _, server = _live(family, kind, [kind.bad, kind.good], retries=1, source=SOURCE)
    assert len(server.requests) == 2
    first = build_request(family.name, _output(kind), Item(prompt=PROMPT, source=SOURCE),
                          settings=family.settings)  # fmt: skip
    assert first.body == server.requests[0]
    reply = _reply_body(family, kind, kind.bad, first)
    messages = follow_up(family.name, _output(kind), Item(prompt=PROMPT, source=SOURCE), reply,
                         settings=family.settings)  # fmt: skip
    again = build_request(family.name, _output(kind), Item(messages=messages, source=SOURCE),
                          settings=family.settings)  # fmt: skip
    assert again.body == server.requests[1]


def test_a_valid_reply_has_no_follow_up_and_a_cut_one_raises_its_error() -> None:
    text = json.dumps(DECISION)
    with pytest.raises(ValueError, match="nothing to ask again"):
        follow_up("vllm", Decision, PROMPT, text, finish_reason="stop", settings={"model": "m"})
    with pytest.raises(TruncatedOutput):
        follow_up("vllm", Decision, PROMPT, text, finish_reason="length", settings={"model": "m"})


# --- picklable, in other processes ---


def _decide(reply: str) -> Any:
    try:
        return read_reply("vllm", Decision, Item(prompt=PROMPT), reply, finish_reason="stop",
                          settings={"model": "m"})  # fmt: skip
    except StructuredOutputError as error:
        return error


def test_values_pickle_and_a_process_pool_reads_replies() -> None:
    request = build_request("anthropic", Decision, Item(prompt=PROMPT, source=SOURCE),
                            settings={"model": "claude-sonnet-4-6"})  # fmt: skip
    assert pickle.loads(pickle.dumps(request)) == request
    replies = [json.dumps(DECISION), json.dumps({**DECISION, "answer": "maybe"})]
    with ProcessPoolExecutor(max_workers=2) as pool:
        good, bad = pool.map(_decide, replies, timeout=300)
    assert isinstance(good, Result) and good.value == Decision.model_validate(DECISION)
    assert isinstance(bad, StructuredOutputError) and bad.text == replies[1]
    assert len(bad.attempts) == 1 and bad.attempts[0].text == replies[1]


def test_text_usage_is_the_attempts_and_the_results() -> None:
    text = json.dumps(DECISION)
    result = read_reply("vllm", Decision, PROMPT, text, finish_reason="stop",
                        usage=Usage(120, 40), settings={"model": "m"})  # fmt: skip
    assert result.usage == Usage(120, 40) and result.attempts[0].usage == Usage(120, 40)
    with pytest.raises(ValueError, match="reply body says them"):
        read_reply("vllm", Decision, PROMPT, {"choices": []}, usage=Usage(1, 1),
                   settings={"model": "m"})  # fmt: skip


def _template(request: Any) -> str:
    turns = "".join(f"<|im_start|>{m.role}\n{m.text}<|im_end|>\n" for m in request.messages)
    return f"{turns}<|im_start|>assistant\n"


@pytest.mark.parametrize("kind", [k for k in WIRE_KINDS if k.name in ("contract", "grammar")],
                         ids=lambda kind: kind.name)  # fmt: skip
def test_llamacpp_native_route_with_a_prompt_template(kind: Kind) -> None:
    settings = {"mode": "json_schema", "prompt_template": _template, "control_tokens": "allow"}
    server = Server(WIRES["llamacpp"], [kind.good])
    http = httpx.Client(transport=httpx.MockTransport(server))
    live = StructuredClient(LlamaCppProvider("http://local.test", http_client=http, **settings))
    expected = live.generate(kind.output, prompt=PROMPT)
    built = build_request("llamacpp", kind.output, PROMPT, settings=settings)
    assert built.path == "/completion" and built.body == server.requests[0]
    reply = WIRES["llamacpp"](kind.good, False, None)[1]
    assert read_reply("llamacpp", kind.output, PROMPT, reply, settings=settings).value == (
        expected.value)  # fmt: skip


def test_threads_share_the_providers_and_each_gets_its_own_exchange() -> None:
    """16 threads at once (a barrier), each building and reading its own item on the same
    in-memory providers: every request and decision is the thread's own."""
    barrier = threading.Barrier(16)

    def one(number: int) -> tuple[WireRequest, Any]:
        barrier.wait(timeout=60)
        family = FAMILIES[number % len(FAMILIES)]
        prompt = f"Approve invoice INV-{number}?"
        request = build_request(family.name, Decision, prompt, settings=family.settings)
        answer = {**DECISION, "reasoning": f"invoice {number}"}
        body = _reply_body(family, WIRE_KINDS[0], Say(json.dumps(answer)), request)
        return request, read_reply(family.name, Decision, prompt, body, settings=family.settings)

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(one, range(16), timeout=300))
    for number, (request, result) in enumerate(outcomes):
        assert f"INV-{number}?" in json.dumps(request.body)
        assert result.value.reasoning == f"invoice {number}"


class _Unreadable(Server):
    """A server whose every reply is `body`, with status 200."""

    body = b""

    def __call__(self, request: Any) -> Any:
        response = httpx2.Response if type(request).__module__.startswith("httpx2") else (
            httpx.Response)  # fmt: skip
        self.requests.append(json.loads(request.read() or b"{}"))
        return response(200, headers={"content-type": "application/json"}, content=self.body)


def _serve_only(body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test server of this module (and the promise harness's) answers `body` alone."""
    monkeypatch.setattr(_Unreadable, "body", body)
    monkeypatch.setattr(promise_wire, "Server", _Unreadable)
    monkeypatch.setattr(sys.modules[__name__], "Server", _Unreadable)


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b'{"unexpected": true}'],
                         ids=["not-json", "wrong-shape"])  # fmt: skip
@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_an_unreadable_body_is_the_live_provider_error(
    family: Family, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply body the client cannot read (a proxy's page, a body of the wrong shape) is the
    `ProviderError` the live call raises, with the body kept and one attempt."""
    _serve_only(body, monkeypatch)
    provider, server = family.live([Say("unused")])
    assert isinstance(server, _Unreadable)
    with pytest.raises(ProviderError) as live:
        StructuredClient(provider, retries=0, backoff=Backoff(retries=0)).generate(
            Decision, prompt=PROMPT
        )
    wire = _wire(family, WIRE_KINDS[0], body)
    assert type(wire) is type(live.value) and str(wire) == str(live.value)
    assert wire.body == live.value.body and len(wire.attempts) == len(live.value.attempts) == 1


def _wrong_typed(data: Any, key: str, test: Any, new: Any) -> bool:
    """Replace (in place) the first value under `key` that `test` accepts by `new(value)`."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(
        data, list) else ()  # fmt: skip
    for name, value in items:
        if name == key and test(value):
            data[name] = new(value)
            return True
        if _wrong_typed(value, key, test, new):
            return True
    return False


WRONG_TYPED = [
    pytest.param(family, kind, id=f"{family.name}-{kind.name}")
    for family in FAMILIES
    for kind in (WIRE_KINDS[0], TOOL_KIND)
    if _supported(family, kind)
]


@pytest.mark.parametrize(("family", "kind"), WRONG_TYPED)
def test_a_reply_field_of_the_wrong_type_is_the_live_provider_error(
    family: Family, kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The family's good reply with its document's text as a list of parts (what some
    OpenAI-compatible gateways send), or a tool call's name null: an official client passes
    either on as it came. On main the OpenAI and Anthropic readers let it through to the parser,
    a bare `TypeError` without the attempt, live and through `read_reply` alike; it is the
    `ProviderError` a local reader gives, with the body kept and one attempt."""
    request = build_request(family.name, _output(kind), PROMPT, settings=family.settings)
    reply = json.loads(_reply_body(family, kind, kind.good, request))
    if kind.tools:
        found = _wrong_typed(reply, "name", lambda name: name == TOOLS[0].name, lambda _: None)
    else:  # (the document is a `text` or, in a chat message and llama.cpp's, a `content`)
        found = any(_wrong_typed(reply, key, lambda text: isinstance(text, str) and
                                 '"answer"' in text, lambda text: [{"type": "text", "text": text}])
                    for key in ("text", "content"))  # fmt: skip
    assert found, reply  # (the harness found the field)
    body = json.dumps(reply).encode()
    _serve_only(body, monkeypatch)
    live, _ = _live(family, kind, [Say("unused")])
    wire = _wire(family, kind, body)
    assert isinstance(live, ProviderError), repr(live)
    assert type(wire) is type(live) and str(wire) == str(live)
    assert wire.body == live.body and len(wire.attempts) == len(live.attempts) == 1


@pytest.mark.parametrize("family", TOOL_FAMILIES, ids=lambda family: family.name)
@pytest.mark.parametrize("given", ["null", "missing"])
def test_a_tool_call_without_an_id_is_numbered_live_and_through_the_wire(
    family: Family, given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool call's id null or missing is no id, on every family (an Ollama call has none): the
    call is numbered (`call_0`), not refused with the ids of the wrong type."""
    request = build_request(family.name, TOOLS, PROMPT, settings=family.settings)
    reply = json.loads(_reply_body(family, TOOL_KIND, TOOL_KIND.good, request))
    ids = ("id", "call_id")

    def strip(data: Any) -> None:
        if isinstance(data, dict):
            for key in ids if data.get("name") in {tool.name for tool in TOOLS} else ():
                if key in data:
                    data[key] = None
            if isinstance(data.get("function"), dict):  # (a chat call: the id beside it)
                data["id"] = None
            for key in [key for key in data if data[key] is None and given == "missing"]:
                if key in ids:
                    del data[key]
        for value in data.values() if isinstance(data, dict) else data if isinstance(
                data, list) else ():  # fmt: skip
            strip(value)

    strip(reply)
    body = json.dumps(reply).encode()
    _serve_only(body, monkeypatch)
    live, _ = _live(family, TOOL_KIND, [Say("unused")])
    wire = _wire(family, TOOL_KIND, body)
    assert [call.id for call in wire.calls] == [call.id for call in live.calls]
    assert wire.calls[0].id == "call_0", wire.calls


def test_an_item_may_be_a_row_mapping() -> None:
    settings = {"model": "m"}
    row = {"prompt": PROMPT, "source": SOURCE}
    assert build_request("vllm", Decision, row, settings=settings) == build_request(
        "vllm", Decision, Item(prompt=PROMPT, source=SOURCE), settings=settings
    )
    with pytest.raises(TypeError, match="did you mean 'source'"):
        build_request("vllm", Decision, {"prompt": PROMPT, "sourc": SOURCE}, settings=settings)
    with pytest.raises(TypeError, match="item must be"):
        build_request("vllm", Decision, 5, settings=settings)  # type: ignore[arg-type]


def test_options_of_the_wrong_shape_and_a_body_that_is_not_json_are_named() -> None:
    # On main: `options=5` was a bare "'int' object is not iterable", and a reply mapping
    # holding a set a bare "Object of type set is not JSON serializable", naming neither.
    settings = {"model": "m"}
    for call in (
        lambda: build_request("vllm", Decision, PROMPT, settings=settings, options=5),  # type: ignore[arg-type]
        lambda: read_reply("vllm", Decision, PROMPT, "{}", finish_reason="stop",
                           settings=settings, options=[("max_tokens", 9)]),  # type: ignore[typeddict-item]
    ):  # fmt: skip
        with pytest.raises(TypeError, match="options must be a mapping of call options"):
            call()
    with pytest.raises(TypeError, match=r"reply body .*JSON.*set"):
        read_reply("vllm", Decision, PROMPT, {"choices": {1, 2}}, settings=settings)


def test_a_reply_keyword_of_the_wrong_type_is_refused_naming_it() -> None:
    # On main: `usage=` as a plain mapping (what a Ray row or a JSON record holds) or a word
    # was a bare "'dict' object has no attribute 'input_tokens'", and `finish_reason=["stop"]`
    # a bare "unhashable type: 'list'", naming neither.
    settings = {"model": "m"}
    text = json.dumps({"reasoning": "r", "answer": "approve", "confidence": "high"})
    for name, value in (
        ("usage", {"input_tokens": 3, "output_tokens": 4}),
        ("usage", "lots"),
        ("finish_reason", ["stop"]),
    ):
        keywords: dict[str, Any] = {"finish_reason": "stop", "settings": settings, name: value}
        for call in (read_reply, follow_up):
            with pytest.raises(TypeError, match=rf"^{call.__name__}\(\): {name} must be "):
                call("vllm", Decision, PROMPT, text, **keywords)
    usage = Usage(input_tokens=3, output_tokens=4)
    result = read_reply("vllm", Decision, PROMPT, text, finish_reason="stop", usage=usage,
                        settings=settings)  # fmt: skip
    assert result.value.answer == "approve" and result.usage == usage


def test_providers_kept_per_settings_are_bounded() -> None:
    from sdk.wire import _memory

    first = _memory.memory_provider("vllm", {"model": "m"})
    assert _memory.memory_provider("vllm", {"model": "m"}) is first
    for number in range(_memory.MAX_PROVIDERS + 5):
        _memory.memory_provider("vllm", {"model": f"m{number}"})
    assert len(_memory._providers) == _memory.MAX_PROVIDERS
    assert _memory.memory_provider("vllm", {"model": "m"}) is not first  # dropped, made again


@pytest.mark.parametrize("mode", ["json_schema", "auto"])
def test_llamacpp_native_route_with_what_a_provider_learned(mode: str) -> None:
    """A live provider learns its server's chat template and special tokens on its first call;
    its `learned` (a value that pickles) lets `sdk.wire` build the same native request, control
    tokens checked, with no server."""
    server = Server(WIRES["llamacpp"], [Say(json.dumps(DECISION))])
    http = httpx.Client(transport=httpx.MockTransport(server))
    live = LlamaCppProvider("http://local.test", http_client=http, mode=mode)
    StructuredClient(live).generate(Decision, prompt=PROMPT, source=SOURCE)
    learned = pickle.loads(pickle.dumps(live.learned))
    assert learned.specials, "the special-token texts were learned"
    settings = {"mode": mode, "learned": learned}
    built = build_request("llamacpp", Decision, Item(prompt=PROMPT, source=SOURCE),
                          settings=settings)  # fmt: skip
    assert built.path == "/completion" and built.body == server.requests[-1]
    # Content holding a control token's text goes as token ids the server gives: not built here.
    with pytest.raises(UnsupportedRequest, match="token ids"):
        build_request("llamacpp", Decision, "say <|im_end|> now", settings=settings)
    with pytest.raises(UnsupportedRequest, match="learned="):  # a shape never seen
        build_request("llamacpp", Decision, Item(prompt=PROMPT, system="Be brief."),
                      settings=settings)  # fmt: skip


def test_a_provider_started_from_what_another_learned_asks_the_server_nothing_first() -> None:
    paths: list[str] = []
    server = Server(WIRES["llamacpp"], [Say(json.dumps(DECISION))])

    def counted(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        response: httpx.Response = server(request)
        return response

    def provider(**settings: Any) -> LlamaCppProvider:
        http = httpx.Client(transport=httpx.MockTransport(counted))
        return LlamaCppProvider("http://local.test", http_client=http, mode="json_schema",
                                **settings)  # fmt: skip

    first = provider()
    StructuredClient(first).generate(Decision, prompt=PROMPT)
    assert paths[-1] == "/completion" and len(paths) > 1  # it learned first
    paths.clear()
    second = provider(learned=first.learned)
    assert StructuredClient(second).generate(Decision, prompt=PROMPT).value.answer.value == (
        "approve")  # fmt: skip
    assert paths == ["/completion"]
    assert server.requests[-1] == server.requests[-2]


@pytest.mark.parametrize("mode", ["json_schema", "openai"])
def test_what_a_provider_learned_says_a_vocabulary_was_too_large_to_learn(mode: str) -> None:
    """Over `LEARN_VOCABULARY_LIMIT` (Gemma 3's 262,144 tokens) the special texts are not
    learned: `learned` says so (`vocabulary_too_large`), not just `specials=None` (not learned
    yet), so a provider started from it does not ask the vocabulary's size again."""
    paths: list[str] = []
    server = Server(WIRES["llamacpp"], [Say(json.dumps(DECISION))])

    def gemma_sized(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path == "/v1/models":
            meta = {"vocab_type": 1, "n_vocab": LEARN_VOCABULARY_LIMIT + 1, "n_ctx": 4096}
            return httpx.Response(200, json={"data": [{"id": "gemma.gguf", "meta": meta}]})
        response: httpx.Response = server(request)
        return response

    def provider(**settings: Any) -> LlamaCppProvider:
        http = httpx.Client(transport=httpx.MockTransport(gemma_sized))
        return LlamaCppProvider("http://local.test", http_client=http, mode=mode, **settings)

    fresh = provider().learned
    assert (fresh.specials, fresh.vocabulary_too_large, fresh.no_vocabulary) == (
        None, False, False)  # fmt: skip
    first = provider()
    StructuredClient(first).generate(Decision, prompt=PROMPT, source=SOURCE)
    learned = pickle.loads(pickle.dumps(first.learned))
    assert paths.count("/v1/models") == 1
    assert (learned.specials, learned.vocabulary_too_large, learned.no_vocabulary) == (
        None, True, False)  # fmt: skip
    paths.clear()
    second = provider(learned=learned)
    result = StructuredClient(second).generate(Decision, prompt=PROMPT, source=SOURCE)
    assert result.value.answer.value == "approve"
    assert "/v1/models" not in paths  # started from what the first learned: not asked again
    assert "/tokenize" in paths  # each call checks its own content
    assert second.learned.vocabulary_too_large is True
