"""Files that readers can trust: atomic writes, temp files of killed writers, bounded reads.

A file is written once: temp file in the same directory (named after the host and pid of
its writer), ``flush`` + ``fsync``, ``os.replace`` (atomic on POSIX and Windows), then
``fsync`` of the directory. A crash or SIGKILL therefore leaves either the complete previous
file or the complete new one, never half a file under the final name; a temp file is
removed only when its writer is gone (or the file is a day old).
"""

from __future__ import annotations

import errno
import functools
import gzip
import hashlib
import json
import os
import re
import socket
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from posenc.core import untrusted
from posenc.core.untrusted import open_regular

MAX_RECORD_BYTES = 64 << 20  # a record is ~10-500 KB; anything this large is not one of ours
MAX_RECORD_DEPTH = 64  # a record nests ~8 levels (result.eval.VARIANT.per_example.KEY[length][example])
STALE_TEMP_SECONDS = 24 * 3600  # a temp file this old is abandoned, whoever wrote it
HOST = socket.gethostname().replace("~", "-").replace("/", "-") or "host"


@functools.cache
def _umask() -> int:
    """The process umask, read on first use (never at import: importing changes no global state).

    Linux reports it in /proc/self/status; elsewhere the only way to read it is to set it
    and set it back, which is done once, here, when the first record is written.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one (see
    :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    The temp file ``.NAME~HOST~PID~RANDOM.tmp`` names its writer, so that cleaning up
    after a killed writer never removes the file a live one is writing
    (:func:`stale_temp_file`). An OSError names ``path`` (a full disk fails in ``write`` or
    ``fsync``, whose errors name no file).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}~{HOST}~{os.getpid()}~"
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if hasattr(os, "fchmod"):  # mkstemp makes 0600 files; results are meant to be shared
                os.fchmod(handle.fileno(), 0o666 & ~_umask())
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def stale_temp_file(path: Path, *, now: float | None = None) -> bool:
    """True if the temp file ``path`` was left by a writer that is gone.

    Its name says which host and pid wrote it: on this host, a pid that no longer
    exists means the writer was killed mid-write. A file from another host (a shared
    filesystem) or without a writer in its name is stale only once it is
    :data:`STALE_TEMP_SECONDS` old (a write takes milliseconds).
    """
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if age > STALE_TEMP_SECONDS:
        return True
    parts = path.name[: -len(".tmp")].rsplit("~", 3)
    if len(parts) != 4 or parts[1] != HOST or not parts[2].isdigit():
        return False
    return not _pid_alive(int(parts[2]))


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists but is not ours, or we cannot tell: keep its file
        return True
    return True


def read_record_file(path: Path) -> tuple[Any, str | None]:
    """``(parsed JSON, None)`` or ``(None, why it cannot be read)``; never reads more than
    :data:`MAX_RECORD_BYTES` (a huge or endless file is refused, not loaded) and reads regular
    files only (:func:`open_regular`). A ``.gz`` file (a record as the published benchmark
    tables ship it) is decompressed, never past :data:`MAX_RECORD_BYTES` either."""
    try:
        with open_regular(path) as handle:
            if path.name.endswith(".gz"):
                with gzip.GzipFile(fileobj=handle, mode="rb") as unpacked:
                    raw = unpacked.read(MAX_RECORD_BYTES + 1)
            else:
                raw = handle.read(MAX_RECORD_BYTES + 1)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        return None, f"not a readable gzip file ({type(exc).__name__})"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or type(exc).__name__})"
    return parse_record(raw)


def parse_record(raw: bytes) -> tuple[Any, str | None]:
    """``(parsed JSON, None)`` of a record's bytes (read up to ``MAX_RECORD_BYTES + 1``), or
    ``(None, why not)``: too large, nested deeper than :data:`MAX_RECORD_DEPTH` (checked before
    parsing: Python's parser recurses per level), not UTF-8, not JSON (a number of more digits
    than Python converts included)."""
    if len(raw) > MAX_RECORD_BYTES:
        return None, f"larger than {MAX_RECORD_BYTES >> 20} MiB"
    try:
        return untrusted.loads(raw.decode("utf-8"), max_depth=MAX_RECORD_DEPTH), None
    except untrusted.TooDeep as exc:
        return None, f"{exc}: not a record"
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"unreadable JSON ({type(exc).__name__})"
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        return None, "unreadable JSON (a number of more digits than Python reads)"


def file_sha256(path: Path, *, size: int) -> str:
    """SHA-256 of the regular file ``path``, which must hold exactly ``size`` bytes: checked before
    reading, and never more than ``size`` bytes read (OSError otherwise)."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        actual = os.fstat(handle.fileno()).st_size
        if actual != size:
            raise OSError(errno.EINVAL, f"holds {actual} bytes, the record says {size}", str(path))
        left = size
        while left:
            block = handle.read(min(left, 1 << 20))
            if not block:
                break
            digest.update(block)
            left -= len(block)
        if left or handle.read(1):
            raise OSError(errno.EINVAL, "changed while it was read", str(path))
    return digest.hexdigest()


_UNSAFE = re.compile(r"[\\/\x00-\x1f\x7f]")
MAX_NAME_CHARS = 120  # of a file name made from data (most file systems allow 255 bytes)


def safe_name(text: str) -> str:
    """``text`` (a task, an encoding, a label: data) as one file name that stays in its directory:
    path separators and control characters become ``_``, a leading ``.`` too (no ``..``, no hidden
    file), an empty name is ``_``, and a long one is cut, with a hash of the whole to keep it unique.
    posenc's own names come back unchanged."""
    name = _UNSAFE.sub("_", text)
    if name.startswith("."):
        name = "_" + name[1:]
    if len(name) > MAX_NAME_CHARS:
        name = name[: MAX_NAME_CHARS - 17] + "-" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return name or "_"
