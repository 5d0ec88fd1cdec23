"""Secrets stay secret: no error message, repr, stored attempt or log line carries an API key or an
authorization header, whatever fails (rate limits, server errors, refused connections)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator

import httpx
import httpx2
import pytest

from contracts import Decision
from sdk import Backoff
from sdk import StructuredClient
from sdk import StructuredOutputError
from sdk.providers import AnthropicProvider
from sdk.providers import OpenAIResponsesProvider
from sdk.providers import VLLMProvider
from tests.local_support import closed_port_url
from tests.wire_support import ANTHROPIC_KEY
from tests.wire_support import OPENAI_KEY
from tests.wire_support import Sleeps
from tests.wire_support import Wire
from tests.wire_support import anthropic_client
from tests.wire_support import anthropic_reply
from tests.wire_support import error_reply
from tests.wire_support import openai_client

VLLM_KEY = "sk-vllm-SECRET-7e6d5c4b3a21"
SECRETS = (ANTHROPIC_KEY, OPENAI_KEY, VLLM_KEY, "Bearer")


def _texts(error: BaseException) -> Iterator[str]:
    """Everything a user could print about an error: message, repr, traceback, its attempts."""
    yield str(error)
    yield repr(error)
    yield "".join(traceback.format_exception(error))  # the chained SDK exceptions included
    yield from getattr(error, "__notes__", [])
    if isinstance(error, StructuredOutputError):
        for attempt in getattr(error, "attempts", []):
            yield repr(attempt)
            yield str(attempt.error)


def _failures() -> Iterator[BaseException]:
    """Drive every adapter kind into its error paths; yield what the caller catches."""
    options = {"backoff": Backoff(retries=2), "sleep": Sleeps()}
    scripts = [
        Wire(error_reply("anthropic_error_429.json", 429, retry_after="1")),  # storm
        Wire(error_reply("anthropic_error_400.json", 400)),
        Wire(httpx2.ConnectError("[Errno 111] Connection refused")),
        Wire(error_reply("anthropic_error_500.json", 500), anthropic_reply(text="not json")),
    ]
    for wire in scripts:
        provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
        with pytest.raises(StructuredOutputError) as info:
            StructuredClient(provider, retries=1, **options).generate(Decision, prompt="x")
        yield info.value
    for wire in [Wire(error_reply("openai_error_500.json", 500)),
                 Wire(httpx2.ReadTimeout("The read operation timed out"))]:  # fmt: skip
        provider = OpenAIResponsesProvider(openai_client(wire), model="gpt-5.1-mini")
        with pytest.raises(StructuredOutputError) as info:
            StructuredClient(provider, **options).generate(Decision, prompt="x")
        yield info.value
    vllm = VLLMProvider(
        closed_port_url(), model="m", headers={"Authorization": f"Bearer {VLLM_KEY}"}
    )
    with pytest.raises(StructuredOutputError) as info:
        StructuredClient(vllm, **options).generate(Decision, prompt="x")
    yield info.value


def test_no_secret_in_any_error_attempt_or_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # every logger: ours, the SDKs', httpx's
    errors = list(_failures())
    assert len(errors) == 7
    assert any(getattr(e, "attempts", None) for e in errors)  # attempts were searched too
    texts = [text for error in errors for text in _texts(error)]
    logged = [record.getMessage() for record in caplog.records]
    logged += [record.exc_text or "" for record in caplog.records]
    assert any(record.name.startswith("sdk.") for record in caplog.records)  # debug was on
    for secret in SECRETS:
        assert not [t for t in texts if secret in t], secret
        assert not [line for line in logged if secret in line], secret


def test_the_key_was_really_sent_so_the_search_above_means_something() -> None:
    wire = Wire(anthropic_reply())
    provider = AnthropicProvider(anthropic_client(wire), model="claude-sonnet-4-6")
    StructuredClient(provider).generate(Decision, prompt="x")
    assert wire.requests[0].headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
    seen: list[str] = []
    http = httpx.Client(
        event_hooks={"request": [lambda r: seen.append(r.headers["authorization"])]}
    )
    vllm = VLLMProvider(closed_port_url(), model="m", http_client=http,
                        headers={"Authorization": f"Bearer {VLLM_KEY}"})  # fmt: skip
    with pytest.raises(StructuredOutputError):
        StructuredClient(vllm, backoff=Backoff(retries=0)).generate(Decision, prompt="x")
    assert seen == [f"Bearer {VLLM_KEY}"]


HOSTILE_TEXTS = {
    "a run of scheme characters": "a-" * 500_000,
    "schemes without credentials": "a://b:" * 100_000,
    "a long scheme before each ://": ("x." * 1_000 + "://") * 100,
    "a run of query parameters": "?" + "a-b." * 250_000,
}
"""Texts of about a megabyte that a reply may hold, shaped to make a pattern that scans from
every word boundary scan the same run again and again."""


def test_redacting_a_hostile_megabyte_ends_within_its_bound() -> None:
    """Every error's text goes through the redaction (`Redactor`), a streamed reply's whole text
    among them. On main the shape of credentials in a URL started at every word boundary and
    scanned a run of scheme characters to its end from each: 28 s of CPU for a tenth of the
    first text here, in the square of its length. Run in a process of its own, bounded (a hang
    fails, it is not waited out); a known secret after each text is still redacted."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    program = (
        "from sdk.providers._boundary import Redactor\n"
        "from tests.test_secrets import HOSTILE_TEXTS\n"
        "redact = Redactor(['sk-known-SECRET-1234'])\n"
        "for text in HOSTILE_TEXTS.values():\n"
        "    print(len(redact(text + ' sk-known-SECRET-1234')))\n"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", program], cwd=root,
                          capture_output=True, text=True, timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lengths = [int(line) for line in done.stdout.split()]
    assert lengths == [len(text) + len(" [redacted]") for text in HOSTILE_TEXTS.values()]
