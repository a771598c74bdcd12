"""``posenc report``: one self-contained HTML page about every registered encoding."""

from __future__ import annotations

import time

import click

from posenc import report
from posenc.cli.paths import input_dir, out_dir_option, output_dir
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.records.store import ResultStore


@click.command("report")
@out_dir_option(None, "--output", dest="output", required=True, help="directory to write")
@click.option(
    "--results",
    "results",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="benchmark results directory: adds the train-short / test-long section",
)
@click.option("--encoding", "encodings", multiple=True, help="only these encodings (repeatable; default all)")
@click.option(
    "--figure", "figure_kinds", multiple=True, help="only these figure kinds (repeatable; default all)"
)
@click.option("--dpi", type=int, default=72, show_default=True, help="resolution of the inline figures")
@click.option("--no-progress", is_flag=True, help="no progress bar")
def report_command(
    output: str,
    results: str | None,
    encodings: tuple[str, ...],
    figure_kinds: tuple[str, ...],
    dpi: int,
    no_progress: bool,
) -> None:
    """Write DIR/index.html: equations, papers, parameters, properties and figures of
    every registered encoding, comparison tables, and (with --results) the benchmark.

    The page is self-contained: figures are inline data URIs, CSS is inline, nothing
    is loaded from outside, so it can be mailed or opened offline.

    \b
    Examples:
      posenc report -o report/
      posenc report -o report/ --results runs/quick
      posenc report -o /tmp/r --encoding rope --encoding alibi
    """
    check_int("--dpi", dpi, minimum=1, maximum=1000)  # before minutes of work, not after
    if results is not None:
        input_dir(results, "--results")
        if not ResultStore(results).records(warn=lambda message: click.echo(message, err=True)):
            raise PosencError(
                f"--results {results}: no finished runs (records runs/TASK/*.json, as posenc compare --out "
                "writes them, or *.json.gz, as benchmarks/records/ ships them)"
            )
    output_dir(output, "-o/--out")
    start = time.perf_counter()
    path = report.build_report(
        output,
        results_dir=results,
        encodings=encodings or None,
        figure_kinds=figure_kinds or None,
        dpi=dpi,
        progress=not no_progress,
    )
    click.echo(f"wrote {path} in {time.perf_counter() - start:.1f} s")


COMMANDS = [report_command]
