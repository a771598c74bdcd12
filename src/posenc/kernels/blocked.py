"""Attention in row blocks with a bias that is never stored whole, and a backward that reduces
the score gradient into the bias's own parameters.

Axis legend: b batch, h heads, i query positions, j key positions, d head_dim; a block is
``rows`` queries ``[start, stop)`` against the ``keys`` keys they can see (causal blocks skip
the later keys); keys are REVERSED (column ``c`` is key ``keys - 1 - c``), which turns a
Toeplitz bias into a Hankel one, i.e. a view of a per-distance table.

Forward: per block, the bias block from its *source*, then SDPA's flash kernel on CPU (which
also returns each row's log-sum-exp), or the same in plain matrix products elsewhere. A causal
Toeplitz bias on the CPU goes in *spans* instead (:func:`causal_spans`): the keys every query of a
span sees in one call, the keys next to the diagonal in small pieces, the two merged by their
log-sum-exps; a row block computes its whole square next to the diagonal, and blocks of few queries
run slower per score than blocks of many, so one block size cannot both waste little and run fast.
Backward (FlashAttention's recomputation, block by block, or span by span as the forward went:
it needs only each row's output and log-sum-exp, and a row's parts add up): ``P = exp(q k^T s + B - lse)``,
``dv += P^T dO``, ``dS = P (dO v^T - rowsum(dO O))``, ``dq = dS k s``, ``dk += dS^T q s``, and
the source reduces ``dS`` into the gradient of its tensors: no dense bias and no
checkpointed forward is ever kept.

Sources (each a small class with ``block`` and ``accumulate``):

- :class:`ToeplitzSource`: a per-distance table ``(h, i + j - 1)`` (ALiBi, T5, KERPLE,
  Sandwich: ``translation_invariant``); a block is a Hankel view (no copy), and the table's
  gradient is the anti-diagonal sums of ``dS``, one entry per distance: autograd carries it
  into T5's buckets, KERPLE's ``r1, r2``, and so on.
- :class:`MLPSource`: ``f(a[t] s[r])`` with ``f`` a one-hidden-layer ReLU MLP (FIRE: a
  distance term times a per-query normaliser); blocks and their gradient come from the C
  kernel ``_mlp_bias.c`` in float32.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from posenc.kernels import mlp_bias

_FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
#: Devices whose blocks go through SDPA's CPU flash kernel (forward and backward); every other device
#: takes the plain matrix products (the tests empty this set to run that path on the CPU too).
FLASH_DEVICES = frozenset({"cpu"})

Block = tuple[int, int, int]  # (start, stop, keys)

#: Causal spans (:func:`causal_spans`): queries per span, and at most this many rows per piece next
#: to the diagonal. Chosen with ``python benchmarks/bias_spans.py`` on an idle Zen 4 (torch 2.13, 2
#: threads, ALiBi and T5 on (1, 8, L, 64) float32): forward at L 4096 1.05-1.13x unbiased causal SDPA
#: where the planned row blocks ran at 1.15-1.30x, at L 8192 1.09x against 1.60x, forward+backward
#: at L 4096 1.06x / 1.22x (ALiBi / T5) against 1.25x / 1.37x; spans of 768 or 2048 rows and pieces
#: of 128 ran slower (benchmarks/README.md). ``SPAN_ROWS = 0`` turns spans off (the row blocks run
#: as planned).
SPAN_ROWS = 1024
PIECE_ROWS = 256


class Span(NamedTuple):
    """Queries ``[start, stop)``: every one of them sees the first ``seen`` keys; ``pieces`` are
    ``(start, stop, keys)`` blocks whose rows also see keys ``[seen, keys)``."""

    start: int
    stop: int
    seen: int
    pieces: list[Block]


def blocks_for(num_queries: int, num_keys: int, rows: int, causal: bool) -> list[Block]:
    """``(start, stop, keys)`` per row block: under a causal mask later keys are skipped."""
    offset = num_keys - num_queries
    out = []
    for start in range(0, num_queries, rows):
        stop = min(num_queries, start + rows)
        out.append((start, stop, max(1, min(num_keys, offset + stop)) if causal else num_keys))
    return out


def causal_spans(num_queries: int, num_keys: int, rows: int) -> list[Span]:
    """Causal row blocks regrouped for the flash kernel: spans of :data:`SPAN_ROWS` queries, each
    with the keys all its rows see (taken in one call over all of its queries) and
    the rest in pieces of ``min(rows, PIECE_ROWS)`` rows (each piece computes its whole square
    next to the diagonal: the smaller, the less of it is masked). The queries are the last
    ``num_queries`` of ``num_keys`` keys (``num_keys >= num_queries``)."""
    offset = num_keys - num_queries
    piece = min(rows, PIECE_ROWS)
    spans = []
    for start in range(0, num_queries, SPAN_ROWS):
        stop = min(num_queries, start + SPAN_ROWS)
        pieces = [(p, min(stop, p + piece), offset + min(stop, p + piece)) for p in range(start, stop, piece)]
        spans.append(Span(start, stop, offset + start, pieces))
    return spans


def antidiagonal_sums(x: torch.Tensor) -> torch.Tensor:
    """``x (b, h, R, C)`` -> ``(h, R + C - 1)``: entry ``t`` sums ``x[:, :, r, c]`` over the
    batch and ``r + c = t``.

    The batch sum is written into a buffer whose rows are ``R`` longer (the tail zeroed);
    read with rows one element shorter, row ``r`` is shifted right by ``r``, so one sum over
    rows finishes it: two passes, no gather.
    """
    _, h, r, c = x.shape
    buffer = x.new_empty(h, r, c + r)
    if torch.compiler.is_compiling():  # a graph takes no strided out=
        buffer[..., :c] = x.sum(0)
    else:
        torch.sum(x, 0, out=buffer[..., :c])
    buffer[..., c:].zero_()
    return buffer.reshape(h, r * (c + r))[:, : r * (c + r - 1)].reshape(h, r, c + r - 1).sum(1)


def hankel_block(table: torch.Tensor, start: int, stop: int, keys: int, num_keys: int) -> torch.Tensor:
    """Rows ``[start, stop)`` x the first ``keys`` keys, REVERSED, of a Toeplitz bias: ``(1, h, rows, keys)``.

    Query ``i`` and column ``c`` read ``table[i + c + num_keys - keys]``: the ``unfold`` view of
    the table (strides ``(t, 1, 1)``). No copy is made; SDPA reads it as is.
    """
    shift = num_keys - keys
    return table.unfold(-1, keys, 1)[:, start + shift : stop + shift][None]


class ToeplitzSource:
    """Bias ``table[h, i - j + (j_n - 1)]`` (causal ``-inf`` entries inside the table).

    ``band = (width, far)``: the bias is one parameter per head for distances ``>= width``
    (T5's last bucket, under a causal mask), so the score gradient is only formed on the
    ``width`` diagonals next to the main one; the far entries' total follows from each
    softmax row's gradient summing to zero and goes to table entry ``far`` (any far entry:
    they all feed the same parameter).
    """

    def __init__(
        self, tensors: tuple[torch.Tensor, ...], num_keys: int, allowed: torch.Tensor | None, band=None
    ):
        (self.table,) = tensors
        self.num_keys, self.allowed, self.band = num_keys, allowed, band
        self.grad: torch.Tensor | None = None

    def block(self, start: int, stop: int, keys: int) -> torch.Tensor:
        bias = hankel_block(self.table, start, stop, keys, self.num_keys)
        if self.allowed is not None:
            bias = bias.masked_fill(~self.allowed[..., start:stop, :keys].flip(-1), float("-inf"))
        return bias

    def begin_backward(self, needs: tuple[bool, ...]) -> bool:
        self.grad = torch.zeros_like(self.table) if needs[0] else None
        return self.grad is not None

    def columns(self, start: int, stop: int, keys: int, num_queries: int) -> int:
        """How many leading (reversed) columns of the block need the score gradient."""
        if self.band is None:
            return keys
        nearest = max(0, start + self.num_keys - num_queries - self.band[0] + 1)  # first key in the band
        return keys - min(nearest, keys - 1)

    def accumulate(self, start: int, stop: int, keys: int, grad_s: torch.Tensor) -> None:
        assert self.grad is not None  # bias of row r, column c is table[r + c + (start + j - keys)]
        first = start + self.num_keys - keys
        sums = antidiagonal_sums(grad_s)  # (h, rows + columns - 1)
        self.grad[:, first : first + sums.shape[-1]] += sums

    def grads(self) -> tuple[torch.Tensor | None, ...]:
        if self.grad is not None and self.band is not None and self.band[1] is not None:
            finite = torch.isfinite(self.table)
            total = torch.where(finite, self.grad, 0).sum(-1)  # every row of dS sums to zero
            self.grad[:, self.band[1]] -= total
        return (self.grad,)


class MLPSource:
    """Bias ``b2 + w2 relu(w1 x + b1)`` with ``x = a[r + c + shift] s[r]`` (float32; ``a < 0``
    marks a masked distance). The C kernel builds each block and reduces its gradient."""

    def __init__(
        self, tensors: tuple[torch.Tensor, ...], num_keys: int, allowed: torch.Tensor | None, band=None
    ):
        self.tensors = tuple(t.detach().contiguous() for t in tensors)  # a, s, w1, b1, w2, b2
        self.num_keys, self.band = num_keys, band
        assert allowed is None and band is None  # the MLP path is only taken without either
        self.grads_: list[torch.Tensor] | None = None

    def block(self, start: int, stop: int, keys: int) -> torch.Tensor:
        return mlp_bias.forward(*self.tensors, start=start, stop=stop, keys=keys, num_keys=self.num_keys)

    def begin_backward(self, needs: tuple[bool, ...]) -> bool:
        self.grads_ = [torch.zeros(t.shape, dtype=torch.float64, device=t.device) for t in self.tensors]
        return any(needs)

    def columns(self, start: int, stop: int, keys: int, num_queries: int) -> int:
        return keys

    def accumulate(self, start: int, stop: int, keys: int, grad_s: torch.Tensor) -> None:
        assert self.grads_ is not None
        g = grad_s.sum(0).to(torch.float32).contiguous()  # (h, rows, keys)
        a, s, w1, b1, w2, b2 = self.tensors
        mlp_bias.backward(
            a, s, w1, b1, w2, b2, g, self.grads_, start=start, stop=stop, keys=keys, num_keys=self.num_keys
        )

    def grads(self) -> tuple[torch.Tensor | None, ...]:
        assert self.grads_ is not None
        return tuple(g.to(t.dtype) for g, t in zip(self.grads_, self.tensors))


SOURCES: dict[str, type[ToeplitzSource] | type[MLPSource]] = {"toeplitz": ToeplitzSource, "mlp": MLPSource}
_FLASH_CPU_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class _BlockedAttention(torch.autograd.Function):
    """See the module docstring; ``tensors`` are the source's (table, or MLP terms)."""

    @staticmethod
    def forward(ctx, q, k_rev, v_rev, kind, blocks, spans, allowed, scale, band, *tensors):
        b, h, i, _ = q.shape
        j = k_rev.shape[2]
        source = SOURCES[kind](tensors, j, allowed, band)
        wide = torch.promote_types(q.dtype, torch.float32)
        out = q.new_empty(b, h, i, v_rev.shape[-1])
        lse = torch.empty(b, h, i, dtype=wide, device=q.device)
        if spans is not None:
            assert isinstance(source, ToeplitzSource)  # spans are planned for a Toeplitz bias only
            _span_forward(q, k_rev, v_rev, source, spans, scale, out, lse)
        for start, stop, keys in blocks if spans is None else ():
            bias = source.block(start, stop, keys)
            qb, kb, vb = q[:, :, start:stop], k_rev[:, :, j - keys :], v_rev[:, :, j - keys :]
            if q.device.type in FLASH_DEVICES:  # the flash kernel returns the log-sum-exp too
                o, m = _FLASH_CPU(qb, kb, vb, attn_mask=bias, scale=scale)
            else:  # (b, h, rows, keys) logits; the bias block broadcasts over the batch
                logits = (qb.to(wide) @ kb.to(wide).transpose(-1, -2)).mul_(scale).add_(bias)
                m = torch.logsumexp(logits, dim=-1)
                o = (torch.exp(logits - m[..., None]) @ vb.to(wide)).to(q.dtype)
            out[:, :, start:stop] = o
            lse[:, :, start:stop] = m
        ctx.save_for_backward(q, k_rev, v_rev, out, lse, allowed, *tensors)
        ctx.kind, ctx.blocks, ctx.spans, ctx.scale, ctx.band = kind, blocks, spans, scale, band
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k_rev, v_rev, out, lse, allowed, *tensors = ctx.saved_tensors
        scale, i, j = ctx.scale, q.shape[2], k_rev.shape[2]
        wide = lse.dtype
        source = SOURCES[ctx.kind](tuple(t.detach() for t in tensors), j, allowed, ctx.band)
        needs_table = source.begin_backward(ctx.needs_input_grad[9:])
        flash = q.device.type in FLASH_DEVICES
        grad_q = torch.zeros(q.shape, dtype=q.dtype if flash else wide, device=q.device)
        grad_k = torch.zeros(k_rev.shape, dtype=grad_q.dtype, device=q.device)
        grad_v = torch.zeros(v_rev.shape, dtype=grad_q.dtype, device=q.device)
        for start, stop, keys, width in _parts(ctx.blocks, ctx.spans if flash else None):
            window = slice(j - keys, j - keys + width)  # keys [keys - width, keys), reversed
            bias = source.block(start, stop, keys)[..., :width]
            qb, kb, vb = q[:, :, start:stop], k_rev[:, :, window], v_rev[:, :, window]
            gb, ob, mb = grad_out[:, :, start:stop], out[:, :, start:stop], lse[:, :, start:stop, None]
            if flash:  # q, k, v gradients from the flash kernel's own backward (a row's parts add up)
                dq, dk, dv = _FLASH_CPU_BACKWARD(
                    gb, qb, kb, vb, ob, mb[..., 0], 0.0, False, attn_mask=bias, scale=scale
                )
                grad_q[:, :, start:stop] += dq
                grad_k[:, :, window] += dk
                grad_v[:, :, window] += dv
                if needs_table:  # the score gradient, only on the columns the source needs
                    for sub in range(start, stop, _BAND_ROWS if source.band is not None else stop - start):
                        end = min(stop, sub + _BAND_ROWS) if source.band is not None else stop
                        cols = min(width, source.columns(sub, end, keys, i))
                        rows = slice(sub - start, end - start)
                        grad_s, _ = _score_gradient(
                            qb[:, :, rows], kb[:, :, :cols], vb[:, :, :cols], bias[..., rows, :cols],
                            gb[:, :, rows], ob[:, :, rows], mb[:, :, rows], scale, wide,
                        )  # fmt: skip
                        source.accumulate(sub, end, keys, grad_s)
                continue
            grad_s, probs = _score_gradient(qb, kb, vb, bias, gb, ob, mb, scale, wide)
            kw, qw = kb.to(wide), qb.to(wide)
            grad_q[:, :, start:stop] = (grad_s @ kw).mul_(scale)
            grad_k[:, :, j - keys :] += (grad_s.transpose(-1, -2) @ qw).mul_(scale)
            grad_v[:, :, j - keys :] += probs.transpose(-1, -2) @ gb.to(wide)
            if needs_table:
                source.accumulate(start, stop, keys, grad_s)
        grads = (grad_q.to(q.dtype), grad_k.to(k_rev.dtype), grad_v.to(v_rev.dtype))
        return (*grads, None, None, None, None, None, None, *source.grads())


def _parts(blocks: list[Block], spans: list[Span] | None) -> list[tuple[int, int, int, int]]:
    """``(start, stop, keys, width)``: rows ``[start, stop)`` against the first ``width`` (reversed)
    columns of block ``(start, stop, keys)``, i.e. keys ``[keys - width, keys)``: the blocks whole,
    or the spans' pieces and shared keys."""
    if spans is None:
        return [(start, stop, keys, keys) for start, stop, keys in blocks]
    parts = []
    for span in spans:
        parts += [(start, stop, keys, keys - span.seen) for start, stop, keys in span.pieces]
        if span.seen:
            parts.append((span.start, span.stop, span.seen, span.seen))
    return parts


def _span_forward(q, k_rev, v_rev, source: ToeplitzSource, spans: list[Span], scale, out, lse) -> None:
    """Fill ``out`` and ``lse`` span by span on the CPU's flash kernel (see :func:`causal_spans`)."""
    j = k_rev.shape[2]
    for span in spans:
        for start, stop, keys in span.pieces:  # keys [seen, keys): the first columns when reversed
            near = slice(j - keys, j - span.seen)
            bias = source.block(start, stop, keys)[..., : keys - span.seen]
            o, m = _FLASH_CPU(
                q[:, :, start:stop], k_rev[:, :, near], v_rev[:, :, near], attn_mask=bias, scale=scale
            )
            out[:, :, start:stop] = o
            lse[:, :, start:stop] = m
        if not span.seen:
            continue
        rows, shared = slice(span.start, span.stop), slice(j - span.seen, j)
        bias = source.block(span.start, span.stop, span.seen)
        o, m = _FLASH_CPU(
            q[:, :, rows], k_rev[:, :, shared], v_rev[:, :, shared], attn_mask=bias, scale=scale
        )
        near_lse = lse[:, :, rows]
        total = torch.logaddexp(m, near_lse)
        far_weight, near_weight = (m - total).exp_()[..., None], (near_lse - total).exp_()[..., None]
        if out.dtype == lse.dtype:  # merged in place
            out[:, :, rows].mul_(near_weight).addcmul_(o, far_weight)
        else:  # half precision: merged in float32, rounded once
            out[:, :, rows] = torch.addcmul(
                out[:, :, rows].to(lse.dtype) * near_weight, o.to(lse.dtype), far_weight
            )
        lse[:, :, rows] = total


_BAND_ROWS = 64  # rows per score-gradient piece on a band: the band's columns are counted from each


def _score_gradient(qb, kb, vb, bias, gb, ob, mb, scale, wide) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dS, P)`` of one block: ``P = exp(q k^T s + B - lse)``, ``dS = P (dO v^T - rowsum(dO O))``."""
    qw, kw, vw, gw = qb.to(wide), kb.to(wide), vb.to(wide), gb.to(wide)
    probs = (qw @ kw.transpose(-1, -2)).mul_(scale).add_(bias).sub_(mb).exp_()
    grad_s = (gw @ vw.transpose(-1, -2)).sub_((gw * ob.to(wide)).sum(-1, keepdim=True)).mul_(probs)
    return grad_s, probs


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kind: str,
    tensors: tuple[torch.Tensor, ...],
    *,
    blocks: list[Block],
    allowed: torch.Tensor | None = None,
    band: tuple[int, int | None] | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d) + B) v`` in row ``blocks`` with the bias ``B`` of source ``kind``
    (``"toeplitz"``: ``tensors = (table,)``, optional ``band`` (see :class:`ToeplitzSource`);
    ``"mlp"``: ``(a, s, w1, b1, w2, b2)``); ``k``, ``v`` in their natural order (reversed here).
    ``causal``: the blocks are :func:`blocks_for`'s causal ones (a causal Toeplitz bias without
    ``allowed`` then runs in :func:`causal_spans` on the CPU's flash kernel).
    Returns ``(b, h, i, d)`` in ``q.dtype``."""
    scale = q.shape[-1] ** -0.5
    i, j = q.shape[2], k.shape[2]
    spans = None
    if (
        SPAN_ROWS > 0
        and causal
        and kind == "toeplitz"
        and allowed is None
        and q.device.type in FLASH_DEVICES
        and j >= i
        and blocks
    ):
        spans = causal_spans(i, j, blocks[0][1] - blocks[0][0])
    return _BlockedAttention.apply(
        q, k.flip(2), v.flip(2), kind, blocks, spans, allowed, scale, band, *tensors
    )
