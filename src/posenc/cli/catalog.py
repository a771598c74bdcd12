"""``posenc list`` and ``posenc show``: what is registered, and worked examples."""

from __future__ import annotations

import json
import math

import click
import torch

import posenc
from posenc.base import check_int

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
        from posenc.cli.presets import print_presets

        print_presets(fmt)
        return
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


# ---------------------------------------------------------------------------
# posenc show
# ---------------------------------------------------------------------------


def _fmt(value: float) -> str:
    """3 decimals, without a distracting "-0.000"."""
    if not math.isfinite(value):
        return str(value)
    text = f"{value:.3f}"
    return "0.000" if text == "-0.000" else text


def _jsonable(rows) -> list:
    """Nested lists of floats with non-finite values (masked logits) as None."""
    return [[v if math.isfinite(v) else None for v in row] for row in rows]


def _print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    click.echo(title)
    table = Table()
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


def _sinusoidal_example(enc, n: int) -> dict:
    """The seed tutorial's worked example: divisors, angles, values (from the library)."""
    dim, base = enc.config.dim, enc.config.base
    divisors = [base ** (2 * i / dim) for i in range(dim // 2)]  # base^(2i/d)
    positions = torch.arange(n)[None]  # (1, n)
    angles = [[p / div for div in divisors] for p in range(n)]
    with torch.no_grad():
        zeros = torch.zeros(1, n, dim, dtype=torch.float64)
        values = enc.embed(zeros, positions=positions)[0]  # (n, d) float64: PE itself, full precision
    return {"divisors": divisors, "angles": angles, "values": values.tolist()}


def _show_sinusoidal(name: str, enc, n: int, fmt: str) -> None:
    data = _sinusoidal_example(enc, n)
    if fmt == "json":
        out = {"name": name, "kind": enc.kind, "config": enc.config.to_dict(), "positions": list(range(n))}
        out.update(data)
        click.echo(json.dumps(out, indent=2))
        return
    dim = enc.config.dim
    _print_table(
        "Step 1: frequency divisors base^(2i/d)",
        ["i", "2i (sin)", "2i+1 (cos)", "divisor"],
        [[str(i), str(2 * i), str(2 * i + 1), f"{d:g}"] for i, d in enumerate(data["divisors"])],
    )
    _print_table(
        "Step 2: angles pos / divisor",
        ["pos"] + [f"dim {2 * i},{2 * i + 1} (/{d:g})" for i, d in enumerate(data["divisors"])],
        [[str(p)] + [f"{a:g}" for a in row] for p, row in enumerate(data["angles"])],
    )
    columns = ["pos"] + [f"{'sin' if k % 2 == 0 else 'cos'}(θ{k // 2})" for k in range(dim)]
    _print_table(
        "Step 3: PE = sin at even dims, cos at odd dims",
        columns,
        [[str(p)] + [_fmt(v) for v in row] for p, row in enumerate(data["values"])],
    )


def _hook_table(enc, n: int, dim: int, heads: int) -> tuple[str, list[str], list[list[float]]]:
    """(title, column labels, rows) for any encoding, chosen by kind only; float64 throughout."""
    g = torch.Generator().manual_seed(0)
    f64 = torch.float64
    positions = torch.arange(n)[None]  # (1, n)
    enc = enc.double()
    with torch.no_grad():
        if enc.kind == "additive":
            try:
                enc.encode(positions)  # content-free encodings define encode(); others raise
                x = torch.zeros(1, n, dim, dtype=f64)
                title = "PE(pos): the vector added at each position"
            except NotImplementedError:
                x = torch.randn(1, n, dim, generator=g, dtype=f64)  # content-dependent: fixed tokens
                title = "embed(x) for x ~ N(0, 1) (seed 0): this encoding depends on content"
            pe = enc.embed(x, positions=positions)[0]  # (n, d)
            return title, [f"d{k}" for k in range(pe.shape[-1])], pe.tolist()
        if enc.kind == "bias":
            b = enc.bias(n, n)[0, 0]  # (i, j) for head 0
            return "bias(q_pos=i, k_pos=j) for head 0", [f"j={j}" for j in range(n)], b.double().tolist()
        if enc.kind == "rotary":
            e = (
                torch.eye(dim, dtype=f64)[:, None, None, :].expand(dim, 1, n, dim).contiguous()
            )  # (d, 1, n, d)
            q, _ = enc.rotate(e, e, q_positions=positions, k_positions=positions)
            diag = torch.diagonal(q[:, 0], dim1=0, dim2=2)  # (n, d): component a of rotate(e_a)
            cos = diag / q[:, 0].norm(dim=-1).T  # (n, d) cos of the angle dimension a turns by
            title = "cos(angle) by which rotate() turns basis vector e_d at each position"
            return title, [f"d{k}" for k in range(dim)], cos.tolist()
        if enc.kind in ("relative", "contextual"):
            q = torch.randn(1, heads, n, dim, generator=g, dtype=f64)  # (1, h, i, d)
            k = torch.randn(1, heads, n, dim, generator=g, dtype=f64)  # (1, h, j, d)
            if enc.kind == "relative":
                s = enc.scores(q, k)[0, 0]
                title = "scores(q, k): the relative term added to q.k, head 0, q, k ~ N(0, 1) (seed 0)"
            else:
                logits = (q @ k.transpose(-1, -2)) / dim**0.5
                logits = logits.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
                s = enc.scores(q, k, logits)[0, 0]
                title = "scores(q, k, causal logits), head 0, q, k ~ N(0, 1) (seed 0)"
            return title, [f"j={j}" for j in range(n)], s.tolist()
    return "no positional term", [], []


@click.command("show")
@click.argument("name")
@click.option("--positions", "num_positions", type=int, default=4, show_default=True, help="positions shown")
@click.option("--dim", type=int, default=8, show_default=True, help="d_model (head_dim for attention kinds)")
@click.option("--heads", type=int, default=8, show_default=True, help="heads, for kinds that have them")
@FORMAT
def show_command(name: str, num_positions: int, dim: int, heads: int, fmt: str) -> None:
    """Show what encoding NAME does at the first few positions.

    sinusoidal prints the seed tutorial's worked example (divisors, angles,
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
    cls = posenc.get_encoding_class(name)
    torch.manual_seed(0)
    enc = posenc.build_for_model(name, d_model=dim, num_heads=heads, head_dim=dim)
    if name == "sinusoidal":
        _show_sinusoidal(name, enc, num_positions, fmt)
        return
    title, columns, rows = _hook_table(enc, num_positions, dim, heads)
    if fmt == "json":
        out = {"name": name, "kind": cls.kind, "config": enc.config.to_dict(), "title": title}
        out.update({"positions": list(range(num_positions)), "columns": columns, "values": _jsonable(rows)})
        click.echo(json.dumps(out, indent=2, default=str))
        return
    click.echo(f"{name} ({cls.kind}): {cls.equation}")
    if not rows:
        click.echo("nothing to show: this encoding adds no positional term")
        return
    label = "i" if columns[0].startswith("j=") else "pos"  # (i, j) score/bias tables vs per-position vectors
    _print_table(title, [label] + columns, [[str(p)] + [_fmt(v) for v in row] for p, row in enumerate(rows)])


COMMANDS = [list_command, show_command]
