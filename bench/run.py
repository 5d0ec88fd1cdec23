"""The performance bench: one command, one table, every figure a ratio measured in this run.

    make bench                          # = .venv/bin/python bench/run.py --write
    .venv/bin/python bench/run.py       # print only
    .venv/bin/python bench/run.py --quick   # smaller streams, no instructor: a smoke run

Rows (issue 6):
  1. parse: the full `sdk.parse` pipeline against bare `Model.model_validate_json`.
  2. streaming: CPU time to read a 100 KB document in 16-character chunks, over one `sdk.parse`
     of it; ours (`PartialReader`), jiter re-parsing the growing buffer, instructor's `Partial`.
  3. fan-out through `AsyncStructuredClient` (TODO: needs the client).
  4. retry cost with a scripted provider (TODO: needs the client).
  5. schema compile: a contract seen for the first time, and again (cached).

Times are CPU times (`time.process_time`), the best of several runs: the machine is shared,
and the minimum is the figure least disturbed by other work. `--write` also records the table
and the machine in bench/RESULTS.md. Nothing here is a test: tests/ never time anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]

import jiter  # noqa: E402
from payloads import Payload, decision, invoice, long_string  # noqa: E402

import sdk  # noqa: E402
from contracts import Decision, InvoiceExtraction, ReviewFinding, Sentiment  # noqa: E402
from sdk.parsing import _compiled, compile_contract  # noqa: E402

INSTRUCTOR_VENV = BENCH / ".venv-instructor"
INSTRUCTOR_REQUIREMENTS = BENCH / "requirements-instructor.txt"
RESULTS = BENCH / "RESULTS.md"

STREAM_SIZE = 100_000
STREAM_CHUNK = 16
COARSE_CHUNK = 256


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    row: str
    measure: str
    figure: str
    detail: str = ""
    goal: str = ""
    met: str = ""


# --- Timing ---


def cpu_seconds(function: Callable[[], object], *, repeat: int = 5, budget: float = 0.04) -> float:
    """Best CPU seconds per call: `repeat` batches of about `budget` seconds each."""
    number = 1
    while True:
        elapsed = _batch(function, number)
        if elapsed >= budget or number >= 1 << 20:
            break
        number *= 2 if elapsed * 4 >= budget else 8
    best = elapsed / number
    for _ in range(repeat - 1):
        best = min(best, _batch(function, number) / number)
    return best


def _batch(function: Callable[[], object], number: int) -> float:
    started = time.process_time()
    for _ in range(number):
        function()
    return time.process_time() - started


def ratio(ours: float, base: float) -> str:
    value = ours / base
    return f"{value:.2f}x" if value < 10 else f"{value:,.0f}x"


def micros(seconds: float) -> str:
    value = seconds * 1e6
    return f"{value:,.1f} us" if value < 100 else f"{value:,.0f} us"


def millis(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def duration(seconds: float) -> str:
    return micros(seconds) if seconds < 1e-3 else millis(seconds)


def verdict(value: float, goal: float) -> str:
    return "yes" if value <= goal else "NO"


# --- Row 1: parse ---


def row_parse() -> list[Row]:
    rows = []
    cases: list[tuple[str, type[sdk.Contract], Payload, float | None]] = [
        ("0.5 KB Decision", Decision, decision(500), None),
        ("5 KB InvoiceExtraction", InvoiceExtraction, invoice(5_000), 3.0),
        ("50 KB InvoiceExtraction, list-heavy", InvoiceExtraction, invoice(50_000), None),
    ]
    for label, contract, payload, goal in cases:
        text, source = payload.text, payload.source
        sdk.parse(contract, text, stop_reason="end_turn", source=source)  # compiled, and valid

        def full(c: Any = contract, t: str = text, s: str | None = source) -> object:
            return sdk.parse(c, t, stop_reason="end_turn", source=s)

        def bare(c: Any = contract, t: str = text) -> object:
            return c.model_validate_json(t)

        ours, base = cpu_seconds(full), cpu_seconds(bare)
        rows.append(
            Row(
                "1",
                f"parse / bare model_validate_json, {label} ({payload.size})",
                ratio(ours, base),
                f"{micros(ours)} vs {micros(base)}",
                f"<= {goal:g}x" if goal else "",
                verdict(ours / base, goal) if goal else "",
            )
        )
    return rows


# --- Row 2: streaming ---


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_ours(contract: type[sdk.Contract], chunks: list[str], *, read_values: bool) -> None:
    """What `client.stream` does with the deltas (and, with `read_values`, its consumer)."""
    reader = sdk.PartialReader(contract)
    for chunk in chunks:
        partial = reader.feed(chunk)
        if read_values and partial is not None:
            _ = partial.value
    reader.finish()


def stream_jiter(chunks: list[str]) -> None:
    """The peers' way: parse the whole growing buffer again at every chunk."""
    buffer = ""
    for chunk in chunks:
        buffer += chunk
        jiter.from_json(buffer.encode(), partial_mode="trailing-strings")


def best_of(function: Callable[[], object], runs: int) -> float:
    return min(_batch(function, 1) for _ in range(runs))


def ours_time(
    contract: type[sdk.Contract], text: str, chunk: int, *, read_values: bool = False
) -> float:
    chunks = chunked(text, chunk)
    return best_of(lambda: stream_ours(contract, chunks, read_values=read_values), 5)


def jiter_time(text: str, chunk: int) -> float:
    chunks = chunked(text, chunk)
    return best_of(lambda: stream_jiter(chunks), 1)  # seconds per run: once is enough


def row_streaming(size: int, *, with_instructor: bool) -> list[Row]:
    rows = []
    documents = (
        ("InvoiceExtraction, list-heavy", InvoiceExtraction, invoice(size), True),
        ("Decision, one long string", Decision, long_string(size), False),
    )
    for label, contract, doc, with_peers in documents:
        parse = best_of(
            lambda c=contract, d=doc: sdk.parse(c, d.text, stop_reason="end_turn", source=d.source),
            9,
        )

        def row(measure: str, seconds: float, goal: float | None = None, p: float = parse) -> Row:
            met = verdict(seconds / p, goal) if goal else ""
            return Row("2", measure, ratio(seconds, p), f"{duration(seconds)} vs {duration(p)}",
                       f"<= {goal:g}x" if goal else "", met)  # fmt: skip

        count = len(chunked(doc.text, STREAM_CHUNK))
        ours = ours_time(contract, doc.text, STREAM_CHUNK)
        rows.append(row(f"stream / one parse: PartialReader, {doc.size} {label}, {count:,} "
                        f"chunks of {STREAM_CHUNK}", ours, 3.0))  # fmt: skip
        values = ours_time(contract, doc.text, STREAM_CHUNK, read_values=True)
        rows.append(row("  ... and reading `.value` of every snapshot", values))
        coarse = ours_time(contract, doc.text, COARSE_CHUNK)
        rows.append(row(f"  ... in chunks of {COARSE_CHUNK} (deltas coalesced)", coarse))
        if not with_peers:
            continue
        peer = jiter_time(doc.text, STREAM_CHUNK)
        rows.append(row(f"  peer: jiter {jiter.__version__} partial re-parse of the buffer", peer))
        # Linear or quadratic: the same kind of stream at half the size.
        half = invoice(size // 2).text
        ours_growth = ours / ours_time(contract, half, STREAM_CHUNK)
        peer_growth = peer / jiter_time(half, STREAM_CHUNK)
        rows.append(Row("2", "  time growth from half the size (2.0 = linear, 4.0 = quadratic)",
                        f"ours {ours_growth:.1f}", f"jiter {peer_growth:.1f}"))  # fmt: skip
        if with_instructor:
            rows.append(instructor_row(size))
    return rows


def instructor_row(size: int) -> Row:
    measure = "  peer: instructor Partial[Model].model_from_chunks (own venv)"
    python = _instructor_python()
    if isinstance(python, str):
        return Row("2", measure, "not measured", python)
    try:
        done = subprocess.run(
            [str(python), str(BENCH / "instructor_stream.py"), str(size), str(STREAM_CHUNK)],
            capture_output=True, text=True, timeout=900, check=True,
        )  # fmt: skip
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as error:
        return Row("2", measure, "not measured", f"the instructor run failed: {error}")
    stream, parse = result["stream_s"], result["parse_s"]
    final = "" if result["final_ok"] else "; its final value differed from the document!"
    return Row(
        "2",
        f"  peer: instructor {result['instructor']} Partial (own venv, jiter {result['jiter']})",
        ratio(stream, parse),
        f"{duration(stream)} vs {duration(parse)} (sdk.parse in its process){final}",
    )


def _instructor_python() -> Path | str:
    """The instructor venv's interpreter, created on first use; or why there is none."""
    python = INSTRUCTOR_VENV / "bin" / "python"
    if python.exists():
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    print(f"creating {INSTRUCTOR_VENV} for instructor ...", file=sys.stderr)
    try:
        subprocess.run([base, "-m", "venv", str(INSTRUCTOR_VENV)], check=True, timeout=300)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "-r", str(INSTRUCTOR_REQUIREMENTS),
             "-e", str(ROOT)],
            check=True, timeout=900, capture_output=True, text=True,
        )  # fmt: skip
    except subprocess.CalledProcessError as error:
        tail = (error.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return f"instructor could not be installed: {tail[0]}"
    except (OSError, subprocess.SubprocessError) as error:
        return f"instructor could not be installed: {error}"
    return python


# --- Rows 3 and 4: after the client exists ---


def row_fanout() -> list[Row]:
    """TODO(lead): 1,000 concurrent AsyncStructuredClient.generate calls through
    LlamaCppProvider against a local server answering after 100 ms, over bare httpx with a
    semaphore of 100; and the event loop's longest stall (goal <= 1.15x, < 5 ms)."""
    return [Row("3", "fan-out: 1,000 concurrent generate calls / bare httpx", "not yet measured",
                "needs AsyncStructuredClient and LlamaCppProvider", "<= 1.15x")]  # fmt: skip


def row_retry_cost() -> list[Row]:
    """TODO(lead): a scripted provider returning one invalid document, then a valid one, for a
    contract over a 20 KB source: input tokens of the retry request over the first's, ours and
    instructor's (goal <= 1.2x)."""
    return [Row("4", "retry cost: retry request input tokens / first request", "not yet measured",
                "needs the client's retry loop", "<= 1.2x")]  # fmt: skip


# --- Row 5: schema compile ---

CONTRACTS: tuple[type[sdk.Contract], ...] = (Decision, ReviewFinding, InvoiceExtraction, Sentiment)


def fresh_copy(contract: type[sdk.Contract]) -> type[sdk.Contract]:
    """The same contract as a new class: no cache anywhere has seen it."""
    namespace = {"__module__": contract.__module__, "__doc__": contract.__doc__}
    copy: type[sdk.Contract] = type(contract.__name__, (contract,), namespace)
    return copy


def _wire_dialects() -> tuple[Callable[[type[sdk.Contract], Any], object], list[Any]] | None:
    try:
        from sdk.schema import dialects
    except ImportError:
        return None
    return dialects.to_wire, list(dialects.DIALECTS.values())


def compile_all(contract: type[sdk.Contract], wire: Any) -> None:
    """Everything a first call needs: canonical schema, fingerprint, validators, dialects."""
    compile_contract(contract)
    contract.fingerprint()
    if wire is not None:
        to_wire, dialects = wire
        for dialect in dialects:
            to_wire(contract, dialect)


def row_compile() -> list[Row]:
    rows = []
    wire = _wire_dialects()
    what = "canonical schema + validators" + (
        f" + {len(wire[1])} wire dialects" if wire else " (sdk.schema.dialects absent)"
    )
    for contract in CONTRACTS:
        colds = []
        for _ in range(15):
            copy = fresh_copy(contract)
            started = time.process_time()
            compile_all(copy, wire)
            colds.append(time.process_time() - started)
        # The copy is the same contract (same schema), only new to every cache.
        assert copy.fingerprint() == contract.fingerprint() and copy is not contract
        cached = cpu_seconds(lambda c=copy: compile_all(c, wire))
        cold = statistics.median(colds)
        rows.append(
            Row("5", f"schema compile, {contract.__name__}: cold / cached",
                f"{cold / cached:,.0f}x", f"cold {micros(cold)}, cached {micros(cached)}; {what}")
        )  # fmt: skip
    rows.append(cache_hit_row())
    return rows


def cache_hit_row() -> Row:
    """Hit ratio of the compile cache over 1,000 parses of contracts it has never seen."""
    compiles = 0
    original = _compiled._compile

    def counting(contract: type[sdk.Contract]) -> _compiled.CompiledContract:
        nonlocal compiles
        compiles += 1
        return original(contract)

    copies = [fresh_copy(contract) for contract in (Decision, Sentiment)]
    texts = [
        decision(500).text,
        json.dumps({"reasoning": "calm", "sentiment": "neutral", "score": 0.5}),
    ]
    _compiled._compile = counting  # type: ignore[assignment]
    try:
        calls = 1_000
        for index in range(calls):
            sdk.parse(copies[index % 2], texts[index % 2], stop_reason="end_turn")
    finally:
        _compiled._compile = original  # type: ignore[assignment]
    hit = 1 - compiles / calls
    return Row("5", "compile cache hit ratio, 1,000 parses of 2 unseen contracts", f"{hit:.1%}",
               f"{compiles} compiles")  # fmt: skip


# --- Output ---

NOTES = """\
- "PartialReader" is `feed` on every chunk and `finish`: what `client.stream` does. Each
  snapshot it hands out is taken in O(1); its `.value` is built when first read.
- "reading `.value` of every snapshot" adds a consumer that builds every snapshot's value. Open
  containers and the open string are copied for each one (completed values are shared), so
  that consumer's own work grows with the square of the document: the total size of what it
  reads does.
- The reader's cost is a fixed part per chunk (about half a microsecond: a Python call, the
  state, a snapshot) plus a Python step per token (about as much again). With 16-character
  chunks the fixed part alone is about two parses of the list-heavy document, and many parses
  of a document that is one long string (`json.loads` of a string is little more than a copy).
  With deltas coalesced into 256 characters the list-heavy document is within the goal. The
  growth line shows the reader linear and the peers quadratic.
"""


def machine() -> list[str]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    import pydantic

    return [
        f"- CPU: {model}; nproc {os.cpu_count()}; load average at the end of the run {load}",
        f"- Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.release()}",
        f"- pydantic {pydantic.VERSION}, jiter {jiter.__version__}",
    ]


def table(rows: Iterable[Row]) -> list[str]:
    lines = ["| row | measure | figure | detail | goal | met |", "|---|---|---|---|---|---|"]
    for row in rows:
        cells = (row.row, row.measure, row.figure, row.detail, row.goal, row.met)
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="also write bench/RESULTS.md")
    parser.add_argument("--quick", action="store_true", help="small streams, no instructor")
    args = parser.parse_args()

    rows: list[Row] = []
    sections: list[tuple[str, Callable[[], list[Row]]]] = [
        ("parse", row_parse),
        ("streaming", lambda: row_streaming(
            10_000 if args.quick else STREAM_SIZE, with_instructor=not args.quick)),
        ("fan-out", row_fanout),
        ("retry cost", row_retry_cost),
        ("schema compile", row_compile),
    ]  # fmt: skip
    for name, section in sections:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        rows.extend(section())

    lines = table(rows)
    print("\n".join(lines))
    if args.write:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        RESULTS.write_text(
            "# Bench results\n\n"
            f"Written by `make bench` (`bench/run.py --write`) on {stamp}. Every figure is a "
            "ratio of two CPU times measured in the same run (best of several runs), so it "
            "carries across machines better than the times beside it.\n\n"
            "## Machine\n\n" + "\n".join(machine()) + "\n\n## Table\n\n" + "\n".join(lines)
            + "\n\n## Reading row 2\n\n" + NOTES
        )  # fmt: skip
        print(f"wrote {RESULTS.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
