"""``posenc rope inspect``: what a RoPE context-extension scaling does to each pair.

Thin: parse options into a scaling dict (or read a Hugging Face config), call
:func:`posenc.encoding.rotary.scaling.describe`, print a table or JSON, optionally plot.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from posenc import hf
from posenc.cli.options import FORMAT
from posenc.cli.paths import output_file
from posenc.core.checks import check_float, check_int
from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.viz.figures import new_figure

# option name -> scaling key, for the keys common enough to deserve their own flag
_FLAGS = {
    "factor": "factor",
    "original_max_position_embeddings": "original_max_position_embeddings",
    "beta_fast": "beta_fast",
    "beta_slow": "beta_slow",
    "attention_factor": "attention_factor",
    "low_freq_factor": "low_freq_factor",
    "high_freq_factor": "high_freq_factor",
}


def parse_param(text: str) -> tuple[str, Any]:
    """``key=value`` -> (key, value); value read as JSON (numbers, lists, true/false), else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise PosencError(f"--param must look like key=value (e.g. beta_fast=32), got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


@click.group("rope")
def rope_group() -> None:
    """RoPE context-extension scalings (linear, ntk, dynamic, yarn, llama3, longrope)."""


@rope_group.command("inspect")
@click.option(
    "--scaling",
    "name",
    default=None,
    help=f"one of: {', '.join(rope_scaling.BUILTIN_SCALINGS)}, or a registered one "
    f"({rope_scaling.ENTRY_POINT_GROUP} entry points)",
)
@click.option("--factor", type=float, default=None, help="scaling factor s >= 1")
@click.option("--original-max-position-embeddings", type=int, default=None, help="original context L0")
@click.option("--beta-fast", type=float, default=None, help="YaRN: ramp start (rotations), default 32")
@click.option("--beta-slow", type=float, default=None, help="YaRN: ramp end (rotations), default 1")
@click.option(
    "--attention-factor", type=float, default=None, help="YaRN/LongRoPE: explicit attention scaling"
)
@click.option("--low-freq-factor", type=float, default=None, help="Llama 3: low-frequency factor")
@click.option("--high-freq-factor", type=float, default=None, help="Llama 3: high-frequency factor")
@click.option("--param", "params", multiple=True, help="any other scaling key as key=value (JSON value)")
@click.option("--head-dim", type=int, default=None, help="head dimension [default: 128]")
@click.option("--base", type=float, default=None, help="RoPE base / rope_theta [default: 10000]")
@click.option("--partial-rotary-factor", type=float, default=None, help="rotate int(head_dim * f) dims")
@click.option("--max-position-embeddings", type=int, default=None, help="model context (fills L0 as HF)")
@click.option("--seq-len", type=int, default=None, help="current length, for dynamic and longrope")
@click.option(
    "--hf-config",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="read everything from a HF config.json",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="save the wavelength spectrum (.png, .pdf or .svg; no suffix: .png)",
)
@FORMAT
def inspect_command(
    name: str | None,
    params: tuple[str, ...],
    head_dim: int | None,
    base: float | None,
    partial_rotary_factor: float | None,
    max_position_embeddings: int | None,
    seq_len: int | None,
    hf_config: str | None,
    plot_path: str | None,
    fmt: str,
    **flags: Any,
) -> None:
    """Per pair: frequency, wavelength in tokens, the factor applied and the band.

    The factor is default_inv_freq / scaled_inv_freq (1 = unchanged, s = fully
    interpolated). Bands: YaRN extrapolate / ramp / interpolate; Llama 3 high / mid / low.

    \b
    Examples:
      posenc rope inspect --scaling yarn --factor 4 --original-max-position-embeddings 2048 --head-dim 128
      posenc rope inspect --scaling llama3 --factor 8 --low-freq-factor 1 --high-freq-factor 4 \\
          --original-max-position-embeddings 8192 --base 500000 --plot llama3.png
      posenc rope inspect --scaling dynamic --factor 2 --param original_max_position_embeddings=2048 --seq-len 8192
      posenc rope inspect --hf-config config.json --format json
    """
    given = _scaling_keys(flags, params)
    if plot_path is not None:
        plot_path = str(output_file(_plot_file(plot_path), "--plot"))  # before the work, not after
    options = {
        "--scaling": name,
        "--head-dim": head_dim,
        "--base": base,
        "--partial-rotary-factor": partial_rotary_factor,
        "--max-position-embeddings": max_position_embeddings,
    }
    rope = _rope_config(options, given, hf_config)
    report = rope_scaling.describe(
        rope["scaling"],
        dim=_rotated_dims(rope),
        base=rope["base"],
        seq_len=seq_len,
        max_position_embeddings=rope["max_position_embeddings"],
    )
    if plot_path is not None:
        plot_spectrum(report, plot_path)
    if fmt == "json":
        click.echo(json.dumps(report, indent=2))
        return
    _print_table(report, plot_path)


def _scaling_keys(flags: dict[str, Any], params: tuple[str, ...]) -> dict[str, Any]:
    """The scaling keys given by their own options and by ``--param key=value``, each once."""
    given = {_FLAGS[k]: v for k, v in flags.items() if v is not None}
    for key, value in map(parse_param, params):
        if key in given:  # --factor 4 --param factor=2, or the same --param twice
            option = f"--{key.replace('_', '-')}" if flags.get(key) is not None else "--param"
            raise PosencError(
                f"scaling key {key!r} is given twice ({option} and --param {key}=...); give it once"
            )
        given[key] = value
    return given


def _rope_config(options: dict[str, Any], given: dict[str, Any], hf_config: str | None) -> dict[str, Any]:
    """The RoPE arguments: read from ``--hf-config`` (alone), else from the options (``options``:
    flag -> value or None) with their defaults and the scaling keys ``given``."""
    if hf_config is not None:
        clash = [k for k, v in options.items() if v is not None]
        if given or clash:
            raise PosencError(f"--hf-config gives the whole RoPE config; drop {clash + sorted(given)}")
        return hf.from_hf(hf_config)
    name = options["--scaling"]
    if name is None and given:
        raise PosencError(f"scaling keys {sorted(given)} given without --scaling")
    head_dim, base, partial = options["--head-dim"], options["--base"], options["--partial-rotary-factor"]
    return {
        "head_dim": 128 if head_dim is None else head_dim,
        "base": 10000.0 if base is None else base,
        "partial_rotary_factor": 1.0 if partial is None else partial,
        "scaling": None
        if name is None or (name == "default" and not given)
        else {"rope_type": name, **given},
        "max_position_embeddings": options["--max-position-embeddings"],
    }


def _rotated_dims(rope: dict[str, Any]) -> int:
    """The features RoPE rotates per head, checked (the scaling's name too)."""
    rope_scaling.split(rope["scaling"])  # unknown names fail here, with a suggestion
    check_int("--head-dim", rope["head_dim"], minimum=2, maximum=1 << 16)  # one table row per pair
    check_float("--partial-rotary-factor", rope["partial_rotary_factor"], minimum=0.0, maximum=1.0)
    dim = int(rope["head_dim"] * rope["partial_rotary_factor"])
    if dim < 2 or dim % 2:  # RoPE rotates pairs; --hf-config input was checked by hf.from_hf
        where = "--head-dim" if dim == rope["head_dim"] else "int(--head-dim x --partial-rotary-factor)"
        raise PosencError(
            f"{where} must be an even integer >= 2 (RoPE rotates pairs of dimensions), got {dim}"
        )
    return dim


PLOT_FORMATS = (".png", ".pdf", ".svg")


def _plot_file(path: str) -> str:
    """The file ``--plot`` writes: a known suffix, or ``.png`` added (as matplotlib would)."""
    suffix = os.path.splitext(path)[1].lower()
    if not suffix:
        return path + ".png" if os.path.basename(path) else path
    if suffix not in PLOT_FORMATS:
        raise PosencError(
            f"--plot must end in {', '.join(PLOT_FORMATS)} (or have no suffix: .png), got {path!r}"
        )
    return path


def _print_table(report: dict[str, Any], plot_path: str | None) -> None:
    title = (
        f"rope_type={report['rope_type']}  dim={report['dim']}  base={report['base']:g}  "
        f"seq_len={report['seq_len']}  attention_scaling={report['attention_scaling']:.6g}"
    )
    table = Table(title=title)
    for column in ("pair", "inv_freq", "wavelength (tokens)", "default wavelength", "factor", "band"):
        table.add_column(column, justify="left" if column == "band" else "right")
    for row in report["pairs"]:
        table.add_row(
            str(row["pair"]),
            f"{row['inv_freq']:.6e}",
            f"{row['wavelength']:.6g}",
            f"{row['default_wavelength']:.6g}",
            f"{row['scale']:.6g}",
            row["band"] or "-",
        )
    console = Console(width=120)
    console.print(table)
    if plot_path is not None:
        console.print(f"wrote {plot_path}")


def plot_spectrum(report: dict[str, Any], path: str) -> None:
    """Wavelength per pair before and after scaling, log scale, with L0 marked if known."""
    pairs = [row["pair"] for row in report["pairs"]]
    fig = new_figure(8, 4.5, margins=None)  # Agg canvas: no pyplot, no backend switch
    ax = fig.add_subplot()
    ax.plot(pairs, [r["default_wavelength"] for r in report["pairs"]], "o-", ms=3, label="default RoPE")
    ax.plot(
        pairs, [r["wavelength"] for r in report["pairs"]], "s-", ms=3, label=f"{report['rope_type']} scaled"
    )
    original = (report["scaling"] or {}).get("original_max_position_embeddings")
    if original:
        ax.axhline(original, color="grey", ls="--", lw=1, label=f"original context L0 = {original}")
    ax.set_yscale("log")
    ax.set_xlabel("pair index i (high frequency -> low frequency)")
    ax.set_ylabel("wavelength 2*pi/theta_i (tokens)")
    ax.set_title(
        f"RoPE wavelength spectrum: {report['rope_type']} (dim={report['dim']}, base={report['base']:g})"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


COMMANDS = [rope_group]
