"""Numeric demonstrations of what the notes posenc was built from claim, right or wrong.

Each function computes one demonstration from the library (float64) and returns a
:class:`Demonstration`: rows to show (``(quantity, value)``), named ``facts`` (booleans
the claims table of :mod:`posenc.analysis.notes` cites) and the raw ``numbers``.
:data:`DEMONSTRATIONS` maps a key to its function; :func:`run` computes them. One module
per subject: ``sinusoidal``, ``tables``, ``attention``.

The notes: lecture notes (Lecture 13, part 4), a video script, a notebook summary, an
interview answer and a widely shared tutorial ("Positional Encoding: Teaching the Model
Word Order"). The five errors the guided tour shows are :data:`TOUR_ERRATA`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from posenc.analysis.demonstrations import about_attention as attention
from posenc.analysis.demonstrations import about_tables as tables
from posenc.analysis.demonstrations import sinusoidal
from posenc.analysis.demonstrations.about_attention import INTERVIEW_T5_SNIPPET
from posenc.analysis.demonstrations.demonstration import Demonstration
from posenc.analysis.demonstrations.sinusoidal import TUTORIAL_FINGERPRINTS, TUTORIAL_PE, TUTORIAL_SUMS
from posenc.core.errors import PosencError

DEMONSTRATIONS: dict[str, Callable[[], Demonstration]] = {
    "equivariance": attention.equivariance,
    "frequency_order": sinusoidal.frequency_order,
    "lecture_visualization": sinusoidal.lecture_visualization,
    "worked_example": sinusoidal.worked_example,
    "wavelengths": sinusoidal.wavelengths,
    "dimension_126": sinusoidal.dimension_126,
    "linear_map": sinusoidal.linear_map,
    "bilinear": sinusoidal.bilinear,
    "shift_matrix": sinusoidal.shift_matrix,
    "bounded_unique": sinusoidal.bounded_unique,
    "integer_index": tables.integer_index,
    "notes_code": sinusoidal.notes_code,
    "tutorial_code": tables.tutorial_code,
    "tutorial_usage": tables.tutorial_usage,
    "similarity_table": tables.similarity_table,
    "learned_table": tables.learned_table,
    "model_presets": tables.model_presets,
    "rope_sign": attention.rope_sign,
    "rope_formula": attention.rope_formula,
    "t5_snippet": attention.t5_snippet,
    "shaw_not_bias": attention.shaw_not_bias,
    "sandwich": attention.sandwich,
    "alibi_formula": attention.alibi_formula,
    "translation": attention.translation,
    "defined_everywhere": sinusoidal.defined_everywhere,
    "dimension_check": sinusoidal.dimension_check,
    "video_learned_code": tables.video_learned_code,
    "probe": attention.probe,
    "citations": attention.citations,
}

# The errors the guided tour shows first, in this order.
TOUR_ERRATA = ("frequency_order", "rope_sign", "dimension_126", "t5_snippet", "equivariance")


def demonstration_table(demo: Demonstration) -> tuple[str, list[str], list[list[str]]]:
    """``(title, columns, rows)`` of one demonstration, for a terminal table."""
    return demo.title, ["quantity", "value"], [list(row) for row in demo.rows]


def run(keys: Iterable[str] | None = None) -> dict[str, Demonstration]:
    """Compute the demonstrations ``keys`` (default: all), in :data:`DEMONSTRATIONS` order."""
    wanted = list(DEMONSTRATIONS) if keys is None else list(dict.fromkeys(keys))
    unknown = [k for k in wanted if k not in DEMONSTRATIONS]
    if unknown:
        raise PosencError(f"unknown demonstration {unknown[0]!r} (valid: {', '.join(DEMONSTRATIONS)})")
    return {key: DEMONSTRATIONS[key]() for key in wanted}


__all__ = [
    "DEMONSTRATIONS",
    "Demonstration",
    "INTERVIEW_T5_SNIPPET",
    "TOUR_ERRATA",
    "TUTORIAL_FINGERPRINTS",
    "TUTORIAL_PE",
    "TUTORIAL_SUMS",
    "demonstration_table",
    "run",
]
