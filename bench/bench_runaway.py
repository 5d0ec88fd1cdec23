"""What the runaway guard saves (issue 33, rows 26 and 27).

    .venv/bin/python bench/bench_runaway.py          # prints every figure it measures

A test server on 127.0.0.1 speaks vLLM's OpenAI-compatible chat route and streams a runaway
reply one token per event, at a fixed pace (`PACE` seconds a token: a small model's decoding
speed on a CPU), until the request's `max_tokens`, the way a model that never closes its list
does (vLLM issues 38696 and 54497): a list item repeated (`"Dmitri Smith3", ...`), or newlines.
The same streamed call (`VLLMProvider`, `client.stream`, no retries) runs with the guard (the
default `runaway=` bound) and without it (`runaway=None`), alternated. The server counts the
tokens it generated before it noticed the client hang up: that count, and the call's wall time,
are the figures (guarded / unguarded, lower is better). The unguarded call pays every token up
to `max_tokens`; the guarded one stops within the bound (240 repeated characters or 64
whitespace characters by default) plus the tokens in flight when the connection closed.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import row  # noqa: E402
from units import factor  # noqa: E402

from sdk import Contract  # noqa: E402
from sdk import RunawayOutput  # noqa: E402
from sdk import StructuredClient  # noqa: E402
from sdk import TruncatedOutput  # noqa: E402
from sdk.providers import VLLMProvider  # noqa: E402

PACE = 0.004
"""Seconds between two streamed tokens (250 tokens a second)."""
MAX_TOKENS = 1500
QUICK_MAX_TOKENS = 300
ROUNDS = 3


class Order(Contract):
    """What the customer bought (the contract of the issue's runaway: an unbounded list)."""

    customer: str
    products: list[str]


# The runaway replies, token by token: a start, then a piece repeated until max_tokens.
REPLIES: dict[str, tuple[list[str], list[str]]] = {
    "a repeated list item": (
        ['{"', "customer", '":', ' "', "D", "mitri", '",', ' "', "products", '":', " ["],
        ['"', "D", "mitri", " Smith", "3", '",', " "],
    ),
    "newlines": (['{"', "customer", '":', ' "', "D", "mitri", '",'], ["\n"]),
}


def _tokens(kind: str, limit: int) -> Iterator[str]:
    start, piece = REPLIES[kind]
    return itertools.islice(itertools.chain(start, itertools.cycle(piece)), limit)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    kind = "newlines"
    generated: list[int]


class _Handler(BaseHTTPRequestHandler):
    """`POST /v1/chat/completions` with `stream: true`: the runaway reply as server-sent events,
    one token each; the count of tokens written before the client hung up is recorded."""

    server: _Server

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        limit = int(body["max_tokens"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        written = 0
        try:
            for token in _tokens(self.server.kind, limit):
                time.sleep(PACE)  # the model decodes the token
                self._event({"content": token}, None)
                written += 1
            self._event({}, "length", usage={"prompt_tokens": 40, "completion_tokens": limit,
                                             "total_tokens": 40 + limit})  # fmt: skip
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client closed the stream: the server stops generating
        finally:
            self.server.generated.append(written)

    def _event(self, delta: dict[str, str], finish: str | None, **extra: Any) -> None:
        chunk = {"id": "chatcmpl-runaway", "object": "chat.completion.chunk", "created": 0,
                 "model": "runaway", "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish}], **extra}  # fmt: skip
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.flush()


def _call(url: str, guarded: bool, max_tokens: int) -> tuple[float, str, int]:
    """One streamed call: wall seconds, how it ended, and the tokens the client counted."""
    client = StructuredClient(VLLMProvider(url, model="runaway"), retries=0)
    options: dict[str, Any] = {} if guarded else {"runaway": None}
    started = time.perf_counter()
    try:
        for _ in client.stream(Order, prompt="What did Dmitri buy?", max_tokens=max_tokens,
                               **options):  # fmt: skip
            pass
    except RunawayOutput as error:
        return time.perf_counter() - started, "RunawayOutput", error.tokens
    except TruncatedOutput as error:
        return time.perf_counter() - started, "TruncatedOutput", error.usage.output_tokens
    finally:
        client.close()
    raise AssertionError("a runaway reply ended in a value")


def measure(max_tokens: int = MAX_TOKENS, rounds: int = ROUNDS) -> dict[str, dict[str, Any]]:
    """Per reply kind and arm (guarded, unguarded): median wall seconds, median tokens the
    server generated, how the call ended; the arms alternated, `rounds` each."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.generated = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    found: dict[str, dict[str, Any]] = {}
    try:
        for kind in REPLIES:
            server.kind = kind
            seen: dict[bool, list[tuple[float, int, str, int]]] = {True: [], False: []}
            for _ in range(rounds):
                for guarded in (True, False):
                    before = len(server.generated)
                    seconds, ended, counted = _call(url, guarded, max_tokens)
                    deadline = time.monotonic() + 5  # the handler notices the hang-up
                    while len(server.generated) == before and time.monotonic() < deadline:
                        time.sleep(0.01)
                    seen[guarded].append((seconds, server.generated[-1], ended, counted))
            for guarded, runs in seen.items():
                found[f"{kind}/{'guarded' if guarded else 'unguarded'}"] = {
                    "seconds": statistics.median(r[0] for r in runs),
                    "generated": statistics.median(r[1] for r in runs),
                    "ended": runs[-1][2],
                    "counted": runs[-1][3],
                }
    finally:
        server.shutdown()
        server.server_close()
    return found


_FOUND: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}


def _measured(settings: Settings) -> tuple[int, dict[str, dict[str, Any]]]:
    """One measurement shared by both rows of a run."""
    max_tokens, rounds = (QUICK_MAX_TOKENS, 1) if settings.quick else (MAX_TOKENS, ROUNDS)
    if (max_tokens, rounds) not in _FOUND:
        _FOUND[max_tokens, rounds] = measure(max_tokens, rounds)
    return max_tokens, _FOUND[max_tokens, rounds]


@row(
    "runaway-tokens",
    number="26",
    title="runaway: tokens",
    measures="tokens a test server generates for a runaway reply (a list item repeated, or "
    "newlines, until `max_tokens`) on a streamed call with the runaway guard, against the same "
    "call without it (`runaway=None`)",
    unit="ratio of tokens generated (server's count, median of alternated rounds)",
)
def runaway_tokens_row(settings: Settings) -> Measured:
    max_tokens, found = _measured(settings)
    lines = []
    for kind in REPLIES:
        on, off = found[f"{kind}/guarded"], found[f"{kind}/unguarded"]
        lines.append(Line(
            f"runaway reply ({kind}), tokens generated: guard / no guard (max_tokens "
            f"{max_tokens:,})",
            factor(on["generated"] / off["generated"]),
            f"{on['generated']:,.0f} vs {off['generated']:,.0f} tokens; ended "
            f"{on['ended']} ({on['counted']:,} tokens counted) vs {off['ended']}",
            goal="<= 0.25x",
            met="yes" if on["generated"] / off["generated"] <= 0.25 else "NO",
            key=f"runaway-tokens-{kind.split()[-1]}",
        ))  # fmt: skip
    return Measured(lines, values={"max_tokens": max_tokens, "pace": PACE})


@row(
    "runaway-time",
    number="27",
    title="runaway: time",
    measures="wall time of the same streamed runaway calls as row 26 (the server decodes a "
    "token every few milliseconds), with the guard against without",
    unit="ratio of wall times (median of alternated rounds)",
)
def runaway_time_row(settings: Settings) -> Measured:
    max_tokens, found = _measured(settings)
    lines = []
    for kind in REPLIES:
        on, off = found[f"{kind}/guarded"], found[f"{kind}/unguarded"]
        lines.append(Line(
            f"runaway reply ({kind}), wall time: guard / no guard (a token every "
            f"{PACE * 1000:.0f} ms, max_tokens {max_tokens:,})",
            factor(on["seconds"] / off["seconds"]),
            f"{on['seconds']:.2f} s vs {off['seconds']:.2f} s",
            goal="<= 0.25x",
            met="yes" if on["seconds"] / off["seconds"] <= 0.25 else "NO",
            key=f"runaway-time-{kind.split()[-1]}",
        ))  # fmt: skip
    return Measured(lines)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for function in (runaway_tokens_row, runaway_time_row):
        for line in function(Settings(quick=quick)).lines:
            print(f"{line.measure}: {line.figure} ({line.detail})")
