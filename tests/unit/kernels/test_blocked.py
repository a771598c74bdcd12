"""The blocked backward (posenc.kernels.blocked): the score gradient reduced into the bias's own parameters, against dense attention's."""

from __future__ import annotations

import copy

import pytest
import torch
from tests.bias_kernels import dense_reference, plain_blocks, qkv, randn
from tests.tolerances import tol

import posenc
from posenc.kernels import blocked
from posenc.kernels.bias_attention import bias_attention
from posenc.registry import ENCODINGS

BIAS_NAMES = [name for name, cls in ENCODINGS.items() if cls.kind == "bias"]


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


@pytest.mark.parametrize("span_rows", [4, 7, 1024])
@pytest.mark.parametrize(("i", "j", "rows"), [(10, 10, 4), (23, 29, 3), (64, 64, 64), (5, 5, 100)])
def test_causal_spans_cover_every_query_once_with_the_keys_it_sees(i, j, rows, span_rows, monkeypatch):
    """Each query is in one piece; the span's shared keys plus the piece's keys are exactly its causal
    horizon (the piece's last row's), for lengths that do and do not divide evenly."""
    monkeypatch.setattr(blocked, "SPAN_ROWS", span_rows)
    covered = []
    for span in blocked.causal_spans(i, j, rows):
        assert span.seen == j - i + span.start  # every row of the span sees these
        for start, stop, keys in span.pieces:
            assert span.start <= start < stop <= span.stop
            assert stop - start <= min(rows, blocked.PIECE_ROWS)
            assert keys == j - i + stop  # the piece's last query sees every key before it
            covered.extend(range(start, stop))
    assert covered == list(range(i))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset", [0, 5])
def test_causal_spans_merged_by_log_sum_exp_equal_dense_attention(dtype, offset, monkeypatch):
    """Several spans (the shared keys in one call, pieces by the diagonal, merged by their
    log-sum-exps) give dense attention's output and, through the row blocks' backward, its
    gradients; the spans are what runs."""
    monkeypatch.setattr(blocked, "SPAN_ROWS", 8)
    monkeypatch.setattr(blocked, "PIECE_ROWS", 3)
    calls = []
    real = blocked._span_forward
    monkeypatch.setattr(blocked, "_span_forward", lambda *a: calls.append(len(a[4])) or real(*a))
    torch.manual_seed(3)
    enc = posenc.build_for_model("t5", d_model=12, num_heads=3, num_buckets=8, max_distance=6).to(dtype)
    with torch.no_grad():
        enc.table.add_(0.5 * torch.randn_like(enc.table))
    i, j = 27, 27 + offset
    q, k, v = qkv(2, 3, i, j, dtype=dtype)
    qp, kp = torch.arange(offset, j)[None], torch.arange(j)[None]
    params = [q, k, v, enc.table]
    g = randn(2, 3, i, 4, seed=4, dtype=dtype)
    out = bias_attention(q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, chunk=5)
    assert calls == [4]  # 27 queries in spans of 8
    enc64 = copy.deepcopy(enc).double()  # the reference: the same inputs in float64
    params64 = [x.detach().double().requires_grad_() for x in (q, k, v)] + [enc64.table]
    ref = dense_reference(*params64[:3], enc64, causal=True, qp=qp, kp=kp)
    torch.testing.assert_close(out.double(), ref, **tol(dtype))
    if dtype == torch.bfloat16:  # (its gradients are the row blocks', tested elsewhere)
        return
    got = torch.autograd.grad(out, params, g)
    for a, c in zip(got, torch.autograd.grad(ref, params64, g.double())):
        torch.testing.assert_close(a.double(), c, rtol=1e-4, atol=1e-5)


def test_span_rows_zero_runs_the_planned_row_blocks(monkeypatch):
    """``SPAN_ROWS = 0`` turns spans off: the row blocks run, with the same attention."""
    monkeypatch.setattr(blocked, "SPAN_ROWS", 0)
    monkeypatch.setattr(blocked, "_span_forward", lambda *a: pytest.fail("spans ran with SPAN_ROWS = 0"))
    enc = posenc.build_for_model("alibi", d_model=12, num_heads=3)
    q, k, v = qkv(1, 3, 20, 26)
    qp, kp = torch.arange(6, 26)[None], torch.arange(26)[None]
    out = bias_attention(q, k, v, enc, causal=True, q_positions=qp, k_positions=kp, chunk=4)
    ref = dense_reference(q, k, v, enc.double(), causal=True, qp=qp, kp=kp)
    torch.testing.assert_close(out, ref, **tol(torch.float64))
