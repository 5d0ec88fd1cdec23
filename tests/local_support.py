"""A small real HTTP server on 127.0.0.1 speaking the local engines' wire formats.

It answers llama.cpp's `/apply-template` (ChatML), `/v1/models`, `/tokenize` (`ToyVocabulary`)
and `/completion` (JSON, or SSE with `stream: true`),
the OpenAI-compatible `/v1/chat/completions` (vLLM, and llama.cpp's OpenAI route; SSE too) and
Ollama's `/api/chat` (JSON, or newline-delimited JSON). It runs under uvicorn in a thread, so the
adapters' httpx clients do real HTTP: real timeouts, real refused connections, real streaming.

Each generation request takes the next `Reply` from the script (the last one repeats), and the
server records every request body for the test to assert on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests import tool_wire
from tests.wire_support import DECISION
from tests.wire_support import fixture_json

DOCUMENT = json.dumps(DECISION, separators=(",", ":"))


class ToyVocabulary:
    """A llama.cpp-like vocabulary: three ChatML control tokens and one of the model's own (ids
    0-3), then one token per byte. Tokenizing with `parse_special` turns the control tokens'
    texts into their ids, as llama-server does; without it they are bytes like any text."""

    SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>")
    SIZE = len(SPECIALS) + 256
    _SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")

    @classmethod
    def piece(cls, token: int) -> str | list[int]:
        if token < len(cls.SPECIALS):
            return cls.SPECIALS[token]
        byte = token - len(cls.SPECIALS)
        return chr(byte) if byte < 128 else [byte]  # llama.cpp sends invalid UTF-8 as bytes

    @classmethod
    def tokenize(cls, content: str | list[str | int], parse_special: bool) -> list[int]:
        tokens: list[int] = []
        for item in content if isinstance(content, list) else [content]:
            if isinstance(item, int):
                tokens.append(item)
                continue
            for part in cls._SPLIT.split(item) if parse_special else [item]:
                if parse_special and part in cls.SPECIALS:
                    tokens.append(cls.SPECIALS.index(part))
                else:
                    tokens.extend(len(cls.SPECIALS) + byte for byte in part.encode())
        return tokens


def llamacpp_setup(path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """llama-server's answer on the routes `LlamaCppProvider` learns from (`/apply-template`
    renders ChatML, `/v1/models`, `/tokenize` with `ToyVocabulary`); `None` for other routes."""
    if path == "/apply-template":
        prompt = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"]
        )
        return {"prompt": prompt + "<|im_start|>assistant\n"}
    if path == "/v1/models":
        meta = {"vocab_type": 2, "n_vocab": ToyVocabulary.SIZE, "n_ctx": 4096}
        return {"object": "list", "data": [{"id": "toy.gguf", "meta": meta}]}
    if path == "/tokenize":
        tokens = ToyVocabulary.tokenize(body["content"], body.get("parse_special", True))
        if body.get("with_pieces"):
            return {"tokens": [{"id": t, "piece": ToyVocabulary.piece(t)} for t in tokens]}
        return {"tokens": tokens}
    return None


@dataclass
class Reply:
    """What the server does for one generation request."""

    text: str = DOCUMENT
    stop: str | None = None
    """The raw stop value in the endpoint's own terms; `None` is its clean end."""
    status: int = 200
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    legacy_stop_flags: bool = False
    """llama.cpp before `stop_type`: `stopped_eos` / `stopped_limit` / `stopped_word` booleans."""
    tool_calls: list[tool_wire.Call] | None = None
    """Tool calls the chat routes answer with (`text` is then the prose beside them)."""


class LocalServer:
    """The server; `url` once started. Tests set `script` and read `requests`. `keep_alive`:
    seconds an idle client connection is kept (uvicorn's default, 5)."""

    def __init__(self, *, keep_alive: int = 5) -> None:
        self.keep_alive = keep_alive
        self.script: list[Reply] = [Reply()]
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._served = 0
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/apply-template", self._setup, methods=["POST"]),
                Route("/v1/models", self._setup, methods=["GET"]),
                Route("/tokenize", self._setup, methods=["POST"]),
                Route("/completion", self._completion, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/api/chat", self._ollama, methods=["POST"]),
            ]
        )
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # --- lifecycle ---

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", timeout_keep_alive=self.keep_alive
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the local test server did not start")
            time.sleep(0.01)

    def open_connections(self) -> int:
        """How many client connections the server holds open now."""
        return len(self._server.server_state.connections) if self._server is not None else 0

    def connections(self) -> list[object]:
        """The client connections the server holds open now (uvicorn's own objects: the same
        object for as long as a connection lasts)."""
        return list(self._server.server_state.connections) if self._server is not None else []

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    def reset(self, *script: Reply) -> None:
        with self._lock:
            self.script = list(script) or [Reply()]
            self.requests = []
            self._served = 0

    def bodies(self, path: str) -> list[dict[str, Any]]:
        """The bodies of the requests to `path`, in order."""
        return [body for seen, body in self.requests if seen == path]

    # --- helpers ---

    async def _take(self, request: Request) -> tuple[dict[str, Any], Reply]:
        body = await request.json()
        with self._lock:
            self.requests.append((request.url.path, body))
            reply = self.script[min(self._served, len(self.script) - 1)]
            self._served += 1
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return body, reply

    @staticmethod
    def _failure(reply: Reply) -> Response | None:
        if reply.status < 400:
            return None
        return JSONResponse(
            {"error": {"code": reply.status, "message": reply.error, "type": "server_error"}},
            status_code=reply.status,
            headers=reply.headers,
        )

    @staticmethod
    def _pieces(text: str) -> list[str]:
        return [text[i : i + 7] for i in range(0, len(text), 7)]

    # --- llama.cpp native ---

    async def _setup(self, request: Request) -> Response:
        body = await request.json() if request.method == "POST" else {}
        self.requests.append((request.url.path, body))
        return JSONResponse(llamacpp_setup(request.url.path, body))

    async def _completion(self, request: Request) -> Response:
        body, reply = await self._take(request)
        failure = self._failure(reply)
        if failure is not None:
            return failure
        final = fixture_json("llamacpp_completion.json")
        stop = reply.stop or "eos"
        final.update(content=reply.text, stop_type=stop, prompt=body["prompt"])
        if reply.legacy_stop_flags:
            del final["stop_type"]
            final.update(stopped_eos=stop == "eos", stopped_limit=stop == "limit",
                         stopped_word=stop == "word")  # fmt: skip
        if not body.get("stream"):
            return JSONResponse(final)

        async def events() -> AsyncIterator[str]:
            for piece in self._pieces(reply.text):
                yield f"data: {json.dumps({'index': 0, 'content': piece, 'stop': False})}\n\n"
            yield f"data: {json.dumps({**final, 'content': ''})}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    # --- OpenAI-compatible chat (vLLM, llama.cpp's OpenAI route) ---

    async def _chat(self, request: Request) -> Response:
        body, reply = await self._take(request)
        failure = self._failure(reply)
        if failure is not None:
            return failure
        if reply.tool_calls is not None:
            return self._chat_tool_calls(body, reply)
        final = fixture_json("vllm_chat.json")
        final["model"] = body.get("model", final["model"])
        final["choices"][0]["message"]["content"] = reply.text
        final["choices"][0]["finish_reason"] = reply.stop or "stop"
        if not body.get("stream"):
            return JSONResponse(final)
        base = {key: final[key] for key in ("id", "object", "created", "model")}
        base["object"] = "chat.completion.chunk"

        async def events() -> AsyncIterator[str]:
            first = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
            }
            yield f"data: {json.dumps({**base, 'choices': [first]})}\n\n"
            for piece in self._pieces(reply.text):
                choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
            last = {"index": 0, "delta": {}, "finish_reason": reply.stop or "stop"}
            yield f"data: {json.dumps({**base, 'choices': [last]})}\n\n"
            yield f"data: {json.dumps({**base, 'choices': [], 'usage': final['usage']})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @staticmethod
    def _chat_tool_calls(body: dict[str, Any], reply: Reply) -> Response:
        calls, model = reply.tool_calls or [], body.get("model", "m")
        if not body.get("stream"):
            return JSONResponse(tool_wire.chat_body(calls, reply.text or None, reply.stop, model))
        events = tool_wire.chat_events(calls, reply.text, reply.stop, model)
        return Response(events, media_type="text/event-stream")

    # --- Ollama ---

    async def _ollama(self, request: Request) -> Response:
        body, reply = await self._take(request)
        failure = self._failure(reply)
        if failure is not None:
            return JSONResponse({"error": reply.error}, status_code=reply.status)
        if reply.tool_calls is not None:
            if not body.get("stream"):
                return JSONResponse(tool_wire.ollama_body(reply.tool_calls, reply.text))
            lines_ = tool_wire.ollama_lines(reply.tool_calls, reply.text)
            return Response(lines_, media_type="application/x-ndjson")
        final = fixture_json("ollama_chat.json")
        final["model"] = body.get("model", final["model"])
        final["message"]["content"] = reply.text
        final["done_reason"] = reply.stop or "stop"
        if not body.get("stream"):
            return JSONResponse(final)

        async def lines() -> AsyncIterator[str]:
            for piece in self._pieces(reply.text):
                chunk = {
                    "model": final["model"],
                    "created_at": final["created_at"],
                    "message": {"role": "assistant", "content": piece},
                    "done": False,
                }
                yield json.dumps(chunk) + "\n"
            yield json.dumps({**final, "message": {"role": "assistant", "content": ""}}) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")


class OneRequestServer:
    """A raw socket server for one request: it reads the request whole (its head and the body
    its `Content-Length` says), keeps its request line, answers `reply` as given (bytes: a reply
    cut short, a proxy's) and closes the connection. Every wait is bounded (10 s)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.request_line = b""
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(10)  # (a test that never connects ends the thread)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError), self.socket.accept()[0] as connection:
            connection.settimeout(10)
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(65536) or b"\r\n\r\n"
            head, _, body = received.partition(b"\r\n\r\n")
            self.request_line = head.split(b"\r\n", 1)[0]
            found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            length = int(found.group(1)) if found else 0
            while len(body) < length:  # (read whole: closing on unread bytes resets instead)
                body += connection.recv(65536) or b" " * length
            connection.sendall(self.reply)

    def close(self) -> None:
        self.socket.close()
        self.thread.join(timeout=10)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connecting to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
