"""``posenc plot``: one figure of one encoding, written to PNG, SVG (or GIF for rotation)."""

from __future__ import annotations

import click

from posenc import viz
from posenc.base import check_int
from posenc.cli.paths import output_file
from posenc.errors import PosencError
from posenc.viz import FIGURE_KINDS, FIGURES


@click.command("plot")
@click.argument("name")
@click.option("--kind", "kind", type=click.Choice(FIGURE_KINDS), required=True, help="which figure")
@click.option(
    "-o",
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
def plot_command(
    name: str, kind: str, output: str, d_model: int, num_heads: int, positions: int | None, dpi: int
) -> None:
    """Draw figure KIND of encoding NAME.

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
      attention   attention of a small untrained model
      spectrum    wavelengths under every RoPE scaling
      decay       position term against distance

    \b
    Examples:
      posenc plot sinusoidal --kind heatmap -o pe.png
      posenc plot rope --kind rotation -o rope.gif
      posenc plot alibi --kind bias --num-heads 8 -o alibi.svg
    """
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
    output_file(output, "-o/--output")  # before drawing: a path that cannot be written fails now
    try:
        path = viz.render(name, kind, output, d_model=d_model, num_heads=num_heads, dpi=dpi, **options)
    except PosencError as exc:  # the figure's own name for the size is --positions here
        if option is None or not str(exc).startswith(f"{option} "):
            raise
        raise PosencError(f"--positions{str(exc)[len(option) :]}") from None
    click.echo(f"wrote {path}")


COMMANDS = [plot_command]
