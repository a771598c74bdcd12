"""Every value of a benchmark profile checked before any run (``posenc.compare.profile.profile_checks``):
finite floats, the ranges AdamW and the evaluation need, keys that must agree, names in every list key,
scalings the benchmark can build, and what the checks resolved, held by the profile and not data."""

from __future__ import annotations

import dataclasses
import json

import pytest
import tomlkit
from click.testing import CliRunner

from posenc.cli import main
from posenc.compare.profile import (
    MAX_COUNT,
    dump_profile,
    load_profile,
)
from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.records import benchmark_scalings


def refused(*settings: str, source: str = "smoke", options=()) -> str:
    """The one-line error of loading ``source`` with ``--set`` items ``settings``."""
    with pytest.raises(PosencError) as caught:
        load_profile(source, list(settings), options)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------
# Finite floats and the ranges the optimiser and the evaluation need.
# ---------------------------------------------------------------------------

FLOAT_KEYS = [
    ("task_train.lr", "{}"),
    ("lm_train.lr", "{}"),
    ("lr_grid", "[0.001, {}]"),
    ("task_train.converge_at", "{}"),
    ("task_train.betas", "[{}, 0.98]"),
    ("lm_train.betas", "[0.9, {}]"),
    ("task_train.clip_norm", "{}"),
    ("task_train.weight_decay", "{}"),
    ("eval.lastk_contexts", "[1.0, {}]"),
    ("task_train.plateau", "{}"),
]


@pytest.mark.parametrize(("key", "form"), FLOAT_KEYS)
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_nan_and_inf_are_refused_in_every_benchmark_float(key, form, bad):
    """Found: nan / inf passed validation; converge_at=nan and clip_norm=inf trained, then lost the
    training when the record could not be written."""
    message = refused(f"{key}={form.format(bad)}")
    assert "--set" in message and key in message and "finite" in message, message


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("task_train.betas=[1.0, 0.98]", ["task_train.betas", "< 1"]),  # AdamW refuses beta = 1
        ("lm_train.betas=[0.9, 1.5]", ["lm_train.betas", "< 1"]),
        ("eval.lastk_contexts=[0.0]", ["eval.lastk_contexts", "> 0"]),
        ("task_train.converge_at=-0.5", ["task_train.converge_at", ">= 0 and <= 1"]),
        ("task_train.lr=0.0", ["task_train.lr", "> 0"]),
        ("lr_grid=[0.001, 0.0]", ["lr_grid", "> 0"]),
        ("task_train.clip_norm=0.0", ["task_train.clip_norm", "> 0"]),  # clipping to 0 zeroes every step
    ],
)
def test_values_the_optimiser_or_the_evaluation_cannot_take_are_refused(setting, words):
    """Found: betas = [1.0, 0.98] and lastk_contexts = [0.0] trained, then failed."""
    message = refused(setting)
    assert all(word in message for word in words), message


@pytest.mark.parametrize(
    "setting",
    [
        "model.d_model=9223372036854775808",  # 2**63
        "task_train.steps=1000000000000000000000000000000",
        "eval.lengths=[4, 1099511627776]",
        "eval.lm_bytes=4294967296",
        "workers=4294967296",
    ],
)
def test_counts_and_lengths_past_the_largest_are_refused(setting):
    """Found: model.d_model = 2**63 ended in ~50 lines of C++ stack frames."""
    message = refused(setting)
    assert setting.split("=")[0] in message and f"<= {MAX_COUNT}" in message, message


def test_an_integer_too_large_for_a_float_is_one_error():
    message = refused("lr_grid=[1" + "0" * 400 + "]")
    assert "lr_grid[0]" in message and "too large" in message, message


# ---------------------------------------------------------------------------
# Keys that must agree.
# ---------------------------------------------------------------------------


def test_lr_that_differs_from_a_one_rate_grid_is_refused():
    """Found: --set task_train.lr=0.005 with a one-rate lr_grid trained every run at 0.001 while
    OUT/config.toml said 0.005."""
    message = refused("task_train.lr=0.005")  # smoke: lr_grid = [0.001]
    assert message.startswith("--set: task_train.lr = 0.005") and "lr_grid = [0.001]" in message
    assert "lr_grid = []" in message  # how to train at the table's own rate
    message = refused("lr_grid=[0.002]", source="grid")  # grid: quick's lr = 0.001 is set in a file
    assert message.startswith("--set: lr_grid = [0.002]") and "task_train.lr = 0.001" in message


def test_a_one_rate_grid_is_the_lr_of_every_table_that_sets_none():
    prof = load_profile("smoke", ["lr_grid=[0.002]"])  # smoke sets no lr: the grid's rate is it
    assert prof.task_train.lr == prof.lm_train.lr == 0.002
    printed = tomlkit.parse(dump_profile(prof))
    assert printed["task_train"]["lr"] == printed["lm_train"]["lr"] == 0.002  # what OUT/config.toml says
    free = load_profile("smoke", ["lr_grid=[]", "task_train.lr=0.005"])  # no grid: each table's own
    assert free.task_train.lr == 0.005 and free.lm_train.lr == 0.001


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (
            ["task_train.weight_decay=1e300"],
            ["--set: task_train.weight_decay = 1e+300", "task_train.lr = 0.001", "must be < 1000"],
        ),
        (["lm_train.weight_decay=1000.0"], ["--set: lm_train.weight_decay = 1000.0", "is 1"]),  # exactly 1
        (
            ["lr_grid=[1e300]", "task_train.lr=1e300", "lm_train.lr=1e300"],
            ["--set: task_train.lr = 1e+300", "task_train.weight_decay (0.01)", "must be < 100"],
        ),
        (["lr_grid=[0.001, 200.0]"], ["--set: lr_grid = [0.001, 200.0]", "lr_grid[1] = 200", "< 100"]),
        (["lr_grid=[]", "lm_train.lr=150.0"], ["--set: lm_train.lr = 150.0", "lm_train.weight_decay"]),
    ],
)
def test_a_learning_rate_times_weight_decay_of_1_or_more_is_refused(settings, words):
    """Found: --set task_train.weight_decay=1e300 (or lr_grid = [1e300] with lr = 1e300) passed the
    check, then every run stopped at step 1 ("training loss became nan"): AdamW's decoupled decay
    multiplies each weight by 1 - lr x weight_decay per step, so no run can train at lr x
    weight_decay >= 1, for any rate it may train at (each of lr_grid, or the table's lr)."""
    message = refused(*settings)
    assert all(word in message for word in words), message
    assert "lr x weight_decay" in message and "< 1" in message, message


def test_a_learning_rate_times_weight_decay_just_below_1_loads():
    prof = load_profile("smoke", ["task_train.weight_decay=999.0", "lr_grid=[]", "lm_train.lr=99.0"])
    assert prof.task_train.weight_decay == 999.0 and prof.lm_train.lr == 99.0
    assert load_profile("smoke", ["lr_grid=[1e300]", "task_train.lr=1e300", "lm_train.lr=1e300",
                                  "task_train.weight_decay=0.0", "lm_train.weight_decay=0.0"])  # fmt: skip


def test_compare_refuses_a_weight_decay_that_zeroes_the_weights_in_one_line(tmp_path):
    result = CliRunner().invoke(
        main,
        ["compare", "--profile", "smoke", "--set", "task_train.weight_decay=1e300", "--out", str(tmp_path)],
    )
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "task_train.weight_decay" in lines[0] and "lr x weight_decay" in lines[0], lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (["task_train.check_every=7"], ["task_train.check_every = 7", "<= steps (6)", "no held-out check"]),
        (["lm_train.plateau_after=7"], ["lm_train.plateau_after = 7", "<= steps (6)"]),
        (["eval.lastk_contexts=[0.25]"], ["eval.lastk_contexts", "fewer than the lastk_k (8)"]),
        (
            ["eval.lm_protocol=sliding", "eval.sliding_stride=65"],
            ["eval.sliding_stride = 65", "longest of lm_lengths (64)"],
        ),
        (["eval.lastk_contexts=[1e300]"], ["eval.lastk_contexts", "longer than"]),
    ],
)
def test_keys_that_contradict_each_other_are_refused(settings, words):
    message = refused(*settings)
    assert all(word in message for word in words), message


def test_the_lm_only_keys_are_not_checked_without_the_lm():
    prof = load_profile("smoke", ["tasks=['copy']", "eval.lastk_contexts=[0.25]"])
    assert prof.eval.lastk_contexts == (0.25,)


# ---------------------------------------------------------------------------
# Names in every key that takes names.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ('randomized=["ropee"]', ["randomized", "'ropee' is not an encoding", "did you mean 'rope'"]),
        ('variant_encodings=["sinusoidl"]', ["variant_encodings", "did you mean 'sinusoidal'"]),
        ('variant_encodings=["rope"]', ["variant_encodings", "'rope' is rotary", "additive encodings only"]),
        ('tune_share={copy="nosuch"}', ["tune_share.copy = 'nosuch'", "'nosuch' is not a task"]),
        ('tune_share={passkey="cpy"}', ["tune_share.passkey", "did you mean 'copy'"]),
        ('tune_share={passkye="copy"}', ["tune_share.passkye", "did you mean 'passkey'"]),
        ('tune_share={lm="copy"}', ["tune_share.lm", "different data"]),
        ('tune_share={copy="copy"}', ["tune_share.copy", "not its own"]),
        (
            'tune_share={"architecture variants"="copy"}',
            ["tune_share", '"architecture variants" = "default"'],
        ),
        ('randomized_max_len=["paperr"]', ["randomized_max_len", "did you mean 'paper'"]),
        ('eval.lm_protocol="slidng"', ["eval.lm_protocol", "did you mean 'sliding'"]),
        ('precision="bf61"', ["precision", "did you mean 'bf16'"]),
        ('scalings=["yran:4"]', ["scalings", "did you mean 'yarn'"]),
        ('scalings=["yarn:inf"]', ["scalings", "factor must be a number > 1 and finite"]),
    ],
)
def test_a_name_in_a_list_key_that_is_not_one_is_refused_with_the_closest(setting, words):
    """Found: randomized = ["ropee"] silently dropped the run; tune_share = {copy = "nosuch"} was
    accepted."""
    message = refused(setting)
    assert message.startswith("--set: ") and all(word in message for word in words), message


def test_every_valid_name_spelling_still_loads():
    prof = load_profile(
        "smoke", ['randomized="all"', 'tune_share={passkey="copy", "architecture variants"="default"}']
    )
    assert prof.randomized == ("*",) and dict(prof.tune_share)["passkey"] == "copy"


# ---------------------------------------------------------------------------
# RoPE scalings: every one the check accepts is one the benchmark builds.
# ---------------------------------------------------------------------------


def test_every_scaling_the_check_accepts_is_one_the_benchmark_builds():
    """Found: scalings = ["llama3:4"] (or longrope:4) passed the check, then failed at evaluation:
    the benchmark gave each scaling only its factor and the original context."""
    assert {"linear", "ntk", "dynamic", "yarn", "llama3"} <= set(benchmark_scalings.types())
    for name in [f"{rope_type}:4" for rope_type in benchmark_scalings.types()] + ["yarn-dynamic"]:
        assert load_profile("smoke", [f'scalings=["{name}"]']).scalings == (name,)
        params = benchmark_scalings.scaling_dict(
            benchmark_scalings.parse(name), dim=16, base=10000.0, original=64, seq_len=256
        )
        rope_scaling.validate(params, dim=16)  # a missing key or a bad value raises here
        inv_freq, _ = rope_scaling.compute(params, dim=16, base=10000.0, seq_len=256)
        assert inv_freq.shape == (8,), name
    llama3 = benchmark_scalings.scaling_dict(
        benchmark_scalings.parse("llama3:4"), dim=16, base=10000.0, original=64
    )
    assert (llama3["low_freq_factor"], llama3["high_freq_factor"]) == (1.0, 4.0)  # Llama 3.1's bands


def test_llama3_is_evaluated_with_llama_3_1_bands_after_its_fine_tune(tmp_path):
    args = [
        "compare", "--profile", "smoke", "--encodings", "rope", "--tasks", "lm", "--seeds", "0",
        "--scalings", "llama3:2", "--finetune", "2", "--out", str(tmp_path), "--format", "json", "--no-report",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (record,) = [
        json.loads(p.read_text()) for p in tmp_path.rglob("*.json") if p.parent.parent.name == "runs"
    ]
    method = record["result"]["eval"]["llama3:2"]["method"]
    assert method["params"]["low_freq_factor"] == 1.0 and method["params"]["high_freq_factor"] == 4.0
    assert method["finetune"]["steps"] == 2 and "outside_regime" not in method


@pytest.mark.parametrize(
    "given",
    [["--scalings", "longrope:4"], ["--set", 'scalings=["longrope:4"]']],
    ids=["option", "set"],
)
def test_a_scaling_the_benchmark_cannot_build_is_refused_in_one_line(tmp_path, given):
    """LongRoPE's per-frequency factors are searched for one model: no benchmark can choose them."""
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", *given, "--out", str(tmp_path)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "scalings = 'longrope:4'" in lines[0], lines
    assert "short_factor" in lines[0] and "long_factor" in lines[0] and "posenc extend" in lines[0], lines
    assert not (tmp_path / "runs").exists()
    assert "longrope" not in benchmark_scalings.types()  # nor offered in --scalings' help


def test_a_registered_scaling_with_keys_of_its_own_is_refused_naming_them():
    base = rope_scaling.ROPE_SCALINGS["linear"]
    rope_scaling.register_scaling("banded", dataclasses.replace(base, required=("factor", "band_edges")))
    try:
        message = refused('scalings=["banded:2"]')
        assert "scalings = 'banded:2'" in message and "band_edges" in message, message
    finally:
        rope_scaling.unregister_scaling("banded")


# ---------------------------------------------------------------------------
# What the checks resolved is held by the profile, and is not data.
# ---------------------------------------------------------------------------


def test_a_loaded_profile_holds_its_classes_and_parsed_scalings_which_no_file_sets():
    from posenc.compare.profile import Resolved
    from posenc.registry import get_encoding_class

    prof = load_profile("quick")
    assert set(prof.resolved.classes) >= set(prof.encodings or ()) and prof.scalings
    assert all(cls is get_encoding_class(name) for name, cls in prof.resolved.classes.items())
    assert {text: parsed.text for text, parsed in prof.resolved.scalings.items()} == {
        t: t for t in prof.scalings
    }
    assert prof.scaling(prof.scalings[0]) is prof.resolved.scalings[prof.scalings[0]]
    # not data: in no dict, file or comparison
    assert "resolved" not in prof.to_dict() and "resolved" not in dump_profile(prof)
    assert prof == dataclasses.replace(prof, resolved=Resolved()) and "resolved" not in repr(prof)
    assert "resolved: unknown key" in refused("resolved=1")
