"""OpenTelemetry spans per call and per attempt, following the GenAI semantic conventions.

    from sdk.telemetry import OpenTelemetryHooks
    client = StructuredClient(provider, hooks=[OpenTelemetryHooks()])

Each call (`generate`, `stream`, `call_tools`, `stream_tools`) is a span
(`structured_output {schema}`), each attempt a child span (`chat {model}`, naming the provider
and model that attempt went to, so a fallback shows) with the conventions' attributes:
`gen_ai.operation.name`,
`gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`,
`gen_ai.usage.input_tokens` / `output_tokens`, `gen_ai.response.finish_reasons`,
`gen_ai.response.id`, and `error.type` on failure; the call span adds the schema's name, version
and fingerprint, the attempts and the summed usage. `gen_ai.provider.name` is spelled as the
conventions spell it (`openai`, `anthropic`, `gcp.gemini`; the local engines by the SDK's own
names). Every span ends: an attempt's when it is over (the working of two-phase reasoning and a
request refused before sending included), the call's when it returns, raises, or is abandoned
(`sdk.cancelled`). Never the prompt, the output or a key:
`capture_content=True` opts in to the output text (`gen_ai.output.text`, bounded).

Needs `opentelemetry-api` (the `otel` extra); spans go to whatever tracer provider the
application configured (none: OpenTelemetry's no-op).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from sdk._values.profile import profile
from sdk.hooks import CallInfo
from sdk.hooks import Hooks

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from opentelemetry.trace import Tracer

    from sdk._result import Result
    from sdk._result import ToolCalls
    from sdk.errors import Attempt
    from sdk.errors import StructuredOutputError
    from sdk.providers._base import Completion
    from sdk.providers._base import CompletionRequest

__all__ = ["OpenTelemetryHooks", "genai_provider_name"]

_CALL = "sdk.telemetry.call"
_ATTEMPT = "sdk.telemetry.attempt"
_CONTENT_CHARS = 4000


class OpenTelemetryHooks(Hooks):
    """Spans for calls and attempts (see the module docstring)."""

    def __init__(self, tracer: Tracer | None = None, *, capture_content: bool = False) -> None:
        from opentelemetry import trace

        self._tracer = tracer if tracer is not None else trace.get_tracer("sdk")
        self._capture_content = capture_content

    def on_call(self, call: CallInfo) -> None:
        span = self._tracer.start_span(f"structured_output {call.schema.name}")
        span.set_attributes(
            {
                "gen_ai.operation.name": "structured_output",
                "gen_ai.provider.name": genai_provider_name(call.provider),
                "sdk.schema.name": call.schema.name,
                "sdk.schema.version": call.schema.version,
                "sdk.schema.fingerprint": call.schema.fingerprint,
                "sdk.streaming": call.streaming,
            }
        )
        if call.model:
            span.set_attribute("gen_ai.request.model", call.model)
        call.extra[_CALL] = span

    def before_request(self, call: CallInfo, request: CompletionRequest, attempt: int) -> None:
        from opentelemetry import trace

        parent = call.extra.get(_CALL)
        context = trace.set_span_in_context(parent) if parent is not None else None
        name = f"chat {call.model}" if call.model else "chat"
        span = self._tracer.start_span(name, context=context)
        span.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": genai_provider_name(call.provider),
                "gen_ai.request.max_tokens": request.max_tokens,
                "sdk.attempt": attempt,
                "sdk.output.kind": request.kind,
            }
        )
        if call.model:
            span.set_attribute("gen_ai.request.model", call.model)
        call.extra[_ATTEMPT] = span

    def after_reply(self, call: CallInfo, completion: Completion, attempt: int) -> None:
        span: Span | None = call.extra.get(_ATTEMPT)
        if span is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.usage.input_tokens": completion.usage.input_tokens,
            "gen_ai.usage.output_tokens": completion.usage.output_tokens,
            "gen_ai.response.finish_reasons": [str(completion.stop_reason)],
        }
        if completion.model:
            attributes["gen_ai.response.model"] = completion.model
        if completion.request_id:
            attributes["gen_ai.response.id"] = completion.request_id
        if self._capture_content and completion.text is not None:
            attributes["gen_ai.output.text"] = completion.text[:_CONTENT_CHARS]
        span.set_attributes(attributes)

    def after_attempt(
        self, call: CallInfo, attempt: int, error: StructuredOutputError | None
    ) -> None:
        span: Span | None = call.extra.pop(_ATTEMPT, None)
        if span is None:
            return
        if error is not None:
            _failed(span, error)
        span.end()

    def on_result(self, call: CallInfo, result: Result[Any] | ToolCalls) -> None:
        span: Span | None = call.extra.pop(_CALL, None)
        if span is None:
            return
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": result.usage.input_tokens,
                "gen_ai.usage.output_tokens": result.usage.output_tokens,
                "gen_ai.response.finish_reasons": [str(result.stop_reason)],
                "sdk.attempts": len(result.attempts),
            }
        )
        if result.model:
            span.set_attribute("gen_ai.response.model", result.model)
        _answered_by(span, call)
        span.end()

    def on_failure(self, call: CallInfo, error: StructuredOutputError) -> None:
        span: Span | None = call.extra.pop(_CALL, None)
        if span is None:
            return
        span.set_attribute("sdk.attempts", len(error.attempts))
        if error.usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", error.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", error.usage.output_tokens)
        _answered_by(span, call)
        _failed(span, error)
        span.end()

    def on_cancel(self, call: CallInfo, attempts: list[Attempt]) -> None:
        span: Span | None = call.extra.pop(_CALL, None)
        if span is None:
            return
        span.set_attributes({"sdk.attempts": len(attempts), "sdk.cancelled": True})
        span.end()


def genai_provider_name(provider: str) -> str:
    """`gen_ai.provider.name` for an SDK provider family (its profile's `telemetry_name`; its own
    name where the conventions have none, or no profile has it)."""
    try:
        found = profile(provider)
    except (ValueError, ImportError):  # (an installed provider package broken: `sdk._cost`)
        return provider
    return found.telemetry_name or found.name


def _answered_by(span: Span, call: CallInfo) -> None:
    """The call span names the provider and model of its last attempt (after a fallback, the
    one that answered), as its response model does; the span opened naming the first."""
    span.set_attribute("gen_ai.provider.name", genai_provider_name(call.provider))
    if call.model:
        span.set_attribute("gen_ai.request.model", call.model)


def _failed(span: Span, error: StructuredOutputError) -> None:
    from opentelemetry.trace import Status
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", type(error).__name__)
    # The message is the SDK's own (bounded, redacted at the provider boundary), never a prompt.
    span.set_status(Status(StatusCode.ERROR, type(error).__name__))
