"""The questions a profile declares, and its plan for adding seeds until they are decided: data that
the harness (``posenc compare``) keeps with a run and the statistics (:mod:`posenc.results.primary`)
read back, so both halves of the benchmark share one definition.

A profile's *primary questions* are a few contrasts it exists to answer: each encoding of
``against`` (default: every other encoding of the profile) against the ``reference`` encoding, in each
column of ``primary`` (``TASK:COLUMN``, e.g. ``copy:tok_1.25x``, ``lm:bpb_train``). Their error rate is
controlled as one family (``correction``: Holm's method at ``alpha``); every other cell and pair of a
table is exploratory. ``tests`` names each task's test (:data:`TESTS`): Welch's test over independent
seeds or the paired t test over seeds paired by seed number, each alone or ``-exact`` (its p-value never
below the exact permutation or sign-flip test's, which holds for any distribution of seed outcomes,
all-or-nothing ones included, and cannot go below ``2 / C(2n, n)`` or ``2 / 2^n``).

A :class:`SequentialSpec` fixes, before any run, after how many seeds the questions are looked at
(``looks``) and how the error rate is spent over the looks (``spending``): ``posenc compare --until
decided`` adds seeds look by look and stops once every question is decided (:mod:`posenc.results.sequential`).
A look's seeds are the first ``look`` of the profile's ``seeds``, continued by the integers after
its last (:func:`look_seeds`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: The tests a task's questions may use.
TESTS = ("welch", "welch-exact", "paired", "paired-exact")
#: The family corrections a profile may declare.
CORRECTIONS = ("holm",)
#: Spending functions of a sequential plan (Lan & DeMets 1983: O'Brien & Fleming 1979; Pocock 1977).
SPENDING = ("obrien-fleming", "pocock")
DEFAULT_TEST = "welch"


@dataclass(frozen=True)
class Questions:
    """A profile's primary questions (``reference`` empty: none declared; every comparison is then
    exploratory)."""

    reference: str = ""  # the encoding every question compares with
    against: tuple[str, ...] | None = None  # None: every other encoding of the profile
    primary: tuple[str, ...] = ()  # "TASK:COLUMN" of posenc.results.stats.columns(TASK)
    tests: dict[str, str] = field(default_factory=dict)  # task -> one of TESTS (default: welch)
    correction: str = "holm"
    alpha: float = 0.05

    @property
    def declared(self) -> bool:
        return bool(self.reference)

    def test(self, task: str) -> str:
        return self.tests.get(task, DEFAULT_TEST)

    def columns(self) -> list[tuple[str, str]]:
        """``(task, column)`` of each primary column."""
        return [tuple(item.split(":", 1)) for item in self.primary]  # type: ignore[misc]

    def to_dict(self) -> dict[str, Any]:
        return json_ready(self)

    @classmethod
    def from_dict(cls, data: Any) -> Questions:
        """The questions a ``run.json`` holds (an empty one where it holds none or not these keys)."""
        if not isinstance(data, dict):
            return cls()
        against = data.get("against")
        return cls(
            reference=str(data.get("reference") or ""),
            against=None if against is None else tuple(str(a) for a in against),
            primary=tuple(str(p) for p in data.get("primary") or ()),
            tests={str(k): str(v) for k, v in (data.get("tests") or {}).items()},
            correction=str(data.get("correction") or "holm"),
            alpha=float(data.get("alpha", 0.05)),
        )


@dataclass(frozen=True)
class SequentialSpec:
    """A profile's plan for ``--until decided`` (``looks`` empty: none)."""

    looks: tuple[int, ...] = ()  # seeds per encoding at each look, increasing, the first at least 3
    spending: str = "pocock"

    @property
    def declared(self) -> bool:
        return bool(self.looks)

    def to_dict(self) -> dict[str, Any]:
        return json_ready(self)

    @classmethod
    def from_dict(cls, data: Any) -> SequentialSpec:
        if not isinstance(data, dict):
            return cls()
        return cls(tuple(int(k) for k in data.get("looks") or ()), str(data.get("spending") or "pocock"))


def json_ready(obj: Any) -> dict[str, Any]:
    """A frozen dataclass of these as a JSON-ready dict (tuples as lists)."""
    out = dataclasses.asdict(obj)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def look_seeds(seeds: Sequence[int], look: int) -> tuple[int, ...]:
    """A look's seeds after ``look`` seeds: the first ``look`` of ``seeds``, continued by the
    integers after the largest of them."""
    order = list(dict.fromkeys(int(s) for s in seeds))
    nxt = max(order, default=-1) + 1
    while len(order) < look:
        order.append(nxt)
        nxt += 1
    return tuple(order[:look])
