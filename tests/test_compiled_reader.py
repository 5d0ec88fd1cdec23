"""The streaming reader's two builds (`sdk.parsing._reader_build`): the source and the module
mypyc compiles from it (`make` builds it; `scripts/compile_reader.py`). Both must hand out the
same snapshots at the same chunks, fail on the same character with the same message, and pickle
and copy alike; a compiled module older than its source must never run.

`make test` sets SDK_COMPILED_READER=required, so a build that silently fell back to the source
fails here instead of passing every other test on the slower reader.
"""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import itertools
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from bench.payloads import invoice
from contracts import Decision
from contracts import InvoiceExtraction
from sdk import InvalidJSON
from sdk.parsing import _reader_build
from sdk.parsing import incremental as loaded

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "sdk" / "parsing" / "incremental.py"

compiled_only = pytest.mark.skipif(
    not _reader_build.compiled_reader_loaded(),
    reason="the reader is not compiled here (make builds it)",
)


def _source_build() -> ModuleType:
    """The reader run from its source, beside whichever build `sdk` loaded."""
    name = "sdk_reader_from_source"
    spec = importlib.util.spec_from_file_location(
        name, SOURCE, loader=importlib.machinery.SourceFileLoader(name, str(SOURCE))
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses and pickle look a module up by name)
    spec.loader.exec_module(module)
    return module


SOURCE_BUILD = _source_build()


def test_make_test_runs_the_compiled_reader() -> None:
    if os.environ.get("SDK_COMPILED_READER") != "required":
        pytest.skip("only where the compiled reader is required (make test)")
    assert _reader_build.compiled_reader_loaded(), (
        f"sdk.parsing.incremental was loaded from {loaded.__file__}: run "
        "scripts/compile_reader.py (make does)"
    )


def _run(module: ModuleType, contract: Any, chunks: list[str]) -> list[Any]:
    """Everything a consumer sees: per chunk the snapshot's value, completeness and open
    pointer (or None), then `finish`'s; or where it failed and how."""
    reader = module.PartialReader(contract, attempt=2)
    seen: list[Any] = []
    try:
        for chunk in chunks:
            shown = reader.feed(chunk)
            seen.append(
                None
                if shown is None
                else (shown.value, shown.complete, shown.open_pointer, shown.attempt)
            )
        final = reader.finish()
        seen.append((final.value, final.complete, final.open_pointer))
    except InvalidJSON as error:
        seen.append(("InvalidJSON", str(error), error.position, error.text))
    return seen


def _both(contract: Any, chunks: list[str]) -> None:
    assert _run(loaded, contract, chunks) == _run(SOURCE_BUILD, contract, chunks)


def _chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


@compiled_only
@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 64, 4096])
def test_both_builds_show_the_same_snapshots_of_an_invoice(size: int) -> None:
    _both(InvoiceExtraction, _chunked(invoice(6_000).text, size))


@compiled_only
@settings(max_examples=150, deadline=None)
@given(
    value=_json_values,
    ensure_ascii=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    data=st.data(),
)
def test_both_builds_agree_on_any_json_cut_anywhere(
    value: Any, ensure_ascii: bool, indent: int | None, data: st.DataObject
) -> None:
    document = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(document)), max_size=12))
    bounds = sorted({0, len(document), *cuts})
    _both(Decision, [document[a:b] for a, b in itertools.pairwise(bounds)])


# Inserted into a document, then the text cut after it: a wrong character, a cut escape, number
# or literal, a control character.
JUNK = ["", "}", "]", ",", ":", '"', "\\", "x", "\\u12", "1e", "-", "tru", "\x00"]


@compiled_only
@settings(max_examples=150, deadline=None)
@given(
    value=_json_values,
    where=st.integers(min_value=0, max_value=10_000),
    junk=st.sampled_from(JUNK),
    size=st.sampled_from([1, 3, 16]),
)
def test_both_builds_fail_alike_on_damaged_or_cut_text(
    value: Any, where: int, junk: str, size: int
) -> None:
    document = json.dumps({"reasoning": value, "answer": "approve"})
    at = where % (len(document) + 1)
    _both(Decision, _chunked(document[:at] + junk + document[at:][: len(junk)], size))


@compiled_only
def test_both_builds_fail_alike_on_a_document_nested_past_the_limit() -> None:
    from sdk.parsing import MAX_DEPTH

    _both(Decision, _chunked("[" * (MAX_DEPTH + 5), 16))


@pytest.mark.parametrize("module", [loaded, SOURCE_BUILD], ids=["loaded", "source"])
def test_snapshots_and_readers_pickle_and_copy_mid_stream(module: ModuleType) -> None:
    reader = module.PartialReader(Decision)
    shown = reader.feed('{"reasoning": "half a sen')
    for again in (pickle.loads(pickle.dumps(shown)), copy.copy(shown), copy.deepcopy(shown)):
        assert (again.value, again.complete) == (shown.value, shown.complete)
    twin = pickle.loads(pickle.dumps(reader))
    rest = 'tence", "answer": "approve", "confidence": "high"}'
    assert twin.feed(rest).value == reader.feed(rest).value
    assert (
        twin.finish().value
        == reader.finish().value
        == {
            "reasoning": "half a sentence",
            "answer": "approve",
            "confidence": "high",
        }
    )


def _probe(package_copy: Path) -> tuple[list[str], str]:
    """Import the reader from a copy of the package: which file ran, whether it was edited
    after the build, whether `compiled_reader_loaded()` says compiled, whether the package has
    the attribute; and what was warned."""
    probe = (
        "import warnings; warnings.simplefilter('always')\n"
        "import sdk.parsing, sdk.parsing.incremental as m\n"
        "from sdk.parsing import _reader_build\n"
        "print(m.__file__, getattr(m, 'EDITED_AFTER_THE_BUILD', False),\n"
        "      _reader_build.compiled_reader_loaded(), sdk.parsing.incremental is m)"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=package_copy,
        env={**os.environ, "PYTHONPATH": str(package_copy)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split(), run.stderr


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the package with its compiled reader and the build's record."""
    shutil.copytree(ROOT / "sdk", tmp_path / "sdk", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@compiled_only
def test_a_current_compiled_reader_runs(package_copy: Path) -> None:
    seen, warned = _probe(package_copy)
    assert seen[1:] == ["False", "True", "True"]
    assert "RuntimeWarning" not in warned


@compiled_only
def test_a_compiled_reader_older_than_its_source_is_passed_over(package_copy: Path) -> None:
    edited = package_copy / "sdk" / "parsing" / "incremental.py"
    edited.write_text(edited.read_text() + "\nEDITED_AFTER_THE_BUILD = True\n")
    seen, warned = _probe(package_copy)
    assert seen == [str(edited), "True", "False", "True"]
    assert "was built from other files than these" in warned


@compiled_only
def test_an_edited_module_the_reader_imports_makes_the_build_stale(package_copy: Path) -> None:
    # mypyc builds `MAX_DEPTH` (a `Final` of `_limits`) into the reader as a C constant: an edit
    # of `_limits.py` alone must pass the build over too, or the two builds would disagree.
    limits = package_copy / "sdk" / "parsing" / "_limits.py"
    limits.write_text(limits.read_text().replace("MAX_DEPTH: Final = ", "MAX_DEPTH: Final = 4 or "))
    seen, warned = _probe(package_copy)
    assert seen[0].endswith("incremental.py") and seen[2] == "False"
    assert "was built from other files than these" in warned


@compiled_only
def test_a_build_missing_a_file_falls_back_to_the_source(package_copy: Path) -> None:
    for runtime in (package_copy / "sdk" / "parsing").glob("incremental__mypyc*"):
        runtime.unlink()
    seen, warned = _probe(package_copy)
    assert seen[0].endswith("incremental.py") and seen[2:] == ["False", "True"]
    assert "does not load" in warned


@compiled_only
def test_a_damaged_record_passes_the_build_over(package_copy: Path) -> None:
    (package_copy / "sdk" / "parsing" / _reader_build.BUILT_FROM).write_text("{not json")
    seen, warned = _probe(package_copy)
    assert seen[0].endswith("incremental.py")
    assert "was built from other files than these" in warned


def test_the_build_records_the_reader_and_every_sdk_module_it_imports() -> None:
    inputs = {path.relative_to(ROOT).as_posix() for path in _reader_build.build_inputs(ROOT)}
    assert {"sdk/parsing/incremental.py", "sdk/parsing/_limits.py", "sdk/errors.py"} <= inputs
    assert all(name.startswith("sdk/") and name.endswith(".py") for name in inputs)
    recorded = _reader_build.record(ROOT)
    assert set(recorded["inputs"]) == inputs
