"""Rules every ``posenc`` command keeps: one spelling for where output goes, a quiet exit into a
closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from posenc.cli import main


def _writers() -> dict[str, click.Option]:
    """``{command: its output option}`` for every command (and sub-command) that writes files."""
    found: dict[str, click.Option] = {}

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}".strip())
            return
        for param in command.params:
            if isinstance(param, click.Option) and {"--out", "--output"} & set(param.opts):
                found[path] = param

    walk(main, "")
    return found


def test_every_command_that_writes_takes_o_and_out():
    """`-o DIR` / `--out DIR` work wherever output goes (compare, extend, report, plot, ...), so a
    user who learnt one command's spelling is not refused by the next."""
    writers = _writers()
    assert {"compare", "extend", "report", "plot"} <= set(writers), sorted(writers)
    wrong = {name: option.opts for name, option in writers.items() if not {"-o", "--out"} <= set(option.opts)}
    assert not wrong, wrong


def test_a_reader_that_stops_early_gets_no_error_line():
    """`posenc extend --list-protocols | head -c 1`: the pipe closes before posenc writes; posenc
    stops quietly (exit 1, as Python's docs advise), with no "error" line and no traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from posenc.cli import main; main()", "extend", "--list-protocols"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert proc.returncode == 1
    assert proc.stderr == "", proc.stderr


def _commands() -> dict[str, click.Command]:
    """``{command path: command}`` for every command and sub-command of ``posenc``."""
    found: dict[str, click.Command] = {}

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}".strip())
            return
        found[path] = command

    walk(main, "")
    return found


#: Command modules that still spell ``--format`` out instead of taking ``posenc.cli.options.FORMAT``.
OWN_FORMAT = {"extend_command.py"}


def test_format_is_one_option_written_once():
    """``--format table|json`` means the same in every command that takes it, and is written once,
    in posenc.cli.options (not copied into each command's module)."""
    from posenc.cli import options

    formats = {
        path: param
        for path, command in _commands().items()
        for param in command.params
        if isinstance(param, click.Option) and "--format" in param.opts
    }
    assert {"list", "show", "check", "compare", "notes", "build", "probe", "rope inspect"} <= set(formats), (
        sorted(formats)
    )
    for path, param in formats.items():
        assert isinstance(param.type, click.Choice), path
        assert (param.name, list(param.type.choices), param.default) == ("fmt", ["table", "json"], "table"), (
            path
        )
    cli = Path(options.__file__).parent
    spelled = sorted(p.name for p in cli.glob("*.py") if '"--format"' in p.read_text(encoding="utf-8"))
    assert spelled == sorted({"options.py", *OWN_FORMAT}), spelled


def test_command_modules_follow_the_naming_rule():
    """A module of posenc.cli that adds commands ends in ``_command`` (a basename no other module of
    posenc has, as the library's rule asks); the helpers beside them are named for what they hold."""
    import posenc.cli as cli

    helpers = {"__init__", "options", "paths", "trust_option"}
    adds = {
        path.stem
        for path in Path(cli.__file__).parent.glob("*.py")
        if path.stem not in helpers and "COMMANDS = [" in path.read_text(encoding="utf-8")
    }
    assert len(adds) >= 11, sorted(adds)
    wrong = sorted(name for name in adds if not name.endswith("_command"))
    assert not wrong, wrong
