"""Loading a profile (``posenc.compare.profile.load``). The shipped profiles: each expands to the very
runs (content-hashed run ids) it did before the profiles became data files, so records on disk and the
shipped learning-rate choices still match them; the papers' protocols among them. Files of one's own
(``extends``, overrides, errors naming the file and the key), and the command's options and ``--set``
items applied on top, each named in the error about its key."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import posenc
from posenc import compare
from posenc.cli import main
from posenc.compare.grid import build_grid
from posenc.compare.profile import (
    PROFILES,
    Option,
    ProfileOptions,
    dump_profile,
    load_profile,
)
from posenc.core.errors import PosencError
from posenc.records.store import ResultStore
from posenc.registry import ENCODINGS
from posenc.results import claims, tables
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
    with pytest.raises(PosencError, match="a character device"):
        load_profile("/dev/zero")  # endless: refused before it is opened
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(PosencError, match="larger than 1 MiB"):
        load_profile(big)  # read only to the limit


# ---------------------------------------------------------------------------
# The command's options, applied by the loader and named in its errors.
# ---------------------------------------------------------------------------


def refused(options: ProfileOptions, settings: tuple[str, ...] = ()) -> str:
    with pytest.raises(PosencError) as caught:
        load_profile("smoke", settings, options)
    return str(caught.value)


def one_line(args: list[str], out: Path) -> str:
    result = CliRunner().invoke(main, ["compare", "--profile", "smoke", *args, "--out", str(out)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.output)
    assert lines[0].startswith("posenc: error:") and "Traceback" not in result.output
    assert not (out / "runs").exists()
    return lines[0]


def test_profile_options_become_options_naming_their_flags():
    given = ProfileOptions(seeds=(4, 5), variants=("combine=concat",), kv_heads=1, device="cpu")
    assert given.options() == [
        Option("--seeds", "seeds", [4, 5]),
        Option("--variants", "variants", ["combine=concat"], add=True),
        Option("--kv-heads", "model.num_kv_heads", 1),
        Option("--device", "device", "cpu"),
    ]
    assert given.flags() == {
        "seeds": "--seeds", "variants": "--variants", "model.num_kv_heads": "--kv-heads", "device": "--device",
    }  # fmt: skip
    prof = load_profile("smoke", ("seeds=[0]",), given)
    assert (prof.seeds, prof.model.num_kv_heads, prof.device) == ((4, 5), 1, "cpu")
    assert "combine=concat" in prof.variants


def test_the_loader_names_the_option_and_the_valid_range():
    assert refused(ProfileOptions(seeds=[-1])).startswith("--seeds: seeds = [-1]: every value must be >= 0")
    message = refused(ProfileOptions(kv_heads=3))  # the smoke profile's model has 2 heads
    assert message.startswith("--kv-heads: model.num_kv_heads = 3:") and "[1, 2], got 3" in message
    message = refused(ProfileOptions(kv_heads="llama-3.1"))
    assert (
        message.startswith("--kv-heads: model.num_kv_heads = 'llama-3.1':") and "4 query heads per" in message
    )
    message = refused(ProfileOptions(kv_heads="lama-3.1"))
    assert "a preset name" in message and "did you mean 'llama-3.1'" in message
    message = refused(ProfileOptions(kv_heads=3), ("model.num_heads=4",))
    assert message.startswith("--kv-heads:") and "num_kv_heads must divide num_heads=4" in message


def test_a_preset_names_the_key_value_heads_in_a_file_and_in_set(tmp_path):
    path = tmp_path / "gqa.toml"
    path.write_text('extends = "smoke"\n[model]\nnum_heads = 8\nd_model = 32\nnum_kv_heads = "llama-3.1"\n')
    prof = load_profile(path)
    assert prof.model.num_kv_heads == 2  # Llama 3.1: 4 query heads per key/value head
    assert "num_kv_heads = 2" in dump_profile(prof)  # the printed config holds the number
    assert load_profile("smoke", ("model.num_kv_heads=gemma-3-12b",)).model.num_kv_heads == 1
    with pytest.raises(PosencError, match=r"^--set: model.num_kv_heads = 'gemma-9': must be an integer"):
        load_profile("smoke", ("model.num_kv_heads=gemma-9",))


def test_a_stride_without_sliding_windows_is_refused(tmp_path):
    assert refused(ProfileOptions(sliding_stride=8)).startswith(
        "--sliding-stride needs --lm-protocol sliding"
    )
    ok = load_profile("smoke", ("eval.lm_protocol=sliding",), ProfileOptions(sliding_stride=8))
    assert (ok.eval.lm_protocol, ok.eval.sliding_stride) == ("sliding", 8)
    line = one_line(["--sliding-stride", "8"], tmp_path / "out")
    assert "--sliding-stride needs --lm-protocol sliding" in line


# ---------------------------------------------------------------------------
# The papers' protocols as shipped profiles: as published (GPU) and scaled to a CPU, run here at smoke size.
# ---------------------------------------------------------------------------


SMOKE = PROFILES["smoke"]

PAPERS = {"paper-nope": "Kazemnejad et al. 2023", "paper-alibi": "Press et al. 2022"}


def test_each_paper_protocol_is_shipped_as_published_and_scaled_and_listed_with_its_source():
    result = CliRunner().invoke(main, ["compare", "--list-profiles", "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    for name, source in PAPERS.items():
        for variant in (name, f"{name}-cpu"):
            assert source in listed[variant]["description"], variant
            assert listed[variant]["why"]
    nope, nope_cpu = PROFILES["paper-nope"], PROFILES["paper-nope-cpu"]
    # the paper's model, lengths, steps, seeds and grid (Kazemnejad et al. 2023 and its released configs)
    assert (nope.model.d_model, nope.model.num_layers, nope.model.num_heads, nope.model.ffn_dim) == (
        768,
        12,
        12,
        3072,
    )
    assert (nope.task_train.min_len, nope.task_train.max_len, max(nope.eval.lengths)) == (1, 20, 40)
    assert (nope.task_train.steps, nope.task_train.batch_size) == (40000, 64)
    assert nope.seeds == (256788, 234054, 146317) and nope.lr_grid == (1e-5, 3e-5, 5e-5)
    assert set(nope.encodings) == {"nope", "t5", "alibi", "rope", "sinusoidal"}
    # the CPU variant keeps the protocol and changes the scale only
    assert (nope_cpu.encodings, nope_cpu.seeds) == (nope.encodings, nope.seeds)
    assert set(nope_cpu.tasks) < set(nope.tasks)
    assert (nope_cpu.task_train.min_len, nope_cpu.task_train.max_len) == (1, 20)
    assert nope_cpu.model == PROFILES["quick"].model and max(nope_cpu.eval.lengths) == 40
    alibi, alibi_cpu = PROFILES["paper-alibi"], PROFILES["paper-alibi-cpu"]
    assert (alibi.model.d_model, alibi.model.num_layers, alibi.model.num_heads) == (1024, 16, 8)
    assert (alibi.lm_train.max_len, alibi.lm_train.steps, alibi.eval.lm_protocol) == (
        512,
        286000,
        "nonoverlapping",
    )
    assert alibi_cpu.tasks == alibi.tasks == ("lm",) and alibi_cpu.encodings == alibi.encodings
    assert (alibi_cpu.model, alibi_cpu.lm_train) == (PROFILES["quick"].model, PROFILES["quick"].lm_train)
    assert max(alibi_cpu.eval.lm_lengths) >= 16 * alibi_cpu.lm_train.max_len


def _smoke_sized(name: str):
    """A paper's CPU profile with smoke's model, step counts and sample sizes (lengths kept)."""
    prof = PROFILES[name]
    train = dataclasses.replace(
        SMOKE.task_train, min_len=prof.task_train.min_len, max_len=prof.task_train.max_len, steps=4
    )
    # L_train 32: t5@scaled sets max_distance to it, which T5's 32 buckets need above 16
    lm = dataclasses.replace(SMOKE.lm_train, max_len=32)
    ev = dataclasses.replace(  # 2 test files x 512 bytes: last-k at 8 x L_train (256) fits a file's span
        prof.eval,
        samples=4,
        lm_lengths=(8, 16, 32, 64),
        lm_bytes=1024,
        lm_files=2,
        lastk_windows=2,
        lastk_k=8,
    )
    return dataclasses.replace(
        prof, model=SMOKE.model, task_train=train, lm_train=lm, eval=ev, lr_grid=(1e-3,), workers=1
    )


@pytest.mark.parametrize("name", ["paper-nope-cpu", "paper-alibi-cpu"])
def test_a_papers_cpu_protocol_runs_end_to_end_at_smoke_size(name, tmp_path):
    prof = _smoke_sized(name)
    seeds = prof.seeds[:1]
    result = compare.compare(prof, seeds=seeds, out=tmp_path, show_progress=False, log=lambda _: None)
    assert not result.outcome.failed, result.outcome.failed
    records = ResultStore(tmp_path).records()
    assert {(r["spec"]["encoding"], r["spec"]["task"]) for r in records} == {
        (e, t) for e in prof.encodings for t in prof.tasks
    }
    assert len(records) == len(build_grid(prof, seeds=seeds).specs)
    summary = tables.summarize(records)
    labels = {spec.label for spec in build_grid(prof, seeds=seeds).specs}  # t5@scaled beside t5 where run
    assert set(summary["rows"]) == labels and summary["columns"]
    assert ("t5@scaled" in labels) == (name == "paper-alibi-cpu")
    rows = claims.claims(records)
    source = PAPERS[name.removesuffix("-cpu")].split(" et al.")[0]
    assert any(source in r["source"] for r in rows)  # the paper's claims are judged from these runs


# ---------------------------------------------------------------------------
# --set: quoted keys; options named in their own errors.
# ---------------------------------------------------------------------------


def refused_loading(*settings: str, source: str = "smoke", options=()) -> str:
    """The one-line error of loading ``source`` with ``--set`` items ``settings``."""
    with pytest.raises(PosencError) as caught:
        load_profile(source, list(settings), options)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_set_addresses_an_import_spec_in_quotes():
    """Found: --set 'encoding_config."pkg.mod:Class".base=...' was split on every dot."""
    spec = "posenc.encoding.rotary.rope:RoPE"
    prof = load_profile("smoke", [f'encodings=["{spec}"]', f'encoding_config."{spec}".base=500.0'])
    assert prof.encoding_config == {spec: {"base": 500.0}}
    rope = [s for s in build_grid(prof, seeds=(0,)).specs if s.encoding == spec]
    assert rope and all(s.encoding_config["base"] == 500.0 for s in rope)
    message = refused_loading(f'encoding_config."{spec}".bse=1.0')
    assert message.startswith(f'--set: encoding_config."{spec}"') and "did you mean 'base'" in message


def test_an_option_is_named_in_the_error_about_its_key():
    message = refused_loading(options=[Option("--finetune", "finetune", -1)])
    assert message.startswith("--finetune: finetune = -1: must be >= 0"), message
    message = refused_loading(options=[Option("--variants", "variants", ["combine=glue"], add=True)])
    assert message.startswith("--variants: variants = 'combine=glue'"), message
    added = load_profile("smoke", ['variants=["combine=concat"]'], [Option("--variants", "variants", ["inject=every_layer", "combine=concat"], add=True)])  # fmt: skip
    assert added.variants == ("combine=concat", "inject=every_layer")
