"""The bench's bookkeeping: rows chosen by name, records merged row by row, the page rendered
from the records alone, and the README's figures checked against them.

Nothing here times anything: the rows run are the eval summary (it reads files) and rows made
up for the test; what is asserted is what gets written, and what `make test`'s check catches.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]

import readme_figures  # noqa: E402
import registry  # noqa: E402
import results  # noqa: E402
import rows  # noqa: E402
import run  # noqa: E402
from registry import BenchRow  # noqa: E402
from registry import Line  # noqa: E402
from registry import Measured  # noqa: E402
from registry import Settings  # noqa: E402
from registry import UnknownRows  # noqa: E402

rows.load_rows()


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Copies of the README, results.json and RESULTS.md, which the bench then writes."""
    for name, source in (
        ("README.md", ROOT / "README.md"),
        ("results.json", results.RESULTS_JSON),
        ("RESULTS.md", results.RESULTS_MD),
    ):
        shutil.copy(source, tmp_path / name)
    monkeypatch.setattr(results, "RESULTS_JSON", tmp_path / "results.json")
    monkeypatch.setattr(results, "RESULTS_MD", tmp_path / "RESULTS.md")
    monkeypatch.setattr(readme_figures, "README", tmp_path / "README.md")
    yield tmp_path


def _problems(folder: Path) -> list[str]:
    return readme_figures.problems(
        folder / "README.md", folder / "results.json", folder / "RESULTS.md"
    )


def _made_up(name: str, number: str, figure: str) -> BenchRow:
    def measure(settings: Settings) -> Measured:
        return Measured([Line(f"{name} / baseline", figure, "made up by the test", key=name)],
                        notes=f"- {name}: {figure} in this run.\n")  # fmt: skip

    return BenchRow(name, number, name, "a row made up by the test", "ratio", measure)


# --- choosing rows ---


def test_only_refuses_an_unknown_row_and_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownRows) as caught:
        registry.select(["fan-out", "fanout", "parse"])
    message = str(caught.value)
    assert "fanout" in message and "fan-out (3)" in message and "parse (1)" in message
    for entry in registry.REGISTRY.values():
        assert f"{entry.name} ({entry.number})" in message
    with pytest.raises(UnknownRows):
        registry.select([" ", ""])


def test_only_takes_names_and_numbers_in_table_order() -> None:
    chosen = registry.select(["eval", "3", "parse"])
    assert [entry.name for entry in chosen] == ["parse", "fan-out", "eval"]


def test_the_command_line_exits_2_on_an_unknown_row_and_writes_nothing(published: Path) -> None:
    before = {path.name: path.read_bytes() for path in published.iterdir()}
    done = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--only", "fanout", "--write"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "unknown bench row(s): fanout" in done.stderr and "fan-out (3)" in done.stderr
    assert {path.name: path.read_bytes() for path in published.iterdir()} == before


def test_every_row_registered_once_with_a_unique_number() -> None:
    numbers = [entry.number for entry in registry.REGISTRY.values()]
    assert len(set(numbers)) == len(numbers)
    assert [int(number) for number in numbers] == sorted(int(number) for number in numbers)
    assert {"parse", "streaming", "fan-out", "retry-cost", "compile", "embedded", "llama-server",
            "grammar", "batch", "demo", "retry-success", "maskbench", "eval"} <= set(
        registry.REGISTRY
    )  # fmt: skip


# --- records ---


def test_only_rewrites_its_own_rows_and_keeps_the_others_dates(
    published: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.REGISTRY, "made-up-a", _made_up("made-up-a", "90", "1.50x"))
    monkeypatch.setitem(registry.REGISTRY, "made-up-b", _made_up("made-up-b", "91", "2.50x"))
    assert run.main(["--only", "made-up-a,made-up-b", "--write"]) == 0
    first = json.loads((published / "results.json").read_text())["rows"]
    # A record from an earlier run, with its own date and commit, must stay as it was.
    first["made-up-b"]["measured"] = "2020-01-01 00:00 UTC"
    first["made-up-b"]["commit"] = "0123456789"
    (published / "results.json").write_text(
        json.dumps({"format": results.FORMAT, "rows": first}, indent=1) + "\n"
    )
    monkeypatch.setitem(registry.REGISTRY, "made-up-a", _made_up("made-up-a", "90", "1.75x"))
    assert run.main(["--only", "made-up-a", "--write"]) == 0
    second = json.loads((published / "results.json").read_text())["rows"]
    assert second["made-up-b"] == first["made-up-b"]
    assert second["made-up-a"]["lines"][0]["figure"] == "1.75x"
    assert second["eval"] == first["eval"]  # a real row not asked for: untouched too
    page = (published / "RESULTS.md").read_text()
    assert "| 90 | made-up-a / baseline | 1.75x |" in page
    assert "| 91 | `made-up-b` | a row made up by the test | ratio | 2020-01-01 00:00 UTC | " \
        "0123456789 |" in page  # fmt: skip
    assert page == results.render(results.load(published / "results.json"))


def test_a_full_run_replaces_every_record_and_a_failing_row_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(settings: Settings) -> Measured:
        raise RuntimeError("no server")

    rows = {
        "made-up-a": _made_up("made-up-a", "1", "1.00x"),
        "broken": BenchRow("broken", "2", "broken", "a row that raises", "ratio", broken),
    }
    old = {
        name: results.run_row(entry, Settings(), commit="old")
        for name, entry in {**rows, "gone": _made_up("gone", "3", "9.00x")}.items()
    }
    fresh = {name: results.run_row(entry, Settings(), commit="new") for name, entry in rows.items()}
    merged = results.merge(old, fresh, full=True, registry=rows)
    assert list(merged) == ["made-up-a", "broken"]  # `gone` is no longer registered
    assert all(record.commit == "new" for record in merged.values())
    assert merged["broken"].error == "RuntimeError: no server"
    page = results.render(merged, rows)
    assert "| 2 | broken | not measured | the row failed: RuntimeError: no server |" in page


def _skeleton(page: str) -> str:
    """The page without its figures and dates (what must not change between runs)."""
    page = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "DATE", page)
    return re.sub(r"\d[\d,.]*x?", "N", page)


def test_the_page_is_the_same_bytes_whatever_the_figures_and_dates(tmp_path: Path) -> None:
    rows = {name: _made_up(name, str(number), "") for number, name in enumerate("abc", 1)}

    def records(figure: str, when: str) -> dict[str, results.RowRecord]:
        made = {name: _made_up(name, entry.number, figure) for name, entry in rows.items()}
        found = {name: results.run_row(entry, Settings(), commit="c0ffee1234")
                 for name, entry in made.items()}  # fmt: skip
        return {
            name: results.RowRecord.from_json(
                name, {**record.to_json(), "measured": when, "seconds": 1.0, "load": "1.0"}
            )
            for name, record in found.items()
        }

    one = results.render(records("1.23x", "2026-01-01 10:00 UTC"), rows)
    other = results.render(records("45.6x", "2026-12-31 23:59 UTC"), rows)
    assert one != other
    assert _skeleton(one) == _skeleton(other)
    # And the page is a function of the records alone: saved, read back, the same bytes.
    results.save(records("1.23x", "2026-01-01 10:00 UTC"), tmp_path / "results.json")
    assert results.render(results.load(tmp_path / "results.json"), rows) == one


# --- the README's figures ---


def test_the_committed_readme_and_page_are_what_the_results_render_to() -> None:
    assert readme_figures.problems() == []


def test_a_figure_edited_in_the_readme_fails_the_check(published: Path) -> None:
    readme = published / "README.md"
    text = readme.read_text()
    block = re.search(r"<!-- figures:eval .*?<!-- /figures:eval -->", text, re.DOTALL)
    assert block is not None
    edited = block.group(0).replace("62%", "72%", 1)
    assert edited != block.group(0)
    readme.write_text(text.replace(block.group(0), edited))
    assert any("README.md's figures (eval)" in problem for problem in _problems(published))


def test_a_figure_typed_beside_the_blocks_fails_the_check(published: Path) -> None:
    readme = published / "README.md"
    text = readme.read_text()
    readme.write_text(text.replace("## Performance\n", "## Performance\n\nParsing is 1.7x.\n"))
    found = _problems(published)
    assert any("typed by hand" in problem and "1.7x" in problem for problem in found), found


def test_a_hand_edited_page_fails_the_check(published: Path) -> None:
    page = published / "RESULTS.md"
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| constrained |"))
    edited = row.replace("| constrained |", "| constrained (edited) |")
    page.write_text(text.replace(row, edited, 1))
    assert any("RESULTS.md is not what" in problem for problem in _problems(published))


def test_a_quick_row_quoted_by_the_readme_fails_the_check(published: Path) -> None:
    data = json.loads((published / "results.json").read_text())
    data["rows"]["eval"]["quick"] = True
    (published / "results.json").write_text(json.dumps(data))
    found = _problems(published)
    assert any("--quick" in problem and "eval" in problem for problem in found), found


def test_an_eval_run_not_yet_summarized_fails_the_check(published: Path) -> None:
    data = json.loads((published / "results.json").read_text())
    data["rows"]["eval"]["values"]["digest"] = "0" * 64
    (published / "results.json").write_text(json.dumps(data))
    found = _problems(published)
    assert any("eval-results/ changed" in problem for problem in found), found


def test_a_missing_block_is_named() -> None:
    with pytest.raises(ValueError, match="no block performance"):
        readme_figures.with_blocks("# README\n", {"performance": "x\n"})


def test_no_bench_script_prints_a_figure_it_did_not_measure() -> None:
    """The figures issue 25 found typed into note strings stay out of the scripts."""
    typed = ("56x", "7.6x", "2.56x", "0 of 22", "1 of 22", "1.6 one-token", "20 to 37 ms",
             "2,712", "about 1.9 s", "0.75 s", "24 ms median", "1.00x, 154 vs 154")  # fmt: skip
    for script in BENCH.glob("*.py"):
        text = script.read_text()
        for figure in typed:
            assert figure not in text, f"{script.name} types {figure!r}"


def _notices_run(*, copy: float, recall: float, false: float, p_value: float) -> dict[str, object]:
    def arm(correct: int, valid: int) -> dict[str, object]:
        rates = {"estimate": 0.0, "low": 0.0, "high": 0.0}
        fields = {"carrier": {"stated": 3, "right": 2, "false": 0, "absent": 1, "abstained": 1}}
        return {"items": 10, "valid": valid, "correct": correct, "fields": fields,
                "abstention_recall": dict(rates, estimate=recall),
                "false_abstention": dict(rates, estimate=false),
                "exact_copy": dict(rates, estimate=copy)}  # fmt: skip

    return {
        "arms": {"constrained": arm(1, 9), "grounded": arm(1, 10), "guided": arm(4, 10),
                 "mass_aware": arm(4, 10)},
        "pairs": [{"a": "constrained", "b": "guided", "difference": 0.3, "p_value": p_value,
                   "significant": p_value < 0.05}],
        "folder": "eval-results/notices", "items": 10, "dataset": "n.jsonl", "contract": "N",
        "null_labels": 4, "labels": 40, "table": "| arm |", "model": "m",
    }  # fmt: skip


def test_the_notices_reading_measures_the_guided_arm_against_the_goals() -> None:
    met = " ".join(
        readme_figures._notices(
            _notices_run(copy=0.95, recall=0.85, false=0.04, p_value=0.01), None
        ).split()
    )
    assert "goal 90%: met" in met and "goal 80%: met" in met and "bound 5%: met" in met
    assert "`guided` is more accurate than `constrained` (+30 points, p = 0.01)" in met
    assert "4 of 10 items right against 4 of 10 for `mass_aware`" in met
    missed = readme_figures._notices(
        _notices_run(copy=0.65, recall=0.65, false=0.07, p_value=0.2), None
    )
    table = missed
    missed = " ".join(missed.split())
    assert "65% (goal 90%: not met)" in missed and "bound 5%: not met" in missed
    assert "No arm is significantly more accurate" in missed
    assert "| carrier: stated / absent / false |" in table and "| 2/3 / 1/1 / 0/3 |" in table
