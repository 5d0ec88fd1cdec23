"""Lifecycle hooks: see every call and attempt a client makes, without wrapping the client.

    class Costs(Hooks):
        def on_result(self, call: CallInfo, result: Result[Any]) -> None:
            ledger.add(call.schema.name, result.usage)

    client = StructuredClient(provider, hooks=[Costs()])

Override the methods you need; each receives the `CallInfo` of its call (one object per
`generate`/`stream`, the same in every hook of that call, with an `extra` dict a hook may keep
its own state in, such as an open span). A hook that raises is logged and skipped: watching a
call never breaks it. `sdk.telemetry.OpenTelemetryHooks` is a `Hooks` too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdk._result import Result
    from sdk.errors import StructuredOutputError
    from sdk.providers._base import Completion, CompletionRequest
    from sdk.schema.canonical import SchemaInfo

__all__ = ["CallInfo", "Hooks", "run_hooks"]

logger = logging.getLogger("sdk.hooks")


@dataclass
class CallInfo:
    """What a hook knows of the call it watches."""

    provider: str
    model: str | None
    schema: SchemaInfo
    streaming: bool
    extra: dict[str, Any] = field(default_factory=dict)
    """Free for hooks to keep per-call state in (keyed by something of their own)."""


class Hooks:
    """No-op lifecycle hooks: subclass and override what you need."""

    def on_call(self, call: CallInfo) -> None:
        """A `generate` or `stream` call starts."""

    def before_request(self, call: CallInfo, request: CompletionRequest, attempt: int) -> None:
        """Attempt `attempt` (1-based) is about to be sent."""

    def after_reply(self, call: CallInfo, completion: Completion, attempt: int) -> None:
        """Attempt `attempt` got a reply (not yet parsed)."""

    def on_error(self, call: CallInfo, error: StructuredOutputError, attempt: int) -> None:
        """Attempt `attempt` failed (a provider error, or output the parser rejected)."""

    def on_result(self, call: CallInfo, result: Result[Any]) -> None:
        """The call returns `result`."""

    def on_failure(self, call: CallInfo, error: StructuredOutputError) -> None:
        """The call raises `error` (after its retries)."""


def run_hooks(hooks: Sequence[Hooks], method: str, *args: Any) -> None:
    """Call `method` on every hook; one that raises is logged and skipped."""
    for hook in hooks:
        try:
            getattr(hook, method)(*args)
        except Exception:
            logger.warning("hook %r.%s raised; ignored", hook, method, exc_info=True)
