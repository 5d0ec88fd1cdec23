"""Running a contract over an archive: a resumable batch job on Anthropic's Message Batches API.

    python examples/batch_archive.py

Writes a small archive of refund requests (one JSON line each), runs `Decision` over it as a
batch job, prints the summary, then runs the job again: the state file says every item is done,
so nothing is sent twice. Results are one JSON line per item, in a temporary folder.

With `ANTHROPIC_API_KEY` set this uses the real Message Batches API (half the price of live
calls; a batch can take up to 24 hours). Without it, an offline stand-in of the batch endpoints
answers at once (a mock transport: the client, the requests, the parsing and the job's state
are all real). The stand-in answers one request with a confidence of "certain", which is not a
wire name of `Confidence`: the job sends that item again in a follow-up batch, with the same
feedback a live call would give, and the second answer passes.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx2

from contracts import Decision
from sdk.batch import AnthropicBatches
from sdk.batch import BatchJob
from sdk.batch import JobSettings
from sdk.providers import AnthropicProvider

MODEL = "claude-sonnet-4-6"
REQUESTS = [
    ("r-4471", "Kettle delivered 2026-03-05, refund asked 2026-03-17: stopped heating."),
    ("r-4472", "Blender delivered 2026-01-02, refund asked 2026-03-20: changed my mind."),
    ("r-4473", "Headphones delivered 2026-03-01, refund asked 2026-03-03: left ear silent."),
    ("r-4474", "Lamp delivered 2026-02-27, refund asked 2026-03-25: arrived with a cracked base."),
    ("r-4475", "Toaster delivered 2026-03-10, refund asked 2026-03-11: wrong colour sent."),
]


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="sdk-batch-"))
    archive = folder / "refunds.jsonl"
    with archive.open("w", encoding="utf-8") as file:
        for item_id, text in REQUESTS:
            line = {"id": item_id, "prompt": "Decide this refund request.", "source": text,
                    "system": "Refunds are allowed within 30 days of delivery."}  # fmt: skip
            file.write(json.dumps(line) + "\n")
    provider = AnthropicProvider(anthropic_client(), model=MODEL)
    options: dict[str, Any] = {"sleep": lambda seconds: None} if STAND_IN else {}
    with BatchJob.create(
        folder / "job.db",
        contract=Decision,
        backend=AnthropicBatches(provider),
        input=archive,
        out=folder / "results.jsonl",
        settings=JobSettings(retries=1, max_tokens=512),
        poll_interval=30.0,
        **options,
    ) as job:
        summary = job.run(progress=lambda p: print(f"  {p.done}/{p.total} done"))
    print("\n".join(summary.lines()))
    for line in (folder / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        value = record.get("value") or {}
        print(f"{record['id']}: {record['outcome']} {value.get('answer', '')} "
              f"(attempts: {record['attempts']})")  # fmt: skip

    # Again, as after a crash or a redeploy: the state file knows every item is done.
    with BatchJob.open(
        folder / "job.db", contract=Decision, backend=AnthropicBatches(provider), **options
    ) as job:
        again = job.run()
    print(f"resumed: {again.ok} ok, nothing sent again")


STAND_IN = not os.environ.get("ANTHROPIC_API_KEY")


def anthropic_client() -> anthropic.Anthropic:
    """The real client when a key is set; otherwise one whose transport is the stand-in."""
    if not STAND_IN:
        return anthropic.Anthropic()
    print("ANTHROPIC_API_KEY is not set: answering from an offline stand-in of the API.\n")
    return anthropic.Anthropic(
        api_key="offline-stand-in",
        base_url="http://anthropic.stand-in",
        http_client=httpx2.Client(transport=httpx2.MockTransport(BatchStandIn())),
    )


class BatchStandIn:
    """`/v1/messages/batches` as documented: create, retrieve (ended at once), results."""

    def __init__(self) -> None:
        self.batches: dict[str, list[dict[str, Any]]] = {}
        self.seen: set[str] = set()

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if request.method == "POST" and path == "/v1/messages/batches":
            batch_id = f"msgbatch_standin{len(self.batches) + 1:04d}"
            self.batches[batch_id] = json.loads(request.content)["requests"]
            return self._json(self._batch(batch_id))
        batch_id = path.split("/")[4]
        if path.endswith("/results"):
            lines = [self._result(r) for r in self.batches[batch_id]]
            return httpx2.Response(200, content="".join(json.dumps(x) + "\n" for x in lines))
        return self._json(self._batch(batch_id))

    def _result(self, request: dict[str, Any]) -> dict[str, Any]:
        source = request["params"]["messages"][0]["content"]
        first_time = source not in self.seen
        self.seen.add(source)
        confidence = "certain" if "Blender" in source and first_time else "high"
        answer = "reject" if "Blender" in source else "approve"
        document = {"reasoning": "Checked the dates against the 30-day window.",
                    "answer": answer, "confidence": confidence}  # fmt: skip
        message = {
            "id": "msg_standin", "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": json.dumps(document)}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 180, "output_tokens": 40},
        }  # fmt: skip
        result = {"type": "succeeded", "message": message}
        return {"custom_id": request["custom_id"], "result": result}

    def _batch(self, batch_id: str) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        count = len(self.batches[batch_id])
        return {
            "id": batch_id, "type": "message_batch", "processing_status": "ended",
            "request_counts": {"processing": 0, "succeeded": count, "errored": 0,
                               "canceled": 0, "expired": 0},
            "created_at": now, "ended_at": now, "expires_at": now, "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"http://anthropic.stand-in/v1/messages/batches/{batch_id}/results",
        }  # fmt: skip

    @staticmethod
    def _json(body: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(200, content=json.dumps(body).encode())


if __name__ == "__main__":
    main()
