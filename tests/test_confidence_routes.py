"""`Result.confidence` on every route that reports token probabilities: realistic wire bodies
with logprobs for OpenAI Chat (through the official `openai` client on a mock transport) and
vLLM, the real llama-server for llama.cpp; and `None`, not an invented number, where a route
reports none."""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

import httpx
import httpx2
import pytest

from contracts import Decision
from sdk import StructuredClient
from sdk.providers import AnthropicProvider
from sdk.providers import LlamaCppProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import VLLMProvider
from sdk.providers._logprobs import tokens_of
from sdk.providers.llamacpp import CompletionStreamReader
from sdk.providers.llamacpp import read_completion
from sdk.providers.vllm import read_response as vllm_response
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import fixture_json
from tests.wire_support import openai_client

DOCUMENT = {"reasoning": "Within the limit.", "answer": "approve", "confidence": "high"}
TEXT = json.dumps(DOCUMENT, separators=(",", ":"))


def _pieces(text: str) -> list[str]:
    """The text as a BPE tokenizer might split it: words, punctuation runs, spaces ahead."""
    return re.findall(r' ?[A-Za-z]+|[{}":,.]+|.', text)


def _entries(text: str, chosen: dict[str, float]) -> list[dict[str, Any]]:
    """Wire entries as OpenAI, vLLM and llama-server write them: token, logprob, bytes, and one
    alternative; `chosen` sets a token's probability (the rest: near-certain)."""
    out = []
    for piece in _pieces(text):
        logprob = math.log(chosen.get(piece, 0.999))
        out.append({"token": piece, "logprob": logprob, "bytes": list(piece.encode()),
                    "top_logprobs": [{"token": "x", "logprob": -9.5, "bytes": [120]}]})  # fmt: skip
    return out


def _expected(chosen: dict[str, float], pointer: str) -> float:
    """By hand: the product over the tokens that overlap the value at `pointer` in TEXT."""
    name = pointer.strip("/")
    start = TEXT.index(f'"{name}":') + len(name) + 3
    end = TEXT.index('"', start + 1) + 1
    product, offset = 1.0, 0
    for piece in _pieces(TEXT):
        if offset < end and offset + len(piece) > start:
            product *= chosen.get(piece, 0.999)
        offset += len(piece)
    return product


CHOSEN = {"approve": 0.62, "high": 0.4}


def _chat_body() -> dict[str, Any]:
    body = copy.deepcopy(fixture_json("openai_chat_stop.json"))
    body["choices"][0]["message"]["content"] = TEXT
    body["choices"][0]["logprobs"] = {"content": _entries(TEXT, CHOSEN), "refusal": None}
    return body


def test_openai_chat_logprobs_through_the_official_client() -> None:
    reply = httpx2.Response(200, content=json.dumps(_chat_body()).encode(), headers=OPENAI_HEADERS)
    wire = Wire(reply)
    client = StructuredClient(OpenAIChatProvider(openai_client(wire), model="gpt-4.1-mini"))
    result = client.generate(Decision, prompt="Approve?", extra_body={"logprobs": True})
    assert wire.body["logprobs"] is True  # asked for, as the API wants it
    confidence = result.confidence
    assert confidence is not None and confidence.route == "reported"
    assert set(confidence) == {"/reasoning", "/answer", "/confidence"}
    assert confidence["/answer"] == pytest.approx(_expected(CHOSEN, "/answer"))
    assert confidence["/confidence"] == pytest.approx(_expected(CHOSEN, "/confidence"))
    assert confidence.details["/answer"].kept is None  # the API does not say what a mask removed
    assert confidence.lowest() == ("/confidence", pytest.approx(_expected(CHOSEN, "/confidence")))


def test_openai_chat_without_logprobs_has_no_confidence() -> None:
    wire = Wire(httpx2.Response(200, content=json.dumps(
        {**_chat_body(), "choices": [{**_chat_body()["choices"][0], "logprobs": None}]}
    ).encode(), headers=OPENAI_HEADERS))  # fmt: skip
    provider = OpenAIChatProvider(openai_client(wire), model="gpt-4.1-mini")
    result = StructuredClient(provider).generate(Decision, prompt="Approve?")
    assert result.value.answer == "approve" and result.confidence is None
    assert "logprobs" not in wire.body  # never asked for unless the caller does
    # A floor on such a reply is not applied, and the note says how to ask (it said the route
    # reports no token probabilities: Chat Completions does, when asked).
    floored = StructuredClient(provider).generate(Decision, prompt="Again?", min_confidence=0.5)
    [note] = [note for note in floored.notes if note.kind == "confidence"]
    assert note.written.startswith("not applied: ") and 'extra_body={"logprobs": True}' in str(
        note.written)  # fmt: skip


def test_a_route_without_token_probabilities_says_so() -> None:
    wire = Wire(anthropic_reply(text=TEXT))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    assert StructuredClient(provider).generate(Decision, prompt="Approve?").confidence is None


def test_vllm_logprobs_in_a_whole_reply_and_in_a_stream() -> None:
    body = _chat_body()
    body["model"] = "Qwen/Qwen3-8B"
    completion = vllm_response(body)
    assert completion.tokens is not None
    assert "".join(token.text for token in completion.tokens) == TEXT
    # The same tokens, one chunk each, as vLLM streams them.
    from sdk.providers._chat import ChatSSEStreamReader

    reader = ChatSSEStreamReader("vllm")
    for entry in body["choices"][0]["logprobs"]["content"]:
        choice = {"index": 0, "delta": {"content": entry["token"]},
                  "logprobs": {"content": [entry]}, "finish_reason": None}  # fmt: skip
        chunk = {"choices": [choice]}
        reader.feed("data: " + json.dumps(chunk))
    reader.feed("data: " + json.dumps({"choices": [{"index": 0, "delta": {},
                                                    "finish_reason": "stop"}]}))  # fmt: skip
    streamed = reader.finish()
    assert streamed.text == TEXT and streamed.tokens == completion.tokens


def _vllm(sent: list[dict[str, Any]], **settings: Any) -> VLLMProvider:
    """A vLLM provider whose server (a mock transport) answers as vLLM does: the tokens'
    logprobs when the request asks for them, none when it does not."""

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        body = _chat_body() | {"model": "Qwen/Qwen3-8B"}
        if sent[-1].get("logprobs") is not True:
            body["choices"][0]["logprobs"] = None
        return httpx.Response(200, json=body)

    http = httpx.Client(transport=httpx.MockTransport(server))
    return VLLMProvider("http://vllm.test", model="Qwen/Qwen3-8B", http_client=http, **settings)


def test_vllm_extra_body_may_not_turn_off_the_logprobs_confidence_needs() -> None:
    # The SDK asks vLLM for logprobs on every request (`Result.confidence`); on main a caller's
    # `extra_body={"logprobs": False}` was merged over it, sent, and the result had no
    # confidence, silently. `logprobs` is the SDK's field now, refused like `stream`.
    sent: list[dict[str, Any]] = []
    client = StructuredClient(_vllm(sent))
    result = client.generate(Decision, prompt="Approve?")
    assert sent[-1]["logprobs"] is True and result.confidence is not None
    assert result.confidence["/answer"] == pytest.approx(_expected(CHOSEN, "/answer"))
    refused = "extra_body may not set 'logprobs': vllm's request field 'logprobs' is the SDK's"
    with pytest.raises(ValueError, match=refused):
        client.generate(Decision, prompt="Approve?", extra_body={"logprobs": False})
    with pytest.raises(ValueError, match=refused):
        _vllm(sent, extra_body={"logprobs": False})
    assert len(sent) == 1  # neither was sent
    # (its other fields stay the caller's: more alternatives per token change no confidence)
    more = client.generate(Decision, prompt="Approve?", extra_body={"top_logprobs": 3})
    assert sent[-1]["top_logprobs"] == 3 and more.confidence == result.confidence


def test_a_token_ending_inside_a_character_keeps_offsets_in_characters() -> None:
    # "é" is two bytes; a byte-level tokenizer may give each its own token.
    entries = [
        {"token": '{"a":"', "logprob": 0.0, "bytes": list(b'{"a":"')},
        {"token": "bytes:\\xc3", "logprob": math.log(0.5), "bytes": [0xC3]},
        {"token": "bytes:\\xa9", "logprob": math.log(0.5), "bytes": [0xA9]},
        {"token": '"}', "logprob": 0.0, "bytes": list(b'"}')},
    ]
    tokens = tokens_of(entries)
    assert tokens is not None
    assert [t.text for t in tokens] == ['{"a":"', "", "é", '"}']
    assert [t.offset for t in tokens] == [0, 6, 6, 7]


@pytest.mark.parametrize(
    "entries",
    [[{"token": "{"}], [{"logprob": "low", "token": "{"}], [{"logprob": -1.0, "bytes": "x"}],
     ["{"], [{"logprob": float("nan"), "token": "{"}]],
)  # fmt: skip
def test_entries_of_another_shape_give_no_confidence(entries: list[Any]) -> None:
    assert tokens_of(entries) is None


def test_llamacpp_completion_probabilities_whole_and_streamed() -> None:
    entries = _entries(TEXT, CHOSEN)
    body = {**fixture_json("llamacpp_completion.json"), "content": TEXT,
            "completion_probabilities": entries}  # fmt: skip
    whole = read_completion(body)
    assert whole.tokens is not None and len(whole.tokens) == len(entries)
    reader = CompletionStreamReader()
    for entry in entries:
        reader.feed("data: " + json.dumps({"content": entry["token"], "stop": False,
                                           "completion_probabilities": [entry]}))  # fmt: skip
    final = {k: v for k, v in body.items() if k not in ("content", "completion_probabilities")}
    reader.feed("data: " + json.dumps({**final, "content": "", "stop": True}))
    assert reader.finish().tokens == whole.tokens


# --- the real llama-server ---


@pytest.mark.local
@pytest.mark.parametrize("mode", ["grammar", "json_schema", "openai"])
def test_a_real_llama_server_reports_each_values_probability(llama_server: str, mode: str) -> None:
    provider = LlamaCppProvider(llama_server, mode=mode)  # type: ignore[arg-type]
    client = StructuredClient(provider, retries=1)
    result = client.generate(Decision, prompt="Approve a $40 taxi receipt?", max_tokens=120,
                             temperature=0)  # fmt: skip
    confidence = result.confidence
    assert confidence is not None and confidence.route == "reported"
    written = result.value.model_dump(mode="json")
    assert set(confidence) == {f"/{name}" for name in written}
    assert all(0.0 <= p <= 1.0 for p in confidence.values())
    # The same call streamed, greedy: the same tokens, so the same confidence.
    *_, streamed = client.stream(Decision, prompt="Approve a $40 taxi receipt?", max_tokens=120,
                                 temperature=0)  # fmt: skip
    assert streamed.text == result.text
    assert dict(streamed.confidence) == pytest.approx(dict(confidence))


@pytest.mark.parametrize("mode", ["grammar", "json_schema", "openai"])
@pytest.mark.parametrize("field", [{"n_probs": 0}, {"logprobs": False}])
def test_llamacpp_extra_body_may_not_turn_off_the_probabilities_confidence_needs(
    mode: str, field: dict[str, Any]
) -> None:
    # llama-server is asked for each token's probability on every request (`n_probs: 1` on its
    # native route, `logprobs: true` on its OpenAI one): a caller's field set over it would
    # drop `Result.confidence` silently, as vLLM's `logprobs` did. Both are the SDK's fields.
    reached: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        reached.append(request)
        return httpx.Response(500)

    http = httpx.Client(transport=httpx.MockTransport(server))
    [name] = field
    refused = f"extra_body may not set '{name}': .*'{name}' is the SDK's"
    with pytest.raises(ValueError, match=refused):
        LlamaCppProvider("http://local.test", mode=mode, http_client=http, extra_body=field)  # type: ignore[arg-type]
    provider = LlamaCppProvider("http://local.test", mode=mode, http_client=http)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=refused):
        StructuredClient(provider).generate(Decision, prompt="Approve?", extra_body=field)
    assert reached == []  # refused before anything was sent
