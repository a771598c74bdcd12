"""Filesystem checks and messages for the CLI, in one place.

Every command that writes a path checks it with :func:`output_dir` or
:func:`output_file` *before* its work (a report that takes a minute must not fail at
its last step), and every :class:`OSError` that still escapes a command is turned
into the CLI's one line by :func:`os_error_message` (``posenc: error: ...``, exit 2;
see :mod:`posenc.cli`). Paths that are read are checked by click itself
(``click.Path(exists=True, ...)``); sizes are capped where the file is read.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import click

# What the OS's own words ("Not a directory", ...) leave unsaid, per errno.
_HINTS = {
    errno.ENOTDIR: "a parent of it is a file, not a directory",
    errno.EEXIST: "it exists and is not a directory",
    errno.EACCES: "not writable or readable by this user",
    errno.EPERM: "the directory may be immutable or protected",
    errno.EROFS: "a read-only file system",
    errno.ENAMETOOLONG: "a name in the path is longer than the file system allows, often 255 bytes",
    errno.ENOSPC: "the disk is full",
    errno.ENXIO: "a device or pipe that cannot be written",
}


class PathProblem(OSError):
    """An OSError about a path given as ``option`` on the command line."""

    def __init__(self, option: str, path: str | os.PathLike, code: int, reason: str | None = None) -> None:
        super().__init__(code, reason or os.strerror(code), os.fspath(path))
        self.option = option


def os_error_message(exc: OSError) -> str:
    """One line naming the option and path (if known), the OS's reason and what it means."""
    reason = exc.strerror or str(exc)
    if exc.errno in _HINTS and reason == os.strerror(exc.errno):  # the OS's own words: say what they mean
        reason = f"{reason} ({_HINTS[exc.errno]})"
    if exc.filename is None:
        return reason
    where = repr(os.fsdecode(exc.filename))
    if exc.filename2 is not None:
        where += f" -> {os.fsdecode(exc.filename2)!r}"
    option = getattr(exc, "option", None)
    return f"{option} {where}: {reason}" if option else f"{where}: {reason}"


def input_dir(path: str | os.PathLike, option: str) -> Path:
    """An existing directory to read (click's ``exists=True, file_okay=False`` lets devices through)."""
    path = Path(path)
    if not path.is_dir():
        raise PathProblem(option, path, errno.ENOTDIR, "is not a directory")
    return path


def output_dir(path: str | os.PathLike, option: str) -> Path:
    """Create directory ``path`` (and its parents) and check a file can be created in it.

    Raises :class:`PathProblem` (an OSError) naming ``option`` and the path: under a
    regular file, not a directory, read-only, immutable, a name too long, ...
    """
    path = Path(path)
    _check_parents(path, option)
    try:
        if path.exists() and not path.is_dir():
            raise PathProblem(option, path, errno.ENOTDIR, "exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
    except PathProblem:
        raise
    except OSError as exc:
        raise PathProblem(option, path, exc.errno or errno.EIO, _cannot("create it", exc)) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".posenc-probe-", suffix=".tmp", dir=path)
    except OSError as exc:
        raise PathProblem(option, path, exc.errno or errno.EIO, _cannot("create files in it", exc)) from None
    os.close(fd)
    os.unlink(probe)
    return path


def output_file(path: str | os.PathLike, option: str) -> Path:
    """Check that file ``path`` can be written (its directory is created if missing).

    The file is opened for writing without truncating it (and removed again if it did
    not exist), so everything the real write would meet is met now: a directory in its
    place, a parent that is a file, a read-only or immutable directory, a name too long.
    """
    text = os.fspath(path)
    path = Path(text)
    if not text or path.name in ("", ".", ".."):
        raise PathProblem(option, text, errno.EINVAL, "needs a file name")
    _check_parents(path, option)
    try:
        if path.is_dir():
            raise PathProblem(option, path, errno.EISDIR, "is a directory; give a file name")
        existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
    except PathProblem:
        raise
    except OSError as exc:
        raise PathProblem(option, path, exc.errno or errno.EIO, _cannot("write it", exc)) from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        raise PathProblem(option, path, exc.errno or errno.EIO, _cannot("write it", exc)) from None
    os.close(fd)
    if not existed:
        path.unlink(missing_ok=True)
    return path


def _check_parents(path: Path, option: str) -> None:
    """A parent that exists but is a file (``out.png/x``): say so, not "File exists"."""
    for parent in path.parents:
        try:
            exists, is_dir = parent.exists(), parent.is_dir()
        except OSError:  # e.g. a name too long: the real attempt reports it
            return
        if exists and not is_dir:
            reason = f"its parent {os.fspath(parent)!r} is a file, not a directory"
            raise PathProblem(option, path, errno.ENOTDIR, reason)
        if exists:
            return


def _cannot(what: str, exc: OSError) -> str:
    reason = exc.strerror or type(exc).__name__
    hint = _HINTS.get(exc.errno) if exc.errno is not None else None
    return f"cannot {what}: {reason}" + (f" ({hint})" if hint else "")


def out_dir_option(default: str | None, *more_names: str, dest: str = "out", **kwargs):
    """The option of a command that writes into a directory, spelt ``-o`` / ``--out`` by every such
    command (``more_names``: older spellings kept, e.g. ``--output``)."""
    if default is not None:  # (an explicit default=None would count as a value given)
        kwargs.update(default=default, show_default=True)
    return click.option(
        "-o", "--out", *more_names, dest, type=click.Path(file_okay=False, writable=True), **kwargs
    )
