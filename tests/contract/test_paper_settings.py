"""Each encoding as its paper sets it up: the declared setting, honoured by the model and the benchmark."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import posenc
from posenc.compare.grid import build_grid
from posenc.compare.profile import get_profile
from posenc.core.errors import PosencError
from posenc.encoding.base import PaperSetting
from posenc.encoding.rotary.rope import RoPE
from posenc.nn.transformer import Transformer, TransformerConfig, paper_setting
from posenc.records.models import build_model
from posenc.records.spec import ModelSpec, RunSpec
from posenc.registry import unregister_encoding
from posenc.schedules import LayerEncoding, Schedule

SMALL = dict(vocab_size=11, d_model=16, num_heads=2, num_layers=2, ffn_dim=32)
TOKENS = torch.tensor([[3, 1, 4, 1, 5]])
#: Vaswani et al.'s sinusoid and the encodings built on it scale token embeddings; nothing else does.
SCALED = {"sinusoidal", "hybrid", "hierarchical"}


@pytest.mark.parametrize("name", list(posenc.ENCODINGS))
def test_every_encoding_declares_its_setting_and_where_it_is_from(name):
    cls = posenc.ENCODINGS[name]
    setting = cls.paper_setting_for({})
    assert isinstance(setting, PaperSetting) and setting.source
    assert setting.scale_embeddings == (name in SCALED)


@pytest.mark.parametrize("name", list(posenc.ENCODINGS))
def test_the_model_scales_token_embeddings_as_the_paper_does_unless_told(name):
    model = Transformer(TransformerConfig(**SMALL, encoding=name))
    factor = 16**0.5 if name in SCALED else 1.0
    torch.testing.assert_close(model.token_embeddings(TOKENS), model.tok_emb(TOKENS) * factor)
    for uniform in (True, False):  # one setting for every encoding, when asked for
        model = Transformer(TransformerConfig(**SMALL, encoding=name, scale_embeddings=uniform))
        factor = 16**0.5 if uniform else 1.0
        torch.testing.assert_close(model.token_embeddings(TOKENS), model.tok_emb(TOKENS) * factor)


def test_a_composite_encoding_takes_its_parts_setting_and_a_schedule_needs_agreement():
    assert TransformerConfig(**SMALL, encoding="hierarchical").embeddings_scaled
    learned_parts = TransformerConfig(**SMALL, encoding="hierarchical", encoding_config={"inner": "learned"})
    assert not learned_parts.embeddings_scaled
    instance = posenc.build_for_model("sinusoidal", d_model=16, num_heads=2)
    assert TransformerConfig(**SMALL, encoding=instance).embeddings_scaled  # an instance: its class's

    class LoudRoPE(RoPE):  # an outside encoding whose paper scales token embeddings
        paper_setting = PaperSetting(scale_embeddings=True, source="a test")

    posenc.register("loud_rope_test", LoudRoPE)
    try:
        agree = Schedule((LayerEncoding("rope"), LayerEncoding("nope")))
        assert paper_setting(agree) == paper_setting("rope")
        mixed = Schedule((LayerEncoding("rope"), LayerEncoding("loud_rope_test")))
        with pytest.raises(PosencError, match="scale_embeddings=True or False"):
            Transformer(TransformerConfig(**SMALL, encoding=mixed))
        assert TransformerConfig(**SMALL, encoding=mixed, scale_embeddings=False).embeddings_scaled is False
    finally:
        unregister_encoding("loud_rope_test")


def test_a_run_spec_holds_the_resolved_setting_and_its_label_names_a_uniform_one():
    sinus = RunSpec(task="copy", encoding="sinusoidal", seed=0)
    assert sinus.model.scale_embeddings is True and sinus.label == "sinusoidal"
    uniform = RunSpec(task="copy", encoding="sinusoidal", seed=0, model=ModelSpec(scale_embeddings=False))
    assert uniform.label == "sinusoidal[unscaled-emb]" and uniform.run_id != sinus.run_id
    learned = RunSpec(task="copy", encoding="learned", seed=0, model=ModelSpec(scale_embeddings=True))
    assert learned.label == "learned[scaled-emb]"
    assert RunSpec(task="copy", encoding="learned", seed=0).model.scale_embeddings is False
    assert RunSpec.from_dict(sinus.to_dict()) == sinus  # the record keeps the setting it ran with
    old = uniform.to_dict()
    del old["model"]["scale_embeddings"]  # written before the setting existed: unscaled
    assert RunSpec.from_dict(old) == uniform
    assert build_model(sinus)._embed_scale == 64**0.5 and build_model(uniform)._embed_scale == 1.0


def test_a_profile_runs_each_encoding_as_published_or_one_setting_when_it_says_so():
    quick = get_profile("quick")
    specs = build_grid(quick, tasks=("copy",), seeds=(0,)).specs
    scaled = {s.encoding for s in specs if s.model.scale_embeddings}
    assert scaled == {"sinusoidal"} and not any("emb]" in s.label for s in specs)
    uniform = dataclasses.replace(quick, model=dataclasses.replace(quick.model, scale_embeddings=False))
    labels = {s.label for s in build_grid(uniform, tasks=("copy",), seeds=(0,)).specs}
    assert "sinusoidal[unscaled-emb]" in labels and "rope" in labels
