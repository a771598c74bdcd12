"""``posenc probe``: the word-order probe of an interview answer on positional encodings,
through a small untrained model (NAME) or the trained model of a benchmark run (--run)."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from posenc.analysis.probes import PROBE_ORIGINAL, PROBE_PERMUTED, position_sensitivity
from posenc.cli.options import FORMAT
from posenc.cli.trust_option import TRUST_OPTION
from posenc.core.checks import check_choice
from posenc.registry import ENCODINGS
from posenc.results import trained


@click.command("probe")
@click.argument("names", required=False)
@click.option(
    "--run",
    "runs",
    multiple=True,
    help="a run of posenc compare (OUT/runs/TASK/NAME__seedS__ID.json); repeatable",
)
@click.option(
    "--causal/--bidirectional",
    default=False,
    show_default=True,
    help="attention mask of the untrained models (a run keeps its own: causal)",
)
@FORMAT
@TRUST_OPTION
def probe_command(
    names: str | None, runs: tuple[str, ...], causal: bool, fmt: str, trust_remote_code: bool
) -> None:
    """How much a model's output changes when the words of a sentence are permuted.

    The probe of an interview answer on positional encodings: "The quick brown fox
    jumps" against "brown quick The fox jumps". Word-aligned change: each word's
    output in the permuted sentence against the same word's in the original,
    ||f(Px) - P f(x)|| / ||f(x)|| (0 when the model cannot see order); pooled: the same
    for the mean over the words (the sentence's output).

    NAMES (comma-separated encodings) uses small untrained models (seed 0); --run uses
    the trained model a posenc compare run kept (tasks: each word one symbol after BOS;
    the language model: each word's bytes and a space).

    \b
    Examples:
      posenc probe nope,sinusoidal,rope
      posenc probe nope --causal
      posenc probe --run results/runs/copy/learned__seed0__ID.json
    """
    if not names and not runs:
        raise click.UsageError("give encoding NAMES (e.g. nope,rope) or --run RUN")
    rows: list[dict[str, Any]] = []
    for name in names.split(",") if names else []:
        name = check_choice("encoding", name.strip(), tuple(ENCODINGS))
        s = position_sensitivity(name, causal=causal)
        mask = "causal" if causal else "bidirectional"
        rows.append({"model": f"{name} (untrained, {mask})", "token_change": s.token_change,
                     "pooled_change": s.pooled_change})  # fmt: skip
    for run in runs:
        p = trained.probe(run, trust_remote_code=trust_remote_code)
        rows.append({"model": f"{p.label} (trained on {p.task}, seed {p.seed})", "token_change": p.token_change,
                     "pooled_change": p.pooled_change, "run": run, "words": p.words})  # fmt: skip
    if fmt == "json":
        click.echo(
            json.dumps({"original": PROBE_ORIGINAL, "permuted": PROBE_PERMUTED, "rows": rows}, indent=2)
        )
        return
    table = Table(title=f"{' '.join(PROBE_ORIGINAL)!r} vs {' '.join(PROBE_PERMUTED)!r}", title_justify="left")
    table.add_column("model")
    table.add_column("word-aligned change", justify="right")
    table.add_column("pooled change", justify="right")
    for row in rows:
        table.add_row(row["model"], f"{row['token_change']:.3g}", f"{row['pooled_change']:.3g}")
    Console(width=140).print(table)


COMMANDS = [probe_command]
