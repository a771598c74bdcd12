"""Build and load the package's small C kernels (gcc + OpenMP, loaded with ctypes).

Why not ``torch.utils.cpp_extension``: the kernels only need raw pointers and strides,
so they are plain C with no torch headers. That compiles in about a second instead of
a minute, needs no ninja, and a failure costs nothing but the fast path.

The shared library is cached under ``$POSENC_CACHE_DIR`` (default
``~/.cache/posenc/kernels``), keyed by a hash of the source, the compiler flags, the
compiler version and the CPU's feature flags (``-march=native`` code must never run on
a CPU that lacks its instructions). Builds write to a temporary name, ``fsync`` it and
rename atomically, so parallel test workers never load a half-written file; next to
the library a stamp (``.so.sha256``: size and SHA-256) is written the same way, and a
cached library is loaded only if it matches its stamp. A truncated or damaged file
(a crash before the data reached the disk, a full disk, a copy gone wrong) is rebuilt
instead of being mapped, which would kill the process with SIGBUS.

Every failure (no compiler, compile error, load error, ``POSENC_DISABLE_KERNELS=1``)
makes :func:`load` return None after ONE line on ``logging.getLogger("posenc")``; the
callers then take the plain path.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("posenc")

FLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-shared", "-fPIC", "-std=gnu11"]
ABI_VERSION = 2
_HERE = Path(__file__).resolve().parent
_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}
_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Log ``message`` at WARNING level the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


def disabled() -> bool:
    """True when ``POSENC_DISABLE_KERNELS`` is set to a true value (1/true/yes)."""
    return os.environ.get("POSENC_DISABLE_KERNELS", "").strip().lower() in ("1", "true", "yes")


def cache_dir() -> Path:
    root = os.environ.get("POSENC_CACHE_DIR") or os.path.join(Path.home(), ".cache", "posenc")
    return Path(root) / "kernels"


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def _library_path(name: str, cc: str) -> Path:
    source = (_HERE / f"{name}.c").read_bytes()
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    key = hashlib.sha256(
        b"\0".join([source, " ".join(FLAGS).encode(), version.encode(), _cpu_flags().encode()])
    ).hexdigest()[:16]
    return cache_dir() / f"{name}-{key}.so"


def _fsync_file(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp(path: Path) -> str:
    """``"<size> <sha256>"`` of the file's bytes."""
    data = path.read_bytes()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verified(path: Path) -> bool:
    """True if ``path`` exists and matches the stamp written when it was built."""
    try:
        return _stamp_path(path).read_text().strip() == _stamp(path)
    except OSError:
        return False


def _atomic_write(target: Path, write) -> None:
    """``write(tmp_path)``, fsync, rename over ``target`` (readers see old or new, whole)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        _fsync_file(tmp)  # the bytes reach the disk before the name does
        os.replace(tmp, target)  # atomic: readers see the old file or the complete new one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _compile(name: str, cc: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)

    def build(tmp: str) -> None:
        cmd = [cc, *FLAGS, "-o", tmp, str(_HERE / f"{name}.c")]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {result.stderr.strip()[:500]}")

    _atomic_write(target, build)
    stamp = _stamp(target)
    _atomic_write(_stamp_path(target), lambda tmp: Path(tmp).write_text(stamp + "\n"))
    try:  # make both renames durable
        dir_fd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load(name: str) -> ctypes.CDLL | None:
    """The compiled library ``kernels/<name>.c``, built on first use; None if unavailable."""
    with _lock:
        if name in _loaded:
            return _loaded[name]
        lib = None
        if disabled():
            warn_once("disabled", "posenc: POSENC_DISABLE_KERNELS is set; using the plain PyTorch paths")
        else:
            try:
                cc = _compiler()
                if cc is None:
                    raise RuntimeError("no C compiler found (set CC or install gcc)")
                path = _library_path(name, cc)
                for _ in range(2):  # a second try if another process replaced it meanwhile
                    if verified(path):
                        break
                    _compile(name, cc, path)  # missing, truncated or damaged: never dlopen it (SIGBUS)
                if not verified(path):
                    raise RuntimeError(f"{path} does not match its stamp after building it")
                lib = ctypes.CDLL(str(path))
                if lib.posenc_abi_version() != ABI_VERSION:
                    raise RuntimeError(f"{path} has ABI {lib.posenc_abi_version()}, expected {ABI_VERSION}")
            except Exception as exc:  # any failure -> the plain path, said once
                warn_once(
                    f"build:{name}", f"posenc: fused kernel {name!r} unavailable ({exc}); using plain path"
                )
                lib = None
        _loaded[name] = lib
        return lib
