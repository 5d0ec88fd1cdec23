"""Turning transport and API failures into `ProviderError`, and deciding which are worth a retry.

Each adapter maps its own SDK's or httpx's exceptions through `provider_error`, so every
failure reaches the client in one shape: status code, request id, `retry-after`, and the original
exception as `__cause__`.

Secrets: the SDK exceptions keep the request, whose headers carry the API key. A
`ProviderError` never copies the request, its headers or its URL into its message or attributes;
only the cause (the original exception object) holds it, as it already did.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import TypedDict
from typing import Unpack

from sdk._values.declared import check_keywords
from sdk.errors import ProviderError

__all__ = [
    "RETRYABLE_STATUS",
    "ReplyFields",
    "is_retryable",
    "provider_error",
    "reply_request_id",
    "retry_after_seconds",
]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
"""Timeouts, conflicts, rate limits and server errors: what another try can fix."""

# How much of a provider's error message goes into ours (it can echo long request content).
_MESSAGE_CHARS = 300


class ReplyFields(TypedDict, total=False):
    """What a failed reply said, as `ProviderError`'s fields."""

    status_code: int | None
    request_id: str | None
    retry_after: float | None
    """Seconds to wait, when no `retry-after` header said it (a header wins)."""
    transient: bool | None
    body: str | None


def provider_error(
    provider: str,
    what: str,
    *,
    headers: Mapping[str, str] | None = None,
    detail: str = "",
    **fields: Unpack[ReplyFields],
) -> ProviderError:
    """A `ProviderError` for `provider` saying `what` failed (with the provider's own `detail`,
    bounded); raise it `from` the original exception. `fields`: what the reply said (status
    code, request id, ...); a `retry-after` in `headers` wins over `retry_after=`."""
    check_keywords(fields, ReplyFields, "provider_error()")
    status_code, request_id = fields.get("status_code"), fields.get("request_id")
    from_headers = retry_after_seconds(headers) if headers is not None else None
    retry_after = from_headers if from_headers is not None else fields.get("retry_after")
    parts = [f"{provider}: {what}"]
    if status_code is not None:
        parts.append(f"HTTP {status_code}")
    if request_id:
        parts.append(f"request id {request_id}")
    if retry_after is not None:
        parts.append(f"retry after {retry_after:g}s")
    message = ", ".join(parts)
    if detail:
        detail = " ".join(detail.split())
        if len(detail) > _MESSAGE_CHARS:
            detail = detail[: _MESSAGE_CHARS - 3] + "..."
        message = f"{message}: {detail}"
    return ProviderError(
        message,
        status_code=status_code,
        request_id=request_id,
        retry_after=retry_after,
        provider=provider,
        body=fields.get("body"),
        transient=fields.get("transient"),
    )


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def reply_request_id(reply: object) -> str | None:
    """The request id an SDK client attached to a reply object (absent on one built by hand)."""
    request_id = getattr(reply, "_request_id", None)
    return request_id if isinstance(request_id, str) else None


def is_retryable(error: ProviderError) -> bool:
    """Whether another try can succeed: as the error says (`.transient`), else by its status:
    none (connection, timeout) or a transient one."""
    if error.transient is not None:
        return error.transient
    return error.status_code is None or error.status_code in RETRYABLE_STATUS
