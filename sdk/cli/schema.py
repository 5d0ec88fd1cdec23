"""`sdk schema export|lock|check|diff|lint`: a thin layer over the schema workflow
(`sdk.workflow`), which makes every decision."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from typing import Any

import typer

from sdk._files import read_regular_text
from sdk._files import write_atomic
from sdk.cli._app import DirOption
from sdk.cli._app import JsonOption
from sdk.cli._app import Output
from sdk.cli._app import Target
from sdk.cli._app import command_group
from sdk.cli._app import errors_exit
from sdk.contract import Contract
from sdk.schema.canonical import SchemaInfo
from sdk.schema.canonical import canonical_schema
from sdk.schema.preflight import TARGETS
from sdk.schema.preflight import preflight
from sdk.schema.preflight import preflight_table
from sdk.workflow.diff import Change
from sdk.workflow.diff import Impact
from sdk.workflow.diff import SchemaDiff
from sdk.workflow.diff import diff_schemas
from sdk.workflow.grammar_diff import diff_grammars
from sdk.workflow.lint import LintReport
from sdk.workflow.lint import lint_all
from sdk.workflow.prompt_diff import PromptDiff
from sdk.workflow.prompt_diff import diff_prompts
from sdk.workflow.snapshot import load_snapshot
from sdk.workflow.versioning import LOCK_FILE
from sdk.workflow.versioning import CheckFinding
from sdk.workflow.versioning import Lock
from sdk.workflow.versioning import LockConflict
from sdk.workflow.versioning import check
from sdk.workflow.versioning import default_directory
from sdk.workflow.versioning import discover
from sdk.workflow.versioning import discover_grammars
from sdk.workflow.versioning import discover_prompts
from sdk.workflow.versioning import display_path
from sdk.workflow.versioning import export
from sdk.workflow.versioning import imported_apart
from sdk.workflow.versioning import lock
from sdk.workflow.versioning import locked_grammar
from sdk.workflow.versioning import locked_prompt

__all__ = ["schema_app"]

schema_app = command_group(
    "schema",
    "Export, lock, check, diff and lint the schemas of your contracts.",
    "Version your contracts' schemas: export, lock, check, diff, lint, targets.",
)


@schema_app.command("export")
def export_command(
    target: Target,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Folder to write NAME.vVERSION.json files to.")
    ] = Path("schemas"),
) -> None:
    """Write every contract's canonical schema as NAME.vVERSION.json (deterministic bytes)."""
    out = Output()
    with errors_exit(out):
        contracts = discover(target)
        paths = export(contracts, out_dir)
    for path in paths:
        out.line(str(path))
    out.line(f"{len(paths)} schemas exported from {target}", "dim")


@schema_app.command("lock")
def lock_command(
    target: Target,
    directory: DirOption = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Re-pin a changed locked version, or rewrite a hand-edited snapshot (only "
            "for a version never released).",
        ),
    ] = False,
) -> None:
    """Write the snapshots and the lock file: name, version, fingerprint, snapshot of each."""
    out = Output()
    with errors_exit(out):
        try:
            outcome = lock(target, directory=directory, force=force)
        except LockConflict as conflict:
            for problem in conflict.problems:
                out.error(problem)
            raise typer.Exit(1) from conflict
    for entry in outcome.added:
        out.line(f"locked {entry.name} v{entry.version} ({entry.fingerprint[:12]})", "green")
    for entry in outcome.replaced:
        out.line(f"re-pinned {entry.name} v{entry.version} ({entry.fingerprint[:12]})", "yellow")
    for entry in outcome.rewritten:
        out.line(f"rewrote the edited snapshot of {entry.name} v{entry.version}", "yellow")
    for entry in outcome.dropped:
        out.line(f"dropped {entry.name} v{entry.version}: no longer defined", "yellow")
    missing: dict[str, list[str]] = {}  # (one line per name, as `check` reports it)
    for entry in outcome.missing:
        missing.setdefault(entry.name, []).append(f"v{entry.version}")
    for name, versions in missing.items():
        out.line(
            f"kept {name} ({', '.join(versions)}): locked as defined in {target}, which no "
            "longer defines it (lock the folder or package to drop it, or the file it moved to)",
            "yellow",
        )
    for path in outcome.written:
        out.line(f"wrote {display_path(path)}", "dim")
    counts = [
        f"{len(outcome.added)} locked",
        f"{len(outcome.replaced)} re-pinned",
        f"{len(outcome.dropped)} dropped",
        f"{len(outcome.unchanged)} unchanged",
    ]
    history = ", ".join(f"{e.name} v{e.version}" for e in outcome.history)
    kept = f"; older versions kept for stored values: {history}" if history else ""
    nothing = "" if outcome.written else "; nothing written"
    out.line(f"{display_path(outcome.path)}: {', '.join(counts)}{kept}{nothing}", "dim")


@schema_app.command("check")
def check_command(target: Target, directory: DirOption = None, as_json: JsonOption = False) -> None:
    """Fail when a contract changed without a version bump, disappeared, or is not locked."""
    out = Output()
    with errors_exit(out):
        findings = check(target, directory=directory)
        count = len(discover(target))
        grammars = len(discover_grammars(target))
        prompts = len(discover_prompts(target))
    if as_json:
        out.json({"ok": not findings, "findings": [f.to_json() for f in findings]})
    else:
        for finding in findings:
            _print_check_finding(out, finding)
        if findings:
            out.line(f"{len(findings)} problem(s): the schemas of {target} do not match the lock")
        else:
            plural = "" if grammars == 1 else "s"
            said = f"{count} contracts, {grammars} grammar{plural}"
            if prompts:
                said += f" and {prompts} prompt{'' if prompts == 1 else 's'}"
            else:
                said = said.replace(", ", " and ")
            out.line(f"{target}: {said} match the lock", "green")
    if findings:
        raise typer.Exit(1)


def _print_check_finding(out: Output, finding: CheckFinding) -> None:
    out.parts((f"{finding.code.value}: ", "bold red"), (finding.message, None))
    if finding.diff is not None:
        for change in finding.diff.changes:
            _print_change(out, change, indent="    ")


# --- diff --------------------------------------------------------------------------------------


@schema_app.command("diff")
def diff_command(
    schemas: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="OLD NEW",
            help="Two schemas: snapshot files (.json) or contracts as MODULE:Class, the module "
            "by name or path (../release/app:Order app:Order: a release against the working "
            "tree). With --against-lock: contract names to limit the diff to.",
        ),
    ] = None,
    against_lock: Annotated[
        str | None,
        typer.Option(
            "--against-lock",
            metavar="MODULE_OR_PACKAGE",
            help="Diff each contract and grammar of the package against its newest locked "
            "snapshot (grammars by their languages).",
        ),
    ] = None,
    directory: DirOption = None,
    fail_on_breaking: Annotated[
        bool, typer.Option("--fail-on-breaking", help="Exit 1 if any change is breaking.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List every change, classified for producers (the model) and consumers of stored values."""
    out = Output()
    names = schemas or []
    prompt_diffs: list[PromptDiff] = []
    with errors_exit(out):
        if against_lock is not None:
            _check_named(against_lock, names)
            diffs = _diffs_against_lock(against_lock, directory, names)
            prompt_diffs = _prompt_diffs_against_lock(against_lock, directory, names)
        elif len(names) == 2:
            diffs = [diff_schemas(_load_schema(names[0]), _load_schema(names[1]))]
        else:
            raise ValueError("give OLD and NEW, or --against-lock MODULE_OR_PACKAGE")
    if as_json:
        out.json([d.to_json() for d in diffs] + [d.to_json() for d in prompt_diffs])
    else:
        for index, diff in enumerate(diffs):
            if index:
                out.line()
            _print_diff(out, diff)
        for prompt_diff in prompt_diffs:
            out.line()
            _print_prompt_diff(out, prompt_diff)
    if fail_on_breaking and any(change.breaking for d in diffs for change in d.changes):
        raise typer.Exit(1)


def _load_schema(reference: str) -> dict[str, Any]:
    """A schema from a file, or from a contract named `module:Class` (or `module.Class`)."""
    if not reference.strip():  # (`Path("")` is the current folder)
        raise ValueError(
            f"{reference!r} names nothing: give a snapshot file (.json) or a contract as "
            "MODULE:NAME (contracts:Order)"
        )
    path = Path(reference)
    if path.is_dir() or (path.suffix == ".py" and path.is_file()):
        kind = "a folder" if path.is_dir() else "a module"
        raise ValueError(
            f"{reference} is {kind}, not a schema: name one contract in it as MODULE:NAME "
            f"({reference}:Order), or give a snapshot file (.json)"
        )
    if path.suffix == ".json" or path.exists():
        return load_snapshot(path)
    # `path/to/pkg:Class` or `pkg.module:Class`; `pkg.module.Class` too.
    module_name, _, class_name = reference.rpartition(":" if ":" in reference else ".")
    if not module_name:
        raise ValueError(f"{reference!r} is neither a file nor module:Class")
    # Imported apart: OLD and NEW may be one package's two versions (`../release/app:Order`
    # against `app:Order`), each read from where it was named.
    with imported_apart(module_name) as module:
        contract = getattr(module, class_name, None)
        if not (isinstance(contract, type) and issubclass(contract, Contract)):
            raise ValueError(f"{reference!r} is not a Contract")
        return canonical_schema(contract)


def _check_named(target: str, names: list[str]) -> None:
    """A `ValueError` for a NAME that is no contract, grammar or prompt of the target: left
    out of the diff, a typo would make it empty and `--fail-on-breaking` pass."""
    from sdk._values.declared import did_you_mean

    known = {contract.__name__ for contract in discover(target)}
    known |= {grammar.name for grammar in discover_grammars(target)}
    known |= {prompt.name for prompt in discover_prompts(target)}
    for name in names:
        if name not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise ValueError(
                f"{target} has no contract, grammar or prompt named {name!r}"
                f"{did_you_mean(name, frozenset(known))} (it has: {listed})"
            )


def _diffs_against_lock(target: str, directory: Path | None, names: list[str]) -> list[SchemaDiff]:
    """Each contract and grammar of the target against its newest locked snapshot."""
    folder = directory or default_directory(target)
    current = Lock.read(folder / LOCK_FILE)
    diffs = []
    for contract in discover(target):
        if names and contract.__name__ not in names:
            continue
        entry = current.latest(contract.__name__)
        new = canonical_schema(contract)
        if entry is None:
            # Not locked yet: everything is new, so diff against an empty object.
            old: dict[str, Any] = {"title": contract.__name__, "type": "object", "properties": {}}
        else:
            old = load_snapshot(folder / entry.snapshot)
        diffs.append(diff_schemas(old, new))
    for grammar in discover_grammars(target):
        if names and grammar.name not in names:
            continue
        entry = current.latest(grammar.name)
        locked = None if entry is None else locked_grammar(entry, folder)
        if entry is not None and locked is None:
            raise ValueError(f"the locked snapshot of {grammar.name} v{entry.version} is missing")
        diffs.append(diff_grammars(locked, grammar))
    return diffs


def _prompt_diffs_against_lock(
    target: str, directory: Path | None, names: list[str]
) -> list[PromptDiff]:
    """Each prompt of the target against its newest locked snapshot: a diff of its text."""
    folder = directory or default_directory(target)
    current = Lock.read(folder / LOCK_FILE)
    diffs = []
    for prompt in discover_prompts(target):
        if names and prompt.name not in names:
            continue
        entry = current.latest(prompt.name)
        locked = None if entry is None else locked_prompt(entry, folder)
        if entry is not None and locked is None:
            raise ValueError(f"the locked snapshot of {prompt.name} v{entry.version} is missing")
        diffs.append(diff_prompts(locked, prompt))
    return diffs


def _print_prompt_diff(out: Output, diff: PromptDiff) -> None:
    old = (
        f"{diff.old.name} v{diff.old.version} ({diff.old.fingerprint[:12]})"
        if diff.old
        else (f"{diff.new.name} (not locked)")
    )
    new = f"{diff.new.name} v{diff.new.version} ({diff.new.fingerprint[:12]})"
    out.parts((f"prompt {old} -> {new}", "bold"))
    if diff.identical:
        out.line("  identical", "green")
        return
    for line in diff.lines[2:]:  # the two file-name lines: the header above says it
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
        out.line(f"  {line}", style)
    if diff.old is not None and diff.old.version == diff.new.version:
        bump = f"  the version is still {diff.new.version}: bump {diff.new.name}.version"
        out.line(bump, "yellow")


def _print_diff(out: Output, diff: SchemaDiff) -> None:
    out.parts((f"{_label(diff.old)} -> {_label(diff.new)}", "bold"))
    if diff.identical:
        out.line("  identical", "green")
        return
    sides = [
        side
        for side, broken in (
            ("producers", diff.breaking_for_producers),
            ("consumers", diff.breaking_for_consumers),
        )
        if broken
    ]
    verdict = f"breaking for {' and '.join(sides)}" if sides else "compatible"
    out.parts(
        (f"  {len(diff.changes)} change(s), ", None),
        (verdict, "bold red" if sides else "bold green"),
    )
    for change in diff.changes:
        _print_change(out, change, indent="  ")
    if diff.old.version == diff.new.version and diff.old.name == diff.new.name:
        out.line(f"  the version is still {diff.new.version}: bump schema_version", "yellow")
    out.line(
        "  the schema's bytes changed: provider schema caches and prompt caches restart", "dim"
    )


def _print_change(out: Output, change: Change, *, indent: str) -> None:
    def side(impact: Impact) -> tuple[str, str]:
        return impact.value, "red" if impact is Impact.BREAKING else "green"

    out.parts(
        (f"{indent}{change.kind.value} ", "bold"),
        (f"{change.pointer or '(root)'}: {change.detail}", None),
    )
    out.parts(
        (f"{indent}    producers ", "dim"),
        side(change.producers),
        (", consumers ", "dim"),
        side(change.consumers),
        (f": {change.why}", "dim"),
    )


def _label(info: SchemaInfo) -> str:
    if not info.version:
        return f"{info.name or '(schema)'} (not locked)"
    return f"{info.name} v{info.version} ({info.fingerprint[:12]})"


# --- targets -----------------------------------------------------------------------------------

_TABLE_START = "<!-- preflight-table:start -->\n"
_TABLE_END = "<!-- preflight-table:end -->"


@schema_app.command("targets")
def targets_command(
    write: Annotated[
        Path | None,
        typer.Option("--write", help="Write the table between the page's preflight-table marks."),
    ] = None,
    check_page: Annotated[
        Path | None,
        typer.Option("--check", help="Fail when the page's table is not the code's."),
    ] = None,
) -> None:
    """Print the table of targets: what each provider, route and engine enforces, strips,
    re-checks and cannot promise (generated from the code)."""
    out = Output()
    table = preflight_table()
    page = write or check_page
    if page is None:
        out.line(table.rstrip("\n"))
        return
    with errors_exit(out):
        text = read_regular_text(page)
        if _TABLE_START not in text or _TABLE_END not in text:
            raise ValueError(f"{page} has no {_TABLE_START.strip()} ... {_TABLE_END} marks")
        head, rest = text.split(_TABLE_START, 1)
        old, tail = rest.split(_TABLE_END, 1)
    if check_page is not None:
        if old != "\n" + table + "\n":
            out.error(f"{page}: the table of targets is stale: run `sdk schema targets --write`")
            raise typer.Exit(1)
        out.line(f"{page}: the table of targets is the code's", "green")
        return
    assert write is not None
    write_atomic(write, (head + _TABLE_START + "\n" + table + "\n" + _TABLE_END + tail).encode())
    out.line(f"wrote the table of targets to {write}", "dim")


# --- lint --------------------------------------------------------------------------------------


@schema_app.command("lint")
def lint_command(
    target: Target,
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider",
            help="Also report what this provider's dialect strips, and check only its grammar "
            "limits: a provider's name or alias (`sdk providers` lists them), or a dialect's "
            "(openai_strict).",
        ),
    ] = None,
    on_target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Say for each contract what this target enforces while decoding, strips, "
            "re-checks and cannot promise (the preflight), and lint for it: "
            f"{', '.join(TARGETS)} (or a provider's name).",
        ),
    ] = None,
    show_suppressed: Annotated[
        bool, typer.Option("--show-suppressed", help="List suppressed findings and reasons.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Find schema shapes that make models confabulate, break caching, or exceed a provider."""
    out = Output()
    with errors_exit(out):
        contracts = discover(target)
        reports = lint_all(contracts, provider=provider, target=on_target)
        checks = [preflight(c, on_target) for c in contracts] if on_target is not None else []
    if as_json:
        out.json([report.to_json() for report in reports])
    else:
        for check_ in checks:
            for index, line in enumerate(check_.lines()):
                out.line(line, "bold" if index == 0 else None)
        for report in reports:
            _print_lint(out, report, show_suppressed=show_suppressed)
        found = sum(len(r.findings) for r in reports)
        suppressed = sum(len(r.suppressed) for r in reports)
        summary = f"{found} finding(s) in {len(reports)} contracts, {suppressed} suppressed"
        out.line(summary, "bold red" if found else "green")
    if any(report.findings for report in reports) or any(c.weakened for c in checks):
        raise typer.Exit(1)


def _print_lint(out: Output, report: LintReport, *, show_suppressed: bool) -> None:
    for finding in report.findings:
        out.parts(
            (f"{report.name} {finding.pointer or '(root)'}: ", "bold"),
            (f"{finding.code.value}: ", "red"),
            (finding.message, None),
        )
        out.line(f"    fix: {finding.fix}", "dim")
    if show_suppressed:
        for item in report.suppressed:
            out.parts(
                (f"{report.name} {item.finding.pointer or '(root)'}: ", "dim"),
                (f"{item.finding.code.value} (suppressed): ", "yellow"),
                (item.reason, "dim"),
            )
