"""``posenc list`` and ``posenc show``: what is registered, and worked examples."""

from __future__ import annotations

import json

import click

import posenc

FORMAT = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)


@click.command("list")
@FORMAT
def list_command(fmt: str) -> None:
    """List every registered encoding with its kind, parameters and paper.

    \b
    Examples:
      posenc list
      posenc list --format json
    """
    rows = posenc.list_encodings()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="posenc encodings")
    for col in ("name", "kind", "parameters", "paper"):
        table.add_column(col)
    for row in rows:
        params = ", ".join(f"{k}={v}" for k, v in row["parameters"].items())
        table.add_row(row["name"], row["kind"], params, row["paper"])
    Console(width=200).print(table)


COMMANDS = [list_command]
