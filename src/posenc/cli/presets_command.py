"""``posenc build --preset NAME`` and ``posenc list --presets``: real-model presets."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from posenc import presets
from posenc.cli.options import FORMAT


def print_presets(fmt: str) -> None:
    """The preset table (``posenc list --presets``): name, encoding, dims, context, source."""
    rows = presets.list_presets()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="posenc presets (posenc build --preset NAME)")
    for col in ("name", "encoding", "config", "d_model / heads / head_dim", "context", "source"):
        table.add_column(col, overflow="fold")
    for row in rows:
        config = ", ".join(f"{k}={v}" for k, v in row["config"].items())
        dims = f"{row['d_model']} / {row['num_heads']} / {row['head_dim']}"
        context = "—" if row["max_positions"] is None else f"{row['max_positions']:,}"
        table.add_row(row["name"], row["encoding"], config, dims, context, row["source"])
    Console(width=200).print(table)


@click.command("build")
@click.option("--preset", "name", required=True, help="preset name (posenc list --presets)")
@FORMAT
def build_command(name: str, fmt: str) -> None:
    """Build a real model's positional encoding and print its config.

    \b
    Examples:
      posenc build --preset llama-3.1
      posenc build --preset gpt2 --format json
    """
    preset = presets.get(name)
    enc = presets.build(name)
    out = {
        "preset": name,
        "encoding": preset.encoding,
        "kind": enc.kind,
        "class": type(enc).__name__,
        "config": enc.config.to_dict(),
        "parameters": sum(p.numel() for p in enc.parameters()),
        **{k: v for k, v in preset.to_dict().items() if k not in ("encoding", "config")},
    }
    if fmt == "json":
        click.echo(json.dumps(out, indent=2))
        return
    table = Table(title=f"{name}: {type(enc).__name__} ({enc.kind})", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in out["config"].items():
        table.add_row(f"config.{key}", str(value))
    keys = ("parameters", "d_model", "num_heads", "num_kv_heads", "head_dim", "num_layers", "layers")
    for key in (*keys, "max_positions", "layout", "note"):
        table.add_row(key, str(out[key]))
    table.add_row("source", out["source"])
    table.add_row("paper", out["paper"])
    Console(width=200).print(table)


COMMANDS = [build_command]
