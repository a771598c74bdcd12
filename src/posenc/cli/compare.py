"""``posenc compare``: train short, test long, for every encoding (the main job)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from pathlib import Path

import click
from rich.console import Console

from posenc import compare, presets, report, results
from posenc.attention import check_kv_heads
from posenc.checks import check_int
from posenc.cli.paths import output_dir
from posenc.compare.executor import max_threads
from posenc.compare.grid import resolve_encodings, without_variants
from posenc.compare.profile import MAX_SEED, PROFILES, get_profile, parse_variants
from posenc.compare.ray_executor import RayNotInstalled, require_ray
from posenc.errors import PosencError
from posenc.tasks import ALL_TASKS

FORMAT = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)


def _split(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _seeds(text: str | None) -> tuple[int, ...] | None:
    parts = _split(text)
    if parts is None:
        return None
    try:
        seeds = tuple(int(p) for p in parts)
    except ValueError:
        raise PosencError(f"--seeds must be comma-separated integers, got {text!r}") from None
    return tuple(check_int("--seeds", seed, minimum=0, maximum=MAX_SEED) for seed in seeds)


@click.command("compare")
@click.option(
    "--profile", default="quick", show_default=True, help=" | ".join(PROFILES) + " (--list-profiles)"
)
@click.option("--encodings", default=None, help="comma-separated registry names (default: the profile's)")
@click.option(
    "--tasks", default=None, help="comma-separated: " + ", ".join(ALL_TASKS) + " (default: the profile's)"
)
@click.option("--seeds", default=None, help="comma-separated integers (default: the profile's)")
@click.option(
    "--out",
    "out",
    default="posenc-results",
    show_default=True,
    type=click.Path(file_okay=False, writable=True),
)
@click.option(
    "--executor",
    default="local",
    show_default=True,
    type=click.Choice(["local", "ray"]),
    help="local processes, or Ray tasks (needs posenc[ray])",
)
@click.option(
    "--address",
    default=None,
    help="with --executor ray: auto | HOST:PORT of a Ray head (default: $RAY_ADDRESS, else a private Ray here)",
)
@click.option("--workers", default=None, type=int, help="parallel worker processes (default: the profile's)")
@click.option(
    "--threads",
    default=None,
    type=int,
    help="torch threads per worker, 1 .. 4 x cores (default: cores / workers)",
)
@click.option("--no-report", is_flag=True, help="skip figures and the HTML report")
@click.option(
    "--variants",
    default=None,
    help="extra runs of additive encodings, comma-separated key=value ('+' joins settings of one run): "
    "combine=concat, inject=every_layer, position_warmup=STEPS, scale_embeddings=true (see Examples)",
)
@click.option(
    "--schedules",
    default=None,
    help="per-layer schedules run as extra grid entries, comma-separated: irope[:k] (NoPE every k-th layer, "
    "Llama 4), local_global[:k] (RoPE base 1e6 every k-th layer, 1e4 elsewhere, Gemma 3)",
)
@click.option(
    "--kv-heads",
    default=None,
    help="key/value heads of every model (grouped-query attention): a divisor of the profile's heads, or a "
    "preset name (its query heads per key/value head: llama-3.1 has 4, so 4 heads -> 1)",
)
@click.option(
    "--finetune",
    default=None,
    type=int,
    help="fine-tuning steps at the target length for the RoPE scalings whose papers fine-tune "
    "(PI, YaRN); 0 evaluates them without, marked as outside their regime (default: the profile's)",
)
@click.option(
    "--lm-protocol",
    default=None,
    type=click.Choice(["nonoverlapping", "sliding"]),
    help="LM perplexity: non-overlapping windows (the ALiBi paper's protocol; default) or sliding windows",
)
@click.option(
    "--sliding-stride",
    default=None,
    type=int,
    help="with --lm-protocol sliding: bytes each window advances and scores (default 16)",
)
@click.option(
    "--retune",
    is_flag=True,
    help="choose every learning rate here (in-distribution validation) instead of using the choices "
    "shipped with posenc; candidates are cached under OUT/tuning",
)
@click.option("--list-profiles", is_flag=True, help="print the profiles and exit")
@FORMAT
def compare_command(
    profile,
    encodings,
    tasks,
    seeds,
    out,
    executor,
    address,
    workers,
    threads,
    no_report,
    variants,
    schedules,
    kv_heads,
    finetune,
    lm_protocol,
    sliding_stride,
    retune,
    list_profiles,
    fmt,
):
    """Train tiny Transformers short, test them long, for each encoding.

    Every finished run is written at once to OUT/runs/ (atomic JSON records);
    rerunning the same command resumes and skips finished runs; corrupt
    records are redone. Then the summary table, OUT/summary.{csv,json},
    OUT/figures/*.png and OUT/report.html are written.

    \b
    Examples:
      posenc compare                              # quick: <= 10 min on 2 cores
      posenc compare --profile smoke --out /tmp/r
      posenc compare --encodings rope,alibi,nope --tasks copy,reverse
      posenc compare --profile full --workers 2 --out results-full
      posenc compare --executor ray --address HEAD:6379   # a Ray cluster
      posenc compare --encodings sinusoidal,rope --variants combine=concat,position_warmup=200
      posenc compare --variants combine=concat,inject=every_layer,position_warmup=200
      posenc compare --encodings rope,nope --schedules irope:2,local_global:3
      posenc compare --encodings rope,alibi --kv-heads llama-3.1   # grouped-query, as Llama 3.1
      posenc compare --encodings rope --tasks lm --finetune 400
      posenc compare --tasks lm --lm-protocol sliding --sliding-stride 32

    --variants adds runs of each additive encoding that change how position is
    added (labels like sinusoidal[concat], sinusoidal[pe-warmup:200]); other
    kinds of encodings keep their default run only (a note says so).

    --schedules adds one run per per-layer schedule (posenc.schedules) for each task and
    seed, labelled by the schedule (irope:2); the model's layers count for the period.

    --kv-heads gives every model fewer key/value heads than query heads; labels get
    [kv:N] and the run ids change (a different model), other runs keep theirs.

    Every cell is a mean over seeds with a 95% interval (bootstrap over seeds and
    evaluation examples); training stops at in-distribution convergence (or the step
    cap: such runs show as n.c. and are left out of rankings and claims); each
    encoding's learning rate is chosen by in-distribution validation.
    """
    if list_profiles:
        rows = {name: {"description": p.description, "why": p.why} for name, p in PROFILES.items()}
        if fmt == "json":
            click.echo(json.dumps(rows, indent=2))
        else:
            for name, row in rows.items():
                click.echo(f"{name:9s} {row['description']}")
        return
    prof = _with_variants(profile, variants, _split(encodings))
    if schedules:
        prof = dataclasses.replace(
            prof, schedules=tuple(dict.fromkeys(prof.schedules + (_split(schedules) or ())))
        )
    if kv_heads is not None:
        prof = dataclasses.replace(
            prof, model=dataclasses.replace(prof.model, num_kv_heads=_kv_heads(kv_heads, prof))
        )
    prof = _with_options(prof, finetune, lm_protocol, sliding_stride)
    if address and executor != "ray":
        raise click.UsageError("--address needs --executor ray")
    if threads is not None:
        check_int("--threads", threads, minimum=1, maximum=max_threads())  # 4 x this machine's cores
    seed_list = _seeds(seeds)
    if executor == "ray":
        _use_ray(address)
    output_dir(out, "--out")  # before any run: a directory that cannot take records fails now
    # a Ray head that is not there raises ConnectionError: one line, exit 2 (posenc.cli)
    # The summaries, figures and pages (and the full report, from the same grid, under one lock).
    outputs = functools.partial(results.write_outputs, report=not no_report, extra_outputs=_full_report)
    result = compare.compare(
        prof,
        encodings=_split(encodings),
        tasks=_split(tasks),
        seeds=seed_list,
        out=Path(out),
        executor=executor,
        workers=workers,
        threads=threads,
        show_progress=fmt == "table",
        log=(lambda msg: click.echo(msg, err=True)),
        outputs=outputs,
        retune=retune,
        command=" ".join(["posenc", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("posenc") else "",
    )
    if fmt == "json":
        payload = {**result.to_dict(), "summary": json.loads(results.to_json(result.summary))}
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        console = Console(width=max(160, Console().width))  # 11 columns of mean [interval]
        console.print(results.render_table(result.summary, title=f"posenc compare --profile {prof.name}"))
        for line in result.notes():
            console.print(line)
    if result.outcome.failed:
        raise SystemExit(1)


def _with_options(prof, finetune: int | None, protocol: str | None, stride: int | None):
    """The profile with --finetune, --lm-protocol and --sliding-stride applied (checked first)."""
    if finetune is not None:
        prof = dataclasses.replace(
            prof, finetune=check_int("--finetune", finetune, minimum=0, maximum=100_000)
        )
    if stride is not None:
        if (protocol or prof.eval.lm_protocol) != "sliding":
            raise click.UsageError("--sliding-stride needs --lm-protocol sliding")
        check_int("--sliding-stride", stride, minimum=1, maximum=min(prof.eval.lm_lengths))
        prof = dataclasses.replace(prof, eval=dataclasses.replace(prof.eval, sliding_stride=stride))
    if protocol is not None:
        prof = dataclasses.replace(prof, eval=dataclasses.replace(prof.eval, lm_protocol=protocol))
    return prof


def _with_variants(profile: str, text: str | None, encodings: tuple[str, ...] | None):
    """The profile with ``--variants`` added (bad syntax: PosencError, one line, exit 2)."""
    prof = get_profile(profile)
    extra = parse_variants(text)
    if extra:
        prof = dataclasses.replace(prof, variants=tuple(dict.fromkeys(prof.variants + extra)))
    if prof.variants:
        names, _ = resolve_encodings(prof, encodings)
        skipped = without_variants(prof, names)
        if skipped:
            scope = (
                "additive encodings only"
                if prof.variant_encodings is None
                else (f"{', '.join(prof.variant_encodings)} only")
            )
            click.echo(
                f"note: variants {', '.join(prof.variants)} apply to {scope}; not run for: {', '.join(skipped)}",
                err=True,
            )
    return prof


def _kv_heads(text: str, prof) -> int:
    """``--kv-heads`` (an integer or a preset name) -> key/value heads for the profile's model."""
    num_heads = prof.model.num_heads
    try:
        if text.strip().isdigit():
            return check_kv_heads(int(text), num_heads)
        return presets.kv_heads(text.strip(), num_heads)
    except PosencError as err:
        raise PosencError(
            f"--kv-heads {text!r} for the {prof.name!r} profile's {num_heads} heads: {err}"
        ) from None


def _full_report(out: Path) -> dict[str, str]:
    """The full report next to the benchmark's own page (``posenc.report.benchmark_report``)."""
    return {"full_report": str(report.benchmark_report(out))}


def _use_ray(address: str | None) -> None:
    """Check Ray is installed (else one line and exit 2); hand ``--address`` to Ray as $RAY_ADDRESS."""
    try:
        require_ray()
    except RayNotInstalled as exc:
        raise click.UsageError(str(exc)) from None
    if address:
        os.environ["RAY_ADDRESS"] = address


COMMANDS = [compare_command]
