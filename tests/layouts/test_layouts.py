"""Tensor layouts of the rotary hook: ``"bshd"`` (flash-attn, torchtune) equals ``"bhsd"`` on
transposed tensors for every rotary encoding (RoPE in both pair layouts, partial, xPos, every
scaling of the registry), forward and backward, eager and under ``torch.compile(fullgraph=True)``;
the kernel reads bshd tensors in place; positions that do not match the layout's sequence axis
are refused by name."""

from __future__ import annotations

import pytest
import torch
from tests.tolerances import tol

import posenc
from posenc.core.errors import PosencError
from posenc.encoding.rotary.scaling import ORIGINAL, ROPE_SCALINGS
from posenc.kernels import fused_rope as rope_kernel

HEAD_DIM, ROTARY_DIM = 8, 4


def _scaled(name: str) -> dict:
    params = dict(ROPE_SCALINGS[name].example(ROTARY_DIM))
    if ORIGINAL in params:
        params[ORIGINAL] = 6  # positions below go past it: the dynamic and LongRoPE switches are crossed
    return {"rope_type": name, **params}


# Every rotary encoding: both pair layouts, partial rotation, xPos, every scaling (on a partial,
# interleaved RoPE, so the scalings also meet the other two options).
ENCODINGS = {
    "rope-half": dict(name="rope", head_dim=HEAD_DIM),
    "rope-interleaved": dict(name="rope", head_dim=HEAD_DIM, layout="interleaved"),
    "rope-partial": dict(name="rope", head_dim=HEAD_DIM, rotary_dim=ROTARY_DIM),
    "xpos": dict(name="xpos", head_dim=HEAD_DIM, scale_base=8.0),
    "xpos-interleaved": dict(name="xpos", head_dim=HEAD_DIM, layout="interleaved", scale_base=8.0),
    # multi-axis rotary encodings, here on sequence positions (the diagonal)
    "rope_axial": dict(name="rope_axial", head_dim=HEAD_DIM),
    "rope_axial-3d-half": dict(
        name="rope_axial", head_dim=HEAD_DIM, axes=3, layout="half", sections=[2, 1, 1]
    ),
    "mrope": dict(name="mrope", head_dim=HEAD_DIM),
    "mrope-interleaved": dict(name="mrope", head_dim=HEAD_DIM, mrope_interleaved=True, layout="interleaved"),
    "rope_mixed": dict(name="rope_mixed", head_dim=HEAD_DIM, num_heads=4),  # no grouped keys: g = h
    **{
        f"rope-{scaling}": dict(
            name="rope",
            head_dim=HEAD_DIM,
            rotary_dim=ROTARY_DIM,
            layout="interleaved",
            scaling=_scaled(scaling),
        )
        for scaling in ROPE_SCALINGS
    },
}
ROTARY = [n for n, cls in posenc.ENCODINGS.items() if cls.kind == "rotary"]


@pytest.fixture(scope="module")
def encodings() -> dict[str, posenc.RotaryEncoding]:
    built = {}
    for key, spec in ENCODINGS.items():
        spec = dict(spec)
        built[key] = posenc.build(spec.pop("name"), **spec)
    return built


def test_every_rotary_encoding_of_the_registry_is_covered():
    assert {spec["name"] for spec in ENCODINGS.values()} == set(ROTARY)


def qk(dtype=torch.float64, *, b=2, i=5, j=7, h=4, g=2, seed=0):
    """q ``(b, i, h, d)`` and k ``(b, j, g, d)`` in bshd (grouped-query: fewer key heads)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, i, h, HEAD_DIM, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(b, j, g, HEAD_DIM, generator=gen, dtype=torch.float64).to(dtype)
    return q, k


Q_POS = torch.tensor([[3, 4, 5, 6, 7], [0, 9, 2, 11, 4]])  # per-row, not contiguous in row 1
K_POS = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 9, 10, 11, 12]])


def both(enc, q, k, q_pos, k_pos):
    """``(bshd result, bhsd result transposed to bshd)`` for bshd inputs."""
    got = enc.rotate(q, k, q_positions=q_pos, k_positions=k_pos, layout="bshd")
    ref = enc.rotate(q.transpose(1, 2), k.transpose(1, 2), q_positions=q_pos, k_positions=k_pos)
    return got, tuple(t.transpose(1, 2) for t in ref)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("positions", ["arange", "explicit", "contiguous"])
@pytest.mark.parametrize("key", list(ENCODINGS))
def test_bshd_equals_bhsd_forward_and_backward(encodings, key, positions, dtype):
    enc = encodings[key]
    q, k = qk(dtype, g=2 if enc.supports_grouped_kv else 4)
    q_pos, k_pos = {
        "arange": (None, None),
        "explicit": (Q_POS, K_POS),
        "contiguous": (torch.arange(2, 7)[None], torch.arange(0, 7)[None]),  # the kernel's row path
    }[positions]
    if positions == "arange":
        k = k[:, : q.shape[1]]  # same length: one set of positions for both
    with torch.no_grad():
        got, ref = both(enc, q, k, q_pos, k_pos)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same kernel, the same rounding
        assert a.is_contiguous()  # written in bshd order: nothing was transposed into a copy
    # Backward: the same weighted loss through both layouts.
    qa, ka = q.clone().requires_grad_(), k.clone().requires_grad_()
    qb, kb = q.clone().requires_grad_(), k.clone().requires_grad_()
    gen = torch.Generator().manual_seed(3)
    wq = torch.randn(q.shape, generator=gen, dtype=torch.float64).to(dtype)
    wk = torch.randn(k.shape, generator=gen, dtype=torch.float64).to(dtype)
    ga = torch.autograd.grad(
        enc.rotate(qa, ka, q_positions=q_pos, k_positions=k_pos, layout="bshd"), (qa, ka), (wq, wk)
    )
    out_b = enc.rotate(qb.transpose(1, 2), kb.transpose(1, 2), q_positions=q_pos, k_positions=k_pos)
    gb = torch.autograd.grad(out_b, (qb, kb), (wq.transpose(1, 2), wk.transpose(1, 2)))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, **tol(dtype))


def test_bshd_is_read_and_written_in_place_by_the_kernel(encodings, monkeypatch):
    """The foreign call gets the caller's own q/k pointers (strided), not copies."""
    if not rope_kernel.available():
        pytest.skip("no C compiler: the plain path runs instead")
    seen: list[int] = []
    real = rope_kernel._call

    def spy(dtype, words, count):
        seen.extend(words[t * rope_kernel._WORDS] for t in range(count))  # A_X of each job
        real(dtype, words, count)

    monkeypatch.setattr(rope_kernel, "_call", spy)
    q, k = qk(torch.float32)
    for positions in (None, torch.arange(7)[None]):  # the row path and the table path
        seen.clear()
        kk = k[:, :5] if positions is None else k
        qp = None if positions is None else positions[:, :5]
        encodings["rope-half"].rotate(q, kk, q_positions=qp, k_positions=positions, layout="bshd")
        assert seen == [q.data_ptr(), kk.data_ptr()]


def test_bshd_under_compile_fullgraph_forward_and_backward(encodings):
    """One graph rotates with every encoding (no graph break, no host sync) and equals eager bhsd.

    Length-dependent scalings (dynamic NTK, LongRoPE) are left out: they compute their
    frequencies per call with a data-dependent check, which breaks the graph in either layout.
    """
    torch._dynamo.reset()
    encs = [e for e in encodings.values() if not e.cache_unrotated_keys]
    assert len(encs) == len(encodings) - sum(s.length_dependent for s in ROPE_SCALINGS.values())
    q, k = qk(torch.float64, j=5)  # grouped keys (g = 2)
    _, k_all = qk(torch.float64, j=5, g=4, seed=1)  # a key head per query head (RoPE-Mixed)

    def keys(enc, grouped, full):
        return grouped if enc.supports_grouped_kv else full

    def rotate_all(q, k, k_all):
        return [t for enc in encs for t in enc.rotate(q, keys(enc, k, k_all), layout="bshd")]

    qa, ka, fa = (t.clone().requires_grad_() for t in (q, k, k_all))
    compiled = torch.compile(rotate_all, fullgraph=True, backend="aot_eager")(qa, ka, fa)
    qb, kb, fb = (t.clone().requires_grad_() for t in (q, k, k_all))
    eager = []
    for enc in encs:
        eager += [
            t.transpose(1, 2) for t in enc.rotate(qb.transpose(1, 2), keys(enc, kb, fb).transpose(1, 2))
        ]
    for a, b in zip(compiled, eager, strict=True):
        torch.testing.assert_close(a, b, **tol(torch.float64))
    gen = torch.Generator().manual_seed(4)
    weights = [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in eager]
    got = torch.autograd.grad(compiled, (qa, ka, fa), weights)
    ref = torch.autograd.grad(eager, (qb, kb, fb), weights)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **tol(torch.float64))
    torch._dynamo.reset()


def test_bshd_with_explicit_positions_under_inductor(encodings):
    """The default backend, explicit positions (checked in the graph by device-side asserts)."""
    torch._dynamo.reset()
    enc = encodings["rope-interleaved"]
    q, k = qk(torch.float32)
    fn = torch.compile(
        lambda q, k, qp, kp: enc.rotate(q, k, q_positions=qp, k_positions=kp, layout="bshd"), fullgraph=True
    )
    got = fn(q, k, Q_POS, K_POS)
    _, ref = both(enc, q, k, Q_POS, K_POS)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **tol(torch.float32))
    torch._dynamo.reset()


def test_cos_sin_and_xpos_scale_shape_for_a_layout(encodings):
    """Tables shaped for the layout feed the fused kernel directly and give rotate's result."""
    enc = encodings["rope-partial"]
    q, _ = qk(torch.float32)
    for layout, x in (("bshd", q), ("bhsd", q.transpose(1, 2))):
        cos, sin = enc.cos_sin(Q_POS, torch.float32, layout=layout)
        assert cos.shape == ((2, 5, 1, ROTARY_DIM // 2) if layout == "bshd" else (2, 1, 5, ROTARY_DIM // 2))
        got = posenc.encoding.rotary.rope.apply_rotary_fast(x, cos, sin, layout="half", rotary_dim=ROTARY_DIM)
        ref, _ = enc.rotate(x, x, q_positions=Q_POS, k_positions=Q_POS, layout=layout)
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    flat_cos, _ = enc.cos_sin(Q_POS, torch.float32)
    torch.testing.assert_close(enc.cos_sin(Q_POS, torch.float32, layout="bshd")[0], flat_cos[:, :, None])
    xpos = encodings["xpos"]
    scale = xpos.scale(Q_POS, torch.float64, key=True)
    torch.testing.assert_close(xpos.scale(Q_POS, torch.float64, key=True, layout="bhsd"), scale[:, None])
    torch.testing.assert_close(xpos.scale(Q_POS, torch.float64, key=True, layout="bshd"), scale[:, :, None])


@pytest.mark.parametrize("key", ["rope-half", "xpos"])
def test_positions_that_miss_the_sequence_axis_are_refused(encodings, key):
    enc = encodings[key]
    q, k = qk(torch.float32, j=5)  # (2, 5, 4, 8): seq 5, heads 4
    with pytest.raises(PosencError) as err:  # bshd tensors passed as the default bhsd
        enc.rotate(q, k, q_positions=Q_POS, k_positions=Q_POS)
    text = str(err.value)
    for part in (
        "q_positions",
        "(2, 5)",
        "(2, 5, 4, 8)",
        "layout='bhsd'",
        "axis 2 of length 4",
        "layout='bshd'",
    ):
        assert part in text
    with pytest.raises(
        PosencError, match=r"k_positions has shape \(2, 7\).*layout='bshd'.*axis 1 of length 5"
    ):
        enc.rotate(q, k, q_positions=Q_POS, k_positions=K_POS, layout="bshd")
    with pytest.raises(PosencError, match="config.layout"):
        enc.rotate(q, k, layout="interleaved")  # a pair layout where the tensor layout goes
    with pytest.raises(PosencError, match=r"layout must be one of \['bhsd', 'bshd'\].*did you mean 'bshd'"):
        enc.rotate(q, k, layout="bsdh")
    with pytest.raises(PosencError, match="layout"):
        encodings["rope-half"].cos_sin(Q_POS, torch.float32, layout="bhds")
