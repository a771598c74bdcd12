"""What the records of a grid show and decide: perplexity by length, the cost inside the context,
retrieval rates, paired tests between scalings, each scaling's effective context length and loss
by position; as ``summary.json``, Markdown tables and a caption (the figures:
:mod:`posenc.extend.summary_figures`).

**Perplexity** at length ``L`` of one document is ``exp`` of the mean loss of its first ``L`` tokens
(each given all tokens before it: the YaRN paper's sliding-window perplexity of a document
truncated to the window, whose one window scores every token). Over documents: ``exp`` of the
mean of the per-document mean losses, with the 95% Student t interval over documents of those
means (:func:`posenc.results.stats.per_seed`: ``n - 1`` degrees of freedom for ``n`` documents),
mapped through ``exp``; it speaks for documents like these (the same text source), not for text
in general; with one document there is none. The loss-by-position curve has the same interval per
bin of positions. The cost inside the trained context is the ratio of a scaling's perplexity to
plain RoPE's at the longest length within the context, paired by document.

**Retrieval** (:mod:`posenc.extend.haystacks`): per scaling, task and length, the prompts answered
right (``k/n``: the passkey exactly; a RULER-style prompt with every expected string recalled) with
the exact Clopper-Pearson interval, and the mean score (RULER's recall).

**What is decided** (:mod:`posenc.extend.evidence`): every pair of scalings whose tables differ at
a length is compared there, on perplexity by the paired t test over documents and on each task by
McNemar's exact test on the same prompts; all of a summary's tests are corrected together
(:func:`posenc.results.stats.adjust`, Benjamini-Hochberg: a false discovery rate of 5% over the
summary). Each scaling's effective context length is read from perplexity (within
``margin.perplexity`` times plain RoPE's at the shortest length) and from each task (a rate within
``margin.rate`` of plain RoPE's at the task's shortest length), with its ``[low, high]`` interval.
Every number the tables show is in ``summary.json`` per document and per prompt, so a claim made
from it can be checked again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from posenc.extend import evidence
from posenc.extend.plan import Plan
from posenc.extend.protocol import Margin
from posenc.extend.scalings import Entry, tables_key
from posenc.results.stats import adjust, per_seed

BINS = 64  # loss-by-position curve: bins over the longest length
DEPTH_BINS = 5  # the passkey's depth x length figure: depths in fifths of the haystack
FORMAT = 2  # summary.json's layout (1: the first releases', with one passkey prompt per depth)
LEVEL = 0.05  # a test decides when its adjusted p-value is below this
CORRECTION = "Benjamini-Hochberg over every test of the summary (a false discovery rate of 5%)"

#: The suite's tests that check each method a summary's claims rest on (named on the page)
METHOD_TESTS = {
    "interval over documents": "tests/unit/extend/test_extend.py::test_the_interval_over_documents_covers_at_its_stated_level",
    "rate": "tests/unit/extend/test_evidence.py::test_the_rate_interval_covers_at_its_stated_level",
    "mcnemar": "tests/unit/extend/test_evidence.py::test_mcnemar_holds_its_error_rate_when_two_scalings_are_alike_and_finds_a_real_gap",
    "paired t": "tests/unit/extend/test_evidence.py::test_the_paired_test_over_documents_is_the_t_test_of_the_differences",
    "correction": "tests/unit/extend/test_summary.py::test_a_summary_of_alike_scalings_decides_a_difference_at_most_5_percent_of_the_time",
    "effective retrieval": "tests/unit/extend/test_evidence.py::test_the_effective_length_interval_covers_the_true_length_at_its_stated_level",
    "effective perplexity": "tests/unit/extend/test_evidence.py::test_the_perplexity_effective_length_covers_at_its_stated_level",
}  # fmt: skip


def _interval(values: Sequence[float]) -> dict[str, float]:
    cell = per_seed(values)
    return {"value": math.exp(cell.mean), "low": math.exp(cell.low), "high": math.exp(cell.high)}


def summarize(
    plan: Plan,
    results: dict[str, dict[str, Any]],
    *,
    entries: list[Entry],
    lengths: tuple[int, ...],
    documents: int,
    context: int,
    tasks: Sequence[tuple[str, int, int]] = (),
    margin: Margin | None = None,
    longrope: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every number the tables and figures show, from ``results`` (run id -> record result);
    ``tasks``: the ``(task, length, prompts)`` retrieval cells of each scaling."""
    margin = margin or Margin()

    def doc_means(entry: Entry, length: int) -> list[float] | None:
        key = plan.text_tables[(entry.key, length)]
        means = []
        for index in range(documents):
            result = results.get(plan.text_cells[(key, index)])
            if result is None:
                return None
            means.append(float(np.mean(result["nll"][: length - 1])))
        return means

    def answers(entry: Entry, task: str, length: int) -> list[dict[str, Any]] | None:
        run_id = plan.prompt_cells.get((tables_key(entry.at(length, context, longrope)), task, length))
        result = results.get(run_id) if run_id else None
        return None if result is None else sorted(result["answers"], key=lambda a: a["index"])

    perplexity = {e.label: _perplexity_row(e, lengths, doc_means) for e in entries}
    retrieval = {e.label: _retrieval_row(e, tasks, answers, plan) for e in entries}
    summary = {
        "format": FORMAT,
        "context": context,
        "lengths": list(lengths),
        "documents": documents,
        "tasks": [{"task": t, "length": n, "prompts": k} for t, n, k in tasks],
        "margin": {"perplexity": margin.perplexity, "rate": margin.rate},
        "entries": [{"label": e.label, "key": e.key} for e in entries],
        "perplexity": perplexity,
        "inside": _inside(entries, lengths, context, doc_means),
        "retrieval": retrieval,
        "loss_by_position": _curves(plan, results, entries, lengths, documents),
    }
    summary["tests"] = paired_tests(
        summary, tables_by_label(plan, entries, lengths, tasks, context, longrope)
    )
    summary["correction"] = CORRECTION
    summary["effective"] = effective_lengths(summary)
    return summary


def _perplexity_row(entry: Entry, lengths: tuple[int, ...], doc_means: Callable) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for length in lengths:
        means = doc_means(entry, length)
        if means is not None:
            row[str(length)] = {
                **_interval(means),
                "documents": len(means),
                "losses": [round(m, 6) for m in means],
            }
    return row


def _depth_bin(depth: float) -> int:
    return min(DEPTH_BINS - 1, int(depth * DEPTH_BINS))


def _retrieval_row(
    entry: Entry, tasks: Sequence[tuple[str, int, int]], answers: Callable, plan: Plan
) -> dict:
    """One scaling's retrieval cells: ``{task: {length: cell}}``, each with k/n, its exact interval,
    the mean score, every prompt's outcome and score (by prompt index) and, for a task whose
    prompts have one needle, ``[k, n]`` per fifth of the haystack its needle sits in."""
    row: dict[str, Any] = {}
    depths = {
        (c.task, c.index, q.index): q.depths for c in plan.cells if c.kind == "prompts" for q in c.questions
    }
    for task, length, _ in tasks:
        got = answers(entry, task, length)
        if not got:
            continue
        outcomes = [bool(a["correct"]) for a in got]
        rate = evidence.rate(outcomes)
        cell = {"correct": rate.successes, "prompts": rate.n, "rate": rate.value, "low": rate.low, "high": rate.high,
                "score": float(np.mean([a["score"] for a in got])), "outcomes": [int(x) for x in outcomes],
                "scores": [a["score"] for a in got]}  # fmt: skip
        placed = [depths.get((task, length, a["index"]), ()) for a in got]
        if all(len(d) == 1 for d in placed):
            bins = [[0, 0] for _ in range(DEPTH_BINS)]
            for (depth,), right in zip(placed, outcomes):
                bins[_depth_bin(depth)][0] += int(right)
                bins[_depth_bin(depth)][1] += 1
            cell["by_depth"] = bins
        row.setdefault(task, {})[str(length)] = cell
    return row


def _inside(
    entries: list[Entry],
    lengths: tuple[int, ...],
    context: int,
    doc_means: Callable[[Entry, int], list[float] | None],
) -> dict[str, Any]:
    """Each entry's perplexity relative to plain RoPE's at the longest length inside the context,
    paired by document (empty without plain RoPE or a length inside)."""
    inside: dict[str, Any] = {}
    within = [length for length in lengths if length <= context]
    base = next((e for e in entries if e.name == "none"), None)
    if within and base is not None:
        at = max(within)
        reference = doc_means(base, at)
        for entry in entries:
            mine = doc_means(entry, at)
            if reference is not None and mine is not None:
                inside[entry.label] = {"length": at, **_interval([a - b for a, b in zip(mine, reference)])}
    return inside


def tables_by_label(
    plan: Plan, entries: list[Entry], lengths: Sequence[int], tasks: Sequence[tuple[str, int, int]], context: int,
    longrope: dict[str, Any] | None = None,
) -> dict[str, dict[Any, str]]:  # fmt: skip
    """Which tables each scaling reads with: ``{label: {length: key, (task, length): key}}``."""
    tables: dict[str, dict[Any, str]] = {
        e.label: {n: plan.text_tables[(e.key, n)] for n in lengths} for e in entries
    }
    for task, length, _ in tasks:
        for e in entries:
            tables[e.label][(task, length)] = tables_key(e.at(length, context, longrope))
    return tables


def paired_tests(summary: dict[str, Any], tables: dict[str, dict[Any, str]]) -> list[dict[str, Any]]:
    """Every pair of scalings whose tables differ, at every length: perplexity by the paired t test
    over documents (2 or more), each task by McNemar's exact test; p-values adjusted together."""
    labels = [e["label"] for e in summary["entries"]]
    tests: list[dict[str, Any]] = []
    for a, b in itertools.combinations(labels, 2):
        for length in summary["lengths"]:
            one, two = (summary["perplexity"][x].get(str(length)) for x in (a, b))
            if one and two and one["documents"] > 1 and tables[a][length] != tables[b][length]:
                got = evidence.paired_documents(one["losses"], two["losses"])
                tests.append({"measure": "perplexity", "length": length, "first": a, "second": b,
                              "documents": got.documents, "ratio": got.ratio, "low": got.low, "high": got.high,
                              "p": got.p_value})  # fmt: skip
        for cell in summary["tasks"]:
            task, length = cell["task"], cell["length"]
            one, two = (summary["retrieval"][x].get(task, {}).get(str(length)) for x in (a, b))
            if one and two and tables[a][(task, length)] != tables[b][(task, length)]:
                got2 = evidence.mcnemar(one["outcomes"], two["outcomes"])
                tests.append({"measure": task, "length": length, "first": a, "second": b, "prompts": got2.n,
                              "first_only": got2.first_only, "second_only": got2.second_only, "p": got2.p_value})  # fmt: skip
    for test, adjusted in zip(tests, adjust([t["p"] for t in tests])):
        test["p_adjusted"] = adjusted
        test["decided"] = bool(adjusted < LEVEL)
    return tests


def _effective_dict(found: evidence.Effective) -> dict[str, Any]:
    return {"length": found.length, "low": found.low, "high": found.high, "reference": found.reference,
            "margin": found.margin, "method": found.method,
            "lengths": [{"length": r.length, "estimate": r.estimate, "low": r.low, "high": r.high}
                        for r in found.lengths]}  # fmt: skip


def effective_lengths(summary: dict[str, Any]) -> dict[str, Any]:
    """Each scaling's effective context length from perplexity and from each task, against plain
    RoPE at the shortest length measured (each scaling's own where plain RoPE is not in the grid)."""
    labels = [e["label"] for e in summary["entries"]]
    base = next((e["label"] for e in summary["entries"] if e["key"] == "none"), None)
    out: dict[str, Any] = {label: {} for label in labels}
    lengths = summary["lengths"]
    shortest = str(min(lengths))
    for label in labels:
        row = summary["perplexity"][label]
        if summary["documents"] > 1 and all(str(n) in row for n in lengths):
            reference = summary["perplexity"][base][shortest]["losses"] if base else None
            losses = {n: row[str(n)]["losses"] for n in lengths}
            found = evidence.perplexity_effective_length(losses, margin=summary["margin"]["perplexity"],
                                                         reference=reference)  # fmt: skip
            out[label]["perplexity"] = _effective_dict(found)
    by_task: dict[str, list[int]] = {}
    for cell in summary["tasks"]:
        by_task.setdefault(cell["task"], []).append(cell["length"])
    for task, task_lengths in by_task.items():
        first = str(min(task_lengths))
        for label in labels:
            cells = summary["retrieval"][label].get(task, {})
            if not all(str(n) in cells for n in task_lengths):
                continue
            base_cell = summary["retrieval"][base].get(task, {}).get(first) if base else None
            reference = base_cell["outcomes"] if base_cell else cells[first]["outcomes"]
            found = evidence.retrieval_effective_length({n: cells[str(n)]["outcomes"] for n in task_lengths},
                                                        margin=summary["margin"]["rate"],
                                                        reference=reference if base_cell else None)  # fmt: skip
            out[label][task] = _effective_dict(found)
            # a reference not shown above the margin itself (the task at its floor for this model): holding
            # "within the margin" of it would be holding nothing
            shown = evidence.lower_bound(sum(reference), len(reference), (1 - evidence.CONFIDENCE) / 2)
            out[label][task]["informative"] = bool(shown > summary["margin"]["rate"])
    return out


def _curves(
    plan: Plan,
    results: dict[str, dict[str, Any]],
    entries: list[Entry],
    lengths: tuple[int, ...],
    documents: int,
) -> dict[str, Any]:
    """Loss by position over the longest pass per entry: [first, last position, mean, low, high] per bin."""
    longest = max(lengths)
    curves: dict[str, Any] = {}
    edges = np.linspace(1, longest, BINS + 1).round().astype(int)
    for entry in entries:
        key = plan.text_tables[(entry.key, longest)]
        rows = [results.get(plan.text_cells[(key, i)]) for i in range(documents)]
        if any(r is None for r in rows):
            continue
        nll = np.asarray([r["nll"][: longest - 1] for r in rows if r is not None], dtype=float)
        curve = []
        for a, b in zip(edges[:-1], edges[1:]):
            if b > a:  # [first, last position, mean loss, low, high] over documents
                cell = per_seed(nll[:, a - 1 : b - 1].mean(axis=1))
                curve.append([int(a), int(b), cell.mean, cell.low, cell.high])
        curves[entry.label] = curve
    return curves


__all__ = [
    "BINS",
    "CORRECTION",
    "DEPTH_BINS",
    "FORMAT",
    "METHOD_TESTS",
    "effective_lengths",
    "paired_tests",
    "summarize",
    "tables_by_label",
]
