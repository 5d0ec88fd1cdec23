"""Hosted batch backends: Anthropic Message Batches and OpenAI Batch, through the official clients.

Each backend takes the provider a live call would use (`AnthropicProvider`,
`OpenAIResponsesProvider`, `OpenAIChatProvider`): its codec builds every request (the same wire
dialect, the same schema name with its version as a live call), and reads every result back into
a `Completion`. Only the envelope is the backend's: Anthropic's `{"custom_id", "params"}`
entries, OpenAI's JSONL input file of `{"custom_id", "method", "url", "body"}` lines.

Creating a batch is the one call that is not safe to repeat: it is sent with the client's own
retries off, and a submission whose answer was lost (a timeout, a crash) is looked up before it
is sent again. OpenAI batches carry our job and submission keys in their `metadata`, and the
uploaded file a recognisable name: a batch found by them is ours. Anthropic batches take no
metadata, so `find` can only name candidates (created in the submission's time window, with its
request count), and a candidate is adopted only once its results prove it is the submission's
(`proves`: a `custom_id` carries the submission's key); results are routed by `custom_id`,
never by batch, either way.

A result line of any shape is read: one that names no request is skipped (its item has no
result, and is sent again); one whose result is unusable is an error for that item alone.

Every other call (retrieve, list, results, cancel) is idempotent and keeps the client's retries.
Errors of any call come out as `ProviderError`, through the providers' fault boundary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from typing import ClassVar

from sdk._values.declared import Count
from sdk._values.declared import check
from sdk.batch._errors import BatchError
from sdk.batch._state import SubmissionRow
from sdk.errors import ProviderError
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import Exchange
from sdk.providers._base import FreeText
from sdk.providers._base import Reply
from sdk.providers._boundary import fault_boundary
from sdk.providers._errors import provider_error
from sdk.providers._profile import sent_body
from sdk.providers._provider import Provider

__all__ = [
    "AnthropicBatches",
    "HostedBackend",
    "OpenAIBatches",
    "RemoteResult",
    "RemoteStatus",
    "hosted_backend",
]

logger = logging.getLogger("sdk.batch")

CONTROL_RETRIES = 4
"""The client's own retries for the idempotent calls (retrieve, list, results, cancel)."""

FIND_WINDOW = 900.0
"""Seconds before a submission was recorded that a batch found for it may have been created
(clock skew between this machine and the provider's)."""


@dataclass(frozen=True, slots=True)
class RemoteStatus:
    """A backend batch as last seen."""

    remote_id: str
    """The backend's id of the batch."""
    status: str
    """Its status as the backend spells it (`in_progress`, `ended`, `completed`, ...)."""
    ended: bool
    """Whether the backend is done with it: its results can be read (or it failed)."""


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """One result of a batch: a reply read into a `Completion`, or why there is none."""

    custom_id: str
    completion: Completion | None = None
    error: ProviderError | None = None


# What the codec is told of the request a batch reply answers: text read as it came (no grammar,
# no tools), which is all a codec's reader looks at; the contract is the job's, parsed after.
_DOCUMENT_REPLY = CompletionRequest(FreeText(), messages=(), max_tokens=1)


class HostedBackend:
    """A provider's batch API (subclasses: `AnthropicBatches`, `OpenAIBatches`)."""

    name: ClassVar[str] = "hosted"
    finds_candidates: ClassVar[bool] = False
    """Whether `find` names candidates that its results must prove (`proves`) before they are
    adopted, rather than batches its metadata already proves."""
    max_requests: int
    max_bytes: int

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    def entry(self, custom_id: str, exchange: Exchange) -> bytes:
        """One request as the batch API takes it, serialized (its size counts to the limit)."""
        raise NotImplementedError

    def prepare(self, job: str, key: str, entries: list[bytes]) -> str | None:
        """What must exist before the batch is created (OpenAI: the uploaded input file's id;
        the job records it before creating the batch)."""
        return None

    def find_prepared(self, job: str, key: str) -> str | None:
        """What `prepare` made for this submission, if it was made but never recorded."""
        return None

    def create(
        self, job: str, key: str, prepared: str | None, entries: list[bytes]
    ) -> RemoteStatus:
        """Create the batch (not retried: see the module docstring)."""
        raise NotImplementedError

    def find(self, job: str, submission: SubmissionRow, known: set[str]) -> list[RemoteStatus]:
        """Batches that may be `submission`, created but never recorded (see
        `finds_candidates`)."""
        raise NotImplementedError

    def proves(self, remote_id: str, key: str) -> bool:
        """Whether the ended batch's results are submission `key`'s: one `custom_id` carrying
        the key is proof (keys are random, one per submission); none is disproof."""
        prefix = f"{key}-"
        return any(result.custom_id.startswith(prefix) for result in self.results(remote_id))

    def poll(self, remote_id: str) -> RemoteStatus:
        """The batch's status now."""
        raise NotImplementedError

    def results(self, remote_id: str) -> Iterator[RemoteResult]:
        """The batch's results, streamed (never the whole file in memory)."""
        raise NotImplementedError

    def cancel(self, remote_id: str) -> RemoteStatus:
        """Ask the provider to cancel the batch."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _boundary(self) -> Iterator[None]:
        with fault_boundary(self.provider.codec, self.provider.redactor):
            yield

    def _read(self, body: Any, request_id: str | None = None) -> Completion:
        """A reply object -> `Completion` through the provider's codec, as a live call reads it."""
        reply = Reply(body=body, status_code=200, request_id=request_id)
        return self.provider.codec.read(reply, _DOCUMENT_REPLY)

    def _result(self, custom_id: str, read: Any) -> RemoteResult:
        """Run a reading step inside the fault boundary: the completion, or the error."""
        try:
            with self._boundary():
                completion = read()
        except ProviderError as error:
            return RemoteResult(custom_id, error=error)
        return RemoteResult(custom_id, completion=completion)


def _dumps(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


# --- Anthropic Message Batches ---

# Anthropic's error types and the status codes the Messages API gives them (for the retry policy).
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _check_limits(where: str, max_requests: object, max_bytes: object) -> None:
    """Refuse a batch limit that is not a whole number of at least 1, naming it: `"x"` was a
    bare `TypeError` from the first submission, and 0 or -1 were taken."""
    check("max_requests", max_requests, Count, where)
    check("max_bytes", max_bytes, Count, where)


class AnthropicBatches(HostedBackend):
    """Anthropic Message Batches (`client.messages.batches`): at most 100,000 requests and
    256 MB a batch; results are a JSONL stream of succeeded / errored / canceled / expired."""

    name = "anthropic"
    finds_candidates = True

    def __init__(
        self,
        provider: Provider,
        *,
        max_requests: int = 100_000,
        max_bytes: int = 256 * 1000 * 1000,
    ) -> None:
        import anthropic

        from sdk.providers.anthropic import AnthropicProvider

        if not isinstance(provider, AnthropicProvider):
            raise TypeError(f"AnthropicBatches takes an AnthropicProvider, not {provider!r}")
        if not isinstance(provider.client, anthropic.Anthropic):
            raise TypeError("AnthropicBatches needs a sync anthropic.Anthropic client")
        _check_limits("AnthropicBatches()", max_requests, max_bytes)
        super().__init__(provider)
        self.max_requests = min(max_requests, 100_000)
        self.max_bytes = min(max_bytes, 256 * 1000 * 1000)
        self._create = provider.client.with_options(max_retries=0)
        self._client = provider.client.with_options(max_retries=CONTROL_RETRIES)

    def entry(self, custom_id: str, exchange: Exchange) -> bytes:
        if exchange.route != "messages.create" or exchange.then is not None:
            raise BatchError(f"a Message Batch cannot carry a {exchange.route} request")
        return _dumps({"custom_id": custom_id, "params": sent_body(exchange.body)})

    def create(
        self, job: str, key: str, prepared: str | None, entries: list[bytes]
    ) -> RemoteStatus:
        requests = [json.loads(entry) for entry in entries]
        with self._boundary():
            batch = self._create.messages.batches.create(requests=requests)
        return _anthropic_status(batch)

    def find(self, job: str, submission: SubmissionRow, known: set[str]) -> list[RemoteStatus]:
        since = submission.started - FIND_WINDOW
        found: list[RemoteStatus] = []
        with self._boundary():
            for batch in self._client.messages.batches.list(limit=100):
                if _timestamp(batch.created_at) < since:
                    break  # newest first: the rest are older still
                counts = batch.request_counts
                total = (
                    counts.processing
                    + counts.succeeded
                    + counts.errored
                    + counts.canceled
                    + counts.expired
                )
                if total == submission.count and batch.id not in known:
                    found.append(_anthropic_status(batch))
        return found

    def poll(self, remote_id: str) -> RemoteStatus:
        with self._boundary():
            return _anthropic_status(self._client.messages.batches.retrieve(remote_id))

    def cancel(self, remote_id: str) -> RemoteStatus:
        with self._boundary():
            return _anthropic_status(self._client.messages.batches.cancel(remote_id))

    def results(self, remote_id: str) -> Iterator[RemoteResult]:
        """The results file, line by line: each line read here (not by the client's decoder,
        which stops at the first line that is not JSON)."""
        with self._boundary():
            decoder = self._client.messages.batches.results(remote_id)
        with contextlib.closing(decoder):
            lines = decoder.http_response.iter_lines()
            while True:
                with self._boundary():
                    line = next(lines, None)
                if line is None:
                    return
                result = self._anthropic_result(line) if line.strip() else None
                if result is not None:
                    yield result

    def _anthropic_result(self, line: str) -> RemoteResult | None:
        """One result line; `None` for one that names no request (skipped: the item it was
        for has no result, and is sent again)."""
        named = _named_record(line)
        if named is None:
            return None
        record, custom_id = named
        result = record.get("result")
        kind = result.get("type") if isinstance(result, dict) else None
        if isinstance(result, dict) and kind == "succeeded":
            message = result.get("message")
            return self._result(custom_id, lambda: self._read(_anthropic_message(message)))
        if isinstance(result, dict) and kind == "errored":
            wrapper = result.get("error")
            wrapper = wrapper if isinstance(wrapper, dict) else {}
            detail = wrapper.get("error")
            detail = detail if isinstance(detail, dict) else {}
            reason = _text_or_none(detail.get("type")) or "error"
            error = provider_error(
                "anthropic",
                f"batch request errored ({reason})",
                status_code=_ANTHROPIC_STATUS.get(reason, 500),
                request_id=_text_or_none(wrapper.get("request_id")),
                detail=str(detail.get("message") or ""),
            )
            return RemoteResult(custom_id, error=error)
        # Never run (or not known to have run): another batch can run it.
        if kind in ("canceled", "expired"):
            error = provider_error("anthropic", f"batch request {kind}", transient=True)
        else:  # a result of no known shape: nothing says the request ran
            what = "unusable batch result (no result of a known type)"
            error = provider_error("anthropic", what, detail=line[:500], transient=True)
        return RemoteResult(custom_id, error=error)


def _named_record(line: str) -> tuple[dict[str, Any], str] | None:
    """A result line as a JSON object and the `custom_id` it names; `None` (logged) for a line
    that is not JSON, not an object, or names no request."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        record = None
    custom_id = record.get("custom_id") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(custom_id, str):
        logger.warning("skipped an unusable batch result line: %.200s", line)
        return None
    return record, custom_id


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _anthropic_message(message: Any) -> Any:
    """A succeeded result's message as the client's own `Message` (what the codec reads)."""
    from anthropic.types import Message as AnthropicMessage

    return AnthropicMessage.model_validate(message)


def _anthropic_status(batch: Any) -> RemoteStatus:
    return RemoteStatus(batch.id, batch.processing_status, batch.processing_status == "ended")


def _timestamp(moment: datetime | int | float) -> float:
    return moment.timestamp() if isinstance(moment, datetime) else float(moment)


# --- OpenAI Batch ---

_OPENAI_URLS = {
    "responses.create": "/v1/responses",
    "chat.completions.create": "/v1/chat/completions",
}
_OPENAI_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


class OpenAIBatches(HostedBackend):
    """OpenAI Batch (`client.files` + `client.batches`), for the Responses API or Chat
    Completions: a JSONL input file of at most 50,000 requests and 200 MB; results in an output
    file and an error file."""

    name = "openai"

    def __init__(
        self,
        provider: Provider,
        *,
        max_requests: int = 50_000,
        max_bytes: int = 200 * 1000 * 1000,
    ) -> None:
        import openai

        from sdk.providers.openai import OpenAIChatProvider
        from sdk.providers.openai import OpenAIResponsesProvider

        if not isinstance(provider, (OpenAIResponsesProvider, OpenAIChatProvider)):
            raise TypeError(
                f"OpenAIBatches takes an OpenAIResponsesProvider or OpenAIChatProvider, "
                f"not {provider!r}"
            )
        if not isinstance(provider.client, openai.OpenAI):
            raise TypeError("OpenAIBatches needs a sync openai.OpenAI client")
        _check_limits("OpenAIBatches()", max_requests, max_bytes)
        super().__init__(provider)
        self.max_requests = min(max_requests, 50_000)
        self.max_bytes = min(max_bytes, 200 * 1000 * 1000)
        self._chat = isinstance(provider, OpenAIChatProvider)
        self._create = provider.client.with_options(max_retries=0)
        self._client = provider.client.with_options(max_retries=CONTROL_RETRIES)

    def entry(self, custom_id: str, exchange: Exchange) -> bytes:
        url = _OPENAI_URLS.get(exchange.route)
        if url is None or exchange.then is not None:
            raise BatchError(f"an OpenAI batch cannot carry a {exchange.route} request")
        body = sent_body(exchange.body)
        return _dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})

    @property
    def endpoint(self) -> str:
        """The batch's endpoint."""
        return "/v1/chat/completions" if self._chat else "/v1/responses"

    @staticmethod
    def filename(job: str, key: str) -> str:
        """The uploaded input file's name: how a lost upload is found again."""
        return f"sdk-batch-{job}-{key}.jsonl"

    def prepare(self, job: str, key: str, entries: list[bytes]) -> str | None:
        """Upload the input file (spooled to disk past 8 MB); its file id."""
        with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
            for entry in entries:
                spool.write(entry + b"\n")
            spool.seek(0)
            with self._boundary():
                uploaded = self._create.files.create(
                    file=(self.filename(job, key), spool, "application/jsonl"), purpose="batch"
                )
        return str(uploaded.id)

    def find_prepared(self, job: str, key: str) -> str | None:
        """The id of this submission's input file if it was uploaded, else `None`."""
        name = self.filename(job, key)
        with self._boundary():
            for file in self._client.files.list(purpose="batch", order="desc", limit=100):
                if file.filename == name:
                    return str(file.id)
        return None

    def create(
        self, job: str, key: str, prepared: str | None, entries: list[bytes]
    ) -> RemoteStatus:
        """Create the batch over the uploaded file, with our keys in its metadata."""
        if prepared is None:
            raise BatchError("an OpenAI batch needs its input file uploaded first")
        file_id = prepared
        with self._boundary():
            batch = self._create.batches.create(
                completion_window="24h",
                endpoint=self.endpoint,  # type: ignore[arg-type]
                input_file_id=file_id,
                metadata={"sdk_job": job, "sdk_submission": key},
            )
        return _openai_status(batch)

    def find(self, job: str, submission: SubmissionRow, known: set[str]) -> list[RemoteStatus]:
        since = submission.started - FIND_WINDOW
        with self._boundary():
            for batch in self._client.batches.list(limit=100):
                metadata = batch.metadata or {}
                if (
                    metadata.get("sdk_job") == job
                    and metadata.get("sdk_submission") == submission.key
                ):
                    return [_openai_status(batch)]
                if batch.created_at < since:
                    break  # newest first
        return []

    def poll(self, remote_id: str) -> RemoteStatus:
        with self._boundary():
            return _openai_status(self._client.batches.retrieve(remote_id))

    def cancel(self, remote_id: str) -> RemoteStatus:
        with self._boundary():
            return _openai_status(self._client.batches.cancel(remote_id))

    def results(self, remote_id: str) -> Iterator[RemoteResult]:
        with self._boundary():
            batch = self._client.batches.retrieve(remote_id)
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                yield from self._file_results(file_id)

    def _file_results(self, file_id: str) -> Iterator[RemoteResult]:
        with self._boundary():
            context = self._client.files.with_streaming_response.content(file_id)
            response = context.__enter__()
        try:
            lines = response.iter_lines()
            while True:
                with self._boundary():
                    line = next(lines, None)
                if line is None:
                    return
                result = self._openai_result(line) if line.strip() else None
                if result is not None:
                    yield result
        finally:
            context.__exit__(None, None, None)

    def _openai_result(self, line: str) -> RemoteResult | None:
        """One line of an output or error file; `None` for a line that names no request (it
        is skipped: the item it was for has no result, and is sent again)."""
        named = _named_record(line)
        if named is None:
            return None
        record, custom_id = named
        response = record.get("response")
        failure = record.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            body = response.get("body")
            request_id = _text_or_none(response.get("request_id"))
            return self._result(custom_id, lambda: self._read(self._reply_object(body), request_id))
        if isinstance(response, dict):
            body = response.get("body")
            body = body if isinstance(body, dict) else {}
            detail = body.get("error")
            detail = detail if isinstance(detail, dict) else {}
            status = response.get("status_code")
            error = provider_error(
                self.provider.name,
                f"batch request failed ({detail.get('code') or detail.get('type') or 'error'})",
                status_code=status if isinstance(status, int) else None,
                request_id=_text_or_none(response.get("request_id")),
                detail=str(detail.get("message") or ""),
            )
            return RemoteResult(custom_id, error=error)
        code = failure.get("code") if isinstance(failure, dict) else None
        message = failure.get("message") if isinstance(failure, dict) else None
        error = provider_error(  # expired, cancelled, timed out: another batch can run it
            self.provider.name,
            f"batch request not run ({code})",
            detail=str(message or ""),
            transient=True,
        )
        return RemoteResult(custom_id, error=error)

    def _reply_object(self, body: Any) -> Any:
        """A result body as the SDK's own reply type (what the codec reads)."""
        if self._chat:
            from openai.types.chat import ChatCompletion

            return ChatCompletion.model_validate(body)
        from openai.types.responses import Response

        return Response.model_validate(body)


def _openai_status(batch: Any) -> RemoteStatus:
    status = str(batch.status)
    errors = getattr(batch.errors, "data", None) or []
    if status == "failed" and errors:
        # The batch as a whole was refused (its input did not validate): say why.
        reasons = "; ".join(f"{e.code}: {e.message}" for e in errors[:3])
        status = f"failed ({reasons})"[:500]
    return RemoteStatus(batch.id, status, batch.status in _OPENAI_ENDED)


def hosted_backend(provider: Provider) -> HostedBackend:
    """The batch backend of a hosted provider."""
    name = provider.name
    if name == "anthropic":
        return AnthropicBatches(provider)
    if name in ("openai_responses", "openai_chat"):
        return OpenAIBatches(provider)
    raise BatchError(
        f"{type(provider).__name__} has no batch API: run it through LocalBackend "
        "(AsyncStructuredClient) instead"
    )
