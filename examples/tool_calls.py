"""Tool calls: typed, checked arguments from Claude, the tools run by the application.

    python examples/tool_calls.py

With `ANTHROPIC_API_KEY` set, this calls the real API. Without it, the same code runs against a
stand-in of the API (a mock transport answering like the Messages API), so it works offline.
The stand-in's first answer calls a tool with an argument outside its contract, to show what the
client does then: it sends the call back with a tool result marked as an error that says what was
wrong, and the second answer's calls pass every check. The application runs them (the SDK never
does) and sends the results back; the model answers in prose.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anthropic
import httpx2
from pydantic import Field

from sdk import Contract
from sdk import Message
from sdk import StructuredClient
from sdk import Tool
from sdk import ToolCall
from sdk import WireEnum
from sdk.providers import AnthropicProvider

MODEL = "claude-sonnet-4-6"


class Unit(WireEnum):
    """Temperature unit."""

    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class GetWeather(Contract):
    """Get the current weather in a city."""

    city: str = Field(description="City name, e.g. Paris", max_length=80)
    unit: Unit


WEATHER = Tool(GetWeather, name="get_weather")  # description: the docstring

FORECASTS = {"Paris": 18, "Oslo": 4}


def run(call: ToolCall) -> str:
    """The application's own implementation of the tool."""
    arguments: GetWeather = call.value  # typed, checked: no json.loads, no KeyError
    celsius = FORECASTS.get(arguments.city)
    if celsius is None:
        return f"no forecast for {arguments.city}"
    value = celsius if arguments.unit is Unit.CELSIUS else round(celsius * 9 / 5 + 32)
    return json.dumps({"city": arguments.city, "temperature": value, "unit": arguments.unit})


def main() -> None:
    provider = AnthropicProvider(anthropic_client(), model=MODEL)
    question = "Is it warmer in Paris or in Oslo right now?"
    with StructuredClient(provider, retries=2) as client:
        calls = client.call_tools(tools=[WEATHER], prompt=question, parallel_tool_calls=True)
        for attempt in calls.attempts:
            outcome = f"{type(attempt.error).__name__}" if attempt.error else "valid"
            print(f"attempt {attempt.number}: {outcome}")
            if attempt.error is not None:
                print(f"           {str(attempt.error).splitlines()[1].strip()}")
        results = []
        for call in calls.calls:
            print(f"call {call.id}: {call.tool}({call.value.city}, {call.value.unit.value})")
            results.append(call.result(run(call)))
        answer = client.call_tools(
            tools=[WEATHER],
            messages=[
                Message("user", question),
                calls.message(),  # the assistant turn with its calls
                Message("user", "", tool_results=tuple(results)),
            ],
        )
    print(f"answer: {answer.text}")
    usage = calls.usage + answer.usage
    print(f"tokens: {usage.input_tokens} in, {usage.output_tokens} out")


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


class StandIn:
    """Answers like the Messages API would: calls with a bad argument, then valid parallel
    calls, then (given the tool results) prose. Everything else is real."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        sent = json.loads(request.content)
        assert sent["tools"][0]["strict"] is True
        self.calls += 1
        last = sent["messages"][-1]["content"]
        results = [b for b in last if b["type"] == "tool_result"] if isinstance(last, list) else []
        content: list[dict[str, Any]]
        if results and not any(b["is_error"] for b in results):
            content = [{"type": "text", "text": "Paris is warmer: 18 °C against 4 °C in Oslo."}]
            stop = "end_turn"
        else:
            unit = "celsius" if results else "kelvin"  # not a wire name of Unit: rejected
            content = [
                {"type": "tool_use", "id": f"toolu_{self.calls}{city[0]}", "name": "get_weather",
                 "input": {"city": city, "unit": unit}}
                for city in ("Paris", "Oslo")
            ]  # fmt: skip
            stop = "tool_use"
        body = {
            "id": f"msg_standin{self.calls:04d}", "type": "message", "role": "assistant",
            "model": sent["model"], "content": content, "stop_reason": stop,
            "stop_sequence": None, "stop_details": None,
            "usage": {"input_tokens": 300 + 40 * len(sent["messages"]), "output_tokens": 48},
        }  # fmt: skip
        headers = {"content-type": "application/json", "request-id": f"req_standin{self.calls}"}
        return httpx2.Response(200, json=body, headers=headers)


if __name__ == "__main__":
    main()
