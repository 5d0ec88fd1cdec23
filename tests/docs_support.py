"""The documentation's code blocks, read from `docs/`, and the hidden setups some of them name.

The convention (`docs/architecture.md` says it for contributors):

- A ```` ```python ```` block runs. The blocks of one page run in order in one namespace, the way
  a reader types them into one interpreter, in a scratch folder holding a copy of `contracts/`
  and `examples/`.
- A ```` ```console ```` block runs too: each `$ command` line in a shell (the virtualenv's
  `sdk` first on `PATH`), in the same folder. The lines after a command are what it prints
  (stdout and stderr, as a terminal shows them), and a line `[exit N]` is the exit status it
  must end with (otherwise 0). A `# ` line is a comment.
- A ```` ```text ```` block right after a comment `<!-- docs-test: output -->` is the output of
  the Python block before it.
- Shown output is what the example prints, line for line (`output_mismatch`): a line `...`
  stands for any number of lines left out, and `...` inside a line for a figure that varies (a
  time, a temporary path, a count the model decides). Trailing spaces and blank lines around the
  whole output do not count; everything else does.
- Any other block, or one that must not run, says why on the page itself: its title
  (```` ```console title="Not run: ..." ````) begins with "Not run:", and the test refuses a
  block that neither runs nor says why.
- `<!-- docs-test: setup=NAME -->` before a block runs the setup `NAME` (in `SETUPS` below)
  first: the hidden part of an example, such as pointing `anthropic.Anthropic()` at a stand-in of
  the API through its own environment variables. `<!-- docs-test: local -->` marks a block that
  needs the local extra (the embedded model, llama-server): its page's test is marked `local`.
"""

from __future__ import annotations

import difflib
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.local_support import LocalServer
from tests.wire_support import ANTHROPIC_KEY
from tests.wire_support import GEMINI_KEY
from tests.wire_support import OPENAI_KEY
from tests.wire_support import anthropic_reply
from tests.wire_support import gemini_reply
from tests.wire_support import responses_reply

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

RUNS = ("python", "console")
NOT_RUN = "Not run:"

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:(?P<words>.*?)-->\s*$")
_TITLE = re.compile(r'title="(?P<title>[^"]*)"')


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    """The line of the block's first code line (1-based), for tracebacks."""
    language: str
    title: str
    code: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUNS and not self.title.startswith(NOT_RUN)

    @property
    def is_output(self) -> bool:
        return "output" in self.directives

    @property
    def local(self) -> bool:
        return "local" in self.directives or self.directives.get("setup") in LOCAL_SETUPS


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, with the directive comment just above each, if any."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        info = opening["info"].strip()
        end = index + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        body = [line[indent:] for line in lines[index + 1 : end]]
        title = _TITLE.search(info)
        found.append(
            Block(
                page=page,
                line=index + 2,
                language=info.split()[0] if info else "",
                title=title["title"] if title else "",
                code="\n".join(body) + "\n",
                directives=_directives(lines, index),
            )
        )
        index = end + 1
    return found


def _directives(lines: list[str], fence_index: int) -> dict[str, str]:
    before = fence_index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    match = _DIRECTIVE.match(lines[before]) if before >= 0 else None
    if match is None:
        return {}
    words = match["words"].split()
    return dict(word.partition("=")[::2] for word in words)


# --- checking what a block printed ----------------------------------------------------------------


ELLIPSIS = "..."


def output_mismatch(shown: str, printed: str) -> str | None:
    """Why `printed` is not the output `shown` on a page, or `None` when it is.

    Line for line, exactly, but for: trailing spaces; blank lines before and after the whole
    output; a line `...`, which stands for any number of lines (none too); and `...` inside a
    line, which stands for any text within it (a figure that varies).
    """
    want, got = _lines(shown), _lines(printed)
    text = "".join(f"{line}\n" for line in got)
    if _pattern(want).fullmatch(text):
        return None
    # The first shown line from which no prefix of the output matches any more.
    failed = next(
        (
            index
            for index in range(len(want))
            if not _pattern(want[: index + 1], prefix=True).match(text)
        ),
        len(want),
    )
    where = (
        f"shown line {failed + 1}, {want[failed]!r}, is not what it printed"
        if failed < len(want)
        else "it printed more than is shown"
    )
    diff = "\n".join(difflib.unified_diff(want, got, "shown", "printed", lineterm=""))
    return f"{where}:\n{diff}"


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _pattern(want: list[str], *, prefix: bool = False) -> re.Pattern[str]:
    """One regular expression for the shown lines (`prefix`: ending anywhere after them)."""
    parts = []
    for line in want:
        if line.strip() == ELLIPSIS:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            pieces = (re.escape(piece) for piece in line.split(ELLIPSIS))
            parts.append(r"[^\n]*?".join(pieces) + r"\n")
    return re.compile("".join(parts) + (r"[\s\S]*" if prefix else ""))


@dataclass
class Command:
    """One `$ command` of a console block, the output shown under it, and its exit status."""

    text: str
    shown: str
    status: int


def commands(block: Block) -> list[Command]:
    found: list[Command] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            found.append(Command(line[2:].strip(), "", 0))
        elif not found or line.startswith("# "):
            continue
        elif (status := re.fullmatch(r"\[exit (\d+)\]", line.strip())) is not None:
            found[-1].status = int(status[1])
        else:
            found[-1].shown += line + "\n"
    return found


# --- the scratch folder ---------------------------------------------------------------------------


def scratch(folder: Path) -> Path:
    """A folder with copies of `contracts/` and `examples/`, where a page's blocks run."""
    for name in ("contracts", "examples"):
        shutil.copytree(REPO / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


# --- hidden setups --------------------------------------------------------------------------------


@dataclass
class SetupContext:
    """What a setup may use: the page's namespace, pytest's monkeypatch and fixtures."""

    namespace: dict[str, Any]
    monkeypatch: pytest.MonkeyPatch
    request: pytest.FixtureRequest


class HostedStandIn(LocalServer):
    """The local test server, also answering the hosted APIs' routes (Anthropic Messages,
    OpenAI Responses and Chat Completions, Gemini `generateContent`) with their realistic wire
    bodies (`tests/fixtures`), the scripted document as the text."""

    def __init__(self) -> None:
        super().__init__()
        self.app.router.routes.extend(
            [
                Route("/v1/messages", self._anthropic, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/models/{target}", self._gemini, methods=["POST"]),
                Route("/v1beta/models/{target}", self._gemini, methods=["POST"]),
            ]
        )

    async def _anthropic(self, request: Request) -> Response:
        body, reply = await self._take(request)
        return _response(anthropic_reply(text=reply.text, model=body["model"]))

    async def _responses(self, request: Request) -> Response:
        body, reply = await self._take(request)
        return _response(responses_reply(text=reply.text, model=body["model"]))

    async def _gemini(self, request: Request) -> Response:
        _, reply = await self._take(request)
        return _response(gemini_reply(text=reply.text))


def _response(reply: Any) -> Response:
    headers = {k: v for k, v in reply.headers.items() if k.lower() != "content-length"}
    return Response(reply.content, status_code=reply.status_code, headers=headers)


def hosted(context: SetupContext) -> None:
    """`anthropic.Anthropic()`, `openai.OpenAI()` and `genai.Client()` as a reader writes them,
    answered by a stand-in of each API on 127.0.0.1 (set through the clients' own environment
    variables for the key and the base URL)."""
    server = HostedStandIn()
    server.start()
    context.request.addfinalizer(server.stop)
    environment = {
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "ANTHROPIC_BASE_URL": server.url,
        "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": f"{server.url}/v1",
        "GEMINI_API_KEY": GEMINI_KEY,
        "GOOGLE_GEMINI_BASE_URL": server.url,
    }
    for name, value in environment.items():
        context.monkeypatch.setenv(name, value)
    context.monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    context.namespace["_stand_in"] = server


def local_server(context: SetupContext) -> None:
    """A local OpenAI-compatible, llama.cpp and Ollama server stand-in at `$LLAMA_SERVER_URL`,
    `$VLLM_URL` and `$OLLAMA_URL` (the examples read them, defaulting to the usual ports)."""
    server = LocalServer()
    server.start()
    context.request.addfinalizer(server.stop)
    for name in ("LLAMA_SERVER_URL", "VLLM_URL", "OLLAMA_URL"):
        context.monkeypatch.setenv(name, server.url)


def llama_server(context: SetupContext) -> None:
    """A real llama-server on the bundled model (the session's `llama_server` fixture) at
    `$LLAMA_SERVER_URL`."""
    context.monkeypatch.setenv("LLAMA_SERVER_URL", context.request.getfixturevalue("llama_server"))


SETUPS: dict[str, Callable[[SetupContext], None]] = {
    "hosted": hosted,
    "local_server": local_server,
    "llama_server": llama_server,
}
LOCAL_SETUPS = frozenset({"llama_server"})
