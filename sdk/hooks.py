"""Lifecycle hooks: see every call and attempt a client makes, without wrapping the client.

    class Costs(Hooks):
        def on_result(self, call: CallInfo, result: Result[Any]) -> None:
            ledger.add(call.schema.name, result.usage)

    client = StructuredClient(provider, hooks=[Costs()])

Override the methods you need; each receives the `CallInfo` of its call (one object per call:
`generate`, `stream`, `call_tools`, `stream_tools`, the same in every hook of that call, with an
`extra` dict a hook may keep its own state in, such as an open span). A hook that raises is
logged and skipped: watching a call never breaks it. `sdk.telemetry.OpenTelemetryHooks` is a
`Hooks` too.

The order, for every output kind and provider: `on_call` once; per attempt `before_request`,
then (a reply came) `after_reply`, then (it failed) `on_error`, then always `after_attempt`;
last, exactly one of `on_result`, `on_failure` or `on_cancel`. Every `before_request` has its
`after_attempt`, including the working of two-phase reasoning and a request the provider refused
before sending.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from sdk._result import Result
    from sdk._result import ToolCalls
    from sdk.errors import Attempt
    from sdk.errors import StructuredOutputError
    from sdk.providers._base import Completion
    from sdk.providers._base import CompletionRequest
    from sdk.schema.canonical import SchemaInfo

__all__ = ["CallInfo", "Hooks", "run_hooks"]

logger = logging.getLogger("sdk.hooks")


@dataclass
class CallInfo:
    """What a hook knows of the call it watches."""

    provider: str
    """The provider family the current attempt goes to (after a fallback, the next one's)."""
    model: str | None
    """The model the current attempt goes to, when the provider knows it up front."""
    schema: SchemaInfo
    streaming: bool
    extra: dict[str, Any] = field(default_factory=dict)
    """Free for hooks to keep per-call state in (keyed by something of their own)."""


class Hooks:
    """No-op lifecycle hooks: subclass and override what you need."""

    def on_call(self, call: CallInfo) -> None:
        """A call starts (`generate`, `stream`, `call_tools`, `stream_tools`)."""

    def before_request(self, call: CallInfo, request: CompletionRequest, attempt: int) -> None:
        """Attempt `attempt` (1-based) is about to be sent."""

    def after_reply(self, call: CallInfo, completion: Completion, attempt: int) -> None:
        """Attempt `attempt` got a reply (not yet parsed)."""

    def on_error(self, call: CallInfo, error: StructuredOutputError, attempt: int) -> None:
        """Attempt `attempt` failed (a provider error, or output the parser rejected)."""

    def after_attempt(
        self, call: CallInfo, attempt: int, error: StructuredOutputError | None
    ) -> None:
        """Attempt `attempt` is over: `error` failed it, or `None` (it succeeded, or moved the
        call on, as two-phase reasoning's working does)."""

    def on_result(self, call: CallInfo, result: Result[Any] | ToolCalls) -> None:
        """The call returns `result` (`ToolCalls` from `call_tools` and `stream_tools`)."""

    def on_failure(self, call: CallInfo, error: StructuredOutputError) -> None:
        """The call raises `error` (after its retries)."""

    def on_cancel(self, call: CallInfo, attempts: list[Attempt]) -> None:
        """The caller stopped the call before it ended (a stream closed early, a task
        cancelled, an interrupt); `attempts` are those it made."""


def run_hooks(hooks: Sequence[Hooks], method: str, *args: Any) -> None:
    """Call `method` on every hook; one that raises is logged and skipped."""
    for hook in hooks:
        try:
            getattr(hook, method)(*args)
        except Exception:
            logger.warning("hook %r.%s raised; ignored", hook, method, exc_info=True)
