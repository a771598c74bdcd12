"""The absolute family against its NumPy float64 reference, on full tensors, plus its maths."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tests.tolerances import tol

import posenc
from posenc import reference
from posenc.encoding.absolute.sequence import Sinusoidal

B, N, D = 3, 11, 16
ADDITIVE = [name for name, cls in posenc.ENCODINGS.items() if cls.kind == "additive"]
OURS = ["sinusoidal", "scaled_sinusoidal", "learned", "hybrid", "complex_order", "integer_index"]


def _positions(batch=B, n=N, high=200, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, (batch, n), generator=g)


def _zeros(dtype, batch=B, n=N, dim=D) -> torch.Tensor:
    return torch.zeros(batch, n, dim, dtype=dtype)


# ---------------------------------------------------------------------------
# Torch == NumPy reference, full tensors, float64 and float32.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sinusoidal_matches_reference(dtype):
    enc = posenc.build("sinusoidal", dim=D, base=500.0)
    pos = _positions()
    got = enc.embed(_zeros(dtype), positions=pos)
    want = torch.from_numpy(reference.sinusoidal(pos.numpy(), D, base=500.0)).to(dtype)
    torch.testing.assert_close(got, want, **tol(dtype))
    torch.testing.assert_close(enc.encode(pos), want.float(), **tol(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_scaled_sinusoidal_matches_reference(dtype):
    enc = posenc.build("scaled_sinusoidal", dim=D).to(dtype)
    assert enc.scale.item() == pytest.approx(D**-0.5)  # FLASH / x-transformers init
    with torch.no_grad():
        enc.scale.fill_(0.7)
    pos = _positions()
    x = torch.randn(B, N, D, dtype=dtype)
    want = x + torch.from_numpy(reference.scaled_sinusoidal(pos.numpy(), D, 0.7)).to(dtype)
    torch.testing.assert_close(enc.embed(x, positions=pos), want, **tol(dtype))


def test_scaled_sinusoidal_scale_is_learned():
    enc = posenc.build("scaled_sinusoidal", dim=D, init_scale=2.0)
    assert enc.scale.item() == 2.0
    out = enc.embed(_zeros(torch.float32), positions=_positions())
    out.pow(2).sum().backward()
    assert enc.scale.grad is not None and enc.scale.grad.abs().item() > 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_learned_matches_reference(dtype):
    enc = posenc.build("learned", dim=D, max_len=200).to(dtype)
    pos = _positions()
    x = torch.randn(B, N, D, dtype=dtype)
    want = x + torch.from_numpy(reference.learned(pos.numpy(), enc.table.detach().double().numpy())).to(dtype)
    torch.testing.assert_close(enc.embed(x, positions=pos), want, **tol(dtype))


def test_learned_init_is_normal_002():
    torch.manual_seed(0)
    table = posenc.build("learned", dim=64, max_len=1024).table.detach()
    assert table.shape == (1024, 64)
    assert abs(table.mean().item()) < 1e-3
    assert table.std().item() == pytest.approx(0.02, rel=0.01)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_hybrid_matches_reference(dtype):
    enc = posenc.build("hybrid", dim=D, max_len=200, init_std=0.5).to(dtype)
    pos = _positions()
    table = enc.table.detach().double().numpy()
    want = torch.from_numpy(reference.hybrid(pos.numpy(), table)).to(dtype)
    torch.testing.assert_close(enc.embed(_zeros(dtype), positions=pos), want, **tol(dtype))


def test_hybrid_starts_as_the_sinusoid():
    pos = _positions()
    hybrid = posenc.build("hybrid", dim=D, max_len=200)
    sinus = posenc.build("sinusoidal", dim=D)
    torch.testing.assert_close(hybrid.encode(pos), sinus.encode(pos), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_complex_order_matches_reference(dtype):
    enc = posenc.build("complex_order", dim=D).to(dtype)
    # float32 w carries ~1e-7 relative error, so w * pos is only as good as pos allows
    pos = _positions(high=10**5 if dtype == torch.float64 else 200)
    x = torch.randn(B, N, D, dtype=dtype)

    def wb(layer):
        return layer.weight.detach().double().numpy(), layer.bias.detach().double().numpy()

    want = reference.complex_order(
        x.double().numpy(), pos.numpy(), wb(enc.amplitude), wb(enc.frequency), wb(enc.phase)
    )
    t = tol(dtype) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(enc.embed(x, positions=pos), torch.from_numpy(want).to(dtype), **t)


def test_complex_order_modulus_is_the_amplitude_at_every_position():
    """|f(j, pos)| = |r_j|: moving a word changes only its phase (Wang et al. 2020)."""
    enc = posenc.build("complex_order", dim=D).double()
    x = torch.randn(1, 1, D, dtype=torch.float64).expand(1, 6, D)  # the same word 6 times
    out = enc.embed(x, positions=torch.tensor([[0, 1, 5, 77, 1000, 123456]]))
    half = D // 2
    modulus = torch.hypot(out[..., :half], out[..., half:])  # (1, 6, d/2)
    r = enc.amplitude(x[:, :1]).abs()  # (1, 1, d/2)
    torch.testing.assert_close(modulus, r.expand_as(modulus), **tol(torch.float64))
    assert not torch.allclose(out[0, 0], out[0, 1])  # but the vectors differ


def test_complex_order_encode_is_content_dependent():
    enc = posenc.build("complex_order", dim=D)
    with pytest.raises(NotImplementedError, match="embed"):
        enc.encode(torch.arange(4)[None])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_integer_index_matches_reference(dtype):
    enc = posenc.build("integer_index", dim=D)
    pos = _positions()
    want = torch.from_numpy(reference.integer_index(pos.numpy(), D)).to(dtype)
    torch.testing.assert_close(enc.embed(_zeros(dtype), positions=pos), want, **tol(dtype))


def test_integer_index_grows_without_bound_unlike_sinusoidal():
    """The seeds' argument against it: PE(1000) swamps a unit-scale embedding."""
    pos = torch.tensor([[0, 1000]])
    naive = posenc.build("integer_index", dim=D).encode(pos)
    sinus = posenc.build("sinusoidal", dim=D).encode(pos)
    assert naive.abs().max() == 1000 and sinus.abs().max() <= 1.0


# ---------------------------------------------------------------------------
# The learned table's max_len / extra_rows rule.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["learned", "hybrid"])
def test_positions_past_the_table_raise_naming_max_len_and_the_opt_in(name):
    enc = posenc.build(name, dim=D, max_len=8)
    enc.embed(_zeros(torch.float32, 1, 8))  # positions 0..7 are fine
    with pytest.raises(ValueError, match=r"max_len=8.*extra_rows=N"):
        enc.embed(_zeros(torch.float32, 1, 9))
    with pytest.raises(ValueError, match="max_len=8"):
        enc.encode(torch.tensor([[3, 8]]))


@pytest.mark.parametrize("name", ["learned", "hybrid"])
def test_extra_rows_opt_in_and_stay_untrained(name):
    enc = posenc.build(name, dim=D, max_len=8, extra_rows=4, init_std=0.02)
    assert enc.table.shape == (12, D)
    before = enc.table.detach().clone()
    opt = torch.optim.SGD(enc.parameters(), lr=1.0)
    x = torch.randn(2, 8, D)
    enc.embed(x).pow(2).sum().backward()  # train on positions 0..7 only
    assert enc.table.grad[8:].abs().max() == 0 and enc.table.grad[:8].abs().max() > 0
    opt.step()
    torch.testing.assert_close(enc.table.detach()[8:], before[8:], rtol=0, atol=0)
    out = enc.embed(_zeros(torch.float32, 1, 12))  # positions 8..11 now allowed
    assert out.shape == (1, 12, D)
    with pytest.raises(ValueError, match=r"extra_rows=4.*\[0, 11\]"):
        enc.embed(_zeros(torch.float32, 1, 13))


# ---------------------------------------------------------------------------
# Validation: every bad input names the parameter.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "config", "error", "word"),
    [
        ("sinusoidal", {"dim": 0}, ValueError, "dim"),
        ("sinusoidal", {"dim": 7}, ValueError, "even"),
        ("scaled_sinusoidal", {"dim": 5}, ValueError, "dim"),
        ("scaled_sinusoidal", {"dim": 4, "init_scale": float("nan")}, ValueError, "init_scale"),
        ("hybrid", {"dim": 3}, ValueError, "dim"),
        ("complex_order", {"dim": 9}, ValueError, "dim"),
        ("learned", {"dim": -1}, ValueError, "dim"),
        ("learned", {"dim": 4, "max_len": 0}, ValueError, "max_len"),
        ("learned", {"dim": 4, "extra_rows": -2}, ValueError, "extra_rows"),
        ("learned", {"dim": 4, "init_std": -0.1}, ValueError, "init_std"),
        ("hybrid", {"dim": 4, "max_len": -5}, ValueError, "max_len"),
        ("integer_index", {"dim": 0}, ValueError, "dim"),
        ("learned", {"dim": 4.0}, TypeError, "dim"),
        ("learned", {"dim": 4, "max_len": "8"}, TypeError, "max_len"),
    ],
)
def test_bad_config_names_the_parameter(name, config, error, word):
    with pytest.raises(error, match=word):
        posenc.build(name, **config)


@pytest.mark.parametrize("name", OURS)
def test_bad_inputs_name_the_argument(name):
    enc = posenc.build(name, dim=D)
    x = torch.randn(2, 5, D)
    with pytest.raises(ValueError, match="positions must be >= 0"):
        enc.embed(x, positions=torch.tensor([[0, 1, -1, 2, 3]]))
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        enc.embed(x, positions=torch.arange(5.0)[None])
    with pytest.raises(ValueError, match="positions"):
        enc.embed(x, positions=torch.arange(4)[None])  # wrong length
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        enc.embed(torch.randn(5, D))
    with pytest.raises(TypeError, match="x must be a floating-point"):
        enc.embed(torch.ones(2, 5, D, dtype=torch.long))
    with pytest.raises(ValueError, match=f"dim={D}"):
        enc.embed(torch.randn(2, 5, D + 2))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        enc.embed(np.zeros((2, 5, D)))


# ---------------------------------------------------------------------------
# Precision and caching.
# ---------------------------------------------------------------------------


def test_float32_sinusoidal_at_position_one_million_matches_mpmath():
    """All 512 dims at pos 10^6, float32, within 1e-6 of a 50-digit ground truth."""
    dim, pos = 512, 1_000_000
    mpmath.mp.dps = 50
    truth = []
    for i in range(dim // 2):
        angle = mpmath.mpf(pos) / mpmath.power(10000, mpmath.mpf(2 * i) / dim)
        truth += [float(mpmath.sin(angle)), float(mpmath.cos(angle))]
    truth = torch.tensor(truth, dtype=torch.float64)
    enc = posenc.build("sinusoidal", dim=dim)
    got = enc.embed(torch.zeros(1, 1, dim), positions=torch.tensor([[pos]]))[0, 0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), truth, rtol=0, atol=1e-6)
    # The test can fail: float32 angles (the textbook code) are off by far more.
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    naive = torch.stack((torch.sin(pos * inv_freq), torch.cos(pos * inv_freq)), -1).flatten()
    assert (naive.double() - truth).abs().max() > 1e-2


def test_bfloat16_model_distinguishes_8190_from_8191():
    enc = posenc.build("sinusoidal", dim=64).to(torch.bfloat16)
    out = enc.embed(torch.zeros(1, 2, 64, dtype=torch.bfloat16), positions=torch.tensor([[8190, 8191]]))
    assert out.dtype == torch.bfloat16
    assert not torch.equal(out[0, 0], out[0, 1])
    want = torch.from_numpy(reference.sinusoidal(np.array([8190, 8191]), 64)).to(torch.bfloat16)
    torch.testing.assert_close(out[0], want, **tol(torch.bfloat16))


@pytest.mark.parametrize("name", ["sinusoidal", "scaled_sinusoidal", "hybrid"])
def test_sin_cos_table_is_cached_not_rebuilt(name):
    enc = posenc.build(name, dim=D)
    cache = enc._sincos
    enc.embed(torch.randn(2, 30, D))
    cos_table, _ = cache._table[torch.device("cpu")]
    cast = dict(cache._cast)
    for n in (5, 30, 17):
        enc.embed(torch.randn(2, n, D))
        enc.encode(torch.arange(n)[None])
    assert cache._table[torch.device("cpu")][0] is cos_table  # the same float64 table object
    for key, value in cast.items():
        assert cache._cast[key][0] is value[0]  # and the same cast copy
    assert cos_table.dtype == torch.float64
    assert not any(t.dtype == torch.float64 for t in enc.buffers())  # never a buffer .to() degrades


# ---------------------------------------------------------------------------
# Properties from the seeds.
# ---------------------------------------------------------------------------


@given(pos=st.integers(0, 10**6), k=st.integers(-500, 500))
def test_sinusoidal_shift_is_a_fixed_linear_map(pos, k):
    """PE(pos + k) = M_k PE(pos), M_k block-diagonal rotations that do not depend on pos."""
    if pos + k < 0:
        k = -k
    enc = Sinusoidal(Sinusoidal.Config(dim=D))
    pe = enc.embed(torch.zeros(1, 2, D, dtype=torch.float64), positions=torch.tensor([[pos, pos + k]]))[0]
    inv_freq = 10000.0 ** (-np.arange(0, D, 2) / D)
    shifted = np.empty(D)
    for i, w in enumerate(inv_freq):
        c, s = math.cos(k * w), math.sin(k * w)
        sin_p, cos_p = pe[0, 2 * i].item(), pe[0, 2 * i + 1].item()
        shifted[2 * i] = sin_p * c + cos_p * s  # sin(a + b)
        shifted[2 * i + 1] = cos_p * c - sin_p * s  # cos(a + b)
    np.testing.assert_allclose(pe[1].numpy(), shifted, atol=1e-9)


@given(positions=st.lists(st.integers(0, 2**40), min_size=1, max_size=8))
def test_sinusoidal_bounded_and_unit_pairs(positions):
    enc = posenc.build("sinusoidal", dim=D)
    pe = enc.embed(
        torch.zeros(1, len(positions), D, dtype=torch.float64), positions=torch.tensor([positions])
    )
    assert pe.abs().max() <= 1.0
    torch.testing.assert_close(
        pe[..., 0::2] ** 2 + pe[..., 1::2] ** 2, torch.ones(1, len(positions), D // 2, dtype=torch.float64)
    )


@given(pos=st.integers(0, 10**6), k=st.integers(0, 1000))
def test_integer_index_shift_is_translation(pos, k):
    enc = posenc.build("integer_index", dim=4)
    pe = enc.encode(torch.tensor([[pos, pos + k]]))
    torch.testing.assert_close(pe[0, 1] - pe[0, 0], torch.full((4,), float(k)))


@pytest.mark.parametrize("name", OURS)
def test_registered_under_the_exact_names(name):
    assert name in posenc.ENCODINGS and name in ADDITIVE
    assert posenc.ENCODINGS[name].supports_kv_cache
