"""Batch jobs: one contract over a large archive, through provider batch APIs or a local fleet.

    from sdk.batch import AnthropicBatches, BatchJob

    job = BatchJob.create("job.db", contract=Decision, backend=AnthropicBatches(provider),
                          input="items.jsonl", out="results.jsonl")
    print("\\n".join(job.run().lines()))

Backends: `AnthropicBatches` (Message Batches), `OpenAIBatches` (OpenAI Batch, Responses or Chat
Completions), `LocalBackend` (`AsyncStructuredClient`s over one or several self-hosted servers).
Requests are built by the same provider codecs as live calls, and every result goes through the
same parser and retry feedback. The job's state is a SQLite file: `run` resumes where a crash
left it, without losing or duplicating an item. One process runs a job at a time (`JobRunning`
for a second); every input line is checked to be the one indexed for its item when it is read
back (`InputChanged`); a file that is not a job's state is never changed (`StateFileError`);
an output changed under a running job, or holding lines it did not write, stops it
(`OutputChanged`).
The CLI is `sdk batch run|status|resume|cancel`. The same items on a Ray cluster (`StructuredMap`,
`ProcessorHooks`: the `ray` extra, loaded on first use) are what `sdk.ray` gives, with the row
columns (`sdk._rows`).
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_names
from sdk._lazy import listed
from sdk.batch._errors import BatchError
from sdk.batch._errors import BatchInputError
from sdk.batch._errors import InputChanged
from sdk.batch._errors import JobMismatch
from sdk.batch._errors import JobRunning
from sdk.batch._errors import OutputChanged
from sdk.batch._errors import StateFileError
from sdk.batch._hosted import AnthropicBatches
from sdk.batch._hosted import HostedBackend
from sdk.batch._hosted import OpenAIBatches
from sdk.batch._hosted import hosted_backend
from sdk.batch._job import BatchJob
from sdk.batch._local import LocalBackend
from sdk.batch._outcome import JobSettings
from sdk.batch._summary import JobProgress
from sdk.batch._summary import JobSummary
from sdk.batch._summary import job_summary

if TYPE_CHECKING:
    from sdk.batch._hooks import REASK
    from sdk.batch._hooks import ProcessorHooks
    from sdk.batch._hooks import SecondPass
    from sdk.batch._map import ClientFactory
    from sdk.batch._map import RowColumns
    from sdk.batch._map import StructuredMap

# The items on Ray (`sdk.ray`'s names, the `ray` extra): loaded on first use, so a job without
# Ray needs neither Ray nor pyarrow.
__getattr__ = lazy_names(
    __name__,
    {
        **dict.fromkeys(("ClientFactory", "RowColumns", "StructuredMap"), "sdk.batch._map"),
        **dict.fromkeys(("REASK", "ProcessorHooks", "SecondPass"), "sdk.batch._hooks"),
    },
)
__dir__ = listed(globals())

__all__ = [
    "REASK",
    "AnthropicBatches",
    "BatchError",
    "BatchInputError",
    "BatchJob",
    "ClientFactory",
    "HostedBackend",
    "InputChanged",
    "JobMismatch",
    "JobProgress",
    "JobRunning",
    "JobSettings",
    "JobSummary",
    "LocalBackend",
    "OpenAIBatches",
    "OutputChanged",
    "ProcessorHooks",
    "RowColumns",
    "SecondPass",
    "StateFileError",
    "StructuredMap",
    "hosted_backend",
    "job_summary",
]
