"""Providers whose client talks to memory: the real provider classes, their real clients (the
official `anthropic`, `openai` and `google-genai` clients, or httpx for the servers), on an
in-memory transport.

So what `sdk.wire` builds is what the client sends, byte for byte (the SDK's own serialization,
Gemini's REST conversion, the path and version headers included), and a reply is read by the
same client and codec as a live one: nothing of any provider's wire is written twice. Nothing
leaves the process: the transport records the request a call makes and answers it from memory
(the reply given, or a refusal that ends the call).

Nothing here names a family: the provider class is the family's profile's. A provider over the
SDK's own HTTP transport (`HTTPProvider`) is made by its constructor on an httpx client; a
hosted one by its class's `_in_memory` hook (in its own module: private, but kept stable), which
makes its vendor's client on the `httpx2` client given. A class with neither is not for
`sdk.wire` (`UnsupportedRequest`, naming the families that are).

One provider per family and settings is made per process (making a client costs a few
milliseconds) and shared by every thread: each call's exchange with the transport is the
calling thread's own.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from functools import partial
from typing import Any

import httpx

from sdk import _fork
from sdk._values.profile import Profile
from sdk._values.profile import profile
from sdk._values.profile import profiles
from sdk.errors import UnsupportedRequest
from sdk.providers._base import unsupported
from sdk.providers._http import HTTPProvider
from sdk.providers._provider import Provider
from sdk.wire._values import WireRequest

__all__ = ["Exchanged", "exchanged", "memory_provider"]

_KEY = "sk-wire-in-memory-0000"
"""The API key the in-memory clients are made with (they need one; it goes nowhere and is
never shown)."""

_HIDDEN = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key",
                     "x-goog-api-key", "cookie", "host", "content-length", "connection",
                     "accept-encoding", "user-agent", "x-goog-api-client"})  # fmt: skip
"""Headers a `WireRequest` leaves out: secrets, and the client's transport bookkeeping."""


class _NotSent(Exception):
    """Raised by the in-memory transport when a call only builds its request: the call ends
    there (its provider error is not the caller's)."""


@dataclass
class Exchanged:
    """One call's exchange with the in-memory transport: the reply to give (`None`: only
    record the request), and the requests the call made."""

    reply: bytes | None = None
    requests: list[WireRequest] = field(default_factory=list)

    def answer(self, method: str, url: Any, headers: Any, content: bytes) -> tuple[int, bytes]:
        """Record a request the client sends (its headers without secrets or bookkeeping)
        and answer it: the status and body of the reply, or `_NotSent` when only building."""
        shown = {
            name.lower(): value
            for name, value in headers.items()
            if name.lower() not in _HIDDEN
            and not name.lower().startswith("x-stainless")
            and _KEY not in value
        }
        path = url.raw_path.decode("ascii") if isinstance(url.raw_path, bytes) else url.raw_path
        body = json.loads(content) if content else {}
        self.requests.append(WireRequest(method.upper(), path, shown, body))
        if self.reply is None:
            raise _NotSent("built, not sent")
        return 200, self.reply


_local = threading.local()


@contextmanager
def exchanged(reply: bytes | None = None) -> Iterator[Exchanged]:
    """The calling thread's exchange with every in-memory transport, for one call."""
    current = Exchanged(reply)
    previous = getattr(_local, "current", None)
    _local.current = current
    try:
        yield current
    finally:
        _local.current = previous


def _current() -> Exchanged:
    current: Exchanged | None = getattr(_local, "current", None)
    if current is None:
        raise RuntimeError("an in-memory provider was called outside sdk.wire")
    return current


def _httpx_answer(request: httpx.Request) -> httpx.Response:
    status, content = _current().answer(request.method, request.url, request.headers,
                                        request.read())  # fmt: skip
    return httpx.Response(status, content=content, headers={"content-type": "application/json"})


def _httpx2_client() -> Any:
    import httpx2

    def answer(request: Any) -> Any:
        status, content = _current().answer(request.method, request.url, request.headers,
                                            request.read())  # fmt: skip
        return httpx2.Response(status, content=content,
                               headers={"content-type": "application/json"})  # fmt: skip

    return httpx2.Client(transport=httpx2.MockTransport(answer))


def _maker(family: Profile) -> Callable[[dict[str, Any]], Provider] | None:
    """How to make the provider of `family` on an in-memory client, from its settings; `None`
    when its class has no way to. A provider over the SDK's own HTTP transport (an
    `HTTPProvider`: llama.cpp, vLLM, Ollama, a package's) is made by its constructor on an httpx
    client; a hosted one by its class's `_in_memory(settings, http_client=, api_key=)` hook, in
    its own module, which makes its vendor's official client on the `httpx2` client given."""
    try:
        cls = family.provider_class()
    except (LookupError, ImportError, AttributeError):
        return None
    if not isinstance(cls, type):
        return None
    if issubclass(cls, HTTPProvider):
        return partial(_over_http, cls)
    hook = getattr(cls, "_in_memory", None)
    if hook is None:
        return None
    return partial(_over_client, hook, family.name, getattr(cls, "_extra", None))


def _over_http(cls: type[HTTPProvider], settings: dict[str, Any]) -> Provider:
    if "headers" in settings:
        raise ValueError(
            "sdk.wire builds the request without its headers' secrets: set headers= on "
            "the client that sends it, not in the settings"
        )
    http = httpx.Client(transport=httpx.MockTransport(_httpx_answer))
    base_url = settings.pop("base_url", "http://server.invalid")
    return cls(base_url, http_client=http, **settings)


def _over_client(
    hook: Callable[..., Provider], family: str, extra: object, settings: dict[str, Any]
) -> Provider:
    """The provider made by its class's hook. A package its client needs that is not installed
    (the vendor's client, `httpx2`) is named with the extra that installs it: the class's
    `_extra` (the SDK's hosted providers'), as `sdk.ray` names its own."""
    try:
        return hook(settings, http_client=_httpx2_client(), api_key=_KEY)
    except ImportError as missing:
        if not isinstance(extra, str) or (missing.name or "").partition(".")[0] == "sdk":
            raise  # (a package's provider names its own; one of the SDK's modules is a bug)
        kind = ModuleNotFoundError if isinstance(missing, ModuleNotFoundError) else ImportError
        raise kind(
            f"sdk.wire for {family} needs the {extra} extra: pip install "
            f"'structured-sdk[{extra}]' ({missing})",
            name=missing.name,
        ) from missing


def _unsupported(family: str) -> UnsupportedRequest:
    """The error for a family `sdk.wire` cannot make on an in-memory client, naming those it can."""
    able = [each.name for each in profiles() if _maker(each) is not None]
    return unsupported(family, "a request built apart from its client (sdk.wire)",
                       [f"sdk.wire for {', '.join(able)}"])  # fmt: skip


MAX_PROVIDERS = 64
"""In-memory providers kept per process (the least recently used is dropped first): settings
that vary per row cannot grow a long job's memory."""

_providers: OrderedDict[str, Provider] = OrderedDict()
_lock = _fork.lock()


def _key_part(value: Any) -> str:
    """A setting that is not JSON (a `ServerTemplate`, a `prompt_template` function) in the
    providers' key: by its hash when it has one (a learned template can hold thousands of
    special-token texts, which a repr per call would spell out), else by its repr."""
    try:
        return f"{type(value).__qualname__}#{hash(value):x}"
    except TypeError:
        return repr(value)


def memory_provider(name: str, settings: Mapping[str, Any]) -> Provider:
    """The provider family `name` with `settings` (its constructor's keyword arguments, and
    `base_url`), on an in-memory client: made once per process and settings."""
    found = profile(name)
    family = found.name
    made = _maker(found)
    if made is None:
        raise _unsupported(family)
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a mapping, not {type(settings).__name__}")
    key = f"{family}:{json.dumps(settings, sort_keys=True, default=_key_part)}"
    with _lock:
        provider = _providers.get(key)
        if provider is not None:
            _providers.move_to_end(key)
            return provider
    provider = made(dict(settings))  # outside the lock: making a client takes milliseconds
    with _lock:
        provider = _providers.setdefault(key, provider)
        while len(_providers) > MAX_PROVIDERS:
            _providers.popitem(last=False)
    return provider
