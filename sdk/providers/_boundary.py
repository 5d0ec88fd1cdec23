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

What the reply had shown when the call failed (its status, request id, the body or event being
read, the document text streamed so far) is a `Received` value that whoever knows it (a
transport reading a body, a driver reading a reply or a stream) attaches to the exception it
lets through (`received(exc, ...)`); the boundary puts it on the error, built complete.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import traceback
import warnings
from collections.abc import Iterable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sdk._values.records import Usage
from sdk.errors import ProviderError
from sdk.errors import StructuredOutputError
from sdk.providers._base import Codec
from sdk.providers._endpoint import SECRET_QUERY_NAMES
from sdk.providers._errors import RETRYABLE_STATUS
from sdk.providers._errors import provider_error

__all__ = [
    "Received",
    "RedactedCause",
    "Redactor",
    "ReplyFault",
    "bounded",
    "fault_boundary",
    "received",
]

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
    # (The scheme is matched from the start of a run of scheme characters only, not from every
    # word boundary inside one: from each, a run without `://` was scanned to its end again,
    # so a long one, `a-a-a-...` in a reply's text, took time in the square of its length.)
    (
        re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]*@"),
        r"\1" + _REDACTED + "@",
    ),
    (
        re.compile(
            rf"(?i)([?&](?:{SECRET_QUERY_NAMES})=)[^&\s'\"]+"
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


@dataclass(frozen=True, slots=True)
class Received:
    """What a reply had shown when its call failed; the boundary puts it on the error."""

    status_code: int | None = None
    request_id: str | None = None
    body: Any = None
    """The body, or the stream event, being read when it failed (`None`: none to blame)."""
    streamed: str = ""
    """The document's text streamed so far: a stream cut midway keeps it on its error."""
    usage: Usage | None = None
    """What the stream said the reply had cost so far (Anthropic's `message_start` input
    tokens, each Gemini chunk's counts, a Chat usage chunk), kept on its error as `.usage`:
    the tokens of a request cut midway were billed all the same. `None`: it said none."""


class ReplyFault(Exception):
    """An exception raised while a reply was arriving or being read, with what had been
    `received` (raised by a transport or a driver; the boundary unwraps it)."""

    def __init__(self, cause: Exception, what: Received) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.received = what


def received(exc: Exception, what: Received) -> Exception:
    """`exc` with what had been received, for the boundary: an error about the output itself
    (`GrammarStuck`, ...) goes on as it is."""
    if isinstance(exc, StructuredOutputError) and not isinstance(exc, ProviderError):
        return exc
    return ReplyFault(exc, what)


def bounded(text: str, limit: int = BODY_CHARS) -> str:
    """`text`, cut at `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


@contextmanager
def fault_boundary(codec: Codec, redact: Redactor) -> Iterator[None]:
    """Run a provider call's I/O and reply reading; anything raised leaves as `ProviderError`.

    Errors about the output itself (`GrammarStuck` from a local model, ...) pass through as
    they are: they are decided on the output, not on the transport. Cancellation,
    `KeyboardInterrupt` and a generator's close are not errors and pass untouched.
    """
    try:
        yield
    except ReplyFault as fault:
        error, cause = _typed(fault.cause, fault.received, codec, redact)
        raise error from cause
    except StructuredOutputError as error:
        if not isinstance(error, ProviderError):
            raise
        typed, cause = _typed(error, Received(), codec, redact)
        raise typed from cause
    except Exception as exc:
        typed, cause = _typed(exc, Received(), codec, redact)
        raise typed from cause


def _typed(
    exc: Exception, what: Received, codec: Codec, redact: Redactor
) -> tuple[StructuredOutputError, BaseException | None]:
    """The error `exc` leaves as, and its safe cause."""
    if isinstance(exc, StructuredOutputError) and not isinstance(exc, ProviderError):
        return exc, exc.__cause__
    original = exc.__cause__ if isinstance(exc, ProviderError) else exc
    if what.body is None:
        what = dataclasses.replace(what, body=_body_of(original))
    if isinstance(exc, ProviderError):
        typed = exc
    else:
        typed = codec.classify(exc) or _generic(codec.provider, exc, what.status_code)
    return _completed(typed, codec, redact, what), _safe_cause(original, redact)


def _completed(
    error: ProviderError, codec: Codec, redact: Redactor, what: Received
) -> ProviderError:
    """`error` completed from what was received, redacted (a new error: they are sealed)."""
    status = error.status_code
    if status is None and what.status_code is not None and what.status_code >= 400:
        status = what.status_code
    body = error.body
    if body is None and what.body is not None:
        body = bounded(_body_text(what.body))
    text = error.text if error.text is not None else (what.streamed or None)
    # A request's own usage, when the stream said some and the error knows none of its own
    # (one carrying attempts has its usage summed over them: left as it is).
    said = what.usage if what.usage is not None and not error.attempts else None
    usage = said if said is not None and error.usage == Usage() else error.usage
    completed = error.evolve(
        message=redact(error.message),
        provider=error.provider or codec.provider,
        status_code=status,
        request_id=error.request_id or what.request_id,
        body=redact(body) if body is not None else None,
        text=redact(text) if text is not None else None,
        usage=usage,
    )
    logger.debug("%s", completed.message)
    return completed


def _safe_cause(cause: BaseException | None, redact: Redactor) -> BaseException | None:
    """The original exception, or a `RedactedCause` in its place if its chain shows a secret."""
    if cause is None:
        return None
    shown = "".join(traceback.format_exception(cause))
    return RedactedCause(cause, redact) if redact(shown) != shown else cause


def _generic(provider: str, exc: Exception, status: int | None) -> ProviderError:
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
        return provider_error(
            provider,
            "the async client is bound to another (closed) event loop: create the provider "
            "and its client inside the event loop that uses them",
            detail=detail,
            transient=False,
        )
    what = "reply is not JSON" if isinstance(exc, json.JSONDecodeError) else "unusable reply"
    # A body that parses but says nothing usable is retried only when the status says the
    # server is in trouble (a 502 page, say), not when it answered 200.
    troubled = status is not None and status >= 400 and status in RETRYABLE_STATUS
    return provider_error(provider, what, status_code=status, detail=detail, transient=troubled)


def _body_of(exc: BaseException | None) -> Any:
    """The raw body an SDK exception holds (its response, or the text a JSON error was
    reading), if any."""
    if exc is None:
        return None
    if isinstance(exc, json.JSONDecodeError):
        return exc.doc
    response = getattr(exc, "response", None)
    try:
        text = getattr(response, "text", None)
    except Exception:  # a streamed response that was not read: nothing to keep
        return None
    return text if isinstance(text, str) and text else None


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
