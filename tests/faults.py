"""Real filesystem faults for CLI tests: a directory this process cannot write to.

``chmod`` does not stop root, so for root the directory is made immutable
(``chattr +i``, which stops root too); for other users ``chmod 0555`` is enough. If
neither works here (e.g. a filesystem without the immutable attribute), ``/sys`` is
used: sysfs lets nobody create files. Each candidate is checked by really trying to
create a file in it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _writable(path: Path) -> bool:
    try:
        fd, probe = tempfile.mkstemp(dir=path)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


@contextlib.contextmanager
def unwritable_directory(path: Path) -> Iterator[Path]:
    """``path`` (an existing directory) made unwritable for the duration, or ``/sys``."""
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        path.chmod(0o555)
        try:
            if not _writable(path):
                yield path
                return
        finally:
            path.chmod(0o755)
    chattr = shutil.which("chattr")
    if chattr and subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode == 0:
        try:
            if not _writable(path):
                yield path
                return
        finally:
            subprocess.run([chattr, "-i", str(path)], capture_output=True)
    sysfs = Path("/sys")
    if sysfs.is_dir() and not _writable(sysfs):
        yield sysfs
        return
    raise RuntimeError("no way to make an unwritable directory on this machine (chmod, chattr +i, /sys)")


def can_make_unwritable(path: Path) -> bool:
    """Whether :func:`unwritable_directory` can make ``path`` itself (not ``/sys``) unwritable."""
    try:
        with unwritable_directory(path) as got:
            return got == path
    except RuntimeError:
        return False


# Faults a path option can be given, by what the command does with the path.
FAULTS = {
    "read file": ("missing", "directory", "under a file", "too long", "huge"),
    "read directory": ("missing", "regular file", "under a file", "too long", "device"),
    "write directory": ("regular file", "under a file", "unwritable", "too long", "device"),
    "write file": ("directory", "under a file", "unwritable", "too long"),
}
LONG_NAME = "n" * 300  # past NAME_MAX (255 bytes) of every common file system


def fault_path(fault: str, role: str, tmp, unwritable) -> str:
    """A path with ``fault`` for an option of ``role`` (a key of :data:`FAULTS`)."""
    suffix = ".png" if role == "write file" else ".json" if role == "read file" else ""
    regular = tmp / "a-regular-file"
    regular.write_text("{}")
    return str(
        {
            "missing": tmp / "no-such-directory" / f"x{suffix}",
            "directory": tmp,
            "regular file": regular,
            "under a file": regular / f"x{suffix}",
            "unwritable": unwritable if role == "write directory" else unwritable / f"x{suffix}",
            "too long": tmp / f"{LONG_NAME}{suffix}",
            "huge": "/dev/zero",  # endless: a reader without a size cap never returns
            "device": "/dev/zero",
        }[fault]
    )
