"""A table's primary questions decided as one family (``posenc.results.primary``), read from records:
Holm's method over the family, the detectable difference at the family's level, exact tests that
cannot decide below their floor, the looks of a sequential plan and seeds that learned or not. The
simulations behind the methods: test_design.py (power at the printed detectable difference),
test_sequential.py (the error rate under optional stopping), test_paired.py (all-or-nothing seeds)."""

from __future__ import annotations

import math

import pytest

from posenc.records.questions import Questions, SequentialSpec
from posenc.results import primary

# rows of 64 examples of copy at n = 8, twice the trained length (tok_2x)
SPREAD = [40, 44, 36, 42, 38, 40, 44, 36, 42, 38]


def _record(label, seed, hits, converged=True):
    row = [1] * hits + [0] * (64 - hits)
    per = [[1] * 64, row]
    return {
        "label": label,
        "spec": {"task": "copy", "seed": seed, "encoding": label, "train": {"max_len": 4}},
        "result": {
            "train": {"converged": converged},
            "eval": {
                "default": {"lengths": [3, 8], "per_example": {"exact_match": per, "answer_accuracy": per}}
            },
        },
    }


def _records(seeds, **shift):
    """rope, alibi and t5 at the spread above, each shifted by ``shift[label]`` examples of 64."""
    return [
        _record(label, s, min(64, max(0, SPREAD[s] + shift.get(label, 0))))
        for label in ("rope", "alibi", "t5")
        for s in range(seeds)
    ]


def _declared(test="welch"):
    return Questions("rope", None, ("copy:tok_2x",), {"copy": test})


def test_the_family_is_each_encoding_against_the_reference_corrected_by_holm():
    block = primary.fixed_block(_records(6, alibi=20), _declared())
    assert block["family"] == 2 and block["level"] == pytest.approx(0.025)
    got = {e["label"]: e for e in block["questions"]}
    assert got["alibi"]["decided"] and got["alibi"]["diff"] == pytest.approx(20 / 64)
    assert not got["t5"]["decided"] and got["t5"]["diff"] == pytest.approx(0.0)
    for e in got.values():  # Holm: never below the raw p, decided exactly where below alpha
        assert e["p_holm"] >= e["p"] and e["decided"] == (e["p_holm"] < 0.05)
    assert got["alibi"]["p_holm"] == pytest.approx(2 * got["alibi"]["p"])  # the smallest: times the family
    col = block["columns"]["copy:tok_2x"]
    assert col["seeds"] == 6 and col["level"] == pytest.approx(0.025) and col["sd_upper"] > col["sd"] > 0
    assert 0 < col["detectable"] < 20 / 64  # a 20-point difference at 6 seeds is past it


def test_the_detectable_difference_shrinks_with_seeds_and_grows_with_the_family():
    three = primary.fixed_block(_records(3), _declared())["columns"]["copy:tok_2x"]
    ten = primary.fixed_block(_records(10), _declared())["columns"]["copy:tok_2x"]
    assert ten["detectable"] < three["detectable"] / 2
    one = primary.fixed_block(_records(3), Questions("rope", ("alibi",), ("copy:tok_2x",)))
    assert one["columns"]["copy:tok_2x"]["detectable"] < three["detectable"]  # 5% against 2.5%


def test_an_exact_test_cannot_decide_below_its_floor_and_says_how_many_seeds_can():
    three = primary.fixed_block(_records(3, alibi=24), _declared("welch-exact"))
    got = {e["label"]: e for e in three["questions"]}
    assert not got["alibi"]["decided"] and got["alibi"]["p"] >= 0.1 - 1e-12  # 2 / C(6, 3)
    col = three["columns"]["copy:tok_2x"]
    assert (
        col["exact_floor"] == pytest.approx(0.1) and col["seeds_to_reach"] == 5
    )  # 2 / C(10, 5) = 0.008 <= 0.025
    assert math.isinf(col["detectable"]) or col["detectable"] > 1  # never, at 3 seeds
    six = primary.fixed_block(_records(6, alibi=24), _declared("welch-exact"))
    assert {e["label"]: e["decided"] for e in six["questions"]} == {"alibi": True, "t5": False}


def test_seeds_that_learn_or_not_are_named():
    records = _records(4) + [_record("nope", s, 64 if s % 2 else 0) for s in range(4)]
    block = primary.fixed_block(records, _declared())
    assert block["learned"] == {"copy:tok_2x": {"nope": [2, 4]}}


def test_looks_decide_a_question_once_and_say_when():
    spec, seeds = SequentialSpec((3, 6, 8), "pocock"), [0, 1, 2]
    records = _records(6, alibi=24)
    block = primary.sequential_block(records, _declared(), spec, seeds)
    assert block["looks_done"] == [3, 6]  # the third look's seeds did not run
    got = {e["label"]: e for e in block["questions"]}
    assert (
        got["alibi"]["decided"] and got["alibi"]["decided_at"] in (3, 6) and len(got["alibi"]["p_looks"]) == 2
    )
    assert not got["t5"]["decided"] and got["t5"]["decided_at"] is None
    assert block["undecided"] == ["t5 vs rope: copy tok_2x"] and not block["all_decided"]
    assert block["plan"]["seeds"] == list(range(8))
    # the looks' levels are below alpha: a p-value that would pass a fixed test at 5% may not
    fixed = primary.fixed_block(records, _declared())
    assert all(e["p"] <= 0.05 or not e["decided"] for e in fixed["questions"])


def test_block_reads_what_run_json_declares():
    records = _records(3)
    assert primary.block(records, None) is None
    assert primary.block(records, {"reference": "sinusoidal", "primary": ["copy:tok_2x"]}) is None  # not run
    q = _declared().to_dict()
    assert primary.block(records, q)["mode"] == "fixed"
    plan = {"looks": [3, 6], "spending": "pocock", "seeds": [0, 1, 2]}
    assert primary.block(records, q, plan)["mode"] == "sequential"
