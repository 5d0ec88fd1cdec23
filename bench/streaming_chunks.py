"""Bench row 29: streaming a document over one parse of it, at each chunk size a provider sends.

    .venv/bin/python bench/run.py --only streaming-chunks

The document is row 2's list-heavy `InvoiceExtraction` (100 KB): `PartialReader.feed` on every
chunk and `finish`, as `client.stream` does, over one `sdk.parse` of the final text, at 16-, 64-
and 256-character chunks; and at 16 characters the same stream at half the size, to show the
cost grows linearly with the document (2.0) and not with its square (4.0). Last, for what a
user pays: the whole `client.stream` call at 16 characters (a `TestProvider` sends the same
text; the driver, the runaway watch, the document's view and the final parse included).
Each line says which build of the reader it timed: `make bench` compiles it with mypyc
(`sdk.parsing._reader_build`), as a development install does; a wheel runs the source.
"""

from __future__ import annotations

from payloads import invoice
from registry import Line
from registry import Measured
from registry import Settings
from registry import row
from rows import STREAM_SIZE
from rows import best_of
from rows import chunked
from rows import ours_time
from units import duration
from units import ratio
from units import verdict

from contracts import InvoiceExtraction
from sdk import StructuredClient
from sdk import parse
from sdk.parsing import _reader_build
from sdk.providers.test import TestProvider

__all__ = ["CHUNK_SIZES", "streaming_chunks_row"]

CHUNK_SIZES = (16, 64, 256)
GOAL = 3.0
LINEAR = 2.5  # time growth from half the size: 2.0 is linear, 4.0 quadratic


@row("streaming-chunks", number="29", title="streaming per chunk size",
     measures="reading a 100 KB list-heavy document with `PartialReader` (as `client.stream` "
              "does) in chunks of 16, 64 and 256 characters, each over one `sdk.parse` of it; "
              "the growth from half the size; the whole `client.stream` call at 16",
     unit="ratio of CPU times (least of several runs)")  # fmt: skip
def streaming_chunks_row(settings: Settings) -> Measured:
    size = 10_000 if settings.quick else STREAM_SIZE
    document = invoice(size)
    runs = 3 if settings.quick else 9
    one_parse = best_of(
        lambda: parse(
            InvoiceExtraction, document.text, stop_reason="end_turn", source=document.source
        ),
        runs,
    )
    # Which build of the reader was timed: `make` compiles it (scripts/compile_reader.py).
    compiled = _reader_build.compiled_reader_loaded()
    build = "compiled reader (mypyc)" if compiled else "reader run from source"
    lines = []
    for chunk in CHUNK_SIZES:
        streamed = ours_time(InvoiceExtraction, document.text, chunk)
        count = len(chunked(document.text, chunk))
        lines.append(
            Line(
                f"stream / one parse, {document.size}, {count:,} chunks of {chunk}",
                ratio(streamed, one_parse),
                f"{duration(streamed)} vs {duration(one_parse)}; {build}",
                f"<= {GOAL:g}x",
                verdict(streamed / one_parse, GOAL),
                key=f"stream-chunks-{chunk}",
            )
        )
    smallest = CHUNK_SIZES[0]
    whole = ours_time(InvoiceExtraction, document.text, smallest)
    half = ours_time(InvoiceExtraction, invoice(size // 2).text, smallest)
    lines.append(
        Line(
            f"  time growth from half the size, chunks of {smallest} (2.0 = linear, 4.0 = "
            "quadratic)",
            f"{whole / half:.2f}",
            f"{duration(whole)} vs {duration(half)}",
            f"<= {LINEAR:g}",
            verdict(whole / half, LINEAR),
            key="stream-chunks-growth",
        )
    )
    whole_call = _client_stream_time(document.text, document.source, smallest, runs)
    lines.append(
        Line(
            f"  the whole `client.stream` call / one parse, chunks of {smallest} (driver, "
            "runaway watch, view, final parse)",
            ratio(whole_call, one_parse),
            f"{duration(whole_call)} vs {duration(one_parse)}",
            key="stream-chunks-client",
        )
    )
    met = [chunk for chunk, line in zip(CHUNK_SIZES, lines, strict=False) if line.met == "yes"]
    return Measured(lines, notes=_notes(met))


def _client_stream_time(text: str, source: str | None, chunk: int, runs: int) -> float:
    """CPU time of one `client.stream` call whose provider streams `text` in `chunk`s."""
    client = StructuredClient(TestProvider([text], repeat=True, chunk_size=chunk))

    def call() -> None:
        for _ in client.stream(InvoiceExtraction, prompt="the invoice", source=source):
            pass

    return best_of(call, runs)


def _notes(met: list[int]) -> str:
    within = ", ".join(str(chunk) for chunk in met) or "none"
    return f"""\
- The same reader and document as row 2, at each chunk size: the cost is a fixed part per chunk
  (a call to `feed`, a snapshot) plus the reader's steps: one regular expression reads as far as
  its state goes (a whole member, `, "name": 12`), so a chunk costs the step that resumes what
  the last one cut and one per member it holds; it falls as chunks grow. Chunk sizes within
  the goal of {GOAL:g}x: {within}.
- The growth line streams the document at half the size in chunks of {CHUNK_SIZES[0]}: the
  reader never reads a character twice (but a cut escape), so the time grows with the size.
- The last line is the whole call, for what a user pays (no goal: the rows above are the
  reader's). Its runaway watch reads a bounded tail per piece, `str.find` first.
"""
