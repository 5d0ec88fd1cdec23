"""vLLM's OpenAI-compatible server, with structured outputs through `structured_outputs`.

vLLM (0.12 and later) takes the schema in an extra body parameter, `structured_outputs:
{"json": schema}` (the older `guided_json` family was removed then). The schema goes in the vLLM
dialect: what its grammar backends enforce, without `multipleOf`, `uniqueItems`, `not` or the
conditional keywords (they would be ignored silently; here they are removed and reported).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

from sdk.providers._base import Completion, CompletionRequest, TextDelta
from sdk.providers._chat import ChatStream, chat_messages, read_chat_body
from sdk.providers._http import DEFAULT_TIMEOUT, HTTPProvider
from sdk.schema.dialects import VLLM

__all__ = ["VLLMProvider", "build_request", "read_response"]

_PATH = "/v1/chat/completions"


def build_request(
    request: CompletionRequest, *, model: str, schema: dict[str, Any], stream: bool = False
) -> dict[str, Any]:
    """The `/v1/chat/completions` body with `structured_outputs`."""
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request),
        "max_tokens": request.max_tokens,
        "structured_outputs": {"json": schema},
    }
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    body.update(request.options)
    return body


def read_response(body: dict[str, Any]) -> Completion:
    """A chat completion body -> `Completion` (`finish_reason` in the Chat Completions table)."""
    return read_chat_body(body)


class VLLMProvider(HTTPProvider):
    """A vLLM server: `VLLMProvider("http://127.0.0.1:8000", model="Qwen/Qwen3-8B")`."""

    name = "vllm"
    dialect = VLLM

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        model: str,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        # Accept the server root or its `/v1` URL, as OpenAI clients are configured with.
        base_url = base_url.rstrip("/").removesuffix("/v1")
        super().__init__(base_url, http_client=http_client, timeout=timeout, headers=headers)
        self._model = model

    @property
    def model(self) -> str:
        return self._model

    def _body(self, request: CompletionRequest, *, stream: bool = False) -> dict[str, Any]:
        wire = self.wire_schema(request.contract)
        assert wire is not None
        return build_request(request, model=self._model, schema=wire.schema, stream=stream)

    def complete(self, request: CompletionRequest) -> Completion:
        return read_response(self._post(_PATH, self._body(request)))

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return read_response(await self._apost(_PATH, self._body(request)))

    def stream(self, request: CompletionRequest) -> Iterator[TextDelta | Completion]:
        chat = ChatStream()
        for line in self._lines(_PATH, self._body(request, stream=True)):
            delta = chat.feed_sse(line, self.name)
            if delta is not None:
                yield delta
        yield chat.finish()

    async def astream(self, request: CompletionRequest) -> AsyncIterator[TextDelta | Completion]:
        chat = ChatStream()
        async for line in self._alines(_PATH, self._body(request, stream=True)):
            delta = chat.feed_sse(line, self.name)
            if delta is not None:
                yield delta
        yield chat.finish()
