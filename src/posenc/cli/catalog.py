"""``posenc list`` and ``posenc show``: what is registered, and worked examples."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

import posenc
from posenc.analysis import worked
from posenc.base import check_int
from posenc.cli.presets import print_presets

FORMAT = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)


@click.command("list")
@click.option("--presets", "show_presets", is_flag=True, help="list real-model presets instead")
@FORMAT
def list_command(fmt: str, show_presets: bool) -> None:
    """List every registered encoding with its kind, parameters and paper.

    \b
    Examples:
      posenc list
      posenc list --format json
      posenc list --presets
    """
    if show_presets:
        print_presets(fmt)
        return
    rows = posenc.list_encodings()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    table = Table(title="posenc encodings")
    for col in ("name", "kind", "parameters", "paper"):
        table.add_column(col)
    for row in rows:
        params = ", ".join(f"{k}={v}" for k, v in row["parameters"].items())
        table.add_row(row["name"], row["kind"], params, row["paper"])
    Console(width=200).print(table)


# ---------------------------------------------------------------------------
# posenc show
# ---------------------------------------------------------------------------


def print_text_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """One titled table of text cells, right-aligned (``posenc show``'s layout)."""
    click.echo(title)
    table = Table()
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


@click.command("show")
@click.argument("name")
@click.option("--positions", "num_positions", type=int, default=4, show_default=True, help="positions shown")
@click.option("--dim", type=int, default=8, show_default=True, help="d_model (head_dim for attention kinds)")
@click.option("--heads", type=int, default=8, show_default=True, help="heads, for kinds that have them")
@FORMAT
def show_command(name: str, num_positions: int, dim: int, heads: int, fmt: str) -> None:
    """Show what encoding NAME does at the first few positions.

    sinusoidal prints the textbook worked example (divisors, angles,
    values); other encodings print the output of their kind's hook. Values are
    shown with 3 decimals; --format json gives full precision.

    \b
    Examples:
      posenc show sinusoidal
      posenc show sinusoidal --positions 4 --dim 8 --format json
      posenc show learned --positions 6 --dim 4
    """
    # upper bounds: a terminal table, and rotary tables cost dim^2 * positions floats
    check_int("--positions", num_positions, minimum=1, maximum=2048)
    check_int("--dim", dim, minimum=1, maximum=256)
    check_int("--heads", heads, minimum=1, maximum=64)
    example = worked.worked_example(name, num_positions=num_positions, dim=dim, heads=heads)
    if fmt == "json":
        click.echo(json.dumps(worked.jsonable(example), indent=2, default=str))
        return
    tables = worked.text_tables(example)
    if "divisors" not in example:
        click.echo(f"{name} ({example['kind']}): {posenc.get_encoding_class(name).equation}")
        if not tables:
            click.echo("nothing to show: this encoding adds no positional term")
    for table in tables:
        print_text_table(*table)


COMMANDS = [list_command, show_command]
