"""Row 3's server: a minimal HTTP/1.1 server on 127.0.0.1 that answers llama.cpp's routes late.

`bench/run.py` starts it in its own process (so that its work never runs on the event loop being
measured), reads the port from its first line of output, and stops it with SIGTERM.

- `POST /completion`: after `--delay` seconds, a llama.cpp `/completion` body whose `content` is a
  valid `Decision` (stop type `eos`, token counts, model name).
- `POST /apply-template`: at once, `{"prompt": ...}` (what `LlamaCppProvider` asks first unless it
  is given a `prompt_template`).

It is a raw `asyncio.Protocol` rather than a web framework, so that a thousand requests cost it
little CPU and the figures measure the clients. It speaks just enough HTTP/1.1 for httpx:
keep-alive, `Content-Length` request bodies, one request at a time per connection.

Usage: python bench/fanout_server.py [--delay SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket

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
TEMPLATE = json.dumps({"prompt": "<|im_start|>user\nApprove?<|im_end|>\n"}).encode()
NOT_FOUND = b'{"error": "not found"}'


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
            self.buffer = self.buffer[end + 4 + length :]
            self.answer(head[0].split(" ")[1])

    def answer(self, path: str) -> None:
        if path == "/completion":
            asyncio.get_running_loop().call_later(
                self.delay, self.write, response("200 OK", COMPLETION)
            )
        elif path == "/apply-template":
            self.write(response("200 OK", TEMPLATE))
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
