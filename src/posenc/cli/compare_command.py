"""``posenc compare``: train short, test long, for every encoding (the main job)."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from posenc import compare, report, results
from posenc.cli.catalog_command import print_named
from posenc.cli.options import FORMAT, LazyHelpOption
from posenc.cli.paths import out_dir_option, output_dir
from posenc.cli.trust_option import TRUST_OPTION
from posenc.compare import rounds
from posenc.compare.device import DEVICE_FORMS, PRECISIONS
from posenc.compare.grid import variants_note
from posenc.compare.profile import PROFILES, ProfileOptions, dump_profile, load_profile
from posenc.core import trust
from posenc.core.errors import PosencError
from posenc.records import benchmark_scalings
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.results import primary_table
from posenc.tasks.task_registry import task_names


def _tasks_help() -> str:
    return f"comma-separated task names or import specs package.module:Class: {', '.join(task_names())} " \
        "(posenc list --tasks; default: the profile's)"  # fmt: skip


def _encodings_help() -> str:
    return f"comma-separated encoding names or import specs package.module:Class: {', '.join(ENCODING_GROUP.names())} " \
        "(posenc list; default: the profile's)"  # fmt: skip


def _scalings_help() -> str:
    return f"comma-separated RoPE scalings evaluated on rotary models, {benchmark_scalings.forms()}, " \
        "e.g. yarn:4,dynamic:4 (default: the profile's)"  # fmt: skip


def _split(text: str | None) -> list[str] | None:
    """Comma-separated names, each once, in order (None: the option was not given)."""
    if not text:
        return None
    return list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


#: An example of each option that takes comma-separated items, for the error about an empty one.
_ITEM_EXAMPLES = {"--variants": "combine=concat,position_warmup=200", "--schedules": "irope:2,local_global:3"}


def _items(option: str, text: str | None) -> list[str] | None:
    """Comma-separated items, none of them empty (``--variants``: '+' joins settings of one)."""
    if not text or not text.strip():
        return None
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise PosencError(f"{option} has an empty item: {text!r} (e.g. {_ITEM_EXAMPLES[option]})")
    return list(dict.fromkeys(items))


def _seeds(text: str | None) -> list[int] | None:
    parts = _split(text)
    if parts is None:
        return None
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise PosencError(f"--seeds must be comma-separated integers, got {text!r}") from None


def _kv_heads(text: str | None) -> int | str | None:
    """``--kv-heads``: an integer, else a preset name (the profile's loader checks either)."""
    if text is None:
        return None
    return int(text) if text.strip().isdecimal() else text.strip()


def _profile_options(
    *, encodings: str | None, tasks: str | None, seeds: str | None, variants: str | None,
    schedules: str | None, scalings: str | None, kv_heads: str | None, **given: Any,
) -> ProfileOptions:  # fmt: skip
    """The options that set a key of the profile, parsed; the profile's loader checks their values
    (and names the option in an error)."""
    return ProfileOptions(
        encodings=_split(encodings), tasks=_split(tasks), seeds=_seeds(seeds), kv_heads=_kv_heads(kv_heads),
        variants=_items("--variants", variants), schedules=_items("--schedules", schedules),
        scalings=_split(scalings), **given,
    )  # fmt: skip


@click.command("compare")
@click.option(
    "--profile", default="quick", show_default=True, help=" | ".join(PROFILES) + " (--list-profiles)"
)
@click.option(
    "--config",
    "config",
    default=None,
    type=click.Path(dir_okay=False),
    help="a profile file of your own (TOML, the keys of --print-config) instead of --profile",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="change one key of the profile or config (repeatable): model.d_model=128, task_train.steps=3000, "
    'encodings=\'["rope", "alibi"]\' (VALUE is a TOML value; a bare word is a string)',
)
@click.option(
    "--print-config",
    is_flag=True,
    help="print the effective config (TOML, every key, the options above applied) and exit; "
    "--config of it runs the same grid",
)
@click.option("--encodings", default=None, cls=LazyHelpOption, help_from=_encodings_help)
@click.option("--tasks", default=None, cls=LazyHelpOption, help_from=_tasks_help)
@click.option("--seeds", default=None, help="comma-separated integers (default: the profile's)")
@out_dir_option("posenc-results")
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
@click.option("--scalings", default=None, cls=LazyHelpOption, help_from=_scalings_help)
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
    "(PI, YaRN, Llama 3.1); 0 evaluates them without, marked as outside their regime (default: the profile's)",
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
@click.option(
    "--device",
    default=None,
    help=f"where runs compute: {DEVICE_FORMS} (default: the profile's, auto: CUDA, else Apple's GPU, else CPU)",
)
@click.option(
    "--precision",
    default=None,
    type=click.Choice(list(PRECISIONS)),
    help="fp32, or bf16 (forward passes under autocast to bfloat16; run ids change) (default: the profile's)",
)
@click.option(
    "--allow-changed",
    is_flag=True,
    help="resume records made with an encoding or task class that has changed since (another version, "
    "an edit of the class or of a module of its package it imports) next to new runs, instead of refusing",
)
@click.option(
    "--no-check",
    is_flag=True,
    help="train encodings and tasks from outside posenc without checking them against posenc's contract "
    "first (posenc check NAME runs it alone)",
)
@click.option(
    "--until",
    type=click.Choice(["decided"]),
    default=None,
    help="add seeds look by look (the profile's [sequential] plan) until its declared questions are decided, "
    "the plan ends or --budget would be passed; summary.json says what was decided and what was not",
)
@click.option(
    "--budget",
    default=None,
    help="with --until decided: the time it may take, e.g. 30m, 1h, 1800 (seconds): a look starts only if "
    "the time per run measured so far says it ends within it",
)
@click.option("--list-profiles", is_flag=True, help="print the profiles and exit")
@TRUST_OPTION
@FORMAT
def compare_command(
    profile, config, settings, print_config, encodings, tasks, seeds, out, executor, address, workers, threads,
    no_report, variants, schedules, scalings, kv_heads, finetune, lm_protocol, sliding_stride, retune, device, precision,
    allow_changed, no_check, until, budget, list_profiles, trust_remote_code, fmt,
):  # fmt: skip
    """Train tiny Transformers short, test them long, for each encoding.

    Every finished run is written at once to OUT/runs/ (atomic JSON records);
    rerunning the same command resumes and skips finished runs; corrupt
    records are redone. Then the summary table, OUT/summary.{csv,json},
    OUT/figures/*.png and OUT/report.html are written, and the effective config
    as OUT/config.toml (each invocation's own also under OUT/configs/).

    \b
    Examples:
      posenc compare                              # quick: about 11 min on 2 idle cores
      posenc compare --profile smoke --out /tmp/r
      posenc compare --encodings rope,alibi,nope --tasks copy,reverse
      posenc compare --encodings mine,rope,alibi,nope   # yours: an installed posenc.encodings entry point
      posenc compare --encodings mypkg.pe:MyEncoding,rope --tasks mypkg.tasks:Sort,copy
      posenc compare --profile quick --print-config > exp.toml   # then edit exp.toml
      posenc compare --config exp.toml --set model.d_model=128 --set seeds=[0,1,2,3,4]
      posenc compare --device cuda --precision bf16
      posenc compare --profile full --workers 2 --out results-full
      posenc compare --executor ray --address HEAD:6379   # a Ray cluster
      posenc compare --encodings sinusoidal,rope --variants combine=concat,position_warmup=200
      posenc compare --variants combine=concat,inject=every_layer,position_warmup=200
      posenc compare --encodings rope,nope --schedules irope:2,local_global:3
      posenc compare --encodings rope,alibi --kv-heads llama-3.1   # grouped-query, as Llama 3.1
      posenc compare --encodings rope --tasks lm --finetune 400
      posenc compare --encodings rope --scalings dynamic:4,ntk:4   # RoPE scalings on the trained models
      posenc compare --tasks lm --lm-protocol sliding --sliding-stride 32
      posenc compare --until decided --budget 30m   # seeds until quick's questions are decided

    --variants adds runs of each additive encoding that change how position is
    added (labels like sinusoidal[concat], sinusoidal[pe-warmup:200]); other
    kinds of encodings keep their default run only (a note says so).

    --schedules adds one run per per-layer schedule (posenc.schedules) for each task and
    seed, labelled by the schedule (irope:2); the model's layers count for the period.

    --kv-heads gives every model fewer key/value heads than query heads; labels get
    [kv:N] and the run ids change (a different model), other runs keep theirs.

    Every cell is a mean over seeds with a 95% t interval over seeds (the evaluation
    examples' spread added); training stops at in-distribution convergence (or the step
    cap: such runs show as n.c., a failure in the claims of papers that train for fixed
    steps); each encoding's learning rate is chosen by in-distribution validation.

    A profile may declare its primary questions ([questions]: quick compares each encoding with
    RoPE on copy past training and on the LM): they are tested as one family (Holm), shown
    above the tables, and everything else is exploratory. --until decided adds seeds look by
    look ([sequential]) until they are decided, the plan ends or --budget would be passed; it
    resumes like any run, on the same plan only.

    Every name is checked, every key of a config file, of --set and of the options above
    typed and range-checked, the device found, the precision checked against it and the
    model's memory against the device's before any run starts; a problem is one line
    naming the option or key and exits 2. Encodings and tasks from outside posenc must
    pass posenc's contract first (posenc check; --no-check skips it).
    """
    if list_profiles:
        return _list_profiles(fmt)
    ctx = click.get_current_context()
    if config is not None and ctx.get_parameter_source("profile") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give --profile NAME or --config FILE, not both")
    if print_config and config is not None:  # printed, not run: a spec only the file names is not imported
        typed = trust.specs_in([encodings, tasks, *settings])  # what the user typed is theirs
        where = f"--config {config}, printed and not run,"
        ctx.with_resource(trust.reading(where, trust_remote_code=trust_remote_code, allowed=typed))
    given = _profile_options(
        encodings=encodings, tasks=tasks, seeds=seeds, workers=workers, variants=variants, schedules=schedules,
        scalings=scalings, kv_heads=kv_heads, finetune=finetune, lm_protocol=lm_protocol, sliding_stride=sliding_stride,
        device=device, precision=precision,
    )  # fmt: skip
    prof = load_profile(config if config is not None else profile, settings, given)
    note = variants_note(prof)
    if note:
        click.echo(note, err=True)
    source = f"--config {config}" if config is not None else f"--profile {prof.name}"
    notes = [f"note: {line}" for line in prof.resolved.notes]  # said with the config or the results
    if print_config:
        for line in notes:
            click.echo(line, err=True)
        return _print_config(prof, source)
    if address and executor != "ray":
        raise click.UsageError("--address needs --executor ray")
    if address:  # Ray's own convention: ray.init reads it
        os.environ["RAY_ADDRESS"] = address
    if budget is not None and until is None:
        raise click.UsageError("--budget goes with --until decided")
    seconds = rounds.parse_budget(budget)
    output_dir(out, "--out")  # before any run: a directory that cannot take records fails now
    kwargs = dict(
        out=Path(out), executor=executor, threads=threads, show_progress=fmt == "table",
        log=(lambda msg: click.echo(msg, err=True)), retune=retune, command=_command_line(),
        allow_changed=allow_changed, check=not no_check, names={**given.flags(), "threads": "--threads"},
        outputs=functools.partial(results.write_outputs, report=not no_report, extra_outputs=_full_report),
    )  # fmt: skip
    if until == "decided":
        result = compare.compare_until_decided(
            prof, decide=results.decide_questions, budget=seconds, **kwargs
        )
    else:
        result = compare.compare(prof, **kwargs)
    _print_result(result, fmt, source)
    for line in notes:  # after the tables: why they show no declared questions
        click.echo(line, err=True)
    if result.outcome.failed:
        raise SystemExit(1)


def _list_profiles(fmt: str) -> None:
    """``--list-profiles``: each shipped profile's description (a table, or JSON with its reasons)."""
    rows = {name: _profile_row(name) for name in PROFILES}
    print_named({name: row["description"] for name, row in rows.items()}, fmt, rows)


def _print_config(prof, source: str) -> None:
    """``--print-config``: the effective config as a TOML file (every key), not run."""
    header = (
        f"posenc compare {source}: the effective config (every key; options and --set applied).\n"
        "Run it with: posenc compare --config FILE (the profile's name is the file's)."
    )
    click.echo(dump_profile(prof, header=header), nl=False)


def _command_line() -> str:
    """The command as typed, for the records (empty when not run as ``posenc``)."""
    return " ".join(["posenc", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("posenc") else ""


def _print_result(result: compare.CompareResult, fmt: str, source: str) -> None:
    """The summary: JSON, or one table per task with the caption and the notes."""
    if fmt == "json":
        payload = {**result.to_dict(), "summary": json.loads(results.to_json(result.summary))}
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    # a task's 11 columns of mean [interval]; labels hold [...]: data, not markup
    console = Console(width=max(140, Console().width), markup=False)
    if result.summary.get("primary"):
        console.print(
            primary_table.render(
                result.summary["primary"], title=f"posenc compare {source}: primary questions"
            )
        )
    for table in results.render_tables(result.summary, title=f"posenc compare {source}"):
        console.print(table)
    console.print(results.tables.caption(result.summary, per_task=True))
    for line in result.notes():
        console.print(line)


def _profile_row(name: str) -> dict[str, str]:
    """A shipped profile's description (one that cannot be read here, e.g. naming a broken task
    plug-in, says why instead)."""
    try:
        prof = PROFILES[name]
    except PosencError as exc:
        return {"description": f"(cannot be read here: {exc})", "why": ""}
    return {"description": prof.description, "why": prof.why}


def _full_report(out: Path) -> dict[str, str]:
    """The full report next to the benchmark's own page (``posenc.report.benchmark_report``), of the
    grid this command has just run (so its encodings are the user's own choice)."""
    return {"full_report": str(report.benchmark_report(out, trust_remote_code=True))}


COMMANDS = [compare_command]
