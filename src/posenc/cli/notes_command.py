"""``posenc notes``: every claim of the notes posenc was built from, checked."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import posenc
from posenc.analysis import demonstrations, notes
from posenc.cli.options import FORMAT


def print_demonstration(demo: demonstrations.Demonstration, console: Console | None = None) -> None:
    """One demonstration as a titled two-column table."""
    title, columns, rows = demonstrations.demonstration_table(demo)
    table = Table(title=escape(title), title_justify="left")
    table.add_column(columns[0])
    table.add_column(columns[1])
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    (console or Console(width=140)).print(table)


def claim_rows(selected, demos) -> list[dict]:
    """JSON-ready claims with their rendered text."""
    return [
        {
            "id": c.id,
            "note": c.note,
            "where": c.where,
            "says": c.says,
            "verdict": c.verdict,
            "truth": notes.render_truth(c, demos),
            "command": c.command,
            "demonstration": c.check,
            "encoding": c.encoding,
            "measure": c.measure,
        }
        for c in selected
    ]


@click.command("notes")
@click.option("--note", type=click.Choice(list(notes.NOTES)), default=None, help="one note only")
@click.option("--verdict", type=click.Choice(list(notes.VERDICTS)), default=None, help="one verdict only")
@click.option("--encoding", default=None, help="claims about one registered encoding")
@click.option(
    "--demo",
    "demo",
    type=click.Choice(list(demonstrations.DEMONSTRATIONS)),
    default=None,
    help="print one demonstration instead",
)
@FORMAT
def notes_command(
    note: str | None, verdict: str | None, encoding: str | None, demo: str | None, fmt: str
) -> None:
    """Every claim of the lecture notes, video script, notebook summary, interview answer
    and tutorial posenc was built from: verdict (holds / corrected / pending / not
    checked; claims about trained models: holds / contradicted / inconclusive, from the
    benchmark's tests over seeds), what holds, and the command that shows it.

    \b
    Examples:
      posenc notes --verdict corrected
      posenc notes --note tutorial
      posenc notes --demo rope_sign
      posenc notes --format json
    """
    if demo is not None:
        shown = demonstrations.run([demo])[demo]
        if fmt == "json":
            click.echo(json.dumps(shown.to_dict(), indent=2))
        else:
            print_demonstration(shown)
        return
    if encoding is not None:
        posenc.get_encoding_class(encoding)  # unknown names: one line with a suggestion
    selected = notes.claims(note=note, verdict=verdict, encoding=encoding, measured=True)
    demos = demonstrations.run(notes.checks_of(selected))
    if fmt == "json":
        click.echo(json.dumps(claim_rows(selected, demos), indent=2))
        return
    table = Table(title=notes.summary_line(selected).replace("`", ""), show_lines=True)
    for col, width in (("#", 4), ("the note says", 44), ("verdict", 13), ("what holds", 60), ("see it", 30)):
        table.add_column(col, max_width=width, overflow="fold")
    for c in selected:
        bold = c.verdict in (notes.CORRECTED, notes.CONTRADICTED)
        verdict_cell = f"[bold red]{c.verdict}[/]" if bold else notes.verdict_text(c)
        cells = (escape(c.says), verdict_cell, escape(notes.render_truth(c, demos)), escape(c.command))
        table.add_row(c.id, *cells)
    Console(width=170).print(table, markup=True)
    click.echo("Notes: " + "; ".join(f"{k[0].upper()} = {v}" for k, v in notes.NOTES.items()))


COMMANDS = [notes_command]
