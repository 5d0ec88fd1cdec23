"""Structured output on Ray Data (the `ray` extra): the same promises as `sdk batch`, on a cluster.

    import ray
    from ray.data import ActorPoolStrategy
    from sdk.ray import StructuredMap

    rows = ray.data.read_json("items.jsonl").map_batches(
        StructuredMap,
        fn_constructor_kwargs={"contract": Decision, "client": make_client},
        batch_size=64, compute=ActorPoolStrategy(size=4), max_concurrency=4,
    )

Each output row has the fields of a `sdk batch` output line as flat typed columns (`COLUMNS`:
outcome, value as JSON, error type and message, stop reason, attempts, tokens, notes, the
contract's name, version and fingerprint, ...); `line_of(row)` gives the line itself. A row never
raises: one bad row fails alone, and no block is dropped. `prompt=` an `sdk.Prompt` renders
each row's `variables` as a batch job with that template does, and its rows name the template
(`PROMPT_COLUMNS`). `sdk batch run --engine ray` runs a job file on a cluster with these actors,
into the same output file, resumable and retryable.

A team that runs `ray.data.llm`'s processors keeps them: `ProcessorHooks` gives their pre- and
post-processing (the contract sent as the engine's structured-output setting, each reply judged
by the SDK's parser and checks), `finish` the same columns for every row, failed ones included,
and `second_pass` a bounded re-ask within a job-wide token budget.
"""

try:
    from sdk._rows import COLUMNS
    from sdk._rows import PROMPT_COLUMNS
    from sdk._rows import line_of
    from sdk._rows import row_of
    from sdk.batch import REASK
    from sdk.batch import ClientFactory
    from sdk.batch import ProcessorHooks
    from sdk.batch import RowColumns
    from sdk.batch import SecondPass
    from sdk.batch import StructuredMap
except ModuleNotFoundError as missing:  # the extra's own packages, named with the extra
    if (missing.name or "").partition(".")[0] not in ("pyarrow", "ray"):
        raise
    raise ImportError("sdk.ray needs the ray extra: pip install 'structured-sdk[ray]'") from missing

__all__ = [
    "COLUMNS",
    "PROMPT_COLUMNS",
    "REASK",
    "ClientFactory",
    "ProcessorHooks",
    "RowColumns",
    "SecondPass",
    "StructuredMap",
    "line_of",
    "row_of",
]
