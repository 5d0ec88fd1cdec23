"""Settings checked where they are set, from their one declaration (issue 30 item 5, issue 34
item 3): every client setting, `with_options`, call option and job setting refuses a value of the
wrong type (`TypeError`) or out of range (`ValueError`), naming it, before anything is sent; and
the call spec those declarations resolve into is one frozen value with a projection per layer."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Any
from typing import get_type_hints

import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Backoff
from sdk import MaxTokensRamp
from sdk import StructuredClient
from sdk import Tool
from sdk._values.declared import wrong_values
from sdk.abstention import Thresholds
from sdk.batch import JobSettings
from sdk.engine.kinds import Parsing
from sdk.engine.kinds import Shared
from sdk.engine.options import GENERATE
from sdk.engine.options import STREAM
from sdk.engine.options import CallSpec
from sdk.engine.options import Inputs
from sdk.engine.options import OutputOptions
from sdk.engine.options import declarations
from sdk.engine.retry import RetrySettings
from sdk.hooks import Hooks
from sdk.providers import FallbackProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import Provider
from sdk.providers import Sampling
from sdk.providers import TestProvider
from sdk.providers import VLLMProvider
from tests.wire_support import Wire
from tests.wire_support import chat_reply
from tests.wire_support import openai_client

TEXT = json.dumps({"reasoning": "Within policy.", "answer": "approve", "confidence": "high"})

DECLARED = declarations()
CASES = [
    pytest.param(name, bad, id=f"{name}={bad!r}")
    for name, declared in sorted(DECLARED.items())
    for bad in wrong_values(declared.annotation)
]
PER_CALL = [case for case in CASES if DECLARED[case.values[0]].per_call]  # type: ignore[index]


class Heard(Hooks):
    """Whether any call started."""

    def __init__(self) -> None:
        self.calls = 0

    def on_call(self, *args: Any) -> None:
        self.calls += 1


def _client() -> tuple[StructuredClient, Wire, Heard]:
    wire, heard = Wire(chat_reply(text=TEXT)), Heard()
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    return StructuredClient(provider, hooks=[heard]), wire, heard


def _refused(name: str, bad: object, info: pytest.ExceptionInfo[Exception]) -> None:
    """The error names the setting, and its class says what was wrong: the type, or (a value
    of the right type) the range."""
    assert name in str(info.value)
    out_of_range = type(bad) in (int, float, str)
    assert isinstance(info.value, ValueError if out_of_range else TypeError), info.value


# --- the declarations ---


def test_every_option_is_declared_once_and_lands_in_a_projection_field_of_its_name() -> None:
    projections = {
        "inputs": Inputs,
        "transport": Shared,
        "parsing": Parsing,
        "attempts": RetrySettings,
        "output": OutputOptions,
        "call": CallSpec,
    }
    spec = CallSpec.defaults()
    for name, declared in DECLARED.items():
        if declared.option is None:  # a sampling option: sent to the provider as it is
            assert spec.transport.options.value(name) is None
            continue
        for layer in declared.option.goes:
            names = {field.name for field in dataclasses.fields(projections[layer])}
            assert name in names, f"{name} goes to {layer}, which has no field of that name"
        assert spec.value(name) == declared.option.default


def test_every_projection_field_is_an_option_or_says_why_not() -> None:
    # Fields filled from elsewhere: the sampling options, the call's method, the projections,
    # one constant (how much of a reply feedback sends back whole), and what a spec resolved
    # last (`LastCall`: not a setting).
    derived = {"options", "method", "inputs", "transport", "parsing", "attempts", "output",
               "whole_reply", "last_call"}  # fmt: skip
    for projection in (Inputs, Shared, Parsing, RetrySettings, OutputOptions, CallSpec):
        for field in dataclasses.fields(projection):
            assert field.name in DECLARED or field.name in derived, (projection, field.name)


def test_the_spec_is_frozen_and_a_call_never_changes_the_client_s() -> None:
    spec = CallSpec.defaults().updated({"temperature": 0.5, "retries": 1}, "test")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.attempts = spec.attempts  # type: ignore[misc]
    call = spec.for_call({"temperature": 0.0, "max_tokens": 10}, STREAM)
    assert (call.transport.options, call.transport.max_tokens) == (Sampling(temperature=0.0), 10)
    assert call.method.streaming and not spec.method.streaming
    assert spec.transport.options == Sampling(temperature=0.5) and spec.transport.max_tokens == 4096
    assert spec.for_call({}, GENERATE) is spec  # nothing to resolve: the same value


def test_a_mapping_given_as_extra_body_is_the_spec_s_own_copy_all_the_way_down() -> None:
    # The frozen spec kept the caller's nested mappings: on main, changing one after the
    # client was made changed what every later call sent ({'tag': 'changed'} was sent), and
    # a call's merged body was built from the same objects.
    given: dict[str, Any] = {"metadata": {"tag": "set"}, "logit_bias": {"50256": -100}}
    wire = Wire(chat_reply(text=TEXT), chat_reply(text=TEXT), chat_reply(text=TEXT))
    client = StructuredClient(
        OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini"), extra_body=given
    )
    configured = client.with_options(extra_body={"metadata": {"user": "u1"}})
    given["metadata"]["tag"] = "changed"
    given["logit_bias"]["50256"] = 100
    client.generate(Decision, prompt="?")
    configured.generate(Decision, prompt="?")
    per_call: dict[str, Any] = {"metadata": {"call": "c"}}
    client.generate(Decision, prompt="?", extra_body=per_call)
    assert [(b["metadata"], b["logit_bias"]) for b in wire.bodies()] == [
        ({"tag": "set"}, {"50256": -100}),
        ({"tag": "set", "user": "u1"}, {"50256": -100}),
        ({"tag": "set", "call": "c"}, {"50256": -100}),
    ]
    assert per_call == {"metadata": {"call": "c"}}  # the caller's own mapping is left as it was


def test_a_client_s_messages_or_prompt_list_is_its_own_copy() -> None:
    # The frozen spec kept the caller's list (and the mappings in it): on main, changing them
    # after the client was made changed what every later call sent.
    turns: list[Any] = [{"role": "user", "content": "Approve the taxi?"}]
    parts: list[Any] = ["Approve the taxi?"]
    provider = TestProvider([TEXT], repeat=True)
    by_messages = StructuredClient(provider, messages=turns)
    by_prompt = StructuredClient(provider).with_options(prompt=parts)
    turns[0]["content"] = "Approve everything."
    turns.append({"role": "user", "content": "And the rest."})
    parts[0] = "Approve everything."
    by_messages.generate(Decision)
    by_prompt.generate(Decision)
    sent = [[m.text for m in request.messages] for request in provider.requests]
    assert sent == [["Approve the taxi?"], ["Approve the taxi?"]]


def test_a_client_s_messages_are_its_own_copy_all_the_way_down() -> None:
    # A list of parts inside a turn's mapping, changed in place after the client was made.
    turns: list[Any] = [{"role": "user", "content": ["Approve the taxi?", "Receipt attached."]}]
    provider = TestProvider([TEXT], repeat=True)
    client = StructuredClient(provider, messages=turns)
    turns[0]["content"][0] = "Approve everything."
    turns[0]["content"].append("And the rest.")
    client.generate(Decision)
    [sent] = provider.requests[0].messages
    assert [part.text for part in sent.parts] == ["Approve the taxi?", "Receipt attached."]


def test_a_provider_s_extra_body_is_its_own_copy_all_the_way_down() -> None:
    # The provider kept the caller's nested mappings (a shallow copy): on main, changing one
    # after the provider was made changed what every later call sent ({'tag': 'changed'}).
    given: dict[str, Any] = {"metadata": {"tag": "set"}, "logit_bias": {"50256": -100}}
    wire = Wire(chat_reply(text=TEXT), chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini", extra_body=given)
    given["metadata"]["tag"] = "changed"
    given["logit_bias"]["50256"] = 100
    client = StructuredClient(provider)
    client.generate(Decision, prompt="?")
    client.generate(Decision, prompt="?", extra_body={"metadata": {"call": "c"}})
    assert [(b["metadata"], b["logit_bias"]) for b in wire.bodies()] == [
        ({"tag": "set"}, {"50256": -100}),
        ({"tag": "set", "call": "c"}, {"50256": -100}),
    ]
    assert provider.extra_body["metadata"] == {"tag": "set"}  # a call changed nothing in it


# --- bad values, wherever they are set ---


@pytest.mark.parametrize(("name", "bad"), CASES)
def test_a_bad_setting_is_refused_by_the_constructors_naming_it(name: str, bad: object) -> None:
    wire = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    for make in (StructuredClient, AsyncStructuredClient):
        with pytest.raises((TypeError, ValueError)) as info:
            make(provider, **{name: bad})
        _refused(name, bad, info)
    assert wire.requests == []


@pytest.mark.parametrize(("name", "bad"), CASES)
def test_a_bad_setting_is_refused_by_with_options_naming_it(name: str, bad: object) -> None:
    client, wire, heard = _client()
    with pytest.raises((TypeError, ValueError)) as info:
        client.with_options(**{name: bad})
    _refused(name, bad, info)
    assert "with_options()" in str(info.value)
    assert wire.requests == [] and heard.calls == 0


@pytest.mark.parametrize(("name", "bad"), PER_CALL)
def test_a_bad_call_option_is_refused_before_anything_is_sent(name: str, bad: object) -> None:
    client, wire, heard = _client()
    calls = {
        "generate": lambda: client.generate(Decision, prompt="Approve?", **{name: bad}),
        "stream": lambda: list(client.stream(Decision, prompt="Approve?", **{name: bad})),
        "call_tools": lambda: client.call_tools(
            tools=[Tool(Decision)], prompt="Decide.", **{name: bad}
        ),
    }
    for method, call in calls.items():
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        _refused(name, bad, info)
        assert f"{method}()" in str(info.value)
    assert wire.requests == [] and heard.calls == 0


def test_a_setting_is_not_a_call_option() -> None:
    # The error says where a setting goes (on main: "raw request fields go in extra_body",
    # the wrong advice for `enum_case`, `retries` and the other client settings).
    client, wire, _ = _client()
    for name, value in (("retries", 0), ("enum_case", "normalize")):
        said = rf"generate\(\) got an unexpected option '{name}'"
        with pytest.raises(TypeError, match=said) as info:
            client.generate(Decision, prompt="Approve?", **{name: value})
        assert f"with_options({name}=...)" in str(info.value)
        assert "extra_body" not in str(info.value)
    assert wire.requests == []


# --- the cases: accepted, then broken after a request was sent ---


@pytest.mark.parametrize(
    ("name", "bad", "said"),
    [
        ("top_p", 2.0, "top_p must be between 0 and 1, not 2.0"),
        ("top_p", -0.1, "top_p must be between 0 and 1, not -0.1"),
        ("temperature", -0.5, "temperature must be at least 0, not -0.5"),
        ("stop", "", "stop must be text that is not empty, or a list of such texts, not ''"),
        ("stop", ["END", ""], "stop must be text that is not empty, or a list of such texts"),
    ],
)
def test_a_sampling_option_outside_every_api_s_range_is_refused_unsent(
    name: str, bad: object, said: str
) -> None:
    # On main each reached the provider, which answered with an HTTP 400 (a ProviderError
    # after a request was sent): `top_p=2.0` and `stop=""` were sent as they were.
    client, wire, heard = _client()
    for make in (
        lambda: StructuredClient(client.provider, **{name: bad}),
        lambda: client.with_options(**{name: bad}),
        lambda: client.generate(Decision, prompt="Approve?", **{name: bad}),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            make()
    assert wire.requests == [] and heard.calls == 0
    fine = {"top_p": 1.0, "temperature": 0.0, "stop": ["END"]}[name]
    client.generate(Decision, prompt="Approve?", **{name: fine})  # the edges are taken
    assert len(wire.requests) == 1


# --- what a client's requests would carry, vetted where it is set (issue 30, item 5) ---


def _said_at_call(provider: Provider, **options: Any) -> tuple[type[Exception], str]:
    """The error a call with `options` gets through `provider` (before anything is sent)."""
    with pytest.raises((TypeError, ValueError)) as info:
        StructuredClient(provider).generate(Decision, prompt="Approve?", **options)
    return type(info.value), str(info.value)


def _refused_where_set(
    provider: Provider, said: tuple[type[Exception], str], **options: Any
) -> None:
    """Both constructors and `with_options` (of both clients) refuse `options` with `said`."""
    for make in (StructuredClient, AsyncStructuredClient):
        with pytest.raises((TypeError, ValueError)) as info:
            make(provider, **options)
        assert (type(info.value), str(info.value)) == said, make
        with pytest.raises((TypeError, ValueError)) as info:
            make(provider).with_options(**options)
        assert (type(info.value), str(info.value)) == said, make


LOCAL_AND_TEST = {
    "test": lambda: TestProvider([TEXT], repeat=True),
    "vllm": lambda: VLLMProvider("http://vllm.test", model="m"),  # no server: nothing is sent
}


@pytest.mark.parametrize("kind", sorted(LOCAL_AND_TEST))
@pytest.mark.parametrize("owned", ["model", "messages", "temperature"])
def test_an_extra_body_field_the_sdk_owns_is_refused_where_the_client_sets_it(
    kind: str, owned: str
) -> None:
    # On main the client and `with_options` took it; only `generate()` refused it.
    provider = LOCAL_AND_TEST[kind]()
    said = _said_at_call(provider, extra_body={owned: "x"})
    assert said[0] is ValueError and f"extra_body may not set {owned!r}" in said[1]
    _refused_where_set(provider, said, extra_body={owned: "x"})
    client = StructuredClient(provider, extra_body={"zz_tenant": "t-1"})  # a raw field is taken
    assert client.with_options(extra_body={"zz_tier": "paid"}).config.transport.extra_body == {
        "zz_tenant": "t-1",
        "zz_tier": "paid",
    }


def test_a_fallback_list_s_every_provider_vets_what_a_client_sets() -> None:
    # `guided_json` is vLLM's (its schema field) and the test provider's raw field;
    # `constrained` is an option the test provider takes and vLLM does not.
    alone = TestProvider([TEXT], repeat=True)
    both = FallbackProvider(
        [TestProvider([TEXT], repeat=True), VLLMProvider("http://vllm.test", model="m")]
    )
    for options, error, named in [
        ({"extra_body": {"guided_json": {}}}, ValueError, "extra_body may not set 'guided_json'"),
        ({"constrained": False}, TypeError, "vllm does not take the option 'constrained'"),
    ]:
        StructuredClient(alone, **options).with_options(**options)  # the first alone takes it
        said = _said_at_call(both, **options)
        assert said[0] is error and named in said[1]
        _refused_where_set(both, said, **options)


def test_a_token_budget_of_the_wrong_type_fails_when_the_client_is_made() -> None:
    wire = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    with pytest.raises(TypeError, match=r"StructuredClient\(\): token_budget must be a whole"):
        StructuredClient(provider, token_budget="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backoff must be a Backoff, not None"):
        StructuredClient(provider, backoff=None)  # type: ignore[arg-type]
    assert wire.requests == []


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: Backoff(retries=-1), "Backoff(): retries must be at least 0"),
        (lambda: Backoff(initial="1"), "Backoff(): initial must be a number"),
        (lambda: Backoff(maximum=float("nan")), "maximum must be a finite number"),
        (lambda: MaxTokensRamp(factor=0.5), "MaxTokensRamp(): factor must be at least 1"),
        (lambda: MaxTokensRamp(cap=0), "cap must be at least 1"),
        (lambda: JobSettings(retries=-1), "JobSettings(): retries must be at least 0"),
        (lambda: JobSettings(max_tokens="4096"), "max_tokens must be a whole number"),
        (lambda: JobSettings(enum_case="upper"), "enum_case must be 'normalize' or 'reject'"),
    ],
)
def test_retry_policies_and_job_settings_check_their_fields_when_made(make: Any, said: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(said)):
        make()


@pytest.mark.parametrize("record", [Backoff, MaxTokensRamp, JobSettings])
def test_every_field_of_a_policy_refuses_its_wrong_values(record: type) -> None:
    hints = get_type_hints(record, include_extras=True)
    for field in dataclasses.fields(record):
        for bad in wrong_values(hints[field.name]):
            with pytest.raises((TypeError, ValueError)) as info:
                record(**{field.name: bad})
            _refused(field.name, bad, info)


@pytest.mark.parametrize(
    ("keyword", "bad", "error"),
    [("sleep", None, TypeError), ("max_concurrency", 0, ValueError),
     ("max_concurrency", "8", TypeError)],
)  # fmt: skip
def test_the_constructors_own_keywords_are_checked_too(
    keyword: str, bad: object, error: type[Exception]
) -> None:
    client, _, _ = _client()
    with pytest.raises(error, match=keyword):
        AsyncStructuredClient(client.provider, **{keyword: bad})
    if keyword == "sleep":
        with pytest.raises(error, match=keyword):
            StructuredClient(client.provider, sleep=bad)  # type: ignore[arg-type]


def test_parallel_tool_calls_of_the_wrong_type_is_refused_before_sending() -> None:
    client, wire, heard = _client()
    with pytest.raises(TypeError, match="parallel_tool_calls must be True, False or None"):
        client.call_tools(tools=[Tool(Decision)], prompt="x", parallel_tool_calls="yes")  # type: ignore[arg-type]
    assert wire.requests == [] and heard.calls == 0


def test_a_call_s_options_meet_the_client_s_in_an_async_call_too() -> None:
    wire = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    client = AsyncStructuredClient(provider, temperature=0.5)

    async def run() -> None:
        with pytest.raises(TypeError, match=r"generate\(\): seed must be a whole number"):
            await client.generate(Decision, prompt="x", seed=1.5)  # type: ignore[typeddict-item]

    asyncio.run(run())
    assert wire.requests == []


# --- a thresholds file: refused when set, naming the file and the line ---


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"format": "sdk-abstention/1",\n "fields": {\n', "line 3, column 1: not JSON"),
        ('{"format": "sdk-abstention/1",\n "fields": [1, 2]}', "line 2: `fields` must be"),
        (
            '{"format": "sdk-abstention/1",\n "fields": {\n  "/a": {"threshold": "0.5"}}}',
            "line 3: field '/a' is not a threshold entry",
        ),
        (
            '{"format": "sdk-abstention/1",\n "max_false_abstention": "x", "fields": {}}',
            "line 2: `max_false_abstention` must be within [0, 1]",
        ),
        ('{"format": "sdk-abstention/1", "fields": {"/a": ' + "[" * 100_000, "nested"),
        ('["not", "thresholds"]', "not an abstention thresholds file"),
    ],
)
def test_a_malformed_thresholds_file_is_refused_when_set_naming_file_and_line(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "thresholds.json"
    path.write_text(text)
    client, wire, _ = _client()
    with pytest.raises(ValueError) as info:
        client.with_options(abstention="guided", abstention_thresholds=path)
    assert str(path) in str(info.value) and said in str(info.value)
    with pytest.raises(ValueError, match=re.escape(said)):
        Thresholds.load(os.fspath(path))
    assert wire.requests == []


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"concurrency": 0}, "concurrency must be between 1 and 10000, not 0"),
        ({"concurrency": 10_001}, "concurrency must be between 1 and 10000, not 10001"),
        ({"concurrency": "4"}, "concurrency must be a whole number or None"),
        ({"retries": -1}, "retries must be at least 0"),
        ({"base_urls": "http://a"}, "base_urls must be a list of strings"),
    ],
)
def test_a_batch_backend_spec_checks_its_fields_when_made(
    fields: dict[str, Any], said: str
) -> None:
    from sdk.batch._setup import BackendSpec

    with pytest.raises((TypeError, ValueError), match=re.escape(said)):
        BackendSpec("llamacpp", **{"base_urls": ["http://127.0.0.1:1"], **fields})


def test_the_sampling_options_travel_typed_and_frozen() -> None:
    # Below the public surface the options are a `Sampling`: typed fields a codec reads, the
    # options set by name for the profile to place, a provider's own options beside them.
    spec = CallSpec.defaults().updated({"temperature": 0.5, "stop": "END"}, "test")
    sampling = spec.transport.options
    assert (sampling.temperature, sampling.stop, sampling.seed) == (0.5, ("END",), None)
    assert sampling.items() == [("temperature", 0.5), ("stop", ("END",))]
    assert repr(sampling) == "Sampling(temperature=0.5, stop=('END',))"
    with pytest.raises(dataclasses.FrozenInstanceError):
        sampling.temperature = 1.0  # type: ignore[misc]
    own = Sampling.of({"tenant_tier": "gold", "seed": 3})
    assert (own.seed, own.own, own.value("tenant_tier")) == (3, (("tenant_tier", "gold"),), "gold")
    assert own.updated({"seed": None}).items() == [("tenant_tier", "gold")]
    assert not Sampling() and own
    assert hash(own) == hash(Sampling.of({"seed": 3, "tenant_tier": "gold"}))


def test_a_call_s_spec_is_the_one_replace_would_make_and_keeps_the_client_s_parts() -> None:
    # The call's options are set on the projections field by field through their slots
    # (`_replaced`): the spec must equal the one `dataclasses.replace` makes, and the parts
    # the call does not set stay the client's.
    client = StructuredClient(TestProvider(['{"approved": true, "reason": "ok"}']), retries=2)
    spec = client.config.for_call({"prompt": "Decide.", "source": "the text"}, GENERATE)
    config = client.config
    assert spec == dataclasses.replace(
        config,
        inputs=dataclasses.replace(config.inputs, prompt="Decide.", source="the text"),
        transport=dataclasses.replace(config.transport, source="the text"),
        parsing=dataclasses.replace(config.parsing, source="the text"),
    )
    assert spec.attempts is config.attempts and spec.output is config.output
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.inputs.source = "other"  # type: ignore[misc]


def test_a_result_made_for_a_call_equals_the_one_its_constructor_makes() -> None:
    from sdk._result import Result
    from sdk._result import result_of

    reply = Decision.model_validate({"reasoning": "r", "answer": "approve", "confidence": "high"})
    client = StructuredClient(TestProvider([reply.model_dump_json()]))
    result = client.generate(Decision, prompt="Decide.")
    given = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    assert result == Result(**given)
    del given["removed"], given["prompt"]  # defaults filled as `__init__` fills them
    assert result_of(given) == Result(**given) and result_of(given).removed == []
    with pytest.raises(TypeError, match=r"missing fields \['value'\]"):
        result_of({k: v for k, v in given.items() if k != "value"})
    with pytest.raises(TypeError, match=r"unknown fields \['valu'\]"):
        result_of({**given, "valu": 1})
    swapped = {k: v for k, v in given.items() if k != "value"} | {"valu": 1}  # same length
    with pytest.raises(TypeError, match=r"missing fields \['value'\], unknown fields \['valu'\]"):
        result_of(swapped)


def test_the_call_options_table_of_the_providers_guide_names_every_call_option() -> None:
    # DESIGN.md: the per-call options are the same on every call method; the guide's table is
    # where a user looks them up. On main it had no row for `cache` (DESIGN.md's `cache=` per
    # call), `runaway`, `accept_weakened_schema` or `grounding`.
    from sdk import CallOptions

    page = (Path(__file__).resolve().parents[1] / "docs/guides/providers.md").read_text("utf-8")
    table = page.split("## Call options", 1)[1].split("\n\n| option |", 1)[1].split("\n\n", 1)[0]
    named = {
        name
        for row in table.splitlines()
        if row.startswith("| `")
        for name in re.findall(r"`(\w+)`", row.split(" | ", 1)[0])
    }
    assert named == set(get_type_hints(CallOptions))


# --- waits a clock can hold ---


def _local_chat_server() -> tuple[str, list[str], Any]:
    """A real HTTP server on a real socket, answering every Chat Completions request."""
    import http.server
    import socketserver
    import threading

    from tests.wire_support import fixture_json

    body = fixture_json("openai_chat_stop.json")
    body["choices"][0]["message"]["content"] = TEXT
    data = json.dumps(body).encode()
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            paths.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", paths, server


@pytest.mark.parametrize("name", ["deadline", "attempt_deadline"])
def test_a_deadline_no_clock_can_wait_for_is_refused_where_it_is_set(name: str) -> None:
    # On main, deadline=1e10 (or attempt_deadline) was accepted, and then every call through
    # a real socket failed with "ProviderError: unusable reply: OverflowError: timestamp out
    # of range for platform time_t" (the socket's timeout), blaming the provider. The longest
    # one taken (a week, as a batch's) works through a real socket.
    import openai

    url, paths, server = _local_chat_server()
    try:
        provider = OpenAIChatProvider(openai.OpenAI(api_key="k", base_url=url), model="m")
        said = rf"{name} must be between 0 and 604800"
        for bad in (1e10, 10**12):
            with pytest.raises(ValueError, match=said):
                StructuredClient(provider, **{name: bad})
            with pytest.raises(ValueError, match=said):
                StructuredClient(provider).with_options(**{name: bad})
            with pytest.raises(ValueError, match=said):
                StructuredClient(provider).generate(Decision, prompt="?", **{name: bad})
        assert paths == []
        longest = StructuredClient(provider, **{name: 7 * 24 * 3600.0})
        assert longest.generate(Decision, prompt="?").value.answer == "approve"
        assert paths == ["/v1/chat/completions"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_backoff_wait_no_clock_can_hold_is_refused_when_the_policy_is_made() -> None:
    # On main, Backoff(max_retry_after=1e12) was taken, and a 503 whose retry-after said
    # 99999999999 s made the call raise a raw OverflowError from its sleep, after the request
    # was sent; initial= and maximum= of that size overflow the jittered wait the same way.
    import httpx2

    for field in ("initial", "maximum", "max_retry_after"):
        with pytest.raises(ValueError, match=rf"Backoff\(\): {field} must be between 0 and 604800"):
            Backoff(**{field: 1e12})
    busy = httpx2.Response(503, json={"error": {"message": "busy"}},
                           headers={"retry-after": "99999999999"})  # fmt: skip
    wire = Wire(busy, chat_reply(text=TEXT))
    longest = Backoff(max_retry_after=7 * 24 * 3600.0)
    client = StructuredClient(OpenAIChatProvider(openai_client(wire), model="m"), backoff=longest)
    with pytest.raises(Exception, match="retry after 1e\\+11s") as info:
        client.generate(Decision, prompt="?")
    assert not isinstance(info.value, OverflowError) and len(wire.requests) == 1


# --- extra_body is JSON ---

_NOT_JSON = [
    pytest.param(float("nan"), ValueError, r"extra_body\['x'\]\['y'\]\[1\] is nan", id="nan"),
    pytest.param(float("-inf"), ValueError, r"extra_body\['x'\]\['y'\]\[1\] is -inf", id="inf"),
    pytest.param(Decimal("1.5"), TypeError, r"\['y'\]\[1\] is a Decimal", id="decimal"),
    pytest.param({1, 2}, TypeError, r"extra_body\['x'\]\['y'\]\[1\] is a set", id="set"),
    pytest.param(b"x", TypeError, r"extra_body\['x'\]\['y'\]\[1\] is a bytes", id="bytes"),
    pytest.param({1: "a", "b": 2}, TypeError, r"\['x'\]\['y'\]\[1\] has the key 1", id="int-key"),
]


def _refused_wherever_set(
    body: dict[str, Any], error: type[Exception], said: str, client: Any, provider: Any
) -> None:
    """`body` as `extra_body` is refused (`error` matching `said`) by a client made with it,
    `with_options`, a call, and a local provider made with it."""
    with pytest.raises(error, match=said):
        StructuredClient(provider, extra_body=body)
    with pytest.raises(error, match=said):
        client.with_options(extra_body=body)
    with pytest.raises(error, match=said):
        client.generate(Decision, prompt="?", extra_body=body)
    with pytest.raises(error, match=said):
        VLLMProvider(model="m", extra_body=body)


@pytest.mark.parametrize(("bad", "error", "said"), _NOT_JSON)
def test_an_extra_body_value_json_cannot_carry_is_refused_where_it_is_set(
    bad: object, error: type[Exception], said: str
) -> None:
    # On main each was taken wherever extra_body is set, and every call then failed as
    # "ProviderError: unusable reply: ValueError: Out of range float values are not JSON
    # compliant" (or "Object of type Decimal is not JSON serializable"), blaming the reply; a
    # nested mapping with an int key beside a text key, with a cache, was a raw TypeError from
    # the cache key ("'<' not supported between instances of 'str' and 'int'").
    from sdk.cache import MemoryCache

    body = {"x": {"y": [1, bad]}}
    wire = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    client = StructuredClient(provider, cache=MemoryCache())
    _refused_wherever_set(body, error, said, client, provider)
    with pytest.raises(error, match=said):
        OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini", extra_body=body)
    assert wire.requests == []
    taken = {"x": {"y": [1, 2.5, None, True, "t", {"z": []}], "w": (1, 2)}}
    assert client.generate(Decision, prompt="?", extra_body=taken).value.answer == "approve"


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_an_extra_body_nested_deeper_than_a_request_may_be_is_refused_where_it_is_set() -> None:
    # On main check_json_body walked a deep body without recursion and took it, and then the
    # spec's deep copy (and the cache key, the wire's JSON encoder) recursed: an extra_body
    # nested ~350 levels (a batch input line's `options` read as JSON at 900) made every call,
    # and every such batch item, fail with a bare RecursionError, before anything was sent.
    from sdk.cache import MemoryCache
    from sdk.parsing._limits import MAX_DEPTH

    wire = Wire(chat_reply(text=TEXT))
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-5.1-mini")
    client = StructuredClient(provider, cache=MemoryCache())
    said = rf"^extra_body\['x'\]\S* nests lists and mappings deeper than {MAX_DEPTH} levels"
    for depth in (MAX_DEPTH, 900, 5000):
        _refused_wherever_set({"x": _nested(depth, 1)}, ValueError, said, client, provider)
    assert wire.requests == []
    deepest = {"x": _nested(MAX_DEPTH - 1, 1)}  # (MAX_DEPTH levels, the body's own counted)
    assert client.generate(Decision, prompt="?", extra_body=deepest).value.answer == "approve"
    assert len(wire.requests) == 1
