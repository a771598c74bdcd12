"""Files posenc did not write: opened only when they are regular files, JSON parsed only after its
nesting is bounded.

:func:`open_regular` opens a path without blocking and refuses what is not a regular file (a FIFO
would block ``open`` until a writer came, ``/dev/zero`` never ends). Python's :func:`json.loads` recurses once per level of nested lists and objects and has no depth
limit of its own: a file of 200,000 ``[`` raises ``RecursionError`` (or, with a raised recursion
limit, overflows the C stack). :func:`nesting` measures how deep a text nests without parsing it
(string contents left out, every step in C or NumPy: a 64 MiB record takes well under a second),
so a reader can refuse a file before :func:`json.loads` sees it; :func:`loads` does both.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from typing import Any, BinaryIO

import numpy as np


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file (after symlinks); a FIFO, a device
    or a directory raises OSError "not a regular file" at once. ``os.stat`` says so before any open
    (opening some devices acts: a watchdog starts its timer), and the file opened without blocking
    is checked again (it may have been replaced in between)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def what_is(path: str | os.PathLike) -> str:
    """What ``path`` is, in words, for an error that refuses it as a file: ``no such file``, ``a
    directory``, ``a character device``, ``a FIFO (named pipe)``, ``a symbolic link to '/dev/zero',
    a character device``, ``a symbolic link to 'x', which does not exist``, ``a symbolic link that
    loops`` (never opens it)."""
    try:
        link = os.lstat(path)
    except OSError as exc:
        return "no such file" if exc.errno == errno.ENOENT else f"unreadable ({exc.strerror})"
    prefix = ""
    if stat.S_ISLNK(link.st_mode):
        prefix = f"a symbolic link to {os.readlink(os.fspath(path))!r}, "
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "a symbolic link that loops (it leads back to itself)"
            return (
                f"{prefix}which does not exist"
                if exc.errno == errno.ENOENT
                else f"{prefix}unreadable ({exc.strerror})"
            )
    else:
        mode = link.st_mode
    kind = next((name for test, name in _KINDS if test(mode)), "a regular file")
    return f"{prefix}{kind}"


def looks_local(path: str | os.PathLike) -> bool:
    """Whether ``path`` names something on this machine, even a link that leads nowhere (a dangling
    or looping symbolic link): what exists as a name here is never taken for a hub model id."""
    try:
        os.lstat(path)
    except OSError:
        return False
    return True


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, escapes included
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BLOCK = 1 << 20


def nesting(text: str | bytes) -> int:
    """How deep the lists and objects of JSON ``text`` nest (``[]`` is 1, ``[{}]`` 2); brackets
    inside strings do not count. For text that is not JSON the count is of its brackets outside
    anything that looks like a string (an unbalanced text may count too deep or too shallow; it
    fails to parse either way)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    deepest, level = 0, 0
    for start in range(0, len(brackets), _BLOCK):
        codes = np.frombuffer(
            brackets, dtype=np.uint8, count=min(_BLOCK, len(brackets) - start), offset=start
        )
        steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)
        levels = np.cumsum(steps) + level
        deepest = max(deepest, int(levels.max()))
        level = int(levels[-1])
    return deepest


class TooDeep(ValueError):
    """JSON that nests deeper than a reader allows (raised before it is parsed)."""

    def __init__(self, depth: int, limit: int) -> None:
        super().__init__(f"nests lists or objects {depth} deep, more than {limit}")
        self.depth = depth
        self.limit = limit


def loads(text: str | bytes, *, max_depth: int) -> Any:
    """:func:`json.loads` of ``text`` after checking that it nests at most ``max_depth`` deep
    (:class:`TooDeep` otherwise, a ``ValueError``); a ``RecursionError`` that still escapes the
    parser (a recursion limit set very low) is a :class:`TooDeep` too."""
    depth = nesting(text)
    if depth > max_depth:
        raise TooDeep(depth, max_depth)
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep(depth, max_depth) from None


__all__ = ["TooDeep", "loads", "looks_local", "nesting", "open_regular", "what_is"]
