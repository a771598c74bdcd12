"""Architecture variants of additive encodings (issue 10): concat, every-layer injection, warm-up."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from click.testing import CliRunner

import posenc
from posenc.cli import main
from posenc.compare import tuning
from posenc.compare.executor import LocalExecutor
from posenc.compare.grid import Grid, build_grid
from posenc.compare.profile import get_profile, parse_variants
from posenc.compare.runner import run_grid
from posenc.compare.trainer import position_scale, train
from posenc.records.models import build_model
from posenc.records.spec import RunSpec
from posenc.records.store import ResultStore
from posenc.results.tables import summarize

SMOKE = get_profile("smoke")
VARIANTS = ("combine=concat", "inject=every_layer", "position_warmup=4")


def _grid(variants=VARIANTS, **narrow) -> Grid:
    narrow.setdefault("seeds", (0,))
    return build_grid(dataclasses.replace(SMOKE, variants=variants), **narrow)


def test_variants_make_distinct_specs_with_labels_and_round_trip():
    grid = _grid(tasks=("copy",))
    sinus = [s for s in grid.specs if s.encoding == "sinusoidal"]
    assert [s.label for s in sinus] == [
        "sinusoidal",
        "sinusoidal[concat]",
        "sinusoidal[every_layer]",
        "sinusoidal[pe-warmup:4]",
    ]
    assert len({s.run_id for s in sinus}) == 4
    assert len({ResultStore("r").path_for(s) for s in sinus}) == 4
    assert (sinus[1].model.combine, sinus[2].model.inject, sinus[3].train.position_warmup_steps) == (
        "concat",
        "every_layer",
        4,
    )
    for spec in sinus:
        again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
        assert again == spec and again.run_id == spec.run_id


def test_default_identity_omits_new_fields_so_old_run_ids_stay_valid():
    spec = _grid(variants=(), tasks=("copy",)).specs[0]
    identity = spec.identity()
    assert "combine" not in identity["model"] and "inject" not in identity["model"]
    assert "position_warmup_steps" not in identity["train"]
    old = spec.to_dict()  # a record written before the fields existed
    for part, key in (("model", "combine"), ("model", "inject"), ("train", "position_warmup_steps")):
        del old[part][key]
    assert RunSpec.from_dict(old).run_id == spec.run_id
    concat = dataclasses.replace(spec, model=dataclasses.replace(spec.model, combine="concat"))
    assert concat.identity()["model"]["combine"] == "concat" and concat.run_id != spec.run_id


def test_non_additive_encodings_are_skipped_not_an_error():
    grid = _grid()
    assert grid.skipped_variants == ["nope"]
    assert {s.label for s in grid.specs if s.encoding == "nope"} == {"nope"}
    # A variant equal to the default adds no duplicate run.
    same = _grid(variants=("combine=add",), tasks=("copy",))
    assert len(same.specs) == len({s.run_id for s in same.specs}) == 2


def test_full_profile_includes_variants_and_quick_does_not():
    full = build_grid(get_profile("full"), tasks=("copy",), seeds=(0,))
    additive = [n for n, c in posenc.ENCODINGS.items() if c.kind == "additive" and c.position_axes == 1]
    assert additive, "the registry has additive encodings"
    for name in additive:
        tags = {tuple(s.architecture_tags()) for s in full.specs if s.encoding == name}
        assert {(), ("concat",), ("every_layer",), ("pe-warmup:200",)} <= tags, name
    rotary = [s for s in full.specs if posenc.ENCODINGS[s.encoding].kind != "additive"]
    assert rotary and all(not s.architecture_tags() for s in rotary)
    quick = build_grid(get_profile("quick"))
    assert all(not s.architecture_tags() for s in quick.specs)


@pytest.mark.parametrize(
    "text",
    ["combine", "colour=red", "position_warmup=0", "position_warmup=x", "combine=concat+inject=every_layer"],
)
def test_bad_variant_syntax_is_a_value_error_naming_it(text):
    with pytest.raises(ValueError, match="variant|combine|position_warmup"):
        parse_variants(text)


def test_warmup_schedule_starts_at_zero_and_reaches_one():
    spec = dataclasses.replace(
        _grid(variants=(), tasks=("copy",)).specs[0],
        train=dataclasses.replace(SMOKE.task_train, position_warmup_steps=4),
    )
    values = [position_scale(step, spec) for step in range(8)]
    assert values[0] == 0.0 and values[4:] == [1.0] * 4
    assert values == sorted(values) and values[2] == pytest.approx(0.5)
    off = dataclasses.replace(spec, train=SMOKE.task_train)
    assert [position_scale(step, off) for step in range(3)] == [1.0, 1.0, 1.0]


def test_trainer_applies_the_schedule_every_step():
    spec = next(s for s in _grid(tasks=("copy",)).specs if s.train.position_warmup_steps)
    model = build_model(spec)
    seen: list[float] = []
    # training steps only (the held-out checks in between run the model in eval mode)
    model.register_forward_pre_hook(
        lambda module, args: seen.append(module.position_scale) if module.training else None
    )
    result = train(model, spec)
    assert seen == [min(1.0, step / 4) for step in range(spec.train.steps)]
    assert result["final_position_scale"] == 1.0


def test_variant_runs_write_distinct_records_and_summary_rows(tmp_path):
    specs = _grid(encodings=("sinusoidal",), tasks=("copy",)).specs
    store = ResultStore(tmp_path)
    outcome = run_grid(specs, store, LocalExecutor(workers=1), show_progress=False, log=lambda _: None)
    assert not outcome.failed and len(outcome.done) == 4
    records = store.records()
    assert {r["label"] for r in records} == {s.label for s in specs}
    concat = next(r for r in records if r["label"] == "sinusoidal[concat]")
    plain = next(r for r in records if r["label"] == "sinusoidal")
    extra = 2 * SMOKE.model.d_model**2  # the learned Linear(2D, D) of concatenation
    assert concat["result"]["num_parameters"] == plain["result"]["num_parameters"] + extra
    warm = next(r for r in records if r["label"] == "sinusoidal[pe-warmup:4]")
    assert warm["spec"]["train"]["position_warmup_steps"] == 4
    assert warm["result"]["train"]["final_position_scale"] == 1.0
    assert set(summarize(records)["rows"]) == {s.label for s in specs}


def test_cli_variants_bad_syntax_exits_2_with_one_line(tmp_path):
    result = CliRunner().invoke(
        main, ["compare", "--profile", "smoke", "--variants", "combine", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "combine" in lines[0], result.output
    assert not (tmp_path / "runs").exists()


def test_cli_variants_run_and_note_skipped_encodings(tmp_path):
    args = ["compare", "--profile", "smoke", "--encodings", "sinusoidal,nope", "--tasks", "copy"]
    args += ["--variants", "combine=concat", "--out", str(tmp_path), "--no-report", "--format", "json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "not run for: nope" in result.stderr
    data = json.loads(result.stdout)
    assert set(data["summary"]["rows"]) == {"sinusoidal", "sinusoidal[concat]", "nope"}


def test_scale_embeddings_variant_scales_tokens_and_keeps_old_run_ids():
    grid = _grid(variants=("scale_embeddings=true", "scale_embeddings=false"), tasks=("copy",))
    sinus = [s for s in grid.specs if s.encoding == "sinusoidal"]
    # Vaswani et al. scale: =true is the default run (the paper's setting), =false the variant
    assert [s.label for s in sinus] == ["sinusoidal", "sinusoidal[unscaled-emb]"]
    scaled, plain = (build_model(s) for s in sinus)
    tokens = torch.tensor([[5, 6, 7]])
    torch.testing.assert_close(scaled.token_embeddings(tokens), plain.token_embeddings(tokens) * 16**0.5)
    old = sinus[1].to_dict()  # a record written before the field existed trained unscaled
    del old["model"]["scale_embeddings"]
    assert RunSpec.from_dict(old).run_id == sinus[1].run_id != sinus[0].run_id
    with pytest.raises(ValueError, match="scale_embeddings"):
        parse_variants("scale_embeddings=yes")


def test_notes_profile_runs_the_variants_on_the_encodings_the_notes_discuss():
    prof = get_profile("notes")
    grid = build_grid(prof)
    labels = {s.label for s in grid.specs}
    for name, other in (("sinusoidal", "unscaled-emb"), ("learned", "scaled-emb")):  # against its paper's
        assert {name, f"{name}[concat]", f"{name}[every_layer]", f"{name}[pe-warmup:200]",
                f"{name}[{other}]"} <= labels  # fmt: skip
    assert {"scaled_sinusoidal", "integer_index", "rope", "t5", "alibi"} <= labels
    assert not any("[" in s.label for s in grid.specs if s.encoding not in ("sinusoidal", "learned"))
    assert set(grid.skipped_variants) == {"scaled_sinusoidal", "integer_index", "rope", "t5", "alibi"}
    assert {s.seed for s in grid.specs} == {0, 1, 2} and {s.task for s in grid.specs} == {"copy"}
    standard = build_grid(get_profile("standard"), tasks=("copy",))
    defaults = {s.run_id for s in grid.specs if not s.architecture_tags() and "@" not in s.label}
    assert defaults <= {s.run_id for s in standard.specs}  # its default runs are standard's own
    # t5@scaled (max_distance scaled to the training length, the ALiBi paper's T5 claims) is notes' own
    assert {s.label for s in grid.specs if "@" in s.label} == {"t5@scaled"}


def test_variants_can_share_their_default_runs_learning_rate():
    prof = dataclasses.replace(get_profile("notes"), tune_share=((tuning.ARCHITECTURE, "default"),))
    share = dict(prof.tune_share)
    specs = build_grid(prof, encodings=("learned",), seeds=(0,)).specs
    assert len(specs) == 5 and len({tuning.tuning_key(s, share) for s in specs}) == 1
    assert len({tuning.tuning_key(s, {}) for s in specs}) == 5  # without sharing each is tuned
    (candidate,) = {c.run_id: c for c in tuning.candidates(specs[1], (1e-3,), share)}.values()
    assert not candidate.architecture_tags() and candidate.seed == tuning.TUNE_SEED
    choices = {tuning.tuning_key(specs[0], share): tuning.Choice(2e-3, "tuned here (x)", [])}
    applied = tuning.apply(specs, choices, (1e-3, 2e-3), share)
    assert {s.train.lr for s in applied} == {2e-3}
    assert "for the default architecture" in applied[1].lr_source
    assert "for the default architecture" not in applied[0].lr_source
