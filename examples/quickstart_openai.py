"""Quickstart: a typed, checked `Sentiment` from OpenAI's Responses API.

    python examples/quickstart_openai.py

With `OPENAI_API_KEY` set, this calls the real API. Without it, the same code runs against a
stand-in of the API (a mock transport answering as the API does), so it works offline.

The stand-in's first answer is cut off by `max_output_tokens` (`status: "incomplete"`): the text
is a prefix of the document, and it may even parse. `responses.parse` in the `openai` package
would validate that prefix as if it were the answer; here the stop reason is read first, so the
cut is a `TruncatedOutput`, and with `MaxTokensRamp` the client asks again with twice the limit.
"""

from __future__ import annotations

import json
import os

import httpx2
import openai

from contracts import Sentiment
from sdk import MaxTokensRamp
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk.providers import OpenAIResponsesProvider

MODEL = "gpt-5.1-mini"

REVIEW = """\
The kettle looks lovely and boils fast, but the lid started sticking after a week and
customer service took nine days to answer my email.
"""


def main() -> None:
    provider = OpenAIResponsesProvider(openai_client(), model=MODEL)
    # A small first limit, doubled after a cut (up to 2048), so the example shows the ramp.
    ramp = MaxTokensRamp(factor=2.0, cap=2048, retries=2)
    with StructuredClient(provider, max_tokens=64, truncation=ramp) as client:
        try:
            result = client.generate(
                Sentiment, prompt="What is the sentiment of this review?", source=REVIEW
            )
        except StructuredOutputError as error:
            print(f"failed: {type(error).__name__}: {error}")
            return

    sentiment = result.value
    print(f"sentiment:  {sentiment.sentiment} ({sentiment.score:.2f})")
    print(f"reasoning:  {sentiment.reasoning}")
    for attempt in result.attempts:
        outcome = type(attempt.error).__name__ if attempt.error else "valid"
        print(
            f"attempt {attempt.number}: max_tokens={attempt.max_tokens}, "
            f"stop {attempt.raw_stop_reason}: {outcome}"
        )
    usage = result.usage
    print(
        f"tokens:     {usage.input_tokens} in ({usage.cache_read_tokens} cached), "
        f"{usage.output_tokens} out ({usage.reasoning_tokens} reasoning)"
    )
    unknown = "unknown (pip install 'structured-sdk[cost]')"
    print(f"cost:       {f'${result.cost:.6f}' if result.cost is not None else unknown}")
    print(f"removed:    {', '.join(str(r) for r in result.removed) or 'nothing'}")


def openai_client() -> openai.OpenAI:
    """The real client when a key is set; otherwise one whose transport is the stand-in."""
    if os.environ.get("OPENAI_API_KEY"):
        return openai.OpenAI()
    print("OPENAI_API_KEY is not set: answering from an offline stand-in of the API.\n")
    return openai.OpenAI(
        api_key="offline-stand-in",
        base_url="http://openai.stand-in/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(StandIn())),
    )


ANSWER = {
    "reasoning": "'looks lovely' and 'boils fast' are positive; 'lid started sticking' and "
    "'nine days to answer' are negative.",
    "sentiment": "mixed",
    "score": 0.6,
}


class StandIn:
    """Answers like the Responses API would: a reply cut by `max_output_tokens` while the limit
    is small, the whole document once it is large enough. Everything else (the client, its
    request, its parsing of this reply) is real."""

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        sent = json.loads(request.content)
        assert sent["text"]["format"]["strict"] is True
        limit = sent["max_output_tokens"]
        document = json.dumps(ANSWER)
        cut = limit < 128
        text = document[: limit // 2] if cut else document
        body = {
            "id": f"resp_standin{limit}",
            "object": "response",
            "created_at": 1767225600,
            "status": "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "error": None,
            "model": sent["model"],
            "output": [
                {
                    "id": f"msg_standin{limit}",
                    "type": "message",
                    "status": "incomplete" if cut else "completed",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
                    ],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 412,
                "input_tokens_details": {"cached_tokens": 256},
                "output_tokens": limit if cut else 96,
                "output_tokens_details": {"reasoning_tokens": 32},
                "total_tokens": 412 + (limit if cut else 96),
            },
        }
        headers = {"content-type": "application/json", "x-request-id": f"req_standin{limit}"}
        return httpx2.Response(200, json=body, headers=headers)


if __name__ == "__main__":
    main()
