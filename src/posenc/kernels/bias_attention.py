"""Attention with a bias encoding, without materialising the ``(b, h, i, j)`` bias.

Axis legend: b batch, h heads, i query positions, j key positions, d head_dim,
t index into a per-head table over distances ``delta = q_pos - k_pos``.

The dense path (:func:`posenc.nn.attention.sdpa_attention`) builds the whole bias, casts
it, masks it and hands it to SDPA: ``h * i * j`` floats several times over (2 GiB at
h=32, L=4096 in float32 alone). Two paths here compute the same attention with memory
that does not grow with ``i * j``:

``"chunked"`` (default; forward and backward, any device): queries go through SDPA in
    row blocks, each with its own ``(b|1, h, rows, j')`` bias block (``j'`` = keys the block
    can see: under a causal mask the later keys are skipped, which also skips most of the
    masked work). Three ways to get a block, fastest first:

    - Encodings whose bias depends on ``q_pos - k_pos`` only (ALiBi, T5, KERPLE, Sandwich:
      they declare ``translation_invariant``) with contiguous positions (known from shapes
      and cache offsets, never read): the bias is evaluated ONCE per call on the
      ``i + j - 1`` distances, ``(h, t)``; with the keys in reverse order every block is a
      Hankel matrix, i.e. an ``unfold`` VIEW of that table, which SDPA reads without a copy.
      Backward is :mod:`posenc.kernels.blocked`'s: the probabilities are recomputed per
      block and the score gradient is summed per distance into the table, from which
      autograd reaches the parameters (T5's buckets, KERPLE's ``r1, r2``). Under a causal
      mask on the CPU forward and backward regroup the blocks in spans (the keys a span's queries
      all see in one call, the rest in small pieces, merged by their log-sum-exps:
      :func:`posenc.kernels.blocked.causal_spans`).
    - FIRE in float32 on CPU (``factored_mlp``: a distance term times a per-query
      normaliser, fed to a small MLP): the C kernel ``_mlp_bias.c`` writes each block and
      reduces its gradient, the MLP in float32 per score.
    - Anything else (explicit positions, float64, dropout, other devices, inside
      ``torch.compile`` for FIRE): ``encoding.bias`` per block; with autograd, blocks are
      checkpointed (:func:`torch.utils.checkpoint.checkpoint`) once all biases together
      would exceed the budget, so backward recomputes a block instead of keeping it.

    Half-precision inputs keep the bias in float32 (SDPA accepts it), rounded exactly as
    the dense bias is.

``"flex"`` (forward only: torch 2.13 has no FlexAttention backward on CPU):
    ``torch.compile``-d FlexAttention with the encoding's ``score_mod`` and a block mask;
    nothing ``(i, j)``-sized is built at all. Lengths are zero-padded to whole 128-row
    blocks (see :func:`flex_bias_attention` for why); each new padded shape compiles
    (seconds on 2 cores), so it is opt-in (``path="flex"``); a failed compile, a call that
    needs gradients on the CPU, a head_dim under 16 on CUDA, or more shapes than torch's
    recompile limit take the chunked path with one log line.

``"dense"``: the whole ``(b|1, h, i, j)`` bias handed to SDPA (what the plain attention path
    computes); fastest at short lengths on some GPUs, memory growing with ``i * j``.

``"auto"`` (what attention uses) is the chunked path, except on a device that
:mod:`posenc.kernels.bias_paths` has measurements for: there the path measured fastest for the
encoding, the mode (forward, or with a backward pass), the dtype and the length; a flex choice
the call cannot take (a mask, dropout) runs chunked.

All are tested against dense SDPA on full tensors (tests/unit/kernels/test_bias_attention.py,
test_blocked.py, test_mlp_bias.py, test_bias_paths.py).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from posenc.core.checks import check_choice, check_int, compute_dtype
from posenc.core.positions import Positions, as_positions, resolve_positions
from posenc.kernels import bias_paths, mlp_bias
from posenc.kernels._build import warn_once
from posenc.kernels.blocked import blocked_attention, blocks_for, hankel_block

PATHS = ("auto", "chunked", "flex", "dense")
CHUNK_BYTES = 32 << 20  # bias bytes per block (translation-invariant encodings)
GENERIC_CHUNK_BYTES = 8 << 20  # per block when the float64 definition runs per score
MIN_CAUSAL_ROWS = 128  # causal: blocks of max(this, i/8) rows skip most of the masked triangle
#: Blocks on a GPU are this many times larger: its memory is larger, and every block costs kernel launches
#: (FIRE's per-block MLP at 8 MiB blocks ran 8x slower than the dense bias on an H200).
ACCELERATOR_BLOCK_SCALE = 8


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``(b, g, j, d) -> (b, g * groups, j, d)``: key/value head ``t`` serves query heads
    ``t * groups .. (t + 1) * groups - 1`` (``x`` itself when ``groups == 1``)."""
    if groups == 1:
        return x
    b, g, j, d = x.shape
    return x[:, :, None].expand(b, g, groups, j, d).reshape(b, g * groups, j, d)


def _with_start(positions: Positions) -> Positions:
    """``positions`` with ``start`` set when every row is ``p0 + arange(n)`` (reads the values:
    only for tensors handed to the public entry points, never on attention's path)."""
    if positions.start is not None or torch.compiler.is_compiling():
        return positions
    tensor = positions.tensor
    row = tensor[0]
    if tensor.shape[0] > 1 and not bool((tensor == row).all()):
        return positions
    if not row.numel():
        return positions._replace(start=0)
    first = int(row[0])
    steps = torch.arange(row.shape[0], device=row.device) + first
    return positions._replace(start=first) if torch.equal(row, steps) else positions


def distance_table(encoding, q0: int, k0: int, num_queries: int, num_keys: int, device) -> torch.Tensor:
    """``(h, i + j - 1)`` float64: entry ``t`` is the bias at ``delta = q0 - k0 + t - (j - 1)``.

    Query ``i`` (position ``q0 + i``) and key ``j`` (``k0 + j``) read entry ``t = i - j + (j_n - 1)``.
    Valid only for encodings that declare ``translation_invariant``.
    """
    return encoding.distance_bias(q0 - k0 - (num_keys - 1), num_queries + num_keys - 1, device=device)


# ---------------------------------------------------------------------------
# The chunked path.
# ---------------------------------------------------------------------------


def _chunk_rows(batch: int, heads: int, keys: int, element: int, budget: int, num_queries: int) -> int:
    per_row = max(1, batch * heads * keys * element)
    return max(1, min(num_queries, budget // per_row))


class _Plan(NamedTuple):
    """How :func:`chunked_bias_attention` splits one call: the positions, the bias dtype, whether
    the bias is one distance table (``toeplitz``), the row blocks and the memory budget."""

    qp: Positions
    kp: Positions
    wide: torch.dtype  # the bias dtype: float32 for half-precision q
    toeplitz: bool
    element: int  # bytes per bias entry
    budget: int  # bias bytes per block
    mask_batch: int
    blocks: list
    masked: int  # table entries t < masked are keys after the query (causal)


def _plan(q, k, encoding, q_positions, k_positions, allowed, causal: bool, chunk: int | None) -> _Plan:
    b, h, i, _ = q.shape
    j = k.shape[2]
    qp = as_positions(q_positions, i, batch=b, device=q.device, name="q_positions")
    kp = as_positions(k_positions, j, batch=b, device=q.device, name="k_positions")
    if not isinstance(q_positions, Positions):
        qp = _with_start(qp)
    if not isinstance(k_positions, Positions):
        kp = _with_start(kp)
    # The bias stays in float32 for half-precision q (SDPA takes a float32 mask): ALiBi at
    # distance 4000 is ~2000, where bfloat16's spacing (16) would erase the slope.
    wide = compute_dtype(q.dtype)
    toeplitz = (
        (allowed is None or allowed.shape[0] == 1)
        and qp.start is not None
        and kp.start is not None
        and encoding.translation_invariant
    )
    element = wide.itemsize if toeplitz else 8
    budget = CHUNK_BYTES if toeplitz else GENERIC_CHUNK_BYTES
    if q.device.type != "cpu":
        budget *= ACCELERATOR_BLOCK_SCALE
    mask_batch = 1 if toeplitz else qp.tensor.shape[0]
    rows = chunk or _chunk_rows(mask_batch, h, j, element, budget, i)
    if causal and chunk is None:  # smaller blocks skip more of the masked upper triangle
        rows = min(rows, max(MIN_CAUSAL_ROWS, -(-i // 8)))
    rows = check_int("chunk", rows, minimum=1)
    masked = j - 1 - (j - i) if causal else 0
    return _Plan(qp, kp, wide, toeplitz, element, budget, mask_batch, blocks_for(i, j, rows, causal), masked)


def _toeplitz_table(encoding, plan: _Plan, q: torch.Tensor, j: int) -> torch.Tensor:
    """The ``(h, i + j - 1)`` distance table in the bias dtype, with ``-inf`` at masked keys."""
    h, i = q.shape[1], q.shape[2]
    assert plan.qp.start is not None and plan.kp.start is not None
    table = distance_table(encoding, plan.qp.start, plan.kp.start, i, j, q.device)
    table = table.to(encoding.bias_dtype).to(plan.wide)  # rounded as the dense bias is
    if plan.masked > 0:
        table = torch.cat((table.new_full((h, plan.masked), float("-inf")), table[:, plan.masked :]), -1)
    return table


def _toeplitz_band(encoding, plan: _Plan, causal: bool, i: int, j: int) -> tuple[int, int | None] | None:
    """The band past which the bias is constant (causal only), and the far table entry if any."""
    width = encoding.constant_beyond() if causal else None
    if width is None:
        return None
    assert plan.qp.start is not None and plan.kp.start is not None
    # the last table entry is the largest distance: a far one if any is
    far = i + j - 2 if plan.qp.start - plan.kp.start + i - 1 >= width else None
    return (width, far)


def _mlp_fast_path(q, k, v, encoding, plan: _Plan, allowed, dropout: float) -> torch.Tensor | None:
    """FIRE in float32 on CPU: a float32 MLP per score, in C, never a dense bias (None: not here)."""
    usable = (
        allowed is None and not dropout and plan.qp.start is not None and plan.kp.start is not None
        and q.dtype != torch.float64 and encoding.bias_dtype == torch.float32 and q.device.type == "cpu"
        and not torch.compiler.is_compiling() and mlp_bias.available()
    )  # fmt: skip
    if not usable:
        return None
    assert plan.qp.start is not None and plan.kp.start is not None
    i, j = q.shape[2], k.shape[2]
    terms = encoding.factored_mlp(plan.qp.start, plan.kp.start, i, j, device=q.device)
    if terms is None:
        return None
    a = terms[0]
    if plan.masked > 0:
        a = torch.cat((a.new_full((plan.masked,), -1.0), a[plan.masked :]))  # a < 0 marks a masked key
    return blocked_attention(q, k, v, "mlp", (a, *terms[1:]), blocks=plan.blocks)


def chunked_bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding,
    *,
    q_positions: torch.Tensor | Positions | None = None,
    k_positions: torch.Tensor | Positions | None = None,
    allowed: torch.Tensor | None = None,
    causal: bool = False,
    dropout: float = 0.0,
    chunk: int | None = None,
) -> torch.Tensor:
    """Row-blocked SDPA with the bias built one block at a time (see the module docstring).

    Args:
        q: ``(b, h, i, d)``; k, v: ``(b, h, j, d)``.
        encoding: a bias encoding (``bias_fn``, ``bias``, ``num_heads``).
        q_positions, k_positions: int ``(b|1, i)``, ``(b|1, j)`` (checked), trusted
            :class:`~posenc.core.positions.Positions`, or None = arange.
        allowed: bool "may attend" ``(b|1, 1|h, i, j)`` or None; every row must allow a key.
        causal: mask keys after the query by index (the ``i`` queries are the last ``i`` keys).
        dropout: dropout probability on the attention weights.
        chunk: rows per block (default: from a memory budget).

    Returns:
        ``(b, h, i, d)`` in ``q.dtype``.
    """
    plan = _plan(q, k, encoding, q_positions, k_positions, allowed, causal, chunk)
    i, j = q.shape[2], k.shape[2]
    table = None
    if plan.toeplitz:
        table = _toeplitz_table(encoding, plan, q, j)
        if not dropout:
            band = _toeplitz_band(encoding, plan, causal, i, j)
            return blocked_attention(
                q, k, v, "toeplitz", (table,), blocks=plan.blocks, allowed=allowed, band=band, causal=causal
            )
    else:
        out = _mlp_fast_path(q, k, v, encoding, plan, allowed, dropout)
        if out is not None:
            return out
    return _sdpa_blocks(q, k, v, encoding, plan, table, allowed=allowed, causal=causal, dropout=dropout)


def _sdpa_blocks(
    q, k, v, encoding, plan: _Plan, table, *, allowed, causal: bool, dropout: float
) -> torch.Tensor:
    """The general chunked path: SDPA per row block, each block's bias from the table (a Hankel
    view, keys reversed) or from ``encoding.bias``; checkpointed under autograd past the budget."""
    b, h, i, _ = q.shape
    j = k.shape[2]
    offset = j - i
    qp, kp, wide = plan.qp, plan.kp, plan.wide
    needs_grad = torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad or (table is not None and table.requires_grad)
        or any(p.requires_grad for p in encoding.parameters())
    )  # fmt: skip
    if table is not None:
        k, v = k.flip(2), v.flip(2)  # keys in reverse order make every bias block a Hankel view
    col = torch.arange(j, device=q.device)
    qt, kt = qp.tensor, kp.tensor

    def block(start: int, stop: int, keys: int, qc, kc, vc, tab) -> torch.Tensor:
        if tab is not None:
            bias = hankel_block(tab, start, stop, keys, j)  # causal -inf already inside
            if allowed is not None:
                bias = bias.masked_fill(~allowed[..., start:stop, :keys].flip(-1), float("-inf"))
        else:
            bias = encoding.bias(
                stop - start, keys, q_positions=Positions(qt[:, start:stop], qp.bound, None, qp.low),
                k_positions=Positions(kt[:, :keys], kp.bound, None, kp.low), device=q.device,
            ).to(wide)  # (b|1, h, rows, keys)  # fmt: skip
            if causal:
                future = col[None, :keys] > (torch.arange(start, stop, device=q.device)[:, None] + offset)
                bias = bias.masked_fill(future, float("-inf"))
            if allowed is not None:
                bias = bias.masked_fill(~allowed[..., start:stop, :keys], float("-inf"))
        return F.scaled_dot_product_attention(qc, kc, vc, attn_mask=bias, dropout_p=dropout)

    if len(plan.blocks) == 1:  # one block: nothing to save by checkpointing
        return block(0, i, j, q, k, v, table)
    outs = []
    keep_all = needs_grad and plan.mask_batch * h * i * j * plan.element <= plan.budget
    out = None if needs_grad else q.new_empty(b, h, i, v.shape[-1])
    for start, stop, keys in plan.blocks:
        # the first `keys` keys are the last `keys` of the reversed set when the table is used
        first, last = (j - keys, j) if table is not None else (0, keys)
        args = (q[:, :, start:stop], k[:, :, first:last], v[:, :, first:last], table)
        if keep_all:  # small enough to keep every block's bias for backward
            outs.append(block(start, stop, keys, *args))
        elif needs_grad:  # backward recomputes the block (and its bias) instead of storing it
            outs.append(checkpoint(block, start, stop, keys, *args, use_reentrant=False))
        else:
            assert out is not None  # allocated above when no gradient is needed
            out[:, :, start:stop] = block(start, stop, keys, *args)
    if needs_grad:
        return torch.cat(outs, dim=2)
    assert out is not None
    return out


# ---------------------------------------------------------------------------
# The FlexAttention path (forward only on CPU).
# ---------------------------------------------------------------------------


FLEX_BLOCK = 128  # FlexAttention's block size: the flex path pads every length to a multiple of it


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


_FLEX_SHAPES: set[tuple] = set()  # what the compiled kernel has been specialised for in this process


#: The smallest head size CUDA's FlexAttention kernel takes (torch's inductor refuses smaller ones).
CUDA_FLEX_MIN_HEAD_DIM = 16


def _flex_refusal(
    device_type: str, qk_dim: int, v_dim: int, needs_grad: bool, masked: bool, dropout: float
) -> str | None:
    """Why the FlexAttention path cannot take a call, known before any compile (None: try it)."""
    if needs_grad and device_type == "cpu":
        return "gradients (no FlexAttention backward on CPU)"
    if masked:
        return "an explicit mask"
    if dropout:
        return "dropout"
    if device_type == "cuda" and min(qk_dim, v_dim) < CUDA_FLEX_MIN_HEAD_DIM:
        return f"head_dim {min(qk_dim, v_dim)} (CUDA's FlexAttention takes {CUDA_FLEX_MIN_HEAD_DIM} or more)"
    return None


def _flex_room(key: tuple) -> bool:
    """True if a call keyed ``key`` runs compiled: seen before, or under dynamo's recompile limit.

    Past ``torch._dynamo.config.recompile_limit`` specialisations torch would silently run
    FlexAttention eagerly, materialising every ``(i, j)`` score; the chunked path is better.
    """
    if key in _FLEX_SHAPES:
        return True
    limit = getattr(torch._dynamo.config, "recompile_limit", 8)
    if len(_FLEX_SHAPES) >= limit:
        return False
    _FLEX_SHAPES.add(key)
    return True


def _padded_length(n: int) -> int:
    return max(FLEX_BLOCK, -(-n // FLEX_BLOCK) * FLEX_BLOCK)


def _pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """``x (..., n, d)`` followed by ``rows - n`` zero rows, in a fresh buffer."""
    out = x.new_zeros(*x.shape[:-2], rows, x.shape[-1])
    out[..., : x.shape[-2], :] = x
    return out


@functools.lru_cache(maxsize=16)
def _flex_block_mask(num_queries: int, num_keys: int, causal: bool, device: str):
    """Block mask over the PADDED ``(i', j')`` grid: real keys only, and causal if asked.

    The lengths enter ``mask_mod`` as 0-dim tensors, not Python ints, so the compiled kernel
    is reused for every length that pads to the same size instead of recompiling per length.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    keys = torch.tensor(num_keys, device=device)
    offset = torch.tensor(num_keys - num_queries, device=device)

    def real_keys(b, h, q_idx, kv_idx):
        return kv_idx < keys

    def causal_real_keys(b, h, q_idx, kv_idx):  # kv <= q + offset < keys for every real query
        return (kv_idx <= q_idx + offset) & (kv_idx < keys)

    mask_mod = causal_real_keys if causal else real_keys
    return create_block_mask(
        mask_mod, None, None, _padded_length(num_queries), _padded_length(num_keys), device=device
    )


def flex_bias_attention(q, k, v, encoding, *, q_positions=None, k_positions=None, causal=False):
    """Compiled FlexAttention with ``encoding.score_mod``; ``(b, h, i, d)``. Forward only on CPU.

    Queries and keys are zero-padded to a multiple of :data:`FLEX_BLOCK` rows (padded keys are
    masked, padded query rows dropped). The compiled CPU kernel of torch 2.13 reads past the
    end of ``k`` when the key count is not a multiple of its block (seen with AVX2 code at
    ``j = 8 (mod 16)``: NaN or wrong rows in the last head, varying with whatever memory
    follows the tensor); with whole blocks every read stays inside the padded buffers.
    """
    b, _, i, _ = q.shape
    j = k.shape[2]
    qp = resolve_positions(q_positions, i, batch=b, device=q.device, name="q_positions")
    kp = resolve_positions(k_positions, j, batch=b, device=q.device, name="k_positions")
    rows, cols = _padded_length(i), _padded_length(j)
    qp, kp = F.pad(qp, (0, rows - i)), F.pad(kp, (0, cols - j))  # padded rows/keys never reach the output
    q, k, v = _pad_rows(q, rows), _pad_rows(k, cols), _pad_rows(v, cols)
    block_mask = _flex_block_mask(i, j, causal, str(q.device))
    out = _compiled_flex()(q, k, v, score_mod=encoding.score_mod(qp, kp), block_mask=block_mask)
    return out[:, :, :i]


def flex_available() -> bool:
    """True when FlexAttention imports (it still needs a working torch.compile)."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------
# The entry point.
# ---------------------------------------------------------------------------


def dense_bias_attention(q, k, v, encoding, *, q_positions=None, k_positions=None, allowed=None,
                         causal: bool = False, dropout: float = 0.0) -> torch.Tensor:  # fmt: skip
    """SDPA with the encoding's whole bias ``(b|1, h, i, j)`` (float32 for half-precision q, as the
    chunked path keeps it), ``-inf`` at masked keys; ``(b, h, i, d)``."""
    b, _, i, _ = q.shape
    j = k.shape[2]
    qp = as_positions(q_positions, i, batch=b, device=q.device, name="q_positions")
    kp = as_positions(k_positions, j, batch=b, device=q.device, name="k_positions")
    bias = encoding.bias(i, j, q_positions=qp, k_positions=kp, device=q.device).to(compute_dtype(q.dtype))
    if causal:  # the i queries are the last i keys
        future = torch.ones(i, j, dtype=torch.bool, device=q.device).triu(j - i + 1)
        bias = bias.masked_fill(future, float("-inf"))
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)


def _auto_path(q, k, v, encoding) -> str:
    """The measured path for this call's device (``"chunked"`` where nothing was measured)."""
    name = bias_paths.device_name(q.device)
    if name is None:
        return bias_paths.DEFAULT
    needs_grad = torch.is_grad_enabled() and (
        any(t.requires_grad for t in (q, k, v)) or any(p.requires_grad for p in encoding.parameters())
    )
    mode = "fwd+bwd" if needs_grad else "fwd"
    return bias_paths.choose(name, type(encoding).__name__, mode, q.dtype, k.shape[2])


def bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    encoding,
    *,
    q_positions: torch.Tensor | Positions | None = None,
    k_positions: torch.Tensor | Positions | None = None,
    allowed: torch.Tensor | None = None,
    causal: bool = False,
    dropout: float = 0.0,
    path: str = "auto",
    chunk: int | None = None,
) -> torch.Tensor:
    """Attention ``softmax(q k^T / sqrt(d) + bias) v``, by the path ``path`` names.

    ``path="auto"``: the chunked path (memory independent of ``i * j``), or on a device with
    measurements (:mod:`posenc.kernels.bias_paths`) the path measured fastest there. ``"flex"``
    uses FlexAttention when it can (no ``allowed`` mask, no dropout, no gradients on the CPU) and
    otherwise falls back to chunked (with one log line when asked for by name); ``"dense"`` builds
    the whole bias. Arguments as :func:`chunked_bias_attention`.
    """
    check_choice("path", path, PATHS)
    if math.prod(q.shape) == 0 or k.shape[2] == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    asked = path
    if path == "auto" and not torch.compiler.is_compiling():
        path = _auto_path(q, k, v, encoding)
    if path == "dense":
        return dense_bias_attention(
            q, k, v, encoding, q_positions=q_positions, k_positions=k_positions, allowed=allowed,
            causal=causal, dropout=dropout,
        )  # fmt: skip
    if path == "flex":
        out = _try_flex(
            q, k, v, encoding, q_positions, k_positions, allowed, causal, dropout, say=asked == "flex"
        )
        if out is not None:
            return out
    return chunked_bias_attention(
        q, k, v, encoding, q_positions=q_positions, k_positions=k_positions, allowed=allowed,
        causal=causal, dropout=dropout, chunk=chunk,
    )  # fmt: skip


def _try_flex(q, k, v, encoding, q_positions, k_positions, allowed, causal, dropout, *, say: bool):
    """FlexAttention's result, or None where it cannot run (said once when ``say``)."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    reason = _flex_refusal(q.device.type, q.shape[-1], v.shape[-1], needs_grad, allowed is not None, dropout)
    key = (type(encoding), _padded_length(q.shape[2]), _padded_length(k.shape[2]), causal, q.dtype,
           tuple(q.shape[:2]), q.shape[3], v.shape[3], q.device.type)  # fmt: skip
    if reason is None and not _flex_room(key):
        reason = "more distinct shapes than torch.compile's recompile limit"
    if reason is None and flex_available():
        try:
            return flex_bias_attention(
                q, k, v, encoding, q_positions=q_positions, k_positions=k_positions, causal=causal
            )
        except Exception as exc:  # compile failure etc.: the chunked path, said once
            reason = f"an error ({type(exc).__name__}: {str(exc)[:200]})"
            say = True
    if say:
        warn_once(f"flex:{reason}", f"posenc: FlexAttention path not used ({reason}); using chunked SDPA")
    return None
