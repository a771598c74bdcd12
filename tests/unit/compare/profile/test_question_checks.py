"""The checks of a profile's declared questions and plan (``posenc.compare.profile.question_checks``):
each bad value is one error naming its key and what is valid; options that narrow the grid narrow the
questions with it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from posenc.cli import main
from posenc.compare import compare_until_decided
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
    assert smoke.resolved.notes == () and lm_only.resolved.notes == () and quick.resolved.notes == ()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (ProfileOptions(encodings=["sinusoidal", "alibi"]), "need rope, which this grid leaves out"),
        (ProfileOptions(tasks=["passkey"]), "need the task(s) copy, lm, which this grid leaves out"),
        (ProfileOptions(encodings=["rope"]), "have no encoding to compare with rope in this grid"),
    ],
)
def test_questions_a_narrowed_grid_cannot_ask_are_said_to_be_set_aside(options, words):
    """Found: ``posenc compare --encodings alibi,t5`` dropped quick's questions without a word."""
    prof = load_profile("quick", options=options)
    assert not prof.questions.declared
    (note,) = prof.resolved.notes
    assert words in note and "every pair of the table is exploratory" in note
    with pytest.raises(
        PosencError, match="declares no questions for this grid .*leaves out|no encoding to compare"
    ):
        compare_until_decided(prof, decide=lambda *a, **k: None, out="unused")


def test_the_note_is_said_by_print_config_and_by_a_run_once_its_checks_pass(tmp_path):
    result = CliRunner().invoke(main, ["compare", "--encodings", "alibi,t5", "--print-config"])
    assert result.exit_code == 0, result.output
    assert "note: the profile's declared questions (each encoding against rope" in result.stderr
    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["compare", "--profile", "smoke", "--encodings", "sinusoidal", "--tasks", "copy",
                                    "--seeds", "0", "--out", str(out), "--no-report", "--format", "json"])  # fmt: skip
    assert run.exit_code == 0, run.output
    notes = [line for line in run.stderr.splitlines() if line.startswith("note: ")]
    assert notes == ["note: the profile's declared questions (each encoding against nope in copy:tok_2x, "
                     "lm:bpb_train) need nope, which this grid leaves out: every pair of the table is exploratory"]  # fmt: skip
