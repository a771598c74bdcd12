"""Sweep posenc's FlexAttention path over many lengths in ONE fresh process; print JSON.

Run by tests/unit/kernels/test_bias_attention.py in subprocesses, each with a fresh inductor cache (and, to reach
the vector code that misbehaves, optionally ``ATEN_CPU_CAPABILITY=avx2``). Not a test module.

Every buffer the compiled kernel reads (the padded q, k, v posenc builds) is placed at the
start of a larger allocation whose tail is NaN, so a kernel that reads past the end of a
buffer produces NaN *deterministically* instead of whatever memory happens to follow it.
``--no-pad`` turns posenc's padding off to show the sweep catches the raw kernel's bug.

Usage: python tests/flex_sweep.py [--no-pad] [--lengths 1-130,200,...] [--encodings alibi,t5 | bias] [--modes cross]
       [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch._dynamo
import torch.nn.functional as F

import posenc
from posenc.kernels import bias_attention as flex_module

NAN_TAIL = 4096  # elements of NaN after every padded buffer


def nan_tailed_pad(x: torch.Tensor, rows: int) -> torch.Tensor:
    shape = (*x.shape[:-2], rows, x.shape[-1])
    size = 1
    for s in shape:
        size *= s
    storage = torch.full((size + NAN_TAIL,), float("nan"), dtype=x.dtype, device=x.device)
    out = storage[:size].view(shape)
    out.zero_()
    out[..., : x.shape[-2], :] = x
    return out


def dense_reference(q, k, v, enc, causal):
    """SDPA in float64 with the encoding's dense bias (positions arange, keys last-aligned)."""
    i, j = q.shape[2], k.shape[2]
    bias = enc.bias(i, j, device=q.device).double()
    if causal:
        future = torch.ones(i, j, dtype=torch.bool, device=q.device).triu(j - i + 1)
        bias = bias.masked_fill(future, float("-inf"))
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias)


def parse_lengths(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="1-130,200,255,256,257,300")
    parser.add_argument(
        "--encodings", default="alibi", help="comma-separated names, or bias: every bias encoding"
    )
    parser.add_argument("--no-pad", action="store_true")
    parser.add_argument("--device", default="cpu")
    # which (queries, causal) cases per length: self-causal (i = j), self (i = j, no mask),
    # suffix-causal (i = j - 3), cross (i = j + 5, no mask)
    parser.add_argument("--modes", default="self-causal,self,suffix-causal,cross")
    args = parser.parse_args()
    torch._dynamo.config.recompile_limit = 10_000  # every shape compiled, never the eager fallback
    flex_module._pad_rows = nan_tailed_pad
    if args.no_pad:
        flex_module._padded_length = lambda n: n
    compiled_calls = []
    flex = flex_module.flex_bias_attention

    def counted(*a, **kw):  # the sweep must run the flex path itself, never the chunked fallback
        out = flex(*a, **kw)
        compiled_calls.append(1)  # counted once it returned (a compile that raises falls back to chunked)
        return out

    flex_module.flex_bias_attention = counted
    failures = []
    cases = 0
    head_dim = 8 if args.device == "cpu" else 16  # CUDA's FlexAttention takes head_dim 16 or more
    names = args.encodings.split(",")
    if args.encodings == "bias":  # every registered encoding of the bias kind
        names = [name for name, cls in posenc.ENCODINGS.items() if cls.kind == "bias"]
    for name in names:
        enc = posenc.build_for_model(name, d_model=16, num_heads=2).to(args.device)
        for j in parse_lengths(args.lengths):
            # (queries, causal): self-attention both ways, a KV-cache-like suffix of queries
            # (causal, i < j), and more queries than keys without a mask (cross-attention).
            modes = {"self-causal": (j, True), "self": (j, False), "suffix-causal": (max(1, j - 3), True),
                     "cross": (j + 5, False)}  # fmt: skip
            for i, causal in (modes[m] for m in args.modes.split(",")):
                g = torch.Generator().manual_seed(1000 * i + j)
                q, k, v = (torch.randn(1, 2, n, head_dim, generator=g).to(args.device) for n in (i, j, j))
                with torch.no_grad():
                    out = flex_module.bias_attention(q, k, v, enc, causal=causal, path="flex")
                ref = dense_reference(q, k, v, enc, causal)
                err = (out.double() - ref).abs()
                worst = float("nan") if torch.isnan(err).any() else float(err.max())
                cases += 1
                if not worst <= 1e-5:
                    failures.append(
                        {"encoding": name, "i": i, "j": j, "causal": causal, "max_abs_err": worst}
                    )
    summary = {"cases": cases, "flex_calls": len(compiled_calls), "failures": failures,
               "compiled_shapes": len(flex_module._FLEX_SHAPES)}  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
