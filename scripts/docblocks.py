"""Generated blocks in the docs: the text between ``<!-- NAME:start -->`` and
``<!-- NAME:end -->`` is rewritten by the scripts next to this file, never typed."""

from __future__ import annotations

import shlex
from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def splice(text: str, name: str, body: str, path: Path) -> str:
    """``text`` with the block ``name`` replaced by ``body``; exits naming ``path`` unless
    the file has exactly one start marker followed by one end marker."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{path}: expected one {start} followed by one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{body}{end}{tail}"


def shown_command(command: str) -> str:
    """``command`` as the docs show it: an absolute ``--out`` (``-o``) directory by its last component
    (where a run wrote its records is the machine's business, not the reader's)."""
    words = shlex.split(command)
    for i, word in enumerate(words[:-1]):
        if word in ("--out", "-o") and Path(words[i + 1]).is_absolute():
            words[i + 1] = Path(words[i + 1]).name
    return shlex.join(words)
