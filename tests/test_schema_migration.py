"""Reading values stored under an older schema version: `migrate_from` steps and `from_stored`."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from pydantic import Field
from pydantic import ValidationError

from sdk import Contract
from sdk import WireEnum
from sdk.workflow.diff import ChangeKind
from sdk.workflow.diff import Impact
from sdk.workflow.diff import diff_schemas


class Answer(WireEnum):
    APPROVE = "approve"
    REJECT = "reject"
    ESCALATE = "escalate"


class TicketV1(Contract):
    """A ticket decision, as first released."""

    reasoning: str = Field(description="Why.")
    answer: Answer = Field(description="The decision.")


class Ticket(Contract):
    """A ticket decision: v2 renamed `answer` to `decision`, v3 added `policy`."""

    schema_version = 3

    reasoning: str = Field(description="Why.")
    decision: Answer = Field(description="The decision.")
    policy: str | None = Field(description="The policy clause applied, or null.")

    @classmethod
    def migrate_from(cls, version: int, data: dict[str, Any]) -> dict[str, Any]:
        if version == 1:  # v2 renamed answer -> decision
            data["decision"] = data.pop("answer")
            return data
        if version == 2:  # v3 added policy; old values did not record one
            data["policy"] = None
            return data
        return super().migrate_from(version, data)


STORED_V1 = {"reasoning": "Within the refund window.", "answer": "approve"}


def test_a_v1_value_reads_into_the_current_version_step_by_step() -> None:
    # The stored value really is a v1 value: valid against the v1 schema, invalid against v3.
    jsonschema.validate(STORED_V1, TicketV1.json_schema())
    assert not jsonschema.Draft202012Validator(Ticket.json_schema()).is_valid(STORED_V1)

    value = Ticket.from_stored(json.dumps(STORED_V1), version=1)

    assert value == Ticket(
        reasoning="Within the refund window.", decision=Answer.APPROVE, policy=None
    )
    current = value.model_dump(mode="json")
    jsonschema.validate(current, Ticket.json_schema())
    # and round-trips as a current value
    assert Ticket.from_stored(current, version=Ticket.schema_version) == value


def test_the_diff_says_which_changes_needed_the_migration() -> None:
    diff = diff_schemas(TicketV1.json_schema(), Ticket.json_schema())
    needs_migration = {c.kind for c in diff.changes if c.consumers is Impact.BREAKING}
    assert needs_migration == {ChangeKind.FIELD_REMOVED, ChangeKind.FIELD_ADDED_REQUIRED}


def test_the_callers_data_is_left_alone() -> None:
    stored = dict(STORED_V1)
    Ticket.from_stored(stored, version=1)
    assert stored == STORED_V1


def test_a_version_without_a_migration_says_which_step_is_missing() -> None:
    class Plain(Contract):
        schema_version = 2
        text: str = Field(description="Text.")

    # A value that still reads needs no migration; one that does not names the missing step.
    assert Plain.from_stored({"text": "x"}, version=1).text == "x"
    with pytest.raises(NotImplementedError, match="no migration from version 1 to 2") as raised:
        Plain.from_stored({"body": "x"}, version=1)
    assert isinstance(raised.value.__cause__, ValidationError)


def test_a_value_from_a_newer_version_is_refused() -> None:
    with pytest.raises(ValueError, match="newer than this code's v3"):
        Ticket.from_stored({}, version=4)


def test_a_migration_that_forgets_a_field_fails_validation() -> None:
    class Careless(Ticket):
        @classmethod
        def migrate_from(cls, version: int, data: dict[str, Any]) -> dict[str, Any]:
            return data  # renames nothing, adds nothing

    with pytest.raises(ValidationError):
        Careless.from_stored(STORED_V1, version=1)


def test_stored_values_are_read_with_full_strictness() -> None:
    with pytest.raises(ValidationError):  # a case variant is not a wire name
        Ticket.from_stored({**STORED_V1, "answer": "Approve"}, version=1)
