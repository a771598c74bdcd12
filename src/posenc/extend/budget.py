"""What the work of ``posenc extend`` costs on a CPU: a model of seconds fitted to measured passes,
and the cost of a set of prompts with and without sharing their beginnings through the KV cache.

A forward pass over tokens ``start .. stop`` (the first ``start`` cached) costs its dense-layer
FLOPs at one rate and its attention FLOPs at another (:meth:`posenc.extend.plan.Shape.split`),
plus a fixed overhead per call of the model (what dominates a greedy decoding step of one
token). :func:`fit` finds the three from measured passes by least squares
(``scripts/extend_costs.py`` measures them); :class:`CostModel` then prices a text pass, a prompt
and its answer, and a set of prompts in :func:`posenc.extend.haystacks.prefill_order`, where each
prompt's prefill starts after what it shares with the one before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from posenc.core.errors import PosencError
from posenc.extend.haystacks import Prompt
from posenc.extend.plan import Shape


@dataclass(frozen=True)
class CostModel:
    """Seconds of one thread. A prefill: dense layers at ``dense`` and attention at ``attention``
    GFLOP/s, ``call`` seconds per call of the model (a call feeds ``chunk`` tokens). A greedy
    decoding step after ``c`` cached tokens: ``step + step_per_token * c`` seconds (one query
    reads the whole KV cache: slower per FLOP than a prefill, so it is fitted on its own)."""

    dense: float
    attention: float
    call: float
    chunk: int
    step: float
    step_per_token: float
    where: str

    def seconds(self, shape: Shape, start: int, stop: int, *, logits: bool) -> float:
        """One thread's seconds to feed tokens ``start .. stop`` after ``start`` cached, in chunks."""
        dense, attention = shape.split(start, stop, logits=logits)
        calls = max(1, -(-(stop - start) // self.chunk))
        return dense / 1e9 / self.dense + attention / 1e9 / self.attention + calls * self.call

    def text_pass(self, shape: Shape, length: int) -> float:
        """A perplexity pass: every position's logits over ``length`` tokens."""
        return self.seconds(shape, 0, length, logits=True)

    def answer(self, length: int, budget: int) -> float:
        """``budget`` greedy decoding steps after a prompt of ``length`` tokens."""
        return budget * (self.step + self.step_per_token * (length + (budget - 1) / 2))

    def prompt(self, shape: Shape, length: int, budget: int, shared: int = 0) -> float:
        """A prompt of ``length`` tokens whose first ``shared`` are cached, and its answer."""
        return self.seconds(shape, shared, length, logits=False) + self.answer(length, budget)

    def prompts(self, shape: Shape, order: Sequence[tuple[Prompt, int]]) -> tuple[float, float]:
        """``(shared, alone)``: seconds of the prompts fed in ``order`` (each after what it shares
        with the one before it), and of each fed from scratch."""
        shared = sum(self.prompt(shape, p.length, p.budget, s) for p, s in order)
        alone = sum(self.prompt(shape, p.length, p.budget) for p, _ in order)
        return shared, alone


def _steps(steps: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """``(step, step_per_token)`` of a line through measured ``(cached tokens, seconds)`` steps."""
    if not steps:
        raise PosencError("fit needs measured decoding steps (passes of one token after a prompt)")
    if len({c for c, _ in steps}) < 2:
        return float(np.mean([s for _, s in steps])), 0.0
    slope, intercept = np.polyfit([c for c, _ in steps], [s for _, s in steps], 1)
    return float(max(0.0, intercept)), float(max(0.0, slope))


def fit(shape: Shape, passes: Sequence[tuple[int, int, bool, float]], *, chunk: int, where: str) -> CostModel:
    """The cost model that best fits measured ``(start, stop, logits, seconds)`` passes. Prefills
    (more than one token): least squares on the relative error (a pass of 10 s counts as much as
    one of 200 s), with dense FLOPs, attention FLOPs and calls as the three terms. Decoding steps
    (one token): a line in the number of cached tokens."""
    prefills = [p for p in passes if p[1] - p[0] > 1]
    if len(prefills) < 3:
        raise PosencError(f"fit needs 3 or more measured prefills, got {len(prefills)}")
    rows, ones = [], []
    for start, stop, logits, measured in prefills:
        if measured <= 0:
            raise PosencError(
                f"a measured pass must take a positive time, got {measured} s for {start}..{stop}"
            )
        dense, attention = shape.split(start, stop, logits=logits)
        calls = max(1, -(-(stop - start) // chunk))
        rows.append([dense / 1e9 / measured, attention / 1e9 / measured, calls / measured])
        ones.append(1.0)
    solution, *_ = np.linalg.lstsq(np.asarray(rows), np.asarray(ones), rcond=None)
    per_dense, per_attention, call = (float(x) for x in solution)
    if per_dense <= 0 or per_attention <= 0:
        raise PosencError(
            f"the measured passes do not fit a positive rate (seconds per GFLOP {solution}); measure more lengths"
        )
    step, per_token = _steps([(start, seconds) for start, stop, _, seconds in passes if stop - start == 1])
    return CostModel(1 / per_dense, 1 / per_attention, max(0.0, call), chunk, step, per_token, where)


__all__ = ["CostModel", "fit"]
