"""``python -m posenc``: a guided tour of positional encodings, in the terminal, in under a minute.

Tutorials on positional encoding often end with a script that prints its encodings;
this is posenc's version, and every number it prints comes from the library:

1. the order problem: attention alone is permutation-equivariant
   (:func:`posenc.analysis.permutation_equivariance_gap`);
2. the sinusoidal worked example (what ``posenc show sinusoidal`` prints), through a
   tutorial's "dog bites man" sums, and the wavelengths;
3. the properties textbooks claim: bounded, unique, ``PE(p+k) = M_k PE(p)``
   (:mod:`posenc.analysis`), including position saturation;
4. what the notes get wrong: five errors, each with its numbers
   (:mod:`posenc.analysis.notes`, :mod:`posenc.analysis.demonstrations`);
5. one picture per family, written to ``--out`` (:mod:`posenc.viz`);
6. where to go next: the commands.

Each section is a function ``(console, out) -> None`` listed in :data:`SECTIONS`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import posenc
from posenc import viz
from posenc.analysis import demonstrations, make, notes, permutation_equivariance_gap, uniqueness, worked
from posenc.analysis.property_summary import PROPERTY_COLUMNS, encoding_properties
from posenc.encoding.base import KINDS

# Per kind, the figures that show it best (the first that applies is drawn; any applicable one
# otherwise). Contextual CoPE starts with a zero table, so its decay curve is flat at init:
# its attention map is the honest picture.
FIGURE_PREFERENCE = {
    "additive": ("heatmap",),
    "rotary": ("rotation", "heatmap"),
    "bias": ("bias",),
    "relative": ("decay",),
    "contextual": ("attention",),
    "none": ("attention",),
}
# Encodings the order and properties sections compare (all registered names).
ORDER_ENCODINGS = (None, "sinusoidal", "learned", "rope", "alibi", "t5")
PROPERTY_ENCODINGS = ("integer_index", "sinusoidal", "learned", "hierarchical", "rope", "alibi")


def _heading(console: Console, number: int, title: str) -> None:
    console.print()
    console.rule(f"[bold]{number}. {title}")


# ---------------------------------------------------------------------------
# 1. The order problem.
# ---------------------------------------------------------------------------


def order_problem(console: Console, out: Path) -> None:
    _heading(console, 1, "The order problem: attention cannot see word order")
    console.print(
        "Self-attention mixes tokens by content only. Feed it [italic]dog bites man[/] and "
        "[italic]man bites dog[/]: without positions every word comes out with the same vector "
        "in both sentences, just reordered (permutation equivariance)."
    )
    g = torch.Generator().manual_seed(0)
    words = torch.randn(1, 3, 16, dtype=torch.float64, generator=g)  # "dog", "bites", "man"
    title = escape("max |f(x[perm]) - f(x)[perm]|, one bidirectional attention layer (float64)")
    table = Table(title=title)
    table.add_column("encoding")
    table.add_column("dog bites man -> man bites dog", justify="right")
    table.add_column("rotate 6 tokens by one", justify="right")
    for name in ORDER_ENCODINGS:
        swap = permutation_equivariance_gap(name, inputs=words, permutation=[2, 1, 0], perturb=0.1)
        shift = permutation_equivariance_gap(name, perturb=0.1)
        table.add_row(name or "none", f"{swap:.2e}", f"{shift:.2e}")
    console.print(table)
    console.print(
        "~1e-16 is rounding: the layer is blind to order. Every encoding breaks the symmetry, "
        "except that a symmetric bias (ALiBi's bidirectional -m|i-j|) cannot tell a sentence "
        "from its reversal, since reversal keeps every distance."
    )


# ---------------------------------------------------------------------------
# 2. The sinusoidal worked example.
# ---------------------------------------------------------------------------


def sinusoidal_example(console: Console, out: Path) -> None:
    _heading(console, 2, "Sinusoidal positions, worked by hand (d_model = 8, positions 0..3)")
    console.print("PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d))")
    example = worked.worked_example("sinusoidal", num_positions=4, dim=8)  # what `posenc show` prints
    for title, columns, rows in worked.text_tables(example):
        console.print(title, markup=False)
        table = Table()
        for column in columns:
            table.add_column(escape(column), justify="right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    console.print(
        "Each (sin, cos) pair turns at its own speed: dims 0,1 once every 2*pi positions, "
        "dims 6,7 a thousand times slower. The longest wavelength is 2*pi*10000^((d-2)/d), which "
        "approaches 10000*2*pi only as d_model grows. The tutorial's own classes: "
        "[bold]from posenc.reference.tutorial import Embedding, PositionalEncoding[/]; "
        "[bold]python -m posenc.reference.tutorial[/] runs its usage example."
    )


# ---------------------------------------------------------------------------
# 3. The properties.
# ---------------------------------------------------------------------------


def properties(console: Console, out: Path) -> None:
    _heading(console, 3, "What makes a good encoding: bounded, unique, relative")
    console.print(
        "Checked numerically at d_model = 64 (posenc.analysis), maps fitted on positions 0..255. "
        "Sinusoids are bounded and PE(p+k) is an exact rotation of PE(p). The naive integer index "
        "is unique and even relative, PE(p+k) = PE(p) + k exactly (an affine map; no linear map "
        "fits), but unbounded: position 1000 swamps a token embedding. A learned table is neither "
        "relative nor defined past its rows."
    )
    keys = ("value_range", "growth", "unique", "linear_map", "affine_map", "translation")
    labels = {key: (label, meaning) for key, label, meaning in PROPERTY_COLUMNS}
    table = Table()
    table.add_column("encoding")
    for key in keys:
        table.add_column(labels[key][0], justify="right")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = [encoding_properties(name, probes_enabled=False) for name in PROPERTY_ENCODINGS]
    for props in rows:
        table.add_row(props.name, *(props.text(key) for key in keys))
    console.print(table)
    for key in keys:
        console.print(f"  [bold]{labels[key][0]}[/]: {labels[key][1]}")
    console.print("n/a: the check does not apply (a linear map of PE for attention-side encodings).")
    saturation(console)


# "Position saturation" (very long sequences get similar encodings, a common interview answer
# says): (label, registry name, config) measured at d_model = 64.
SATURATION_ENCODINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("sinusoidal", "sinusoidal", {}),
    ("learned (max_len 1024)", "learned", {}),
    ("hierarchical", "hierarchical", {}),
    ("hierarchical, learned inner", "hierarchical", {"inner": "learned"}),
)


def saturation(console: Console) -> None:
    table = Table(title="Position saturation: nearest pair of positions, d_model = 64")
    table.add_column("encoding")
    for n in (128, 4096):
        table.add_column(f"first {n:,} positions", justify="right")
    for label, name, config in SATURATION_ENCODINGS:
        enc = make(name, d_model=64, num_heads=4, **config)
        cells = []
        for n in (128, 4096):
            try:
                found = uniqueness(enc, n, num_heads=4)
                cells.append(f"{found.min_distance:.3f} at {found.closest_pair}")
            except ValueError:
                cells.append("no row past 1023")
        table.add_row(label, *cells)
    console.print(table)
    console.print(
        "In exact (float64) arithmetic sinusoids do not saturate here: the closest pair among 4,096 "
        "positions is still two neighbours, as far apart as among 128. What runs out is a learned "
        "table's rows. [bold]hierarchical[/] encodes (pos // 64, pos % 64), so a learned inner's "
        "two 1,024-row tables cover 65,536 positions."
    )


# ---------------------------------------------------------------------------
# 4. What the notes get wrong.
# ---------------------------------------------------------------------------


def tour_errata() -> list[notes.NoteClaim]:
    """The corrected claim shown for each of :data:`demonstrations.TOUR_ERRATA`, in that order."""
    corrected = notes.claims(verdict=notes.CORRECTED)
    return [next(c for c in corrected if c.check == key) for key in demonstrations.TOUR_ERRATA]


def notes_errata(console: Console, out: Path) -> None:
    _heading(console, 4, "What the notes get wrong: five errors, recomputed")
    console.print(
        "posenc was built from lecture notes, a video script, a notebook summary, an interview answer "
        "and a tutorial. Most of what they say holds; these five errors are the ones a reader meets first."
    )
    shown = tour_errata()
    demos = demonstrations.run(notes.checks_of(shown))
    for c in shown:
        console.print()
        label = notes.LABELS[c.note]
        verb = "say" if label.endswith("notes") else "says"
        console.print(f"[bold red]{escape(label).capitalize()} {verb}:[/] {escape(c.says)}")
        console.print(f"  [bold]posenc:[/] {escape(notes.render_truth(c, demos))}")
    console.print()
    summary = notes.summary_line(notes.measured_claims()).replace("`", "")
    summary = summary.replace(" claims:", " claims of the five notes:", 1)
    console.print(f"All {summary}: [bold]posenc notes[/], docs/notes.md.")


# ---------------------------------------------------------------------------
# 5. Pictures.
# ---------------------------------------------------------------------------


def family_pictures() -> list[tuple[str, str, str]]:
    """``(kind, encoding, figure)`` for every kind: its first registered encoding, best figure."""
    picks = []
    for kind in KINDS:
        names = [name for name, cls in posenc.ENCODINGS.items() if cls.kind == kind]
        if not names:
            continue
        applicable = viz.applicable(names[0])
        preferred = [f for f in FIGURE_PREFERENCE.get(kind, ()) if f in applicable]
        figures = preferred or applicable
        if figures:
            picks.append((kind, names[0], figures[0]))
    return picks


def pictures(console: Console, out: Path) -> None:
    _heading(console, 5, f"One picture per family, written to {out}/")
    table = Table()
    for col in ("family", "encoding", "figure", "file"):
        table.add_column(col)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind, name, figure in family_pictures():
            path = viz.render(
                name, figure, out / f"{kind}-{name}-{figure}.png", d_model=64, num_heads=4, dpi=80
            )
            table.add_row(kind, name, figure, str(path))
    console.print(table)


# ---------------------------------------------------------------------------
# 6. Where next.
# ---------------------------------------------------------------------------

NEXT_STEPS = (
    ("posenc list", "every registered encoding: kind, parameters, paper"),
    (
        "posenc show rope --positions 6",
        "what any encoding does at the first positions, and the notes' errors",
    ),
    ("posenc notes --verdict corrected", "every claim of the notes: holds, corrected or pending"),
    ("python -m posenc.reference.tutorial", "the tutorial's usage example, runnable"),
    ("posenc plot rope --kind rotation -o rope.gif", "figures (heatmap, surface, waves, bias, decay, ...)"),
    ("posenc list --presets", "the original Transformer, BERT, GPT-3, T5, LLaMA, ... as posenc configs"),
    ("posenc build --preset llama-3.1", "build one and print its config"),
    ("posenc compare --profile smoke", "train short, test long: which encodings extrapolate"),
    ("posenc report -o report/", "one self-contained HTML page with all of it"),
)


def where_next(console: Console, out: Path) -> None:
    _heading(console, 6, "Where to go next")
    table = Table(show_header=False)
    table.add_column("command", style="bold cyan")
    table.add_column("what it does")
    for command, what in NEXT_STEPS:
        table.add_row(command, what)
    console.print(table)
    console.print('Python: import posenc; enc = posenc.build("rope", head_dim=64)')


SECTIONS: tuple[Callable[[Console, Path], None], ...] = (
    order_problem,
    sinusoidal_example,
    properties,
    notes_errata,
    pictures,
    where_next,
)


def run(out: str | Path = "posenc-tour", *, console: Console | None = None) -> float:
    """Print every section and write the pictures to ``out``; returns the seconds taken."""
    console = console or Console(width=110)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    console.rule("[bold]posenc: a guided tour of positional encodings")
    for section in SECTIONS:
        section(console, out)
    seconds = time.perf_counter() - start
    console.print()
    console.print(f"Tour finished in {seconds:.1f} s.")
    return seconds


__all__ = ["FIGURE_PREFERENCE", "NEXT_STEPS", "SECTIONS", "family_pictures", "run", "tour_errata"]
