"""Fake batch APIs for the batch tests: Anthropic Message Batches and OpenAI Batch (with Files),
implemented as `httpx2.MockTransport` handlers behind the real `anthropic` / `openai` clients.

The endpoints behave as the APIs document them: a created batch is `in_progress` (OpenAI:
`validating` first) for a few polls, then `ended` / `completed` with its request counts and a
results URL (Anthropic) or output and error files (OpenAI); listing is newest first with cursor
pages; cancelling makes the requests not yet run `canceled` / `batch_cancelled`. Bodies are the
realistic fixtures of tests/fixtures, validated strictly by the clients.

What each request gets is decided by `answer(custom_id, body, attempt)`: a document text, or one
of `ERRORED`, `EXPIRED`, `CANCELED` (the item was not run), `SERVER_ERROR`; and, for the hostile
result lines a results file may hold, `MISSING` (no line), `GARBAGE_LINE`, `WRONG_SHAPE`
(OpenAI), `NOT_JSON_LINE`, `NO_CUSTOM_ID`, `NO_RESULT`, `RESULT_NOT_OBJECT` (Anthropic).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import httpx2

from contracts import Decision
from sdk.batch import AnthropicBatches
from sdk.batch import BatchJob
from sdk.batch import LocalBackend
from sdk.batch import OpenAIBatches
from sdk.client import AsyncStructuredClient
from sdk.providers import AnthropicProvider
from sdk.providers.llamacpp import LlamaCppProvider
from sdk.providers.openai import OpenAIChatProvider
from sdk.providers.openai import OpenAIResponsesProvider
from tests.local_support import llamacpp_setup
from tests.process_support import read_line
from tests.wire_support import ANTHROPIC_HEADERS
from tests.wire_support import DECISION
from tests.wire_support import OPENAI_HEADERS
from tests.wire_support import anthropic_client
from tests.wire_support import fixture_json
from tests.wire_support import openai_client

ERRORED = "<errored>"
EXPIRED = "<expired>"
CANCELED = "<canceled>"
SERVER_ERROR = "<server_error>"
MISSING = "<missing>"
GARBAGE_LINE = "<garbage_line>"
WRONG_SHAPE = "<wrong_shape>"
NOT_JSON_LINE = "<not_json_line>"
NO_CUSTOM_ID = "<no_custom_id>"
NO_RESULT = "<no_result>"
RESULT_NOT_OBJECT = "<result_not_object>"

VALID = json.dumps(DECISION)

Answer = Callable[[str, dict[str, Any], int], str]
"""(custom_id, request body, how many times this item's id was asked before) -> reply."""


def item_of(custom_id: str) -> str:
    """The job's item seq in a custom id (`s1a2b3c-17` -> `17`)."""
    return custom_id.rpartition("-")[2]


def always_valid(custom_id: str, body: dict[str, Any], attempt: int) -> str:
    return VALID


def _json(status: int, body: Any, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.Response(status, content=json.dumps(body).encode(), headers=headers)


def _timestamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


class _Clock:
    """Now, strictly increasing (two objects created in the same instant still sort)."""

    def __init__(self) -> None:
        self.last = 0.0

    def __next__(self) -> float:
        self.last = max(time.time(), self.last + 0.001)
        return self.last


@dataclass
class FakeBatch:
    id: str
    requests: list[dict[str, Any]]
    created: float
    polls_left: int
    metadata: dict[str, str] | None = None
    status: str = "in_progress"
    cancelled: bool = False
    results: list[Any] = field(default_factory=list)
    """Result lines: objects, or (hostile) raw text."""
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None


class _Base:
    def __init__(self, answer: Answer = always_valid, polls: int = 2) -> None:
        self.answer = answer
        self.polls = polls
        self.batches: dict[str, FakeBatch] = {}
        self.calls: list[tuple[str, str]] = []
        self.asked: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._clock = _Clock()

    def _ask(self, custom_id: str, body: dict[str, Any]) -> str:
        item = item_of(custom_id)
        attempt = self.asked.get(item, 0)
        self.asked[item] = attempt + 1
        return self.answer(custom_id, body, attempt)

    def creates(self) -> int:
        return sum(
            1 for method, path in self.calls if method == "POST" and path.endswith("batches")
        )


class AnthropicBatchAPI(_Base):
    """`/v1/messages/batches`: create, retrieve, list, cancel, results."""

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        self.calls.append((request.method, path))
        if request.method == "POST" and path == "/v1/messages/batches":
            return self._create(json.loads(request.content))
        if request.method == "GET" and path == "/v1/messages/batches":
            return self._list(parse_qs(request.url.query.decode()))
        match = re.fullmatch(r"/v1/messages/batches/([^/]+)(/cancel|/results)?", path)
        if match is None or match.group(1) not in self.batches:
            return _json(404, _error("not_found_error", "batch not found"), ANTHROPIC_HEADERS)
        batch = self.batches[match.group(1)]
        if match.group(2) == "/cancel":
            batch.cancelled = True
            if batch.status == "in_progress":
                batch.status = "canceling"
            return _json(200, self._object(batch), ANTHROPIC_HEADERS)
        if match.group(2) == "/results":
            if batch.status != "ended":
                return _json(400, _error("invalid_request_error", "not ended"), ANTHROPIC_HEADERS)
            lines = "".join(
                (line if isinstance(line, str) else json.dumps(line)) + "\n"
                for line in batch.results
            )
            return httpx2.Response(
                200,
                content=lines.encode(),
                headers={**ANTHROPIC_HEADERS, "content-type": "application/binary"},
            )
        self._advance(batch)
        return _json(200, self._object(batch), ANTHROPIC_HEADERS)

    def _create(self, body: dict[str, Any]) -> httpx2.Response:
        number = next(self._ids)
        batch = FakeBatch(
            id=f"msgbatch_01{number:022d}",
            requests=body["requests"],
            created=next(self._clock),
            polls_left=self.polls,
        )
        self.batches[batch.id] = batch
        return _json(200, self._object(batch), ANTHROPIC_HEADERS)

    def _advance(self, batch: FakeBatch) -> None:
        if batch.status == "ended":
            return
        batch.polls_left -= 1
        if batch.polls_left > 0 and batch.status != "canceling":
            return
        for request in batch.requests:
            custom_id = request["custom_id"]
            if batch.cancelled:
                result: dict[str, Any] = {"type": "canceled"}
            else:
                reply = self._ask(custom_id, request["params"])
                if reply == MISSING:
                    continue  # a result the API lost: the job must notice
                hostile = _hostile_line(reply, custom_id)
                if hostile is not None:
                    batch.results.append(hostile)
                    continue
                result = self._result(reply)
            batch.results.append({"custom_id": custom_id, "result": result})
        batch.results.reverse()  # results come in any order
        batch.status = "ended"

    @staticmethod
    def _result(reply: str) -> dict[str, Any]:
        if reply == EXPIRED:
            return {"type": "expired"}
        if reply == CANCELED:
            return {"type": "canceled"}
        if reply == ERRORED:
            return {
                "type": "errored",
                "error": _error("invalid_request_error", "max_tokens: too large for the model"),
            }
        if reply == SERVER_ERROR:
            return {"type": "errored", "error": _error("overloaded_error", "Overloaded")}
        message = fixture_json("anthropic_success.json")
        message["content"] = [{"type": "text", "text": reply}]
        return {"type": "succeeded", "message": message}

    def _object(self, batch: FakeBatch) -> dict[str, Any]:
        ended = batch.status == "ended"
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if ended:
            for line in batch.results:
                result = line.get("result") if isinstance(line, dict) else None
                kind = result.get("type") if isinstance(result, dict) else "errored"
                counts[kind] += 1
        else:
            counts["processing"] = len(batch.requests)
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": batch.status,
            "request_counts": counts,
            "ended_at": _timestamp(batch.created + 50) if ended else None,
            "created_at": _timestamp(batch.created),
            "expires_at": _timestamp(batch.created + 86400),
            "archived_at": None,
            "cancel_initiated_at": _timestamp(batch.created + 5) if batch.cancelled else None,
            "results_url": (
                f"http://anthropic.test/v1/messages/batches/{batch.id}/results" if ended else None
            ),
        }

    def _list(self, query: dict[str, list[str]]) -> httpx2.Response:
        newest = sorted(self.batches.values(), key=lambda b: b.created, reverse=True)
        limit = int(query.get("limit", ["20"])[0])
        after = query.get("after_id", [None])[0]
        if after is not None:
            index = next(i for i, b in enumerate(newest) if b.id == after)
            newest = newest[index + 1 :]
        page = newest[:limit]
        body = {
            "data": [self._object(b) for b in page],
            "has_more": len(newest) > limit,
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
        }
        return _json(200, body, ANTHROPIC_HEADERS)


def _hostile_line(reply: str, custom_id: str) -> dict[str, Any] | str | None:
    """The broken result line a reply stands for (`None`: a real result)."""
    if reply == NOT_JSON_LINE:
        return '{"custom_id": "' + custom_id + '", "result": {"type": "succ'
    if reply == NO_CUSTOM_ID:
        return {"result": AnthropicBatchAPI._result(VALID)}
    if reply == NO_RESULT:
        return {"custom_id": custom_id}
    if reply == RESULT_NOT_OBJECT:
        return {"custom_id": custom_id, "result": "succeeded"}
    return None


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


class OpenAIBatchAPI(_Base):
    """`/v1/files` and `/v1/batches`: upload, list, content; create, retrieve, list, cancel."""

    def __init__(
        self,
        answer: Answer = always_valid,
        polls: int = 2,
        chat: bool = False,
        refuse: bool = False,
    ) -> None:
        super().__init__(answer, polls)
        self.refuse = refuse  # every batch fails validation
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.chat = chat

    def uploads(self) -> int:
        return sum(1 for method, path in self.calls if (method, path) == ("POST", "/v1/files"))

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        self.calls.append((request.method, path))
        query = parse_qs(request.url.query.decode())
        if request.method == "POST" and path == "/v1/files":
            return self._upload(request)
        if request.method == "GET" and path == "/v1/files":
            files = sorted(self.files.values(), key=lambda f: f[0]["created_at"], reverse=True)
            data = [f[0] for f in files if f[0]["purpose"] == query.get("purpose", ["batch"])[0]]
            return _json(200, _page(data), OPENAI_HEADERS)
        match = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        if match is not None:
            return httpx2.Response(
                200,
                content=self.files[match.group(1)][1],
                headers={**OPENAI_HEADERS, "content-type": "application/octet-stream"},
            )
        if request.method == "POST" and path == "/v1/batches":
            return self._create(json.loads(request.content))
        if request.method == "GET" and path == "/v1/batches":
            newest = sorted(self.batches.values(), key=lambda b: b.created, reverse=True)
            return _json(200, _page([self._object(b) for b in newest]), OPENAI_HEADERS)
        match = re.fullmatch(r"/v1/batches/([^/]+)(/cancel)?", path)
        if match is None or match.group(1) not in self.batches:
            return _json(
                404,
                {
                    "error": {
                        "message": "No batch found",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
                OPENAI_HEADERS,
            )
        batch = self.batches[match.group(1)]
        if match.group(2):
            batch.cancelled = True
            if batch.status in ("validating", "in_progress"):
                batch.status = "cancelling"
            return _json(200, self._object(batch), OPENAI_HEADERS)
        self._advance(batch)
        return _json(200, self._object(batch), OPENAI_HEADERS)

    def _upload(self, request: httpx2.Request) -> httpx2.Response:
        content_type = request.headers["content-type"]
        boundary = content_type.split("boundary=")[1].encode()
        body = request.content
        filename, data = "", b""
        for part in body.split(b"--" + boundary):
            head, _, rest = part.partition(b"\r\n\r\n")
            if b'name="file"' in head:
                filename = re.search(rb'filename="([^"]+)"', head).group(1).decode()  # type: ignore[union-attr]
                data = rest[:-2] if rest.endswith(b"\r\n") else rest
        number = next(self._ids)
        file = {
            "id": f"file-{number:022d}",
            "object": "file",
            "bytes": len(data),
            "created_at": int(next(self._clock)),
            "filename": filename,
            "purpose": "batch",
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }
        self.files[file["id"]] = (file, data)
        return _json(200, file, OPENAI_HEADERS)

    def _create(self, body: dict[str, Any]) -> httpx2.Response:
        number = next(self._ids)
        data = self.files[body["input_file_id"]][1]
        requests = [json.loads(line) for line in data.splitlines() if line.strip()]
        batch = FakeBatch(
            id=f"batch_{number:024d}",
            requests=requests,
            created=next(self._clock),
            polls_left=self.polls,
            metadata=body.get("metadata"),
            status="validating",
            input_file_id=body["input_file_id"],
        )
        self.endpoint = body["endpoint"]
        self.batches[batch.id] = batch
        return _json(200, self._object(batch), OPENAI_HEADERS)

    def _advance(self, batch: FakeBatch) -> None:
        if batch.status in ("completed", "cancelled", "expired", "failed"):
            return
        if batch.status == "validating":
            batch.status = "failed" if self.refuse else "in_progress"
            return
        batch.polls_left -= 1
        if batch.polls_left > 0 and batch.status != "cancelling":
            return
        outputs: list[Any] = []
        errors: list[Any] = []
        for number, request in enumerate(batch.requests):
            custom_id = request["custom_id"]
            line_id = f"batch_req_{batch.id[-6:]}{number:06d}"
            reply = "<cancelled>" if batch.cancelled else self._ask(custom_id, request["body"])
            if reply in (EXPIRED, CANCELED, "<cancelled>"):
                code = "batch_expired" if reply == EXPIRED else "batch_cancelled"
                errors.append(
                    {
                        "id": line_id,
                        "custom_id": custom_id,
                        "response": None,
                        "error": {"code": code, "message": f"The request was not run ({code})."},
                    }
                )
            elif reply in (ERRORED, SERVER_ERROR):
                status = 400 if reply == ERRORED else 500
                errors.append(
                    {
                        "id": line_id,
                        "custom_id": custom_id,
                        "response": {
                            "status_code": status,
                            "request_id": f"req_{number:032d}",
                            "body": {
                                "error": {
                                    "message": "Invalid 'max_output_tokens'"
                                    if status == 400
                                    else "Server error",
                                    "type": "invalid_request_error"
                                    if status == 400
                                    else "server_error",
                                    "param": None,
                                    "code": None,
                                }
                            },
                        },
                        "error": None,
                    }
                )
            elif reply == GARBAGE_LINE:
                outputs.append({"not": "a result line"})
                outputs.append("{cut off mid-li")
            else:
                body = {"object": "response", "id": 7} if reply == WRONG_SHAPE else None
                outputs.append(
                    {
                        "id": line_id,
                        "custom_id": custom_id,
                        "response": {
                            "status_code": 200,
                            "request_id": f"req_{number:032d}",
                            "body": body or self._reply_body(reply),
                        },
                        "error": None,
                    }
                )
        outputs.reverse()
        batch.output_file_id = self._file(outputs, "batch_output") if outputs else None
        batch.error_file_id = self._file(errors, "batch_output") if errors else None
        batch.results = outputs + errors
        batch.status = "cancelled" if batch.cancelled else "completed"

    def _reply_body(self, text: str) -> dict[str, Any]:
        if self.chat:
            body = copy.deepcopy(fixture_json("openai_chat_stop.json"))
            body["choices"][0]["message"]["content"] = text
            return body
        body = fixture_json("openai_responses_completed.json")
        message = next(item for item in body["output"] if item["type"] == "message")
        message["content"] = [
            {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        ]
        return body

    def _file(self, lines: list[dict[str, Any]], purpose: str) -> str:
        number = next(self._ids)
        data = "".join(
            (line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines
        ).encode()
        file = {
            "id": f"file-{number:022d}",
            "object": "file",
            "bytes": len(data),
            "created_at": int(next(self._clock)),
            "filename": f"batch_{number}_output.jsonl",
            "purpose": purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }
        self.files[file["id"]] = (file, data)
        return str(file["id"])

    def _object(self, batch: FakeBatch) -> dict[str, Any]:
        done = batch.status in ("completed", "cancelled")
        completed = sum(
            1
            for r in batch.results
            if isinstance(r, dict) and r.get("response") and r["response"]["status_code"] == 200
        )
        errors = None
        if batch.status == "failed":
            errors = {
                "object": "list",
                "data": [
                    {
                        "code": "invalid_request",
                        "message": "The model `gpt-5.1-mini` does not support the batch API.",
                        "param": "body.model",
                        "line": 1,
                    }
                ],
            }
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions" if self.chat else "/v1/responses",
            "errors": errors,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": int(batch.created),
            "in_progress_at": int(batch.created) + 1 if batch.status != "validating" else None,
            "expires_at": int(batch.created) + 86400,
            "finalizing_at": int(batch.created) + 40 if done else None,
            "completed_at": int(batch.created) + 50 if batch.status == "completed" else None,
            "failed_at": int(batch.created) + 2 if batch.status == "failed" else None,
            "expired_at": None,
            "cancelling_at": int(batch.created) + 5 if batch.cancelled else None,
            "cancelled_at": int(batch.created) + 50 if batch.status == "cancelled" else None,
            "request_counts": {
                "total": len(batch.requests),
                "completed": completed,
                "failed": len(batch.results) - completed,
            },
            "metadata": batch.metadata,
        }


def _page(data: list[Any]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": False,
    }


def write_items(path: Any, count: int, *, prefix: str = "doc") -> None:
    """An input file of `count` items, each a short purchase-approval document."""
    with open(path, "w", encoding="utf-8") as file:
        for number in range(count):
            file.write(
                json.dumps(
                    {
                        "id": f"{prefix}-{number}",
                        "source": f"Invoice {number}: $4,180.00 for PO-{2000 + number}.",
                        "prompt": "Approve this purchase?",
                    }
                )
                + "\n"
            )


def read_output(path: Any) -> list[dict[str, Any]]:
    """The output file's records."""
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file]


# --- shared by the batch tests: scripts, backends, local servers ---

INVALID_JSON = '{"reasoning": "cut'
WRONG_ENUM = json.dumps({"reasoning": "Looks fine.", "answer": "maybe", "confidence": "high"})


def doc(body: dict[str, Any]) -> int:
    """Which input document a request is for (from the source text in its first message)."""
    messages = body.get("messages") or body.get("input")
    match = re.search(r"Invoice (\d+):", messages[0]["content"])
    assert match is not None
    return int(match.group(1))


class Script:
    """What the fake API answers per document and attempt (default: a valid Decision)."""

    def __init__(self, plan: dict[int, list[str]] | None = None) -> None:
        self.plan = plan or {}
        self.bodies: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, custom_id: str, body: dict[str, Any], attempt: int) -> str:
        number = doc(body)
        self.bodies.setdefault(number, []).append(body)
        replies = self.plan.get(number, [VALID])
        return replies[min(attempt, len(replies) - 1)]


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def anthropic_backend(api: AnthropicBatchAPI, **limits: int) -> AnthropicBatches:
    provider = AnthropicProvider(anthropic_client(api), model="claude-sonnet-4-6")
    return AnthropicBatches(provider, **limits)


def openai_backend(api: OpenAIBatchAPI, *, chat: bool = False, **limits: int) -> OpenAIBatches:
    client = openai_client(api)
    if chat:
        return OpenAIBatches(OpenAIChatProvider(client, model="gpt-5.1-mini"), **limits)
    return OpenAIBatches(OpenAIResponsesProvider(client, model="gpt-5.1-mini"), **limits)


def by_id(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    ids = [record["id"] for record in records]
    duplicated = [item for item, n in Counter(ids).items() if n > 1]
    assert not duplicated, f"items written more than once: {duplicated}"
    return {record["id"]: record for record in records}


def llamacpp_server(
    counter: Counter[str], name: str, plan: dict[int, list[str]], asked: Counter[int]
) -> Any:
    """A llama.cpp server's `/completion` as a mock transport handler: each document's replies
    in `plan` in order (`asked`: how many times each was asked, shared by the servers of a
    fleet); `SERVER_ERROR` is a 503."""

    async def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        setup = llamacpp_setup(request.url.path, body)  # the special tokens the provider learns
        if setup is not None:
            return httpx.Response(200, json=setup)
        await asyncio.sleep(0.001)  # a server takes a moment: the other calls go on meanwhile
        counter[name] += 1
        counter[f"n_predict={body.get('n_predict')}"] += 1
        number = int(re.search(r"Invoice (\d+):", body["prompt"]).group(1))  # type: ignore[union-attr]
        replies = plan.get(number, [VALID])
        reply = replies[min(asked[number], len(replies) - 1)]
        asked[number] += 1
        if reply == SERVER_ERROR:
            return httpx.Response(503, json={"error": {"code": 503, "message": "Loading model"}})
        completion = fixture_json("llamacpp_completion.json")
        completion["content"] = reply
        return httpx.Response(200, json=completion)

    return handle


def local_clients(
    counter: Counter[str], plan: dict[int, list[str]], **options: Any
) -> list[AsyncStructuredClient]:
    """Two clients (servers `a` and `b`), `retries=1` unless `options` say otherwise."""
    clients = []
    asked: Counter[int] = Counter()
    for name in ("a", "b"):
        transport = httpx.MockTransport(llamacpp_server(counter, name, plan, asked))
        provider = LlamaCppProvider(
            f"http://{name}.test:8080",
            http_client=httpx.AsyncClient(transport=transport),
            prompt_template=lambda request: "\n".join(m.text for m in request.messages),
        )
        settings = {"retries": 1, "max_concurrency": 3, **options}
        clients.append(AsyncStructuredClient(provider, **settings))
    return clients


def job_for(tmp_path: Path, items: Path, backend: Any, **options: Any) -> BatchJob:
    """A new job over `items` (Decision; `job.db` and `out.jsonl` in `tmp_path`); a hosted one
    polls through a recorder unless `sleep` is given."""
    if not isinstance(backend, LocalBackend):
        options.setdefault("sleep", Sleeps())
    return BatchJob.create(
        tmp_path / "job.db",
        contract=Decision,
        backend=backend,
        input=items,
        out=tmp_path / "out.jsonl",
        **options,
    )


@contextmanager
def fanout(delay: float, *options: str) -> Iterator[str]:
    """bench/fanout_server.py in its own process (a llama.cpp and vLLM server that answers every
    completion with a valid Decision after `delay` seconds; `options`: `--slots N`,
    `--closed`): its base URL."""
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).parents[1] / "bench" / "fanout_server.py"),
         "--delay", str(delay), *options],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        port = int(read_line(server.stdout))
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def gate(url: str, *, open: bool, count: int | None = None) -> None:
    """Open or close the fanout server's gate (closed: completions are held, not answered);
    opened with a `count`, the server closes it again itself once that many have started."""
    path = "close" if not open else "open" if count is None else f"open/{count}"
    httpx.post(f"{url}/gate/{path}", timeout=10).raise_for_status()


def completions(url: str) -> int:
    """How many completions the fanout server was asked for so far."""
    return int(httpx.get(f"{url}/stats", timeout=10).json()["completions"])
