"""Rules every ``posenc`` command keeps: one spelling for where output goes, a quiet exit into a
closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys

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
