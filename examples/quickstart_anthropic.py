"""Quickstart: a typed, checked `Decision` from Claude.

    python examples/quickstart_anthropic.py

With `ANTHROPIC_API_KEY` set, this calls the real API. Without it, the same code runs against a
stand-in of the API (a mock transport answering with recorded replies), so it works offline.
The stand-in's first answer breaks the contract on purpose, to show what the client does then:
it sends the model its own answer back with the violations (JSON pointer and message), once,
and the second answer passes every check.
"""

from __future__ import annotations

import json
import os

import anthropic
import httpx2

from contracts import Decision
from sdk import RefusedOutput
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk import TruncatedOutput
from sdk.providers import AnthropicProvider

MODEL = "claude-sonnet-4-6"

POLICY = "You review refund requests. Refunds are allowed within 30 days of delivery."
TICKET = """\
Refund request #4471
Order: 2026-03-02, delivered 2026-03-05. Request received 2026-03-17.
Customer: "The kettle stopped heating after a week. I would like my money back."
"""


def main() -> None:
    provider = AnthropicProvider(anthropic_client(), model=MODEL)
    with StructuredClient(provider, retries=2) as client:
        try:
            result = client.generate(
                Decision, system=POLICY, prompt="Decide this refund request.", source=TICKET
            )
        except RefusedOutput as error:  # the model declined: never retried, never parsed
            print(f"refused ({error.category}): {error.refusal}")
            return
        except TruncatedOutput as error:  # max_tokens cut the document: raise the limit
            print(f"cut off after {len(error.text or '')} characters: {error.stop_reason}")
            return
        except StructuredOutputError as error:  # every other way it can fail, typed
            print(f"failed: {type(error).__name__}: {error}")
            return

    decision = result.value  # a Decision: strict, typed, and checked against the schema
    print(f"answer:     {decision.answer}")
    print(f"confidence: {decision.confidence}")
    print(f"reasoning:  {decision.reasoning}")
    print(f"stop:       {result.stop_reason} (raw {result.raw_stop_reason!r})")
    for attempt in result.attempts:
        outcome = f"{type(attempt.error).__name__}: {attempt.error}" if attempt.error else "valid"
        print(f"attempt {attempt.number}: {outcome.splitlines()[0]}")
        if attempt.error is not None:
            for line in str(attempt.error).splitlines()[1:]:
                print(f"           {line.strip()}")
    print(f"tokens:     {result.usage.input_tokens} in, {result.usage.output_tokens} out")
    print(f"schema:     {result.schema.name} v{result.schema.version} "
          f"{result.schema.fingerprint[:12]}")  # fmt: skip


def anthropic_client() -> anthropic.Anthropic:
    """The real client when a key is set; otherwise one whose transport is the stand-in."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        return anthropic.Anthropic()
    print("ANTHROPIC_API_KEY is not set: answering from an offline stand-in of the API.\n")
    return anthropic.Anthropic(
        api_key="offline-stand-in",
        base_url="http://anthropic.stand-in",
        http_client=httpx2.Client(transport=httpx2.MockTransport(StandIn())),
    )


# The stand-in's answers, in order: the first breaks the contract, the second is valid.
STAND_IN_ANSWERS = (
    {
        "reasoning": "Delivered 2026-03-05, request 2026-03-17: 12 days, within 30.",
        "answer": "approve",
        "confidence": "certain",  # not a wire name of Confidence: the parser rejects it
    },
    {
        "reasoning": "Delivered 2026-03-05 and requested 2026-03-17, which is 12 days after "
        "delivery and within the 30-day window; the defect is plausible.",
        "answer": "approve",
        "confidence": "high",
    },
)


class StandIn:
    """Answers like the Messages API would: first a reply that breaks the contract, then a
    valid one. Everything else (the client, its request, its parsing of this reply) is real."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        sent = json.loads(request.content)
        assert sent["output_config"]["format"]["type"] == "json_schema"
        answer = STAND_IN_ANSWERS[min(self.calls, len(STAND_IN_ANSWERS) - 1)]
        self.calls += 1
        body = {
            "id": f"msg_standin{self.calls:04d}",
            "type": "message",
            "role": "assistant",
            "model": sent["model"],
            "content": [{"type": "text", "text": json.dumps(answer)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "stop_details": None,
            "usage": {"input_tokens": 250 + 60 * (len(sent["messages"]) - 1), "output_tokens": 64},
        }
        headers = {"content-type": "application/json", "request-id": f"req_standin{self.calls}"}
        return httpx2.Response(200, json=body, headers=headers)


if __name__ == "__main__":
    main()
