"""`conforms`: whether a value is of a declared setting's type, each annotation's check made
once and kept (`sdk._values.declared`). The answers are the type's, the first time and every
time after, for every shape a declaration takes, and for an annotation that cannot be kept
(unhashable metadata)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Annotated
from typing import Any
from typing import Literal
from typing import Protocol

import pytest

from sdk._values.declared import bounds_of
from sdk._values.declared import check
from sdk._values.declared import conforms


class Store(Protocol):
    def get(self, key: str) -> object: ...


class Dict:
    def get(self, key: str) -> object:
        return key


CASES: list[tuple[object, Any, bool]] = [
    (1, int, True), (True, int, False), (1.5, int, False),
    (1, float, True), (1.5, float, True), (False, float, False),
    (None, int | None, True), (0, None, False), ("x", Any, True),
    (1, Literal[1, "a"], True), (True, Literal[1], False), ("b", Literal["a"], False),
    ((1, 2), Sequence[int], True), ([1, "2"], Sequence[int], False), ("12", Sequence[str], False),
    (b"12", list[int], False), ([[1], [2]], list[list[int]], True),
    ({"a": 1}, Mapping[str, int], True), ({1: 1}, dict[str, int], False),
    ([("a", 1)], Mapping, False),
    (len, Callable[[str], int], True), (3, Callable[..., Any], False),
    (Dict(), Store, True), (Dict, Store, False), (object(), Store, False),
    (3, Annotated[int, "a note"], True), ("3", Annotated[int, "a note"], False),
    ([3], Annotated[list[int], {"unhashable": "metadata"}], True),
    (["3"], Annotated[list[int], {"unhashable": "metadata"}], False),
    ("x", str | int | None, True), (None, str | int | None, True), (True, int | str, False),
    (2.5, str | float, True), ("x", Any | None, True), (None, Any | None, True),
    (5, bool | Literal["a"], False), (True, bool | Literal["a"], True),
]  # fmt: skip


@pytest.mark.parametrize(("value", "annotation", "expected"), CASES)
def test_conforms_answers_as_the_type_says_every_time(
    value: object, annotation: Any, expected: bool
) -> None:
    assert [conforms(value, annotation) for _ in range(3)] == [expected] * 3


def test_a_kept_check_is_the_annotation_s_own() -> None:
    """Annotations equal as keys are the same type: a check kept for one answers for the other
    (`Literal[1]` and `Literal[True]` are not equal: each keeps its own)."""
    assert conforms(1, Literal[1]) and not conforms(1, Literal[True])
    assert conforms(True, Literal[True]) and not conforms(True, Literal[1])
    assert conforms(None, int | None) and conforms(None, int | None)


def test_bounds_are_read_from_an_annotation_that_cannot_be_kept() -> None:
    class AtLeast:
        text = "at least 2"

        def holds(self, value: object) -> bool:
            return isinstance(value, int) and value >= 2

        __hash__ = None  # type: ignore[assignment]

    declared = Annotated[int, AtLeast()]
    assert len(bounds_of(declared)) == 1
    check("n", 2, declared)
    with pytest.raises(ValueError, match="n must be at least 2, not 1"):
        check("n", 1, declared)
