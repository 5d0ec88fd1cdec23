"""`sdk eval` end to end on the embedded model: offline, real constrained and free generation.

Marked `local`. Two decisions and three arms with a short output limit: what is checked is the
plumbing on a real model (the unconstrained arm really turns the grammar off, constrained arms
carry surviving mass, results and report are written, a rerun resumes), never the model's
accuracy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sdk.cli import app

pytestmark = pytest.mark.local

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def embedded_available() -> None:
    try:
        from sdk.providers.embedded import EmbeddedProvider

        EmbeddedProvider().close()
    except ImportError as missing:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
            pytest.fail(f"CI must run the local tests, but {missing}", pytrace=False)
        pytest.skip(str(missing))


def test_sdk_eval_runs_offline_on_the_embedded_model(
    tmp_path: Path, embedded_available: None
) -> None:
    arguments = [
        "eval",
        str(REPO / "examples" / "data" / "eval" / "decisions.jsonl"),
        "--contract",
        "contracts:Decision",
        "--arms",
        "constrained,unconstrained,widened",
        "--limit",
        "2",
        "--max-tokens",
        "96",
        "--out",
        str(tmp_path),
    ]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert saved["complete"] is True
    assert saved["config"]["provider"] == "embedded"
    outcomes = {(o["arm"], o["item"]): o for o in saved["outcomes"]}
    assert len(outcomes) == 6
    for item in ("dec-001", "dec-002"):
        constrained = outcomes["constrained", item]
        assert constrained["mass"] and "/answer" in constrained["mass"]
        assert outcomes["unconstrained", item]["mass"] is None  # no grammar, nothing masked
        assert outcomes["widened", item]["schema"]["name"] == "DecisionWidened"
    assert set(saved["metrics"]) == {"constrained", "unconstrained", "widened"}
    report = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'id="accuracy-chart"' in report
    assert (tmp_path / "accuracy.svg").is_file()

    # A second run has nothing left to do: it resumes and finishes at once.
    before = (tmp_path / "results.json").read_text(encoding="utf-8")
    again = CliRunner().invoke(app, arguments)
    assert again.exit_code == 0, again.output
    after = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert after["outcomes"] == json.loads(before)["outcomes"]


def test_sdk_eval_with_the_cache_repeats_a_run_without_a_call(
    tmp_path: Path, embedded_available: None
) -> None:
    cache = tmp_path / "responses.db"
    arguments = [
        "eval",
        str(REPO / "examples" / "data" / "eval" / "decisions.jsonl"),
        "--contract",
        "contracts:Decision",
        "--arms",
        "constrained",
        "--limit",
        "2",
        "--max-tokens",
        "160",  # room to finish: only a valid answer is stored
        "--out",
        str(tmp_path / "run"),
        "--cache-path",
        str(cache),
        "--fresh",  # the second run starts over: only the cache can spare its calls
    ]
    first = CliRunner().invoke(app, arguments)
    assert first.exit_code == 0, first.output
    before = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    assert "cache:   0 of" in first.output
    second = CliRunner().invoke(app, arguments)
    assert second.exit_code == 0, second.output
    after = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    calls = len(after["outcomes"])
    assert f"cache:   {calls} of {calls} calls answered from {cache}" in second.output
    # The same answers and the same surviving mass: the hit kept the constraint diagnostics.
    assert all(o["valid"] and o["mass"] for o in before["outcomes"])
    key = ("arm", "item", "value", "mass", "correct")
    assert [{k: o.get(k) for k in key} for o in after["outcomes"]] == [
        {k: o.get(k) for k in key} for o in before["outcomes"]
    ]
