"""A minimal HTTP/1.1 server on 127.0.0.1 that answers llama.cpp's and vLLM's routes late (row 3's
server, and one replica of the simulated fleet: `bench/fleet.py`).

`bench/run.py` and the tests start it in its own process (so that its work never runs on the
event loop being measured), read the port from its first line of output, and stop it with
SIGTERM.

- `POST /completion`: after `--delay` seconds, a llama.cpp `/completion` body whose `content` is a
  valid `Decision` (stop type `eos`, token counts, model name).
- `POST /v1/chat/completions`: after `--delay` seconds, an OpenAI chat completion (vLLM's shape)
  whose message is the same `Decision` (finish reason `stop`, usage).
- `--slots N`: at most N completions in service at once, as a replica with N sequence slots
  (llama-server's `--parallel`, vLLM's `max_num_seqs`); the others wait in arrival order, and
  each is answered `--delay` seconds after its service starts. Default: no limit.
- `--truncate-below N`: a completion for a prompt holding `[long]` whose token limit
  (`n_predict`, `max_tokens`) is under N is cut off there (llama.cpp's stop type `limit`,
  finish reason `length`), as a long document's answer is: tests retry those items with a
  larger limit.
- A chat prompt holding `[invalid]`, asked for the first time (one user message): a message
  whose `answer` is `maybe`, not one of the contract's values; asked again with feedback (a
  second user message), the valid `Decision`. Tests re-ask with it.
- `POST /gate/close` and `POST /gate/open`: while closed, completions are held (not started)
  until it opens; `--closed` starts it closed. Tests use it to keep a job running for as long
  as they need, whatever the machine's load. `POST /gate/open/N`: open for the next N
  completions started, then closed again by the server itself (a test that closed it after
  seeing N would let through however many more the job sent while the test was descheduled).
- `POST /apply-template`: at once, the messages rendered in ChatML; `GET /v1/models` and
  `POST /tokenize`: at once, from a toy vocabulary (ChatML's three control tokens, then one token
  per byte). These are what `LlamaCppProvider` learns from once (template shape, special
  tokens), unless it is given a `prompt_template`.
- `GET /stats`: completions received and answered, and the most in service and waiting at
  once (with `--basic`, requests refused too).
- `--basic USER:PASSWORD`: every request but `/stats` and `/gate/...` without the header
  `Authorization: Basic base64(USER:PASSWORD)` is answered `401` at once (and counted as
  `refused`), as a gateway that takes the base URL's `user:password@` does. Tests prove a
  job sends the credentials it was given.

It is a raw `asyncio.Protocol` rather than a web framework, so that a thousand requests cost it
little CPU and the figures measure the clients. It speaks just enough HTTP/1.1 for httpx:
keep-alive, `Content-Length` request bodies, one request at a time per connection.

Usage: python bench/fanout_server.py [--delay SECONDS] [--slots N] [--closed] [--truncate-below N]
       [--basic USER:PASSWORD]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import signal
import socket
from collections import deque
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
CHAT = json.dumps(
    {
        "id": "chatcmpl-9c2f6a4e1b7d4e0fa3c8d5b6e7f80912",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": DOCUMENT, "tool_calls": []},
                "logprobs": None,
                "finish_reason": "stop",
                "stop_reason": None,
            }
        ],
        "usage": {"prompt_tokens": 142, "total_tokens": 173, "completion_tokens": 31},
    }
).encode()
INVALID = json.dumps({**json.loads(DOCUMENT), "answer": "maybe"})
CHAT_INVALID = CHAT.replace(json.dumps(DOCUMENT).encode(), json.dumps(INVALID).encode())
CUT = DOCUMENT[: len(DOCUMENT) // 2]
COMPLETION_CUT = json.dumps(
    {**json.loads(COMPLETION), "content": CUT, "stop_type": "limit", "stop": True}
).encode()
CHAT_CUT = json.dumps(
    {
        **json.loads(CHAT),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": CUT, "tool_calls": []},
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        ],
    }
).encode()
NOT_FOUND = b'{"error": "not found"}'
UNAUTHORIZED = b'{"error": "unauthorized"}'
OK = b'{"ok": true}'
RECEIVED = {"completions": 0, "answered": 0, "peak_in_service": 0, "peak_waiting": 0}
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


def _prompt_text(prompt: Any) -> str:
    """A `/completion` prompt as text: its strings, and its token ids read back through the toy
    vocabulary (the provider sends user text as token ids)."""
    if isinstance(prompt, str):
        return prompt
    data = bytearray()
    for part in prompt if isinstance(prompt, list) else []:
        if isinstance(part, str):
            data.extend(part.encode())
        elif isinstance(part, int) and part >= len(SPECIALS):
            data.append(part - len(SPECIALS))
    return data.decode("utf-8", "replace")


def response(status: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Slots:
    """The replica's sequence slots: at most `limit` completions in service, the rest waiting in
    arrival order; and the gate that holds completions while closed."""

    def __init__(
        self,
        delay: float,
        limit: int | None,
        closed: bool,
        truncate_below: int | None = None,
        basic: str | None = None,
    ) -> None:
        self.delay = delay
        self.authorization = (
            "Basic " + base64.b64encode(basic.encode()).decode() if basic is not None else None
        )
        self.limit = limit
        self.closed = closed
        self.allowance: int | None = None  # (completions to start before the gate closes)
        self.truncate_below = truncate_below
        self.busy = 0
        self.waiting: deque[tuple[Connection, bytes]] = deque()

    def take(self, connection: Connection, reply: bytes) -> None:
        RECEIVED["completions"] += 1
        if self.closed or (self.limit is not None and self.busy >= self.limit):
            self.waiting.append((connection, reply))
            RECEIVED["peak_waiting"] = max(RECEIVED["peak_waiting"], len(self.waiting))
            return
        self._start(connection, reply)

    def _start(self, connection: Connection, reply: bytes) -> None:
        if self.allowance is not None:
            self.allowance -= 1
            if self.allowance <= 0:
                self.closed, self.allowance = True, None
        self.busy += 1
        RECEIVED["peak_in_service"] = max(RECEIVED["peak_in_service"], self.busy)
        asyncio.get_running_loop().call_later(self.delay, self._finish, connection, reply)

    def _finish(self, connection: Connection, reply: bytes) -> None:
        self.busy -= 1
        RECEIVED["answered"] += 1
        connection.write(response("200 OK", reply))
        self._next()

    def _next(self) -> None:
        while self.waiting and not self.closed:
            if self.limit is not None and self.busy >= self.limit:
                return
            self._start(*self.waiting.popleft())

    def gate(self, closed: bool, allowance: int | None = None) -> None:
        # (opened for no completion: closed; else closed by `_start` after the last one)
        self.closed, self.allowance = closed or allowance == 0, allowance or None
        self._next()


class Connection(asyncio.Protocol):
    """One client connection: parse a request, answer it (late for a completion)."""

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
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
            length, authorization = 0, None
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
                elif name.strip().lower() == "authorization":
                    authorization = value.strip()
            if len(self.buffer) < end + 4 + length:
                return  # the body is still arriving
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.answer(head[0].split(" ")[1], body, authorization)

    def answer(self, path: str, body: bytes, authorization: str | None = None) -> None:
        wanted = self.slots.authorization
        open_route = path == "/stats" or path.startswith("/gate/")
        if wanted is not None and authorization != wanted and not open_route:
            RECEIVED["refused"] += 1
            self.write(response("401 Unauthorized", UNAUTHORIZED))
        elif path == "/completion":
            self.slots.take(self, COMPLETION_CUT if self._cut(body, "n_predict") else COMPLETION)
        elif path == "/v1/chat/completions":
            cut = self._cut(body, "max_tokens")
            self.slots.take(self, CHAT_CUT if cut else CHAT_INVALID if _invalid(body) else CHAT)
        elif path == "/apply-template":
            self.write(response("200 OK", template(json.loads(body))))
        elif path == "/tokenize":
            self.write(response("200 OK", tokenize(json.loads(body))))
        elif path == "/v1/models":
            self.write(response("200 OK", MODELS))
        elif path == "/stats":
            self.write(response("200 OK", json.dumps(RECEIVED).encode()))
        elif path in ("/gate/open", "/gate/close"):
            self.slots.gate(closed=path == "/gate/close")
            self.write(response("200 OK", OK))
        elif path.startswith("/gate/open/") and path[len("/gate/open/") :].isdigit():
            self.slots.gate(closed=False, allowance=int(path[len("/gate/open/") :]))
            self.write(response("200 OK", OK))
        else:
            self.write(response("404 Not Found", NOT_FOUND))

    def _cut(self, body: bytes, limit_field: str) -> bool:
        """Whether this completion is cut off (`--truncate-below`: read the body only then)."""
        below = self.slots.truncate_below
        if below is None:
            return False
        request = json.loads(body)
        limit = request.get(limit_field)
        text = json.dumps(request.get("messages")) + _prompt_text(request.get("prompt"))
        return "[long]" in text and isinstance(limit, int) and limit < below

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def _invalid(body: bytes) -> bool:
    """A first ask (one user message) of a prompt holding `[invalid]` (parsed only then)."""
    if b"[invalid]" not in body:
        return False
    messages = json.loads(body).get("messages") or []
    return sum(1 for message in messages if message.get("role") == "user") == 1


async def serve(
    delay: float,
    slots: int | None = None,
    closed: bool = False,
    truncate_below: int | None = None,
    basic: str | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    state = Slots(delay, slots, closed, truncate_below, basic)
    if basic is not None:
        RECEIVED["refused"] = 0
    server = await loop.create_server(lambda: Connection(state), sock=sock, backlog=2048)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print(sock.getsockname()[1], flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--slots", type=int, default=None)
    parser.add_argument("--closed", action="store_true")
    parser.add_argument("--truncate-below", type=int, default=None)
    parser.add_argument("--basic", default=None, metavar="USER:PASSWORD")
    args = parser.parse_args()
    asyncio.run(serve(args.delay, args.slots, args.closed, args.truncate_below, args.basic))


if __name__ == "__main__":
    main()
