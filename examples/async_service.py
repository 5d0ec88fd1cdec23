"""An async worker: classify a batch of customer reviews concurrently with AsyncStructuredClient.

    python examples/async_service.py

One `AsyncStructuredClient` serves every task of the worker: `max_concurrency` bounds the
requests in flight across all of them, rate limits are waited out (honouring `retry-after`),
and each review ends as a typed `Sentiment` or a typed error, never as a guess.

With `ANTHROPIC_API_KEY` set this calls the real API; without it, an offline stand-in of the API
answers (a mock transport: the client, the requests and the parsing are all real). The stand-in
rate-limits the first request once and, for one review, returns a score of 1.4: the Anthropic
dialect cannot send `le=1` to the API, so the parser catches it and the retry corrects it.
"""

from __future__ import annotations

import asyncio
import json
import os

import anthropic
import httpx2

from contracts import Sentiment
from sdk import AsyncStructuredClient
from sdk import InvalidOutput
from sdk import ProviderError
from sdk import Result
from sdk import StructuredOutputError
from sdk.providers import AnthropicProvider

MODEL = "claude-sonnet-4-6"
SYSTEM = "You classify the sentiment of customer reviews."

REVIEWS = {
    "r-101": "Arrived a day early and works perfectly. Love it!",
    "r-102": "The lid cracked the first week and support never answered.",
    "r-103": "It does what it says. Nothing more, nothing less.",
    "r-104": "Great sound, but the battery barely lasts an afternoon.",
    "r-105": "Absolutely the best purchase I made this year.",
    "r-106": "Broken on arrival. Returned it.",
}


async def classify(client: AsyncStructuredClient, review_id: str, text: str) -> str:
    """One unit of work: a review in, a line of report out. Failures are values here too."""
    try:
        result: Result[Sentiment] = await client.generate(
            Sentiment, system=SYSTEM, prompt="Classify this review.", source=text, max_tokens=512
        )
    except StructuredOutputError as error:
        return f"{review_id}: FAILED {type(error).__name__}: {str(error).splitlines()[0]}"
    value = result.value
    retried = [why(attempt.error) for attempt in result.attempts if attempt.error is not None]
    note = f"  (retried after {', '.join(retried)})" if retried else ""
    return f"{review_id}: {value.sentiment:<8} {value.score:.2f}{note}"


def why(error: StructuredOutputError) -> str:
    """A failed attempt in a few words: the HTTP status, or the error and where it was."""
    if isinstance(error, ProviderError):
        return f"HTTP {error.status_code}" if error.status_code else "a connection failure"
    if isinstance(error, InvalidOutput) and error.violations:
        return f"{type(error).__name__} at {error.violations[0].pointer}"
    return type(error).__name__


async def main() -> None:
    provider = AnthropicProvider(anthropic_client(), model=MODEL)
    async with AsyncStructuredClient(provider, max_concurrency=4) as client:
        lines = await asyncio.gather(
            *(classify(client, review_id, text) for review_id, text in REVIEWS.items())
        )
    for line in lines:
        print(line)
    print(f"{len(lines)} reviews classified")


def anthropic_client() -> anthropic.AsyncAnthropic:
    """The real async client when a key is set; otherwise one whose transport is the stand-in."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        return anthropic.AsyncAnthropic()
    print("ANTHROPIC_API_KEY is not set: answering from an offline stand-in of the API.\n")
    return anthropic.AsyncAnthropic(
        api_key="offline-stand-in",
        base_url="http://anthropic.stand-in",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(StandIn())),
        max_retries=0,  # retries are the SDK's job here, not the HTTP client's
    )


class StandIn:
    """Answers like the Messages API, from keywords: good enough to exercise the worker."""

    POSITIVE = ("love", "best", "perfectly", "great")
    NEGATIVE = ("broken", "cracked", "never", "barely", "returned")

    def __init__(self) -> None:
        self.calls = 0
        self.scored_too_high = False

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        call = self.calls
        await asyncio.sleep(0.01)  # a network round trip, so the calls really overlap
        if call == 1:  # the first request meets a rate limit, once
            error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
            return httpx2.Response(429, json=error, headers={"retry-after": "0"})
        sent = json.loads(request.content)
        text = sent["messages"][0]["content"].lower()
        positive = sum(word in text for word in self.POSITIVE)
        negative = sum(word in text for word in self.NEGATIVE)
        label = (
            "mixed" if positive and negative
            else "positive" if positive
            else "negative" if negative
            else "neutral"
        )  # fmt: skip
        score = 0.5 + 0.2 * max(positive, negative)
        if label == "positive" and len(sent["messages"]) == 1 and not self.scored_too_high:
            self.scored_too_high = True
            score = 1.4  # above `le=1`, which the Anthropic dialect cannot send to the API
        answer = {"reasoning": f"{positive} positive and {negative} negative cues.",
                  "sentiment": label, "score": round(score, 2)}  # fmt: skip
        body = {
            "id": f"msg_standin{call:04d}",
            "type": "message",
            "role": "assistant",
            "model": sent["model"],
            "content": [{"type": "text", "text": json.dumps(answer)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 180, "output_tokens": 40},
        }
        return httpx2.Response(200, json=body, headers={"request-id": f"req_{call}"})


if __name__ == "__main__":
    asyncio.run(main())
