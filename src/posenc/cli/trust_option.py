"""The command line's one opt-in to code named by data (:mod:`posenc.core.trust`).

``--trust-remote-code`` on every command that may import code a file names: ``posenc plot --run``,
``posenc probe --run`` (a run record naming its encoding or task by import spec) and
``posenc compare --config FILE --print-config`` (a config file being printed, not run).
"""

from __future__ import annotations

import click

from posenc.core import trust

TRUST_OPTION = click.option(
    trust.OPTION,
    "trust_remote_code",
    is_flag=True,
    help="import the encodings and tasks that a record or config names by import spec "
    "(package.module:Class): code its author chose, so only for files from someone you trust "
    "(posenc's own, registered and installed ones need no flag)",
)
