"""The contenders of ``posenc bench``: zero-argument callables over tensors made once.

Axis legend: b batch, h heads, n / i / j sequence, d head_dim, D d_model, V vocab.

Each ``*_cases`` function returns ``{name: callable | "skipped: reason"}``; a peer that is not
installed (or fails to build) is reported as skipped, never dropped. Peers are imported
here only (benchmark-only extras, ``pip install posenc[peers]``):

- Hugging Face ``transformers.models.llama.modeling_llama.apply_rotary_pos_emb`` (cos/sin
  precomputed once, as its model does per forward);
- ``rotary_embedding_torch.RotaryEmbedding.rotate_queries_or_keys`` (its own cache);
- x-transformers ``apply_rotary_pos_emb`` (freqs precomputed), ``AlibiPositionalBias`` /
  ``RelativePositionBias`` + ``Attend``, ``TransformerWrapper(Decoder(...))``;
- torchtune ``RotaryPositionalEmbeddings`` (interleaved, ``(b, n, h, d)``).

The rooflines are a copy of the same bytes on the same tensors (``clone`` of q and k:
one read and one write, what a rotation must move at least) and, for attention,
unbiased causal SDPA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F

import posenc
from posenc.base import BiasEncoding, compute_dtype
from posenc.kernels.bias_attention import bias_attention
from posenc.kernels.rope import apply_rotary_fused
from posenc.model import Transformer, TransformerConfig
from posenc.rotary import RoPE, apply_rotary

Case = Callable[[], object] | str


def _skip(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return f"skipped: not installed ({getattr(exc, 'name', None) or exc})"
    return f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


def _inputs(shape, dtype, *, seed: int, grad: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad)


# ---------------------------------------------------------------------------
# RoPE application.
# ---------------------------------------------------------------------------


def rope_cases(b: int, h: int, n: int, d: int, dtype: torch.dtype, *, backward: bool) -> dict[str, Case]:
    """Rotate q and k ``(b, h, n, d)`` (forward, or forward + backward with fixed grads)."""
    q = _inputs((b, h, n, d), dtype, seed=1, grad=backward)
    k = _inputs((b, h, n, d), dtype, seed=2, grad=backward)
    gq, gk = (
        _inputs((b, h, n, d), dtype, seed=3, grad=False),
        _inputs((b, h, n, d), dtype, seed=4, grad=False),
    )

    def wrap(fn: Callable) -> Callable[[], object]:
        if not backward:
            return lambda: fn(q, k)

        def step():
            q.grad = k.grad = None
            qo, ko = fn(q, k)
            torch.autograd.backward((qo, ko), (gq, gk))

        return step

    cases: dict[str, Case] = {}
    if backward:  # a copy forward and a copy backward
        cases["roofline (copy)"] = lambda: (q.detach().clone(), k.detach().clone(), gq.clone(), gk.clone())
    else:
        cases["roofline (copy)"] = lambda: (q.clone(), k.clone())

    enc = cast(RoPE, posenc.build("rope", head_dim=d))
    cases["posenc rotate"] = wrap(lambda x, y: enc.rotate(x, y))
    wide = compute_dtype(dtype)
    cos, sin = enc.cos_sin(torch.arange(n)[None], wide)  # (1, n, d/2), as a model computes once
    cos, sin = cos[:, None], sin[:, None]  # (1, 1, n, d/2)

    def fused(x, y):
        return (apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=d),
                apply_rotary_fused(y, cos, sin, layout="half", rotary_dim=d))  # fmt: skip

    def plain(x, y):
        return tuple(
            apply_rotary(t.to(wide), cos, sin, layout="half", rotary_dim=d).to(dtype) for t in (x, y)
        )

    cases["posenc fused (tables given)"] = wrap(fused)
    cases["posenc plain (reference)"] = wrap(plain)

    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_apply

        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv  # (n, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)[None]  # (1, n, d), as LlamaRotaryEmbedding
        hf_cos, hf_sin = emb.cos().to(dtype), emb.sin().to(dtype)
        cases["hf transformers"] = wrap(lambda x, y: hf_apply(x, y, hf_cos, hf_sin))
    except Exception as exc:  # noqa: BLE001 - any import/build failure is a skip
        cases["hf transformers"] = _skip(exc)

    try:
        from rotary_embedding_torch import RotaryEmbedding

        ret = RotaryEmbedding(dim=d)
        cases["rotary-embedding-torch"] = wrap(
            lambda x, y: (ret.rotate_queries_or_keys(x), ret.rotate_queries_or_keys(y))
        )
    except Exception as exc:  # noqa: BLE001
        cases["rotary-embedding-torch"] = _skip(exc)

    try:
        from x_transformers.x_transformers import RotaryEmbedding as XRotary
        from x_transformers.x_transformers import apply_rotary_pos_emb as x_apply

        xfreqs, xscale = XRotary(d)(torch.arange(n))
        cases["x-transformers"] = wrap(lambda x, y: (x_apply(x, xfreqs, xscale), x_apply(y, xfreqs, xscale)))
    except Exception as exc:  # noqa: BLE001
        cases["x-transformers"] = _skip(exc)

    try:
        from torchtune.modules import RotaryPositionalEmbeddings

        tt = RotaryPositionalEmbeddings(dim=d, max_seq_len=n)
        cases["torchtune"] = wrap(
            lambda x, y: (tt(x.transpose(1, 2)).transpose(1, 2), tt(y.transpose(1, 2)).transpose(1, 2))
        )
    except Exception as exc:  # noqa: BLE001
        cases["torchtune"] = _skip(exc)
    return cases


# ---------------------------------------------------------------------------
# Attention with a bias encoding.
# ---------------------------------------------------------------------------

X_BIAS = {"alibi": "alibi", "t5": "t5"}  # encodings x-transformers has


def bias_cases(
    name: str, b: int, h: int, n: int, d: int, dtype: torch.dtype, *, flex: bool = False
) -> dict[str, Case]:
    """Causal self-attention forward over q, k, v ``(b, h, n, d)`` with bias encoding ``name``."""
    q, k, v = (_inputs((b, h, n, d), dtype, seed=s, grad=False) for s in (1, 2, 3))
    enc = posenc.build_for_model(name, d_model=h * d, num_heads=h)
    enc.requires_grad_(False)
    cases: dict[str, Case] = {
        "sdpa unbiased (floor)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    }

    def dense():
        bias = (
            cast(BiasEncoding, enc).bias(n, n, device=q.device).to(dtype)
        )  # (1, h, i, j), as the dense path
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(future, float("-inf")))

    cases["sdpa + dense bias"] = dense
    cases["posenc chunked"] = lambda: bias_attention(q, k, v, enc, causal=True)
    if flex:
        cases["posenc flex"] = lambda: bias_attention(q, k, v, enc, causal=True, path="flex")
    if name not in X_BIAS:
        cases["x-transformers"] = f"skipped: x-transformers has no {name!r} bias"
        return cases
    try:
        from x_transformers.attend import Attend
        from x_transformers.x_transformers import AlibiPositionalBias, RelativePositionBias

        if name == "alibi":
            rel = AlibiPositionalBias(heads=h, total_heads=h)
        else:
            rel = RelativePositionBias(scale=d**0.5, causal=True, heads=h)
        rel.requires_grad_(False)
        attend = Attend(causal=True, heads=h)

        def x_attention():
            out, _ = attend(q, k, v, attn_bias=rel(n, n))
            return out

        cases["x-transformers"] = x_attention
    except Exception as exc:  # noqa: BLE001
        cases["x-transformers"] = _skip(exc)
    return cases


# ---------------------------------------------------------------------------
# One training step of the tiny model.
# ---------------------------------------------------------------------------

X_DECODER = {
    "rope": {"rotary_pos_emb": True},
    "xpos": {"rotary_pos_emb": True, "rotary_xpos": True},
    "alibi": {"alibi_pos_bias": True},
    "t5": {"rel_pos_bias": True},
}
TINY = dict(vocab=256, d_model=128, heads=4, layers=2, ffn_mult=4)


def train_cases(name: str, b: int, n: int) -> dict[str, Case]:
    """AdamW step (forward, loss, backward, update) of a 2-layer decoder LM on ``(b, n)`` tokens."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, TINY["vocab"], (b, n + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def stepper(model: torch.nn.Module) -> Callable[[], object]:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            opt.zero_grad(set_to_none=True)
            logits = model(x)  # (b, n, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        return step

    cases: dict[str, Case] = {}
    try:
        config = TransformerConfig(
            vocab_size=TINY["vocab"], d_model=TINY["d_model"], num_heads=TINY["heads"],
            num_layers=TINY["layers"], ffn_dim=TINY["ffn_mult"] * TINY["d_model"], encoding=name,
        )  # fmt: skip
        cases["posenc"] = stepper(Transformer(config))
    except Exception as exc:  # noqa: BLE001
        cases["posenc"] = _skip(exc)
    if name not in X_DECODER:
        cases["x-transformers"] = f"skipped: no x-transformers equivalent of {name!r}"
        return cases
    try:
        from x_transformers import Decoder, TransformerWrapper

        model = TransformerWrapper(
            num_tokens=TINY["vocab"], max_seq_len=n, use_abs_pos_emb=False,
            attn_layers=Decoder(dim=TINY["d_model"], depth=TINY["layers"], heads=TINY["heads"],
                                ff_mult=TINY["ffn_mult"], **X_DECODER[name]),
        )  # fmt: skip
        cases["x-transformers"] = stepper(model)
    except Exception as exc:  # noqa: BLE001
        cases["x-transformers"] = _skip(exc)
    return cases
