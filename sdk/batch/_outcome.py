"""What one reply means for one item: the same parser and retry feedback as a live call.

A batch result (or a local call's outcome) is read by the provider's codec into a `Completion`
and handed to the attempts machine of live calls (`sdk.engine.attempts.Attempts`), started with
the item's conversation and with the retries it has left. Its decision is the live one:

- `Done`: the item is done, its line says `"outcome": "ok"` with the value;
- `Retry` (invalid output, retries left): the compact feedback the decision carries (the invalid
  reply once, as the assistant's turn, and the list of violations, replacing any earlier
  feedback) is stored on the item, which goes back to `pending` for a follow-up batch;
- `Fail`: the item is done with `"outcome": "failed"` and its last error.

Items the backend did not run (errored, expired, cancelled by the provider) are resubmitted
unchanged while `resubmits` allow and the error is one another try can fix (`is_retryable`,
the live transport policy); what stays failed keeps its last error.

Every failure of one item stays that item's: options the call rejects (a `TypeError` before
anything is sent), a request that cannot be built or encoded, an id that is not text. The item
is done with `"outcome": "failed"` and the error's type and message (`decide_error`); the job
goes on. Output lines are UTF-8 JSON, with any text that UTF-8 cannot hold (a lone surrogate
from a `\\udXXX` escape) written as a JSON escape instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import replace
from typing import Annotated
from typing import Any

from sdk._result import Result
from sdk._values.declared import AtLeast
from sdk._values.declared import check_fields
from sdk.batch._items import InputItem
from sdk.batch._state import ItemRow
from sdk.batch._state import ItemUpdate
from sdk.contract import Contract
from sdk.engine.attempts import Done
from sdk.engine.attempts import Fail
from sdk.engine.options import CallSpec
from sdk.engine.options import Method
from sdk.engine.retry import Backoff
from sdk.errors import InvalidOutput
from sdk.errors import ProviderError
from sdk.errors import RefusedOutput
from sdk.errors import StructuredOutputError
from sdk.parsing.parser import EnumCase
from sdk.prompt import Prompt
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Message
from sdk.providers._errors import is_retryable
from sdk.providers._provider import Provider
from sdk.schema.canonical import schema_info
from sdk.wire._calls import first_request
from sdk.wire._calls import started

__all__ = [
    "Decision",
    "ItemJob",
    "JobSettings",
    "decide_error",
    "decide_failure",
    "decide_live",
    "decide_reply",
    "error_record",
    "ok_line",
    "prompted",
    "request_for",
]

_NO_TRANSPORT_RETRIES = Backoff(retries=0)
_ITEM = Method("a batch item", streaming=False)
_ERROR_TEXT = 2000
"""How much of a failed item's raw output its output line keeps (the full text is on the
error while the job runs; the line is bounded so one bad reply cannot make it huge)."""


@dataclass(frozen=True, slots=True)
class JobSettings:
    """A job's per-item limits and parsing policy."""

    retries: Annotated[int, AtLeast(0)] = 2
    """Follow-ups after invalid output (with feedback), per item: the live `retries`."""
    resubmits: Annotated[int, AtLeast(0)] = 3
    """Follow-ups after the backend did not run an item (errored, expired, cancelled)."""
    max_tokens: Annotated[int, AtLeast(1)] = 4096
    """The output limit of items that do not set their own."""
    enum_case: EnumCase = "normalize"

    def __post_init__(self) -> None:
        check_fields(self)

    def spec(self, retries_left: int) -> CallSpec:
        """The call spec an item's reply is judged with: the job's parsing policy, the
        retries it has left, no transport retries (the job resubmits instead)."""
        settings = {"retries": retries_left, "enum_case": self.enum_case,
                    "max_tokens": self.max_tokens, "backoff": _NO_TRANSPORT_RETRIES}  # fmt: skip
        return CallSpec.defaults().updated(settings, "JobSettings()")


@dataclass(frozen=True, slots=True)
class Decision:
    """The item's new state, and its output line once it is done."""

    update: ItemUpdate
    line: bytes | None
    outcome: str | None


@dataclass(frozen=True, slots=True)
class ItemJob:
    """What every item of a job is asked and judged with: the contract, the provider, and the
    job's per-item limits."""

    contract: type[Contract]
    provider: Provider
    settings: JobSettings


def request_for(job: ItemJob, item: InputItem, row: ItemRow) -> CompletionRequest:
    """The request an item sends next: its conversation plus any pending feedback, built as a
    live call's first request is (`sdk.wire._calls.first_request`)."""
    feedback = tuple(_message(role, content) for role, content in row.feedback)
    left = max(0, job.settings.retries - row.retries_used)
    options = item.call_options(feedback)
    return first_request(job.settings.spec(left), job.provider, job.contract, options, _ITEM)


def _message(role: str, content: str) -> Message:
    return Message("assistant" if role == "assistant" else "user", content)


def decide_reply(
    job: ItemJob, item: InputItem, row: ItemRow, completion: Completion, batch: str | None
) -> Decision:
    """Judge a reply with the live attempts machine: done, or back to pending with its
    feedback."""
    left = max(0, job.settings.retries - row.retries_used)
    tokens_in = row.input_tokens + completion.usage.input_tokens
    tokens_out = row.output_tokens + completion.usage.output_tokens
    counted = replace(row, input_tokens=tokens_in, output_tokens=tokens_out)
    try:
        spec = job.settings.spec(left)
        machine = started(spec, job.provider, job.contract, item.call_options(), _ITEM)
        decision = machine.settled(machine.on_reply(completion))
    except Exception as error:  # the item's own failure: it fails, the job goes on
        return _failed(job.contract, job.provider, counted, error, batch)
    if isinstance(decision, Fail):
        return _failed(job.contract, job.provider, counted, decision.error, batch)
    if isinstance(decision, Done):
        update = _update(row, "done", tokens_in, tokens_out, outcome="ok")
        line = ok_line(row.output_id, decision.result, row.requests, tokens_in, tokens_out, batch)
        return Decision(update, line, "ok")
    update = _update(
        row,
        "pending",
        tokens_in,
        tokens_out,
        retries_used=row.retries_used + 1,
        feedback=[(message.role, message.text) for message in decision.feedback],
    )
    return Decision(update, None, None)


def decide_failure(
    job: ItemJob, row: ItemRow, error: ProviderError, batch: str | None, *, cancelled: bool = False
) -> Decision:
    """An item the backend did not answer: resubmitted while allowed, else failed with `error`.

    `cancelled`: the job was cancelled by its owner, so the item is not resubmitted."""
    if not cancelled and is_retryable(error) and row.resubmits_used < job.settings.resubmits:
        update = _update(
            row,
            "pending",
            row.input_tokens,
            row.output_tokens,
            resubmits_used=row.resubmits_used + 1,
            feedback=row.feedback,
        )
        return Decision(update, None, None)
    outcome = "cancelled" if cancelled else "failed"
    return _failed(job.contract, job.provider, row, error, batch, outcome=outcome)


def decide_error(
    contract: type[Contract], provider: Provider, row: ItemRow, error: Exception
) -> Decision:
    """An item that failed on its own before any reply (a request that cannot be built, options
    the call rejects, an unusable id): done, failed with that error."""
    return _failed(contract, provider, row, error, None)


def decide_live(
    contract: type[Contract],
    provider: Provider,
    settings: JobSettings,
    row: ItemRow,
    outcome: object,
) -> Decision:
    """A live call's outcome (the local backend: `generate` ran every attempt and its retries)
    -> the item done, with its line; or, for a provider failure another try can fix (the
    server down), back to pending while `resubmits` allow."""
    if isinstance(outcome, Result):
        usage, attempts = outcome.usage, len(outcome.attempts)
        tokens_in = row.input_tokens + usage.input_tokens
        tokens_out = row.output_tokens + usage.output_tokens
        requests = row.requests + attempts  # with the tries of earlier passes (resubmits)
        update = _update(row, "done", tokens_in, tokens_out, requests=requests, outcome="ok")
        return Decision(
            update, ok_line(row.output_id, outcome, requests, tokens_in, tokens_out, None), "ok"
        )
    if not isinstance(outcome, StructuredOutputError):
        if isinstance(outcome, Exception):
            return decide_error(contract, provider, row, outcome)
        raise TypeError(f"a live call gives a Result or an exception, not {outcome!r}")
    counted = replace(
        row,
        requests=row.requests + len(outcome.attempts),
        input_tokens=row.input_tokens + outcome.usage.input_tokens,
        output_tokens=row.output_tokens + outcome.usage.output_tokens,
    )
    if isinstance(outcome, ProviderError):  # resent while allowed, as a hosted item would be
        return decide_failure(ItemJob(contract, provider, settings), counted, outcome, None)
    return _failed(contract, provider, counted, outcome, None)


def _failed(
    contract: type[Contract],
    provider: Provider,
    row: ItemRow,
    error: Exception,
    batch: str | None,
    outcome: str = "failed",
) -> Decision:
    """The item done with `error`; its tokens are the row's (counted with the reply's)."""
    tokens_in, tokens_out = row.input_tokens, row.output_tokens
    text = error.message if isinstance(error, StructuredOutputError) else str(error)
    message = _storable(text.splitlines()[0] if text.strip() else type(error).__name__)
    update = _update(
        row,
        "done",
        tokens_in,
        tokens_out,
        outcome=outcome,
        error_type=type(error).__name__,
        error=message,
    )
    record: dict[str, Any] = {
        "id": row.output_id,
        "outcome": outcome,
        "error": error_record(error),
        "schema": _schema(contract),
        "provider": provider.name,
        "model": provider.model,
        "attempts": row.requests,
        "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
        "batch": batch,
    }
    return Decision(update, _line(record), outcome)


def error_record(error: Exception) -> dict[str, Any]:
    """A typed error as JSON: its type, message, stop reason, violations and raw text (an error
    that is not the SDK's: its type and message)."""
    if not isinstance(error, StructuredOutputError):
        return {
            "type": type(error).__name__,
            "message": str(error),
            "stop_reason": None,
            "raw_stop_reason": None,
            "text": None,
            "text_truncated": False,
        }
    record: dict[str, Any] = {
        "type": type(error).__name__,
        "message": error.message,
        "stop_reason": error.stop_reason.value if error.stop_reason is not None else None,
        "raw_stop_reason": error.raw_stop_reason,
    }
    if isinstance(error, InvalidOutput):
        record["violations"] = [
            {"pointer": v.pointer, "message": v.message} for v in error.violations[:50]
        ]
    if isinstance(error, RefusedOutput):
        record["refusal"] = error.refusal
    if isinstance(error, ProviderError):
        record["status_code"] = error.status_code
        record["request_id"] = error.request_id
    text = error.text
    record["text"] = text if text is None or len(text) <= _ERROR_TEXT else text[:_ERROR_TEXT]
    record["text_truncated"] = text is not None and len(text) > _ERROR_TEXT
    return record


def ok_line(
    item_id: str | int,
    result: Result[Any],
    attempts: int,
    tokens_in: int,
    tokens_out: int,
    batch: str | None,
) -> bytes:
    """The output line of an item done with a value."""
    record = {
        "id": item_id,
        "outcome": "ok",
        "value": result.value.model_dump(mode="json"),
        "schema": {
            "name": result.schema.name,
            "version": result.schema.version,
            "fingerprint": result.schema.fingerprint,
        },
        "provider": result.provider,
        "model": result.model,
        "stop_reason": result.stop_reason.value,
        "raw_stop_reason": result.raw_stop_reason,
        "notes": [str(note) for note in result.notes],
        "attempts": attempts,
        "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
        "request_id": result.request_id,
        "batch": batch,
    }
    return _line(record)


def prompted(line: bytes, prompt: type[Prompt] | None) -> bytes:
    """An output line of a job with a prompt template, saying which template produced the item
    (`"prompt"`: name, version, fingerprint, after `"schema"`); a job without one: as it is."""
    if prompt is None:
        return line
    said = prompt.info().to_json()
    record: dict[str, Any] = {}
    for key, value in json.loads(line).items():
        record[key] = value
        if key == "schema":
            record["prompt"] = said
    record.setdefault("prompt", said)
    return _line(record)


def _schema(contract: type[Contract]) -> dict[str, Any]:
    info = schema_info(contract)
    return {"name": info.name, "version": info.version, "fingerprint": info.fingerprint}


def _line(record: dict[str, Any]) -> bytes:
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate somewhere: JSON escapes are plain ASCII
        return (json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode()


def _storable(text: str) -> str:
    """Text the state file can hold (SQLite takes UTF-8 only), cut to 500 characters."""
    return text[:500].encode("utf-8", "backslashreplace").decode("utf-8")


def _update(
    row: ItemRow, state: str, tokens_in: int, tokens_out: int, **changes: Any
) -> ItemUpdate:
    """An item's update from its row: its counters carried over, no feedback, unless `changes`
    says otherwise."""
    fields: dict[str, Any] = {
        "seq": row.seq,
        "state": state,
        "retries_used": row.retries_used,
        "resubmits_used": row.resubmits_used,
        "feedback": None,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "requests": row.requests,
    }
    return ItemUpdate(**{**fields, **changes})
