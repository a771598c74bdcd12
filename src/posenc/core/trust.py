"""Consent to run code named by data: results directories, run records, configs being printed.

posenc takes outside code by name: an import spec ``"package.module:Class"`` wherever an encoding
or task name is taken. Typed by the user (``posenc compare --encodings mypkg.pe:Mine``,
``posenc.build("mypkg.pe:Mine")``), a spec is the user's own choice. Found in a file the user is
only *reading* (a run record, a results directory, a config printed with ``--print-config``), it
is not: importing it would run whatever the file's author named, as in transformers'
``trust_remote_code``. So while posenc reads such data (:func:`reading`), an import spec is
refused unless the user opts in, with one line naming the spec, where it was found and the
opt-in: the command-line flag :data:`OPTION` or the Python keyword :data:`KEYWORD`.

What needs no consent: posenc's own encodings and tasks, names registered in this process
(``posenc.register``: the user's own code did that), the entry points of installed distributions
(``posenc.encodings`` / ``posenc.tasks``: the user installed them), and a spec whose module this
process has already imported (no new code runs: a notebook that trained ``mypkg.pe:Mine`` loads
its runs). Whatever reads records only to tabulate them imports nothing at all
(docs/guarantees.md, "Threat model").
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.machinery
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from posenc.core.errors import PosencError

#: The command-line flag that lets code named by data be imported.
OPTION = "--trust-remote-code"
#: The Python keyword that does the same.
KEYWORD = "trust_remote_code"


class UntrustedCodeError(PosencError):
    """Data names code (an import spec) that the user has not agreed to run."""


@dataclass(frozen=True)
class _Reading:
    source: str  # what is being read, for messages: "run record PATH", "--config FILE"
    allowed: frozenset[str]  # import specs the user gave elsewhere (their own command line)


_reading: contextvars.ContextVar[_Reading | None] = contextvars.ContextVar("posenc_reading", default=None)


@contextlib.contextmanager
def reading(source: str, *, trust_remote_code: bool = False, allowed: Iterable[str] = ()) -> Iterator[None]:
    """While the block runs, an import spec that is not in ``allowed`` is refused
    (:func:`check_import`) unless ``trust_remote_code``; ``source`` names the data in the message."""
    if trust_remote_code:
        yield
        return
    token = _reading.set(_Reading(source, frozenset(allowed)))
    try:
        yield
    finally:
        _reading.reset(token)


def check_import(spec: str, noun: str) -> None:
    """Raise :class:`UntrustedCodeError` if ``spec`` (an import spec about to be imported) comes from
    data being read without consent; called by :func:`posenc.core.plugins.import_object`."""
    state = _reading.get()
    if state is None or spec in state.allowed or spec.partition(":")[0] in sys.modules:
        return  # not reading data, the user's own spec, or a module this process has imported already
    raise refusal(state.source, f"{noun} {spec!r}")


def refusal(source: str, what: str) -> UntrustedCodeError:
    """The one-line refusal: ``source`` names ``what`` (code), and how to agree to run it."""
    return UntrustedCodeError(
        f"{source} names {what}, code that is neither part of posenc nor an installed entry point; "
        f"posenc runs code named by data only if you trust its author: pass {OPTION} "
        f"(Python: {KEYWORD}=True)"
    )


_SPEC_TOKEN = re.compile(r"[A-Za-z0-9_.]+:[A-Za-z0-9_.]+")


def specs_in(texts: Iterable[str | None]) -> tuple[str, ...]:
    """The import specs written in ``texts`` (what the user typed: option values, ``--set`` lines)."""
    return tuple(match for text in texts if text for match in _SPEC_TOKEN.findall(text))


def module_inside(module: str, root: str | Path) -> Path | None:
    """The file of top-level module ``module`` if Python would import it from inside ``root``
    (a module planted in a data directory that is on ``sys.path``, e.g. the working directory of an
    interactive session), else None. Finds the file without importing anything."""
    top = module.partition(".")[0]
    if not top or top in sys.modules:  # imported already: importing it again runs nothing
        return None
    try:
        found = importlib.machinery.PathFinder.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    places = [found.origin] if found.origin else list(found.submodule_search_locations or ())
    base = Path(root).resolve()
    for place in places:
        path = Path(place).resolve()
        if path == base or base in path.parents:
            return path
    return None
