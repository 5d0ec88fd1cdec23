"""A contract class is refused when it is defined with a `schema_version` that is not a whole
number from 1, or a field named like a `Contract` attribute (which would turn optional)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from sdk import Contract
from sdk.contract import ContractDefinitionError
from sdk.contract._base import RESERVED_NAMES
from sdk.workflow.versioning import lock
from tests.schema_support import REPO
from tests.schema_support import contract
from tests.schema_support import make_package


def _define(name: str, namespace: dict[str, Any]) -> type[Contract]:
    with warnings.catch_warnings():
        # Pydantic warns first that a field shadows a parent attribute; the refusal is ours.
        warnings.simplefilter("ignore", UserWarning)
        return type(Contract)(name, (Contract,), {"__module__": __name__, **namespace})


@pytest.mark.parametrize(
    ("version", "error", "says"),
    [
        ("2", TypeError, "must be a whole number, not '2'"),
        (True, TypeError, "must be a whole number, not True"),
        (2.0, TypeError, "must be a whole number, not 2.0"),
        (0, ValueError, "must be at least 1, not 0"),
        (-1, ValueError, "must be at least 1, not -1"),
    ],
)
def test_a_bad_schema_version_is_refused_when_the_class_is_defined(
    version: object, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=rf"^Versioned\.schema_version {says}"):
        _define("Versioned", {"__annotations__": {"x": "int"}, "schema_version": version})


def test_a_good_schema_version_is_kept() -> None:
    assert (
        _define("Versioned", {"__annotations__": {"x": "int"}, "schema_version": 3}).schema_version
        == 3
    )


def test_a_bad_version_set_after_the_class_is_refused_before_a_lock_writes_it(
    tmp_path: Path,
) -> None:
    # The attribute can be set later (as tests.schema_support.contract does): the schema is not
    # built, so nothing is snapshotted or locked under it.
    thing = contract(x=(int, Field(description="X.")))
    thing.schema_version = "2"  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"Thing\.schema_version must be a whole number"):
        thing.json_schema()
    package = make_package(
        tmp_path,
        {"models.py": "from sdk import Contract\n\nclass P(Contract):\n    x: int\n\n"}
        | {"__init__.py": "from .models import P\n\nP.schema_version = -1\n"},
    )
    with pytest.raises(ValueError, match=r"P\.schema_version must be at least 1, not -1"):
        lock(package)
    assert list((tmp_path / package).glob("schemas/*.json")) == []


def test_the_reserved_names_are_the_contract_attributes() -> None:
    names = {"fingerprint", "from_stored", "json_schema", "lint_ignore", "migrate_from"}
    assert names | {"schema_version"} == RESERVED_NAMES


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_a_field_named_like_a_contract_attribute_is_refused(name: str) -> None:
    # The same error as every other rule a class definition breaks (a TypeError subclass).
    with pytest.raises(
        ContractDefinitionError,
        match=rf"^Signed has a field named '{name}', the name of a Contract attribute",
    ):
        _define("Signed", {"__annotations__": {name: "str"}})


def test_a_schema_version_field_is_refused_with_how_to_set_the_version() -> None:
    with pytest.raises(TypeError, match=r"assign it without an annotation: schema_version = 2"):
        _define("Signed", {"__annotations__": {"schema_version": "int"}, "schema_version": 2})


def test_a_classvar_schema_version_is_not_a_field() -> None:
    versioned = _define(
        "Versioned",
        {"__annotations__": {"schema_version": "ClassVar[int]", "x": "int"}, "schema_version": 2},
    )
    assert versioned.schema_version == 2
    assert list(versioned.model_fields) == ["x"]


def test_the_cli_names_the_class_statement_of_a_refused_contract(tmp_path: Path) -> None:
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from sdk import Contract\n\n\nclass P(Contract):\n    x: int\n    schema_version = '2'\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "schema", "lock", "app"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "error: app/__init__.py:4: cannot import app: TypeError: P.schema_version must be a "
        "whole number, not '2'"
    )
