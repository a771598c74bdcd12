"""Measure posenc's precision in float32, bfloat16 and float16; write docs/precision.md.

Registry-driven: every entry of ``posenc.ENCODINGS`` and, for RoPE, every scaling
of ``posenc.encoding.rotary.scaling.ROPE_SCALINGS``. Three measurements:

1. **Error against float64.** The module in ``dtype`` (``.to(dtype)``, inputs cast
   to ``dtype``) against the same module in float64 on the *same* (cast) inputs,
   so input rounding is excluded and parameter rounding (what a bf16 model really
   has) is included. Positions are a fixed sample up to 10^6 for fixed encodings
   and up to 65,536 for rotary ones (every RoPE scaling). The float64 modules are
   themselves tested against the NumPy references in ``posenc.reference`` at 1e-10.
   Reported: ``max |out - ref| / max |ref|`` in units of the dtype's unit roundoff
   ``u`` (float32 2^-24, bfloat16 2^-8, float16 2^-11) and as a number.
2. **Distinct positions in bfloat16.** A fixed bf16 query rotated at every position
   0..65,535 gives 65,536 different vectors (a bf16 position counter would
   collapse 8190 and 8191).
3. **Casting the model.** ``enc.to(torch.bfloat16)`` and ``enc.half()`` followed by
   ``.float()`` change only the parameters: outputs equal those of a copy whose
   parameters alone were rounded, bit for bit (cached angle/bias tables are kept
   in float64 and cannot be degraded).

Usage::

    python scripts/precision_table.py             # writes docs/precision.md
    python scripts/precision_table.py --stdout    # print instead

``tests/contract/test_precision.py`` imports this file and checks the bounds below on a
smaller sample.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

import posenc
from posenc.encoding.rotary import scaling as rope_scaling

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
D_MODEL, NUM_HEADS = 128, 2  # head_dim 64 for attention kinds
FIXED_LIMIT = 1_000_000  # positions for fixed (non-rotary) encodings
ROTARY_LIMIT = 65_536  # positions for RoPE, every scaling, xPos

# Documented bounds, in units of u(dtype), on max |out - ref| / max |ref|.
# Tables (additive, rotary, bias) are computed in float64 and rounded once, or
# rotated in float32 and rounded once: a few u. Content terms (relative,
# contextual) multiply q and k in the compute dtype: error grows like sqrt(d) u.
BOUNDS_IN_U = {"additive": 4.0, "rotary": 4.0, "bias": 4.0, "none": 0.0, "relative": 64.0, "contextual": 64.0}

# Encodings whose output is ill-conditioned in a *learned* input, so no dtype bound can
# hold at large positions: the method itself amplifies rounding (not an implementation bug).
ILL_CONDITIONED = {
    "complex_order": "phase w*pos with w = x W_w + b_w computed in the model dtype: a rounding of w "
    "by u|w| moves the phase by u|w|*pos (error grows with position, inherent to the method)",
}

# Example parameters for each scaling's keys (a new scaling with other keys needs an entry).
SCALING_EXAMPLE = {
    "factor": 16.0,
    "original_max_position_embeddings": 4096,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "short_factor": lambda pairs: [1.0 + 0.5 * i / pairs for i in range(pairs)],
    "long_factor": lambda pairs: [1.0 + 15.0 * i / pairs for i in range(pairs)],
}


def sample_positions(limit: int, count: int = 1200) -> torch.Tensor:
    """Sorted distinct positions in ``[0, limit)``: a dense start, geometric steps, the last two."""
    dense = torch.arange(min(limit, max(16, count // 4)))
    low, steps = max(int(dense[-1]) + 1, 2), max(count - dense.numel() - 2, 0)
    spread = torch.logspace(math.log10(low), math.log10(max(limit - 1, low)), steps, dtype=torch.float64)
    tail = torch.tensor([limit - 2, limit - 1])
    return torch.unique(torch.cat((dense, spread.long(), tail)).clamp(0, limit - 1))


def variants() -> list[tuple[str, str, dict]]:
    """(label, registry name, config overrides): every encoding, plus RoPE x every scaling."""
    out = [(name, name, {}) for name in posenc.ENCODINGS]
    pairs = (D_MODEL // NUM_HEADS) // 2
    for scaling in rope_scaling.ROPE_SCALINGS:
        if scaling == "default":
            continue
        required, _ = rope_scaling.ROPE_SCALING_KEYS[scaling]
        params = {k: SCALING_EXAMPLE[k] for k in required}
        params = {k: (v(pairs) if callable(v) else v) for k, v in params.items()}
        out.append((f"rope+{scaling}", "rope", {"scaling": {"rope_type": scaling, **params}}))
    return out


def build(name: str, overrides: dict) -> posenc.PositionalEncoding:
    torch.manual_seed(0)
    return posenc.build_for_model(name, d_model=D_MODEL, num_heads=NUM_HEADS, **overrides)


def _limit(enc) -> int:
    limit = ROTARY_LIMIT if enc.kind == "rotary" else FIXED_LIMIT
    return min(limit, getattr(enc.config, "max_len", limit))  # learned tables have max_len rows


def _run(enc, dtype: torch.dtype, positions: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """The kind's hook in ``dtype`` on inputs drawn in float64 and cast to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    n = positions.shape[-1]
    if enc.kind == "additive":
        try:
            enc.encode(positions[:, :1])
            x = torch.zeros(1, n, D_MODEL, dtype=dtype)  # content-free: measure PE itself
        except NotImplementedError:
            x = torch.randn(1, n, D_MODEL, generator=g, dtype=torch.float64).to(dtype)
        return enc.embed(x, positions=positions)
    if enc.kind == "bias":
        qp, kp = positions[:, None, :, None], positions[:, None, None, :]
        head = torch.arange(enc.num_heads)[None, :, None, None]
        return enc.bias_fn(qp, kp, head).to(dtype)  # what attention adds to dtype scores
    if enc.kind == "none":
        return torch.zeros(1, dtype=dtype)
    q, k = _draw_qk(enc, n, g, dtype)
    return _attention_hook(enc, q, k, positions)


def _draw_qk(enc, n: int, g: torch.Generator, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k ``(1, h, n, head_dim)`` drawn in float64 and rounded to ``dtype``."""
    shape = (1, NUM_HEADS, n, enc.config.head_dim)
    q = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return q, k


def _attention_hook(enc, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The rotary / relative / contextual hook on q, k (causal logits for contextual)."""
    if enc.kind == "rotary":
        return torch.cat(enc.rotate(q, k, q_positions=positions, k_positions=positions), dim=-1)
    if enc.kind == "relative":
        return enc.scores(q, k, q_positions=positions, k_positions=positions)
    n = q.shape[2]
    logits = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    logits = logits.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return enc.scores(q, k, logits)


def max_error(name: str, overrides: dict, dtype: torch.dtype, *, count: int = 1200) -> dict:
    """``{"error", "in_u", "limit", "note"}`` for one encoding in one dtype (see module docstring)."""
    probe = build(name, overrides)
    limit, note = _limit(probe), ""
    if probe.kind in ("bias", "relative", "contextual"):
        count = min(count, 300)  # (i, j) matrices
    while True:
        positions = sample_positions(limit, count)[None]
        try:
            with torch.no_grad():
                out = _run(build(name, overrides).to(dtype), dtype, positions).double()
                ref = _run_reference(name, overrides, dtype, positions)
        except ValueError as exc:  # e.g. xPos overflows, integer_index past 65504 in float16
            if limit <= 1024:
                return {"error": math.nan, "in_u": math.nan, "limit": 0, "note": str(exc)[:80]}
            note = f"raises past {limit // 2:,} ({type(exc).__name__})"
            limit //= 2
            continue
        # values past the dtype's largest number (a 2-D ALiBi bias at distance 10^6 in float16):
        # a range limit, not a rounding error; measured where the values fit, as for ValueError
        beyond = torch.isfinite(ref) & (ref.abs() > torch.finfo(dtype).max)
        if bool(beyond.any()) and limit > 1024:
            note = f"exceeds the {str(dtype).split('.')[-1]} range past {limit // 2:,}"
            limit //= 2
            continue
        break
    finite = torch.isfinite(ref)
    scale = ref[finite].abs().max().item() if finite.any() else 1.0
    both = finite & torch.isfinite(out)
    mismatch = bool((torch.isfinite(out) != finite).any())
    err = (out[both] - ref[both]).abs().max().item() / max(scale, 1e-300) if both.any() else 0.0
    if mismatch:
        err, note = math.inf, "non-finite where float64 is finite"
    return {"error": err, "in_u": err / UNIT_ROUNDOFF[dtype], "limit": limit, "note": note}


def _run_reference(name: str, overrides: dict, dtype: torch.dtype, positions: torch.Tensor) -> torch.Tensor:
    """The float64 module on the inputs of the ``dtype`` run (cast up), with the dtype's parameters.

    Parameters are rounded to ``dtype`` and back, so the reference isolates the
    arithmetic: it is what an exact computation with the bf16 model would give.
    """
    enc = build(name, overrides)
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(p.to(dtype).to(p.dtype))
    enc = enc.double()
    g = torch.Generator().manual_seed(0)
    n = positions.shape[-1]
    if enc.kind in ("rotary", "relative", "contextual"):
        q, k = _draw_qk(enc, n, g, dtype)
        return _attention_hook(enc, q.double(), k.double(), positions)
    if enc.kind == "additive":
        try:
            enc.encode(positions[:, :1])
            x = torch.zeros(1, n, D_MODEL, dtype=torch.float64)
        except NotImplementedError:
            x = torch.randn(1, n, D_MODEL, generator=g, dtype=torch.float64).to(dtype).double()
        return enc.embed(x, positions=positions)
    return _run(enc, torch.float64, positions)


def distinct_rotations(
    overrides: dict | None = None, *, dtype=torch.bfloat16, limit: int = ROTARY_LIMIT
) -> int:
    """How many different bf16 vectors one fixed bf16 query becomes at positions 0..limit-1."""
    enc = build("rope", overrides or {}).to(dtype)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, enc.config.head_dim, generator=g, dtype=torch.float64).to(dtype)
    q = q.expand(1, 1, limit, -1)
    with torch.no_grad():
        rotated, _ = enc.rotate(
            q, q, q_positions=torch.arange(limit)[None], k_positions=torch.arange(limit)[None]
        )
    rows = rotated[0, 0].view(torch.int16)  # (limit, d): bit patterns
    return int(torch.unique(rows, dim=0).shape[0])


def naive_distinct_positions(dtype=torch.bfloat16, limit: int = ROTARY_LIMIT) -> int:
    """The failure mode measured above: a position counter held in ``dtype`` (for contrast)."""
    return int(torch.unique(torch.arange(limit, dtype=torch.float64).to(dtype)).numel())


def cast_keeps_tables(name: str, overrides: dict, cast: str) -> bool:
    """True if ``enc.<cast>()`` then ``.float()`` equals rounding only the parameters, bit for bit."""
    dtype = {"bfloat16": torch.bfloat16, "half": torch.float16}[cast]
    a = build(name, overrides)
    positions = sample_positions(min(8192, _limit(a)), 64)[None]
    with torch.no_grad():
        _run(a, torch.float32, positions)  # fill the caches first, as a trained model would have
        a = (a.to(torch.bfloat16) if cast == "bfloat16" else a.half()).float()
        b = build(name, overrides)
        for p in b.parameters():
            p.copy_(p.to(dtype).float())
        out_a, out_b = _run(a, torch.float32, positions), _run(b, torch.float32, positions)
    return bool(torch.equal(out_a, out_b))


def bound_text(name: str, kind: str) -> str:
    return "none (ill-conditioned, see below)" if name in ILL_CONDITIONED else f"{BOUNDS_IN_U[kind]:g} u"


def _fmt(result: dict) -> str:
    if math.isnan(result["error"]):
        return "raises"
    if math.isinf(result["error"]):
        return "**inf**"
    return f"{result['error']:.2e} ({result['in_u']:.2f} u)"


def table(count: int = 1200) -> str:
    """The markdown of docs/precision.md."""
    start = time.perf_counter()
    lines = [
        "# Precision of every encoding in float32, bfloat16 and float16",
        "",
        "Generated by `python scripts/precision_table.py` (do not edit by hand); bounds are",
        "checked by `tests/contract/test_precision.py`. Method: see the script's docstring. In short,",
        "the module cast to the dtype against the same module in float64 on the same rounded",
        "inputs (parameters rounded to the dtype in both), error = `max |out - ref| / max |ref|`,",
        "also in units of the dtype's unit roundoff u (float32 2^-24, bfloat16 2^-8, float16 2^-11).",
        f"Positions: a fixed sample of {count} up to 10^6 for fixed encodings (learned: max_len),",
        "up to 65,536 for rotary ones; bias/relative/contextual use 300 x 300 (i, j) pairs.",
        "",
        "| encoding | kind | positions up to | float32 | bfloat16 | float16 | bound | `.to(bf16)` / `.half()` keep tables | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, name, overrides in variants():
        kind = posenc.ENCODINGS[name].kind
        results = {dtype: max_error(name, overrides, dtype, count=count) for dtype in DTYPES}
        limits = sorted({r["limit"] for r in results.values()})
        casts = all(cast_keeps_tables(name, overrides, c) for c in ("bfloat16", "half"))
        notes = "; ".join(f"{str(d)[6:]}: {r['note']}" for d, r in results.items() if r["note"])
        lines.append(
            f"| `{label}` | {kind} | {' / '.join(f'{x:,}' for x in limits)} | "
            + " | ".join(_fmt(results[d]) for d in DTYPES)
            + f" | {bound_text(name, kind)} | {'yes' if casts else '**NO**'} | {notes} |"
        )
    lines += ["", "Exceptions (no bound):", ""]
    lines += [f"- `{name}`: {why}." for name, why in ILL_CONDITIONED.items()]
    lines += [
        "- Rows marked *raises past N*: the encoding refuses positions whose values overflow the",
        "  dtype (xPos's scale, integer_index's raw position) with a ValueError instead of",
        "  returning inf; the error is measured up to the largest limit accepted when halving",
        "  from the target (10^6 or 65,536).",
    ]
    lines += [
        "",
        "## Distinct positions in bfloat16 (RoPE)",
        "",
        "One fixed bfloat16 query (head_dim 64) rotated at each position 0..65,535:",
        "how many different bfloat16 vectors come out (65,536 = every position distinct).",
        "",
        "| variant | distinct of 65,536 |",
        "|---|---|",
    ]
    for label, name, overrides in variants():
        if name == "rope":
            lines.append(f"| `{label}` | {distinct_rotations(overrides):,} |")
    lines += [
        f"| (contrast) positions counted in bfloat16 | {naive_distinct_positions():,} |",
        "",
        f"_Measured in {time.perf_counter() - start:.0f} s with torch {torch.__version__} on CPU._",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdout", action="store_true", help="print instead of writing docs/precision.md")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "precision.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    text = table()
    if args.stdout:
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
