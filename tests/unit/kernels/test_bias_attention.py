"""Bias attention without the ``(b, h, i, j)`` tensor (``posenc.kernels.bias_attention``) == dense SDPA
with the encoding's full bias, for every bias encoding in the registry: the chunked path (causal and not,
KV-cache offsets, explicit positions, masks, gradients, each encoding's declared translation invariance,
which lets it read one per-distance table), and the FlexAttention path, which never returns a wrong
result: length sweeps in fresh processes.

torch 2.13's compiled CPU FlexAttention reads past the end of ``k`` for some key counts
(with AVX2 vector code: ``j = 8 (mod 16)``), so its output depended on whatever memory
followed the tensor: NaN, right, or wrong rows, differing from process to process. posenc
pads every length to whole blocks. These tests check that over lengths 1..130 and larger,
causal and not, queries != keys, each in a fresh process with a fresh inductor cache, with
NaN placed after every buffer the kernel reads (so an out-of-bounds read cannot pass by
luck), with the machine's own vector ISA and with AVX2 forced.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tests.bias_kernels import dense_reference, plain_blocks, qkv, randn
from tests.tolerances import tol

import posenc
from posenc.kernels import bias_attention as bias_attention_module
from posenc.kernels import bias_attention as flex_module
from posenc.kernels.bias_attention import bias_attention
from posenc.registry import ENCODINGS

SCRIPT = Path(__file__).parents[2] / "flex_sweep.py"
BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]
#: score_mods torch 2.13's FlexAttention cannot compile (the call falls back to the chunked path, said once)
FLEX_UNSUPPORTED = {
    "sandwich": "its score_mod sums over frequencies: inductor cannot lower it as a pointwise subgraph",
}
FLEX_NAMES = [name for name in BIAS_NAMES if name not in FLEX_UNSUPPORTED]


def has_avx2() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


# name -> (extra environment, sweep arguments)
SWEEPS = {
    "native": ({}, []),
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, []),
    # each encoding's score_mod once (queries past the keys, no mask: both signs of distance);
    # the masks do not depend on the encoding and are swept above
    "every-bias-encoding": ({}, ["--encodings", ",".join(FLEX_NAMES), "--lengths", "40", "--modes", "cross"]),
    "unpadded-kernel": ({"ATEN_CPU_CAPABILITY": "avx2"}, ["--no-pad", "--lengths", "40"]),
}
if torch.cuda.is_available():
    SWEEPS["cuda"] = ({}, ["--device", "cuda", "--encodings", ",".join(FLEX_NAMES)])


@pytest.fixture(scope="module")
def sweeps():
    """Start every sweep at once (each its own process and inductor cache); yield their results."""
    if not flex_module.flex_available():
        pytest.skip("this torch has no FlexAttention")
    procs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (extra, args) in SWEEPS.items():
            if "ATEN_CPU_CAPABILITY" in extra and not has_avx2():
                continue
            if name == "avx2" and torch.backends.cpu.get_cpu_capability() == "AVX2":
                continue  # the native sweep already runs AVX2's code: the same sweep twice
            env = {**os.environ, **extra, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / name)}
            procs[name] = subprocess.Popen(
                [sys.executable, str(SCRIPT), *args], env=env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        results = {}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{err[-3000:]}"
            results[name] = json.loads(out.strip().splitlines()[-1])
        yield results


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SWEEPS if n != "unpadded-kernel"])
def test_flex_sweep_matches_dense_attention(sweeps, name):
    if name == "avx2" and torch.backends.cpu.get_cpu_capability() == "AVX2":
        pytest.skip("this CPU's own vector code is AVX2: the native sweep is this sweep")
    if name not in sweeps:
        pytest.skip("AVX2 cannot be forced on this CPU")
    result = sweeps[name]
    assert result["cases"] > 0 and result["flex_calls"] == result["cases"]  # flex ran, not the fallback
    assert result["failures"] == [], result["failures"][:10]


@pytest.mark.slow
def test_the_sweep_catches_the_unpadded_kernel(sweeps):
    """Without posenc's padding the same sweep fails: the check above can fail."""
    if "unpadded-kernel" not in sweeps:
        pytest.skip("AVX2 cannot be forced on this CPU")
    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the out-of-bounds read was seen in torch 2.13; this is {torch.__version__}")
    failures = sweeps["unpadded-kernel"]["failures"]
    assert any(f["j"] == 40 for f in failures)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FLEX_UNSUPPORTED))
def test_a_score_mod_flex_cannot_compile_falls_back_to_chunked_said_once(name, caplog, monkeypatch):
    """Found: the sweep counted a FlexAttention call that raised (and fell back) as one that ran, so
    Sandwich passed it without FlexAttention ever running. Should torch learn to compile it, this fails:
    then take it off FLEX_UNSUPPORTED."""
    from posenc.kernels import _build

    monkeypatch.setattr(_build, "_warned", set())
    enc = posenc.build_for_model(name, d_model=16, num_heads=2)
    q, k, v = (torch.randn(1, 2, 40, 8) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="posenc"), torch.no_grad():
        out = flex_module.bias_attention(q, k, v, enc, causal=True, path="flex")
    assert "FlexAttention path not used (an error" in caplog.text
    torch.testing.assert_close(
        out, flex_module.chunked_bias_attention(q, k, v, enc, causal=True), rtol=0, atol=0
    )


def test_flex_path_with_gradients_falls_back_to_chunked(caplog):
    enc = posenc.build_for_model("alibi", d_model=8, num_heads=2).double()
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="posenc"):
        out = flex_module.bias_attention(q, k, v, enc, causal=True, path="flex")
    bias = enc.bias(6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), **tol(torch.float64)
    )
    out.sum().backward()
    assert q.grad is not None
    with pytest.raises(ValueError, match="path"):
        flex_module.bias_attention(q, k, v, enc, path="sparse")


def test_what_flex_cannot_take_is_known_before_a_compile():
    """An H200 run showed CUDA's FlexAttention refusing head_dim 8 only after a failed compile: posenc
    says so up front. The other reasons: gradients on the CPU, a mask, dropout."""
    refusal = flex_module._flex_refusal
    assert refusal("cuda", 8, 8, False, False, 0.0) == "head_dim 8 (CUDA's FlexAttention takes 16 or more)"
    assert refusal("cuda", 64, 8, False, False, 0.0).startswith("head_dim 8")
    assert refusal("cuda", 16, 16, True, False, 0.0) is None  # CUDA has a FlexAttention backward
    assert refusal("cpu", 8, 8, False, False, 0.0) is None
    assert refusal("cpu", 8, 8, True, False, 0.0).startswith("gradients")
    assert refusal("cuda", 64, 64, False, True, 0.0) == "an explicit mask"
    assert refusal("cuda", 64, 64, False, False, 0.1) == "dropout"


def test_past_the_recompile_limit_the_chunked_path_is_used(monkeypatch, caplog):
    """torch would run FlexAttention eagerly (every score materialised); posenc says so and chunks."""
    limit = torch._dynamo.config.recompile_limit
    monkeypatch.setattr(flex_module, "_FLEX_SHAPES", {("another shape", n) for n in range(limit)})
    called = []
    monkeypatch.setattr(flex_module, "flex_bias_attention", lambda *a, **k: called.append(1))
    enc = posenc.build_for_model("alibi", d_model=8, num_heads=2)
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="posenc"), torch.no_grad():
        out = flex_module.bias_attention(q, k, v, enc, causal=True, path="flex")
    assert not called and "recompile limit" in caplog.text
    chunked = flex_module.chunked_bias_attention(q, k, v, enc, causal=True)
    torch.testing.assert_close(out, chunked, rtol=0, atol=0)


def test_padded_length_is_whole_blocks():
    block = flex_module.FLEX_BLOCK
    for n, expected in ((1, block), (block, block), (block + 1, 2 * block), (3 * block - 1, 3 * block)):
        assert flex_module._padded_length(n) == expected


# ---------------------------------------------------------------------------
# The chunked path == dense SDPA.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", BIAS_NAMES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("flash", [True, False], ids=["cpu-flash", "plain"])
def test_chunked_bias_attention_matches_dense(name, causal, checkpointed, flash, monkeypatch):
    if not flash:
        plain_blocks(monkeypatch)
    if checkpointed:  # a tiny memory budget: every block is checkpointed and recomputed in backward
        monkeypatch.setattr(bias_attention_module, "CHUNK_BYTES", 1)
        monkeypatch.setattr(bias_attention_module, "GENERIC_CHUNK_BYTES", 1)
    enc = posenc.build_for_model(name, d_model=12, num_heads=3).double()
    if not causal and "bidirectional" in enc.config.field_names():
        enc = posenc.build_for_model(name, d_model=12, num_heads=3, bidirectional=True).double()
    q, k, v = qkv(2, 3, 11, 11)
    params = [q, k, v, *enc.parameters()]
    g = randn(2, 3, 11, 4, seed=4)
    out = bias_attention(q, k, v, enc, causal=causal, chunk=4)
    ref = dense_reference(q, k, v, enc, causal=causal)
    torch.testing.assert_close(out, ref, **tol(torch.float64))
    for a, c in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, c, **tol(torch.float64))


@pytest.mark.parametrize("name", ["alibi", "fire"])
def test_chunked_bias_attention_cache_offset_positions_and_mask(name):
    """Queries are the last 3 of 9 keys (KV cache), shifted or explicit positions, key padding."""
    enc = posenc.build_for_model(name, d_model=8, num_heads=2).double()
    q, k, v = qkv(2, 2, 3, 9, grad=False)
    with torch.no_grad():
        shifted = bias_attention(
            q,
            k,
            v,
            enc,
            causal=True,
            q_positions=torch.arange(6, 9) + 5,
            k_positions=torch.arange(9) + 5,
            chunk=2,
        )
        ref = dense_reference(
            q, k, v, enc, causal=True, qp=torch.arange(11, 14)[None], kp=torch.arange(5, 14)[None]
        )
        torch.testing.assert_close(shifted, ref, **tol(torch.float64))
        qp = torch.tensor([[6, 7, 8], [0, 1, 2]])  # row 1: a new document restarting at 0
        kp = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5, 0, 1, 2]])
        allowed = torch.ones(2, 1, 3, 9, dtype=torch.bool)
        allowed[0, :, :, :2] = False  # left padding in row 0
        out = bias_attention(
            q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, allowed=allowed, chunk=2
        )
        ref = dense_reference(q, k, v, enc, causal=True, qp=qp, kp=kp, allowed=allowed)
        torch.testing.assert_close(out, ref, **tol(torch.float64))


def test_chunked_bias_attention_float32_and_broadcast_mask():
    enc = posenc.build_for_model("kerple_log", d_model=8, num_heads=2)
    q, k, v = qkv(1, 2, 10, 10, dtype=torch.float32, grad=False)
    allowed = torch.rand(1, 1, 10, 10, generator=torch.Generator().manual_seed(0)) > 0.3
    allowed[..., 0] = True  # every row keeps a key
    with torch.no_grad():
        out = bias_attention(q, k, v, enc, allowed=allowed, chunk=3)
        ref = dense_reference(q, k, v, enc.double(), causal=False, allowed=allowed)
    torch.testing.assert_close(out, ref, **tol(torch.float32))


def test_chunked_bias_attention_bfloat16_keeps_the_bias_in_float32():
    """Long-distance ALiBi in bfloat16: the slope between neighbouring keys survives."""
    enc = posenc.build_for_model("alibi", d_model=8, num_heads=2)
    q, k, v = qkv(1, 2, 64, 64, d=4, dtype=torch.bfloat16, grad=False)
    qp, kp = torch.arange(4000, 4064)[None], torch.arange(64)[None]  # distances ~4000: bias ~ -1000
    with torch.no_grad():
        out = bias_attention(q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, chunk=16)
        ref = dense_reference(q.double(), k.double(), v.double(), enc.double(), causal=True, qp=qp, kp=kp)
    torch.testing.assert_close(out.double(), ref, **tol(torch.bfloat16))


def observed_translation_invariance(encoding) -> bool:
    """Exact equality after shifting both positions by 37 and by 4099 (which catches FIRE's
    position-dependent normaliser); perturbed parameters stand in for a trained encoding."""
    q = torch.arange(12)[None, None, :, None]  # shapes as BiasEncoding.bias uses them
    k = torch.arange(12)[None, None, None, :]
    h = torch.arange(encoding.num_heads)[None, :, None, None]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in encoding.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=g))
        base = encoding.bias_fn(q, k, h)
        return all(torch.equal(base, encoding.bias_fn(q + s, k + s, h)) for s in (37, 4099))


def test_translation_invariance_probe():
    assert posenc.build_for_model("alibi", d_model=8, num_heads=2).translation_invariant
    assert posenc.build_for_model("t5", d_model=8, num_heads=2).translation_invariant
    assert not posenc.build_for_model("fire", d_model=8, num_heads=2).translation_invariant


@pytest.mark.parametrize("name", [n for n, c in posenc.ENCODINGS.items() if c.kind == "bias"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_declared_translation_invariance_is_observed(name, bidirectional):
    # causal= fills bidirectional for the encodings that have it (2-D ALiBi is symmetric: it has not)
    enc = posenc.build_for_model(name, d_model=8, num_heads=2, causal=not bidirectional)
    assert getattr(enc.config, "bidirectional", bidirectional) == bidirectional
    assert enc.translation_invariant == observed_translation_invariance(enc)
