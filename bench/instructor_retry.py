"""Row 4, instructor's side: the size of what instructor sends when it retries, run inside
bench/.venv-instructor (see `bench/instructor_stream.py` for why instructor has its own venv).

The same script as ours (`bench/retry_script.py`): a 20 KB invoice in the first user message,
replies invalid, invalid, valid. instructor talks to a real `openai.OpenAI` client whose HTTP
transport is an `httpx.MockTransport`: it answers each request with the next scripted reply (as
the tool call instructor's default `Mode.TOOLS` asks for) and records the request body. Input
tokens of each request are estimated from its messages with the estimate our `TestProvider`
uses (characters / 4 over every message's text, tool-call arguments included; the tool schema
is not counted, as ours is not). No network.

Usage: python bench/instructor_retry.py SHAPE     (SHAPE: prose or list-heavy)
Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import httpx  # noqa: E402
import instructor  # noqa: E402
import openai  # noqa: E402
from retry_script import estimate_tokens  # noqa: E402
from retry_script import first_message  # noqa: E402
from retry_script import retry_script  # noqa: E402

from contracts import InvoiceExtraction  # noqa: E402


def message_chars(message: dict[str, Any]) -> int:
    """The characters of one chat message the model reads: text and tool-call arguments."""
    content = message.get("content")
    if isinstance(content, str):
        chars = len(content)
    elif isinstance(content, list):
        chars = sum(len(part.get("text", "")) for part in content if isinstance(part, dict))
    else:
        chars = 0
    for call in message.get("tool_calls") or []:
        chars += len(call["function"]["arguments"])
    return chars


def scripted_openai(replies: Iterator[str], requests: list[dict[str, Any]]) -> openai.OpenAI:
    """An OpenAI client whose every request gets the next reply, as a forced tool call."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append(body)
        tool = body["tools"][0]["function"]["name"]
        call = {
            "id": f"call_{len(requests)}",
            "type": "function",
            "function": {"name": tool, "arguments": next(replies)},
        }
        return httpx.Response(
            200,
            json={
                "id": f"chatcmpl-{len(requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            },
        )

    http = httpx.Client(transport=httpx.MockTransport(handle))
    return openai.OpenAI(api_key="bench", base_url="http://bench.invalid/v1", http_client=http)


def main() -> None:
    script = retry_script(sys.argv[1])  # type: ignore[arg-type]
    requests: list[dict[str, Any]] = []
    client = instructor.from_openai(scripted_openai(iter(script.replies), requests))
    value = client.chat.completions.create(
        model="gpt-4o-mini",
        response_model=InvoiceExtraction,
        max_retries=len(script.replies),
        messages=[{"role": "user", "content": first_message(script.source)}],
    )
    tokens = [
        estimate_tokens(sum(message_chars(message) for message in body["messages"]))
        for body in requests
    ]
    print(
        json.dumps(
            {
                "instructor": version("instructor"),
                "mode": str(client.mode),
                "input_tokens": tokens,
                "roles": [[message["role"] for message in body["messages"]] for body in requests],
                "valid": isinstance(value, InvoiceExtraction),
            }
        )
    )


if __name__ == "__main__":
    main()
