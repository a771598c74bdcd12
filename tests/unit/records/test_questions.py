"""A profile's declared questions and its plan (``posenc.records.questions``): the seeds each look takes
and the round trip through ``run.json``."""

from __future__ import annotations

import json

from posenc.records.questions import Questions, SequentialSpec, look_seeds


def test_a_look_takes_the_profiles_seeds_first_then_the_integers_after_them():
    assert look_seeds([0, 1, 2], 3) == (0, 1, 2)
    assert look_seeds([0, 1, 2], 6) == (0, 1, 2, 3, 4, 5)
    assert look_seeds([7, 3], 4) == (7, 3, 8, 9)  # after the largest, never a seed twice
    assert look_seeds([0, 1, 2, 3, 4], 3) == (0, 1, 2)  # a first look below the profile's seeds


def test_questions_and_plans_survive_run_json():
    q = Questions("rope", ("alibi", "nope"), ("copy:tok_1.25x", "lm:bpb_train"), {"copy": "welch-exact"})
    back = Questions.from_dict(json.loads(json.dumps(q.to_dict())))
    assert back == q and back.declared and back.test("copy") == "welch-exact" and back.test("lm") == "welch"
    assert back.columns() == [("copy", "tok_1.25x"), ("lm", "bpb_train")]
    assert Questions.from_dict(None) == Questions() and not Questions().declared
    assert Questions.from_dict({"reference": "rope"}).against is None  # every other encoding
    plan = SequentialSpec((3, 6, 8, 10), "pocock")
    assert SequentialSpec.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan and plan.declared
    assert not SequentialSpec.from_dict("junk").declared
