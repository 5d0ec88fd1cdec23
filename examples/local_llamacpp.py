"""A typed, checked `Sentiment` from a local llama.cpp server (`llama-server`), streamed.

    llama-server -m model.gguf --port 8080          # in another terminal, then:
    LLAMA_SERVER_URL=http://127.0.0.1:8080 python examples/local_llamacpp.py

With `LLAMA_SERVER_URL` set, this talks to that server: the schema goes as `json_schema` in the
llama.cpp dialect (every property required, so the server keeps the declared field order), the
server constrains generation with it, and the parser checks what comes back (bounds the
dialect could not send included). Without it, the same code talks over real HTTP to a small
stand-in of the server started in this process, so it runs offline.

The stream prints each snapshot of the growing document; only the final `Result` has passed
every check.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

from contracts import Sentiment
from sdk import Partial
from sdk import Result
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk.providers import LlamaCppProvider

REVIEW = """\
Setup took two minutes and the picture is sharp, but the remote stopped pairing on day three
and the replacement has not arrived.
"""


def main() -> None:
    with server_url() as url:
        provider = LlamaCppProvider(url, mode="json_schema")
        with StructuredClient(provider, max_tokens=256) as client:
            try:
                for item in client.stream(
                    Sentiment, prompt="What is the sentiment of this review?", source=REVIEW
                ):
                    if isinstance(item, Partial):
                        print(f"snapshot:  {shortened(item.value)}")
                    elif isinstance(item, Result):
                        show(item)
            except StructuredOutputError as error:
                print(f"failed: {type(error).__name__}: {error}")


def shortened(value: dict[str, object]) -> str:
    """A snapshot on one line: long strings cut, so every field so far shows."""
    return json.dumps(
        {k: f"{v[:20]}..." if isinstance(v, str) and len(v) > 20 else v for k, v in value.items()}
    )


def show(result: Result[Sentiment]) -> None:
    print(f"sentiment: {result.value.sentiment} ({result.value.score:.2f})")
    print(f"reasoning: {result.value.reasoning}")
    print(f"stop:      {result.stop_reason} (raw {result.raw_stop_reason!r})")
    print(f"tokens:    {result.usage.input_tokens} in, {result.usage.output_tokens} out")
    removed = ", ".join(str(removal) for removal in result.removed) or "nothing"
    print(f"not sent (checked by the parser): {removed}")


@contextmanager
def server_url() -> Iterator[str]:
    """`LLAMA_SERVER_URL`, or the URL of a stand-in server running for the duration."""
    url = os.environ.get("LLAMA_SERVER_URL")
    if url:
        yield url
        return
    print("LLAMA_SERVER_URL is not set: answering from a local stand-in of llama-server.\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


ANSWER = {
    "reasoning": "'two minutes' and 'picture is sharp' are positive; 'stopped pairing' and "
    "'has not arrived' are negative.",
    "sentiment": "mixed",
    "score": 0.55,
}


# The stand-in's toy vocabulary: two ChatML control tokens, then one token per printable character.
SPECIAL = ["<|im_start|>", "<|im_end|>"]
VOCAB = SPECIAL + [chr(code) for code in range(32, 127)] + ["\n"]


def tokenize(content: str | list[int | str], parse_special: bool) -> list[int]:
    """Token ids of `content` (ids pass through; unknown characters become `?`)."""
    pieces = content if isinstance(content, list) else [content]
    ids: list[int] = []
    for piece in pieces:
        if isinstance(piece, int):
            ids.append(piece)
            continue
        at = 0
        while at < len(piece):
            special = next((s for s in SPECIAL if parse_special and piece.startswith(s, at)), None)
            if special is not None:
                ids.append(VOCAB.index(special))
                at += len(special)
                continue
            char = piece[at]
            ids.append(VOCAB.index(char) if char in VOCAB else VOCAB.index("?"))
            at += 1
    return ids


class StandIn(BaseHTTPRequestHandler):
    """Speaks the routes of llama-server the provider uses: `/v1/models` and `/tokenize` (which
    it learns the model's control tokens from, once), `/apply-template` (the chat template,
    learned once), and `/completion`, which streams the document as server-sent events."""

    def do_GET(self) -> None:
        assert self.path == "/v1/models", self.path
        models = {"object": "list", "data": [{"id": "stand-in.gguf",
                                              "meta": {"n_vocab": len(VOCAB)}}]}  # fmt: skip
        self._send("application/json", json.dumps(models).encode())

    def do_POST(self) -> None:
        sent = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path == "/tokenize":
            ids = tokenize(sent["content"], sent.get("parse_special", True))
            tokens: list[object] = (
                [{"id": i, "piece": VOCAB[i]} for i in ids] if sent.get("with_pieces") else ids
            )
            self._send("application/json", json.dumps({"tokens": tokens}).encode())
            return
        if self.path == "/apply-template":
            turns = "".join(
                f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in sent["messages"]
            ) + "<|im_start|>assistant\n"
            self._send("application/json", json.dumps({"prompt": turns}).encode())
            return
        assert self.path == "/completion" and "json_schema" in sent, self.path
        document = json.dumps(ANSWER)
        events = [{"content": document[i : i + 24], "stop": False}
                  for i in range(0, len(document), 24)]  # fmt: skip
        events.append({"content": "", "stop": True, "stop_type": "eos", "tokens_predicted": 41,
                       "tokens_evaluated": 96, "model": "stand-in.gguf"})  # fmt: skip
        if sent.get("stream"):
            body = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
            self._send("text/event-stream", body.encode())
        else:
            whole = {**events[-1], "content": document}
            self._send("application/json", json.dumps(whole).encode())

    def _send(self, content_type: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the example's output to what it shows


if __name__ == "__main__":
    main()
