"""The shipped profiles: each expands to the very runs (content-hashed run ids) it did before
the profiles became data files, so records on disk and the shipped learning-rate choices
still match them."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

import posenc
from posenc.compare.grid import build_grid
from posenc.compare.profile import PROFILES, load_profile
from posenc.core.errors import PosencError
from posenc.registry import ENCODINGS
from posenc.tasks import ALL_TASKS

PINNED = json.loads((Path(__file__).parents[3] / "data" / "profile_run_ids.json").read_text())["profiles"]


def _key(spec) -> str:
    return f"{spec.task} {spec.label} seed{spec.seed}"


def test_every_shipped_profile_is_pinned():
    assert set(PINNED) == set(PROFILES)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_shipped_profile_gives_the_pinned_run_ids(name):
    specs = build_grid(PROFILES[name]).specs
    produced = {_key(spec): spec.run_id for spec in specs}
    assert len(produced) == len(specs)  # one run per (task, label, seed)
    assert all(spec.profile == name for spec in specs)
    pinned = PINNED[name]
    missing = sorted(set(pinned) - set(produced))
    assert not missing, f"{name}: runs no longer in the grid: {missing[:5]}"
    changed = sorted(k for k in pinned if produced[k] != pinned[k])
    assert not changed, f"{name}: run ids changed: {changed[:5]}"
    # Runs beyond the pinned ones may only come from encodings registered since (profiles
    # that take every registered encoding grow with the registry).
    pinned_encodings = {spec.encoding for spec in specs if _key(spec) in pinned}
    extra = [spec for spec in specs if _key(spec) not in pinned]
    assert all(spec.encoding not in pinned_encodings and spec.encoding in ENCODINGS for spec in extra), [
        _key(spec) for spec in extra[:5]
    ]


# ---------------------------------------------------------------------------
# Profile files of one's own: extends, overrides, and errors that name the key.
# ---------------------------------------------------------------------------


def _write(tmp_path, text: str, name: str = "exp.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_shipped_profiles_that_extend_quick_train_and_evaluate_like_it():
    quick = PROFILES["quick"]
    for name in ("standard", "notes"):
        other = PROFILES[name]
        assert (other.model, other.task_train, other.lm_train, other.eval) == (
            quick.model, quick.task_train, quick.lm_train, quick.eval
        )  # fmt: skip
        assert other.lr_grid == quick.lr_grid and other.description != quick.description
    assert PROFILES["standard"].encodings is None  # "all": every registered encoding
    assert PROFILES["full"].tasks == ALL_TASKS and PROFILES["full"].randomized == ("*",)
    assert PROFILES["notes"].variant_encodings == ("sinusoidal", "learned")


def test_a_file_extending_a_shipped_profile_changes_only_what_it_sets(tmp_path):
    path = _write(tmp_path, """
        extends = "quick"
        tasks = ["copy"]
        [task_train]
        steps = 1501
        [model]
        d_model = 128
    """)  # fmt: skip
    mine, quick = load_profile(path), PROFILES["quick"]
    assert mine.name == "exp" and mine.description == "" and mine.tasks == ("copy",)
    assert mine.model == dataclasses.replace(quick.model, d_model=128)
    assert mine.task_train == dataclasses.replace(quick.task_train, steps=1501)
    assert (mine.lm_train, mine.eval, mine.encodings, mine.seeds) == (
        quick.lm_train, quick.eval, quick.encodings, quick.seeds
    )  # fmt: skip
    # A different model or step cap is a different run: no pinned id survives.
    ids = {spec.run_id for spec in build_grid(mine).specs}
    assert ids and not ids & set(PINNED["quick"].values())
    # extends by a path relative to the file, and a chain of two
    again = _write(tmp_path, 'extends = "exp.toml"\nseeds = [7]\n', "again.toml")
    assert load_profile(again).model.d_model == 128 and load_profile(again).seeds == (7,)


def test_encoding_config_overrides_one_encoding_in_every_run(tmp_path):
    path = _write(tmp_path, """
        extends = "smoke"
        encodings = ["rope", "nope"]
        [encoding_config.rope]
        base = 500.0
    """)  # fmt: skip
    specs = build_grid(load_profile(path), seeds=(0,)).specs
    rope = [s for s in specs if s.encoding == "rope"]
    assert rope and all(s.encoding_config["base"] == 500.0 for s in rope)
    plain = build_grid(dataclasses.replace(load_profile(path), encoding_config={}), seeds=(0,)).specs
    assert [s.run_id for s in specs if s.encoding == "nope"] == [
        s.run_id for s in plain if s.encoding == "nope"
    ]
    assert not {s.run_id for s in rope} & {s.run_id for s in plain}
    model = posenc.build_for_model("rope", d_model=16, num_heads=2, **rope[0].encoding_config)
    assert model.config.base == 500.0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[model]\nd_modle = 128\n", ["exp.toml", "model.d_modle", "unknown key", "did you mean 'd_model'"]),
        ("wrkers = 2\n", ["exp.toml", "wrkers", "did you mean 'workers'"]),
        ('seeds = "0"\n', ["exp.toml", "seeds = '0'", "must be a list"]),
        ("[task_train]\nsteps = 0\n", ["task_train.steps = 0", "must be >= 1"]),
        ("[task_train]\nsteps = 1.5\n", ["task_train.steps = 1.5", "must be an integer"]),
        ("[eval]\nlengths = [4, 0]\n", ["eval.lengths = [4, 0]", "every value must be >= 1"]),
        ("[task_train]\nconverge_at = 1.5\n", ["task_train.converge_at = 1.5", "<= 1"]),
        ("[task_train]\nmin_len = 9\n", ["task_train.min_len = 9", "must be <= max_len (8)"]),
        ("[model]\nd_model = 10\n", ["exp.toml", "model", "d_model must be divisible by num_heads"]),
        ("[model]\nnum_kv_heads = 3\n", ["model", "num_kv_heads must divide num_heads=4"]),
        ('[model]\ncombine = "mix"\n', ["model", "combine"]),
        ('tasks = ["cpy"]\n', ["tasks", "'cpy' is not a task"]),
        ('scalings = ["yarn:0.5"]\n', ["scalings = 'yarn:0.5'", "factor must be a number > 1"]),
        ('variants = ["combine=glue"]\n', ["variants = 'combine=glue'", "combine"]),
        ('schedules = ["irope:0"]\n', ["schedules = 'irope:0'"]),
        ('[eval]\nlm_protocol = "windows"\n', ["eval.lm_protocol = 'windows'", "nonoverlapping"]),
        ("[encoding_config.ropee]\nbase = 1.0\n", ["encoding_config.ropee", "did you mean 'rope'"]),
        ("[encoding_config.rope]\nbse = 1.0\n", ["encoding_config.rope", "bse"]),
        ("[encoding_config.rope]\nbase = -1.0\n", ["encoding_config.rope", "base"]),
        ("[encoding_config.rope]\nhead_dim = 8\n", ["encoding_config.rope.head_dim = 8", "set by the model"]),
        ("extends = 4\n", ["extends = 4", "shipped profile name or a path"]),
        ('extends = "quik"\n', ["no shipped profile 'quik'", "did you mean 'quick'"]),
        ("tasks = [\n", ["exp.toml", "not a valid TOML file"]),
    ],
)
def test_a_bad_entry_is_one_error_naming_the_file_and_the_key(tmp_path, text, words):
    base = "" if text.startswith("extends") else 'extends = "quick"\n'
    path = _write(tmp_path, base + text)
    with pytest.raises(PosencError) as caught:
        load_profile(path)
    message = str(caught.value)
    assert "\n" not in message and all(word in message for word in words), message


def test_a_missing_key_without_default_and_a_cycle_are_named(tmp_path):
    path = _write(tmp_path, 'tasks = ["copy"]\nseeds = [0]\n')
    with pytest.raises(PosencError, match="exp.toml: encodings: missing"):
        load_profile(path)
    _write(tmp_path, 'extends = "b.toml"\n', "a.toml")
    _write(tmp_path, 'extends = "a.toml"\n', "b.toml")
    with pytest.raises(PosencError, match="extends itself"):
        load_profile(tmp_path / "a.toml")
    with pytest.raises(PosencError, match="cannot read profile file"):
        load_profile(tmp_path / "none.toml")
    with pytest.raises(PosencError, match="larger than 1 MiB"):
        load_profile("/dev/zero")  # endless: refused, not read until memory runs out
