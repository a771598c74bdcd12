"""``posenc check SPEC``: the contract every built-in encoding (or task) passes, run on any one.

Thin: :func:`posenc.testing.check_encoding` (or :func:`~posenc.testing.check_task` when SPEC is a
task) runs the properties; this prints one row per property (or JSON) and exits 1 when one fails.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from posenc.cli.options import FORMAT
from posenc.core.errors import PosencError
from posenc.core.plugins import import_object, is_spec
from posenc.registry import GROUP as ENCODING_GROUP
from posenc.tasks.task_registry import GROUP as TASK_GROUP
from posenc.tasks.task_registry import LM, Task
from posenc.testing import PROPERTIES, TASK_PROPERTIES, check_encoding, check_task


def _config(items: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a VALUE that parses as JSON (numbers, true, null, lists) is that value."""
    config: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise PosencError(f"--config takes KEY=VALUE (e.g. base=500.0), got {item!r}")
        try:
            config[key] = json.loads(text)
        except json.JSONDecodeError:
            config[key] = text
    return config


def is_task(spec: str, force: bool) -> bool:
    """Whether SPEC names a task (else an encoding): ``--task``, an import spec of a Task class, or
    a name only the task registry has (a name in both registries needs ``--task`` for the task)."""
    if force:
        return True
    if is_spec(spec):
        obj = import_object(spec, "spec")
        return isinstance(obj, type) and issubclass(obj, Task)
    return spec == LM or (spec in TASK_GROUP.names() and spec not in ENCODING_GROUP.names())


@click.command("check")
@click.argument("spec")
@click.option("--task", "force_task", is_flag=True, help="SPEC is a task (when a name is both)")
@click.option(
    "--property", "properties", multiple=True, type=click.Choice(list(dict.fromkeys([*PROPERTIES, *TASK_PROPERTIES]))),
    help="run only this property (repeatable); default: all",
)  # fmt: skip
@click.option(
    "--config",
    "config",
    multiple=True,
    metavar="KEY=VALUE",
    help="a Config field of the encoding (repeatable)",
)
@click.option("--d-model", default=16, show_default=True, help="width of the small model it is built for")
@click.option("--num-heads", default=2, show_default=True, help="attention heads of that model")
@FORMAT
def check_command(
    spec: str,
    force_task: bool,
    properties: tuple[str, ...],
    config: tuple[str, ...],
    d_model: int,
    num_heads: int,
    fmt: str,
) -> None:
    """Check an encoding against posenc's contract: every output's shape and dtype against its
    input's (a rotary's in both tensor layouts), positions (offsets, padding, packing),
    KV-cache decoding, grouped-query attention, relative-position invariance and every other
    capability it declares, gradients, its NumPy reference if it has one, and
    torch.compile(fullgraph=True).
    Or a task of posenc compare against the task protocol: what it declares, its examples
    (token ids, lengths), determinism from the generator, rows growing with n, batches and
    scoring.

    SPEC is a registry name or an import spec package.module:Class. Exits 1 if a property fails.

    \b
    Examples:
      posenc check rope
      posenc check mypkg.pe:MyEncoding --config base=500.0
      posenc check alibi --property kv_cache --format json
      posenc check mypkg.tasks:Sort             # a task
      posenc check passkey
    """
    if is_task(spec, force_task):
        if config or d_model != 16 or num_heads != 2:
            raise PosencError("--config, --d-model and --num-heads are for encodings; a task has none")
        bad = [p for p in properties if p not in TASK_PROPERTIES]
        if bad:
            raise PosencError(f"--property {bad[0]} is an encoding's; a task's: {', '.join(TASK_PROPERTIES)}")
        report = check_task(spec, properties=properties or None)
    else:
        bad = [p for p in properties if p not in PROPERTIES]
        if bad:
            raise PosencError(f"--property {bad[0]} is a task's; an encoding's: {', '.join(PROPERTIES)}")
        report = check_encoding(
            spec, properties=properties or None, d_model=d_model, num_heads=num_heads, **_config(config)
        )
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=1))
    else:
        table = Table(title=f"posenc check {spec} ({report.kind})")
        for column in ("property", "result", "max |diff|", "tolerance", "what"):
            table.add_column(column, justify="right" if column in ("max |diff|", "tolerance") else "left")
        for result in report.results:
            style = {"PASS": "green", "FAIL": "bold red", "SKIP": "dim"}[result.status]
            numbers = [result.numbers.get(k) for k in ("max_abs_diff", "tolerance")]
            cells = ["—" if v is None else f"{v:.3g}" for v in numbers]
            table.add_row(result.name, f"[{style}]{result.status}[/{style}]", *cells, result.detail)
        Console(width=140).print(table)
        counts = {s: sum(r.status == s for r in report.results) for s in ("PASS", "FAIL", "SKIP")}
        click.echo(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} not applicable")
    if not report.passed:
        raise SystemExit(1)


COMMANDS = [check_command]
