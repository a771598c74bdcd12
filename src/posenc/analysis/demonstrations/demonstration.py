"""What a demonstration returns, and how its numbers are written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Demonstration:
    key: str
    title: str  # what is computed, one line
    rows: tuple[tuple[str, str], ...]  # (quantity, value) as a terminal or the report shows them
    facts: Mapping[str, bool]  # named findings; each claim of the notes rests on one
    numbers: Mapping[str, float] = field(default_factory=dict)  # raw numbers (tests, JSON, claim text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "rows": [list(r) for r in self.rows],
            "facts": dict(self.facts),
            "numbers": dict(self.numbers),
        }


def small(value: float) -> str:
    """3 significant digits, or scientific notation for tiny and huge values."""
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e5 else f"{value:.2e}"


def vector(values: Iterable[float], digits: int = 3) -> str:
    """``[0.841, 0.540, ...]``."""
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"


__all__ = ["Demonstration", "small", "vector"]
