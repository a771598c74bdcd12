"""Multi-axis encodings against what people run: transformers' Qwen2-VL / Qwen2.5-VL / Qwen3-VL
M-RoPE (positions from their own ``get_rope_index``, cos/sin from their rotary modules, rotated
q/k from their apply function, on tiny models built from configs: no weights) and timm's
``layers/pos_embed_sincos.py`` (2-D sin-cos, RotaryEmbeddingCat, RotaryEmbeddingMixed,
RotaryEmbeddingMRope). Public functions and modules only; each check prints its max abs error
(``pytest -s``).

transformers is a test extra (its Qwen-VL tests skip only before the verified release, 5.24). timm is installed without its dependencies
(``pip install --no-deps timm``, see scripts/setup.sh): its wheel requires torchvision, whose
PyPI build would pull another torch; ``timm.layers.pos_embed_sincos`` itself needs only torch,
so :func:`timm_sincos` imports that module without running timm's package ``__init__``
(which imports torchvision) when the full import fails. Without timm those tests skip.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import numpy as np
import pytest
import torch

import posenc
from posenc import reference
from posenc.core.axes import grid_positions, multimodal_positions, with_time
from posenc.hf.families import family_available

pytestmark = pytest.mark.peers


def report(name: str, got: torch.Tensor, want: torch.Tensor, atol: float) -> float:
    assert got.shape == want.shape, (name, got.shape, want.shape)
    error = float((got.detach().double() - want.detach().double()).abs().max())
    print(f"parity {name}: max abs error {error:.3g} (allowed {atol:.1g})")
    assert error <= atol, f"{name}: max abs error {error} > {atol}"
    return error


# ---------------------------------------------------------------------------
# transformers: Qwen2-VL, Qwen2.5-VL, Qwen3-VL.
# ---------------------------------------------------------------------------

IMAGE, VIDEO, START, END = 90, 91, 92, 93
SEGMENTS = [4, (1, 2, 3), 3, (2, 2, 2), 2]  # text, an image, text, a 2-frame video, text (LLM grids)


def qwen_tokens(segments) -> tuple[torch.Tensor, torch.Tensor, list, list]:
    """input_ids / mm_token_type_ids for ``segments`` (a vision-start token ends each text run
    before a vision segment, a vision-end token starts the next) and the vision grids before the
    2 x 2 spatial merge."""
    ids, types_, images, videos = [], [], [], []
    for k, segment in enumerate(segments):
        if isinstance(segment, int):
            run = [5 + (i % 50) for i in range(segment)]
            if k + 1 < len(segments):
                run[-1] = START
            if k > 0:
                run[0] = END
            ids += run
            types_ += [0] * segment
        else:
            t, h, w = segment
            video = t > 1
            ids += [VIDEO if video else IMAGE] * (t * h * w)
            types_ += [2 if video else 1] * (t * h * w)
            (videos if video else images).append([t, 2 * h, 2 * w])
    return torch.tensor([ids]), torch.tensor([types_]), images, videos


def text_config(head_dim: int, section: list[int], **rope) -> dict:
    return dict(
        hidden_size=2 * head_dim, head_dim=head_dim, num_attention_heads=2, num_key_value_heads=2, intermediate_size=32,
        num_hidden_layers=1, vocab_size=100,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section, **rope},
    )  # fmt: skip


def qwen2_vl(module, config_cls, head_dim: int = 24, section=(4, 4, 4), **rope):
    config = config_cls(
        text_config=text_config(head_dim, list(section), **rope),
        vision_config=dict(depth=1, hidden_size=2 * head_dim, num_heads=2, spatial_merge_size=2),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END,
    )  # fmt: skip
    return config


#: transformers' Qwen-VL code as verified (5.24 on); older releases keep cos/sin per axis and
#: another get_rope_index signature, and posenc.hf refuses Qwen2-VL there by version.
QWEN_VL = pytest.mark.skipif(
    not family_available("qwen2_vl_text"), reason="transformers' Qwen-VL M-RoPE is verified from 5.24 on"
)


@QWEN_VL
def test_qwen2_vl_get_rope_index_equals_multimodal_positions():
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen

    model = qwen.Qwen2VLModel(qwen2_vl(qwen, Qwen2VLConfig))
    ids, types_, images, videos = qwen_tokens(SEGMENTS)
    hf_pos, _ = model.get_rope_index(
        ids, types_, image_grid_thw=torch.tensor(images), video_grid_thw=torch.tensor(videos),
        attention_mask=torch.ones_like(ids),
    )  # (3, 1, n)  # fmt: skip
    ours = multimodal_positions(SEGMENTS)  # (1, n, 3)
    assert torch.equal(hf_pos.permute(1, 2, 0), ours)
    print("parity Qwen2-VL get_rope_index vs multimodal_positions: exact (max abs error 0)")


@QWEN_VL
def test_qwen2_5_vl_video_time_interval():
    """Qwen2.5-VL spaces a video's frames by ``second_per_grid_t * tokens_per_second``. The text
    after the video: the Qwen2-VL paper (and transformers up to 5.2) continue one past the largest
    coordinate before it, which posenc does; transformers 5.24 continues at ``start + max(h, w)``,
    below the video's last temporal coordinate, so only the text before and the video are compared."""
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen

    config = qwen2_vl(qwen, Qwen2_5_VLConfig)
    model = qwen.Qwen2_5_VLModel(config)
    segments = [3, (3, 1, 2), 2]
    ids, types_, _, videos = qwen_tokens(segments)
    seconds = 0.5
    hf_pos, _ = model.get_rope_index(
        ids, types_, video_grid_thw=torch.tensor(videos), second_per_grid_ts=torch.tensor([seconds]),
        attention_mask=torch.ones_like(ids),
    )  # fmt: skip
    interval = seconds * config.vision_config.tokens_per_second
    ours = multimodal_positions(segments, time_interval=interval)
    vision = slice(0, 3 + 6)
    assert torch.equal(hf_pos.permute(1, 2, 0)[:, vision], ours[:, vision])
    assert ours[0, 3:9, 0].tolist() == [3, 3, 5, 5, 7, 7]  # frames spaced by interval 2
    assert ours[0, 9].tolist() == [8, 8, 8]  # one past the largest coordinate before (the paper's rule)
    print(
        f"Qwen2.5-VL text after the video: posenc {ours[0, 9].tolist()}, transformers {hf_pos[:, 0, 9].tolist()}"
    )


@QWEN_VL
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_qwen2_vl_rotary_cos_sin_and_rotation_equal_mrope(dtype):
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen

    head_dim, section = 24, [2, 5, 5]
    config = qwen2_vl(qwen, Qwen2VLConfig, head_dim, section)
    rotary = qwen.Qwen2VLRotaryEmbedding(config.text_config)
    positions = multimodal_positions([3, (2, 3, 4), 40])  # (1, n, 3), up to position ~50
    n = positions.shape[1]
    cos, sin = rotary(torch.zeros(1, n, 2 * head_dim, dtype=dtype), positions.permute(2, 0, 1))  # (1, n, d)
    enc = posenc.build("mrope", head_dim=head_dim, mrope_section=section, base=10000.0)
    ours_cos, ours_sin = enc.cos_sin(positions, dtype)
    half = head_dim // 2
    atol = 2e-5 if dtype == torch.float32 else 1e-5  # transformers computes angles in float32
    report(f"Qwen2-VL cos ({dtype})", ours_cos, cos[..., :half], atol)
    report(f"Qwen2-VL sin ({dtype})", ours_sin, sin[..., :half], atol)
    torch.testing.assert_close(cos[..., half:], cos[..., :half], rtol=0, atol=0)  # half layout
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, n, head_dim, generator=g, dtype=dtype) for _ in range(2))
    hf_q, hf_k = qwen.apply_rotary_pos_emb(q, k, cos, sin)
    our_q, our_k = enc.rotate(q, k, q_positions=positions, k_positions=positions)
    report(f"Qwen2-VL rotated q ({dtype})", our_q, hf_q, 4 * atol)
    report(f"Qwen2-VL rotated k ({dtype})", our_k, hf_k, 4 * atol)


@QWEN_VL
def test_qwen3_vl_interleaved_mrope_equals_mrope_interleaved():
    from transformers.models.qwen3_vl import configuration_qwen3_vl as cfg
    from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen

    head_dim, section = 36, [6, 6, 6]
    text = cfg.Qwen3VLTextConfig(**text_config(head_dim, section, mrope_interleaved=True))
    rotary = qwen.Qwen3VLTextRotaryEmbedding(text)
    positions = multimodal_positions([2, (1, 3, 3), 5])
    n = positions.shape[1]
    cos, sin = rotary(torch.zeros(1, n, 2 * head_dim), positions.permute(2, 0, 1))
    enc = posenc.build("mrope", head_dim=head_dim, mrope_section=section, mrope_interleaved=True)
    ours_cos, ours_sin = enc.cos_sin(positions, torch.float32)
    report("Qwen3-VL interleaved cos", ours_cos, cos[..., : head_dim // 2], 2e-6)
    report("Qwen3-VL interleaved sin", ours_sin, sin[..., : head_dim // 2], 2e-6)
    contiguous = posenc.build("mrope", head_dim=head_dim, mrope_section=section)
    assert not torch.allclose(contiguous.cos_sin(positions, torch.float32)[0], cos[..., : head_dim // 2])


# ---------------------------------------------------------------------------
# timm: layers/pos_embed_sincos.py
# ---------------------------------------------------------------------------


def timm_sincos():
    """timm's ``layers.pos_embed_sincos`` module, or skip when timm is not installed."""
    try:
        from timm.layers import pos_embed_sincos  # the full package (with torchvision)

        return pos_embed_sincos
    except Exception:  # ImportError without torchvision; RuntimeError with a broken one
        pass
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed (scripts/setup.sh installs it with the peers extra)")
    saved = {
        name: module for name, module in sys.modules.items() if name == "timm" or name.startswith("timm.")
    }
    for name in saved:
        del sys.modules[name]
    root = list(spec.submodule_search_locations)[0]
    try:
        for name, path in (("timm", root), ("timm.layers", f"{root}/layers")):
            package = types.ModuleType(name)  # a bare package: its __init__ (torchvision) is not run
            package.__path__ = [path]
            sys.modules[name] = package
        return importlib.import_module("timm.layers.pos_embed_sincos")
    finally:
        for name in [n for n in sys.modules if n == "timm" or n.startswith("timm.")]:
            del sys.modules[name]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def timm():
    return timm_sincos()


def test_timm_sincos2d_is_mae_table_with_features_reordered(timm):
    """timm's build_sincos2d_pos_embed lays features out [sin h | sin w | cos h | cos w]; MAE (and
    posenc) [sin w | cos w | sin h | cos h]: the same numbers, permuted."""
    h, w, dim = 5, 7, 32
    table = timm.build_sincos2d_pos_embed([h, w], dim=dim, temperature=10000.0, dtype=torch.float64)
    enc = posenc.build("sincos_axial", dim=dim)
    ours = enc.encode(grid_positions((h, w)))[0]  # (n, d) float32
    k = dim // 4
    sin_w, cos_w, sin_h, cos_h = ours.split(k, dim=-1)
    report("timm build_sincos2d_pos_embed", torch.cat([sin_h, sin_w, cos_h, cos_w], -1), table, 1e-6)
    report("posenc sincos_axial vs NumPy reference", ours,
           torch.from_numpy(reference.sincos_axial(grid_positions((h, w)).numpy(), dim))[0], 1e-6)  # fmt: skip


@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_timm_rotary_embedding_cat_equals_rope_axial(timm, base):
    h, w, head_dim = 5, 6, 16
    rotary = timm.RotaryEmbeddingCat(dim=head_dim, temperature=base, in_pixels=False)
    emb = rotary.get_embed([h, w])  # (n, 2 d): sin | cos, interleaved pairs
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, h * w, head_dim, generator=g)
    want = timm.apply_rot_embed_cat(x, emb)
    enc = posenc.build("rope_axial", head_dim=head_dim, base=base)  # interleaved, rows first
    pos = grid_positions((h, w))
    got, _ = enc.rotate(x, x, q_positions=pos, k_positions=pos)
    report(f"timm RotaryEmbeddingCat (temperature {base:g}) vs rope_axial", got, want, 2e-5)
    half = timm.RotaryEmbeddingCat(dim=head_dim, temperature=base, in_pixels=False, rotate_half=True)
    want_half = timm.apply_rot_embed_cat(x, half.get_embed([h, w]), half=True)
    enc_half = posenc.build("rope_axial", head_dim=head_dim, base=base, layout="half")
    got_half, _ = enc_half.rotate(x, x, q_positions=pos, k_positions=pos)
    report(f"timm RotaryEmbeddingCat(rotate_half, temperature {base:g}) vs rope_axial(layout='half')",
           got_half, want_half, 2e-5)  # fmt: skip


def test_timm_rotary_embedding_mixed_equals_rope_mixed(timm):
    h, w, head_dim, heads, depth = 4, 5, 8, 3, 2
    torch.manual_seed(3)
    mixed = timm.RotaryEmbeddingMixed(dim=head_dim * heads, depth=depth, num_heads=heads, temperature=10.0)
    emb = mixed.get_embed([h, w])  # (depth, heads, n, 2 d)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, heads, h * w, head_dim, generator=g)
    pos = grid_positions((h, w))
    for layer in range(depth):
        want = timm.apply_rot_embed_cat(x, emb[layer])
        enc = posenc.build("rope_mixed", head_dim=head_dim, num_heads=heads)
        with torch.no_grad():  # timm: (2 = (x, y), depth, heads, d/2); posenc: (heads, (row y, col x), d/2)
            enc.freqs.copy_(mixed.freqs[:, layer].permute(1, 0, 2).flip(1))
            got, _ = enc.rotate(x, x, q_positions=pos, k_positions=pos)
        report(f"timm RotaryEmbeddingMixed layer {layer} vs rope_mixed", got, want, 2e-5)
    # the initialisation rule, directions fixed at 0 (timm's rotate=False)
    init = timm.init_random_2d_freqs(head_dim, 1, heads, temperature=10.0, rotate=False)  # (2, 1, h, d/2)
    ours = reference.rope_mixed_frequencies(head_dim, np.zeros(heads), 10.0)  # (h, (y, x), d/2)
    report("timm init_random_2d_freqs(rotate=False) vs RoPE-Mixed init", torch.from_numpy(ours),
           init[:, 0].permute(1, 0, 2).flip(1), 1e-6)  # fmt: skip


def test_timm_rotary_embedding_mrope_equals_mrope_interleaved(timm):
    h, w, head_dim, section = 4, 6, 24, (4, 4, 4)
    rope = timm.RotaryEmbeddingMRope(dim=head_dim, mrope_section=section, temperature=10000.0)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 2, h * w, head_dim, generator=g)
    want = timm.apply_rot_embed_cat(x, rope.get_embed([h, w]), half=True)
    enc = posenc.build("mrope", head_dim=head_dim, mrope_section=list(section), mrope_interleaved=True)
    pos = with_time(grid_positions((h, w)), 0)  # an image: t = 0
    got, _ = enc.rotate(x, x, q_positions=pos, k_positions=pos)
    report("timm RotaryEmbeddingMRope vs mrope(interleaved)", got, want, 2e-5)
