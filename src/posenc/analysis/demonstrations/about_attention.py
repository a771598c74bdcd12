"""Demonstrations about attention: order, RoPE, T5, Shaw, Sandwich, ALiBi, relative kernels, the probe."""

from __future__ import annotations

import ast
import builtins
import math
from typing import Any, cast

import numpy as np
import torch

import posenc
from posenc.analysis import probes, properties
from posenc.analysis.demonstrations.demonstration import Demonstration, small
from posenc.analysis.signals import additive_vectors, make
from posenc.encoding.base import BiasEncoding, RelativeEncoding, RotaryEncoding
from posenc.nn.attention import MultiHeadAttention
from posenc.reference import bias as reference_bias
from posenc.reference.rotary import rope_inv_freq


def equivariance() -> Demonstration:
    """One bidirectional attention layer, no positions: "dog bites man" -> "man bites dog"."""
    d, heads = 16, 2
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, d, generator=g, dtype=torch.float64)  # "dog", "bites", "man"
    perm = torch.tensor([2, 1, 0])  # "man bites dog"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = MultiHeadAttention(d, heads, encoding=None, causal=False, path="plain").double().eval()
    with torch.no_grad():
        out, weights = cast(tuple[torch.Tensor, torch.Tensor], layer(x, return_weights=True))
        pout, pweights = cast(tuple[torch.Tensor, torch.Tensor], layer(x[:, perm], return_weights=True))
    equivariance_gap = float((pout - out[:, perm]).abs().max())  # |f(Px) - P f(x)|
    invariance_gap = float((pout - out).abs().max())  # |f(Px) - f(x)|
    weights_change = float((pweights - weights).abs().max())  # |A(Px) - A(x)|
    weights_permuted = float((pweights - weights[..., perm, :][..., perm]).abs().max())  # |A(Px) - P A Pᵀ|
    with_pe = probes.permutation_equivariance_gap("sinusoidal", inputs=x, permutation=perm.tolist())
    causal = probes.position_sensitivity("nope", causal=True).token_change
    bidirectional = probes.position_sensitivity("nope", causal=False).token_change
    numbers = {
        "equivariance_gap": equivariance_gap,
        "invariance_gap": invariance_gap,
        "weights_change": weights_change,
        "weights_permuted_gap": weights_permuted,
        "sinusoidal_gap": with_pe,
        "causal_change": causal,
        "bidirectional_change": bidirectional,
    }
    rows = (
        ("max |f(Px) - P f(x)|: outputs permute with the words (equivariant)", small(equivariance_gap)),
        ("max |f(Px) - f(x)|: outputs are not unchanged (not invariant)", small(invariance_gap)),
        ("max |A(Px) - P A(x) P^T|: attention weights permute too", small(weights_permuted)),
        ("max |A(Px) - A(x)|: so they are not identical", small(weights_change)),
        ("max |f(Px) - P f(x)| with sinusoidal positions added", small(with_pe)),
        ("word-aligned output change, untrained model, no positions, bidirectional", small(bidirectional)),
        ("the same, causal mask (the mask alone breaks the symmetry)", small(causal)),
    )
    facts = {
        "equivariant": equivariance_gap < 1e-12,
        "invariant": invariance_gap < 1e-12,
        "words_same_vectors": equivariance_gap < 1e-12,
        "weights_identical": weights_change < 1e-12,
        "weights_permuted": weights_permuted < 1e-12,
        "pe_breaks_symmetry": with_pe > 1e-3,
        "causal_sees_order": causal > 1e-3 and bidirectional < 1e-12,
    }
    title = "Attention without positions, dog bites man -> man bites dog (one bidirectional layer, float64)"
    return Demonstration("equivariance", title, rows, facts, numbers)


def _score(rope: RotaryEncoding, q: torch.Tensor, k: torch.Tensor, qp: int, kp: int) -> float:
    """``(R_qp q)^T (R_kp k)`` through posenc's ``rotate``."""
    qr, kr = rope.rotate(q, k, q_positions=torch.tensor([[qp]]), k_positions=torch.tensor([[kp]]))
    return float((qr * kr).sum())


def rope_sign() -> Demonstration:
    """``(R_m q)^T (R_n k)`` equals ``q^T R_{n-m} k`` (RoFormer eq. 16), not ``q^T R_{m-n} k``."""
    d, m, n = 8, 2, 7
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    found: dict[str, tuple[float, float, float, float]] = {}
    for layout in ("half", "interleaved"):
        rope = cast(RotaryEncoding, posenc.build("rope", head_dim=d, layout=layout))
        found[layout] = (
            _score(rope, q, k, m, n),  # (R_m q)^T (R_n k)
            _score(rope, q, k, 0, n - m),  # q^T R_{n-m} k
            _score(rope, q, k, n - m, 0),  # q^T R_{m-n} k = (R_{n-m} q)^T k
            _score(rope, q, k, m + 100, n + 100),  # both positions shifted
        )
    score, correct, claimed, _ = found["half"]
    rope = cast(RotaryEncoding, posenc.build("rope", head_dim=d))
    qr, _ = rope.rotate(q, k, q_positions=torch.tensor([[m]]), k_positions=torch.tensor([[n]]))
    norm_change = abs(float(qr.norm() - q.norm()))
    numbers = {
        "score": score,
        "correct": correct,
        "claimed": claimed,
        "norm_change": norm_change,
        "correct_error": max(max(abs(s - c), abs(s - t)) for s, c, _, t in found.values()),
        "claimed_error": min(abs(s - w) for s, _, w, _ in found.values()),
    }
    rows = (
        (f"(R_m q)^T (R_n k), m = {m}, n = {n}, head_dim {d}", f"{score:.6f}"),
        ("q^T R_{n-m} k", f"{correct:.6f}"),
        ("q^T R_{m-n} k (the video script's form)", f"{claimed:.6f}"),
        ("max error of R_{n-m}, and of shifting m, n by 100 (both layouts)", small(numbers["correct_error"])),
        ("|R_m q| - |q|: a rotation keeps the length", small(norm_change)),
    )
    facts = {
        "video_sign": numbers["claimed_error"] < 1e-12,
        "relative_only": numbers["correct_error"] < 1e-12,
        "is_rotation": norm_change < 1e-12,
    }
    return Demonstration("rope_sign", "RoPE: which relative rotation the score sees", rows, facts, numbers)


def rope_formula() -> Demonstration:
    """``x cos(pos theta) + rotate(x) sin(pos theta)`` (rotate_half) is posenc's RoPE; it acts on q and k."""
    d, n = 8, 6
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    theta = torch.from_numpy(rope_inv_freq(d))  # (d/2,)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * torch.cat([theta, theta])  # (n, d), half layout
    rotated_half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    formula = x * torch.cos(angle) + rotated_half * torch.sin(angle)
    rope = posenc.build("rope", head_dim=d)
    ours, _ = cast(RotaryEncoding, rope).rotate(x, x)
    err = float((formula - ours).abs().max())
    rows = (
        ("max |x cos + rotate_half(x) sin - posenc rotate(x)|, 6 positions", small(err)),
        (
            "where RoPE acts (kind)",
            f"{rope.kind}: rotate(q, k) in every attention layer; token embeddings untouched",
        ),
    )
    facts = {"formula": err < 1e-12, "rotates_token_embeddings": rope.kind == "additive"}
    return Demonstration("rope_formula", "The notes' RoPE formula", rows, facts, {"error": err})


def t5_snippet() -> Demonstration:
    """The interview answer's "simplified T5" snippet: names it never defines, and the sign of i - j."""
    tree = ast.parse(INTERVIEW_T5_SNIPPET)
    bound = {"torch", "math"}  # imported by the answer's earlier snippet
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            bound.add(node.name)
            bound.update(a.arg for a in node.args.args)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    undefined = sorted(loaded - bound - set(dir(builtins)))
    scope: dict[str, Any] = {"torch": torch, "math": math}
    try:
        exec(compile(INTERVIEW_T5_SNIPPET, "interview-t5", "exec"), scope)  # noqa: S102 - defines a function
        scope["get_relative_position_bias"](6)
        error = "ran"
    except NameError as exc:
        error = f"NameError: {exc}"
    i, keys = 10, np.arange(11)  # one query at position 10, keys 0..10 (causal)
    t5_buckets = reference_bias.t5_relative_position_bucket(keys - i, bidirectional=False)  # j - i, as T5
    snippet_buckets = reference_bias.t5_relative_position_bucket(i - keys, bidirectional=False)  # i - j
    enc = cast(BiasEncoding, make("t5", d_model=64, num_heads=4, bidirectional=True))
    with torch.no_grad():
        b = enc.bias(8, 8)[0, 0].double()  # (i, j), T5's j - i
    table = cast(torch.Tensor, enc.table).detach().double().numpy()  # (buckets, h)
    ij = np.arange(8)[:, None] - np.arange(8)[None, :]  # the snippet's i - j
    snippet_bias = table[reference_bias.t5_relative_position_bucket(ij, True), 0]
    flipped_err = float(np.abs(snippet_bias - b.numpy().T).max())
    numbers = {
        "undefined": len(undefined),
        "t5_distinct": len(set(t5_buckets.tolist())),
        "snippet_distinct": len(set(snippet_buckets.tolist())),
        "transpose_error": flipped_err,
    }
    rows = (
        ("names used but never defined or imported", ", ".join(undefined)),
        ("running it", error),
        ("causal buckets of keys 0..10 for query 10, T5's j - i", " ".join(str(v) for v in t5_buckets)),
        ("the same with the snippet's i - j", " ".join(str(v) for v in snippet_buckets)),
        ("bidirectional: max |bias with i - j - (T5's bias)^T|", small(flipped_err)),
    )
    facts = {"runs": error == "ran", "sign_matches_t5": numbers["snippet_distinct"] == numbers["t5_distinct"]}
    return Demonstration("t5_snippet", "The interview answer's T5 snippet", rows, facts, numbers)


# The snippet as the interview answer prints it ("Simplified T5 relative position bias").
INTERVIEW_T5_SNIPPET = """
def get_relative_position_bias(seq_len, num_buckets=32):
    relative_positions = torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]
    relative_buckets = relative_position_to_bucket(relative_positions, num_buckets)
    bias = nn.Embedding(num_buckets, num_heads)
    return bias(relative_buckets)
"""


def shaw_not_bias() -> Demonstration:
    """Shaw et al. add learned relative *vectors* to keys: the score term depends on the query."""
    d, n = 8, 5
    enc = cast(RelativeEncoding, make("shaw", d_model=16, num_heads=2, head_dim=d))
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(0, 1, generator=torch.Generator().manual_seed(3))  # as if trained
    g = torch.Generator().manual_seed(0)
    q1, q2, k = (torch.randn(1, 2, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    enc = enc.double()
    with torch.no_grad():
        change = float((enc.scores(q1, k) - enc.scores(q2, k)).abs().max())
    rows = (
        ("kind", enc.kind),
        ("max |term(q1, k) - term(q2, k)|: the relative term changes with the query", small(change)),
    )
    return Demonstration(
        "shaw_not_bias",
        "Shaw et al. 2018: relative vectors, not a bias",
        rows,
        {"is_bias": change < 1e-12},
        {"change": change},
    )


def sandwich() -> Demonstration:
    """Sandwich is an attention bias built from sinusoid inner products, not PE added at more layers."""
    heads, n, dp = 4, 12, 128
    enc = cast(BiasEncoding, posenc.build("sandwich", num_heads=heads, embed_dim=dp))
    with torch.no_grad():
        bias = enc.bias(n, n)[0].double().numpy()  # (h, i, j)
    rel = np.arange(n)[:, None] - np.arange(n)[None, :]
    inner = np.cos(rel[..., None] / 10000.0 ** (2 * np.arange(1, dp // 2 + 1) / dp)).sum(-1) - dp / 2
    want = np.stack([inner * heads / (8 * h) for h in range(1, heads + 1)])
    err = float(np.abs(bias - want).max() / np.abs(want).max())  # dense biases are float32
    rows = (
        ("kind", enc.kind),
        ("max |bias - H/(8h) (p_i . p_j - d'/2)| / max |bias|, sinusoids of size 128", small(err)),
    )
    facts = {"adds_pe_at_layers": enc.kind == "additive", "sinusoid_inner_product": err < 1e-6}
    return Demonstration("sandwich", "Sandwich (Chi et al. 2023)", rows, facts, {"error": err})


def alibi_formula() -> Demonstration:
    """posenc's bidirectional ALiBi bias is ``-m_h |i - j|`` with slopes ``2^(-8h/H)``."""
    heads, n = 8, 10
    enc = cast(BiasEncoding, posenc.build("alibi", num_heads=heads, bidirectional=True))
    with torch.no_grad():
        bias = enc.bias(n, n)[0].double().numpy()
    slopes = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    want = -slopes[:, None, None] * np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    err = float(np.abs(bias - want).max())
    rows = (("max |bias + m_h |i - j||, 8 heads, slopes 2^(-8h/H)", small(err)), ("kind", enc.kind))
    return Demonstration("alibi_formula", "ALiBi's bias", rows, {"formula": err < 1e-12}, {"error": err})


def translation() -> Demonstration:
    """Relative encodings score ``(i, j)`` the same after any shift; absolute vectors differ by position."""
    worst = {}
    for name in ("rope", "alibi", "t5"):
        worst[name] = properties.translation_residual(make(name, d_model=64, num_heads=4), 16, (1, 100)).worst
    pe = additive_vectors(posenc.build("sinusoidal", dim=64), [0, 100])
    distance = float(np.linalg.norm(pe[0] - pe[1]))
    rows = (
        *(
            (f"{name}: max |K(m, n) - K(m+t, n+t)| / max |K|, t = 1, 100", small(v))
            for name, v in worst.items()
        ),
        ("sinusoidal: ||PE(0) - PE(100)||", f"{distance:.3f}"),
    )
    facts = {"relative_shift_invariant": max(worst.values()) < 1e-12, "absolute_differs": distance > 0.1}
    numbers = {**{f"{k}_residual": v for k, v in worst.items()}, "distance": distance}
    return Demonstration("translation", "Absolute vs relative: what a shift changes", rows, facts, numbers)


def probe() -> Demonstration:
    """The interview answer's probing task ("The quick brown fox jumps" vs a permutation), on untrained models."""
    changes = {
        name: probes.position_sensitivity(name).token_change for name in ("nope", "sinusoidal", "rope")
    }
    rows = tuple(
        (f"{name}: word-aligned output change, bidirectional", small(v)) for name, v in changes.items()
    )
    facts = {
        "probe_separates": changes["nope"] < 1e-12 and min(changes["sinusoidal"], changes["rope"]) > 1e-6
    }
    return Demonstration(
        "probe", "Position-sensitivity probe", rows, facts, {f"{k}_change": v for k, v in changes.items()}
    )


def citations() -> Demonstration:
    """The papers the notes cite are the papers posenc's registry cites."""
    want = {"sinusoidal": "1706.03762", "shaw": "1803.02155", "rope": "2104.09864", "alibi": "2108.12409"}
    found = {name: arxiv in posenc.get_encoding_class(name).paper for name, arxiv in want.items()}
    rows = tuple((name, f"arXiv {want[name]}: {'cited' if ok else 'missing'}") for name, ok in found.items())
    return Demonstration(
        "citations",
        "The notes' references in the registry",
        rows,
        {"registry_cites": all(found.values())},
        {},
    )
