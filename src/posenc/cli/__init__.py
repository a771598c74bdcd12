"""The ``posenc`` command line: thin wrappers over the library.

Each command group lives in its own module and registers itself on ``main``.
Invalid input (:class:`posenc.core.errors.PosencError`, click usage errors) and filesystem
errors (OSError: a path that cannot be read or written, worded by
:func:`posenc.cli.paths.os_error_message`) print one line and exit 2; Ctrl-C prints one line
and exits 130 (128 + SIGINT, as shells report it); any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import os
import sys

try:
    import click
    import rich  # noqa: F401  (every command prints with it)
except ImportError as exc:  # the bare library install has no command-line dependencies
    raise SystemExit(
        f"posenc: the command line needs the 'cli' extra ({exc.name} is missing): pip install 'posenc[cli]'"
    ) from None

from posenc.cli import (
    catalog_command,
    check_command,
    compare_command,
    conform_command,
    extend_command,
    notes_command,
    plot_command,
    presets_command,
    probe_command,
    report_command,
    rope_command,
)
from posenc.cli.paths import os_error_message
from posenc.core.errors import PosencError


class _OneLineUsageError(click.UsageError):
    """A click usage error shown as one line (``posenc: error: ...``), like library errors."""

    def show(self, file=None) -> None:
        hint = f" (try '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        message = " ".join(self.format_message().split())  # Choice lists span several lines
        click.echo(f"posenc: error: {message}{hint}", err=True)


def _one_line(exc: click.UsageError) -> click.UsageError:
    ctx = exc.ctx
    if isinstance(exc, click.exceptions.NoArgsIsHelpError) and ctx and isinstance(ctx.command, click.Group):
        # a bare group (`posenc`, `posenc rope`): name the commands, not the whole help
        names = ", ".join(sorted(ctx.command.commands))
        return _OneLineUsageError(f"missing command: one of {names}", ctx)
    return _OneLineUsageError(exc.format_message(), ctx)


class _Group(click.Group):
    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:  # e.g. `posenc --bogus`
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # unknown command, bad option value, missing argument
            raise _one_line(exc) from None
        except PosencError as exc:
            click.echo(f"posenc: error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C: the shell's convention, 128 + SIGINT (finished records are kept)
            click.echo("\nposenc: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:  # `posenc list | head -1`: the reader has what it wanted
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # nothing more to flush into the closed pipe at exit
            sys.exit(1)
        except OSError as exc:  # a path that cannot be read or written, a Ray head not there, ...
            click.echo(f"posenc: error: {os_error_message(exc)}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="posenc")
def main() -> None:
    """posenc: positional encodings for Transformers, checked and compared.

    \b
    Examples:
      posenc list
      posenc show sinusoidal --positions 4 --dim 8
    """


# One module per command group, each with its click commands in COMMANDS (one line each here).
for _module in (
    catalog_command, check_command, compare_command, extend_command, rope_command, conform_command, plot_command,
    probe_command, report_command, presets_command, notes_command,
):  # fmt: skip
    for _command in _module.COMMANDS:
        main.add_command(_command)
