"""A base URL's credentials are never printed and its query string is kept on every request
(issue 30, item 7), on every provider that takes a base URL.

- llama.cpp, vLLM and Ollama (httpx, the SDK's own transport): credentials in the URL go in an
  `Authorization: Basic` header, never in the URL requests are sent to and httpx logs at INFO;
  with an `Authorization` header given too they are refused. A query (`?api-version=...`) is
  on every request, whole and streamed, sync and async, llama.cpp's preliminary template,
  tokenizer and model requests included, after the route's path.
- the official `anthropic` and `openai` clients: credentials in their base URL are refused when
  the provider is made; a query goes on every request at the right path (the clients alone would
  put the route after it). `google-genai` would break a streamed URL with a query: refused too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any
from urllib.parse import parse_qs

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Backoff
from sdk import StructuredClient
from sdk.errors import ProviderError
from sdk.providers import AnthropicProvider
from sdk.providers import GeminiProvider
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import Provider
from sdk.providers import VLLMProvider
from sdk.providers._logs import redact_request_logs
from tests.promise_wire import WIRES
from tests.promise_wire import Say
from tests.promise_wire import Server
from tests.wire_support import ANTHROPIC_KEY
from tests.wire_support import DECISION
from tests.wire_support import GEMINI_KEY
from tests.wire_support import OPENAI_KEY

GATEWAY = "http://gw.test/tenants/a%2Fb/llm"
"""A gateway that serves the model below a path of its own (with an escaped slash in it)."""
QUERY = "api-version=2024-10-21&sig=q%2Bv%2F1"
"""What the gateway needs on every request, escapes as written."""
USER, PASSWORD = "ops-team", "pw-SECRET-5e4d3c2b1a"
CALLS = ["generate", "stream", "agenerate", "astream"]
LOCAL = ["llamacpp", "llamacpp-native", "llamacpp-openai", "vllm", "ollama"]


class Gateway:
    """The server behind the gateway's path: records each request's raw URL and headers, and
    answers as the provider's own server would (llama.cpp's learning routes included)."""

    def __init__(self, name: str, prefix: str) -> None:
        wire = WIRES[name.split("-")[0]]
        self.server = Server(wire, [Say(json.dumps(DECISION))])
        self.prefix = prefix
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path = request.url.raw_path.decode().partition("?")[0]
        if not path.startswith(self.prefix):
            return httpx.Response(404, json={"error": {"message": f"no route {path}"}})
        inner = request.url.copy_with(path=path[len(self.prefix) :] or "/", query=None)
        shifted = httpx.Request(request.method, inner, headers=request.headers,
                                content=request.content)  # fmt: skip
        response: httpx.Response = self.server(shifted)
        return response


def _local(name: str, url: str, gateway: Gateway, sync: bool, **options: Any) -> Provider:
    transport = httpx.MockTransport(gateway)
    http: Any = httpx.Client(transport=transport) if sync else httpx.AsyncClient(
        transport=transport)  # fmt: skip
    if name.startswith("llamacpp"):
        mode = {"llamacpp": "json_schema", "llamacpp-native": "grammar",
                "llamacpp-openai": "openai"}[name]  # fmt: skip
        return LlamaCppProvider(url, mode=mode, http_client=http, **options)
    kind = VLLMProvider if name == "vllm" else OllamaProvider
    return kind(url, model="m", http_client=http, **options)


def _call(provider: Provider, call: str) -> Any:
    if call == "generate":
        return StructuredClient(provider).generate(Decision, prompt="Approve?")
    if call == "stream":
        return list(StructuredClient(provider).stream(Decision, prompt="Approve?"))[-1]

    async def main() -> Any:
        client = AsyncStructuredClient(provider)
        if call == "agenerate":
            return await client.generate(Decision, prompt="Approve?")
        return [item async for item in client.stream(Decision, prompt="Approve?")][-1]

    return asyncio.run(main())


# --- the SDK's own transport: llama.cpp, vLLM, Ollama -------------------------------------------


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("name", LOCAL)
def test_a_base_url_query_is_on_every_request_after_the_route(name: str, call: str) -> None:
    gateway = Gateway(name, "/tenants/a%2Fb/llm")
    suffix = "/v1" if name == "vllm" else ""  # vLLM takes its `/v1` URL as well
    provider = _local(name, f"{GATEWAY}{suffix}/?{QUERY}", gateway, sync=not call.startswith("a"))
    result = _call(provider, call)
    assert result.value.answer == "approve"
    routes = [request.url.raw_path.decode() for request in gateway.seen]
    if name == "llamacpp":  # learned the template first: preliminary requests, on the same URL
        learned = {r.partition("?")[0].removeprefix("/tenants/a%2Fb/llm") for r in routes}
        assert {"/apply-template", "/tokenize"} <= learned
    for route in routes:
        path, _, query = route.partition("?")
        assert path.startswith("/tenants/a%2Fb/llm/") and "?" not in path, route
        assert query == QUERY, route  # kept as written, escapes and all
    assert provider.base_url == f"{GATEWAY}?{QUERY}"


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("name", LOCAL)
def test_credentials_in_a_base_url_become_a_header_and_are_never_logged(
    name: str, call: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = Gateway(name, "/llm")
    url = f"http://{USER}:{PASSWORD}@gw.test/llm?{QUERY}"
    with caplog.at_level(logging.DEBUG):
        provider = _local(name, url, gateway, sync=not call.startswith("a"))
        _call(provider, call)
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert gateway.seen and all(r.headers["authorization"] == basic for r in gateway.seen)
    assert all(r.url.userinfo == b"" for r in gateway.seen)
    # httpx's own INFO line about each request, and every other record, shows the URL bare.
    requests_logged = [r for r in caplog.records if r.getMessage().startswith("HTTP Request")]
    assert len(requests_logged) == len(gateway.seen)
    assert all("http://gw.test/llm/" in r.getMessage() for r in requests_logged)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for shown in (logged, repr(provider), provider.base_url, str(provider.cache_scope())):
        assert PASSWORD not in shown and USER not in shown


@pytest.mark.parametrize("name", LOCAL)
def test_credentials_in_a_base_url_beside_an_authorization_header_are_refused(name: str) -> None:
    gateway = Gateway(name, "/llm")
    with pytest.raises(ValueError, match="Authorization header too") as raised:
        _local(name, f"http://{USER}:{PASSWORD}@gw.test/llm", gateway, sync=True,
               headers={"authorization": "Bearer sk-other-1234567"})  # fmt: skip
    assert PASSWORD not in str(raised.value) and gateway.seen == []


@pytest.mark.parametrize("name", LOCAL)
def test_credentials_in_a_base_url_beside_an_authorization_header_named_by_bytes_are_refused(
    name: str,
) -> None:
    # httpx sends a header named by bytes as it sends one named by text (the cache's key reads
    # them so); on main b"Authorization" was not seen as the same name, so the provider was
    # made and every request carried two Authorization headers: the URL's and this one.
    gateway = Gateway(name, "/llm")
    with pytest.raises(ValueError, match="Authorization header too") as raised:
        _local(name, f"http://{USER}:{PASSWORD}@gw.test/llm", gateway, sync=True,
               headers={b"Authorization": b"Bearer sk-other-1234567"})  # fmt: skip
    assert PASSWORD not in str(raised.value) and gateway.seen == []


BYTES_KEY = "sk-bytes-SECRET-8c7b6a5948"


@pytest.mark.parametrize("name", LOCAL)
def test_a_header_given_as_bytes_is_redacted_from_errors_and_a_failure_stays_a_provider_error(
    name: str,
) -> None:
    # On main a header value given as bytes (sent by httpx, keyed by the cache) was among the
    # provider's secrets as bytes, and the redactor raised "TypeError: 'in <string>' requires
    # string as left operand, not bytes" on every error: a refused connection, an HTTP 500, was
    # a raw TypeError, never retried and never a ProviderError.
    def echo(request: httpx.Request) -> httpx.Response:
        said = request.headers.get("authorization", "")
        return httpx.Response(500, json={"error": f"bad gateway for {said}"})

    http = httpx.Client(transport=httpx.MockTransport(echo))
    headers = {"Authorization": f"Bearer {BYTES_KEY}".encode()}
    if name.startswith("llamacpp"):
        mode = {"llamacpp": "json_schema", "llamacpp-native": "grammar",
                "llamacpp-openai": "openai"}[name]  # fmt: skip
        provider: Provider = LlamaCppProvider("http://gw.test/llm", mode=mode, http_client=http,
                                              headers=headers)  # fmt: skip
    else:
        kind = VLLMProvider if name == "vllm" else OllamaProvider
        provider = kind("http://gw.test/llm", model="m", http_client=http, headers=headers)
    assert repr(provider).startswith(type(provider).__name__)  # (on main: that TypeError too)
    client = StructuredClient(provider, backoff=Backoff(retries=0))
    with pytest.raises(ProviderError) as raised:
        client.generate(Decision, prompt="Approve?")
    assert "500" in str(raised.value) and BYTES_KEY not in str(raised.value)


# A password holding an unescaped `/`, `?` or `#` (a base64 key, say) ends the URL's authority
# there: the rest of the password and the real host become the path, query or fragment, and
# with a port-like start (`ops-team:1/...`) requests went to host `ops-team` with the password
# in the URL httpx logs. Refused when made, never echoed.
HIDDEN_USERINFO = [f"http://{USER}:{sep}{PASSWORD}@gw.test/llm"
                   for sep in ("1/", "1?", "1#", "a/", "/")]  # fmt: skip


@pytest.mark.parametrize("url", HIDDEN_USERINFO)
@pytest.mark.parametrize("name", LOCAL)
def test_a_password_that_breaks_the_url_is_refused_never_sent_or_shown(
    name: str, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = Gateway(name, "/llm")
    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(ValueError, match="percent-encode") as raised,
    ):
        _call(_local(name, url, gateway, sync=True), "generate")
    assert gateway.seen == []
    shown = str(raised.value) + "\n".join(r.getMessage() for r in caplog.records)
    assert "SECRET" not in shown, shown


@pytest.mark.parametrize("url", ["gw.test:8080", "ftp://gw.test/", "http:///llm", ""])
def test_a_base_url_that_is_not_http_is_refused_when_made(url: str) -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        VLLMProvider(url, model="m")


BLANKS = [
    "http://gw.test/llm\nx",  # (urlsplit drops it: sent to /llmx)
    "http://gw.test/llm\tx",
    "http://gw .test/llm",  # (a connection error on each attempt)
    "http://gw.test/llm\x00",  # (an "unusable reply", blaming the server)
    "http://gw.test/l m",
    f"http://{USER}:{PASSWORD} 1@gw.test/llm",
]


@pytest.mark.parametrize("url", BLANKS)
@pytest.mark.parametrize("name", LOCAL)
def test_a_base_url_holding_white_space_or_a_control_character_is_refused_when_made(
    name: str, url: str
) -> None:
    # On main each was taken: a line end or a tab was dropped by urlsplit and the requests
    # went to another path, a space in the host failed every attempt as a connection error,
    # a NUL failed every call as "unusable reply: InvalidURL". The message names the place,
    # never the URL (it may hold a credential).
    gateway = Gateway(name, "/llm")
    with pytest.raises(ValueError, match=r"^base_url holds white space or a control") as raised:
        _call(_local(name, url, gateway, sync=True), "generate")
    assert gateway.seen == [] and "SECRET" not in str(raised.value)
    assert "http://gw.test/llm" in str(VLLMProvider("  http://gw.test/llm\n", model="m").endpoint)


# --- the official clients -----------------------------------------------------------------------

HOSTED = ["anthropic", "openai_responses", "openai_chat"]


def _hosted(name: str, base_url: str, handler: Any, sync: bool) -> Provider:
    transport = httpx2.MockTransport(handler)
    http: Any = httpx2.Client(transport=transport) if sync else httpx2.AsyncClient(
        transport=transport)  # fmt: skip
    if name == "anthropic":
        kind: Any = anthropic.Anthropic if sync else anthropic.AsyncAnthropic
        client = kind(api_key=ANTHROPIC_KEY, base_url=base_url, http_client=http)
        return AnthropicProvider(client, model="claude-sonnet-4-6")
    kind = openai.OpenAI if sync else openai.AsyncOpenAI
    client = kind(api_key=OPENAI_KEY, base_url=base_url, http_client=http)
    provider = OpenAIResponsesProvider if name == "openai_responses" else OpenAIChatProvider
    return provider(client, model="gpt-5.1-mini")


class HostedGateway:
    def __init__(self, name: str) -> None:
        self.server = Server(WIRES[name], [Say(json.dumps(DECISION))])
        self.seen: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(request)
        response: httpx2.Response = self.server(request)
        return response


ROUTES = {"anthropic": "/llm/v1/messages", "openai_responses": "/llm/v1/responses",
          "openai_chat": "/llm/v1/chat/completions"}  # fmt: skip


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("name", HOSTED)
def test_an_official_client_s_base_url_query_is_on_every_request_at_the_right_path(
    name: str, call: str
) -> None:
    gateway = HostedGateway(name)
    base = "http://gw.test/llm" + ("" if name == "anthropic" else "/v1")
    provider = _hosted(name, f"{base}?{QUERY}", gateway, sync=not call.startswith("a"))
    assert _call(provider, call).value.answer == "approve"
    assert gateway.seen
    for request in gateway.seen:
        assert request.url.path == ROUTES[name]
        assert parse_qs(request.url.query.decode()) == parse_qs(QUERY)


@pytest.mark.parametrize("name", HOSTED)
def test_credentials_in_an_official_client_s_base_url_are_refused(name: str) -> None:
    gateway = HostedGateway(name)
    with pytest.raises(ValueError, match=r"holds credentials .* default_headers") as raised:
        _hosted(name, f"http://{USER}:{PASSWORD}@gw.test/v1", gateway, sync=True)
    assert PASSWORD not in str(raised.value) and gateway.seen == []


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (f"http://{USER}:{PASSWORD}@gw.test", "credentials"),
        (f"http://gw.test/g?{QUERY}", "query string"),
    ],
)
def test_a_gemini_base_url_with_credentials_or_a_query_is_refused(url: str, said: str) -> None:
    client = genai.Client(api_key=GEMINI_KEY, http_options={"base_url": url})
    with pytest.raises(ValueError, match=said) as raised:
        GeminiProvider(client, model="gemini-2.5-flash")
    assert PASSWORD not in str(raised.value)


@pytest.mark.parametrize("url", HIDDEN_USERINFO[:3])
@pytest.mark.parametrize("name", HOSTED)
def test_a_password_that_breaks_an_official_client_s_url_is_refused(name: str, url: str) -> None:
    gateway = HostedGateway(name)
    with pytest.raises(ValueError, match="percent-encode") as raised:
        _hosted(name, url, gateway, sync=True)
    assert "SECRET" not in str(raised.value) and gateway.seen == []


@pytest.mark.parametrize("url", HIDDEN_USERINFO[:3])
def test_a_password_that_breaks_a_gemini_url_is_refused(url: str) -> None:
    client = genai.Client(api_key=GEMINI_KEY, http_options={"base_url": url})
    with pytest.raises(ValueError, match="percent-encode") as raised:
        GeminiProvider(client, model="gemini-2.5-flash")
    assert "SECRET" not in str(raised.value)


@pytest.mark.parametrize("name", HOSTED)
def test_an_official_client_s_requests_log_no_key(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = HostedGateway(name)
    with caplog.at_level(logging.DEBUG):
        _call(_hosted(name, f"http://gw.test/llm/v1?{QUERY}", gateway, sync=True), "stream")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request: POST http://gw.test" in logged  # httpx2's INFO line is there
    assert ANTHROPIC_KEY not in logged and OPENAI_KEY not in logged


# --- both kinds: a credential in the query ------------------------------------------------------

SIGNATURE = ("q%2Bv%2F1", "q+v/1")
"""`QUERY`'s credential (`sig=`), as sent and as decoded: sent on every request, never logged."""


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("name", LOCAL + HOSTED)
def test_a_credential_in_a_base_url_query_is_sent_but_never_logged(
    name: str, call: str, caplog: pytest.LogCaptureFixture
) -> None:
    sync = not call.startswith("a")
    gateway: Gateway | HostedGateway
    if name in HOSTED:
        gateway = HostedGateway(name)
        base = "http://gw.test/llm" + ("" if name == "anthropic" else "/v1")
        with caplog.at_level(logging.DEBUG):
            assert _call(_hosted(name, f"{base}?{QUERY}", gateway, sync), call).value
    else:
        gateway = Gateway(name, "/llm")
        with caplog.at_level(logging.DEBUG):
            assert _call(_local(name, f"http://gw.test/llm?{QUERY}", gateway, sync), call).value
    assert gateway.seen
    assert all(parse_qs(r.url.query.decode()) == parse_qs(QUERY) for r in gateway.seen)
    # httpx's (or httpx2's) INFO line for each request names it, its routing parameter kept.
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("HTTP Request")]
    assert len(lines) == len(gateway.seen)
    assert all("http://gw.test/llm/" in line and "api-version=2024-10-21" in line for line in lines)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "sig=" in logged and not any(value in logged for value in SIGNATURE)


def test_the_request_log_filter_leaves_other_records_whole() -> None:
    """A record with no secret keeps its own message and arguments (a handler may read them),
    and one whose arguments do not format is left to its handler, never raised from the filter."""
    redact_request_logs()
    logger = logging.getLogger("httpx")
    plain = logger.makeRecord("httpx", logging.INFO, "f", 1, "HTTP Request: %s %s", ("GET", "u"),
                              None)  # fmt: skip
    broken = logger.makeRecord("httpx", logging.INFO, "f", 1, "%d", ("x",), None)
    secret = logger.makeRecord("httpx", logging.INFO, "f", 1, "%s", ("http://h/?key=k3y-SECRET",),
                               None)  # fmt: skip
    assert all(logger.filter(record) for record in (plain, broken, secret))
    assert (plain.msg, plain.args) == ("HTTP Request: %s %s", ("GET", "u"))
    assert (broken.msg, broken.args) == ("%d", ("x",))
    assert secret.getMessage() == "http://h/?key=[redacted]"


CREDENTIAL_NAMES = ["key", "API_KEY", "apikey", "token", "access_token", "secret", "password",
                    "sig", "subscription-key", "client_secret", "X-Amz-Signature",
                    "X-Amz-Security-Token", "X-Amz-Credential", "x-goog-signature",
                    "auth", "x-auth-token", "passwd", "code", "CODE"]  # fmt: skip
"""Query parameters that carry a credential: the usual names, and a name ending in one of them
(Azure API Management's `subscription-key`, a presigned URL's `X-Amz-Signature`); and `code`
alone, an Azure Functions function key (`https://app.azurewebsites.net/api/llm?code=...`), which
on main was kept in errors, httpx's request log line and a batch job's state file."""
ROUTING_NAMES = ["api-version", "deployment", "model", "keyword", "monkey", "tokens", "region",
                 "country-code", "error_code", "codec", "zipcode"]  # fmt: skip
"""Query parameters that do not: kept as written everywhere."""


@pytest.mark.parametrize("name", CREDENTIAL_NAMES)
def test_a_credential_query_parameter_is_withheld_redacted_and_never_logged(name: str) -> None:
    """One rule, `SECRET_QUERY_NAMES`, for the job state file (`withheld`), errors (the fault
    boundary's `Redactor`) and the request logs (`redact_request_logs`): a parameter whose name
    is, or ends in, a credential's (`-key`, `_secret`, `-signature`, ...) keeps no value there,
    and the routing parameters beside it are kept."""
    from sdk.providers._boundary import Redactor
    from sdk.providers._endpoint import withheld

    url = f"https://gw.test/llm?api-version=2024-10-21&{name}=s3cr3t-v4lue&deployment=gpt"
    kept = withheld(url)
    assert "s3cr3t-v4lue" not in kept and f"{name}=***" in kept
    assert "api-version=2024-10-21" in kept and "deployment=gpt" in kept
    said = Redactor()(f"POST {url} failed")
    assert "s3cr3t-v4lue" not in said and "deployment=gpt" in said
    redact_request_logs()
    logger = logging.getLogger("httpx")
    record = logger.makeRecord("httpx", logging.INFO, "f", 1, "HTTP Request: POST %s", (url,),
                               None)  # fmt: skip
    assert logger.filter(record) and "s3cr3t-v4lue" not in record.getMessage()


@pytest.mark.parametrize("name", ROUTING_NAMES)
def test_a_routing_query_parameter_is_kept_as_written(name: str) -> None:
    from sdk.providers._boundary import Redactor
    from sdk.providers._endpoint import withheld

    url = f"https://gw.test/llm?{name}=v4lue-1"
    assert withheld(url) == url
    assert Redactor()(url) == url


SCOPED = [
    pytest.param(lambda url: VLLMProvider(url, model="m"), id="vllm"),
    pytest.param(lambda url: LlamaCppProvider(url), id="llamacpp"),
    pytest.param(lambda url: OllamaProvider(url, model="m"), id="ollama"),
    pytest.param(lambda url: OpenAIChatProvider(
        openai.OpenAI(api_key=OPENAI_KEY, base_url=url), model="m"), id="openai"),
    pytest.param(lambda url: AnthropicProvider(
        anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=url), model="m"), id="anthropic"),
]  # fmt: skip


@pytest.mark.parametrize("make", SCOPED)
@pytest.mark.parametrize("name", ["key", "subscription-key", "sig", "code"])
def test_a_credential_in_a_base_url_query_is_in_the_cache_scope_by_its_digest(
    make: Any, name: str
) -> None:
    # `Provider.cache_scope()` is "where no secret goes" (its userinfo never is); on main a
    # credential in the base URL's query was there as written ('server':
    # 'http://gw.test/llm?key=s3cr3t-...', 'query': {'key': 's3cr3t-...'}). It is there by its
    # sha256, as a header is: two credentials still key apart, the same one alike, and the
    # routing parameter beside it stays as written.
    def scope(secret: str) -> str:
        url = f"https://gw.test/llm?api-version=2024-10-21&{name}={secret}"
        return json.dumps(make(url).cache_scope(), sort_keys=True)

    first, again, other = scope("s3cr3t-v4lue-1"), scope("s3cr3t-v4lue-1"), scope("s3cr3t-v4lue-2")
    assert "s3cr3t" not in first + other and "2024-10-21" in first
    assert first == again and first != other
