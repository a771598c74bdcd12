"""``posenc bench``: race posenc's fast paths against peer libraries (thin wrapper).

The work is in :mod:`posenc.bench.speed`; this parses options, shows progress, prints a
table or JSON, and compares the new record with the previous one of the same mode.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console

from posenc.base import check_int
from posenc.bench import speed, speed_compare
from posenc.bench.executor import max_threads
from posenc.cli.paths import output_dir

SECTION_CHOICES = speed.SECTIONS


@click.command("bench")
@click.option("--quick", "mode", flag_value="quick", default=True, help="small plan, a few minutes (default)")
@click.option("--full", "mode", flag_value="full", help="all shapes, encodings and FlexAttention (long)")
@click.option("--smoke", "mode", flag_value="smoke", hidden=True, help="tiny shapes (tests)")
@click.option(
    "--section", "sections", multiple=True, type=click.Choice(SECTION_CHOICES),
    help="run only these sections (repeatable); default: all",
)  # fmt: skip
@click.option("--no-memory", is_flag=True, help="skip the peak-memory subprocesses of the bias section")
@click.option(
    "--out", "out_dir", default="benchmarks/results", show_default=True,
    type=click.Path(file_okay=False, writable=True),
    help="where the JSON record goes",
)  # fmt: skip
@click.option("--no-save", is_flag=True, help="do not write a JSON record")
@click.option(
    "--threads", type=int, default=None, help="torch threads for the run, 1 .. 4 x cores (default: torch's)"
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def bench_command(mode, sections, no_memory, out_dir, no_save, threads, fmt) -> None:
    """Time RoPE application, decoding, bias attention and a training step against peers.

    \b
    Ratios: RoPE vs a copy of the same bytes (roofline) and vs HF transformers,
    rotary-embedding-torch, x-transformers, torchtune (skipped when not installed), eager
    and compiled; one decode token through the rotary hook (vs HF) and through attention
    with a KV cache (static, dynamic NTK and LongRoPE at 4096 cached tokens); bias attention
    forward and forward+backward vs unbiased SDPA (floor), SDPA with a dense bias and
    x-transformers, with peak memory; the benchmark model's training step, eager and
    compiled, vs x-transformers. Last, every goal ratio next to its goal, met or MISSED.

    \b
    Examples:
      posenc bench --quick
      posenc bench --quick --section rope --format json
      posenc bench --full --out benchmarks/results
    """
    if threads is not None:
        check_int("--threads", threads, minimum=1, maximum=max_threads())
    if not no_save:
        output_dir(out_dir, "--out")  # before minutes of timing, not after
    console = Console(stderr=True)
    sections = tuple(sections) or speed.SECTIONS
    with console.status("posenc bench") as status:
        record = speed.run(
            mode, sections=sections, memory=not no_memory, out_dir=None if no_save else out_dir,
            progress=lambda message: status.update(f"posenc bench: {message}"), threads=threads,
        )  # fmt: skip
    comparison = None
    if not no_save:
        found = speed_compare.previous_records(out_dir, mode)
        if len(found) >= 2:
            comparison = speed_compare.compare(speed_compare.load(found[-2]), speed_compare.load(found[-1]))
    if fmt == "json":
        click.echo(json.dumps({"record": record, "comparison": comparison}, indent=1, sort_keys=True))
        return
    out = Console(width=None if sys.stdout.isatty() else 150)  # full rows when piped to a file
    for table in speed.render(record):
        out.print(table)
    if record.get("path"):
        out.print(f"record: {record['path']}  ({record['seconds']:.0f} s)")
    if comparison is not None:
        for line in speed_compare.summary_lines(comparison):
            out.print(line, markup=False)


COMMANDS = [bench_command]
