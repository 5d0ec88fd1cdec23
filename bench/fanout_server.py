"""Row 3's server: a minimal HTTP/1.1 server on 127.0.0.1 that answers llama.cpp's routes late.

`bench/run.py` starts it in its own process (so that its work never runs on the event loop being
measured), reads the port from its first line of output, and stops it with SIGTERM.

- `POST /completion`: after `--delay` seconds, a llama.cpp `/completion` body whose `content` is a
  valid `Decision` (stop type `eos`, token counts, model name).
- `POST /apply-template`: at once, the messages rendered in ChatML; `GET /v1/models` and
  `POST /tokenize`: at once, from a toy vocabulary (ChatML's three control tokens, then one token
  per byte). These are what `LlamaCppProvider` learns from once (template shape, special
  tokens), unless it is given a `prompt_template`.

It is a raw `asyncio.Protocol` rather than a web framework, so that a thousand requests cost it
little CPU and the figures measure the clients. It speaks just enough HTTP/1.1 for httpx:
keep-alive, `Content-Length` request bodies, one request at a time per connection.

Usage: python bench/fanout_server.py [--delay SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import socket
from typing import Any

DOCUMENT = json.dumps(
    {
        "reasoning": "The refund is within policy: 12 EUR, bought nine days ago, unused.",
        "answer": "approve",
        "confidence": "high",
    }
)
COMPLETION = json.dumps(
    {
        "index": 0,
        "content": DOCUMENT,
        "id_slot": 0,
        "stop": True,
        "model": "bench-model.gguf",
        "tokens_predicted": 31,
        "tokens_evaluated": 142,
        "truncated": False,
        "stop_type": "eos",
        "stopping_word": "",
    }
).encode()
NOT_FOUND = b'{"error": "not found"}'
RECEIVED = {"completions": 0}
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
MODELS = json.dumps(
    {"data": [{"id": "bench-model.gguf", "meta": {"n_vocab": len(SPECIALS) + 256}}]}
).encode()


def template(body: dict[str, Any]) -> bytes:
    prompt = "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"]
    )
    return json.dumps({"prompt": prompt + "<|im_start|>assistant\n"}).encode()


def piece(token: int) -> Any:
    if token < len(SPECIALS):
        return SPECIALS[token]
    byte = token - len(SPECIALS)
    return chr(byte) if byte < 128 else [byte]


def tokenize(body: dict[str, Any]) -> bytes:
    content, special = body["content"], body.get("parse_special", True)
    tokens: list[int] = []
    for item in content if isinstance(content, list) else [content]:
        if isinstance(item, int):
            tokens.append(item)
            continue
        for part in SPLIT.split(item) if special else [item]:
            if special and part in SPECIALS:
                tokens.append(SPECIALS.index(part))
            else:
                tokens.extend(len(SPECIALS) + byte for byte in part.encode())
    if body.get("with_pieces"):
        return json.dumps({"tokens": [{"id": t, "piece": piece(t)} for t in tokens]}).encode()
    return json.dumps({"tokens": tokens}).encode()


def response(status: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Connection(asyncio.Protocol):
    """One client connection: parse a request, answer it (late for `/completion`)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return  # the body is still arriving
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.answer(head[0].split(" ")[1], body)

    def answer(self, path: str, body: bytes) -> None:
        if path == "/completion":
            RECEIVED["completions"] += 1
            asyncio.get_running_loop().call_later(
                self.delay, self.write, response("200 OK", COMPLETION)
            )
        elif path == "/apply-template":
            self.write(response("200 OK", template(json.loads(body))))
        elif path == "/tokenize":
            self.write(response("200 OK", tokenize(json.loads(body))))
        elif path == "/v1/models":
            self.write(response("200 OK", MODELS))
        elif path == "/stats":
            self.write(response("200 OK", json.dumps(RECEIVED).encode()))
        else:
            self.write(response("404 Not Found", NOT_FOUND))

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(delay: float) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = await loop.create_server(lambda: Connection(delay), sock=sock, backlog=2048)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print(sock.getsockname()[1], flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.1)
    asyncio.run(serve(parser.parse_args().delay))


if __name__ == "__main__":
    main()
