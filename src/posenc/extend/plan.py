"""The grid as cells of work, what each costs, and whether the memory holds the longest.

A *cell* is one unit of work with one set of rotary tables:

- ``text``: one pass over a document, as long as the longest length any scaling needs at those
  tables; its loss at every position gives perplexity at every shorter length too (the model is
  causal, so the first ``L`` positions of a longer pass are a pass over ``L`` tokens);
- ``prompts``: the retrieval prompts of one task at one length (:mod:`posenc.extend.haystacks`),
  in :func:`~posenc.extend.haystacks.prefill_order`: each fed after what it shares with the one
  before through the KV cache (cut back to that), then answered greedily.

Scalings whose static tables at a length are equal share the cell (:mod:`posenc.extend.scalings`).
A cell is named by a hash of its tokens, its tables, the checkpoint and the precision, so a
rerun finds its record and a changed input never reuses one.

A cell's work is counted in FLOPs, split into the dense layers and attention (:meth:`Shape.split`:
at 16k tokens attention is two thirds of a pass), and its time on one CPU thread estimated with
the cost model of :mod:`posenc.extend.budget` (:data:`~posenc.extend.budget.CPU_COSTS`: rates fitted
to measured passes, model calls and decoding steps; :func:`estimate_seconds`): an estimate, printed
as one before a run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posenc.core.errors import PosencError
from posenc.extend.budget import CPU_COSTS, CostModel, Shape
from posenc.extend.haystacks import Prompt, prefill_order
from posenc.extend.scalings import Entry, tables_key

EXTEND_VERSION = 1  # changes when a record's meaning does


@dataclass(frozen=True)
class RetrievalPrompt:
    """One retrieval prompt of a ``prompts`` cell: its token ids, how many of them it shares with the
    prompt before it in the cell (fed after the cache is cut back to that), the greedy budget, what
    a right answer holds, and where its needles are."""

    index: int  # the prompt's index in its task at its length (the same for every scaling)
    ids: tuple[int, ...]
    shared: int
    budget: int
    expected: tuple[str, ...]
    depths: tuple[float, ...]


@dataclass(frozen=True)
class ExtendCell:
    """One pass; an executor runs it (``run_id``, ``threads``, ``device``, ``work_units()``)."""

    run_id: str
    kind: str  # "text" | "prompts"
    scaling: str  # tables_key(static scaling dict)
    index: int  # document (text), length (prompts)
    tokens: tuple[int, ...]  # the document (text); empty (prompts)
    questions: tuple[RetrievalPrompt, ...]  # the prompts, in the order they are fed (prompts)
    model: str  # checkpoint path (or hub id)
    trust_remote_code: bool
    precision: str
    chunk: int
    device: str
    threads: int
    label: str
    units: int  # estimated GFLOP
    attention: int = 0  # of which attention (query x key products), GFLOP
    seconds: float = 0.0  # estimated on one CPU thread (budget.CPU_COSTS)
    task: str = ""  # the retrieval task (prompts)
    attention_kernel: str = ""  # transformers' attn_implementation ("": its default)

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
            "task": self.task,
            "prompts": [
                {"index": q.index, "tokens": len(q.ids), "shared": q.shared, "depths": list(q.depths)}
                for q in self.questions
            ],  # fmt: skip
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
    # (tables key, task, length) -> run id of the prompts cell
    prompt_cells: dict[tuple[str, str, int], str]

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
    prompts: Mapping[tuple[str, int], Sequence[Prompt]],
    longrope: dict[str, Any] | None,
    shape: Shape,
    model: str,
    fingerprint: str,
    trust_remote_code: bool,
    precision: str,
    chunk: int,
    device: str,
    threads: int,
    attention_kernel: str = "",
    costs: CostModel = CPU_COSTS,
) -> Plan:
    """The plan of a grid: a text cell per (tables, document) and a prompts cell per (tables, task,
    length) of ``prompts[(task, length)]`` (the same prompts for every scaling)."""
    need, text_tables, labels = _text_tables(entries, lengths, context, longrope)
    cells: list[ExtendCell] = []
    text_cells: dict[tuple[str, int], str] = {}
    common = dict(model=model, trust_remote_code=trust_remote_code, precision=precision, chunk=chunk,
                  device=device, threads=threads, attention_kernel=attention_kernel)  # fmt: skip
    costs = costs if costs.chunk == chunk else costs.with_chunk(chunk)
    for key, length in need.items():
        for index, document in enumerate(documents):
            tokens = document[:length]
            run_id = _run_id(EXTEND_VERSION, "text", key, tokens, fingerprint, precision)
            label = f"{' = '.join(labels[key])}: document {index + 1}, {length} tokens"
            dense, attention = shape.split(0, length)
            cells.append(ExtendCell(run_id, "text", key, index, tokens, (), label=label,
                                    units=max(1, round((dense + attention) / 1e9)), attention=round(attention / 1e9),
                                    seconds=costs.text_pass(shape, length), **common))  # type: ignore[arg-type]  # fmt: skip
            text_cells[(key, index)] = run_id
    prompt_cells: dict[tuple[str, str, int], str] = {}
    for (task, length), items in prompts.items():
        questions = tuple(RetrievalPrompt(p.index, p.ids, shared, p.budget, p.expected, p.depths)
                          for p, shared in prefill_order(items))  # fmt: skip
        names: dict[str, list[str]] = {}
        for entry in entries:
            names.setdefault(tables_key(entry.at(length, context, longrope)), []).append(entry.label)
        for key, labelled in names.items():
            cell = _prompts_cell(key, task, length, questions, shape, costs, fingerprint,
                                 f"{' = '.join(labelled)}: {task} @{length}, {len(questions)} prompts", common)  # fmt: skip
            cells.append(cell)
            prompt_cells[(key, task, length)] = cell.run_id
    return Plan(cells, text_tables, text_cells, prompt_cells)


def _prompts_cell(
    key: str, task: str, length: int, questions: tuple[RetrievalPrompt, ...], shape: Shape, costs: CostModel,
    fingerprint: str, label: str, common: dict[str, Any],
) -> ExtendCell:  # fmt: skip
    """One prompts cell: each prompt's prefill past what it shares (last logits only) and its
    greedy answer, counted in FLOPs and in seconds of one thread."""
    run_id = _run_id(EXTEND_VERSION, "prompts", key, task, [(q.ids, q.budget) for q in questions], fingerprint,
                     common["precision"])  # fmt: skip
    dense = attention = seconds = 0.0
    for q in questions:
        size = len(q.ids)
        start = min(q.shared, size - 1)
        parts = [shape.split(start, size, logits=False)]
        parts += [shape.split(size + i, size + i + 1) for i in range(q.budget - 1)]  # greedy steps
        dense += sum(p[0] for p in parts)
        attention += sum(p[1] for p in parts)
        seconds += costs.prompt(shape, size, q.budget, start)
    return ExtendCell(run_id, "prompts", key, length, (), questions, label=label,
                      units=max(1, round((dense + attention) / 1e9)), attention=round(attention / 1e9),
                      seconds=seconds, task=task, **common)  # fmt: skip


STARTUP_SECONDS = 60.0  # reading and tokenizing the text, starting the workers, loading the weights


def estimate_seconds(cells: list[ExtendCell], *, workers: int) -> float:
    """Estimated wall-clock seconds of ``cells`` on ``workers`` workers of ``cells[i].threads``
    threads (threads assumed to add up): the cells go, longest first, each to the worker that
    frees first (what the executors do), plus :data:`STARTUP_SECONDS`."""
    free = [0.0] * max(1, min(workers, len(cells)))
    for cell in sorted(cells, key=lambda c: -c.seconds):
        soonest = free.index(min(free))
        free[soonest] += cell.seconds / max(1, cell.threads)
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
    "EXTEND_VERSION",
    "STARTUP_SECONDS",
    "ExtendCell",
    "Plan",
    "RetrievalPrompt",
    "Shape",
    "available_memory",
    "build",
    "check_memory",
    "estimate_seconds",
]
