"""The grounding builders' error."""

from __future__ import annotations

__all__ = ["GroundingUnsupported"]


class GroundingUnsupported(ValueError):
    """A grounded string sits where a grounded grammar cannot be written (checked after instead)."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(f"{pointer or '/'}: {reason}")
        self.pointer = pointer
        self.reason = reason
