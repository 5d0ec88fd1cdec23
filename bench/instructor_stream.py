"""Row 2, instructor's side: its `Partial` streaming path, run inside bench/.venv-instructor.

instructor cannot share the project's virtual environment (it pins jiter and openai below what
the project uses), so `bench/run.py` runs this script with that environment's interpreter and
reads one JSON line from its output. Both figures come from this process: instructor's total
CPU time over the stream, and one `sdk.parse` of the whole document, so their ratio compares
like with like. No network: the chunks come from a local list.

Usage: python bench/instructor_stream.py SIZE CHUNK
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import instructor  # noqa: E402
from payloads import invoice  # noqa: E402

import sdk  # noqa: E402
from contracts import InvoiceExtraction  # noqa: E402


def main() -> None:
    size, chunk = int(sys.argv[1]), int(sys.argv[2])
    payload = invoice(size)
    chunks = [payload.text[i : i + chunk] for i in range(0, len(payload.text), chunk)]

    parse_best = float("inf")
    for _ in range(5):
        started = time.process_time()
        sdk.parse(InvoiceExtraction, payload.text, stop_reason="end_turn", source=payload.source)
        parse_best = min(parse_best, time.process_time() - started)

    # The path instructor's streaming clients take for `response_model=Partial[Model]`.
    partial_model = instructor.Partial[InvoiceExtraction]
    started = time.process_time()
    snapshots: list[object] = list(partial_model.model_from_chunks(iter(chunks)))
    stream = time.process_time() - started

    print(
        json.dumps(
            {
                "instructor": version("instructor"),
                "jiter": version("jiter"),
                "parse_s": parse_best,
                "stream_s": stream,
                "snapshots": len(snapshots),
                "final_ok": isinstance(snapshots[-1], InvoiceExtraction)
                and snapshots[-1].model_dump(mode="json") == json.loads(payload.text),
            }
        )
    )


if __name__ == "__main__":
    main()
