"""The provider examples run as a user would run them: a subprocess, no API key (the offline
stand-in answers), and the output says what happened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(name: str) -> str:
    configured = {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "LLAMA_SERVER_URL"}
    env = {key: value for key, value in os.environ.items() if key not in configured}
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


def test_openai_quickstart_reads_the_cut_before_the_text_and_ramps_the_limit() -> None:
    out = _run("quickstart_openai.py")
    assert "OPENAI_API_KEY is not set: answering from an offline stand-in" in out
    assert "attempt 1: max_tokens=64, stop incomplete:max_output_tokens: TruncatedOutput" in out
    assert "attempt 2: max_tokens=128, stop completed: valid" in out
    assert "sentiment:  mixed (0.60)" in out
    # Cached and reasoning tokens are their own counts, summed over both attempts.
    assert "tokens:     824 in (512 cached), 160 out (64 reasoning)" in out
    assert "cost:       $" in out


def test_llamacpp_example_streams_snapshots_from_a_local_server_then_the_result() -> None:
    out = _run("local_llamacpp.py")
    assert "LLAMA_SERVER_URL is not set: answering from a local stand-in" in out
    snapshots = [line for line in out.splitlines() if line.startswith("snapshot:")]
    assert len(snapshots) >= 3
    assert '"score": 0.55' in snapshots[-1] and '"score"' not in snapshots[0]
    assert "sentiment: mixed (0.55)" in out
    assert "stop:      end_turn (raw 'eos')" in out
    # The bounds llama.cpp cannot take on a number are reported, and were checked.
    assert "/properties/score: maximum=1" in out


def test_tool_calls_retries_a_bad_argument_runs_the_tools_and_answers() -> None:
    out = _run("tool_calls.py")
    assert "attempt 1: SchemaViolation" in out
    assert "/unit: 'kelvin' is not one of ['celsius', 'fahrenheit']" in out
    assert "attempt 2: valid" in out
    assert "get_weather(Paris, celsius)" in out and "get_weather(Oslo, celsius)" in out
    assert "answer: Paris is warmer" in out
