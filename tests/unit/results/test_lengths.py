"""Length buckets in the unit they are named in (the trained sequence length in tokens), evaluation
lengths given as such multiples, and records written before either still reading under their ids."""

from __future__ import annotations

import math
import textwrap

import pytest

from posenc.compare.grid import build_grid, task_eval
from posenc.compare.profile import PROFILES, load_profile
from posenc.core.errors import PosencError
from posenc.records.spec import RunSpec
from posenc.results import lengths, stats, tables
from posenc.tasks.task_registry import lengths_at_scales, max_sequence_length

SCALES = (0.5, 1.0, 1.25, 1.5, 2.0, 4.0)


@pytest.mark.parametrize(
    ("task", "rows", "expected"),
    [
        ("copy", lambda n: 2 * n + 2, (3, 8, 10, 12, 17, 35)),  # BOS x SEP y: 18 tokens at n = 8
        ("passkey", lambda n: n + 6, (1, 8, 11, 15, 22, 50)),  # BOS key(2) filler(n) SEP key(2): 14
        ("parity", lambda n: n + 3, (2, 8, 10, 13, 19, 41)),
    ],
)
def test_each_scale_gives_the_longest_n_whose_rows_fit(task, rows, expected):
    assert [max_sequence_length(task, n) for n in (1, 8, 30)] == [rows(1), rows(8), rows(30)]
    got = lengths_at_scales(task, 8, SCALES)
    assert got == expected
    trained = rows(8)
    for n, scale in zip(got, SCALES):
        assert rows(n) <= scale * trained < rows(n + 1)  # the longest that fits


def test_a_scale_shorter_than_any_example_is_refused():
    with pytest.raises(PosencError, match=r"eval.scales: 0.1 x the 18 tokens task 'copy' trains on"):
        lengths_at_scales("copy", 8, (0.1,))


@pytest.mark.parametrize("task", ["copy", "passkey"])
def test_quicks_buckets_hold_one_length_each_at_the_multiple_they_name(task):
    """Quick's runs: every bucket past training has one length, as close to its multiple of the
    trained tokens as whole examples allow (copy 1.25x is 22 of 22.5 tokens)."""
    (spec,) = [s for s in build_grid(PROFILES["quick"], seeds=(0,), encodings=("nope",), tasks=(task,)).specs]
    trained = max_sequence_length(task, spec.train.max_len)
    for name, lo, hi in stats.BUCKETS[1:]:
        inside = [n for n in spec.eval.lengths if lo * trained < max_sequence_length(task, n) <= hi * trained]
        assert len(inside) == 1, (name, spec.eval.lengths)
        assert max_sequence_length(task, inside[0] + 1) > hi * trained
    ev = {"lengths": list(spec.eval.lengths)}
    record_spec = {"task": task, "train": {"max_len": spec.train.max_len}}
    assert lengths.ratios(ev, record_spec)[-1] == 4.0 and lengths.ratios(ev, record_spec)[-2] == 2.0


def test_buckets_count_tokens_not_n():
    """passkey trained at n <= 8 (14 tokens): n = 14 is 1.75 n_train but 20 tokens, 1.43x: the
    1.5x bucket; n = 24 (3 n_train) is 30 tokens, 2.14x: the 4x bucket, as its name says."""
    per = {"exact_match": [[1, 1], [0, 1], [0, 0]], "token_accuracy": [[1.0] * 2] * 3,
           "answer_accuracy": [[1.0, 1.0], [0.5, 1.0], [0.0, 0.0]]}  # fmt: skip
    record = {
        "label": "x",
        "spec": {"task": "passkey", "seed": 0, "train": {"max_len": 8}},
        "result": {
            "train": {"converged": True},
            "eval": {"default": {"lengths": [8, 14, 24], "per_example": per}},
        },
    }
    assert stats.units(record, "default", "em_1.5x").tolist() == [0, 1]
    assert stats.units(record, "default", "em_2x") is None  # no length with 21 < tokens <= 28
    assert stats.units(record, "default", "em_4x").tolist() == [0, 0]
    # the record's own token counts win (a task posenc cannot measure from here keeps its buckets)
    ev = record["result"]["eval"]["default"]
    ev.update(tokens=[10, 19, 40], train_tokens=10)
    assert stats.units(record, "default", "em_2x").tolist() == [0, 1]
    record["spec"]["task"] = "mypkg.tasks:Sort"
    assert stats.units(record, "default", "em_4x").tolist() == [0, 0]
    del ev["tokens"]
    assert stats.units(record, "default", "em_4x") is None  # unknown, never guessed
    assert all(math.isnan(v) for v in tables.bucket_values(None, [1.0, 0.5, 0.0]).values())


def test_the_prefix_column_is_the_share_of_the_answer_copied_and_exact_match_is_greedy():
    per = {
        "exact_match": [[1, 1, 1]],  # the teacher-forced pass
        "token_accuracy": [[1.0] * 3],
        "answer_accuracy": [[1.0, 1.0, 0.5]],
        "free_exact_match": [[1, 0, 0]],  # e.g. a dynamic scaling: decoding differs
        "free_prefix": [[10, 4, 0]],
        "answer_tokens": [[10, 10, 10]],
    }
    record = {
        "label": "x",
        "spec": {"task": "copy", "seed": 0, "train": {"max_len": 8}},
        "result": {"train": {"converged": True}, "eval": {"default": {"lengths": [17], "per_example": per}}},
    }
    assert stats.units(record, "default", "pre_2x").tolist() == [1.0, 0.4, 0.0]
    assert stats.units(record, "default", "em_2x").tolist() == [1, 0, 0]
    assert stats.units(record, "default", "tok_2x").tolist() == [1.0, 1.0, 0.5]
    del per["free_exact_match"], per["free_prefix"]  # a record without free-running decoding
    assert stats.units(record, "default", "pre_2x") is None
    assert stats.units(record, "default", "em_2x").tolist() == [1, 1, 1]


def test_the_table_names_the_teacher_forced_column_and_the_caption_the_unit():
    headers = [h for h, _, _ in tables._all_columns({"tasks": ["copy"]})]
    assert "copy prefix 2x" in headers and "copy tf-tok 2x" in headers and "copy tok 2x" not in headers
    text = tables.caption({"tasks": ["copy"], "rows": {}})
    assert (
        "teacher-forced" in text
        and "in the trained sequence length in tokens" in text
        and "n_train" not in text
    )


def _write(tmp_path, body: str):
    path = tmp_path / "mine.toml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('extends = "quick"\n[eval]\nlengths = [4, 8]\n', "set either eval.lengths"),
        ('extends = "quick"\n[eval]\nscales = [1.0, 0.0]\n', "eval.scales = [1.0, 0.0]"),
        ('extends = "quick"\n[eval]\nscales = [0.05]\n', "shorter than its shortest example"),
        ('extends = "quick"\n[eval]\nlm_files = 0\n', "eval.lm_files = 0: must be >= 1"),
        ('extends = "quick"\n[eval]\nlastk_windows = 40\n', "40 windows per test file need"),
    ],
)
def test_a_profile_with_lengths_it_cannot_evaluate_is_refused_by_key(tmp_path, body, words):
    with pytest.raises(PosencError, match=words.replace("[", r"\[").replace("]", r"\]")):
        load_profile(_write(tmp_path, body))


def test_a_profile_extending_quick_gives_lengths_by_emptying_scales(tmp_path):
    mine = load_profile(_write(tmp_path, 'extends = "quick"\n[eval]\nscales = []\nlengths = [4, 8, 16]\n'))
    assert task_eval("copy", mine.task_train, mine.eval).lengths == (4, 8, 16)
    assert task_eval("copy", PROFILES["quick"].task_train, PROFILES["quick"].eval).lengths == (
        3,
        8,
        10,
        12,
        17,
        35,
    )
    assert task_eval("lm", mine.lm_train, PROFILES["quick"].eval) == PROFILES["quick"].eval


#: Run ids of records written before test splits, free-running decoding and token buckets (pinned
#: then): a spec read from such a record (no ``free_running``, ``lm_files``, ``scales``) hashes to them.
OLD_IDS = {"copy nope seed0": "4850a8e2416c7eec", "lm alibi seed0": "07b82c52f6f9bb9a"}
OLD_EVAL = {
    "lengths": [4, 8, 10, 12, 14, 16, 24, 32],
    "lm_lengths": [32, 64, 96, 128, 192, 256, 512],
    "lm_bytes": 6144,
    "lastk_windows": 32,
}


@pytest.mark.parametrize("key", sorted(OLD_IDS))
def test_an_older_record_keeps_its_run_id(key):
    task, label, seed = key.split()
    (spec,) = [s for s in build_grid(PROFILES["quick"], seeds=(int(seed[4:]),), encodings=(label,), tasks=(task,)).specs
               if s.label == label]  # fmt: skip
    data = spec.to_dict()
    for name in ("free_running", "lm_files", "scales"):
        del data["eval"][name]
    data["eval"].update(OLD_EVAL)
    data["benchmark"] = 2  # written then; quick's LM stopped at a plateau from step 600
    if task == "lm":
        data["train"].update(plateau=0.02, plateau_after=600)
    old = RunSpec.from_dict(data)
    assert old.run_id == OLD_IDS[key] != spec.run_id
    assert (old.eval.free_running, old.eval.lm_files) == (False, 0)


def test_token_ratios_of_the_grid_task():
    ev = {"lengths": [4, 5, 6, 8]}
    ratios = lengths.ratios(ev, {"task": "grid", "train": {"max_len": 4}})
    assert ratios == pytest.approx([1.0, 29 / 20, 2.0, 68 / 20])
    assert lengths.in_range(ev, {"task": "grid", "train": {"max_len": 4}}, 1.25, 1.5) == [1]
