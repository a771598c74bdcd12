"""posenc.extend.summary_text: a summary's tables, caption and verdicts. Each verdict names the
statistical test it rests on and the suite's test of that method; a summary of the first releases'
layout reads as it did and decides nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.unit.extend.test_summary import CONTEXT, _grid, _results, _summarize

from posenc.extend import summary as summaries
from posenc.extend import summary_text as text

pytest.importorskip("scipy")
ROOT = Path(__file__).resolve().parents[3]


def _collapse():
    """Plain RoPE and YaRN x2 hold (20/20 at 400 and 600 tokens); YaRN x4 collapses at 600 (2/20)."""
    prot, entries, grid = _grid(("none", "yarn:2", "yarn:4"), documents=4)
    from posenc.extend import scalings as sc

    four = sc.tables_key(entries[2].at(600, CONTEXT))

    def right(tables, length, index):
        return index < 2 if tables == four and length == 600 else True

    out = _summarize(prot, entries, grid, _results(grid, lambda t, d: 2.0 + 0.05 * d, right))
    out["caption"] = text.caption(out)
    return out


def test_the_tables_give_rates_with_their_intervals_and_each_effective_length():
    out = _collapse()
    titles = [title for title, _, _ in text.tables(out)]
    assert titles[0] == "" and "Retrieval" in titles[1] and "Effective context length" in titles[2]
    header, body = text.retrieval_rows(out)
    assert header == ["scaling", "passkey @400", "passkey @600"]
    assert body[2] == ["yarn x4", "20/20 [0.83, 1.00]", "2/20 [0.01, 0.32]"]
    header, body = text.effective_rows(out)
    assert header == ["scaling", "from perplexity", "from passkey"]
    assert body[2][2] == "400 [400, 400]" and body[1][2] == "600 [600, 600]"
    table = text.markdown(out)
    assert "**Retrieval: prompts answered right, k/n [95% exact interval]**" in table
    assert "Benjamini-Hochberg" in out["caption"] and "Clopper-Pearson" in out["caption"]


def test_the_verdicts_say_what_is_shown_to_hold_and_to_fail_and_name_their_tests():
    out = _collapse()
    lines = text.verdicts(out)
    passkey = next(line for line in lines if line.startswith("- **passkey**"))
    assert "shown to hold to 600 tokens: none, yarn x2" in passkey
    assert "shown to fail before 600: yarn x4 (holds to 400 at most)" in passkey
    assert summaries.METHOD_TESTS["effective retrieval"] in passkey
    between = next(line for line in lines if line.startswith("- **Between scalings**"))
    decided = [t for t in out["tests"] if t["decided"]]
    assert f"{len(decided)} of {len(out['tests'])} tests decide" in between
    assert summaries.METHOD_TESTS["mcnemar"] in between and summaries.METHOD_TESTS["correction"] in between
    gap = next(line for line in lines if line.startswith("  - passkey @600:"))
    assert "none 20/20 against yarn x4 2/20 (18 prompts right only under none, 0 only under yarn x4)" in gap
    assert not any(t["decided"] for t in out["tests"] if t["measure"] == "passkey" and t["length"] == 400)


def test_a_task_at_its_floor_is_said_to_decide_nothing():
    prot, entries, grid = _grid(("none", "yarn:2"))
    out = _summarize(prot, entries, grid, _results(grid, lambda t, d: 2.0 + 0.05 * d, lambda t, n, i: i < 2))
    passkey = next(line for line in text.verdicts(out) if line.startswith("- **passkey**"))
    said = "the reference's rate at the task's shortest length (passkey 0.10) is not shown to be above the margin"
    assert said in passkey and "say nothing" in passkey
    assert "shown to hold to" not in passkey
    assert text.effective_rows(out)[1][0][2] == "- (the reference not shown above the margin)"


def test_a_summary_of_the_first_layout_reads_as_it_did_and_decides_nothing():
    """The first releases' summaries (one passkey prompt per length and depth, no tests) keep their one
    table, with its passkey columns, and their caption; they decide nothing."""
    old = json.loads((ROOT / "benchmarks" / "records" / "extend" / "more" / "summary.json").read_text())
    assert "format" not in old
    header, body = text.rows(old)
    assert header[-2:] == ["passkey @4096", "passkey @16384"] and body[0][-1] == "0/1"
    assert len(text.tables(old)) == 1 and text.verdicts(old) == []
    assert text.caption(old).endswith("passkey: prompts answered exactly (depths 0.5; 1 trial(s) each).")
