"""The grid as cells of work, what each costs, and whether the memory holds the longest.

A *cell* is one pass of the model over one token sequence with one set of rotary tables:

- ``text``: a document, as long as the longest length any scaling needs at those tables; its
  loss at every position gives perplexity at every shorter length too (the model is causal, so
  the first ``L`` positions of a longer pass are a pass over ``L`` tokens);
- ``passkey``: the instruction and filler of one trial, with a fork per (length, depth) prompt
  (:mod:`posenc.extend.passkey`).

Scalings whose static tables at a length are equal share the cell (:mod:`posenc.extend.scalings`).
A cell is named by a hash of its tokens, its tables, the checkpoint and the precision, so a
rerun finds its record and a changed input never reuses one.

A cell's cost is counted in FLOPs, split into the dense layers and attention (:meth:`Shape.split`:
at 16k tokens attention is two thirds of a pass), and turned into an estimate of the wall-clock
with rates measured on a CPU (:data:`CPU_RATE`, :func:`estimate_seconds`): an estimate, printed
as one before a run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from posenc.core.errors import PosencError
from posenc.extend.passkey import ANSWER, Fork
from posenc.extend.scalings import Entry, tables_key

EXTEND_VERSION = 1  # changes when a record's meaning does


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
class ExtendCell:
    """One pass; an executor runs it (``run_id``, ``threads``, ``device``, ``work_units()``)."""

    run_id: str
    kind: str  # "text" | "passkey"
    scaling: str  # tables_key(static scaling dict)
    index: int  # document or trial
    tokens: tuple[int, ...]
    forks: tuple[Fork, ...]
    model: str  # checkpoint path (or hub id)
    trust_remote_code: bool
    precision: str
    chunk: int
    device: str
    threads: int
    label: str
    units: int  # estimated GFLOP
    attention: int = 0  # of which attention (query x key products), GFLOP

    def work_units(self) -> int:
        return self.units

    def describe(self) -> dict[str, Any]:
        """The cell without its token ids (what a record says about it)."""
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "scaling": json.loads(self.scaling),
            "index": self.index,
            "tokens": len(self.tokens),
            "forks": [
                {"length": f.length, "depth": f.depth, "placed": f.placed, "position": f.position}
                for f in self.forks
            ],
            "precision": self.precision,
            "label": self.label,
        }


def _run_id(*parts: Any) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, separators=(",", ":"), default=list).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


@dataclass
class Plan:
    """The cells and, per scaling entry, where each of its numbers comes from."""

    cells: list[ExtendCell]
    # (entry key, length) -> tables key; text cells by (tables key, document)
    text_tables: dict[tuple[str, int], str]
    text_cells: dict[tuple[str, int], str]
    # (entry key, length, depth, trial) -> (run id, fork index)
    passkey_forks: dict[tuple[str, int, float, int], tuple[str, int]]

    def flops(self) -> float:
        return sum(cell.units for cell in self.cells) * 1e9


def _text_tables(
    entries: list[Entry], lengths: tuple[int, ...], context: int, longrope: dict[str, Any] | None
) -> tuple[dict[str, int], dict[tuple[str, int], str], dict[str, list[str]]]:
    """Which rotary tables each (entry, length) reads text with, the longest length each tables key
    needs a pass for, and the entries that share each key (dynamic scalings share static passes)."""
    need: dict[str, int] = {}
    text_tables: dict[tuple[str, int], str] = {}
    labels: dict[str, list[str]] = {}
    for entry in entries:
        for length in lengths:
            key = tables_key(entry.at(length, context, longrope))
            text_tables[(entry.key, length)] = key
            need[key] = max(need.get(key, 0), length)
            labels.setdefault(key, [])
            if entry.label not in labels[key]:
                labels[key].append(entry.label)
    return need, text_tables, labels


def build(
    *,
    entries: list[Entry],
    lengths: tuple[int, ...],
    context: int,
    documents: tuple[tuple[int, ...], ...],
    passkey: dict[tuple[str, int], tuple[tuple[int, ...], tuple[Fork, ...]]],
    longrope: dict[str, Any] | None,
    shape: Shape,
    model: str,
    fingerprint: str,
    trust_remote_code: bool,
    precision: str,
    chunk: int,
    device: str,
    threads: int,
) -> Plan:
    """The plan of a grid. ``passkey[(tables key, trial)]`` is the trunk and forks of the passkey
    prompts of one trial at those tables."""
    need, text_tables, labels = _text_tables(entries, lengths, context, longrope)
    cells: list[ExtendCell] = []
    text_cells: dict[tuple[str, int], str] = {}
    common = dict(model=model, trust_remote_code=trust_remote_code, precision=precision, chunk=chunk,
                  device=device, threads=threads)  # fmt: skip
    for key, length in need.items():
        for index, document in enumerate(documents):
            tokens = document[:length]
            run_id = _run_id(EXTEND_VERSION, "text", key, tokens, fingerprint, precision)
            label = f"{' = '.join(labels[key])}: document {index + 1}, {length} tokens"
            dense, attention = shape.split(0, length)
            units = max(1, round((dense + attention) / 1e9))
            cells.append(ExtendCell(run_id, "text", key, index, tokens, (), label=label, units=units,
                              attention=round(attention / 1e9), **common))  # type: ignore[arg-type]  # fmt: skip
            text_cells[(key, index)] = run_id
    passkey_forks: dict[tuple[str, int, float, int], tuple[str, int]] = {}
    for (key, trial), (tokens, forks) in passkey.items():
        run_id = _run_id(EXTEND_VERSION, "passkey", key, tokens, [dataclasses.astuple(f) for f in forks],
                         fingerprint, precision)  # fmt: skip
        names = [
            e.label
            for e in entries
            if any(tables_key(e.at(f.length, context, longrope)) == key for f in forks)
        ]
        label = f"{' = '.join(dict.fromkeys(names))}: passkey trial {trial + 1}, {len(forks)} prompts"
        # the trunk, each prompt's rest and its answer (logits of the last position only)
        parts = [shape.split(0, len(tokens), logits=False)]
        parts += [shape.split(f.position, f.length + ANSWER, logits=False) for f in forks]
        dense, attention = (sum(part[i] for part in parts) for i in (0, 1))
        cells.append(ExtendCell(run_id, "passkey", key, trial, tokens, forks, label=label,
                          units=max(1, round((dense + attention) / 1e9)), attention=round(attention / 1e9),
                          **common))  # type: ignore[arg-type]  # fmt: skip
        for index, fork in enumerate(forks):
            passkey_forks[(key, fork.length, fork.depth, trial)] = (run_id, index)
    return Plan(cells, text_tables, text_cells, passkey_forks)


@dataclass(frozen=True)
class Rate:
    """Forward-pass throughput of one CPU thread in GFLOP/s, split as :meth:`Shape.split` splits
    the cost (the dense layers run at matrix-multiply speed, attention over a long KV cache slower)."""

    dense: float
    attention: float
    where: str

    def seconds(self, cell: ExtendCell) -> float:
        """One cell's estimated seconds on ``cell.threads`` threads (threads assumed to add up)."""
        own = (cell.units - cell.attention) / self.dense + cell.attention / self.attention
        return own / max(1, cell.threads)


#: Measured with posenc extend's own text passes (chunked prefill of 4,096, 8,192 and 16,384 tokens
#: of python-docs in chunks of 1,024, fp32, one thread) on SmolLM2-135M-Instruct: 40.0, 97.9 and
#: 319.0 CPU seconds, to which dense and attention rates are fitted by least squares (within 11% of
#: each pass; a single attention call of that shape alone measures 37-47 GFLOP/s, a single matrix
#: product of the MLP's shape 50). Other jobs ran on the machine at the time: an idle one may be
#: somewhat faster, another CPU anything.
CPU_RATE = Rate(
    dense=51.0, attention=40.0, where="one thread of a 2-core AMD EPYC (AVX2), SmolLM2-135M, fp32"
)
STARTUP_SECONDS = 30.0  # reading and tokenizing the text, starting the workers, loading the weights


def estimate_seconds(cells: list[ExtendCell], *, workers: int, rate: Rate = CPU_RATE) -> float:
    """Estimated wall-clock seconds of ``cells`` on ``workers`` workers of ``cells[i].threads``
    threads: the cells go, longest first, each to the worker that frees first (what the
    executors do), plus :data:`STARTUP_SECONDS`."""
    free = [0.0] * max(1, min(workers, len(cells)))
    for cell in sorted(cells, key=lambda c: -c.units):
        soonest = free.index(min(free))
        free[soonest] += rate.seconds(cell)
    return (max(free) + STARTUP_SECONDS) if cells else 0.0


def available_memory(device: str) -> float | None:
    """Bytes free for this run on ``device`` (None when it cannot be told)."""
    import torch

    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return float(free)
    if device == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("MemAvailable:"):
                        return float(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return None


def check_memory(
    shape: Shape, *, length: int, chunk: int, precision: str, device: str, workers: int
) -> dict[str, float]:
    """Refuse, before anything runs, a longest length whose pass the memory cannot hold."""
    parts = shape.bytes_needed(length, chunk, 2 if precision == "bf16" else 4)
    need = 1.2 * sum(parts.values()) * workers  # 20% for the allocator and what the estimate leaves out
    free = available_memory(device)
    if free is not None and need > free:
        gib = 1 << 30
        detail = ", ".join(f"{name} {value / gib:.1f}" for name, value in parts.items())
        raise PosencError(
            f"--lengths: a pass over {length} tokens needs about {need / gib:.1f} GiB on {device} ({workers} "
            f"worker(s), each: {detail} GiB), and {free / gib:.1f} GiB are free; use shorter lengths, a smaller "
            "--chunk, fewer --workers, --precision bf16 or a larger device"
        )
    return parts


__all__ = [
    "CPU_RATE",
    "EXTEND_VERSION",
    "STARTUP_SECONDS",
    "ExtendCell",
    "Plan",
    "Rate",
    "Shape",
    "available_memory",
    "build",
    "check_memory",
    "estimate_seconds",
]
