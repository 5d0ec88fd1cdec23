"""Hooks see every call, attempt, reply, error and result; OpenTelemetry spans follow the GenAI
conventions and never carry the prompt or a key (checked with the SDK's in-memory exporter)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contracts import Decision
from sdk import AsyncStructuredClient
from sdk import Backoff
from sdk import ProviderError
from sdk import Result
from sdk import RetriesExhausted
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk.hooks import CallInfo
from sdk.hooks import Hooks
from sdk.providers import AnthropicProvider
from sdk.providers import Completion
from sdk.providers import CompletionRequest
from sdk.providers import TestProvider
from sdk.telemetry import OpenTelemetryHooks
from tests.wire_support import ANTHROPIC_KEY
from tests.wire_support import DECISION
from tests.wire_support import Sleeps
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import error_reply

PROMPT = "Approve invoice INV-7781 for the secret project Bluebird?"


class Recorder(Hooks):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_call(self, call: CallInfo) -> None:
        self.events.append(("call", call.schema.name, call.streaming))

    def before_request(self, call: CallInfo, request: CompletionRequest, attempt: int) -> None:
        self.events.append(("request", attempt))

    def after_reply(self, call: CallInfo, completion: Completion, attempt: int) -> None:
        self.events.append(("reply", attempt, str(completion.stop_reason)))

    def on_error(self, call: CallInfo, error: StructuredOutputError, attempt: int) -> None:
        self.events.append(("error", attempt, type(error).__name__))

    def on_result(self, call: CallInfo, result: Result[Any]) -> None:
        self.events.append(("result", len(result.attempts)))

    def on_failure(self, call: CallInfo, error: StructuredOutputError) -> None:
        self.events.append(("failure", type(error).__name__, len(error.attempts)))


class Broken(Hooks):
    def before_request(self, call: CallInfo, request: CompletionRequest, attempt: int) -> None:
        raise RuntimeError("a hook with a bug")


def test_hooks_see_each_step_of_a_retried_call() -> None:
    recorder = Recorder()
    provider = TestProvider(['{"answer": "maybe"}', DECISION])
    StructuredClient(provider, hooks=[recorder]).generate(Decision, prompt=PROMPT)
    assert recorder.events == [
        ("call", "Decision", False),
        ("request", 1),
        ("reply", 1, "end_turn"),
        ("error", 1, "SchemaViolation"),
        ("request", 2),
        ("reply", 2, "end_turn"),
        ("result", 2),
    ]


def test_hooks_see_transport_errors_and_the_final_failure() -> None:
    recorder = Recorder()
    wire = Wire(error_reply("anthropic_error_500.json", 500))
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    backoff = Backoff(retries=1)
    client = StructuredClient(provider, hooks=[recorder], backoff=backoff, sleep=Sleeps())
    with pytest.raises(ProviderError):
        client.generate(Decision, prompt=PROMPT)
    assert recorder.events[0] == ("call", "Decision", False)
    assert [e for e in recorder.events if e[0] == "error"] == [
        ("error", 1, "ProviderError"),
        ("error", 2, "ProviderError"),
    ]
    assert recorder.events[-1] == ("failure", "ProviderRetriesExhausted", 2)


def test_a_hook_that_raises_never_breaks_the_call(caplog: pytest.LogCaptureFixture) -> None:
    result = StructuredClient(TestProvider([DECISION]), hooks=[Broken()]).generate(
        Decision, prompt="x"
    )
    assert result.value.answer == "approve"
    warnings = [r for r in caplog.records if r.name == "sdk.hooks"]
    assert warnings and "raised; ignored" in warnings[0].getMessage()


def _tracing() -> tuple[OpenTelemetryHooks, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryHooks(provider.get_tracer("test")), exporter


def test_spans_per_call_and_attempt_with_genai_attributes() -> None:
    hooks, exporter = _tracing()
    wire = Wire(
        anthropic_reply(text='{"answer": "maybe"}'), anthropic_reply(text=json.dumps(DECISION))
    )
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    StructuredClient(provider, hooks=[hooks]).generate(Decision, prompt=PROMPT)
    spans = exporter.get_finished_spans()
    call = next(s for s in spans if s.name == "structured_output Decision")
    attempts = [s for s in spans if s.name == "chat claude-sonnet-4-6"]
    assert len(attempts) == 2
    assert all(a.parent is not None and a.parent.span_id == call.context.span_id for a in attempts)
    first, second = sorted(attempts, key=lambda s: s.attributes["sdk.attempt"])  # type: ignore[index]
    assert first.attributes["error.type"] == "SchemaViolation"  # type: ignore[index]
    assert second.attributes["gen_ai.provider.name"] == "anthropic"  # type: ignore[index]
    assert second.attributes["gen_ai.usage.output_tokens"] > 0  # type: ignore[index, operator]
    assert second.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)  # type: ignore[index]
    assert call.attributes["sdk.attempts"] == 2  # type: ignore[index]
    assert call.attributes["sdk.schema.fingerprint"] == Decision.fingerprint()  # type: ignore[index]
    shown = json.dumps([dict(s.attributes or {}) for s in spans]) + "".join(s.name for s in spans)
    assert "Bluebird" not in shown and ANTHROPIC_KEY not in shown  # no prompt, no key
    assert "gen_ai.output.text" not in shown


def test_content_is_captured_only_when_asked_and_failures_mark_the_call_span() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    hooks = OpenTelemetryHooks(tracer_provider.get_tracer("t"), capture_content=True)
    provider = TestProvider(['{"answer": "maybe"}'], repeat=True)
    with pytest.raises(RetriesExhausted):
        StructuredClient(provider, retries=1, hooks=[hooks]).generate(Decision, prompt="x")
    spans = exporter.get_finished_spans()
    call = next(s for s in spans if s.name.startswith("structured_output"))
    assert call.attributes["error.type"] == "RetriesExhausted"  # type: ignore[index]
    assert call.status.status_code.name == "ERROR"
    attempt = next(s for s in spans if s.name.startswith("chat"))
    assert attempt.attributes["gen_ai.output.text"] == '{"answer": "maybe"}'  # type: ignore[index]


def test_the_async_client_runs_the_same_hooks() -> None:
    recorder = Recorder()

    async def main() -> None:
        client = AsyncStructuredClient(TestProvider([DECISION]), hooks=[recorder])
        async for _ in client.stream(Decision, prompt="x"):
            pass

    asyncio.run(main())
    assert recorder.events[0] == ("call", "Decision", True)
    assert recorder.events[-1] == ("result", 1)
