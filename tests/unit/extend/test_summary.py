"""posenc.extend.summary: what a grid's records decide. Retrieval cells with exact intervals and
depths, paired tests between every two scalings whose tables differ (corrected together), and each
scaling's effective context length, on records made up here with known truths."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

from posenc.extend import plan, summary
from posenc.extend import protocol as protocols
from posenc.extend import scalings as sc

pytest.importorskip("scipy")

CONTEXT = 64
LENGTHS = (32, 64)
SHAPE = plan.Shape(
    layers=1, heads=1, kv_heads=1, head_dim=4, hidden=4, intermediate=4, vocab=8, parameters=10
)


def words(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) % 30000 + 2 for w in re.findall(r"\w+|[^\w\s]", text)]


def _grid(scalings: tuple[str, ...], documents: int = 3, prompts: int = 20, lengths=(400, 600)):
    from posenc.extend import retrieval_prompts

    prot = protocols.Protocol(name="t", documents=documents, lengths=LENGTHS, scalings=scalings,
                              tasks={"passkey": protocols.RetrievalCells(lengths=lengths, prompts=prompts)})  # fmt: skip
    entries = sc.parse_all(prot.scalings, prot.factors)
    docs = tuple(tuple(range(i, i + max(LENGTHS))) for i in range(documents))
    grid = plan.build(entries=entries, lengths=LENGTHS, context=CONTEXT, documents=docs,
                      prompts=retrieval_prompts(prot, words, []), longrope=None, shape=SHAPE, model="m",
                      fingerprint="f", trust_remote_code=False, precision="fp32", chunk=64, device="cpu",
                      threads=1)  # fmt: skip
    return prot, entries, grid


def _results(grid, loss, right) -> dict:
    """Records of every cell: ``loss(tables, document)`` nats at every position, ``right(tables,
    length, index)`` whether a prompt is answered right."""
    out = {}
    for cell in grid.cells:
        if cell.kind == "text":
            out[cell.run_id] = {"nll": [loss(cell.scaling, cell.index)] * (len(cell.tokens) - 1)}
        else:
            answers = [{"index": q.index, "generated": "", "score": float(right(cell.scaling, cell.index, q.index)),
                        "correct": bool(right(cell.scaling, cell.index, q.index))} for q in cell.questions]  # fmt: skip
            out[cell.run_id] = {"answers": answers}
    return out


def _summarize(prot, entries, grid, results) -> dict:
    return summary.summarize(grid, results, entries=entries, lengths=prot.lengths, documents=prot.documents,
                             context=CONTEXT, tasks=prot.cells(), margin=prot.margin)  # fmt: skip


def test_a_retrieval_cell_has_its_count_its_exact_interval_and_where_its_keys_were():
    from scipy import stats

    prot, entries, grid = _grid(("none", "yarn"))
    out = _summarize(prot, entries, grid, _results(grid, lambda t, d: 2.0, lambda t, n, i: i % 4 != 0))
    cell = out["retrieval"]["none"]["passkey"]["400"]
    assert (cell["correct"], cell["prompts"]) == (15, 20) and cell["outcomes"] == [
        int(i % 4 != 0) for i in range(20)
    ]
    want = stats.binomtest(15, 20).proportion_ci(method="exact")
    assert (cell["low"], cell["high"]) == pytest.approx((want.low, want.high))
    assert sum(n for _, n in cell["by_depth"]) == 20 and sum(k for k, _ in cell["by_depth"]) == 15
    depths = {
        q.index: q.depths[0]
        for c in grid.cells
        if c.kind == "prompts" and c.index == 400
        for q in c.questions
    }
    fifths = [0] * summary.DEPTH_BINS
    for depth in depths.values():
        fifths[min(4, int(depth * 5))] += 1
    assert [n for _, n in cell["by_depth"]] == fifths and len([f for f in fifths if f]) >= 3  # keys spread


def test_scalings_are_compared_where_their_tables_differ_and_the_gap_of_a_collapse_is_decided():
    """yarn-dynamic is plain RoPE inside the context (the same tables: no test), YaRN x4 there differs;
    a scaling that finds the key in 2 of 20 prompts where plain RoPE finds 19 is decided to differ
    (McNemar, adjusted), and so is a perplexity 10% higher on every play."""
    prot, entries, grid = _grid(("none", "yarn:4", "yarn-dynamic"), documents=4)
    none = sc.tables_key(None)
    rng = np.random.default_rng(0)
    base = rng.normal(3.0, 0.2, 4)

    def loss(tables, doc):
        return base[doc] + (0.1 + 0.001 * doc if tables != none else 0.0)

    def right(tables, length, index):
        return index < 19 if tables == none else index < 2

    out = _summarize(prot, entries, grid, _results(grid, loss, right))
    pairs = {(t["measure"], t["length"], t["first"], t["second"]) for t in out["tests"]}
    assert ("perplexity", 32, "none", "yarn x4") in pairs and (
        "perplexity",
        32,
        "none",
        "yarn-dynamic",
    ) not in pairs
    # past the context yarn-dynamic reads YaRN at 400 / 64 = 6.25 and 600 / 64: tables of its own
    assert ("passkey", 400, "none", "yarn-dynamic") in pairs and (
        "passkey",
        600,
        "yarn x4",
        "yarn-dynamic",
    ) in pairs
    by = {(t["measure"], t["length"], t["first"], t["second"]): t for t in out["tests"]}
    gap = by[("passkey", 400, "none", "yarn x4")]
    assert (gap["first_only"], gap["second_only"]) == (17, 0) and gap["decided"] and gap["p_adjusted"] < 0.001
    ppl = by[("perplexity", 64, "none", "yarn x4")]
    assert ppl["decided"] and ppl["ratio"] == pytest.approx(
        np.exp(-np.mean([0.1 + 0.001 * d for d in range(4)]))
    )
    assert out["correction"].startswith("Benjamini-Hochberg")
    assert all(t["p_adjusted"] >= t["p"] for t in out["tests"])


def test_a_summary_of_alike_scalings_decides_a_difference_at_most_5_percent_of_the_time():
    """Four scalings that are alike (each prompt right with probability 1/2 under each, independently;
    per-play losses that differ by noise only): over 300 simulated grids of 18 tests each, at most 5%
    of summaries decide any difference (Benjamini-Hochberg over the summary; uncorrected, about a third
    would)."""
    prot, entries, grid = _grid(("none", "linear:2", "ntk:2", "yarn:2"), prompts=20, lengths=(400,))
    out = _summarize(prot, entries, grid, _results(grid, lambda t, d: 3.0, lambda t, n, i: True))
    tables = summary.tables_by_label(grid, entries, prot.lengths, prot.cells(), CONTEXT)
    rng = np.random.default_rng(7)
    any_decided = uncorrected = 0
    draws = 300
    for _ in range(draws):  # new records in the same summary: the tests as summarize makes them
        for label in out["perplexity"]:
            per_play = list(rng.normal(3.0, 0.1, 3))
            for length in LENGTHS:
                out["perplexity"][label][str(length)]["losses"] = per_play
            out["retrieval"][label]["passkey"]["400"]["outcomes"] = [int(x) for x in rng.random(20) < 0.5]
        tests = summary.paired_tests(out, tables)
        assert len(tests) == 6 * 3  # 6 pairs at 32, 64 (perplexity) and 400 (passkey)
        any_decided += any(t["decided"] for t in tests)
        uncorrected += any(t["p"] < 0.05 for t in tests)
    assert any_decided / draws <= 0.05 + 2 * (0.05 * 0.95 / draws) ** 0.5, any_decided / draws
    assert uncorrected / draws > 0.15  # the correction is what keeps the rate down


def test_each_scaling_has_its_effective_context_length_against_plain_rope():
    """Plain RoPE answers 20 of 20 at 400 tokens; a scaling that keeps that at 400 and falls to 3/20
    at 600 is shown to fail at 600 (its interval's high end is 400); one that keeps 20/20 at both is
    shown to hold to 600. Where plain RoPE itself answers 1 of 20 (a task at its floor), a length is
    said to hold nothing: the reading is marked uninformative."""
    prot, entries, grid = _grid(("none", "yarn:2", "yarn:4"))
    keys = {e.label: sc.tables_key(e.at(600, CONTEXT)) for e in entries}

    def right(tables, length, index):
        if tables == keys["yarn x2"] and length == 600:
            return index < 3
        return True

    out = _summarize(prot, entries, grid, _results(grid, lambda t, d: 2.0 + 0.01 * d, right))
    yarn2, yarn4 = out["effective"]["yarn x2"]["passkey"], out["effective"]["yarn x4"]["passkey"]
    assert (yarn2["length"], yarn2["high"]) == (400, 400) and yarn2["informative"]
    assert yarn4["length"] == yarn4["high"] == 600 and yarn4["low"] == 600
    ppl = out["effective"]["none"]["perplexity"]
    assert ppl["length"] == 64 and "1.1x" in ppl["method"]
    floor = _summarize(prot, entries, grid, _results(grid, lambda t, d: 2.0, lambda t, n, i: i == 0))
    assert not any(floor["effective"][label]["passkey"]["informative"] for label in floor["effective"])
