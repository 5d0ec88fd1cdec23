"""What every command group of the `sdk` command shares: the app, output, and error exits."""

from __future__ import annotations

import errno
import inspect
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Annotated
from typing import Any
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from sdk._terminal import visible
from sdk._terminal import visible_json

if TYPE_CHECKING:
    from sdk.cache import SQLiteCache
    from sdk.prompt import Prompt

__all__ = [
    "CacheOption",
    "CachePathOption",
    "ContractOption",
    "DirOption",
    "JsonOption",
    "Output",
    "PromptOption",
    "Target",
    "app",
    "cache_named",
    "command_group",
    "errors_exit",
    "os_error_exit",
    "prompt_named",
    "reflowed",
]


def reflowed(text: str | None) -> str | None:
    """Help text with each paragraph on one line, for the terminal to wrap at its own width.

    A docstring's line breaks are the source file's width: kept, they break a help panel in
    mid-sentence. Paragraphs (blank lines) stay, and so does a paragraph that starts with
    click's no-rewrap mark `\\b`; what follows a `\\f` is not help at all.
    """
    if not text:
        return text
    paragraphs = inspect.cleandoc(text.partition("\f")[0]).split("\n\n")
    return "\n\n".join(
        paragraph if paragraph.startswith("\b") else " ".join(paragraph.split())
        for paragraph in paragraphs
        if paragraph.strip()
    )


class _ReflowedGroup(TyperGroup):
    """A command group whose own help, its commands' and their parameters' are `reflowed`
    (typer's rich help keeps a docstring's line breaks)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.help = reflowed(self.help)
        for command in self.commands.values():
            command.help = reflowed(command.help)
            command.short_help = reflowed(command.short_help)
            for parameter in command.params:
                if isinstance(getattr(parameter, "help", None), str):
                    parameter.help = reflowed(parameter.help)  # type: ignore[attr-defined]
                _refuse_an_empty_path(parameter)
            if not isinstance(command, _ReflowedGroup):
                _parsing_in_last_resort(command)

    # Every command runs inside a group's `invoke` (and `sdk --help` in the top group's
    # `parse_args`): what no command turned into an exit code is turned into one here. A
    # command's own arguments are parsed inside it too, where a usage error's command is known.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with _last_resort(ctx):
            return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        with _last_resort():
            return super().invoke(ctx)


class BadArgument(ValueError):
    """An argument no command can take (an empty path): one line and exit 2, never a usage
    panel or a traceback."""


def _refuse_an_empty_path(parameter: Any) -> None:
    """Make an empty path (`--out ''`) a `BadArgument`: the parser reads it as `.`, the current
    folder, which no path option means."""
    annotation = getattr(getattr(parameter, "type_descriptor", None), "annotation", None)
    if not (annotation is Path or Path in getattr(annotation, "__args__", ())):
        return
    process_value = parameter.process_value
    name = (parameter.opts or [parameter.name])[0]

    def refusing(ctx: Any, value: Any) -> Any:
        values = value if isinstance(value, list | tuple) else [value]
        if any(each == "" for each in values):
            raise BadArgument(f"{name} is an empty path: give a file or folder")
        return process_value(ctx, value)

    parameter.process_value = refusing


def _parsing_in_last_resort(command: Any) -> None:
    """Parse `command`'s arguments inside `_last_resort`, which knows the command then: click's
    parser gives some usage errors (`--path` without its value) no context to name it by."""
    parse_args = command.parse_args

    def parsing(ctx: Any, args: list[str]) -> list[str]:
        with _last_resort(ctx):
            return parse_args(ctx, args)  # type: ignore[no-any-return]

    command.parse_args = parsing


@contextmanager
def _last_resort(ctx: Any = None) -> Iterator[None]:
    """The errors no command handles, as one line and an exit code, never a traceback: Ctrl-C
    (130), a model file that does not load (a bad argument: 2), a usage error (an unknown
    option, a missing argument, a bad value: 2), an output that cannot be written or a file
    error (2), help whose reader went away (`sdk --help | head`: 2, no line)."""
    try:
        yield
    except KeyboardInterrupt:
        Output().error("interrupted")
        raise typer.Exit(130) from None
    except OSError as error:
        os_error_exit(Output(), error)
    except BadArgument as error:
        Output().error(str(error))
        raise typer.Exit(2) from error
    except _CLICK_ERROR as error:
        if type(error).__name__ == "NoArgsIsHelpError":
            raise  # `sdk batch` alone: its help is printed already, and typer exits 2
        # click's message on one line, in place of typer's usage lines and boxed panel.
        usage = isinstance(error, _USAGE_ERROR)
        Output().error(_one_line(error, (error.ctx or ctx) if usage else None))
        raise typer.Exit(error.exit_code) from error
    except SystemExit as exit:
        # typer prints help through a rich console of its own, which exits 1 when the reader
        # has gone away (`sdk --help | head`): the exit of any other broken pipe.
        if not isinstance(exit.__context__, BrokenPipeError):
            raise
        os_error_exit(Output(), exit.__context__)
    except Exception as error:
        # Only a provider that loaded the engine module can have raised its error.
        engine = sys.modules.get("sdk.providers.embedded._engine")
        if engine is None or not isinstance(error, engine.ModelNotLoaded):
            raise
        Output().error(" ".join(str(error).split()))
        raise typer.Exit(2) from error


# click's errors (a usage error, a file click could not open) and its usage errors: typer's own
# copy of click's since typer 0.26, click's before; `typer.BadParameter` derives from both.
_CLICK_ERROR: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_USAGE_ERROR: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _one_line(error: Any, ctx: Any) -> str:
    """A click error as one line: click's message and, for a usage error (`ctx`: its command),
    the command and where its help is (`sdk batch run: No such option: --nope; see 'sdk batch
    run --help'`)."""
    message = " ".join(error.format_message().split())
    if ctx is None:
        return message
    line = f"{ctx.command_path}: {message}"
    if ctx.command.get_help_option(ctx) is not None:
        line = f"{line.rstrip('.')}; see '{ctx.command_path} {ctx.help_option_names[0]}'"
    return line


_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG})


def os_error_exit(out: Output, error: OSError) -> NoReturn:
    """Exit 2 on an `OSError`: one line, or none when stdout's reader went away (`| head`).

    A write to stdout that failed leaves its text in the buffer, where the interpreter's last
    flush would fail again (an "Exception ignored" message): stdout is pointed at the null
    device once what it holds cannot be written.
    """
    unwritable = error.errno == errno.EPIPE
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        unwritable = True
    if unwritable:
        # No file descriptor (a test runner's stdout): nothing flushes at exit.
        with suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if error.errno != errno.EPIPE:
        # A failed write names no file (an open does): the output could not be written.
        written = unwritable or (error.filename is None and error.errno in _WRITE_ERRORS)
        where = "cannot write the output: " if written else ""
        out.error(where + " ".join(str(error).split()))
    raise typer.Exit(2) from error


app = typer.Typer(
    name="sdk",
    help=(
        "structured-sdk: typed structured output from LLMs. Version and lint contract schemas "
        "(schema), test grammars (grammar), measure a contract on a model (eval), run it over a "
        "large input (batch), look into the response cache (cache), list the provider families "
        "(providers), see it work offline (demo), or serve the bundled model to try the "
        "llama.cpp provider (serve)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_ReflowedGroup,
)


def command_group(name: str, help: str, short_help: str | None = None) -> typer.Typer:
    """A group of subcommands (`sdk NAME ...`), added to `app`: `help` on its own page,
    `short_help` in `sdk --help` (the first sentence of `help` when not given)."""
    group = typer.Typer(help=help, no_args_is_help=True, cls=_ReflowedGroup)
    app.add_typer(group, name=name, short_help=short_help)
    return group


Target = Annotated[
    str,
    typer.Argument(
        metavar="MODULE_OR_PACKAGE",
        help="A module name (contracts, myapp.models), or a package folder or .py file by its "
        "path, from any folder.",
    ),
]
ContractOption = Annotated[
    str,
    typer.Option(
        "--contract",
        help="The contract, as MODULE:NAME (contracts:Decision), the module by name or by path "
        "(../service/contracts:Decision).",
    ),
]
DirOption = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help="Folder of the lock file and snapshots (default: schemas/ beside the package).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for other tools.")]
# The response cache, for the commands that make calls (eval, batch): what `cache=` takes.
CacheOption = Annotated[
    bool,
    typer.Option(
        "--cache",
        help="Keep valid replies in the response cache (the default file `sdk cache stats` "
        "reads); a repeated or interrupted run makes no call for what it already answered.",
    ),
]
CachePathOption = Annotated[
    Path | None,
    typer.Option("--cache-path", help="The response cache's file (implies --cache)."),
]


class _Console(Console):
    """rich's console, whose reader going away (`| head`) exits 2 as any output that cannot be
    written (rich's own exit is 1, the code of a problem found)."""

    def on_broken_pipe(self) -> None:
        try:
            super().on_broken_pipe()
        except SystemExit:
            raise SystemExit(2) from None


class Output:
    """Lines to stdout (results) and stderr (errors); styled only on a terminal."""

    def __init__(self) -> None:
        # soft_wrap: never break long pointers or paths at the console width. emoji=False: a
        # position such as `items.jsonl:100:` is text, not rich's `:100:` emoji code.
        self.out = _Console(soft_wrap=True, highlight=False, emoji=False)
        self.err = _Console(stderr=True, soft_wrap=True, highlight=False, emoji=False)

    # Every line goes out with its control characters escaped (`sdk._terminal.visible`: an
    # item's id or a provider's message can hold ESC sequences); newlines and tabs a message
    # holds on purpose stay (text that must be one line is escaped whole where it is made, as
    # `JobSummary.lines` does).

    def line(self, text: str = "", style: str | None = None) -> None:
        shown = escape(visible(text, lines=True))
        self.out.print(f"[{style}]{shown}[/]" if style else shown)

    def parts(self, *pieces: tuple[str, str | None]) -> None:
        """One line made of differently styled pieces."""
        shown = [(escape(visible(t, lines=True)), s) for t, s in pieces]
        self.out.print("".join(f"[{s}]{t}[/]" if s else t for t, s in shown))

    def error(self, text: str) -> None:
        self.err.print(f"[bold red]error:[/] {escape(visible(text, lines=True))}")

    def note(self, text: str, style: str | None = None) -> None:
        """A line to stderr beside the results (what a command is doing: a job's state file,
        its progress)."""
        shown = escape(visible(text, lines=True))
        self.err.print(f"[{style}]{shown}[/]" if style else shown)

    def json(self, data: Any) -> None:
        # Plain print, not rich: JSON must come out byte for byte (DEL, C1 and bidirectional
        # controls as `\u` escapes: the same data, and nothing a terminal acts on).
        self.out.file.write(visible_json(json.dumps(data, indent=2, ensure_ascii=False)) + "\n")


@contextmanager
def errors_exit(out: Output) -> Iterator[None]:
    """Turn the errors a user can cause (bad names, bad files) into a message and exit code 2."""
    try:
        yield
    except OSError as error:
        os_error_exit(out, error)
    except (ImportError, ValueError) as error:
        out.error(" ".join(str(error).split()))  # one line, whatever the message held
        raise typer.Exit(2) from error


def cache_named(enabled: bool, path: Path | None) -> SQLiteCache | None:
    """The response cache `--cache` and `--cache-path` name (`None`: no cache); a file that is
    not a cache is a `ValueError` (`errors_exit` turns it into exit code 2)."""
    if path is None and not enabled:
        return None
    from sdk.cache import SQLiteCache

    return SQLiteCache(path) if path is not None else SQLiteCache()


PromptOption = Annotated[
    str | None,
    typer.Option(
        "--prompt",
        help="A prompt template (sdk.Prompt) as MODULE:NAME: the input's items give its "
        "`variables`, and every result names it.",
    ),
]


def prompt_named(reference: str) -> type[Prompt]:
    """The prompt template `MODULE:NAME` names (a `ValueError` saying why not)."""
    from sdk.prompt import Prompt
    from sdk.workflow.versioning import import_target

    module_name, _, name = reference.partition(":")
    if not module_name or not name:
        raise ValueError(f"--prompt takes MODULE:NAME (prompts:Triage), not {reference!r}")
    value = getattr(import_target(module_name), name, None)
    if not (isinstance(value, type) and issubclass(value, Prompt) and hasattr(value, "_info")):
        raise ValueError(f"{reference} is not a prompt template (an sdk.Prompt with a template)")
    return value
