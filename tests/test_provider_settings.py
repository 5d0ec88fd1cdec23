"""The self-hosted providers' keywords, grouped below their constructors (`ServerSettings`,
`LlamaCppSettings`) and resolved once into frozen values the codecs read: every documented
keyword still works and reaches the codec, and a misspelled one is still a `TypeError` naming
the closest (as Python refuses an unexpected keyword). And the one way a request is built: a
batch item's is the live call's first request (`sdk.wire`'s builder)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from typing import Any

import anthropic
import httpx
import openai
import pytest

from contracts import Decision
from sdk.providers import AnthropicProvider
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import VLLMProvider
from sdk.providers._http import ServerProvider
from sdk.providers._http import ServerSettings
from sdk.providers.llamacpp import LlamaCppSettings
from sdk.providers.llamacpp import LlamaCppWire
from sdk.providers.vllm import VLLMCodec
from sdk.wire import read_reply

SERVER: dict[str, Any] = {
    "control_tokens": "allow",
    "extra_control_tokens": ["<|mine|>"],
    "timeout": 5.0,
    "headers": {"Authorization": "Bearer secret-token-1"},
    "extra_body": {"cache_prompt": False},
}


@pytest.mark.parametrize(
    ("make", "own"),
    [
        (lambda **kw: VLLMProvider(model="m", grounding=False, **kw), {}),
        (lambda **kw: OllamaProvider(model="m", **kw), {}),
        (
            lambda **kw: LlamaCppProvider(
                mode="grammar", grammar='root ::= "x"', model="m", grounding=False,
                grounding_limit=10, **kw,
            ),
            {"mode": "grammar", "grounding_limit": 10},
        ),
    ],
    ids=["vllm", "ollama", "llamacpp"],
)  # fmt: skip
def test_every_keyword_reaches_the_provider(make: Any, own: dict[str, Any]) -> None:
    provider = make(**SERVER)
    assert provider.model == "m"
    assert provider.codec.control_tokens == "allow"
    assert provider.codec.content.tokens.find("a <|mine|> b") is not None
    assert provider.extra_body == {"cache_prompt": False}
    assert "Bearer secret-token-1" in provider.secrets()
    assert provider._timeout == 5.0
    for name, value in own.items():
        assert getattr(provider.codec, name) == value
    if hasattr(provider.codec, "grounding"):
        assert provider.codec.grounding is False


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda **kw: VLLMProvider(model="m", **kw), "VLLMProvider"),
        (lambda **kw: OllamaProvider(model="m", **kw), "OllamaProvider"),
        (lambda **kw: LlamaCppProvider(**kw), "LlamaCppProvider"),
    ],
)
def test_a_misspelled_keyword_is_a_type_error_naming_the_closest(make: Any, where: str) -> None:
    with pytest.raises(TypeError, match=rf"{where}\(\) .* 'timeot' \(did you mean 'timeout'\?\)"):
        make(timeot=1.0)
    with pytest.raises(ValueError, match="control_tokens must be 'reject' or 'allow'"):
        make(control_tokens="maybe")
    with pytest.raises(ValueError, match="extra_body may not set 'messages'"):
        make(extra_body={"messages": []})
    with pytest.raises(TypeError, match=r"http_client must be an httpx\.Client"):
        make(http_client=object())
    assert isinstance(make(http_client=httpx.Client()).codec.control_tokens, str)


SERVER_KEYS = {"control_tokens", "extra_body", "extra_control_tokens", "headers", "http_client",
               "timeout"}  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "signature", "keys"),
    [
        (VLLMProvider, "(base_url: 'str' = 'http://127.0.0.1:8000', *, model: 'str', grounding: "
         "'bool' = True, **settings: 'Unpack[ServerSettings]') -> 'None'", SERVER_KEYS),
        (OllamaProvider, "(base_url: 'str' = 'http://127.0.0.1:11434', *, model: 'str', "
         "**settings: 'Unpack[ServerSettings]') -> 'None'", SERVER_KEYS),
        (LlamaCppProvider, "(base_url: 'str' = 'http://127.0.0.1:8080', **settings: "
         "'Unpack[LlamaCppSettings]') -> 'None'", SERVER_KEYS | {
             "grammar", "grounding", "grounding_limit", "learned", "mode", "model",
             "prompt_template"}),
    ],
    ids=["vllm", "ollama", "llamacpp"],
)  # fmt: skip
def test_the_servers_providers_are_made_one_way_with_their_documented_keywords(
    cls: type[ServerProvider[Any]], signature: str, keys: set[str]
) -> None:
    # The keywords are the documented ones, exactly; the making (check the keywords, make the
    # codec, keep the connection, vet extra_body) is `ServerProvider`'s, written once: each
    # constructor is the one call to it.
    assert str(inspect.signature(cls)) == signature
    declared = LlamaCppSettings if cls is LlamaCppProvider else ServerSettings
    assert declared.__optional_keys__ == keys and not declared.__required_keys__
    assert issubclass(cls, ServerProvider)
    source = inspect.getsource(cls.__init__)
    body = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(body, ast.FunctionDef) and len(body.body) == 1
    assert ast.unparse(body.body[0]).startswith("super().__init__(base_url, settings, ")


@pytest.mark.parametrize(
    ("cls", "given"),
    [
        (OpenAIResponsesProvider, (openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"),)),
        (OpenAIChatProvider, (openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"),)),
        (VLLMProvider, ()),
        (OllamaProvider, ()),
    ],
    ids=["openai-responses", "openai-chat", "vllm", "ollama"],
)  # fmt: skip
def test_a_missing_model_names_the_public_class_made(
    cls: type[Any], given: tuple[Any, ...]
) -> None:
    # On main both OpenAI providers said "_OpenAIProvider.__init__() missing 1 required
    # keyword-only argument: 'model'": a class the caller never made, nor can import from
    # sdk.providers. (`model` stays required in the signature: a type checker still says so.)
    with pytest.raises(TypeError) as caught:
        cls(*given)
    assert str(caught.value) == (
        f"{cls.__name__}.__init__() missing 1 required keyword-only argument: 'model'"
    )
    model = inspect.signature(cls).parameters["model"]
    assert model.kind is inspect.Parameter.KEYWORD_ONLY and model.default is model.empty
    assert cls(*given, model="m").model == "m"


def test_llamacpp_checks_its_mode_once_into_a_frozen_value() -> None:
    with pytest.raises(ValueError, match=r"mode must be 'auto'.* 'json_schema'.* 'grammar' or"):
        LlamaCppProvider(mode="fast")  # type: ignore[typeddict-item]
    with pytest.raises(ValueError, match="grammar= is only used in mode='grammar'"):
        LlamaCppProvider(grammar='root ::= "x"')
    wire = LlamaCppWire.of({"mode": "openai", "model": "m", "timeout": 3.0})
    assert (wire.mode, wire.model, wire.content.policy) == ("openai", "m", "reject")
    with pytest.raises(dataclasses.FrozenInstanceError):
        wire.mode = "auto"  # type: ignore[misc]
    assert LlamaCppProvider().mode == "auto" and LlamaCppProvider().codec.grounding is True


def test_wire_reply_functions_refuse_a_misspelled_keyword() -> None:
    with pytest.raises(TypeError, match=r"read_reply\(\) .* 'finish_reasons'.*'finish_reason'"):
        read_reply("vllm", Decision, "Approve?", "{}", finish_reasons="stop")  # type: ignore[call-arg]


def test_a_batch_item_s_request_is_the_live_call_s_first_request() -> None:
    # `request_for` builds through sdk.wire's builder: the request a live call sends first, with
    # every call option an item may set (extra_body included), and the pending feedback after
    # the item's conversation.
    from sdk import Message
    from sdk import StructuredClient
    from sdk.batch._items import InputItem
    from sdk.batch._outcome import ItemJob
    from sdk.batch._outcome import JobSettings
    from sdk.batch._outcome import request_for
    from sdk.batch._state import ItemRow
    from sdk.providers import Sampling
    from sdk.providers import TestProvider
    from tests.wire_support import DECISION

    options = {"temperature": 0.2, "stop": "END", "extra_body": {"metadata": {"k": "v"}}}
    conversation = (Message("user", "Approve invoice 7?"),)
    provider = TestProvider([DECISION], repeat=True)
    StructuredClient(provider).generate(
        Decision, messages=list(conversation), system="Be brief.", source="Invoice 7",
        max_tokens=300, **options,
    )  # fmt: skip
    item = InputItem("a", conversation, source="Invoice 7", system="Be brief.",
                     max_tokens=300, options=options)  # fmt: skip
    row = ItemRow(0, "a", 0, 0, 0, "pending", None, 0, 0, 0, [], 0, 0)
    job = ItemJob(Decision, provider, JobSettings())
    assert request_for(job, item, row) == provider.requests[0]
    assert provider.requests[0].options == Sampling(temperature=0.2, stop=("END",))
    asked_again = dataclasses.replace(row, feedback=[("assistant", "{}"), ("user", "Fix it.")])
    again = request_for(job, item, asked_again)
    assert [m.text for m in again.messages[-2:]] == ["{}", "Fix it."]
    with pytest.raises(TypeError, match="may not set 'system'"):
        request_for(job, dataclasses.replace(item, options={"system": "twice"}), row)


SERVERS = [
    pytest.param(lambda **kw: VLLMProvider(model="m", **kw), "VLLMProvider()", id="vllm"),
    pytest.param(lambda **kw: OllamaProvider(model="m", **kw), "OllamaProvider()", id="ollama"),
    pytest.param(lambda **kw: LlamaCppProvider(**kw), "LlamaCppProvider()", id="llamacpp"),
]


@pytest.mark.parametrize(("make", "where"), SERVERS)
@pytest.mark.parametrize(
    ("keyword", "bad", "error"),
    [
        # On main each was taken, and every call then failed as "ProviderError: unusable
        # reply: ..." (blaming the server: OverflowError, "Invalid value NaN", "Timeout value
        # out of range", "'str' object cannot be interpreted as an integer"), or, for 0,
        # retried a "connection failed" four times.
        ("timeout", 1e12, ValueError),
        ("timeout", float("nan"), ValueError),
        ("timeout", -1, ValueError),
        ("timeout", 0, ValueError),
        ("timeout", "5", TypeError),
        ("timeout", True, TypeError),
        ("timeout", httpx.Timeout(1e12), ValueError),
        ("timeout", httpx.Timeout(5.0, read=-1.0), ValueError),
        # A header's value that is not text failed at the first request.
        ("headers", {"X-Route": 1}, TypeError),
        # A control token that is not text: a bare "'int' object is not iterable".
        ("extra_control_tokens", [1], TypeError),
    ],
)
def test_a_server_setting_of_the_wrong_type_or_range_is_refused_when_made_naming_it(
    make: Any, where: str, keyword: str, bad: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=rf"{re.escape(where)}: {keyword}") as info:
        make(base_url="http://127.0.0.1:9", **{keyword: bad})
    assert type(info.value) is error


def test_a_server_timeout_a_clock_can_hold_is_taken_at_its_longest() -> None:
    week = 7 * 24 * 3600.0
    for timeout in (week, httpx.Timeout(week), httpx.Timeout(5.0, read=None), 0.5):
        VLLMProvider("http://127.0.0.1:9", model="m", timeout=timeout)


def test_llamacpp_s_own_settings_are_checked_when_made() -> None:
    # On main, prompt_template="x" (not a function) and grounding_limit=True were taken; the
    # template failed at the first call.
    with pytest.raises(TypeError, match=r"LlamaCppProvider\(\): prompt_template must be"):
        LlamaCppProvider(prompt_template="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"LlamaCppProvider\(\): grounding_limit must be"):
        LlamaCppProvider(grounding_limit=True)


@pytest.mark.parametrize("cls", [VLLMProvider, OllamaProvider])
@pytest.mark.parametrize(
    ("model", "error", "said"),
    [
        (5, TypeError, "model must be a string, not 5"),
        (None, TypeError, "model must be a string, not None"),
        ("", ValueError, "model must be text that is not blank, not ''"),
        ("  ", ValueError, "model must be text that is not blank, not '  '"),
        # (nothing a reader sees, as a prompt's rule reads it: a zero-width space)
        ("\u200b", ValueError, "model must be text that is not blank, not '\\u200b'"),
    ],
)
def test_a_one_route_server_s_model_is_checked_where_it_is_given(
    cls: type[Any], model: object, error: type[Exception], said: str
) -> None:
    # On main each was taken: `model=5` was sent as a JSON number, `""` as is, and every call
    # failed as the server's 404 or 400 ("ProviderError: server returned an error").
    with pytest.raises(error, match=rf"^{cls.__name__}\(\): {re.escape(said)}"):
        cls("http://127.0.0.1:1", model=model)
    assert cls("http://127.0.0.1:1", model="qwen3:8b").codec.model == "qwen3:8b"


@pytest.mark.parametrize(
    "make",
    [
        lambda model: AnthropicProvider(anthropic.Anthropic(api_key="k"), model=model),
        lambda model: OpenAIChatProvider(openai.OpenAI(api_key="k"), model=model),
        lambda model: OpenAIResponsesProvider(openai.OpenAI(api_key="k"), model=model),
    ],
    ids=["AnthropicProvider", "OpenAIChatProvider", "OpenAIResponsesProvider"],
)
@pytest.mark.parametrize(
    ("model", "error", "said"),
    [
        (5, TypeError, "model must be a string, not 5"),
        ("", ValueError, "model must be text that is not blank, not ''"),
        ("\u200b", ValueError, "model must be text that is not blank, not '\\u200b'"),
    ],
)
def test_a_hosted_provider_s_model_is_checked_where_it_is_given(
    make: Any, model: object, error: type[Exception], said: str
) -> None:
    # As the local servers' are: on main each was taken, and every call failed as the API's 400
    # (`model=5` sent as a JSON number).
    with pytest.raises(error, match=rf"^\w+Provider\(\): {re.escape(said)}"):
        make(model)
    assert make("m-1").model == "m-1"


def test_a_vllm_provider_s_grounding_is_checked_where_it_is_given() -> None:
    with pytest.raises(TypeError, match=r"^VLLMProvider\(\): grounding must be True or False"):
        VLLMProvider("http://127.0.0.1:1", model="m", grounding="yes")  # type: ignore[arg-type]

    # The class the caller made is named (a subclass's, or the codec made by itself), not
    # always `VLLMProvider()`.
    class Gateway(VLLMProvider):
        """A team's own vLLM provider."""

    with pytest.raises(TypeError, match=r"^Gateway\(\): grounding must be True or False"):
        Gateway("http://127.0.0.1:1", model="m", grounding="yes")  # type: ignore[arg-type]
    policy = VLLMProvider("http://127.0.0.1:1", model="m").codec.content
    with pytest.raises(TypeError, match=r"^VLLMCodec\(\): grounding must be True or False"):
        VLLMCodec("m", policy, grounding=1)  # type: ignore[arg-type]
