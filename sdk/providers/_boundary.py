"""The fault boundary: the one place where whatever a provider call raises becomes `ProviderError`.

Every call kind of every provider (`complete`, `acomplete`, `stream`, `astream`) runs its I/O and
its reply reading inside `fault_boundary`. Whatever escapes (the SDK's own exceptions, an
`httpx`/`httpx2` transport error, a `json` error, a `KeyError`/`TypeError`/`AttributeError` from
a body of the wrong shape, a closed event loop) leaves as a `ProviderError` that names the
provider, keeps the status code, request id and the raw body (bounded), chains the original as
its cause, and carries no secret.

Secrets are redacted here and nowhere else: the provider lists the ones it knows (API keys,
header values, credentials in its base URL), and well-known shapes (`Bearer ...`, `sk-...`,
`user:password@` in a URL, `?api_key=` in a query) are redacted whoever wrote them. When the
original exception's text would show a secret (an `httpx` error quoting an invalid header value,
a server echoing the `Authorization` header), it is replaced as the cause by a `RedactedCause`
carrying its type and its redacted message.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
import warnings
from collections.abc import Iterable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from sdk.errors import ProviderError
from sdk.errors import StructuredOutputError
from sdk.providers._base import Codec
from sdk.providers._base import TextDelta
from sdk.providers._errors import is_retryable
from sdk.providers._errors import provider_error

__all__ = ["RedactedCause", "Redactor", "Seen", "bounded", "fault_boundary"]

logger = logging.getLogger("sdk.providers")

BODY_CHARS = 2000
"""How much of an unusable reply body a `ProviderError` keeps (`.body`)."""

_REDACTED = "[redacted]"

# Shapes of secrets, redacted whoever wrote them: the value of an auth header, a bearer token,
# an API-key-looking token, credentials in a URL, and key-like query parameters.
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|x-goog-api-key)"
            r"(['\"]?\s*[:=]\s*['\"]?)(?:bearer\s+|basic\s+)?[^\s'\",}\]]+"
        ),
        r"\1\2" + _REDACTED,
    ),
    (re.compile(r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"), _REDACTED),
    (re.compile(r"(?i)\bbearer\b"), _REDACTED),
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"), _REDACTED),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]*@"), r"\1" + _REDACTED + "@"),
    (
        re.compile(
            r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|secret|password|sig)=)[^&\s'\"]+"
        ),
        r"\1" + _REDACTED,
    ),
)


class Redactor:
    """Removes known secrets and secret-shaped tokens from text."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Longest first, so a secret containing another is removed whole. Very short values
        # ("1", "on") are not secrets and would redact half of every message.
        known = {secret for secret in secrets if secret and len(secret) >= 6}
        self._secrets = sorted(known, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, _REDACTED)
        for pattern, replacement in _SHAPES:
            text = pattern.sub(replacement, text)
        return text


class RedactedCause(Exception):
    """Stands in as the cause of a `ProviderError` whose original exception showed a secret."""

    def __init__(self, original: BaseException, redact: Redactor) -> None:
        kind = type(original)
        self.original_type = f"{kind.__module__}.{kind.__qualname__}"
        super().__init__(f"{self.original_type}: {redact(str(original))}")


@dataclass
class Seen:
    """What the driver has learned of the reply so far; the boundary puts it on the error."""

    status_code: int | None = None
    request_id: str | None = None
    body: Any = None
    streamed: list[str] = field(default_factory=list)
    """The document's text streamed so far: a stream cut midway keeps it on its error."""

    def show(self, deltas: tuple[TextDelta, ...]) -> tuple[TextDelta, ...]:
        """Keep the document's text of `deltas` (not tool-call arguments), and pass them on."""
        for delta in deltas:
            if type(delta) is TextDelta:
                self.streamed.append(delta.text)
        return deltas


def bounded(text: str, limit: int = BODY_CHARS) -> str:
    """`text`, cut at `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


@contextmanager
def fault_boundary(codec: Codec, redact: Redactor) -> Iterator[Seen]:
    """Run a provider call's I/O and reply reading; anything raised leaves as `ProviderError`.

    Errors about the output itself (`GrammarStuck` from a local model, ...) pass through as
    they are: they are decided on the output, not on the transport. Cancellation,
    `KeyboardInterrupt` and a generator's close are not errors and pass untouched.
    """
    seen = Seen()
    try:
        yield seen
    except ProviderError as error:
        _body_from(error.__cause__, seen)
        raise _sealed(error, codec, redact, seen) from _safe_cause(error.__cause__, redact)
    except StructuredOutputError:
        raise
    except Exception as exc:
        _body_from(exc, seen)
        typed = codec.classify(exc) or _generic(codec.provider, exc, seen)
        raise _sealed(typed, codec, redact, seen) from _safe_cause(exc, redact)


def _sealed(error: ProviderError, codec: Codec, redact: Redactor, seen: Seen) -> ProviderError:
    """`error` completed from what was seen, redacted, with a safe cause."""
    error.provider = error.provider or codec.provider
    if error.status_code is None and seen.status_code is not None and seen.status_code >= 400:
        error.status_code = seen.status_code
    error.request_id = error.request_id or seen.request_id
    if error.body is None and seen.body is not None:
        error.body = bounded(_body_text(seen.body))
    if error.body is not None:
        error.body = redact(error.body)
    error.message = redact(error.message)
    error.args = (error.message,)
    if error.text is None and seen.streamed:
        error.text = "".join(seen.streamed)
    if error.text is not None:
        error.text = redact(error.text)
    logger.debug("%s", error.message)
    return error


def _safe_cause(cause: BaseException | None, redact: Redactor) -> BaseException | None:
    """The original exception, or a `RedactedCause` in its place if its chain shows a secret."""
    if cause is None:
        return None
    shown = "".join(traceback.format_exception(cause))
    return RedactedCause(cause, redact) if redact(shown) != shown else cause


def _generic(provider: str, exc: Exception, seen: Seen) -> ProviderError:
    """An exception the provider's codec did not classify -> `ProviderError`."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    kind = type(exc).__name__
    detail = f"{kind}: {exc}"
    if "TimeoutException" in names or isinstance(exc, TimeoutError):
        return provider_error(provider, f"request timed out ({kind})", detail=str(exc))
    if names & {"TransportError", "NetworkError", "ProtocolError"} or isinstance(exc, OSError):
        return provider_error(provider, f"connection failed ({kind})", detail=str(exc))
    if isinstance(exc, RuntimeError) and "loop" in str(exc).lower():
        # An async client whose connections belong to an event loop that has closed (a second
        # `asyncio.run`): no retry fixes that.
        error = provider_error(
            provider,
            "the async client is bound to another (closed) event loop: create the provider "
            "and its client inside the event loop that uses them",
            detail=detail,
        )
        error.transient = False
        return error
    what = "reply is not JSON" if isinstance(exc, json.JSONDecodeError) else "unusable reply"
    status = seen.status_code
    error = provider_error(provider, what, status_code=status, detail=detail)
    # A body that parses but says nothing usable is retried only when the status says the
    # server is in trouble (a 502 page, say), not when it answered 200.
    error.transient = status is not None and status >= 400 and is_retryable(error)
    return error


def _body_from(exc: BaseException | None, seen: Seen) -> None:
    """The raw body an SDK exception holds (its response, or the text a JSON error was reading),
    when the transport had not recorded one."""
    if exc is None or seen.body is not None:
        return
    if isinstance(exc, json.JSONDecodeError):
        seen.body = exc.doc
        return
    response = getattr(exc, "response", None)
    try:
        text = getattr(response, "text", None)
    except Exception:  # a streamed response that was not read: nothing to keep
        return
    if isinstance(text, str) and text:
        seen.body = text


def _body_text(body: Any) -> str:
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")
    if isinstance(body, str):
        return body
    to_json = getattr(body, "to_json", None)
    if callable(to_json):
        try:
            with warnings.catch_warnings():
                # A wrong-shaped SDK object serializes with Pydantic's warnings: it is the very
                # thing being reported.
                warnings.simplefilter("ignore")
                return str(to_json())
        except Exception:  # a half-built SDK object: its repr still says something
            return repr(body)
    try:
        return json.dumps(body, ensure_ascii=False, default=repr)
    except ValueError:
        return repr(body)
