"""What the work of ``posenc extend`` costs on a CPU: a model of seconds fitted to measured passes,
and the cost of a set of prompts with and without sharing their beginnings through the KV cache.

A forward pass over tokens ``start .. stop`` (the first ``start`` cached) costs its dense-layer
FLOPs at one rate and its attention FLOPs at another (:meth:`Shape.split`),
plus a fixed overhead per call of the model (what dominates a greedy decoding step of one
token). :func:`fit` finds the three from measured passes by least squares
(``scripts/extend_costs.py`` measures them); :class:`CostModel` then prices a text pass, a prompt
and its answer, and a set of prompts in :func:`posenc.extend.haystacks.prefill_order`, where each
prompt's prefill starts after what it shares with the one before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.core.errors import PosencError
from posenc.extend.haystacks import Prompt


@dataclass(frozen=True)
class Shape:
    """What the cost and memory of a pass depend on, read from the model's config."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    parameters: int

    @classmethod
    def of(cls, config: Any, parameters: int) -> Shape:
        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        return cls(
            layers=int(config.num_hidden_layers),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or hidden // heads),
            hidden=hidden,
            intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
            vocab=int(config.vocab_size),
            parameters=int(parameters),
        )

    def split(self, start: int, stop: int, *, logits: bool = True) -> tuple[float, float]:
        """``(dense, attention)`` forward FLOPs of tokens ``start .. stop`` with the first ``start``
        cached (causal); ``logits=False``: the output layer for the last token only."""
        tokens = stop - start
        dense = 2.0 * self.parameters * tokens
        if not logits and tokens > 1:
            dense -= 2.0 * self.hidden * self.vocab * (tokens - 1)
        pairs = (stop * (stop + 1) - start * (start + 1)) / 2  # (query, key) pairs, causal
        attention = 4.0 * self.layers * self.heads * self.head_dim * pairs
        return dense, attention

    def flops(self, start: int, stop: int, *, logits: bool = True) -> float:
        """Forward FLOPs of tokens ``start .. stop`` with the first ``start`` cached (causal)."""
        return sum(self.split(start, stop, logits=logits))

    def bytes_needed(self, length: int, chunk: int, dtype_bytes: int) -> dict[str, float]:
        """Peak memory of one worker for a pass of ``length`` tokens in chunks of ``chunk``."""
        chunk = min(chunk, length)
        return {
            "weights": self.parameters * dtype_bytes,
            "KV cache": 2.0 * self.layers * self.kv_heads * self.head_dim * length * dtype_bytes,
            "logits": 3.0 * chunk * self.vocab * 4,
            "attention": 2.0 * self.heads * chunk * length * 4,
            "activations": 6.0 * chunk * max(self.intermediate, self.hidden) * 4,
        }


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

    def with_chunk(self, chunk: int) -> CostModel:
        """The same rates for calls of ``chunk`` tokens (the overhead per call kept: a call costs
        about the same to start whatever it feeds)."""
        return CostModel(
            self.dense, self.attention, self.call, chunk, self.step, self.step_per_token, self.where
        )

    def slower(self, factor: float, where: str) -> CostModel:
        """Every rate ``factor`` times slower (every cost ``factor`` times larger)."""
        return CostModel(self.dense / factor, self.attention / factor, self.call * factor, self.chunk,
                         self.step * factor, self.step_per_token * factor, where)  # fmt: skip

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


#: What ``posenc extend`` estimates a CPU run with: :func:`fit` on SmolLM2-135M's passes of 2,048 to
#: 16,384 tokens (every position's logits, the last only, decoding steps, prompts after a cached
#: prefix; one thread, fp32, chunks of 1,024) measured by ``scripts/extend_costs.py`` on a 2-core
#: AMD EPYC (AVX2) while other jobs ran (``docs/extend/design/costs_under_load.json``: dense 84.1,
#: attention 56.9 GFLOP/s, 0.65 s a call, a decoding step 0.080 s + 12.3 us per cached token), then
#: made 10% slower: the fit put the previous default's cells (four 16k passes, two passkey trunks) at
#: 999 CPU-seconds, and a fresh clone on two idle cores of that machine took 1,132 for the whole
#: run, its start included. A 16,384-token pass: 249 s; 8,192: 79 s; 4,096: 28 s.
CPU_COSTS = CostModel(
    dense=84.08, attention=56.90, call=0.6546, chunk=1024, step=0.07967, step_per_token=1.2255e-5,
    where="a 2-core AMD EPYC (AVX2), one thread, SmolLM2-135M, fp32",
).slower(1.1, "one thread of a 2-core AMD EPYC (AVX2), SmolLM2-135M, fp32")  # fmt: skip


__all__ = ["CPU_COSTS", "CostModel", "Shape", "fit"]
