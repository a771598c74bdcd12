"""``posenc conform export DIR`` / ``posenc conform check DIR``: RoPE and bias golden vectors.

Thin: :func:`posenc.conform.export` writes the files, :func:`posenc.conform.check` runs an
adapter on them; this prints the per-case table (or JSON) and exits 1 when a case fails.
"""

from __future__ import annotations

import json
import math

import click
from rich.console import Console
from rich.table import Table

from posenc import conform
from posenc.cli.options import FORMAT
from posenc.cli.paths import input_dir, output_dir
from posenc.hf.config import read_config_file


@click.group("conform")
def conform_group() -> None:
    """Golden test vectors for every RoPE scaling and model preset, and a checker (docs/conformance.md)."""


@conform_group.command("export")
@click.argument("directory", type=click.Path(file_okay=False, writable=True))
@click.option(
    "--hf-config", type=click.Path(dir_okay=False, exists=True),
    help="only the RoPE of this model's config.json (each layer type), instead of every scaling and preset",
)  # fmt: skip
def export_command(directory: str, hf_config: str | None) -> None:
    """Write the golden vectors (float64 references) to DIRECTORY.

    \b
    Examples:
      posenc conform export rope-vectors
      posenc conform export --hf-config my-model/config.json my-vectors
    """
    config = None if hf_config is None else read_config_file(hf_config)  # read and checked here, once
    path = conform.export(output_dir(directory, "DIRECTORY"), hf_config=config)
    manifest = json.loads(path.read_text())
    click.echo(f"wrote {len(manifest['cases'])} cases to {path.parent} (schema {manifest['schema']})")


@conform_group.command("check")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.option(
    "--against",
    type=click.Choice(list(conform.ADAPTERS)),
    default="posenc",
    show_default=True,
    help="the implementation to check: posenc itself, or transformers (hf)",
)
@click.option(
    "--dtype", type=click.Choice(list(conform.TOLERANCES)), default="float32", show_default=True,
    help="compute dtype (tolerances follow it)",
)  # fmt: skip
@click.option("--case", "cases", multiple=True, help="check only this case (repeatable)")
@click.option("--failures-only", is_flag=True, help="print only the rows that fail")
@FORMAT
def check_command(
    directory: str, against: str, dtype: str, cases: tuple[str, ...], failures_only: bool, fmt: str
):
    """Run an implementation on the vectors in DIRECTORY; one row per case and quantity.

    "worst" is the largest |got - want| / allowed (at most 1 passes); n/a rows are what the
    implementation does not compute (transformers has no static NTK, nor ALiBi bias rows).
    Exits 1 if any row fails.

    \b
    Examples:
      posenc conform check rope-vectors --against hf
      posenc conform check rope-vectors --against posenc --dtype bfloat16 --case preset-llama-3.1
    """
    rows = conform.check(input_dir(directory, "DIRECTORY"), against=against, dtype=dtype, only=cases)
    shown = [row for row in rows if row.status == "FAIL"] if failures_only else rows
    failed = sum(row.status == "FAIL" for row in rows)
    if fmt == "json":
        click.echo(json.dumps([_finite(row.to_dict()) for row in shown], indent=1))
    else:
        table = Table(title=f"posenc conform check --against {against} --dtype {dtype}")
        for column in ("case", "quantity", "max |error|", "worst", "result"):
            table.add_column(column, justify="right" if column in ("max |error|", "worst") else "left")
        for row in shown:
            style = {"ok": "green", "FAIL": "bold red", "n/a": "dim"}[row.status]
            error = "—" if math.isnan(row.max_error) else f"{row.max_error:.3g}"
            worst = "—" if math.isnan(row.worst) else f"{row.worst:.3g}"
            result = row.status if not row.note else f"{row.status}: {row.note}"
            table.add_row(row.case, row.quantity, error, worst, f"[{style}]{result}[/{style}]")
        Console(width=140).print(table)
        counts = {status: sum(row.status == status for row in rows) for status in ("ok", "FAIL", "n/a")}
        click.echo(f"{counts['ok']} ok, {counts['FAIL']} failed, {counts['n/a']} n/a")
    if failed:
        raise SystemExit(1)


def _finite(row: dict) -> dict:
    """JSON has no NaN: not-computed numbers become null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


COMMANDS = [conform_group]
