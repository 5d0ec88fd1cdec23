"""Scripted servers for the promise matrix: every provider, answering from one neutral script.

A script is a list of `Say` replies (text, tool calls, how generation stopped); each provider's
encoder writes what its API sends for it, whole or streamed, built on the recorded fixtures and
the tool-call builders of `tests.tool_wire`, so the official SDK clients (strict response
validation on) and the local codecs read real wire bodies. The hosted providers get the real
`anthropic` / `openai` / `google-genai` clients on an `httpx2.MockTransport`; the local ones an
`httpx.MockTransport`; llama.cpp's preliminary routes answer as the real server does.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

import anthropic
import httpx
import httpx2
import openai
from google import genai

from sdk.providers import AnthropicProvider
from sdk.providers import FallbackProvider
from sdk.providers import GeminiProvider
from sdk.providers import LlamaCppProvider
from sdk.providers import OllamaProvider
from sdk.providers import OpenAIChatProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import Provider
from sdk.providers import VLLMProvider
from sdk.providers.test import TestProvider
from tests import tool_wire
from tests.local_support import llamacpp_setup
from tests.wire_support import ANTHROPIC_HEADERS
from tests.wire_support import ANTHROPIC_KEY
from tests.wire_support import GEMINI_KEY
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import OPENAI_KEY
from tests.wire_support import SSE
from tests.wire_support import fixture_json

Stop = Literal["end", "max_tokens", "refusal"]


@dataclass(frozen=True)
class Say:
    """One reply of a script: the text (a document, a sentence, prose beside calls, or what a
    refusal says), the tool calls, and how generation stopped."""

    text: str = ""
    calls: tuple[tool_wire.Call, ...] = ()
    stop: Stop = "end"
    status: int = 200
    """Not 200: an API error (503) with no body worth reading."""


def _pieces(text: str, size: int = 9) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(events: list[dict[str, Any]], *, named: bool = False) -> bytes:
    head = (lambda e: f"event: {e['type']}\n") if named else (lambda e: "")
    return "".join(f"{head(e)}data: {json.dumps(e)}\n\n" for e in events).encode()


# --- one encoder per wire: (say, streamed, grammar tool name) -> (headers, body) ---

Encoded = tuple[dict[str, str], bytes]


def anthropic_wire(say: Say, stream: bool, grammar: str | None) -> Encoded:
    stop = {"end": "tool_use" if say.calls else "end_turn", "max_tokens": "max_tokens",
            "refusal": "refusal"}[say.stop]  # fmt: skip
    if stream:
        return {**ANTHROPIC_HEADERS, **SSE}, tool_wire.anthropic_events(
            list(say.calls), say.text, stop
        )
    body = tool_wire.anthropic_body(list(say.calls), say.text, stop)
    return ANTHROPIC_HEADERS, json.dumps(body).encode()


def responses_wire(say: Say, stream: bool, grammar: str | None) -> Encoded:
    refusal = say.stop == "refusal"
    body = tool_wire.responses_body(list(say.calls), "" if grammar or refusal else say.text)
    message = copy.deepcopy(
        next(i for i in fixture_json("openai_responses_completed.json")["output"]
             if i["type"] == "message")
    )  # fmt: skip
    if refusal:
        message["content"] = [{"type": "refusal", "refusal": say.text}]
        body["output"].append(message)
    elif grammar is not None:
        body["output"].append({"id": "ctc_1", "type": "custom_tool_call", "status": "completed",
                               "call_id": "call_grammar_1", "name": grammar,
                               "input": say.text})  # fmt: skip
    if say.stop == "max_tokens":
        body["status"] = "incomplete"
        body["incomplete_details"] = {"reason": "max_output_tokens"}
    if not stream:
        return OPENAI_HEADERS, json.dumps(body).encode()
    if say.calls and say.stop == "end":  # the calls stream as a real server streams them
        return {**OPENAI_HEADERS, **SSE}, tool_wire.responses_events(list(say.calls), say.text)
    item = message["id"] if grammar is None else "ctc_1"
    kind = "response.custom_tool_call_input.delta" if grammar else "response.output_text.delta"
    events: list[dict[str, Any]] = [{"type": "response.created",
                                     "response": {**body, "status": "in_progress", "output": [],
                                                  "usage": None}}]  # fmt: skip
    if not refusal:
        for piece in _pieces(say.text):
            delta = {"type": kind, "item_id": item, "output_index": 0, "delta": piece}
            if grammar is None:
                delta.update(content_index=0, logprobs=[])
            events.append(delta)
    terminal = "response.incomplete" if say.stop == "max_tokens" else "response.completed"
    events.append({"type": terminal, "response": body})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return {**OPENAI_HEADERS, **SSE}, _sse(events, named=True)


def chat_wire(say: Say, stream: bool, grammar: str | None, model: str = "gpt-5.1-mini") -> Encoded:
    finish = {"end": None, "max_tokens": "length", "refusal": "stop"}[say.stop]
    refusal = say.stop == "refusal"
    if stream:
        body = tool_wire.chat_events(list(say.calls), "" if refusal else say.text, finish, model)
        if refusal:  # the refusal streams in its own delta field
            chunk = {"id": "chatcmpl-r", "object": "chat.completion.chunk",
                     "created": 1767225600, "model": model,
                     "choices": [{"index": 0, "delta": {"refusal": say.text}, "logprobs": None,
                                  "finish_reason": None}]}  # fmt: skip
            body = f"data: {json.dumps(chunk)}\n\n".encode() + body
        return {**OPENAI_HEADERS, **SSE}, body
    whole = tool_wire.chat_body(list(say.calls), None if refusal else say.text, finish, model)
    if refusal:
        whole["choices"][0]["message"]["refusal"] = say.text
    return OPENAI_HEADERS, json.dumps(whole).encode()


def gemini_wire(say: Say, stream: bool, grammar: str | None) -> Encoded:
    body = fixture_json("gemini_success.json")
    candidate = body["candidates"][0]
    candidate["content"]["parts"] = [{"text": say.text}]
    candidate["finishReason"] = {"end": "STOP", "max_tokens": "MAX_TOKENS",
                                 "refusal": "SAFETY"}[say.stop]  # fmt: skip
    headers = {"content-type": "application/json; charset=UTF-8"}
    if not stream:
        return headers, json.dumps(body).encode()
    chunks = []
    for piece in _pieces(say.text) or [""]:
        chunk = copy.deepcopy(body)
        chunk["candidates"][0]["content"]["parts"] = [{"text": piece}]
        chunk["candidates"][0].pop("finishReason")
        chunks.append(chunk)
    chunks.append(body | {"candidates": [{**candidate, "content": {"parts": [{"text": ""}],
                                                                   "role": "model"}}]})
    return {"content-type": "text/event-stream"}, _sse(chunks)


def llamacpp_wire(say: Say, stream: bool, grammar: str | None) -> Encoded:
    stop = {"end": "eos", "max_tokens": "limit", "refusal": "eos"}[say.stop]
    final = {"content": "" if stream else say.text, "stop": True, "stop_type": stop,
             "model": "smollm2.gguf", "tokens_predicted": 40, "tokens_evaluated": 131}  # fmt: skip
    if not stream:
        return {"content-type": "application/json"}, json.dumps(final).encode()
    events = [{"content": piece, "stop": False} for piece in _pieces(say.text)]
    return {"content-type": "text/event-stream"}, _sse([*events, final])


def ollama_wire(say: Say, stream: bool, grammar: str | None) -> Encoded:
    body = tool_wire.ollama_body(list(say.calls), say.text)
    body["done_reason"] = "length" if say.stop == "max_tokens" else "stop"
    if not stream:
        return {"content-type": "application/json"}, json.dumps(body).encode()
    lines = tool_wire.ollama_lines(list(say.calls), say.text).splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), "done_reason": body["done_reason"]}).encode()
    return {"content-type": "application/x-ndjson"}, b"\n".join(lines) + b"\n"


# --- the server ---


@dataclass
class Server:
    """A MockTransport handler (httpx or httpx2) answering a script; counts generations."""

    wire: Callable[[Say, bool, str | None], Encoded]
    script: list[Say]
    grammar: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: Any) -> Any:
        response = httpx2.Response if type(request).__module__.startswith("httpx2") else (
            httpx.Response)  # fmt: skip
        raw = request.read() if hasattr(request, "read") else request.content
        body = json.loads(raw) if raw else {}
        setup = llamacpp_setup(request.url.path, body)
        if setup is not None:
            return response(200, json=setup)
        self.requests.append(body)
        say = self.script[min(len(self.requests), len(self.script)) - 1]
        if say.status != 200:
            return response(say.status, json={"error": {"message": "unavailable"}})
        stream = body.get("stream") is True or "streamGenerateContent" in request.url.path
        tool = body.get("tools", [{}])[0].get("name") if self.grammar else None
        # llama.cpp answers tool calls on its OpenAI route.
        wire = chat_wire if request.url.path == "/v1/chat/completions" else self.wire
        headers, content = wire(say, stream, tool)
        return response(200, headers=headers, content=content)


def _hosted(name: str, server: Server, sync: bool, **settings: Any) -> Provider:
    transport = httpx2.MockTransport(server)
    http: Any = httpx2.Client(transport=transport) if sync else httpx2.AsyncClient(
        transport=transport)  # fmt: skip
    if name == "gemini":
        key = "httpx_client" if sync else "httpx_async_client"
        client = genai.Client(api_key=GEMINI_KEY,
                              http_options={"base_url": "http://gemini.test", key: http})
        return GeminiProvider(client, model="gemini-2.5-flash", **settings)  # fmt: skip
    if name == "anthropic":
        cls: Any = anthropic.Anthropic if sync else anthropic.AsyncAnthropic
        return AnthropicProvider(
            cls(api_key=ANTHROPIC_KEY, base_url="http://anthropic.test", http_client=http,
                _strict_response_validation=True),
            model="claude-sonnet-4-6", **settings,
        )  # fmt: skip
    cls = openai.OpenAI if sync else openai.AsyncOpenAI
    client = cls(api_key=OPENAI_KEY, base_url="http://openai.test/v1", http_client=http,
                 _strict_response_validation=True)  # fmt: skip
    if name == "openai_responses":
        return OpenAIResponsesProvider(client, model="gpt-5.1-mini", **settings)
    return OpenAIChatProvider(client, model="gpt-5.1-mini", **settings)


def _local(name: str, server: Server, sync: bool, **settings: Any) -> Provider:
    transport = httpx.MockTransport(server)
    http: Any = httpx.Client(transport=transport) if sync else httpx.AsyncClient(
        transport=transport)  # fmt: skip
    if name == "llamacpp":
        return LlamaCppProvider("http://local.test", mode="json_schema", http_client=http,
                                **settings)  # fmt: skip
    if name == "vllm":
        return VLLMProvider("http://local.test", model="m", http_client=http, **settings)
    return OllamaProvider("http://local.test", model="m", http_client=http, **settings)


WIRES: dict[str, Callable[[Say, bool, str | None], Encoded]] = {
    "anthropic": anthropic_wire,
    "openai_responses": responses_wire,
    "openai_chat": chat_wire,
    "gemini": gemini_wire,
    "llamacpp": llamacpp_wire,
    "vllm": lambda say, stream, grammar: chat_wire(say, stream, grammar, model="m"),
    "ollama": ollama_wire,
}


@dataclass(frozen=True)
class Setup:
    """A provider configuration of the matrix."""

    name: str
    grammar: bool
    tools: bool
    refusals: bool
    """Whether the wire can say "refused" (the local engines cannot)."""

    def build(
        self, script: list[Say], sync: bool, grammar: bool = False, **settings: Any
    ) -> tuple[Provider, Any]:
        """The provider, answering `script`, and what counts its generation requests
        (`settings`: more of the provider's constructor arguments, for the providers with a
        wire of their own)."""
        if self.name == "test":
            provider = TestProvider([_scripted(say) for say in script], repeat=True, chunk_size=9)
            return provider, provider
        if self.name == "fallback":
            # The primary is down (503s until its transport retries are spent); the secondary
            # answers the script.
            down = Server(chat_wire, [Say(status=503)])
            up = Server(anthropic_wire, script)
            primary = _hosted("openai_chat", down, sync)
            return FallbackProvider([primary, _hosted("anthropic", up, sync)]), _Both(down, up)
        server = Server(WIRES[self.name], script, grammar="grammar" if grammar else None)
        hosted = self.name in ("anthropic", "openai_responses", "openai_chat", "gemini")
        provider = (_hosted if hosted else _local)(self.name, server, sync, **settings)
        return provider, server


@dataclass
class _Both:
    down: Server
    up: Server

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [*self.down.requests, *self.up.requests]


def _scripted(say: Say) -> Any:
    from sdk import ToolCall
    from sdk.providers import Completion
    from sdk.stop_reason import StopReason

    if say.status != 200:
        return TestProvider.provider_error(say.status)
    if say.calls and say.stop == "end":
        return [ToolCall(c.id, c.name, c.arguments) for c in say.calls]
    stop = {"end": StopReason.END_TURN, "max_tokens": StopReason.MAX_TOKENS,
            "refusal": StopReason.REFUSAL}[say.stop]  # fmt: skip
    refusal = say.text if say.stop == "refusal" else None
    return Completion(say.text, stop, stop.value, refusal=refusal)


SETUPS = [
    Setup("anthropic", grammar=False, tools=True, refusals=True),
    Setup("openai_responses", grammar=True, tools=True, refusals=True),
    Setup("openai_chat", grammar=False, tools=True, refusals=True),
    Setup("gemini", grammar=False, tools=False, refusals=True),
    Setup("llamacpp", grammar=True, tools=True, refusals=False),
    Setup("vllm", grammar=True, tools=True, refusals=True),
    Setup("ollama", grammar=False, tools=True, refusals=False),
    Setup("test", grammar=True, tools=True, refusals=True),
    Setup("fallback", grammar=False, tools=True, refusals=True),
]
