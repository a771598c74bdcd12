"""Grouped-query / multi-query attention (``num_kv_heads``): for every registered encoding and
every path that can express it, attention with ``g`` key/value heads equals multi-head attention
whose k/v projection weights are those of the ``g`` heads repeated per group; full tensors,
forward, backward and KV-cache decoding (the cache holds ``g`` heads, not ``h``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from click.testing import CliRunner
from tests.tolerances import tol

import posenc
from posenc import presets
from posenc.cli import main
from posenc.core.errors import PosencError
from posenc.kernels import bias_attention as bias_kernels
from posenc.nn.attention import SDPA_KINDS, KVCache, MultiHeadAttention
from posenc.nn.transformer import Transformer, TransformerConfig
from posenc.records.models import build_model
from posenc.records.spec import RunSpec

D_MODEL, HEADS = 16, 4
HEAD_DIM = D_MODEL // HEADS
NAMES = list(posenc.ENCODINGS)
F64 = tol(torch.float64)


def repeated(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """k/v projection rows (or bias) of ``g`` heads -> the same rows repeated for ``g * groups`` heads."""
    per_head = weight.reshape(-1, HEAD_DIM, *weight.shape[1:])  # (g, d, D?)
    return per_head.repeat_interleave(groups, dim=0).reshape(-1, *weight.shape[1:])


def pair(name: str, num_kv_heads: int, path: str) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    """(GQA attention, the multi-head reference with repeated k/v weights), sharing the encoding."""
    torch.manual_seed(0)
    enc = posenc.build_for_model(name, d_model=D_MODEL, num_heads=HEADS)
    gqa = MultiHeadAttention(D_MODEL, HEADS, num_kv_heads=num_kv_heads, encoding=enc, bias=True, path=path)
    ref = MultiHeadAttention(D_MODEL, HEADS, encoding=enc, bias=True, path=path)
    groups = HEADS // num_kv_heads
    with torch.no_grad():
        for proj in ("q_proj", "out_proj"):
            getattr(ref, proj).load_state_dict(getattr(gqa, proj).state_dict())
        for proj in ("k_proj", "v_proj"):
            getattr(ref, proj).weight.copy_(repeated(getattr(gqa, proj).weight, groups))
            getattr(ref, proj).bias.copy_(repeated(getattr(gqa, proj).bias, groups))
    return gqa.double(), ref.double()


def paths(name: str) -> list[str]:
    return ["plain", "sdpa"] if posenc.ENCODINGS[name].kind in SDPA_KINDS else ["plain"]


# Encodings whose rotation differs per query head (RoPE-Mixed) declare supports_grouped_kv = False.
CASES = [(name, path) for name in NAMES if posenc.ENCODINGS[name].supports_grouped_kv for path in paths(name)]
NO_GROUPS = [name for name in NAMES if not posenc.ENCODINGS[name].supports_grouped_kv]


@pytest.mark.parametrize("name", NO_GROUPS)
def test_encodings_without_grouped_kv_refuse_it_by_name(name):
    enc = posenc.build_for_model(name, d_model=D_MODEL, num_heads=HEADS)
    MultiHeadAttention(D_MODEL, HEADS, num_kv_heads=HEADS, encoding=enc)  # multi-head attention works
    with pytest.raises(PosencError, match=r"num_kv_heads must equal num_heads=4 .*got 2"):
        MultiHeadAttention(D_MODEL, HEADS, num_kv_heads=2, encoding=enc)
    with pytest.raises(PosencError, match="grouped-query"):
        enc.rotate(torch.zeros(1, HEADS, 3, HEAD_DIM), torch.zeros(1, 2, 3, HEAD_DIM))


@pytest.mark.parametrize("num_kv_heads", [2, 1], ids=["gqa", "mqa"])
@pytest.mark.parametrize(("name", "path"), CASES)
def test_gqa_equals_repeated_kv_forward_backward_and_decode(name, path, num_kv_heads, monkeypatch):
    gqa, ref = pair(name, num_kv_heads, path)
    blocked_calls = []
    real_blocked = bias_kernels.blocked_attention
    monkeypatch.setattr(
        bias_kernels, "blocked_attention", lambda *a, **k: blocked_calls.append(1) or real_blocked(*a, **k)
    )
    assert gqa.k_proj.out_features == num_kv_heads * HEAD_DIM
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, D_MODEL, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[True] * 6, [False] + [True] * 5])  # left padding: masks and positions

    # Left padding (explicit per-row positions: the generic paths), then no mask (contiguous
    # positions: the bias kinds' Toeplitz blocks and blocked backward, FIRE's float32 C kernel).
    runs = [(mask, torch.float64), (None, torch.float64)]
    if gqa.kind == "bias" and path == "sdpa":
        runs.append((None, torch.float32))
    for padding, dtype in runs:
        a, b = (gqa, ref) if dtype == torch.float64 else (gqa.float(), ref.float())
        xa, xb = x.to(dtype).requires_grad_(), x.to(dtype).requires_grad_()
        out, expected = a(xa, padding_mask=padding), b(xb, padding_mask=padding)
        torch.testing.assert_close(out, expected, **tol(dtype))
        weight = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
        (ga,) = torch.autograd.grad(out, xa, weight)
        (gb,) = torch.autograd.grad(expected, xb, weight)
        torch.testing.assert_close(ga, gb, **tol(dtype))
    gqa.double(), ref.double()
    enc = gqa.encoding
    if path == "sdpa" and enc.kind == "bias" and (enc.translation_invariant or enc.factored_mlp(0, 0, 1, 1)):
        assert blocked_calls  # the fast blocked forward/backward ran, not only the generic blocks

    if not gqa.encoding.supports_kv_cache:
        return
    with torch.no_grad():
        full = ref(x)
        cache = KVCache()
        steps = [gqa(x[:, :3], cache=cache)] + [gqa(x[:, t : t + 1], cache=cache) for t in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **F64)
    assert cache.keys.shape == (2, num_kv_heads, 6, HEAD_DIM)  # stored once per key/value head
    assert cache.values.shape == (2, num_kv_heads, 6, HEAD_DIM)


def test_return_weights_and_cross_attention_with_grouped_heads():
    gqa, ref = pair("rope", 2, "auto")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 5, D_MODEL, generator=gen, dtype=torch.float64)
    context = torch.randn(2, 7, D_MODEL, generator=gen, dtype=torch.float64)
    for a, b in zip(gqa(x, return_weights=True), ref(x, return_weights=True)):
        torch.testing.assert_close(a, b, **F64)
    torch.testing.assert_close(gqa(x, context=context), ref(x, context=context), **F64)


def test_num_kv_heads_must_divide_num_heads():
    with pytest.raises(
        PosencError, match=r"num_kv_heads must divide num_heads=4 \(one of \[1, 2, 4\]\), got 3"
    ):
        MultiHeadAttention(D_MODEL, HEADS, num_kv_heads=3)
    with pytest.raises(PosencError, match=r"num_kv_heads must be an integer in \[1, 4\], got 8"):
        MultiHeadAttention(D_MODEL, HEADS, num_kv_heads=8)
    with pytest.raises(PosencError, match="num_kv_heads must divide num_heads=4"):
        TransformerConfig(vocab_size=11, d_model=D_MODEL, num_heads=HEADS, num_kv_heads=3)
    with pytest.raises(TypeError, match="num_kv_heads must be an integer"):
        TransformerConfig(vocab_size=11, d_model=D_MODEL, num_heads=HEADS, num_kv_heads=2.0)
    assert "num_kv_heads=2" in repr(MultiHeadAttention(D_MODEL, HEADS, num_kv_heads=2))


def tiny(encoding, num_kv_heads=None) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=11, d_model=D_MODEL, num_heads=HEADS, num_kv_heads=num_kv_heads, num_layers=2,
        ffn_dim=32, encoding=encoding,
    )  # fmt: skip
    return Transformer(config).double()


@pytest.mark.parametrize("encoding", ["rope", "alibi", "transformer_xl"])
def test_transformer_with_grouped_heads_equals_repeated_kv_and_decodes(encoding):
    model, ref = tiny(encoding, num_kv_heads=1), tiny(encoding)
    state = model.state_dict()
    for key, value in state.items():
        if ".k_proj." in key or ".v_proj." in key:
            state[key] = repeated(value, HEADS)
    ref.load_state_dict(state)
    tokens = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = ref(tokens)
        torch.testing.assert_close(model(tokens), expected, **F64)
        caches = model.new_cache()
        steps = [model(tokens[:, :4], cache=caches)]
        steps += [model(tokens[:, t : t + 1], cache=caches) for t in range(4, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, **F64)
    assert all(c.keys.shape[1] == 1 for c in caches)


def test_config_round_trips_num_kv_heads_through_json():
    config = TransformerConfig(vocab_size=11, d_model=D_MODEL, num_heads=HEADS, num_kv_heads=2)
    again = TransformerConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.num_kv_heads == 2
    default = TransformerConfig(vocab_size=11)
    assert TransformerConfig.from_dict(json.loads(json.dumps(default.to_dict()))) == default
    assert Transformer(default).blocks[0].attn.num_kv_heads == default.num_heads


def test_presets_give_key_value_heads_for_a_smaller_model():
    assert presets.kv_heads("llama-3.1", 4) == 1  # 32 query heads / 8 kv heads: groups of 4
    assert presets.kv_heads("gemma-3-12b", 4) == 2  # 16 / 8: groups of 2
    assert presets.kv_heads("phi-3.5-mini", 4) == 4  # no grouping
    with pytest.raises(PosencError, match=r"'llama-3.1' has 4 query heads per key/value head \(32 / 8\)"):
        presets.kv_heads("llama-3.1", 2)


def test_benchmark_runs_with_grouped_heads_keep_other_run_ids():
    plain = RunSpec(task="copy", encoding="rope", seed=0)
    grouped = dataclasses.replace(plain, model=dataclasses.replace(plain.model, num_kv_heads=1))
    assert "num_kv_heads" not in plain.identity()["model"]  # older records keep their ids
    assert grouped.run_id != plain.run_id and grouped.label == "rope[kv:1]" and plain.label == "rope"
    model = build_model(grouped)
    assert {block.attn.num_kv_heads for block in model.blocks} == {1}
    assert RunSpec.from_dict(json.loads(json.dumps(grouped.to_dict()))) == grouped


def test_cli_compare_takes_kv_heads_from_a_preset(tmp_path):
    result = CliRunner().invoke(
        main,
        ["compare", "--profile", "smoke", "--encodings", "rope", "--tasks", "copy", "--kv-heads", "gemma-3-12b",
         "--no-report", "--format", "json", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["summary"]["rows"]
    # the smoke profile's 2 heads, paired as in Gemma 3; its eval-time RoPE scalings carry the tag too
    assert "rope[kv:1]" in rows and all(row.startswith("rope[kv:1]") for row in rows), rows
    for bad, message in (
        ("3", "num_kv_heads must be an integer in [1, 2], got 3"),
        ("llama-3.1", "4 query heads per"),
    ):
        out = CliRunner().invoke(
            main, ["compare", "--profile", "smoke", "--kv-heads", bad, "--out", str(tmp_path)]
        )
        assert out.exit_code == 2 and "--kv-heads" in out.output and message in out.output, out.output
