"""Figures for every registered encoding, chosen by what its kind can show.

``FIGURES`` maps a figure kind to (builder, which encoding kinds it applies to, a
description). :func:`applicable` and :func:`render` read it, so the CLI, the report
and the tests never list encodings by name.

    posenc.viz.render("rope", "rotation", "rope.gif")   # animated
    posenc.viz.render("sinusoidal", "heatmap", "pe.svg", d_model=512)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from posenc.analysis.signals import make
from posenc.core.checks import check_choice
from posenc.core.errors import PosencError
from posenc.encoding.base import PositionalEncoding
from posenc.viz import figures
from posenc.viz import patch_grid as grid
from posenc.viz.figures import new_figure


@dataclass(frozen=True)
class FigureKind:
    build: Callable  # (enc or name, **options) -> Figure
    kinds: tuple[str, ...]  # encoding kinds it applies to
    description: str
    needs_name: bool = False  # builds its own model from the registry name
    applies: Callable[[PositionalEncoding], bool] | None = None  # extra check on the built encoding
    size_option: str | None = "num_positions"  # the builder's length argument (CLI --positions)
    needs: str = ""  # what it needs, in words, when ``applies`` says more than the kinds

    def requirement(self) -> str:
        """What an encoding needs for this figure, as a refusal says it."""
        if self.needs:
            return self.needs
        kinds = list(self.kinds)
        return "kind " + (kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " or " + kinds[-1])


def _has_base(enc: PositionalEncoding) -> bool:
    return isinstance(getattr(enc.config, "base", None), (int, float))


def _scalings_apply(enc: PositionalEncoding) -> bool:
    """RoPE's frequencies from a base, and RoPE's scalings (``supports_scaling``)."""
    return _has_base(enc) and bool(getattr(enc, "supports_scaling", False))


def _grid_applies(enc: PositionalEncoding) -> bool:
    """Vector encodings on any grid (1-D ones flattened); bias encodings with coordinates."""
    return enc.kind != "bias" or enc.position_axes > 1


VECTOR = ("additive", "rotary")
ALL = ("additive", "rotary", "bias", "relative", "contextual", "none")

FIGURES: dict[str, FigureKind] = {
    "heatmap": FigureKind(figures.heatmap, VECTOR, "positions x dimensions of the position vectors"),
    "surface": FigureKind(figures.surface, VECTOR, "the position vectors as a 3-D surface"),
    "waves": FigureKind(figures.waves, VECTOR, "selected dimensions across positions"),
    "similarity": FigureKind(figures.similarity, VECTOR, "cosine similarity between positions"),
    "rotation": FigureKind(
        figures.rotation, ("rotary",), "one rotated 2-D pair across positions (.gif animates)"
    ),
    "spectrum": FigureKind(
        figures.spectrum,
        ("rotary",),
        "wavelengths under every RoPE scaling",
        applies=_scalings_apply,
        size_option=None,
        needs="a rotary encoding with RoPE's frequencies (a base) that takes RoPE's scalings "
        "(supports_scaling = True)",
    ),
    "bias": FigureKind(figures.bias, ("bias",), "the bias every head adds to attention logits"),
    "decay": FigureKind(
        figures.decay,
        ("additive", "rotary", "bias", "relative", "contextual"),
        "position term against distance",
        size_option="max_distance",
    ),
    "attention": FigureKind(
        figures.attention,
        ALL,
        "attention of a small untrained model",
        needs_name=True,
        size_option="seq_len",
    ),
    "grid": FigureKind(
        grid.grid_similarity,
        ("additive", "rotary", "bias"),
        "similarity of one patch to every patch of a grid (bias: the bias from it), at the training "
        "size and twice it",
        applies=_grid_applies,
        size_option="grid",
        needs="an additive or rotary encoding, or a bias encoding whose positions have axes "
        "(position_axes > 1)",
    ),
}
FIGURE_KINDS = tuple(FIGURES)
FORMATS = (".png", ".svg", ".gif")


class NotApplicableError(PosencError):
    """The figure kind does not apply to this encoding (the CLI exits 2 with this message)."""


def applicable(
    name: str, *, d_model: int = 64, num_heads: int = 4, enc: PositionalEncoding | None = None
) -> list[str]:
    """Figure kinds that apply to registered encoding ``name``."""
    enc = enc if enc is not None else make(name, d_model=d_model, num_heads=num_heads)
    return [
        kind
        for kind, spec in FIGURES.items()
        if enc.kind in spec.kinds and (spec.applies is None or spec.applies(enc))
    ]


def figure(name: str, kind: str, *, d_model: int = 64, num_heads: int = 4, **options):
    """Build figure ``kind`` for encoding ``name``; raises NotApplicableError when it does not apply."""
    check_choice("kind", kind, FIGURE_KINDS)
    enc = make(name, d_model=d_model, num_heads=num_heads)
    kinds = applicable(name, enc=enc)
    if kind not in kinds:
        spec = FIGURES[kind]
        raise NotApplicableError(
            f"figure kind {kind!r} does not apply to encoding {name!r} (kind {enc.kind!r}); "
            f"{kind!r} needs {spec.requirement()}. Kinds that apply: {', '.join(kinds)}"
        )
    spec = FIGURES[kind]
    if spec.needs_name:
        return spec.build(name, num_heads=num_heads, **options)
    return spec.build(enc, **options)


def save(fig, path, *, dpi: int = 100) -> Path:
    """Write ``fig`` as PNG or SVG (by suffix); returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise PosencError(f"output file must end in .png or .svg (.gif for rotation), got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format=suffix[1:])
    return path


def render(
    name: str, kind: str, path, *, d_model: int = 64, num_heads: int = 4, dpi: int = 100, **options
) -> Path:
    """Build figure ``kind`` for ``name`` and write it to ``path`` (.png, .svg; .gif for rotation)."""
    path = Path(path)
    if path.suffix.lower() == ".gif":
        if kind != "rotation":
            raise PosencError(f"only the 'rotation' figure can be animated (.gif), got kind {kind!r}")
        check_choice("kind", kind, FIGURE_KINDS)
        enc = make(name, d_model=d_model, num_heads=num_heads)
        if "rotation" not in applicable(name, enc=enc):
            raise NotApplicableError(
                f"figure kind 'rotation' does not apply to encoding {name!r} (kind {enc.kind!r}); it needs a rotary encoding"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        figures.rotation_animation(enc, path, **options)
        return path
    return save(figure(name, kind, d_model=d_model, num_heads=num_heads, **options), path, dpi=dpi)


__all__ = [
    "FIGURES",
    "FIGURE_KINDS",
    "FigureKind",
    "NotApplicableError",
    "applicable",
    "figure",
    "figures",
    "grid",
    "new_figure",
    "render",
    "save",
]
