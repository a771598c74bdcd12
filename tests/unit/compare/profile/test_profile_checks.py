"""Every value of a benchmark profile checked before any run: finite floats, the ranges AdamW and
the evaluation need, keys that must agree, names in every list key, the model's memory and the
LM's corpus bytes against the machine, quoted ``--set`` keys, a linear ``--print-config``, a full
disk that names the file, and ``config.toml`` describing the grid its directory's summaries do."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path

import pytest
import tomlkit
from click.testing import CliRunner

from posenc.cli import main
from posenc.compare import CONFIG_DIR, CONFIG_FILE, compare
from posenc.compare.grid import build_grid
from posenc.compare.profile import (
    MAX_COUNT,
    PROFILES,
    Option,
    check_fits,
    dump_profile,
    load_profile,
    memory_needed,
    parameter_count,
)
from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.nn import transformer as posenc_model
from posenc.records import benchmark_scalings, files
from posenc.results import write_outputs


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
# --set: quoted keys; options named in their own errors.
# ---------------------------------------------------------------------------


def test_set_addresses_an_import_spec_in_quotes():
    """Found: --set 'encoding_config."pkg.mod:Class".base=...' was split on every dot."""
    spec = "posenc.encoding.rotary.rope:RoPE"
    prof = load_profile("smoke", [f'encodings=["{spec}"]', f'encoding_config."{spec}".base=500.0'])
    assert prof.encoding_config == {spec: {"base": 500.0}}
    rope = [s for s in build_grid(prof, seeds=(0,)).specs if s.encoding == spec]
    assert rope and all(s.encoding_config["base"] == 500.0 for s in rope)
    message = refused(f'encoding_config."{spec}".bse=1.0')
    assert message.startswith(f'--set: encoding_config."{spec}"') and "did you mean 'base'" in message


def test_an_option_is_named_in_the_error_about_its_key():
    message = refused(options=[Option("--finetune", "finetune", -1)])
    assert message.startswith("--finetune: finetune = -1: must be >= 0"), message
    message = refused(options=[Option("--variants", "variants", ["combine=glue"], add=True)])
    assert message.startswith("--variants: variants = 'combine=glue'"), message
    added = load_profile("smoke", ['variants=["combine=concat"]'], [Option("--variants", "variants", ["inject=every_layer", "combine=concat"], add=True)])  # fmt: skip
    assert added.variants == ("combine=concat", "inject=every_layer")


# ---------------------------------------------------------------------------
# --print-config: linear in the size of the profile.
# ---------------------------------------------------------------------------


def test_print_config_builds_a_long_list_in_one_step(monkeypatch):
    """Found: --print-config with 16k seeds took 28 s (100k: killed after 12 min): tomlkit adds
    array items one at a time, re-indexing the whole array each time. Counted, not timed: the
    per-item inserts must not grow with the number of seeds."""
    inserts = []
    original = tomlkit.items.Array.insert
    monkeypatch.setattr(
        tomlkit.items.Array, "insert", lambda self, *a: (inserts.append(1), original(self, *a))[1]
    )
    counts = {}
    for n in (100, 2000):
        inserts.clear()
        prof = dataclasses.replace(PROFILES["smoke"], seeds=tuple(range(n)))
        text = dump_profile(prof)
        counts[n] = len(inserts)
        assert tomlkit.parse(text)["seeds"] == list(range(n))
    assert counts[2000] == counts[100], counts


def test_a_long_seed_list_round_trips_through_a_file(tmp_path):
    path = tmp_path / "long.toml"
    prof = dataclasses.replace(PROFILES["smoke"], seeds=tuple(range(500)))
    path.write_text(dump_profile(prof))
    assert load_profile(path) == dataclasses.replace(prof, name="long")


# ---------------------------------------------------------------------------
# Before the first run: memory and the LM corpus.
# ---------------------------------------------------------------------------


def test_the_parameter_count_is_a_lower_bound_of_the_built_model():
    for settings in ([], ["model.num_kv_heads=1"], ["model.num_layers=3", "model.ffn_dim=8"]):
        prof = load_profile("smoke", settings)
        config = posenc_model.TransformerConfig(
            vocab_size=256, encoding="nope", **dataclasses.asdict(prof.model)
        )
        built = sum(p.numel() for p in posenc_model.Transformer(config).parameters())
        counted = parameter_count(prof.model, 256)
        assert 0.5 * built < counted <= built, (settings, counted, built)


def test_a_model_too_large_for_the_device_is_refused_before_any_run(tmp_path):
    """Found: model.d_model = 2**63 ended in C++ stack frames; a model that cannot fit started anyway."""
    prof = load_profile("smoke", ["model.d_model=65536", "model.num_heads=1", "tasks=['copy']"])
    params, needed = memory_needed(prof, "copy")
    assert params > 65536**2 and needed > 16 * params
    with pytest.raises(PosencError) as caught:
        check_fits(prof, "cpu", memory=needed - 1)
    message = str(caught.value)
    assert "model" in message and "parameters" in message and "GiB" in message and "cpu has" in message
    check_fits(prof, "cpu", memory=needed)  # fits exactly: no error
    huge = load_profile("smoke", ["model.d_model=1048576", "model.num_heads=1", "model.num_layers=64"])
    with pytest.raises(PosencError, match="needs at least"):  # on this machine, whatever its memory
        compare(huge, out=tmp_path, show_progress=False, log=lambda _: None)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("eval.lm_bytes=1000000000", "eval.lm_bytes"),
        ("eval.lastk_contexts=[1.0, 10000000.0]", "eval.lastk_contexts"),
        ("lm_train.max_len=100000000", "lm_train.max_len"),
    ],
)
def test_lm_bytes_past_the_corpus_are_refused_before_any_run(setting, key):
    with pytest.raises(PosencError) as caught:  # at load (a test file's span) or before the runs (the corpus)
        prof = load_profile("smoke", [setting, "lm_train.batch_size=1", "eval.lm_lengths=[16]"])
        check_fits(prof, "cpu", memory=1 << 60)
    message = str(caught.value)
    assert key.removeprefix("eval.") in message and ("corpus" in message or "span" in message), message


def test_the_shipped_profiles_fit_a_laptop():
    for name, prof in PROFILES.items():
        if not name.startswith("paper-") and name != "full":
            check_fits(prof, "cpu", memory=8 << 30)


# ---------------------------------------------------------------------------
# Files: a full disk names the file; config.toml describes the summaries' grid.
# ---------------------------------------------------------------------------


def _full_disk(monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", fsync)


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    """Found: 'posenc: error: No space left on device' named nothing."""
    _full_disk(monkeypatch)
    with pytest.raises(OSError) as caught:
        files.atomic_write_text(tmp_path / "summary.json", "{}")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "summary.json")
    assert not list(tmp_path.iterdir())  # no temp file left behind
    args = ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy", "--seeds", "0"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out"), "--no-report"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert str(tmp_path / "out") in lines[0] and "No space left on device" in lines[0], lines[0]


def test_config_toml_describes_the_grid_of_the_summaries_when_two_invocations_share_out(tmp_path):
    """Found: two invocations on one --out left config.toml describing the other's grid. Here B runs
    from start to end while A is between its runs and its summaries (the interleaving that did it)."""
    out = tmp_path / "out"
    base = dataclasses.replace(load_profile("smoke", ["tasks=['copy']", "encodings=['nope']"]), workers=1)
    first, second = (dataclasses.replace(base, seeds=(seed,), name=f"seed{seed}") for seed in (0, 1))
    quiet = dict(show_progress=False, log=lambda _: None)

    def outputs_after_another_invocation(path, *, run_ids, profile, log):
        compare(second, out=out, outputs=lambda p, **kw: write_outputs(p, report=False, **kw), **quiet)
        return write_outputs(path, report=False, run_ids=run_ids, profile=profile, log=log)

    compare(first, out=out, outputs=outputs_after_another_invocation, **quiet)
    grid = json.loads((out / "grid.json").read_text())
    stored = load_profile(out / CONFIG_FILE)
    assert stored.seeds == (0,) and grid["profile"] == "seed0"
    assert sorted(s.run_id for s in build_grid(stored).specs) == grid["run_ids"]
    run = json.loads((out / "run.json").read_text())
    assert (
        run["config"] == CONFIG_FILE
        and (out / run["invocation_config"]).read_text() == (out / CONFIG_FILE).read_text()
    )
    own = sorted(p.name for p in (out / CONFIG_DIR).iterdir())  # each invocation's own, both kept
    assert len(own) == 2 and {load_profile(out / CONFIG_DIR / name).seeds for name in own} == {(0,), (1,)}


def test_the_results_lock_can_be_taken_again_by_its_holder(tmp_path):
    from posenc.records.store import ResultStore

    store = ResultStore(tmp_path)
    with store.lock(), store.lock():  # would wait forever on a second flock of its own
        (tmp_path / "inside").write_text("x")
    assert Path(tmp_path / "inside").exists()


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
