"""Fast paths against the plain paths they replace: full tensors, forward and gradients.

- fused rotary (C kernel) == ``posenc.encoding.rotary.rope.apply_rotary`` for both layouts, partial
  rotary, float64/32/16/bfloat16, strided inputs, broadcast and per-batch tables, out=/in place;
- graceful degradation: unsupported calls and a failed build take the plain path, one log line;
- chunked bias attention == dense SDPA (the flex path: tests/unit/kernels/test_flex.py) with the encoding's full bias, for every bias
  encoding in the registry, causal and not, KV-cache offsets, explicit positions, masks, grads.
Shapes stay tiny: the kernels are built once per machine (about a second) and cached.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from tests.tolerances import tol

import posenc
from posenc.encoding.rotary.rope import apply_rotary
from posenc.kernels import _build, blocked, mlp_bias
from posenc.kernels import bias_attention as bias_attention_module
from posenc.kernels import fused_rope as rope
from posenc.kernels.bias_attention import bias_attention
from posenc.kernels.fused_rope import apply_rotary_fused
from posenc.registry import ENCODINGS

LAYOUTS = ("half", "interleaved")
DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]

needs_kernel = pytest.mark.skipif(not rope.available(), reason="no C compiler: the plain path is used")


def randn(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def tables(shape, dtype, *, scale=1.0, seed=9):
    """cos/sin of random angles times ``scale`` (a magnitude, as xPos / attention_scaling)."""
    angles = randn(*shape, seed=seed)
    wide = torch.promote_types(dtype, torch.float32)
    return (angles.cos() * scale).to(wide), (angles.sin() * scale).to(wide)


def plain(x, cos, sin, layout, r):
    wide = torch.promote_types(x.dtype, torch.float32)
    return apply_rotary(x.to(wide), cos, sin, layout=layout, rotary_dim=r).to(x.dtype)


# ---------------------------------------------------------------------------
# Fused rotary == plain rotary.
# ---------------------------------------------------------------------------


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("r", [8, 4, 2])
def test_fused_rotary_matches_plain_forward_and_grad(dtype, layout, r):
    x = randn(2, 3, 5, 8, seed=1, dtype=dtype).requires_grad_()
    cos, sin = tables((1, 1, 5, r // 2), dtype, scale=1.3)
    grad = randn(2, 3, 5, 8, seed=2, dtype=dtype)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=r)
    slow = plain(x, cos, sin, layout, r)
    assert fast.dtype == dtype and fast.shape == x.shape
    # Same roundings in the same order (no FMA): equal to the last bit, gradients too.
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    (g_fast,) = torch.autograd.grad(fast, x, grad)
    (g_slow,) = torch.autograd.grad(slow, x, grad)
    torch.testing.assert_close(g_fast, g_slow, rtol=0, atol=0)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("d,r", [(128, 128), (96, 64), (64, 64), (32, 32)])
def test_fused_rotary_specialised_head_sizes(dtype, layout, d, r):
    """r/2 = 32 and 64 run constant-size loops in the kernel: same results as the plain path."""
    x = randn(1, 3, 4, d, seed=16, dtype=dtype).transpose(1, 2).requires_grad_()  # (1, 4, 3, d), strided
    cos, sin = tables((1, 1, 3, r // 2), dtype, scale=0.9)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=r)
    slow = plain(x, cos, sin, layout, r)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    g = randn(1, 4, 3, d, seed=17, dtype=dtype)
    torch.testing.assert_close(
        torch.autograd.grad(fast, x, g)[0], torch.autograd.grad(slow, x, g)[0], rtol=0, atol=0
    )


@needs_kernel
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_rotary_strided_input_and_per_batch_tables(layout):
    # q as attention makes it: (b, n, h, d) projected, then viewed as (b, h, n, d).
    x = randn(2, 6, 3, 8, seed=3, dtype=torch.float32).transpose(1, 2).requires_grad_()
    cos, sin = tables((2, 1, 6, 3), torch.float32, seed=4)  # per-batch rows (b, 1, n, r/2)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=6)
    slow = plain(x, cos, sin, layout, 6)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    grad = randn(2, 3, 6, 8, seed=5, dtype=torch.float32).transpose(2, 3).contiguous().transpose(2, 3)
    (g_fast,) = torch.autograd.grad(fast, x, grad)  # a non-contiguous incoming gradient too
    (g_slow,) = torch.autograd.grad(slow, x, grad)
    torch.testing.assert_close(g_fast, g_slow, rtol=0, atol=0)


@needs_kernel
@pytest.mark.parametrize("shape", [(5, 8), (3, 5, 8)])
def test_fused_rotary_lower_rank_inputs(shape):
    x = randn(*shape, seed=6, dtype=torch.float32)
    cos, sin = tables((5, 4), torch.float32)
    torch.testing.assert_close(
        apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8),
        plain(x, cos, sin, "half", 8),
        rtol=0,
        atol=0,
    )


@needs_kernel
@pytest.mark.parametrize("shape", [(2, 3, 0, 8), (0, 3, 5, 8), (2, 0, 5, 8)])
def test_fused_rotary_empty_inputs(shape):
    x = randn(*shape, seed=18, dtype=torch.float32).requires_grad_()
    cos, sin = tables((1, 1, shape[2], 4), torch.float32)
    y = apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8)
    assert y.shape == x.shape
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.shape == x.shape


@needs_kernel
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_rotary_out_and_in_place(layout):
    x = randn(2, 3, 5, 8, seed=7, dtype=torch.bfloat16)
    cos, sin = tables((1, 1, 5, 3), torch.bfloat16)
    expected = plain(x, cos, sin, layout, 6)
    out = torch.empty_like(x)
    assert apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=6, out=out) is out
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    y = x.clone()
    assert apply_rotary_fused(y, cos, sin, layout=layout, rotary_dim=6, out=y) is y
    torch.testing.assert_close(y, expected, rtol=0, atol=0)  # pass-through features untouched
    with pytest.raises(ValueError, match="out must have"):
        apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=6, out=torch.empty(2, 3, 5, 8))


def test_fused_rotary_backward_is_the_transpose():
    """<R x, g> == <x, R^T g>: the backward kernel (sign -1) is the adjoint of the forward."""
    x = randn(1, 2, 7, 8, seed=8).requires_grad_()
    cos, sin = tables((1, 1, 7, 4), torch.float64, scale=0.7)
    g = randn(1, 2, 7, 8, seed=9)
    y = apply_rotary_fused(x, cos, sin, layout="interleaved", rotary_dim=8)
    (gx,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close((y * g).sum(), (x * gx).sum(), **tol(torch.float64))


@needs_kernel
def test_fused_rotary_gradcheck_and_second_order():
    x = randn(1, 2, 3, 6, seed=15).requires_grad_()
    cos, sin = tables((1, 1, 3, 2), torch.float64, scale=1.1)

    def f(t):
        return apply_rotary_fused(t, cos, sin, layout="half", rotary_dim=4)

    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))


def test_unsupported_calls_take_the_plain_path_with_one_log_line(caplog):
    # cos/sin that require grad: the kernel treats tables as constants, so the plain path runs
    # and the tables get their gradient.
    x = randn(1, 2, 4, 8, seed=10)
    cos, sin = tables((1, 1, 4, 4), torch.float64)
    cos.requires_grad_()
    with caplog.at_level(logging.WARNING, logger="posenc"):
        for _ in range(3):
            y = apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8)
    torch.testing.assert_close(y, plain(x, cos, sin, "half", 8), rtol=0, atol=0)
    (gc,) = torch.autograd.grad(y.sum(), cos)
    assert gc.abs().sum() > 0
    lines = [r for r in caplog.records if "require grad" in r.getMessage()]
    assert len(lines) <= 1  # once per process (it may have been said by an earlier test)
    # 5-d inputs are not a kernel shape: the plain result, same values.
    x5 = randn(2, 1, 2, 4, 8, seed=11, dtype=torch.float32)
    c5, s5 = tables((4, 4), torch.float32)
    torch.testing.assert_close(
        apply_rotary_fused(x5, c5, s5, layout="half", rotary_dim=8), plain(x5, c5, s5, "half", 8)
    )


def test_a_device_other_than_the_cpu_takes_the_plain_path_without_a_word(caplog):
    """The C kernel is the CPU's fast path; elsewhere (a GPU; here the meta device) the plain path is
    the design, not a fallback to warn about."""
    x = torch.empty(1, 2, 4, 8, device="meta")
    cos, sin = (torch.empty(1, 1, 4, 4, device="meta") for _ in range(2))
    with caplog.at_level(logging.WARNING, logger="posenc"):
        y = apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8)
    assert y.shape == x.shape and y.device.type == "meta"
    assert not [r for r in caplog.records if "fused rotary" in r.getMessage()]


def test_failed_build_degrades_to_none_with_one_line(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(_build, "_loaded", {})
    monkeypatch.setattr(_build, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="posenc"):
        assert _build.load("_rope") is None
        assert _build.load("_rope") is None
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
    monkeypatch.setattr(_build, "_loaded", {})
    monkeypatch.setenv("POSENC_DISABLE_KERNELS", "1")
    assert _build.load("_rope") is None


USE_KERNEL = """
import torch
from posenc.kernels import _build
from posenc.kernels.fused_rope import apply_rotary_fused
from posenc.encoding.rotary.rope import apply_rotary

assert _build.load("_rope") is not None, "no kernel"
g = torch.Generator().manual_seed(0)
x = torch.randn(2, 3, 5, 8, generator=g)
angles = torch.randn(5, 4, generator=g)
cos, sin = angles.cos(), angles.sin()
torch.testing.assert_close(apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8), apply_rotary(x, cos, sin, layout="half", rotary_dim=8))
print("ok")
"""


@needs_kernel
@pytest.mark.parametrize("damage", ["truncate", "zero_stamp", "remove_stamp"])
def test_a_damaged_cached_library_is_rebuilt_never_mapped(tmp_path, damage):
    """Found: a truncated cached ``.so`` killed the process with SIGBUS (no message) on load.

    A fresh process builds the library into an empty cache; then the file is damaged as a
    crash before its bytes reached the disk would leave it; the next process must rebuild it
    (and give the same numbers as the plain path), not die.
    """
    env = {**os.environ, "POSENC_CACHE_DIR": str(tmp_path)}
    env.pop("POSENC_DISABLE_KERNELS", None)
    first = subprocess.run(
        [sys.executable, "-c", USE_KERNEL], capture_output=True, text=True, env=env, timeout=300
    )
    assert first.returncode == 0, first.stderr
    (library,) = (tmp_path / "kernels").glob("_rope-*.so")
    size = library.stat().st_size
    stamp = library.with_name(library.name + ".sha256")
    if damage == "truncate":
        with open(library, "r+b") as handle:
            handle.truncate(size // 3)
    elif damage == "zero_stamp":  # right size, wrong bytes
        library.write_bytes(bytes(size))
    else:  # a library from before stamps existed, or a stamp lost: rebuilt rather than trusted
        stamp.unlink(missing_ok=True)
    second = subprocess.run(
        [sys.executable, "-c", USE_KERNEL], capture_output=True, text=True, env=env, timeout=300
    )
    assert second.returncode == 0, (second.returncode, second.stderr)  # was -7 (SIGBUS) for a truncated file
    assert second.stdout.strip() == "ok"
    assert library.stat().st_size == size and _build.verified(library)


@needs_kernel
def test_the_library_is_fsynced_before_it_is_renamed(monkeypatch, tmp_path):
    """Found: the compile step renamed the new library into place without fsync, so a crash
    could leave a name pointing at a file whose bytes never reached the disk."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(
            ("fsync", os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else str(fd))
        )
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "lib.so"
    _build._compile("_rope", _build._compiler(), target)
    renamed = [i for i, (kind, path) in enumerate(events) if kind == "replace" and path == str(target)]
    assert renamed, events
    synced_before = [kind for kind, _ in events[: renamed[0]]]
    assert "fsync" in synced_before, events
    assert _build.verified(target)


# ---------------------------------------------------------------------------
# Bias attention without the (b, h, i, j) tensor == dense SDPA.
# ---------------------------------------------------------------------------


def dense_reference(q, k, v, enc, *, causal, qp=None, kp=None, allowed=None):
    """SDPA with the encoding's full float64 bias (its own definition, bias_fn)."""
    i, j = q.shape[2], k.shape[2]
    qpos = torch.arange(i)[None] if qp is None else qp
    kpos = torch.arange(j)[None] if kp is None else kp
    heads = torch.arange(enc.num_heads)[None, :, None, None]
    bias = enc.bias_fn(qpos[:, None, :, None], kpos[:, None, None, :], heads)
    bias = bias.to(enc.bias(1, 1).dtype).to(q.dtype)  # rounded as the encoding's dense bias
    if causal:
        bias = bias.masked_fill(torch.ones(i, j, dtype=torch.bool).triu(j - i + 1), float("-inf"))
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def qkv(b, h, i, j, d=4, dtype=torch.float64, grad=True):
    return tuple(
        randn(b, h, n, d, seed=s, dtype=dtype).requires_grad_(grad) for s, n in ((1, i), (2, j), (3, j))
    )


def plain_blocks(monkeypatch) -> None:
    """The blocked path's plain matrix products (what every device but the CPU runs), on the CPU."""
    monkeypatch.setattr(blocked, "FLASH_DEVICES", frozenset())


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


@pytest.mark.parametrize("name", ["rope", "xpos"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_encoding_rotate_equals_plain_apply(name, layout, dtype):
    """What RoPE/xPos.rotate return (the fused path when built) == apply_rotary on their tables."""
    extra = {"rotary_dim": 4} if name == "rope" else {}
    enc = posenc.build(name, head_dim=8, layout=layout, **extra)
    q = randn(2, 3, 5, 8, seed=12, dtype=dtype).requires_grad_()
    k = randn(2, 3, 6, 8, seed=13, dtype=dtype).requires_grad_()
    qp, kp = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]]), torch.arange(6)[None]
    qo, ko = enc.rotate(q, k, q_positions=qp, k_positions=kp)
    wide = torch.promote_types(dtype, torch.float32)
    expected = []
    for x, pos, is_key in ((q, qp, False), (k, kp, True)):
        if name == "rope":
            cos, sin = enc.cos_sin(pos, wide)
            r = enc.rotary_dim
        else:
            cos, sin = enc._sincos(pos, torch.float64)
            s = enc.scale(pos, torch.float64, key=is_key)
            cos, sin, r = (cos * s).to(wide), (sin * s).to(wide), 8
        expected.append(plain(x, cos[:, None], sin[:, None], layout, r))
    torch.testing.assert_close(qo, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(ko, expected[1], rtol=0, atol=0)
    g = randn(2, 3, 5, 8, seed=14, dtype=dtype)
    torch.testing.assert_close(
        torch.autograd.grad(qo, q, g)[0], torch.autograd.grad(expected[0], q, g)[0], rtol=0, atol=0
    )


# ---------------------------------------------------------------------------
# The blocked backward: the score gradient reduced into the bias's own parameters.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("flash", [True, False], ids=["cpu-flash", "plain"])
def test_toeplitz_blocks_pass_gradcheck(flash, monkeypatch):
    """Float64 gradcheck of the custom backward (q, k, v and the per-distance table) over
    uneven causal row blocks with a KV-cache offset."""
    if not flash:
        plain_blocks(monkeypatch)
    i, j, h = 5, 7, 2
    q, k, v = qkv(1, h, i, j, d=3)
    table = randn(h, i + j - 1, seed=8).requires_grad_()
    blocks = blocked.blocks_for(i, j, 2, causal=True)
    masked = j - 1 - (j - i)

    def attend(q, k, v, table):
        causal = torch.cat((table.new_full((h, masked), float("-inf")), table[:, masked:]), -1)
        return blocked.blocked_attention(q, k, v, "toeplitz", (causal,), blocks=blocks)

    assert torch.autograd.gradcheck(attend, (q, k, v, table))


@pytest.mark.parametrize("name", ["t5", "kerple_log", "alibi"])
@pytest.mark.parametrize("flash", [True, False], ids=["cpu-flash", "plain"])
def test_trainable_bias_gradients_reach_the_parameters_in_float32(name, flash, monkeypatch):
    """The per-distance reduction gives the parameters the dense path's gradients (full tensors)."""
    if not flash:
        plain_blocks(monkeypatch)
    torch.manual_seed(1)
    enc = posenc.build_for_model(name, d_model=12, num_heads=3)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    q, k, v = qkv(2, 3, 30, 30, dtype=torch.float32)
    params = [q, k, v, *enc.parameters()]
    g = randn(2, 3, 30, 4, seed=4, dtype=torch.float32)
    out = bias_attention(q, k, v, enc, causal=True, chunk=7)
    ref = dense_reference(q, k, v, enc, causal=True)
    torch.testing.assert_close(out, ref, **tol(torch.float32))
    for a, c in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not mlp_bias.available(), reason="no C compiler: FIRE takes the generic path")
@pytest.mark.parametrize("offset", [0, 9])
def test_fire_float32_mlp_path_matches_dense(offset):
    """FIRE in float32 goes through the C kernel (its MLP per score in float32, blocks and their
    gradient); the result and every gradient equal the float64 definition's dense path.
    A threshold below the length puts rows on both sides of FIRE's normaliser switch."""
    torch.manual_seed(0)
    enc = posenc.build_for_model("fire", d_model=12, num_heads=3, init_threshold=6.0)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    i, j = 25, 25 + offset
    q, k, v = qkv(2, 3, i, j, dtype=torch.float32)
    params = [q, k, v, *enc.parameters()]
    g = randn(2, 3, i, 4, seed=4, dtype=torch.float32)
    qp, kp = torch.arange(offset, j)[None], torch.arange(j)[None]
    out = bias_attention(q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, chunk=6)
    ref = dense_reference(q, k, v, enc, causal=True, qp=qp, kp=kp)
    torch.testing.assert_close(out, ref, **tol(torch.float32))
    for a, c in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("offset", [0, 6])
@pytest.mark.parametrize("flash", [True, False], ids=["cpu-flash", "plain"])
def test_t5_band_backward_equals_dense(offset, flash, monkeypatch):
    """Causal T5 is one parameter per head past max_distance: the backward forms the score
    gradient on that band of diagonals only, and the far bucket's gradient from each softmax
    row summing to zero. Float64, a KV-cache offset, blocks narrower and wider than the band."""
    if not flash:
        plain_blocks(monkeypatch)
    torch.manual_seed(2)
    enc = posenc.build_for_model("t5", d_model=12, num_heads=3, num_buckets=8, max_distance=5).double()
    assert enc.constant_beyond() == 5
    with torch.no_grad():
        enc.table.add_(0.5 * torch.randn_like(enc.table))
    i, j = 23, 23 + offset
    q, k, v = qkv(2, 3, i, j)
    params = [q, k, v, enc.table]
    g = randn(2, 3, i, 4, seed=4)
    qp, kp = torch.arange(offset, j)[None], torch.arange(j)[None]
    ref = dense_reference(q, k, v, enc, causal=True, qp=qp, kp=kp)
    expected = torch.autograd.grad(ref, params, g)
    for chunk in (3, 9):
        out = bias_attention(q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, chunk=chunk)
        torch.testing.assert_close(out, ref, **tol(torch.float64))
        for a, c in zip(torch.autograd.grad(out, params, g), expected):
            torch.testing.assert_close(a, c, **tol(torch.float64))
