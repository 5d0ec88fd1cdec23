"""The accept/reject harness: is a grammar as wide as it must be, and no wider?

A grammar that is too permissive fails silently (the reference texts' warning), so a grammar is
tested against two sets: sentences it must accept and texts it must reject. `check_cases`
reports every accept-case the grammar rejects (with where it leaves the language) and every
reject-case it accepts; a side with no set is reported as untested, never as passed.
`sdk grammar test GRAMMAR --accept FILE --reject FILE` runs it from the shell.

Only the grammar decides here, not its checks: the question is what the language admits.

Case files (`parse_cases`): a `.json` file is a JSON array of strings (for cases with newlines
or significant edge whitespace); any other file has one case per line, blank lines and lines
starting with `#` skipped. No I/O here: the caller reads the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field

from sdk._values.position import decoding_problem
from sdk.grammar._grammar import Grammar
from sdk.grammar._recognize import GrammarMiss
from sdk.grammar._recognize import recognize

__all__ = ["CaseFailure", "GrammarCaseReport", "check_cases", "parse_cases"]


@dataclass(frozen=True, slots=True)
class CaseFailure:
    """One case the grammar got wrong: its number in its set (from 1), and where it missed."""

    number: int
    case: str
    miss: GrammarMiss | None
    """Where an accept-case leaves the language; None for a reject-case that was accepted."""

    def describe(self) -> str:
        """One line for a report."""
        if self.miss is None:
            return f"#{self.number} {self.case!r}: accepted (the grammar is too permissive)"
        return f"#{self.number} {self.case!r}: rejected, {self.miss.describe(self.case)}"


@dataclass(frozen=True)
class GrammarCaseReport:
    """What `check_cases` found. `ok` is False if any case went the wrong way."""

    grammar: str
    accept_count: int | None
    """How many accept-cases ran; None when there was no accept set (untested)."""
    reject_count: int | None
    """How many reject-cases ran; None when there was no reject set (untested)."""
    rejected: list[CaseFailure] = field(default_factory=list)
    """Accept-cases the grammar rejects: the grammar is too narrow (or the case is wrong)."""
    accepted: list[CaseFailure] = field(default_factory=list)
    """Reject-cases the grammar accepts: the grammar is too permissive."""

    @property
    def ok(self) -> bool:
        """No case went the wrong way (an untested side is not a failure, but is reported)."""
        return not self.rejected and not self.accepted

    @property
    def untested(self) -> list[str]:
        """The sides with no set: `accept`, `reject`, both or neither."""
        sides = [("accept", self.accept_count), ("reject", self.reject_count)]
        return [side for side, count in sides if count is None]

    def lines(self) -> list[str]:
        """A plain-text report, one finding a line."""
        out = []
        for side, count, failures, verb in (
            ("accept", self.accept_count, self.rejected, "rejected"),
            ("reject", self.reject_count, self.accepted, "accepted"),
        ):
            if count is None:
                out.append(f"{side}: untested (no {side} set)")
                continue
            out.append(
                f"{side}: {count - len(failures)}/{count} as expected, {len(failures)} {verb}"
            )
            out.extend(f"  {failure.describe()}" for failure in failures)
        return out

    def to_json(self) -> dict[str, object]:
        """The report as data, for `--json`."""

        def failure(item: CaseFailure) -> dict[str, object]:
            data: dict[str, object] = {"number": item.number, "case": item.case}
            if item.miss is not None:
                data.update(
                    position=item.miss.position,
                    line=item.miss.line,
                    column=item.miss.column,
                    expected=list(item.miss.expected),
                )
            return data

        return {
            "grammar": self.grammar,
            "ok": self.ok,
            "untested": self.untested,
            "accept_count": self.accept_count,
            "reject_count": self.reject_count,
            "rejected": [failure(item) for item in self.rejected],
            "accepted": [failure(item) for item in self.accepted],
        }


def check_cases(
    grammar: Grammar,
    *,
    accept: Iterable[str] | None = None,
    reject: Iterable[str] | None = None,
) -> GrammarCaseReport:
    """Run both sets through the grammar's recognizer; `None` for a set means untested."""
    accept_cases = None if accept is None else list(accept)
    reject_cases = None if reject is None else list(reject)
    rejected = []
    for number, case in enumerate(accept_cases or (), start=1):
        miss = recognize(grammar, case)
        if miss is not None:
            rejected.append(CaseFailure(number, case, miss))
    accepted = [
        CaseFailure(number, case, None)
        for number, case in enumerate(reject_cases or (), start=1)
        if recognize(grammar, case) is None
    ]
    return GrammarCaseReport(
        grammar=grammar.name,
        accept_count=None if accept_cases is None else len(accept_cases),
        reject_count=None if reject_cases is None else len(reject_cases),
        rejected=rejected,
        accepted=accepted,
    )


def parse_cases(text: str, *, json_format: bool = False) -> list[str]:
    """The cases of a case file's text (see the module docstring for the two formats)."""
    if json_format:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a JSON array of strings: {decoding_problem(error)}") from error
        if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
            raise ValueError("a JSON case file is an array of strings")
        return data
    lines = (line.removesuffix("\r") for line in text.split("\n"))
    return [line for line in lines if line.strip() and not line.startswith("#")]
