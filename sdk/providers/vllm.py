"""vLLM's OpenAI-compatible server, with structured outputs through `structured_outputs`.

vLLM (0.12 and later) takes the schema in an extra body parameter, `structured_outputs:
{"json": schema}` (the older `guided_json` family was removed then). The schema goes in the vLLM
dialect: what its grammar backends enforce, without `multipleOf`, `uniqueItems`, `not` or the
conditional keywords (they would be ignored silently; here they are removed and reported).

vLLM renders the chat template and tokenizes the result with special tokens parsed, so a message
holding `<|im_end|>` would close the turn: content is checked for the control-token strings of
the common template families and `extra_control_tokens=` (the model's own: its tokenizer's
`added_tokens`), under `control_tokens="reject"` (default: `ControlTokenInContent` before sending)
or `"allow"` (unsafe with untrusted documents). See `sdk.providers._control_tokens`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from sdk._tools import Tool
from sdk.grammar.wire import vllm_structured_outputs
from sdk.providers._base import Completion, CompletionRequest, Exchange, Reply
from sdk.providers._chat import ChatSSEStreamReader, chat_messages, chat_tools, read_chat_body
from sdk.providers._control_tokens import (
    ControlTokenPolicy,
)
from sdk.providers._http import DEFAULT_TIMEOUT, OneRouteCodec, OneRouteProvider
from sdk.providers._profile import Profile, finished
from sdk.schema.dialects import VLLM

__all__ = ["VLLMCodec", "VLLMProvider", "build_request", "read_response"]

_PATH = "/v1/chat/completions"

VLLM_WIRE = Profile(
    "vllm",
    VLLM,
    grammar=True,
    tools=True,
    options={"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "seed": "seed",
             "stop": "stop", "presence_penalty": "presence_penalty",
             "frequency_penalty": "frequency_penalty", "repeat_penalty": "repetition_penalty"},
    owned=frozenset({"model", "messages", "max_tokens", "structured_outputs", "guided_json",
                     "guided_grammar", "guided_regex", "guided_choice", "response_format",
                     "tools", "tool_choice", "parallel_tool_calls", "stream", "stream_options"}),
)  # fmt: skip


def build_request(
    request: CompletionRequest,
    *,
    model: str,
    schema: dict[str, Any] | None,
    stream: bool = False,
) -> dict[str, Any]:
    """The `/v1/chat/completions` body with `structured_outputs`: the schema, the request's
    grammar, or nothing (free text)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request, "vllm", images=True),
        "max_tokens": request.max_tokens,
    }
    if schema is not None:
        body["structured_outputs"] = {"json": schema}
    elif request.grammar is not None:
        body.update(vllm_structured_outputs(request.grammar))
    elif request.kind == "tools":
        # vLLM constrains `required` and named choices itself; `auto` relies on the server's
        # `--tool-call-parser` (the wrong one returns the call as plain text).
        body.update(chat_tools(request, _parameters))
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return finished(body, request.options, request.extra_body, VLLM_WIRE)


def _parameters(tool: Tool) -> dict[str, Any]:
    return tool.wire(VLLM).schema


def read_response(body: dict[str, Any]) -> Completion:
    """A chat completion body -> `Completion` (`finish_reason` in the Chat Completions table)."""
    return read_chat_body(body)


class VLLMCodec(OneRouteCodec):
    """vLLM's OpenAI-compatible wire format with `structured_outputs` (no I/O)."""

    profile = VLLM_WIRE

    def build(self, request: CompletionRequest, *, stream: bool) -> Exchange:
        schema = self.checked(request)
        body = build_request(request, model=self.model, schema=schema, stream=stream)
        return Exchange(_PATH, body)

    def read(self, reply: Reply, request: CompletionRequest) -> Completion:
        return read_chat_body(reply.body, request_id=reply.request_id)

    def reader(self, request: CompletionRequest, request_id: str | None) -> ChatSSEStreamReader:
        return ChatSSEStreamReader(self.provider, request_id)


class VLLMProvider(OneRouteProvider):
    """A vLLM server: `VLLMProvider("http://127.0.0.1:8000", model="Qwen/Qwen3-8B")`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        model: str,
        control_tokens: ControlTokenPolicy = "reject",
        extra_control_tokens: Iterable[str] = (),
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        # Accept the server root or its `/v1` URL, as OpenAI clients are configured with.
        base_url = base_url.rstrip("/").removesuffix("/v1")
        super().__init__(
            base_url, model=model, http_client=http_client, timeout=timeout, headers=headers
        )
        self.codec = VLLMCodec(model, control_tokens, extra_control_tokens)
