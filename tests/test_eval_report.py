"""The eval's report: terminal tables, and an HTML file that renders offline and fetches nothing.

The HTML is checked twice: statically (no attribute or style that points anywhere), and, where
Chromium is installed (`/usr/bin/chromium`; Debian's `chromium` package), by rendering it in
headless Chromium with every network request routed to a local proxy that records the host of
each: the report must render its tables and charts and cause no request of its own. Chromium
itself calls home even with background networking off (network time, component updates,
sign-in), so the hosts it contacts for an empty page are subtracted: what is left came from the
page. A control page with one external image proves the proxy sees a page's request.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import pytest
from rich.console import Console

from sdk import StructuredClient
from sdk.eval import html_report
from sdk.eval import markdown_table
from sdk.eval import parse_dataset
from sdk.eval import run_eval
from sdk.eval import terminal_tables
from sdk.eval.report import accuracy_svg
from sdk.eval.report import verdict
from sdk.providers import TestProvider
from tests.local_deps import unavailable
from tests.test_eval import DATASET
from tests.test_eval import Ticket
from tests.test_eval import run

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)
# Chromium's own services, contacted whatever the page (their calls vary from run to run).
CHROMIUM_SERVICES = frozenset(
    {
        "accounts.google.com",
        "clients2.google.com",
        "clientservices.googleapis.com",
        "content-autofill.googleapis.com",
        "edgedl.me.gvt1.com",
        "optimizationguide-pa.googleapis.com",
        "redirector.gvt1.com",
        "safebrowsingohttpgateway.googleapis.com",
        "update.googleapis.com",
    }
)
HOSTILE = '<script>alert(1)</script><img src="https://tracker.example/x.png"> & "quotes"'

# Attributes through which an HTML document loads something.
_LOADING_ATTRIBUTES = {"src", "href", "srcset", "action", "formaction", "poster", "data",
                       "background", "xlink:href", "ping", "manifest", "cite"}  # fmt: skip


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in _LOADING_ATTRIBUTES:
                self.found.append(f"<{tag} {name}={value!r}>")
            if name == "style" and value and "url(" in value:
                self.found.append(f"<{tag} style={value!r}>")


def _report() -> str:
    result, _ = run()
    return html_report(result)


def _hostile_report() -> str:
    provider = TestProvider([HOSTILE], repeat=True)
    items = parse_dataset(DATASET[:2], Ticket)
    result = run_eval(
        items, Ticket, StructuredClient(provider, retries=0), arms=["constrained"], resamples=100
    )
    return html_report(result)


def test_the_report_references_nothing_external() -> None:
    document = _report()
    parser = _References()
    parser.feed(document)
    assert parser.found == []
    assert {"script", "link", "iframe", "object", "embed", "img"}.isdisjoint(parser.tags)
    assert "svg" in parser.tags and "table" in parser.tags
    for css in re.findall(r"<style>(.*?)</style>", document, flags=re.S):
        assert "url(" not in css and "@import" not in css and "@font-face" not in css
    assert "://" not in document  # no address of any kind
    assert "default-src 'none'" in document  # and a policy that would block one anyway


def test_hostile_model_output_is_escaped() -> None:
    document = _hostile_report()
    parser = _References()
    parser.feed(document)
    assert parser.found == []
    assert "script" not in parser.tags and "img" not in parser.tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in document


def test_the_report_has_every_section() -> None:
    document = _report()
    sections = ["arms", "pairs", "fields", "items"]
    charts = ["accuracy-chart", "abstention-chart", "difference-chart", "mass-chart"]
    for name in sections + charts:
        assert f'id="{name}"' in document
    assert document.count("<svg") == 4
    # constrained vs widened: +50% [+17%, +83%] but p = 0.25: the reading says both.
    disagreement = "the interval excludes 0 (widened ahead) but McNemar&#x27;s test is not"
    assert f"{disagreement} significant (p = 0.25)" in document


def test_the_accuracy_chart_is_a_standalone_svg_file() -> None:
    result, _ = run()
    svg = accuracy_svg(result)
    assert svg.count("xmlns=") == 1
    root = ElementTree.fromstring(svg)  # well-formed XML, as an .svg file must be
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert {"constrained", "unconstrained", "widened", "answer_first", "83%"} <= set(labels)
    parser = _References()
    parser.feed(svg)
    assert parser.found == []


def test_terminal_and_markdown_tables() -> None:
    result, _ = run()
    console = Console(record=True, width=200, color_system=None)
    for table in terminal_tables(result):
        console.print(table)
    text = console.export_text()
    assert "widened" in text and "83% [44%, 97%]" in text
    assert "no significant difference" in text
    markdown = markdown_table(result)
    assert markdown.splitlines()[0].startswith("| arm | valid | accuracy")
    assert "| constrained | widened | +50%" in markdown
    readings = {(pair.a, pair.b): verdict(pair) for pair in result.pairs}
    assert "the two tests disagree" in readings["constrained", "widened"]
    others = [text for key, text in readings.items() if key != ("constrained", "widened")]
    assert all(text.startswith("no significant") for text in others)


# --- a real browser ----------------------------------------------------------------------------


class _RecordingProxy:
    """A TCP listener on 127.0.0.1 posing as an HTTP proxy: records the host each request is
    for (`GET http://host/...` or `CONNECT host:443`), answers nothing."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.hosts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            connection.settimeout(2)
            try:
                line = connection.recv(4096).split(b"\r\n", 1)[0].decode("latin-1")
            except OSError:
                line = ""
            finally:
                connection.close()
            self.hosts.append(_host(line))

    def take(self) -> set[str]:
        """The hosts asked for since the last call."""
        taken, self.hosts = set(self.hosts), []
        return taken

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)  # bounded: its accept wakes every 0.2 s, a read in 2 s
        assert not self._thread.is_alive(), "the proxy's thread did not stop"
        self.socket.close()


def _host(request_line: str) -> str:
    parts = request_line.split()
    if len(parts) < 2:
        return f"(unreadable request {request_line!r})"
    target = parts[1]
    if parts[0] == "CONNECT":
        return target.rsplit(":", 1)[0]
    return re.sub(r"^[a-z]+://", "", target).split("/", 1)[0].split(":", 1)[0]


@pytest.fixture
def proxy() -> Iterator[_RecordingProxy]:
    recording = _RecordingProxy()
    yield recording
    recording.close()


def _render(page: Path, proxy: _RecordingProxy, profile: Path) -> str:
    assert CHROMIUM is not None
    completed = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--proxy-server=http://127.0.0.1:{proxy.port}",
            "--proxy-bypass-list=<-loopback>",
            "--virtual-time-budget=3000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed.stdout


def test_the_report_renders_in_chromium_without_a_request(
    tmp_path: Path, proxy: _RecordingProxy
) -> None:
    if CHROMIUM is None:
        unavailable("no Chromium (apt-get install chromium)")
    empty = tmp_path / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body><p>empty</p></body></html>", encoding="utf-8")
    _render(empty, proxy, tmp_path / "profile-empty")
    chromium_itself = proxy.take() | CHROMIUM_SERVICES

    page = tmp_path / "report.html"
    page.write_text(_report(), encoding="utf-8")
    dom = _render(page, proxy, tmp_path / "profile")
    assert '<table id="arms">' in dom
    assert 'id="accuracy-chart"' in dom and "<rect" in dom
    assert "widened" in dom
    assert proxy.take() - chromium_itself == set()

    # The control: a page with one external image does reach the proxy.
    control = tmp_path / "control.html"
    control.write_text(
        '<!DOCTYPE html><html><body><p id="x">control</p>'
        '<img src="http://eval-report-test.example/pixel.png"></body></html>',
        encoding="utf-8",
    )
    _render(control, proxy, tmp_path / "profile-control")
    assert "eval-report-test.example" in proxy.take() - chromium_itself


def test_the_cli_writes_results_and_report(tmp_path: Path) -> None:
    """`sdk eval` end to end needs a model; its argument errors do not."""
    from typer.testing import CliRunner

    from sdk.cli import app

    dataset = tmp_path / "tickets.jsonl"
    dataset.write_text("\n".join(DATASET) + "\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["eval", str(dataset), "--contract", "nowhere"])
    assert result.exit_code == 2 and "MODULE:NAME" in result.stderr
    result = runner.invoke(app, ["eval", str(dataset), "--contract", "contracts:Nope"])
    assert result.exit_code == 2
    result = runner.invoke(
        app, ["eval", str(dataset), "--contract", "contracts:Decision", "--provider", "carrier"]
    )
    assert result.exit_code == 2  # the dataset's labels are not Decision fields
    decisions = tmp_path / "decisions.jsonl"
    decisions.write_text(
        json.dumps({"id": "d", "document": "x", "expected": {"answer": "approve"}}) + "\n",
        encoding="utf-8",
    )
    result = runner.invoke(
        app, ["eval", str(decisions), "--contract", "contracts:Decision", "--provider", "carrier"]
    )
    assert result.exit_code == 2 and "--provider takes" in result.stderr


# --- readings and widths (issue 21) ---


@pytest.mark.parametrize(
    ("low", "high", "p_value", "reading"),
    [
        (0.15, 0.45, 0.01, "widened more accurate than constrained (p = 0.01)"),
        (-0.1, 0.45, 0.4, "no significant difference (p = 0.4)"),
        (0.02, 0.45, 0.22, "inconclusive: the interval excludes 0 (widened ahead) but McNemar's"),
        (-0.02, 0.45, 0.03, "inconclusive: McNemar's test is significant (p = 0.03) but the"),
    ],
)
def test_the_reading_never_contradicts_its_numbers(
    low: float, high: float, p_value: float, reading: str
) -> None:
    from sdk.eval import Interval
    from sdk.eval import McNemar
    from sdk.eval import Pair
    from sdk.eval import PairedDifference

    result = PairedDifference(20, Interval(0.2, low, high), McNemar(1, 5, p_value))
    text = verdict(Pair("constrained", "widened", result))
    assert text.startswith(reading)
    if (low > 0) != (p_value < 0.05):
        assert "disagree" in text and not text.startswith("no significant")


def _printed(console: Console) -> str:
    from sdk.eval import print_tables

    result, _ = run()
    print_tables(console, result)
    file = console.file
    return file.getvalue() if isinstance(file, io.StringIO) else console.export_text()


def test_tables_off_a_terminal_are_printed_whole_at_any_width() -> None:
    console = Console(file=io.StringIO(), width=80, force_terminal=False, color_system=None)
    text = _printed(console)
    lines = text.splitlines()
    for name in ("constrained", "unconstrained", "answer_first"):
        assert any(f"│ {name} " in line for line in lines), name
    assert "…" not in text  # nothing cut short
    reading = "the interval excludes 0 (widened ahead) but McNemar's test is not significant"
    assert any(reading in line for line in lines)  # not wrapped either
    assert max(len(line) for line in lines) > 80


def test_tables_on_a_narrow_terminal_fit_without_cutting_names() -> None:
    for width in (100, 60, 30):
        text = _printed(Console(record=True, width=width, force_terminal=True, color_system=None))
        assert max(len(line) for line in text.splitlines()) <= width, width
        assert "…" not in text, width
        for name in ("unconstrained", "answer_first"):
            assert name in text, (width, name)


def test_a_resumed_run_s_progress_bar_starts_where_it_is() -> None:
    import time

    from rich.progress import Progress

    from sdk.cli.eval import EvalProgress
    from sdk.eval import Outcome

    bar = Progress(console=Console(record=True, width=100, force_terminal=False))
    progress = EvalProgress(bar, "eval")
    time.sleep(0.3)  # loading the model, preparing the arms
    started = time.monotonic()
    progress(12, 20, None)  # 12 outcomes from the earlier run
    task = bar.tasks[0]
    assert task.completed == 12 and task.total == 20
    assert task.start_time is not None and task.start_time >= started  # this run's clock
    assert task.speed is None  # no rate from what earlier runs did
    outcome = Outcome(item="i1", arm="constrained", valid=True, fields={})
    for done in (13, 14):
        time.sleep(0.1)
        progress(done, 20, outcome)
    assert task.completed == 14 and task.finished is False
    assert task.elapsed is not None and task.elapsed < time.monotonic() - started + 0.05


def test_sdk_eval_prints_whole_tables_off_a_terminal_and_resumes(tmp_path: Path) -> None:
    """`sdk eval` against a llama.cpp server (bench/fanout_server.py in its own process: every
    answer is the same valid Decision), its output captured as a log would capture it."""
    from typer.testing import CliRunner

    from sdk.cli import app
    from tests.batch_support import completions
    from tests.batch_support import fanout

    dataset = Path(__file__).resolve().parents[1] / "examples" / "data" / "eval" / "decisions.jsonl"
    with fanout(0.0) as url:
        arguments = [
            "eval", str(dataset), "--contract", "contracts:Decision", "--provider",
            f"llamacpp:{url}", "--arms", "constrained,unconstrained,widened,answer_first",
            "--out", str(tmp_path), "--limit",
        ]  # fmt: skip
        first = CliRunner().invoke(app, [*arguments, "3"])
        assert first.exit_code == 0, first.output
        asked = completions(url)
        again = CliRunner().invoke(app, [*arguments, "4"])
        assert again.exit_code == 0, again.output
        assert completions(url) - asked == asked / 3  # only the new item ran
    lines = again.stdout.splitlines()
    assert max(len(line) for line in lines) > 80  # wider than the default console
    for arm in ("constrained", "widened", "answer_first"):
        assert any(line.startswith(f"│ {arm} ") for line in lines), arm
    assert any("│ unconstrained │ provider 'llamacpp' has no unconstrained mode" in line
               for line in lines)  # fmt: skip
    assert "…" not in again.stdout
    assert "12/12" in again.stderr
