"""The provider examples run as a user would run them: a subprocess, no API key (the offline
stand-in answers), and the output says what happened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(name: str) -> str:
    env = {key: value for key, value in os.environ.items() if key != "ANTHROPIC_API_KEY"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_quickstart_retries_an_invalid_answer_and_prints_the_decision() -> None:
    out = _run("quickstart_anthropic.py")
    assert "ANTHROPIC_API_KEY is not set: answering from an offline stand-in" in out
    assert "answer:     approve" in out
    assert "confidence: high" in out
    assert "attempt 1: SchemaViolation: output does not match the Decision schema" in out
    assert "/confidence: 'certain' is not one of ['low', 'medium', 'high']" in out
    assert "attempt 2: valid" in out
    assert "tokens:     620 in, 128 out" in out


def test_async_service_classifies_every_review_through_a_rate_limit_and_a_retry() -> None:
    out = _run("async_service.py")
    lines = [line for line in out.splitlines() if line.startswith("r-")]
    assert len(lines) == 6 and not any("FAILED" in line for line in lines)
    assert sum("retried after HTTP 429" in line for line in lines) == 1
    assert sum("retried after SchemaViolation at /score" in line for line in lines) == 1
    assert "r-102: negative" in out and "r-104: mixed" in out
    assert out.rstrip().endswith("6 reviews classified")


def test_tool_calls_retries_a_bad_argument_runs_the_tools_and_answers() -> None:
    out = _run("tool_calls.py")
    assert "attempt 1: SchemaViolation" in out
    assert "/unit: 'kelvin' is not one of ['celsius', 'fahrenheit']" in out
    assert "attempt 2: valid" in out
    assert "get_weather(Paris, celsius)" in out and "get_weather(Oslo, celsius)" in out
    assert "answer: Paris is warmer" in out
