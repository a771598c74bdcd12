"""Build the one-page, self-contained HTML report.

Everything is inline: figures are base64 ``data:`` URIs, the CSS sits in a
``<style>`` element, and no element loads anything from outside the file (paper
references are plain text). The page has

1. comparison tables across every registered encoding (properties, figure kinds);
2. numeric checks of textbook and tutorial claims (a tutorial's similarity table, the linear
   relative map, RoPE's offset invariance and decay bound, integer indices), and every claim
   of the notes posenc was built from, with its verdict (:mod:`posenc.analysis.notes`);
3. one section per registered encoding: equation, paper, parameters, property table
   and every figure that applies to its kind;
4. optionally the train-short / test-long results (``posenc.results.report_section``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import string
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import posenc
from posenc import viz
from posenc.analysis import (
    PROPERTY_COLUMNS,
    EncodingProperties,
    demonstrations,
    encoding_properties,
    notes,
    properties,
)
from posenc.analysis.property_summary import format_value
from posenc.analysis.signals import make
from posenc.core import trust
from posenc.core.checks import check_choice
from posenc.records.files import atomic_write_text
from posenc.records.store import ResultStore
from posenc.results import report_section
from posenc.viz import FIGURE_KINDS, figures

# Figure options used in the report (small sizes keep `posenc report` well under 2 min).
REPORT_FIGURES: dict[str, dict] = {
    "heatmap": dict(num_positions=20, d_model=512, num_heads=8),  # the common tutorial 20 x 512 view
    "surface": dict(num_positions=48),
    "waves": dict(num_positions=100),
    "similarity": dict(num_positions=32),
    "rotation": dict(num_positions=24),
    "spectrum": dict(),
    "bias": dict(num_positions=24),
    "decay": dict(max_distance=64),
    "attention": dict(seq_len=12, num_layers=1),
    "grid": dict(grid=6),
}
D_MODEL, NUM_HEADS, DPI = 64, 4, 72


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def figure_to_data_uri(fig, *, dpi: int = DPI) -> str:
    """PNG of ``fig`` as a ``data:image/png;base64,...`` URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def img(fig, caption: str, *, dpi: int = DPI) -> str:
    uri = figure_to_data_uri(fig, dpi=dpi)
    return f'<figure><img src="{uri}" alt="{esc(caption)}"><figcaption>{esc(caption)}</figcaption></figure>'


def table(
    header: Iterable[str],
    rows: Iterable[Iterable[object]],
    *,
    numeric_from: int = 1,
    numeric_to: int | None = None,
) -> str:
    """An HTML table; cells are escaped; columns ``numeric_from .. numeric_to`` are right-aligned."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for k, cell in enumerate(row):
            cls = ' class="num"' if k >= numeric_from and (numeric_to is None or k <= numeric_to) else ""
            cells.append(f"<td{cls}>{esc(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def fmt(value) -> str:
    return format_value(float(value) if isinstance(value, (np.floating, np.integer)) else value)


# ---------------------------------------------------------------------------
# One encoding.
# ---------------------------------------------------------------------------


@dataclass
class EncodingSection:
    name: str
    html: str
    properties: EncodingProperties
    figure_kinds: list[str] = field(default_factory=list)
    seconds: float = 0.0


def encoding_section(
    name: str, *, dpi: int = DPI, probes_enabled: bool = True, figure_kinds: Iterable[str] | None = None
) -> EncodingSection:
    """The HTML section of one registered encoding (figures chosen by its kind).

    ``figure_kinds`` restricts the figures drawn (default: every kind that applies).
    """
    start = time.perf_counter()
    cls = posenc.get_encoding_class(name)
    props = encoding_properties(name, d_model=D_MODEL, num_heads=NUM_HEADS, probes_enabled=probes_enabled)
    enc = make(name, d_model=D_MODEL, num_heads=NUM_HEADS)
    kinds = viz.applicable(name, enc=enc)
    drawn = [k for k in kinds if figure_kinds is None or k in figure_kinds]
    summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
    parts = [
        f'<section id="enc-{esc(name)}" class="encoding" data-encoding="{esc(name)}">',
        f'<h2>{esc(name)}<span class="kind">{esc(cls.kind)}</span></h2>',
        f'<p class="summary">{esc(summary)}</p>',
        f'<p class="paper">Paper: {esc(cls.paper or "n/a")}</p>',
        f'<pre class="equation">{esc(cls.equation or "(no equation given)")}</pre>',
        "<h3>Parameters</h3>",
        table(
            ("field", "default"),
            (
                (k, "required (model fills it)" if v == "<required>" else repr(v))
                for k, v in cls.Config.parameters().items()
            ),
        ),
        f"<h3>Properties (d_model={D_MODEL}, {NUM_HEADS} heads)</h3>",
        table(
            ("property", "value", "meaning / why n/a"),
            (
                (label, props.text(key), props.notes.get(key, meaning))
                for key, label, meaning in PROPERTY_COLUMNS
            ),
            numeric_from=1,
        ),
        "<h3>Figures</h3>",
        '<div class="figures">',
    ]
    for kind in drawn:
        options = dict(REPORT_FIGURES.get(kind, {}))
        d_model, num_heads = options.pop("d_model", D_MODEL), options.pop("num_heads", NUM_HEADS)
        try:
            fig = viz.figure(name, kind, d_model=d_model, num_heads=num_heads, **options)
            parts.append(img(fig, f"{name}: {kind} - {viz.FIGURES[kind].description}", dpi=dpi))
        except (ValueError, TypeError, NotImplementedError, RuntimeError, IndexError) as exc:
            parts.append(
                f'<p class="notice">{esc(kind)} figure failed: {esc(type(exc).__name__)}: {esc(exc)}</p>'
            )
    parts.append("</div></section>")
    return EncodingSection(name, "\n".join(parts), props, kinds, time.perf_counter() - start)


# ---------------------------------------------------------------------------
# Across encodings.
# ---------------------------------------------------------------------------


def comparison_section(sections: list[EncodingSection]) -> str:
    header = ["encoding"] + [label for _, label, _ in PROPERTY_COLUMNS]
    rows = [[s.name] + [s.properties.text(key) for key, _, _ in PROPERTY_COLUMNS] for s in sections]
    legend = table(
        ("column", "meaning"), ((label, meaning) for _, label, meaning in PROPERTY_COLUMNS), numeric_from=9
    )
    kinds: dict[str, list[str]] = {}
    for s in sections:
        kinds.setdefault(s.properties.values["kind"], []).append(s.name)
    applicability = table(
        ["encoding"] + list(FIGURE_KINDS),
        ([s.name] + ["yes" if k in s.figure_kinds else "-" for k in FIGURE_KINDS] for s in sections),
    )
    return "\n".join(
        [
            '<section id="comparison"><h2>Comparison across encodings</h2>',
            "<h3>By kind (where the encoding acts)</h3>",
            table(("kind", "encodings"), ((k, ", ".join(v)) for k, v in kinds.items()), numeric_from=9),
            f"<h3>Properties (d_model={D_MODEL}, {NUM_HEADS} heads, untrained)</h3>",
            table(header, rows),
            legend,
            "<h3>Figures that apply</h3>",
            applicability,
            "</section>",
        ]
    )


def claims_section(*, dpi: int = DPI) -> str:
    """Numeric checks of what textbooks and tutorials claim, as tables and figures."""
    return "\n".join(
        [
            '<section id="claims"><h2>Checks of textbook and tutorial claims</h2>',
            *_tutorial_similarity(dpi),
            *_linear_relative_map(),
            *_rotary_checks(),
            *_integer_indices(dpi),
            "</section>",
        ]
    )


def _tutorial_similarity(dpi: int) -> list[str]:
    """A widely shared tutorial's printed similarity matrix, recomputed."""
    check = properties.tutorial_similarity_check()
    return [
        "<h3>Similarity between positions 0..7 (a widely shared tutorial's table)</h3>",
        "<p>A widely shared tutorial (&ldquo;Positional Encoding: Teaching the Model Word Order&rdquo;) "
        "prints a cosine-similarity table for sinusoidal encodings built with "
        "<code>embedding_dimension=128</code>. Recomputed truthfully it differs:</p>",
        table(
            (
                "d_model",
                "max |printed - true|",
                "entries with a different sign",
                "true row 0 (positions 0..7)",
            ),
            (
                (
                    d,
                    fmt(check.max_abs_difference[d]),
                    check.sign_mismatches[d],
                    " ".join(f"{v:.3f}" for v in m[0]),
                )
                for d, m in check.computed.items()
            ),
        ),
        f"<p>The tutorial's row 0: {' '.join(f'{v:.2f}' for v in properties.TUTORIAL_SIMILARITY_ROW)}. No even d_model in "
        f"[2, 1024] reproduces it: the closest, d_model={check.closest_dim}, is still off by "
        f"{check.closest_difference:.3f}.</p>",
        img(
            figures.tutorial_similarity(check),
            "the tutorial's similarity table vs the recomputed one",
            dpi=dpi,
        ),
    ]


def _linear_relative_map() -> list[str]:
    """The linear relative map of the sinusoid fitted, against its closed form."""
    if "sinusoidal" not in posenc.ENCODINGS:
        return []
    rows = []
    for d in (16, 128):
        enc = posenc.build("sinusoidal", dim=d)
        for k in (1, 5, 37):
            fit = properties.linear_relative_map(enc, k)
            closed = properties.sinusoidal_shift_matrix(d, k)
            rows.append(
                (
                    d,
                    k,
                    fmt(fit.residual),
                    fmt(np.abs(fit.matrix - closed).max()),
                    fmt(fit.offblock_fraction),
                )
            )
    return [
        "<h3>PE(pos + k) = M_k PE(pos) (sinusoidal, float64)</h3>",
        "<p>M_k fitted by least squares over 4 d positions spread so the slowest sinusoid turns "
        "at least once, compared with the closed form (one 2x2 rotation per sin/cos pair).</p>",
        table(("d_model", "k", "fit residual", "max |M_fit - M_closed|", "mass off the 2x2 blocks"), rows),
    ]


def _rotary_checks() -> list[str]:
    """RoPE-like encodings: offset invariance and the long-range decay bound."""
    rotary = [n for n, c in posenc.ENCODINGS.items() if c.kind == "rotary"]
    if not rotary:
        return []
    shifts = (1, 7, 100, 1000)
    residual_rows = []
    for name in rotary:
        res = properties.translation_residual(make(name, d_model=D_MODEL, num_heads=NUM_HEADS), 16, shifts)
        residual_rows.append([name] + [fmt(v) for v in res.absolute])
    distances = (0, 10, 50, 100, 250)
    bound = properties.rope_decay_bound(64, distances)
    return [
        "<h3>Rotary offset invariance: max |score(m, n) - score(m + t, n + t)|</h3>",
        table(["encoding"] + [f"t = {t}" for t in shifts], residual_rows),
        "<h3>RoFormer sec. 3.4.3 long-range decay bound (head_dim 64, base 10000)</h3>",
        table(
            ("relative distance", "bound (1/(d/2)) sum_j |S_j|"),
            ((r, fmt(b)) for r, b in zip(distances, bound)),
        ),
    ]


def _integer_indices(dpi: int) -> list[str]:
    """Why not integer indices: their norm against the sinusoid's and a token embedding's."""
    growth = properties.integer_index_growth(512)
    return [
        "<h3>Why not integer indices (d_model = 512)</h3>",
        table(
            (
                "position",
                "||[p, ..., p]||",
                "sinusoidal ||PE(p)||",
                "ratio to a token embedding",
                "step of p/(n-1)",
            ),
            (
                (int(p), fmt(a), fmt(b), fmt(a / growth.token_norm), fmt(s))
                for p, a, b, s in zip(
                    growth.positions, growth.index_norm, growth.sinusoidal_norm, growth.normalized_step
                )
            ),
        ),
        img(figures.integer_index(512), "norm of integer-index vs sinusoidal position vectors", dpi=dpi),
    ]


def notes_section(selected: Iterable[notes.NoteClaim] | None = None) -> str:
    """Every claim of the notes posenc was built from: the corrections with their numbers, then all claims."""
    selected = tuple(notes.measured_claims() if selected is None else selected)
    demos = demonstrations.run(notes.checks_of(selected))
    summary = esc(notes.summary_line(selected)).replace("`posenc compare`", "<code>posenc compare</code>")
    parts = [
        '<section id="notes"><h2>The notes, claim by claim</h2>',
        f"<p>posenc was built from five notes: {esc('; '.join(notes.NOTES.values()))}. Their "
        f"{summary}. Every verdict rests on a demonstration computed for this page, or, for claims "
        "about trained models, on the benchmark's tests over seeds. The tutorial's code runs as <code>from posenc.reference.tutorial import "
        "Embedding, PositionalEncoding</code>; <code>python -m posenc.reference.tutorial</code> runs its "
        "usage example.</p>",
        "<h3>Corrections</h3>",
    ]
    shown: set[str] = set()
    for c in selected:
        if c.verdict != notes.CORRECTED:
            continue
        parts += [
            f'<div class="correction" data-claim="{esc(c.id)}">',
            f"<p><b>{esc(c.id)}</b>, {esc(notes.LABELS[c.note])} ({esc(c.where)}): {esc(c.says)}</p>",
            f"<p><b>What holds:</b> {esc(notes.render_truth(c, demos))}</p>",
        ]
        if c.check and c.check not in shown:
            shown.add(c.check)
            demo = demos[c.check]
            parts += [f"<p>{esc(demo.title)}</p>", table(("quantity", "value"), demo.rows, numeric_from=9)]
        parts.append("</div>")
    for key, title in notes.NOTES.items():
        rows = [c for c in selected if c.note == key]
        if rows:
            parts += [
                f"<h3>{esc(title)}</h3>",
                table(
                    ("#", "the note says", "verdict", "what holds", "see it"),
                    (
                        (c.id, c.says, notes.verdict_text(c), notes.render_truth(c, demos), c.command)
                        for c in rows
                    ),
                    numeric_from=9,
                ),
            ]
    parts.append("</section>")
    return "\n".join(parts)


def extrapolation_section(results_dir: str | Path) -> str:
    """The benchmark's fragment, from ``posenc.results.report_section.render(results_dir)``."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results directory {str(results_dir)!r} does not exist")
    fragment = report_section.render(results_dir)  # an HTML fragment with its own <section> and <h2>
    return f'<div id="extrapolation">\n{fragment}\n</div>'


# ---------------------------------------------------------------------------
# The page.
# ---------------------------------------------------------------------------


def _read_asset(name: str) -> str:
    return resources.files("posenc.report").joinpath(name).read_text(encoding="utf-8")


def build_report(
    out_dir: str | Path,
    *,
    results_dir: str | Path | None = None,
    encodings: Iterable[str] | None = None,
    dpi: int = DPI,
    progress: bool = True,
    probes_enabled: bool = True,
    figure_kinds: Iterable[str] | None = None,
) -> Path:
    """Write ``out_dir/index.html`` (one self-contained page) and return its path.

    Args:
        out_dir: directory to write into (created if needed).
        results_dir: benchmark results to include (optional).
        encodings: registry names to include (default: every registered encoding).
        dpi: resolution of the inline PNG figures.
        progress: show a rich progress bar on stderr.
        probes_enabled: run the model-based probes (sensitivity, equivariance).
        figure_kinds: draw only these figure kinds (default: every kind that applies).
    """
    names = list(posenc.ENCODINGS) if encodings is None else list(encodings)
    if figure_kinds is not None:
        figure_kinds = [check_choice("figure kind", k, FIGURE_KINDS) for k in figure_kinds]
    for name in names:
        posenc.get_encoding_class(name)  # ValueError with a suggestion for unknown names
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    extrapolation = extrapolation_section(results_dir) if results_dir is not None else ""
    start = time.perf_counter()

    sections, checks, notes_html = _sections(names, dpi, progress, probes_enabled, figure_kinds)
    page = _page(sections, [checks, notes_html, extrapolation], time.perf_counter() - start)
    path = out_dir / "index.html"
    atomic_write_text(path, page)  # a full disk names the page; a reader never sees half of it
    return path


def _sections(
    names: list[str], dpi: int, progress: bool, probes_enabled: bool, figure_kinds: Iterable[str] | None
) -> tuple[list[EncodingSection], str, str]:
    """Each encoding's section, the claims checked and the notes, under a progress bar."""
    sections: list[EncodingSection] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not progress, transient=False) as bar:
        task = bar.add_task("report: encodings", total=len(names) + 2)
        for name in names:
            bar.update(task, description=f"report: {name}")
            sections.append(
                encoding_section(name, dpi=dpi, probes_enabled=probes_enabled, figure_kinds=figure_kinds)
            )
            bar.advance(task)
        bar.update(task, description="report: claims checked")
        checks = claims_section(dpi=dpi)
        bar.advance(task)
        bar.update(task, description="report: the notes")
        notes_html = notes_section()
        bar.advance(task)
    return sections, checks, notes_html


def _page(sections: list[EncodingSection], parts: list[str], seconds: float) -> str:
    """The page: the comparison, ``parts`` (the claims checked, the notes, the benchmark's section
    or ""), then every encoding's section, with a navigation bar over them."""
    checks, notes_html, extrapolation = parts
    nav = [
        '<a href="#comparison">comparison</a>',
        '<a href="#claims">claims checked</a>',
        '<a href="#notes">the notes</a>',
    ]
    if extrapolation:
        nav.append('<a href="#extrapolation">train short, test long</a>')
    nav += [f'<a href="#enc-{esc(s.name)}">{esc(s.name)}</a>' for s in sections]
    body = [comparison_section(sections), checks, notes_html, extrapolation] + [s.html for s in sections]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    subtitle = (
        f"<p>posenc {esc(posenc.__version__)} - {len(sections)} encodings - generated {stamp} "
        f"in {seconds:.0f} s. Every figure and number on this page is computed "
        "from the registered encodings through their hooks (the benchmark section from its run records). "
        "Models and learned tables are untrained (seeded initialisation): attention of an untrained model "
        "is close to uniform, so its figures show what the encoding alone does to the scores.</p>"
    )
    return string.Template(_read_asset("template.html")).substitute(
        title="posenc: positional encodings, checked and compared",
        subtitle=subtitle,
        css=_read_asset("style.css"),
        nav=" ".join(nav),
        body="\n".join(part for part in body if part),
    )


def benchmark_report(results_dir: str | Path, *, trust_remote_code: bool = False) -> Path:
    """The full report for a ``posenc compare`` output directory: ``results_dir/report/index.html``.

    It covers the benchmarked encodings only and skips the model-based probes, to keep
    the ``quick`` profile inside its budget (they took about a minute of CPU for all
    encodings); ``posenc report --results DIR`` builds everything. The encodings are the ones
    the records name: one named by import spec is imported only with ``trust_remote_code=True``
    (:mod:`posenc.core.trust`; ``posenc compare`` passes it for the grid it has just run).
    """
    results_dir = Path(results_dir)
    names = sorted({r["spec"]["encoding"] for r in ResultStore(results_dir).records()})
    with trust.reading(f"results directory {results_dir}", trust_remote_code=trust_remote_code):
        return build_report(
            results_dir / "report",
            results_dir=results_dir,
            encodings=names,
            progress=False,
            probes_enabled=False,
        )
