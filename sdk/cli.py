"""The `sdk` command: `sdk schema export|lock|check|diff|lint ...`, `sdk grammar test`,
`sdk eval`, `sdk batch run|status|resume|cancel` and `sdk demo`.

A thin layer over `sdk.schema.versioning`, `sdk.schema.diff` and `sdk.schema.lint`: every
decision is made there, and this module only parses arguments and prints. Output is colored on a
terminal and plain text otherwise (rich decides, and honours NO_COLOR); `--json` prints data for
other tools instead.

Exit codes: 0 all good; 1 the command found problems (a failed check, lint findings, a refused
lock, a breaking diff with `--fail-on-breaking`); 2 it could not run (bad arguments, a module
that does not import).

MODULE_OR_PACKAGE is a dotted name (`contracts`, `myapp.models`) or a path (`contracts/`); the
current directory goes first on `sys.path`, as with `python -m`, so a working-tree package wins
over an installed copy of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from sdk._names import PROVIDER_DIALECTS
from sdk.contract import Contract
from sdk.eval.arms import ARMS as EVAL_ARMS
from sdk.grammar import Grammar, check_cases, parse_cases
from sdk.schema.canonical import SchemaInfo, canonical_schema
from sdk.schema.dialects import DIALECTS
from sdk.schema.diff import Change, Impact, SchemaDiff, diff_schemas
from sdk.schema.lint import LintReport, lint_all
from sdk.schema.snapshot import load_snapshot
from sdk.schema.versioning import (
    LOCK_FILE,
    CheckFinding,
    Lock,
    LockConflict,
    check,
    default_directory,
    discover,
    discover_grammars,
    display_path,
    export,
    import_target,
    lock,
)

__all__ = ["app", "main"]

app = typer.Typer(
    name="sdk",
    help="structured-sdk: schema versioning and linting for contracts, and the demo.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
schema_app = typer.Typer(
    help="Export, lock, check, diff and lint the schemas of your contracts.",
    no_args_is_help=True,
)
app.add_typer(schema_app, name="schema")

Target = Annotated[str, typer.Argument(metavar="MODULE_OR_PACKAGE", help="e.g. contracts")]
DirOption = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help="Folder of the lock file and snapshots (default: schemas/ beside the package).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for other tools.")]


class _Output:
    """Lines to stdout (results) and stderr (errors); styled only on a terminal."""

    def __init__(self) -> None:
        # soft_wrap: never break long pointers or paths at the console width.
        self.out = Console(soft_wrap=True, highlight=False)
        self.err = Console(stderr=True, soft_wrap=True, highlight=False)

    def line(self, text: str = "", style: str | None = None) -> None:
        self.out.print(f"[{style}]{escape(text)}[/]" if style else escape(text))

    def parts(self, *pieces: tuple[str, str | None]) -> None:
        """One line made of differently styled pieces."""
        self.out.print("".join(f"[{s}]{escape(t)}[/]" if s else escape(t) for t, s in pieces))

    def error(self, text: str) -> None:
        self.err.print(f"[bold red]error:[/] {escape(text)}")

    def json(self, data: Any) -> None:
        # Plain print, not rich: JSON must come out byte for byte.
        self.out.file.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


@contextmanager
def _errors_exit(out: _Output) -> Iterator[None]:
    """Turn the errors a user can cause (bad names, bad files) into a message and exit code 2."""
    try:
        yield
    except (ImportError, ValueError, OSError) as error:
        out.error(" ".join(str(error).split()))  # one line, whatever the message held
        raise typer.Exit(2) from error


# --- export / lock / check ---------------------------------------------------------------------


@schema_app.command("export")
def export_command(
    target: Target,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Folder to write NAME.vVERSION.json files to.")
    ] = Path("schemas"),
) -> None:
    """Write every contract's canonical schema as NAME.vVERSION.json (deterministic bytes)."""
    out = _Output()
    with _errors_exit(out):
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
    out = _Output()
    with _errors_exit(out):
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
    out.line(f"{display_path(outcome.path)}: {len(outcome.unchanged)} unchanged", "dim")


@schema_app.command("check")
def check_command(target: Target, directory: DirOption = None, as_json: JsonOption = False) -> None:
    """Fail when a contract changed without a version bump, disappeared, or is not locked."""
    out = _Output()
    with _errors_exit(out):
        findings = check(target, directory=directory)
        count = len(discover(target))
    if as_json:
        out.json({"ok": not findings, "findings": [f.to_json() for f in findings]})
    else:
        for finding in findings:
            _print_check_finding(out, finding)
        if findings:
            out.line(f"{len(findings)} problem(s): the schemas of {target} do not match the lock")
        else:
            out.line(f"{target}: {count} contracts match the lock", "green")
    if findings:
        raise typer.Exit(1)


def _print_check_finding(out: _Output, finding: CheckFinding) -> None:
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
            help="Two schemas: snapshot files (.json) or contracts as module:Class. With "
            "--against-lock: contract names to limit the diff to.",
        ),
    ] = None,
    against_lock: Annotated[
        str | None,
        typer.Option(
            "--against-lock",
            metavar="MODULE_OR_PACKAGE",
            help="Diff each contract of the package against its newest locked snapshot.",
        ),
    ] = None,
    directory: DirOption = None,
    fail_on_breaking: Annotated[
        bool, typer.Option("--fail-on-breaking", help="Exit 1 if any change is breaking.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List every change, classified for producers (the model) and consumers of stored values."""
    out = _Output()
    names = schemas or []
    with _errors_exit(out):
        if against_lock is not None:
            diffs = _diffs_against_lock(against_lock, directory, names)
        elif len(names) == 2:
            diffs = [diff_schemas(_load_schema(names[0]), _load_schema(names[1]))]
        else:
            raise ValueError("give OLD and NEW, or --against-lock MODULE_OR_PACKAGE")
    if as_json:
        out.json([d.to_json() for d in diffs])
    else:
        for index, diff in enumerate(diffs):
            if index:
                out.line()
            _print_diff(out, diff)
    if fail_on_breaking and any(change.breaking for d in diffs for change in d.changes):
        raise typer.Exit(1)


def _load_schema(reference: str) -> dict[str, Any]:
    """A schema from a file, or from a contract named `module:Class` (or `module.Class`)."""
    path = Path(reference)
    if path.suffix == ".json" or path.exists():
        return load_snapshot(path)
    module_name, _, class_name = reference.replace(":", ".").rpartition(".")
    if not module_name:
        raise ValueError(f"{reference!r} is neither a file nor module:Class")
    contract = getattr(import_target(module_name), class_name, None)
    if not (isinstance(contract, type) and issubclass(contract, Contract)):
        raise ValueError(f"{reference!r} is not a Contract")
    return canonical_schema(contract)


def _diffs_against_lock(target: str, directory: Path | None, names: list[str]) -> list[SchemaDiff]:
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
    return diffs


def _print_diff(out: _Output, diff: SchemaDiff) -> None:
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


def _print_change(out: _Output, change: Change, *, indent: str) -> None:
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


# --- lint --------------------------------------------------------------------------------------


@schema_app.command("lint")
def lint_command(
    target: Target,
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider",
            help="Also report what this provider's dialect strips, and check only its grammar "
            f"limits: {', '.join(PROVIDER_DIALECTS)} (or a dialect: {', '.join(DIALECTS)}).",
        ),
    ] = None,
    show_suppressed: Annotated[
        bool, typer.Option("--show-suppressed", help="List suppressed findings and reasons.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Find schema shapes that make models confabulate, break caching, or exceed a provider."""
    out = _Output()
    with _errors_exit(out):
        reports = lint_all(discover(target), provider=provider)
    if as_json:
        out.json([report.to_json() for report in reports])
    else:
        for report in reports:
            _print_lint(out, report, show_suppressed=show_suppressed)
        found = sum(len(r.findings) for r in reports)
        suppressed = sum(len(r.suppressed) for r in reports)
        summary = f"{found} finding(s) in {len(reports)} contracts, {suppressed} suppressed"
        out.line(summary, "bold red" if found else "green")
    if any(report.findings for report in reports):
        raise typer.Exit(1)


def _print_lint(out: _Output, report: LintReport, *, show_suppressed: bool) -> None:
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


# --- grammar test -----------------------------------------------------------------------------

grammar_app = typer.Typer(
    help="Test grammar contracts against accept and reject sets.", no_args_is_help=True
)
app.add_typer(grammar_app, name="grammar")


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
    strings (`.json`). A side without a file is reported as untested.
    """
    out = _Output()
    with _errors_exit(out):
        loaded = _load_grammar(grammar)
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
        text = path.read_bytes().decode("utf-8")
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
    return parse_cases(path.read_bytes().decode("utf-8"), json_format=path.suffix == ".json")


# --- demo --------------------------------------------------------------------------------------


@app.command()
def demo() -> None:
    """Run the demo: real grammar-constrained generation with a small local model."""
    # Imported here: the demo needs the `local` extra, which the schema commands do not.
    from sdk.demo import main as run_demo

    result = run_demo()
    if isinstance(result, int) and result:
        raise typer.Exit(result)


# --- eval --------------------------------------------------------------------------------------


@app.command("eval")
def eval_command(
    dataset: Annotated[Path, typer.Argument(help="JSONL dataset: id, document, expected labels.")],
    contract_ref: Annotated[
        str, typer.Option("--contract", help="The contract, as MODULE:NAME (contracts:Decision).")
    ],
    provider_spec: Annotated[
        str,
        typer.Option(
            "--provider",
            help="embedded[:MODEL.gguf], llamacpp[:URL], anthropic:MODEL or openai:MODEL.",
        ),
    ] = "embedded",
    arms: Annotated[
        str,
        typer.Option("--arms", help="Comma-separated arms (default: all that can run)."),
    ] = ",".join(EVAL_ARMS),
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for results.json and report.html (resumed if there)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N items.")
    ] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1)] = 400,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="Invalid-output retries, every arm.")
    ] = 1,
    temperature: Annotated[float | None, typer.Option("--temperature", min=0.0)] = None,
    seed: Annotated[int | None, typer.Option("--seed")] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Discard earlier results in --out.")
    ] = False,
) -> None:
    """Paired evaluation: the same items through each arm (constrained, unconstrained, widened,
    answer-first, two-phase), scored on accuracy and abstention, with paired statistics."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sdk.client import StructuredClient
    from sdk.errors import ProviderError
    from sdk.eval import (
        EvalItem,
        ResumeMismatch,
        html_report,
        load_dataset,
        run_eval,
        terminal_tables,
    )
    from sdk.eval.report import ACCURACY_FILE, REPORT_FILE, accuracy_svg
    from sdk.eval.runner import RESULTS_FILE

    out = _Output()
    with _errors_exit(out):
        contract = _contract_named(contract_ref)
        items: list[EvalItem] = load_dataset(dataset, contract)[:limit]
        chosen = [arm.strip() for arm in arms.split(",") if arm.strip()]
        folder = out_dir if out_dir is not None else Path("eval-results") / dataset.stem
        options: dict[str, Any] = {}
        if temperature is not None:
            options["temperature"] = temperature
        if seed is not None:
            options["seed"] = seed
        client = StructuredClient(_eval_provider(provider_spec), retries=retries)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=out.err,
        ) as bar:
            task = bar.add_task(f"eval {contract.__name__}", total=None)

            def progress(done: int, total: int, outcome: Any) -> None:
                label = f"{outcome.arm} {outcome.item}" if outcome is not None else "starting"
                bar.update(task, completed=done, total=total, description=label)

            try:
                run = run_eval(
                    items,
                    contract,
                    client,
                    arms=chosen,
                    out=folder,
                    max_tokens=max_tokens,
                    options=options,
                    progress=progress,
                    fresh=fresh,
                    dataset=str(dataset),
                )
            except ResumeMismatch as error:
                out.error(f"{error} (or pass --fresh)")
                raise typer.Exit(2) from error
            except ProviderError as error:
                out.error(f"the provider failed: {error}; run the same command again to resume")
                raise typer.Exit(1) from error
            except KeyboardInterrupt:
                out.error("interrupted; run the same command again to resume")
                raise typer.Exit(130) from None
            finally:
                client.close()
        from sdk._files import write_atomic

        write_atomic(folder / REPORT_FILE, html_report(run))
        if run.metrics:
            write_atomic(folder / ACCURACY_FILE, accuracy_svg(run))
    for table in terminal_tables(run):
        out.out.print(table)
    out.line(f"results: {folder / RESULTS_FILE}")
    out.line(f"report:  {folder / REPORT_FILE}")


def _contract_named(reference: str) -> type[Contract]:
    module_name, _, name = reference.partition(":")
    if not module_name or not name:
        raise ValueError(f"--contract takes MODULE:NAME (contracts:Decision), not {reference!r}")
    value = getattr(import_target(module_name), name, None)
    if not (isinstance(value, type) and issubclass(value, Contract)):
        raise ValueError(f"{reference} is not a Contract")
    return value


def _eval_provider(spec: str) -> Any:
    """The provider a `--provider` spec names (imported only when asked for)."""
    kind, _, argument = spec.partition(":")
    if kind == "embedded":
        from sdk.providers.embedded import EmbeddedProvider

        return EmbeddedProvider(argument or None)
    if kind == "llamacpp":
        from sdk.providers.llamacpp import LlamaCppProvider

        return LlamaCppProvider(argument) if argument else LlamaCppProvider()
    if kind in ("anthropic", "openai") and argument:
        if kind == "anthropic":
            import anthropic

            from sdk.providers.anthropic import AnthropicProvider

            return AnthropicProvider(anthropic.Anthropic(), model=argument)
        import openai

        from sdk.providers.openai import OpenAIResponsesProvider

        return OpenAIResponsesProvider(openai.OpenAI(), model=argument)
    raise ValueError(
        f"--provider takes embedded[:MODEL.gguf], llamacpp[:URL], anthropic:MODEL or "
        f"openai:MODEL, not {spec!r}"
    )


# --- batch --------------------------------------------------------------------------------------

batch_app = typer.Typer(
    help="Run a contract over a large input (provider batch APIs or local servers); resumable.",
    no_args_is_help=True,
)
app.add_typer(batch_app, name="batch")

StateOption = Annotated[
    Path, typer.Option("--state", help="The job's state file (SQLite), as `run` made it.")
]
PollOption = Annotated[
    float,
    typer.Option("--poll-interval", min=0.0, help="Seconds between status checks (grows)."),
]


@batch_app.command("run")
def batch_run_command(
    contract_ref: Annotated[
        str, typer.Option("--contract", help="The contract, as MODULE:NAME (contracts:Decision).")
    ],
    provider: Annotated[
        str,
        typer.Option(
            "--provider",
            help="anthropic, openai (Responses), openai_chat; or llamacpp, vllm, ollama "
            "(local servers, with --base-url).",
        ),
    ],
    input_path: Annotated[
        Path, typer.Option("--input", help="JSONL: id, prompt/source/messages, options.")
    ],
    out: Annotated[Path, typer.Option("--out", help="JSONL results, one line per item.")],
    state: Annotated[
        Path | None, typer.Option("--state", help="State file (default: OUT.job.db).")
    ] = None,
    model: Annotated[str | None, typer.Option("--model")] = None,
    base_urls: Annotated[
        list[str] | None,
        typer.Option("--base-url", help="A local server; repeat for several."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Local: in flight per server.")
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option("--max-requests", min=1, help="Hosted: requests per batch.")
    ] = None,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="Invalid-output retries per item.")
    ] = 2,
    resubmits: Annotated[
        int, typer.Option("--resubmits", min=0, help="Resubmits of errored/expired items.")
    ] = 3,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1)] = 4096,
    poll_interval: PollOption = 10.0,
    as_json: JsonOption = False,
) -> None:
    """Start a job (or continue the same one, if its state file exists) and run it to the end.

    Exit code 0: every item done and valid; 1: done, some items failed (listed); 2: the job
    could not run; 130: interrupted (run `sdk batch resume` to go on).
    """
    from sdk.batch import BatchJob, JobSettings
    from sdk.batch._setup import BackendSpec, build_backend

    out_ = _Output()
    state_path = state if state is not None else out.with_name(out.name + ".job.db")
    with _errors_exit(out_), _batch_errors(out_):
        contract = _contract_named(contract_ref)
        spec = BackendSpec(
            provider,
            model=model,
            base_urls=list(base_urls or []),
            concurrency=concurrency,
            max_requests=max_requests,
            retries=retries,
        )
        job = BatchJob.create(
            state_path,
            contract=contract,
            backend=build_backend(spec),
            input=input_path,
            out=out,
            settings=JobSettings(retries=retries, resubmits=resubmits, max_tokens=max_tokens),
            poll_interval=poll_interval,
        )
        job.state.put("backend_spec", spec.to_json())
        out_.err.print(f"job state: {state_path}", style="dim")
    _run_batch(out_, job, as_json)


@batch_app.command("resume")
def batch_resume_command(
    state: StateOption, poll_interval: PollOption = 10.0, as_json: JsonOption = False
) -> None:
    """Go on with a job after a crash or an interruption: nothing lost, nothing sent twice."""
    out_ = _Output()
    with _errors_exit(out_), _batch_errors(out_):
        job = _open_job(state, poll_interval)
    _run_batch(out_, job, as_json)


@batch_app.command("status")
def batch_status_command(state: StateOption, as_json: JsonOption = False) -> None:
    """A job's counts by outcome, its tokens, and the items that failed (from the state file)."""
    from sdk.batch import job_summary

    out_ = _Output()
    with _errors_exit(out_), _batch_errors(out_):
        summary = job_summary(state)
    if as_json:
        out_.json(summary.to_json())
        return
    for line in summary.lines():
        out_.line(line)


@batch_app.command("cancel")
def batch_cancel_command(state: StateOption) -> None:
    """Cancel a job's open batches and send nothing more; `resume` then collects what finished
    and marks the rest cancelled."""
    out_ = _Output()
    with _errors_exit(out_), _batch_errors(out_):
        job = _open_job(state, 10.0)
        try:
            summary = job.cancel()
        finally:
            job.close()
    for line in summary.lines():
        out_.line(line)
    out_.line("cancel requested: run `sdk batch resume` to collect and close the job", "dim")


def _open_job(state: Path, poll_interval: float) -> Any:
    from sdk.batch import BatchError, BatchJob
    from sdk.batch._setup import build_backend, spec_from
    from sdk.batch._state import JobState

    if not state.is_file():
        raise BatchError(f"{state}: no such job state file")
    stored = JobState(state)
    try:
        contract_ref, spec = stored.get("contract"), stored.get("backend_spec")
    finally:
        stored.close()
    if spec is None:
        raise BatchError(f"{state} was not started by `sdk batch run`: resume it from Python")
    return BatchJob.open(
        state,
        contract=_contract_named(contract_ref),
        backend=build_backend(spec_from(spec)),
        poll_interval=poll_interval,
    )


@contextmanager
def _batch_errors(out: _Output) -> Iterator[None]:
    """A job's own errors (bad input, another job's state) -> a message and exit code 2."""
    from sdk.batch import BatchError

    try:
        yield
    except BatchError as error:
        out.error(" ".join(str(error).split()))
        raise typer.Exit(2) from error


def _run_batch(out: _Output, job: Any, as_json: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from sdk.batch import BatchError
    from sdk.errors import ProviderError

    try:
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            "{task.fields[detail]}",
            TimeRemainingColumn(),
            console=out.err,
        ) as bar:
            task = bar.add_task("batch", total=None, detail="indexing")

            def progress(state: Any) -> None:
                detail = f"ok {state.ok:,}  failed {state.failed:,}  in flight {state.in_flight:,}"
                bar.update(task, completed=state.done, total=state.total, detail=detail)

            summary = job.run(progress=progress)
    except KeyboardInterrupt:
        out.error("interrupted; run `sdk batch resume --state ...` to go on")
        raise typer.Exit(130) from None
    except BatchError as error:  # bad input, another job's files
        out.error(" ".join(str(error).split()))
        raise typer.Exit(2) from error
    except ProviderError as error:
        out.error(f"the provider failed: {error}; run `sdk batch resume` to go on")
        raise typer.Exit(1) from error
    finally:
        job.close()
    if as_json:
        out.json(summary.to_json())
    else:
        for line in summary.lines():
            out.line(line)
    if summary.failed or summary.cancelled:
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the `sdk` console script."""
    app()


if __name__ == "__main__":
    main()
