"""Batch jobs in processes of their own, for the tests that need two or three at once.

    python -m tests.batch_process hosted-run STATE INPUT OUT [--poll-interval S] [--polls N]
    python -m tests.batch_process hosted-cancel STATE
    python -m tests.batch_process create STATE INPUT OUT --at UNIX_TIME

`hosted-run` runs a job on Anthropic Message Batches through the real client over the fake batch
API of `tests.batch_support` (in this process: a batch ends after `--polls` polls, or once
cancelled), and prints its summary as JSON. `hosted-cancel` cancels the job in STATE from this
process: its backend is the same client over a fake API that knows no batch (a cancel sent
there fails), so it shows whether the cancel is left to the running job. `create` waits for the
given instant, then creates the job (two at once race on a fresh state file) and prints its id;
its contract has 5,000 fields, so that fingerprinting it takes a few tens of milliseconds, as a
large real contract's does: whatever a `create` does between looking at the file and writing it
is that much longer, and two processes started together overlap in it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pydantic import create_model

from contracts import Decision
from sdk.batch import AnthropicBatches
from sdk.batch import BatchJob
from sdk.contract import Contract
from sdk.providers import AnthropicProvider
from tests.batch_support import AnthropicBatchAPI
from tests.wire_support import anthropic_client

Wide = create_model("Wide", __base__=Contract, **{f"field_{n}": (str, ...) for n in range(5000)})


def backend(api: AnthropicBatchAPI) -> AnthropicBatches:
    return AnthropicBatches(AnthropicProvider(anthropic_client(api), model="claude-sonnet-4-6"))


def hosted_run(args: argparse.Namespace) -> None:
    api = AnthropicBatchAPI(polls=args.polls)
    with BatchJob.create(
        args.state,
        contract=Decision,
        backend=backend(api),
        input=args.input,
        out=args.out,
        poll_interval=args.poll_interval,
    ) as job:
        summary = job.run()
    record = summary.to_json()
    record["batches_cancelled"] = [batch.cancelled for batch in api.batches.values()]
    print(json.dumps(record))


def hosted_cancel(args: argparse.Namespace) -> None:
    with BatchJob.open(args.state, contract=Decision, backend=backend(AnthropicBatchAPI())) as job:
        print(json.dumps(job.cancel().to_json()))


def create(args: argparse.Namespace) -> None:
    while time.time() < args.at - 0.002:
        time.sleep(0.001)
    while time.time() < args.at:
        pass
    with BatchJob.create(
        args.state,
        contract=Wide,
        backend=backend(AnthropicBatchAPI()),
        input=args.input,
        out=args.out,
    ) as job:
        print(job.job_id)


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("hosted-run")
    run.add_argument("state")
    run.add_argument("input")
    run.add_argument("out")
    run.add_argument("--poll-interval", type=float, default=60.0)
    run.add_argument("--polls", type=int, default=100_000)
    cancel = commands.add_parser("hosted-cancel")
    cancel.add_argument("state")
    make = commands.add_parser("create")
    make.add_argument("state")
    make.add_argument("input")
    make.add_argument("out")
    make.add_argument("--at", type=float, required=True)
    args = parser.parse_args()
    {"hosted-run": hosted_run, "hosted-cancel": hosted_cancel, "create": create}[args.command](args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
