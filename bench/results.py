"""bench/results.json (what each row measured, when, at which commit, on what machine) and
bench/RESULTS.md, rendered from it alone.

`record` stamps what a row returned; `merge` puts records into the file's rows (a full run
replaces them all, `--only` just its own); `render` writes the page: the same code and the same
records give the same bytes, so a fresh clone's `make bench` reproduces the page except its
figures and dates, and `bench/readme_figures.py --check` (in `make test`) fails on a page that
is not the rendering of the file (a hand edit).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import textwrap
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from registry import REGISTRY
from registry import BenchRow
from registry import Line
from registry import Measured
from registry import Settings

__all__ = [
    "FORMAT",
    "RESULTS_JSON",
    "RESULTS_MD",
    "RowRecord",
    "load",
    "machine",
    "merge",
    "record",
    "render",
    "render_table",
    "replace_file",
    "run_row",
    "save",
    "source_state",
]

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS_JSON = BENCH / "results.json"
RESULTS_MD = BENCH / "RESULTS.md"
FORMAT = "sdk-bench/1"

# What the bench writes: a change there does not make the measured code "modified".
_WRITTEN = ("bench/results.json", "bench/RESULTS.md", "README.md")
_VERSIONS = ("pydantic", "jiter", "httpx", "llama_cpp_python", "llguidance")


@dataclass(frozen=True)
class RowRecord:
    """One row as measured: its lines and texts, and when, where and at which commit."""

    name: str
    measured: str
    """UTC, to the minute."""
    commit: str
    """The short commit hash, `+changes` when the tree held uncommitted changes; `unknown`
    outside a git checkout."""
    load: str
    """The load average (1, 5, 15 minutes) when the row started."""
    seconds: float
    """How long the row took (wall)."""
    quick: bool
    machine: dict[str, str]
    lines: list[Line]
    notes: str = ""
    section: str = ""
    values: dict[str, Any] | None = None
    error: str = ""
    """Why the row has no figures: it raised (type and message)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "measured": self.measured,
            "commit": self.commit,
            "load": self.load,
            "seconds": round(self.seconds, 1),
            "quick": self.quick,
            "machine": self.machine,
            "lines": [line.to_json() for line in self.lines],
            "notes": self.notes,
            "section": self.section,
            "values": self.values or {},
            "error": self.error,
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> RowRecord:
        return cls(
            name=name,
            measured=str(data["measured"]),
            commit=str(data["commit"]),
            load=str(data.get("load", "")),
            seconds=float(data.get("seconds", 0.0)),
            quick=bool(data.get("quick", False)),
            machine={str(k): str(v) for k, v in dict(data.get("machine", {})).items()},
            lines=[Line.from_json(line) for line in data.get("lines", [])],
            notes=str(data.get("notes", "")),
            section=str(data.get("section", "")),
            values=dict(data.get("values", {})),
            error=str(data.get("error", "")),
        )


# --- where and when ---


def source_state(root: Path = ROOT) -> str:
    """The commit the tree is at (short hash), with `+changes` if tracked files outside what
    the bench writes differ from it; `unknown` when this is not a git checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".",
             *(f":(exclude){path}" for path in _WRITTEN)],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if changed else "")


def machine() -> dict[str, str]:
    """What the figures depend on besides the code: CPU, Python, the libraries measured."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    found = {"cpu": f"{model}; nproc {os.cpu_count()}"}
    found["python"] = (
        f"{platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.release()}"
    )
    versions = []
    for package in _VERSIONS:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    found["libraries"] = ", ".join(versions)
    return found


def _load_average() -> str:
    try:
        return ", ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


# --- records and the file ---


def record(
    entry: BenchRow,
    measured: Measured | None,
    *,
    started: str,
    load: str,
    seconds: float,
    quick: bool,
    commit: str,
    error: str = "",
) -> RowRecord:
    """A row's record: what its function returned (or the error it raised), stamped."""
    return RowRecord(
        name=entry.name,
        measured=started,
        commit=commit,
        load=load,
        seconds=round(seconds, 1),
        quick=quick,
        machine=machine(),
        lines=list(measured.lines) if measured else [],
        notes=measured.notes if measured else "",
        section=measured.section if measured else "",
        values=dict(measured.values) if measured else {},
        error=error,
    )


def run_row(entry: BenchRow, settings: Settings, *, commit: str) -> RowRecord:
    """Run one row and stamp it: the date and load when it started, the time it took."""
    started, load, clock = now(), _load_average(), time.perf_counter()
    measured: Measured | None = None
    error = ""
    try:
        measured = entry.function(settings)
    except Exception as failure:  # the bench reports a row that broke and goes on
        error = f"{type(failure).__name__}: {failure}"
    return record(
        entry,
        measured,
        started=started,
        load=load,
        seconds=time.perf_counter() - clock,
        quick=settings.quick,
        commit=commit,
        error=error,
    )


def load(path: Path = RESULTS_JSON) -> dict[str, RowRecord]:
    """The records in `path` by row name (none when the file does not exist)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a bench results file ({FORMAT})")
    return {name: RowRecord.from_json(name, raw) for name, raw in data["rows"].items()}


def merge(
    old: dict[str, RowRecord],
    new: dict[str, RowRecord],
    *,
    full: bool,
    registry: dict[str, BenchRow] | None = None,
) -> dict[str, RowRecord]:
    """The records after a run: a full run's alone; after `--only`, the old ones with the
    rows that ran replaced. Rows no longer registered are dropped; the order is the table's."""
    registry = REGISTRY if registry is None else registry
    merged = dict(new) if full else {**old, **new}
    return {name: merged[name] for name in registry if name in merged}


def save(records: dict[str, RowRecord], path: Path = RESULTS_JSON) -> None:
    data = {"format": FORMAT, "rows": {name: rec.to_json() for name, rec in records.items()}}
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    replace_file(path, text)


def replace_file(path: Path, text: str) -> None:
    """Replace `path` whole (a temporary file renamed over it): an interrupted bench leaves
    the previous file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_page(records: dict[str, RowRecord], path: Path = RESULTS_MD) -> None:
    replace_file(path, render(records))


# --- the page ---

_HEADER = """\
# Bench results

Written by `bench/run.py --write` (`make bench` runs every row) from `bench/results.json`, and
by nothing else: `make test` fails when this page is not what that file renders to. Each row
was measured on the date and at the commit given under "Runs" (`+changes`: with uncommitted
changes); `bench/run.py --only NAME,... --write` measures some rows again and keeps the others
as they were. Figures are ratios of two quantities measured in the same run, in the unit each
row names (a row whose unit is not a ratio says so); the absolute times beside them depend on
the machine and its load.
"""


def render(records: dict[str, RowRecord], registry: dict[str, BenchRow] | None = None) -> str:
    """bench/RESULTS.md for `records` (rows in the registry's order)."""
    registry = REGISTRY if registry is None else registry
    parts = [_HEADER, "## Runs", "", *_runs_table(records, registry), ""]
    parts += ["## Machine", "", *_machines(records, registry), ""]
    parts += ["## Table", "", *_main_table(records, registry), ""]
    readings = [
        (entry, records[entry.name])
        for entry in registry.values()
        if entry.name in records and records[entry.name].notes and not records[entry.name].section
    ]
    if readings:
        parts += ["## Reading the rows", ""]
        for entry, rec in readings:
            parts += [f"### Row {entry.number}: {entry.title}", "", _wrapped(rec.notes), ""]
    for entry in registry.values():
        rec = records.get(entry.name)
        if rec is not None and rec.section:
            parts += [f"## {entry.title} (row {entry.number})", "", rec.section.rstrip("\n"), ""]
            if rec.notes:
                parts += [_wrapped(rec.notes), ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def _wrapped(notes: str) -> str:
    """Notes as Markdown bullets, each wrapped at 100 columns (rows write them with measured
    values interpolated, so their own line breaks fall anywhere)."""
    bullets: list[str] = []
    for line in notes.splitlines():
        if line.startswith("- ") or not bullets:
            bullets.append(line.strip())
        else:
            bullets[-1] += " " + line.strip()
    return "\n".join(
        textwrap.fill(bullet.removeprefix("- "), 100, initial_indent="- ", subsequent_indent="  ",
                      break_long_words=False, break_on_hyphens=False)
        for bullet in bullets
        if bullet
    )  # fmt: skip


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def _runs_table(records: dict[str, RowRecord], registry: dict[str, BenchRow]) -> list[str]:
    lines = [
        "| row | name | measures | figure | measured | commit | load average | took |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry in registry.values():
        rec = records.get(entry.name)
        if rec is None:
            when = ["not measured yet", "", "", ""]
        else:
            quick = " (`--quick`: a smoke run, not a result)" if rec.quick else ""
            when = [rec.measured + quick, rec.commit, rec.load, f"{rec.seconds:,.0f} s"]
        cells = [entry.number, f"`{entry.name}`", entry.measures, entry.unit, *when]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return lines


def _machines(records: dict[str, RowRecord], registry: dict[str, BenchRow]) -> list[str]:
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for entry in registry.values():
        rec = records.get(entry.name)
        if rec is not None:
            groups.setdefault(tuple(sorted(rec.machine.items())), []).append(entry.number)
    if not groups:
        return ["No row has been measured yet."]
    lines: list[str] = []
    for described, numbers in groups.items():
        fields = dict(described)
        prefix = "" if len(groups) == 1 else f"rows {', '.join(numbers)}: "
        lines.append(
            f"- {prefix}CPU: {fields.get('cpu', '?')}; Python {fields.get('python', '?')}; "
            f"{fields.get('libraries', '')}"
        )
    return lines


def render_table(records: dict[str, RowRecord]) -> str:
    """The main table of `records` alone (what a run prints)."""
    registry = {name: entry for name, entry in REGISTRY.items() if name in records}
    return "\n".join(_main_table(records, registry))


def _main_table(records: dict[str, RowRecord], registry: dict[str, BenchRow]) -> list[str]:
    lines = ["| row | measure | figure | detail | goal | met |", "|---|---|---|---|---|---|"]
    for entry in registry.values():
        rec = records.get(entry.name)
        if rec is None:
            rows = [Line(entry.title, "not measured yet",
                         f"`bench/run.py --only {entry.name} --write`")]  # fmt: skip
        elif rec.error:
            rows = [Line(entry.title, "not measured", f"the row failed: {rec.error}")]
        else:
            rows = rec.lines
        for line in rows:
            cells = (entry.number, line.measure, line.figure, line.detail, line.goal, line.met)
            lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return lines
