"""Figures of what each encoding does to positions (matplotlib, Agg; PNG, SVG, GIF).

Axis legend: n positions, d feature dim, h heads, L layers, i/j query/key positions.

Every function takes a built encoding (or a registry name where a model is needed)
and returns a :class:`matplotlib.figure.Figure` with a title, axis labels, units and
a colour bar wherever colour carries a value. Nothing here touches pyplot's global
state: figures are created with an Agg canvas attached, so they are thread-safe and
never open a window.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from posenc.analysis import properties
from posenc.analysis.probes import attention_maps
from posenc.analysis.signals import feature_dim_of, num_heads_of, position_kernel, position_signal
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.encoding.base import PositionalEncoding, RotaryEncoding
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.registry import ENCODINGS

DIVERGING = "RdBu_r"
SEQUENTIAL = "viridis"


def new_figure(
    width: float = 6.4,
    height: float = 4.2,
    *,
    margins: tuple[float, float, float, float] | None = (0.85, 0.25, 0.65, 0.5),
) -> Figure:
    """A figure with an Agg canvas (no pyplot, no window).

    ``margins`` = (left, right, bottom, top) in inches, set once with
    ``subplots_adjust``: a fixed layout, because constrained layout costs ~0.5 s per
    figure, too slow for a report of ~100 figures. ``None`` leaves the layout alone.
    """
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    if margins is not None:
        left, right, bottom, top = margins
        fig.subplots_adjust(
            left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height
        )
    return fig


def _label(enc: PositionalEncoding) -> str:
    names = [name for name, cls in ENCODINGS.items() if cls is type(enc)]
    return f"{names[0] if len(names) == 1 else type(enc).__name__} ({enc.kind})"


def _signal_name(enc: PositionalEncoding) -> str:
    if enc.kind == "rotary":
        return "rotated unit vector (dimensionless)"
    return "PE value (dimensionless)"


def _symmetric_limits(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    top = float(np.abs(finite).max()) if finite.size else 1.0
    top = top or 1.0
    return -top, top


# ---------------------------------------------------------------------------
# Vector views (additive / rotary): heatmap, waves, similarity.
# ---------------------------------------------------------------------------


def heatmap(enc: PositionalEncoding, *, num_positions: int = 20) -> Figure:
    """Positions x dimensions (the common tutorial view: 20 positions x 512 dims for sinusoidal)."""
    n = check_int("num_positions", num_positions, minimum=1)
    values = position_signal(enc, np.arange(n))  # (n, d)
    fig = new_figure(8.0, 3.6)
    ax = fig.add_subplot()
    lo, hi = _symmetric_limits(values)
    im = ax.imshow(values, aspect="auto", cmap=DIVERGING, vmin=lo, vmax=hi, interpolation="nearest")
    what = "a rotated unit vector" if enc.kind == "rotary" else "the vector added to the embedding"
    ax.set_title(f"{_label(enc)}: {what}, {n} positions x {values.shape[1]} dims", fontsize=10)
    ax.set_xlabel("dimension index")
    ax.set_ylabel("position (token index)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(im, ax=ax, label=_signal_name(enc))
    return fig


def surface(enc: PositionalEncoding, *, num_positions: int = 64) -> Figure:
    """The position vectors as a 3-D surface over (position, dimension): a video lecture's view.

    Even dimensions only (the sine of each sinusoidal pair): next to each other, sine and
    cosine dimensions would interleave into a saw-tooth that hides the waves.
    """
    n = check_int("num_positions", num_positions, minimum=2)
    values = position_signal(enc, np.arange(n))  # (n, d)
    dims = np.arange(0, values.shape[1], 2)  # even dimensions
    z = values[:, dims]  # (n, d/2)
    fig = new_figure(7.0, 5.2, margins=(0.2, 0.6, 0.2, 0.5))
    ax = fig.add_subplot(projection="3d")
    dim_grid, pos_grid = np.meshgrid(dims, np.arange(n))  # (n, d/2) each
    lo, hi = _symmetric_limits(z)
    surf = ax.plot_surface(
        pos_grid, dim_grid, z, cmap=DIVERGING, vmin=lo, vmax=hi, rstride=1, cstride=1, linewidth=0
    )
    ax.set_zlim(lo, hi)
    ax.view_init(elev=40, azim=-55)
    ax.set_title(f"{_label(enc)}: even dimensions over {n} positions", fontsize=10)
    ax.set_xlabel("position (tokens)")
    ax.set_ylabel("dimension index (even)")
    ax.set_zlabel("value")
    fig.colorbar(surf, ax=ax, shrink=0.6, pad=0.1, label=_signal_name(enc))
    return fig


def waves(enc: PositionalEncoding, *, num_positions: int = 100, dims=None) -> Figure:
    """Selected dimensions as functions of position (fast ones left, slow ones right)."""
    n = check_int("num_positions", num_positions, minimum=2)
    values = position_signal(enc, np.arange(n))  # (n, d)
    d = values.shape[1]
    if dims is None:
        dims = sorted({0, 1, d // 8, d // 4, d // 2, max(d - 2, 0)})
    dims = [check_int("dims entry", k, minimum=0, maximum=d - 1) for k in dims]
    fig = new_figure(7.0, 3.8)
    ax = fig.add_subplot()
    for k in dims:
        ax.plot(np.arange(n), values[:, k], label=f"dim {k}", lw=1.4)
    ax.set_title(f"{_label(enc)}: selected dimensions across positions")
    ax.set_xlabel("position (tokens)")
    ax.set_ylabel(_signal_name(enc))
    ax.legend(fontsize=8, ncols=3, loc="lower left")
    ax.grid(alpha=0.3)
    return fig


def similarity(enc: PositionalEncoding, *, num_positions: int = 32) -> Figure:
    """Cosine similarity between the vectors of positions ``0..n-1``."""
    n = check_int("num_positions", num_positions, minimum=2)
    sim = properties.similarity_matrix(enc, range(n))  # (n, n)
    fig = new_figure(5.2, 4.4)
    ax = fig.add_subplot()
    im = ax.imshow(sim, cmap=DIVERGING, vmin=-1, vmax=1, interpolation="nearest")
    ax.set_title(f"{_label(enc)}: similarity between positions")
    ax.set_xlabel("position j (tokens)")
    ax.set_ylabel("position i (tokens)")
    fig.colorbar(im, ax=ax, label="cosine similarity (-1..1)")
    return fig


# ---------------------------------------------------------------------------
# Rotary: one 2-D pair across positions (static and animated), scaling spectra.
# ---------------------------------------------------------------------------


def rotation_pair(enc: RotaryEncoding, component: int = 0) -> tuple[int, int]:
    """The two components one rotary pair mixes, found through the hook (any layout)."""
    d = feature_dim_of(enc, 0)
    a = check_int("component", component, minimum=0, maximum=d - 1)
    e = torch.zeros(1, num_heads_of(enc), 1, d, dtype=torch.float64)  # every head (RoPE-Mixed); head 0 shown
    e[..., a] = 1.0
    with torch.no_grad():
        out, _ = enc.rotate(e, e, q_positions=torch.tensor([[1]]), k_positions=torch.tensor([[1]]))
    mag = out[0, 0, 0].abs().clone()
    mag[a] = -1.0
    b = int(mag.argmax())
    if float(mag[b]) < 1e-12:
        raise PosencError(f"component {a} is not rotated by this encoding (try a component < rotary_dim)")
    return a, b


def rotation_track(enc: RotaryEncoding, *, num_positions: int = 32, component: int = 0) -> np.ndarray:
    """Where the unit vector ``e_a`` goes in its pair's plane at each position: ``(n, 2)``."""
    a, b = rotation_pair(enc, component)
    d = feature_dim_of(enc, 0)
    n = check_int("num_positions", num_positions, minimum=2)
    e = torch.zeros(1, num_heads_of(enc), n, d, dtype=torch.float64)
    e[..., a] = 1.0
    p = torch.arange(n).unsqueeze(0)
    with torch.no_grad():
        out, _ = enc.rotate(e, e, q_positions=p, k_positions=p)
    return out[0, 0][:, [a, b]].numpy()


def _rotation_axes(fig: Figure, enc, track: np.ndarray, pair: tuple[int, int]):
    ax = fig.add_subplot()
    t = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(t), np.sin(t), color="0.8", lw=1, label="unit circle")
    top = max(1.1, float(np.abs(track).max()) * 1.1)
    ax.set_xlim(-top, top)
    ax.set_ylim(-top, top)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.85", lw=0.8)
    ax.axvline(0, color="0.85", lw=0.8)
    step = math.degrees(math.atan2(track[1, 1], track[1, 0])) if len(track) > 1 else 0.0
    ax.set_title(
        f"{_label(enc)}\npair (dim {pair[0]}, dim {pair[1]}): {step:.1f} deg per position", fontsize=10
    )
    ax.set_xlabel(f"component dim {pair[0]} (dimensionless)")
    ax.set_ylabel(f"component dim {pair[1]} (dimensionless)")
    return ax


def rotation(enc: PositionalEncoding, *, num_positions: int = 32, component: int = 0) -> Figure:
    """RoPE rotation of one 2-D pair: the image of ``e_a`` at positions ``0..n-1``."""
    if not isinstance(enc, RotaryEncoding):
        raise PosencError(f"rotation figures need a rotary encoding, got kind {enc.kind!r}")
    pair = rotation_pair(enc, component)
    track = rotation_track(enc, num_positions=num_positions, component=component)  # (n, 2)
    fig = new_figure(5.4, 5.0, margins=(0.85, 0.25, 0.65, 0.7))
    ax = _rotation_axes(fig, enc, track, pair)
    ax.plot(track[:, 0], track[:, 1], color="0.6", lw=0.8)
    sc = ax.scatter(track[:, 0], track[:, 1], c=np.arange(len(track)), cmap=SEQUENTIAL, s=28, zorder=3)
    fig.colorbar(sc, ax=ax, label="position (tokens)")
    return fig


def rotation_animation(
    enc: PositionalEncoding, path, *, num_positions: int = 32, component: int = 0, fps: int = 8
) -> None:
    """Animated GIF of :func:`rotation` (one frame per position), via PillowWriter."""
    from matplotlib.animation import FuncAnimation, PillowWriter

    if not isinstance(enc, RotaryEncoding):
        raise PosencError(f"rotation figures need a rotary encoding, got kind {enc.kind!r}")
    pair = rotation_pair(enc, component)
    track = rotation_track(enc, num_positions=num_positions, component=component)
    fig = new_figure(5.0, 5.0, margins=(0.85, 0.25, 0.65, 0.7))
    ax = _rotation_axes(fig, enc, track, pair)
    (trail,) = ax.plot([], [], color="0.6", lw=0.8)
    arrow = ax.annotate("", xy=(1, 0), xytext=(0, 0), arrowprops=dict(arrowstyle="->", color="C3", lw=2))
    text = ax.text(0.02, 0.95, "", transform=ax.transAxes, va="top")

    def draw(frame: int):
        trail.set_data(track[: frame + 1, 0], track[: frame + 1, 1])
        arrow.xy = (track[frame, 0], track[frame, 1])
        text.set_text(f"position {frame}")
        return trail, arrow, text

    anim = FuncAnimation(fig, draw, frames=len(track), blit=False)
    anim.save(str(path), writer=PillowWriter(fps=fps), dpi=72)


# Example values for the keys rope scalings require, looked up by key (never by
# scaling name), so a newly registered scaling is drawn as soon as its keys are known.
SCALING_FACTOR = 4.0
SCALING_CONTEXT = 2048


def _example_params(keys, half: int) -> dict:
    examples = {
        "factor": SCALING_FACTOR,
        "original_max_position_embeddings": SCALING_CONTEXT,
        "low_freq_factor": 1.0,  # Llama 3.1's published values
        "high_freq_factor": 4.0,
        "short_factor": [1.0] * half,  # illustrative LongRoPE factors (searched per model in the paper)
        "long_factor": list(np.linspace(1.0, SCALING_FACTOR, half)),
    }
    missing = [k for k in keys if k not in examples]
    if missing:
        raise KeyError(", ".join(missing))
    return {k: examples[k] for k in keys}


def scaling_spectra(head_dim: int, base: float) -> dict[str, np.ndarray]:
    """Wavelength ``2 pi / theta_i`` (tokens) per pair for every entry of ``ROPE_SCALINGS``.

    Uses factor 4 over an original context of 2048 (dynamic: evaluated at 4 x 2048).
    """
    out = {}
    for name, spec in rope_scaling.ROPE_SCALINGS.items():
        try:
            params = _example_params(spec.required, head_dim // 2)
            scaling = None if name == "default" else {"rope_type": name, **params}
            inv_freq, _ = rope_scaling.compute(
                scaling, dim=head_dim, base=base, seq_len=int(SCALING_FACTOR * SCALING_CONTEXT)
            )
        except (KeyError, ValueError, TypeError):
            continue
        out[name] = 2 * np.pi / np.asarray(inv_freq, dtype=np.float64)
    return out


def spectrum(enc: PositionalEncoding) -> Figure:
    """RoPE scaling spectra for this encoding's ``head_dim`` and ``base``."""
    base = getattr(enc.config, "base", None)
    if enc.kind != "rotary" or not isinstance(base, (int, float)):
        raise PosencError(
            f"spectrum figures need a rotary encoding with a 'base' (RoPE frequencies), got kind {enc.kind!r}"
        )
    if not getattr(enc, "supports_scaling", False):
        raise PosencError(
            f"spectrum figures draw RoPE's scalings; {_label(enc)} takes none (supports_scaling = False)"
        )
    d = int(getattr(enc.config, "rotary_dim", None) or feature_dim_of(enc, 0))
    spectra = scaling_spectra(d, float(base))
    fig = new_figure(7.0, 4.2)
    ax = fig.add_subplot()
    for i, (name, wavelength) in enumerate(spectra.items()):
        ax.plot(
            np.arange(len(wavelength)),
            wavelength,
            label=name,
            lw=2.2 if name == "default" else 1.3,
            ls="-" if i < 10 else "--",
        )
    ax.axhline(SCALING_CONTEXT, color="0.3", ls=":", lw=1)
    ax.text(0, SCALING_CONTEXT * 1.15, f"original context {SCALING_CONTEXT}", fontsize=8)
    ax.set_yscale("log")
    ax.set_title(f"{_label(enc)}: RoPE scaling spectra (d={d}, base={base:g}, factor {SCALING_FACTOR:g})")
    ax.set_xlabel("frequency pair index i")
    ax.set_ylabel("wavelength 2*pi/theta_i (tokens, log)")
    ax.legend(fontsize=8, ncols=2)
    ax.grid(alpha=0.3, which="both")
    return fig


# ---------------------------------------------------------------------------
# Score views: bias per head, distance decay, attention of a small model.
# ---------------------------------------------------------------------------


def _head_grid(fig: Figure, maps: np.ndarray, *, titles, cmap, vmin, vmax, label, ncols: int = 4):
    """One small heatmap per head (query rows x key columns) with one shared colour bar."""
    count, n = maps.shape[0], maps.shape[-1]
    ncols = min(ncols, count)
    nrows = math.ceil(count / ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    im = None
    for k, ax in enumerate(axes.flat):
        if k >= count:
            ax.set_visible(False)
            continue
        im = ax.imshow(maps[k], cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
        ax.set_title(titles[k], fontsize=8)
        ax.set_xticks([0, n - 1])
        ax.set_yticks([0, n - 1])
        ax.tick_params(labelsize=7, length=2)
    fig.supxlabel("key position j (tokens)", fontsize=9)
    fig.supylabel("query position i (tokens)", fontsize=9)
    # A fixed layout: constrained layout costs ~1 s per grid, too slow for the report.
    width, height = fig.get_size_inches()
    fig.subplots_adjust(
        left=0.75 / width,
        right=1 - 1.3 / width,
        bottom=0.6 / height,
        top=1 - 0.75 / height,
        wspace=0.3,
        hspace=0.45,
    )
    cax = fig.add_axes((1 - 1.1 / width, 0.6 / height, 0.15 / width, 1 - 1.35 / height))
    assert im is not None  # count >= 1: at least one panel was drawn
    fig.colorbar(im, cax=cax, label=label)
    return axes


def bias(enc: PositionalEncoding, *, num_positions: int = 32, num_heads: int = 8) -> Figure:
    """The bias each head adds to attention logits, query x key position."""
    if enc.kind != "bias":
        raise PosencError(f"bias figures need a bias encoding, got kind {enc.kind!r}")
    n = check_int("num_positions", num_positions, minimum=1)
    maps = position_kernel(enc, np.arange(n), num_heads=num_heads)  # (h, i, j)
    h = maps.shape[0]
    finite = maps[np.isfinite(maps)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    fig = new_figure(2.2 * min(4, h) + 2.0, 2.2 * math.ceil(h / 4) + 1.2, margins=None)
    _head_grid(
        fig,
        maps,
        titles=[f"head {k}" for k in range(h)],
        cmap=SEQUENTIAL,
        vmin=lo,
        vmax=hi,
        label="bias added to attention logits (logit units)",
    )
    fig.suptitle(f"{_label(enc)}: per-head bias, {n} positions")
    return fig


def decay(enc: PositionalEncoding, *, max_distance: int = 128, num_heads: int = 4) -> Figure:
    """``K(R, R - r)`` against distance ``r`` per head; rotary also gets RoFormer's bound."""
    if enc.kind == "none":
        raise PosencError("decay figures need an encoding with a position signal, got kind 'none'")
    r = np.arange(check_int("max_distance", max_distance, minimum=1) + 1)
    curves = properties.distance_decay(enc, r, num_heads=num_heads)  # (h, r)
    fig = new_figure(7.4, 4.0, margins=(0.85, 0.95, 0.65, 0.5))
    ax = fig.add_subplot()
    for k, curve in enumerate(curves[:8]):
        ax.plot(r, curve, lw=1.3, label=f"head {k}" if curves.shape[0] > 1 else "measured through the hook")
    units = {
        "additive": "PE(R) . PE(R-r) (dimensionless)",
        "rotary": "score of all-ones q, k (dimensionless)",
        "bias": "bias (logit units)",
        "relative": "extra score term, fixed content (logit units)",
        "contextual": "logit, fixed content (logit units)",
    }[enc.kind]
    ax.set_ylabel(units)
    base = getattr(enc.config, "base", None)
    if enc.kind == "rotary" and isinstance(base, (int, float)):
        d = feature_dim_of(enc, 0)
        bound = properties.rope_decay_bound(d, r, float(base))
        ax2 = ax.twinx()
        ax2.plot(r, bound, color="k", ls="--", lw=1.2, label="RoFormer 3.4.3 bound (right axis)")
        ax2.set_ylabel("relative upper bound (1/(d/2)) sum |S_j| (dimensionless)")
        ax2.legend(fontsize=8, loc="upper right")
    ax.set_title(f"{_label(enc)}: position term against distance")
    ax.set_xlabel("relative distance r = i - j (tokens)")
    ax.legend(fontsize=8, loc="lower left", ncols=2)
    ax.grid(alpha=0.3)
    return fig


def attention(
    name: str, *, seq_len: int = 16, num_layers: int = 2, num_heads: int = 4, seed: int = 0
) -> Figure:
    """Attention probabilities of an untrained (seeded) causal model, every layer and head."""
    maps = attention_maps(name, seq_len=seq_len, num_layers=num_layers, num_heads=num_heads, seed=seed)
    return attention_grid(
        maps, f"{name}: attention of an untrained causal model (seed {seed}, random tokens)"
    )


def attention_grid(maps: np.ndarray, title: str, labels: list[str] | None = None) -> Figure:
    """Attention probabilities ``(L, h, i, j)`` drawn one panel per layer and head;
    ``labels`` (one per token, up to 32 tokens) name the tokens on the first column and last row."""
    layers, heads, n = maps.shape[0], maps.shape[1], maps.shape[-1]
    fig = new_figure(2.2 * heads + 2.0, 2.2 * layers + 1.2, margins=None)
    axes = _head_grid(
        fig,
        maps.reshape(layers * heads, n, n),
        titles=[f"layer {i} head {k}" for i in range(layers) for k in range(heads)],
        cmap=SEQUENTIAL,
        vmin=0.0,
        vmax=float(maps.max()) or 1.0,
        label="attention probability (0..1)",
        ncols=heads,
    )
    if labels is not None and len(labels) == n and n <= 32:
        ticks = list(range(n))
        for ax in axes[:, 0]:
            ax.set_yticks(ticks, labels, fontsize=5)
        for ax in axes[-1, :]:
            ax.set_xticks(ticks, labels, fontsize=5, rotation=90)
    fig.suptitle(title, fontsize=10 if "\n" in title else None)
    return fig


# ---------------------------------------------------------------------------
# Whole-catalogue figures.
# ---------------------------------------------------------------------------


def integer_index(dim: int = 512) -> Figure:
    """Why not integer indices: their norm grows without bound; sinusoids stay at sqrt(d/2)."""
    g = properties.integer_index_growth(dim)
    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot()
    ax.loglog(g.positions, g.index_norm, "o-", label="PE(p) = p in every dim")
    ax.loglog(g.positions, g.sinusoidal_norm, "s-", label="sinusoidal PE(p)")
    ax.axhline(g.token_norm, color="0.4", ls="--", label="token embedding, N(0, 0.02^2) entries")
    ax.set_title(f"Why not integer indices: norm of the position vector (d_model={dim})")
    ax.set_xlabel("position p (tokens, log)")
    ax.set_ylabel("L2 norm (dimensionless, log)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return fig


def tutorial_similarity(check=None) -> Figure:
    """A widely shared tutorial's printed similarity table next to the true one for d_model=128."""
    check = check or properties.tutorial_similarity_check()
    true = check.computed[properties.TUTORIAL_DIM]
    fig = new_figure(10.0, 3.6, margins=(0.6, 0.2, 0.6, 0.7))
    axes = fig.subplots(1, 3)
    panels = (
        (check.printed, "as printed in the tutorial"),
        (true, f"true, sinusoidal d_model={properties.TUTORIAL_DIM}"),
        (true - check.printed, "true - printed"),
    )
    im = None
    for ax, (m, title) in zip(axes, panels):
        im = ax.imshow(m, cmap=DIVERGING, vmin=-1.5, vmax=1.5)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("position j")
        ax.set_ylabel("position i")
    assert im is not None
    fig.colorbar(im, ax=list(axes), label="cosine similarity / difference (dimensionless)")
    fig.suptitle("Similarity between positions 0..7: a tutorial's table vs recomputed")
    return fig
