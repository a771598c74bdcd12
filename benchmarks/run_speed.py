"""The speed races: posenc's fast paths against peer libraries, written to benchmarks/results/.

A developer tool, not a library feature (the peers are test extras; the numbers mean
something only on a quiet machine), so it lives in the repository, next to the records
it writes. The work is in :mod:`speed` (contenders in :mod:`speed_cases`); this parses
options, shows progress, prints a table or JSON, and compares the new record with the
previous one of the same mode (:mod:`speed_compare`).

Usage:
    python benchmarks/run_speed.py [--quick | --full] [--section rope|decode|bias|train ...]
        [--no-memory] [--out DIR] [--no-save] [--threads N] [--device cpu|cuda] [--format table|json]
        [--isa native|avx512|avx2] [--no-prime] [--allocator steady|as-is]

``--isa avx2`` times what an AVX2 machine runs, on an AVX-512 one: the process is started again
with ``POSENC_KERNEL_ISA=avx2`` (posenc's kernel built for AVX2) and ``ATEN_CPU_CAPABILITY=avx2``
(torch's own CPU code, the copy roofline and the peers included, at AVX2), which must be set
before torch loads. Each record says which vector code it timed (``machine.vector_isa``).

Then ``python benchmarks/compare_speed.py`` diffs the two newest records of a mode, and
``python benchmarks/update_speed_table.py RECORD ...`` rewrites the README's speed table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import speed  # benchmarks/, next to this file
import speed_compare
from rich.console import Console

from posenc.cli.paths import os_error_message, output_dir
from posenc.compare.executor import max_threads
from posenc.core.checks import check_int
from posenc.core.errors import PosencError

RESULTS = Path(__file__).resolve().parent / "results"
SECTION_CHOICES = speed.SECTIONS
#: --isa: the environment that makes posenc's kernel and torch's own CPU code use it (set before torch loads)
ISA_ENVIRONMENT = {
    "native": {"POSENC_KERNEL_ISA": "native", "ATEN_CPU_CAPABILITY": ""},  # "": unset
    "avx512": {"POSENC_KERNEL_ISA": "avx512", "ATEN_CPU_CAPABILITY": "avx512"},
    "avx2": {"POSENC_KERNEL_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2"},
}


@click.command("run_speed.py")
@click.option("--quick", "mode", flag_value="quick", default=True, help="small plan, a few minutes (default)")
@click.option("--full", "mode", flag_value="full", help="all shapes, encodings and FlexAttention (long)")
@click.option("--smoke", "mode", flag_value="smoke", hidden=True, help="tiny shapes (tests)")
@click.option(
    "--section", "sections", multiple=True, type=click.Choice(SECTION_CHOICES),
    help="run only these sections (repeatable); default: all",
)  # fmt: skip
@click.option("--no-memory", is_flag=True, help="skip the peak-memory subprocesses of the bias section")
@click.option(
    "--out", "out_dir", default=str(RESULTS), show_default="benchmarks/results",
    type=click.Path(file_okay=False, writable=True),
    help="where the JSON record goes",
)  # fmt: skip
@click.option("--no-save", is_flag=True, help="do not write a JSON record")
@click.option(
    "--threads", type=int, default=None, help="torch threads for the run, 1 .. 4 x cores (default: torch's)"
)
@click.option(
    "--device", default="cpu", show_default=True,
    help="cpu, or cuda / cuda:N: races rope and bias there (with --section rope --section bias)",
)  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--isa", type=click.Choice(list(ISA_ENVIRONMENT)), default=None,
    help="vector code to time: avx2 on an AVX-512 CPU times an AVX2 machine's code (default: the CPU's own)",
)  # fmt: skip
@click.option(
    "--no-prime", is_flag=True,
    help="time each call as the round before it leaves the memory allocator (no untimed call of the same "
    "contender first)",
)  # fmt: skip
@click.option(
    "--allocator", type=click.Choice(["steady", "as-is"]), default="steady", show_default=True,
    help="steady: glibc's malloc keeps freed memory, so outputs reuse touched pages (every contender "
    "alike); as-is: the C library's own policy, first-touch page faults included",
)  # fmt: skip
def run_command(mode, sections, no_memory, out_dir, no_save, threads, device, fmt, isa, no_prime,
                allocator) -> None:  # fmt: skip
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
      python benchmarks/run_speed.py --quick
      python benchmarks/run_speed.py --quick --section rope --format json
      python benchmarks/run_speed.py --full --out benchmarks/results
      python benchmarks/run_speed.py --quick --device cuda --section rope --section bias
      python benchmarks/run_speed.py --quick --isa avx2
    """
    if isa is not None and _missing_environment(isa):
        raise click.UsageError(
            f"--isa {isa} must be set before torch loads: run `python benchmarks/run_speed.py`"
        )
    if threads is not None:
        check_int("--threads", threads, minimum=1, maximum=max_threads())
    if not no_save:
        output_dir(out_dir, "--out")  # before minutes of timing, not after
    console = Console(stderr=True)
    speed.PRIME = not no_prime
    sections = tuple(sections) or speed.SECTIONS
    with console.status("speed race") as status:
        record = speed.run(
            mode, sections=sections, memory=not no_memory, out_dir=None if no_save else out_dir,
            progress=lambda message: status.update(f"speed race: {message}"), threads=threads,
            device=device, allocator=allocator,
        )  # fmt: skip
    comparison = None
    if not no_save:  # the newest earlier record of the same vector code
        label = speed.isa_label(record)
        found = [p for p in speed_compare.previous_records(out_dir, record["series"])
                 if speed.isa_label(speed_compare.load(p)) == label]  # fmt: skip
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


def _missing_environment(isa: str) -> dict[str, str]:
    """The variables ``--isa isa`` needs that this process's environment lacks."""
    wanted = ISA_ENVIRONMENT[isa]
    return {k: v for k, v in wanted.items() if os.environ.get(k, "").strip().lower() != v}


def _requested_isa(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--isa" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--isa="):
            return arg.split("=", 1)[1]
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the command; a bad option or value is one line on stderr and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    isa = _requested_isa(argv)
    if isa in ISA_ENVIRONMENT and _missing_environment(isa):  # a fresh process: torch reads it when it loads
        env = {**os.environ, **ISA_ENVIRONMENT[isa]}
        env = {k: v for k, v in env.items() if v}
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)
    try:
        run_command.main(args=argv, prog_name="run_speed.py", standalone_mode=False)
    except click.exceptions.Exit as exc:  # --help
        return exc.exit_code
    except click.UsageError as exc:
        click.echo(f"run_speed.py: error: {' '.join(exc.format_message().split())}", err=True)
        return 2
    except PosencError as exc:
        click.echo(f"run_speed.py: error: {exc}", err=True)
        return 2
    except OSError as exc:  # --out that cannot take a record, ...
        click.echo(f"run_speed.py: error: {os_error_message(exc)}", err=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
