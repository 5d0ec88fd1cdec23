"""`sdk grammar test`: a grammar against accept and reject sets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from sdk._files import read_regular_text
from sdk.cli._app import JsonOption
from sdk.cli._app import Output
from sdk.cli._app import command_group
from sdk.cli._app import errors_exit
from sdk.grammar import Grammar
from sdk.grammar import check_cases
from sdk.grammar import parse_cases
from sdk.workflow.versioning import discover_grammars
from sdk.workflow.versioning import import_target

__all__ = ["grammar_app"]

grammar_app = command_group(
    "grammar",
    "Test grammar contracts against accept and reject sets.",
    "Test grammar contracts (SQL and other non-JSON output) against case sets.",
)


@grammar_app.command("test")
def grammar_test_command(
    grammar: Annotated[
        str,
        typer.Argument(
            metavar="GRAMMAR",
            help="module:NAME (contracts.sql:SELECT_QUERY), a module with one grammar, "
            "or a .lark / .gbnf file",
        ),
    ],
    accept: Annotated[
        Path | None, typer.Option("--accept", help="Cases the grammar must accept.")
    ] = None,
    reject: Annotated[
        Path | None, typer.Option("--reject", help="Cases the grammar must reject.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Report every accept-case rejected and every reject-case accepted (exit 1 on either).

    A case file has one case a line (blank and `#` lines skipped), or is a JSON array of
    strings (`.json`). A side without a file is reported as untested; at least one is given.
    """
    out = Output()
    with errors_exit(out):
        loaded = _load_grammar(grammar)
        if accept is None and reject is None:
            raise ValueError("give --accept, --reject or both: with neither, nothing is tested")
        accept_cases = _read_cases(accept) if accept is not None else None
        reject_cases = _read_cases(reject) if reject is not None else None
        report = check_cases(loaded, accept=accept_cases, reject=reject_cases)
    if as_json:
        out.json(report.to_json())
    else:
        out.line(f"grammar {loaded.name} v{loaded.version} ({loaded.fingerprint()[:12]})", "bold")
        for line in report.lines():
            failed = line.startswith("  ")
            style = "red" if failed else "yellow" if "untested" in line else None
            out.line(line, style)
        out.line("ok" if report.ok else "FAILED", "green" if report.ok else "bold red")
    if not report.ok:
        raise typer.Exit(1)


def _load_grammar(spec: str) -> Grammar:
    """A grammar from `module:NAME`, a module holding exactly one, or a .lark/.gbnf file."""
    path = Path(spec)
    if path.suffix in (".lark", ".gbnf") and ":" not in spec:
        text = read_regular_text(path)
        name = re.sub(r"\W", "_", path.stem, flags=re.ASCII)
        name = name if re.match(r"[A-Za-z_]", name) else f"g_{name}"
        return Grammar(name, gbnf=text) if path.suffix == ".gbnf" else Grammar(name, lark=text)
    module_name, _, attribute = spec.partition(":")
    if attribute:
        module = import_target(module_name)
        value = getattr(module, attribute, None)
        if value is None:
            value = next((g for g in discover_grammars(module) if g.name == attribute), None)
        if not isinstance(value, Grammar):
            raise ValueError(f"{spec} is not a Grammar (found {type(value).__name__})")
        return value
    found = discover_grammars(module_name)
    if len(found) != 1:
        names = ", ".join(g.name for g in found) or "none"
        raise ValueError(f"{spec} holds {len(found)} grammars ({names}): name one as {spec}:NAME")
    return found[0]


def _read_cases(path: Path) -> list[str]:
    """The cases of a case file (a `ValueError` naming it when it is not UTF-8 or not cases)."""
    text = read_regular_text(path)
    try:
        return parse_cases(text, json_format=path.suffix == ".json")
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
