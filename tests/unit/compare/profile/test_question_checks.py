"""The checks of a profile's declared questions and plan (``posenc.compare.profile.question_checks``):
each bad value is one error naming its key and what is valid; options that narrow the grid narrow the
questions with it."""

from __future__ import annotations

import pytest

from posenc.compare.profile import ProfileOptions, load_profile
from posenc.core.errors import PosencError


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('questions.reference="ropee"', r"questions.reference = 'ropee': not an encoding.*rope"),
        (
            'questions.against=["nope"]',
            r"questions.against = \['nope'\]: 'nope': each must be an encoding other than the reference",
        ),
        (
            'questions.against=["alibii"]',
            r"'alibii': each must be an encoding other than the reference.*alibi",
        ),
        ('questions.primary=["copyy:tok_2x"]', r"'copyy' is not a task \("),
        ('questions.primary=["copy:tok_3x"]', r"'tok_3x' is not a column of copy"),
        ('questions.primary=["copy:tok_2x", "copy:tok_2x"]', r"names a column twice"),
        ('questions.tests={copy = "wilcoxon"}', r"questions.tests.copy = 'wilcoxon': must be one of welch"),
        ('questions.correction="bonferroni"', r"questions.correction = 'bonferroni': must be one of holm"),
        ("questions.alpha=0.7", r"questions.alpha = 0.7: must be > 0 and < 0.5"),
        ("sequential.looks=[3, 3]", r"sequential.looks = \[3, 3\]: must grow from at least 3"),
        ("sequential.looks=[2, 4]", r"sequential.looks = \[2, 4\]: every value must be >= 3"),
        ('sequential.spending="linear"', r"sequential.spending = 'linear': must be one of obrien-fleming"),
    ],
)
def test_a_bad_question_or_plan_names_its_key(setting, message):
    with pytest.raises(PosencError, match=message):
        load_profile("smoke", [setting])


def test_options_that_narrow_the_grid_narrow_the_questions():
    smoke = load_profile("smoke")
    assert smoke.questions.primary == ("copy:tok_2x", "lm:bpb_train") and smoke.sequential.declared
    lm_only = load_profile("smoke", options=ProfileOptions(tasks=["lm"]))
    assert lm_only.questions.primary == ("lm:bpb_train",) and lm_only.questions.tests == {"lm": "paired"}
    no_reference = load_profile("smoke", options=ProfileOptions(encodings=["sinusoidal"]))
    assert not no_reference.questions.declared and not no_reference.sequential.declared
    quick = load_profile("quick", options=ProfileOptions(encodings=["rope", "alibi"]))
    assert quick.questions.reference == "rope" and quick.questions.against in (None, ("alibi",))
