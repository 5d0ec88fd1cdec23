"""Helpers for the hosted-provider tests: realistic wire bodies and the real SDK clients on a mock
transport.

The clients are the real `anthropic` / `openai` clients with `_strict_response_validation=True`
(a fixture that does not match the SDK's own types fails the test) and an `httpx2.MockTransport`
whose handler is a `Wire`: it replays scripted replies and records every request, so a test can
assert on exactly what the adapter sent.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
from pydantic import Field

from sdk import Contract

FIXTURES = Path(__file__).parent / "fixtures"

# Recognisable keys: the secrets test searches every error, repr and log line for them.
ANTHROPIC_KEY = "sk-ant-api03-SECRET-anthropic-4f2b9c1d8e7a"
OPENAI_KEY = "sk-proj-SECRET-openai-9a8b7c6d5e4f"

GEMINI_KEY = "AIzaSyD-SECRET-gemini-7e6d5c4b3a29"

ANTHROPIC_REQUEST_ID = "req_011CWx7P3m9QeLrT2vKs8YhN"
OPENAI_REQUEST_ID = "req_5b1f0e6c2d9a48f3b7e4c1a0d8f2e9b6"

ANTHROPIC_HEADERS = {
    "content-type": "application/json",
    "request-id": ANTHROPIC_REQUEST_ID,
    "anthropic-organization-id": "7c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6",
}
OPENAI_HEADERS = {
    "content-type": "application/json",
    "x-request-id": OPENAI_REQUEST_ID,
    "openai-organization": "user-abc123",
    "openai-processing-ms": "1843",
}
SSE = {"content-type": "text/event-stream; charset=utf-8"}

DECISION = {
    "reasoning": "The invoice total of $4,180.00 matches purchase order PO-2291, the vendor is on "
    "the approved list, and the amount is below the requester's $5,000 approval limit.",
    "answer": "approve",
    "confidence": "high",
}

Reply = httpx2.Response | Exception | Callable[[httpx2.Request], httpx2.Response]
AsyncHandler = Callable[[httpx2.Request], Awaitable[httpx2.Response]]


def fixture(name: str) -> bytes:
    """A wire fixture's raw bytes."""
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> dict[str, Any]:
    """A JSON wire fixture, parsed (a fresh copy to adapt)."""
    data: dict[str, Any] = json.loads(fixture(name))
    return data


class Wire:
    """A MockTransport handler: answers with the scripted replies in order, records requests.

    The last reply repeats when the script runs out (a "storm" is one reply). An exception in the
    script is raised as the transport's failure (connection refused, read timeout).
    """

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        index = min(len(self.requests), len(self.replies)) - 1
        reply = self.replies[index]
        if isinstance(reply, Exception):
            raise type(reply)(str(reply), request=request)  # type: ignore[call-arg]
        if isinstance(reply, httpx2.Response):
            # A Response can be read once: hand out a copy of the scripted one.
            return httpx2.Response(reply.status_code, content=reply.content, headers=reply.headers)
        return reply(request)

    def bodies(self) -> list[dict[str, Any]]:
        """Every request body, parsed."""
        return [json.loads(request.content) for request in self.requests]

    @property
    def body(self) -> dict[str, Any]:
        """The last request's body."""
        return self.bodies()[-1]


# --- replies ---


def anthropic_reply(
    name: str = "anthropic_success.json",
    *,
    text: str | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **changes: Any,
) -> httpx2.Response:
    """A Messages API reply from a fixture, optionally with another text or stop reason."""
    if name.endswith(".sse"):
        return httpx2.Response(status, content=fixture(name), headers={**ANTHROPIC_HEADERS, **SSE})
    body = fixture_json(name)
    if text is not None:
        body["content"] = [{"type": "text", "text": text}]
    body.update(changes)
    return httpx2.Response(
        status, content=json.dumps(body).encode(), headers={**ANTHROPIC_HEADERS, **(headers or {})}
    )


def responses_reply(
    name: str = "openai_responses_completed.json", *, text: str | None = None, **changes: Any
) -> httpx2.Response:
    """A Responses API reply from a fixture, optionally with another document text."""
    if name.endswith(".sse"):
        return httpx2.Response(200, content=fixture(name), headers={**OPENAI_HEADERS, **SSE})
    body = fixture_json(name)
    if text is not None:
        message = next(item for item in body["output"] if item["type"] == "message")
        message["content"] = [
            {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        ]
    body.update(changes)
    return httpx2.Response(200, content=json.dumps(body).encode(), headers=OPENAI_HEADERS)


def chat_reply(
    name: str = "openai_chat_stop.json",
    *,
    text: str | None = None,
    finish_reason: str | None = None,
) -> httpx2.Response:
    """A Chat Completions reply from a fixture, optionally with another text or finish reason."""
    if name.endswith(".sse"):
        return httpx2.Response(200, content=fixture(name), headers={**OPENAI_HEADERS, **SSE})
    body = copy.deepcopy(fixture_json(name))
    if text is not None:
        body["choices"][0]["message"]["content"] = text
    if finish_reason is not None:
        body["choices"][0]["finish_reason"] = finish_reason
    return httpx2.Response(200, content=json.dumps(body).encode(), headers=OPENAI_HEADERS)


def error_reply(name: str, status: int, **headers: str) -> httpx2.Response:
    """An API error reply (`anthropic_error_429.json`, ...) with extra headers (`retry-after`)."""
    base = ANTHROPIC_HEADERS if name.startswith("anthropic") else OPENAI_HEADERS
    extra = {key.replace("_", "-"): value for key, value in headers.items()}
    return httpx2.Response(status, content=fixture(name), headers={**base, **extra})


GEMINI_HEADERS = {
    "content-type": "application/json; charset=UTF-8",
    "server": "scaffolding on HTTPServer2",
    "server-timing": "gfet4t7; dur=1402",
    "vary": "Origin, X-Origin, Referer",
}


def gemini_reply(
    name: str = "gemini_success.json", *, text: str | None = None, status: int = 200
) -> httpx2.Response:
    """A `generateContent` reply from a fixture (or an SSE stream), optionally with another
    document text."""
    if name.endswith(".sse"):
        headers = {**GEMINI_HEADERS, "content-type": "text/event-stream"}
        return httpx2.Response(status, content=fixture(name), headers=headers)
    body = fixture_json(name)
    if text is not None:
        body["candidates"][0]["content"]["parts"] = [{"text": text}]
    return httpx2.Response(status, content=json.dumps(body).encode(), headers=GEMINI_HEADERS)


# --- clients ---


def gemini_client(
    handler: Wire | AsyncHandler | None = None,
    *,
    async_handler: Wire | AsyncHandler | None = None,
    **options: Any,
) -> Any:
    """The real `google.genai.Client` on a mock transport (sync calls through `handler`, async
    ones through `async_handler`); `options` go to its `HttpOptions`."""
    from google import genai

    http: dict[str, Any] = {"base_url": "http://gemini.test", **options}
    if handler is not None:
        http["httpx_client"] = httpx2.Client(transport=httpx2.MockTransport(handler))
    if async_handler is not None:
        http["httpx_async_client"] = httpx2.AsyncClient(
            transport=httpx2.MockTransport(async_handler)
        )
    return genai.Client(api_key=GEMINI_KEY, http_options=http)


def anthropic_client(handler: Wire | AsyncHandler) -> anthropic.Anthropic:
    """The real sync Anthropic client on a mock transport, validating every reply strictly."""
    return anthropic.Anthropic(
        api_key=ANTHROPIC_KEY,
        base_url="http://anthropic.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,  # retries are ours
        _strict_response_validation=True,
    )


def anthropic_async_client(handler: Wire | AsyncHandler) -> anthropic.AsyncAnthropic:
    """The real async Anthropic client on a mock transport."""
    return anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY,
        base_url="http://anthropic.test",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
        max_retries=0,
        _strict_response_validation=True,
    )


def openai_client(handler: Wire | AsyncHandler) -> openai.OpenAI:
    """The real sync OpenAI client on a mock transport, validating every reply strictly."""
    return openai.OpenAI(
        api_key=OPENAI_KEY,
        base_url="http://openai.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
        _strict_response_validation=True,
    )


def openai_async_client(handler: Wire | AsyncHandler) -> openai.AsyncOpenAI:
    """The real async OpenAI client on a mock transport."""
    return openai.AsyncOpenAI(
        api_key=OPENAI_KEY,
        base_url="http://openai.test/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
        max_retries=0,
        _strict_response_validation=True,
    )


class Sleeps:
    """A `sleep` for the clients that records each wait instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.waits.append(seconds)


# --- a contract whose every constraint some dialect strips ---


class Bounded(Contract):
    """Each field's constraint is removed from the wire by at least one dialect."""

    reasoning: str
    count: int = Field(ge=1)  # Anthropic sends no numeric bounds
    code: str = Field(max_length=3)  # OpenAI strict sends no string lengths
    ratio: float = Field(ge=0)  # llama.cpp and Ollama bound integers only
    step: int = Field(multiple_of=5)  # vLLM's backends ignore multipleOf


BOUNDED = {"reasoning": "Within every bound.", "count": 1, "code": "abc", "ratio": 0.5, "step": 10}
