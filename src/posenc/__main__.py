"""``python -m posenc``: the guided tour (see :mod:`posenc.tour`); the ``posenc`` command is the CLI."""

from __future__ import annotations

try:
    import click
except ImportError:  # the bare library install has no command-line dependencies
    raise SystemExit("posenc: the guided tour needs the 'cli' extra: pip install 'posenc[cli]'") from None

from posenc.tour import run as tour_run


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="posenc-tour",
    show_default=True,
    help="folder for the pictures",
)
def tour(out: str) -> None:
    """A guided tour of positional encodings in under a minute.

    \b
    Examples:
      python -m posenc
      python -m posenc --out /tmp/tour
    """
    tour_run(out)


if __name__ == "__main__":
    tour()
