"""Per-layer encodings (posenc.schedules) in the Transformer, on full tensors."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from tests.tolerances import tol
from tests.unit.nn.test_kv_cache import decode, tokens

import posenc
from posenc import reference, schedules
from posenc.cli import main
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.compare.work import execute
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.nn.transformer import Transformer, TransformerConfig
from posenc.records.models import build_model
from posenc.records.spec import RunSpec
from posenc.schedules import LayerEncoding, Schedule

VOCAB = 13


def model_for(encoding, num_layers: int = 4, **overrides) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=VOCAB,
        d_model=16,
        num_heads=2,
        num_layers=num_layers,
        ffn_dim=32,
        encoding=encoding,
        **overrides,
    )
    return Transformer(config).double().eval()


def test_irope_puts_nope_in_every_kth_layer_as_llama4_does():
    schedule = schedules.irope(8, nope_every=4)
    # transformers' Llama 4: no_rope_layers[i] = int((i + 1) % 4 != 0), 1 = RoPE
    hf_no_rope_layers = [int((i + 1) % 4 != 0) for i in range(8)]
    assert [int(layer.encoding == "rope") for layer in schedule.layers] == hf_no_rope_layers
    assert schedule.name == "irope:4" and schedule.encodings == ("rope", "nope")


def test_a_schedule_equals_the_same_model_with_its_encodings_put_in_by_hand():
    """The scheduled model == a uniform RoPE model with layers 1 and 3 switched to NoPE by hand."""
    scheduled = model_for(schedules.irope(4, nope_every=2))
    by_hand = model_for("rope")
    by_hand.load_state_dict(scheduled.state_dict())
    for index in (1, 3):
        by_hand.blocks[index].attn.encoding = posenc.build("nope")
    x = tokens(2, 9)
    torch.testing.assert_close(scheduled(x), by_hand(x), **tol(torch.float64))
    plain = model_for("rope")
    plain.load_state_dict(scheduled.state_dict())
    assert not torch.allclose(scheduled(x), plain(x))  # the NoPE layers change the output


def test_local_global_layers_get_their_bases_and_the_scaling_on_global_layers_only():
    linear = {"rope_type": "linear", "factor": 8.0}
    model = model_for(schedules.local_global(6, global_every=3, global_scaling=linear), num_layers=6)
    head_dim = 8
    for index, block in enumerate(model.blocks):
        enc = block.attn.encoding
        if (index + 1) % 3 == 0:
            want, _ = reference.rope_scaling_linear(head_dim, 1e6, 8.0)
        else:
            want, _ = reference.rope_scaling_default(head_dim, 1e4)
        torch.testing.assert_close(
            enc.frequencies(0)[0], torch.from_numpy(np.asarray(want)), rtol=1e-14, atol=0
        )
    # equal entries share one instance (RoPE shares across layers); the two kinds do not
    encs = [block.attn.encoding for block in model.blocks]
    assert encs[0] is encs[1] is encs[3] is encs[4] and encs[2] is encs[5] and encs[0] is not encs[2]
    unshared = model_for(schedules.local_global(6, global_every=3), num_layers=6, share_encoding=False)
    assert len({id(block.attn.encoding) for block in unshared.blocks}) == 6


def test_encoding_config_gives_defaults_per_registry_name_and_layers_win():
    schedule = Schedule(
        (LayerEncoding("rope", {"base": 500.0}), LayerEncoding("alibi"), LayerEncoding("rope", {}))
    )
    model = model_for(
        schedule, num_layers=3, encoding_config={"rope": {"base": 20.0, "max_position_embeddings": 64}}
    )
    encs = [block.attn.encoding for block in model.blocks]
    assert (encs[0].config.base, encs[2].config.base) == (500.0, 20.0)
    assert encs[0].config.max_position_embeddings == encs[2].config.max_position_embeddings == 64
    assert encs[1].kind == "bias" and encs[1].config.num_heads == 2 and encs[1].config.bidirectional is False


@pytest.mark.parametrize(
    "schedule",
    [
        schedules.irope(4, nope_every=2),
        # dynamic NTK on the global (last) layer: it caches unrotated keys, the local ones rotated
        # keys. Only the last: a dynamic layer's outputs at earlier steps were computed with the
        # frequencies of those steps, so the keys of the layers above it cannot equal a recompute.
        schedules.local_global(
            4,
            global_every=4,
            global_scaling={"rope_type": "dynamic", "factor": 4.0},
            max_position_embeddings=4,
        ),
        Schedule((LayerEncoding("alibi"), LayerEncoding("rope"), LayerEncoding("t5"), LayerEncoding("nope"))),
    ],
    ids=["irope", "local_global_dynamic", "mixed_kinds"],
)
def test_decoding_with_a_kv_cache_equals_recomputing_every_prefix(schedule):
    """Each decoded step == a full forward of the prefix so far (for dynamic NTK the frequencies
    depend on the current length, so the prefix, not the whole sequence, is the reference)."""
    model = model_for(schedule)
    x = tokens(2, 12)
    prefill = 3
    want = [model(x[:, :prefill])] + [model(x[:, : t + 1])[:, -1:] for t in range(prefill, x.shape[1])]
    torch.testing.assert_close(
        decode(model, x, prefill=prefill), torch.cat(want, dim=1), **tol(torch.float64)
    )


def test_rope_scaling_apply_to_model_reaches_every_rotary_layer_of_a_schedule():
    model = model_for(schedules.local_global(4, global_every=2, max_position_embeddings=8))
    assert (
        rope_scaling.apply_to_model(model, {"rope_type": "linear", "factor": 2.0}) == 2
    )  # two shared instances
    for block in model.blocks:
        assert block.attn.encoding.config.scaling == {"rope_type": "linear", "factor": 2.0}


def test_config_with_a_schedule_round_trips_through_json():
    config = TransformerConfig(
        vocab_size=VOCAB,
        num_layers=4,
        encoding=schedules.local_global(
            4, global_every=2, global_scaling={"rope_type": "linear", "factor": 2.0}
        ),
        encoding_config={"rope": {"max_position_embeddings": 32}},
    )
    back = TransformerConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert back == config and isinstance(back.encoding, Schedule)
    x = tokens(1, 6)
    a, b = Transformer(config).eval(), Transformer(back).eval()
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)


def test_parse_reads_the_short_form_with_default_periods():
    assert schedules.parse("irope", 8) == schedules.irope(8)
    assert schedules.parse("irope:2", 4) == schedules.irope(4, nope_every=2)
    assert schedules.parse("local_global:3", 6) == schedules.local_global(6, global_every=3)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: LayerEncoding("sinusoidal"), "additive"),
        (lambda: LayerEncoding("ropee"), "did you mean 'rope'"),
        (lambda: LayerEncoding("rope", {"bse": 2.0}), "bse"),
        (lambda: Schedule(()), "at least one"),
        (lambda: Schedule(("rope",)), "LayerEncoding"),
        (lambda: schedules.parse("irop:2", 4), "did you mean 'irope'"),
        (lambda: schedules.parse("irope:x", 4), "integer"),
        (lambda: schedules.parse("irope:0", 4), "period"),
        (lambda: schedules.local_global(4, base=3.0), "local_base"),
        (lambda: TransformerConfig(vocab_size=5, num_layers=3, encoding=schedules.irope(4)), "num_layers=3"),
        (
            lambda: TransformerConfig(
                vocab_size=5, num_layers=4, encoding=schedules.irope(4), encoding_config={"alibi": {}}
            ),
            "schedule's encodings",
        ),
        (
            lambda: TransformerConfig(
                vocab_size=5, num_layers=4, encoding=schedules.irope(4), combine="concat"
            ),
            "additive encodings only",
        ),
    ],
)
def test_bad_schedules_are_refused_naming_what_is_wrong(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ---------------------------------------------------------------------------
# A schedule as an entry of the benchmark's grid.
# ---------------------------------------------------------------------------

SMOKE_2_LAYERS = dataclasses.replace(
    get_profile("smoke"),
    model=dataclasses.replace(get_profile("smoke").model, num_layers=2),
)


def test_the_grid_runs_a_schedule_per_task_and_seed_with_the_length_overrides_of_its_encodings():
    profile = dataclasses.replace(SMOKE_2_LAYERS, schedules=("irope:2",))
    grid = build_grid(profile, encodings=("rope",), seeds=(0,))
    runs = [spec for spec in grid.specs if spec.schedule]
    assert [(s.task, s.label) for s in runs] == [("copy", "irope:2"), ("lm", "irope:2")]
    plain = {s.task: s for s in grid.specs if not s.schedule}
    for spec in runs:
        assert spec.encoding == "rope" and spec.scalings == plain[spec.task].scalings
        assert spec.finetune == plain[spec.task].finetune
        assert spec.encoding_config == {"rope": plain[spec.task].encoding_config}  # the training context
        assert spec.run_id != plain[spec.task].run_id
        assert RunSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert "schedule" not in plain["copy"].identity()  # runs without a schedule keep their ids


def test_a_schedule_run_trains_the_scheduled_model():
    profile = dataclasses.replace(SMOKE_2_LAYERS, schedules=("irope:2",))
    specs = build_grid(profile, encodings=("rope",), tasks=("copy",), seeds=(0,)).specs
    scheduled, plain = next(s for s in specs if s.schedule), next(s for s in specs if not s.schedule)
    model = build_model(scheduled)
    assert [block.attn.encoding.kind for block in model.blocks] == ["rotary", "none"]
    assert (
        model.blocks[0].attn.encoding.config.max_position_embeddings
        == plain.encoding_config["max_position_embeddings"]
    )
    a, b = execute(scheduled), execute(plain)
    assert a["train"]["loss"] != b["train"]["loss"]  # the NoPE layer changes training


def test_cli_compare_runs_schedules_as_grid_entries(tmp_path):
    result = CliRunner().invoke(
        main,
        ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy", "--schedules", "irope:1",
         "--no-report", "--format", "json", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["summary"]["rows"]
    assert set(rows) == {"nope", "irope:1"} and rows["irope:1"]["encoding"] == "nope"  # one layer: NoPE only
    bad = CliRunner().invoke(
        main, ["compare", "--profile", "smoke", "--schedules", "irop", "--out", str(tmp_path / "bad")]
    )
    assert bad.exit_code == 2 and "did you mean 'irope'" in bad.output
