"""The request logs a provider's calls cause, kept free of credentials.

The HTTP clients the providers send through log each request's URL: httpx and httpx2 at INFO
(`HTTP Request: POST <url> "HTTP/1.1 200 OK"`), the official clients at DEBUG. A base URL's
userinfo never reaches those URLs (`sdk.providers._endpoint`), but its query does, whole: it
must be on every request, and it may carry a credential (a gateway's `?key=`, a signed URL's
`sig=`: `SECRET_QUERY_NAMES`). So the records are redacted instead, by the shapes the fault
boundary redacts errors with (`Redactor`), before any handler sees them: a filter on each of
those loggers, added when a provider is made. It changes only a record that shows a secret's
shape, and costs nothing while those loggers are below their level (the record is never made).
"""

from __future__ import annotations

import logging

from sdk.providers._boundary import Redactor

__all__ = ["REQUEST_LOGGERS", "redact_request_logs"]

REQUEST_LOGGERS = (
    "httpx",
    "httpx2",
    "anthropic._base_client",
    "openai._base_client",
    "google_genai._api_client",
)
"""The loggers that print the URLs of the requests a provider sends (a filter on a logger sees
the records logged to it by name, not its children's: these are the names the clients use)."""


class _Redacted(logging.Filter):
    """Rewrites a record whose message shows a secret's shape with the secret redacted."""

    def __init__(self) -> None:
        super().__init__()
        self._redact = Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # (a record whose arguments do not format: its handler reports it)
            return True
        redacted = self._redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


_FILTER = _Redacted()


def redact_request_logs() -> None:
    """Add the redacting filter to each of `REQUEST_LOGGERS` that has not got it yet."""
    for name in REQUEST_LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)  # (added once: `addFilter` checks)
