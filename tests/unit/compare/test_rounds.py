"""The pieces of ``posenc compare --until decided`` (``posenc.compare.rounds``): the budget, the seeds
and grid of each look, the plan kept with a run and refused when changed. The loop itself runs end to
end in tests/unit/compare/test_compare.py and tests/unit/cli/test_compare_command.py."""

from __future__ import annotations

import json

import pytest

from posenc.compare import questions_info, rounds
from posenc.compare.profile import get_profile
from posenc.core.errors import PosencError

QUICK = get_profile("quick")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800.0), ("1h", 3600.0), ("90s", 90.0), ("1800", 1800.0), ("1.5m", 90.0), (None, None)],
)
def test_a_budget_is_a_time(text, seconds):
    assert rounds.parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "30 min", "m", "1d"])
def test_a_budget_that_is_not_a_time_names_the_option(text):
    with pytest.raises(PosencError, match="--budget must be a positive time"):
        rounds.parse_budget(text)


def test_quick_declares_eight_questions_and_a_plan():
    q = questions_info(QUICK)
    assert q["reference"] == "rope" and sorted(q["against"]) == ["alibi", "nope", "sinusoidal", "t5"]
    assert q["primary"] == ["copy:tok_1.25x", "lm:bpb_train"] and q["correction"] == "holm"
    assert QUICK.sequential.looks[0] == len(QUICK.seeds)  # the first look is the published table
    assert questions_info(get_profile("standard")) is None  # no questions: everything exploratory


def test_each_look_adds_new_seeds_for_the_questions_grid_only():
    looks = QUICK.sequential.looks
    seen = [s for i in range(len(looks)) for s in rounds.new_seeds(QUICK, i)]
    assert seen == list(range(looks[-1]))  # every seed once, in order
    assert rounds.new_seeds(QUICK, 0) == tuple(QUICK.seeds)
    later = rounds.questions_profile(QUICK)
    assert later.tasks == ("copy", "lm") and "passkey" in QUICK.tasks  # no task without a question
    assert later.scalings == () and later.variants == () and later.finetune == 0
    assert set(later.encodings) == set(QUICK.encodings)


def test_a_look_starts_only_if_it_ends_within_the_budget():
    assert rounds.fits_budget(100.0, None, 1000, 10.0)  # nothing measured yet: the first look runs
    assert rounds.fits_budget(100.0, 0.05, 1000, None)  # no budget
    assert rounds.fits_budget(100.0, 0.05, 1000, 150.0)
    assert not rounds.fits_budget(100.0, 0.05, 1001, 150.0)


def test_a_directory_run_on_another_plan_is_refused(tmp_path):
    plan = rounds.plan_info(QUICK, questions_info(QUICK))
    rounds.check_same_plan(tmp_path, plan)  # no run.json: nothing to resume
    (tmp_path / "run.json").write_text(json.dumps({"profile": "quick"}))
    rounds.check_same_plan(tmp_path, plan)  # a run without a plan: its records are the first look's
    (tmp_path / "run.json").write_text(json.dumps({"until": {"plan": plan}}))
    rounds.check_same_plan(tmp_path, plan)  # the same plan resumes
    other = {**plan, "looks": [3, 5, 7, 10]}
    with pytest.raises(
        PosencError, match=r"another plan \(looks \[3, 6, 8, 10\].*does not hold its error rate"
    ):
        rounds.check_same_plan(tmp_path, other)


def test_progress_names_what_is_decided_and_what_is_not():
    status = {"questions": [
        {"label": "alibi", "reference": "rope", "task": "copy", "column": "tok_1.25x", "decided": True,
         "diff": 0.6, "decided_at": 6},
        {"label": "sinusoidal", "reference": "rope", "task": "copy", "column": "tok_1.25x", "decided": False,
         "p_looks": [0.3, 0.2]},
    ]}  # fmt: skip
    lines = rounds.progress_text(status, 6, 1, 4, 300.0)
    assert lines[0] == "look 2 of 4 (6 seeds per encoding, 300 s so far): 1 of 2 questions decided"
    assert "decided: alibi - rope, copy tok_1.25x (+0.6, at 6 seeds)" in lines[1]
    assert "undecided: sinusoidal - rope, copy tok_1.25x (p 0.2 at 6 seeds)" in lines[2]
