"""`StructuredMap`: a contract over a Ray dataset's rows, in actors that keep many calls in flight.

    ds.map_batches(
        StructuredMap,
        fn_constructor_kwargs={"contract": Decision, "client": make_client},
        batch_size=64,
        compute=ActorPoolStrategy(size=4),
        max_concurrency=4,
    )

Ray builds one `StructuredMap` per actor: `client()` runs there, once, so an embedded model is
loaded once per actor and an HTTP client's connections are kept for the actor's life. Each actor
runs an asyncio loop on a thread of its own, and every batch's rows go through it as live
`generate` calls (`sdk.batch._local.run_item`, the local runner's own), at most `in_flight` at a
time; with `max_concurrency=` on `map_batches` an actor takes several batches at once, so its
calls stay in flight across batch boundaries.

Every row comes out, whatever happened to it: its outcome is decided by the local runner's own
`decide_live` (`sdk.batch._outcome`) and flattened into typed columns (`sdk._rows`). A row
that cannot be read, a call that raises, a batch past its `timeout`: each is that row's failure,
never an exception out of `__call__` (an exception there fails the whole Ray job, and Ray's
`max_errored_blocks` would drop whole blocks).

`prompt=` a prompt template (`sdk.Prompt`) renders each row as a job with that template renders
its lines: the row's `variables` column (an object, or its JSON text), else the columns named by
the template's `Inputs`, go through `parse_item(..., prompt=)`, so a bad variable fails its row
with a batch line's message, and every row comes out naming the template (`PROMPT_COLUMNS`).

The `sdk batch --engine ray` runner uses the same class with `job=True`: its rows are the job's
items (their input lines, read back and checked by the driver, and their counters; a job with a
prompt template passes it as `job_prompt=`, which renders each line's `variables`), and each row
comes back with the decision the driver commits (`_seq`, `_update`, `_line`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import math
import string
import threading
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import dataclass
from typing import Any
from typing import TypedDict
from typing import Unpack

import pyarrow as pa

from sdk._rows import decided_row
from sdk._rows import schema_for
from sdk._values.declared import Count
from sdk._values.declared import OptionalCount
from sdk._values.declared import check
from sdk._values.declared import check_given
from sdk._values.declared import whole_numbers_only
from sdk._values.seconds import SECONDS
from sdk.batch._errors import BatchInputError
from sdk.batch._items import InputItem
from sdk.batch._items import parse_item
from sdk.batch._local import run_item
from sdk.batch._outcome import Decision
from sdk.batch._outcome import JobSettings
from sdk.batch._outcome import decide_error
from sdk.batch._outcome import decide_live
from sdk.batch._state import ItemRow
from sdk.client import AsyncStructuredClient
from sdk.contract import Contract
from sdk.engine.options import whole_number_options
from sdk.prompt import Prompt

__all__ = [
    "ROW_EXPECTS",
    "ClientFactory",
    "JobRows",
    "RowColumns",
    "StructuredMap",
    "contract_of",
    "is_int64",
    "plain_value",
    "row_item",
    "rows_table",
    "template_of",
]

ClientFactory = Callable[[], AsyncStructuredClient | Sequence[AsyncStructuredClient]]
"""Makes the actor's client (or one per server of a fleet: rows go round robin)."""

# `StructuredMap`'s settings, declared once: its signature's types, checked where it is made.
_CONTRACT = type[Contract] | str
_MADE = AsyncStructuredClient | Sequence[AsyncStructuredClient]

_JOB_COLUMNS = (("_seq", pa.int64()), ("_update", pa.string()), ("_line", pa.string()))


class RowColumns(TypedDict, total=False):
    """How rows are read into calls: keywords of `StructuredMap` and `sdk.ray.ProcessorHooks`,
    each optional."""

    id_column: str
    """The column naming each row, a string or an integer (default `"id"`)."""
    prompt: str | type[Prompt] | None
    """A template over the row's columns (`"Approve {vendor}?"`, `str.format`), or a prompt
    template (`sdk.Prompt`) its `variables` column or the columns its `Inputs` name render;
    default: the row's `prompt` column."""
    max_tokens: OptionalCount
    """The output limit of rows that set none (default 4096)."""


ROW_EXPECTS = {"prompt": "a str.format template, an sdk.Prompt class or None"}
"""What `RowColumns`' settings take, where their types say it less well."""


@dataclass(frozen=True, slots=True)
class JobRows:
    """Rows that are a `sdk batch` job's (`--engine ray`): read from its input lines, with its
    settings and prompt template."""

    settings: JobSettings
    prompt: type[Prompt] | None


class StructuredMap:
    """A callable class for `Dataset.map_batches(..., compute=ActorPoolStrategy(...))`.

    `contract`: the `Contract` (or `"module:Name"`). `client`: a picklable function that makes
    the actor's `AsyncStructuredClient` (or a list of them, one per server), run once per actor;
    its `retries` and `enum_case` are the rows'. Rows in: an `id_column` (string or integer) and
    `prompt` (a column; or `prompt=` a template over the row's columns, `"Approve {vendor}?"`),
    `source` (or `document`), optionally `system`, `max_tokens`, `messages` and `options`
    (lists and objects, or their JSON text), as a `sdk batch` input line holds them; with
    `prompt=` an `sdk.Prompt`, `variables` (or the columns its `Inputs` name) instead of a
    prompt, system or messages. Rows out: `id` and the columns of `sdk.ray.COLUMNS` (and
    `PROMPT_COLUMNS` with an `sdk.Prompt`). `in_flight`: calls at once in this actor.
    `timeout`: seconds a batch may take; rows still running then fail (`TimeoutError`).
    """

    def __init__(
        self,
        contract: _CONTRACT,
        client: ClientFactory,
        *,
        in_flight: Count = 16,
        timeout: SECONDS = 3600.0,
        job: JobRows | None = None,
        **rows: Unpack[RowColumns],
    ) -> None:
        # Every setting checked here, naming it, before the client is made or a row is read.
        where = "StructuredMap()"
        check_given(rows, RowColumns, where, ROW_EXPECTS)
        check("contract", contract, _CONTRACT, where, expects="a Contract class or 'module:Name'")
        check("client", client, ClientFactory, where, expects="a function that makes the client")
        check("in_flight", in_flight, Count, where)
        check("timeout", timeout, SECONDS, where, expects="a number of seconds")
        check("job", job, JobRows | None, where)
        self.contract = contract_of(contract)
        made = client()
        check("client()", made, _MADE, where, expects="an AsyncStructuredClient or a list of them")
        self.clients = [made] if isinstance(made, AsyncStructuredClient) else list(made)
        if not self.clients:
            raise ValueError(f"{where}: the client factory made no client")
        first = self.clients[0]
        self.job = job.settings if job is not None else None
        self.job_prompt = job.prompt if job is not None else None
        id_column, prompt = rows.get("id_column", "id"), rows.get("prompt")
        self.template = template_of(prompt)
        max_tokens = rows.get("max_tokens")
        # Outside a job a row has one pass: a provider failure (after the client's own
        # transport retries) is its outcome, not a resubmission.
        self.settings = self.job or JobSettings(
            retries=first.retries, resubmits=0, max_tokens=max_tokens or 4096,
            enum_case=first.config.parsing.enum_case,
        )  # fmt: skip
        self.id_column, self.prompt, self.max_tokens = id_column, prompt, max_tokens
        self.in_flight, self.timeout = in_flight, timeout
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True, name="sdk-ray").start()
        self._limit: asyncio.Semaphore | None = None

    def __call__(self, batch: Any) -> pa.Table:
        rows = _rows(batch)
        if not isinstance(batch, pa.Table):
            _integer_ids(rows, self.id_column)
        future = asyncio.run_coroutine_threadsafe(self._all(rows), self._loop)
        try:
            columns = future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            error = TimeoutError(f"the batch took more than {self.timeout:g} s")
            columns = [
                self._failed(index, row, error, timed_out=True) for index, row in enumerate(rows)
            ]
        return self._table(rows, columns, batch)

    # --- the rows ---

    async def _all(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.in_flight)
        return list(await asyncio.gather(*(self._one(i, row) for i, row in enumerate(rows))))

    async def _one(self, index: int, row: dict[str, Any]) -> dict[str, Any]:
        assert self._limit is not None
        try:
            item, item_row = self._item(index, row)
            client = self.clients[item_row.seq % len(self.clients)]
            async with self._limit:
                outcome = await run_item(client, self.contract, item, item_row, self.max_tokens)
            decision = decide_live(self.contract, client.provider, self.settings, item_row, outcome)
        except Exception as error:  # the row's own failure: it fails, the batch goes on
            return self._failed(index, row, error)
        return self._columns(row, item_row, decision)

    def _item(self, index: int, row: Mapping[str, Any]) -> tuple[InputItem, ItemRow]:
        """The row's item and its counters: from the job's input line (`job=True`), or from
        the row's columns written as an input line, so both are read by one `parse_item`."""
        if self.job is not None:
            line = str(row["_line_in"]).encode()
            item = parse_item(self.contract, line, f"item {row['_id']!r}", self.job_prompt)
            return item, _job_row(row)
        item, _ = row_item(self.contract, row, self.id_column, self.prompt)
        raw_id = row.get(self.id_column)
        number = isinstance(raw_id, int) and not isinstance(raw_id, bool)
        return item, _public_row(index, item.id, number)

    def _failed(
        self, index: int, row: Mapping[str, Any], error: BaseException, *, timed_out: bool = False
    ) -> dict[str, Any]:
        """The columns of a row that failed before any decision (unreadable, timed out). In a
        job, a row that timed out is not done: it has no `_update`, and the next pass runs it."""
        if self.job is not None:
            item_row = _job_row(row)
        else:
            raw_id = row.get(self.id_column)
            number = isinstance(raw_id, int) and not isinstance(raw_id, bool)
            item_row = _public_row(index, str(raw_id), number)
        failure = error if isinstance(error, Exception) else RuntimeError(str(error))
        decision = decide_error(self.contract, self.clients[0].provider, item_row, failure)
        return self._columns(row, item_row, decision, done=not timed_out)

    def _columns(
        self, row: Mapping[str, Any], item_row: ItemRow, decision: Decision, *, done: bool = True
    ) -> dict[str, Any]:
        if self.job is None:
            return decided_row(row.get(self.id_column), decision.line, self.template)
        columns = decided_row(item_row.id, decision.line)  # the job's driver names its prompt
        columns["_seq"] = item_row.seq
        columns["_update"] = json.dumps(asdict(decision.update)) if done else None
        columns["_line"] = decision.line.decode() if decision.line is not None else None
        return columns

    def _table(
        self, rows: list[dict[str, Any]], columns: list[dict[str, Any]], batch: Any
    ) -> pa.Table:
        if self.job is not None:  # a job's ids may be strings and integers: as text here
            schema = pa.schema([*schema_for(pa.string()), *_JOB_COLUMNS])
        else:
            id_type = _id_type(batch, rows, self.id_column)
            schema = schema_for(id_type, prompt=self.template is not None)
        return rows_table(columns, schema)


class _MissingColumn(KeyError):
    """A column the prompt template names and the row lacks."""


class _Named(dict[str, Any]):
    """A row's non-null columns for `str.format_map`: a column the template names but the row
    lacks, or holds null in (Arrow fills a missing column with nulls), is a `_MissingColumn`
    naming it (the row fails with it, a `BatchInputError`)."""

    def __missing__(self, key: str) -> Any:
        raise _MissingColumn(f"the prompt template names the column {key!r}, which the row lacks")


def row_item(
    contract: type[Contract],
    row: Mapping[str, Any],
    id_column: str,
    prompt: str | type[Prompt] | None,
) -> tuple[InputItem, dict[str, Any]]:
    """A row's item, read by the batch input's own `parse_item` from the row's columns written
    as an input line (that line's record comes with it): `prompt` (or the `prompt` template
    over the row's columns), `source` (or `document`), `system`, `max_tokens`, `messages`,
    `options`. With an `sdk.Prompt`, the line's `variables` are the row's (see `_variables`),
    rendered by `parse_item` as a job with that template renders its lines.

    A row that is not a usable item is a `BatchInputError` naming the row, as a batch input
    line that is not one is (the row fails with it, as the line's item would): a template
    naming a column the row lacks, a column an input line cannot hold (bytes), JSON text nested
    too deeply to read."""
    raw_id = row.get(id_column)
    where = f"row {plain_value(raw_id)!r}"
    try:
        record = _record(row, raw_id, prompt, where)
    except BatchInputError:
        raise
    except Exception as error:  # (anything else reading the row: its own fault, named)
        raise BatchInputError(f"{where}: {type(error).__name__}: {error}") from None
    return parse_item(contract, _line(record, where), where, template_of(prompt)), record


def _record(
    row: Mapping[str, Any], raw_id: Any, prompt: str | type[Prompt] | None, where: str
) -> dict[str, Any]:
    """The input line's record of a row (see `row_item`)."""
    record = {
        "id": plain_value(raw_id),
        **{
            key: _decoded(row[key], where, key)
            for key in ("prompt", "source", "system", "max_tokens", "messages", "options")
            if not _null(row.get(key))
        },
    }
    if isinstance(row.get("options"), Mapping):
        # An Arrow struct column (`ray.data.read_json` of lines setting different options)
        # gives every row every line's keys, the ones it lacks as null: absent, as in its line.
        # Ray's numpy and pandas batches hold such a struct's integer field as floats (its
        # nulls NaN): a whole float is the integer it was where the option takes whole numbers
        # alone (`seed`, not `temperature`, whose 1.0 stays 1.0 as `sdk batch` sends it).
        record["options"] = {
            name: int(value) if _whole_float(value) and name in whole_number_options() else value
            for name, value in record["options"].items()
            if not _null(value)
        }
    if "source" not in record and row.get("document") is not None:
        record["source"] = row["document"]
    template = template_of(prompt)
    if template is not None:
        _variables(template, row, record, where)
    elif isinstance(prompt, str):
        try:
            record["prompt"] = prompt.format_map(
                _Named((k, v) for k, v in row.items() if v is not None)
            )
        except _MissingColumn as error:
            raise BatchInputError(f"{where}: {error.args[0]}") from None
        except (LookupError, ValueError, AttributeError, TypeError) as error:
            raise BatchInputError(
                f"{where}: the prompt template cannot be filled ({type(error).__name__}: {error})"
            ) from None
    return record


def _line(record: dict[str, Any], where: str) -> bytes:
    """A row's record as an input line; a column JSON cannot hold (bytes: a numpy `S`
    column) or nested too deeply is a `BatchInputError` naming the column."""
    try:
        return json.dumps(record).encode()
    except (TypeError, ValueError, RecursionError):
        pass
    for key, value in record.items():
        try:
            json.dumps(value)
        except RecursionError:
            raise BatchInputError(f"{where}: `{key}` is nested too deeply to read") from None
        except (TypeError, ValueError) as error:
            raise BatchInputError(
                f"{where}: `{key}` cannot be written in an input line ({error})"
            ) from None
    raise BatchInputError(f"{where}: the row cannot be written as an input line")


def _variables(
    template: type[Prompt], row: Mapping[str, Any], record: dict[str, Any], where: str
) -> None:
    """A row's `variables` put in its line's `record`: its `variables` column (an object, or its
    JSON text), else its non-null columns that `template.Inputs` names (a column that is one
    of them is a variable, not also the line's `prompt`, `system` or `messages`; NaN is null:
    Ray's numpy and pandas batches write a numeric column's nulls so). The rest of
    the line (a `prompt` column beside variables, say) is as the row gives it, and
    `parse_item` refuses what a job's line may not hold."""
    fields = template.Inputs.model_fields
    given = row.get("variables")
    if given is not None:
        variables = _plain(_decoded(given, where, "variables"))
        if isinstance(given, Mapping) and isinstance(variables, dict):  # a struct column
            # (a NaN member is null, as in the Arrow struct; the other members as declared)
            variables = {
                name: _member(value, fields.get(name)) for name, value in variables.items()
            }
        record["variables"] = variables
        return
    record["variables"] = {
        name: _whole(_plain(row[name]), field.annotation)
        for name, field in fields.items()
        if not _null(row.get(name))
    }
    for name in fields:
        if name in ("prompt", "system", "messages"):
            record.pop(name, None)


def template_of(prompt: str | type[Prompt] | None) -> type[Prompt] | None:
    """The prompt template (`sdk.Prompt`) of a `prompt=` keyword, or `None` for a `str.format`
    template or none; `TypeError` for anything else, `ValueError` for a `str.format` template
    no row could fill (malformed, or naming a field by position: `{0}`, `{}`)."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        _fillable(prompt)
        return None
    if not (isinstance(prompt, type) and issubclass(prompt, Prompt)):
        raise TypeError(
            f"prompt= takes a str.format template or an sdk.Prompt class, not {prompt!r}"
        )
    if getattr(prompt, "template", None) is None:
        raise TypeError(f"{prompt.__name__} has no template: it is a base for prompts")
    return prompt


@functools.lru_cache(maxsize=64)  # (read per row: each template is parsed once)
def _fillable(prompt: str) -> None:
    """A `ValueError` for a `str.format` template no row could fill: malformed, or naming a
    field by position (`{0}`, `{}`) where a row has named columns."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(prompt)]
    except ValueError as error:
        raise ValueError(f"prompt= is not a str.format template ({error})") from None
    if any(field is not None and field[:1] in ("", *"0123456789") for field in fields):
        raise ValueError(
            f"prompt= names the row's columns ({{vendor}}), not fields by position: {prompt!r}"
        )


def contract_of(contract: type[Contract] | str) -> type[Contract]:
    """The contract itself, or the one a `"module:Name"` names."""
    if isinstance(contract, str):
        from sdk.workflow.versioning import contract_named

        return contract_named(contract)
    return contract


def plain_value(value: Any) -> Any:
    """A numpy scalar as the Python one (Ray's pandas and numpy batches hold them)."""
    return value.tolist() if hasattr(value, "tolist") else value


def _decoded(value: Any, where: str, key: str) -> Any:
    """A column's value as an input line holds it: `messages` and `options` may come as JSON
    text (a flat column) or as lists and objects; numpy scalars as Python ones; a whole float
    as the integer it was (`max_tokens`: Ray's numpy and pandas batches hold an integer column
    with a null as floats). JSON text nested too deeply to read is a `BatchInputError` naming
    the row and the column, as such a line is."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if _whole_float(value):
        return int(value)
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
        except RecursionError:
            raise BatchInputError(f"{where}: `{key}` is nested too deeply to read") from None
    return value


def _whole_float(value: Any) -> bool:
    """`value` is a float holding a whole number (how numpy and pandas batches hold an integer
    column with a null)."""
    return isinstance(value, float) and value.is_integer()


def _member(value: Any, field: Any) -> Any:
    """A struct member's value as its line held it: NaN (a null in a numeric member of Ray's
    numpy and pandas batches) is `None`, a whole float the integer it was (`_whole`)."""
    if _null(value):
        return None
    return _whole(value, field.annotation) if field is not None else value


def _whole(value: Any, annotation: Any) -> Any:
    """A template variable's value: a whole float is the integer it was where the variable
    takes whole numbers alone (Ray's numpy and pandas batches hold an integer column with a
    null as floats)."""
    return int(value) if _whole_float(value) and whole_numbers_only(annotation) else value


def _null(value: Any) -> bool:
    """A column's value is null: `None`, or NaN (a null in a numeric column of Ray's numpy and
    pandas batches, which hold an integer column with nulls as floats)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    """A variable's value as JSON holds it: numpy scalars and arrays (in Ray's numpy and pandas
    batches) as Python values, inside objects and lists too."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _rows(batch: Any) -> list[dict[str, Any]]:
    """A batch in any of Ray's formats (Arrow table, pandas frame, dict of arrays) as rows."""
    if isinstance(batch, pa.Table):
        rows: list[dict[str, Any]] = batch.to_pylist()
        return rows
    if hasattr(batch, "to_dict") and hasattr(batch, "columns"):
        return list(batch.to_dict("records"))
    columns = {key: list(values.tolist() if hasattr(values, "tolist") else values)
               for key, values in dict(batch).items()}  # fmt: skip
    count = len(next(iter(columns.values()), []))
    return [{key: values[index] for key, values in columns.items()} for index in range(count)]


def _id_type(batch: Any, rows: list[dict[str, Any]], column: str) -> pa.DataType:
    """The id column's Arrow type in the input (ids come out as they came in): integers when
    every id of a numpy or pandas batch is one, else text (no id can then fail the table)."""
    if isinstance(batch, pa.Table) and column in batch.column_names:
        return batch.schema.field(column).type
    ids = [row.get(column) for row in rows if row.get(column) is not None]
    return pa.int64() if ids and all(map(is_int64, ids)) else pa.string()


def is_int64(value: Any) -> bool:
    """`value` is an integer an Arrow int64 column holds (not a boolean, not past 64 bits)."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def _integer_ids(rows: list[dict[str, Any]], column: str) -> None:
    """Integer ids given back where Ray's numpy and pandas batches made floats of them: an
    integer column with a null arrives as floats with NaN. Only when every id is such a float
    (whole, or NaN for the null: that row fails alone, with no id)."""
    ids = [row.get(column) for row in rows]
    if not ids or not all(isinstance(i, float) and (math.isnan(i) or i.is_integer()) for i in ids):
        return
    for row, value in zip(rows, ids, strict=True):
        assert isinstance(value, float)
        row[column] = None if math.isnan(value) else int(value)


def rows_table(columns: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Decided rows as one Arrow table: with text ids, an id of another kind (a float, a
    boolean: its row failed, an id is a string or an integer) as its JSON text, so no row's id
    fails the block."""
    if schema.field("id").type == pa.string():
        for row in columns:
            if row["id"] is not None and not isinstance(row["id"], str):
                row["id"] = json.dumps(plain_value(row["id"]))
    return pa.Table.from_pylist(columns, schema=schema)


def _public_row(index: int, item_id: str, number: bool) -> ItemRow:
    return ItemRow(
        seq=index, id=item_id, offset=0, length=0, hash=0, state="pending", submission=None,
        requests=0, retries_used=0, resubmits_used=0, feedback=[], input_tokens=0,
        output_tokens=0, id_number=number,
    )  # fmt: skip


def _job_row(row: Mapping[str, Any]) -> ItemRow:
    """A job item's row as the driver sent it (its counters so far)."""
    return ItemRow(
        seq=int(row["_seq"]), id=str(row["_id"]), offset=0, length=0, hash=0,
        state="pending", submission=None, requests=int(row["_requests"]), retries_used=0,
        resubmits_used=int(row["_resubmits_used"]), feedback=[],
        input_tokens=int(row["_input_tokens"]), output_tokens=int(row["_output_tokens"]),
        id_number=bool(row["_id_number"]),
    )  # fmt: skip
