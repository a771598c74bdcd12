"""What a contract check returns: one result per property, PASS / FAIL / SKIP with its numbers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PropertyResult:
    """One property's outcome: ``passed`` is True, False, or None (skipped: not applicable)."""

    name: str
    passed: bool | None
    detail: str  # what was checked, why it failed, or why it was skipped
    numbers: dict[str, float] = field(default_factory=dict)  # e.g. max_abs_diff, tolerance

    @property
    def status(self) -> str:
        return "SKIP" if self.passed is None else "PASS" if self.passed else "FAIL"

    def line(self) -> str:
        numbers = ", ".join(f"{k}={v:.3g}" for k, v in self.numbers.items())
        return f"{self.status}  {self.name}: {self.detail}" + (f" ({numbers})" if numbers else "")


@dataclass(frozen=True)
class CheckReport:
    """Every property's result for one encoding, in :data:`PROPERTIES` order."""

    encoding: str  # the name, spec or class it was given (an encoding's, or a task's)
    kind: str  # the encoding's kind, or "task"
    results: tuple[PropertyResult, ...]

    @property
    def passed(self) -> bool:
        """True when no property failed (skipped ones do not count against it)."""
        return all(r.passed is not False for r in self.results)

    @property
    def failures(self) -> list[PropertyResult]:
        return [r for r in self.results if r.passed is False]

    def __getitem__(self, name: str) -> PropertyResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "encoding": self.encoding,
            "kind": self.kind,
            "passed": self.passed,
            "results": [dataclasses.asdict(r) | {"status": r.status} for r in self.results],
        }

    def __str__(self) -> str:
        head = f"{self.encoding} ({self.kind}): {'passed' if self.passed else 'FAILED'}"
        return "\n".join([head, *("  " + r.line() for r in self.results)])

    def raise_for_failures(self) -> None:
        """Raise AssertionError listing the failed properties (for a test suite)."""
        if not self.passed:
            raise AssertionError(
                f"{self.encoding} fails the posenc contract:\n" + "\n".join(r.line() for r in self.failures)
            )
