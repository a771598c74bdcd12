"""The one exception family posenc raises for bad input.

:class:`PosencError` is a ``ValueError``: code that catches ``ValueError`` keeps
working. :class:`PosencTypeError` (an argument of the wrong type) is both a
``PosencError`` and a ``TypeError``. The ``posenc`` command turns these, and only
these, into a one-line message and exit status 2; any other exception is a bug and
keeps its traceback.
"""

from __future__ import annotations


class PosencError(ValueError):
    """Invalid input: the message names the parameter and the valid range."""


class PosencTypeError(PosencError, TypeError):
    """An argument of the wrong type (also a ``TypeError``)."""


__all__ = ["PosencError", "PosencTypeError"]
