"""Build and load the package's small C kernels (gcc + OpenMP, loaded with ctypes).

Why not ``torch.utils.cpp_extension``: the kernels only need raw pointers and strides,
so they are plain C with no torch headers. That compiles in a second or two instead of
a minute, needs no ninja, and a failure costs nothing but the fast path.

Which instruction set: ``-march=native`` by default, so each machine gets the vector code it
can run (``_rope.c`` picks AVX-512, AVX2 or plain loops from what the flags enable, and says
which through ``posenc_isa()``). ``POSENC_KERNEL_ISA`` forces another build, e.g. the AVX2
code on an AVX-512 machine, to test and time it there (see :data:`ISAS`): ``native``
(default), ``avx512`` (x86-64-v4: AVX-512 F/BW/CD/DQ/VL, without AVX-512 BF16), ``avx2``
(x86-64-v3: AVX2, FMA, F16C; AVX-512 off) or ``baseline`` (the compiler's default target,
SSE2 on x86-64). A forced build the CPU cannot run is refused with one log line (the plain
path runs), never loaded.

The shared library is cached under ``$POSENC_CACHE_DIR`` (default
``~/.cache/posenc/kernels``), keyed by a hash of the source, the compiler flags (the ISA's
included), the compiler version and the CPU's feature flags (``-march=native`` code must never
run on a CPU that lacks its instructions). Builds write to a temporary name, ``fsync`` it and
rename atomically, so parallel test workers never load a half-written file; next to
the library a stamp (``.so.sha256``: size and SHA-256) is written the same way, and a
cached library is loaded only if it matches its stamp. A truncated or damaged file
(a crash before the data reached the disk, a full disk, a copy gone wrong) is rebuilt
instead of being mapped, which would kill the process with SIGBUS.

Every failure (no compiler, compile error, load error, ``POSENC_DISABLE_KERNELS=1``, an
unknown or unrunnable ``POSENC_KERNEL_ISA``)
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

from posenc.core.errors import PosencError

log = logging.getLogger("posenc")

FLAGS = ["-O3", "-fopenmp", "-ffp-contract=off", "-shared", "-fPIC", "-std=gnu11"]
ISA_ENV = "POSENC_KERNEL_ISA"
#: The builds ``POSENC_KERNEL_ISA`` can ask for: their target flags, and the CPU features (as
#: /proc/cpuinfo names them) a build needs to run; ``native`` is whatever this CPU has.
ISAS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "native": (["-march=native"], ()),
    "avx512": (
        ["-march=x86-64-v4", "-mtune=native"],
        ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx2", "fma", "f16c", "bmi2", "movbe"),
    ),
    "avx2": (
        ["-march=x86-64-v3", "-mno-avx512f", "-mtune=native"],
        ("avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm"),
    ),
    "baseline": ([], ()),
}
ABI_VERSION = 2
_HERE = Path(__file__).resolve().parent
_lock = threading.Lock()
_loaded: dict[tuple[str, str], ctypes.CDLL | None] = {}
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


def cpu_features() -> set[str]:
    """The CPU's feature flags as /proc/cpuinfo names them (``avx2``, ``avx512f``, ...); a
    one-word platform name where there is no /proc/cpuinfo."""
    return set(_cpu_flags().split())


def requested_isa() -> str:
    """The build ``POSENC_KERNEL_ISA`` asks for (``native`` when unset); PosencError for a value
    outside :data:`ISAS`."""
    value = os.environ.get(ISA_ENV, "").strip().lower() or "native"
    if value not in ISAS:
        raise PosencError(f"{ISA_ENV} must be one of {', '.join(ISAS)}, got {value!r}")
    return value


def isa_flags(isa: str) -> list[str]:
    """The compiler flags of the build ``isa`` (a key of :data:`ISAS`)."""
    return [FLAGS[0], *ISAS[isa][0], *FLAGS[1:]]


def _check_runnable(isa: str) -> None:
    """Refuse a forced build this CPU cannot run (its code would die with SIGILL)."""
    needed = ISAS[isa][1]
    if not needed:
        return
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise RuntimeError(f"{ISA_ENV}={isa} needs an x86-64 CPU; this is {platform.machine()}")
    have = cpu_features()
    missing = [flag for flag in needed if flag not in have]
    if missing:
        raise RuntimeError(f"{ISA_ENV}={isa}: this CPU lacks {', '.join(missing)}")


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def _library_path(name: str, cc: str, isa: str = "native") -> Path:
    source = (_HERE / f"{name}.c").read_bytes()
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    key = hashlib.sha256(
        b"\0".join([source, " ".join(isa_flags(isa)).encode(), version.encode(), _cpu_flags().encode()])
    ).hexdigest()[:16]
    return cache_dir() / f"{name}-{isa}-{key}.so"


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


def _compile(name: str, cc: str, target: Path, isa: str = "native") -> None:
    target.parent.mkdir(parents=True, exist_ok=True)

    def build(tmp: str) -> None:
        cmd = [cc, *isa_flags(isa), "-o", tmp, str(_HERE / f"{name}.c")]
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


def load(name: str, isa: str | None = None) -> ctypes.CDLL | None:
    """The compiled library ``kernels/<name>.c``, built on first use; None if unavailable.

    ``isa``: a key of :data:`ISAS` (default: what ``POSENC_KERNEL_ISA`` asks for, else native).
    """
    with _lock:
        try:
            isa = requested_isa() if isa is None else isa
        except PosencError as exc:
            warn_once(f"isa:{exc}", f"posenc: {exc}; using the plain PyTorch paths")
            return None
        if (name, isa) in _loaded:
            return _loaded[(name, isa)]
        lib = None
        if disabled():
            warn_once("disabled", "posenc: POSENC_DISABLE_KERNELS is set; using the plain PyTorch paths")
        else:
            try:
                lib = _build_and_open(name, isa)
            except Exception as exc:  # any failure -> the plain path, said once
                warn_once(
                    f"build:{name}:{isa}",
                    f"posenc: fused kernel {name!r} unavailable ({exc}); using plain path",
                )
                lib = None
        _loaded[(name, isa)] = lib
        return lib


def _build_and_open(name: str, isa: str) -> ctypes.CDLL:
    if isa not in ISAS:
        raise PosencError(f"isa must be one of {', '.join(ISAS)}, got {isa!r}")
    _check_runnable(isa)
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC or install gcc)")
    path = _library_path(name, cc, isa)
    for _ in range(2):  # a second try if another process replaced it meanwhile
        if verified(path):
            break
        _compile(name, cc, path, isa)  # missing, truncated or damaged: never dlopen it (SIGBUS)
    if not verified(path):
        raise RuntimeError(f"{path} does not match its stamp after building it")
    lib = ctypes.CDLL(str(path))
    if lib.posenc_abi_version() != ABI_VERSION:
        raise RuntimeError(f"{path} has ABI {lib.posenc_abi_version()}, expected {ABI_VERSION}")
    return lib
