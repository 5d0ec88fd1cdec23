"""The bench's rows: each one a registered function that measures something in this run.

A row is declared where it is measured, with the `row` decorator:

    @row("parse", number="1", title="parse",
         measures="the full `sdk.parse` pipeline against bare `model_validate_json`",
         unit="ratio of CPU times, best of several batches")
    def parse_row(settings: Settings) -> Measured:
        ours, base = paired_cpu_seconds(full, bare, quick=settings.quick)
        return Measured([Line("parse / bare", ratio(ours, base), key="parse-5kb")])

`bench/run.py` imports the modules that hold rows (`ROW_MODULES` there), runs the rows asked
for, and (`--write`) records what each returned in bench/results.json with the date, the commit
and the machine, then renders bench/RESULTS.md from that file alone. Nothing else writes
either file. See bench/README.md for the rules a row keeps (no figure in a note that this run
did not measure, arms alternated, units said as they are).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

__all__ = [
    "REGISTRY",
    "BenchRow",
    "Line",
    "Measured",
    "Settings",
    "UnknownRows",
    "row",
    "select",
]


@dataclass(frozen=True)
class Settings:
    """What a run asks of every row."""

    quick: bool = False
    """Fewer repetitions and smaller inputs: a smoke run of the machinery, never a result."""
    maskbench: Path | None = None
    """The extracted maskbench corpus (the maskbench row), if there is one."""


@dataclass(frozen=True)
class Line:
    """One line of a table: what was measured, the figure, and how it was made."""

    measure: str
    figure: str
    detail: str = ""
    goal: str = ""
    met: str = ""
    key: str = ""
    """A stable name other scripts (the README's figures) quote this line by; empty: none."""

    def to_json(self) -> dict[str, str]:
        return {
            "measure": self.measure,
            "figure": self.figure,
            "detail": self.detail,
            "goal": self.goal,
            "met": self.met,
            "key": self.key,
        }

    @classmethod
    def from_json(cls, data: dict[str, str]) -> Line:
        return cls(**{name: str(data.get(name, "")) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Measured:
    """What a row's function returns: every text in it was produced by this run."""

    lines: list[Line]
    """Lines of the main table (a row with a section of its own may have none)."""
    notes: str = ""
    """Markdown written under the row's heading in "Reading the rows". Any figure in it is one
    this run measured (or a setting of the run, written from the constant), never typed."""
    section: str = ""
    """Markdown of a section of its own, for what the main table cannot hold (more tables)."""
    values: dict[str, Any] = field(default_factory=dict)
    """Numbers (and short texts) other scripts may quote, by name; JSON-serializable."""


@dataclass(frozen=True)
class BenchRow:
    """A registered row: its names, what it measures, and the function that measures it."""

    name: str
    """What `--only` takes (lowercase, with dashes)."""
    number: str
    """Its number in the main table, whose rows are in the order of their numbers."""
    title: str
    measures: str
    """One sentence: what the row compares with what."""
    unit: str
    """What the figure is, as it is: "ratio of CPU times", "wall seconds", ..."""
    function: Callable[[Settings], Measured]
    long: bool = False
    """Minutes rather than seconds (said in `--list`; `make bench` runs it all the same)."""


REGISTRY: dict[str, BenchRow] = {}
"""Every row, by name, in the order of their numbers (the table's order)."""


def _number_key(number: str) -> tuple[int, str]:
    return (int(number), "") if number.isdigit() else (1 << 30, number)


def row(
    name: str, *, number: str, title: str, measures: str, unit: str, long: bool = False
) -> Callable[[Callable[[Settings], Measured]], Callable[[Settings], Measured]]:
    """Register the decorated function as the row `name` (see the module docstring)."""

    def register(function: Callable[[Settings], Measured]) -> Callable[[Settings], Measured]:
        if name in REGISTRY and not _same_source(REGISTRY[name].function, function):
            raise ValueError(f"bench row {name!r} is registered twice")
        taken = {entry.number: entry.name for entry in REGISTRY.values() if entry.name != name}
        if number in taken:
            raise ValueError(f"bench rows {taken[number]!r} and {name!r} both take number {number}")
        REGISTRY[name] = BenchRow(name, number, title, measures, unit, function, long)
        ordered = sorted(REGISTRY.items(), key=lambda item: _number_key(item[1].number))
        REGISTRY.clear()
        REGISTRY.update(ordered)
        return function

    return register


def _same_source(one: Callable[..., object], other: Callable[..., object]) -> bool:
    """The same function of the same file: a script run as `__main__` and imported by name."""
    return (one.__qualname__, one.__code__.co_filename) == (
        other.__qualname__,
        other.__code__.co_filename,
    )


class UnknownRows(ValueError):
    """`--only` named rows that are not registered."""


def select(wanted: Iterable[str], registry: dict[str, BenchRow] | None = None) -> list[BenchRow]:
    """The rows named in `wanted` (by name or by number), in table order.

    An unknown name is an `UnknownRows` error that lists the valid ones: a misspelt row must not
    run nothing and then write as if it had.
    """
    registry = REGISTRY if registry is None else registry
    by_number = {entry.number: entry.name for entry in registry.values()}
    names: set[str] = set()
    unknown: list[str] = []
    for item in wanted:
        item = item.strip()
        if not item:
            continue
        name = by_number.get(item, item)
        if name in registry:
            names.add(name)
        else:
            unknown.append(item)
    if unknown:
        valid = ", ".join(f"{entry.name} ({entry.number})" for entry in registry.values())
        raise UnknownRows(f"unknown bench row(s): {', '.join(unknown)}; the rows are: {valid}")
    if not names:
        raise UnknownRows("--only names no row")
    return [entry for entry in registry.values() if entry.name in names]
