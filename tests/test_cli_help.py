"""`--help` of every command and group, at 80 columns: the docstrings' paragraphs, reflowed.

A docstring is written at the source file's width; typer's rich help keeps its line breaks, which
broke panels in mid-sentence (`each item's call is` / `answered from the response cache...`).
`sdk.cli._app.reflowed` puts each paragraph on one line for the terminal to wrap: here every
help page is rendered at 80 columns and read back.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from sdk.cli import app
from sdk.cli._app import reflowed

WIDTH = 80
BORDER = "│"


def _commands() -> list[tuple[tuple[str, ...], Any]]:
    """Every group and command of `sdk`, by its words (`("schema", "lint")`), the root too."""
    found: list[tuple[tuple[str, ...], Any]] = []

    def walk(words: tuple[str, ...], command: Any) -> None:
        found.append((words, command))
        for name, sub in getattr(command, "commands", {}).items():
            walk((*words, name), sub)

    walk((), typer.main.get_command(app))
    return found


COMMANDS = _commands()


def _help(words: tuple[str, ...]) -> str:
    result = CliRunner().invoke(
        app, [*words, "--help"], env={"COLUMNS": str(WIDTH), "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def _description(page: str) -> list[str]:
    """The help text under `Usage:`, up to the first panel: lines without their padding."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:"))
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    return [line.strip() for line in lines[start + 1 : end]]


def _paragraphs(lines: list[str]) -> list[list[str]]:
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line:
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [paragraph for paragraph in paragraphs if paragraph]


def _assert_filled(lines: list[str], width: int, where: str) -> None:
    """Each line but the last of a wrapped paragraph is full: its next word would not fit."""
    for line, following in itertools.pairwise(lines):
        word = following.split()[0]
        assert len(line) + 1 + len(word) > width, (
            f"{where}: a line break the width did not need, after {line!r} (next: {word!r})"
        )


def test_every_command_and_group_is_checked() -> None:
    names = {" ".join(words) for words, _ in COMMANDS}
    assert {
        "",
        "schema",
        "schema lint",
        "batch run",
        "cache stats",
        "demo",
        "eval",
        "serve",
    } <= names
    assert len(names) >= 20


@pytest.mark.parametrize(
    ("words", "command"), COMMANDS, ids=[" ".join(w) or "sdk" for w, _ in COMMANDS]
)
def test_help_at_80_columns_keeps_paragraphs_and_drops_line_breaks(
    words: tuple[str, ...], command: Any
) -> None:
    page = _help(words)
    where = f"sdk {' '.join(words)} --help"
    assert max(len(line) for line in page.splitlines()) <= WIDTH, where

    # The docstring's paragraphs, every word in order, each wrapped only where the width needs.
    expected = (reflowed(command.help) or "").split("\n\n")
    shown = _paragraphs(_description(page))
    assert [" ".join(paragraph) for paragraph in shown] == expected, where
    for paragraph in shown:
        _assert_filled(paragraph, WIDTH - 2, where)  # a space of padding on each side

    # A group's commands panel: each command's first paragraph, filled the same way.
    if getattr(command, "commands", None):
        _assert_commands_panel_filled(page, where)


def _assert_commands_panel_filled(page: str, where: str) -> None:
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Commands"))
    rows = [line for line in lines[start + 1 :] if line.startswith(BORDER)]
    # The help column starts where the first row's help does (after the name and its padding).
    first = rows[0]
    column = len(first) - len(first[2:].lstrip().split(" ", 1)[1].lstrip()) if rows else 0
    width = WIDTH - column - 2  # a space and the border on the right
    entry: list[str] = []
    for row in rows:
        name, text = row[:column].strip(BORDER + " "), row[column:-1].strip()
        if name and entry:
            _assert_filled(entry, width, f"{where}, commands panel")
            entry = []
        entry.append(text)
    _assert_filled(entry, width, f"{where}, commands panel")


def test_no_help_string_keeps_a_single_line_break() -> None:
    for words, command in COMMANDS:
        texts = [command.help, command.short_help]
        texts += [getattr(parameter, "help", None) for parameter in command.params]
        for text in texts:
            if text:
                paragraphs = text.split("\n\n")
                assert all("\n" not in p for p in paragraphs), (words, text)


def test_reflowed_keeps_paragraphs_and_the_no_rewrap_mark() -> None:
    text = """First line
        goes on here.

        Second paragraph,
        two lines.

        \b
        kept
        as is
        \f
        not help"""
    assert reflowed(text) == (
        "First line goes on here.\n\nSecond paragraph, two lines.\n\n\b\nkept\nas is"
    )
    assert reflowed(None) is None
    assert reflowed("") == ""
