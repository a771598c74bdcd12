"""One contract, run over every entry of posenc.ENCODINGS (a new entry is tested at once): the
checks below, and the published contract (posenc.testing) that an outside class runs too."""

from __future__ import annotations

import pytest
import torch
from tests.hooks import apply, inputs, make
from tests.tolerances import tol

import posenc
import posenc.testing

NAMES = list(posenc.ENCODINGS)
B, N = 3, 7


@pytest.mark.parametrize("name", NAMES)
def test_declares_kind_paper_and_config(name):
    cls = posenc.ENCODINGS[name]
    assert cls.kind in posenc.KINDS
    assert cls.paper, f"{name} must cite its paper"
    assert cls.__doc__ and cls.equation
    enc = make(name)
    again = type(enc.config).from_json(enc.config.to_json())
    assert again == enc.config


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shape_and_dtype_kept(name, dtype):
    enc = make(name).to(dtype) if dtype == torch.float64 else make(name)
    t = inputs(enc, B, N, dtype)
    out = apply(enc, B, N, t, None)
    assert out.shape[:1] == (B,)
    for key, value in t.items():
        if enc.kind in ("additive", "rotary"):
            assert out.dtype == value.dtype, key
    if enc.kind == "additive":
        assert out.shape == t["x"].shape
    if enc.kind in ("bias", "relative", "contextual"):
        assert out.shape[:4] == (B, posenc_heads(enc), N, N) or out.shape[-2] == N
    assert not torch.isnan(out).any()


def posenc_heads(enc) -> int:
    return getattr(enc.config, "num_heads", 2)


@pytest.mark.parametrize("name", NAMES)
def test_positions_none_equals_arange(name):
    enc = make(name)
    t = inputs(enc, B, N)
    a = apply(enc, B, N, t, None)
    b = apply(enc, B, N, t, torch.arange(N).expand(B, N))
    torch.testing.assert_close(a, b, **tol(torch.float32))


@pytest.mark.parametrize("name", NAMES)
def test_batch_independence_and_determinism(name):
    enc = make(name)
    t = inputs(enc, B, N)
    positions = torch.stack([torch.arange(N) + 5 * r for r in range(B)])
    full = apply(enc, B, N, t, positions)
    torch.testing.assert_close(full, apply(enc, B, N, t, positions), rtol=0, atol=0)
    for r in range(B):
        row = {key: value[r : r + 1] for key, value in t.items()}
        torch.testing.assert_close(
            apply(enc, 1, N, row, positions[r : r + 1])[0], full[r], **tol(torch.float32)
        )


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    enc = make(name)
    torch.manual_seed(123)
    other = posenc.build(name, **enc.config.to_dict())
    other.load_state_dict(enc.state_dict())
    t = inputs(enc, B, N)
    torch.testing.assert_close(apply(other, B, N, t, None), apply(enc, B, N, t, None), rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_float64(name):
    enc = make(name).double()
    t = inputs(enc, 2, 5, torch.float64)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in enc.named_parameters()}
    if not t and not params:
        pytest.skip(f"{name} has neither inputs nor parameters to differentiate")
    keys = list(t)
    pkeys = list(params)

    def fn(*args):
        tensors = dict(zip(keys, args[: len(keys)]))
        p = dict(zip(pkeys, args[len(keys) :]))
        with torch.nn.utils.stateless._reparametrize_module(enc, p):
            res = apply(enc, 2, 5, tensors, None)
        return res.masked_fill(torch.isinf(res), 0.0)

    args = [t[k].requires_grad_(True) for k in keys] + [params[k] for k in pkeys]
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("name", NAMES)
def test_passes_the_published_contract(name):
    """Every property of posenc.testing passes (or does not apply) for every registry entry."""
    report = posenc.testing.check_encoding(name)
    assert [r.name for r in report.results] == list(posenc.testing.PROPERTIES)
    assert report.passed, str(report)
    cls = posenc.ENCODINGS[name]
    skipped = {r.name for r in report.results if r.passed is None}
    assert ("kv_cache" in skipped) == (not cls.supports_kv_cache)
    assert ("relative_invariance" in skipped) == (not make(name).translation_invariant)


# ---------------------------------------------------------------------------
# Positions with axes: every entry whose tokens have (h, w) or (t, h, w) coordinates.
# ---------------------------------------------------------------------------

AXES_NAMES = [name for name in NAMES if make(name).position_axes > 1]


def grid_coords(batch: int, n: int, axes: int, seed: int = 0) -> torch.Tensor:
    """``(batch, n, axes)`` coordinates in [0, 6), the first token without a position (-1)."""
    g = torch.Generator().manual_seed(seed)
    coords = torch.randint(0, 6, (batch, n, axes), generator=g)
    coords[:, 0] = -1
    return coords


def test_the_registry_has_multi_axis_entries():
    assert len(AXES_NAMES) >= 5
    assert {posenc.ENCODINGS[n].kind for n in AXES_NAMES} >= {"additive", "rotary", "bias"}


@pytest.mark.parametrize("name", AXES_NAMES)
def test_sequence_positions_are_the_diagonal_of_coordinates(name):
    enc = make(name).double()
    t = inputs(enc, B, N, torch.float64)
    seq = torch.stack([torch.arange(N) + 3 * r for r in range(B)])
    diagonal = seq[..., None].expand(B, N, enc.position_axes)
    torch.testing.assert_close(apply(enc, B, N, t, diagonal), apply(enc, B, N, t, seq), **tol(torch.float64))


@pytest.mark.parametrize("name", AXES_NAMES)
def test_coordinates_batch_independence_and_determinism(name):
    enc = make(name)
    t = inputs(enc, B, N)
    coords = grid_coords(B, N, enc.position_axes)
    full = apply(enc, B, N, t, coords)
    assert not torch.isnan(full).any()
    torch.testing.assert_close(full, apply(enc, B, N, t, coords), rtol=0, atol=0)
    for r in range(B):
        row = {key: value[r : r + 1] for key, value in t.items()}
        torch.testing.assert_close(apply(enc, 1, N, row, coords[r : r + 1])[0], full[r], **tol(torch.float32))
    other = coords.clone()
    other[:, 1:, -1] = (other[:, 1:, -1] + 1) % 6  # moving tokens along the last axis changes the output
    assert not torch.allclose(apply(enc, B, N, t, other), full)


@pytest.mark.parametrize("name", AXES_NAMES)
def test_coordinates_with_the_wrong_number_of_axes_are_refused(name):
    enc = make(name)
    t = inputs(enc, B, N)
    wrong = 2 if enc.position_axes == 3 else 3
    with pytest.raises(
        posenc.PosencError, match=rf"has {wrong} coordinates per token .* takes {enc.position_axes}"
    ):
        apply(enc, B, N, t, torch.zeros(B, N, wrong, dtype=torch.long))


@pytest.mark.parametrize("name", AXES_NAMES)
def test_gradcheck_float64_with_coordinates(name):
    enc = make(name).double()
    t = inputs(enc, 2, 5, torch.float64)
    coords = grid_coords(2, 5, enc.position_axes, seed=3)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in enc.named_parameters()}
    if not t and not params:
        pytest.skip(f"{name} has neither inputs nor parameters to differentiate")
    keys, pkeys = list(t), list(params)

    def fn(*args):
        tensors = dict(zip(keys, args[: len(keys)]))
        p = dict(zip(pkeys, args[len(keys) :]))
        with torch.nn.utils.stateless._reparametrize_module(enc, p):
            return apply(enc, 2, 5, tensors, coords)

    args = [t[k].requires_grad_(True) for k in keys] + [params[k] for k in pkeys]
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, fast_mode=True)
