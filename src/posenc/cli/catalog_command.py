"""``posenc list`` and ``posenc show``: what is registered, and worked examples."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

import posenc
from posenc.analysis import demonstrations, notes, worked
from posenc.cli.notes_command import claim_rows, print_demonstration
from posenc.cli.options import FORMAT
from posenc.cli.presets_command import print_presets
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.tasks import task_registry


@click.command("list")
@click.option("--presets", "show_presets", is_flag=True, help="list real-model presets instead")
@click.option("--tasks", "show_tasks", is_flag=True, help="list the tasks of posenc compare instead")
@FORMAT
def list_command(fmt: str, show_presets: bool, show_tasks: bool) -> None:
    """List every registered encoding with its kind, parameters and paper (yours too: registered,
    or installed as a posenc.encodings entry point).

    \b
    Examples:
      posenc list
      posenc list --format json
      posenc list --presets
      posenc list --tasks
    """
    if show_presets and show_tasks:
        raise click.UsageError("give --presets or --tasks, not both")
    if show_presets:
        print_presets(fmt)
        return
    if show_tasks:
        print_tasks(fmt)
        return
    rows = posenc.list_encodings(on_error=_left_out)
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


def _left_out(message: str) -> None:
    """An installed entry point that cannot be listed: said on stderr, the others listed."""
    click.echo(f"posenc: note: left out: {message}", err=True)


def print_tasks(fmt: str) -> None:
    """The tasks of ``posenc compare`` (posenc's own, registered, installed ``posenc.tasks`` entry points)."""
    rows = task_registry.describe(on_error=_left_out)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="posenc compare tasks")
    for col in ("name", "kind", "description", "chance", "vocab", "source"):
        table.add_column(col)
    for row in rows:
        chance = "-" if row["chance"] is None else f"{row['chance']:.3g}"
        table.add_row(
            row["name"], row["kind"], row["description"], chance, str(row["vocab_size"]), row["source"]
        )
    Console(width=200).print(table)


# ---------------------------------------------------------------------------
# posenc show
# ---------------------------------------------------------------------------


# What a terminal table shows at most; the rest is summarised in one line (--format json has all).
MAX_TABLE_ROWS = 32
MAX_TABLE_COLUMNS = 16


def print_named(descriptions: dict[str, str], fmt: str, json_rows: object = None) -> None:
    """A ``--list-...`` option's output: one line per name with its description (``fmt`` table),
    or ``json_rows`` (default: the descriptions) as JSON."""
    if fmt == "json":
        click.echo(json.dumps(descriptions if json_rows is None else json_rows, indent=2))
        return
    width = max(map(len, descriptions))
    for name, description in descriptions.items():
        click.echo(f"{name:{width}s}  {description}")


def print_text_table(
    title: str,
    columns: list[str],
    rows: list[list[str]],
    *,
    total_rows: int | None = None,
    hint: str = "",
) -> None:
    """One titled table of text cells, right-aligned (``posenc show``'s layout), of at most
    MAX_TABLE_ROWS x MAX_TABLE_COLUMNS cells besides the row labels; what is left out
    (of ``total_rows``, default ``len(rows)``) is said in one line ending in ``hint``."""
    total_rows = len(rows) if total_rows is None else total_rows
    shown_columns = columns[: 1 + MAX_TABLE_COLUMNS]  # the first column labels the rows
    shown_rows = [row[: len(shown_columns)] for row in rows[:MAX_TABLE_ROWS]]
    click.echo(title)
    table = Table()
    for col in shown_columns:
        table.add_column(col, justify="right")
    for row in shown_rows:
        table.add_row(*row)
    Console(width=200).print(table)
    if len(shown_rows) < total_rows or len(shown_columns) < len(columns):
        click.echo(
            f"(showing {len(shown_rows)} of {total_rows} rows and {len(shown_columns) - 1} of "
            f"{len(columns) - 1} columns{'; ' + hint if hint else ''})"
        )


def _table_rows(name: str) -> tuple[str, int] | None:
    """``(field, rows)`` of the position table an encoding's default config has (learned
    tables: trained rows plus opt-in extra rows), or None; read from the Config's metadata."""
    config = posenc.get_encoding_class(name).Config
    lengths, defaults = config.meanings("length"), config.parameters()
    trained = [f for f, meaning in lengths.items() if meaning == "trained_rows"]
    if not trained or not isinstance(defaults[trained[0]], int):
        return None
    extra = sum(defaults[f] for f, meaning in lengths.items() if meaning == "extra_rows")
    return trained[0], defaults[trained[0]] + extra


@click.command("show")
@click.argument("name")
@click.option("--positions", "num_positions", type=int, default=4, show_default=True, help="positions shown")
@click.option("--dim", type=int, default=8, show_default=True, help="d_model (head_dim for attention kinds)")
@click.option("--heads", type=int, default=8, show_default=True, help="heads, for kinds that have them")
@FORMAT
def show_command(name: str, num_positions: int, dim: int, heads: int, fmt: str) -> None:
    """Show what encoding NAME does at the first few positions.

    sinusoidal prints the textbook worked example (divisors, angles, values,
    a tutorial's "dog bites man" sums at --dim 8, wavelengths); other encodings
    print the output of their kind's hook. Then what the notes posenc was built
    from get wrong about NAME, each with its numbers. Values are shown with 3
    decimals; --format json gives full precision.

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
    table_rows = _table_rows(name)
    if table_rows is not None and num_positions > table_rows[1]:
        field, size = table_rows
        raise PosencError(
            f"--positions must be <= {size} for {name!r}: its table has {field}={size} rows "
            "in the default config posenc show uses"
        )
    example = worked.worked_example(
        name,
        num_positions=num_positions,
        dim=dim,
        heads=heads,
        max_rows=None if fmt == "json" else MAX_TABLE_ROWS,  # a terminal shows the first rows only
    )
    corrections = notes.claims(encoding=name, verdict=notes.CORRECTED)
    demos = demonstrations.run(notes.checks_of(corrections))
    if fmt == "json":
        out = {**worked.jsonable(example), "notes_corrected": claim_rows(corrections, demos)}
        click.echo(json.dumps(out, indent=2, default=str))
        return
    tables = worked.text_tables(example)
    if "divisors" not in example:
        click.echo(f"{name} ({example['kind']}): {posenc.get_encoding_class(name).equation}")
        if not tables:
            click.echo("nothing to show: this encoding adds no positional term")
    hint = f"all of it: posenc show {name} --positions {num_positions} --dim {dim} --format json > FILE"
    for index, (title, columns, rows) in enumerate(tables):
        # sinusoidal: steps 2 and 3-4 have a row per position (step 1 and the wavelengths one per
        # pair, step 5 two per word); every other encoding's table has a row per position
        per_position = "divisors" not in example or index in (1, 2)
        print_text_table(title, columns, rows, total_rows=num_positions if per_position else None, hint=hint)
    print_corrections(name, corrections, demos)


def print_corrections(name: str, corrections, demos) -> None:
    """What the notes get wrong about encoding ``name``: each claim, what holds, its demonstration."""
    about = notes.claims(encoding=name)
    if not about:
        return
    click.echo()
    if not corrections:
        click.echo(
            f"The notes make {len(about)} claims about {name}; none is wrong (posenc notes --encoding {name})."
        )
        return
    click.echo(
        f"What the notes get wrong about {name}: {len(corrections)} of their {len(about)} claims "
        f"(all of them: posenc notes --encoding {name})"
    )
    console = Console(width=140)
    shown: set[str] = set()
    for c in corrections:
        click.echo()
        click.echo(f"{c.id}, {notes.LABELS[c.note]} ({c.where}): {c.says}")
        click.echo(f"  Correct: {notes.render_truth(c, demos)}")
        if c.check and c.check not in shown:
            shown.add(c.check)
            print_demonstration(demos[c.check], console)


COMMANDS = [list_command, show_command]
