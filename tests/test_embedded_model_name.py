"""`EmbeddedProvider(model=...)` that names no model: a typed error saying what `model` takes
(issue 32: the embedded model by name or by its file), before any model is loaded."""

from __future__ import annotations

import pytest

from sdk.providers.embedded import EmbeddedProvider


@pytest.mark.parametrize("model", [5, 2.5, b"gemma3-270m", ["gemma3-270m"]])
def test_a_model_that_is_not_a_name_or_a_path_says_what_model_takes(model: object) -> None:
    """On main: a bare `expected str, bytes or os.PathLike object, not int` from `Path()`
    (bytes: a FileNotFoundError for the path b'gemma3-270m')."""
    with pytest.raises(TypeError) as refused:
        EmbeddedProvider(model=model)  # type: ignore[arg-type]
    message = str(refused.value)
    assert repr(model) in message and "smollm2-135m" in message and "gemma3-270m" in message


def test_an_empty_model_name_is_not_read_as_the_current_directory() -> None:
    """On main: `no GGUF model file at .` (the empty path read as the working directory)."""
    with pytest.raises(FileNotFoundError) as refused:
        EmbeddedProvider(model="")
    assert "no GGUF model file at ''" in str(refused.value)
