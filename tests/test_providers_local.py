"""The local adapters (llama.cpp, vLLM, Ollama) against a real HTTP server on 127.0.0.1: real
httpx, real streaming, real timeouts and refused connections."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Backoff
from sdk import Partial
from sdk import ProviderError
from sdk import ProviderRetriesExhausted
from sdk import Result
from sdk import SchemaViolation
from sdk import StopReason
from sdk import StructuredClient
from sdk import TruncatedOutput
from sdk import UnexpectedStop
from sdk.providers import CompletionRequest
from sdk.providers import JsonDocument
from sdk.providers import LlamaCppProvider
from sdk.providers import Message
from sdk.providers import OllamaProvider
from sdk.providers import Provider
from sdk.providers import Sampling
from sdk.providers import VLLMProvider
from sdk.providers._http import tls_verify
from sdk.providers._pool import _as_httpx
from sdk.providers.llamacpp import build_completion_request
from sdk.providers.llamacpp import build_template_request
from sdk.providers.llamacpp import read_completion
from sdk.providers.ollama import build_request as ollama_request
from sdk.providers.ollama import read_response as ollama_response
from sdk.providers.vllm import build_request as vllm_request
from sdk.providers.vllm import read_response as vllm_response
from sdk.schema import LLAMACPP
from sdk.schema import OLLAMA
from sdk.schema import VLLM
from sdk.schema import to_wire
from sdk.schema.gbnf import contract_gbnf
from tests.local_support import DOCUMENT
from tests.local_support import LocalServer
from tests.local_support import OneRequestServer
from tests.local_support import Reply
from tests.local_support import closed_port_url
from tests.wire_support import BOUNDED
from tests.wire_support import DECISION
from tests.wire_support import Bounded
from tests.wire_support import Sleeps
from tests.wire_support import fixture_json

GRAMMAR = 'root ::= "{" [^}]* "}"'


def _providers(url: str) -> dict[str, Provider]:
    return {
        "llamacpp": LlamaCppProvider(url),
        "llamacpp-grammar": LlamaCppProvider(url, mode="grammar", grammar=GRAMMAR),
        "llamacpp-openai": LlamaCppProvider(url, mode="openai"),
        "vllm": VLLMProvider(url, model="Qwen/Qwen3-8B"),
        "ollama": OllamaProvider(url, model="qwen3:8b"),
    }


KINDS = ["llamacpp", "llamacpp-grammar", "llamacpp-openai", "vllm", "ollama"]
ROUTE = {
    "llamacpp": "/completion",
    "llamacpp-grammar": "/completion",
    "llamacpp-openai": "/v1/chat/completions",
    "vllm": "/v1/chat/completions",
    "ollama": "/api/chat",
}
# The raw value each endpoint uses for "the token limit cut it".
LIMIT = {"/completion": "limit", "/v1/chat/completions": "length", "/api/chat": "length"}


def _client(provider: Provider, **options: Any) -> StructuredClient:
    options.setdefault("sleep", Sleeps())
    return StructuredClient(provider, **options)


# --- every adapter, sync and async, plain and streamed ---


@pytest.mark.parametrize("kind", KINDS)
def test_generate_through_a_real_server(server: LocalServer, kind: str) -> None:
    provider = _providers(server.url)[kind]
    result = _client(provider).generate(Decision, prompt="Approve?", system="Review it.")
    assert result.value == Decision.model_validate(DECISION)
    assert result.stop_reason is StopReason.END_TURN
    assert (result.usage.input_tokens, result.usage.output_tokens) == (131, 58)
    assert result.provider == provider.name
    assert len(server.bodies(ROUTE[kind])) == 1
    provider.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_agenerate_and_astream_through_a_real_server(server: LocalServer, kind: str) -> None:
    provider = _providers(server.url)[kind]
    async with AsyncStructuredClient(provider) as client:
        result = await client.generate(Decision, prompt="Approve?")
        items = [item async for item in client.stream(Decision, prompt="Approve?")]
    assert result.value == Decision.model_validate(DECISION)
    *partials, final = items
    assert isinstance(final, Result) and final.value == result.value
    assert partials and all(isinstance(p, Partial) for p in partials)
    assert partials[-1].value == DECISION


@pytest.fixture
def idle_server() -> Iterator[LocalServer]:
    """A server that keeps an idle connection open for minutes: only the client closes it."""
    server = LocalServer(keep_alive=600)
    server.start()
    yield server
    server.stop()


async def _connections_drop_to(server: LocalServer, count: int) -> None:
    """Wait (bounded, well under the server's keep-alive) until the server holds `count`
    connections: it sees a close a moment after the client closes."""
    for _ in range(600):
        if server.open_connections() == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the server still holds {server.open_connections()} connections")


async def test_async_with_closes_the_connections_the_provider_opened(
    idle_server: LocalServer,
) -> None:
    # The docs' async examples use `async with AsyncStructuredClient(...)`: this is what it does.
    provider = VLLMProvider(idle_server.url, model="Qwen/Qwen3-8B")
    async with AsyncStructuredClient(provider) as client:
        results = await asyncio.gather(*(client.generate(Decision, prompt="?") for _ in range(3)))
        assert idle_server.open_connections() >= 1  # kept alive between calls
    assert all(r.value == Decision.model_validate(DECISION) for r in results)
    await _connections_drop_to(idle_server, 0)


async def test_async_with_leaves_a_client_you_passed_in_open(idle_server: LocalServer) -> None:
    async with httpx.AsyncClient() as given:
        provider = VLLMProvider(idle_server.url, model="Qwen/Qwen3-8B", http_client=given)
        async with AsyncStructuredClient(provider) as client:
            await client.generate(Decision, prompt="?")
        assert not given.is_closed  # yours: closed by your own `async with`
        assert idle_server.open_connections() == 1
        await client.generate(Decision, prompt="Again?")  # still usable
    assert given.is_closed
    await _connections_drop_to(idle_server, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_stream_through_a_real_server_ends_with_the_stop_reason(
    server: LocalServer, kind: str
) -> None:
    provider = _providers(server.url)[kind]
    *partials, final = list(_client(provider).stream(Decision, prompt="Approve?"))
    assert isinstance(final, Result) and final.value == Decision.model_validate(DECISION)
    assert len(partials) > 3
    server.reset(Reply(text=DOCUMENT[:60], stop=LIMIT[ROUTE[kind]]))
    seen = []
    with pytest.raises(TruncatedOutput) as info:
        for item in _client(provider).stream(Decision, prompt="Approve?"):
            seen.append(item)
    assert seen and info.value.text == DOCUMENT[:60]


@pytest.mark.parametrize("kind", KINDS)
def test_token_limit_is_truncation_on_every_endpoint(server: LocalServer, kind: str) -> None:
    server.reset(Reply(text=DOCUMENT[:40], stop=LIMIT[ROUTE[kind]]))
    with pytest.raises(TruncatedOutput) as info:
        _client(_providers(server.url)[kind]).generate(Decision, prompt="Approve?")
    assert info.value.stop_reason is StopReason.MAX_TOKENS
    assert info.value.raw_stop_reason == LIMIT[ROUTE[kind]]


# --- llama.cpp ---


def test_llamacpp_renders_the_chat_template_then_sends_the_schema(server: LocalServer) -> None:
    client = _client(LlamaCppProvider(server.url, mode="json_schema"))
    client.generate(Decision, prompt="Approve?", system="Review it.", max_tokens=300)
    # Learned once: the template (placeholder messages) and the special tokens.
    (template,) = server.bodies("/apply-template")
    assert [m["role"] for m in template["messages"]] == ["system", "user"]
    assert "Approve?" not in json.dumps(template)
    assert len(server.bodies("/tokenize")) == 3
    (body,) = server.bodies("/completion")
    assert body["prompt"] == (
        "<|im_start|>system\nReview it.<|im_end|>\n<|im_start|>user\nApprove?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )  # what the server's own rendering of these messages is
    assert body["n_predict"] == 300
    assert body["json_schema"] == to_wire(Decision, LLAMACPP).schema
    assert "grammar" not in body


def test_llamacpp_schema_keeps_generation_order_by_requiring_everything(
    server: LocalServer,
) -> None:
    text = json.dumps({"text": "hello", "tag": None})
    server.reset(Reply(text=text))
    from tests.test_providers_openai import Note  # an optional field without null

    provider = LlamaCppProvider(server.url, mode="json_schema")
    result = _client(provider).generate(Note, prompt="Note it.")
    assert result.value.tag == "none"  # null meant "absent": the default applies
    sent = server.bodies("/completion")[0]["json_schema"]
    assert sent["required"] == ["text", "tag"]
    assert list(sent["properties"]) == ["text", "tag"]


def test_llamacpp_grammar_mode_sends_the_given_grammar(server: LocalServer) -> None:
    provider = LlamaCppProvider(server.url, mode="grammar", grammar=GRAMMAR)
    result = _client(provider).generate(Decision, prompt="Approve?")
    (body,) = server.bodies("/completion")
    assert body["grammar"] == GRAMMAR
    assert "json_schema" not in body
    assert result.removed == []  # a grammar, not a dialect: nothing reported as removed


def test_llamacpp_grammar_mode_writes_the_grammar_from_the_schema(server: LocalServer) -> None:
    _client(LlamaCppProvider(server.url, mode="grammar")).generate(Decision, prompt="Approve?")
    (body,) = server.bodies("/completion")
    assert body["grammar"] == contract_gbnf(Decision)
    assert "root ::=" in body["grammar"]


def test_llamacpp_prompt_template_skips_the_template_round_trip(server: LocalServer) -> None:
    def template(request: CompletionRequest) -> str:
        return "\n".join(m.content for m in request.messages) + "\nJSON:"

    _client(LlamaCppProvider(server.url, prompt_template=template)).generate(Decision, prompt="Go.")
    assert server.bodies("/apply-template") == []
    assert server.bodies("/completion")[0]["prompt"] == "Go.\nJSON:"


def test_llamacpp_openai_route_sends_a_strict_response_format(server: LocalServer) -> None:
    _client(LlamaCppProvider(server.url, mode="openai")).generate(Decision, prompt="Approve?")
    (body,) = server.bodies("/v1/chat/completions")
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Decision_v1", "schema": to_wire(Decision, LLAMACPP).schema, "strict": True
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("stop", "normalized"),
    [("eos", StopReason.END_TURN), ("limit", StopReason.MAX_TOKENS),
     ("word", StopReason.STOP_SEQUENCE)],
)  # fmt: skip
@pytest.mark.parametrize("legacy", [False, True], ids=["stop_type", "stopped_flags"])
def test_every_llamacpp_stop_is_normalized(stop: str, normalized: StopReason, legacy: bool) -> None:
    body = fixture_json("llamacpp_completion.json")
    body["stop_type"] = stop
    if legacy:
        del body["stop_type"]
        body[f"stopped_{stop}"] = True
    completion = read_completion(body)
    assert (completion.stop_reason, completion.raw_stop_reason) == (normalized, stop)


@pytest.mark.parametrize(
    ("truncated", "normalized"),
    [(False, StopReason.MAX_TOKENS), (True, StopReason.CONTEXT_WINDOW)],
)
def test_a_llamacpp_limit_with_truncated_is_the_context_window(
    truncated: bool, normalized: StopReason
) -> None:
    # llama-server ends a generation that fills the context with `limit` and `truncated: true`
    # (seen for real in tests/test_local_llamacpp.py); `n_predict` alone gives `limit` only.
    body = {**fixture_json("llamacpp_completion.json"), "stop_type": "limit"}
    completion = read_completion({**body, "truncated": truncated})
    assert (completion.stop_reason, completion.raw_stop_reason) == (normalized, "limit")


def test_llamacpp_request_builders_are_pure() -> None:
    request = CompletionRequest(
        JsonDocument(Decision), (Message("user", "x"),), 64, options=Sampling(seed=3)
    )
    with_schema = build_completion_request(request, "P", schema={"type": "object"})
    assert with_schema == {
        "prompt": "P",
        "n_predict": 64,
        "n_probs": 1,  # each token's probability: what Result.confidence is made of
        "json_schema": {"type": "object"},
        "seed": 3,
    }
    with_grammar = build_completion_request(request, "P", schema={}, grammar=GRAMMAR)
    assert with_grammar["grammar"] == GRAMMAR and "json_schema" not in with_grammar
    assert build_template_request(request) == {"messages": [{"role": "user", "content": "x"}]}


def test_a_stop_word_is_not_a_clean_end_in_json_mode(server: LocalServer) -> None:
    server.reset(Reply(stop="word"))
    with pytest.raises(UnexpectedStop) as info:
        _client(LlamaCppProvider(server.url)).generate(Decision, prompt="Approve?")
    assert info.value.stop_reason is StopReason.STOP_SEQUENCE


def test_llamacpp_retry_sends_the_previous_output_and_feedback(server: LocalServer) -> None:
    invalid = json.dumps({**DECISION, "confidence": "certain"})
    server.reset(Reply(text=invalid), Reply())
    result = _client(LlamaCppProvider(server.url)).generate(Decision, prompt="Approve?")
    assert len(result.attempts) == 2
    shape = server.bodies("/apply-template")[1]["messages"]  # the retry's shape, learned once
    assert [m["role"] for m in shape] == ["user", "assistant", "user"]
    retry = server.bodies("/completion")[1]["prompt"]
    assert f"<|im_start|>assistant\n{invalid}<|im_end|>" in retry
    assert "/confidence" in retry.rsplit("<|im_start|>user", 1)[1]


# --- vLLM, Ollama ---


def test_vllm_sends_structured_outputs_and_accepts_a_v1_base_url(server: LocalServer) -> None:
    provider = VLLMProvider(server.url + "/v1/", model="Qwen/Qwen3-8B")
    result = _client(provider).generate(Decision, prompt="Approve?", max_tokens=256, seed=7)
    (body,) = server.bodies("/v1/chat/completions")
    assert body["structured_outputs"] == {
        "json": to_wire(Decision, VLLM).schema,
        "disable_any_whitespace": True,  # the whitespace bound the preflight shows
    }
    assert (body["model"], body["max_tokens"], body["seed"]) == ("Qwen/Qwen3-8B", 256, 7)
    assert "response_format" not in body
    assert result.model == "Qwen/Qwen3-8B"


def test_vllm_request_builder_is_pure() -> None:
    request = CompletionRequest(JsonDocument(Decision), (Message("user", "x"),), 10, system="s")
    body = vllm_request(request, model="m", schema={"type": "object"}, stream=True)
    assert body["messages"][0] == {"role": "system", "content": "s"}
    assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("finish", "refusal", "normalized", "raw"),
    [
        ("stop", None, StopReason.END_TURN, "stop"),
        ("length", None, StopReason.MAX_TOKENS, "length"),
        ("stop", "I can't help with that.", StopReason.REFUSAL, "refusal"),
        ("abort", None, StopReason.OTHER, "abort"),  # unknown: never a clean end
    ],
)
def test_vllm_reply_reader_is_pure(
    finish: str, refusal: str | None, normalized: StopReason, raw: str
) -> None:
    body = fixture_json("vllm_chat.json")
    body["choices"][0]["finish_reason"] = finish
    body["choices"][0]["message"]["refusal"] = refusal
    completion = vllm_response(body)
    assert (completion.stop_reason, completion.raw_stop_reason) == (normalized, raw)
    assert completion.refusal == refusal
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (131, 58)


def test_ollama_sends_format_and_num_predict(server: LocalServer) -> None:
    provider = OllamaProvider(server.url, model="qwen3:8b")
    _client(provider).generate(Decision, prompt="Approve?", max_tokens=200, temperature=0)
    (body,) = server.bodies("/api/chat")
    assert body["format"] == to_wire(Decision, OLLAMA).schema
    assert body["options"] == {"num_predict": 200, "temperature": 0}
    assert body["stream"] is False


@pytest.mark.parametrize(
    ("raw", "normalized"), [("stop", StopReason.END_TURN), ("length", StopReason.MAX_TOKENS)]
)
def test_every_ollama_done_reason_is_normalized(raw: str, normalized: StopReason) -> None:
    completion = ollama_response({**fixture_json("ollama_chat.json"), "done_reason": raw})
    assert (completion.stop_reason, completion.raw_stop_reason) == (normalized, raw)


def test_ollama_request_builder_routes_top_level_options() -> None:
    request = CompletionRequest(
        JsonDocument(Decision),
        (Message("user", "x"),),
        10,
        options=Sampling(temperature=0.1),
        extra_body={"keep_alive": "5m", "options": {"num_ctx": 8192}},
    )
    body = ollama_request(request, model="m", schema={})
    assert body["keep_alive"] == "5m" and "keep_alive" not in body["options"]
    # Sampling options go in Ollama's `options`, beside raw ones and the SDK's token limit.
    assert body["options"] == {"num_predict": 10, "temperature": 0.1, "num_ctx": 8192}


# --- removed constraints are enforced, per dialect ---


@pytest.mark.parametrize(
    ("kind", "field", "value", "keyword"),
    [
        ("llamacpp", "ratio", -0.5, "minimum"),
        ("ollama", "ratio", -0.5, "minimum"),
        ("vllm", "step", 7, "multipleOf"),
    ],
)
def test_a_value_breaking_only_a_stripped_constraint_is_a_schema_violation(
    server: LocalServer, kind: str, field: str, value: Any, keyword: str
) -> None:
    server.reset(Reply(text=json.dumps({**BOUNDED, field: value})))
    provider = _providers(server.url)[kind]
    with pytest.raises(SchemaViolation) as info:
        _client(provider, retries=0).generate(Bounded, prompt="Fill it.")
    assert [v.pointer for v in info.value.violations] == [f"/{field}"]
    body = server.bodies(ROUTE[kind])[0]
    sent = body.get("json_schema") or body.get("format") or body["structured_outputs"]["json"]
    assert keyword not in sent["properties"][field]


# --- real transport failures ---


@pytest.mark.parametrize("kind", ["llamacpp", "vllm", "ollama"])
def test_connection_refused_is_a_provider_error(kind: str) -> None:
    provider = _providers(closed_port_url())[kind]
    with pytest.raises(ProviderError) as info:
        _client(provider, backoff=Backoff(retries=0)).generate(Decision, prompt="Approve?")
    assert info.value.status_code is None
    assert "connection failed (ConnectError)" in str(info.value)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


CUT_SHORT = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
             b"Content-Length: 1000\r\n\r\n{\"id\": \"cut")  # fmt: skip
"""A reply whose `Content-Length` says 1000 bytes, of which 12 are sent."""


def _httpx_table() -> list[tuple[type[Exception], type[Exception]]]:
    from httpx._transports.default import _load_httpcore_exceptions

    return list(_load_httpcore_exceptions().items())


@pytest.mark.parametrize(("core", "raised"), _httpx_table(), ids=lambda kind: kind.__name__)
def test_the_pool_s_exceptions_are_raised_as_httpx_raises_httpcore_s(
    core: type[Exception], raised: type[Exception]
) -> None:
    """Every exception httpx maps from httpcore is mapped alike from httpcore2, to the most
    specific httpx class (the table httpx keeps, read from httpx itself)."""
    import httpcore2

    with pytest.raises(raised) as info, _as_httpx():
        raise getattr(httpcore2, core.__name__)("broken")
    assert type(info.value) is raised and str(info.value) == "broken"
    assert type(info.value.__cause__).__module__.startswith("httpcore2")


def _failure(provider: Provider, call: str) -> ProviderError:
    """The `ProviderError` one `generate` through `provider` ends with, no retry (`call`:
    `"generate"` on the sync client, `"agenerate"` on the async one)."""
    with pytest.raises(ProviderError) as info:
        if call == "generate":
            _client(provider, backoff=Backoff(retries=0)).generate(Decision, prompt="x")
        else:
            client = AsyncStructuredClient(provider, backoff=Backoff(retries=0))
            asyncio.run(client.generate(Decision, prompt="x"))
    return info.value


@pytest.mark.parametrize("call", ["generate", "agenerate"])
def test_a_body_cut_short_is_a_connection_failure_of_httpx_s_kind(call: str) -> None:
    """A client the provider makes reads replies through its own pool (`sdk.providers._pool`);
    a connection that breaks mid-body fails as through httpx's own: `RemoteProtocolError`."""
    server = OneRequestServer(CUT_SHORT)
    provider = VLLMProvider(server.url, model="m")
    try:
        failed = _failure(provider, call)
    finally:
        server.close()
    assert "connection failed (RemoteProtocolError)" in str(failed)
    assert isinstance(failed.__cause__, httpx.RemoteProtocolError)
    assert failed.status_code is None


async def test_every_connection_of_a_burst_is_kept_alive_and_used_again(
    idle_server: LocalServer,
) -> None:
    """The clients a provider makes keep every connection alive (`POOL`): a second burst of 32
    calls goes over the connections the first one opened (httpx's default pool keeps 20)."""
    provider = VLLMProvider(idle_server.url, model="m")
    async with AsyncStructuredClient(provider, max_concurrency=32) as client:
        await asyncio.gather(*(client.generate(Decision, prompt="?") for _ in range(32)))
        first = set(idle_server.connections())
        await asyncio.gather(*(client.generate(Decision, prompt="?") for _ in range(32)))
        second = set(idle_server.connections())
    assert 20 < len(first) <= 32
    assert second == first


def test_the_pool_s_asyncio_requirements_are_the_project_s() -> None:
    """httpcore2's async pool takes its locks from anyio with `fast_acquire=` (anyio 4.5 on),
    which httpcore2 requires only through its `asyncio` extra, and httpx not at all: the
    project's own dependencies must bring it, else an older anyio beside them fails every async
    call of a provider-made client with a `TypeError`."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.version import Version

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    declared = [
        Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    ]
    pool = next(r for r in declared if r.name == "httpcore2")
    floors = [
        Version(spec.version)
        for r in declared
        if r.name == "anyio"
        for spec in r.specifier
        if spec.operator in (">=", "==", "~=")
    ]
    assert "asyncio" in pool.extras or any(floor >= Version("4.5") for floor in floors), declared


UNAVAILABLE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
               b"Connection: close\r\n\r\n")  # fmt: skip


@pytest.mark.parametrize("call", ["generate", "agenerate"])
def test_a_client_the_provider_makes_goes_through_the_environment_s_proxy(
    call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`HTTP_PROXY` is honoured by the clients a provider makes, as by an `httpx.Client` of
    one's own (httpx mounts no proxy from the environment on a client given a transport: the
    provider mounts them itself). The server's host does not resolve: only the proxy reaches
    it."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    proxy = OneRequestServer(UNAVAILABLE)  # (as a proxy: it is sent the absolute URL)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    provider = VLLMProvider("http://model-server.invalid:8000", model="m")
    try:
        failed = _failure(provider, call)
    finally:
        proxy.close()
    assert failed.status_code == 503
    assert proxy.request_line.startswith(b"POST http://model-server.invalid:8000/")


def test_connection_refused_is_retried_then_exhausted() -> None:
    sleeps = Sleeps()
    provider = VLLMProvider(closed_port_url(), model="m")
    with pytest.raises(ProviderRetriesExhausted) as info:
        _client(provider, backoff=Backoff(retries=2), sleep=sleeps).generate(Decision, prompt="x")
    assert len(info.value.attempts) == 3 and len(sleeps.waits) == 2


def test_a_timeout_is_retried(server: LocalServer) -> None:
    server.reset(Reply(delay=1.0), Reply())
    provider = OllamaProvider(server.url, model="qwen3:8b", timeout=httpx.Timeout(0.2))
    result = _client(provider).generate(Decision, prompt="Approve?")
    first = result.attempts[0].error
    assert isinstance(first, ProviderError) and "timed out (ReadTimeout)" in str(first)
    assert result.value == Decision.model_validate(DECISION)
    assert len(server.bodies("/api/chat")) == 2


async def test_an_async_timeout_is_retried(server: LocalServer) -> None:
    server.reset(Reply(delay=1.0), Reply())
    provider = VLLMProvider(server.url, model="m", timeout=httpx.Timeout(0.2))
    sleeps = Sleeps()
    async with AsyncStructuredClient(provider, sleep=sleeps.asleep) as client:
        result = await client.generate(Decision, prompt="Approve?")
    assert "timed out" in str(result.attempts[0].error)
    assert len(sleeps.waits) == 1


def test_server_error_with_retry_after_is_waited_for(server: LocalServer) -> None:
    sleeps = Sleeps()
    server.reset(Reply(status=503, error="loading model", headers={"retry-after": "2"}), Reply())
    result = _client(LlamaCppProvider(server.url), sleep=sleeps).generate(Decision, prompt="x")
    assert sleeps.waits == [2.0]
    error = result.attempts[0].error
    assert isinstance(error, ProviderError) and error.status_code == 503
    assert "loading model" in str(error)


@pytest.mark.parametrize("kind", ["llamacpp", "vllm", "ollama"])
def test_a_bad_request_is_not_retried(server: LocalServer, kind: str) -> None:
    server.reset(Reply(status=400, error="grammar parse error at line 1"))
    with pytest.raises(ProviderError) as info:
        _client(_providers(server.url)[kind]).generate(Decision, prompt="x")
    assert info.value.status_code == 400
    assert "grammar parse error" in str(info.value)
    assert len(server.bodies(ROUTE[kind])) == 1


# --- clients: injected or owned ---


def test_an_injected_httpx_client_is_used_and_left_open(server: LocalServer) -> None:
    seen: list[str] = []
    http = httpx.Client(event_hooks={"request": [lambda request: seen.append(request.url.path)]})
    provider = VLLMProvider(server.url, model="m", http_client=http)
    with StructuredClient(provider) as client:
        client.generate(Decision, prompt="x")
    assert seen == ["/v1/chat/completions"]
    assert not http.is_closed  # the caller's client: the caller closes it
    with pytest.raises(TypeError, match=r"pass an httpx\.AsyncClient"):
        asyncio.run(AsyncStructuredClient(provider).generate(Decision, prompt="x"))
    http.close()


async def test_an_injected_async_client_serves_the_async_calls(server: LocalServer) -> None:
    async with httpx.AsyncClient() as http:
        provider = OllamaProvider(server.url, model="m", http_client=http)
        result = await AsyncStructuredClient(provider).generate(Decision, prompt="x")
        assert result.value == Decision.model_validate(DECISION)
        with pytest.raises(TypeError, match="sync"):
            StructuredClient(provider).generate(Decision, prompt="x")


def test_a_plain_http_client_loads_no_ca_bundle_and_fails_closed() -> None:
    plain = tls_verify("http://127.0.0.1:8080")
    assert isinstance(plain, ssl.SSLContext)
    # Checks on, nothing trusted: TLS through it could never succeed unverified.
    assert plain.verify_mode is ssl.CERT_REQUIRED and plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert tls_verify("HTTPS://llama.example:8443") is True  # httpx's default CA bundle


def test_an_owned_client_is_closed_by_close(server: LocalServer) -> None:
    provider = LlamaCppProvider(server.url)
    with StructuredClient(provider) as client:
        client.generate(Decision, prompt="x")
        owned = provider._sync
        assert owned is not None and not owned.is_closed
    assert owned.is_closed
