"""Worked examples: what an encoding does at its first few positions, as tables of numbers.

``posenc show`` and the guided tour print these; nothing here prints. Sinusoidal gets
the steps of a widely shared tutorial's numeric example (divisors, angles, values, and
at ``d_model = 8`` its made-up "dog bites man" token embeddings plus the encodings) and
a wavelength table; every other encoding the output of its kind's hook, in float64.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from posenc.analysis.signals import make
from posenc.core.checks import check_int
from posenc.encoding.base import (
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    PositionalEncoding,
    RelativeEncoding,
    RotaryEncoding,
)

Table = tuple[str, list[str], list[list[str]]]  # (title, column labels, rows of cell text)


def cell(value: float) -> str:
    """3 decimals, without a distracting "-0.000"."""
    if not math.isfinite(value):
        return str(value)
    text = f"{value:.3f}"
    return "0.000" if text == "-0.000" else text


def jsonable(example: dict[str, Any]) -> dict[str, Any]:
    """:func:`worked_example`'s result with non-finite hook values (masked logits) as None."""
    if "divisors" in example:
        return example
    rows = [[v if math.isfinite(v) else None for v in row] for row in example["values"]]
    return {**example, "values": rows}


# Step 5 of the tutorial's example: made-up token embeddings (d_model = 8) for "dog bites man".
TUTORIAL_WORDS = ("dog", "bites", "man")
TUTORIAL_TOKENS = (
    (0.5, 0.3, 0.8, 0.1, 0.4, 0.6, 0.2, 0.9),  # "dog"
    (0.2, 0.7, 0.4, 0.9, 0.1, 0.3, 0.8, 0.5),  # "bites"
    (0.9, 0.1, 0.6, 0.3, 0.7, 0.5, 0.4, 0.2),  # "man"
)


def sinusoidal_steps(enc: PositionalEncoding, num_positions: int) -> dict[str, Any]:
    """The worked example: divisors ``base^(2i/d)``, angles ``pos / divisor``, ``PE`` (float64),
    wavelengths ``2 pi base^(2i/d)`` and, at ``d_model = 8``, step 5: ``tokens + PE`` through ``embed``.
    """
    dim, base = enc.config.dim, enc.config.base
    divisors = [base ** (2 * i / dim) for i in range(dim // 2)]  # base^(2i/d)
    positions = torch.arange(num_positions)[None]  # (1, n)
    angles = [[p / div for div in divisors] for p in range(num_positions)]
    additive = cast(AdditiveEncoding, enc)
    with torch.no_grad():
        zeros = torch.zeros(1, num_positions, dim, dtype=torch.float64)
        values = additive.embed(zeros, positions=positions)[0]  # (n, d) float64: PE itself, full precision
    out: dict[str, Any] = {
        "divisors": divisors,
        "angles": angles,
        "values": values.tolist(),
        "wavelengths": [2 * math.pi * div for div in divisors],  # positions per full turn of pair i
    }
    if dim == len(TUTORIAL_TOKENS[0]):
        words = min(num_positions, len(TUTORIAL_WORDS))
        tokens = torch.tensor(TUTORIAL_TOKENS[:words], dtype=torch.float64)[None]  # (1, w, 8)
        with torch.no_grad():
            sums = additive.embed(tokens, positions=torch.arange(words)[None])[0]  # (w, 8)
        out["step5"] = {
            "words": list(TUTORIAL_WORDS[:words]),
            "tokens": [list(row) for row in TUTORIAL_TOKENS[:words]],
            "sums": sums.tolist(),
        }
    return out


def wavelength_rows(divisors: list[float], *, limit: int = 8) -> list[int]:
    """Pair indices a wavelength table shows: all up to ``limit``, else the first and last few."""
    n = len(divisors)
    return list(range(n)) if n <= limit else [*range(limit // 2), *range(n - limit // 2, n)]


def hook_table(
    enc: PositionalEncoding, num_positions: int, dim: int, heads: int, *, rows: int | None = None
) -> tuple[str, list[str], list[list[float]]]:
    """(title, column labels, rows) for any encoding, chosen by kind only; float64 throughout.

    Random inputs are drawn for all ``num_positions`` positions; only the first ``rows``
    positions (default all) are computed, so a table that shows the first rows of 2,048
    positions costs what those rows cost, with the same numbers as the full table.
    """
    n = num_positions
    m = n if rows is None else min(rows, n)
    g = torch.Generator().manual_seed(0)
    f64 = torch.float64
    positions = torch.arange(m)[None]  # (1, m)
    enc = enc.double()
    with torch.no_grad():
        if enc.kind == "additive":
            try:
                cast(AdditiveEncoding, enc).encode(
                    positions
                )  # content-free encodings define encode(); others raise
                x = torch.zeros(1, m, dim, dtype=f64)
                title = "PE(pos): the vector added at each position"
            except NotImplementedError:
                x = torch.randn(1, n, dim, generator=g, dtype=f64)[:, :m]  # content-dependent: fixed tokens
                title = "embed(x) for x ~ N(0, 1) (seed 0): this encoding depends on content"
            pe = cast(AdditiveEncoding, enc).embed(x, positions=positions)[0]  # (m, d)
            return title, [f"d{k}" for k in range(pe.shape[-1])], pe.tolist()
        if enc.kind == "bias":
            b = cast(BiasEncoding, enc).bias(m, n)[0, 0]  # (i, j) for head 0
            title = "bias(q_pos=i, k_pos=j) for head 0"
            if getattr(enc.config, "bidirectional", True) is False:  # a causal variant: j > i never attended
                title += "; j > i: keys causal attention masks (shown as the formula gives them)"
            return title, [f"j={j}" for j in range(n)], b.double().tolist()
        if enc.kind == "rotary":
            rotated_heads = int(getattr(enc.config, "num_heads", 1) or 1)  # RoPE-Mixed rotates per head
            e = (
                torch.eye(dim, dtype=f64)[:, None, None, :].expand(dim, rotated_heads, m, dim).contiguous()
            )  # (d, h, m, d); head 0 is shown
            q, _ = cast(RotaryEncoding, enc).rotate(e, e, q_positions=positions, k_positions=positions)
            diag = torch.diagonal(q[:, 0], dim1=0, dim2=2)  # (m, d): component a of rotate(e_a)
            cos = diag / q[:, 0].norm(dim=-1).T  # (m, d) cos of the angle dimension a turns by
            title = "cos(angle) by which rotate() turns basis vector e_d at each position"
            return title, [f"d{k}" for k in range(dim)], cos.tolist()
        if enc.kind in ("relative", "contextual"):
            q = torch.randn(1, heads, n, dim, generator=g, dtype=f64)[:, :, :m]  # (1, h, i, d)
            k = torch.randn(1, heads, n, dim, generator=g, dtype=f64)  # (1, h, j, d)
            if enc.kind == "relative":
                s = cast(RelativeEncoding, enc).scores(
                    q, k, q_positions=positions, k_positions=torch.arange(n)[None]
                )[0, 0]
                title = "scores(q, k): the relative term added to q.k, head 0, q, k ~ N(0, 1) (seed 0)"
            else:
                k = k[:, :, :m]  # causal: rows i < m see keys j <= i < m only
                logits = (q @ k.transpose(-1, -2)) / dim**0.5
                logits = logits.masked_fill(~torch.ones(m, m, dtype=torch.bool).tril(), float("-inf"))
                s = cast(ContextualEncoding, enc).scores(q, k, logits)[0, 0]
                s = torch.cat([s, torch.full((m, n - m), float("-inf"), dtype=f64)], dim=1)  # masked keys
                title = "scores(q, k, causal logits), head 0, q, k ~ N(0, 1) (seed 0)"
            return title, [f"j={j}" for j in range(n)], s.tolist()
    return "no positional term", [], []


def worked_example(
    name: str, *, num_positions: int = 4, dim: int = 8, heads: int = 8, max_rows: int | None = None
) -> dict[str, Any]:
    """What encoding ``name`` does at positions ``0 .. num_positions - 1``, JSON-ready.

    Built at ``d_model = head_dim = dim`` with ``heads`` heads, parameters from seed 0
    (the global RNG is left alone). ``sinusoidal`` gets ``divisors``, ``angles`` and
    ``values`` (the textbook's steps); every other encoding ``title``, ``columns`` and
    ``values`` of its kind's hook (see :func:`jsonable` for JSON). ``max_rows`` computes
    only the first rows (what a terminal shows; ``positions`` lists them), with the
    numbers the full example has there; ``num_positions`` is always the full count.
    """
    num_positions = check_int("num_positions", num_positions, minimum=1)
    dim = check_int("dim", dim, minimum=1)
    heads = check_int("heads", heads, minimum=1)
    shown = (
        num_positions if max_rows is None else min(num_positions, check_int("max_rows", max_rows, minimum=1))
    )
    enc = make(name, d_model=dim, num_heads=heads, head_dim=dim, seed=0)
    out: dict[str, Any] = {"name": name, "kind": enc.kind, "config": enc.config.to_dict()}
    if max_rows is not None:
        out["num_positions"] = num_positions
    if name == "sinusoidal":
        out["positions"] = list(range(shown))
        out.update(sinusoidal_steps(enc, shown))
        return out
    title, columns, rows = hook_table(enc, num_positions, dim, heads, rows=shown)
    out["title"] = title
    out.update({"positions": list(range(shown)), "columns": columns, "values": rows})
    return out


def text_tables(example: dict[str, Any]) -> list[Table]:
    """The tables a terminal shows for :func:`worked_example`'s result (3 decimals)."""
    if "divisors" in example:
        divisors, dim = example["divisors"], example["config"]["dim"]
        columns = ["pos"] + [f"{'sin' if k % 2 == 0 else 'cos'}(θ{k // 2})" for k in range(dim)]
        return [
            (
                "Step 1: frequency divisors base^(2i/d)",
                ["i", "2i (sin)", "2i+1 (cos)", "divisor"],
                [[str(i), str(2 * i), str(2 * i + 1), f"{d:g}"] for i, d in enumerate(divisors)],
            ),
            (
                "Step 2: angles pos / divisor",
                ["pos"] + [f"dim {2 * i},{2 * i + 1} (/{d:g})" for i, d in enumerate(divisors)],
                [[str(p)] + [f"{a:g}" for a in row] for p, row in enumerate(example["angles"])],
            ),
            (
                "Steps 3-4: PE = sin at even dims, cos at odd dims (the final PE matrix)",
                columns,
                [[str(p)] + [cell(v) for v in row] for p, row in enumerate(example["values"])],
            ),
            *step5_tables(example),
            wavelength_table(example),
        ]
    if not example["values"]:
        return []
    columns = example["columns"]
    label = "i" if columns[0].startswith("j=") else "pos"  # (i, j) score/bias tables vs per-position vectors
    rows = [[str(p)] + [cell(v) for v in row] for p, row in enumerate(example["values"])]
    return [(example["title"], [label] + columns, rows)]


def step5_tables(example: dict[str, Any]) -> list[Table]:
    """Step 5 (d_model = 8 only): each made-up token embedding, then token + PE(pos), 3 decimals."""
    step = example.get("step5")
    if not step:
        return []
    rows = []
    for p, (word, token, total) in enumerate(zip(step["words"], step["tokens"], step["sums"])):
        rows.append([word, str(p), "token"] + [cell(v) for v in token])
        rows.append(["", "", f"+ PE({p})"] + [cell(v) for v in total])
    dims = [f"d{k}" for k in range(len(step["tokens"][0]))]
    title = 'Step 5: add made-up token embeddings for "dog bites man" (a widely shared tutorial\'s values)'
    return [(title, ["word", "pos", "row", *dims], rows)]


def wavelength_table(example: dict[str, Any]) -> Table:
    """Wavelength ``2 pi base^(2i/d)`` of each (sin, cos) pair: dims 0,1 fastest, the last pair slowest."""
    divisors, wavelengths = example["divisors"], example["wavelengths"]
    shown = wavelength_rows(divisors)
    rows = []
    for k, i in enumerate(shown):
        if k and i != shown[k - 1] + 1:
            rows.append(["...", "...", "...", "...", "..."])
        rows.append(
            [
                str(i),
                f"{2 * i},{2 * i + 1}",
                f"{divisors[i]:,.6g}",
                f"{1 / divisors[i]:.4g}",
                f"{wavelengths[i]:,.1f}",
            ]
        )
    base = example["config"]["base"]
    title = f"Wavelengths: 2*pi*{base:g}^(2i/d) positions per turn, fastest (dims 0,1) to slowest"
    return (title, ["i", "dims", "divisor", "radians per position", "wavelength (positions)"], rows)


__all__ = [
    "TUTORIAL_TOKENS",
    "TUTORIAL_WORDS",
    "cell",
    "hook_table",
    "jsonable",
    "sinusoidal_steps",
    "step5_tables",
    "text_tables",
    "wavelength_rows",
    "wavelength_table",
    "worked_example",
]
