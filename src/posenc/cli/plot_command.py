"""``posenc plot``: one figure of one encoding, written to PNG, SVG (or GIF for rotation)."""

from __future__ import annotations

import click

from posenc import viz
from posenc.cli.paths import input_dir, output_file
from posenc.cli.trust_option import TRUST_OPTION
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.records.store import ResultStore
from posenc.results import trained
from posenc.results.curves import curves_figure
from posenc.viz import FIGURE_KINDS, FIGURES
from posenc.viz.figures import attention_grid


@click.command("plot")
@click.argument("name", required=False)
@click.option("--kind", "kind", type=click.Choice(FIGURE_KINDS), default=None, help="which figure")
@click.option(
    "-o",
    "--out",
    "--output",
    "output",
    type=click.Path(dir_okay=False, writable=True),
    required=True,
    help=".png, .svg (.gif: rotation)",
)
@click.option(
    "--d-model", type=int, default=512, show_default=True, help="model width the encoding is built for"
)
@click.option(
    "--num-heads", type=int, default=8, show_default=True, help="heads (head_dim = d_model / heads)"
)
@click.option(
    "--positions", type=int, default=None, help="number of positions / sequence length / max distance"
)
@click.option("--dpi", type=int, default=100, show_default=True, help="resolution of PNG output")
@click.option(
    "--run",
    "run",
    default=None,
    help="a run of posenc compare (OUT/runs/TASK/NAME__seedS__ID.json): draw its trained model "
    "(--kind attention; --positions: content tokens, LM bytes)",
)
@click.option(
    "--curves",
    "curves",
    default=None,
    type=click.Path(file_okay=False),
    help="a results directory of posenc compare (its --out): draw the learning curves of its runs "
    "(training loss and held-out metric against step, per task, one colour per encoding)",
)
@TRUST_OPTION
@click.pass_context
def plot_command(
    ctx: click.Context,
    name: str | None,
    kind: str | None,
    output: str,
    d_model: int,
    num_heads: int,
    positions: int | None,
    dpi: int,
    run: str | None,
    curves: str | None,
    trust_remote_code: bool,
) -> None:
    """Draw figure KIND of encoding NAME, of the trained model of a run (--run), or the
    learning curves of a results directory (--curves OUT).

    A kind that does not apply to the encoding (e.g. ``bias`` for sinusoidal) is an
    error (exit status 2) naming the kinds that do.

    \b
    Kinds:
      heatmap     positions x dimensions (the common tutorial 20 x 512 view)
      surface     the same values as a 3-D surface
      waves       selected dimensions across positions
      similarity  cosine similarity between positions
      rotation    one rotated 2-D pair of a rotary encoding (-o x.gif animates)
      bias        per-head bias of a bias encoding
      attention   attention of a small untrained model, or of a trained one (--run)
      spectrum    wavelengths under every RoPE scaling
      decay       position term against distance
      grid        one patch's similarity to every patch of a grid and of one twice
                  as large (multi-axis encodings by (row, column); 1-D ones row-major)

    \b
    Examples:
      posenc plot sinusoidal --kind heatmap -o pe.png
      posenc plot rope --kind rotation -o rope.gif
      posenc plot alibi --kind bias --num-heads 8 -o alibi.svg
      posenc plot rope_mixed --kind grid --positions 8 -o rope-mixed-grid.png
      posenc plot --run results/runs/copy/rope__seed0__ID.json --kind attention -o rope-trained.png
      posenc plot --run results/runs/copy/rope__seed0__ID.json --kind attention --positions 16 -o at-2x.png
      posenc plot --curves posenc-results -o curves.png

    With --run, the attention is the trained model's on the run's own input: a task
    example [BOS] x [SEP] y with n content tokens (default: the training n) or, for the
    language model, a window of validation text (default: L_train bytes). A run whose
    record names its encoding or task by import spec (package.module:Class) is drawn
    only with --trust-remote-code: a record is data, and posenc imports the code it
    names only when you trust whoever wrote it.
    """
    if curves is not None:
        _plot_curves(ctx, name, kind, output, dpi, curves, run)
        return
    if kind is None:
        raise click.UsageError("missing --kind (which figure), or --curves OUT")
    if run is not None:
        _plot_run(ctx, name, kind, output, positions, dpi, run, trust_remote_code)
        return
    if name is None:
        raise click.UsageError("missing NAME (an encoding, see posenc list) or --run RUN")
    # upper bounds: one figure; larger sizes allocate gigabytes (attention is positions^2 x heads)
    check_int("--d-model", d_model, minimum=1, maximum=4096)
    check_int("--num-heads", num_heads, minimum=1, maximum=64)
    check_int("--dpi", dpi, minimum=1, maximum=1000)
    if positions is not None:
        check_int("--positions", positions, minimum=1, maximum=4096)
    options = {}
    option = FIGURES[kind].size_option
    if positions is not None:
        if option is None:
            raise PosencError(f"--positions does not apply to figure kind {kind!r}")
        options[option] = positions
    output_file(output, "-o/--out")  # before drawing: a path that cannot be written fails now
    try:
        path = viz.render(name, kind, output, d_model=d_model, num_heads=num_heads, dpi=dpi, **options)
    except PosencError as exc:  # the figure's own name for the size is --positions here
        if option is None or not str(exc).startswith(f"{option} "):
            raise
        raise PosencError(f"--positions{str(exc)[len(option) :]}") from None
    click.echo(f"wrote {path}")


COMMANDS = [plot_command]


def _plot_run(
    ctx: click.Context,
    name: str | None,
    kind: str,
    output: str,
    positions: int | None,
    dpi: int,
    run: str,
    trust_remote_code: bool,
) -> None:
    """``posenc plot --run RUN --kind attention``: the trained model's attention."""
    if kind != "attention":
        raise PosencError(f"--run draws --kind attention only (the trained model's attention), got {kind!r}")
    for option in ("d_model", "num_heads"):
        if ctx.get_parameter_source(option) is not click.core.ParameterSource.DEFAULT:
            flag = "--" + option.replace("_", "-")
            raise PosencError(f"{flag} does not apply with --run: the run's model has its own")
    if positions is not None:
        check_int("--positions", positions, minimum=1, maximum=4096)
    output_file(output, "-o/--out")
    maps, spec, example = trained.attention_maps(run, positions, trust_remote_code=trust_remote_code)
    if name is not None and name not in (spec.encoding, spec.label):
        raise PosencError(f"NAME {name!r} does not match the run, which is {spec.label!r} (leave NAME out)")
    title = f"{spec.label}, trained on {spec.task} (seed {spec.seed})\n{example.description}"
    fig = attention_grid(maps, title, example.labels)
    click.echo(f"wrote {viz.save(fig, output, dpi=dpi)}")


def _plot_curves(
    ctx: click.Context, name: str | None, kind: str | None, output: str, dpi: int, out: str, run: str | None
) -> None:
    """``posenc plot --curves OUT -o FILE``: the learning curves of the runs of OUT's latest grid."""
    input_dir(out, "--curves")  # a path that cannot be read: named first
    given = [flag for flag, value in (("NAME", name), ("--kind", kind), ("--run", run)) if value is not None]
    for option in ("d_model", "num_heads", "positions"):
        if ctx.get_parameter_source(option) not in (None, click.core.ParameterSource.DEFAULT):
            given.append("--" + option.replace("_", "-"))
    if given:
        raise PosencError(f"{given[0]} does not apply with --curves (the runs' own curves are drawn)")
    check_int("--dpi", dpi, minimum=1, maximum=1000)
    store = ResultStore(out)
    if not store.runs.is_dir():
        raise PosencError(f"--curves {out}: no runs/ directory (not a results directory of posenc compare)")
    records = store.records(warn=lambda message: click.echo(message, err=True))
    if not records:
        raise PosencError(f"--curves {out}: no finished runs to draw")
    output_file(output, "-o/--out")
    fig = curves_figure(
        records, title=f"Learning curves of {out}: training loss and held-out metric per step"
    )
    click.echo(f"wrote {viz.save(fig, output, dpi=dpi)}")
