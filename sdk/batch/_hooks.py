"""`ProcessorHooks`: the SDK's promises around `ray.data.llm`'s processors.

    hooks = ProcessorHooks(Decision, model="Qwen/Qwen3-8B")
    processor = build_processor(
        HttpRequestProcessorConfig(url=f"{server}/v1/chat/completions", ...),
        preprocess=hooks.http_preprocess,      # or vLLMEngineProcessorConfig + vllm_preprocess
        postprocess=hooks.http_postprocess,    # vllm_postprocess
    )
    rows = hooks.finish(processor(ds))         # every row: id + sdk.ray.COLUMNS

A team that already runs Ray's HTTP request processor or its vLLM engine processor keeps it and
gains what `sdk batch` promises. The preprocess builds each row's request as the vLLM provider
would send it (the contract's schema in vLLM's dialect as `structured_outputs`, the grounded
grammar of a contract with source quotes, the control-token check, every option vetted), with
the codec the live client uses (`VLLMProvider().codec`); the postprocess reads the reply as a
live call reads it (the HTTP body through the codec; the engine's text with a stop reason from
its finish reason, or from its generated-token count against the row's limit, since Ray's
engine stage does not say why generation stopped) and judges it with the live attempts machine
(`sdk.batch._outcome.decide_reply`: stop reason first, schema, contract, checks).

No row fails the job. A row the preprocess cannot build (no prompt, an option the provider does
not take, text UTF-8 cannot hold) is marked with Ray's own `__inference_error__`, so every stage
and the postprocess pass it by and no request is sent; a row the engine failed
(`should_continue_on_error=True`) comes out with `__inference_error__` too. `finish` turns
every row into the same typed columns as `StructuredMap`'s, the failed ones as failed lines.

Re-asking is a bounded second pass (`second_pass`): a row whose reply was invalid and that has
retries left carries the follow-up (`reask`: the SDK's feedback, the invalid reply once and its
violations) and is asked again through the same processor, as many of them as a job-wide token
budget admits; the others keep their failed line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Unpack
from typing import get_type_hints

import pyarrow as pa

from sdk._rows import COLUMNS
from sdk._rows import PROMPT_COLUMNS
from sdk._rows import decided_row
from sdk._values.declared import check
from sdk._values.declared import check_given
from sdk._values.records import Usage
from sdk.batch._errors import BatchInputError
from sdk.batch._items import InputItem
from sdk.batch._map import ROW_EXPECTS
from sdk.batch._map import RowColumns
from sdk.batch._map import contract_of
from sdk.batch._map import is_int64
from sdk.batch._map import plain_value
from sdk.batch._map import row_item
from sdk.batch._map import rows_table
from sdk.batch._map import template_of
from sdk.batch._outcome import Decision
from sdk.batch._outcome import ItemJob
from sdk.batch._outcome import JobSettings
from sdk.batch._outcome import decide_error
from sdk.batch._outcome import decide_reply
from sdk.batch._outcome import request_for
from sdk.batch._state import ItemRow
from sdk.contract import Contract
from sdk.errors import ProviderError
from sdk.parsing.parser import EnumCase
from sdk.providers._base import Completion
from sdk.providers._base import CompletionRequest
from sdk.providers._base import FreeText
from sdk.providers._base import Reply
from sdk.providers._base import check_model
from sdk.providers._boundary import fault_boundary
from sdk.providers._chat import ChatChoice
from sdk.providers._drivers import built
from sdk.providers.vllm import VLLMProvider

__all__ = ["REASK", "ProcessorHooks", "SecondPass"]

REASK = "reask"
"""The column of a row that a second pass may ask again: its follow-up as JSON text (the item,
the feedback messages, its counters), or null."""

_STATE = "_sdk_state"
"""What the preprocess leaves for the postprocess (Ray carries a row's columns through every
stage): the item as an input line holds it, its counters and its output limit, as JSON."""
_FAILED = "_sdk_failed"
"""The columns of a row already decided failed by the preprocess, as JSON."""
_ERROR = "__inference_error__"
"""Ray's own mark of a failed row: every stage and the postprocess pass it by."""

# What a reply is read as: a document (the codec's reader looks at nothing else).
_DOCUMENT_REPLY = CompletionRequest(output=FreeText(), messages=(), max_tokens=1)
# Ray's engine stage gives no finish reason: these are what the generated-token count decides.
_LENGTH, _STOP = "length", "stop"


class ProcessorHooks:
    """Pre- and post-processing functions for `ray.data.llm.build_processor`.

    `contract`: the `Contract` (or `"module:Name"`). `model`: the served model's name (the HTTP
    body's `model`). `id_column`, `prompt` (a template over the row's columns, or an
    `sdk.Prompt` its `variables` render): as `StructuredMap` reads rows (`prompt`, `source` or
    `document`, `system`, `max_tokens`, `messages`, `options` columns; with an `sdk.Prompt`,
    every row names it in `PROMPT_COLUMNS`). `max_tokens`: the output limit of rows that set none.
    `retries`: re-asks a row may have in second passes. Picklable: Ray ships the bound methods
    to its workers.
    """

    def __init__(
        self,
        contract: type[Contract] | str,
        *,
        model: str,
        retries: int = 1,
        enum_case: EnumCase = "normalize",
        grounding: bool = True,
        **rows: Unpack[RowColumns],
    ) -> None:
        where = "ProcessorHooks()"
        check_given(rows, RowColumns, where, ROW_EXPECTS)
        check("contract", contract, type[Contract] | str, where,
              expects="a Contract class or 'module:Name'")  # fmt: skip
        check_model(model, where)
        check("grounding", grounding, bool, where)
        declared = get_type_hints(JobSettings, include_extras=True)  # (what the job takes)
        check("retries", retries, declared["retries"], where)
        check("enum_case", enum_case, declared["enum_case"], where)
        self.contract = contract_of(contract)
        self.model, self.grounding = model, grounding
        self.id_column, self.prompt = rows.get("id_column", "id"), rows.get("prompt")
        self.template = template_of(self.prompt)
        max_tokens = rows.get("max_tokens")
        self.settings = JobSettings(
            retries=retries,
            resubmits=0,
            max_tokens=max_tokens if max_tokens is not None else 4096,
            enum_case=enum_case,
        )
        self._provider: VLLMProvider | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_provider": None}  # made again where the hooks run

    @property
    def provider(self) -> VLLMProvider:
        """The vLLM provider whose codec builds and reads (it never connects: no call is made)."""
        if self._provider is None:
            self._provider = VLLMProvider(model=self.model, grounding=self.grounding)
        return self._provider

    # --- the preprocess: a row -> its request ---

    def http_preprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """For `HttpRequestProcessorConfig(url=".../v1/chat/completions")`: the row's `payload`,
        the body the vLLM provider sends (never raises: see the module docstring)."""
        return self._prepared(row, lambda body: {"payload": body})

    def vllm_preprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """For `vLLMEngineProcessorConfig`: the row's `messages` and `sampling_params`
        (`max_tokens`, `structured_outputs`, the row's sampling options)."""
        return self._prepared(row, _engine_inputs)

    def _prepared(
        self, row: Mapping[str, Any], shape: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        try:
            item, item_row, state = self._item(row)
            if item.unusable is not None:
                raise BatchInputError(item.unusable)
            request = request_for(
                ItemJob(self.contract, self.provider, self.settings), item, item_row
            )
            # Built as a live call builds it (`built`): vetted, a weakened schema refused.
            body = built(self.provider, request, stream=False).body
            state["max_tokens"] = request.max_tokens
            return {**shape(body), _STATE: json.dumps(state), _ERROR: ""}
        except Exception as error:  # the row's own failure: it skips the engine, fails alone
            decision = decide_error(self.contract, self.provider, _placeholder(row), error)
            columns = self._columns(row, decision)
            return {_FAILED: json.dumps(columns), _ERROR: f"{type(error).__name__}: {error}"}

    def _item(self, row: Mapping[str, Any]) -> tuple[InputItem, ItemRow, dict[str, Any]]:
        """The row's item and counters: from its columns, or from its `reask` follow-up."""
        follow_up = row.get(REASK)
        if follow_up:
            state = json.loads(follow_up)
            item = self._recorded(state)
            return item, _counted(item, state), state
        item, record = row_item(self.contract, row, self.id_column, self.prompt)
        state = {"record": record, "feedback": [], "retries_used": 0, "requests": 0,
                 "input_tokens": 0, "output_tokens": 0}  # fmt: skip
        return item, _counted(item, state), state

    def _recorded(self, state: Mapping[str, Any]) -> InputItem:
        """The item of the input line a row's state recorded (its id under `id`, whatever the
        rows' `id_column`)."""
        item, _ = row_item(self.contract, state["record"], "id", self.template)
        return item

    # --- the postprocess: a reply -> the row's decision ---

    def http_postprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """The `http_response` body read by the vLLM codec and judged (never raises)."""

        def read() -> Completion:
            body = row.get("http_response")
            with fault_boundary(self.provider.codec, self.provider.redactor):
                if isinstance(body, dict) and "error" in body and "choices" not in body:
                    raise ProviderError(f"the server answered with an error: {body['error']}")
                return self.provider.codec.read(Reply(body, 200), _DOCUMENT_REPLY)

        return self._judged(row, read)

    def vllm_postprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """The engine's `generated_text` judged, its stop reason from `finish_reason` when the
        row has one, else `length` when `num_generated_tokens` reached the row's limit."""

        def read() -> Completion:
            state = json.loads(row[_STATE])
            generated = _count(row, "num_generated_tokens")
            finish = row.get("finish_reason") or (
                _LENGTH if generated >= int(state["max_tokens"]) else _STOP
            )
            usage = Usage(input_tokens=_count(row, "num_input_tokens"), output_tokens=generated)
            said = ChatChoice(str(row.get("generated_text") or ""), None, str(finish))
            return said.completion(usage, self.model, _text(row.get("request_id")))

        return self._judged(row, read)

    def _judged(self, row: Mapping[str, Any], read: Callable[[], Completion]) -> dict[str, Any]:
        try:
            state = _state_of(row)
            item = self._recorded(state)
            item_row = _counted(item, state, sent=True)
        except Exception as error:  # a row the preprocess did not prepare
            failure = error if isinstance(error, BatchInputError) else _not_prepared(row, error)
            return self._columns(row, decide_error(self.contract, self.provider,
                                                   _placeholder(row), failure))  # fmt: skip
        try:
            completion = read()
        except Exception as error:  # an unreadable reply: the row's failure
            return self._columns(row, decide_error(self.contract, self.provider, item_row, error))
        # Judged with no retries left, for the row's line if no second pass asks it again ...
        spent = JobSettings(
            retries=item_row.retries_used, resubmits=0, max_tokens=self.settings.max_tokens,
            enum_case=self.settings.enum_case,
        )  # fmt: skip
        final = decide_reply(
            ItemJob(self.contract, self.provider, spent), item, item_row, completion, None
        )
        columns = self._columns(row, final)
        # ... and with the row's retries, for the follow-up a second pass sends.
        if final.outcome != "ok" and item_row.retries_used < self.settings.retries:
            job = ItemJob(self.contract, self.provider, self.settings)
            live = decide_reply(job, item, item_row, completion, None)
            if live.line is None and live.update.feedback:
                update = live.update
                columns[REASK] = json.dumps({
                    "record": state["record"], "feedback": update.feedback,
                    "retries_used": update.retries_used, "requests": update.requests,
                    "input_tokens": update.input_tokens, "output_tokens": update.output_tokens,
                })  # fmt: skip
        return columns

    def _columns(self, row: Mapping[str, Any], decision: Decision) -> dict[str, Any]:
        return {**decided_row(_id_of(row, self.id_column), decision.line, self.template),
                REASK: None}  # fmt: skip

    # --- after the processor ---

    def finish(self, dataset: Any) -> Any:
        """The processor's output as typed rows: `id`, `sdk.ray.COLUMNS` (and `PROMPT_COLUMNS`
        with an `sdk.Prompt`) and `reask`, every row, the ones that failed before or in the
        engine as failed lines."""
        return dataset.map_batches(self.settle, batch_format="pyarrow", batch_size=None)

    def settle(self, batch: pa.Table) -> pa.Table:
        """One block of the processor's output as typed rows (see `finish`)."""
        rows: list[dict[str, Any]] = batch.to_pylist()
        out = [self.settle_row(row) for row in rows]
        id_type = _id_type(batch, rows, self.id_column)
        named = PROMPT_COLUMNS if self.template is not None else ()
        schema = pa.schema([("id", id_type), *COLUMNS, *named, (REASK, pa.string())])
        return rows_table(out, schema)

    def settle_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """One row of the processor's output (or of any engine's run of the hooks) as the
        typed row's values: its own when the postprocess judged it, else its failed line."""
        if not row.get(_ERROR):
            return dict(row) if "outcome" in row else self._unprepared(row)
        if row.get(_FAILED):  # decided by the preprocess
            columns: dict[str, Any] = json.loads(row[_FAILED])
            return columns
        # The engine failed the row: a provider failure, after what the row had spent.
        error = ProviderError(f"the engine failed the row: {row[_ERROR]}")
        try:
            state = json.loads(row[_STATE])
            item = self._recorded(state)
            item_row = _counted(item, state, sent=True)
        except Exception:
            item_row = _placeholder(row)
        return self._columns(row, decide_error(self.contract, self.provider, item_row, error))

    def _unprepared(self, row: Mapping[str, Any]) -> dict[str, Any]:
        error = BatchInputError(
            f"row {_id_of(row, self.id_column)!r}: the row did not go through the hooks' "
            "postprocess"
        )
        return self._columns(row, decide_error(self.contract, self.provider,
                                               _placeholder(row), error))  # fmt: skip

    def second_pass(self, results: Any, processor: Any, *, token_budget: int) -> SecondPass:
        """Ask again, through `processor`, the rows of `results` (what `finish` gave) that carry
        a follow-up, as many as the job's `token_budget` admits: the tokens every row spent so
        far, plus each admitted row's estimate (what it spent so far again, its feedback being
        its last reply). Rows admitted in id order; the others keep their failed line."""
        import ray

        if token_budget < 0:
            raise ValueError("token_budget must be at least 0")
        spent = results.sum(["input_tokens", "output_tokens"])
        used = int(spent.get("sum(input_tokens)") or 0) + int(spent.get("sum(output_tokens)") or 0)
        waiting = results.filter(lambda row: row[REASK] is not None).take_all()
        waiting.sort(key=lambda row: str(row["id"]))
        admitted: list[dict[str, Any]] = []
        for row in waiting:
            cost = int(row["input_tokens"]) + int(row["output_tokens"])
            if used + cost > token_budget:
                break
            used += cost
            admitted.append({self.id_column: row["id"], REASK: row[REASK]})
        if not admitted:
            return SecondPass(results, 0, len(waiting), used)
        asked = {json.dumps(row[self.id_column]) for row in admitted}
        kept = results.filter(lambda row: json.dumps(row["id"]) not in asked)
        again = self.finish(processor(ray.data.from_items(admitted)))
        return SecondPass(kept.union(again), len(admitted), len(waiting) - len(admitted), used)


@dataclass(frozen=True)
class SecondPass:
    """A second pass: the rows (each id once), how many were asked again, how many the budget
    left failed, and the tokens the job had spent with the admitted estimates."""

    dataset: Any
    asked: int
    skipped: int
    tokens: int


def _engine_inputs(body: dict[str, Any]) -> dict[str, Any]:
    """The chat body as the vLLM engine stage takes it: messages, and the rest (limit,
    structured output, sampling options) as `sampling_params`."""
    params = {key: value for key, value in body.items() if key not in ("model", "messages")}
    return {"messages": body["messages"], "sampling_params": params}


def _counted(item: InputItem, state: Mapping[str, Any], *, sent: bool = False) -> ItemRow:
    """The item's counters from its state (`sent`: with the request just made counted)."""
    return ItemRow(
        seq=0, id=item.id, offset=0, length=0, hash=0, state="pending", submission=None,
        requests=int(state["requests"]) + (1 if sent else 0),
        retries_used=int(state["retries_used"]), resubmits_used=0,
        feedback=[(str(role), str(text)) for role, text in state["feedback"]],
        input_tokens=int(state["input_tokens"]), output_tokens=int(state["output_tokens"]),
        id_number=item.id_number,
    )  # fmt: skip


def _state_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the preprocess left on a row; a row without it (or with it damaged) did not go
    through the preprocess: a `BatchInputError` saying so."""
    said = row.get(_STATE)
    if not said:
        raise _not_prepared(row, f"it has no {_STATE} column")
    state = json.loads(said)
    if not isinstance(state, dict):
        raise _not_prepared(row, f"its {_STATE} is not the preprocess's")
    return state


def _not_prepared(row: Mapping[str, Any], why: object) -> BatchInputError:
    return BatchInputError(
        f"row {plain_value(row.get('id'))!r}: the row did not go through the hooks' "
        f"preprocess ({why})"
    )


def _placeholder(row: Mapping[str, Any]) -> ItemRow:
    """A row that could not be read as an item: its counters at zero."""
    return ItemRow(
        seq=0, id=str(row.get("id")), offset=0, length=0, hash=0, state="pending",
        submission=None, requests=0, retries_used=0, resubmits_used=0, feedback=[],
        input_tokens=0, output_tokens=0,
    )  # fmt: skip


def _id_of(row: Mapping[str, Any], column: str) -> Any:
    return plain_value(row.get(column))


def _id_type(batch: pa.Table, rows: list[dict[str, Any]], column: str) -> pa.DataType:
    ids = [row.get("id", row.get(column)) for row in rows]
    numbers = [value for value in ids if value is not None]
    if numbers and all(map(is_int64, numbers)):
        return pa.int64()
    return pa.string()


def _count(row: Mapping[str, Any], column: str) -> int:
    """A token count the engine wrote: a whole number of at least 0, or none (null, NaN: Ray's
    numpy and pandas batches hold a null count so; a whole float is the integer it was).
    Anything else is the engine's reply unreadable: a `ProviderError` naming the column, as
    the codec's reader says of a body it cannot read."""
    value = plain_value(row.get(column))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProviderError(
            f"unusable reply from the engine: {column} is {value!r:.60}, not a count of tokens"
        )
    return value


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
