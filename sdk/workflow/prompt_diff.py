"""Prompt snapshots and what changed between two versions of a prompt: a diff of its text.

A prompt's snapshot (`Triage.v1.prompt.json`) holds what its fingerprint is made of: name,
version, the system and user templates, and the inputs' JSON Schema. A change is shown the way
a reviewer reads a prompt: a unified diff of the templates' text, then of the inputs.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from sdk._values.records import PromptInfo
from sdk.prompt import Prompt
from sdk.prompt import prompt_fingerprint

__all__ = [
    "PROMPT_SUFFIX",
    "PromptDiff",
    "diff_prompts",
    "load_prompt_snapshot",
    "prompt_snapshot_bytes",
    "prompt_snapshot_name",
]

PROMPT_SUFFIX = ".prompt.json"
"""The end of a prompt snapshot's file name: `Triage.v1.prompt.json`."""
_KEYS = ("name", "version", "system", "template", "inputs")


def prompt_snapshot_name(prompt: type[Prompt]) -> str:
    """The snapshot file of a prompt: `Triage.v1.prompt.json`."""
    return f"{prompt.name}.v{prompt.version}{PROMPT_SUFFIX}"


def prompt_snapshot_bytes(prompt: type[Prompt]) -> bytes:
    """Deterministic, reviewable bytes: sorted keys, two-space indent, final newline."""
    return (json.dumps(prompt.snapshot(), indent=2, sort_keys=True) + "\n").encode()


def load_prompt_snapshot(path: Path) -> dict[str, Any]:
    """A prompt snapshot read back (`ValueError` naming the file for anything else)."""
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(data, dict) or set(data) != set(_KEYS):
        raise ValueError(f"{path}: not a prompt snapshot (keys {', '.join(_KEYS)})")
    if not isinstance(data["template"], str) or not isinstance(data["system"], (str, type(None))):
        raise ValueError(f"{path}: not a prompt snapshot (the templates are text)")
    return data


def snapshot_info(snapshot: Mapping[str, Any]) -> PromptInfo:
    """Name, version and fingerprint of a snapshot read back."""
    return PromptInfo(snapshot["name"], snapshot["version"], prompt_fingerprint(snapshot))


@dataclass(frozen=True)
class PromptDiff:
    """Two versions of a prompt and the unified diff of their text."""

    old: PromptInfo | None
    """`None`: the prompt was not locked yet."""
    new: PromptInfo
    lines: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.old is not None and self.old.fingerprint == self.new.fingerprint

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.new.name,
            "old": self.old.to_json() if self.old else None,
            "new": self.new.to_json(),
            "diff": self.lines,
        }


def diff_prompts(old: Mapping[str, Any] | None, new: type[Prompt]) -> PromptDiff:
    """Compare a locked snapshot (`None`: not locked yet) with a prompt class."""
    current = new.snapshot()
    before = _readable(old) if old is not None else []
    label = f"{old['name']} v{old['version']}" if old is not None else "(not locked)"
    lines = list(
        difflib.unified_diff(
            before, _readable(current), label, f"{new.name} v{new.version}", lineterm=""
        )
    )
    return PromptDiff(snapshot_info(old) if old is not None else None, new.info(), lines)


def _readable(content: Mapping[str, Any]) -> list[str]:
    """A prompt's content as a reviewer reads it: each template, then the inputs."""
    lines: list[str] = []
    if content.get("system") is not None:
        lines += ["[system]", *str(content["system"]).splitlines(), ""]
    lines += ["[template]", *str(content["template"]).splitlines(), ""]
    inputs = json.dumps(content.get("inputs"), indent=2, sort_keys=True)
    return [*lines, "[inputs]", *inputs.splitlines()]
