"""Options more than one command takes, written once: ``--format`` (:data:`FORMAT`) and options
whose help is written when it is shown (:class:`LazyHelpOption`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

#: ``--format table|json`` (a rich table, or JSON on stdout), as the parameter ``fmt``.
FORMAT = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)


class LazyHelpOption(click.Option):
    """An option whose help is written when it is shown, by ``help_from()``: from the registries
    (so an installed task or encoding is listed) or the shipped files, and nothing is imported or
    read to start the command line."""

    def __init__(self, *args: Any, help_from: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help_from = help_from

    def get_help_record(self, ctx: click.Context):
        self.help = self.help_from()
        return super().get_help_record(ctx)
