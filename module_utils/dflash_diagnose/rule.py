"""One row of the diagnosis table: a line pattern and what it means."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One row of the table: a line pattern and what it means."""

    name: str
    cause: str
    priority: int
    pattern: re.Pattern
    summary: str
    remedy: str
    weak: bool = False
    # a match is dropped when the line also matches this (e.g. generic rules vs specific ones)
    unless: re.Pattern | None = None


def _rx(p: str) -> re.Pattern:
    return re.compile(p, re.IGNORECASE)
