"""Figures of encodings on a patch grid: how similar one patch's position is to every other.

Axis legend: h x w grid of patches, n = h w tokens in row-major order, d feature dim, a axes.

For a multi-axis encoding (:mod:`posenc.encoding.absolute.axial`, :mod:`posenc.encoding.rotary.rope_axial`) the patches
get their ``(row, column)`` coordinates (``t = 0`` for ``(t, h, w)`` encodings); a 1-D encoding
sees the grid flattened row by row (patch ``(r, c)`` at position ``r w + c``), the baseline a
sequence model offers. The similarity of patch ``p`` to the anchor ``a`` is the cosine of their
vectors: the added vectors of an additive encoding, the rotated keys of a rotary one (one fixed
unit vector rotated at every patch; the mean over heads when heads rotate differently). A
multi-axis bias encoding (2-D ALiBi) shows the bias from the anchor to every patch instead.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from posenc.analysis.signals import position_signal
from posenc.core.axes import flatten_grid, grid_positions, with_time
from posenc.core.checks import check_int
from posenc.encoding.base import AdditiveEncoding, BiasEncoding, PositionalEncoding, RotaryEncoding
from posenc.viz.figures import DIVERGING, SEQUENTIAL, _label, new_figure


def grid_vectors(enc: PositionalEncoding, sizes: tuple[int, int], *, seed: int = 0) -> np.ndarray:
    """The position vectors of every patch of an ``h x w`` grid: ``(heads, n, d)`` float64."""
    coords = grid_positions(sizes)  # (1, n, 2)
    if enc.position_axes == 1:
        flat = flatten_grid(coords, sizes)[0].numpy()
        return position_signal(enc, flat, seed=seed)[None]  # (1, n, d)
    if enc.position_axes == 3:
        coords = with_time(coords, 0)
    with torch.no_grad():
        if enc.kind == "additive":
            return cast(AdditiveEncoding, enc).encode(coords).to(torch.float64).numpy()  # (1, n, d)
        heads = int(getattr(enc.config, "num_heads", 1) or 1)
        d = int(enc.config.head_dim)
        g = torch.Generator().manual_seed(seed)
        u = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
        u = (u / u.norm()).expand(1, heads, coords.shape[1], d).contiguous()
        q, _ = cast(RotaryEncoding, enc.double()).rotate(u, u, q_positions=coords, k_positions=coords)
        enc.float()
    return q[0].numpy()  # (heads, n, d)


def similarity_map(enc: PositionalEncoding, sizes: tuple[int, int], anchor: tuple[int, int]) -> np.ndarray:
    """Cosine similarity of patch ``anchor``'s vector to every patch's: ``(h, w)`` (head mean)."""
    vectors = grid_vectors(enc, sizes)  # (heads, n, d)
    norm = np.linalg.norm(vectors, axis=-1, keepdims=True)
    unit = vectors / np.where(norm > 0, norm, 1.0)
    index = anchor[0] * sizes[1] + anchor[1]
    cosine = unit @ unit[:, index, :, None]  # (heads, n, 1)
    return cosine[..., 0].mean(axis=0).reshape(sizes)


def bias_map(enc: PositionalEncoding, sizes: tuple[int, int], anchor: tuple[int, int]) -> np.ndarray:
    """The bias a multi-axis bias encoding adds from patch ``anchor`` to every patch: ``(h, w)``
    (the mean over heads)."""
    coords = grid_positions(sizes)
    n = coords.shape[1]
    with torch.no_grad():
        bias = cast(BiasEncoding, enc).bias(n, n, q_positions=coords, k_positions=coords)  # (1, heads, n, n)
    index = anchor[0] * sizes[1] + anchor[1]
    return bias[0, :, index].to(torch.float64).mean(0).reshape(sizes).numpy()


def grid_similarity(enc: PositionalEncoding, *, grid: int = 8) -> Figure:
    """Similarity of the centre patch of a ``grid x grid`` training grid to every patch, on that
    grid and on one twice as large (the same anchor coordinates): what changes past the
    training resolution. A bias encoding shows the bias from that patch instead."""
    side = check_int("grid", grid, minimum=2, maximum=64)
    anchor = (side // 2, side // 2)
    fig = new_figure(8.4, 4.2, margins=(0.55, 1.0, 0.55, 0.6))
    how = "grid flattened row by row" if enc.position_axes == 1 else "patches at (row, column)"
    if enc.kind == "bias":
        fig.suptitle(
            f"{_label(enc)}: bias from patch {anchor} to every patch (mean over heads); {how}", fontsize=9
        )
        maps = [bias_map(enc, (side * s, side * s), anchor) for s in (1, 2)]
        lo, hi = min(float(m.min()) for m in maps), max(float(m.max()) for m in maps)
        limits, cmap, unit = (lo, max(hi, lo + 1e-9)), SEQUENTIAL, "bias added to the scaled score"
    else:
        what = "rotated key" if enc.kind == "rotary" else "position vector"
        fig.suptitle(
            f"{_label(enc)}: cosine similarity of patch {anchor}'s {what} to every patch; {how}", fontsize=9
        )
        maps = [similarity_map(enc, (side * s, side * s), anchor) for s in (1, 2)]
        limits, cmap, unit = (-1.0, 1.0), DIVERGING, "cosine similarity"
    image = None
    for k, scale in enumerate((1, 2)):
        sizes = (side * scale, side * scale)
        values = maps[k]
        ax = fig.add_subplot(1, 2, k + 1)
        image = ax.imshow(values, cmap=cmap, vmin=limits[0], vmax=limits[1], interpolation="nearest")
        ax.plot([anchor[1]], [anchor[0]], marker="x", color="black", markersize=6)
        if scale > 1:  # the training grid inside the larger one
            ax.add_patch(Rectangle((-0.5, -0.5), side, side, fill=False, edgecolor="black", linestyle="--"))
        label = "training grid" if scale == 1 else "2x larger grid (dashed: training grid)"
        ax.set_title(f"{sizes[0]} x {sizes[1]} {label}", fontsize=9)
        ax.set_xlabel("column")
        ax.set_ylabel("row")
    assert image is not None
    fig.colorbar(image, ax=fig.axes, label=unit, fraction=0.04, pad=0.03)
    return fig


__all__ = ["bias_map", "grid_similarity", "grid_vectors", "similarity_map"]
