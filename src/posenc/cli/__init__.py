"""The ``posenc`` command line: thin wrappers over the library.

Each command group lives in its own module and registers itself on ``main``.
Library errors (ValueError/TypeError) print one line and exit 2, no traceback.
"""

from __future__ import annotations

import sys

import click


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (ValueError, TypeError, FileNotFoundError) as exc:
            click.echo(f"posenc: error: {exc}", err=True)
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


def _register() -> None:
    # One module per command group; each defines click commands and adds them here.
    from posenc.cli import catalog, compare, plot, report, rope
    from posenc.cli import presets

    # add command-group modules to this tuple (one line each)
    modules = (
        catalog,
        compare,
        rope,
        plot,
        report,
        presets,
    )
    for module in modules:
        for command in module.COMMANDS:
            main.add_command(command)


_register()
